# The pure parts of the fediversity-windmill NixOS module: fixed paths, option defaults, the
# renderers of the JSON files, and the unit, nginx and Nix settings the module adds. Builtins
# only, nothing from nixpkgs, so that they can be evaluated (and are, by the test suite) with a
# plain `nix-instantiate --eval` and no nixpkgs at hand. The module (./default.nix) does
# nothing but wire these into NixOS options.
let
  inherit (builtins)
    attrNames
    concatStringsSep
    filter
    listToAttrs
    map
    mapAttrs
    match
    removeAttrs
    stringLength
    substring
    toString
    ;

  # `cond ? attrs : {}`
  optionalAttrs = cond: attrs: if cond then attrs else { };
  # Drops the attributes whose value is null (the bootstrap then applies its own default or
  # its environment fallback).
  withoutNulls = attrs: removeAttrs attrs (filter (n: attrs.${n} == null) (attrNames attrs));
in
rec {
  # Where the node's files live: the defaults fediversity-jobenv reads without any option
  # (jobenv/src/cli.rs), and the bootstrap's include directory (bootstrap.md, `ui_auth.file`).
  paths = {
    etcDir = "/etc/fediversity-windmill";
    deployEnv = "/etc/fediversity-windmill/deploy-env.json";
    deployKeys = "/etc/fediversity-windmill/deploy-keys.json";
    deploymentAttributes = "/etc/fediversity-windmill/deployment-attributes.json";
    bootstrapConfig = "/etc/fediversity-windmill/bootstrap.json";
    runDir = "/run/fediversity-windmill";
    secretsDir = "/run/fediversity-windmill/deploy-secrets";
    # jobenv's journal and locks (its default without $STATE_DIRECTORY).
    stateDir = "/var/lib/fediversity-jobenv";
    uiAuthDir = "/run/windmill-ui-auth";
  };

  # The unit the node's OpenBao agent runs as; it renders the deploy secrets and, usually, the
  # admin password. Provided by the hosting provider's agent module, not by this one.
  agentUnit = "openbao-agent-default.service";

  # `jobs.<parent of domain>`: the admin UI beside the API name.
  defaultUiDomain =
    domain:
    let
      parent = match "[^.]+\\.(.+)" domain;
    in
    if parent == null then
      throw "services.fediversity-windmill.uiDomain: cannot derive jobs.<parent> from the domain \"${domain}\", which has no parent; set uiDomain"
    else
      "jobs.${builtins.head parent}";

  # ---- jobenv's node files ----------------------------------------------------------------

  # The structural pins the deployment programs read from their environment besides the keys
  # the deployment repository publishes (jobenv.md, "the keys file"). Declared here so that a
  # node can set them in deploy-env.json; the operator's deployKeys may redefine them.
  structuralKeys = {
    HOSTING_CONFIG.description = "Structural pin: the hosting provider's configuration the deployment programs read";
    PIN_EFFECT.description = "Structural pin: the effect of the version pins on a deployment";
    SELF_MODULE_SOURCE.description = "Structural pin: the source of the deployment's own NixOS modules";
    OPERATOR_MODULE_SOURCE.description = "Structural pin: the source of the operator's NixOS modules";
    VERSION_LAYERS.description = "Structural pin: the layers of versions a deployment is built from";
    DNS_DOMAIN.description = "Structural pin: the DNS domain deployments are published under";
  };

  # deploy-env.json: the node-owned keys, a JSON object of strings.
  renderDeployEnv =
    deployEnv:
    mapAttrs (
      name: value:
      if builtins.isString value then
        value
      else
        throw "services.fediversity-windmill.deployEnv.${name} must be a string"
    ) deployEnv;

  # deploy-keys.json: {"KEY": {"description": "...", "default": "..."?}}, the structural pins
  # plus the operator's keys (which win).
  renderDeployKeys =
    deployKeys:
    mapAttrs (
      _: key: { inherit (key) description; } // optionalAttrs ((key.default or null) != null) { inherit (key) default; }
    ) (structuralKeys // deployKeys);

  # deployment-attributes.json: the attribute names, a JSON array, sorted and without repeats.
  renderDeploymentAttributes = attributes: attrNames (listToAttrs (map (name: { inherit name; value = null; }) attributes));

  # Keys a node may not set (jobenv would refuse to run any job), and other mistakes found
  # before anything is built. Each entry is a message naming the problem.
  deployEnvProblems =
    { deployEnv, deploySecrets }:
    let
      hasNixpkgs = deployEnv ? NIXPKGS || deployEnv ? DEPLOYMENT_NIXPKGS;
      badSecretNames = filter (name: match "[A-Za-z_][A-Za-z0-9_]*" name == null) (attrNames deploySecrets);
      both = filter (name: deployEnv ? ${name}) (attrNames deploySecrets);
    in
    (if deployEnv ? DEPLOYMENT_ROOT then [ ] else [ "deployEnv.DEPLOYMENT_ROOT is required: the tree that holds the deployment programs" ])
    ++ (if hasNixpkgs then [ ] else [ "deployEnv.DEPLOYMENT_NIXPKGS (or NIXPKGS) is required: the nixpkgs the programs run with" ])
    ++ map (name: "deploySecrets.${name}: a secret's name is a variable name ([A-Za-z_][A-Za-z0-9_]*)") badSecretNames
    ++ map (name: "${name} is set both in deployEnv and in deploySecrets; jobenv refuses a key from two node sources") both;

  # Values of the `bootstrap` options that the bootstrap refuses when it reads its configuration
  # (bootstrap/src/config.rs: exit 2, and with Restart=on-failure a new try every 30 s that can
  # never succeed), found at evaluation instead. `unitEnvironment` is the bootstrap unit's
  # `environment`, `unitEnvironmentFile` its `serviceConfig.EnvironmentFile` (null if none; its
  # contents cannot be seen here, so it is trusted to provide BAO_ADDR).
  bootstrapProblems =
    {
      bootstrap,
      unitEnvironment ? { },
      unitEnvironmentFile ? null,
    }:
    let
      b = bootstrap;
      # The others digit of the octal mode (the option's type is `0?[0-7]{3}`).
      mode = b.uiAuth.mode;
      othersDigit = substring (stringLength mode - 1) 1 mode;
      env = name: unitEnvironment.${name} or null;
      given = name: env name != null && env name != "";
      # Like the OpenBao CLI and the bootstrap: BAO_ADDR, else VAULT_ADDR when BAO_ADDR is unset.
      addrFromEnvironment = given "BAO_ADDR" || (env "BAO_ADDR" == null && given "VAULT_ADDR");
      # Windmill's own rules, which the bootstrap checks (windmill-api.md §2).
      workspaceId = match "[A-Za-z0-9_]+(-[A-Za-z0-9_]+)*" b.workspace.id;
      folder = match "[A-Za-z0-9_]+" b.workspace.folder;
    in
    (if othersDigit == "0" then [ ] else [ "bootstrap.uiAuth.mode ${mode} gives others access to the nginx include, which holds a superadmin token; the bootstrap refuses it (e.g. 0440)" ])
    ++ (
      if b.openbao.addr != null || addrFromEnvironment || unitEnvironmentFile != null then
        [ ]
      else
        [ "bootstrap.openbao.addr is null and the bootstrap unit's environment sets neither BAO_ADDR nor VAULT_ADDR; the bootstrap would refuse to start: set bootstrap.openbao.addr" ]
    )
    ++ (if b.token.label != "session" then [ ] else [ "bootstrap.token.label must not be \"session\": Windmill labels its login sessions so, and revoking older tokens of the label would log out every session" ])
    ++ (if workspaceId != null then [ ] else [ "bootstrap.workspace.id \"${b.workspace.id}\" is not a Windmill workspace id (word characters, single hyphens between them)" ])
    ++ (if folder != null then [ ] else [ "bootstrap.workspace.folder \"${b.workspace.folder}\" is not a Windmill folder name (letters, digits and underscores)" ]);

  # The nixpkgs the `nixpkgs` registry entry points at: the deployments' own.
  deploymentNixpkgs = deployEnv: deployEnv.DEPLOYMENT_NIXPKGS or deployEnv.NIXPKGS or null;

  # Template stanzas for an OpenBao agent (its JSON configuration format): one file per deploy
  # secret under the secrets directory, readable by the worker's group only. The agent must
  # run as root for the group to be set.
  agentTemplates =
    { deploySecrets, group }:
    map (name: {
      contents = deploySecrets.${name};
      destination = "${paths.secretsDir}/${name}";
      perms = "0440";
      inherit group;
      error_on_missing_key = true;
    }) (attrNames deploySecrets);

  # ---- the bootstrap's configuration ------------------------------------------------------

  # The defaults of every bootstrap option, as bootstrap.md lists them (camelCase here, the
  # renderer writes the file's snake_case). Null: required, or "not set" where bootstrap.md
  # names a fallback (openbao.addr: $BAO_ADDR/$VAULT_ADDR; openbao.tokenFile: $BAO_TOKEN or an
  # agent listener with auto-auth).
  bootstrapDefaults = {
    windmill = {
      url = "http://127.0.0.1:8001";
      adminEmail = "admin@windmill.dev";
      adminPasswordFile = null;
      defaultPassword = "changeme";
      databaseUrlFile = null;
      databaseRole = "windmill_admin";
    };
    workspace = {
      id = "fediversity";
      name = "fediversity";
      folder = "fediversity";
    };
    token = {
      label = "fediversity";
      revokePrevious = true;
    };
    settings = {
      instance_python_version = "3.12";
    };
    openbao = {
      addr = null;
      tokenFile = null;
      path = null;
      field = "value";
    };
    uiAuth = {
      file = "${paths.uiAuthDir}/token.conf";
      owner = "root";
      group = "nginx";
      mode = "0440";
    };
    retry = {
      loginAttempts = 12;
      delaySeconds = 5;
      readyTimeoutSeconds = 300;
    };
  };

  # The bootstrap's JSON configuration (bootstrap.md, "Configuration") from the module's
  # `bootstrap` options plus the scripts tree.
  renderBootstrapConfig =
    { bootstrap, scriptsDir }:
    let
      b = bootstrap;
      required =
        path: value:
        if value == null then throw "services.fediversity-windmill.bootstrap.${path} is required" else value;
    in
    {
      windmill = {
        inherit (b.windmill) url;
        admin_email = b.windmill.adminEmail;
        admin_password_file = required "windmill.adminPasswordFile" b.windmill.adminPasswordFile;
        default_password = b.windmill.defaultPassword;
        database_url_file = required "windmill.databaseUrlFile" b.windmill.databaseUrlFile;
        database_role = b.windmill.databaseRole;
      };
      workspace = { inherit (b.workspace) id name folder; };
      scripts.dir = scriptsDir;
      token = {
        inherit (b.token) label;
        revoke_previous = b.token.revokePrevious;
      };
      inherit (b) settings;
      openbao = withoutNulls {
        inherit (b.openbao) addr field;
        token_file = b.openbao.tokenFile;
        path = required "openbao.path" b.openbao.path;
      };
      ui_auth = { inherit (b.uiAuth) file owner group mode; };
      retry = {
        login_attempts = b.retry.loginAttempts;
        delay_seconds = b.retry.delaySeconds;
        ready_timeout_seconds = b.retry.readyTimeoutSeconds;
      };
    };

  # ---- systemd ----------------------------------------------------------------------------

  # Seconds a cancelled Windmill job gets after its SIGINT before the worker SIGKILLs its
  # process group. jobenv stops the program tree within its grace (3 s by default) and exits;
  # this must be well above that.
  maxWaitForSigint = 10;

  # What the worker's PATH holds besides systemd's defaults, by name; the module maps each
  # name to a package. The job environment's PATH is the worker's, so this is how
  # deploy.py/destroy.py find fediversity-jobenv, and jobenv finds nix-shell.
  workerPath = [
    "nix"
    "openssh"
    "git"
    "bash"
    "fediversity-jobenv"
  ];

  otelEnvironment =
    endpoint: role:
    optionalAttrs (endpoint != null) {
      OTEL_EXPORTER_OTLP_ENDPOINT = endpoint;
      OTEL_EXPORTER_OTLP_PROTOCOL = "http/protobuf";
      OTEL_SERVICE_NAME = "windmill-${role}";
      OTEL_RESOURCE_ATTRIBUTES = "service.namespace=fediversity";
    };

  # Settings added to nixpkgs' Windmill units (which this module does not redefine) and the
  # bootstrap unit, without ExecStart and restart triggers (those need packages). Merged into
  # `systemd.services` by the module.
  units =
    {
      otelEndpoint ? null,
      nixShell ? null,
      uiAuthFile ? bootstrapDefaults.uiAuth.file,
      readyTimeoutSeconds ? bootstrapDefaults.retry.readyTimeoutSeconds,
    }:
    let
      # What jobenv reads from its environment on the worker (passed through to jobs).
      jobenvEnvironment = {
        JOBENV_STATE_DIR = paths.stateDir;
      }
      // optionalAttrs (nixShell != null) { JOBENV_NIX_SHELL = nixShell; };
      windmillUnit = role: {
        after = [ agentUnit ];
        serviceConfig.RestartSec = "5s";
        environment = otelEnvironment otelEndpoint role;
      };
    in
    {
      windmill-server = windmillUnit "server";
      windmill-worker-native = windmillUnit "worker-native";
      windmill-worker =
        let
          base = windmillUnit "worker";
        in
        base
        // {
          serviceConfig = base.serviceConfig // {
            # On stop, SIGTERM goes to the worker alone, which ends its jobs the way a cancel
            # does; whatever is left gets SIGKILL when the stop times out.
            KillMode = "mixed";
            # jobenv's journal and locks; nixpkgs' unit is otherwise read-only (DynamicUser).
            ReadWritePaths = [ paths.stateDir ];
          };
          environment =
            base.environment
            // {
              # A cancel sends SIGINT to the job process (jobenv, once the script exec'd) and
              # waits this long before SIGKILLing the job's process group.
              MAX_WAIT_FOR_SIGINT = toString maxWaitForSigint;
              # nix-shell's caches: a writable home (the unit's StateDirectory).
              HOME = "/var/lib/windmill-worker";
              # Windmill clears a job's environment except for the names listed here.
              WHITELIST_ENVS = concatStringsSep "," (attrNames jobenvEnvironment);
            }
            // jobenvEnvironment;
        };

      fediversity-windmill-bootstrap = {
        description = "Bring Windmill to its desired state (fediversity)";
        wantedBy = [ "multi-user.target" ];
        after = [
          "windmill-server.service"
          agentUnit
          "network-online.target"
        ];
        wants = [
          "windmill-server.service"
          agentUnit
          "network-online.target"
        ];
        # Retry for as long as it takes (Windmill or OpenBao not up yet, a sealed OpenBao).
        startLimitIntervalSec = 0;
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          Restart = "on-failure";
          RestartSec = "30s";
          # It waits for Windmill up to the ready timeout itself; beyond that something hangs.
          TimeoutStartSec = "${toString (readyTimeoutSeconds + 300)}s";

          # Hardening. It runs as root: it reads secret files it does not own and sets the
          # group of the nginx include (CAP_CHOWN). It needs the network (Windmill, OpenBao,
          # PostgreSQL over TCP or its socket) and a writable /run (the include directory and
          # its lock file); everything else is read-only or gone.
          CapabilityBoundingSet = [
            "CAP_CHOWN"
            "CAP_DAC_READ_SEARCH"
          ];
          NoNewPrivileges = true;
          ProtectSystem = "strict";
          ReadWritePaths = [
            "/run"
            (dirOf uiAuthFile)
          ];
          ProtectHome = "read-only";
          PrivateTmp = true;
          PrivateDevices = true;
          ProtectKernelTunables = true;
          ProtectKernelModules = true;
          ProtectKernelLogs = true;
          ProtectControlGroups = true;
          ProtectClock = true;
          ProtectHostname = true;
          ProtectProc = "invisible";
          RestrictAddressFamilies = [
            "AF_UNIX"
            "AF_INET"
            "AF_INET6"
          ];
          RestrictNamespaces = true;
          RestrictRealtime = true;
          RestrictSUIDSGID = true;
          LockPersonality = true;
          MemoryDenyWriteExecute = true;
          RemoveIPC = true;
          SystemCallArchitectures = "native";
          SystemCallFilter = [ "@system-service" ];
          SystemCallErrorNumber = "EPERM";
          UMask = "0077";
        };
      };

      # Runs the bootstrap again when the admin password's rendered file changes (see
      # `pathUnits`): `systemctl try-restart` of the converged, RemainAfterExit unit.
      fediversity-windmill-bootstrap-rerun = {
        description = "Rerun the fediversity Windmill bootstrap after the admin password changed";
        serviceConfig.Type = "oneshot";
      };

      # nginx reads its includes when it (re)loads its configuration: the token the bootstrap
      # writes takes effect with a reload (`systemctl try-reload-or-restart nginx`).
      fediversity-windmill-nginx-reload = {
        description = "Reload nginx after the bootstrap wrote the Windmill UI token";
        serviceConfig.Type = "oneshot";
      };
    };

  # systemd path units, triggering the two oneshots above.
  pathUnits =
    {
      adminPasswordFile,
      uiAuthFile ? bootstrapDefaults.uiAuth.file,
    }:
    {
      fediversity-windmill-bootstrap-password = {
        description = "Watch the Windmill admin password rendered for the bootstrap";
        wantedBy = [ "multi-user.target" ];
        pathConfig = {
          PathChanged = adminPasswordFile;
          Unit = "fediversity-windmill-bootstrap-rerun.service";
        };
      };
      fediversity-windmill-ui-auth = {
        description = "Watch the Windmill UI token include of nginx";
        wantedBy = [ "multi-user.target" ];
        pathConfig = {
          PathChanged = uiAuthFile;
          Unit = "fediversity-windmill-nginx-reload.service";
        };
      };
    };

  # systemd-tmpfiles rules: the secrets directory (readable by the worker's group, which the
  # agent's files also carry), jobenv's state directory (the worker's) and the nginx include
  # directory.
  tmpfilesRules =
    {
      group,
      user ? group,
      uiAuthFile ? bootstrapDefaults.uiAuth.file,
      uiAuthGroup ? bootstrapDefaults.uiAuth.group,
    }:
    [
      "d ${paths.runDir} 0755 root root - -"
      "d ${paths.secretsDir} 0750 root ${group} - -"
      "d ${paths.stateDir} 0750 ${user} ${group} - -"
      "d ${dirOf uiAuthFile} 0750 root ${uiAuthGroup} - -"
    ];

  # ---- nginx ------------------------------------------------------------------------------

  # The API name answers 404 except under /api/; the UI name proxies everything, websockets
  # included, with the Authorization header from the bootstrap's include. `forwardAuth` is
  # nginx configuration placed before that include: the hosting provider's identity layer.
  virtualHosts =
    {
      domain,
      uiDomain,
      port ? 8001,
      forwardAuth ? null,
      uiAuthFile ? bootstrapDefaults.uiAuth.file,
    }:
    let
      upstream = "http://127.0.0.1:${toString port}";
    in
    if domain == uiDomain then
      throw "services.fediversity-windmill: domain and uiDomain must differ (both are ${domain})"
    else
      {
        ${domain}.locations = {
          "/".return = "404";
          "/api/".proxyPass = upstream;
        };
        ${uiDomain}.locations."/" = {
          proxyPass = upstream;
          proxyWebsockets = true;
          extraConfig = concatStringsSep "\n" (
            (if forwardAuth == null then [ ] else [ forwardAuth ])
            ++ [ "include ${dirOf uiAuthFile}/*.conf;" ]
          );
        };
      };

  # ---- Nix on the node --------------------------------------------------------------------

  nixSettings =
    { user }:
    {
      # The deployment programs build and copy closures through the daemon as the worker.
      trusted-users = [
        "root"
        user
      ];
      # Flake references resolve through the node's registry only, never a downloaded one.
      flake-registry = "";
      experimental-features = [
        "nix-command"
        "flakes"
      ];
    };

  # `nix.registry`: `nixpkgs` is the deployments' nixpkgs.
  registry =
    nixpkgs:
    optionalAttrs (nixpkgs != null) {
      nixpkgs.to = {
        type = "path";
        path = nixpkgs;
      };
    };
}
