# Evaluates nixos-module/default.nix without nixpkgs: a small stand-in for the parts of
# nixpkgs' `lib` the module uses (mkOption, the types it names, mkIf, mkMerge, mkDefault,
# mkForce, mkBefore/mkAfter, ...), a stand-in `pkgs` whose packages are fake derivations, and a
# miniature of the module system: every option of `services.fediversity-windmill` gets its value
# from the definitions of `settings` and of the module's own `config`, else from its default;
# the module's `config` is then resolved the same way, merged with `alsoDefined` (what other
# modules define, e.g. nixpkgs' services.windmill). So every line of default.nix is evaluated
# (`--strict`), every option value checked against its type, and the result is the
# configuration the module hands to NixOS, as JSON.
#
# Where it merges as nixpkgs' lib.modules does (checked against it, see docs/maintainers/testing.md, "The
# module"): priorities (mkDefault/mkForce: only the definitions of the best priority
# count), mkIf conditions, mkMerge, attrsets merged per attribute, lists concatenated in
# definition order with duplicates kept, nixpkgs' own modules (`alsoDefined`) before this
# module, mkBefore/mkAfter ordering the list definitions of one priority (stably), equal
# scalars accepted and different ones an error.
#
# Differences that remain:
# - only the options of `services.fediversity-windmill` are declared and type-checked; every
#   other path is free-form (a misspelt `systemd.services.x.serviceConfg` passes here), and
#   nixpkgs' modules are not evaluated: what they make of the configuration (nginx's files,
#   systemd's units, their own assertions) only the VM test shows;
# - a submodule's options are not evaluated: a submodule value is its definitions merged, with
#   no defaults filled in (the module reads its fields with `or`);
# - `types.*.check` is a shallow check of the merged value, not a per-definition merge of the
#   type (`types.lines` does not join with newlines, `types.str` with two different
#   definitions is a conflict here as in nixpkgs, `types.path` accepts what coerces to "/…");
# - mkOrder applies only to list definitions (an mkBefore around an attrset is not pushed
#   down to its lists), and priorities are compared per option path, not per submodule;
# - `config` as the module sees it is a fixed stand-in (`nodeConfig` adds to it), not the
#   fixpoint of every module: the module cannot read back a value another module defines
#   unless a test puts it into `nodeConfig`, and a cycle through another module (nixpkgs'
#   nginx derives security.acme.certs from the vhosts' TLS settings, so settings that read
#   the certificates recurse forever) evaluates here and only fails under the real one.
{
  # Values of `services.fediversity-windmill.*` (`enable` is set).
  settings ? null,
  # Or a whole node module (e.g. the manual's example), called with `config`, `lib`, `pkgs` and
  # `moduleArgs`: its `services.fediversity-windmill` is `settings`, the rest of what it defines
  # is both merged with the module's configuration (like `alsoDefined`) and seen by the module
  # in `config` (like `nodeConfig`); its `imports` are returned, not followed.
  userModule ? null,
  moduleArgs ? { },
  # `environment` of the bootstrap unit as the rest of the node sets it.
  bootstrapEnvironment ? { },
  # Definitions of other modules, merged with the module's config (e.g. what nixpkgs'
  # services.windmill defines for its units): a conflict with them is an error here too.
  alsoDefined ? [ ],
  # What the module reads of the rest of the node's configuration, added to the stand-in
  # `config` (e.g. `security.acme.certs`, `services.authelia.instances`, `networking.hostName`).
  nodeConfig ? { },
  module ? ../../nixos-module/default.nix,
}:
let
  inherit (builtins)
    all
    attrNames
    concatLists
    concatMap
    elem
    filter
    foldl'
    head
    isAttrs
    isBool
    isFunction
    isInt
    isList
    isString
    length
    listToAttrs
    map
    mapAttrs
    match
    tail
    ;

  # ---- definitions: mkIf / mkMerge / mkDefault / mkForce, and their merge ------------------

  isDerivationLike = x: isAttrs x && x ? outPath;
  isPlainAttrs = x: isAttrs x && !(x ? _type) && !(isDerivationLike x);
  absent = {
    _type = "absent";
  };
  isAbsent = v: isAttrs v && (v._type or null) == "absent";

  # The definitions found at `path` inside the definition `def`. An mkIf above the option
  # (path not empty) is pushed down without its condition being evaluated, as nixpkgs'
  # pushDownProperties does; at the option itself its condition decides before its content is
  # looked at, as dischargeProperties does (a content that fails to evaluate under a false
  # condition is never evaluated).
  defsAt =
    path: def:
    if isAttrs def && (def._type or null) == "if" && path == [ ] then
      if def.condition then defsAt path def.content else [ ]
    else if isAttrs def && (def._type or null) == "if" then
      let
        inner = defsAt path def.content;
      in
      if inner == [ ] then
        [ ]
      else if def.condition then
        inner
      else
        [ ]
    else if isAttrs def && (def._type or null) == "merge" then
      concatMap (defsAt path) def.contents
    else if isAttrs def && (def._type or null) == "override" then
      map (d: {
        _type = "override";
        inherit (def) priority;
        content = d;
      }) (defsAt path def.content)
    else if isAttrs def && (def._type or null) == "order" then
      map (d: {
        _type = "order";
        inherit (def) priority;
        content = d;
      }) (defsAt path def.content)
    else if path == [ ] then
      [ def ]
    else if isPlainAttrs def && def ? ${head path} then
      defsAt (tail path) def.${head path}
    else
      [ ];

  wrapped = kind: d: isAttrs d && (d._type or null) == kind;
  priorityOf =
    d:
    if wrapped "override" d then
      d.priority
    else if wrapped "order" d then
      priorityOf d.content
    else
      100;
  # mkBefore is 500, mkAfter 1500, everything else 1000 (nixpkgs' defaultOrderPriority).
  orderOf =
    d:
    if wrapped "order" d then
      d.priority
    else if wrapped "override" d then
      orderOf d.content
    else
      1000;
  unwrap = d: if wrapped "override" d || wrapped "order" d then unwrap d.content else d;

  # One value from a list of definitions (or `absent`), as the module system would merge them.
  mergeDefs =
    where: defs:
    let
      expanded = concatMap (defsAt [ ]) defs;
      best = foldl' (m: d: if priorityOf d < m then priorityOf d else m) 1000000 expanded;
      # The definitions of the best priority, in definition order; mkOrder sorts them (a
      # stable sort, as nixpkgs' sortProperties).
      chosen = map unwrap (builtins.sort (a: b: orderOf a < orderOf b) (filter (d: priorityOf d == best) expanded));
      keys = attrNames (listToAttrs (concatMap (d: map (name: {
        inherit name;
        value = null;
      }) (attrNames d)) chosen));
      merged = listToAttrs (
        filter (kv: !isAbsent kv.value) (
          map (k: {
            name = k;
            value = mergeDefs "${where}.${k}" (concatMap (d: if d ? ${k} then [ d.${k} ] else [ ]) chosen);
          }) keys
        )
      );
    in
    if expanded == [ ] then
      absent
    else if all isPlainAttrs chosen then
      merged
    else if all isList chosen then
      concatLists chosen
    else if all (d: d == head chosen) chosen then
      head chosen
    else
      throw "conflicting definitions of ${where}";

  # ---- lib ----------------------------------------------------------------------------------

  type = name: check: {
    _type = "type";
    inherit name check;
  };
  types = rec {
    str = type "str" isString;
    lines = type "lines" isString;
    bool = type "bool" isBool;
    anything = type "anything" (_: true);
    package = type "package" isDerivationLike;
    # nixpkgs' `types.path`: a string, a path or a derivation/flake (`outPath`) whose text
    # starts with "/"; the value stays what it was (a flake stays an attrset).
    path = type "path" (x: (isString x || builtins.isPath x || (isAttrs x && x ? outPath)) && builtins.substring 0 1 (toString x) == "/");
    port = type "port" (x: isInt x && x >= 0 && x <= 65535);
    ints = {
      positive = type "positive int" (x: isInt x && x > 0);
      unsigned = type "unsigned int" (x: isInt x && x >= 0);
    };
    strMatching = re: type "string matching ${re}" (x: isString x && match re x != null);
    enum = values: type "one of ${toString values}" (x: elem x values);
    nullOr = t: type "null or ${t.name}" (x: x == null || t.check x);
    either = a: b: type "${a.name} or ${b.name}" (x: a.check x || b.check x);
    listOf = t: type "list of ${t.name}" (x: isList x && all t.check x);
    attrsOf = t: type "attrs of ${t.name}" (x: isAttrs x && all (v: t.check v) (builtins.attrValues x));
    # Its options are not checked; the value must be an attrset.
    submodule = _: type "submodule" isAttrs;
  };

  lib = {
    inherit types;
    mkOption = args: args // { _type = "option"; };
    mkEnableOption = description: {
      _type = "option";
      type = types.bool;
      default = false;
      # As nixpkgs' mkEnableOption words it.
      description = "Whether to enable ${description}.";
    };
    literalExpression = text: {
      _type = "literalExpression";
      inherit text;
    };
    mkIf = condition: content: {
      _type = "if";
      inherit condition content;
    };
    mkMerge = contents: {
      _type = "merge";
      inherit contents;
    };
    mkDefault = content: {
      _type = "override";
      priority = 1000;
      inherit content;
    };
    mkForce = content: {
      _type = "override";
      priority = 50;
      inherit content;
    };
    mkOrder = priority: content: {
      _type = "order";
      inherit priority content;
    };
    mkBefore = lib.mkOrder 500;
    mkAfter = lib.mkOrder 1500;
    optional = cond: x: if cond then [ x ] else [ ];
    optionals = cond: xs: if cond then xs else [ ];
    functionArgs = f: f.__functionArgs or (builtins.functionArgs f);
    mkRenamedOptionModule = from: to: {
      _type = "renamed";
      inherit from to;
    };
  };

  # ---- pkgs ---------------------------------------------------------------------------------

  drv = name: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/00000000000000000000000000000000-${name}";
  };
  # nixpkgs' Windmill (1.601.1): its function's arguments and its build features.
  windmillFeatures = [ "agent_worker_server" "cloud" "csharp" "default" "deno_core" "dind" "embedding" "flow_testing" "gcp_trigger" "http_trigger" "jemalloc" "kafka" "license" "loki" "mcp" "mqtt_trigger" "nats" "oauth2" "openidconnect" "parquet" "php" "postgres_trigger" "python" "scoped_cache" "smtp" "sqlx" "sqs_trigger" "static_frontend" "websocket" "zip" ];
  windmillArgs = listToAttrs (map (name: {
    inherit name;
    value = false;
  }) [ "lib" "stdenv" "fetchFromGitHub" "bash" "buildNpmPackage" "bun" "cargo" "coreutils" "deno" "dotnet-sdk_9" "flock" "go" "nsjail" "php" "powershell" "procps" "python312" "rustPlatform" "uv" "withEnterpriseFeatures" ]);
  windmillWith =
    overrides:
    drv "windmill"
    // {
      inherit overrides;
      cargoBuildFeatures = windmillFeatures;
      override = {
        __functionArgs = windmillArgs;
        __functor = _: args: windmillWith (overrides // args);
      };
      overrideAttrs =
        f:
        let
          old = windmillWith overrides;
        in
        old // f old;
    };
  pkgs = {
    path = "/nix/store/00000000000000000000000000000000-source";
    stdenv.hostPlatform.system = "x86_64-linux";
    runtimeShell = "/nix/store/00000000000000000000000000000000-bash/bin/bash";
    writeText = name: text: drv name // { inherit text; };
    writeShellScript = name: text: drv name // { inherit text; };
    writeShellScriptBin = name: text: drv name // { inherit text; };
    runCommand = name: env: script: drv name // { inherit script; };
    callPackage = path: args: drv "callPackage-${baseNameOf path}";
    formats.json = _: {
      type = types.anything;
    };
    windmill = windmillWith { };
    python312 = drv "python3" // {
      version = "3.12.11";
    };
    coreutils = drv "coreutils";
    openssh = drv "openssh";
    git = drv "git";
    bash = drv "bash";
    bashInteractive = drv "bash-interactive";
    openbao = drv "openbao";
    restic = drv "restic";
    util-linux = drv "util-linux";
  };

  # ---- the module, and the options' values ------------------------------------------------

  # Recursive update: `nodeConfig` adds to (and wins over) the stand-in's own values.
  update =
    a: b:
    a
    // mapAttrs (name: v: if isPlainAttrs v && isPlainAttrs (a.${name} or null) then update a.${name} v else v) b;
  user = if userModule == null then null else userModule ({ inherit config lib pkgs; } // moduleArgs);
  userRest =
    if user == null then
      { }
    else
      removeAttrs user [ "imports" "services" ] // { services = removeAttrs (user.services or { }) [ "fediversity-windmill" ]; };
  givenSettings = if user == null then settings else user.services.fediversity-windmill;

  config = update {
    services.fediversity-windmill = cfg;
    services.windmill = {
      database = {
        user = "windmill";
        name = "windmill";
        createLocally = true;
      };
      serverPort = 8001;
    };
    services.postgresql.package = drv "postgresql";
    services.nginx.group = "nginx";
    networking.hostName = "windmill-node";
    security.acme.certs = { };
    systemd.package = drv "systemd";
    nix.package = drv "nix";
    systemd.services.fediversity-windmill-bootstrap = {
      environment = bootstrapEnvironment;
      serviceConfig = { };
    };
  } (update nodeConfig userRest);
  evaluated = import module { inherit config lib pkgs; };
  prefix = [
    "services"
    "fediversity-windmill"
  ];
  userSettings = givenSettings // {
    enable = true;
  };

  isOption = x: isAttrs x && (x._type or null) == "option";
  # The value of every option below `options` (at `path`): the definitions of the settings and
  # of the module's config, else the default.
  valuesOf =
    path: options: given:
    if isOption options then
      let
        defs = (if isAbsent given then [ ] else [ given ]) ++ defsAt (prefix ++ path) evaluated.config;
        value = mergeDefs (builtins.concatStringsSep "." path) defs;
      in
      if !isAbsent value then
        value
      else if options ? default then
        options.default
      else
        throw "services.fediversity-windmill.${builtins.concatStringsSep "." path} has no value and no default"
    else
      mapAttrs (name: o: valuesOf (path ++ [ name ]) o (if isAttrs given && given ? ${name} then given.${name} else absent)) options;
  cfg = valuesOf [ ] evaluated.options.services.fediversity-windmill userSettings;

  unknownSettings =
    path: options: given:
    if isOption options then
      [ ]
    else
      concatMap (
        name:
        if options ? ${name} then
          unknownSettings (path ++ [ name ]) options.${name} given.${name}
        else
          [ (builtins.concatStringsSep "." (path ++ [ name ])) ]
      ) (attrNames given);

  typeErrors =
    path: options: value:
    if isOption options then
      if options.type.check value then [ ] else [ "${builtins.concatStringsSep "." path}: not a ${options.type.name}" ]
    else
      concatMap (name: typeErrors (path ++ [ name ]) options.${name} value.${name}) (attrNames options);

  optionDocs =
    path: options:
    if isOption options then
      [
        {
          name = builtins.concatStringsSep "." path;
          value = {
            hasDescription = (options.description or "") != "";
            hasDefault = options ? default;
            readOnly = options.readOnly or false;
          };
        }
      ]
    else
      concatMap (name: optionDocs (path ++ [ name ]) options.${name}) (attrNames options);

  # What a reference of the options shows (docs/operators/module-options.md is checked against
  # it): each option's type, its default (`defaultText` as written, else the value, for the
  # reader to print as Nix), whether it is read-only, and its description.
  optionReference =
    path: options:
    if isOption options then
      [
        (
          {
            name = builtins.concatStringsSep "." path;
            type = options.type.name;
            readOnly = options.readOnly or false;
            description = options.description or "";
          }
          // (
            if options ? defaultText then
              { defaultText = if isAttrs options.defaultText then options.defaultText.text else options.defaultText; }
            else if options ? default then
              { inherit (options) default; }
            else
              { }
          )
        )
      ]
    else
      concatMap (name: optionReference (path ++ [ name ]) options.${name}) (attrNames options);
in
{
  inherit cfg;
  # nixpkgs' modules come before the module (a node imports it into nixpkgs' module set), so
  # their list entries come first, as in NixOS.
  config = mergeDefs "config" (alsoDefined ++ [ userRest evaluated.config ]);
  imports = evaluated.imports;
  unknownSettings = unknownSettings [ ] evaluated.options.services.fediversity-windmill userSettings;
  userImports = if user == null then [ ] else user.imports or [ ];
  typeErrors = typeErrors [ ] evaluated.options.services.fediversity-windmill cfg;
  options = listToAttrs (optionDocs [ ] evaluated.options.services.fediversity-windmill);
  optionReference = optionReference [ ] evaluated.options.services.fediversity-windmill;
}
