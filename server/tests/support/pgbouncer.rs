//! pgbouncer (Debian's, 1.18) of a test's own, in transaction pooling mode, on a free loopback
//! port in front of a PostgreSQL server: what many teams put between their services and
//! PostgreSQL. Its pools are small, so that clients share server connections as they do in
//! production, where a pooler exists because there are more clients than connections.
//!
//! Without the binary the test fails, saying what to install (`.ci/run` installs it).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use super::{free_port, is_root};

const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

#[derive(Debug)]
pub struct Pgbouncer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl Pgbouncer {
    /// Starts it in front of the server at `127.0.0.1:server_port`, every database reachable,
    /// at most `server_connections` server connections per database.
    pub async fn start(server_port: u16, server_connections: u32) -> Pgbouncer {
        assert!(
            Path::new(PGBOUNCER).exists(),
            "the pgbouncer tests need Debian's pgbouncer (apt-get install pgbouncer; .ci/run \
             installs it)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(path("users.txt"), "\"postgres\" \"\"\n").expect("users.txt");
        let config = format!(
            "[databases]\n\
             * = host=127.0.0.1 port={server_port}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             pool_mode = transaction\n\
             default_pool_size = {server_connections}\n\
             max_client_conn = 1000\n\
             server_login_retry = 1\n\
             logfile = {log}\n",
            users = path("users.txt"),
            log = path("pgbouncer.log"),
        );
        std::fs::write(path("pgbouncer.ini"), config).expect("pgbouncer.ini");
        // pgbouncer refuses to run as root.
        let mut command = if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown of pgbouncer's directory");
            let mut command = Command::new("setpriv");
            command
                .args([
                    "--reuid=postgres",
                    "--regid=postgres",
                    "--init-groups",
                    "--",
                    PGBOUNCER,
                ])
                .arg(path("pgbouncer.ini"));
            command
        } else {
            let mut command = Command::new(PGBOUNCER);
            command.arg(path("pgbouncer.ini"));
            command
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer");
        let bouncer = Pgbouncer { port, dir, child };
        bouncer.wait_until_answering().await;
        bouncer
    }

    async fn wait_until_answering(&self) {
        use sqlx::ConnectOptions;
        let deadline = Instant::now() + Duration::from_secs(30);
        let options: sqlx::postgres::PgConnectOptions =
            self.url_of("postgres").parse().expect("a URL");
        let options = options.extra_float_digits(None);
        while options.connect().await.is_err() {
            assert!(
                Instant::now() < deadline,
                "pgbouncer did not answer; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The URL of `database` through it.
    pub fn url_of(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The URL `url` (of the server behind it) names, through it.
    pub fn url_through(&self, url: &str) -> String {
        let database = url.rsplit('/').next().expect("a database in the URL");
        self.url_of(database.split('?').next().unwrap_or(database))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
