//! A throwaway PostgreSQL 15 cluster per test binary, and one database per test holding
//! Windmill's `password` table (its columns as Windmill's migrations make them and as observed on
//! Windmill CE 1.743.0), or for jobenv's cluster mode a database with the schema its role owns
//! ([`Cluster::jobenv_database`]). A test that stops the database gets a cluster of its own
//! ([`Cluster::start_private`], [`Cluster::pause`], [`Cluster::resume`]).
//!
//! The cluster runs from the machine's `/usr/lib/postgresql/15/bin` as the `postgres` user when
//! the tests run as root (initdb refuses root), listens on 127.0.0.1 and a free port with
//! `fsync=off`, asks for a password on TCP (scram-sha-256), and is stopped when the test binary
//! exits (see [`crate::process`]). It speaks TLS too, with a certificate for `127.0.0.1` from a
//! CA of its own ([`Cluster::ca_file`]); the role [`JOBENV_TLS_ROLE`] may connect over TLS only.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::servers::{self, RunAs};

pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The seed row's hash: Windmill's migration `20220508150023_changeme_passwords` sets exactly
/// this string, the argon2id hash of `changeme` (m=4096, t=3, p=1); `is_first_time_setup`
/// compares against it.
pub const SEED_HASH: &str =
    "$argon2id$v=19$m=4096,t=3,p=1$oLJo/lPn/gezXCuFOEyaNw$i0T2tCkw3xUFsrBIKZwr8jVNHlIfoxQe+HfDnLtd12I";
pub const ADMIN_EMAIL: &str = "admin@windmill.dev";

/// The login role the bootstrap connects as, like Windmill's own database user on NixOS: a
/// member of `windmill_admin`, but NOINHERIT, so it can touch `password` only after
/// `SET ROLE windmill_admin`. A bootstrap that forgot the SET ROLE fails here.
pub const APP_ROLE: &str = "windmill";

pub struct Cluster {
    pub port: u16,
    dir: PathBuf,
    run_as: Option<RunAs>,
    superuser_password: String,
    app_password: String,
    server: Mutex<Option<Child>>,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

/// The login role of jobenv's cluster mode: it owns the schema of its database and nothing else.
pub const JOBENV_ROLE: &str = "jobenv_node";
/// The schema jobenv's cluster journal lives in.
pub const JOBENV_SCHEMA: &str = "fediversity_jobenv";
/// A login role with [`JOBENV_ROLE`]'s rights that the server lets in over TLS only
/// (`hostnossl … reject` in `pg_hba.conf`): a job that works as this role used TLS.
pub const JOBENV_TLS_ROLE: &str = "jobenv_tls";

/// The cluster of this test binary, started on first use.
pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        let cluster = Cluster::start();
        servers::at_exit(|| {
            if let Some(cluster) = CLUSTER.get() {
                cluster.stop();
            }
        });
        cluster
    })
}

/// The initdb'd cluster the test binaries copy, made once under `<workspace>/target` (a lock
/// keeps parallel test binaries from making it twice): local connections trusted, TCP with
/// scram-sha-256, no password set yet.
fn template(bin: &Path, run_as: Option<RunAs>) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let target = crate::venv::workspace_root().join("target");
    std::fs::create_dir_all(&target).expect("target dir");
    let template = target.join("testkit-pg15-template");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(target.join("testkit-pg15-template.lock"))
        .expect("lock file");
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock the template");
    let data = template.join("data");
    if data.join("PG_VERSION").is_file() {
        return data;
    }
    let _ = std::fs::remove_dir_all(&template);
    std::fs::create_dir_all(&template).expect("template dir");
    if let Some(RunAs { uid, gid }) = run_as {
        std::os::unix::fs::chown(&template, Some(uid), Some(gid)).expect("chown the template dir");
    }
    let partial = template.join("partial");
    run(
        Command::new(bin.join("initdb")).arg("-D").arg(&partial).args([
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
            "--no-instructions",
        ]),
        run_as,
        "initdb",
    );
    // Only a complete cluster gets the name the check above looks for.
    std::fs::rename(&partial, &data).expect("rename the template");
    data
}

fn run(command: &mut Command, run_as: Option<RunAs>, what: &str) {
    if let Some(RunAs { uid, gid }) = run_as {
        use std::os::unix::process::CommandExt;
        command.uid(uid).gid(gid);
    }
    let out = command.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How a cluster authenticates local (Unix socket) connections.
enum LocalAuth<'a> {
    /// The template's: everyone is trusted.
    Trust,
    /// As NixOS' PostgreSQL does (`local all all peer`), after `first` (pg_hba.conf lines) and
    /// with `ident` as pg_ident.conf.
    Peer { first: &'a str, ident: &'a str },
}

impl Cluster {
    fn start() -> Cluster {
        Cluster::start_with(LocalAuth::Trust)
    }

    /// A cluster of its own whose socket authenticates as NixOS' PostgreSQL does: nixpkgs'
    /// default rules (`local all all peer`: a local connection gets in only as the role of its
    /// OS user's name, without a password), after `first` (pg_hba.conf lines, e.g. the NixOS
    /// module's) and with `ident` as pg_ident.conf. The harness's superuser keeps a trusted
    /// socket (`local all postgres trust`, as nixpkgs maps the OS user postgres to it); TCP asks
    /// for a password as in the shared cluster. Its socket is in [`socket_dir`](Self::socket_dir);
    /// it is stopped when the test binary exits.
    pub fn start_with_peer_authentication(first: &str, ident: &str) -> &'static Cluster {
        let cluster: &'static Cluster = Box::leak(Box::new(Cluster::start_with(LocalAuth::Peer { first, ident })));
        servers::at_exit(move || cluster.stop());
        cluster
    }

    /// The directory of the cluster's Unix socket (`.s.PGSQL.<port>`).
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    fn start_with(local: LocalAuth<'_>) -> Cluster {
        let bin = Path::new(PG_BIN);
        assert!(
            bin.join("initdb").is_file(),
            "PostgreSQL 15 is not installed ({PG_BIN}/initdb is missing): run .ci/run, which installs postgresql-15"
        );
        let run_as = if nix::unistd::getuid().is_root() {
            let user = nix::unistd::User::from_name("postgres")
                .ok()
                .flatten()
                .expect("running as root needs the `postgres` user (package postgresql-15)");
            Some(RunAs {
                uid: user.uid.as_raw(),
                gid: user.gid.as_raw(),
            })
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("testkit-pg-")
            .tempdir()
            .expect("temp dir")
            .keep();
        if let Some(RunAs { uid, gid }) = run_as {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown the cluster dir");
        }
        let data = dir.join("data");
        // A copy of a cluster made once by initdb (about 1.4 s; the copy takes a tenth of that).
        let out = Command::new("cp")
            .arg("-a")
            .arg(template(bin, run_as))
            .arg(&data)
            .output()
            .expect("cp");
        assert!(
            out.status.success(),
            "cannot copy the template cluster: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // TLS: the server's certificate and key (which PostgreSQL wants its own, mode 0600), the
        // CA's certificate for the clients, and the TLS-only role's rule first in pg_hba.conf.
        let ca = crate::tls::Ca::new("testkit PostgreSQL CA");
        let server = ca.issue(&["127.0.0.1"]);
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write the CA");
        for (name, text) in [("server.crt", &server.certificate), ("server.key", &server.key)] {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write the server's certificate");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
            if let Some(RunAs { uid, gid }) = run_as {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown the server's certificate");
            }
        }
        let hba = data.join("pg_hba.conf");
        let rules = match local {
            LocalAuth::Trust => std::fs::read_to_string(&hba).expect("read pg_hba.conf"),
            LocalAuth::Peer { first, ident } => {
                // Written in place: the files stay the server's user's.
                std::fs::write(data.join("pg_ident.conf"), ident).expect("write pg_ident.conf");
                format!(
                    "{first}\nlocal all postgres trust\nlocal all all peer\nhost all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n"
                )
            }
        };
        std::fs::write(&hba, format!("hostnossl all {JOBENV_TLS_ROLE} all reject\n{rules}"))
            .expect("write pg_hba.conf");
        let cluster = Cluster {
            port: servers::free_port(),
            dir,
            run_as,
            superuser_password: servers::random_string(24),
            app_password: servers::random_string(24),
            server: Mutex::new(None),
        };
        cluster.spawn_server();
        cluster.wait_ready();
        cluster.create_roles();
        cluster
    }

    fn spawn_server(&self) {
        let mut command = Command::new(Path::new(PG_BIN).join("postgres"));
        command
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-c", "listen_addresses=127.0.0.1", "-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args([
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "ssl=on",
            ])
            .arg("-c")
            .arg(format!("ssl_cert_file={}", self.dir.join("server.crt").display()))
            .arg("-c")
            .arg(format!("ssl_key_file={}", self.dir.join("server.key").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join("server.log"))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            );
        // SIGINT is PostgreSQL's fast shutdown.
        let child = servers::spawn_tied(command, self.run_as, libc::SIGINT).expect("start postgres");
        *self.server.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
    }

    /// A cluster of the caller's own, stopped when it is dropped: for a test that stops the
    /// database under its clients.
    pub fn start_private() -> Cluster {
        Cluster::start()
    }

    /// Stops the server (a fast shutdown: its clients' connections end), keeping its data.
    pub fn pause(&self) {
        if let Some(mut child) = self.server.lock().unwrap_or_else(|p| p.into_inner()).take() {
            servers::stop(&mut child, libc::SIGINT, Duration::from_secs(10));
        }
    }

    /// Starts a paused server again, on the same port, and waits until it answers.
    pub fn resume(&self) {
        self.spawn_server();
        let deadline = Instant::now() + Duration::from_secs(30);
        while postgres::Client::connect(&self.socket_dsn(), postgres::NoTls).is_err() {
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not come up again on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The local socket, where the template's `trust` lets the superuser in without a password.
    fn socket_dsn(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres connect_timeout=5",
            self.dir.display(),
            self.port
        )
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match postgres::Client::connect(&self.socket_dsn(), postgres::NoTls) {
                Ok(mut client) => {
                    // TCP asks for a password (scram-sha-256): give the superuser one.
                    client
                        .batch_execute(&format!("ALTER ROLE postgres PASSWORD '{}'", self.superuser_password))
                        .expect("set the password");
                    return;
                }
                Err(e) if Instant::now() > deadline => {
                    let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                    panic!("PostgreSQL did not come up on port {}: {e}\n{log}", self.port);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The roles Windmill's migrations create (`windmill_user`, and `windmill_admin` with
    /// BYPASSRLS and membership in `windmill_user`), plus the NixOS-style login role.
    fn create_roles(&self) {
        let mut client = self.superuser_client("postgres");
        client
            .batch_execute(&format!(
                "CREATE ROLE windmill_user NOLOGIN;
                 CREATE ROLE windmill_admin NOLOGIN BYPASSRLS;
                 GRANT windmill_user TO windmill_admin;
                 CREATE ROLE {APP_ROLE} LOGIN NOINHERIT PASSWORD '{}';
                 GRANT windmill_admin TO {APP_ROLE};
                 CREATE ROLE {JOBENV_ROLE} LOGIN PASSWORD '{}';
                 CREATE ROLE {JOBENV_TLS_ROLE} LOGIN PASSWORD '{}' IN ROLE {JOBENV_ROLE};",
                self.app_password, self.app_password, self.app_password
            ))
            .expect("create the Windmill roles");
    }

    fn stop(&self) {
        if let Some(mut child) = self.server.lock().unwrap_or_else(|p| p.into_inner()).take() {
            servers::stop(&mut child, libc::SIGINT, Duration::from_secs(10));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// The CA that issued the server's certificate (for `127.0.0.1`), in PEM.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    pub fn superuser_dsn(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres password={} dbname={db} connect_timeout=5",
            self.port, self.superuser_password
        )
    }

    pub fn superuser_client(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.superuser_dsn(db), postgres::NoTls).expect("connect as the superuser")
    }

    /// A new database for jobenv's cluster mode: its schema owned by [`JOBENV_ROLE`], which has
    /// no other right there (jobenv makes its tables itself).
    pub fn jobenv_database(&self) -> JobenvDb<'_> {
        let name = format!(
            "jobenv_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        self.superuser_client("postgres")
            .batch_execute(&format!("CREATE DATABASE {name} STRATEGY = FILE_COPY"))
            .expect("create database");
        self.superuser_client(&name)
            .batch_execute(&format!("CREATE SCHEMA {JOBENV_SCHEMA} AUTHORIZATION {JOBENV_ROLE}"))
            .expect("create the schema");
        JobenvDb { cluster: self, name }
    }

    /// A new database with Windmill's `password` table and the seed admin row.
    pub fn windmill_database(&'static self) -> WindmillDb {
        let name = format!(
            "windmill_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        self.windmill_database_named(&name)
    }

    /// [`windmill_database`](Self::windmill_database) under a name of the caller's (on a
    /// cluster of its own, nixpkgs' `windmill`).
    pub fn windmill_database_named(&'static self, name: &str) -> WindmillDb {
        let name = name.to_owned();
        self.superuser_client("postgres")
            .batch_execute(&format!("CREATE DATABASE {name} STRATEGY = FILE_COPY"))
            .expect("create database");
        let mut client = self.superuser_client(&name);
        // Column types as observed on Windmill 1.743.0 (`\d password`); password_hash is still
        // VARCHAR(100). The grant is what Windmill's default privileges give windmill_user.
        client
            .batch_execute(&format!(
                "CREATE TABLE password (
                    email VARCHAR(255) PRIMARY KEY,
                    password_hash VARCHAR(100),
                    login_type VARCHAR(50) NOT NULL,
                    super_admin BOOLEAN NOT NULL DEFAULT false,
                    verified BOOLEAN NOT NULL DEFAULT false,
                    name VARCHAR(255),
                    company VARCHAR(255),
                    first_time_user BOOLEAN NOT NULL DEFAULT false,
                    username VARCHAR(50),
                    devops BOOLEAN NOT NULL DEFAULT false,
                    role_source VARCHAR(20) NOT NULL DEFAULT 'manual' CHECK (role_source IN ('manual', 'instance_group')),
                    disabled BOOLEAN NOT NULL DEFAULT false
                 );
                 GRANT ALL ON password TO windmill_user;
                 INSERT INTO password (email, password_hash, login_type, super_admin, verified, name, company, username)
                 VALUES ('{ADMIN_EMAIL}', '{SEED_HASH}', 'password', true, true, 'Admin', 'Windmill', 'admin');"
            ))
            .expect("create the password table");
        WindmillDb { cluster: self, name }
    }
}

/// One test's database for jobenv's cluster mode.
pub struct JobenvDb<'a> {
    cluster: &'a Cluster,
    pub name: String,
}

impl JobenvDb<'_> {
    /// The DSN a node gives jobenv: the schema's role, with its password, over TCP.
    pub fn dsn(&self) -> String {
        self.dsn_on(self.cluster.port)
    }

    /// The same DSN through another port (a proxy in front of the cluster).
    pub fn dsn_on(&self, port: u16) -> String {
        format!(
            "host=127.0.0.1 port={port} user={JOBENV_ROLE} password={} dbname={} connect_timeout=5",
            self.password(),
            self.name
        )
    }

    /// The DSN of the TLS-only role ([`JOBENV_TLS_ROLE`]) to `host` (where the server's
    /// certificate is for `127.0.0.1`), with `sslmode=require`.
    pub fn tls_dsn(&self, host: &str) -> String {
        format!(
            "host={host} port={} user={JOBENV_TLS_ROLE} password={} dbname={} connect_timeout=5 sslmode=require",
            self.cluster.port,
            self.password(),
            self.name
        )
    }

    /// The CA that issued the server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.cluster.ca_file()
    }

    /// The role's password, for the secret scans.
    pub fn password(&self) -> String {
        self.cluster.app_password.clone()
    }

    /// A superuser connection to this database (to read the tables, or end a backend).
    pub fn client(&self) -> postgres::Client {
        self.cluster.superuser_client(&self.name)
    }

    /// Ends every connection jobenv holds to this database (`pg_terminate_backend`); how many.
    pub fn terminate_jobenv_backends(&self) -> i64 {
        self.client()
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND usename = $2",
                &[&self.name, &JOBENV_ROLE],
            )
            .expect("terminate backends")
            .get(0)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One test's database.
pub struct WindmillDb {
    cluster: &'static Cluster,
    pub name: String,
}

impl WindmillDb {
    /// The DSN the bootstrap gets (`windmill.database_url_file`): the NOINHERIT login role,
    /// with its password.
    pub fn app_dsn(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={APP_ROLE} password={} dbname={}",
            self.cluster.port, self.cluster.app_password, self.name
        )
    }

    /// The login role's password, for the secret scans.
    pub fn app_password(&self) -> String {
        self.cluster.app_password.clone()
    }

    /// A superuser DSN for this database (used by the Windmill fake to read hashes).
    pub fn superuser_dsn(&self) -> String {
        self.cluster.superuser_dsn(&self.name)
    }

    pub fn client(&self) -> postgres::Client {
        self.cluster.superuser_client(&self.name)
    }

    pub fn password_hash(&self, email: &str) -> Option<String> {
        self.client()
            .query_opt("SELECT password_hash FROM password WHERE email = $1", &[&email])
            .expect("read password_hash")
            .and_then(|row| row.get(0))
    }

    pub fn set_password_hash(&self, email: &str, hash: &str) {
        self.client()
            .execute(
                "UPDATE password SET password_hash = $1 WHERE email = $2",
                &[&hash, &email],
            )
            .expect("set password_hash");
    }

    pub fn execute(&self, sql: &str) {
        self.client().batch_execute(sql).expect("test SQL");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::{Argon2, PasswordHash, PasswordVerifier};

    #[test]
    fn the_seed_hash_is_changeme() {
        let parsed = PasswordHash::new(SEED_HASH).unwrap();
        assert!(Argon2::default().verify_password(b"changeme", &parsed).is_ok());
        assert!(Argon2::default().verify_password(b"changeme2", &parsed).is_err());
    }

    #[test]
    fn a_database_has_the_seed_row_and_the_login_role_needs_set_role() {
        let db = cluster().windmill_database();
        assert_eq!(db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
        let mut app = postgres::Client::connect(&db.app_dsn(), postgres::NoTls).unwrap();
        // NOINHERIT: no privilege on the table without SET ROLE ...
        let denied = app.execute("UPDATE password SET verified = true", &[]).unwrap_err();
        assert!(
            denied.to_string().contains("permission denied") || format!("{denied:?}").contains("permission denied"),
            "{denied:?}"
        );
        // ... and with it, the update works.
        let mut tx = app.transaction().unwrap();
        tx.batch_execute("SET LOCAL ROLE windmill_admin").unwrap();
        assert_eq!(
            tx.execute("UPDATE password SET verified = true WHERE email = $1", &[&ADMIN_EMAIL])
                .unwrap(),
            1
        );
        tx.rollback().unwrap();
        // A wrong password is refused: TCP connections really authenticate.
        let wrong = db.app_dsn().replace(&db.app_password(), "wrong-password");
        assert!(postgres::Client::connect(&wrong, postgres::NoTls).is_err());
    }
}
