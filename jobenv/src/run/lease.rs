//! The supervisor's view of the leases a run holds on a shared journal (cluster mode, see
//! `record::store::postgres`): when all of them were last renewed, and whether one was lost. A
//! run whose leases were not renewed within the renew deadline stops its program tree, and
//! every stop of the tree, whatever started it, ends before any of them can expire
//! ([`LeaseWatch::kill_by`]), so that another node may take them then.
//!
//! The deadline is judged here, by jobenv's own monotonic clock from the moment each renewal was
//! *sent*, not by the thread that talks to the database: a renewal stuck in a partitioned
//! connection cannot delay the stop. That clock is read through tokio's ([`now`]), which is the
//! same one unless a test pauses it.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::settings::LEASE_STOP_MARGIN;

/// What the holder knows of its leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// No lease is held.
    None,
    /// Every lease held was renewed (or taken) by a statement sent at this instant or later: by
    /// the database's clock, none expires before this instant plus the lease.
    At(Instant),
    /// A lease was taken over or found expired by the database: stop at once.
    Lost,
}

/// The leases of a run, as the supervisor watches them.
#[derive(Debug, Clone)]
pub struct LeaseWatch {
    pub renewals: watch::Receiver<Renewal>,
    /// Without a renewal for this long, the program is stopped.
    pub renew_deadline: Duration,
    /// How long a lease lasts after its renewal.
    pub lease: Duration,
}

impl LeaseWatch {
    /// Lost now: taken over, or not renewed within the deadline.
    pub fn is_lost(&self) -> bool {
        match *self.renewals.borrow() {
            Renewal::None => false,
            Renewal::At(at) => now().saturating_duration_since(at) >= self.renew_deadline,
            Renewal::Lost => true,
        }
    }

    /// When the program tree must be killed at the latest, whatever stop is under way (a
    /// cancel's, a timeout's, the lease's own): the leases' expiry as this node can vouch for
    /// it (the last renewal's send time plus the lease), less the margin SIGKILL and the
    /// emptying of the tree need; now, once a lease was lost. `None` without a lease. Later
    /// renewals move it on.
    pub fn kill_by(&self) -> Option<Instant> {
        match *self.renewals.borrow() {
            Renewal::None => None,
            Renewal::At(at) => Some(at + self.lease.saturating_sub(LEASE_STOP_MARGIN)),
            Renewal::Lost => Some(now()),
        }
    }

    /// Resolves once the leases are lost; never while they are renewed in time.
    pub async fn lost(&mut self) {
        loop {
            let renewal = *self.renewals.borrow_and_update();
            let deadline = match renewal {
                Renewal::Lost => return,
                Renewal::At(at) => Some(at + self.renew_deadline),
                Renewal::None => None,
            };
            let expired = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = expired => return,
                changed = self.renewals.changed() => {
                    // The renewing side is gone: nothing renews any more, so the last renewal's
                    // deadline stands.
                    if changed.is_err() {
                        match deadline {
                            Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                            None => std::future::pending().await,
                        }
                        return;
                    }
                }
            }
        }
    }
}

/// Now, by the monotonic clock that renewals are sent by ([`Instant::now`]), as tokio reads it:
/// a test may pause it and move it on by hand (`tokio::time::pause`); nothing else does.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(renewal: Renewal) -> (watch::Sender<Renewal>, LeaseWatch) {
        let (tx, rx) = watch::channel(renewal);
        (
            tx,
            LeaseWatch {
                renewals: rx,
                renew_deadline: Duration::from_millis(200),
                lease: Duration::from_millis(1300),
            },
        )
    }

    // On tokio's paused clock: it moves on only when every task waits, straight to the next
    // timer (the timer wheel counts whole milliseconds), so what a test measures is exact.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_lease_renewed_in_time_is_never_lost_and_one_that_is_not_is_lost_at_its_deadline() {
        let (tx, mut lease) = watch(Renewal::At(now()));
        let renewing = async {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(190)).await;
                tx.send_replace(Renewal::At(now()));
            }
        };
        tokio::select! {
            () = lease.lost() => panic!("a lease renewed in time was lost"),
            () = renewing => {}
        }
        assert!(!lease.is_lost());
        // Positive control: without renewals, it is lost at the deadline, not before.
        let last = now();
        tx.send_replace(Renewal::At(last));
        lease.lost().await;
        let took = now() - last;
        assert!(
            took >= Duration::from_millis(200) && took <= Duration::from_millis(201),
            "{took:?}"
        );
        assert!(lease.is_lost());
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_lease_taken_over_is_lost_at_once_and_no_lease_is_never_lost() {
        let (tx, mut lease) = watch(Renewal::None);
        let none = tokio::time::timeout(Duration::from_secs(24 * 3600), lease.lost()).await;
        assert!(none.is_err(), "no lease held, yet lost");
        assert!(!lease.is_lost());
        let started = now();
        tx.send_replace(Renewal::Lost);
        lease.lost().await;
        assert_eq!(now(), started, "at once");
        assert!(lease.is_lost());
    }

    #[test]
    fn a_stop_must_end_by_the_last_renewal_plus_the_lease_less_the_margin_and_at_once_when_lost() {
        let (tx, lease) = watch(Renewal::None);
        assert_eq!(lease.kill_by(), None, "no lease, no bound");
        let renewed = now();
        tx.send_replace(Renewal::At(renewed));
        assert_eq!(lease.kill_by(), Some(renewed + Duration::from_millis(300)));
        // A later renewal moves it on.
        let later = renewed + Duration::from_millis(100);
        tx.send_replace(Renewal::At(later));
        assert_eq!(lease.kill_by(), Some(later + Duration::from_millis(300)));
        tx.send_replace(Renewal::Lost);
        assert!(lease.kill_by().unwrap() <= now());
    }
}
