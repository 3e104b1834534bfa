# The example node, for a shell at the checkout's root: `. examples/node.sh` renders the shipped
# node files into a directory of their own and points jobenv at them (JOBENV_*), so that
# `fediversity-jobenv env|run|status|...` work here as on a node. jobenv must be on PATH; if it
# is not, the release build of this checkout (examples/run, `cargo build --release`) is put
# there. Every console example of the manual (docs/) runs in such a shell.
# EXAMPLE_NODE: where to render the node (default: a new temporary directory).
examples=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
EXAMPLE_NODE=${EXAMPLE_NODE:-$(mktemp -d)}
mkdir -p "$EXAMPLE_NODE/state"
# deploy-env.json names absolute paths: the shipped one, for where this checkout lives.
sed "s|@EXAMPLE_DIR@|$examples|g" "$examples/deploy-env.json" > "$EXAMPLE_NODE/deploy-env.json"
export JOBENV_DEPLOY_ENV="$EXAMPLE_NODE/deploy-env.json"
export JOBENV_KEYS="$examples/deploy-keys.json"
export JOBENV_ATTRIBUTES="$examples/deployment-attributes.json"
export JOBENV_SECRETS_DIRS="$examples/secrets"
export JOBENV_STATE_DIR="$EXAMPLE_NODE/state"
command -v fediversity-jobenv >/dev/null || PATH="$examples/../target/release:$PATH"
# The Windmill scripts, for examples/windmill-job.
export EXAMPLE_SCRIPTS="$examples/../scripts"
