//! A PostgreSQL or MariaDB server of a test's own, in a temporary directory on a free loopback
//! port, so that a test can crash and restart its database without touching the servers other
//! tests share.
//!
//! Without the server binaries the test fails, saying what to install; a backend left out by
//! `CARILLON_TEST_BACKENDS` starts nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use super::db::Engine;
use super::netns::NetHost;
use super::{free_port, is_root};

#[derive(Debug)]
pub struct PrivateServer {
    pub engine: Engine,
    pub port: u16,
    dir: tempfile::TempDir,
    /// MariaDB runs as our child; PostgreSQL is driven by `pg_ctl`.
    child: Option<Child>,
    /// Serves TLS only, with these certificates (PostgreSQL also requires a client
    /// certificate signed by the test CA).
    tls: Option<PathBuf>,
    /// Runs on this test host (`super::netns`), listening on its address, rather than on
    /// loopback.
    host: Option<NetHost>,
}

fn postgres_bin(name: &str) -> Option<PathBuf> {
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    let mut found: Vec<PathBuf> = versions
        .filter_map(|v| v.ok())
        .map(|v| v.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop()
}

/// Runs a PostgreSQL tool as the `postgres` user when we are root (PostgreSQL refuses root).
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl PrivateServer {
    /// Creates and starts a server with an empty database `test`, or `None` when
    /// `CARILLON_TEST_BACKENDS` leaves the engine out.
    pub async fn start(engine: Engine) -> Option<PrivateServer> {
        Self::start_with(engine, None, None).await
    }

    /// A server on test host `host`, reached at its address (every host of its network may
    /// connect, as `root` or `postgres` without a password).
    pub async fn start_on(engine: Engine, host: &NetHost) -> Option<PrivateServer> {
        Self::start_with(engine, None, Some(host.clone())).await
    }

    /// A server that accepts TLS connections only, with the certificates of `pki`.
    pub async fn start_tls(engine: Engine, pki: &super::pki::TestPki) -> Option<PrivateServer> {
        Self::start_with(engine, Some(pki), None).await
    }

    async fn start_with(
        engine: Engine,
        pki: Option<&super::pki::TestPki>,
        host: Option<NetHost>,
    ) -> Option<PrivateServer> {
        if engine.left_out() {
            return None;
        }
        let missing = match engine {
            Engine::Postgres => postgres_bin("initdb").is_none(),
            Engine::Mysql => !Path::new("/usr/sbin/mariadbd").exists(),
            Engine::Sqlite => panic!("SQLite has no server"),
        };
        assert!(
            !missing,
            "a private {engine:?} server needs its binaries on this machine \
             (apt-get install postgresql mariadb-server), or leave the backend out with \
             CARILLON_TEST_BACKENDS"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let mut server = PrivateServer {
            engine,
            port: free_port(),
            dir,
            child: None,
            tls: pki.map(|p| p.dir().to_owned()),
            host,
        };
        server.init();
        server.boot().await;
        server.create_test_database().await;
        Some(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn init(&self) {
        match self.engine {
            Engine::Postgres => {
                if is_root() {
                    run(
                        Command::new("chown").arg("postgres").arg(self.dir.path()),
                        "chown",
                    );
                }
                let initdb = postgres_bin("initdb").expect("initdb");
                run(
                    as_postgres(&initdb)
                        .arg("-D")
                        .arg(self.data())
                        .args(["-A", "trust", "-U", "postgres", "-N"]),
                    "initdb",
                );
                if let Some(host) = &self.host {
                    use std::io::Write;
                    let mut hba = std::fs::OpenOptions::new()
                        .append(true)
                        .open(self.data().join("pg_hba.conf"))
                        .expect("pg_hba.conf");
                    let [a, b, c, _] = host.ip.octets();
                    writeln!(hba, "host all all {a}.{b}.{c}.0/24 trust").expect("pg_hba.conf");
                }
                if let Some(pki) = &self.tls {
                    for name in ["ca.crt", "server.crt", "server.key"] {
                        let to = self.data().join(name);
                        std::fs::copy(pki.join(name), &to).expect("copying a PEM file");
                        run(Command::new("chmod").arg("600").arg(&to), "chmod");
                        if is_root() {
                            run(Command::new("chown").arg("postgres").arg(&to), "chown");
                        }
                    }
                    // TLS only, with a client certificate from the test CA.
                    std::fs::write(
                        self.data().join("pg_hba.conf"),
                        "local all all trust\n\
                         hostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n\
                         hostnossl all all 127.0.0.1/32 reject\n",
                    )
                    .expect("pg_hba.conf");
                }
            }
            Engine::Mysql => run(
                Command::new("mariadb-install-db")
                    .arg("--no-defaults")
                    .arg(format!("--datadir={}", self.data().display()))
                    .args([
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                        "--user=root",
                    ]),
                "mariadb-install-db",
            ),
            Engine::Sqlite => unreachable!(),
        }
    }

    /// Starts the server on its data directory and waits until it answers.
    async fn boot(&mut self) {
        match self.engine {
            Engine::Postgres => {
                let pg_ctl = postgres_bin("pg_ctl").expect("pg_ctl");
                let mut options = format!(
                    "-p {} -k {} -c listen_addresses={} -c fsync=off -c max_connections=200",
                    self.port,
                    self.dir.path().display(),
                    self.ip()
                );
                if self.tls.is_some() {
                    options.push_str(
                        " -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key \
                         -c ssl_ca_file=ca.crt",
                    );
                }
                run(
                    self.in_host(as_postgres(&pg_ctl))
                        .arg("-D")
                        .arg(self.data())
                        .arg("-l")
                        .arg(self.dir.path().join("server.log"))
                        .args(["-o", &options, "-w", "start"]),
                    "pg_ctl start",
                );
            }
            Engine::Mysql => {
                let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log");
                let tls: Vec<String> = self.tls.as_ref().map_or_else(Vec::new, |pki| {
                    vec![
                        format!("--ssl-ca={}", pki.join("ca.crt").display()),
                        format!("--ssl-cert={}", pki.join("server.crt").display()),
                        format!("--ssl-key={}", pki.join("server.key").display()),
                        "--require-secure-transport=ON".to_owned(),
                    ]
                });
                let child = self
                    .in_host(Command::new("/usr/sbin/mariadbd"))
                    .arg("--no-defaults")
                    .arg(format!("--datadir={}", self.data().display()))
                    .arg(format!("--port={}", self.port))
                    .arg(format!(
                        "--socket={}",
                        self.dir.path().join("mysqld.sock").display()
                    ))
                    .arg(format!("--bind-address={}", self.ip()))
                    .args([
                        "--skip-name-resolve",
                        "--user=root",
                        "--max-connections=300",
                        "--innodb-flush-log-at-trx-commit=2",
                    ])
                    .args(&tls)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("mariadbd");
                self.child = Some(child);
            }
            Engine::Sqlite => unreachable!(),
        }
        if self.engine == Engine::Mysql && self.host.is_some() {
            self.open_to_the_network().await;
        }
        self.wait_until_answering().await;
    }

    /// Lets `root` connect from any host of the network (MariaDB's `root` is `localhost`'s
    /// only), through the server's socket.
    async fn open_to_the_network(&self) {
        use sqlx::{Connection, Executor};
        let url = format!(
            "mysql://root@localhost/mysql?socket={}",
            self.dir.path().join("mysqld.sock").display()
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut connection = loop {
            match sqlx::MySqlConnection::connect(&url).await {
                Ok(connection) => break connection,
                Err(err) => assert!(
                    Instant::now() < deadline,
                    "the private MariaDB server did not answer on its socket: {err}; its log:\n{}",
                    std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        for statement in [
            "CREATE USER IF NOT EXISTS 'root'@'%'",
            "GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION",
        ] {
            connection
                .execute(statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    }

    async fn wait_until_answering(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = self.admin_url();
        loop {
            let answered = match self.engine {
                Engine::Postgres => {
                    use sqlx::Connection;
                    sqlx::PgConnection::connect(&url).await.is_ok()
                }
                _ => {
                    use sqlx::Connection;
                    sqlx::MySqlConnection::connect(&url).await.is_ok()
                }
            };
            if answered {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the private {:?} server did not answer; its log:\n{}",
                self.engine,
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn admin_url(&self) -> String {
        let database = match self.engine {
            Engine::Postgres => "postgres",
            _ => "mysql",
        };
        self.url_of(database, &self.tls_params())
    }

    /// What the test harness itself connects with: encrypted, not verified (the tests check
    /// verification), with the client certificate PostgreSQL asks for.
    fn tls_params(&self) -> String {
        match (&self.tls, self.engine) {
            (None, _) => String::new(),
            (Some(pki), Engine::Postgres) => format!(
                "sslmode=require&sslcert={}&sslkey={}",
                pki.join("client.crt").display(),
                pki.join("client.key").display()
            ),
            (Some(_), _) => "ssl-mode=REQUIRED".to_owned(),
        }
    }

    fn url_of(&self, database: &str, params: &str) -> String {
        let base = match self.engine {
            Engine::Postgres => {
                format!("postgres://postgres@{}:{}/{database}", self.ip(), self.port)
            }
            _ => format!("mysql://root@{}:{}/{database}", self.ip(), self.port),
        };
        if params.is_empty() {
            base
        } else {
            format!("{base}?{params}")
        }
    }

    /// The URL of its `test` database with these query parameters (`sslmode=verify-full&…`).
    pub fn url_with(&self, params: &str) -> String {
        self.url_of("test", params)
    }

    async fn create_test_database(&self) {
        use sqlx::{Connection, Executor};
        match self.engine {
            Engine::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.admin_url())
                    .await
                    .expect("connect");
                c.execute("CREATE DATABASE test").await.expect("create");
            }
            _ => {
                let mut c = sqlx::MySqlConnection::connect(&self.admin_url())
                    .await
                    .expect("connect");
                c.execute("CREATE DATABASE test").await.expect("create");
            }
        }
    }

    /// The URL of its `test` database.
    pub fn url(&self) -> String {
        match self.engine {
            Engine::Postgres => format!("postgres://postgres@{}:{}/test", self.ip(), self.port),
            _ => format!("mysql://root@{}:{}/test", self.ip(), self.port),
        }
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from((self.ip(), self.port))
    }

    /// The address it listens on: its host's, else loopback.
    fn ip(&self) -> std::net::Ipv4Addr {
        self.host
            .as_ref()
            .map_or(std::net::Ipv4Addr::LOCALHOST, |host| host.ip)
    }

    /// `command` run inside its host's namespace, if it has one.
    fn in_host(&self, command: Command) -> Command {
        let Some(host) = &self.host else {
            return command;
        };
        let mut inside = host.command(command.get_program());
        inside.args(command.get_args());
        inside
    }

    /// A hot standby of this PostgreSQL server, streaming from it (`pg_basebackup -R`) through
    /// `link_port` (this server's port, or a proxy's in front of it that a test can cut), on a
    /// port of its own. With `synchronous`, this server waits for it at every commit
    /// (`synchronous_standby_names = '*'`, `synchronous_commit = on`).
    pub async fn start_replica(&self, synchronous: bool, link_port: u16) -> PrivateServer {
        assert_eq!(self.engine, Engine::Postgres, "replicas are for PostgreSQL");
        let dir = tempfile::tempdir().expect("temp dir");
        if is_root() {
            run(
                Command::new("chown").arg("postgres").arg(dir.path()),
                "chown",
            );
        }
        let basebackup = postgres_bin("pg_basebackup").expect("pg_basebackup");
        run(
            as_postgres(&basebackup)
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &link_port.to_string(),
                    "-U",
                    "postgres",
                ])
                .arg("-D")
                .arg(dir.path().join("data"))
                // A physical replication slot, as Patroni keeps for each member.
                .args(["-R", "-X", "stream", "-c", "fast", "-C", "-S", "standby"]),
            "pg_basebackup",
        );
        let mut replica = PrivateServer {
            engine: Engine::Postgres,
            port: free_port(),
            dir,
            child: None,
            tls: None,
            host: None,
        };
        replica.boot().await;
        if synchronous {
            self.admin_execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                .await;
            self.admin_execute("SELECT pg_reload_conf()").await;
        }
        // Streaming before the test goes on.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let streaming: Vec<(i64,)> = super::db::fetch_rows(
                Engine::Postgres,
                &self.admin_url(),
                "SELECT COUNT(*) FROM pg_stat_replication WHERE state = 'streaming'",
                &[],
            )
            .await;
            if streaming.first().is_some_and(|r| r.0 > 0) {
                return replica;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not start streaming"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn admin_execute(&self, statement: &str) {
        use sqlx::{Connection, Executor};
        let mut c = sqlx::PgConnection::connect(&self.admin_url())
            .await
            .expect("connect");
        c.execute(sqlx::AssertSqlSafe(statement.to_owned()))
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    /// Promotes this standby to a primary (`pg_ctl promote`, as Patroni does) and waits until
    /// it takes writes.
    pub async fn promote(&self) {
        let pg_ctl = postgres_bin("pg_ctl").expect("pg_ctl");
        run(
            as_postgres(&pg_ctl)
                .arg("-D")
                .arg(self.data())
                .args(["-w", "promote"]),
            "pg_ctl promote",
        );
    }

    /// Kills the server as a lost machine would: `kill -9` of the postmaster and of every
    /// process it started, no shutdown of any kind.
    pub fn kill9(&mut self) {
        match self.engine {
            Engine::Postgres => {
                let pid = std::fs::read_to_string(self.data().join("postmaster.pid"))
                    .expect("postmaster.pid");
                let pid = pid.lines().next().expect("a pid").trim().to_owned();
                let children = Command::new("pgrep")
                    .args(["-P", &pid])
                    .output()
                    .expect("pgrep");
                let mut pids = vec![pid];
                pids.extend(
                    String::from_utf8_lossy(&children.stdout)
                        .split_whitespace()
                        .map(str::to_owned),
                );
                let _ = Command::new("kill").arg("-9").args(&pids).status();
            }
            _ => self.crash(),
        }
    }

    /// Stops the server the way a crash does (PostgreSQL's immediate shutdown, which skips the
    /// checkpoint and recovers at the next start; `kill -9` for MariaDB), then starts it again
    /// after `down`.
    pub async fn crash_and_restart(&mut self, down: Duration) {
        self.crash();
        tokio::time::sleep(down).await;
        self.boot().await;
    }

    fn crash(&mut self) {
        match self.engine {
            Engine::Postgres => {
                let pg_ctl = postgres_bin("pg_ctl").expect("pg_ctl");
                run(
                    as_postgres(&pg_ctl).arg("-D").arg(self.data()).args([
                        "-m",
                        "immediate",
                        "-w",
                        "stop",
                    ]),
                    "pg_ctl stop",
                );
            }
            _ => {
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if self.engine == Engine::Postgres {
            if let Some(pg_ctl) = postgres_bin("pg_ctl") {
                let _ = as_postgres(&pg_ctl)
                    .arg("-D")
                    .arg(self.data())
                    .args(["-m", "immediate", "-w", "stop"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        } else if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
