# NixOS VM test of the module (a test module for `pkgs.testers.runNixOSTest`):
#
#   nix build .#checks.x86_64-linux.vm        (flakes)
#   nix-build -A vmTest                       (default.nix, <nixpkgs> from NIX_PATH)
#
# Needs a nixpkgs whose services.windmill has the `windmill-initdb` unit (nixos-unstable since
# September 2025), restic 0.17 or newer, KVM, and about 4 GiB of memory.
#
# One machine with nixpkgs' Windmill (server, workers, PostgreSQL) and the module, which runs
# its own OpenBao agent against an OpenBao dev server (the agent renders the module's
# templates: a deploy secret, tf-token.env from the seed's default path, the two Incus store
# keys and the backup's password). The node follows a deployment repository (its keys,
# node-only keys and attributes come from there) and generates its superadmin password; its
# bootstrap writes that password's hash into nixpkgs' local database over the socket, with no
# DSN written by anyone (the module's peer map lets root in as nixpkgs' role). nginx
# serves both names with a self-signed certificate; a stub of the seed's forward-auth portal
# stands in front of the admin UI, and a real Authelia instance gets the UI's rule from the
# module. It asserts that the bootstrap converged and a rerun changes nothing; that the stored
# front-end token runs deploys and nothing else, while the UI's token is the superadmin's; that
# the UI is refused without a session and served through the forward auth (and answers 403 once
# no identity layer is configured), and the API name is the default server; that Authelia has
# the rule and applies it; that deploy and destroy jobs submitted through the Windmill API run a
# test program through jobenv, with the deploy secret and tf-token.env reaching it (redacted in
# the log), the repository's keys declared and its node-only keys and pins never taken from a
# payload, the second job of the tree running its cached shell without evaluating it; that a job
# payload jobenv refuses fails, a cancelled job leaves no process, and a
# missing secret makes jobenv refuse the job as "node not ready"; that the worker does not start
# before the agent rendered its files; the OpenTelemetry and SMTP variables of the units; that
# a worker killed mid-deploy runs `recover` when it comes back; that a worker stopped mid-deploy
# stops taking jobs, drains the deploy and leaves nothing running; that a changed script is
# uploaded after the bootstrap restarts; that the generated password is root's, stays, and a new
# one reruns the bootstrap; that the backup stores the database and restores from it; and the
# unit, file and Nix settings the module is responsible for.
{ lib, ... }:
let
  rootToken = "vm-test-openbao-root-token";
  newAdminPassword = "vm-test-admin-password-2";
  deployToken = "vm-test-deploy-secret-9d2c41";
  tfToken = "vm-test-incus-token-77ab03";
  smtpPassword = "vm-test-smtp-password-5e1f";
  resticPassword = "vm-test-restic-password-c41d";
in
{
  name = "fediversity-windmill";

  nodes.machine =
    {
      config,
      pkgs,
      lib,
      ...
    }:
    let
      bao = "${pkgs.openbao}/bin/bao";

      # The deployment repository: dev shells without nixpkgs (like the tests' fixture), whose
      # PATH holds the programs `<attribute>-<verb>`.
      programs = pkgs.runCommand "vm-test-deployment-programs" { } ''
        mkdir -p $out/bin
        cat > $out/bin/demo-apply <<'EOF'
        #!${pkgs.runtimeShell}
        echo "demo-apply: namespace=$DEPLOYMENT_NAMESPACE message=$MESSAGE"
        echo "published-hosts: $PUBLISHED_HOSTS"
        echo "node-site: $NODE_SITE"
        echo "self-module-source: ''${SELF_MODULE_SOURCE-unset}"
        echo "token: $TF_VAR_demo_token"
        echo "tf token: $TF_VAR_token"
        echo "tf-token-sha256: $(printf %s "$TF_VAR_token" | sha256sum | cut -d' ' -f1)"
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

      # The deployment repository as the node follows it: shaped like a flake input (its
      # outputs, and its tree as outPath). What the module reads is under `lib`.
      repository = {
        outPath = "${deploymentRoot}";
        lib = {
          deployEnvKeys = {
            MESSAGE = "A message the test program prints";
            PUBLISHED_HOSTS = {
              description = "Host names the deployment serves, a JSON array";
              default = [ "demo.test.example" ];
            };
          };
          nodeEnvKeys.NODE_SITE = "The site of the node";
          deploymentAttributeNames = [
            "demo"
            "slow"
          ];
        };
      };

      # One self-signed certificate for both names.
      certificate = pkgs.runCommand "vm-test-certificate" { nativeBuildInputs = [ pkgs.openssl ]; } ''
        mkdir -p $out
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=windmill.test.example \
          -addext "subjectAltName=DNS:windmill.test.example,DNS:jobs.test.example" \
          -keyout $out/key.pem -out $out/cert.pem
      '';

      # A stub of the seed's portal (Authelia's auth-request endpoint): the session cookie
      # `vmtest_session=admin` is a member of fediversity-admins (200), `=other` is not (403),
      # no session is sent to sign in (401 with a Location). Every request it gets is logged,
      # with the Authorization header it saw.
      portal = pkgs.writers.writePython3 "vm-test-portal" { flakeIgnore = [ "E501" ]; } ''
        import http.server
        import urllib.parse


        class Portal(http.server.BaseHTTPRequestHandler):
            def answer(self):
                cookie = self.headers.get("Cookie", "")
                url = self.headers.get("X-Original-URL", "")
                with open("/run/vm-test/portal.log", "a") as log:
                    auth = self.headers.get("Authorization", "")
                    log.write(f"{self.command} {url} authorization={auth}\n")
                if "vmtest_session=admin" in cookie:
                    self.send_response(200)
                    self.send_header("Remote-User", "admin")
                    self.send_header("Remote-Groups", "fediversity-admins")
                elif "vmtest_session=other" in cookie:
                    self.send_response(403)
                else:
                    self.send_response(401)
                    rd = urllib.parse.quote(url, safe="")
                    self.send_header("Location", f"https://auth.test.example/?rd={rd}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_HEAD = do_POST = answer


        http.server.HTTPServer(("127.0.0.1", 9091), Portal).serve_forever()
      '';

      # The scripts tree with deploy.py changed (a comment more), for the bootstrap's rerun.
      changedScripts = pkgs.runCommand "vm-test-changed-scripts" { } ''
        cp -r --no-preserve=mode ${config.services.fediversity-windmill.scriptsPackage} $out
        printf '\n# changed for the VM test\n' >> $out/f/fediversity/deploy.py
      '';
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
        pkgs.yq-go
      ];
      networking.hosts."127.0.0.1" = [
        "windmill.test.example"
        "jobs.test.example"
        "auth.test.example"
      ];

      services.fediversity-windmill = {
        enable = true;
        domain = "windmill.test.example";
        ui.forwardAuth.enable = true;
        tls = {
          certificate = "${certificate}/cert.pem";
          certificateKey = "${certificate}/key.pem";
        };
        deploymentRepository = repository;
        # NIX_BUILD_SHELL is the module's default (bashInteractive's bash).
        deployEnv.NODE_SITE = "vm-site";
        ui.forwardAuth.autheliaInstance = "main";
        jobs.lockWait = 30;
        deploySecrets.TF_VAR_demo_token = ''{{ with secret "secret/data/deploy/demo" }}{{ .Data.data.token }}{{ end }}'';
        # tf-token.env from the seed's default source (fediversity/secret, incus-deploy/machine/tokenHosts).
        credentials = {
          incusStoreSshKey = ''{{ with secret "secret/data/incus/store" }}{{ .Data.data.ssh }}{{ end }}'';
          incusStoreSigningKey = ''{{ with secret "secret/data/incus/store" }}{{ .Data.data.signing }}{{ end }}'';
        };
        openbaoAgent = {
          enable = true;
          settings = {
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
          };
        };
        readinessTimeout = 10;
        drainTimeout = 5;
        otel.endpoint = "http://127.0.0.1:4318";
        smtp = {
          host = "127.0.0.1";
          port = 2525;
          username = "windmill";
          passwordFile = "/run/vm-test/smtp-password";
        };
        # No DSN: the bootstrap reaches nixpkgs' local database over its socket as the role
        # nixpkgs creates (the module's peer map).
        bootstrap = {
          openbao = {
            addr = "http://127.0.0.1:8200";
            tokenFile = "/run/vm-test/bao-token";
            path = "secret/windmill/apiToken";
          };
        };
      };

      # A local restic repository stands in for the seed's Garage bucket.
      services.fediversity-windmill.backup = {
        enable = true;
        repository = "/var/lib/vm-test-restic";
        passwordTemplate = ''{{ with secret "secret/data/backup/restic" }}{{ .Data.data.password }}{{ end }}'';
        timerConfig.OnCalendar = "2099-01-01";
      };
      # The unit's system is read-only; a local repository (unlike the seed's S3 bucket) needs
      # its directory writable.
      systemd.tmpfiles.rules = [ "d /var/lib/vm-test-restic 0700 root root - -" ];
      systemd.services.fediversity-windmill-backup.serviceConfig.ReadWritePaths = [ "/var/lib/vm-test-restic" ];

      # A real Authelia, only for its rules (nginx asks the stub portal above): the UI's rule
      # comes from the module; everything else is denied.
      services.authelia.instances.main = {
        enable = true;
        secrets = {
          jwtSecretFile = "/run/vm-test-authelia/jwt";
          storageEncryptionKeyFile = "/run/vm-test-authelia/storage";
          sessionSecretFile = "/run/vm-test-authelia/session";
        };
        settings = {
          server.address = "tcp://127.0.0.1:9092/";
          log.level = "info";
          authentication_backend.file.path = "/run/vm-test-authelia/users.yml";
          access_control.default_policy = "deny";
          session.cookies = [
            {
              domain = "test.example";
              authelia_url = "https://auth.test.example";
            }
          ];
          storage.local.path = "/var/lib/authelia-main/db.sqlite3";
          notifier.filesystem.filename = "/var/lib/authelia-main/notifications.txt";
        };
      };
      # Authelia's secrets and one user (Authelia wants at least one), made at boot, its own.
      systemd.services.vm-test-authelia-secrets = {
        wantedBy = [ "multi-user.target" ];
        before = [ "authelia-main.service" ];
        requiredBy = [ "authelia-main.service" ];
        path = [
          pkgs.coreutils
          pkgs.authelia
          pkgs.gnused
        ];
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
        };
        script = ''
          dir=/run/vm-test-authelia
          install -d -m 0750 -o authelia-main -g authelia-main $dir
          for name in jwt storage session; do
            (umask 077; head -c 48 /dev/urandom | base64 -w0 > $dir/$name)
          done
          digest=$(authelia crypto hash generate argon2 --password vm-test-authelia-user | sed -n 's/^Digest: //p')
          cat > $dir/users.yml <<USERS
          users:
            admin:
              displayname: VM test admin
              email: admin@test.example
              password: "$digest"
              groups: [ fediversity-admins ]
          USERS
          chown authelia-main:authelia-main $dir/*
          chmod 0400 $dir/*
        '';
      };

      specialisation = {
        # No identity layer: the UI must answer 403 and never serve the token.
        ui-closed.configuration.services.fediversity-windmill.ui.forwardAuth.enable = lib.mkForce false;
        # A changed scripts tree: the bootstrap restarts and uploads it.
        changed-script.configuration.services.fediversity-windmill.scriptsPackage = lib.mkForce changedScripts;
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
          ${bao} kv put secret/deploy/demo token=${deployToken}
          # The seed's layout: a KV v2 mount under the prefix, the Incus token per host.
          ${bao} secrets enable -path=fediversity/secret kv-v2
          ${bao} kv put fediversity/secret/incus-deploy/machine/tokenHosts value=${tfToken}
          ${bao} kv put secret/backup/restic password=${resticPassword}
          ${bao} kv put secret/incus/store ssh=vm-test-ssh-key signing=vm-test-signing-key
          install -d -m 0700 /run/vm-test
          (umask 077; printf '%s' ${rootToken} > /run/vm-test/bao-token)
          (umask 077; printf '%s\n' ${smtpPassword} > /run/vm-test/smtp-password)
        '';
      };
      # The module's agent needs the seeded OpenBao and its token.
      systemd.services.openbao-agent-default = {
        requires = [ "openbao-seed.service" ];
        after = [ "openbao-seed.service" ];
      };
      systemd.services.vm-test-portal = {
        wantedBy = [ "multi-user.target" ];
        after = [ "openbao-seed.service" ];
        serviceConfig.ExecStart = portal;
      };
    };

  testScript =
    { nodes, ... }:
    let
      cfg = nodes.machine.services.fediversity-windmill;
      toplevel = nodes.machine.system.build.toplevel;
    in
    ''
      import hashlib
      import json
      import shlex
      import time

      SCRIPTS = "${cfg.scriptsPackage}"
      BOOTSTRAP = "${cfg.package}/bin/fediversity-windmill-bootstrap"
      JOBENV = "${cfg.package}/bin/fediversity-jobenv"
      NIXPKGS = "${cfg.deployEnv.DEPLOYMENT_NIXPKGS}"
      WINDMILL = "${cfg.windmillPackage}"
      CERT = "${cfg.tls.certificate}"
      TOPLEVEL = "${toplevel}"
      ROOT_TOKEN = "${rootToken}"
      DEPLOY_TOKEN = "${deployToken}"
      TF_TOKEN = "${tfToken}"
      SMTP_PASSWORD = "${smtpPassword}"
      RESTIC_PASSWORD = "${resticPassword}"
      ADMIN_PASSWORD_FILE = "/var/lib/fediversity-windmill/admin-password"
      STATE_DIR = "/var/lib/fediversity-jobenv"
      NAMES = ["deploy", "destroy", "_jobenv"]
      UNITS = ["windmill-server", "windmill-worker", "windmill-worker-native"]


      def bao(args):
          return machine.succeed(f"BAO_ADDR=http://127.0.0.1:8200 BAO_TOKEN={ROOT_TOKEN} bao {args}")


      def api(token, method, path, body=None):
          cmd = f"curl -sS --fail-with-body -X {method} -H 'Authorization: Bearer {token}' http://127.0.0.1:8001/api{path}"
          if body is not None:
              cmd += " -H 'Content-Type: application/json' --data-binary " + shlex.quote(json.dumps(body))
          return machine.succeed(cmd)


      def status(token, method, path, body=None):
          """The HTTP status of an API call (for the calls a token must be refused)."""
          cmd = f"curl -s -o /dev/null -w '%{{http_code}}' -X {method} -H 'Authorization: Bearer {token}' http://127.0.0.1:8001/api{path}"
          if body is not None:
              cmd += " -H 'Content-Type: application/json' --data-binary " + shlex.quote(json.dumps(body))
          return machine.succeed(cmd).strip()


      def front_end_token():
          """The token the bootstrap stores for the front-end (scoped to the two scripts and jobs)."""
          return bao("kv get -field=value secret/windmill/apiToken").strip()


      def ui_token():
          """The UI include's own token, the superadmin's full rights (for the test's admin calls)."""
          line = machine.succeed("cat /run/windmill-ui-auth/token.conf")
          return line.split("Bearer ", 1)[1].split('"', 1)[0].split(";", 1)[0].strip()


      def https(url, *options):
          """The status code and the redirect target of a request to nginx (self-signed TLS)."""
          opts = " ".join(shlex.quote(o) for o in options)
          out = machine.succeed(f"curl -sk -o /dev/null -w '%{{http_code}} %{{redirect_url}}' {opts} {shlex.quote(url)}")
          code, _, location = out.strip().partition(" ")
          return code, location


      def job_info(token, job):
          return json.loads(api(token, "GET", f"/w/fediversity/jobs_u/get/{job}"))


      def submit(token, script, payload):
          return api(token, "POST", f"/w/fediversity/jobs/run/p/f/fediversity/{script}", payload).strip()


      def wait_completed(token, job, timeout=600):
          machine.wait_until_succeeds(
              f"curl -sf -H 'Authorization: Bearer {token}' http://127.0.0.1:8001/api/w/fediversity/jobs_u/get/{job}"
              " | jq -e '.type == \"CompletedJob\"'",
              timeout=timeout,
          )
          return job_info(token, job), api(token, "GET", f"/w/fediversity/jobs_u/get_logs/{job}")


      def run_job(token, script, payload):
          job = submit(token, script, payload)
          info, logs = wait_completed(token, job)
          return job, info, logs


      def journal_entry(job):
          return json.loads(machine.succeed(f"{JOBENV} status --state-dir {STATE_DIR} {job}"))


      def script_hashes(token):
          # Needs scripts:read: the UI's token, not the front-end's.
          return {n: json.loads(api(token, "GET", f"/w/fediversity/scripts/get/p/f/fediversity/{n}"))["hash"] for n in NAMES}


      def prop(unit, name):
          return machine.succeed(f"systemctl show -P {name} {unit}").strip()


      def switch(configuration):
          machine.succeed(f"{configuration}/bin/switch-to-configuration test")


      start_all()
      machine.wait_for_unit("openbao-agent-default.service")
      machine.wait_for_unit("windmill-server.service")
      machine.wait_until_succeeds("systemctl is-active windmill-worker.service", timeout=300)
      machine.wait_for_open_port(8001)

      with subtest("the bootstrap converges"):
          machine.wait_for_unit("fediversity-windmill-bootstrap.service", timeout=900)
          token = front_end_token()
          admin = ui_token()
          assert token != admin
          me = json.loads(api(admin, "GET", "/users/whoami"))
          assert me["super_admin"], me
          assert json.loads(api(admin, "GET", "/settings/global/instance_python_version")) == "3.12"
          for name in NAMES:
              remote = json.loads(api(admin, "GET", f"/w/fediversity/scripts/get/p/f/fediversity/{name}"))
              local = machine.succeed(f"cat {SCRIPTS}/f/fediversity/{name}.py")
              assert remote["content"] == local, name
              assert remote["language"] == "python3" and not remote["archived"], remote
          assert machine.succeed("stat -c '%U:%G %a' /run/windmill-ui-auth/token.conf").strip() == "root:nginx 440"
          machine.succeed(f"{BOOTSTRAP} --check --config /etc/fediversity-windmill/bootstrap.json")

      with subtest("the bootstrap reaches nixpkgs' local database over its socket, as its role, with no password"):
          windmill_config = json.loads(machine.succeed("cat /etc/fediversity-windmill/bootstrap.json"))["windmill"]
          assert windmill_config["database_url"] == "host=/run/postgresql port=5432 dbname=windmill user=windmill", windmill_config
          assert "database_url_file" not in windmill_config, windmill_config
          # Root gets in as windmill through the module's map; another user does not; and the
          # hash the bootstrap wrote is the one Windmill checks (the node password logs in).
          machine.succeed("psql -tA 'host=/run/postgresql dbname=windmill user=windmill' -c 'SET ROLE windmill_admin; SELECT count(*) FROM password'")
          machine.fail("runuser -u nginx -- psql -tA 'host=/run/postgresql dbname=windmill user=windmill' -c 'SELECT 1'")
          password = machine.succeed(f"cat {ADMIN_PASSWORD_FILE}").strip()
          machine.succeed(
              "curl -sf -X POST -H 'Content-Type: application/json' http://127.0.0.1:8001/api/auth/login --data-binary "
              + shlex.quote(json.dumps({"email": "admin@windmill.dev", "password": password}))
          )

      with subtest("the front-end's token runs deploys and reads jobs, and nothing else"):
          # What a leaked front-end token can still do: run the two scripts, read and cancel
          # jobs. Not run other code, change the scripts, read variables or reach other routes.
          assert status(token, "GET", "/w/fediversity/jobs/list") == "200"
          # Refused by role or by scope: 401 or 403 (Windmill before 1.743 answers a missing
          # scope with 401).
          assert status(token, "POST", "/w/fediversity/jobs/run/preview", {"language": "bash", "content": "id", "args": {}}) in ("401", "403")
          assert status(token, "GET", "/w/fediversity/scripts/get/p/f/fediversity/deploy") in ("401", "403")
          assert status(token, "GET", "/w/fediversity/variables/list") in ("401", "403")
          # Bound to the workspace: every global route is refused.
          assert status(token, "GET", "/users/whoami") == "401"
          # The control: the UI's token may.
          assert status(admin, "GET", "/w/fediversity/variables/list") == "200"

      with subtest("a rerun changes nothing and rotates the tokens"):
          before = script_hashes(admin)
          old_token, old_admin = token, admin
          machine.succeed("systemctl restart fediversity-windmill-bootstrap.service")
          machine.wait_for_unit("fediversity-windmill-bootstrap.service")
          token, admin = front_end_token(), ui_token()
          assert token != old_token and admin != old_admin
          assert script_hashes(admin) == before
          workspaces = [w["id"] for w in json.loads(api(admin, "GET", "/workspaces/list_as_superadmin"))]
          assert workspaces.count("fediversity") == 1, workspaces
          labels = [t["label"] for t in json.loads(api(admin, "GET", "/users/tokens/list"))]
          # The front-end's token is the workspace operator's, not the superadmin's.
          assert labels.count("fediversity") == 0 and labels.count("fediversity-ui") == 1, labels
          # Both runs logged out their login sessions.
          assert labels.count("session") == 0, labels
          # Revoked (Windmill may answer from its auth cache for a while): a workspace route,
          # which the old front-end token could call.
          for old in [old_token, old_admin]:
              machine.wait_until_succeeds(
                  f"test \"$(curl -s -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {old}'"
                  " http://127.0.0.1:8001/api/w/fediversity/jobs/list)\" = 401",
                  timeout=300,
              )
          machine.succeed(f"{BOOTSTRAP} --check --config /etc/fediversity-windmill/bootstrap.json")

      with subtest("nginx: TLS on both names, the API name serves /api/ only and is the default server"):
          assert https("http://windmill.test.example/api/version")[0] == "301"
          assert https("http://windmill.test.example/api/version")[1] == "https://windmill.test.example/api/version"
          assert https("http://jobs.test.example/")[1] == "https://jobs.test.example/"
          # The operator's certificate, for both names.
          machine.succeed(f"curl -sf --cacert {CERT} https://windmill.test.example/api/version")
          machine.succeed(f"curl -s --cacert {CERT} -o /dev/null https://jobs.test.example/")
          assert https("https://windmill.test.example/")[0] == "404"
          machine.succeed("curl -sfk https://windmill.test.example/api/version | grep -q '^CE'")
          assert https("https://windmill.test.example/api/users/whoami")[0] == "401"
          # A request by IP address or for another name lands on the API vhost, never on the UI.
          assert https("https://127.0.0.1/")[0] == "404"
          assert https("https://127.0.0.1/api/users/whoami")[0] == "401"
          assert https("https://127.0.0.1/api/users/whoami", "-H", "Host: unknown.test.example")[0] == "401"

      with subtest("the admin UI is refused without auth and served through the forward auth"):
          machine.wait_for_open_port(9091)
          # No session: sent to sign in, with the requested URL; websocket upgrades too.
          code, location = https("https://jobs.test.example/api/users/whoami")
          assert code == "302", code
          assert location.startswith("https://auth.test.example/?rd=https%3A%2F%2Fjobs.test.example%2Fapi%2Fusers%2Fwhoami"), location
          code, _ = https("https://jobs.test.example/ws/", "-H", "Connection: Upgrade", "-H", "Upgrade: websocket")
          assert code == "302", code
          # A session the portal refuses: 403.
          assert https("https://jobs.test.example/api/users/whoami", "-H", "Cookie: vmtest_session=other")[0] == "403"
          # A session of fediversity-admins: the UI acts as the superadmin (the token include,
          # rewritten by the rotation above; nginx reloaded when the bootstrap wrote it).
          machine.wait_until_succeeds(
              "curl -sfk -H 'Cookie: vmtest_session=admin' https://jobs.test.example/api/users/whoami | jq -e .super_admin",
              timeout=60,
          )
          # The portal never saw the token.
          portal_log = machine.succeed("cat /run/vm-test/portal.log")
          assert "jobs.test.example/api/users/whoami" in portal_log, portal_log
          assert token not in portal_log and admin not in portal_log and "Bearer" not in portal_log, portal_log

      with subtest("this node's Authelia has the UI's rule, first, and applies it"):
          machine.wait_for_unit("authelia-main.service")
          machine.wait_for_open_port(9092)
          config = machine.succeed("systemctl show -P ExecStart authelia-main | grep -o -- '--config [^ ;]*' | head -1").split()[1].split(",")[0]
          rules = json.loads(machine.succeed(f"yq -o=json '.access_control.rules' {config}"))
          assert rules[0] == {"domain": ["jobs.test.example"], "policy": "one_factor", "subject": ["group:fediversity-admins"]}, rules

          def authz(url):
              return machine.succeed(
                  "curl -s -o /dev/null -w '%{http_code}' -H 'X-Original-Method: GET'"
                  f" -H 'X-Original-URL: {url}' http://127.0.0.1:9092/api/authz/auth-request"
              ).strip()

          # The UI's name needs a sign-in (one_factor): 401 without a session.
          assert authz("https://jobs.test.example/") == "401"
          # The control: a name without a rule is denied outright (default_policy deny).
          assert authz("https://other.test.example/") == "403"

      with subtest("without an identity layer the admin UI answers 403 and never serves the token"):
          switch(f"{TOPLEVEL}/specialisation/ui-closed")
          machine.wait_until_succeeds(
              "test \"$(curl -sk -o /dev/null -w '%{http_code}' -H 'Cookie: vmtest_session=admin' https://jobs.test.example/api/users/whoami)\" = 403",
              timeout=60,
          )
          assert https("https://jobs.test.example/")[0] == "403"
          machine.fail("curl -sfk -H 'Cookie: vmtest_session=admin' https://jobs.test.example/api/users/whoami")
          # The API is unaffected.
          machine.succeed("curl -sfk https://windmill.test.example/api/version")
          switch(TOPLEVEL)
          machine.wait_until_succeeds(
              "curl -sfk -H 'Cookie: vmtest_session=admin' https://jobs.test.example/api/users/whoami | jq -e .super_admin",
              timeout=60,
          )

      with subtest("a deploy job runs the deployment program through jobenv"):
          job, info, logs = run_job(token, "deploy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test", "MESSAGE": "hello from the VM"})
          assert info["success"], (info, logs)
          result = info["result"]
          assert result["status"] == "succeeded", result
          assert (result["verb"], result["attribute"], result["namespace"]) == ("apply", "demo", "vm-test"), result
          assert "demo-apply: namespace=vm-test message=hello from the VM" in logs, logs
          # The repository's keys: a declared default, the node's value of its node-only key.
          assert 'published-hosts: ["demo.test.example"]' in logs, logs
          assert "node-site: vm-site" in logs, logs
          assert "self-module-source: unset" in logs, logs
          assert "token: [REDACTED]" in logs, logs
          assert DEPLOY_TOKEN not in logs and DEPLOY_TOKEN not in json.dumps(info), logs
          # The first job of the tree evaluates its shell, and caches it.
          assert "(not cached yet)" in logs, logs
          # jobenv journaled the run under the Windmill job id, in the worker's state directory.
          entry = journal_entry(job)
          assert entry["status"] == "succeeded" and entry["verb"] == "apply", entry
          assert machine.succeed(f"stat -c '%U:%G %a' {STATE_DIR}").strip() == "windmill:windmill 750"

      with subtest("a payload never sets a node-only key or pin"):
          job, info, logs = run_job(
              token,
              "deploy",
              {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test", "MESSAGE": "m", "NODE_SITE": "payload-site", "SELF_MODULE_SOURCE": "/payload/source"},
          )
          assert info["success"], (info, logs)
          assert "node-site: vm-site" in logs and "self-module-source: unset" in logs, logs
          # The second job of the tree runs the cached shell: nothing is evaluated.
          assert "of this tree is cached: it is not evaluated" in logs, logs
          machine.succeed(f"test -n \"$(ls {STATE_DIR}/shells/*.json)\"")
          # jobenv says which keys it dropped (the program prints them lower-case), never the
          # values.
          assert "SELF_MODULE_SOURCE" in logs and "NODE_SITE" in logs, logs
          assert "/payload/source" not in logs and "payload-site" not in logs, logs
          keys = json.loads(machine.succeed("cat /etc/fediversity-windmill/deploy-keys.json"))
          assert keys["NODE_SITE"].get("node_only") is True and keys["SELF_MODULE_SOURCE"].get("node_only") is True, keys
          assert "node_only" not in keys["MESSAGE"], keys
          assert json.loads(machine.succeed("cat /etc/fediversity-windmill/deployment-attributes.json")) == ["demo", "slow"]

      with subtest("tf-token.env reaches the deployment program"):
          assert "tf token: [REDACTED]" in logs, logs
          assert f"tf-token-sha256: {hashlib.sha256(TF_TOKEN.encode()).hexdigest()}" in logs, logs
          assert TF_TOKEN not in logs and TF_TOKEN not in json.dumps(info), logs
          for name in ["tf-token.env", "incus-store-ssh.key", "incus-store-signing.key"]:
              assert machine.succeed(f"stat -c '%U:%G %a' /run/incus-deploy/{name}").strip() == "root:windmill 440", name
          assert machine.succeed("cat /run/incus-deploy/tf-token.env").strip() == f"TF_VAR_token={TF_TOKEN}"
          assert machine.succeed("cat /run/incus-deploy/incus-store-ssh.key").strip() == "vm-test-ssh-key"
          # The programs learn where the store keys are from node-owned keys.
          env = json.loads(machine.succeed("cat /etc/fediversity-windmill/deploy-env.json"))
          assert env["INCUS_STORE_SSH_KEY_FILE"] == "/run/incus-deploy/incus-store-ssh.key", env
          assert env["INCUS_STORE_SIGNING_KEY_FILE"] == "/run/incus-deploy/incus-store-signing.key", env
          required = json.loads(machine.succeed("cat /etc/fediversity-windmill/required-secrets.json"))
          assert required == ["TF_VAR_demo_token", "TF_VAR_token"], required

      with subtest("a destroy job runs the destroy program"):
          job, info, logs = run_job(token, "destroy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test"})
          assert info["success"], (info, logs)
          assert info["result"]["verb"] == "destroy", info["result"]
          assert "demo-destroy: namespace=vm-test" in logs, logs

      with subtest("a job payload jobenv refuses fails the job"):
          job, info, logs = run_job(token, "deploy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test", "NIX_PATH": "/tmp"})
          assert not info["success"], info
          assert "payload rejected: reserved keys: NIX_PATH" in logs, logs

      with subtest("the front-end cancels its own deploy, and no process is left behind"):
          job = submit(token, "deploy", {"ATTRIBUTE": "slow", "NAMESPACE": "vm-cancel"})
          machine.wait_until_succeeds("pgrep -f 'sleep [6]001'", timeout=600)
          # The job is the workspace operator's, not the superadmin's.
          assert json.loads(api(token, "GET", f"/w/fediversity/jobs_u/get/{job}"))["created_by"] == "frontend"
          api(token, "POST", f"/w/fediversity/jobs_u/queue/cancel/{job}", {"reason": "vm test"})
          machine.wait_until_succeeds(
              f"curl -sf -H 'Authorization: Bearer {token}' http://127.0.0.1:8001/api/w/fediversity/jobs_u/get/{job}"
              " | jq -e '.type == \"CompletedJob\" and .canceled and .canceled_by == \"frontend\"'",
              timeout=120,
          )
          machine.fail("pgrep -f 'sleep [6]001'")

      with subtest("a node without its secrets is not ready: jobs are refused, the worker does not start"):
          machine.succeed("systemctl stop openbao-agent-default.service")
          machine.succeed("rm /run/fediversity-windmill/deploy-secrets/TF_VAR_demo_token")
          job, info, logs = run_job(token, "deploy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test"})
          assert not info["success"], info
          assert "jobenv: error: node not ready" in logs, logs
          assert "demo-apply" not in logs, logs
          # The worker's start waits for the file, then fails naming it. (Without its
          # dependencies: its Wants= would start the agent again, which renders the file. Its
          # Restart=always starts it again later, agent included.)
          machine.fail("systemctl restart --job-mode=ignore-dependencies windmill-worker.service")
          machine.succeed(
              "journalctl -u windmill-worker.service -o cat"
              " | grep -F 'node not ready: not rendered after 10s: /run/fediversity-windmill/deploy-secrets/TF_VAR_demo_token'"
          )
          machine.succeed("systemctl start openbao-agent-default.service")
          machine.wait_for_file("/run/fediversity-windmill/deploy-secrets/TF_VAR_demo_token")
          machine.wait_until_succeeds("systemctl is-active windmill-worker.service", timeout=120)
          job, info, logs = run_job(token, "deploy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-test"})
          assert info["success"], (info, logs)

      with subtest("OpenTelemetry variables on the three Windmill units"):
          for unit in UNITS:
              env = prop(unit, "Environment").split()
              role = unit.removeprefix("windmill-")
              for variable in [
                  "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318",
                  "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
                  f"OTEL_SERVICE_NAME=windmill-{role}",
                  "OTEL_RESOURCE_ATTRIBUTES=service.namespace=fediversity",
                  "OTEL_TRACING=true",
              ]:
                  assert variable in env, (unit, variable, env)

      with subtest("SMTP reaches windmill-server, its password never through the store or the unit"):
          env = prop("windmill-server", "Environment").split()
          for variable in ["SMTP_HOST=127.0.0.1", "SMTP_PORT=2525", "SMTP_USERNAME=windmill", "SMTP_FROM=noreply@windmill.test.example", "SMTP_TLS_IMPLICIT=false"]:
              assert variable in env, (variable, env)
          assert not any(v.startswith("SMTP_PASSWORD") for v in env), env
          pid = prop("windmill-server", "MainPID")
          environ = machine.succeed(f"tr '\\0' '\\n' < /proc/{pid}/environ")
          assert f"SMTP_PASSWORD={SMTP_PASSWORD}" in environ.splitlines(), environ
          machine.fail(f"grep -rqF {SMTP_PASSWORD} /etc/systemd/system/windmill-server.service /etc/systemd/system/windmill-server.service.d")

      with subtest("a worker restart runs recover"):
          job = submit(token, "deploy", {"ATTRIBUTE": "slow", "NAMESPACE": "vm-recover"})
          machine.wait_until_succeeds("pgrep -f 'sleep [6]001'", timeout=600)
          assert journal_entry(job)["status"] == "running"
          # A crash of the worker (every process of the unit), not a stop: no drain.
          machine.succeed("systemctl kill --signal=SIGKILL windmill-worker.service")
          machine.wait_until_fails("pgrep -f 'sleep [6]001'", timeout=60)
          machine.wait_until_succeeds("systemctl is-active windmill-worker.service", timeout=120)
          # ExecStartPre's recover marked the attempt interrupted (or, if Windmill's zombie
          # re-run came first, that attempt is the earlier one of the re-run).
          entry = journal_entry(job)
          assert entry["status"] != "running" or entry.get("attempt", 1) > 1, entry
          assert "interrupted" in json.dumps(entry), entry
          # Windmill re-runs the lost job with the same id about a minute later (its zombie
          # detection): it runs as the next attempt; cancel it.
          machine.wait_until_succeeds("pgrep -f 'sleep [6]001'", timeout=300)
          api(token, "POST", f"/w/fediversity/jobs_u/queue/cancel/{job}", {"reason": "vm test"})
          wait_completed(token, job, timeout=120)
          machine.wait_until_fails("pgrep -f 'sleep [6]001'", timeout=60)

      with subtest("a stop during a running deploy drains it"):
          job = submit(token, "deploy", {"ATTRIBUTE": "slow", "NAMESPACE": "vm-stop"})
          machine.wait_until_succeeds("pgrep -f 'sleep [6]001'", timeout=600)
          machine.succeed("systemctl stop --no-block windmill-worker.service")
          time.sleep(1)
          # Submitted while the worker stops: it takes no new job.
          late = submit(token, "deploy", {"ATTRIBUTE": "demo", "NAMESPACE": "vm-late"})
          started = time.monotonic()
          machine.wait_until_succeeds("test \"$(systemctl show -P ActiveState windmill-worker.service)\" = inactive", timeout=120)
          took = time.monotonic() - started
          # The drain's wait (5 s) plus jobenv's grace (3 s), well inside TimeoutStopSec.
          assert took < 38, took
          machine.fail("pgrep -f 'sleep [6]001'")
          info, logs = wait_completed(token, job, timeout=60)
          assert not info["success"] and not info.get("canceled"), info
          assert "the node stopped" in logs, logs
          entry = journal_entry(job)
          assert entry["status"] != "running" and "interrupted" in json.dumps(entry), entry
          assert job_info(token, late)["type"] == "QueuedJob"
          # A drained job is finished: Windmill does not re-run it as a zombie.
          machine.sleep(90)
          machine.fail("pgrep -f 'sleep [6]001'")
          assert job_info(token, job)["type"] == "CompletedJob"
          # The worker comes back and runs what was queued.
          machine.succeed("systemctl start windmill-worker.service")
          info, logs = wait_completed(token, late)
          assert info["success"], (info, logs)

      with subtest("a changed script is uploaded again after the bootstrap restarts"):
          before = script_hashes(admin)
          switch(f"{TOPLEVEL}/specialisation/changed-script")
          new_dir = machine.succeed("jq -r .scripts.dir /etc/fediversity-windmill/bootstrap.json").strip()
          assert new_dir != SCRIPTS, new_dir
          local = machine.succeed(f"cat {new_dir}/f/fediversity/deploy.py")
          assert local.endswith("# changed for the VM test\n"), local
          machine.wait_until_succeeds(
              "curl -sf -H \"Authorization: Bearer $(sed -n 's/.*Bearer \\([^\\\";]*\\).*/\\1/p' /run/windmill-ui-auth/token.conf)\""
              " http://127.0.0.1:8001/api/w/fediversity/scripts/get/p/f/fediversity/deploy"
              " | jq -e '.content | endswith(\"# changed for the VM test\\n\")'",
              timeout=300,
          )
          machine.wait_for_unit("fediversity-windmill-bootstrap.service")
          token, admin = front_end_token(), ui_token()
          after = script_hashes(admin)
          assert after["deploy"] != before["deploy"], (before, after)
          assert after["destroy"] == before["destroy"] and after["_jobenv"] == before["_jobenv"], (before, after)
          switch(TOPLEVEL)

      with subtest("the generated superadmin password is root's, stays, and logs in"):
          assert machine.succeed(f"stat -c '%U:%G %a' {ADMIN_PASSWORD_FILE}").strip() == "root:root 400"
          assert machine.succeed("stat -c '%U:%G %a' /var/lib/fediversity-windmill").strip() == "root:root 700"
          generated = machine.succeed(f"cat {ADMIN_PASSWORD_FILE}").strip()
          assert len(generated) == 64 and all(c in "0123456789abcdef" for c in generated), len(generated)
          login = json.dumps({"email": "admin@windmill.dev", "password": generated})
          machine.succeed(f"curl -sf -X POST -H 'Content-Type: application/json' -d {shlex.quote(login)} http://127.0.0.1:8001/api/auth/login")
          # Nowhere else: not the bootstrap's configuration, a unit or the journal.
          machine.fail(f"grep -rqF {generated} /etc/fediversity-windmill /etc/systemd/system")
          machine.fail(f"journalctl -o cat | grep -qF {generated}")
          # The node never changes it by itself: not when its unit runs again, nor after a reboot's
          # worth of reruns.
          machine.succeed("systemctl restart fediversity-windmill-admin-password.service fediversity-windmill-bootstrap.service")
          machine.wait_for_unit("fediversity-windmill-bootstrap.service")
          assert machine.succeed(f"cat {ADMIN_PASSWORD_FILE}").strip() == generated
          token, admin = front_end_token(), ui_token()

      with subtest("a new admin password reruns the bootstrap"):
          # The operator replaces the generated one by hand; the path unit reruns the bootstrap.
          machine.succeed(f"install -m 0400 /dev/null {ADMIN_PASSWORD_FILE}.new && printf '%s\\n' ${newAdminPassword} > {ADMIN_PASSWORD_FILE}.new && mv {ADMIN_PASSWORD_FILE}.new {ADMIN_PASSWORD_FILE}")
          machine.wait_until_succeeds(
              "curl -sf -X POST -H 'Content-Type: application/json'"
              " -d '{\"email\": \"admin@windmill.dev\", \"password\": \"${newAdminPassword}\"}'"
              " http://127.0.0.1:8001/api/auth/login",
              timeout=300,
          )

      with subtest("the backup stores the database and a restore brings it back"):
          assert machine.succeed("stat -c '%U:%G %a' /run/fediversity-windmill/backup/restic-password").strip() == "root:root 400"
          machine.succeed("systemctl start fediversity-windmill-backup.service")
          assert prop("fediversity-windmill-backup", "Result") == "success"
          snapshots = json.loads(machine.succeed("fediversity-windmill-restic snapshots --json --tag windmill-database"))
          assert len(snapshots) == 1 and snapshots[0]["paths"] == ["/windmill.sql"], snapshots
          dump = machine.succeed("fediversity-windmill-restic dump --tag windmill-database latest /windmill.sql")
          assert "CREATE TABLE public.script" in dump, dump[:2000]
          # The password reached restic from its file, never the unit's environment.
          assert RESTIC_PASSWORD not in prop("fediversity-windmill-backup", "Environment")
          machine.fail(f"grep -rqF {RESTIC_PASSWORD} /etc/systemd/system")
          # A restore, as docs/operators/lifecycle.md says, into a scratch database: the scripts are there.
          machine.succeed("runuser -u postgres -- createdb --owner windmill windmill_restore")
          machine.succeed(
              "fediversity-windmill-restic dump --tag windmill-database latest /windmill.sql"
              " | runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 --dbname windmill_restore"
          )
          count = "SELECT count(*) FROM script WHERE path LIKE 'f/fediversity/%'"
          restored = machine.succeed(f"runuser -u postgres -- psql -tA --dbname windmill_restore -c \"{count}\"").strip()
          live = machine.succeed(f"runuser -u postgres -- psql -tA --dbname windmill -c \"{count}\"").strip()
          assert restored == live and int(live) >= 3, (restored, live)
          # A second run adds a snapshot and the prune keeps within its policy.
          machine.succeed("systemctl start fediversity-windmill-backup.service")
          assert len(json.loads(machine.succeed("fediversity-windmill-restic snapshots --json --tag windmill-database"))) in (1, 2)

      with subtest("unit, file and Nix settings"):
          assert prop("windmill-worker", "KillMode") == "mixed"
          assert prop("windmill-worker", "TimeoutStopUSec") == "38s"
          stop = prop("windmill-worker", "ExecStop")
          assert stop.index("kill") < stop.index("fediversity-jobenv"), stop
          assert "drain --state-dir /var/lib/fediversity-jobenv --wait 5" in stop, stop
          assert "recover --state-dir /var/lib/fediversity-jobenv" in prop("windmill-worker", "ExecStartPre")
          worker_env = prop("windmill-worker", "Environment").split()
          assert "MAX_WAIT_FOR_SIGINT=10" in worker_env, worker_env
          # The collector (otel.endpoint) reaches every job's jobenv too, its service name aside.
          assert "WHITELIST_ENVS=JOBENV_GRACE,JOBENV_LOCK_TIMEOUT,JOBENV_NIX_SHELL,JOBENV_REQUIRED_SECRETS,JOBENV_SECRETS_ENV_FILES,JOBENV_STATE_DIR,OTEL_EXPORTER_OTLP_ENDPOINT,OTEL_EXPORTER_OTLP_PROTOCOL,OTEL_RESOURCE_ATTRIBUTES" in worker_env, worker_env
          assert "JOBENV_SECRETS_ENV_FILES=/run/incus-deploy/tf-token.env" in worker_env, worker_env
          assert "JOBENV_LOCK_TIMEOUT=30" in worker_env and "JOBENV_GRACE=3" in worker_env, worker_env
          for unit in UNITS:
              assert prop(unit, "RestartUSec") == "5s", unit
              assert "openbao-agent-default.service" in prop(unit, "After").split(), unit
          # The node's Windmill (Python and Bash only), not nixpkgs' complete one; the server
          # through the launcher that exports its SMTP password.
          for unit in ["windmill-worker", "windmill-worker-native"]:
              assert f"{WINDMILL}/bin/windmill" in prop(unit, "ExecStart"), unit
          launcher = prop("windmill-server", "ExecStart").split("path=")[1].split()[0]
          assert launcher.endswith("-windmill-with-smtp-password"), launcher
          machine.succeed(f"grep -qF {WINDMILL}/bin/windmill {launcher}")
          assert prop("fediversity-windmill-bootstrap", "Restart") == "on-failure"
          assert prop("fediversity-windmill-bootstrap", "RestartUSec") == "30s"
          assert prop("fediversity-windmill-bootstrap", "RemainAfterExit") == "yes"
          assert prop("fediversity-windmill-bootstrap", "StartLimitIntervalUSec") in ("0", "0s")
          worker_path = machine.succeed("systemctl show -P Environment windmill-worker | tr ' ' '\\n' | grep ^PATH=")
          assert "fediversity-windmill" in worker_path and "-nix-" in worker_path and "-git-" in worker_path, worker_path
          assert machine.succeed("stat -c '%U:%G %a' /run/fediversity-windmill/deploy-secrets/TF_VAR_demo_token").strip() == "root:windmill 440"
          assert machine.succeed("stat -c '%U:%G %a' /run/fediversity-windmill/deploy-secrets").strip() == "root:windmill 750"
          assert machine.succeed("stat -c '%U:%G %a' /run/incus-deploy").strip() == "root:windmill 750"
          machine.succeed(f"nix registry list | grep -F 'system flake:nixpkgs path:{NIXPKGS}'")
          machine.succeed("grep -E '^trusted-users = .*\\bwindmill\\b' /etc/nix/nix.conf")
          machine.succeed("grep -E '^experimental-features = .*\\bflakes\\b' /etc/nix/nix.conf")
          machine.succeed("grep -E '^flake-registry = *$' /etc/nix/nix.conf")
    '';
}
