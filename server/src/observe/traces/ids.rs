//! The ids of a run's trace, derived rather than stored: the trace from the run id, the root's
//! and the start's spans from the run id, a delivery's span from the attempt id, each keyed
//! by the cluster's dispatch key. Every node computes the same ids for the same run, so a
//! stage done by the partition's next owner, or a result reported to another node, joins the
//! trace without a column or a read; the key keeps them unguessable and distinct between
//! clusters whose run ids coincide.

use hmac::{Hmac, KeyInit, Mac};
use opentelemetry::trace::{SpanId, TraceId};
use sha2::Sha256;

/// The label the id key is derived under: the dispatch key itself never hashes span ids.
const KEY_LABEL: &[u8] = b"carillon trace ids v1";

/// Which id of a run is wanted.
#[derive(Debug, Clone, Copy)]
pub(super) enum Derived {
    /// The run's trace (by run id).
    Trace,
    /// The run's root span: its claim, or its wait for a first offer (by run id).
    Root,
    /// The start's span (by run id).
    Start,
    /// A delivery's span, the parent of the executor's (by attempt id and target).
    Deliver,
}

impl Derived {
    fn label(self) -> u8 {
        match self {
            Derived::Trace => b't',
            Derived::Root => b'r',
            Derived::Start => b's',
            Derived::Deliver => b'd',
        }
    }
}

/// The key the ids are derived with.
#[derive(Clone)]
pub(super) struct IdKey(Hmac<Sha256>);

impl std::fmt::Debug for IdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdKey(..)")
    }
}

impl IdKey {
    pub(super) fn new(dispatch_key: &[u8]) -> Self {
        let derive = |key: &[u8], data: &[u8]| {
            // HMAC takes keys of any length; this cannot fail.
            let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
                .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
            mac.update(data);
            mac
        };
        let key = derive(dispatch_key, KEY_LABEL).finalize().into_bytes();
        Self(derive(&key, &[]))
    }

    fn digest(&self, what: Derived, id: i64, sub: u32) -> [u8; 32] {
        let mut mac = self.0.clone();
        mac.update(&[what.label()]);
        mac.update(&id.to_be_bytes());
        mac.update(&sub.to_be_bytes());
        mac.finalize().into_bytes().into()
    }

    pub(super) fn trace(&self, run_id: i64) -> TraceId {
        let digest = self.digest(Derived::Trace, run_id, 0);
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        // All zeros is the invalid id; one in 2^128, but never sent.
        if bytes == [0; 16] {
            bytes[15] = 1;
        }
        TraceId::from_bytes(bytes)
    }

    /// The span of `what` for `id`; `sub` tells apart the spans of one id (a delivery's
    /// targets, by their place in its order).
    pub(super) fn span(&self, what: Derived, id: i64, sub: u32) -> SpanId {
        let digest = self.digest(what, id, sub);
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&digest[..8]);
        if bytes == [0; 8] {
            bytes[7] = 1;
        }
        SpanId::from_bytes(bytes)
    }
}

/// `traceparent` as W3C Trace Context writes it (version 00).
pub(crate) fn traceparent(trace: TraceId, parent: SpanId, sampled: bool) -> String {
    format!("00-{trace}-{parent}-{}", if sampled { "01" } else { "00" })
}

/// A `traceparent` header's trace, parent span and sampled flag; `None` for anything W3C
/// says to ignore (a bad length, upper-case hex, all-zero ids, version `ff`).
pub(crate) fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, bool)> {
    let mut parts = value.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    // A later version may add fields after the flags; version 00 may not.
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(version, 2)
        || !lower_hex(trace, 32)
        || !lower_hex(parent, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let parent = SpanId::from_hex(parent).ok()?;
    if trace == TraceId::INVALID || parent == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace, parent, flags & 1 == 1))
}

/// Fresh random ids, for a request that brought no trace.
pub(super) fn random_trace() -> TraceId {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() || bytes == [0; 16] {
        bytes[15] = 1;
    }
    TraceId::from_bytes(bytes)
}

pub(super) fn random_span() -> SpanId {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() || bytes == [0; 8] {
        bytes[7] = 1;
    }
    SpanId::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_derives_the_same_ids_and_another_cluster_others() {
        let a = IdKey::new(b"the cluster's dispatch key");
        let b = IdKey::new(b"the cluster's dispatch key");
        let other = IdKey::new(b"another cluster's key");
        assert_eq!(a.trace(42), b.trace(42));
        assert_eq!(
            a.span(Derived::Deliver, 7, 0),
            b.span(Derived::Deliver, 7, 0)
        );
        assert_ne!(a.trace(42), a.trace(43));
        assert_ne!(a.trace(42), other.trace(42));
        assert_ne!(a.span(Derived::Root, 42, 0), a.span(Derived::Start, 42, 0));
        assert_ne!(
            a.span(Derived::Deliver, 7, 0),
            a.span(Derived::Deliver, 7, 1)
        );
    }

    #[test]
    fn traceparent_is_written_and_read_as_w3c_says() {
        let key = IdKey::new(b"k");
        let (trace, span) = (key.trace(1), key.span(Derived::Deliver, 2, 0));
        let header = traceparent(trace, span, true);
        assert_eq!(header.len(), 55);
        assert_eq!(parse_traceparent(&header), Some((trace, span, true)));
        assert_eq!(
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            Some((
                TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap_or(TraceId::INVALID),
                SpanId::from_hex("00f067aa0ba902b7").unwrap_or(SpanId::INVALID),
                false
            ))
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad:?}");
        }
        assert!(
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later")
                .is_some(),
            "a later version's extra fields are ignored"
        );
    }
}
