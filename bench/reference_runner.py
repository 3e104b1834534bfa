#!/usr/bin/env python3
"""The baseline of the start-up benchmark: merge, validate and run the deployment program the
way the Python runner that fediversity-jobenv replaces did (standard library only)."""
import json, os, re, subprocess, sys

def load(path):
    with open(path) as f:
        return json.load(f)

def text(value):
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

def main():
    node = load(os.environ["JOBENV_DEPLOY_ENV"])
    keys = load(os.environ["JOBENV_KEYS"])
    attributes = load(os.environ["JOBENV_ATTRIBUTES"])
    secrets_dir = os.environ["JOBENV_SECRETS_DIRS"]
    for name in sorted(os.listdir(secrets_dir)):
        with open(os.path.join(secrets_dir, name)) as f:
            node[name] = f.read().removesuffix("\n")
    payload = json.load(sys.stdin)
    if not isinstance(payload, dict):
        sys.exit("payload must be an object")
    control = {"SYSTEM", "ATTRIBUTE", "EXECUTABLE", "NAMESPACE"}
    bad = [k for k in payload if k not in keys and k not in control]
    if bad:
        sys.exit(f"undeclared keys: {', '.join(sorted(bad))}")
    attribute, namespace = payload["ATTRIBUTE"], payload["NAMESPACE"]
    if attribute not in attributes or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", namespace):
        sys.exit("bad attribute or namespace")
    env = {k: v for k, v in os.environ.items() if k in keys or k in ("PATH", "HOME")}
    env.update({k: text(v) for k, v in payload.items() if k in keys and v is not None})
    env.update({k: text(v) for k, v in node.items() if k not in ("DEPLOYMENT_ROOT", "NIXPKGS")})
    env.update({k: d["default"] for k, d in keys.items() if k not in env and "default" in d})
    env["DEPLOYMENT_NAMESPACE"] = namespace
    verb = sys.argv[sys.argv.index("--verb") + 1]
    argv = [os.environ["JOBENV_NIX_SHELL"], node["DEPLOYMENT_ROOT"], "-I", f"nixpkgs={node['NIXPKGS']}",
            "-A", f"devShells.x86_64-linux.{attribute}", "--run", f"exec {attribute}-{verb}"]
    sys.exit(subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode)

main()
