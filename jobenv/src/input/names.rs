//! Which names may come from where. These lists are the security boundary of jobenv: a name
//! that is not admitted here never reaches a deployment program. [`class`] is what a key is,
//! made of them.

use std::collections::BTreeMap;

use super::keys::DeclaredKey;

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
/// `EVENTS_URL` and `EVENTS_FORMAT` configure progress events (see [`crate::events`]).
pub const NODE_CONTROL_KEYS: &[&str] = &[
    "DEPLOYMENT_ROOT",
    "NIXPKGS",
    "DEPLOYMENT_NIXPKGS",
    "STATE_BASE_ADDRESS",
    "EVENTS_URL",
    "EVENTS_FORMAT",
];

/// Control keys a job payload may set; jobenv consumes them and does not pass them on.
/// `BUILD_ID` names the build in progress events, `EVENTS_KIND` and `EVENTS_ROW_ID` the DD-0012
/// row they go to, `EVENTS_SECRET` that row's secret; the program needs none of them.
/// `TRACEPARENT` and `TRACESTATE` (W3C Trace Context) join the job's trace to the front-end's:
/// a bad one is dropped with a warning; the program gets a checked one (its own span's when
/// jobenv exports traces).
pub const PAYLOAD_CONTROL_KEYS: &[&str] = &[
    "SYSTEM",
    "ATTRIBUTE",
    "EXECUTABLE",
    "NAMESPACE",
    "BUILD_ID",
    "EVENTS_KIND",
    "EVENTS_ROW_ID",
    "EVENTS_SECRET",
    "TRACEPARENT",
    "TRACESTATE",
];

/// Control keys that the node may also set (node wins, like any key). A payload's
/// `EVENTS_SECRET` is taken only by a node whose events are DD-0012's (see
/// [`super::controls::takes_row_secrets`]); elsewhere only the node may set it.
pub const SHARED_CONTROL_KEYS: &[&str] = &["SYSTEM", "EVENTS_SECRET"];

/// Variables jobenv computes itself; no layer may set them.
pub const DERIVED_KEYS: &[&str] = &[
    "DEPLOYMENT_NAMESPACE",
    "TF_HTTP_ADDRESS",
    "TF_HTTP_LOCK_ADDRESS",
    "TF_HTTP_UNLOCK_ADDRESS",
];

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

/// Undeclared Nix and OpenTofu variables a node may still set (and [`NODE_TOOL_PREFIXES`]).
pub const NODE_TOOL_KEYS: &[&str] = &[
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
    NODE_TOOL_KEYS.contains(&key) || NODE_TOOL_PREFIXES.iter().any(|prefix| key.starts_with(prefix))
}

pub const NODE_TOOL_PREFIXES: &[&str] = &["TF_VAR_"];

/// The state-backend keys a payload may carry: the seeds' front-end scopes the state address
/// itself and sends it, with the backend's credentials when the node has none (see
/// [`super::state`] for their rules).
pub const STATE_KEYS: &[&str] = &[
    "TF_HTTP_ADDRESS",
    "TF_HTTP_LOCK_ADDRESS",
    "TF_HTTP_UNLOCK_ADDRESS",
    "TF_HTTP_USERNAME",
    "TF_HTTP_PASSWORD",
];

/// Exact names no payload may set, even when declared, and that never pass from jobenv's own
/// environment: each makes bash, an interpreter, git, ssh, the loader or OpenTofu run code or
/// read configuration of the job's choosing, or steers jobenv's own derived variables.
pub const RESERVED: &[&str] = &[
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
pub const RESERVED_PREFIXES: &[&str] = &[
    "NIX_",
    "LD_",
    "DYLD_",
    "BASH_FUNC_",
    "PYTHON",
    "PERL5",
    "RUBY",
    "LUA_",
    "GIT_",
    "SSH_ASKPASS",
    "TF_CLI_ARGS",
    "TF_HTTP_",
];

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
    STDENV_CODE_SUFFIXES
        .iter()
        .any(|suffix| key.len() > suffix.len() && key.ends_with(suffix))
}

pub const STDENV_CODE_SUFFIXES: &[&str] = &["Hook", "Hooks", "Phase", "Phases"];

/// What a key is to jobenv: which layer may set it, and whether it reaches the program. The
/// one classification admission ([`super::admit`]) and the merge ([`crate::plan`]) share; each
/// key has exactly one class, the first that fits in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyClass<'a> {
    /// jobenv's own input, set by the node only, never passed to the program
    /// (`DEPLOYMENT_ROOT`, `NIXPKGS`, `STATE_BASE_ADDRESS`, `EVENTS_URL`, `EVENTS_FORMAT`, ...).
    NodeControl,
    /// jobenv's own input, set by a payload, never passed to the program (`ATTRIBUTE`,
    /// `NAMESPACE`, `EVENTS_ROW_ID`, ...); `SYSTEM` and `EVENTS_SECRET` the node may set too.
    PayloadControl {
        node_may_set: bool,
    },
    /// jobenv derives it (`DEPLOYMENT_NAMESPACE`, the state addresses): no node source sets it; a
    /// payload may propose a state address, checked against its rules.
    Derived {
        payload_may_propose: bool,
    },
    /// The state backend's credentials: the node's, or a payload's where the node has none.
    StateCredential {
        declared: bool,
    },
    /// Steers a shell, an interpreter, the loader, Nix, git, ssh or OpenTofu: no payload sets it
    /// and jobenv's environment never passes it, declared or not; the node may, when it declares
    /// it or it is a Nix/OpenTofu variable of the node.
    Reserved {
        node_may_set: bool,
    },
    /// Declared in the keys file.
    Declared(&'a DeclaredKey),
    /// An undeclared Nix/OpenTofu variable a node may set (`NIX_CONFIG`, `TF_VAR_*`, ...).
    NodeTool,
    Undeclared,
}

/// The class of `key` on a node that declares `declared`.
pub fn class<'a>(key: &str, declared: &'a BTreeMap<String, DeclaredKey>) -> KeyClass<'a> {
    if NODE_CONTROL_KEYS.contains(&key) {
        KeyClass::NodeControl
    } else if PAYLOAD_CONTROL_KEYS.contains(&key) {
        KeyClass::PayloadControl {
            node_may_set: SHARED_CONTROL_KEYS.contains(&key),
        }
    } else if DERIVED_KEYS.contains(&key) {
        KeyClass::Derived {
            payload_may_propose: STATE_KEYS.contains(&key),
        }
    } else if STATE_KEYS.contains(&key) {
        KeyClass::StateCredential {
            declared: declared.contains_key(key),
        }
    } else if is_reserved(key) {
        KeyClass::Reserved {
            node_may_set: declared.contains_key(key) || is_node_tool_key(key),
        }
    } else if let Some(entry) = declared.get(key) {
        KeyClass::Declared(entry)
    } else if is_node_tool_key(key) {
        KeyClass::NodeTool
    } else {
        KeyClass::Undeclared
    }
}

impl KeyClass<'_> {
    /// jobenv consumes it and never passes it to the program.
    pub fn is_consumed(self) -> bool {
        matches!(self, KeyClass::NodeControl | KeyClass::PayloadControl { .. })
    }

    /// No layer passes it on as it is: jobenv consumes it or derives it.
    pub fn is_control(self) -> bool {
        self.is_consumed() || matches!(self, KeyClass::Derived { .. })
    }

    /// Only the node may set it: a payload value is dropped.
    pub fn is_node_only(self) -> bool {
        match self {
            KeyClass::NodeControl => true,
            KeyClass::Declared(entry) => entry.node_only,
            _ => false,
        }
    }

    /// A node source may set it.
    pub fn node_may_set(self) -> bool {
        match self {
            KeyClass::NodeControl | KeyClass::StateCredential { .. } | KeyClass::Declared(_) | KeyClass::NodeTool => {
                true
            }
            KeyClass::PayloadControl { node_may_set } | KeyClass::Reserved { node_may_set } => node_may_set,
            KeyClass::Derived { .. } | KeyClass::Undeclared => false,
        }
    }

    /// It may pass from jobenv's own environment (besides [`ENVIRON_PASSTHROUGH`]): a declared
    /// key that is not node-only.
    pub fn environ_may_set(self) -> bool {
        match self {
            KeyClass::Declared(entry) => !entry.node_only,
            KeyClass::StateCredential { declared } => declared,
            _ => false,
        }
    }
}

/// A variable name jobenv can pass to execve: non-empty, no `=`, no NUL.
pub fn is_valid_key(key: &str) -> bool {
    !key.is_empty() && !key.contains('=') && !key.contains('\0')
}

/// `^[a-z0-9_]+-[a-z0-9_]+$`
pub fn is_valid_system(s: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
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
            "PATH",
            "HOME",
            "NIX_PATH",
            "NIX_CONFIG",
            "TF_HTTP_RETRY_MAX",
            "LD_PRELOAD",
            "DYLD_INSERT_LIBRARIES",
            "BASH_ENV",
            "ENV",
            "BASH_FUNC_ls%%",
            "SHELLOPTS",
            "BASHOPTS",
            "PS4",
            "PROMPT_COMMAND",
            "IFS",
            "CDPATH",
            "GLOBIGNORE",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "PERL5LIB",
            "PERL5OPT",
            "RUBYOPT",
            "RUBYLIB",
            "NODE_OPTIONS",
            "NODE_PATH",
            "GCONV_PATH",
            "GIT_SSH_COMMAND",
            "GIT_CONFIG_GLOBAL",
            "SSH_AUTH_SOCK",
            "SSH_ASKPASS",
            "SSH_ASKPASS_REQUIRE",
            "TF_CLI_ARGS",
            "TF_CLI_ARGS_init",
            "TF_CLI_CONFIG_FILE",
            "TF_DATA_DIR",
            "TF_PLUGIN_CACHE_DIR",
            "DEPLOYMENT_NAMESPACE",
            "shellHook",
            "preHook",
            "postHook",
            "preConfigurePhases",
            "buildPhase",
            "PERLLIB",
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
            "OPENSSL_CONF",
            "OPENSSL_ENGINES",
            "OPENSSL_MODULES",
            "XDG_CONFIG_HOME",
            "XDG_CONFIG_DIRS",
            "HOSTALIASES",
            "LOCALDOMAIN",
            "RES_OPTIONS",
            "TF_LOG_PATH",
            "TF_REATTACH_PROVIDERS",
            "TF_WORKSPACE",
            "LUA_INIT",
            "LUA_PATH_5_4",
        ] {
            assert!(is_reserved(k), "{k}");
        }
        // Positive controls: near names, the state-backend keys and the usual declared keys.
        for k in [
            "PATHX",
            "HOSTING_CONFIG",
            "TF_VAR_x",
            "NIXOS",
            "ENVIRONMENTS",
            "SSH_PRIVATE_KEY_FILE",
            "INTERNAL_HOSTS",
            "TF_LOG",
            "TF_IN_AUTOMATION",
            "PUBLISHED_HOSTS",
            "LUA",
            "XDG_DATA_HOME",
        ] {
            assert!(!is_reserved(k), "{k}");
        }
        for k in STATE_KEYS {
            assert!(!is_reserved(k) && STATE_KEYS.contains(k), "{k}");
        }
    }

    #[test]
    fn every_key_has_one_class_and_the_first_that_fits_wins() {
        let mut declared = BTreeMap::new();
        for key in [
            "DOMAIN",
            "PIN",
            "PATH",
            "TF_HTTP_PASSWORD",
            "DEPLOYMENT_NAMESPACE",
            "SYSTEM",
        ] {
            declared.insert(
                key.to_owned(),
                DeclaredKey {
                    node_only: key == "PIN",
                    ..Default::default()
                },
            );
        }
        let class = |key| class(key, &declared);
        assert_eq!(class("DEPLOYMENT_ROOT"), KeyClass::NodeControl);
        assert_eq!(class("ATTRIBUTE"), KeyClass::PayloadControl { node_may_set: false });
        assert_eq!(class("EVENTS_ROW_ID"), KeyClass::PayloadControl { node_may_set: false });
        assert_eq!(class("EVENTS_SECRET"), KeyClass::PayloadControl { node_may_set: true });
        assert_eq!(class("EVENTS_FORMAT"), KeyClass::NodeControl);
        // A control key stays one when a keys file declares it (which is refused on its own).
        assert_eq!(class("SYSTEM"), KeyClass::PayloadControl { node_may_set: true });
        assert_eq!(
            class("DEPLOYMENT_NAMESPACE"),
            KeyClass::Derived {
                payload_may_propose: false
            }
        );
        assert_eq!(
            class("TF_HTTP_LOCK_ADDRESS"),
            KeyClass::Derived {
                payload_may_propose: true
            }
        );
        assert_eq!(class("TF_HTTP_USERNAME"), KeyClass::StateCredential { declared: false });
        assert_eq!(class("TF_HTTP_PASSWORD"), KeyClass::StateCredential { declared: true });
        assert_eq!(class("PATH"), KeyClass::Reserved { node_may_set: true });
        assert_eq!(class("NIX_CONFIG"), KeyClass::Reserved { node_may_set: true });
        assert_eq!(class("LD_PRELOAD"), KeyClass::Reserved { node_may_set: false });
        assert_eq!(class("DOMAIN"), KeyClass::Declared(&declared["DOMAIN"]));
        assert!(class("PIN").is_node_only() && !class("DOMAIN").is_node_only() && class("NIXPKGS").is_node_only());
        assert_eq!(class("TF_VAR_token"), KeyClass::NodeTool);
        assert_eq!(class("TF_LOG"), KeyClass::NodeTool);
        assert_eq!(class("ANYTHING"), KeyClass::Undeclared);
        // Who may set what.
        assert!(
            class("DOMAIN").environ_may_set() && !class("PIN").environ_may_set() && !class("PATH").environ_may_set()
        );
        assert!(
            class("TF_VAR_token").node_may_set()
                && !class("LD_PRELOAD").node_may_set()
                && !class("ATTRIBUTE").node_may_set()
        );
    }

    #[test]
    fn running_system_is_valid() {
        assert!(is_valid_system(&running_system()));
    }
}
