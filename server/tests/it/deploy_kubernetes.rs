//! The Kubernetes manifests (`deploy/kubernetes/`) as an operator uses them: each overlay is
//! rendered by `kubectl kustomize`, validated by `kubernetes-validate` against two Kubernetes
//! versions, its references checked (every Secret key, ConfigMap, selector and port it names
//! exists), and its pods' commands run here: the migration Job's container, then a node's,
//! with the environment, the configuration file and the secrets the manifests give them, on a
//! real database. Only the listening port differs (port 0), and the secrets' placeholders are
//! replaced, as the operator must: the node refuses them.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::support;
use support::db::TestDb;
use support::node::{spawn_carillon, wait_for_listen_address};

for_engine!(
    postgres,
    Postgres,
    ignore = "needs kubectl and kubernetes-validate (pip install kubernetes-validate==1.37.0; .ci/run installs it)",
    [the_postgres_overlay_validates_and_its_pods_run]
);
for_engine!(
    mysql,
    Mysql,
    ignore = "needs kubectl and kubernetes-validate (pip install kubernetes-validate==1.37.0; .ci/run installs it)",
    [the_mysql_overlay_validates_and_its_pods_run]
);

/// The Kubernetes versions the manifests must be valid for: the oldest still served by the
/// big providers, and the newest the validator knows.
const VERSIONS: [&str; 2] = ["1.31.0", "1.37.0"];
/// Kinds of CRDs the validator has no schema for; their references are checked below.
const CUSTOM_KINDS: [&str; 1] = ["ServiceMonitor"];

async fn the_postgres_overlay_validates_and_its_pods_run(db: TestDb) {
    overlay_works("postgres", &db).await;
}

async fn the_mysql_overlay_validates_and_its_pods_run(db: TestDb) {
    overlay_works("mysql", &db).await;
}

async fn overlay_works(overlay: &str, db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let rendered = dir.path().join(format!("{overlay}.yaml"));
    let docs = render(overlay, &rendered);
    validate(&rendered);
    let manifests = Manifests::of(&docs);
    manifests.check_references();
    manifests.run_pods(db, dir.path()).await;
}

fn overlay_dir(overlay: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kubernetes/overlays")
        .join(overlay)
}

/// `kubectl kustomize` of the overlay, written to `out`; its documents as JSON.
fn render(overlay: &str, out: &Path) -> Vec<Value> {
    let rendered = Command::new("kubectl")
        .arg("kustomize")
        .arg(overlay_dir(overlay))
        .output()
        .unwrap_or_else(|e| panic!("kubectl (for kubectl kustomize) did not run: {e}"));
    assert!(
        rendered.status.success(),
        "kubectl kustomize {overlay}: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    std::fs::write(out, &rendered.stdout).unwrap();
    let text = String::from_utf8(rendered.stdout).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).unwrap())
        .filter(|document| !document.is_null())
        .collect()
}

/// `kubernetes-validate --strict` for each version: no error, and no resource without a
/// schema but the CRDs'.
fn validate(rendered: &Path) {
    for version in VERSIONS {
        let checked = Command::new("kubernetes-validate")
            .args(["--strict", "-k", version])
            .arg(rendered)
            .output()
            .unwrap_or_else(|e| panic!("kubernetes-validate did not run: {e}"));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        assert!(checked.status.success(), "Kubernetes {version}:\n{said}");
        for line in said.lines() {
            let custom = CUSTOM_KINDS
                .iter()
                .any(|kind| line.contains(&format!("kind {kind} ")));
            assert!(
                line.starts_with("INFO") || (line.starts_with("WARN") && custom),
                "Kubernetes {version}: {line}"
            );
        }
        assert!(said.contains("statefulset/carillon"), "{said}");
    }
}

/// The rendered documents, by kind and name.
struct Manifests {
    by_kind: BTreeMap<(String, String), Value>,
}

impl Manifests {
    fn of(docs: &[Value]) -> Self {
        let by_kind = docs
            .iter()
            .map(|d| {
                let kind = d["kind"].as_str().unwrap().to_owned();
                let name = d["metadata"]["name"].as_str().unwrap().to_owned();
                ((kind, name), d.clone())
            })
            .collect();
        Manifests { by_kind }
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.by_kind
            .iter()
            .filter(|((k, _), _)| k == kind)
            .map(|(_, d)| d)
            .collect()
    }

    fn one(&self, kind: &str) -> &Value {
        let all = self.all(kind);
        assert_eq!(all.len(), 1, "one {kind}");
        all[0]
    }

    fn named(&self, kind: &str, name: &str) -> &Value {
        self.by_kind
            .get(&(kind.to_owned(), name.to_owned()))
            .unwrap_or_else(|| panic!("no {kind} {name} is rendered"))
    }

    fn secret_value(&self, name: &str, key: &str) -> String {
        let secret = self.named("Secret", name);
        secret["stringData"][key]
            .as_str()
            .unwrap_or_else(|| panic!("Secret {name} has no key {key}: {secret}"))
            .to_owned()
    }

    fn node_pod(&self) -> &Value {
        &self.one("StatefulSet")["spec"]["template"]
    }

    fn job_pod(&self) -> &Value {
        &self.one("Job")["spec"]["template"]
    }

    /// Every name the manifests refer to is rendered, and every selector selects the pods.
    fn check_references(&self) {
        for pod in [self.node_pod(), self.job_pod()] {
            for container in pod["spec"]["containers"].as_array().unwrap() {
                for var in container["env"].as_array().unwrap() {
                    if let Some(secret) = var["valueFrom"]["secretKeyRef"].as_object() {
                        self.secret_value(
                            secret["name"].as_str().unwrap(),
                            secret["key"].as_str().unwrap(),
                        );
                    }
                }
            }
            for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
                if let Some(name) = volume["configMap"]["name"].as_str() {
                    self.named("ConfigMap", name);
                }
            }
            let account = pod["spec"]["serviceAccountName"].as_str().unwrap();
            self.named("ServiceAccount", account);
        }
        let set = self.one("StatefulSet");
        let pod_labels = &self.node_pod()["metadata"]["labels"];
        let selects = |selector: &Value| {
            selector
                .as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| &pod_labels[k] == v)
        };
        assert!(selects(&set["spec"]["selector"]["matchLabels"]), "{set}");
        self.named("Service", set["spec"]["serviceName"].as_str().unwrap());
        for service in self.all("Service") {
            assert!(selects(&service["spec"]["selector"]), "{service}");
        }
        let budget = self.one("PodDisruptionBudget");
        assert!(
            selects(&budget["spec"]["selector"]["matchLabels"]),
            "{budget}"
        );
        // The ServiceMonitor scrapes one Service (each node once), on a port it has, with a
        // token the Secret holds.
        let monitor = self.one("ServiceMonitor");
        let wanted = &monitor["spec"]["selector"]["matchLabels"];
        let scraped: Vec<&Value> = self
            .all("Service")
            .into_iter()
            .filter(|s| {
                wanted
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &s["metadata"]["labels"][k] == v)
            })
            .collect();
        assert_eq!(scraped.len(), 1, "the ServiceMonitor scrapes: {scraped:?}");
        for endpoint in monitor["spec"]["endpoints"].as_array().unwrap() {
            let port = &endpoint["port"];
            assert!(
                scraped[0]["spec"]["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| &p["name"] == port),
                "{endpoint}"
            );
            let credentials = &endpoint["authorization"]["credentials"];
            self.secret_value(
                credentials["name"].as_str().unwrap(),
                credentials["key"].as_str().unwrap(),
            );
        }
    }

    /// Runs the Job's container, then a node's, as the manifests say, on `db`.
    async fn run_pods(&self, db: &TestDb, scratch: &Path) {
        let secrets = Secrets::of(self, db);
        let node = self.node_pod();
        let mounts = self.mounts(node, scratch);

        // As shipped, the placeholders are refused, naming the setting.
        let refused = self
            .start(node, &secrets.shipped, &mounts, scratch, "placeholders")
            .await_exit()
            .await;
        assert!(
            refused.contains("placeholder"),
            "the node took the example's placeholder tokens: {refused}"
        );

        // A node before the migration Job: it does not migrate (its settings say so) and
        // stops, to be restarted until the Job is done.
        let early = self
            .start(node, &secrets.replaced, &mounts, scratch, "early")
            .await_exit()
            .await;
        assert!(
            early.contains("run `carillon migrate`") && early.contains("none (no Carillon schema)"),
            "the node did not say to migrate: {early}"
        );

        let job = self.job_pod();
        let migrated = self
            .start(job, &secrets.replaced, &mounts, scratch, "migrate")
            .await_exit_with_success()
            .await;
        assert!(!migrated.contains("ERROR"), "{migrated}");

        let mut started = self.start(node, &secrets.replaced, &mounts, scratch, "node");
        let addr = wait_for_listen_address(&mut started.child, &started.log).await;
        let container = &node["spec"]["containers"][0];
        let client = carillon_tls::http_client().unwrap();
        let url = |path: &Value| format!("http://{addr}{}", path.as_str().unwrap());
        let ready = url(&container["readinessProbe"]["httpGet"]["path"]);
        support::wait_for(Duration::from_secs(30), "the node to be ready", || async {
            let answer = client.get(&ready).send().await.ok()?;
            answer.status().is_success().then_some(())
        })
        .await;
        for probe in ["livenessProbe", "startupProbe"] {
            let path = url(&container[probe]["httpGet"]["path"]);
            let answer = client.get(&path).send().await.unwrap();
            assert!(answer.status().is_success(), "{probe}: {}", answer.status());
        }
        let endpoint = &self.one("ServiceMonitor")["spec"]["endpoints"][0];
        let credentials = &endpoint["authorization"]["credentials"];
        let token = &secrets.replaced[&(
            credentials["name"].as_str().unwrap().to_owned(),
            credentials["key"].as_str().unwrap().to_owned(),
        )];
        let scraped = client
            .get(url(&endpoint["path"]))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert!(scraped.status().is_success(), "{}", scraped.status());
        let text = scraped.text().await.unwrap();
        assert!(text.contains("carillon_node_member 1"), "{text}");
        let log = std::fs::read_to_string(&started.log).unwrap();
        assert!(
            log.lines().any(|l| l.starts_with('{')),
            "the node logs JSON as its settings say: {log}"
        );
    }

    /// Where a pod's volumes are mounted, mapped to directories under `scratch` (a ConfigMap's
    /// files written into its own).
    fn mounts(&self, pod: &Value, scratch: &Path) -> Vec<(String, PathBuf)> {
        let mut mounts = Vec::new();
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        for mount in pod["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
        {
            let name = mount["name"].as_str().unwrap();
            let dir = scratch.join(format!("volume-{name}"));
            std::fs::create_dir_all(&dir).unwrap();
            let volume = volumes.iter().find(|v| v["name"] == name).unwrap();
            if let Some(map) = volume["configMap"]["name"].as_str() {
                let data = &self.named("ConfigMap", map)["data"];
                for (file, text) in data.as_object().unwrap() {
                    std::fs::write(dir.join(file), text.as_str().unwrap()).unwrap();
                }
            }
            mounts.push((mount["mountPath"].as_str().unwrap().to_owned(), dir));
        }
        mounts
    }

    /// Starts a pod's first container: its args, and its environment as the kubelet makes it
    /// (fields of the pod, Secret keys, `$(VAR)` references), with paths under its mounts
    /// moved to their directories here and the listening port left to the system.
    fn start(
        &self,
        pod: &Value,
        secrets: &BTreeMap<(String, String), String>,
        mounts: &[(String, PathBuf)],
        scratch: &Path,
        name: &str,
    ) -> Started {
        let container = &pod["spec"]["containers"][0];
        let mut env: Vec<(String, String)> = Vec::new();
        for var in container["env"].as_array().unwrap() {
            let key = var["name"].as_str().unwrap().to_owned();
            let value = if let Some(value) = var["value"].as_str() {
                expand(value, &env)
            } else if let Some(field) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                match field {
                    "metadata.name" => "carillon-0".to_owned(),
                    "status.podIP" => "127.0.0.1".to_owned(),
                    other => panic!("a field this test does not give: {other}"),
                }
            } else {
                let secret = &var["valueFrom"]["secretKeyRef"];
                secrets[&(
                    secret["name"].as_str().unwrap().to_owned(),
                    secret["key"].as_str().unwrap().to_owned(),
                )]
                    .clone()
            };
            let value = mounts
                .iter()
                .find_map(|(at, dir)| {
                    value
                        .strip_prefix(at.as_str())
                        .map(|rest| format!("{}{rest}", dir.display()))
                })
                .unwrap_or(value);
            env.push((key, value));
        }
        env.push(("CARILLON_LISTEN".to_owned(), "127.0.0.1:0".to_owned()));
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let log = scratch.join(format!("{name}.log"));
        let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let child = spawn_carillon(&args, &env, scratch, &log);
        Started { child, log }
    }
}

/// `$(NAME)` replaced by the value of an earlier variable, as the kubelet does.
fn expand(value: &str, earlier: &[(String, String)]) -> String {
    earlier.iter().fold(value.to_owned(), |value, (k, v)| {
        value.replace(&format!("$({k})"), v)
    })
}

/// The Secret's values as shipped, and as an operator fills them in.
struct Secrets {
    shipped: BTreeMap<(String, String), String>,
    replaced: BTreeMap<(String, String), String>,
}

impl Secrets {
    fn of(manifests: &Manifests, db: &TestDb) -> Self {
        let mut shipped = BTreeMap::new();
        let mut replaced = BTreeMap::new();
        for secret in manifests.all("Secret") {
            let name = secret["metadata"]["name"].as_str().unwrap();
            for (key, value) in secret["stringData"].as_object().unwrap() {
                let value = value.as_str().unwrap();
                let id = (name.to_owned(), key.clone());
                if key == "database-url" {
                    // The overlay's points at its kind of server.
                    let scheme = value.split("://").next().unwrap();
                    assert!(db.url.starts_with(scheme), "{value} against {}", db.url);
                    shipped.insert(id.clone(), db.url.clone());
                    replaced.insert(id, db.url.clone());
                    continue;
                }
                assert!(
                    value.contains("replace-me"),
                    "{key}: a real secret is shipped"
                );
                shipped.insert(id.clone(), value.to_owned());
                let own = format!(
                    "{key}-{}",
                    carillon_server::data_dir::random_hex(16).unwrap()
                );
                replaced.insert(id, own);
            }
        }
        Secrets { shipped, replaced }
    }
}

/// A pod's container running here, and its log.
struct Started {
    child: std::process::Child,
    log: PathBuf,
}

impl Started {
    /// Waits for it to stop with a failure; what it logged.
    async fn await_exit(mut self) -> String {
        let status = self.wait().await;
        let said = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(!status.success(), "it stopped with success: {said}");
        said
    }

    /// Waits for it to stop with success; what it logged.
    async fn await_exit_with_success(mut self) -> String {
        let status = self.wait().await;
        let said = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(status.success(), "it failed ({status}): {said}");
        said
    }

    async fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "it kept running: {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
