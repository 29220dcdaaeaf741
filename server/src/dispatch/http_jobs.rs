//! The calls of HTTP jobs (`jobs::http_call`), made by the node that owns the job's partition
//! on a client of their own, guarded by the node's egress policy (`crate::egress`): redirects
//! are not followed, and every connection's addresses are checked, so a job cannot be pointed
//! at the node's own machine or network (XXL-JOB's CVE-2025-7787).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use carillon_protocol::{DirectResult, Dispatch, Outcome};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::client::{Delivery, NotTaken};
use crate::egress::Egress;
use crate::jobs::http_call::{Encoding, HeaderValue, HttpCall, TemplateValues, render};
use crate::secret::Secret;
use crate::store::{NamespaceId, SecretRecord};

/// The most of an answer's body kept as the run's output.
const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// The `[http_jobs]` settings. What they may reach is `[egress]`'s.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpJobsConfig {
    /// Read into `egress.allowed_networks` (where it now belongs), with a notice at start.
    pub allowed_networks: Option<Vec<String>>,
    /// Read into `egress.allowed_hosts`, with a notice at start.
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a call of a job without `timeout_ms` may take.
    pub timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Most calls in flight on a node; more wait for a slot.
    pub max_in_flight: usize,
    /// A call not answered within this long is recorded as running, and its delivery pass goes
    /// on; its answer ends the attempt when it comes.
    pub answer_wait_ms: u64,
}

impl Default for HttpJobsConfig {
    fn default() -> Self {
        Self {
            allowed_networks: None,
            allowed_hosts: None,
            timeout_ms: 30_000,
            connect_timeout_ms: 2_000,
            max_in_flight: 512,
            answer_wait_ms: 250,
        }
    }
}

impl HttpJobsConfig {
    /// What is wrong with the settings, naming the setting.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.timeout_ms == 0 || self.max_in_flight == 0 {
            return Err((
                "http_jobs",
                "timeout_ms and max_in_flight must be above 0".to_owned(),
            ));
        }
        Ok(())
    }
}

/// What an HTTP job's call needs beside the run: the call and its secrets, opened.
#[derive(Debug, Clone)]
pub struct HttpOffer {
    pub(super) call: HttpCall,
    /// The secrets its headers name, by name; a name missing here fails the call.
    secrets: HashMap<String, Secret>,
    /// Why the secrets could not be read (no key, sealed with another key).
    secrets_unavailable: Option<String>,
}

impl HttpOffer {
    /// The offer of `call`, its secrets not read yet.
    pub fn new(call: HttpCall) -> Self {
        Self {
            call,
            secrets: HashMap::new(),
            secrets_unavailable: None,
        }
    }

    /// Whether its headers name secrets (to read before the call).
    pub fn names_secrets(&self) -> bool {
        self.call.secrets().next().is_some()
    }

    /// `text` with the values of its opened secrets replaced by `***`.
    fn redacted_text(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for value in self.secrets.values() {
            let value = value.expose();
            if value.is_empty() {
                continue;
            }
            text = text.replace(value, "***");
        }
        text
    }

    /// `output` with the values of its opened secrets replaced by `***` in every string.
    fn redacted(&self, mut output: Value) -> Value {
        if !self.secrets.is_empty() {
            self.redact_strings(&mut output);
        }
        output
    }

    fn redact_strings(&self, value: &mut Value) {
        match value {
            Value::String(text) => *text = self.redacted_text(text),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_strings(v)),
            Value::Object(fields) => {
                let keys: Vec<String> = fields.keys().cloned().collect();
                for key in keys {
                    if let Some(mut v) = fields.remove(&key) {
                        self.redact_strings(&mut v);
                        fields.insert(self.redacted_text(&key), v);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The node's HTTP job caller.
#[derive(Debug)]
pub struct HttpJobs {
    http: reqwest::Client,
    egress: Arc<Egress>,
    default_timeout: Duration,
    pub(super) answer_wait: Duration,
    pub(super) slots: Arc<Semaphore>,
    /// The secrets' keys, when the node has them.
    keys: Option<Arc<crate::secrets::seal::Keyring>>,
    /// What the attempts this node is calling record as their executor.
    pub(super) executor_id: String,
    /// The attempts this node is calling past their answer wait (recorded as running).
    calling: Mutex<HashSet<i64>>,
}

/// The secrets `names` of `namespace`, opened from `stored` (the namespace's), by name; or
/// why not (no key, one not set, one sealed with a key this node does not have).
pub(super) fn open_named(
    keys: Option<&crate::secrets::seal::Keyring>,
    namespace: NamespaceId,
    names: &[String],
    stored: &[SecretRecord],
) -> Result<HashMap<String, Secret>, String> {
    let Some(keys) = keys else {
        return Err("this node has no secrets key (secrets.key) to open the secret".to_owned());
    };
    let mut opened = HashMap::new();
    for name in names {
        let Some(record) = stored.iter().find(|r| &r.name == name) else {
            return Err(format!(
                "the secret {name:?} is not set in the job's namespace"
            ));
        };
        let value = keys.open(namespace.0, name, &record.sealed).map_err(|_| {
            format!(
                "the secret {name:?} is sealed with a key this node does not have (key id {})",
                record.key_id
            )
        })?;
        opened.insert(name.clone(), Secret::new(value));
    }
    Ok(opened)
}

/// The prefix of the executor id HTTP calls record (`http@<node id>`).
pub const HTTP_EXECUTOR_PREFIX: &str = "http@";

impl HttpJobs {
    pub fn new(
        config: &HttpJobsConfig,
        egress: Arc<Egress>,
        node_id: &str,
        keys: Option<Arc<crate::secrets::seal::Keyring>>,
    ) -> Result<Self, String> {
        config
            .check()
            .map_err(|(setting, why)| format!("{setting}: {why}"))?;
        let http = egress
            .guard(carillon_tls::http_client_builder())
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            // As many kept open as calls may be in flight: many jobs call one host.
            .pool_max_idle_per_host(config.max_in_flight)
            .build()
            .map_err(|e| format!("cannot build the HTTP jobs' client: {e}"))?;
        Ok(Self {
            http,
            egress,
            default_timeout: Duration::from_millis(config.timeout_ms),
            answer_wait: Duration::from_millis(config.answer_wait_ms),
            slots: Arc::new(Semaphore::new(config.max_in_flight)),
            keys,
            executor_id: format!("{HTTP_EXECUTOR_PREFIX}{node_id}"),
            calling: Mutex::new(HashSet::new()),
        })
    }

    /// Opens the secrets `offer`'s headers name, from `stored` (its namespace's secrets).
    pub fn open_secrets(
        &self,
        offer: &mut HttpOffer,
        namespace: NamespaceId,
        stored: &[SecretRecord],
    ) {
        let names: Vec<String> = offer.call.secrets().map(str::to_owned).collect();
        match open_named(self.keys.as_deref(), namespace, &names, stored) {
            Ok(opened) => offer.secrets = opened,
            Err(why) => offer.secrets_unavailable = Some(why),
        }
    }

    /// The keys secrets are opened with, when the node has them.
    pub(super) fn keys(&self) -> Option<&crate::secrets::seal::Keyring> {
        self.keys.as_deref()
    }

    /// How long a call of a job with `timeout_ms` may take.
    pub(super) fn timeout(&self, timeout_ms: Option<u64>) -> Duration {
        timeout_ms.map_or(self.default_timeout, Duration::from_millis)
    }

    pub(super) fn begin_calling(&self, attempt_id: i64) {
        self.lock().insert(attempt_id);
    }

    pub(super) fn end_calling(&self, attempt_id: i64) {
        self.lock().remove(&attempt_id);
    }

    /// Whether this node is calling `attempt_id` now (a running attempt of its own that it is
    /// not calling was left by an earlier process of the node).
    pub(super) fn is_calling(&self, attempt_id: i64) -> bool {
        self.lock().contains(&attempt_id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        self.calling.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the call of `offer` for the run `request` describes. `Finished` with the answer
    /// as output; `Refused` when it may not go (outside the allowed reach, a secret missing);
    /// `TryAnother` when no answer came (`Unreachable`: nothing was sent).
    pub async fn call(
        &self,
        offer: &HttpOffer,
        (request, scheduled_at_ms): (&Dispatch, i64),
        idempotency_key: Option<&str>,
    ) -> Delivery {
        let call = &offer.call;
        let values = TemplateValues {
            instant: request.scheduled_at.clone(),
            instant_ms: scheduled_at_ms,
            run_id: request.run_id,
            attempt: request.attempt,
            job: request.job.clone(),
            job_id: request.job_id,
            shard_index: request.shard.index,
            shard_total: request.shard.total,
            args: request.args.clone(),
        };
        let url = match reqwest::Url::parse(&render(&call.url, &values, Encoding::Url)) {
            Ok(url) => url,
            Err(e) => return Delivery::Refused(format!("the call's URL does not read: {e}")),
        };
        if let Err(refused) = self.egress.check_literal(url.as_str()) {
            return Delivery::Refused(refused);
        }
        let Ok(method) = reqwest::Method::from_bytes(call.method.as_bytes()) else {
            return Delivery::Refused(format!("{} is not a method", call.method));
        };
        let mut builder = self
            .http
            .request(method, url)
            .timeout(self.timeout(request.timeout_ms));
        let mut typed = false;
        for (name, value) in &call.headers {
            let text = match value {
                HeaderValue::Text(text) => render(text, &values, Encoding::Plain),
                HeaderValue::Secret { secret } => match offer.secrets.get(secret) {
                    Some(value) => value.expose().to_owned(),
                    None => {
                        let why = offer.secrets_unavailable.clone().unwrap_or_else(|| {
                            format!("the secret {secret:?} is not set in the job's namespace")
                        });
                        return Delivery::Refused(format!("header {name}: {why}"));
                    }
                },
            };
            typed |= name.eq_ignore_ascii_case("content-type");
            builder = builder.header(name.as_str(), text);
        }
        if let Some(key) = idempotency_key {
            builder = builder.header("Idempotency-Key", key);
        }
        if let Some(traceparent) = &request.traceparent {
            builder = builder.header("traceparent", traceparent.as_str());
        }
        if let Some(body) = &call.body {
            let declared_json = call.headers.iter().any(|(name, value)| {
                name.eq_ignore_ascii_case("content-type")
                    && matches!(value, HeaderValue::Text(t) if t.contains("json"))
            });
            let json = declared_json || (!typed && call.body_is_json());
            // In a JSON body a value is written as JSON string content: a value cannot end
            // its string and add fields of its own.
            let encoding = if json {
                Encoding::JsonString
            } else {
                Encoding::Plain
            };
            let body = render(body, &values, encoding);
            if !typed {
                let kind = if json {
                    "application/json"
                } else {
                    "text/plain; charset=utf-8"
                };
                builder = builder.header(reqwest::header::CONTENT_TYPE, kind);
            }
            builder = builder.body(body);
        }
        let request = match builder.build() {
            Ok(request) => request,
            // Nothing was sent: a header value that is not one (a secret ending in a newline).
            Err(e) => {
                return Delivery::Refused(format!(
                    "the request could not be made: {}",
                    carillon_tls::with_causes(&e)
                ));
            }
        };
        let mut response = match self.http.execute(request).await {
            Ok(response) => response,
            Err(e) => {
                let why = carillon_tls::with_causes(&e);
                let not = if e.is_connect() {
                    NotTaken::Unreachable
                } else {
                    NotTaken::NoAnswer
                };
                return Delivery::TryAnother(not, format!("no answer from the URL: {why}"));
            }
        };
        let status = response.status().as_u16();
        let mut bytes = Vec::new();
        let mut cut = false;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_ANSWER_BYTES.saturating_sub(bytes.len());
                    bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if chunk.len() > room {
                        cut = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Delivery::TryAnother(
                        NotTaken::NoAnswer,
                        format!("the URL answered {status}, then its body broke off: {e}"),
                    );
                }
            }
        }
        let json = (!cut)
            .then(|| serde_json::from_slice::<Value>(&bytes).ok())
            .flatten();
        let body = match &json {
            Some(json) => json.clone(),
            None if bytes.is_empty() => Value::Null,
            None => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
        };
        let mut output = serde_json::json!({"status": status, "body": body});
        if cut {
            output["cut_at_bytes"] = Value::from(MAX_ANSWER_BYTES);
        }
        let (outcome, error) = match call.succeeded(status, json.as_ref()) {
            Ok(()) => (Outcome::Succeeded, None),
            Err(why) => (Outcome::Failed, Some(why)),
        };
        // An answer that echoes the request must not show its secrets to whoever reads runs.
        let output = offer.redacted(output);
        let error = error.map(|e| offer.redacted_text(&e));
        Delivery::Finished(DirectResult {
            outcome,
            output: Some(output),
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_named() {
        let config = HttpJobsConfig {
            max_in_flight: 0,
            ..HttpJobsConfig::default()
        };
        assert_eq!(config.check().unwrap_err().0, "http_jobs");
    }
}
