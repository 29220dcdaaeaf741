//! OpenTelemetry traces of the fire path and the API, exported over OTLP when
//! `[telemetry] otlp_endpoint` is set.
//!
//! A run is one trace: `carillon.claim` (the scheduler's claim of its instant, the root),
//! `carillon.start` (its attempts made), a `carillon.deliver` per attempt (the offers to
//! executors; its id is the parent sent in the dispatch's `traceparent`) and a
//! `carillon.settle` per attempt (its end stored, whichever node stores it). The ids are
//! derived ([`ids`]), so no stage reads or stores them; the spans are built here with the
//! stage's own timings and queued to the exporter ([`export`]) without waiting: a full queue
//! drops spans, never slows a fire. With no endpoint nothing is recorded, and the dispatches
//! still carry `traceparent` (sampled: the executor's tracing decides), so an executor's own
//! traces group by run.

mod export;
pub(crate) mod ids;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::SpanData;
use tokio::sync::mpsc;

pub use export::{ExportError, ExportSettings, TraceExport};
use ids::{Derived, IdKey};

/// Spans waiting for the exporter; past this, new ones are dropped (and counted).
const QUEUE: usize = 16_384;

/// Claims not yet offered are forgotten after this long (another node offered the run).
const CLAIM_KEPT: Duration = Duration::from_secs(120);

/// Where a node's spans go, and how its trace ids are made.
#[derive(Debug, Clone)]
pub struct Traces {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ids: IdKey,
    export: Option<Exporting>,
}

#[derive(Debug)]
struct Exporting {
    spans: mpsc::Sender<SpanData>,
    /// A trace is sampled when the low 64 bits of its id are at most this.
    sample_below: u64,
    scope: InstrumentationScope,
    dropped: AtomicU64,
    /// Claims of this node by (job, instant), until the run's first offer names its run id.
    claims: Mutex<HashMap<(i64, i64), (SystemTime, SystemTime)>>,
}

/// A run as its start pass holds it.
#[derive(Debug, Clone, Copy)]
pub struct StartedRun {
    pub run_id: i64,
    pub job_id: i64,
    pub shards: usize,
}

/// One offer of an attempt, as its delivery knows it.
#[derive(Debug, Clone, Copy)]
pub struct Offering {
    pub run_id: i64,
    pub attempt_id: i64,
    pub attempt_no: i64,
    pub shard_index: i64,
    /// The attempt's creation (database clock).
    pub created_at_ms: i64,
    /// The lost attempts before it: a failover's offer is not the run's first.
    pub lost_before: i64,
    pub job_id: i64,
    pub namespace_id: i64,
    pub scheduled_at_ms: i64,
    /// The executor's place in the attempt's order of targets.
    pub target: u32,
}

impl Offering {
    fn is_runs_first(&self) -> bool {
        self.attempt_no == 1 && self.shard_index == 0 && self.target == 0 && self.lost_before == 0
    }
}

/// An API request's span, begun by the middleware.
#[derive(Debug)]
pub struct RequestSpan {
    trace: TraceId,
    span: SpanId,
    parent: SpanId,
    remote_parent: bool,
    sampled: bool,
    began: SystemTime,
}

impl RequestSpan {
    pub fn trace_id(&self) -> String {
        self.trace.to_string()
    }
}

impl Traces {
    /// Ids from `dispatch_key`; spans sent to `export` (with the share of traces sampled), or
    /// recorded nowhere.
    pub fn new(dispatch_key: &[u8], export: Option<(mpsc::Sender<SpanData>, f64)>) -> Self {
        let export = export.map(|(spans, ratio)| Exporting {
            spans,
            sample_below: sample_threshold(ratio),
            scope: InstrumentationScope::builder("carillon")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            dropped: AtomicU64::new(0),
            claims: Mutex::new(HashMap::new()),
        });
        Self {
            inner: Arc::new(Inner {
                ids: IdKey::new(dispatch_key),
                export,
            }),
        }
    }

    /// A queue for spans, as [`Traces::new`] and [`TraceExport`] take it.
    pub fn queue() -> (mpsc::Sender<SpanData>, mpsc::Receiver<SpanData>) {
        mpsc::channel(QUEUE)
    }

    /// The run's trace id, as logs carry it.
    pub fn trace_id(&self, run_id: i64) -> String {
        self.inner.ids.trace(run_id).to_string()
    }

    /// The `traceparent` of the offer of `attempt_id` of `run_id` to its `target`th executor.
    pub fn traceparent(&self, (run_id, attempt_id, target): (i64, i64, u32)) -> String {
        let trace = self.inner.ids.trace(run_id);
        ids::traceparent(
            trace,
            self.inner.ids.span(Derived::Deliver, attempt_id, target),
            // Not exporting, the node leaves the decision to the executor's own tracing (a
            // parent-based sampler would drop every span of a trace said unsampled).
            self.inner.export.is_none() || self.sampling(trace).is_some(),
        )
    }

    /// Whether spans are recorded at all: the stages skip gathering them otherwise.
    pub fn exporting(&self) -> bool {
        self.inner.export.is_some()
    }

    /// Spans dropped because the exporter fell behind.
    pub fn dropped(&self) -> u64 {
        self.inner
            .export
            .as_ref()
            .map_or(0, |e| e.dropped.load(Ordering::Relaxed))
    }

    fn sampling(&self, trace: TraceId) -> Option<&Exporting> {
        let export = self.inner.export.as_ref()?;
        let low = u64::from_be_bytes(trace.to_bytes()[8..].try_into().unwrap_or([0; 8]));
        (low <= export.sample_below && export.sample_below > 0).then_some(export)
    }

    /// The scheduler claimed these instants (job, instant) between `began` and `ended`.
    pub fn claimed(
        &self,
        instants: impl Iterator<Item = (i64, i64)>,
        (began, ended): (SystemTime, SystemTime),
    ) {
        let Some(export) = &self.inner.export else {
            return;
        };
        let mut claims = export.claims.lock().unwrap_or_else(PoisonError::into_inner);
        // Claims another node offered (a partition handed over between claim and offer).
        if claims.len() > QUEUE {
            let now = SystemTime::now();
            claims.retain(|_, (_, at)| now.duration_since(*at).unwrap_or_default() < CLAIM_KEPT);
        }
        for instant in instants {
            claims.insert(instant, (began, ended));
        }
    }

    /// A start pass made the attempts of `runs` (runs of several attempts; the others start
    /// where they are created) between `began` and `ended`.
    pub fn started(&self, runs: &[StartedRun], times: (SystemTime, SystemTime)) {
        for run in runs {
            let trace = self.inner.ids.trace(run.run_id);
            let Some(export) = self.sampling(trace) else {
                continue;
            };
            self.emit(
                export,
                Span {
                    name: "carillon.start",
                    kind: SpanKind::Internal,
                    trace,
                    id: self.inner.ids.span(Derived::Start, run.run_id, 0),
                    parent: self.inner.ids.span(Derived::Root, run.run_id, 0),
                    times,
                    attributes: vec![
                        KeyValue::new("carillon.run_id", run.run_id),
                        KeyValue::new("carillon.job_id", run.job_id),
                        KeyValue::new("carillon.shards", run.shards as i64),
                    ],
                    error: None,
                },
            );
        }
    }

    /// An offer was made to `executor_id` between `began` and `ended`, and this is what became
    /// of it (`accepted`, `answered`, `busy`…). The run's first offer also records its root:
    /// the claim when this node claimed it, else its wait from creation to this offer.
    pub fn delivered(
        &self,
        offer: &Offering,
        executor_id: &str,
        outcome: &'static str,
        (began, ended): (SystemTime, SystemTime),
    ) {
        let Some(export) = &self.inner.export else {
            return;
        };
        let claim = offer.is_runs_first().then(|| {
            export
                .claims
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&(offer.job_id, offer.scheduled_at_ms))
        });
        let trace = self.inner.ids.trace(offer.run_id);
        let Some(export) = self.sampling(trace) else {
            return;
        };
        let root = self.inner.ids.span(Derived::Root, offer.run_id, 0);
        if let Some(claim) = claim {
            let created = SystemTime::UNIX_EPOCH
                + Duration::from_millis(u64::try_from(offer.created_at_ms).unwrap_or(0));
            let (name, times) = match claim {
                Some(times) => ("carillon.claim", times),
                None => ("carillon.run", (created.min(began), began)),
            };
            self.emit(
                export,
                Span {
                    name,
                    kind: SpanKind::Internal,
                    trace,
                    id: root,
                    parent: SpanId::INVALID,
                    times,
                    attributes: vec![
                        KeyValue::new("carillon.run_id", offer.run_id),
                        KeyValue::new("carillon.job_id", offer.job_id),
                        KeyValue::new("carillon.namespace_id", offer.namespace_id),
                        KeyValue::new("carillon.scheduled_at_ms", offer.scheduled_at_ms),
                    ],
                    error: None,
                },
            );
        }
        let failed = !matches!(outcome, "accepted" | "answered");
        self.emit(
            export,
            Span {
                name: "carillon.deliver",
                kind: SpanKind::Client,
                trace,
                id: self
                    .inner
                    .ids
                    .span(Derived::Deliver, offer.attempt_id, offer.target),
                parent: root,
                times: (began, ended),
                attributes: vec![
                    KeyValue::new("carillon.run_id", offer.run_id),
                    KeyValue::new("carillon.attempt_id", offer.attempt_id),
                    KeyValue::new("carillon.attempt", offer.attempt_no),
                    KeyValue::new("carillon.shard", offer.shard_index),
                    KeyValue::new("carillon.executor_id", executor_id.to_owned()),
                    KeyValue::new("carillon.outcome", outcome),
                ],
                error: failed.then(|| format!("not taken: {outcome}")),
            },
        );
    }

    /// The end of `attempt_id` of `run_id` was stored between `began` and `ended`: the
    /// attempt's `state`, and the run's when it ended too.
    pub fn settled(
        &self,
        (run_id, attempt_id): (i64, i64),
        state: &'static str,
        run_state: Option<&'static str>,
        (began, ended): (SystemTime, SystemTime),
    ) {
        if !self.exporting() {
            return;
        }
        let trace = self.inner.ids.trace(run_id);
        let Some(export) = self.sampling(trace) else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("carillon.run_id", run_id),
            KeyValue::new("carillon.attempt_id", attempt_id),
            KeyValue::new("carillon.attempt_state", state),
        ];
        if let Some(run_state) = run_state {
            attributes.push(KeyValue::new("carillon.run_state", run_state));
        }
        self.emit(
            export,
            Span {
                name: "carillon.settle",
                kind: SpanKind::Internal,
                trace,
                id: ids::random_span(),
                // Not a delivery's child: a result reported later does not say which offer it
                // answers.
                parent: self.inner.ids.span(Derived::Root, run_id, 0),
                times: (began, ended),
                attributes,
                error: (state != "succeeded").then(|| format!("attempt {state}")),
            },
        );
    }

    /// An API request begins: in the trace of its `traceparent` (and sampled as it says), or
    /// a new one. `None` when nothing is exported.
    pub fn request_began(&self, traceparent: Option<&str>) -> Option<RequestSpan> {
        self.inner.export.as_ref()?;
        let (trace, parent, sampled, remote_parent) =
            match traceparent.and_then(ids::parse_traceparent) {
                Some((trace, parent, sampled)) => (trace, parent, sampled, true),
                None => {
                    let trace = ids::random_trace();
                    let sampled = self.sampling(trace).is_some();
                    (trace, SpanId::INVALID, sampled, false)
                }
            };
        Some(RequestSpan {
            trace,
            span: ids::random_span(),
            parent,
            remote_parent,
            sampled,
            began: SystemTime::now(),
        })
    }

    /// An API request ended with `status`: `method` on `route` (the matched path; none for
    /// a path no route matched).
    pub fn request_ended(&self, span: RequestSpan, method: &str, route: Option<&str>, status: u16) {
        let Some(export) = self.inner.export.as_ref().filter(|_| span.sampled) else {
            return;
        };
        let mut data = self.span_data(
            export,
            Span {
                name: "",
                kind: SpanKind::Server,
                trace: span.trace,
                id: span.span,
                parent: span.parent,
                times: (span.began, SystemTime::now()),
                attributes: vec![
                    KeyValue::new("http.request.method", method.to_owned()),
                    KeyValue::new("http.response.status_code", i64::from(status)),
                ],
                error: (status >= 500).then(|| format!("answered {status}")),
            },
        );
        data.name = Cow::Owned(match route {
            Some(route) => {
                data.attributes
                    .push(KeyValue::new("http.route", route.to_owned()));
                format!("{method} {route}")
            }
            None => method.to_owned(),
        });
        data.parent_span_is_remote = span.remote_parent;
        self.enqueue(export, data);
    }

    fn emit(&self, export: &Exporting, span: Span) {
        let data = self.span_data(export, span);
        self.enqueue(export, data);
    }

    fn enqueue(&self, export: &Exporting, data: SpanData) {
        if export.spans.try_send(data).is_err() {
            export.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn span_data(&self, export: &Exporting, span: Span) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                span.trace,
                span.id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: span.parent,
            parent_span_is_remote: false,
            span_kind: span.kind,
            name: Cow::Borrowed(span.name),
            start_time: span.times.0,
            end_time: span.times.1,
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: match span.error {
                Some(description) => Status::error(description),
                None => Status::Unset,
            },
            instrumentation_scope: export.scope.clone(),
        }
    }
}

/// A span as a stage describes it.
struct Span {
    name: &'static str,
    kind: SpanKind,
    trace: TraceId,
    id: SpanId,
    parent: SpanId,
    times: (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    error: Option<String>,
}

/// The largest low half of a trace id that is sampled at `ratio` (0: none, 1: all).
fn sample_threshold(ratio: f64) -> u64 {
    if ratio >= 1.0 {
        u64::MAX
    } else if ratio <= 0.0 || ratio.is_nan() {
        0
    } else {
        (ratio * u64::MAX as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_offer(run_id: i64, attempt_id: i64) -> Offering {
        Offering {
            run_id,
            attempt_id,
            attempt_no: 1,
            shard_index: 0,
            created_at_ms: 1_000,
            lost_before: 0,
            job_id: 5,
            namespace_id: 1,
            scheduled_at_ms: 1_000,
            target: 0,
        }
    }

    #[tokio::test]
    async fn a_run_is_one_trace_under_its_claim() {
        let (tx, mut rx) = Traces::queue();
        let traces = Traces::new(b"key", Some((tx, 1.0)));
        let t = SystemTime::now();
        traces.claimed([(5, 1_000)].into_iter(), (t, t));
        let run = StartedRun {
            run_id: 9,
            job_id: 5,
            shards: 2,
        };
        traces.started(&[run], (t, t));
        traces.delivered(&first_offer(9, 90), "ex-1", "accepted", (t, t));
        traces.delivered(
            &Offering {
                shard_index: 1,
                ..first_offer(9, 91)
            },
            "ex-1",
            "busy",
            (t, t),
        );
        traces.settled((9, 90), "succeeded", Some("succeeded"), (t, t));
        let mut spans = Vec::new();
        rx.recv_many(&mut spans, 10).await;
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "carillon.start",
                "carillon.claim",
                "carillon.deliver",
                "carillon.deliver",
                "carillon.settle"
            ],
            "one claim, from the run's first offer"
        );
        let trace = spans[0].span_context.trace_id();
        assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));
        let root = spans[1].span_context.span_id();
        assert_eq!(
            spans[1].parent_span_id,
            SpanId::INVALID,
            "the claim is the root"
        );
        for span in [&spans[0], &spans[2], &spans[3], &spans[4]] {
            assert_eq!(span.parent_span_id, root, "{}", span.name);
        }
        assert_eq!(
            traces.traceparent((9, 90, 0)),
            format!("00-{trace}-{}-01", spans[2].span_context.span_id()),
            "the executor's parent is the delivery"
        );
        assert_ne!(
            spans[2].span_context.span_id(),
            spans[3].span_context.span_id()
        );
    }

    #[tokio::test]
    async fn a_run_without_a_claim_here_is_rooted_at_its_wait_for_an_offer() {
        let (tx, mut rx) = Traces::queue();
        let traces = Traces::new(b"key", Some((tx, 1.0)));
        let t = SystemTime::now();
        traces.delivered(&first_offer(9, 90), "ex-1", "busy", (t, t));
        traces.delivered(
            &Offering {
                target: 1,
                ..first_offer(9, 90)
            },
            "ex-2",
            "accepted",
            (t, t),
        );
        let mut spans = Vec::new();
        rx.recv_many(&mut spans, 10).await;
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            ["carillon.run", "carillon.deliver", "carillon.deliver"]
        );
        assert_eq!(
            spans[0].start_time,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1)
        );
    }

    #[test]
    fn off_records_nothing_and_leaves_sampling_to_the_executor() {
        let traces = Traces::new(b"key", None);
        assert!(traces.traceparent((9, 90, 0)).ends_with("-01"));
        assert!(traces.request_began(None).is_none());
        let (tx, _rx) = Traces::queue();
        let none_sampled = Traces::new(b"key", Some((tx, 0.0)));
        assert!(none_sampled.traceparent((9, 90, 0)).ends_with("-00"));
    }
}
