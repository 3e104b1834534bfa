# services.fediversity-windmill: everything this project puts on the node that hosts Windmill.
#
# - Windmill itself is nixpkgs' `services.windmill` (enabled here, not redefined); this module
#   adds settings to its units: ordering after the OpenBao agent, RestartSec, OpenTelemetry,
#   and for the worker the PATH, KillMode and cancel behaviour the deploy jobs need.
# - jobenv's node files in /etc/fediversity-windmill, and the deploy secrets directory.
# - The bootstrap (a oneshot that retries until Windmill is converged) and its configuration.
# - nginx: the API name and the admin UI name.
# - Nix on the node: the worker's user is trusted, `nixpkgs` is pinned in the registry, flakes.
#
# The pure parts (defaults, renderers, unit settings) live in ./lib.nix, which the test suite
# evaluates without nixpkgs.
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

  jsonFile = name: value: pkgs.writeText name (builtins.toJSON value);
  bootstrapConfig = jsonFile "fediversity-windmill-bootstrap.json" (
    fw.renderBootstrapConfig {
      inherit (cfg) bootstrap;
      scriptsDir = "${cfg.bootstrap.scriptsDir}";
    }
  );
  systemctl = "${config.systemd.package}/bin/systemctl";
  workerPackages = {
    nix = config.nix.package;
    openssh = pkgs.openssh;
    git = pkgs.git;
    bash = pkgs.bash;
    fediversity-jobenv = cfg.package;
  };

  opt =
    type: default: description:
    mkOption { inherit type default description; };
in
{
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

    domain = mkOption {
      type = types.str;
      example = "windmill.example.org";
      description = ''
        The API name: nginx answers 404 on it except under `/api/`, which it proxies to
        Windmill. Front-ends submit deploy jobs here.
      '';
    };

    uiDomain = mkOption {
      type = types.str;
      default = fw.defaultUiDomain cfg.domain;
      defaultText = literalExpression ''"jobs.''${<parent of domain>}"'';
      example = "jobs.example.org";
      description = ''
        The admin UI name: nginx proxies everything on it to Windmill (websockets included) and
        adds the `Authorization` header of the bootstrap's token, so that every visitor acts as
        the Windmill superadmin. Put the identity layer in front of it with {option}`uiForwardAuth`.
      '';
    };

    uiForwardAuth = mkOption {
      type = types.nullOr types.lines;
      default = null;
      example = ''
        auth_request /oauth2/auth;
        error_page 401 = /oauth2/sign_in;
      '';
      description = ''
        nginx configuration placed in the UI vhost's `location /` before the token include: the
        hook for the hosting provider's forward-auth (its identity layer decides who may use the
        admin UI). Without it the UI is open to whoever reaches the name, and evaluation warns.
        Locations the forward-auth needs (e.g. `/oauth2/`) can be added to
        `services.nginx.virtualHosts.<uiDomain>.locations`.
      '';
    };

    deployEnv = mkOption {
      type = types.attrsOf types.str;
      default = { };
      example = literalExpression ''
        {
          DEPLOYMENT_ROOT = "''${deployment-repository}";
          DEPLOYMENT_NIXPKGS = "''${pkgs.path}";
          STATE_BASE_ADDRESS = "https://state.example.org/tofu";
        }
      '';
      description = ''
        Node-owned keys of every deployment, rendered to `${fw.paths.deployEnv}`: the control
        keys `DEPLOYMENT_ROOT` and `DEPLOYMENT_NIXPKGS` (required), `STATE_BASE_ADDRESS`, any
        declared key the node fixes, and Nix/OpenTofu variables. Not for secrets (world-readable
        in the Nix store): use {option}`deploySecrets`. `DEPLOYMENT_NIXPKGS` is also the
        `nixpkgs` entry of the node's flake registry.
      '';
    };

    deployKeys = mkOption {
      type = types.attrsOf (
        types.submodule {
          options = {
            description = mkOption {
              type = types.str;
              description = "What the key means (shown by `fediversity-jobenv keys`).";
            };
            default = mkOption {
              type = types.nullOr types.str;
              default = null;
              description = "The value a deployment gets when nothing sets the key.";
            };
          };
        }
      );
      default = { };
      example = literalExpression ''
        lib.mapAttrs (_: k: { inherit (k) description; default = k.default or null; })
          (builtins.fromJSON (builtins.readFile "''${deployment-repository}/keys.json"))
      '';
      description = ''
        The keys a deployment may see, as the deployment repository publishes them, rendered
        with the structural pins (`HOSTING_CONFIG`, `PIN_EFFECT`, `SELF_MODULE_SOURCE`,
        `OPERATOR_MODULE_SOURCE`, `VERSION_LAYERS`, `DNS_DOMAIN`) to `${fw.paths.deployKeys}`.
        A job payload may set only these (and `SYSTEM`, `ATTRIBUTE`, `EXECUTABLE`, `NAMESPACE`).
      '';
    };

    deploymentAttributes = mkOption {
      type = types.listOf (types.strMatching "[A-Za-z0-9][A-Za-z0-9_-]*");
      default = [ ];
      example = [
        "mastodon-tofu-vm"
        "peertube-tofu-vm"
      ];
      description = ''
        The deployment attributes that exist (the repository publishes them), rendered to
        `${fw.paths.deploymentAttributes}`. A job's `ATTRIBUTE` must be one of them.
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
        passes to the deployment programs and redacts from their output. nixpkgs has no OpenBao
        agent module: the node's agent (the unit `openbao-agent-default`) must render
        {option}`openbaoAgentTemplates`, which this option fills.
      '';
    };

    openbaoAgentTemplates = mkOption {
      type = types.listOf (types.attrsOf types.anything);
      readOnly = true;
      default = fw.agentTemplates {
        inherit (cfg) deploySecrets;
        group = windmillUser;
      };
      defaultText = literalExpression "template stanzas rendering deploySecrets";
      description = ''
        The `template` stanzas (OpenBao agent JSON configuration) that render
        {option}`deploySecrets`. Hand them to the node's agent, e.g.
        `services.openbao.agents.default.settings.template = config.services.fediversity-windmill.openbaoAgentTemplates;`
        with the hosting provider's agent module. The agent must run as root so that it can set
        the files' group.
      '';
    };

    otel.endpoint = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "http://127.0.0.1:4318";
      description = ''
        OTLP/HTTP endpoint for Windmill's traces and metrics. Set, each Windmill unit gets
        `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`,
        `OTEL_SERVICE_NAME=windmill-<role>` and `OTEL_RESOURCE_ATTRIBUTES=service.namespace=fediversity`.
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
          type = absolutePath;
          example = "/run/fediversity-windmill/admin-password";
          description = ''
            File holding the node's superadmin password (rendered by the OpenBao agent). When it
            changes, the bootstrap runs again.
          '';
        };
        defaultPassword = opt types.str d.windmill.defaultPassword "The password of a fresh Windmill instance.";
        databaseUrlFile = mkOption {
          type = absolutePath;
          example = "/run/fediversity-windmill/database-url";
          description = ''
            File holding the DSN of Windmill's PostgreSQL database, for the one case where the
            bootstrap writes the admin password hash itself (Windmill CE cannot set a password).
            The bootstrap runs as root: with nixpkgs' peer authentication this is a DSN with a
            password (over TCP) or a role root may use.
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
        label = opt types.str d.token.label "The label of the API token the bootstrap mints.";
        revokePrevious = opt types.bool d.token.revokePrevious "Delete older tokens with the same label once the new one is stored.";
      };
      settings = mkOption {
        type = types.attrsOf (pkgs.formats.json { }).type;
        default = d.settings;
        description = "Windmill global settings the bootstrap enforces.";
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
          example = "fediversity/secret/windmill/apiToken";
          description = "The `bao kv put` path the API token is stored at.";
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
          fw.deployEnvProblems { inherit (cfg) deployEnv deploySecrets; }
          ++ fw.bootstrapProblems {
            inherit (cfg) bootstrap;
            unitEnvironment = unit.environment;
            unitEnvironmentFile = unit.serviceConfig.EnvironmentFile or null;
          }
        );

    warnings = lib.optional (cfg.uiForwardAuth == null) ''
      services.fediversity-windmill: the admin UI on ${cfg.uiDomain} acts as the Windmill
      superadmin for every visitor; set services.fediversity-windmill.uiForwardAuth to the
      identity layer's forward-auth.
    '';

    services.windmill.enable = true;
    services.windmill.baseUrl = mkDefault "https://${cfg.uiDomain}";

    users.users.${windmillUser} = {
      isSystemUser = true;
      group = windmillUser;
      description = "Windmill (server and workers)";
    };
    users.groups.${windmillUser} = { };

    environment.etc = {
      "fediversity-windmill/deploy-env.json".source = jsonFile "deploy-env.json" (fw.renderDeployEnv cfg.deployEnv);
      "fediversity-windmill/deploy-keys.json".source = jsonFile "deploy-keys.json" (fw.renderDeployKeys cfg.deployKeys);
      "fediversity-windmill/deployment-attributes.json".source = jsonFile "deployment-attributes.json" (
        fw.renderDeploymentAttributes cfg.deploymentAttributes
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
        otelEndpoint = cfg.otel.endpoint;
        nixShell = "${config.nix.package}/bin/nix-shell";
        uiAuthFile = cfg.bootstrap.uiAuth.file;
        inherit (cfg.bootstrap.retry) readyTimeoutSeconds;
      })
      {
        windmill-worker = {
          path = map (name: workerPackages.${name}) fw.workerPath;
          # Jobs whose jobenv died with the previous worker are marked interrupted (best effort).
          serviceConfig.ExecStartPre = [ "-${cfg.package}/bin/fediversity-jobenv recover --state-dir ${fw.paths.stateDir}" ];
        };
        fediversity-windmill-bootstrap = {
          serviceConfig.ExecStart = "${cfg.package}/bin/fediversity-windmill-bootstrap --config ${fw.paths.bootstrapConfig}";
          restartTriggers = [ bootstrapConfig ];
        };
        fediversity-windmill-bootstrap-rerun.serviceConfig.ExecStart = "${systemctl} try-restart --no-block fediversity-windmill-bootstrap.service";
        fediversity-windmill-nginx-reload.serviceConfig.ExecStart = "${systemctl} try-reload-or-restart --no-block nginx.service";
      }
    ];

    systemd.paths = fw.pathUnits {
      inherit (cfg.bootstrap.windmill) adminPasswordFile;
      uiAuthFile = cfg.bootstrap.uiAuth.file;
    };

    services.nginx = {
      enable = true;
      virtualHosts = fw.virtualHosts {
        inherit (cfg) domain uiDomain;
        port = config.services.windmill.serverPort;
        forwardAuth = cfg.uiForwardAuth;
        uiAuthFile = cfg.bootstrap.uiAuth.file;
      };
    };

    nix.settings = fw.nixSettings { user = windmillUser; };
    nix.registry = fw.registry (fw.deploymentNixpkgs cfg.deployEnv);
  };
}
