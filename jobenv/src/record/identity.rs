//! Who this node is, in cluster mode: what a lease row's `holder_node` says, so that a run can
//! tell a lease of this very node's (whose jobenv is gone, as the node-local locks the run holds
//! prove) from another node's (which it must wait out).
//!
//! The kernel's boot id alone does not tell two nodes apart: containers on one host (Docker,
//! Podman, Kubernetes, LXC) share it, and so may the path of their state directories. So the
//! identity is the boot id and a random id made once in the state directory (`node-id`: 128
//! bits, written atomically and synced, the owner's only), which no other state directory has:
//! the file records the directory it was made for (its device and inode), and one found in
//! another directory (a copy: a state directory baked into an image, restored, or copied to set
//! up a new node) is replaced by a new one. Within one boot no two directories have the same
//! device and inode, so two state directories of one kernel never share an identity; a new
//! identity is always safe (its leases of before are waited out, not taken over).
//!
//! The node-local locks prove a jobenv gone only for the state directory they are in: this one,
//! the directory the identity is read from, and so the run takes over a lease of its own
//! identity only under them (see `store::postgres`).

use serde::{Deserialize, Serialize};

use super::journal::Journal;
use crate::process;

/// The file in the state directory.
pub const FILE: &str = "node-id";

/// What `node-id` holds: the id, and the state directory it was made for.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    id: String,
    dev: u64,
    ino: u64,
}

/// 32 lowercase hex digits.
fn is_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn random_id() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// This node's identity: `<boot id> <node id>` (see the module's documentation). Made on
/// first use; an error when the state directory cannot hold it (then no run can vouch for
/// its leases).
pub fn node_identity(journal: &Journal) -> std::io::Result<String> {
    let here = journal.state_dir_id()?;
    let here = (here.dev, here.ino);
    let id = match stored_id(journal, here)? {
        Found::Here(id) => id,
        Found::Missing => {
            let id = random_id()?;
            let bytes = serde_json::to_vec(&Stored {
                id: id.clone(),
                dev: here.0,
                ino: here.1,
            })?;
            if journal.state.create_new(FILE, &bytes)? {
                tracing::debug!("this node's identity in the cluster journal is new: {id}");
                id
            } else {
                // Another jobenv of this state directory made it first: its id is the node's.
                match stored_id(journal, here)? {
                    Found::Here(id) => id,
                    _ => return Err(unusable(journal)),
                }
            }
        }
        Found::Elsewhere => {
            let id = random_id()?;
            let bytes = serde_json::to_vec(&Stored {
                id: id.clone(),
                dev: here.0,
                ino: here.1,
            })?;
            journal.state.write_atomically(FILE, &bytes, true)?;
            tracing::warn!(
                "{} was made for another state directory (a copy of one?): this node gets an identity of its own, {id}",
                journal.state.shown(FILE.as_ref())
            );
            id
        }
    };
    Ok(format!("{} {id}", process::boot_id().unwrap_or("unknown-boot")))
}

fn stored_id(journal: &Journal, here: (u64, u64)) -> std::io::Result<Found> {
    let Some(bytes) = journal.state.read(FILE)? else {
        return Ok(Found::Missing);
    };
    match serde_json::from_slice::<Stored>(&bytes) {
        Ok(stored) if is_id(&stored.id) && (stored.dev, stored.ino) == here => Ok(Found::Here(stored.id)),
        Ok(stored) if is_id(&stored.id) => Ok(Found::Elsewhere),
        _ => Err(unusable(journal)),
    }
}

fn unusable(journal: &Journal) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{} is not a node identity as jobenv writes it (delete it: a new one is made)",
            journal.state.shown(FILE.as_ref())
        ),
    )
}

enum Found {
    Here(String),
    Missing,
    Elsewhere,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_is_made_once_per_state_directory_and_a_copy_gets_its_own() {
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = Journal::open(one.path()).unwrap();
        let first = node_identity(&a).unwrap();
        assert_eq!(node_identity(&a).unwrap(), first, "made once, then read");
        assert_eq!(
            node_identity(&Journal::open(one.path()).unwrap()).unwrap(),
            first,
            "another jobenv of the same state directory"
        );
        let (boot, id) = first.split_once(' ').unwrap();
        assert_eq!(Some(boot), process::boot_id());
        assert!(is_id(id), "{id}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(one.path().join(FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the owner's only");
        // Another state directory, on the same boot: another identity.
        let b = Journal::open(two.path()).unwrap();
        assert_ne!(node_identity(&b).unwrap(), first);
        // A copy of the first one's file in the second: it was not made there, a new one is.
        std::fs::copy(one.path().join(FILE), two.path().join(FILE)).unwrap();
        let copied = node_identity(&b).unwrap();
        assert_ne!(copied, first, "a copied identity was taken for this state directory's");
        assert_eq!(node_identity(&b).unwrap(), copied);
        // Positive control: the original keeps its own.
        assert_eq!(node_identity(&a).unwrap(), first);
        // What is not one is an error naming the file, never taken for an identity.
        std::fs::write(two.path().join(FILE), "{\"id\":\"x\",\"dev\":0,\"ino\":0}").unwrap();
        let error = node_identity(&b).unwrap_err().to_string();
        assert!(
            error.contains("node-id is not a node identity as jobenv writes it"),
            "{error}"
        );
    }

    #[test]
    fn of_two_that_make_it_at_once_one_wins_and_both_use_it() {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<String> = std::thread::scope(|scope| {
            let made: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| node_identity(&Journal::open(dir.path()).unwrap()).unwrap()))
                .collect();
            made.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    }
}
