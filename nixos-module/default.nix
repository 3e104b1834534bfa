# services.fediversity-windmill: everything this project puts on the node that hosts Windmill.
#
# - Windmill itself is nixpkgs' `services.windmill` (enabled here, not redefined); this module
#   adds settings to its units: the package (Python and Bash only), ordering after the OpenBao
#   agent, RestartSec, OpenTelemetry, SMTP, and for the worker the PATH, the cancel behaviour
#   the deploy jobs need, readiness (it waits for the rendered credentials) and a stop that
#   drains the running deploys.
# - jobenv's node files in /etc/fediversity-windmill, the deploy secrets directory and the
#   credentials of the Incus deployments (/run/incus-deploy), as OpenBao agent templates.
# - The bootstrap (a oneshot that retries until Windmill is converged) and its configuration;
#   on nixpkgs' local database, the PostgreSQL peer map that lets it in as Windmill's role.
# - nginx: the API name (the default server) and the admin UI name, which is served only
#   behind an identity layer; TLS for both.
# - Nix on the node: the worker's user is trusted, `nixpkgs` is pinned in the registry, flakes.
#
# The pure parts (defaults, renderers, decisions, unit settings) live in ./lib.nix, which the
# test suite evaluates without nixpkgs; it also evaluates this file against stand-ins for
# nixpkgs' `lib` and `pkgs` (tests/nix/module-harness.nix).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  fw = import ./lib.nix;
  cfg = config.services.fediversity-windmill;
  inherit (lib)
    literalExpression
    mkDefault
    mkEnableOption
    mkForce
    mkIf
    mkMerge
    mkOption
    types
    ;
  d = fw.bootstrapDefaults;

  # The worker's user: nixpkgs runs every Windmill unit as this (DynamicUser) user; declaring
  # it statically gives the secret files and the Nix daemon a stable name to refer to.
  windmillUser = config.services.windmill.database.user;

  # Secrets are read from files at run time and never pass through the Nix store: a path
  # option is a string (a Nix path value would be copied into the world-readable store).
  absolutePath = types.strMatching "/.+";
  seconds = types.ints.positive;
  # A Windmill token label as the bootstrap accepts one: not empty, no control characters.
  tokenLabel = types.strMatching "[^[:cntrl:]]+";

  jsonFile = name: value: pkgs.writeText name (builtins.toJSON value);
  bootstrapConfig = jsonFile "fediversity-windmill-bootstrap.json" (
    fw.renderBootstrapConfig {
      inherit (cfg) bootstrap;
      scriptsDir = "${cfg.bootstrap.scriptsDir}";
    }
  );
  systemctl = "${config.systemd.package}/bin/systemctl";
  kill = "${pkgs.coreutils}/bin/kill";
  jobenv = "${cfg.package}/bin/fediversity-jobenv";
  pruneUnits = fw.pruneUnits {
    inherit jobenv;
    user = windmillUser;
    clusterDsnFile = cfg.cluster.dsnFile;
    clusterCaFile = cfg.cluster.caFile;
  };
  workerPackages = {
    nix = config.nix.package;
    openssh = pkgs.openssh;
    git = pkgs.git;
    bash = pkgs.bash;
    # The sealed copy the worker's start installs (lib.nix, `paths.sealedJobenv`).
    fediversity-jobenv = fw.paths.sealedJobenvDir;
  };

  # nixpkgs' Windmill with only the Python and Bash toolchains: its build features cut down
  # (lib.nix, `windmillFeatures`) and the other toolchains of its wrapper replaced by a stub.
  # `cargoBuildFeatures` is what the cargo build hook reads (`buildFeatures` is only the
  # argument buildRustPackage derives it from).
  windmillArgs = builtins.attrNames (lib.functionArgs pkgs.windmill.override);
  toolchainStub = pkgs.runCommand "windmill-without-other-toolchains" { } ''
    mkdir -p $out/bin $out/share/dotnet
    for program in ${toString fw.windmillToolchainPrograms}; do
      printf '#!%s\necho "%s is not on this node: its Windmill runs Python and Bash jobs only" >&2\nexit 127\n' \
        ${pkgs.runtimeShell} "$program" > "$out/bin/$program"
      chmod +x "$out/bin/$program"
    done
  '';
  trimmedWindmill =
    (pkgs.windmill.override (
      fw.windmillToolchainOverrides {
        packageArgs = windmillArgs;
        stub = toolchainStub;
      }
    )).overrideAttrs
      (old: {
        cargoBuildFeatures = fw.trimWindmillFeatures (old.cargoBuildFeatures or old.buildFeatures or [ ]);
        cargoCheckFeatures = fw.trimWindmillFeatures (old.cargoCheckFeatures or old.buildFeatures or [ ]);
      });
  windmillPythonVersion = fw.majorMinor pkgs.${fw.windmillPythonAttr windmillArgs}.version;
  windmill = "${cfg.windmillPackage}/bin/windmill";
  # Each Windmill unit's ExecStart: Windmill itself, or a launcher that moves the unit's
  # credentials (the SMTP password, the collector's headers) into their variables first.
  windmillStart =
    role:
    let
      credentials = fw.launchedCredentials {
        inherit role;
        smtpPasswordFile = cfg.smtp.passwordFile;
        otelHeadersFile = if cfg.otel.endpoint != null then cfg.otel.headersFile else null;
      };
    in
    if credentials == [ ] then
      windmill
    else
      "${pkgs.writeShellScript "windmill-${role}-with-credentials" (fw.windmillLauncher { inherit windmill credentials; })}";

  # What the agent renders for the module, and the worker waits for.
  renderedFiles = fw.renderedFiles {
    inherit (cfg) deploySecrets credentials;
  };
  waitForFiles =
    if renderedFiles == { } then
      null
    else
      pkgs.writeShellScript "fediversity-windmill-wait-for-secrets" (
        fw.waitForFilesScript {
          files = builtins.attrNames renderedFiles;
          timeoutSeconds = cfg.readinessTimeout;
          sleep = "${pkgs.coreutils}/bin/sleep";
        }
      );

  agentConfigFile = jsonFile "openbao-agent-default.json" (
    fw.agentConfig {
      inherit (cfg.openbaoAgent) settings;
      templates = cfg.openbaoAgentTemplates;
    }
  );

  uiAccess = fw.uiAccess {
    forwardAuth = if cfg.ui.forwardAuth.enable then cfg.ui.forwardAuth else null;
    inherit (cfg.ui) nginxAuthConfig;
    openWithoutAuthentication = cfg.ui.dangerouslyServeWithoutAuthentication;
  };

  # What the node takes from its deployment repository (null: none).
  system = pkgs.stdenv.hostPlatform.system;
  published =
    if cfg.deploymentRepository == null then
      null
    else
      fw.repositoryPublished {
        outputs = fw.deploymentRepositoryOutputs cfg.deploymentRepository;
        inherit system;
      };
  repositoryKeys = if published == null then { } else published.keys;
  credentialPaths = fw.credentialPathKeys cfg.credentials;
  declaredKeys = fw.declaredKeys {
    repository = repositoryKeys;
    operator = cfg.deployKeys;
    nodeKeys = credentialPaths.declarations;
  };
  deploymentAttributes = fw.renderDeploymentAttributes (
    (if published == null then [ ] else published.attributes) ++ cfg.deploymentAttributes
  );

  portalRule = fw.portalRuleChecks {
    rule = cfg.ui.forwardAuth.accessControlRule;
    instances = config.services.authelia.instances or { };
    instance = cfg.ui.forwardAuth.autheliaInstance;
    inherit (cfg.ui.forwardAuth) ruleAddedToPortal;
  };
  forwardAuthOn = cfg.ui.forwardAuth.enable;

  # For the assertions only (see lib.nix, tlsSettings).
  tls = cfg.tls // {
    acmeCerts = builtins.attrNames config.security.acme.certs;
  };

  # nixpkgs' local database and the bootstrap (lib.nix, `localDatabase`): with it and no DSN
  # file, the bootstrap connects over the socket as the role nixpkgs creates.
  localDatabase = fw.localDatabase {
    inherit (config.services.windmill.database) user;
    database = config.services.windmill.database.name;
    port = config.services.postgresql.settings.port or 5432;
  };
  localDatabaseAccess =
    config.services.windmill.database.createLocally && cfg.bootstrap.windmill.databaseUrlFile == null;
  # The pg_hba and pg_ident lines only when the bootstrap does use that DSN.
  usesLocalDatabase =
    config.services.windmill.database.createLocally
    && cfg.bootstrap.windmill.databaseUrl != null
    && cfg.bootstrap.windmill.databaseUrl == localDatabase.dsn;

  opt =
    type: default: description:
    mkOption { inherit type default description; };
in
{
  imports = [
    (lib.mkRenamedOptionModule
      [ "services" "fediversity-windmill" "uiForwardAuth" ]
      [ "services" "fediversity-windmill" "ui" "nginxAuthConfig" ]
    )
  ];

  options.services.fediversity-windmill = {
    enable = mkEnableOption "the fediversity deploy runtime on Windmill (Windmill, its bootstrap, jobenv's node files, nginx)";

    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ../nix/package.nix { };
      defaultText = literalExpression "pkgs.callPackage <this repository>/nix/package.nix { }";
      description = "The package holding `fediversity-jobenv` and `fediversity-windmill-bootstrap`.";
    };

    scriptsPackage = mkOption {
      type = types.package;
      default = pkgs.callPackage ../nix/scripts.nix { };
      defaultText = literalExpression "pkgs.callPackage <this repository>/nix/scripts.nix { }";
      description = "The Windmill scripts tree (`f/fediversity/*.py`) the bootstrap uploads.";
    };

    windmillPackage = mkOption {
      type = types.package;
      default = trimmedWindmill;
      defaultText = literalExpression "pkgs.windmill, cut down to the Python and Bash toolchains";
      example = literalExpression "pkgs.windmill";
      description = ''
        The Windmill the three units run (their `ExecStart`). The default is nixpkgs'
        `pkgs.windmill` cut down to what deploy jobs need: built with only the features
        ${builtins.concatStringsSep ", " (map (f: "`${f}`") fw.windmillFeatures)} (those the
        package has; Bash needs none), and with the Go, Deno, Bun, PowerShell, .NET, PHP and
        Cargo toolchains of its wrapper replaced by a stub that refuses to run. It is not in
        the binary cache: the node builds it (Rust, a long build). `pkgs.windmill` is the
        cached, complete one.
      '';
    };

    domain = mkOption {
      type = types.str;
      example = "windmill.example.org";
      description = ''
        The API name: nginx answers 404 on it except under `/api/`, which it proxies to
        Windmill. Front-ends submit deploy jobs here. Its vhost is nginx's default server: a
        request by IP address or for a name nginx does not know lands on it, never on the UI
        (another vhost of the node that wants to be the default needs
        `services.nginx.virtualHosts.<domain>.default = lib.mkForce false`, and then must not
        serve the UI). The module opens no port of the firewall.
      '';
    };

    uiDomain = mkOption {
      type = types.str;
      default = fw.defaultUiDomain cfg.domain;
      defaultText = literalExpression ''"jobs.''${<parent of domain>}"'';
      example = "jobs.example.org";
      description = ''
        The admin UI name. nginx proxies everything on it to Windmill (websockets included) and
        adds the `Authorization` header of the bootstrap's token, so that every visitor acts as
        the Windmill superadmin: it is served only behind an identity layer
        ({option}`ui.forwardAuth`, {option}`ui.nginxAuthConfig`), and answers 403 to every
        request without one.
      '';
    };

    ui = {
      forwardAuth = {
        enable = mkEnableOption ''
          the seed's forward auth in front of the admin UI: nginx sends every request for the
          UI (websocket upgrades included) as a subrequest to {option}`ui.forwardAuth.authzUrl`
          (Authelia's AuthRequest endpoint, Authelia 4.38 or newer) and serves it only on a 2xx
          answer; a 401 (no session) redirects the browser to sign in, a 403 refuses it, and an
          unreachable portal fails the request'';
        authzUrl = mkOption {
          type = types.str;
          default = "http://127.0.0.1:9091/api/authz/auth-request";
          description = "The portal's auth-request endpoint nginx asks for every UI request.";
        };
        signInUrl = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "https://auth.example.org/";
          description = ''
            Where a browser without a session is sent, as `<signInUrl>?rd=<requested URL>`.
            Null: to the `Location` the portal answers its 401 with (Authelia does, from its
            `session.cookies[].authelia_url`).
          '';
        };
        policy = mkOption {
          type = types.enum [
            "one_factor"
            "two_factor"
          ];
          default = "one_factor";
          description = "The portal's policy for the UI name (in {option}`ui.forwardAuth.accessControlRule`).";
        };
        allowedGroups = mkOption {
          type = types.listOf types.str;
          default = [ "fediversity-admins" ];
          description = "The portal's groups allowed on the UI name (in {option}`ui.forwardAuth.accessControlRule`).";
        };
        autheliaInstance = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "main";
          description = ''
            The instance of this node's Authelia (`services.authelia.instances.<name>`) that is
            the UI's portal: the module adds {option}`ui.forwardAuth.accessControlRule` to its
            `settings.access_control.rules`, first (Authelia takes the first rule that
            matches). Null: the module adds nothing; then evaluation fails if this node runs an
            Authelia instance whose rules lack it, and warns (until
            {option}`ui.forwardAuth.ruleAddedToPortal`) if the portal runs elsewhere.
          '';
        };
        ruleAddedToPortal = mkOption {
          type = types.bool;
          default = false;
          description = ''
            The portal runs on another node and its `access_control.rules` hold
            {option}`ui.forwardAuth.accessControlRule`: set this to say so, which ends the
            warning that reminds of it.
          '';
        };
        accessControlRule = mkOption {
          type = types.attrsOf types.anything;
          readOnly = true;
          default = fw.autheliaAccessControlRule {
            inherit (cfg) uiDomain;
            inherit (cfg.ui.forwardAuth) policy allowedGroups;
          };
          defaultText = literalExpression ''{ domain = [ uiDomain ]; policy = "one_factor"; subject = [ "group:fediversity-admins" ]; }'';
          description = ''
            The rule the portal must have for the UI name, in Authelia's `access_control.rules`
            format: the portal, not nginx, decides the policy and the groups. Added to this
            node's Authelia by {option}`ui.forwardAuth.autheliaInstance`; a portal on another
            node needs it in its own configuration.
          '';
        };
      };

      nginxAuthConfig = mkOption {
        type = types.nullOr types.lines;
        default = null;
        example = ''
          auth_request /oauth2/auth;
          error_page 401 =302 /oauth2/sign_in?rd=$scheme://$http_host$request_uri;
        '';
        description = ''
          nginx configuration placed in the UI vhost's `location /` before the token include
          (after the forward auth's, when both are set): the hook for another identity layer.
          Locations it needs (e.g. `/oauth2/`) go into
          `services.nginx.virtualHosts.<uiDomain>.locations`. (Formerly `uiForwardAuth`.)
        '';
      };

      dangerouslyServeWithoutAuthentication = mkOption {
        type = types.bool;
        default = false;
        description = ''
          Serve the admin UI with the superadmin's token to whoever reaches
          {option}`uiDomain`, without any identity layer. For VM tests and laptops only:
          anyone who can connect controls every deployment. Without this and without an
          identity layer, the UI vhost answers 403 to everything.
        '';
      };
    };

    tls = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = ''
          HTTPS for {option}`domain` and {option}`uiDomain` (nginx's `forceSSL`: plain HTTP is
          redirected). Off: plain HTTP, for a node whose TLS ends in front of it.
        '';
      };
      useACMEHost = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = ''
          An existing `security.acme.certs.<name>` for both names (it must cover both). With
          neither this nor {option}`tls.certificate`, each name gets its own ACME certificate
          (`enableACME`; set `security.acme.acceptTerms` and `security.acme.defaults.email`).
        '';
      };
      certificate = mkOption {
        type = types.nullOr absolutePath;
        default = null;
        description = "A certificate file for both names (with {option}`tls.certificateKey`), read by nginx at run time.";
      };
      certificateKey = mkOption {
        type = types.nullOr absolutePath;
        default = null;
        description = "Its key file: a path string, never copied into the Nix store.";
      };
    };

    deployEnv = mkOption {
      type = types.attrsOf types.str;
      default = { };
      example = literalExpression ''
        {
          DEPLOYMENT_ROOT = "''${deployment-repository}";
          STATE_BASE_ADDRESS = "https://state.example.org/tofu";
        }
      '';
      description = ''
        Node-owned keys of every deployment, rendered to `${fw.paths.deployEnv}`: the control
        keys `DEPLOYMENT_ROOT` (required; default: {option}`deploymentRepository`'s tree) and
        `DEPLOYMENT_NIXPKGS` (default: the node's `pkgs.path`), `NIX_BUILD_SHELL` (default:
        `pkgs.bashInteractive`'s bash, so that a job whose shell jobenv cached evaluates
        nothing), `STATE_BASE_ADDRESS`, any
        declared key the node fixes (the structural pins, the repository's `nodeEnvKeys`; the
        Incus store's key paths are added for the configured {option}`credentials`), and
        Nix/OpenTofu variables. A payload never overrides a key set here. Not for secrets (world-readable in the Nix store): use
        {option}`deploySecrets`. `DEPLOYMENT_NIXPKGS` is also the `nixpkgs` entry of the node's
        flake registry (so, on a flake-built node, also `<nixpkgs>`). A key jobenv would refuse
        (undeclared, reserved, only for a job, derived by jobenv, or set twice) fails the
        evaluation.
      '';
    };

    deploymentRepository = mkOption {
      type = types.nullOr types.path;
      default = null;
      example = literalExpression "inputs.deployments";
      description = ''
        The deployment repository the node follows: a flake (e.g. the input
        `inputs.deployments`) or a path whose `default.nix` evaluates to the same outputs.
        From it the module takes `deployEnv.DEPLOYMENT_ROOT` (the repository's tree: a flake's
        git-tracked files; a path is copied whole), the declared keys with their descriptions
        and defaults (`lib.deployEnvKeys`, every set of `lib.deployEnvKeysByMethod`,
        `lib.standaloneEnvKeys`: each a list of names or an attrset of name → description or
        `{ description; default; }`), which keys are node-only (`lib.nodeEnvKeys`, same
        shapes: a front-end's value for one is dropped) and the deployment attributes
        (`lib.deploymentAttributeNames`, a list of names, as seed 001 publishes it; a
        repository without it has every name of its `devShells.<system>` taken, with an
        evaluation warning).
        {option}`deployKeys` and {option}`deploymentAttributes` add to these or override them.
        DEPLOYMENT_ROOT must hold a `default.nix` with those `devShells` (jobenv runs
        `nix-shell <DEPLOYMENT_ROOT> -A devShells.<SYSTEM>.<ATTRIBUTE>`). Null: everything
        comes from the options.
      '';
    };

    deployKeys = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = {
            description = mkOption {
              type = types.nullOr types.str;
              default = null;
              description = ''
                What the key means (shown by `fediversity-jobenv keys`). Null: the deployment
                repository's description; a key neither declares fails the evaluation.
              '';
            };
            default = mkOption {
              type = types.nullOr types.str;
              default = null;
              description = "The value a deployment gets when nothing sets the key. Null: the repository's default, if any.";
            };
            nodeOnly = mkOption {
              type = types.nullOr types.bool;
              default = null;
              description = ''
                Whether only the node may set the key: a payload's value for it is dropped with
                a warning (the node's own value, from {option}`deployEnv` or a secret, wins
                either way). Null: node-only for the structural pins, the repository's
                `nodeEnvKeys` and the Incus store's key paths, not for other keys. `false` on a
                pin lets a front-end choose it: only for a front-end trusted with what a deploy
                evaluates.
              '';
            };
          };
        }
      );
      default = { };
      example = literalExpression ''
        {
          DOMAIN = { description = "The domain the deployment serves"; default = "example.org"; };
          HOSTING_CONFIG.nodeOnly = false;  # this node's front-end may choose the hosting configuration
        }
      '';
      description = ''
        Keys a deployment may see, added to (or, field by field, overriding) those of
        {option}`deploymentRepository` and the structural pins (`HOSTING_CONFIG`,
        `PIN_EFFECT`, `SELF_MODULE_SOURCE`, `OPERATOR_MODULE_SOURCE`, `VERSION_LAYERS`,
        `DNS_DOMAIN`, node-only), all rendered to `${fw.paths.deployKeys}`. A job payload may
        set only declared keys that are not node-only (and `SYSTEM`, `ATTRIBUTE`, `EXECUTABLE`,
        `NAMESPACE`, `BUILD_ID`). A control key here fails the evaluation (jobenv refuses such
        a file); control keys the repository lists are left out (jobenv handles them itself).
      '';
    };

    deploymentAttributes = mkOption {
      type = types.listOf (types.strMatching fw.attributePattern);
      default = [ ];
      example = [
        "mastodon-tofu-vm"
        "peertube-tofu-vm"
      ];
      description = ''
        Deployment attributes added to those of {option}`deploymentRepository`, all rendered
        (sorted, without repeats) to `${fw.paths.deploymentAttributes}`. A job's `ATTRIBUTE`
        must be one of them.
      '';
    };

    openbaoPrefix = mkOption {
      type = types.strMatching "[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*";
      default = "fediversity";
      description = ''
        The seed's OpenBao prefix: its KV v2 mount is `<openbaoPrefix>/secret`. The defaults of
        {option}`credentials.tfToken` and {option}`bootstrap.openbao.path` are under it.
      '';
    };

    deploySecrets = mkOption {
      type = types.attrsOf types.str;
      default = { };
      example = literalExpression ''
        {
          TF_VAR_hcloud_token = '''{{ with secret "secret/data/deploy/hcloud" }}{{ .Data.data.token }}{{ end }}''';
        }
      '';
      description = ''
        Deploy secrets: variable name → OpenBao agent template source. Each becomes one file
        `${fw.paths.secretsDir}/<name>`, owner `root:<windmill user>`, mode `0440`, which jobenv
        passes to the deployment programs and redacts from their output. Every name is also
        listed in `${fw.paths.requiredSecrets}`: jobenv refuses a job ("node not ready", exit
        75) while one of them is missing. The node's agent renders them
        ({option}`openbaoAgentTemplates`).
      '';
    };

    credentials = {
      hostName = mkOption {
        type = types.strMatching "[A-Za-z0-9][A-Za-z0-9_.-]*";
        default = config.networking.hostName;
        defaultText = literalExpression "config.networking.hostName";
        description = "The node's name in the seed's OpenBao paths (`incus-deploy/<hostName>/…`).";
      };
      tfToken = mkOption {
        type = types.nullOr types.str;
        default = fw.seedTfTokenTemplate {
          prefix = cfg.openbaoPrefix;
          inherit (cfg.credentials) hostName;
        };
        defaultText = literalExpression ''"{{ with secret \"''${openbaoPrefix}/secret/data/incus-deploy/''${credentials.hostName}/tokenHosts\" }}{{ .Data.data.value }}{{ end }}"'';
        example = ''{{ with secret "secret/data/incus/deploy" }}{{ .Data.data.token }}{{ end }}'';
        description = ''
          OpenBao agent template source whose output is the Incus deployments' token; by
          default the seed's source (the field `value` of `incus-deploy/<hostName>/tokenHosts`
          in the KV v2 mount `<openbaoPrefix>/secret`). Rendered as the line
          `TF_VAR_token=<output>` to `${fw.paths.tfTokenEnv}` (`root:<windmill user>`, `0440`),
          a secrets env file of jobenv (`JOBENV_SECRETS_ENV_FILES`): `TF_VAR_token` reaches the
          programs as a secret, redacted from their output, and is required before a job runs.
          Null: no Incus token (a node without Incus deployments).
        '';
      };
      incusStoreSshKey = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = ''
          OpenBao agent template source of the Incus store's SSH key, rendered to
          `${fw.paths.incusStoreSshKey}` (`root:<windmill user>`, `0440`); its path reaches the
          programs as {option}`credentials.incusStoreSshKeyVariable`.
        '';
      };
      incusStoreSshKeyVariable = mkOption {
        type = types.nullOr (types.strMatching "[A-Za-z_][A-Za-z0-9_]*");
        default = "INCUS_STORE_SSH_KEY_FILE";
        description = ''
          The node-owned, node-only key whose value is `${fw.paths.incusStoreSshKey}` when
          {option}`credentials.incusStoreSshKey` is set (in deploy-env.json, declared in the
          keys file). Null: the path is not passed.
        '';
      };
      incusStoreSigningKey = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = ''
          OpenBao agent template source of the Incus store's signing key, rendered to
          `${fw.paths.incusStoreSigningKey}` (`root:<windmill user>`, `0440`); its path reaches
          the programs as {option}`credentials.incusStoreSigningKeyVariable`.
        '';
      };
      incusStoreSigningKeyVariable = mkOption {
        type = types.nullOr (types.strMatching "[A-Za-z_][A-Za-z0-9_]*");
        default = "INCUS_STORE_SIGNING_KEY_FILE";
        description = ''
          The node-owned, node-only key whose value is `${fw.paths.incusStoreSigningKey}` when
          {option}`credentials.incusStoreSigningKey` is set. Null: the path is not passed.
        '';
      };
    };

    openbaoAgentTemplates = mkOption {
      type = types.listOf (types.attrsOf types.anything);
      readOnly = true;
      default = fw.agentTemplates {
        inherit (cfg) deploySecrets credentials backup;
        group = windmillUser;
      };
      defaultText = literalExpression "template stanzas rendering deploySecrets and credentials";
      description = ''
        The `template` stanzas (OpenBao agent JSON configuration) of every file the module
        needs rendered: {option}`deploySecrets` and {option}`credentials`, each `perms` 0440,
        `group` the Windmill user's, `error_on_missing_key`. The agent must run as root so that
        it can set the group. {option}`openbaoAgent.enable` runs such an agent; a node whose
        hosting provider runs its own adds these stanzas to that agent's `template` list.
      '';
    };

    openbaoAgent = {
      unit = mkOption {
        type = types.str;
        default = fw.agentUnit;
        description = ''
          The systemd unit of the agent that renders {option}`openbaoAgentTemplates` (and,
          usually, the bootstrap's admin password). The Windmill units and the bootstrap are
          ordered after it.
        '';
      };
      enable = mkEnableOption ''
        an OpenBao agent run by this module as `${fw.agentUnit}` (as root, `bao agent`), with
        {option}`openbaoAgentTemplates` before the `template` stanzas of
        {option}`openbaoAgent.settings`. (nixpkgs' `services.vault-agent` passes the `agent`
        subcommand only to a package named `vault`, so it does not run OpenBao as is.)'';
      package = mkOption {
        type = types.package;
        default = pkgs.openbao;
        defaultText = literalExpression "pkgs.openbao";
        description = "The OpenBao providing `bin/bao`.";
      };
      settings = mkOption {
        type = (pkgs.formats.json { }).type;
        default = { };
        example = literalExpression ''
          {
            vault.address = "https://openbao.example.org";
            auto_auth.method = [ { type = "approle"; config = { role_id_file_path = "/run/keys/role-id"; secret_id_file_path = "/run/keys/secret-id"; }; } ];
            template_config.exit_on_retry_failure = true;
          }
        '';
        description = "The agent's JSON configuration (address, `auto_auth`, more templates).";
      };
    };

    readinessTimeout = mkOption {
      type = seconds;
      default = 60;
      description = ''
        Seconds `windmill-worker` waits, before it starts, for the agent to have rendered every
        file of {option}`deploySecrets` and {option}`credentials`. When they are not all there
        by then, its start fails (naming the missing files) and it is started again 5 s later,
        until they are: no job runs on a node without its credentials.
      '';
    };

    jobs = {
      timeout = mkOption {
        type = types.nullOr seconds;
        default = null;
        example = 3600;
        description = ''
          Wall-clock limit of a deployment program, in seconds (jobenv's `JOBENV_TIMEOUT`): at
          the limit jobenv stops the program tree (SIGTERM, {option}`jobs.grace`, SIGKILL) and
          the job fails as timed out. Null: no limit of jobenv's own. Keep it below Windmill's
          own job timeout (the worker's `TIMEOUT`), which would otherwise end the job first
          with Windmill's error instead of jobenv's result.
        '';
      };
      grace = mkOption {
        type = seconds;
        default = fw.jobenvGraceSeconds;
        description = ''
          Seconds between SIGTERM and SIGKILL of a program tree that jobenv stops (a cancel, a
          timeout, a drain; `JOBENV_GRACE`). The worker's `MAX_WAIT_FOR_SIGINT` is this plus 7 s
          (Windmill SIGKILLs a cancelled job's process group after that), and the worker's
          `TimeoutStopSec` counts it too. In cluster mode (`cluster.dsnFile`) at most
          ${toString fw.jobenvNames.defaults.clusterMaxGraceSeconds} s, so that a stop ends
          before the namespace's lease can expire (evaluation fails otherwise).
        '';
      };
      lockWait = mkOption {
        type = types.ints.unsigned;
        default = 0;
        example = 900;
        description = ''
          Seconds a job waits for another job of the same namespace to finish
          (`JOBENV_LOCK_TIMEOUT`); 0 refuses the second job at once. A waiting job holds its
          worker, so with one worker a second deploy waits in Windmill's queue instead and
          this matters only with more workers.
        '';
      };
    };

    cluster.dsnFile = mkOption {
      type = types.nullOr absolutePath;
      default = null;
      example = "/run/fediversity-windmill/jobenv-cluster-dsn";
      description = ''
        Cluster mode of jobenv (`JOBENV_CLUSTER_DSN_FILE`), for a Windmill whose workers run on
        more than one node: a file holding the connection string of a PostgreSQL database
        (Windmill's own will do) that every node's jobenv shares. The journal's decision on a job
        id and the lock of one deploy per namespace are then leases in it, so both hold across the
        nodes. The file is a secret (it holds the role's password; e.g. rendered by the OpenBao
        agent) and must be readable by the worker's user; the role needs only a schema
        `fediversity_jobenv` of its own (jobenv makes its tables there). A node that cannot reach
        the database runs no deploy (exit 75, not ready). Null: off, every node on its own.
        With `sslmode=require` in the connection string, jobenv speaks TLS to the database and
        verifies its certificate (chain and host name) against `cluster.caFile`, or the system's
        trust store; without it, the connection is plain (a local socket, a network you trust).
      '';
    };

    cluster.caFile = mkOption {
      type = types.nullOr absolutePath;
      default = null;
      example = "/etc/fediversity-windmill/jobenv-cluster-ca.pem";
      description = ''
        The CA certificates (PEM) that the cluster database's certificate is verified against
        (`JOBENV_CLUSTER_CA_FILE`), instead of the system's trust store: for a database whose
        certificate a private CA issued. Needs `cluster.dsnFile` with `sslmode=require`. Null:
        the system's trust store.
      '';
    };

    drainTimeout = mkOption {
      type = seconds;
      default = 300;
      description = ''
        Seconds a running deploy may go on when `windmill-worker` stops (a stop, a restart by
        `nixos-rebuild switch`, a reboot). The worker first stops taking jobs; deploys still
        running after this are cancelled through jobenv (SIGTERM, its grace, SIGKILL of the
        program tree) and recorded as interrupted by the stop. The unit's `TimeoutStopSec` is
        this plus jobenv's grace plus ${toString fw.stopMarginSeconds} s.
      '';
    };

    smtp = {
      host = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "smtp.example.org";
        description = "The SMTP server windmill-server sends mail through (`SMTP_HOST`); null: no SMTP.";
      };
      port = opt types.port 587 "`SMTP_PORT`.";
      username = opt (types.nullOr types.str) null "`SMTP_USERNAME`.";
      passwordFile = mkOption {
        type = types.nullOr absolutePath;
        default = null;
        example = "/run/fediversity-windmill/smtp-password";
        description = ''
          File holding the SMTP password. systemd hands it to windmill-server as a credential
          at start (LoadCredential), and a launcher exports it as `SMTP_PASSWORD`: it is never
          in the Nix store nor in the unit's environment.
        '';
      };
      from = mkOption {
        type = types.str;
        default = "noreply@${cfg.domain}";
        defaultText = literalExpression ''"noreply@''${domain}"'';
        description = "`SMTP_FROM`.";
      };
      tlsImplicit = opt types.bool false "`SMTP_TLS_IMPLICIT`: TLS from the first byte (port 465) rather than STARTTLS.";
    };

    backup = {
      enable = mkEnableOption ''
        a restic backup of Windmill's database (seed 002 FR-015): `pg_dump` streamed into
        restic (0.17 or newer, `--stdin-from-command`) as root, on a timer, to
        {option}`backup.repository`, with credentials the OpenBao agent renders root-only'';
      repository = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "s3:https://garage.example.org/windmill-backups";
        description = ''
          The restic repository (`RESTIC_REPOSITORY`): the seed's Garage bucket
          `windmill-backups` in the example. It holds no credential: those come from
          {option}`backup.environmentTemplate`.
        '';
      };
      passwordTemplate = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = ''{{ with secret "fediversity/secret/data/windmill/backup" }}{{ .Data.data.resticPassword }}{{ end }}'';
        description = ''
          OpenBao agent template source of the repository's password, rendered to
          `${fw.paths.backupPassword}` (root, `0400`) and read by restic from there
          (`RESTIC_PASSWORD_FILE`). Required with {option}`backup.enable`.
        '';
      };
      environmentTemplate = mkOption {
        type = types.nullOr types.lines;
        default = null;
        example = ''
          {{ with secret "fediversity/secret/data/garage/windmill-backups" }}
          AWS_ACCESS_KEY_ID={{ .Data.data.accessKeyId }}
          AWS_SECRET_ACCESS_KEY={{ .Data.data.secretAccessKey }}
          {{ end }}
          AWS_DEFAULT_REGION=garage
        '';
        description = ''
          OpenBao agent template source of the repository's credentials as `KEY=VALUE` lines
          (for S3: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), rendered to
          `${fw.paths.backupEnvironment}` (root, `0400`), the backup unit's `EnvironmentFile`.
          Null: none (a local or SFTP repository).
        '';
      };
      timerConfig = mkOption {
        type = types.attrsOf types.str;
        default = {
          OnCalendar = "daily";
          RandomizedDelaySec = "1h";
          Persistent = "true";
        };
        description = "When the backup runs (`systemd.timers.fediversity-windmill-backup.timerConfig`).";
      };
      pruneOpts = mkOption {
        type = types.listOf types.str;
        default = [
          "--keep-daily 7"
          "--keep-weekly 5"
          "--keep-monthly 12"
        ];
        description = "Options of `restic forget --prune` after each backup (its snapshots only); `[ ]`: keep every snapshot.";
      };
      initialize = opt types.bool true "Create the repository (`restic init`) when it does not exist yet.";
      dumpCommand = mkOption {
        type = types.nullOr (types.listOf types.str);
        default = null;
        example = [
          "/run/current-system/sw/bin/pg_dump"
          "--dbname=postgresql://windmill@db.example.org/windmill"
        ];
        description = ''
          The program (and its arguments) whose output is backed up, run by restic without a
          shell. Null: `pg_dump` of the local database (`services.windmill.database.name`) as
          the `postgres` superuser, in a clean environment. A node whose database is elsewhere
          sets this (with its credentials from a file such as `PGPASSFILE`, never in the
          arguments, which every local user can read).
        '';
      };
      package = mkOption {
        type = types.package;
        default = pkgs.restic;
        defaultText = literalExpression "pkgs.restic";
        description = "The restic (0.17 or newer) that runs the backup.";
      };
    };

    otel.endpoint = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "http://127.0.0.1:4318";
      description = ''
        The OpenTelemetry collector's OTLP endpoint, for every deploy's trace and log
        (`fediversity-jobenv`) and Windmill's traces, metrics and logs. Set, each Windmill unit
        gets `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL` (`otel.protocol`),
        `OTEL_SERVICE_NAME=windmill-<role>`, `OTEL_RESOURCE_ATTRIBUTES` (`otel.resourceAttributes`)
        and `OTEL_TRACING`, `OTEL_METRICS`, `OTEL_LOGS` set to `true`; the worker passes the
        endpoint, protocol and resource attributes to its jobs, where jobenv exports each deploy
        as one trace with its log (docs/operators/telemetry.md). Known deviation: Windmill
        emits nothing unless it is built with its `otel` feature, which nixpkgs' package has
        only with `withEnterpriseFeatures`; with nixpkgs' Windmill only jobenv's signals leave
        the node.
      '';
    };

    otel.protocol = mkOption {
      type = types.enum [
        "http/protobuf"
        "grpc"
        "http/json"
      ];
      default = "http/protobuf";
      description = ''
        The OTLP protocol (`OTEL_EXPORTER_OTLP_PROTOCOL`). jobenv exports `http/protobuf` only:
        with another protocol the node's deploys are not exported (the evaluation warns).
      '';
    };

    otel.headersFile = mkOption {
      type = types.nullOr absolutePath;
      default = null;
      example = "/run/fediversity-windmill/otel-headers";
      description = ''
        A file holding the headers of every export request, in `OTEL_EXPORTER_OTLP_HEADERS`'
        form (`key=value`, values percent-encoded; one per line or separated by commas): the
        collector's API key, e.g. `authorization=Bearer%20<key>` rendered by the OpenBao agent.
        A secret: systemd reads it as root and hands it to each Windmill unit as a credential
        (never in the Nix store or a unit file); Windmill gets it as
        `OTEL_EXPORTER_OTLP_HEADERS`, jobenv reads it from the worker's credential
        (`JOBENV_OTLP_HEADERS_FILE`), never from an environment variable, and redacts it from
        every deploy's output. Null: no headers.
      '';
    };

    otel.resourceAttributes = mkOption {
      type = types.attrsOf types.str;
      default = {
        "service.namespace" = "fediversity";
      };
      example = {
        "service.namespace" = "fediversity";
        "deployment.environment.name" = "production";
      };
      description = ''
        The resource attributes every service of the node reports (`OTEL_RESOURCE_ATTRIBUTES`,
        values percent-encoded where needed): Windmill's units and jobenv alike.
      '';
    };

    bootstrap = {
      windmill = {
        url = mkOption {
          type = types.str;
          default = "http://127.0.0.1:${toString config.services.windmill.serverPort}";
          defaultText = literalExpression ''"http://127.0.0.1:''${toString config.services.windmill.serverPort}"'';
          description = "Where the bootstrap reaches Windmill's API.";
        };
        adminEmail = opt types.str d.windmill.adminEmail "The superadmin whose password the bootstrap enforces.";
        adminPasswordFile = mkOption {
          type = types.nullOr absolutePath;
          default = null;
          example = "/run/fediversity-windmill/admin-password";
          description = ''
            File holding the node's superadmin password (e.g. rendered by the OpenBao agent).
            When it changes, the bootstrap runs again. Null (the seed's way, FR-008): the node
            generates one, once, before the bootstrap's first run: 32 random bytes as 64 hex
            digits in `${fw.paths.generatedAdminPassword}` (root-only, mode 0400, in a 0700
            directory; never in the Nix store nor in a log). It is never changed by the node
            again, reboots and rebuilds included; read it there as root to sign in.
          '';
        };
        defaultPassword = opt types.str d.windmill.defaultPassword "The password of a fresh Windmill instance.";
        databaseUrl = mkOption {
          type = types.nullOr types.str;
          default = if localDatabaseAccess then localDatabase.dsn else null;
          defaultText = literalExpression ''if config.services.windmill.database.createLocally && databaseUrlFile == null then "host=/run/postgresql port=5432 dbname=windmill user=windmill" else null'';
          example = "host=/run/postgresql port=5432 dbname=windmill user=windmill";
          description = ''
            The DSN of Windmill's PostgreSQL database, without a secret: the bootstrap writes
            the superadmin's password hash there itself (Windmill CE cannot set a password). It
            is a setting, in the world-readable configuration: a DSN with a password fails the
            evaluation (it belongs in {option}`bootstrap.windmill.databaseUrlFile`). On nixpkgs'
            local database (`services.windmill.database.createLocally`, nixpkgs' default) the
            module sets it to the Unix socket and the role nixpkgs creates, and lets the
            bootstrap (root) in as that role by peer authentication: a pg_ident map
            (`${fw.localDatabaseMap}`: root and the role itself to the role) on a pg_hba line
            for that database and role only, before nixpkgs' `local all all peer`. No password
            is involved.
          '';
        };
        databaseUrlFile = mkOption {
          type = types.nullOr absolutePath;
          default = null;
          example = "/run/fediversity-windmill/database-url";
          description = ''
            File holding the DSN of Windmill's PostgreSQL database, for a database the node does
            not create ({option}`bootstrap.windmill.databaseUrl` is for the local one): read at
            run time, never in the Nix store, so it may hold a password (over TCP). Setting it
            replaces the local DSN.
          '';
        };
        databaseRole = opt types.str d.windmill.databaseRole "The role the bootstrap `SET ROLE`s to before it writes the hash.";
      };
      workspace = {
        id = opt types.str d.workspace.id "The Windmill workspace of the deploy scripts.";
        name = opt types.str d.workspace.name "Its display name.";
        folder = opt types.str d.workspace.folder "The folder of the scripts (`f/<folder>/...`).";
      };
      scriptsDir = mkOption {
        type = types.either types.package absolutePath;
        default = cfg.scriptsPackage;
        defaultText = literalExpression "config.services.fediversity-windmill.scriptsPackage";
        description = "The tree the bootstrap uploads: relative paths are the Windmill paths.";
      };
      token = {
        label = opt tokenLabel d.token.label ''
          The label of the front-end's API token, the one the bootstrap stores in OpenBao
          ({option}`bootstrap.openbao.path`).
        '';
        revokePrevious = opt types.bool d.token.revokePrevious "Delete older tokens of each label (the front-end's and the UI's) once the new one is stored.";
        scopes = mkOption {
          type = types.nullOr (types.listOf (types.strMatching "[^[:space:]]+"));
          default = d.token.scopes;
          example = [
            "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy"
            "users:read"
          ];
          description = ''
            The Windmill scopes of the front-end's token (the bootstrap's `token.scopes`). Null:
            the bootstrap's default, `jobs:run:scripts:f/<folder>/deploy,f/<folder>/destroy` and
            `jobs:write`: run the two scripts, read and cancel the jobs the operator may see; a
            leaked token then cannot run other code on the worker nor change the scripts (the
            bootstrap refuses every scope that grants code execution, and proves the limits
            before it stores the token). `[ ]`: an unscoped token with its operator's rights,
            accepted with a warning here and by the bootstrap. The UI include always gets a token
            of its own with full rights ({option}`bootstrap.uiAuth.tokenLabel`).
          '';
        };
        userEmail = opt types.str d.token.userEmail ''
          The email of the workspace operator the front-end's token belongs to
          (`token.user_email`): a member of the workspace with the operator role and read on the
          folder, without a password or an instance account, whose jobs run with its rights.
        '';
        username = opt (types.strMatching "[A-Za-z][A-Za-z0-9_]*") d.token.username ''
          The operator's username where Windmill does not derive it from the email
          (`token.username`; a fresh instance derives it).
        '';
        bindToWorkspace = opt types.bool d.token.bindToWorkspace ''
          Bind the front-end's token to the workspace (`token.bind_to_workspace`): every route
          outside it answers 401. A front-end that drives Windmill through the `wmill` CLI
          needs an unbound token (and a scope such as `users:read`); one that calls the HTTP
          API needs nothing else.
        '';
      };
      settings = mkOption {
        type = types.attrsOf (pkgs.formats.json { }).type;
        default = d.settings // {
          instance_python_version = windmillPythonVersion;
        };
        defaultText = literalExpression ''{ instance_python_version = "<major.minor of the Python nixpkgs' Windmill runs>"; }'';
        description = ''
          Windmill global settings the bootstrap enforces. `instance_python_version` follows
          the Python of nixpkgs' `pkgs.windmill` (its package refuses every other version);
          with another {option}`windmillPackage`, set it to that package's Python.
        '';
      };
      openbao = {
        addr = mkOption {
          type = types.nullOr types.str;
          default = d.openbao.addr;
          example = "http://127.0.0.1:8100";
          description = "OpenBao (or agent listener) address; null: `$BAO_ADDR`, then `$VAULT_ADDR` of the unit.";
        };
        tokenFile = mkOption {
          type = types.nullOr absolutePath;
          default = d.openbao.tokenFile;
          description = "File with an OpenBao token; null for an agent listener with auto-auth (or `$BAO_TOKEN`).";
        };
        path = mkOption {
          type = types.str;
          default = "${cfg.openbaoPrefix}/secret/windmill/apiToken";
          defaultText = literalExpression ''"''${openbaoPrefix}/secret/windmill/apiToken"'';
          description = "The `bao kv put` path the front-end's API token is stored at (where the seed's front-end reads it).";
        };
        field = opt types.str d.openbao.field "The field of that secret holding the token.";
      };
      uiAuth = {
        file = opt absolutePath d.uiAuth.file "The nginx include the bootstrap writes (the UI vhost includes `*.conf` of its directory).";
        owner = opt types.str d.uiAuth.owner "Owner of that file.";
        group = mkOption {
          type = types.str;
          default = config.services.nginx.group;
          defaultText = literalExpression "config.services.nginx.group";
          description = "Group of that file (nginx must read it).";
        };
        mode = opt (types.strMatching "0?[0-7]{3}") d.uiAuth.mode "Mode of that file, octal.";
        tokenLabel = opt tokenLabel d.uiAuth.tokenLabel ''
          The label of the UI include's own token (`ui_auth.label`), which has full rights: the
          admins behind the identity layer act as the superadmin. Must differ from
          {option}`bootstrap.token.label` (the bootstrap revokes the older tokens of each).
        '';
      };
      retry = {
        loginAttempts = opt types.ints.positive d.retry.loginAttempts "Logins tried after writing the password hash.";
        delaySeconds = opt types.ints.unsigned d.retry.delaySeconds "Seconds between those logins.";
        readyTimeoutSeconds = opt types.ints.positive d.retry.readyTimeoutSeconds "How long to wait for Windmill to answer `GET /api/version`.";
      };
    };
  };

  config = mkIf cfg.enable {
    assertions =
      let
        unit = config.systemd.services.fediversity-windmill-bootstrap;
      in
      map
        (message: {
          assertion = false;
          message = "services.fediversity-windmill: ${message}";
        })
        (
          fw.nodeProblems {
            inherit (cfg) deployEnv deploySecrets;
            declared = builtins.attrNames declaredKeys;
            inherit (cfg.credentials) tfToken;
          }
          ++ fw.deployKeysProblems cfg.deployKeys
          ++ fw.undescribedKeyProblems declaredKeys
          ++ fw.repositoryProblems {
            published = if published == null then null else published.published;
            inherit system repositoryKeys;
            operatorKeys = cfg.deployKeys;
            attributes = deploymentAttributes;
          }
          ++ fw.bootstrapProblems {
            inherit (cfg) bootstrap;
            unitEnvironment = unit.environment;
            unitEnvironmentFile = unit.serviceConfig.EnvironmentFile or null;
          }
          ++ uiAccess.problems
          ++ lib.optionals forwardAuthOn portalRule.problems
          ++ fw.tlsProblems tls
          ++ lib.optional (cfg.openbaoAgent.enable && cfg.openbaoAgent.unit != fw.agentUnit) "openbaoAgent.enable runs the agent as ${fw.agentUnit}; openbaoAgent.unit must name it"
          ++ lib.optional (cfg.smtp.passwordFile != null && cfg.smtp.host == null) "smtp.passwordFile is set but smtp.host is not"
          ++ lib.optional (cfg.cluster.caFile != null && cfg.cluster.dsnFile == null) "cluster.caFile is set but cluster.dsnFile is not: the CA is for cluster mode's database"
          ++ fw.clusterGraceProblems {
            inherit (cfg.jobs) grace;
            clusterOn = cfg.cluster.dsnFile != null;
          }
          ++ fw.backupProblems {
            inherit (cfg) backup;
            localDatabase = config.services.windmill.database.createLocally;
          }
        );

    warnings =
      map (w: "services.fediversity-windmill: ${w}") (fw.bootstrapWarnings cfg.bootstrap)
      ++ map (w: "services.fediversity-windmill: ${w}") (fw.otelWarnings { inherit (cfg.otel) endpoint protocol; })
      ++ map (w: "services.fediversity-windmill: ${w}") (lib.optionals (published != null) (fw.repositoryWarnings published))
      ++ map (
        key:
        "services.fediversity-windmill: the deployment repository's nodeEnvKeys names ${key}, which no node source sets (deployEnv, deploySecrets, credentials) and which has no default: deployments get no ${key}"
      ) (fw.unsetNodeKeys {
        inherit repositoryKeys;
        nodeSet =
          builtins.attrNames cfg.deployEnv
          ++ builtins.attrNames cfg.deploySecrets
          ++ fw.credentialEnvKeys { inherit (cfg.credentials) tfToken; };
      })
      ++ map (w: "services.fediversity-windmill: ${w}") (lib.optionals forwardAuthOn portalRule.warnings)
      ++ lib.optional (uiAccess.mode == "closed") ''
        services.fediversity-windmill: the admin UI on ${cfg.uiDomain} answers 403 to every
        request: no identity layer is configured (ui.forwardAuth.enable, ui.nginxAuthConfig).
      ''
      ++ lib.optional (uiAccess.mode == "open") ''
        services.fediversity-windmill: ui.dangerouslyServeWithoutAuthentication is set: the admin
        UI on ${cfg.uiDomain} gives every visitor the Windmill superadmin's token.
      '';

    services.windmill.enable = true;

    # The bootstrap's way into nixpkgs' local database (lib.nix, `localDatabase`): before
    # nixpkgs' `local all all peer`, which would refuse root as the role.
    services.postgresql.identMap = mkIf usesLocalDatabase localDatabase.identMap;
    services.postgresql.authentication = mkIf usesLocalDatabase (lib.mkBefore localDatabase.authentication);
    services.windmill.baseUrl = mkDefault "https://${cfg.uiDomain}";

    services.fediversity-windmill.deployEnv = mkMerge [
      {
        DEPLOYMENT_NIXPKGS = mkDefault "${pkgs.path}";
        # The bash nix-shell enters a job's shell with: without it, nix-shell evaluates
        # `<nixpkgs>`'s bashInteractive in every job, even one whose shell jobenv has cached.
        NIX_BUILD_SHELL = mkDefault "${pkgs.bashInteractive}/bin/bash";
      }
      # The repository's tree, in the store ("${…}" copies a path; a flake is its source).
      (mkIf (cfg.deploymentRepository != null) { DEPLOYMENT_ROOT = mkDefault "${cfg.deploymentRepository}"; })
      (builtins.mapAttrs (_: mkDefault) credentialPaths.values)
    ];

    users.users.${windmillUser} = {
      isSystemUser = true;
      group = windmillUser;
      description = "Windmill (server and workers)";
    };
    users.groups.${windmillUser} = { };

    environment.etc = {
      "fediversity-windmill/deploy-env.json".source = jsonFile "deploy-env.json" (fw.renderDeployEnv cfg.deployEnv);
      "fediversity-windmill/deploy-keys.json".source = jsonFile "deploy-keys.json" (fw.renderKeys declaredKeys);
      "fediversity-windmill/deployment-attributes.json".source = jsonFile "deployment-attributes.json" deploymentAttributes;
      "fediversity-windmill/required-secrets.json".source = jsonFile "required-secrets.json" (
        fw.renderRequiredSecrets {
          inherit (cfg) deploySecrets;
          inherit (cfg.credentials) tfToken;
        }
      );
      "fediversity-windmill/bootstrap.json".source = bootstrapConfig;
    };

    systemd.tmpfiles.rules = fw.tmpfilesRules {
      user = windmillUser;
      group = windmillUser;
      uiAuthFile = cfg.bootstrap.uiAuth.file;
      uiAuthGroup = cfg.bootstrap.uiAuth.group;
    };

    systemd.services = mkMerge [
      (fw.units {
        otel = {
          inherit (cfg.otel)
            endpoint
            protocol
            resourceAttributes
            headersFile
            ;
        };
        nixShell = "${config.nix.package}/bin/nix-shell";
        uiAuthFile = cfg.bootstrap.uiAuth.file;
        inherit (cfg.bootstrap.retry) readyTimeoutSeconds;
        agent = cfg.openbaoAgent.unit;
        secretsEnvFiles = lib.optional (cfg.credentials.tfToken != null) fw.paths.tfTokenEnv;
        smtp = fw.smtpEnvironment {
          inherit (cfg.smtp)
            host
            port
            username
            from
            tlsImplicit
            ;
        };
        smtpPasswordFile = cfg.smtp.passwordFile;
        inherit (cfg) jobs;
        clusterDsnFile = cfg.cluster.dsnFile;
        clusterCaFile = cfg.cluster.caFile;
        generatesAdminPassword = cfg.bootstrap.windmill.adminPasswordFile == null;
      })
      {
        # nixpkgs' module runs `pkgs.windmill`; it has no package option.
        windmill-server.serviceConfig.ExecStart = mkForce (windmillStart "server");
        windmill-worker-native.serviceConfig.ExecStart = mkForce (windmillStart "worker-native");
        windmill-worker = {
          path = map (name: workerPackages.${name}) fw.workerPath;
          serviceConfig =
            fw.workerLifecycle {
              inherit jobenv kill;
              install = "${pkgs.coreutils}/bin/install";
              waitForFiles = if waitForFiles == null then null else "${waitForFiles}";
              drainTimeoutSeconds = cfg.drainTimeout;
              readinessTimeoutSeconds = cfg.readinessTimeout;
              graceSeconds = cfg.jobs.grace;
            }
            // {
              ExecStart = mkForce (windmillStart "worker");
            };
        };
        fediversity-jobenv-prune = pruneUnits.service;
        fediversity-windmill-bootstrap = {
          serviceConfig.ExecStart = "${cfg.package}/bin/fediversity-windmill-bootstrap --config ${fw.paths.bootstrapConfig}";
          restartTriggers = [ bootstrapConfig ];
        };
        fediversity-windmill-bootstrap-rerun.serviceConfig.ExecStart = "${systemctl} try-restart --no-block fediversity-windmill-bootstrap.service";
        fediversity-windmill-nginx-reload.serviceConfig.ExecStart = "${systemctl} try-reload-or-restart --no-block nginx.service";
      }
      (mkIf (cfg.bootstrap.windmill.adminPasswordFile == null) {
        ${fw.adminPasswordUnit} = fw.adminPasswordService // {
          serviceConfig = fw.adminPasswordService.serviceConfig // {
            ExecStart = "${pkgs.writeShellScript "fediversity-windmill-generate-admin-password" (
              fw.adminPasswordScript (
                builtins.listToAttrs (
                  map (program: {
                    name = program;
                    value = "${pkgs.coreutils}/bin/${program}";
                  }) [ "od" "tr" "ln" "rm" "chmod" "mktemp" "sync" ]
                )
              )
            )}";
          };
        };
      })
      (mkIf (cfg.backup.enable && cfg.backup.repository != null) {
        fediversity-windmill-backup = fw.backupService {
          restic = "${cfg.backup.package}/bin/restic";
          inherit (cfg.backup) repository pruneOpts;
          dumpCommand =
            if cfg.backup.dumpCommand != null then
              cfg.backup.dumpCommand
            else
              fw.localDumpCommand {
                setpriv = "${pkgs.util-linux}/bin/setpriv";
                pgDump = "${config.services.postgresql.package}/bin/pg_dump";
                database = config.services.windmill.database.name;
              };
          initScript =
            if cfg.backup.initialize then
              "${pkgs.writeShellScript "fediversity-windmill-backup-init" (
                fw.backupInitScript { restic = "${cfg.backup.package}/bin/restic"; }
              )}"
            else
              null;
          hasEnvironmentFile = cfg.backup.environmentTemplate != null;
          agent = cfg.openbaoAgent.unit;
        };
      })
      (mkIf cfg.openbaoAgent.enable {
        openbao-agent-default = fw.agentService {
          bao = "${cfg.openbaoAgent.package}/bin/bao";
          inherit kill;
          configFile = agentConfigFile;
        } // {
          restartTriggers = [ agentConfigFile ];
        };
      })
    ];

    systemd.timers = mkMerge [
      { fediversity-jobenv-prune = pruneUnits.timer; }
      (mkIf (cfg.backup.enable && cfg.backup.repository != null) {
        fediversity-windmill-backup = {
          description = "Back up Windmill's database with restic (fediversity)";
          wantedBy = [ "timers.target" ];
          inherit (cfg.backup) timerConfig;
        };
      })
    ];

    # restic with the backup's repository and credentials, for restoring (as root).
    environment.systemPackages = lib.optional (cfg.backup.enable && cfg.backup.repository != null) (
      pkgs.writeShellScriptBin "fediversity-windmill-restic" (
        fw.resticWrapper {
          restic = "${cfg.backup.package}/bin/restic";
          inherit (cfg.backup) repository;
        }
      )
    );

    systemd.paths = fw.pathUnits {
      adminPasswordFile = fw.adminPasswordFileOf cfg.bootstrap;
      uiAuthFile = cfg.bootstrap.uiAuth.file;
    };

    # US3.1: this node's portal gets the UI's rule, before the operator's own.
    services.authelia.instances = mkIf (forwardAuthOn && cfg.ui.forwardAuth.autheliaInstance != null) {
      ${cfg.ui.forwardAuth.autheliaInstance}.settings.access_control.rules = lib.mkBefore [
        cfg.ui.forwardAuth.accessControlRule
      ];
    };

    services.nginx = {
      enable = true;
      virtualHosts = fw.virtualHosts {
        inherit (cfg) domain uiDomain;
        port = config.services.windmill.serverPort;
        # Not `tls`: the vhosts' settings must not depend on security.acme.certs (lib.nix,
        # tlsSettings).
        tls = fw.tlsSettings cfg.tls;
        ui = fw.uiLocations {
          upstream = fw.upstream config.services.windmill.serverPort;
          forwardAuth = if cfg.ui.forwardAuth.enable then cfg.ui.forwardAuth else null;
          inherit (cfg.ui) nginxAuthConfig;
          openWithoutAuthentication = cfg.ui.dangerouslyServeWithoutAuthentication;
          uiAuthFile = cfg.bootstrap.uiAuth.file;
        };
      };
    };

    nix.settings = fw.nixSettings { user = windmillUser; };
    nix.registry = fw.registry (fw.deploymentNixpkgs cfg.deployEnv);
  };
}
