//! Where the cgroup v2 hierarchy is, as this process sees it: found in `/proc/self/mountinfo`
//! (never assumed at `/sys/fs/cgroup`: a hybrid layout mounts it at `/sys/fs/cgroup/unified`,
//! beside the v1 controllers), and jobenv's own cgroup in it, from the `0::` line of
//! `/proc/self/cgroup`. Also what a cgroup of a deploy is called, so that a record naming one
//! can be checked before anything is signalled through it.

use std::path::{Component, Path, PathBuf};

/// A cgroup2 mount: the cgroup it shows at its mount point, where, and whether it is writable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    root: String,
    point: PathBuf,
    writable: bool,
}

/// The directory of jobenv's own cgroup, on a writable cgroup2 mount; otherwise why there is
/// none.
pub fn own_cgroup() -> Result<PathBuf, String> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let own = v2_path(&cgroup).ok_or("jobenv is in no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)")?;
    let mounts = cgroup2_mounts(&mountinfo);
    if mounts.is_empty() {
        return Err("no cgroup2 file system is mounted".into());
    }
    locate(own, &mounts).ok_or_else(|| format!("jobenv's cgroup {own} is not under a writable cgroup2 mount"))
}

/// Whether `dir` can be a deploy cgroup of `namespace` (see [`deploy_name`]): an absolute path
/// without `.` or `..`, strictly under a cgroup2 mount, named for that namespace. A record in the
/// state directory names such a directory; a forged or stale one must not make jobenv signal
/// the processes of any other cgroup.
pub fn is_deploy_cgroup(dir: &Path, namespace: &str) -> bool {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let plain = dir.is_absolute()
        && dir
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|name| is_deploy_name(name, namespace));
    let mounted = cgroup2_mounts(&mountinfo)
        .iter()
        .any(|m| dir.starts_with(&m.point) && dir != m.point);
    plain && named && mounted
}

/// The name of a deploy's cgroup: `jobenv-<namespace>-<pid>-<start time>` (a pid alone can be
/// reused; with its start time it names one jobenv).
pub fn deploy_name(namespace: &str, pid: i32, start: u64) -> String {
    format!("jobenv-{namespace}-{pid}-{start}")
}

fn is_deploy_name(name: &str, namespace: &str) -> bool {
    let Some(rest) = name
        .strip_prefix("jobenv-")
        .and_then(|r| r.strip_prefix(namespace))
        .and_then(|r| r.strip_prefix('-'))
    else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    rest.split_once('-')
        .is_some_and(|(pid, start)| digits(pid) && digits(start))
}

/// The path of the `0::` line (the v2 hierarchy) of `/proc/<pid>/cgroup`.
fn v2_path(cgroup: &str) -> Option<&str> {
    // A cgroup removed meanwhile shows as `... (deleted)`: nothing can be created under it.
    cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .filter(|path| path.starts_with('/') && !path.ends_with(" (deleted)"))
}

/// The cgroup2 mounts of a mountinfo text, in mount order.
fn cgroup2_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // id parent major:minor root point options [optional...] - fstype source super-options
            let (mine, theirs) = line.split_once(" - ")?;
            let mut fields = mine.split(' ');
            let (root, point, options) = (fields.nth(3)?, fields.next()?, fields.next()?);
            let mut theirs = theirs.split(' ');
            let (fstype, super_options) = (theirs.next()?, theirs.nth(1).unwrap_or("rw"));
            let rw = |opts: &str| opts.split(',').any(|o| o == "rw");
            (fstype == "cgroup2").then(|| Mount {
                root: unescape(root),
                point: PathBuf::from(unescape(point)),
                writable: rw(options) && rw(super_options),
            })
        })
        .collect()
}

/// The directory of cgroup `own` on the last writable mount that shows it (a later mount on the
/// same point hides an earlier one).
fn locate(own: &str, mounts: &[Mount]) -> Option<PathBuf> {
    mounts.iter().rev().filter(|m| m.writable).find_map(|m| {
        let below = if m.root == "/" {
            Some(own)
        } else {
            own.strip_prefix(m.root.as_str())
                .filter(|r| r.is_empty() || r.starts_with('/'))
        }?;
        Some(m.point.join(below.trim_start_matches('/')))
    })
}

/// mountinfo writes space, tab, newline and backslash in paths as octal escapes (`\040`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";
    const UNIFIED: &str = "\
25 22 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn finds_the_v2_mount_in_a_hybrid_and_a_unified_layout() {
        let hybrid = cgroup2_mounts(HYBRID);
        assert_eq!(
            hybrid,
            [Mount {
                root: "/".into(),
                point: "/sys/fs/cgroup/unified".into(),
                writable: true
            }]
        );
        assert_eq!(
            locate("/system.slice/windmill-worker.service", &hybrid),
            Some("/sys/fs/cgroup/unified/system.slice/windmill-worker.service".into())
        );
        assert_eq!(locate("/", &hybrid), Some("/sys/fs/cgroup/unified/".into()));
        let unified = cgroup2_mounts(UNIFIED);
        assert_eq!(
            locate("/user.slice/a", &unified),
            Some("/sys/fs/cgroup/user.slice/a".into())
        );
    }

    #[test]
    fn a_read_only_mount_or_one_that_does_not_show_the_cgroup_is_not_used() {
        let read_only = "25 22 0:22 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(locate("/a", &cgroup2_mounts(read_only)), None);
        // A mount of a subtree (a container's view) shows only the cgroups below its root.
        let subtree = "25 22 0:22 /machine.slice/c /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let mounts = cgroup2_mounts(subtree);
        assert_eq!(
            locate("/machine.slice/c/inner", &mounts),
            Some("/sys/fs/cgroup/inner".into())
        );
        assert_eq!(locate("/machine.slice/other", &mounts), None);
        assert_eq!(
            locate("/machine.slice/cc", &mounts),
            None,
            "a sibling whose name starts with the root's"
        );
    }

    #[test]
    fn mount_points_are_unescaped_and_only_the_v2_line_of_proc_cgroup_counts() {
        let spaced = "25 22 0:22 / /mnt/cg\\040two rw - cgroup2 none rw\n";
        assert_eq!(cgroup2_mounts(spaced)[0].point, PathBuf::from("/mnt/cg two"));
        assert_eq!(
            v2_path("4:memory:/a\n0::/system.slice/x.service\n"),
            Some("/system.slice/x.service")
        );
        assert_eq!(v2_path("4:memory:/a\n1:name=systemd:/b\n"), None, "v1 only");
        assert_eq!(v2_path("0::/gone (deleted)\n"), None);
    }

    #[test]
    fn only_a_deploy_cgroup_of_the_namespace_under_a_cgroup2_mount_is_accepted() {
        assert!(is_deploy_name("jobenv-team-a-123-456", "team-a"));
        assert!(!is_deploy_name("jobenv-team-a-123-456", "team"), "another namespace's");
        assert!(!is_deploy_name("jobenv-team-a-123", "team-a"));
        assert!(!is_deploy_name("system.slice", "team-a"));
        // Whatever this machine mounts: a path that is on no cgroup2 mount, or climbs out of one.
        assert!(!is_deploy_cgroup(Path::new("/tmp/jobenv-ns-1-2"), "ns"));
        if let Some(mount) = cgroup2_mounts(&std::fs::read_to_string("/proc/self/mountinfo").unwrap()).first() {
            assert!(
                is_deploy_cgroup(&mount.point.join("x/jobenv-ns-1-2"), "ns"),
                "positive control"
            );
            assert!(!is_deploy_cgroup(&mount.point.join("x/../jobenv-ns-1-2"), "ns"));
            assert!(!is_deploy_cgroup(&mount.point.join("jobenv-ns-1-2/.."), "ns"));
        }
    }
}
