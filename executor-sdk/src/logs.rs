//! Handler logs: every `tracing` event at INFO or above that a handler emits while its
//! attempt runs is captured, numbered from 1, and
//! shipped to the admin nodes in batches (`POST /api/v1/executors/logs`) while the attempt
//! runs, the last of them before its result is reported. The application's own subscriber
//! still gets every event as before: capture forwards to it.
//!
//! Capture is one process-wide [`Dispatch`] that the attempt's task runs under; which attempt
//! an event belongs to is a task-local. Work a handler spawns onto other tasks is not captured
//! unless it runs under [`JobContext::in_attempt`](crate::JobContext::in_attempt). What the
//! forwarding cannot carry: a downcast of the current dispatcher to the application's
//! subscriber type (`Dispatch::downcast_ref`, which `tracing` offers only for a concrete
//! type) finds nothing inside a handler;
//! [`capture_handler_logs(false)`](crate::ExecutorBuilder::capture_handler_logs) turns
//! capture off for applications that need it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use carillon_protocol::ShippedLine;

use crate::attempt::AttemptRef;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};

/// The least severe level captured.
const CAPTURED: Level = Level::INFO;
/// Lines an attempt may hold waiting to be shipped; past them lines are counted, not kept.
const MAX_PENDING: usize = 10_000;
/// Lines of one attempt in one request.
const MAX_PER_REQUEST: usize = 1_000;
/// How often waiting lines are shipped (`admin.rs` ships them).
pub(crate) const SHIP_EVERY: Duration = Duration::from_millis(300);

tokio::task_local! {
    static ATTEMPT: Arc<AttemptLog>;
}

/// One attempt's captured lines, waiting to be shipped.
#[derive(Debug)]
pub(crate) struct AttemptLog {
    attempt: AttemptRef,
    report_to: Vec<String>,
    next_line: AtomicI64,
    pending: Mutex<Vec<ShippedLine>>,
    dropped: AtomicU64,
    /// Held while a batch of this attempt is taken and sent: the periodic shipping and the
    /// last one at the attempt's end never overlap, so batches reach a node in order (a node
    /// skips a line numbered at or below the last it stored, and counts its caps from what it
    /// stored).
    sending: tokio::sync::Mutex<()>,
}

impl AttemptLog {
    fn lock(&self) -> MutexGuard<'_, Vec<ShippedLine>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, level: &Level, message: String) {
        let mut pending = self.lock();
        if pending.len() >= MAX_PENDING {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.push(ShippedLine {
            line: self.next_line.fetch_add(1, Ordering::Relaxed),
            at_ms: now_ms(),
            level: level.as_str().to_owned(),
            message,
        });
    }

    /// Waits until no other batch of this attempt is being sent; hold it while taking and
    /// sending one.
    pub(crate) async fn sending(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.sending.lock().await
    }

    pub(crate) fn attempt(&self) -> &AttemptRef {
        &self.attempt
    }

    /// The admin nodes its dispatch named.
    pub(crate) fn report_to(&self) -> &[String] {
        &self.report_to
    }

    /// Lines to send now (at most a request's worth), and a line saying how many were
    /// dropped for want of room, if any were.
    pub(crate) fn take(&self) -> Vec<ShippedLine> {
        let mut pending = self.lock();
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            pending.push(ShippedLine {
                line: self.next_line.fetch_add(1, Ordering::Relaxed),
                at_ms: now_ms(),
                level: "WARN".to_owned(),
                message: format!(
                    "[carillon-executor] {dropped} lines dropped: the admin nodes did not take \
                     them as fast as the handler logged"
                ),
            });
        }
        let n = pending.len().min(MAX_PER_REQUEST);
        pending.drain(..n).collect()
    }

    /// Puts lines that could not be sent back in front of the newer ones.
    pub(crate) fn put_back(&self, lines: Vec<ShippedLine>) {
        let mut pending = self.lock();
        let newer = std::mem::replace(&mut *pending, lines);
        pending.extend(newer);
        let excess = pending.len().saturating_sub(MAX_PENDING);
        if excess > 0 {
            pending.drain(..excess);
            self.dropped.fetch_add(excess as u64, Ordering::Relaxed);
        }
    }
}

/// The attempts whose logs are being captured, and their shipping.
#[derive(Debug, Default)]
pub(crate) struct LogShipper {
    open: Mutex<HashMap<i64, Arc<AttemptLog>>>,
}

impl LogShipper {
    fn lock(&self) -> MutexGuard<'_, HashMap<i64, Arc<AttemptLog>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts capturing an attempt's log.
    pub(crate) fn open(&self, attempt: &AttemptRef, report_to: &[String]) -> Arc<AttemptLog> {
        let attempt_id = attempt.id;
        let log = Arc::new(AttemptLog {
            attempt: attempt.clone(),
            report_to: report_to.to_vec(),
            next_line: AtomicI64::new(1),
            pending: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            sending: tokio::sync::Mutex::new(()),
        });
        self.lock().insert(attempt_id, Arc::clone(&log));
        log
    }

    /// Stops capturing an attempt's log: what it still holds, to ship once more.
    pub(crate) fn close(&self, attempt_id: i64) -> Option<Arc<AttemptLog>> {
        self.lock().remove(&attempt_id)
    }

    /// The attempts being captured.
    pub(crate) fn open_logs(&self) -> Vec<Arc<AttemptLog>> {
        self.lock().values().cloned().collect()
    }
}

/// Runs `future` with its events captured into `log`.
pub(crate) fn capturing<F: std::future::Future>(
    log: Arc<AttemptLog>,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    use tracing::instrument::WithSubscriber;
    ATTEMPT
        .scope(log, future)
        .with_subscriber(capture_dispatch())
}

/// Runs `future` under the capture of the attempt this task runs for, if any: for work a
/// handler spawns.
pub(crate) fn in_current_attempt<F>(
    future: F,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = F::Output> + Send>>
where
    F: std::future::Future + Send + 'static,
{
    match ATTEMPT.try_with(Arc::clone) {
        Ok(log) => Box::pin(capturing(log, future)),
        Err(_) => Box::pin(future),
    }
}

/// The one capture dispatcher, forwarding to the subscriber that was the default when the
/// first attempt started (the application's, installed at start-up).
fn capture_dispatch() -> Dispatch {
    static CAPTURE: OnceLock<Dispatch> = OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            let inner = tracing::dispatcher::get_default(Dispatch::clone);
            let hint = LevelFilter::current().max(LevelFilter::from_level(CAPTURED));
            Dispatch::new(Capture { inner, hint })
        })
        .clone()
}

/// A subscriber that records the events of the attempt of the running task and forwards
/// everything to `inner`.
struct Capture {
    inner: Dispatch,
    /// The most verbose level anyone wants: the inner subscriber's (as it was when capture
    /// began; `Dispatch` does not tell) or the captured one.
    hint: LevelFilter,
}

fn captured(meta: &Metadata<'_>) -> bool {
    meta.is_event() && *meta.level() <= CAPTURED
}

impl Subscriber for Capture {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        let inner = self.inner.register_callsite(meta);
        if captured(meta) && !inner.is_always() {
            Interest::sometimes()
        } else {
            inner
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        (captured(meta) && ATTEMPT.try_with(|_| ()).is_ok()) || self.inner.enabled(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.hint)
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.inner.new_span(span)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        self.inner.record(span, values);
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.inner.record_follows_from(span, follows);
    }

    fn event(&self, event: &Event<'_>) {
        if captured(event.metadata()) {
            let _ = ATTEMPT.try_with(|log| log.push(event.metadata().level(), text_of(event)));
        }
        // Asked again right before the event, as the macros do, so filters that keep state
        // between the two calls see them paired.
        if self.inner.enabled(event.metadata()) {
            self.inner.event(event);
        }
    }

    fn enter(&self, span: &Id) {
        self.inner.enter(span);
    }

    fn exit(&self, span: &Id) {
        self.inner.exit(span);
    }

    fn clone_span(&self, id: &Id) -> Id {
        self.inner.clone_span(id)
    }

    fn try_close(&self, id: Id) -> bool {
        self.inner.try_close(id)
    }

    fn current_span(&self) -> tracing_core::span::Current {
        self.inner.current_span()
    }
}

/// An event as one line: its message, then its other fields as `name=value`.
fn text_of(event: &Event<'_>) -> String {
    struct Text {
        message: String,
        fields: String,
    }
    impl Visit for Text {
        fn record_str(&mut self, field: &Field, value: &str) {
            if field.name() == "message" {
                self.message.push_str(value);
            } else {
                let _ = write!(self.fields, " {}={value}", field.name());
            }
        }

        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                let _ = write!(self.message, "{value:?}");
            } else {
                let _ = write!(self.fields, " {}={value:?}", field.name());
            }
        }
    }
    let mut text = Text {
        message: String::new(),
        fields: String::new(),
    };
    event.record(&mut text);
    let mut line = text.message;
    line.push_str(&text.fields);
    line.replace(['\n', '\r'], " ")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
