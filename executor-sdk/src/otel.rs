//! The `opentelemetry` feature: the attempt's span continues the run's trace, so the
//! handler's spans (and what they call) join the node's trace of the run when the app exports
//! its `tracing` spans with tracing-opentelemetry. Without that layer it does nothing.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Makes `span` a child of the delivery that `traceparent` names.
pub(crate) fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(remote) = traceparent.and_then(remote_context) else {
        return;
    };
    let context = opentelemetry::Context::new().with_remote_span_context(remote);
    // The app installed no tracing-opentelemetry layer: nothing to join.
    let _ = span.set_parent(context);
}

/// A version-00 `traceparent` as a remote span context.
fn remote_context(traceparent: &str) -> Option<SpanContext> {
    let mut parts = traceparent.split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || trace.len() != 32 || parent.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let parent = SpanId::from_hex(parent).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace,
        parent,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::remote_context;

    #[test]
    fn a_traceparent_reads_as_the_remote_parent() {
        let context = remote_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_sampled() && context.is_remote());
        assert!(
            remote_context("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(remote_context("garbage").is_none());
    }
}
