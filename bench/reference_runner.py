#!/usr/bin/env python3
"""The yardstick of the start-up benchmark: the least a Python runner does for one deploy job,
with the standard library only. It reads what jobenv reads (the payload on stdin; the node's
deploy-env.json, keys.json, attributes.json and every file of its secrets directory), merges
(node over payload over environment, declared keys only) and runs the program through the
same nix-shell (stand-in) with the same argv. It does not redact, lock, journal or supervise:
whatever jobenv does beyond this is part of jobenv's overhead, never the yardstick's."""
import json, os, subprocess, sys

# Node keys that name where the deployment comes from instead of reaching the program.
CONSUMED = {"DEPLOYMENT_ROOT", "NIXPKGS"}


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def text(value):
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def main():
    verb = sys.argv[sys.argv.index("--verb") + 1]
    payload = json.load(sys.stdin)
    node = read_json(os.environ["JOBENV_DEPLOY_ENV"])
    declared = read_json(os.environ["JOBENV_KEYS"])
    attributes = read_json(os.environ["JOBENV_ATTRIBUTES"])
    secrets_dir = os.environ["JOBENV_SECRETS_DIRS"]
    for name in os.listdir(secrets_dir):
        with open(os.path.join(secrets_dir, name), encoding="utf-8") as f:
            node[name] = f.read().removesuffix("\n")
    attribute = payload["ATTRIBUTE"]
    if attribute not in attributes:
        sys.exit(f"unknown attribute {attribute}")

    env = {k: v for k, v in os.environ.items() if k in declared}
    env["PATH"] = os.environ["PATH"]
    env.update((k, text(v)) for k, v in payload.items() if k in declared)
    env.update((k, text(v)) for k, v in node.items() if k not in CONSUMED)
    env["DEPLOYMENT_NAMESPACE"] = payload["NAMESPACE"]
    env["NIX_PATH"] = f"nixpkgs={node['NIXPKGS']}"

    argv = [os.environ["JOBENV_NIX_SHELL"], node["DEPLOYMENT_ROOT"], "-I", f"nixpkgs={node['NIXPKGS']}",
            "-A", f"devShells.x86_64-linux.{attribute}", "--run", f"exec {attribute}-{verb}"]
    sys.exit(subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode)


main()
