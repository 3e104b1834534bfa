# The pure parts of the fediversity-windmill NixOS module: fixed paths, option defaults, the
# renderers of the files it writes, the decisions it takes (who may see the admin UI, which
# names jobenv would refuse, how a worker stops) and the unit, nginx and Nix settings it adds.
# Builtins only, nothing from nixpkgs, so that they can be evaluated (and are, by the test
# suite) with a plain `nix-instantiate --eval` and no nixpkgs at hand. The module
# (./default.nix) wires these into NixOS options.
let
  inherit (builtins)
    all
    any
    attrNames
    concatLists
    concatMap
    concatStringsSep
    elem
    filter
    head
    isString
    length
    listToAttrs
    map
    mapAttrs
    match
    removeAttrs
    sort
    stringLength
    substring
    toJSON
    toString
    ;

  # `cond ? attrs : {}`
  optionalAttrs = cond: attrs: if cond then attrs else { };
  optional = cond: x: if cond then [ x ] else [ ];
  optionals' = cond: xs: if cond then xs else [ ];
  hasPrefix = prefix: s: substring 0 (stringLength prefix) s == prefix;
  hasSuffix =
    suffix: s:
    let
      n = stringLength s;
      m = stringLength suffix;
    in
    n >= m && substring (n - m) m s == suffix;
  # Drops the attributes whose value is null (the bootstrap then applies its own default or
  # its environment fallback).
  withoutNulls = attrs: removeAttrs attrs (filter (n: attrs.${n} == null) (attrNames attrs));
  # `session` (login sessions) and `ephemeral-script` (job tokens), in any case and with spaces
  # around: the labels Windmill gives its own tokens, which the bootstrap refuses.
  windmillsOwnLabel =
    label:
    let
      trimmed = match "[[:space:]]*(.*[^[:space:]])[[:space:]]*" label;
      lower = builtins.replaceStrings upperAscii lowerAscii (if trimmed == null then label else head trimmed);
    in
    lower == "session" || lower == "ephemeral-script";
  upperAscii = [ "A" "B" "C" "D" "E" "F" "G" "H" "I" "J" "K" "L" "M" "N" "O" "P" "Q" "R" "S" "T" "U" "V" "W" "X" "Y" "Z" ];
  lowerAscii = [ "a" "b" "c" "d" "e" "f" "g" "h" "i" "j" "k" "l" "m" "n" "o" "p" "q" "r" "s" "t" "u" "v" "w" "x" "y" "z" ];
  # Sorted, without repeats.
  uniqueSorted = list: attrNames (listToAttrs (map (name: { inherit name; value = null; }) list));
  # A string as a single-quoted shell word.
  shellQuote = s: "'" + builtins.replaceStrings [ "'" ] [ "'\\''" ] s + "'";
  jobenvFacts = builtins.fromJSON (builtins.readFile ./jobenv-names.json);
in
rec {
  # Where the node's files live: the defaults fediversity-jobenv reads without any option
  # (jobenv/src/cli.rs), the bootstrap's include directory (`ui_auth.file`), and the
  # credentials of the Incus deployments.
  paths = {
    etcDir = "/etc/fediversity-windmill";
    inherit (jobenvFacts.defaults) deployEnv deployKeys deploymentAttributes secretsDir stateDir;
    requiredSecrets = "/etc/fediversity-windmill/required-secrets.json";
    bootstrapConfig = "/etc/fediversity-windmill/bootstrap.json";
    runDir = "/run/fediversity-windmill";
    uiAuthDir = "/run/windmill-ui-auth";
    # The bootstrap's record of the token labels it minted under and the script versions it made.
    bootstrapState = "/var/lib/fediversity-windmill/bootstrap-state.json";
    # The superadmin's password the node generates when none is given (FR-008): kept across
    # reboots, root-only.
    adminPasswordDir = "/var/lib/fediversity-windmill";
    generatedAdminPassword = "/var/lib/fediversity-windmill/admin-password";
    credentialsDir = "/run/incus-deploy";
    # The worker's copy of fediversity-jobenv, executable but not readable by the worker's user:
    # the kernel makes a process of a binary its user cannot read not dumpable from its first
    # instruction (the binary's own seal comes only with its first constructor).
    sealedJobenvDir = "/run/fediversity-jobenv";
    sealedJobenv = "/run/fediversity-jobenv/bin/fediversity-jobenv";
    # The backup's credentials (FR-015), root-only.
    backupDir = "/run/fediversity-windmill/backup";
    backupPassword = "/run/fediversity-windmill/backup/restic-password";
    backupEnvironment = "/run/fediversity-windmill/backup/restic.env";
    tfTokenEnv = "/run/incus-deploy/tf-token.env";
    incusStoreSshKey = "/run/incus-deploy/incus-store-ssh.key";
    incusStoreSigningKey = "/run/incus-deploy/incus-store-signing.key";
  };

  # The unit of the node's OpenBao agent, which renders the deploy secrets, the credentials and,
  # usually, the admin password: the hosting provider's, or the module's own
  # (`openbaoAgent.enable`). The default of `openbaoAgent.unit`.
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
      "jobs.${head parent}";

  # ---- jobenv's names ---------------------------------------------------------------------

  # The names jobenv treats specially, as docs/operators/jobenv.md documents them: control keys only the
  # node may set (`nodeControl`) or a payload sets (`payloadControl`, the node too for
  # `sharedControl`), what jobenv derives (`derived`), the state backend's keys (`stateKeys`),
  # the undeclared Nix and OpenTofu variables a node may set (`nodeTools`, `nodeToolPrefixes`),
  # the names no job may set even declared (`reserved`, `reservedPrefixes`, and stdenv's
  # `reservedSuffixes`), what passes from jobenv's own environment (`environPassthrough`), the
  # verbs, and jobenv's defaults. Generated by jobenv into `jobenv-names.json` (a test of
  # jobenv fails when that copy is stale), so the module and jobenv cannot drift apart.
  jobenvNames = jobenvFacts;

  isReservedName =
    key:
    elem key jobenvNames.reserved
    || any (p: hasPrefix p key) jobenvNames.reservedPrefixes
    || any (s: hasSuffix s key && key != s) jobenvNames.reservedSuffixes;
  isNodeToolName = key: elem key jobenvNames.nodeTools || any (p: hasPrefix p key) jobenvNames.nodeToolPrefixes;
  isControlName = key: elem key jobenvNames.nodeControl || elem key jobenvNames.payloadControl;
  # A file name jobenv reads from a secrets directory, and a key of a secrets env file.
  isVariableName = key: match "[A-Za-z_][A-Za-z0-9_]*" key != null;

  # ---- jobenv's node files ----------------------------------------------------------------

  # The structural pins the deployment programs read from their environment besides the keys
  # the deployment repository publishes. Declared here so that a node can set them in
  # deploy-env.json, and node-only: a payload's value for one is dropped (a job must not choose
  # which module source a deploy evaluates, nor what nix-shell's evaluation reads), unless the
  # operator declares the pin otherwise (`deployKeys.<pin>.nodeOnly = false`).
  structuralKeys =
    mapAttrs
      (_: description: {
        inherit description;
        nodeOnly = true;
      })
      {
        HOSTING_CONFIG = "Structural pin: the hosting provider's configuration the deployment programs read";
        PIN_EFFECT = "Structural pin: the effect of the version pins on a deployment";
        SELF_MODULE_SOURCE = "Structural pin: the source of the deployment's own NixOS modules";
        OPERATOR_MODULE_SOURCE = "Structural pin: the source of the operator's NixOS modules";
        VERSION_LAYERS = "Structural pin: the layers of versions a deployment is built from";
        DNS_DOMAIN = "Structural pin: the DNS domain deployments are published under";
      };

  # deploy-env.json: the node-owned keys, a JSON object of strings.
  renderDeployEnv =
    deployEnv:
    mapAttrs (
      name: value:
      if isString value then value else throw "services.fediversity-windmill.deployEnv.${name} must be a string"
    ) deployEnv;

  # ---- the deployment repository ----------------------------------------------------------

  # Where the module looks in the deployment repository's outputs (seed 001 US2): the key sets
  # a front-end sends, under `lib`, each a list of names or an attrset of name -> description
  # (a string) or name -> { description ? ; default ? ; } ...
  repositoryKeySets = [
    "deployEnvKeys"
    "standaloneEnvKeys"
  ];
  # ... `lib.deployEnvKeysByMethod`, an attrset of method -> such a key set, ...
  repositoryKeySetsByMethod = "deployEnvKeysByMethod";
  # ... `lib.nodeEnvKeys`, the keys the node (never a front-end) provides, node-only here ...
  repositoryNodeKeys = "nodeEnvKeys";
  # ... and the deployment attributes: `lib.deploymentAttributeNames` (a list of names, seed
  # 001's name for it) when the repository publishes it, else, with a warning
  # (`repositoryWarnings`), the names of its `devShells.<system>` (what jobenv's
  # `nix-shell <root> -A devShells.<SYSTEM>.<ATTRIBUTE>` can instantiate), every one of them
  # deployable then.
  repositoryAttributes = "deploymentAttributeNames";
  # A name this module read before it followed the seed; no publisher of it is known. It is not
  # read: a repository that has it only is told so in that warning.
  formerRepositoryAttributes = "deploymentAttributes";
  # What jobenv accepts as an ATTRIBUTE (its payload schema), and the option's type.
  attributePattern = "[A-Za-z0-9][A-Za-z0-9_-]*";

  # The repository's list of attribute names, checked: a list of names jobenv would accept.
  publishedAttributeNames =
    names:
    let
      where = "services.fediversity-windmill.deploymentRepository: lib.${repositoryAttributes}";
    in
    if !builtins.isList names then
      throw "${where} is not a list of attribute names"
    else
      map (
        name:
        if !isString name then
          throw "${where} lists something that is not an attribute name"
        else if match attributePattern name == null then
          throw "${where} lists \"${name}\", which is not an attribute name (${attributePattern})"
        else
          name
      ) names;

  # The repository's outputs: a flake's (an attrset such as `inputs.deployments`) as they are;
  # a path (or a derivation) imported, and called with `{ }` when that is a function, the way
  # nix-shell evaluates DEPLOYMENT_ROOT.
  deploymentRepositoryOutputs =
    repository:
    let
      isDerivation = (repository.type or null) == "derivation";
      # A path is imported where it is (not its store copy, which evaluation need not have
      # made yet); a derivation's output has to be built first (import from derivation).
      imported = import (if isDerivation then "${repository}" else repository);
    in
    if builtins.isAttrs repository && !isDerivation then
      repository
    else if builtins.isFunction imported then
      imported { }
    else
      imported;

  # One key set of the repository as name -> { description, default, nodeOnly } with null for
  # what it does not say (a default that is not a string becomes its JSON text, as jobenv passes
  # a payload's arrays and objects). `where` names the set in errors.
  publishedKeySet =
    where: nodeOnly: set:
    let
      entry =
        name: v:
        if isString v then
          {
            description = v;
            default = null;
            inherit nodeOnly;
          }
        else if builtins.isAttrs v then
          {
            description = v.description or null;
            default =
              let
                d = v.default or null;
              in
              if d == null || isString d then d else toJSON d;
            inherit nodeOnly;
          }
        else
          throw "services.fediversity-windmill.deploymentRepository: ${where}.${name} is neither a description (a string) nor { description; default; }";
    in
    if builtins.isList set then
      listToAttrs (
        map (
          name:
          if isString name then
            {
              inherit name;
              value = {
                description = null;
                default = null;
                inherit nodeOnly;
              };
            }
          else
            throw "services.fediversity-windmill.deploymentRepository: ${where} lists something that is not a key name"
        ) set
      )
    else if builtins.isAttrs set then
      mapAttrs entry set
    else
      throw "services.fediversity-windmill.deploymentRepository: ${where} is neither a list of key names nor an attrset of keys";

  # Key declarations merged layer by layer, field by field: a field a later layer leaves null
  # (or out) keeps the value of an earlier one.
  mergeKeys = builtins.foldl' (
    acc: layer: acc // mapAttrs (name: entry: (acc.${name} or { }) // withoutNulls entry) layer
  ) { };

  # What the repository publishes: `keys` (its key sets merged, its nodeEnvKeys node-only, its
  # control keys left out: jobenv consumes those itself and refuses a keys file that declares
  # one), `attributes`, and `published`, the outputs found (for the error when there are none).
  repositoryPublished =
    { outputs, system }:
    let
      l = outputs.lib or { };
      byMethod = l.${repositoryKeySetsByMethod} or { };
      shells = outputs.devShells.${system} or null;
      sets =
        concatLists (map (n: optional (l ? ${n}) (publishedKeySet "lib.${n}" null l.${n})) repositoryKeySets)
        ++ map (m: publishedKeySet "lib.${repositoryKeySetsByMethod}.${m}" null byMethod.${m}) (attrNames byMethod)
        ++ optional (l ? ${repositoryNodeKeys}) (publishedKeySet "lib.${repositoryNodeKeys}" true l.${repositoryNodeKeys});
      merged = mergeKeys sets;
    in
    {
      keys = mapAttrs (
        _: k:
        {
          description = "Declared by the deployment repository";
          default = null;
          nodeOnly = false;
        }
        // k
      ) (removeAttrs merged (filter isControlName (attrNames merged)));
      attributes =
        if l ? ${repositoryAttributes} then
          publishedAttributeNames l.${repositoryAttributes}
        else if shells != null then
          attrNames shells
        else
          [ ];
      # Where `attributes` came from: the list, the dev shells (null: neither).
      attributesFrom =
        if l ? ${repositoryAttributes} then
          "lib.${repositoryAttributes}"
        else if shells != null then
          "devShells.${system}"
        else
          null;
      published =
        filter (n: l ? ${n}) (repositoryKeySets ++ [ repositoryKeySetsByMethod repositoryNodeKeys repositoryAttributes ])
        ++ optional (shells != null) "devShells.${system}";
      # The former name, when the repository still has it (see `repositoryWarnings`).
      hasFormerAttributes = l ? ${formerRepositoryAttributes};
      inherit system;
    };

  # What evaluation warns of in what the repository publishes (`repositoryPublished`): a
  # repository without `lib.deploymentAttributeNames` has every dev shell of the node's system
  # taken as a deployment, which may hold shells that are no deployment (a developer's
  # `default`), and a job may then deploy any of them.
  repositoryWarnings =
    published:
    optional (published.attributesFrom == "devShells.${published.system}" && published.attributes != [ ]) (
      "the deployment repository publishes no lib.${repositoryAttributes} (the list of its deployments): "
      + "the module takes the name of every dev shell of ${published.attributesFrom} as a deployment attribute "
      + "(${concatStringsSep ", " published.attributes}), and a job may deploy any of them; "
      + "publish lib.${repositoryAttributes} in the repository"
      + (
        if published.hasFormerAttributes then
          " (its lib.${formerRepositoryAttributes} is not read: rename it to lib.${repositoryAttributes})"
        else
          ""
      )
    );

  # Every key of deploy-keys.json, lowest layer first: the structural pins (node-only), the
  # node's own file-path keys (`nodeKeys`, node-only), the repository's keys, then the operator's
  # deployKeys, field by field. So `deployKeys.HOSTING_CONFIG.nodeOnly = false` lets a front-end
  # send that pin and keeps its description, and `deployKeys.DOMAIN.default = "…"` changes only
  # the default of a key the repository declares. A description no layer gives stays null (an
  # assertion names the key).
  declaredKeys =
    {
      repository ? { },
      operator ? { },
      nodeKeys ? { },
    }:
    mapAttrs (_: k: {
      description = k.description or null;
      default = k.default or null;
      nodeOnly = k.nodeOnly or false;
    }) (mergeKeys [
      structuralKeys
      nodeKeys
      repository
      operator
    ]);

  # deploy-keys.json: {"KEY": {"description": "...", "default": "..."?, "node_only": true?}},
  # from merged declarations (`declaredKeys`).
  renderKeys =
    keys:
    mapAttrs (
      _: k:
      { description = if (k.description or null) == null then "" else k.description; }
      // optionalAttrs ((k.default or null) != null) { inherit (k) default; }
      // optionalAttrs (k.nodeOnly or false) { node_only = true; }
    ) keys;

  # deploy-keys.json of a node without a repository: the operator's keys (deployKeys) with the
  # structural pins.
  renderDeployKeys = operator: renderKeys (declaredKeys { inherit operator; });

  # When neither the repository nor the options give keys or attributes, every job would fail:
  # evaluation fails instead, naming what is missing. `published`: what the repository
  # publishes (null: no repository).
  repositoryProblems =
    {
      published ? null,
      system,
      operatorKeys,
      repositoryKeys,
      attributes,
    }:
    let
      outputs = concatStringsSep ", " (
        map (n: "lib.${n}") (repositoryKeySets ++ [ repositoryKeySetsByMethod repositoryNodeKeys ])
      );
      found = if published == [ ] then "nothing the module reads" else concatStringsSep ", " published;
    in
    optional (repositoryKeys == { } && operatorKeys == { }) (
      if published == null then
        "no deployment keys: set deploymentRepository (the module reads ${outputs}) or declare deployKeys"
      else
        "deploymentRepository publishes no keys (it has ${found}; the module reads ${outputs}) and deployKeys is empty: publish the keys in the repository or declare them in deployKeys"
    )
    ++ optional (attributes == [ ]) (
      if published == null then
        "no deployment attributes: set deploymentRepository (the module reads lib.${repositoryAttributes}, else the names of devShells.${system}) or deploymentAttributes"
      else
        "deploymentRepository publishes no deployment attributes (it has ${found}; the module reads lib.${repositoryAttributes}, else the names of devShells.${system}) and deploymentAttributes is empty: every job would be refused"
    );

  # Keys declared with no description anywhere (jobenv's `keys` would show nothing).
  undescribedKeyProblems =
    keys:
    map (k: "deployKeys.${k}.description is not set and the deployment repository does not declare ${k}: say what the key means") (
      filter (k: keys.${k}.description == null) (attrNames keys)
    );

  # The repository's node-only keys that no node source sets and that have no default: every
  # deployment gets nothing for them (a warning: a repository may list optional ones).
  unsetNodeKeys =
    {
      repositoryKeys,
      nodeSet,
    }:
    filter (k: repositoryKeys.${k}.nodeOnly && (repositoryKeys.${k}.default or null) == null && !(elem k nodeSet)) (
      attrNames repositoryKeys
    );

  # The node's file-path keys of the Incus store's credentials (SC-002), for those configured:
  # `declarations` (node-only keys of deploy-keys.json) and `values` (deploy-env.json).
  # `credentials`: the module's `credentials` options.
  credentialPathKeys =
    credentials:
    let
      c = {
        incusStoreSshKey = null;
        incusStoreSigningKey = null;
        incusStoreSshKeyVariable = null;
        incusStoreSigningKeyVariable = null;
      }
      // credentials;
      keys =
        optional (c.incusStoreSshKey != null && c.incusStoreSshKeyVariable != null) {
          name = c.incusStoreSshKeyVariable;
          path = paths.incusStoreSshKey;
          what = "SSH key";
        }
        ++ optional (c.incusStoreSigningKey != null && c.incusStoreSigningKeyVariable != null) {
          name = c.incusStoreSigningKeyVariable;
          path = paths.incusStoreSigningKey;
          what = "signing key";
        };
    in
    {
      declarations = listToAttrs (
        map (k: {
          inherit (k) name;
          value = {
            description = "Path of the Incus store's ${k.what} on the node (rendered by its OpenBao agent, readable by the worker's group)";
            nodeOnly = true;
          };
        }) keys
      );
      values = listToAttrs (
        map (k: {
          inherit (k) name;
          value = k.path;
        }) keys
      );
    };

  # The seed's source of the Incus deployments' token (002 US2.2): `TF_VAR_token` from the
  # secret `incus-deploy/<hostName>/tokenHosts` (its field `value`) of the KV v2 mount
  # `<prefix>/secret`, as an OpenBao agent template.
  seedTfTokenTemplate =
    { prefix, hostName }:
    ''{{ with secret "${prefix}/secret/data/incus-deploy/${hostName}/tokenHosts" }}{{ .Data.data.value }}{{ end }}'';

  # deployment-attributes.json: the attribute names, a JSON array, sorted and without repeats.
  renderDeploymentAttributes = uniqueSorted;

  # The variable names a secrets env file of the credentials defines (jobenv reads them as
  # node secrets): `TF_VAR_token` from tf-token.env when it is configured.
  credentialEnvKeys = { tfToken ? null }: optional (tfToken != null) "TF_VAR_token";

  # required-secrets.json: every secret the node declares, which jobenv must find before it runs
  # a job (it refuses with "node not ready", exit 75, otherwise).
  renderRequiredSecrets =
    {
      deploySecrets,
      tfToken ? null,
    }:
    uniqueSorted (attrNames deploySecrets ++ credentialEnvKeys { inherit tfToken; });

  # Everything on the node side that jobenv would refuse at run time — every job failing with
  # exit 2 — found at evaluation instead. Each entry is a message that names the option and the
  # key. `declared` are the names of deploy-keys.json (the structural pins and deployKeys).
  # The rules are jobenv's (docs/operators/jobenv.md, "The environment of the program" and "Control keys").
  nodeProblems =
    {
      deployEnv,
      deploySecrets,
      declared ? attrNames structuralKeys,
      tfToken ? null,
    }:
    let
      envFileKeys = credentialEnvKeys { inherit tfToken; };
      sources =
        map (key: {
          inherit key;
          kind = "env";
          option = "deployEnv.${key}";
        }) (attrNames deployEnv)
        ++ map (key: {
          inherit key;
          kind = "secret";
          option = "deploySecrets.${key}";
        }) (attrNames deploySecrets)
        ++ map (key: {
          inherit key;
          kind = "envFile";
          option = "credentials.tfToken (${key} in ${paths.tfTokenEnv})";
        }) envFileKeys;

      keyProblems =
        s:
        let
          k = s.key;
        in
        if s.kind == "env" && (k == "" || match ".*=.*" k != null) then
          [ "${s.option}: \"${k}\" is not a variable name jobenv can pass (empty, or with '=')" ]
        else if s.kind != "env" && !isVariableName k then
          [ "${s.option}: \"${k}\" is not a variable name ([A-Za-z_][A-Za-z0-9_]*); jobenv would never read this secret" ]
        else if elem k jobenvNames.derived then
          [ "${s.option}: jobenv derives ${k} itself; no node or job may set it" ]
        else if elem k jobenvNames.payloadControl && !(elem k jobenvNames.sharedControl) then
          [ "${s.option}: ${k} is a control key only a job payload may set" ]
        else if elem k declared || elem k jobenvNames.nodeControl || elem k jobenvNames.sharedControl || isNodeToolName k then
          [ ]
        else if isReservedName k then
          [ "${s.option}: ${k} is a reserved name (it steers the loader, a shell, an interpreter, git, ssh, Nix or OpenTofu) and is neither declared in deployKeys nor a Nix/OpenTofu variable a node may set; jobenv refuses it" ]
        else
          [ "${s.option}: ${k} is neither declared (deployKeys or the structural pins) nor a control key nor a Nix/OpenTofu variable a node may set; jobenv refuses it" ];

      # The same key in two node sources.
      keysOf = list: map (s: s.key) list;
      duplicates = filter (k: length (filter (s: s.key == k) sources) > 1) (uniqueSorted (keysOf sources));
      duplicateProblems = map (
        k:
        "${k} is set by ${concatStringsSep " and " (map (s: s.option) (filter (s: s.key == k) sources))}; jobenv refuses a key from two node sources"
      ) duplicates;

      set = k: elem k (keysOf sources);
      inEnv = k: deployEnv ? ${k};
      absolute = k: inEnv k && !(hasPrefix "/" deployEnv.${k});
    in
    concatLists (map keyProblems sources)
    ++ duplicateProblems
    ++ optional (!set "DEPLOYMENT_ROOT") "deployEnv.DEPLOYMENT_ROOT is required: the tree that holds the deployment programs (set deploymentRepository, or deployEnv.DEPLOYMENT_ROOT)"
    ++ optional (!set "DEPLOYMENT_NIXPKGS" && !set "NIXPKGS") "deployEnv.DEPLOYMENT_NIXPKGS (or NIXPKGS) is required: the nixpkgs the programs run with"
    ++ optional (absolute "DEPLOYMENT_ROOT") "deployEnv.DEPLOYMENT_ROOT must be an absolute path"
    ++ optional (absolute "DEPLOYMENT_NIXPKGS") "deployEnv.DEPLOYMENT_NIXPKGS must be an absolute path"
    ++ optional (absolute "NIXPKGS") "deployEnv.NIXPKGS must be an absolute path"
    ++ optional (
      inEnv "NIXPKGS" && inEnv "DEPLOYMENT_NIXPKGS" && deployEnv.NIXPKGS != deployEnv.DEPLOYMENT_NIXPKGS
    ) "deployEnv.NIXPKGS and deployEnv.DEPLOYMENT_NIXPKGS are both set and differ (DEPLOYMENT_NIXPKGS defaults to pkgs.path: set it, not NIXPKGS)"
    ++ optional (
      inEnv "STATE_BASE_ADDRESS" && !(hasPrefix "http://" deployEnv.STATE_BASE_ADDRESS || hasPrefix "https://" deployEnv.STATE_BASE_ADDRESS)
    ) "deployEnv.STATE_BASE_ADDRESS must be an http:// or https:// URL"
    ++ optional (
      inEnv "SYSTEM" && match "[a-z0-9_]+-[a-z0-9_]+" deployEnv.SYSTEM == null
    ) "deployEnv.SYSTEM \"${deployEnv.SYSTEM}\" must match ^[a-z0-9_]+-[a-z0-9_]+$"
    ++ optional (
      !set "STATE_BASE_ADDRESS" && (set "TF_HTTP_USERNAME" || set "TF_HTTP_PASSWORD")
    ) "TF_HTTP_USERNAME/TF_HTTP_PASSWORD are set but deployEnv.STATE_BASE_ADDRESS is not: jobenv sends the node's state credentials only to the node's own state backend"
    ++ optional (inEnv "EVENTS_SECRET") "deployEnv.EVENTS_SECRET: the progress events' secret must come from deploySecrets (deploy-env.json is world-readable and not redacted)"
    # DD-0012 rows carry their own secrets (the payload's EVENTS_SECRET): there the node needs
    # only EVENTS_URL.
    ++ optional (
      set "EVENTS_URL" != set "EVENTS_SECRET" && !(set "EVENTS_URL" && (deployEnv.EVENTS_FORMAT or "jobenv") == "dd-0012")
    ) "EVENTS_URL and EVENTS_SECRET: progress events need both (one of them is set), unless deployEnv.EVENTS_FORMAT is \"dd-0012\" (then EVENTS_URL alone: each row's secret comes with its job)";

  # Keys declared in deployKeys that jobenv refuses to find in the keys file: its control keys.
  deployKeysProblems =
    deployKeys:
    map (
      k: "deployKeys.${k}: ${k} is a control key jobenv consumes and never passes to the program; a keys file that declares it is refused"
    ) (filter isControlName (attrNames deployKeys));

  # The nixpkgs the `nixpkgs` registry entry points at: the deployments' own.
  deploymentNixpkgs = deployEnv: deployEnv.DEPLOYMENT_NIXPKGS or deployEnv.NIXPKGS or null;

  # ---- what the OpenBao agent renders -----------------------------------------------------

  # One template stanza (OpenBao agent JSON configuration) for a file readable by the worker's
  # group only: owner root (the agent runs as root, so that it can set the group), group
  # `group`, mode 0440. A template that refers to a missing key fails instead of rendering an
  # empty value.
  agentTemplate =
    {
      destination,
      contents,
      group,
      perms ? "0440",
    }:
    {
      inherit
        contents
        destination
        group
        perms
        ;
      error_on_missing_key = true;
    };

  # The files the agent renders for the module, by destination: one per deploy secret under the
  # secrets directory, and the credentials of the Incus deployments (each only when configured):
  # tf-token.env (`TF_VAR_token=<the template's output>`, a secrets env file of jobenv) and the
  # two Incus store keys. `credentials` holds template sources or null.
  renderedFiles =
    {
      deploySecrets,
      credentials ? { },
    }:
    let
      c = {
        tfToken = null;
        incusStoreSshKey = null;
        incusStoreSigningKey = null;
      }
      // credentials;
    in
    listToAttrs (
      map (name: {
        name = "${paths.secretsDir}/${name}";
        value = deploySecrets.${name};
      }) (attrNames deploySecrets)
      ++ optional (c.tfToken != null) {
        name = paths.tfTokenEnv;
        value = "TF_VAR_token=${c.tfToken}\n";
      }
      ++ optional (c.incusStoreSshKey != null) {
        name = paths.incusStoreSshKey;
        value = c.incusStoreSshKey;
      }
      ++ optional (c.incusStoreSigningKey != null) {
        name = paths.incusStoreSigningKey;
        value = c.incusStoreSigningKey;
      }
    );

  # The template stanzas for `renderedFiles`, sorted by destination.
  agentTemplates =
    {
      deploySecrets,
      credentials ? { },
      group,
      backup ? null,
    }:
    let
      files = renderedFiles { inherit deploySecrets credentials; };
      backupFiles = backupRenderedFiles backup;
    in
    map (
      destination:
      agentTemplate {
        inherit destination group;
        contents = files.${destination};
      }
    ) (attrNames files)
    # The backup's credentials are root's alone: the worker's jobs never need them.
    ++ map (
      destination:
      agentTemplate {
        inherit destination;
        contents = backupFiles.${destination};
        group = "root";
        perms = "0400";
      }
    ) (attrNames backupFiles);

  # ---- the backup of Windmill's database (FR-015) -----------------------------------------

  # What the agent renders for the backup, by destination: the restic repository's password
  # and, for an S3 repository, an environment file (`AWS_ACCESS_KEY_ID=…` lines). `backup`: the
  # module's `backup` options, or null.
  backupRenderedFiles =
    backup:
    optionalAttrs (backup != null && (backup.enable or false)) (
      optionalAttrs (backup.passwordTemplate != null) { ${paths.backupPassword} = backup.passwordTemplate; }
      // optionalAttrs (backup.environmentTemplate != null) { ${paths.backupEnvironment} = backup.environmentTemplate; }
    );

  backupTag = "windmill-database";
  # The dump's name in a snapshot (restic stores it at the snapshot's root).
  backupFileName = "windmill.sql";

  # The dump of the local database, as the one PostgreSQL role that reads every row whatever
  # Windmill's row-level security says (the superuser `postgres`, by peer authentication), in
  # a clean environment (restic's holds the repository's credentials). Plain SQL: restic
  # deduplicates it between days, and `psql` restores it. A program and its arguments: restic
  # runs it itself (--stdin-from-command), without a shell.
  localDumpCommand =
    {
      setpriv,
      pgDump,
      database,
    }:
    [
      setpriv
      "--reuid=postgres"
      "--regid=postgres"
      "--init-groups"
      "--reset-env"
      "--"
      pgDump
      "--dbname=${database}"
    ];

  # The backup's unit (root): restic runs the dump and stores its output as one file; a dump
  # that fails (its exit code) fails the backup and leaves no snapshot, which a pipe into
  # `restic backup --stdin` would not. Then, with `pruneOpts`, old snapshots of the tag are
  # forgotten and pruned. `restic`, `dumpCommand` and `initScript` are store paths.
  backupService =
    {
      restic,
      repository,
      dumpCommand,
      initScript ? null,
      pruneOpts ? [ ],
      hasEnvironmentFile ? false,
      agent ? agentUnit,
    }:
    {
      description = "Back up Windmill's database with restic (fediversity)";
      after = [
        "postgresql.service"
        agent
        "network-online.target"
      ];
      wants = [ "network-online.target" ];
      environment = {
        RESTIC_REPOSITORY = repository;
        RESTIC_PASSWORD_FILE = paths.backupPassword;
        RESTIC_CACHE_DIR = "/var/cache/fediversity-windmill-backup";
      };
      # A long backup is not cut short by a `switch`.
      restartIfChanged = false;
      serviceConfig = {
        Type = "oneshot";
        ExecStartPre = optional (initScript != null) initScript;
        ExecStart = [
          (concatStringsSep " " (
            [
              restic
              "backup"
              "--stdin-from-command"
              "--stdin-filename"
              backupFileName
              "--tag"
              backupTag
              "--"
            ]
            ++ dumpCommand
          ))
        ]
        ++ optional (pruneOpts != [ ]) (
          concatStringsSep " " (
            [
              restic
              "forget"
              "--prune"
              "--tag"
              backupTag
            ]
            ++ pruneOpts
          )
        );
        CacheDirectory = "fediversity-windmill-backup";
        CacheDirectoryMode = "0700";
        UMask = "0077";
        # setpriv's change to postgres needs these two; nothing else of root's.
        CapabilityBoundingSet = [
          "CAP_SETUID"
          "CAP_SETGID"
        ];
        NoNewPrivileges = true;
        PrivateTmp = true;
        PrivateDevices = true;
        ProtectSystem = "strict";
        ProtectHome = true;
        ProtectKernelTunables = true;
        ProtectKernelModules = true;
        ProtectControlGroups = true;
        RestrictAddressFamilies = [
          "AF_UNIX"
          "AF_INET"
          "AF_INET6"
        ];
        SystemCallArchitectures = "native";
      }
      // optionalAttrs hasEnvironmentFile {
        # Not `-`-prefixed: without its credentials the backup fails, loudly.
        EnvironmentFile = paths.backupEnvironment;
      };
    };

  # Creates the repository when it does not exist yet (bash; `restic` a store path).
  backupInitScript =
    { restic }:
    concatStringsSep "\n" [
      "# restic init, once: when the repository has no config yet."
      "if ! ${shellQuote restic} cat config >/dev/null 2>&1; then"
      "  ${shellQuote restic} init"
      "fi"
      ""
    ];

  # `fediversity-windmill-restic` (bash), restic with the backup's repository and credentials,
  # for listing and restoring (docs/operators/lifecycle.md, "Restoring Windmill's database"). The environment file
  # is read as systemd reads an EnvironmentFile of KEY=VALUE lines, values verbatim.
  resticWrapper =
    { restic, repository }:
    concatStringsSep "\n" [
      "set -euo pipefail"
      "export RESTIC_REPOSITORY=${shellQuote repository}"
      "export RESTIC_PASSWORD_FILE=${shellQuote paths.backupPassword}"
      "export RESTIC_CACHE_DIR=/var/cache/fediversity-windmill-backup"
      "if [ -e ${shellQuote paths.backupEnvironment} ]; then"
      "  while IFS= read -r line || [ -n \"$line\" ]; do"
      "    case \"$line\" in ''|'#'*) continue ;; esac"
      "    export \"\${line%%=*}=\${line#*=}\""
      "  done < ${shellQuote paths.backupEnvironment}"
      "fi"
      "exec ${shellQuote restic} \"$@\""
      ""
    ];

  backupProblems =
    {
      backup,
      localDatabase,
    }:
    optionals' backup.enable (
      optional (backup.repository == null) "backup.repository is required with backup.enable (e.g. \"s3:https://garage.example.org/windmill-backups\")"
      ++ optional (backup.passwordTemplate == null) "backup.passwordTemplate is required with backup.enable: the OpenBao agent template of the restic repository's password"
      ++ optional (
        backup.dumpCommand == null && !localDatabase
      ) "backup.dumpCommand: the default dumps the local database (services.windmill.database.createLocally), which this node does not have; set a command that dumps Windmill's database to stdout, its credentials from a file (never in its arguments)"
    );

  # The configuration of the module's own agent (`openbaoAgent.enable`): the operator's settings
  # (address, auto_auth, ...) with the module's template stanzas before the operator's own.
  agentConfig =
    { settings, templates }:
    settings
    // {
      template = templates ++ (settings.template or [ ]);
    };

  # The module's own agent as the unit `openbao-agent-default`, like nixpkgs' vault-agent
  # module runs one (which passes the `agent` subcommand only to a package named `vault`, so it
  # cannot run OpenBao's `bao` as is). `bao`, `kill` and `configFile` are store paths.
  agentService =
    {
      bao,
      kill,
      configFile,
    }:
    {
      description = "OpenBao agent rendering the fediversity Windmill secrets";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
      serviceConfig = {
        # As root: the rendered files belong to root and the worker's group.
        ExecStart = "${bao} agent -config=${configFile}";
        ExecReload = "${kill} -s HUP $MAINPID";
        KillSignal = "SIGINT";
        Restart = "on-failure";
        RestartSec = "5s";
      };
    };

  # ---- the bootstrap ----------------------------------------------------------------------

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
      uiLabel = b.uiAuth.tokenLabel or bootstrapDefaults.uiAuth.tokenLabel;
      # Windmill's own rules, which the bootstrap checks.
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
    ++ (if !windmillsOwnLabel b.token.label then [ ] else [ "bootstrap.token.label \"${b.token.label}\" is a label Windmill gives its own tokens (login sessions, job tokens): revoking older tokens of the label would revoke those; the bootstrap refuses it" ])
    ++ (if !windmillsOwnLabel uiLabel then [ ] else [ "bootstrap.uiAuth.tokenLabel \"${uiLabel}\" is a label Windmill gives its own tokens (login sessions, job tokens): revoking older tokens of the label would revoke those; the bootstrap refuses it" ])
    ++ (
      if b.token.label != uiLabel then
        [ ]
      else
        [ "bootstrap.token.label and bootstrap.uiAuth.tokenLabel are both \"${uiLabel}\": the bootstrap revokes the older tokens of each label, so the front-end's token and the UI's would revoke each other; give them different labels" ]
    )
    ++ (
      let
        url = b.windmill.databaseUrl or null;
        file = b.windmill.databaseUrlFile;
      in
      if url == null && file == null then
        [ "bootstrap.windmill.databaseUrlFile is not set and the Windmill database is not nixpkgs' local one (services.windmill.database.createLocally), for which the module sets bootstrap.windmill.databaseUrl: the bootstrap needs Windmill's database to set the superadmin's password; give it the DSN in a file" ]
      else if url != null && file != null then
        [ "bootstrap.windmill.databaseUrl and bootstrap.windmill.databaseUrlFile are both set: give the bootstrap one DSN" ]
      else if url != null && dsnHasPassword url then
        [ "bootstrap.windmill.databaseUrl holds a password, and would be in the world-readable Nix store: put that DSN in a file (bootstrap.windmill.databaseUrlFile); the bootstrap refuses it" ]
      else
        [ ]
    )
    ++ (if workspaceId != null then [ ] else [ "bootstrap.workspace.id \"${b.workspace.id}\" is not a Windmill workspace id (word characters, single hyphens between them)" ])
    ++ (if folder != null then [ ] else [ "bootstrap.workspace.folder \"${b.workspace.folder}\" is not a Windmill folder name (letters, digits and underscores)" ]);


  # What evaluation says about bootstrap options the bootstrap accepts with a warning of its own.
  bootstrapWarnings =
    bootstrap:
    optional ((bootstrap.token.scopes or null) == [ ]) "bootstrap.token.scopes is [ ]: the front-end's token (label \"${bootstrap.token.label}\", stored in OpenBao) is unscoped, with its operator's full rights${
      if bootstrap.token.bindToWorkspace or true then " in the workspace" else ""
    }: whoever holds it runs every script of the folder, which may read deploy secrets of the node. Leave it null for the scoped default";

  # The defaults of every bootstrap option, as "Configuration" of docs/operators/bootstrap.md lists them
  # (camelCase here, the renderer writes the file's snake_case). Null: required, or "not set"
  # where the bootstrap has a fallback (openbao.addr: $BAO_ADDR/$VAULT_ADDR; openbao.tokenFile: $BAO_TOKEN or an
  # agent listener with auto-auth).
  bootstrapDefaults = {
    windmill = {
      url = "http://127.0.0.1:8001";
      adminEmail = "admin@windmill.dev";
      adminPasswordFile = null;
      defaultPassword = "changeme";
      databaseUrl = null;
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
      # null: the bootstrap's default scopes (run the folder's deploy and destroy, read and
      # cancel jobs); [ ]: an unscoped token.
      scopes = null;
      bindToWorkspace = true;
      # The workspace operator the front-end's token belongs to.
      userEmail = "frontend@fediversity.invalid";
      username = "frontend";
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
      # The label of the UI include's own (full-rights) token.
      tokenLabel = "fediversity-ui";
    };
    retry = {
      loginAttempts = 12;
      delaySeconds = 5;
      readyTimeoutSeconds = 300;
    };
  };

  # How the bootstrap reaches nixpkgs' local database (`services.windmill.database.createLocally`,
  # nixpkgs' default) to write the superadmin's password hash, with nothing the operator writes.
  # nixpkgs makes the database `<database>` owned by the login role `<user>` (the same name: its
  # module asserts it), and its windmill-initdb unit grants that role `windmill_admin`; Windmill's
  # units run as the OS user `<user>` and connect over the Unix socket, which NixOS' PostgreSQL
  # authenticates by peer (`local all all peer`: the OS user's name must be the role's, no
  # password). The bootstrap runs as root (it reads root-only secrets, sets the nginx include's
  # group), so peer authentication alone would refuse it. Hence a pg_ident map that lets root,
  # and `<user>` itself (a map replaces the same-name rule), in as `<user>`, on a pg_hba line for
  # that database and role only, before nixpkgs' defaults; every other connection keeps
  # nixpkgs' rules. Root may already become any user of the node, so this gives it nothing new.
  # `dsn` holds no password (peer authentication needs none): it is a setting, rendered into
  # the bootstrap's configuration, not a secret file.
  localDatabaseMap = "fediversity-windmill";
  localDatabase =
    {
      database,
      user,
      port ? 5432,
      socketDir ? "/run/postgresql",
      bootstrapUser ? "root",
    }:
    let
      # Names that need no quoting in a DSN, pg_hba.conf or pg_ident.conf.
      plain =
        what: name:
        if match "[A-Za-z0-9_][A-Za-z0-9_.-]*" name != null then
          name
        else
          throw "services.fediversity-windmill: ${what} \"${name}\" needs quoting in a DSN and in pg_hba.conf; with such a name, give the bootstrap its DSN yourself (bootstrap.windmill.databaseUrlFile)";
      db = plain "services.windmill.database.name" database;
      role = plain "services.windmill.database.user" user;
      os = plain "the bootstrap's user" bootstrapUser;
      dir =
        if match "/[^[:space:]'\\]*" socketDir != null then
          socketDir
        else
          throw "services.fediversity-windmill: the socket directory \"${socketDir}\" needs quoting in a DSN";
    in
    {
      dsn = "host=${dir} port=${toString port} dbname=${db} user=${role}";
      identMap = ''
        ${localDatabaseMap} ${os} ${role}
        ${localDatabaseMap} ${role} ${role}
      '';
      authentication = ''
        local ${db} ${role} peer map=${localDatabaseMap}
      '';
    };

  # Whether a DSN (key/value or URL) carries a password: such a DSN belongs in a file, not in the
  # world-readable configuration. Like the bootstrap's own check, which parses it.
  dsnHasPassword =
    dsn:
    match "(.*[[:space:]])?password[[:space:]]*=.*" dsn != null
    || match "[a-z]+://[^/@]*:[^/@]*@.*" dsn != null
    || match "[^?]*\\?(.*&)?password=.*" dsn != null;

  # The superadmin password file the bootstrap reads: the operator's, else the generated one.
  adminPasswordFileOf = b: if (b.windmill.adminPasswordFile or null) != null then b.windmill.adminPasswordFile else paths.generatedAdminPassword;

  # FR-008: with no adminPasswordFile the node generates the superadmin's password once, as the
  # seed's component does (`openssl rand -hex 32` strength: 32 random bytes as 64 hex digits).
  # This script (bash) runs as root before the bootstrap. A file that exists is never changed,
  # so the password stays what the bootstrap enforced (an empty one is refused, not replaced:
  # someone emptied it). The password goes to the file through the shell's builtin printf only,
  # never into a process's arguments, and appears in no output; the file is written beside its
  # final name and linked there, so no reader ever sees half of it and two runs cannot both
  # create it. `od`, `tr`, `ln`, `rm`, `chmod`, `mktemp` and `sync` are programs (coreutils).
  adminPasswordScript =
    {
      file ? paths.generatedAdminPassword,
      od ? "od",
      tr ? "tr",
      ln ? "ln",
      rm ? "rm",
      chmod ? "chmod",
      mktemp ? "mktemp",
      sync ? "sync",
    }:
    let
      q = shellQuote;
      dir = dirOf file;
    in
    concatStringsSep "\n" [
      "set -euo pipefail"
      "umask 077"
      "file=${q file}"
      "if [ -e \"$file\" ] || [ -L \"$file\" ]; then"
      "  if [ ! -s \"$file\" ]; then"
      "    echo \"fediversity-windmill: $file exists but is empty: remove it to have a new superadmin password generated\" >&2"
      "    exit 1"
      "  fi"
      "  exit 0"
      "fi"
      "tmp=$(${q mktemp} ${q "${dir}/.admin-password.XXXXXXXX"})"
      # (`rm` is a store path or a bare name: no quoting needed inside the trap's quotes.)
      "trap '${rm} -f \"$tmp\"' EXIT"
      "password=$(${q od} -An -N32 -tx1 /dev/urandom | ${q tr} -d ' \\n')"
      "if [ \"\${#password}\" -ne 64 ]; then"
      "  echo \"fediversity-windmill: could not read 32 random bytes for the superadmin password\" >&2"
      "  exit 1"
      "fi"
      "printf '%s\\n' \"$password\" > \"$tmp\""
      "${q chmod} 0400 \"$tmp\""
      "${q sync} \"$tmp\""
      "${q ln} \"$tmp\" \"$file\""
      "${q sync} ${q dir}"
      ""
    ];

  # The unit that runs `adminPasswordScript` (its ExecStart added by the module): once per boot,
  # before the bootstrap, which requires it. Root, with its state directory the only writable
  # place, no network.
  adminPasswordUnit = "fediversity-windmill-admin-password";
  adminPasswordService = {
    description = "Generate the Windmill superadmin's password once (fediversity)";
    before = [ "fediversity-windmill-bootstrap.service" ];
    serviceConfig = {
      Type = "oneshot";
      RemainAfterExit = true;
      StateDirectory = baseNameOf paths.adminPasswordDir;
      StateDirectoryMode = "0700";
      UMask = "0077";
      CapabilityBoundingSet = [ "" ];
      NoNewPrivileges = true;
      PrivateNetwork = true;
      PrivateTmp = true;
      PrivateDevices = true;
      ProtectSystem = "strict";
      ProtectHome = true;
      ProtectKernelTunables = true;
      ProtectKernelModules = true;
      ProtectControlGroups = true;
      RestrictAddressFamilies = [ "AF_UNIX" ];
      SystemCallArchitectures = "native";
    };
  };

  # The bootstrap's JSON configuration ("Configuration" of docs/operators/bootstrap.md) from the module's
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
        # None given: the one the node generates (`adminPasswordScript`).
        admin_password_file = adminPasswordFileOf b;
        default_password = b.windmill.defaultPassword;
        database_role = b.windmill.databaseRole;
      }
      # One of the two (bootstrapProblems): a DSN without a secret as it is, or a file.
      // withoutNulls {
        database_url = b.windmill.databaseUrl or null;
        database_url_file = b.windmill.databaseUrlFile;
      };
      workspace = { inherit (b.workspace) id name folder; };
      scripts.dir = scriptsDir;
      # Rendered also at their defaults (null scopes: the bootstrap's default ones), so that the
      # file says what the node asked for.
      token = {
        inherit (b.token) label;
        revoke_previous = b.token.revokePrevious;
        scopes = b.token.scopes or bootstrapDefaults.token.scopes;
        bind_to_workspace = b.token.bindToWorkspace or bootstrapDefaults.token.bindToWorkspace;
        user_email = b.token.userEmail or bootstrapDefaults.token.userEmail;
        username = b.token.username or bootstrapDefaults.token.username;
      };
      inherit (b) settings;
      openbao = withoutNulls {
        inherit (b.openbao) addr field;
        token_file = b.openbao.tokenFile;
        path = required "openbao.path" b.openbao.path;
      };
      state_file = paths.bootstrapState;
      ui_auth = {
        inherit (b.uiAuth) file owner group mode;
        label = b.uiAuth.tokenLabel or bootstrapDefaults.uiAuth.tokenLabel;
      };
      retry = {
        login_attempts = b.retry.loginAttempts;
        delay_seconds = b.retry.delaySeconds;
        ready_timeout_seconds = b.retry.readyTimeoutSeconds;
      };
    };


  # ---- systemd ----------------------------------------------------------------------------

  # jobenv's default grace: SIGTERM to SIGKILL of a program tree (its `--grace`).
  jobenvGraceSeconds = jobenvFacts.defaults.graceSeconds;

  # Cluster mode refuses a grace that cannot end before a lease can expire (jobenv's
  # `Cluster::max_grace` at its default lease times): the module refuses it at evaluation.
  clusterGraceProblems =
    { grace, clusterOn }:
    optional (clusterOn && grace > jobenvFacts.defaults.clusterMaxGraceSeconds)
      "jobs.grace is ${toString grace} s, and cluster mode (cluster.dsnFile) takes at most ${toString jobenvFacts.defaults.clusterMaxGraceSeconds} s: a stop must end before the namespace's lease can expire on another node (jobenv would refuse every job with exit 2)";

  # Seconds a cancelled Windmill job gets after its SIGINT before the worker SIGKILLs its
  # process group. jobenv stops the program tree within its grace and exits; this leaves it 7 s
  # more than the grace for that (10 s with the default grace).
  maxWaitForSigint = graceSeconds: graceSeconds + 7;

  # The limits of every job (the module's `jobs.*`), as jobenv reads them from its environment:
  # the worker passes them to each job through WHITELIST_ENVS. `timeout` null: no limit (the
  # variable is not set at all). The defaults are jobenv's own.
  jobLimitsEnvironment =
    {
      timeout ? null,
      grace ? jobenvGraceSeconds,
      lockWait ? 0,
    }:
    {
      JOBENV_GRACE = toString grace;
      JOBENV_LOCK_TIMEOUT = toString lockWait;
    }
    // optionalAttrs (timeout != null) { JOBENV_TIMEOUT = toString timeout; };

  # What a stop of the worker may take beyond the drain's wait and jobenv's grace: the worker's
  # own exit and systemd's bookkeeping.
  stopMarginSeconds = 30;

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

  # The node's OpenTelemetry collector (the module's `otel.*`): where to, in which protocol,
  # the resource attributes every service reports, and a file holding the headers of every
  # request (a collector's API key: a secret, never in the store or a unit file).
  otelDefaults = {
    endpoint = null;
    protocol = "http/protobuf";
    resourceAttributes = {
      "service.namespace" = "fediversity";
    };
    headersFile = null;
  };

  # OTEL_RESOURCE_ATTRIBUTES: `key=value` pairs separated by commas, each value percent-encoded
  # where the list's own syntax (or a blank) would break it.
  renderResourceAttributes =
    attributes:
    concatStringsSep "," (
      map (
        key: "${key}=${builtins.replaceStrings [ "%" "," "=" " " ";" ] [ "%25" "%2C" "%3D" "%20" "%3B" ] attributes.${key}}"
      ) (attrNames attributes)
    );

  # With an endpoint, what every Windmill unit gets: where to export to and who it is. Windmill
  # emits OpenTelemetry only when built with its `otel` feature (nixpkgs builds it only with
  # `withEnterpriseFeatures`) and only for the signals OTEL_TRACING, OTEL_METRICS and OTEL_LOGS
  # switch on. The headers come through the unit's credential and its launcher
  # (`otelHeadersCredential`).
  otelEnvironment =
    otel: role:
    let
      o = otelDefaults // otel;
    in
    optionalAttrs (o.endpoint != null) (
      {
        OTEL_EXPORTER_OTLP_ENDPOINT = o.endpoint;
        OTEL_EXPORTER_OTLP_PROTOCOL = o.protocol;
        OTEL_SERVICE_NAME = "windmill-${role}";
        OTEL_TRACING = "true";
        OTEL_METRICS = "true";
        OTEL_LOGS = "true";
      }
      // optionalAttrs (o.resourceAttributes != { }) {
        OTEL_RESOURCE_ATTRIBUTES = renderResourceAttributes o.resourceAttributes;
      }
    );

  # What jobenv, run by windmill-worker's jobs, takes of it (through WHITELIST_ENVS): the endpoint,
  # the protocol and the resource attributes; not OTEL_SERVICE_NAME (jobenv reports as
  # `fediversity-jobenv`, a service of its own), and the headers as the path of the worker's
  # credential (`JOBENV_OTLP_HEADERS_FILE`), never as a value: a variable is in every job's
  # environment and `/proc/<pid>/environ` of the job processes Windmill starts, a file path
  # is not the key. jobenv speaks http/protobuf only: with another protocol it gets nothing.
  jobenvOtelEnvironment =
    otel:
    let
      o = otelDefaults // otel;
    in
    optionalAttrs (o.endpoint != null && o.protocol == "http/protobuf") (
      {
        OTEL_EXPORTER_OTLP_ENDPOINT = o.endpoint;
        OTEL_EXPORTER_OTLP_PROTOCOL = o.protocol;
      }
      // optionalAttrs (o.resourceAttributes != { }) {
        OTEL_RESOURCE_ATTRIBUTES = renderResourceAttributes o.resourceAttributes;
      }
      // optionalAttrs (o.headersFile != null) {
        JOBENV_OTLP_HEADERS_FILE = unitCredential "windmill-worker" otelHeadersCredential;
      }
    );

  # Why the node's configuration exports less than it asks for (NixOS warnings).
  otelWarnings =
    otel:
    let
      o = otelDefaults // otel;
    in
    optional (o.endpoint != null && o.protocol != "http/protobuf")
      "otel.protocol is ${o.protocol}: fediversity-jobenv exports http/protobuf only, so deploys are not exported (Windmill's units still get the variables)";

  # The collector's headers reach every Windmill unit as a systemd credential (read by systemd
  # as root; the file need not be readable by Windmill's user), and the launcher moves them into
  # OTEL_EXPORTER_OTLP_HEADERS, one line each joined by commas.
  otelHeadersCredential = "otel-headers";

  # Where systemd hands a unit its credential: the unit's processes (a job's jobenv among the
  # worker's) read it there.
  unitCredential = unit: name: "/run/credentials/${unit}.service/${name}";

  # SMTP of windmill-server (its own variables). The password is not here: it comes from a file
  # at start (see `smtpPasswordCredential`), never through the Nix store.
  smtpEnvironment =
    {
      host ? null,
      port ? 587,
      username ? null,
      from,
      tlsImplicit ? false,
    }:
    optionalAttrs (host != null) (
      {
        SMTP_HOST = host;
        SMTP_PORT = toString port;
        SMTP_FROM = from;
        SMTP_TLS_IMPLICIT = if tlsImplicit then "true" else "false";
      }
      // optionalAttrs (username != null) { SMTP_USERNAME = username; }
    );

  # The SMTP password reaches windmill-server as a systemd credential (LoadCredential: read by
  # systemd as root, handed to the unit in $CREDENTIALS_DIRECTORY), and the server is started
  # through a launcher that moves it into SMTP_PASSWORD, the only way Windmill reads it.
  smtpPasswordCredential = "smtp-password";

  smtpPasswordSettings = passwordFile: {
    LoadCredential = [ "${smtpPasswordCredential}:${passwordFile}" ];
  };

  # The credentials a Windmill unit's launcher moves into variables (`windmillLauncher`): the
  # SMTP password (windmill-server's), the collector's headers (every unit's, lines joined by
  # commas).
  launchedCredentials =
    {
      role,
      smtpPasswordFile ? null,
      otelHeadersFile ? null,
    }:
    optional (role == "server" && smtpPasswordFile != null) {
      variable = "SMTP_PASSWORD";
      credential = smtpPasswordCredential;
      file = smtpPasswordFile;
      joinLines = false;
    }
    ++ optional (otelHeadersFile != null) {
      variable = "OTEL_EXPORTER_OTLP_HEADERS";
      credential = otelHeadersCredential;
      file = otelHeadersFile;
      joinLines = true;
    };

  # The launcher's script (bash), for `windmill` (the program to exec): each credential in its
  # variable (by default the SMTP password).
  windmillLauncher =
    {
      windmill,
      credentials ? [
        {
          variable = "SMTP_PASSWORD";
          credential = smtpPasswordCredential;
          joinLines = false;
        }
      ],
    }:
    concatStringsSep "\n" (
      [
        "# Starts Windmill with its credentials (${concatStringsSep ", " (map (c: c.variable) credentials)}) taken from the unit's"
        "# credentials directory; without one, it does not start."
        "set -e"
      ]
      ++ concatMap (
        c:
        [ "${c.variable}=\"$(< \"$CREDENTIALS_DIRECTORY/${c.credential}\")\"" ]
        ++ optional c.joinLines "${c.variable}=\"\${${c.variable}//$'\\n'/,}\""
        ++ [ "export ${c.variable}" ]
      ) credentials
      ++ [
        "exec ${shellQuote windmill} \"$@\""
        ""
      ]
    );

  # Readiness: the worker runs deploys only once the agent has rendered every file the node
  # declares (`renderedFiles`). This script (bash) waits for them, for at most `timeoutSeconds`;
  # it runs before the worker starts (ExecStartPre), so a worker whose start fails on it is
  # started again by its Restart=always, 5 s later, until the files are there. Not a path unit
  # (PathExists= of several files triggers on the first, not on all) nor a separate oneshot the
  # worker requires (bounded, its failure would leave the worker down for good; unbounded, it
  # would hold `nixos-rebuild switch` until the agent renders).
  waitForFilesScript =
    {
      files,
      timeoutSeconds,
      sleep ? "sleep",
    }:
    concatStringsSep "\n" [
      "# Waits until every file the node declares has been rendered."
      "files=(${concatStringsSep " " (map shellQuote files)})"
      # SECONDS counts whole seconds of the clock: one more, so that the wait is never short.
      "deadline=$((SECONDS + ${toString timeoutSeconds} + 1))"
      "said="
      "while :; do"
      "  missing=()"
      "  for f in \"\${files[@]}\"; do"
      "    [ -e \"$f\" ] || missing+=(\"$f\")"
      "  done"
      "  if [ \"\${#missing[@]}\" -eq 0 ]; then"
      "    exit 0"
      "  fi"
      "  if [ \"$SECONDS\" -ge \"$deadline\" ]; then"
      "    echo \"fediversity-windmill: node not ready: not rendered after ${toString timeoutSeconds}s: \${missing[*]}\" >&2"
      "    exit 1"
      "  fi"
      "  if [ -z \"$said\" ]; then"
      "    echo \"fediversity-windmill: waiting for the OpenBao agent to render: \${missing[*]}\" >&2"
      "    said=1"
      "  fi"
      "  ${shellQuote sleep} 1"
      "done"
      ""
    ];

  # How windmill-worker starts and stops (its serviceConfig; the programs are store paths).
  #
  # Start: as root (`+`), copy jobenv to where the jobs find it (`paths.sealedJobenv`, mode
  # 0111: the worker's user may run it, not read it, so the kernel starts it not dumpable, and
  # no process of that user can read its environment or memory even in its first instructions);
  # wait for the rendered files (when the node declares any); then `fediversity-jobenv
  # recover`, which marks the jobs whose jobenv died with a previous worker as interrupted and
  # ends a drain (best effort: a failure does not keep the worker down).
  #
  # Stop (systemd runs ExecStop before it signals the unit): a Windmill worker takes new jobs
  # until its first SIGTERM, which only stops that; it then waits for its running job, and a
  # second SIGTERM makes it exit at once, orphaning the job. So: (1) SIGTERM to the worker
  # alone, it takes no new job; (2) `fediversity-jobenv drain` gives the running deploys up to
  # `drainTimeoutSeconds` to finish, then cancels each through its own jobenv (SIGTERM, grace,
  # SIGKILL of the program tree), recorded as interrupted: the node stopped, a retry is safe;
  # (3) systemd's own stop signal, SIGTERM to the worker (KillMode=mixed), ends it, and SIGKILL
  # goes to whatever is left in the unit. TimeoutStopSec bounds each of these steps.
  #
  # Delegate: the unit's cgroup subtree is the unit's own (systemd chowns it to the unit's
  # dynamic user), so jobenv, as a job process, makes each deploy's cgroup below it and keeps
  # the whole program tree in it. jobenv enables no controller, so the worker's own processes
  # stay where they are, in the unit's cgroup. It also puts ExecStop's commands (the kill, the
  # drain) in a `.control` cgroup of the unit; the drain finds deploys by the journal, not by
  # its own cgroup. systemd's final SIGKILL still reaches every process of the subtree.
  workerLifecycle =
    {
      jobenv,
      kill,
      waitForFiles ? null,
      drainTimeoutSeconds,
      readinessTimeoutSeconds,
      graceSeconds ? jobenvGraceSeconds,
      install ? null,
    }:
    {
      ExecStartPre =
        optional (install != null) "+${install} -D -m 0111 -o root -g root ${jobenv} ${paths.sealedJobenv}"
        ++ optional (waitForFiles != null) waitForFiles
        ++ [ "-${jobenv} recover --state-dir ${paths.stateDir}" ];
      ExecStop = [
        "-${kill} -s TERM $MAINPID"
        "${jobenv} drain --state-dir ${paths.stateDir} --wait ${toString drainTimeoutSeconds}"
      ];
      TimeoutStartSec = "${toString (readinessTimeoutSeconds + 60)}s";
      TimeoutStopSec = "${toString (drainTimeoutSeconds + graceSeconds + stopMarginSeconds)}s";
      KillMode = "mixed";
      Delegate = true;
    };

  # The journal's pruning, daily, as the worker's user (it owns the state directory; pruning
  # needs nothing more). A run never prunes, so that its cost does not grow with the journal,
  # and the worker's start (which prunes through `recover`) may be weeks apart.
  # In cluster mode (`clusterDsnFile`, and `clusterCaFile` for its TLS) the shared journal's
  # ended rows are pruned too.
  pruneUnits =
    {
      jobenv,
      user,
      clusterDsnFile ? null,
      clusterCaFile ? null,
    }:
    {
      service = {
        description = "Prune fediversity-jobenv's journal (entries past their retention)";
        serviceConfig = {
          Type = "oneshot";
          User = user;
          ExecStart = "${jobenv} prune --state-dir ${paths.stateDir}";
        };
        environment =
          optionalAttrs (clusterDsnFile != null) { JOBENV_CLUSTER_DSN_FILE = clusterDsnFile; }
          // optionalAttrs (clusterCaFile != null) { JOBENV_CLUSTER_CA_FILE = clusterCaFile; };
        unitConfig.ConditionPathIsDirectory = paths.stateDir;
      };
      timer = {
        description = "Prune fediversity-jobenv's journal daily";
        wantedBy = [ "timers.target" ];
        timerConfig = {
          OnCalendar = "daily";
          RandomizedDelaySec = "1h";
          Persistent = true;
        };
      };
    };

  # Settings added to nixpkgs' Windmill units (which this module does not redefine) and the
  # bootstrap unit, without what needs packages (ExecStart, ExecStop, restart triggers). Merged
  # into `systemd.services` by the module.
  units =
    {
      otelEndpoint ? null,
      # The rest of the collector's settings (`otelDefaults`'s fields); `otelEndpoint` wins.
      otel ? { },
      nixShell ? null,
      uiAuthFile ? bootstrapDefaults.uiAuth.file,
      readyTimeoutSeconds ? bootstrapDefaults.retry.readyTimeoutSeconds,
      agent ? agentUnit,
      # jobenv's secrets env files (`JOBENV_SECRETS_ENV_FILES`), e.g. tf-token.env.
      secretsEnvFiles ? [ ],
      # windmill-server's SMTP variables (`smtpEnvironment`) and password file.
      smtp ? { },
      smtpPasswordFile ? null,
      # The limits of every job (`jobLimitsEnvironment`'s arguments).
      jobs ? { },
      # jobenv's cluster mode: the file holding the shared journal's DSN (null: off), and the CA
      # file its TLS verifies the database against (null: the system's trust store).
      clusterDsnFile ? null,
      clusterCaFile ? null,
      # The node generates the superadmin's password (no adminPasswordFile): the bootstrap
      # requires the unit that does.
      generatesAdminPassword ? false,
    }:
    let
      otel' = otel // optionalAttrs (otelEndpoint != null) { endpoint = otelEndpoint; };
      otelHeadersFile = (otelDefaults // otel').headersFile;
      limits = { grace = jobenvGraceSeconds; } // jobs;
      # What jobenv reads from its environment on the worker (passed through to jobs).
      jobenvEnvironment = {
        JOBENV_STATE_DIR = paths.stateDir;
        JOBENV_REQUIRED_SECRETS = paths.requiredSecrets;
      }
      // jobLimitsEnvironment limits
      // optionalAttrs (nixShell != null) { JOBENV_NIX_SHELL = nixShell; }
      // optionalAttrs (secretsEnvFiles != [ ]) { JOBENV_SECRETS_ENV_FILES = concatStringsSep ":" secretsEnvFiles; }
      // optionalAttrs (clusterDsnFile != null) { JOBENV_CLUSTER_DSN_FILE = clusterDsnFile; }
      // optionalAttrs (clusterCaFile != null) { JOBENV_CLUSTER_CA_FILE = clusterCaFile; }
      // jobenvOtelEnvironment otel';
      windmillUnit = role: {
        after = [ agent ];
        serviceConfig = {
          RestartSec = "5s";
        }
        // optionalAttrs ((otelDefaults // otel').endpoint != null && otelHeadersFile != null) {
          LoadCredential = [ "${otelHeadersCredential}:${otelHeadersFile}" ];
        };
        environment = otelEnvironment otel' role;
      };
      server = windmillUnit "server";
      worker = windmillUnit "worker";
    in
    {
      windmill-server = server // {
        environment = server.environment // smtp;
        serviceConfig =
          server.serviceConfig
          // optionalAttrs (smtpPasswordFile != null) {
            LoadCredential = (server.serviceConfig.LoadCredential or [ ]) ++ (smtpPasswordSettings smtpPasswordFile).LoadCredential;
          };
      };
      windmill-worker-native = windmillUnit "worker-native";
      windmill-worker = worker // {
        # The agent's files are its credentials: it waits for them (`workerLifecycle`).
        wants = [ agent ];
        serviceConfig = worker.serviceConfig // {
          # jobenv's journal, locks and cached shells with their garbage-collector roots
          # (`shells/`, which the Nix daemon reads at this same path); nixpkgs' unit is otherwise
          # read-only (DynamicUser). The `-`: the directory may not exist yet when the unit
          # starts for the first time.
          ReadWritePaths = [ "-${paths.stateDir}" ];
        };
        environment =
          worker.environment
          // {
            # A cancel sends SIGINT to the job process (jobenv, once the script exec'd) and
            # waits this long before SIGKILLing the job's process group.
            MAX_WAIT_FOR_SIGINT = toString (maxWaitForSigint limits.grace);
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
          agent
          "network-online.target"
        ];
        wants = [
          "windmill-server.service"
          agent
          "network-online.target"
        ];
      }
      // optionalAttrs generatesAdminPassword {
        after = [
          "windmill-server.service"
          agent
          "network-online.target"
          "${adminPasswordUnit}.service"
        ];
        requires = [ "${adminPasswordUnit}.service" ];
      }
      // {
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
          # Its state file (`paths.bootstrapState`): root-only, beside the generated password.
          StateDirectory = "fediversity-windmill";
          StateDirectoryMode = "0700";
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

  # systemd-tmpfiles rules: the secrets directory and the credentials directory (readable by the
  # worker's group, which the agent's files also carry), jobenv's state directory (the
  # worker's) and the nginx include directory.
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
      "d ${paths.credentialsDir} 0750 root ${group} - -"
      "d ${paths.backupDir} 0700 root root - -"
      "d ${paths.stateDir} 0750 ${user} ${group} - -"
      "d ${dirOf uiAuthFile} 0750 root ${uiAuthGroup} - -"
    ];

  # ---- Windmill's package -----------------------------------------------------------------

  # The node's Windmill runs Python and Bash jobs only. nixpkgs' `pkgs.windmill` is built with
  # the `cargoBuildFeatures` cut down to these (those the package has), and its wrapper's other
  # toolchains (Go, Deno, Bun, PowerShell, .NET, PHP, Cargo) replaced by a stub that says so.
  # Bash needs no feature; `smtp` is for SMTP, `static_frontend` serves the UI, `otel` stays
  # where the package has it.
  windmillFeatures = [
    "default"
    "sqlx"
    "jemalloc"
    "python"
    "smtp"
    "static_frontend"
    "otel"
  ];

  trimWindmillFeatures = features: filter (f: elem f windmillFeatures) features;

  # The arguments of nixpkgs' Windmill package that are toolchains for other languages (only
  # those its function takes are overridden), and the programs its wrapper runs from them.
  windmillToolchainArgs = [
    "go"
    "deno"
    "bun"
    "powershell"
    "dotnet-sdk"
    "dotnet-sdk_8"
    "dotnet-sdk_9"
    "dotnet-sdk_10"
    "php"
    "cargo"
  ];
  windmillToolchainPrograms = [
    "go"
    "deno"
    "bun"
    "pwsh"
    "dotnet"
    "php"
    "cargo"
  ];

  # `<package>.override` arguments: every toolchain argument the package takes, set to `stub`.
  # `packageArgs`: the names of the package function's arguments.
  windmillToolchainOverrides =
    { packageArgs, stub }:
    listToAttrs (
      map (name: {
        inherit name;
        value = stub;
      }) (filter (a: elem a packageArgs) windmillToolchainArgs)
    );

  # The Python nixpkgs' Windmill runs jobs with: the `python3XY` argument of its package (it sets
  # PYTHON_PATH to it, and refuses every other version), else `python3`. The bootstrap's
  # `instance_python_version` follows it.
  windmillPythonAttr =
    packageArgs:
    let
      minor = a: builtins.fromJSON (head (match "python3([0-9]+)" a));
      versioned = sort (a: b: minor a > minor b) (filter (a: match "python3[0-9]+" a != null) packageArgs);
    in
    if versioned != [ ] then head versioned else "python3";

  # "3.12.8" -> "3.12"
  majorMinor =
    version:
    let
      parts = builtins.splitVersion version;
    in
    "${builtins.elemAt parts 0}.${builtins.elemAt parts 1}";

  # ---- nginx ------------------------------------------------------------------------------

  # Who may use the admin UI. Its vhost adds the superadmin's token to every request, so it is
  # served only behind an identity layer: the seed's forward auth (`forwardAuth`, an
  # Authelia-style auth-request endpoint) and/or raw nginx configuration of another layer
  # (`nginxAuthConfig`). With neither, it is closed: it answers 403 and never adds the token.
  # `openWithoutAuthentication` serves it open to whoever reaches the name (VM tests, laptops).
  # Returns `mode` ("protected", "open" or "closed") and `problems` (contradictions).
  uiAccess =
    {
      forwardAuth ? null,
      nginxAuthConfig ? null,
      openWithoutAuthentication ? false,
    }:
    let
      protected = forwardAuth != null || nginxAuthConfig != null;
    in
    {
      mode =
        if protected then
          "protected"
        else if openWithoutAuthentication then
          "open"
        else
          "closed";
      problems = optional (protected && openWithoutAuthentication) "ui.dangerouslyServeWithoutAuthentication is set together with an identity layer (ui.forwardAuth or ui.nginxAuthConfig): choose one";
    };

  # The internal location the UI's auth subrequest goes to.
  forwardAuthLocation = "/internal/fediversity-windmill/authz";

  # nginx of the seed's forward auth (Authelia's AuthRequest implementation, ≥ 4.38): every
  # request for the UI, websocket upgrades included, is first sent as a subrequest (headers
  # only) to `authzUrl`; 2xx lets it through, 403 refuses it, and 401 (no session) redirects the
  # browser to sign in: to the `Location` the portal answers with, or, with `signInUrl`, to
  # `<signInUrl>?rd=<the requested URL>`. An unreachable portal fails the request (500): closed.
  forwardAuthDirectives =
    {
      signInUrl ? null,
      ...
    }:
    concatStringsSep "\n" (
      [ "auth_request ${forwardAuthLocation};" ]
      ++ (
        if signInUrl == null then
          [
            "auth_request_set $fediversity_windmill_signin $upstream_http_location;"
            "error_page 401 =302 $fediversity_windmill_signin;"
          ]
        else
          [ "error_page 401 =302 ${signInUrl}?rd=$scheme://$http_host$request_uri;" ]
      )
    );

  forwardAuthSubrequest =
    { authzUrl, ... }:
    concatStringsSep "\n" [
      "internal;"
      "proxy_pass ${authzUrl};"
      "proxy_pass_request_body off;"
      "proxy_set_header Content-Length \"\";"
      "proxy_set_header Connection \"\";"
      "proxy_set_header X-Original-Method $request_method;"
      "proxy_set_header X-Original-URL $scheme://$http_host$request_uri;"
      "proxy_set_header X-Forwarded-Method $request_method;"
      "proxy_set_header X-Forwarded-Proto $scheme;"
      "proxy_set_header X-Forwarded-Host $http_host;"
      "proxy_set_header X-Forwarded-URI $request_uri;"
      "proxy_set_header X-Forwarded-For $remote_addr;"
    ];

  # The UI vhost's locations for each mode. The token include is only ever in `/` after the
  # identity layer's directives, never in the subrequest's location (the portal must not see
  # the token).
  uiLocations =
    {
      upstream,
      forwardAuth ? null,
      nginxAuthConfig ? null,
      openWithoutAuthentication ? false,
      uiAuthFile ? bootstrapDefaults.uiAuth.file,
    }:
    let
      access = uiAccess { inherit forwardAuth nginxAuthConfig openWithoutAuthentication; };
      include = "include ${dirOf uiAuthFile}/*.conf;";
      proxied = directives: {
        proxyPass = upstream;
        proxyWebsockets = true;
        extraConfig = concatStringsSep "\n" (directives ++ [ include ]);
      };
    in
    if access.mode == "closed" then
      { "/".return = "403"; }
    else if access.mode == "open" then
      { "/" = proxied [ ]; }
    else
      {
        "/" = proxied (
          optional (forwardAuth != null) (forwardAuthDirectives forwardAuth)
          ++ optional (nginxAuthConfig != null) nginxAuthConfig
        );
      }
      // optionalAttrs (forwardAuth != null) {
        "= ${forwardAuthLocation}".extraConfig = forwardAuthSubrequest forwardAuth;
      };

  # The rule the seed's portal (Authelia's `access_control.rules`) needs for the UI: who may use
  # it. The portal decides the policy and the group; nginx only asks it.
  autheliaAccessControlRule =
    {
      uiDomain,
      policy ? "one_factor",
      allowedGroups ? [ "fediversity-admins" ],
    }:
    {
      domain = [ uiDomain ];
      inherit policy;
      subject = map (g: "group:${g}") allowedGroups;
    };

  # Whether the portal has the UI's rule (US3.1: without it, every signed-in user of the portal
  # would get the superadmin's UI). `instances`: this node's `services.authelia.instances`;
  # `instance`: the one the module adds the rule to (`ui.forwardAuth.autheliaInstance`), or
  # null. Returns `problems` (assertions) and `warnings`.
  portalRuleChecks =
    {
      rule,
      instances ? { },
      instance ? null,
      ruleAddedToPortal ? false,
    }:
    let
      enabled = filter (n: instances.${n}.enable or false) (attrNames instances);
      hasRule = n: elem rule (instances.${n}.settings.access_control.rules or [ ]);
      names = concatStringsSep ", " enabled;
      ruleText = toJSON rule;
    in
    if instance != null then
      {
        problems = optional (!(elem instance enabled)) "ui.forwardAuth.autheliaInstance is \"${instance}\" but services.authelia.instances.\"${instance}\" is not an enabled Authelia instance of this node${if enabled == [ ] then "" else " (enabled: ${names})"}: name the instance that guards the UI, or leave it null when the portal runs elsewhere";
        warnings = [ ];
      }
    else if enabled != [ ] then
      {
        problems = optional (!(any hasRule enabled)) "this node runs Authelia (services.authelia.instances: ${names}) but none of its instances has the admin UI's access rule, so it would admit every signed-in user to the superadmin's UI: set ui.forwardAuth.autheliaInstance = \"${head enabled}\" (the module adds ui.forwardAuth.accessControlRule first in its rules), or add that rule to its settings.access_control.rules";
        warnings = [ ];
      }
    else
      {
        problems = [ ];
        warnings = optional (!ruleAddedToPortal) "the admin UI's portal does not run on this node: its access_control.rules must hold ${ruleText} (ui.forwardAuth.accessControlRule), or every user it signs in gets the superadmin's UI; once it does, set ui.forwardAuth.ruleAddedToPortal = true";
      };

  # TLS of both names the NixOS way: forceSSL (HTTP redirects to HTTPS) with, by default, an
  # ACME certificate per name (`enableACME`); or the operator's ACME certificate (`useACMEHost`,
  # which must cover both names); or a certificate and key from files (`certificate`,
  # `certificateKey`: paths, never copied to the store). `enable = false`: plain HTTP (TLS ends
  # in front of the node).
  #
  # A half-set certificate gets no TLS settings at all rather than a half one: nginx's module
  # would otherwise fail first, on a `null` key file, with an error that names neither this
  # module nor the option, and the assertion that says what to do would never be shown. An
  # unknown `useACMEHost` is passed on as it is: nixpkgs' nginx module derives the names of
  # `security.acme.certs` from the vhosts' `enableACME`, so settings that looked at those
  # names would recurse forever; the assertion (`tlsProblems` with `acmeCerts`), which NixOS
  # checks before it builds anything, names it instead.
  tlsSettings =
    {
      enable ? true,
      useACMEHost ? null,
      certificate ? null,
      certificateKey ? null,
      ...
    }:
    if !enable || (certificate == null) != (certificateKey == null) || (certificate != null && useACMEHost != null) then
      { }
    else if certificate != null then
      {
        forceSSL = true;
        sslCertificate = certificate;
        sslCertificateKey = certificateKey;
      }
    else if useACMEHost != null then
      {
        forceSSL = true;
        inherit useACMEHost;
      }
    else
      {
        forceSSL = true;
        enableACME = true;
      };

  tlsProblems =
    {
      enable ? true,
      useACMEHost ? null,
      certificate ? null,
      certificateKey ? null,
      # null: not known (the check is left out).
      acmeCerts ? null,
    }:
    optional ((certificate == null) != (certificateKey == null)) "tls.certificate and tls.certificateKey go together: set both or neither"
    ++ optional (certificate != null && useACMEHost != null) "tls.certificate and tls.useACMEHost are two sources of one certificate: set one"
    ++ optional (!enable && (certificate != null || useACMEHost != null)) "tls.enable is false but a certificate is configured (tls.certificate or tls.useACMEHost)"
    ++ optional (
      enable && useACMEHost != null && acmeCerts != null && !(elem useACMEHost acmeCerts)
    ) "tls.useACMEHost is \"${useACMEHost}\" but the node defines no security.acme.certs.\"${useACMEHost}\": define that certificate (covering both names) or leave tls.useACMEHost null for a certificate per name";

  # Both vhosts. On `domain`, `/` answers 404 and only `/api/` reaches Windmill; it is nginx's
  # default server, so a request by IP address or for an unknown name lands there, never on
  # the UI vhost (nginx would otherwise take the first vhost in name order, and `jobs.…` sorts
  # before most API names). `ui` are the UI vhost's locations (`uiLocations`), `tls` the
  # settings both vhosts get (`tlsSettings`).
  virtualHosts =
    {
      domain,
      uiDomain,
      port ? 8001,
      ui,
      tls ? { },
    }:
    if domain == uiDomain then
      throw "services.fediversity-windmill: domain and uiDomain must differ (both are ${domain})"
    else
      {
        ${domain} = tls // {
          default = true;
          locations = {
            "/".return = "404";
            "/api/".proxyPass = "http://127.0.0.1:${toString port}";
          };
        };
        ${uiDomain} = tls // {
          locations = ui;
        };
      };

  upstream = port: "http://127.0.0.1:${toString port}";

  # ---- Nix on the node --------------------------------------------------------------------

  nixSettings =
    { user }:
    {
      # The deployment programs build and copy closures through the daemon as the worker.
      # (nixpkgs' nix module already trusts root: naming it here would list it twice.)
      trusted-users = [ user ];
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
