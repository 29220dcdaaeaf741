//! A MariaDB Galera cluster of a test's own: three members on loopback (Debian's `galera-4`
//! provider), each a `mariadbd` of its own with its data directory, client port, group
//! communication port, IST and SST (rsync) ports. Members run as the `mysql` user when the
//! test runs as root, since the rsync SST drops root's privileges.
//!
//! Faults: `kill9` (and `restart`, which rejoins by IST), and `isolate`, which cuts a member
//! off the group communication (`gmcast.isolate`): alone it is non-primary and refuses reads
//! and writes, until `rejoin`.
//!
//! Without the binaries the test fails, saying what to install (`.ci/run` installs them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sqlx::{Connection, Executor};
use tokio::time::Instant;

use super::{free_port, is_root};

const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";
const CLUSTER_NAME: &str = "carillon-test";

#[derive(Debug)]
struct Member {
    port: u16,
    gcomm_port: u16,
    ist_port: u16,
    sst_port: u16,
    data: PathBuf,
    child: Option<Child>,
}

#[derive(Debug)]
pub struct GaleraCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    /// More `mariadbd` options for every member.
    extra: Vec<String>,
}

impl GaleraCluster {
    /// Bootstraps a cluster of `size` members, each with an empty database `test`, and waits
    /// until every member is synced in one primary component.
    pub async fn start(size: usize) -> GaleraCluster {
        Self::start_with(size, &[]).await
    }

    /// `start`, with more `mariadbd` options for every member.
    pub async fn start_with(size: usize, extra: &[&str]) -> GaleraCluster {
        assert!(
            Path::new(PROVIDER).exists() && Path::new("/usr/bin/wsrep_sst_rsync").exists(),
            "the Galera tests need Debian's galera-4, mariadb-server and rsync (.ci/run \
             installs them)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let members = (0..size)
            .map(|i| Member {
                port: free_port(),
                gcomm_port: free_port(),
                ist_port: free_port(),
                sst_port: free_port(),
                data: dir.path().join(format!("m{i}")),
                child: None,
            })
            .collect();
        let mut cluster = GaleraCluster {
            dir,
            members,
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
        };
        let user = cluster.user();
        for member in &cluster.members {
            let output = Command::new("mariadb-install-db")
                .arg("--no-defaults")
                .arg(format!("--datadir={}", member.data.display()))
                .args([
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    &format!("--user={user}"),
                ])
                .output()
                .expect("mariadb-install-db");
            assert!(output.status.success(), "mariadb-install-db failed");
        }
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "mysql"])
                .arg(cluster.dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown of the Galera directory");
        }
        cluster.spawn(0, true);
        cluster.wait_synced(0, 1).await;
        for i in 1..size {
            cluster.spawn(i, false);
        }
        for i in 0..size {
            cluster.wait_synced(i, size).await;
        }
        cluster.execute(0, "CREATE DATABASE test").await;
        cluster
    }

    fn user(&self) -> &'static str {
        if is_root() { "mysql" } else { "" }
    }

    /// What the member's InnoDB holds, as `uuid:seqno`: `mariadbd --wsrep-recover`, as the
    /// systemd unit's `galera_recovery` runs before it starts a member that crashed (its
    /// `grastate.dat` then says -1), so that it rejoins by IST instead of a full copy.
    fn recovered_position(&self, i: usize) -> Option<String> {
        let log = self.dir.path().join(format!("m{i}.recover.log"));
        let mut command = Command::new("/usr/sbin/mariadbd");
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.members[i].data.display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!(
                "--socket={}",
                self.dir.path().join(format!("m{i}.recover.sock")).display()
            ))
            .args([
                "--wsrep-sst-method=rsync",
                "--wsrep-cluster-address=gcomm://",
                "--wsrep-recover",
                "--wsrep-on=ON",
                "--binlog-format=ROW",
                "--innodb-autoinc-lock-mode=2",
                "--skip-networking",
            ])
            .arg(format!("--wsrep-provider={PROVIDER}"));
        if !self.user().is_empty() {
            command.arg(format!("--user={}", self.user()));
        }
        let status = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !status.success() {
            return None;
        }
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines()
            .filter_map(|l| l.split("Recovered position: ").nth(1))
            .map(|p| p.trim().to_owned())
            .next_back()
    }

    fn spawn(&mut self, i: usize, bootstrap: bool) {
        self.spawn_at(i, bootstrap, None);
    }

    fn spawn_at(&mut self, i: usize, bootstrap: bool, position: Option<String>) {
        let addresses: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.gcomm_port))
            .collect();
        let user = self.user();
        let extra = self.extra.clone();
        let log_path = self.dir.path().join(format!("m{i}.log"));
        let member = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("log");
        // Short timeouts so a lost member is noticed in seconds, not the default 5-15 s.
        let provider_options = format!(
            "gmcast.listen_addr=tcp://127.0.0.1:{gcomm};ist.recv_addr=127.0.0.1:{ist};\
             evs.suspect_timeout=PT2S;evs.inactive_timeout=PT4S;evs.keepalive_period=PT0.5S;\
             evs.inactive_check_period=PT0.5S;evs.install_timeout=PT4S",
            gcomm = member.gcomm_port,
            ist = member.ist_port,
        );
        let mut command = Command::new("/usr/sbin/mariadbd");
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", member.data.display()))
            .arg(format!("--port={}", member.port))
            .arg(format!(
                "--socket={}",
                self.dir.path().join(format!("m{i}.sock")).display()
            ))
            .args([
                "--bind-address=127.0.0.1",
                "--max-connections=300",
                "--innodb-flush-log-at-trx-commit=2",
                "--binlog-format=ROW",
                "--default-storage-engine=InnoDB",
                "--innodb-autoinc-lock-mode=2",
                "--wsrep-on=ON",
            ])
            .arg(format!("--wsrep-provider={PROVIDER}"))
            .arg(format!("--wsrep-cluster-name={CLUSTER_NAME}"))
            .arg(format!(
                "--wsrep-cluster-address=gcomm://{}",
                addresses.join(",")
            ))
            .arg(format!(
                "--wsrep-node-address=127.0.0.1:{}",
                member.gcomm_port
            ))
            .arg(format!("--wsrep-node-name=m{i}"))
            .arg(format!("--wsrep-provider-options={provider_options}"))
            .arg("--wsrep-sst-method=rsync")
            .arg(format!(
                "--wsrep-sst-receive-address=127.0.0.1:{}",
                member.sst_port
            ));
        if !user.is_empty() {
            command.arg(format!("--user={user}"));
        }
        if bootstrap {
            command.arg("--wsrep-new-cluster");
        }
        command.args(&extra);
        if let Some(position) = position {
            command.arg(format!("--wsrep-start-position={position}"));
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("mariadbd");
        member.child = Some(child);
    }

    fn admin_url(&self, i: usize) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.members[i].port)
    }

    /// The URL of the database `test` on member `i`.
    pub fn url(&self, i: usize) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.members[i].port)
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("m{i}.log"))).unwrap_or_default()
    }

    /// A status variable of member `i`, or `None` when it does not answer.
    pub async fn status(&self, i: usize, name: &str) -> Option<String> {
        let mut c = sqlx::MySqlConnection::connect(&self.admin_url(i))
            .await
            .ok()?;
        let row: Option<(String, String)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("SHOW STATUS LIKE '{name}'")))
                .fetch_optional(&mut c)
                .await
                .ok()?;
        row.map(|(_, value)| value)
    }

    /// Waits until member `i` is synced in a primary component of `size` members.
    pub async fn wait_synced(&self, i: usize, size: usize) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let ready = self.status(i, "wsrep_ready").await.as_deref() == Some("ON");
            let members = self.status(i, "wsrep_cluster_size").await;
            let synced = self.status(i, "wsrep_local_state_comment").await;
            if ready
                && members.as_deref() == Some(size.to_string().as_str())
                && synced.as_deref() == Some("Synced")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Galera member m{i} did not sync in a cluster of {size} (ready {ready}, size \
                 {members:?}, state {synced:?}); its log:\n{}",
                self.log(i)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Runs `statement` on member `i`.
    pub async fn execute(&self, i: usize, statement: &str) {
        let mut c = sqlx::MySqlConnection::connect(&self.admin_url(i))
            .await
            .expect("connect to a Galera member");
        c.execute(sqlx::AssertSqlSafe(statement.to_owned()))
            .await
            .unwrap_or_else(|e| panic!("{statement} on m{i}: {e}"));
    }

    /// `kill -9` of member `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again (after `kill9`); it rejoins and catches up. Returns how: `IST`
    /// (the writes it missed, from a member's cache) or `SST` (a whole copy, during which the
    /// donor's rsync blocks its writes).
    pub async fn restart(&mut self, i: usize) -> &'static str {
        let before = self.log(i).len();
        let position = self.recovered_position(i);
        self.spawn_at(i, false, position);
        let size = self.members.len();
        self.wait_synced(i, size).await;
        self.transfer_since(i, before)
    }

    /// How member `i` caught up, from its log past `before`.
    fn transfer_since(&self, i: usize, before: usize) -> &'static str {
        let log = self.log(i);
        let since = log.get(before..).unwrap_or("");
        if since.contains("Prepared SST request") {
            "SST"
        } else if since.contains("Prepared IST receiver") {
            "IST"
        } else {
            "nothing to transfer"
        }
    }

    /// Cuts member `i` off the others' group communication: it becomes a non-primary
    /// component of one, which refuses reads and writes.
    pub async fn isolate(&self, i: usize) {
        self.execute(
            i,
            "SET GLOBAL wsrep_provider_options = 'gmcast.isolate = 1'",
        )
        .await;
    }

    /// Ends `isolate`: it reconnects and catches up; returns how (see `restart`).
    pub async fn rejoin(&self, i: usize) -> &'static str {
        let before = self.log(i).len();
        self.execute(
            i,
            "SET GLOBAL wsrep_provider_options = 'gmcast.isolate = 0'",
        )
        .await;
        self.wait_synced(i, self.members.len()).await;
        self.transfer_since(i, before)
    }
}

impl Drop for GaleraCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill9(i);
        }
    }
}
