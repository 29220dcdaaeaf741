//! The Debian package (`deploy/debian/build.sh`) as an operator meets it, in a clean Debian
//! root made by `debootstrap --variant=minbase` (`.ci/run` makes it once; the test copies it):
//! `dpkg -i` makes the `carillon` user, its state directory and the settings file; the unit's
//! own commands (`ExecStartPre`, `ExecStart`, with its `User`, `Environment` and
//! `EnvironmentFile`) run in the root as that user against PostgreSQL, and a job fires on an
//! executor; an operator's edit of the settings file and the node's generated keys survive an
//! upgrade over an earlier package, and the node fires on after it; removing keeps the settings
//! and the data, purging removes only the settings. The unit's hardening is scored by
//! `systemd-analyze security` (systemd itself cannot run here).
//!
//! The earlier package is this build's binary under an earlier version: what is upgraded is
//! the package (its files, conffile and scripts); schema upgrades across releases are tested
//! apart.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::support;
use support::db::TestDb;
use support::executor::{EXECUTOR_TOKEN, Executor};
use support::node::{NodeProcess, NodeSpec, TOKEN};
use support::{text, wait_for};

for_engine!(
    postgres,
    Postgres,
    ignore = "needs root and a Debian root made by debootstrap (.ci/run makes it)",
    [the_package_installs_runs_upgrades_and_removes]
);

/// Where `.ci/run` leaves the Debian root; `CARILLON_TEST_DEBIAN_ROOT` names another.
fn base_root() -> PathBuf {
    match std::env::var_os("CARILLON_TEST_DEBIAN_ROOT") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap())
            .join(".cache/carillon-ci/bookworm-minbase"),
    }
}

const UNIT: &str = "/lib/systemd/system/carillon.service";
const SETTINGS: &str = "/etc/carillon/carillon.toml";
const STATE: &str = "/var/lib/carillon";
const PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

async fn the_package_installs_runs_upgrades_and_removes(db: TestDb) {
    let base = base_root();
    assert!(
        base.join("usr/bin/dpkg").is_file(),
        "no Debian root at {}: .ci/run makes it with `debootstrap --variant=minbase bookworm`",
        base.display()
    );
    assert!(support::is_root(), "dpkg and chroot need root");
    let scratch = tempfile::tempdir().unwrap();
    let root = Root::copy_of(&base, &scratch.path().join("root"));
    let crate_version = env!("CARGO_PKG_VERSION");
    let earlier = build_package(
        &scratch.path().join("earlier"),
        Some(&format!("{crate_version}+0.gearlier")),
    );
    let later = build_package(&scratch.path().join("later"), None);

    // Installed: the binary, a system user without a shell, its state directory, the settings
    // readable by it and not writable, the unit, the man page and the completions.
    root.install(&earlier);
    let user = root.ok(&["getent", "passwd", "carillon"]);
    let fields: Vec<&str> = user.trim().split(':').collect();
    assert_eq!(fields[5], STATE, "{user}");
    assert_eq!(fields[6], "/usr/sbin/nologin", "{user}");
    let uid: u32 = fields[2].parse().unwrap();
    assert!(uid < 1000, "a system user: {user}");
    let state = std::fs::metadata(root.path(STATE)).unwrap();
    assert_eq!((state.uid(), state.mode() & 0o777), (uid, 0o750));
    let settings = std::fs::metadata(root.path(SETTINGS)).unwrap();
    assert_eq!((settings.uid(), settings.mode() & 0o777), (0, 0o640));
    for file in [
        "/usr/bin/carillon",
        UNIT,
        "/usr/share/man/man1/carillon.1.gz",
        "/usr/share/man/man1/carillon-server.1.gz",
        "/usr/share/bash-completion/completions/carillon",
        "/usr/share/zsh/vendor-completions/_carillon",
        "/usr/share/fish/vendor_completions.d/carillon.fish",
    ] {
        assert!(root.path(file).is_file(), "{file} installed");
    }
    assert_eq!(
        root.ok(&["dpkg-query", "-W", "-f", "${Conffiles}", "carillon"])
            .split_whitespace()
            .next(),
        Some(SETTINGS),
        "the settings file is a conffile"
    );
    exposure_is_low(&root);

    // The operator names the database and the tokens (the unit reads them from its
    // EnvironmentFile) and edits a setting; the node generates its dispatch key.
    let mut environment = vec![
        format!("CARILLON_DATABASE_URL={}", db.url),
        // One address before and after the upgrade, as a packaged node keeps: the executor
        // reaches it there again.
        format!("CARILLON_LISTEN=127.0.0.1:{}", support::free_port()),
        format!("CARILLON_ADMIN_TOKEN={TOKEN}"),
        format!("CARILLON_EXECUTOR_TOKEN={EXECUTOR_TOKEN}"),
        // The test's executor is on this machine's loopback, which a server's default refuses.
        "CARILLON_EGRESS_ALLOWED_NETWORKS=public,loopback".to_owned(),
    ];
    environment.extend(
        support::executor::node_env()
            .into_iter()
            .filter(|(key, _)| key.ends_with("_MS"))
            .map(|(key, value)| format!("{key}={value}")),
    );
    std::fs::write(
        root.path("/etc/default/carillon"),
        environment.join("\n") + "\n",
    )
    .unwrap();
    let unit = Unit::read(&root);
    let edited = std::fs::read_to_string(root.path(SETTINGS))
        .unwrap()
        .replace("# e.g. node_id = \"node-a\"", "node_id = \"packaged-node\"");
    assert!(
        edited.contains("node_id = \"packaged-node\""),
        "the example names node_id"
    );
    std::fs::write(root.path(SETTINGS), &edited).unwrap();

    let mut node = unit.start(&root, &db, scratch.path(), "first").await;
    let (status, cluster) = node.call(Method::GET, "/api/v1/cluster", None).await;
    assert_eq!(status, 200, "{cluster}");
    assert_eq!(
        cluster["this_node"]["node_id"], "packaged-node",
        "{cluster}"
    );
    let dispatch_key = std::fs::read_to_string(root.path(&format!("{STATE}/dispatch-secret")))
        .expect("the node keeps its generated dispatch key in its state directory");
    let key_owner = std::fs::metadata(root.path(&format!("{STATE}/dispatch-secret"))).unwrap();
    assert_eq!(key_owner.uid(), uid, "written by the node as carillon");
    let executor = Executor::start_with_secret(&node, "py", "py-1", 1, &[], dispatch_key.trim());
    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "packaged", "app": "py", "handler": "echo",
                        "schedule": {"every": "1s"}, "start": true})),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let job = job["id"].as_i64().unwrap();
    let first = succeeded_after(&node, job, 0).await;
    assert!(node.terminate().await.success(), "{}", node.log_text());

    // Upgraded: the operator's edit and the generated keys stay, and the node fires on.
    root.install(&later);
    let installed = root.ok(&["dpkg-query", "-W", "-f", "${Version}", "carillon"]);
    assert!(
        later.to_string_lossy().contains(&format!("_{installed}_")),
        "{installed}"
    );
    assert_eq!(
        std::fs::read_to_string(root.path(SETTINGS)).unwrap(),
        edited
    );
    assert_eq!(
        std::fs::read_to_string(root.path(&format!("{STATE}/dispatch-secret"))).unwrap(),
        dispatch_key
    );
    let mut node = unit.start(&root, &db, scratch.path(), "upgraded").await;
    let (_, cluster) = node.call(Method::GET, "/api/v1/cluster", None).await;
    assert_eq!(
        cluster["this_node"]["node_id"], "packaged-node",
        "{cluster}"
    );
    succeeded_after(&node, job, first).await;
    assert!(node.terminate().await.success(), "{}", node.log_text());
    drop(executor);

    // Removed: the program goes; the settings, the data and the user stay.
    root.ok(&["dpkg", "--remove", "carillon"]);
    assert!(!root.path("/usr/bin/carillon").exists());
    assert_eq!(
        std::fs::read_to_string(root.path(SETTINGS)).unwrap(),
        edited
    );
    assert!(root.path(&format!("{STATE}/dispatch-secret")).is_file());
    root.ok(&["getent", "passwd", "carillon"]);
    // Purged: the settings go; the node's data and its database are the operator's.
    root.ok(&["dpkg", "--purge", "carillon"]);
    assert!(!root.path(SETTINGS).exists());
    assert!(root.path(&format!("{STATE}/dispatch-secret")).is_file());
    let jobs = db
        .fetch_pairs("SELECT COUNT(*), CAST(0 AS BIGINT) FROM jobs", &[])
        .await;
    assert_eq!(jobs[0].0, 1, "the job stays in the database");
}

/// Builds the package of this test's binary into `out`, under `version` or build.sh's own.
fn build_package(out: &Path, version: Option<&str>) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/debian/build.sh");
    let mut command = Command::new("bash");
    command
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_carillon"))
        .arg(out)
        // A debug binary is large; the package's compression is not what is tested.
        .env("DPKG_DEB_COMPRESSOR_TYPE", "gzip")
        .env("DPKG_DEB_COMPRESSOR_LEVEL", "1")
        .env_remove("CARILLON_DEB_VERSION");
    if let Some(version) = version {
        command.env("CARILLON_DEB_VERSION", version);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "build.sh: {}",
        text(&output.stderr)
    );
    let package = PathBuf::from(text(&output.stdout).trim());
    assert!(package.is_file(), "{}", package.display());
    package
}

/// `systemd-analyze security`'s score of the installed unit (0 is best, 10 worst).
fn exposure_is_low(root: &Root) {
    let output = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(format!("--root={}", root.dir.display()))
        .arg("carillon.service")
        .output()
        .unwrap();
    let said = text(&output.stdout);
    let score: f64 = said
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for carillon.service:")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level: {said}{}", text(&output.stderr)));
    assert!(score <= 2.0, "exposure {score}:\n{said}");
}

/// The runs of `job` that succeeded, waiting until one scheduled after `after_ms` has; returns
/// that one's instant.
async fn succeeded_after(node: &NodeProcess, job: i64, after_ms: i64) -> i64 {
    wait_for(Duration::from_secs(30), "a run to succeed", || async {
        let (_, body) = node
            .call(
                Method::GET,
                &format!("/api/v1/runs?job_id={job}&limit=100"),
                None,
            )
            .await;
        body["runs"].as_array()?.iter().find_map(|run| {
            let at = chrono::DateTime::parse_from_rfc3339(run["scheduled_at"].as_str()?).ok()?;
            let at = at.timestamp_millis();
            (run["state"] == "succeeded" && at > after_ms).then_some(at)
        })
    })
    .await
}

/// A copy of the Debian root, commands run inside it.
struct Root {
    dir: PathBuf,
}

impl Root {
    fn copy_of(base: &Path, dir: &Path) -> Self {
        let status = Command::new("cp")
            .arg("-a")
            .arg(base)
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "cp -a {}", base.display());
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// `absolute` inside the root, seen from here.
    fn path(&self, absolute: &str) -> PathBuf {
        self.dir.join(absolute.trim_start_matches('/'))
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("chroot")
            .arg(&self.dir)
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs `args` in the root; its standard output, once it succeeded.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "{args:?}: {}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    /// `dpkg -i` of a package built here.
    fn install(&self, package: &Path) {
        let name = package.file_name().unwrap().to_str().unwrap();
        std::fs::copy(package, self.path(&format!("/tmp/{name}"))).unwrap();
        self.ok(&["dpkg", "-i", &format!("/tmp/{name}")]);
    }
}

/// What the installed unit says about how the node runs.
struct Unit {
    user: String,
    group: String,
    environment: Vec<String>,
    environment_file: String,
    start_pre: Vec<String>,
    start: Vec<String>,
}

impl Unit {
    fn read(root: &Root) -> Self {
        let text = std::fs::read_to_string(root.path(UNIT)).unwrap();
        let values = |key: &str| -> Vec<String> {
            text.lines()
                .filter_map(|line| line.strip_prefix(&format!("{key}=")))
                .map(str::to_owned)
                .collect()
        };
        let one = |key: &str| -> String {
            let all = values(key);
            assert_eq!(all.len(), 1, "one {key}= in the unit");
            all[0].clone()
        };
        let words = |line: String| line.split_whitespace().map(str::to_owned).collect();
        Self {
            user: one("User"),
            group: one("Group"),
            environment: values("Environment"),
            environment_file: one("EnvironmentFile"),
            start_pre: words(one("ExecStartPre")),
            start: words(one("ExecStart")),
        }
    }

    /// The environment systemd gives the service: a clean one with the user's `HOME`, the
    /// unit's `Environment=` and its `EnvironmentFile=` (optional when it starts with `-`).
    fn env(&self, root: &Root) -> Vec<String> {
        let home = root.ok(&["getent", "passwd", &self.user]);
        let home = home.trim().split(':').nth(5).unwrap().to_owned();
        let mut env = vec![format!("PATH={PATH}"), format!("HOME={home}")];
        env.extend(self.environment.iter().cloned());
        let (optional, file) = match self.environment_file.strip_prefix('-') {
            Some(file) => (true, file),
            None => (false, self.environment_file.as_str()),
        };
        match std::fs::read_to_string(root.path(file)) {
            Ok(text) => env.extend(
                text.lines()
                    .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                    .map(str::to_owned),
            ),
            Err(e) => assert!(optional, "{file}: {e}"),
        }
        env
    }

    /// Runs `command` in the root as the unit's user with its environment.
    fn command(&self, root: &Root, command: &[String]) -> Command {
        let mut run = Command::new("chroot");
        run.arg(format!("--userspec={}:{}", self.user, self.group))
            .arg(&root.dir)
            .arg("env")
            .arg("-i")
            .args(self.env(root))
            .args(command)
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null());
        run
    }

    /// `ExecStartPre`, then `ExecStart`, as systemd would; the node, once it listens.
    async fn start(&self, root: &Root, db: &TestDb, scratch: &Path, name: &str) -> NodeProcess {
        let checked = self.command(root, &self.start_pre).output().unwrap();
        assert!(
            checked.status.success(),
            "ExecStartPre: {}{}",
            text(&checked.stdout),
            text(&checked.stderr)
        );
        let log = scratch.join(format!("{name}.log"));
        let child = self
            .command(root, &self.start)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let spec = NodeSpec::fast("packaged-node", &db.url, scratch);
        NodeProcess::adopt(spec, child, log).await
    }
}
