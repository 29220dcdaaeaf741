//! The executors able to take work now, by app, with what each offers and carries: read
//! once per pass, and what planning counts offers against.

use std::collections::{HashMap, HashSet};

use crate::store::{
    ANY_HANDLER, ExecutorList, ExecutorLoad, ExecutorRecord, JobRecord, NamespaceId,
};

/// Whether an executor of an app of namespace `app` may run work of namespace `work`.
pub(super) fn may_serve(app: NamespaceId, work: NamespaceId) -> bool {
    app == work || app == NamespaceId::DEFAULT
}

/// The executors able to take work now, by app, with what each offers and carries.
pub(super) struct Fleet {
    pub(super) by_app: HashMap<String, Vec<ExecutorRecord>>,
    /// Handler names by executor id.
    pub(super) handlers: HashMap<String, HashSet<String>>,
    /// Handler names by app, over every executor ever registered (healthy or not).
    pub(super) registered_handlers: HashMap<String, HashSet<String>>,
    pub(super) load: HashMap<String, i64>,
    /// (executor, job) pairs of XXL-JOB executors busy with an attempt of the job: running,
    /// or meant to run one offered in this pass. Such an executor runs one attempt of a job at a time (one
    /// thread per job id, and `/kill` names the job), so it is offered no other until then.
    pub(super) xxl_busy: HashSet<(String, i64)>,
    pub(super) now_ms: i64,
}

impl Fleet {
    pub(super) fn new(list: ExecutorList, loads: Vec<ExecutorLoad>, lease_ms: i64) -> Self {
        let mut by_app: HashMap<String, Vec<ExecutorRecord>> = HashMap::new();
        let mut app_of: HashMap<String, String> = HashMap::new();
        for e in list.executors {
            app_of.insert(e.executor_id.clone(), e.app_name.clone());
            if e.is_healthy(list.now_ms, lease_ms) {
                by_app.entry(e.app_name.clone()).or_default().push(e);
            }
        }
        let mut handlers: HashMap<String, HashSet<String>> = HashMap::new();
        let mut registered_handlers: HashMap<String, HashSet<String>> = HashMap::new();
        for (executor, handler) in list.handlers {
            if let Some(app) = app_of.get(&executor) {
                registered_handlers
                    .entry(app.clone())
                    .or_default()
                    .insert(handler.clone());
            }
            handlers.entry(executor).or_default().insert(handler);
        }
        Self {
            by_app,
            handlers,
            registered_handlers,
            load: loads
                .into_iter()
                .map(|l| (l.executor_id, l.running))
                .collect(),
            xxl_busy: HashSet::new(),
            now_ms: list.now_ms,
        }
    }

    /// Healthy executors of `job`'s app that registered its handler (or every handler: an
    /// XXL-JOB executor, which does not say which it has), and that may take its work: an
    /// app of the job's namespace, or of `default`, whose apps the cluster's executor tokens
    /// register for every namespace. Another namespace's executors never get it.
    pub(super) fn offering(&self, job: &JobRecord) -> Vec<&ExecutorRecord> {
        let handler = job.handler_name.as_str();
        self.by_app
            .get(&job.app_name)
            .map(|all| {
                all.iter()
                    .filter(|e| {
                        may_serve(e.namespace_id, job.namespace_id)
                            && self
                                .handlers
                                .get(&e.executor_id)
                                .is_some_and(|h| h.contains(handler) || h.contains(ANY_HANDLER))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Some healthy executor speaks XXL-JOB's protocol.
    /// The ids of the healthy executors.
    pub(super) fn executor_ids(&self) -> impl Iterator<Item = &str> {
        self.by_app
            .values()
            .flatten()
            .map(|executor| executor.executor_id.as_str())
    }

    pub(super) fn has_xxl(&self) -> bool {
        self.by_app.values().flatten().any(ExecutorRecord::is_xxl)
    }

    /// `executor` may be offered an attempt of `job_id`: any executor but an XXL-JOB one
    /// already busy with the job.
    pub(super) fn free_for(&self, executor: &ExecutorRecord, job_id: i64) -> bool {
        !executor.is_xxl()
            || !self
                .xxl_busy
                .contains(&(executor.executor_id.clone(), job_id))
    }

    pub(super) fn has_room(&self, executor: &ExecutorRecord) -> bool {
        self.load.get(&executor.executor_id).copied().unwrap_or(0) < executor.capacity
    }

    /// Executor `executor_id`, if it is healthy.
    pub(super) fn healthy(&self, executor_id: Option<&str>) -> Option<&ExecutorRecord> {
        let id = executor_id?;
        self.by_app.values().flatten().find(|e| e.executor_id == id)
    }

    /// Why work of `job` that has waited `waited_ms` with no healthy executor to offer it to
    /// should now end, if it should: after the grace when no executor ever registered the
    /// handler or the app's executors are all another namespace's, after ten graces when some
    /// did but none is healthy (an executor restarting during a deploy must not fail runs).
    pub(super) fn nowhere_to_go(
        &self,
        job: &JobRecord,
        waited_ms: i64,
        grace: i64,
    ) -> Option<String> {
        let others_only = self.by_app.get(&job.app_name).is_some_and(|all| {
            !all.is_empty()
                && all
                    .iter()
                    .all(|e| !may_serve(e.namespace_id, job.namespace_id))
        });
        if others_only {
            return (waited_ms > grace).then(|| {
                format!(
                    "app {:?} is another namespace's: its executors take no work of this job's \
                     namespace (after {} s)",
                    job.app_name,
                    waited_ms / 1_000
                )
            });
        }
        let registered = self
            .registered_handlers
            .get(&job.app_name)
            .is_some_and(|h| h.contains(&job.handler_name) || h.contains(ANY_HANDLER));
        let (limit, why) = if registered {
            (grace.saturating_mul(10), "no healthy executor")
        } else {
            (grace, "no executor is registered")
        };
        (waited_ms > limit).then(|| {
            format!(
                "{why} for app {:?} (handler {:?}) after {} s",
                job.app_name,
                job.handler_name,
                waited_ms / 1_000
            )
        })
    }
}

/// Whether an executor may be sent secrets: over TLS, or on this machine's loopback, and
/// speaking Carillon's protocol (XXL-JOB's has no place for them).
pub(super) fn carries_secrets(executor: &ExecutorRecord) -> bool {
    !executor.is_xxl() && safe_address(&executor.address)
}

/// Whether `address` is over TLS or on this machine's loopback.
fn safe_address(address: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(address) else {
        return false;
    };
    if url.scheme() == "https" {
        return true;
    }
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::safe_address;

    #[test]
    fn secrets_go_over_tls_or_to_loopback_only() {
        for safe in [
            "https://exec.example.com:9000",
            "http://127.0.0.1:9100",
            "http://127.8.0.1:9100",
            "http://[::1]:9100",
            "http://localhost:9100",
        ] {
            assert!(safe_address(safe), "{safe}");
        }
        for unsafe_ in [
            "http://10.0.0.7:9100",
            "http://exec.example.com",
            "not a url",
        ] {
            assert!(!safe_address(unsafe_), "{unsafe_}");
        }
    }
}
