-- The shared journal of fediversity-jobenv's cluster mode (see mod.rs beside this file). jobenv
-- makes these when they are missing, under an advisory lock, so the first run on a fresh
-- database sets them up; the role it connects as needs only this schema.
--
-- `format` is the layout and meaning of a row (1: this file). A jobenv never acts on a row of a
-- format it does not know: a newer jobenv's rows are left alone, never overwritten.
--
-- `epoch` is a lease's fencing token, drawn from one sequence: unique across rows and time, so
-- a write fenced by it (`WHERE epoch = <mine>`) can only ever reach the lease it was drawn for.
-- `expires_at` is set by the database's clock alone (`now() + lease`): the nodes' clocks never
-- decide who holds a lease.
CREATE SEQUENCE IF NOT EXISTS fediversity_jobenv.epochs;

-- One row per job id: its journal entry as the node that ran it wrote it (jobenv's
-- journal-entry schema), and the lease of the run that holds the job id now. `expires_at` is
-- NULL once the attempt ended.
CREATE TABLE IF NOT EXISTS fediversity_jobenv.jobs (
    job_id text PRIMARY KEY,
    format integer NOT NULL,
    holder text NOT NULL,
    holder_node text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz,
    entry jsonb,
    finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS jobs_finished_at ON fediversity_jobenv.jobs (finished_at) WHERE finished_at IS NOT NULL;
-- The rows whose attempt has not ended: what `recover` compares with the node's own journal.
CREATE INDEX IF NOT EXISTS jobs_unended ON fediversity_jobenv.jobs (job_id) WHERE expires_at IS NOT NULL;

-- One row per namespace that was ever deployed: the lease of the deploy that holds it. Rows are
-- never deleted; a released lease has expired (`-infinity`).
CREATE TABLE IF NOT EXISTS fediversity_jobenv.namespaces (
    namespace text PRIMARY KEY,
    format integer NOT NULL,
    holder text NOT NULL,
    holder_node text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    job_id text
);
