//! The statements of the shared journal: one function per thing a run does to it, each a single
//! statement or one short transaction. Every write to a held row is fenced by its epoch; a lease
//! is taken only where the database's clock says it expired (or its holder is this very node's
//! and gone, which the node-local locks prove).

use std::time::Duration;

use tokio_postgres::Client;

use crate::error::ReadError;
use crate::record::entry::{Entry, Request, parse};

pub(super) const SCHEMA: &str = "fediversity_jobenv";
/// The `format` of every row this jobenv writes, and the newest it acts on.
pub(super) const FORMAT: i32 = 1;
const DDL: &str = include_str!("schema.sql");

/// Who holds a lease: `text` for messages, `node` (`record::identity`: the boot id and the
/// state directory's random id) to tell this node's own rows.
#[derive(Debug, Clone)]
pub(super) struct Holder {
    pub text: String,
    pub node: String,
}

/// A held lease's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    Jobs,
    Namespaces,
}

impl Table {
    fn name_and_key(self) -> (&'static str, &'static str) {
        match self {
            Table::Jobs => ("jobs", "job_id"),
            Table::Namespaces => ("namespaces", "namespace"),
        }
    }
}

/// A statement failed, or a row is not one this jobenv can act on.
#[derive(Debug)]
pub(super) enum Failed {
    Db(tokio_postgres::Error),
    Row(String),
    /// A row, or the entry in it, of a newer format: a newer jobenv acts on it, this one not.
    Newer(String),
}

impl From<tokio_postgres::Error> for Failed {
    fn from(error: tokio_postgres::Error) -> Self {
        Failed::Db(error)
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Makes the schema's objects when one is missing. One query when they are there (every run's
/// first connection); otherwise under an advisory lock, so two nodes that start at once do not
/// both create them.
pub(super) async fn ensure_schema(client: &mut Client) -> Result<(), Failed> {
    let ready = "SELECT to_regclass('fediversity_jobenv.jobs') IS NOT NULL AND to_regclass('fediversity_jobenv.namespaces') IS NOT NULL \
                 AND to_regclass('fediversity_jobenv.epochs') IS NOT NULL AND to_regclass('fediversity_jobenv.jobs_unended') IS NOT NULL";
    if client.query_one(ready, &[]).await?.get::<_, bool>(0) {
        return Ok(());
    }
    let tx = client.transaction().await?;
    tx.batch_execute("SELECT pg_advisory_xact_lock(hashtext('fediversity_jobenv schema'))")
        .await?;
    // CREATE SCHEMA needs a right on the database even when the schema is there: only when it
    // is not.
    let exists: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&SCHEMA],
        )
        .await?
        .get(0);
    if !exists {
        tx.batch_execute(&format!("CREATE SCHEMA {SCHEMA}")).await?;
    }
    tx.batch_execute(DDL).await?;
    tx.commit().await?;
    tracing::debug!("the cluster journal's tables were made in schema {SCHEMA}");
    Ok(())
}

/// What a claim of a job id found.
#[derive(Debug)]
pub(super) enum JobRow {
    /// This run holds the job id's lease now; `previous` is what the row held (none: the job id
    /// is new, or no attempt of it got as far as its program). `same_node`: the previous lease
    /// was this node's.
    Claimed {
        epoch: i64,
        previous: Option<Entry>,
        same_node: bool,
    },
    /// The job ended with a result: nothing to hold, it is replayed.
    Ended(Entry),
    /// The job id's entry is of another request than the run's: nothing is taken, the run is
    /// refused.
    Another(Entry),
    /// Another node's run holds its lease.
    Held { holder: String, entry: Option<Entry> },
}

/// The entry a row holds, checked as the node's journal checks its files.
fn entry_of(job_id: &str, text: Option<String>) -> Result<Option<Entry>, Failed> {
    let Some(text) = text else { return Ok(None) };
    let shown = format!("the cluster journal's row of job {job_id}");
    parse(job_id, &shown, text.as_bytes()).map(Some).map_err(|e| match e {
        ReadError::Newer { .. } => Failed::Newer(e.to_string()),
        _ => Failed::Row(e.to_string()),
    })
}

fn known_format(format: i32, what: &str) -> Result<(), Failed> {
    if format > FORMAT {
        return Err(Failed::Newer(format!(
            "{what} was written by a newer jobenv (format {format}; this one knows {FORMAT}): it is left alone (upgrade jobenv)"
        )));
    }
    Ok(())
}

/// Takes the job id's lease unless its entry is of another request than `asked`, a result is
/// recorded, or another node's lease on it is live.
pub(super) async fn claim_job(
    client: &mut Client,
    job_id: &str,
    asked: &Request<'_>,
    me: &Holder,
    lease: Duration,
) -> Result<JobRow, Failed> {
    let fresh = client
        .query_opt(
            "INSERT INTO fediversity_jobenv.jobs (job_id, format, holder, holder_node, epoch, expires_at) \
             VALUES ($1, $2, $3, $4, nextval('fediversity_jobenv.epochs'), now() + $5::bigint * interval '1 millisecond') \
             ON CONFLICT (job_id) DO NOTHING RETURNING epoch",
            &[&job_id, &FORMAT, &me.text, &me.node, &millis(lease)],
        )
        .await?;
    if let Some(row) = fresh {
        return Ok(JobRow::Claimed {
            epoch: row.get(0),
            previous: None,
            same_node: false,
        });
    }
    let tx = client.transaction().await?;
    let row = tx
        .query_one(
            "SELECT format, holder, holder_node, coalesce(expires_at > now(), false), entry::text FROM fediversity_jobenv.jobs WHERE job_id = $1 FOR UPDATE",
            &[&job_id],
        )
        .await?;
    known_format(row.get(0), &format!("the cluster journal's row of job {job_id}"))?;
    let (holder, node, live): (String, String, bool) = (row.get(1), row.get(2), row.get(3));
    let entry = entry_of(job_id, row.get(4))?;
    // Before anything is taken: a run of another request must not end the one that holds the
    // job id (its lease would be this run's, the holder's fenced writes refused).
    if let Some(entry) = entry.as_ref().filter(|e| e.another_request(asked).is_some()) {
        return Ok(JobRow::Another(entry.clone()));
    }
    if let Some(entry) = entry.as_ref().filter(|e| e.is_result()) {
        return Ok(JobRow::Ended(entry.clone()));
    }
    let same_node = node == me.node;
    if live && !same_node {
        return Ok(JobRow::Held { holder, entry });
    }
    let epoch = tx
        .query_one(
            "UPDATE fediversity_jobenv.jobs SET format = $2, holder = $3, holder_node = $4, epoch = nextval('fediversity_jobenv.epochs'), \
             expires_at = now() + $5::bigint * interval '1 millisecond', finished_at = NULL WHERE job_id = $1 RETURNING epoch",
            &[&job_id, &FORMAT, &me.text, &me.node, &millis(lease)],
        )
        .await?
        .get(0);
    tx.commit().await?;
    Ok(JobRow::Claimed {
        epoch,
        previous: entry,
        same_node: live && same_node,
    })
}

/// Takes the namespace's lease if it expired (or was this node's own); otherwise says who holds
/// it.
pub(super) async fn claim_namespace(
    client: &mut Client,
    namespace: &str,
    job_id: Option<&str>,
    me: &Holder,
    lease: Duration,
) -> Result<Result<i64, String>, Failed> {
    let taken = client
        .query_opt(
            "INSERT INTO fediversity_jobenv.namespaces AS n (namespace, format, holder, holder_node, epoch, expires_at, job_id) \
             VALUES ($1, $2, $3, $4, nextval('fediversity_jobenv.epochs'), now() + $5::bigint * interval '1 millisecond', $6) \
             ON CONFLICT (namespace) DO UPDATE SET format = EXCLUDED.format, holder = EXCLUDED.holder, holder_node = EXCLUDED.holder_node, \
             epoch = EXCLUDED.epoch, expires_at = EXCLUDED.expires_at, job_id = EXCLUDED.job_id \
             WHERE n.format <= EXCLUDED.format AND (n.expires_at <= now() OR n.holder_node = EXCLUDED.holder_node) RETURNING epoch",
            &[&namespace, &FORMAT, &me.text, &me.node, &millis(lease), &job_id],
        )
        .await?;
    if let Some(row) = taken {
        return Ok(Ok(row.get(0)));
    }
    match client
        .query_opt(
            "SELECT format, holder FROM fediversity_jobenv.namespaces WHERE namespace = $1",
            &[&namespace],
        )
        .await?
    {
        Some(row) => {
            known_format(
                row.get(0),
                &format!("the cluster journal's row of namespace {namespace}"),
            )?;
            Ok(Err(row.get(1)))
        }
        // Gone between the two statements (a person deleted it): try again.
        None => Ok(Err(String::from("(released just now)"))),
    }
}

/// The `running` entry, under a live lease (which this renews): false when the lease was taken
/// over or expired.
pub(super) async fn write_running(
    client: &mut Client,
    entry: &Entry,
    epoch: i64,
    lease: Duration,
) -> Result<bool, Failed> {
    let text = serde_json::to_string(entry).map_err(|e| Failed::Row(e.to_string()))?;
    let n = client
        .execute(
            "UPDATE fediversity_jobenv.jobs SET entry = $2::text::jsonb, format = $3, expires_at = now() + $4::bigint * interval '1 millisecond' \
             WHERE job_id = $1 AND epoch = $5 AND expires_at > now()",
            &[&entry.job_id, &text, &FORMAT, &millis(lease), &epoch],
        )
        .await?;
    Ok(n == 1)
}

/// The end of the attempt, fenced by its epoch (an expired lease nobody took is still this
/// run's to end). False when another run took the job id over.
pub(super) async fn write_end(client: &mut Client, entry: &Entry, epoch: i64) -> Result<bool, Failed> {
    let text = serde_json::to_string(entry).map_err(|e| Failed::Row(e.to_string()))?;
    let n = client
        .execute(
            "UPDATE fediversity_jobenv.jobs SET entry = $2::text::jsonb, format = $3, expires_at = NULL, finished_at = now() WHERE job_id = $1 AND epoch = $4",
            &[&entry.job_id, &text, &FORMAT, &epoch],
        )
        .await?;
    Ok(n == 1)
}

/// What handing a kept end on found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum HandedOn {
    /// The row has it now.
    Taken,
    /// A run holds the job id's lease right now: try again later.
    Held,
    /// The row records a later attempt, or an end: the kept one is no longer the cluster's to
    /// take.
    Superseded,
}

/// An end this node holds that the shared row may lack (see `unshared`), fenced: taken where
/// the row has not ended and is still at the lease it was written under (`epoch`), or still
/// shows that very attempt `running` (its number, start and jobenv) under a lease that expired
/// (a run on another node claimed the job id meanwhile but never got to run it: nothing later
/// is recorded) or that `mine` (this node's identity) holds: the caller holds the job's
/// node-local lock, so that holder is a jobenv of this node that is gone. Never over a later
/// attempt, an end, or another's live lease. Found already taken where the row ended at that
/// lease (this end was written, and its jobenv died before it knew).
pub(super) async fn hand_on_end(
    client: &mut Client,
    entry: &Entry,
    epoch: Option<i64>,
    mine: Option<&str>,
) -> Result<HandedOn, Failed> {
    let text = serde_json::to_string(entry).map_err(|e| Failed::Row(e.to_string()))?;
    let n = client
        .execute(
            "UPDATE fediversity_jobenv.jobs SET entry = $2::text::jsonb, format = $3, expires_at = NULL, finished_at = now() \
             WHERE job_id = $1 AND format <= $3 AND expires_at IS NOT NULL AND (epoch = $4 OR ((expires_at <= now() OR holder_node = $9) \
             AND entry->>'status' = 'running' AND entry->>'attempt' = $5 AND entry->>'started_at' = $6 \
             AND entry->>'pid' = $7 AND entry->>'pid_start' = $8))",
            &[
                &entry.job_id,
                &text,
                &FORMAT,
                &epoch,
                &entry.attempt.to_string(),
                &entry.started_at,
                &entry.pid.to_string(),
                &entry.pid_start.to_string(),
                &mine,
            ],
        )
        .await?;
    if n == 1 {
        return Ok(HandedOn::Taken);
    }
    let row = client
        .query_opt(
            "SELECT coalesce(expires_at > now(), false), epoch = $2 AND expires_at IS NULL FROM fediversity_jobenv.jobs WHERE job_id = $1",
            &[&entry.job_id, &epoch],
        )
        .await?;
    Ok(match row {
        Some(row) if row.get::<_, Option<bool>>(1) == Some(true) => HandedOn::Taken,
        Some(row) if row.get::<_, bool>(0) => HandedOn::Held,
        _ => HandedOn::Superseded,
    })
}

/// The job ids whose shared row has not ended and shows an attempt `running`, with that entry:
/// where an end this node holds may be missing (`recover`'s reconciliation).
pub(super) async fn unended(client: &mut Client) -> Result<Vec<(String, String)>, Failed> {
    Ok(client
        .query(
            "SELECT job_id, entry::text FROM fediversity_jobenv.jobs WHERE expires_at IS NOT NULL AND entry->>'status' = 'running'",
            &[],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

/// The rows of attempts that ended longer ago than `retain`, by the database's clock, as the
/// node's journal prunes its entries (`prune`); a row whose job id a run holds has not ended.
pub(super) async fn prune(client: &mut Client, retain: Duration) -> Result<u64, Failed> {
    Ok(client
        .execute(
            "DELETE FROM fediversity_jobenv.jobs WHERE finished_at < now() - $1::bigint * interval '1 millisecond'",
            &[&millis(retain)],
        )
        .await?)
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Renewed {
    Yes,
    /// The row is still at this run's epoch, ended or let go by the run itself (its final write
    /// or a release, made while this renewal waited): nothing is lost.
    LetGo,
    /// Taken over, or expired.
    Lost,
}

/// Renews one lease if it is still this run's and live.
pub(super) async fn renew(
    client: &Client,
    table: Table,
    key: &str,
    epoch: i64,
    lease: Duration,
) -> Result<Renewed, Failed> {
    let (name, column) = table.name_and_key();
    let sql = format!(
        "UPDATE {SCHEMA}.{name} SET expires_at = now() + $3::bigint * interval '1 millisecond' WHERE {column} = $1 AND epoch = $2 AND expires_at > now()"
    );
    if client.execute(&sql, &[&key, &epoch, &millis(lease)]).await? == 1 {
        return Ok(Renewed::Yes);
    }
    let sql = format!(
        "SELECT 1 FROM {SCHEMA}.{name} WHERE {column} = $1 AND epoch = $2 AND (expires_at IS NULL OR expires_at = '-infinity')"
    );
    Ok(if client.query_opt(&sql, &[&key, &epoch]).await?.is_some() {
        Renewed::LetGo
    } else {
        Renewed::Lost
    })
}

/// Lets a lease go: it has expired from now on (the row and its entry stay).
pub(super) async fn release(client: &Client, table: Table, key: &str, epoch: i64) -> Result<(), Failed> {
    let (name, column) = table.name_and_key();
    let sql = format!(
        "UPDATE {SCHEMA}.{name} SET expires_at = '-infinity' WHERE {column} = $1 AND epoch = $2 AND expires_at IS NOT NULL"
    );
    client.execute(&sql, &[&key, &epoch]).await?;
    Ok(())
}
