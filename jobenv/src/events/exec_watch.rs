//! Telling when the deployment program itself starts, so `running` means the program runs and
//! the time nix-shell spends instantiating the dev shell counts as `preparing`.
//!
//! The direct child of jobenv goes through one process image after another under the same pid:
//! jobenv's own (between fork and exec), nix-shell's (the planned argv), the shell nix-shell
//! execs on its generated rc file (`bash /tmp/nix-shell-<pid>-<n>/rc`, or `bash --rcfile <that>`
//! in newer Nix), and then, through `exec <EXECUTABLE>` in that rc file, the program. Its command
//! line tells these apart; anything that is none of the first three is the program (or what
//! the program exec'd into).
//!
//! Polling can miss a program that starts and ends between two looks. The reaper therefore
//! also asks, once the child has exited and before it is reaped, for the zombie's name: the
//! name of its last image (for a script, the script's name). If that is neither nix-shell nor
//! its shell, the program ran.

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Still jobenv, nix-shell, or nix-shell's shell (or between two images).
    Starting,
    Running,
    /// The process is gone: whatever it was, the terminal status will say how it ended.
    Gone,
}

/// The command line of `pid` as raw `/proc` bytes, `None` once the process is gone.
pub fn read_cmdline(pid: i32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline")).ok()
}

/// The name (`/proc/<pid>/comm`) of `pid`; still readable while it is a zombie.
pub fn read_comm(pid: i32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_owned())
}

/// The name of the shell nix-shell execs: `NIX_BUILD_SHELL`'s file name, else bash.
pub fn shell_name(nix_build_shell: Option<&str>) -> String {
    nix_build_shell.and_then(|path| Path::new(path).file_name()).and_then(|name| name.to_str()).unwrap_or("bash").to_owned()
}

/// Whether a process named `comm` (at most 15 bytes, the kernel's cut) is past nix-shell and
/// its shell. A program whose last image is that same shell is not told apart.
pub fn is_program_image(comm: &str, shell: &str) -> bool {
    let cut = |name: &str| name.as_bytes()[..name.len().min(15)].to_vec();
    !comm.is_empty() && ![cut("nix-shell"), cut("nix"), cut(shell), cut("bash")].contains(&comm.as_bytes().to_vec())
}

/// What the direct child is now, from its command line (`/proc/<pid>/cmdline`: arguments
/// each followed by NUL) and, when that is empty (a zombie, or an image being swapped), its
/// name, read by `comm` only then.
pub fn phase(cmdline: Option<&[u8]>, comm: impl FnOnce() -> Option<String>, known: &Known) -> Phase {
    let Some(cmdline) = cmdline else { return Phase::Gone };
    if cmdline.is_empty() {
        return match comm() {
            Some(comm) if comm != known.own_comm && is_program_image(&comm, &known.shell) => Phase::Running,
            Some(_) => Phase::Starting,
            None => Phase::Gone,
        };
    }
    if cmdline == known.own_cmdline {
        return Phase::Starting;
    }
    let args: Vec<&[u8]> = cmdline.strip_suffix(b"\0").unwrap_or(cmdline).split(|&b| b == 0).collect();
    let planned = &known.argv;
    let is_planned = args.len() == planned.len() && args.iter().zip(planned).all(|(a, p)| *a == p.as_bytes());
    if is_planned || args.iter().any(|arg| is_nix_shell_rc(arg)) {
        return Phase::Starting;
    }
    Phase::Running
}

/// What the direct child looks like before it becomes the program.
#[derive(Debug, Clone)]
pub struct Known {
    /// jobenv's own command line and name: the child's between fork and exec.
    pub own_cmdline: Vec<u8>,
    pub own_comm: String,
    /// nix-shell's argv (the plan's).
    pub argv: Vec<String>,
    /// The file name of the shell nix-shell execs.
    pub shell: String,
}

impl Known {
    pub fn new(argv: Vec<String>, nix_build_shell: Option<&str>) -> Self {
        let me = std::process::id() as i32;
        Known {
            own_cmdline: read_cmdline(me).unwrap_or_default(),
            own_comm: read_comm(me).unwrap_or_default(),
            argv,
            shell: shell_name(nix_build_shell),
        }
    }
}

/// `.../nix-shell-<pid>-<n>/rc`: the file nix-shell generates and hands to the shell.
fn is_nix_shell_rc(arg: &[u8]) -> bool {
    let Ok(arg) = std::str::from_utf8(arg) else { return false };
    let path = Path::new(arg);
    path.file_name().is_some_and(|name| name == "rc")
        && path.parent().and_then(Path::file_name).and_then(|dir| dir.to_str()).is_some_and(|dir| dir.starts_with("nix-shell-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned() -> Vec<String> {
        ["/usr/bin/nix-shell", "/root", "-I", "nixpkgs=/p", "-A", "devShells.x86_64-linux.web", "--run", "exec web-apply"]
            .map(String::from)
            .to_vec()
    }

    fn cmdline(args: &[&str]) -> Vec<u8> {
        args.iter().flat_map(|a| a.bytes().chain([0])).collect()
    }

    fn known() -> Known {
        Known {
            own_cmdline: cmdline(&["fediversity-jobenv", "run", "--verb", "apply"]),
            own_comm: "fediversity-job".into(),
            argv: planned(),
            shell: "bash".into(),
        }
    }

    fn no_comm() -> Option<String> {
        panic!("the name is only read when the command line is empty")
    }

    #[test]
    fn the_images_before_the_program_are_starting() {
        let p = planned();
        let planned_refs: Vec<&str> = p.iter().map(String::as_str).collect();
        for line in [
            known().own_cmdline,
            cmdline(&planned_refs),
            cmdline(&["bash", "/tmp/nix-shell-30741-0/rc"]),
            cmdline(&["/bin/bash", "--rcfile", "/tmp/nix-shell.XyZ/nix-shell-12-0/rc"]),
        ] {
            assert_eq!(phase(Some(&line), no_comm, &known()), Phase::Starting, "{:?}", String::from_utf8_lossy(&line));
        }
    }

    #[test]
    fn the_program_is_running_whatever_it_is() {
        for line in [
            cmdline(&["/bin/sh", "/root/bin/web-apply"]),
            cmdline(&["bash", "/root/bin/web-apply"]),
            cmdline(&["/nix/store/x-web/bin/.web-apply-wrapped"]),
            cmdline(&["tofu", "apply", "rc"]),
        ] {
            assert_eq!(phase(Some(&line), no_comm, &known()), Phase::Running, "{:?}", String::from_utf8_lossy(&line));
        }
    }

    #[test]
    fn without_a_command_line_the_name_decides() {
        // A zombie, or a process between two images.
        let by_name = |comm: &str| phase(Some(b""), || Some(comm.to_owned()), &known());
        assert_eq!(by_name("web-apply"), Phase::Running);
        for comm in ["fediversity-job", "nix-shell", "bash"] {
            assert_eq!(by_name(comm), Phase::Starting, "{comm}");
        }
        assert_eq!(phase(Some(b""), || None, &known()), Phase::Gone);
    }

    #[test]
    fn the_last_image_of_an_exited_child() {
        assert_eq!(shell_name(Some("/nix/store/x-bash-5/bin/bash")), "bash");
        assert_eq!(shell_name(Some("/bin/zsh")), "zsh");
        assert_eq!(shell_name(None), "bash");
        for comm in ["web-apply", "tofu", ".web-apply-wra", "sh"] {
            assert!(is_program_image(comm, "bash"), "{comm}");
        }
        for comm in ["nix-shell", "nix", "bash", "zsh", ""] {
            assert!(!is_program_image(comm, "zsh"), "{comm}");
        }
        assert_eq!(read_comm(std::process::id() as i32).as_deref().map(str::is_empty), Some(false));
    }

    #[test]
    fn a_vanished_process_is_gone() {
        assert_eq!(phase(None, no_comm, &known()), Phase::Gone);
        assert_eq!(read_cmdline(i32::MAX), None);
        assert!(read_cmdline(std::process::id() as i32).is_some_and(|c| !c.is_empty()));
    }
}
