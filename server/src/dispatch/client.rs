//! Signed HTTP calls to executors: one shared client, no redirects, explicit timeouts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use carillon_protocol::{
    BatchItemReply, Cancel, DirectResult, Dispatch, DispatchBatch, DispatchBatchReply,
    SIGNATURE_HEADER, TIMESTAMP_HEADER, executor_paths, sign,
};
use reqwest::StatusCode;

use super::handles::AttemptHandles;
use crate::clock::ClusterClock;
use crate::egress::Egress;
use crate::secret::Secret;

/// What became of one dispatch.
#[derive(Debug)]
pub enum Delivery {
    /// `202`, or `409` for an attempt it already had: running; the result will be reported.
    Accepted,
    /// `200`: done; here is the result.
    Finished(DirectResult),
    /// `429`, `503` or no answer: offer it to the next executor.
    TryAnother(NotTaken, String),
    /// The executor refused it for good (`404`, `401`, `400`…).
    Refused(String),
}

/// Why an executor did not take an attempt it may take later, or another executor may. The
/// first three say it was not taken; the last two leave it unknown, which matters to the
/// delivery guarantees that must not send work twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotTaken {
    /// `429`: at capacity.
    Busy,
    /// `503`: draining or unavailable.
    Unavailable,
    /// Nothing was sent: the connection was refused or could not be made, or the address is
    /// outside `egress.allowed_networks`.
    Unreachable,
    /// Sent, and no answer came (a timeout, a reset): it may have been taken.
    NoAnswer,
    /// Another `5xx` (an executor that failed mid-way, a proxy's `502`/`504`): it may have
    /// been taken.
    Failing,
}

impl NotTaken {
    /// Whether the executor may have taken the attempt all the same.
    pub fn maybe_taken(self) -> bool {
        matches!(self, NotTaken::NoAnswer | NotTaken::Failing)
    }
}

impl Delivery {
    /// The outcome's name in `carillon_dispatches_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Delivery::Accepted => "accepted",
            Delivery::Finished(_) => "answered",
            Delivery::TryAnother(NotTaken::Busy, _) => "busy",
            Delivery::TryAnother(NotTaken::Unavailable | NotTaken::Failing, _) => "unavailable",
            Delivery::TryAnother(NotTaken::Unreachable | NotTaken::NoAnswer, _) => "unreachable",
            Delivery::Refused(_) => "refused",
        }
    }
}

#[derive(Debug, Clone)]
pub struct DispatchClient {
    http: reqwest::Client,
    secret: Arc<Secret>,
    egress: Arc<Egress>,
    clock: Arc<ClusterClock>,
    /// `xxl.access_token`: what XXL-JOB executors are sent (`dispatch/xxl.rs`).
    xxl_token: Option<Arc<Secret>>,
    /// The handles dispatches carry, which results and log lines must quote.
    handles: Arc<AttemptHandles>,
}

/// Why a signed call got no answer; `tls` when the TLS handshake refused a certificate.
#[derive(Debug)]
struct NoAnswer {
    why: String,
    tls: bool,
    /// The request may have reached the executor (it was sent, or a connection was made).
    sent: bool,
}

impl From<NoAnswer> for String {
    fn from(no: NoAnswer) -> String {
        no.why
    }
}

/// Why the dispatch client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientBuildError {
    // The cause follows in the error's sources (`carillon_tls::with_causes`).
    #[error("dispatch TLS")]
    Tls(#[from] carillon_tls::TlsError),
    #[error("cannot build the dispatch HTTP client")]
    Http(#[from] reqwest::Error),
}

impl DispatchClient {
    pub fn new(
        secret: Arc<Secret>,
        clock: Arc<ClusterClock>,
        (connect_timeout, request_timeout): (Duration, Duration),
        egress: Arc<Egress>,
        tls: &carillon_tls::ClientTls,
        handles: AttemptHandles,
    ) -> Result<Self, ClientBuildError> {
        // Dispatch only to the address an executor registered, never where it points, and
        // only where the egress policy lets users' calls go.
        let http = egress
            .guard(carillon_tls::http_client_builder())
            .connect_timeout(connect_timeout)
            .timeout(request_timeout)
            .pool_max_idle_per_host(64);
        // `https://` executors: the system's roots plus `dispatch.tls_ca`, and the node's
        // client certificate for executors that require one.
        let http = tls.apply(http)?;
        Ok(Self {
            http: http.build()?,
            secret,
            egress,
            clock,
            xxl_token: None,
            handles: Arc::new(handles),
        })
    }

    /// The policy of what the node calls on a user's behalf.
    pub fn egress(&self) -> &Arc<Egress> {
        &self.egress
    }

    /// The handles this node's dispatches carry and its API checks.
    pub fn handles(&self) -> &AttemptHandles {
        &self.handles
    }

    /// The client, sending `token` to XXL-JOB executors.
    pub fn with_xxl_token(mut self, token: Option<Secret>) -> Self {
        self.xxl_token = token.map(Arc::new);
        self
    }

    pub(super) fn xxl_token(&self) -> Option<&str> {
        self.xxl_token.as_deref().map(Secret::expose)
    }

    /// POSTs `body` as JSON to `url`, unsigned, with what `decorate` adds (XXL-JOB's token):
    /// the response, or whether the request may have been sent and why nothing came back.
    pub(super) async fn post_with(
        &self,
        url: String,
        body: &impl serde::Serialize,
        decorate: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, (bool, String)> {
        if let Err(refused) = self.egress.check_literal(&url) {
            return Err((false, format!("the executor's address: {refused}")));
        }
        decorate(self.http.post(url).json(body))
            .send()
            .await
            .map_err(|e| (!e.is_connect(), format!("no answer: {}", without_url(&e))))
    }

    /// Whether executors may register `address`: every address it resolves to now must be
    /// allowed (and each connection is checked again).
    pub async fn check_address(&self, address: &str) -> Result<(), String> {
        self.egress.check_url(address).await
    }

    async fn post_signed(
        &self,
        url: String,
        body: Vec<u8>,
        traceparent: Option<&str>,
    ) -> Result<reqwest::Response, NoAnswer> {
        // An address literal skips the resolver: check it here.
        if let Err(refused) = self.egress.check_literal(&url) {
            return Err(NoAnswer {
                why: format!("the executor's address: {refused}"),
                tls: false,
                sent: false,
            });
        }
        // Signatures carry the cluster's time (the database clock), not this machine's: a
        // node whose clock is minutes off would otherwise have every dispatch refused as
        // stale by executors whose clocks are right.
        let timestamp = self.clock.now_ms();
        let signature = sign(self.secret.expose().as_bytes(), timestamp, &body);
        let mut request = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        request.body(body).send().await.map_err(|e| NoAnswer {
            tls: carillon_tls::is_tls_failure(&e),
            sent: !e.is_connect(),
            why: format!("no answer: {}", without_url(&e)),
        })
    }

    /// Now by the cluster clock, which stamps the signatures.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub async fn dispatch(&self, address: &str, dispatch: &Dispatch) -> Delivery {
        let body = match serde_json::to_vec(dispatch) {
            Ok(body) => body,
            Err(e) => return Delivery::Refused(format!("cannot encode the dispatch: {e}")),
        };
        let url = format!(
            "{}{}",
            address.trim_end_matches('/'),
            executor_paths::DISPATCH
        );
        let response = match self
            .post_signed(url, body, dispatch.traceparent.as_deref())
            .await
        {
            Ok(response) => response,
            // A certificate refused (ours or the executor's) is no passing outage: the
            // attempt fails with the reason, and the retry policy decides what follows.
            Err(NoAnswer { why, tls: true, .. }) => {
                return Delivery::Refused(format!("TLS with the executor failed: {why}"));
            }
            Err(NoAnswer {
                why, sent: false, ..
            }) => return Delivery::TryAnother(NotTaken::Unreachable, why),
            Err(NoAnswer { why, .. }) => return Delivery::TryAnother(NotTaken::NoAnswer, why),
        };
        match response.status() {
            StatusCode::ACCEPTED => Delivery::Accepted,
            StatusCode::OK => {
                // An answer cut after its headers (the connection silent or reset while the
                // body comes) is an answer lost, not a refusal: the executor ran the attempt,
                // or runs it, and what it did is not known here.
                let body = match response.bytes().await {
                    Ok(body) => body,
                    Err(e) => {
                        return Delivery::TryAnother(
                            NotTaken::NoAnswer,
                            format!(
                                "the answer was cut after its headers (200): {}",
                                without_url(&e)
                            ),
                        );
                    }
                };
                match serde_json::from_slice::<DirectResult>(&body) {
                    Ok(result) => Delivery::Finished(result),
                    Err(e) => {
                        Delivery::Refused(format!("200 with a body that is not a result: {e}"))
                    }
                }
            }
            status => {
                let detail = response.text().await.unwrap_or_default();
                not_taken(status.as_u16(), &detail)
            }
        }
    }

    /// Sends attempts due together to an executor that registered `batch`, in one signed
    /// request; what became of each, by attempt id. `Err` when the request as a whole got no
    /// usable answer: none of them is known to have been accepted.
    pub async fn dispatch_batch(
        &self,
        address: &str,
        dispatches: Vec<Dispatch>,
    ) -> Result<HashMap<i64, Delivery>, String> {
        let body = serde_json::to_vec(&DispatchBatch { dispatches })
            .map_err(|e| format!("cannot encode the batch: {e}"))?;
        let url = format!(
            "{}{}",
            address.trim_end_matches('/'),
            executor_paths::DISPATCH_BATCH
        );
        let response = self.post_signed(url, body, None).await?;
        let status = response.status();
        if status != StatusCode::OK {
            return Err(format!("executor answered {status} to a batch"));
        }
        let reply: DispatchBatchReply = response
            .json()
            .await
            .map_err(|e| format!("200 with a body that is not a batch reply: {e}"))?;
        Ok(reply
            .replies
            .into_iter()
            .map(|item| (item.attempt_id, item_delivery(item)))
            .collect())
    }

    /// Asks an executor to stop an attempt; best effort.
    pub async fn cancel(&self, address: &str, attempt_id: i64) -> bool {
        let Ok(body) = serde_json::to_vec(&Cancel { attempt_id }) else {
            return false;
        };
        let url = format!(
            "{}{}",
            address.trim_end_matches('/'),
            executor_paths::CANCEL
        );
        matches!(self.post_signed(url, body, None).await, Ok(r) if r.status().is_success())
    }
}

/// One reply of a batch, read as the single dispatch's answer would be.
fn item_delivery(item: BatchItemReply) -> Delivery {
    match item.status {
        202 => Delivery::Accepted,
        200 => match item.result {
            Some(result) => Delivery::Finished(result),
            None => Delivery::Refused("200 without a result".to_owned()),
        },
        status => not_taken(status, item.error.as_deref().unwrap_or_default()),
    }
}

/// An answer other than `200`/`202`: already accepted (`409`, a replay), busy, draining or
/// failing (try the next executor), or a refusal for good (`404`, `401`, `400`…), single or in
/// a batch alike.
fn not_taken(status: u16, detail: &str) -> Delivery {
    let status_text = StatusCode::from_u16(status)
        .map(|s| s.to_string())
        .unwrap_or_else(|_| status.to_string());
    // The executor already holds this attempt: a node died between its `202` and recording
    // it, and the partition's next owner offered it again. It runs there; its result report,
    // or its heartbeats no longer listing it, end it. Failing it here would run it twice.
    if status == 409 {
        return Delivery::Accepted;
    }
    if status == 429 || status >= 500 {
        let why = match status {
            429 => NotTaken::Busy,
            503 => NotTaken::Unavailable,
            _ => NotTaken::Failing,
        };
        return Delivery::TryAnother(why, format!("executor answered {status_text}"));
    }
    let detail: String = detail.chars().take(300).collect();
    Delivery::Refused(format!("executor answered {status_text}: {detail}"))
}

/// reqwest errors carry the URL; the message already says which executor.
/// With its causes: "error sending request" keeps the reason (a refused certificate, a reset)
/// in its sources.
fn without_url(err: &reqwest::Error) -> String {
    let text = carillon_tls::with_causes(err);
    match err.url() {
        Some(url) => text.replace(url.as_str(), "executor"),
        None => text,
    }
}
