# NixOS VM test of the module (a test module for `pkgs.testers.runNixOSTest`):
#
#   nix build .#checks.x86_64-linux.vm        (flakes)
#   nix-build -A vmTest                       (default.nix, <nixpkgs> from NIX_PATH)
#
# One machine with nixpkgs' Windmill (server, workers, PostgreSQL), an OpenBao dev server, an
# OpenBao agent standing in for the hosting provider's `openbao-agent-default` (it renders the
# admin password and the module's deploy-secret templates), and the module. It asserts that the
# bootstrap converged (token in OpenBao and usable, scripts at their content, settings, nginx
# include), that a rerun changes nothing, that deploy and destroy jobs submitted through the
# Windmill API run a test deployment program through jobenv (secret redacted in the job log),
# that a cancelled job leaves no process behind, that a new admin password reruns the bootstrap,
# and the unit, nginx and Nix settings the module is responsible for.
{ lib, ... }:
let
  rootToken = "vm-test-openbao-root-token";
  adminPassword = "vm-test-admin-password-1";
  newAdminPassword = "vm-test-admin-password-2";
  deployToken = "vm-test-deploy-secret-9d2c41";
  dbPassword = "vm-test-database-password";
in
{
  name = "fediversity-windmill";

  nodes.machine =
    { config, pkgs, ... }:
    let
      bao = "${pkgs.openbao}/bin/bao";

      # The deployment repository: dev shells without nixpkgs (like the tests' fixture), whose
      # PATH holds the programs `<attribute>-<verb>`.
      programs = pkgs.runCommand "vm-test-deployment-programs" { } ''
        mkdir -p $out/bin
        cat > $out/bin/demo-apply <<'EOF'
        #!${pkgs.runtimeShell}
        echo "demo-apply: namespace=$DEPLOYMENT_NAMESPACE message=$MESSAGE"
        echo "token: $TF_VAR_demo_token"
        EOF
        cat > $out/bin/demo-destroy <<'EOF'
        #!${pkgs.runtimeShell}
        echo "demo-destroy: namespace=$DEPLOYMENT_NAMESPACE"
        EOF
        cat > $out/bin/slow-apply <<'EOF'
        #!${pkgs.runtimeShell}
        echo "slow-apply: started"
        sleep 6001 &
        wait
        EOF
        chmod +x $out/bin/*
      '';
      deploymentRoot = pkgs.writeTextDir "default.nix" ''
        { ... }:
        let
          system = builtins.currentSystem;
          shell = name: builtins.derivation {
            inherit name system;
            builder = "/bin/sh";
            args = [ "-c" "echo > $out" ];
            PATH = "${programs}/bin:${pkgs.coreutils}/bin";
          };
        in
        {
          devShells.''${system} = {
            demo = shell "demo-shell";
            slow = shell "slow-shell";
          };
        }
      '';

      agentConfig = pkgs.writeText "openbao-agent.json" (
        builtins.toJSON {
          vault.address = "http://127.0.0.1:8200";
          auto_auth.method = [
            {
              type = "token_file";
              config.token_file_path = "/run/vm-test/bao-token";
            }
          ];
          template_config = {
            static_secret_render_interval = "2s";
            exit_on_retry_failure = true;
          };
          template = config.services.fediversity-windmill.openbaoAgentTemplates ++ [
            {
              contents = ''{{ with secret "secret/data/windmill/adminPassword" }}{{ .Data.data.value }}{{ end }}'';
              destination = "/run/fediversity-windmill/admin-password";
              perms = "0400";
            }
          ];
        }
      );
    in
    {
      imports = [ ./. ];

      virtualisation = {
        memorySize = 4096;
        cores = 2;
        diskSize = 4096;
      };
      environment.systemPackages = [
        pkgs.curl
        pkgs.jq
        pkgs.openbao
      ];

      services.fediversity-windmill = {
        enable = true;
        domain = "windmill.test.example";
        uiForwardAuth = ''
          allow 127.0.0.1;
          deny all;
        '';
        deployEnv = {
          DEPLOYMENT_ROOT = "${deploymentRoot}";
          DEPLOYMENT_NIXPKGS = "${pkgs.path}";
          NIX_BUILD_SHELL = "${pkgs.bashInteractive}/bin/bash";
        };
        deployKeys.MESSAGE.description = "A message the test program prints";
        deploymentAttributes = [
          "demo"
          "slow"
        ];
        deploySecrets.TF_VAR_demo_token = ''{{ with secret "secret/data/deploy/demo" }}{{ .Data.data.token }}{{ end }}'';
        bootstrap = {
          windmill.adminPasswordFile = "/run/fediversity-windmill/admin-password";
          windmill.databaseUrlFile = "/run/vm-test/database-url";
          openbao = {
            addr = "http://127.0.0.1:8200";
            tokenFile = "/run/vm-test/bao-token";
            path = "secret/windmill/apiToken";
          };
        };
      };

      # An OpenBao dev server: in memory, unsealed, KV v2 at secret/.
      systemd.services.openbao-dev = {
        wantedBy = [ "multi-user.target" ];
        after = [ "network.target" ];
        serviceConfig.ExecStart = "${bao} server -dev -dev-no-store-token -dev-root-token-id=${rootToken} -dev-listen-address=127.0.0.1:8200";
      };
      systemd.services.openbao-seed = {
        wantedBy = [ "multi-user.target" ];
        requires = [ "openbao-dev.service" ];
        after = [ "openbao-dev.service" ];
        environment = {
          BAO_ADDR = "http://127.0.0.1:8200";
          BAO_TOKEN = rootToken;
        };
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
        };
        script = ''
          until ${bao} status >/dev/null 2>&1; do sleep 0.5; done
          ${bao} kv put secret/windmill/adminPassword value=${adminPassword}
          ${bao} kv put secret/deploy/demo token=${deployToken}
          install -d -m 0700 /run/vm-test
          (umask 077; printf '%s' ${rootToken} > /run/vm-test/bao-token)
        '';
      };
      # Stands in for the hosting provider's agent (not in nixpkgs): renders the module's
      # templates and the admin password.
      systemd.services.openbao-agent-default = {
        wantedBy = [ "multi-user.target" ];
        requires = [ "openbao-seed.service" ];
        after = [ "openbao-seed.service" ];
        serviceConfig = {
          ExecStart = "${bao} agent -config=${agentConfig}";
          Restart = "on-failure";
        };
      };

      # nixpkgs' Windmill database uses peer authentication; the bootstrap (root) connects over
      # TCP with a password, as a node without peer access for root would.
      systemd.services.vm-test-database-url = {
        wantedBy = [ "multi-user.target" ];
        requires = [ "windmill-initdb.service" ];
        after = [
          "postgresql.service"
          "windmill-initdb.service"
        ];
        path = [
          config.services.postgresql.package
          pkgs.util-linux
        ];
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
        };
        script = ''
          runuser -u postgres -- psql -v ON_ERROR_STOP=1 -d windmill -c "ALTER ROLE windmill PASSWORD '${dbPassword}'"
          install -d -m 0700 /run/vm-test
          (umask 077; printf '%s' 'postgres://windmill:${dbPassword}@127.0.0.1:5432/windmill' > /run/vm-test/database-url)
        '';
      };
      systemd.services.fediversity-windmill-bootstrap = {
        wants = [ "vm-test-database-url.service" ];
        after = [ "vm-test-database-url.service" ];
      };
    };

  testScript =
    { nodes, ... }:
    let
      cfg = nodes.machine.services.fediversity-windmill;
    in
    ''
      import json
      import shlex

      SCRIPTS = "${cfg.scriptsPackage}"
      BOOTSTRAP = "${cfg.package}/bin/fediversity-windmill-bootstrap"
      JOBENV = "${cfg.package}/bin/fediversity-jobenv"
      NIXPKGS = "${cfg.deployEnv.DEPLOYMENT_NIXPKGS}"
      ROOT_TOKEN = "${rootToken}"
      DEPLOY_TOKEN = "${deployToken}"
      NAMES = ["deploy", "destroy", "_jobenv"]


      def bao(args):
          return machine.succeed(f"BAO_ADDR=http://127.0.0.1:8200 BAO_TOKEN={ROOT_TOKEN} bao {args}")


      def api(token, method, path, body=None):
          cmd = f"curl -sS --fail-with-body -X {method} -H 'Authorization: Bearer {token}' http://127.0.0.1:8001/api{path}"
          if body is not None:
              cmd += " -H 'Content-Type: application/json' --data-binary " + shlex.quote(json.dumps(body))
          return machine.succeed(cmd)


      def status(cmd):
          return machine.succeed(cmd + " -s -o /dev/null -w '%{http_code}'").strip()


      def script_hashes(token):
          return {n: json.loads(api(token, "GET", f"/w/fediversity/scripts/get/p/f/fediversity/{n}"))["hash"] for n in NAMES}


      def run_job(token, script, payload):
          job = api(token, "POST", f"/w/fediversity/jobs/run/p/f/fediversity/{script}", payload).strip()
          machine.wait_until_succeeds(
              f"curl -sf -H 'Authorization: Bearer {token}' http://127.0.0.1:8001/api/w/fediversity/jobs_u/get/{job}"
              " | jq -e '.type == \"CompletedJob\"'",
              timeout=600,
          )
          info = json.loads(api(token, "GET", f"/w/fediversity/jobs_u/get/{job}"))
          logs = api(token, "GET", f"/w/fediversity/jobs_u/get_logs/{job}")
          return job, info, logs


      def prop(unit, name):
          return machine.succeed(f"systemctl show -P {name} {unit}").strip()


      start_all()
      machine.wait_for_unit("openbao-agent-default.service")
      machine.wait_for_unit("windmill-server.service")
      machine.wait_for_unit("windmill-worker.service")
      machine.wait_for_open_port(8001)

      with subtest("the bootstrap converges"):
          machine.wait_for_unit("fediversity-windmill-bootstrap.service", timeout=900)
          token = bao("kv get -field=value secret/windmill/apiToken").strip()
          me = json.loads(api(token, "GET", "/users/whoami"))
          assert me["super_admin"], me
          assert json.loads(api(token, "GET", "/settings/global/instance_python_version")) == "3.12"
          for name in NAMES:
              remote = json.loads(api(token, "GET", f"/w/fediversity/scripts/get/p/f/fediversity/{name}"))
              local = machine.succeed(f"cat {SCRIPTS}/f/fediversity/{name}.py")
              assert remote["content"] == local, name
              assert remote["language"] == "python3" and not remote["archived"], remote
          assert machine.succeed("stat -c '%U:%G %a' /run/windmill-ui-auth/token.conf").strip() == "root:nginx 440"
          machine.succeed(f"grep -qF 'Bearer {token}' /run/windmill-ui-auth/token.conf")
          machine.succeed(f"{BOOTSTRAP} --check --config /etc/fediversity-windmill/bootstrap.json")

      with subtest("a rerun changes nothing and rotates the token"):
          before = script_hashes(token)
          old_token = token
          machine.succeed("systemctl restart fediversity-windmill-bootstrap.service")
          machine.wait_for_unit("fediversity-windmill-bootstrap.service")
          token = bao("kv get -field=value secret/windmill/apiToken").strip()
          assert token != old_token
          assert script_hashes(token) == before
          workspaces = [w["id"] for w in json.loads(api(token, "GET", "/workspaces/list_as_superadmin"))]
          assert workspaces.count("fediversity") == 1, workspaces
          labels = [t["label"] for t in json.loads(api(token, "GET", "/users/tokens/list"))]
          assert labels.count("fediversity") == 1, labels
          # Both runs logged out their login sessions.
          assert labels.count("session") == 0, labels
          # Revoked (Windmill may answer from its auth cache for a while).
          machine.wait_until_succeeds(
              f"test \"$(curl -s -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {old_token}'"
              " http://127.0.0.1:8001/api/users/whoami)\" = 401",
              timeout=300,
          )
          machine.succeed(f"{BOOTSTRAP} --check --config /etc/fediversity-windmill/bootstrap.json")

      with subtest("nginx: the API name serves /api/ only, the UI name adds the token"):
          assert status("curl -H 'Host: windmill.test.example' http://127.0.0.1/") == "404"
          machine.succeed("curl -sf -H 'Host: windmill.test.example' http://127.0.0.1/api/version | grep -q '^CE'")
          assert status("curl -H 'Host: windmill.test.example' http://127.0.0.1/api/users/whoami") == "401"
          # The include holds the rotated token; nginx was reloaded when the bootstrap wrote it.
          machine.wait_until_succeeds(
              "curl -sf -H 'Host: jobs.test.example' http://127.0.0.1/api/users/whoami | jq -e .super_admin",
              timeout=60,
          )

      with subtest("a deploy job runs the deployment program through jobenv"):
          job, info, logs = run_job(token, "deploy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test", "MESSAGE": "hello from the VM"})
          assert info["success"], (info, logs)
          result = info["result"]
          assert result["status"] == "succeeded", result
          assert (result["verb"], result["attribute"], result["namespace"]) == ("apply", "demo", "vm-test"), result
          assert "demo-apply: namespace=vm-test message=hello from the VM" in logs, logs
          assert "token: [REDACTED]" in logs, logs
          assert DEPLOY_TOKEN not in logs and DEPLOY_TOKEN not in json.dumps(info), logs
          # jobenv journaled the run under the Windmill job id, in the worker's state directory.
          entry = json.loads(machine.succeed(f"{JOBENV} status --state-dir /var/lib/fediversity-jobenv {job}"))
          assert entry["status"] == "succeeded" and entry["verb"] == "apply", entry
          assert machine.succeed("stat -c '%U:%G %a' /var/lib/fediversity-jobenv").strip() == "windmill:windmill 750"

      with subtest("a destroy job runs the destroy program"):
          job, info, logs = run_job(token, "destroy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test"})
          assert info["success"], (info, logs)
          assert info["result"]["verb"] == "destroy", info["result"]
          assert "demo-destroy: namespace=vm-test" in logs, logs

      with subtest("a job payload jobenv refuses fails the job"):
          job, info, logs = run_job(token, "deploy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test", "NIX_PATH": "/tmp"})
          assert not info["success"], info
          assert "payload rejected: reserved keys: NIX_PATH" in logs, logs

      with subtest("a cancelled job leaves no process behind"):
          job = api(token, "POST", "/w/fediversity/jobs/run/p/f/fediversity/deploy", {"ATTRIBUTE": "slow", "NAMESPACE": "vm-cancel"}).strip()
          machine.wait_until_succeeds("pgrep -f 'sleep [6]001'", timeout=600)
          api(token, "POST", f"/w/fediversity/jobs_u/queue/cancel/{job}", {"reason": "vm test"})
          machine.wait_until_succeeds(
              f"curl -sf -H 'Authorization: Bearer {token}' http://127.0.0.1:8001/api/w/fediversity/jobs_u/get/{job}"
              " | jq -e '.type == \"CompletedJob\" and .canceled'",
              timeout=120,
          )
          machine.fail("pgrep -f 'sleep [6]001'")

      with subtest("a new admin password reruns the bootstrap"):
          bao("kv put secret/windmill/adminPassword value=${newAdminPassword}")
          machine.wait_until_succeeds(
              "curl -sf -X POST -H 'Content-Type: application/json'"
              " -d '{\"email\": \"admin@windmill.dev\", \"password\": \"${newAdminPassword}\"}'"
              " http://127.0.0.1:8001/api/auth/login",
              timeout=300,
          )

      with subtest("unit, file and Nix settings"):
          assert prop("windmill-worker", "KillMode") == "mixed"
          worker_env = prop("windmill-worker", "Environment").split()
          assert "MAX_WAIT_FOR_SIGINT=10" in worker_env, worker_env
          assert "WHITELIST_ENVS=JOBENV_NIX_SHELL,JOBENV_STATE_DIR" in worker_env, worker_env
          for unit in ["windmill-server", "windmill-worker", "windmill-worker-native"]:
              assert prop(unit, "RestartUSec") == "5s", unit
              assert "openbao-agent-default.service" in prop(unit, "After").split(), unit
          assert prop("fediversity-windmill-bootstrap", "Restart") == "on-failure"
          assert prop("fediversity-windmill-bootstrap", "RestartUSec") == "30s"
          assert prop("fediversity-windmill-bootstrap", "RemainAfterExit") == "yes"
          assert prop("fediversity-windmill-bootstrap", "StartLimitIntervalUSec") in ("0", "0s")
          worker_path = machine.succeed("systemctl show -P Environment windmill-worker | tr ' ' '\\n' | grep ^PATH=")
          assert "fediversity-windmill" in worker_path and "-nix-" in worker_path and "-git-" in worker_path, worker_path
          assert machine.succeed("stat -c '%U:%G %a' /run/fediversity-windmill/deploy-secrets/TF_VAR_demo_token").strip() == "root:windmill 440"
          assert machine.succeed("stat -c '%U:%G %a' /run/fediversity-windmill/deploy-secrets").strip() == "root:windmill 750"
          machine.succeed(f"nix registry list | grep -F 'system flake:nixpkgs path:{NIXPKGS}'")
          machine.succeed("grep -E '^trusted-users = .*\\bwindmill\\b' /etc/nix/nix.conf")
          machine.succeed("grep -E '^experimental-features = .*\\bflakes\\b' /etc/nix/nix.conf")
          machine.succeed("grep -E '^flake-registry = *$' /etc/nix/nix.conf")
    '';
}
