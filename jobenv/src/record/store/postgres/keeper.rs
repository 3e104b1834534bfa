//! The connection to the shared journal and the renewal of a run's leases, on a thread of its
//! own with a small tokio runtime: the renewals go on while the main thread waits for a lock or
//! supervises the program, and every statement has a deadline, so that a partitioned database
//! cannot hold jobenv past its renew deadline. A connection that breaks (a restarted database,
//! `pg_terminate_backend`) is made anew at the next statement: a renewal that fails is retried
//! until the deadline.
//!
//! The main thread runs its statements through [`Keeper::block_on`] (the runtime's own thread
//! drives the connection), never from inside another runtime.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, NoTls, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::dsn::Dsn;
use super::tables::{self, Failed, Renewed, Table};
use crate::error::Refusal;
use crate::run::Renewal;

/// The times of the run's leases (`settings::Cluster`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub lease: Duration,
    pub renew_every: Duration,
    pub renew_deadline: Duration,
}

impl Timing {
    /// After a failed renewal the next try comes sooner, up to the deadline.
    fn retry(&self) -> Duration {
        (self.renew_every / 2).min(Duration::from_secs(1))
    }

    /// How long letting a lease go may hold up the end of a run (one that is not let go
    /// expires).
    fn release_wait(&self) -> Duration {
        self.renew_deadline.min(Duration::from_secs(2))
    }
}

/// A lease the run holds: its row, its epoch, and when the statement that last renewed it was
/// sent.
#[derive(Debug, Clone)]
struct Held {
    table: Table,
    key: String,
    epoch: i64,
    renewed: Instant,
}

/// Why a statement could not be done is a [`Refusal`]: `Unreachable` (the database cannot be
/// reached now: refused, timed out, shut down, a broken connection), `Cluster` (it answered, but
/// not as jobenv needs: a right missing, a row it cannot act on) or `NotReady` (a row of a newer
/// format than this jobenv reads: a newer jobenv can act on it). [`why`] is its text without
/// the refusal's own words, for lines of their own.
pub(super) fn why(refusal: Refusal) -> String {
    match refusal {
        Refusal::Unreachable(why) | Refusal::Cluster(why) | Refusal::NotReady(why) => why,
        other => other.to_string(),
    }
}

pub(super) struct Keeper {
    handle: Handle,
    pub shared: Arc<Shared>,
    /// Dropped with the keeper: the runtime's thread ends.
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub(super) struct Shared {
    dsn: Arc<Dsn>,
    pub timing: Timing,
    client: tokio::sync::Mutex<Option<Client>>,
    leases: Mutex<Vec<Held>>,
    lost: Mutex<Option<Lost>>,
    renewals: watch::Sender<Renewal>,
}

/// Why the run renews its leases no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lost {
    /// Not renewed within the renew deadline: the supervisor stops the program by its own clock
    /// (the leases' last renewal stands, see `run::lease`).
    GaveUp,
    /// The database says a lease is no longer this run's (taken over, or expired): stop at once.
    TakenOver,
}

impl Keeper {
    /// The runtime's thread, and the renewals on it; nothing is connected yet.
    pub fn start(dsn: Arc<Dsn>, timing: Timing) -> std::io::Result<Keeper> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("cluster-journal".into())
            .spawn(
                move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => {
                        let _ = handle_tx.send(Ok(runtime.handle().clone()));
                        runtime.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                    Err(error) => {
                        let _ = handle_tx.send(Err(error));
                    }
                },
            )?;
        let handle = handle_rx
            .recv()
            .map_err(|_| std::io::Error::other("the cluster journal's thread ended at its start"))??;
        let shared = Arc::new(Shared {
            dsn,
            timing,
            client: tokio::sync::Mutex::new(None),
            leases: Mutex::new(Vec::new()),
            lost: Mutex::new(None),
            renewals: watch::channel(Renewal::None).0,
        });
        handle.spawn(renew(Arc::clone(&shared)));
        Ok(Keeper {
            handle,
            shared,
            _stop: stop,
        })
    }

    /// Runs `future` to its end from the main thread (outside any runtime).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl Shared {
    /// Runs `op` on the connection (made first if there is none), within `limit`. A connection
    /// that failed is dropped, so the next statement connects anew; the schema is made on the
    /// first connection that finds it missing.
    pub async fn run<T>(
        &self,
        limit: Duration,
        op: impl AsyncFnOnce(&mut Client) -> Result<T, Failed>,
    ) -> Result<T, Refusal> {
        let deadline = tokio::time::Instant::now() + limit;
        // The renewals share the connection: a statement of theirs stuck in a partition ends
        // at its own deadline, and this one's counts from now.
        let mut client = tokio::time::timeout_at(deadline, self.client.lock())
            .await
            .map_err(|_| Refusal::Unreachable(format!("no connection within {:?}", rounded(limit))))?;
        if client.as_ref().is_none_or(Client::is_closed) {
            *client = None;
            let made = tokio::time::timeout_at(deadline, self.connect())
                .await
                .map_err(|_| Refusal::Unreachable(format!("no connection within {:?}", rounded(limit))))?;
            *client = Some(made?);
        }
        let connected = client.as_mut().expect("connected above");
        match tokio::time::timeout_at(deadline, op(connected)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(failed)) => {
                let trouble = self.trouble(failed);
                if matches!(trouble, Refusal::Unreachable(_)) {
                    *client = None;
                }
                Err(trouble)
            }
            Err(_) => {
                *client = None;
                Err(Refusal::Unreachable(format!("no answer within {:?}", rounded(limit))))
            }
        }
    }

    async fn connect(&self) -> Result<Client, Refusal> {
        let mut client = match &self.dsn.tls {
            Some(tls) => self.connect_with(MakeRustlsConnect::new((**tls).clone())).await,
            None => self.connect_with(NoTls).await,
        }
        .map_err(|e| self.trouble(Failed::Db(e)))?;
        tables::ensure_schema(&mut client).await.map_err(|e| self.trouble(e))?;
        Ok(client)
    }

    /// A connection over `tls` (or none); a task of its own drives it.
    async fn connect_with<T>(&self, tls: T) -> Result<Client, tokio_postgres::Error>
    where
        T: MakeTlsConnect<Socket>,
        T::Stream: Send + 'static,
    {
        let (client, connection) = self.dsn.config.connect(tls).await?;
        let hide = Arc::clone(&self.dsn);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(
                    "the connection to the cluster journal ended: {}",
                    hide.hide(&error.to_string())
                );
            }
        });
        Ok(client)
    }

    /// What a failure means for the run, its text free of the DSN.
    fn trouble(&self, failed: Failed) -> Refusal {
        let error = match failed {
            Failed::Row(why) => return Refusal::Cluster(why),
            Failed::Newer(why) => return Refusal::NotReady(why),
            Failed::Db(error) => error,
        };
        let text = self.dsn.hide(&match error.as_db_error() {
            Some(db) => format!("{}: {}", db.severity(), db.message()),
            None => with_causes(&error),
        });
        // Class 08 (connection), 53 (resources), 57 (operator intervention: a shutdown, a
        // terminated backend) and no answer at all: try again later. Anything else (a right
        // missing, 42501; a server certificate that does not verify) needs a person.
        let transient = error.is_closed()
            || (error.as_db_error().is_none() && !is_tls_refusal(&error))
            || error.as_db_error().is_some_and(|db| {
                ["08", "53", "57"]
                    .iter()
                    .any(|class| db.code().code().starts_with(class))
            });
        if transient {
            Refusal::Unreachable(text)
        } else {
            Refusal::Cluster(text)
        }
    }

    /// The run holds this lease from now on; `sent`: when the statement that took it was sent.
    pub fn hold(&self, table: Table, key: &str, epoch: i64, sent: Instant) {
        self.leases.lock().unwrap_or_else(|p| p.into_inner()).push(Held {
            table,
            key: key.to_owned(),
            epoch,
            renewed: sent,
        });
        self.publish();
    }

    /// The lease is no longer the run's to renew (ended, or let go).
    pub fn forget(&self, table: Table, key: &str) {
        self.leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|h| !(h.table == table && h.key == key));
        self.publish();
    }

    /// As [`Shared::forget`], if the lease is still at `epoch`.
    fn forget_epoch(&self, table: Table, key: &str, epoch: i64) {
        self.leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|h| !(h.table == table && h.key == key && h.epoch == epoch));
        self.publish();
    }

    /// Renewed (or written under a renewal) by a statement sent at `sent`. Once the renewals
    /// gave up, no more: their last renewal stands. A write under a lease made since (the
    /// running entry of a run that waited for a node-local lock meanwhile) renews nothing to
    /// come, and a program started on it would be stopped one renew deadline later, half done:
    /// the run starts none (see `job`'s step 9).
    pub fn renewed(&self, table: Table, key: &str, sent: Instant) {
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        // Under the leases' lock, as the renewals give up (`give_up_if_due`).
        if self.is_lost() {
            return;
        }
        for held in leases.iter_mut().filter(|h| h.table == table && h.key == key) {
            held.renewed = held.renewed.max(sent);
        }
        drop(leases);
        self.publish();
    }

    /// Gives the renewals up if the oldest renewal of the leases held is older than the renew
    /// deadline at `now`: judged under the leases' lock, so that a renewal recorded meanwhile
    /// ([`Shared::renewed`]) is either seen here or refused there.
    fn give_up_if_due(&self, now: Instant) -> bool {
        let leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        let due = leases
            .iter()
            .map(|h| h.renewed)
            .min()
            .is_some_and(|oldest| now >= oldest + self.timing.renew_deadline);
        if due {
            let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
            if *lost != Some(Lost::TakenOver) {
                *lost = Some(Lost::GaveUp);
            }
        }
        drop(leases);
        if due {
            self.publish();
        }
        due
    }

    /// The lease's epoch and its expiry as this node can vouch for it (its last renewal's
    /// send time plus the lease), if the run holds it.
    pub fn held(&self, table: Table, key: &str) -> Option<(i64, Instant)> {
        let leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        leases
            .iter()
            .find(|h| h.table == table && h.key == key)
            .map(|h| (h.epoch, h.renewed + self.timing.lease))
    }

    /// The run renews its leases no more (see [`Lost`]).
    pub fn is_lost(&self) -> bool {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    fn lose(&self, why: Lost) {
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        // Taken over says more than given up.
        if *lost != Some(Lost::TakenOver) {
            *lost = Some(why);
        }
        drop(lost);
        self.publish();
    }

    pub fn subscribe(&self) -> watch::Receiver<Renewal> {
        self.renewals.subscribe()
    }

    /// The supervisor's view: the oldest renewal of the leases held.
    fn publish(&self) {
        let taken_over = *self.lost.lock().unwrap_or_else(|p| p.into_inner()) == Some(Lost::TakenOver);
        let renewal = if taken_over {
            Renewal::Lost
        } else {
            match self
                .leases
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|h| h.renewed)
                .min()
            {
                Some(at) => Renewal::At(at),
                None => Renewal::None,
            }
        };
        self.renewals.send_replace(renewal);
    }

    /// Lets every lease still held go, at the end of the run (best effort: one that is not let
    /// go expires).
    pub async fn release_all(&self) {
        let leases: Vec<Held> = std::mem::take(&mut *self.leases.lock().unwrap_or_else(|p| p.into_inner()));
        self.publish();
        if leases.is_empty() || self.is_lost() {
            return;
        }
        let released = self
            .run(self.timing.release_wait(), async |client| {
                for held in &leases {
                    tables::release(client, held.table, &held.key, held.epoch).await?;
                }
                Ok(())
            })
            .await;
        if let Err(why) = released.map_err(why) {
            tracing::debug!("the run's leases on the cluster journal were not let go ({why}): they expire");
        }
    }

    /// Lets one lease go.
    pub async fn release(&self, table: Table, key: &str) {
        let Some((epoch, _)) = self.held(table, key) else {
            return;
        };
        self.forget(table, key);
        if self.is_lost() {
            return;
        }
        if let Err(why) = self
            .run(self.timing.release_wait(), async |client| {
                tables::release(client, table, key, epoch).await
            })
            .await
            .map_err(why)
        {
            tracing::debug!("a lease on the cluster journal was not let go ({why}): it expires");
        }
    }
}

/// An error's message and those of its causes (a TLS handshake's says only that it failed; its
/// cause says why: `invalid peer certificate: UnknownIssuer`).
fn with_causes(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(error) = cause {
        let said = error.to_string();
        if !text.ends_with(&said) {
            text = format!("{text}: {said}");
        }
        cause = error.source();
    }
    text
}

/// Whether TLS refused the server (its certificate does not verify against what the node
/// trusts: rustls' own error, somewhere in the error's causes), or the server refused TLS (one
/// started without it, or something in between that answers for it).
fn is_tls_refusal(error: &tokio_postgres::Error) -> bool {
    if with_causes(error).contains("server does not support TLS") {
        return true;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(error) = cause {
        // An I/O error's source is its inner error's source: the inner error itself is reached
        // through `get_ref`.
        let inner = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        if error.is::<rustls::Error>() || inner.is_some_and(|inner| inner.is::<rustls::Error>()) {
            return true;
        }
        cause = error.source();
    }
    false
}

/// A time as messages show it: to a tenth of a second.
fn rounded(duration: Duration) -> Duration {
    Duration::from_millis(u64::try_from(duration.as_millis().div_ceil(100) * 100).unwrap_or(u64::MAX))
}

/// Every `renew_every`, the run's leases are renewed in one go; after a failure, sooner. A lease
/// found taken over or expired is lost at once; one that could not be renewed within the renew
/// deadline is lost then (the supervisor judges that by its own clock too, see
/// `run::lease`), and is never renewed after it: the run is stopping its program.
async fn renew(shared: Arc<Shared>) {
    let timing = shared.timing;
    let mut next = tokio::time::Instant::now() + timing.renew_every;
    let mut failing = false;
    loop {
        tokio::time::sleep_until(next).await;
        let leases: Vec<Held> = shared.leases.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(oldest) = leases.iter().map(|h| h.renewed).min() else {
            next = tokio::time::Instant::now() + timing.renew_every;
            continue;
        };
        let deadline = oldest + timing.renew_deadline;
        let sent = Instant::now();
        if shared.is_lost() || shared.give_up_if_due(sent) {
            // The supervisor has said so and is stopping the program (`run::lease`).
            tracing::debug!(
                "the leases on the cluster journal were not renewed within {:?}: no more renewals",
                timing.renew_deadline
            );
            shared.lose(Lost::GaveUp);
            return;
        }
        let renewed = shared
            .run(deadline - sent, async |client| {
                let mut let_go = Vec::new();
                for held in &leases {
                    match tables::renew(client, held.table, &held.key, held.epoch, timing.lease).await? {
                        Renewed::Yes => {}
                        Renewed::LetGo => let_go.push(held.clone()),
                        Renewed::Lost => return Ok(Err(held.clone())),
                    }
                }
                Ok(Ok(let_go))
            })
            .await;
        match renewed {
            Ok(Ok(let_go)) => {
                // Ended or let go by this run meanwhile (its final write, a release raced this
                // renewal): no longer held, and no loss.
                for held in &let_go {
                    shared.forget_epoch(held.table, &held.key, held.epoch);
                }
                for held in &leases {
                    shared.renewed(held.table, &held.key, sent);
                }
                if failing {
                    tracing::info!("the leases on the cluster journal are renewed again");
                }
                failing = false;
                next = tokio::time::Instant::from_std(sent) + timing.renew_every;
            }
            Ok(Err(gone)) => {
                let what = match gone.table {
                    Table::Jobs => format!("job {}", gone.key),
                    Table::Namespaces => format!("namespace {}", gone.key),
                };
                tracing::error!("the lease of {what} on the cluster journal expired or was taken over: this run stops");
                shared.lose(Lost::TakenOver);
                return;
            }
            Err(refusal) => {
                let why = why(refusal);
                if !failing {
                    tracing::warn!(
                        "cannot renew the leases on the cluster journal ({why}): retrying for up to {:?} since the last renewal",
                        timing.renew_deadline
                    );
                }
                failing = true;
                next = tokio::time::Instant::now() + timing.retry();
            }
        }
    }
}
