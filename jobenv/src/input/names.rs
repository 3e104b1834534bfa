//! Which names may come from where. These lists are the security boundary of jobenv: a name
//! that is not admitted here never reaches a deployment program.

/// The verbs of the deployment programs (`<group>-<method>-<machine>-<verb>`).
pub const VERBS: &[&str] = &[
    "apply",
    "destroy",
    "plan",
    "refresh",
    "validate",
    "output",
    "show",
    "state-list",
    "state-show",
    "import",
    "force-unlock",
];

/// Control keys only the node may set; jobenv consumes them and does not pass them on.
/// `EVENTS_URL` and `EVENTS_SECRET` configure progress events (see [`crate::events`]).
pub const NODE_CONTROL_KEYS: &[&str] =
    &["DEPLOYMENT_ROOT", "NIXPKGS", "DEPLOYMENT_NIXPKGS", "STATE_BASE_ADDRESS", "EVENTS_URL", "EVENTS_SECRET"];

/// Control keys a job payload may set; jobenv consumes them and does not pass them on.
/// `BUILD_ID` names the build in progress events; the program does not need it.
pub const PAYLOAD_CONTROL_KEYS: &[&str] = &["SYSTEM", "ATTRIBUTE", "EXECUTABLE", "NAMESPACE", "BUILD_ID"];

/// Control keys that the node may also set (node wins, like any key).
pub const SHARED_CONTROL_KEYS: &[&str] = &["SYSTEM"];

/// Variables jobenv computes itself; no layer may set them.
pub const DERIVED_KEYS: &[&str] =
    &["DEPLOYMENT_NAMESPACE", "TF_HTTP_ADDRESS", "TF_HTTP_LOCK_ADDRESS", "TF_HTTP_UNLOCK_ADDRESS"];

/// Names that pass from jobenv's own environment besides the declared keys.
pub const ENVIRON_PASSTHROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "TZ",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "NIX_PATH",
    "NIX_REMOTE",
    "NIX_SSL_CERT_FILE",
    "SSL_CERT_FILE",
    "NIX_BUILD_SHELL",
];

/// Undeclared Nix and OpenTofu variables a node may still set (`TF_VAR_*` by prefix).
const NODE_TOOL_KEYS: &[&str] = &[
    "NIX_CONFIG",
    "NIX_PATH",
    "NIX_REMOTE",
    "NIX_SSL_CERT_FILE",
    "NIX_BUILD_SHELL",
    "TF_HTTP_USERNAME",
    "TF_HTTP_PASSWORD",
    "TF_LOG",
    "TF_PLUGIN_CACHE_DIR",
    "TF_IN_AUTOMATION",
    "TF_INPUT",
];

/// A Nix/OpenTofu variable that a node may set although the keys file does not declare it.
pub fn is_node_tool_key(key: &str) -> bool {
    NODE_TOOL_KEYS.contains(&key) || key.starts_with("TF_VAR_")
}

/// The state-backend keys a payload may carry: the seeds' front-end scopes the state address
/// itself and sends it, with the backend's credentials when the node has none (see
/// [`super::state`] for their rules).
pub const STATE_KEYS: &[&str] =
    &["TF_HTTP_ADDRESS", "TF_HTTP_LOCK_ADDRESS", "TF_HTTP_UNLOCK_ADDRESS", "TF_HTTP_USERNAME", "TF_HTTP_PASSWORD"];

/// Exact names no payload may set, even when declared, and that never pass from jobenv's own
/// environment: each makes bash, an interpreter, git, ssh, the loader or OpenTofu run code or
/// read configuration of the job's choosing, or steers jobenv's own derived variables.
const RESERVED: &[&str] = &[
    "PATH",
    "HOME",
    "DEPLOYMENT_NAMESPACE",
    // bash and POSIX shells
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    // interpreters and the C library
    "NODE_OPTIONS",
    "NODE_PATH",
    "GCONV_PATH",
    "SSH_AUTH_SOCK",
    // Perl without PERL5LIB, a JVM's agents, OpenSSL's engines and providers (shared objects)
    "PERLLIB",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "OPENSSL_MODULES",
    // config read from the job's directory of choice, like HOME (git's, nix's own, ...)
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    // the C resolver: host names mapped to hosts of the job's choosing (the node's state
    // backend, with the node's credentials)
    "HOSTALIASES",
    "LOCALDOMAIN",
    "RES_OPTIONS",
    // OpenTofu: config, data and plugins from elsewhere; its log (request bodies included)
    // written where the job says; providers it does not start itself; another workspace of a
    // shared backend (another deployment's state)
    "TF_CLI_CONFIG_FILE",
    "TF_DATA_DIR",
    "TF_PLUGIN_CACHE_DIR",
    "TF_LOG_PATH",
    "TF_REATTACH_PROVIDERS",
    "TF_WORKSPACE",
];

/// Reserved prefixes: the loader (`LD_`, `DYLD_`), Nix, bash's exported functions, Python, Perl,
/// Ruby, Lua (`LUA_INIT` runs code), git, ssh's askpass, OpenTofu's extra arguments and its
/// state backend (but for [`STATE_KEYS`]).
const RESERVED_PREFIXES: &[&str] =
    &["NIX_", "LD_", "DYLD_", "BASH_FUNC_", "PYTHON", "PERL5", "RUBY", "LUA_", "GIT_", "SSH_ASKPASS", "TF_CLI_ARGS", "TF_HTTP_"];

/// Names a payload may never set, even when declared: they would let a job steer the
/// interpreter, the loader, Nix, git, ssh or OpenTofu of the node.
pub fn is_reserved(key: &str) -> bool {
    (RESERVED.contains(&key) || RESERVED_PREFIXES.iter().any(|prefix| key.starts_with(prefix)) || is_stdenv_code(key))
        && !STATE_KEYS.contains(&key)
}

/// Shell code nixpkgs' stdenv runs when nix-shell enters a dev shell, if the environment holds
/// it and the derivation does not set it: `shellHook`, `preHook`, `postHook`, any `*Hook(s)`
/// or `*Phase(s)`.
fn is_stdenv_code(key: &str) -> bool {
    ["Hook", "Hooks", "Phase", "Phases"].iter().any(|suffix| key.len() > suffix.len() && key.ends_with(suffix))
}

/// A state-backend key a payload may carry.
pub fn is_state_key(key: &str) -> bool {
    STATE_KEYS.contains(&key)
}

pub fn is_node_control(key: &str) -> bool {
    NODE_CONTROL_KEYS.contains(&key)
}

pub fn is_payload_control(key: &str) -> bool {
    PAYLOAD_CONTROL_KEYS.contains(&key)
}

pub fn is_shared_control(key: &str) -> bool {
    SHARED_CONTROL_KEYS.contains(&key)
}

/// A control key jobenv consumes and never passes to the program.
pub fn is_consumed(key: &str) -> bool {
    is_node_control(key) || is_payload_control(key)
}

pub fn is_derived(key: &str) -> bool {
    DERIVED_KEYS.contains(&key)
}

/// A variable name jobenv can pass to execve: non-empty, no `=`, no NUL.
pub fn is_valid_key(key: &str) -> bool {
    !key.is_empty() && !key.contains('=') && !key.contains('\0')
}

/// `^[a-z0-9_]+-[a-z0-9_]+$`
pub fn is_valid_system(s: &str) -> bool {
    let part = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    match s.split_once('-') {
        Some((arch, os)) => part(arch) && part(os),
        None => false,
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9_-]*$`
pub fn is_valid_attribute(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `^[a-z0-9][a-z0-9-]{0,62}$`
pub fn is_valid_namespace(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= 63
        && matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`: a Windmill job id (a UUID) or a front-end's build id;
/// it goes into every progress event and names a channel there.
pub fn is_valid_build_id(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= 128
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// The system jobenv runs on, in Nix's spelling.
pub fn running_system() -> String {
    format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systems() {
        assert!(is_valid_system("x86_64-linux"));
        assert!(is_valid_system("aarch64-linux"));
        assert!(!is_valid_system("x86_64-linux-gnu"));
        assert!(!is_valid_system("X86-linux"));
        assert!(!is_valid_system("-linux"));
        assert!(!is_valid_system("x86_64"));
        assert!(!is_valid_system("x86_64-linux; rm -rf /"));
    }

    #[test]
    fn attributes() {
        assert!(is_valid_attribute("web-nixos-vm1"));
        assert!(is_valid_attribute("A_1"));
        assert!(!is_valid_attribute("-web"));
        assert!(!is_valid_attribute(""));
        assert!(!is_valid_attribute("web;id"));
        assert!(!is_valid_attribute("web.x"));
    }

    #[test]
    fn namespaces() {
        assert!(is_valid_namespace("a"));
        assert!(is_valid_namespace("team-1"));
        assert!(is_valid_namespace(&"a".repeat(63)));
        assert!(!is_valid_namespace(&"a".repeat(64)));
        assert!(!is_valid_namespace("-a"));
        assert!(!is_valid_namespace("A"));
        assert!(!is_valid_namespace("a/b"));
        assert!(!is_valid_namespace(""));
    }

    #[test]
    fn build_ids() {
        assert!(is_valid_build_id("0192f3a4-5b6c-7d8e-9f00-112233445566"));
        assert!(is_valid_build_id("42"));
        assert!(is_valid_build_id("build:7.1_a"));
        assert!(is_valid_build_id(&"b".repeat(128)));
        assert!(!is_valid_build_id(&"b".repeat(129)));
        assert!(!is_valid_build_id(""));
        assert!(!is_valid_build_id("-x"));
        assert!(!is_valid_build_id("a b"));
        assert!(!is_valid_build_id("a/b"));
        assert!(!is_valid_build_id("a\nb"));
    }

    #[test]
    fn reserved_names() {
        for k in [
            "PATH", "HOME", "NIX_PATH", "NIX_CONFIG", "TF_HTTP_RETRY_MAX", "LD_PRELOAD", "DYLD_INSERT_LIBRARIES", "BASH_ENV", "ENV",
            "BASH_FUNC_ls%%", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "GLOBIGNORE", "PYTHONPATH",
            "PYTHONSTARTUP", "PERL5LIB", "PERL5OPT", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH", "GCONV_PATH", "GIT_SSH_COMMAND",
            "GIT_CONFIG_GLOBAL", "SSH_AUTH_SOCK", "SSH_ASKPASS", "SSH_ASKPASS_REQUIRE", "TF_CLI_ARGS", "TF_CLI_ARGS_init",
            "TF_CLI_CONFIG_FILE", "TF_DATA_DIR", "TF_PLUGIN_CACHE_DIR", "DEPLOYMENT_NAMESPACE", "shellHook", "preHook",
            "postHook", "preConfigurePhases", "buildPhase", "PERLLIB", "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "XDG_CONFIG_HOME",
            "XDG_CONFIG_DIRS", "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "TF_LOG_PATH", "TF_REATTACH_PROVIDERS", "TF_WORKSPACE",
            "LUA_INIT", "LUA_PATH_5_4",
        ] {
            assert!(is_reserved(k), "{k}");
        }
        // Positive controls: near names, the state-backend keys and the usual declared keys.
        for k in [
            "PATHX", "HOSTING_CONFIG", "TF_VAR_x", "NIXOS", "ENVIRONMENTS", "SSH_PRIVATE_KEY_FILE", "INTERNAL_HOSTS", "TF_LOG", "TF_IN_AUTOMATION",
            "PUBLISHED_HOSTS", "LUA", "XDG_DATA_HOME",
        ] {
            assert!(!is_reserved(k), "{k}");
        }
        for k in STATE_KEYS {
            assert!(!is_reserved(k) && is_state_key(k), "{k}");
        }
    }

    #[test]
    fn running_system_is_valid() {
        assert!(is_valid_system(&running_system()));
    }
}
