//! The executor's record of work done for `exactly_once_effect` jobs and tasks: per
//! `effect_key` (a run, a shard, a try), whether the handler is running or what it returned.
//! A dispatch whose key is here is answered from the record instead of running the handler
//! again: with the result if it is done, or by joining the running handler, whose result is
//! then reported for this attempt too.
//!
//! The record is in memory: it covers a node dying after this executor took the work, and a
//! failover back to this executor; not this executor's own restart. It keeps a finished
//! key for [`KEEP_MS`], and at most [`MAX_DONE`] of them (the oldest go first).

use std::collections::{HashMap, VecDeque};

use carillon_protocol::{DirectResult, Outcome};
use serde_json::Value;

use crate::attempt::AttemptRef;

/// How long a finished key is remembered: longer than any failover or redelivery takes.
pub(crate) const KEEP_MS: i64 = 3_600_000;
/// Most finished keys remembered.
pub(crate) const MAX_DONE: usize = 100_000;

/// A handler's result as the SDK reports it: `None` when cancelled.
pub(crate) type HandlerResult = Option<Result<Value, String>>;

/// What a dispatch with an effect key should do.
#[derive(Debug, PartialEq)]
pub(crate) enum Effect {
    /// First time: run the handler (and call [`Effects::finish`] with its result).
    Run,
    /// Running already under the attempt of this id: its result will be reported for this one
    /// too.
    Joined(i64),
    /// Done: answer with this result.
    Done(DirectResult),
}

#[derive(Debug)]
enum Entry {
    /// Running under attempt `primary`; the other attempts waiting for its result.
    Running {
        primary: i64,
        waiting: Vec<AttemptRef>,
    },
    Done {
        result: HandlerResult,
        at_ms: i64,
    },
}

/// The record.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    entries: HashMap<String, Entry>,
    /// Finished keys, oldest first.
    done_order: VecDeque<(String, i64)>,
}

/// A handler's result as a direct answer.
pub(crate) fn direct(result: &HandlerResult) -> DirectResult {
    match result {
        Some(Ok(output)) => DirectResult {
            outcome: Outcome::Succeeded,
            output: Some(output.clone()),
            error: None,
        },
        Some(Err(error)) => DirectResult {
            outcome: Outcome::Failed,
            output: None,
            error: Some(error.clone()),
        },
        None => DirectResult {
            outcome: Outcome::Cancelled,
            output: None,
            error: Some("cancelled".to_owned()),
        },
    }
}

impl Effects {
    /// What to do with `attempt` of the work `key`, at `now_ms`.
    pub(crate) fn begin(&mut self, key: &str, attempt: &AttemptRef, now_ms: i64) -> Effect {
        self.forget_old(now_ms);
        match self.entries.get_mut(key) {
            Some(Entry::Done { result, .. }) => Effect::Done(direct(result)),
            Some(Entry::Running { primary, waiting }) => {
                if attempt.id != *primary && !waiting.iter().any(|w| w.id == attempt.id) {
                    waiting.push(attempt.clone());
                }
                Effect::Joined(*primary)
            }
            None => {
                let running = Entry::Running {
                    primary: attempt.id,
                    waiting: Vec::new(),
                };
                self.entries.insert(key.to_owned(), running);
                Effect::Run
            }
        }
    }

    /// The handler of `key` could not start after all (at capacity, draining): forget it, so
    /// the next delivery runs it. An attempt that joined it meanwhile has no work behind it: it
    /// is not listed in flight, its node finds it lost and delivers the work again.
    pub(crate) fn abandon(&mut self, key: &str) {
        if matches!(self.entries.get(key), Some(Entry::Running { .. })) {
            self.entries.remove(key);
        }
    }

    /// Records the result of `key`; returns the other attempts that joined it.
    pub(crate) fn finish(
        &mut self,
        key: &str,
        result: &HandlerResult,
        now_ms: i64,
    ) -> Vec<AttemptRef> {
        let joined = match self.entries.remove(key) {
            Some(Entry::Running { waiting, .. }) => waiting,
            _ => Vec::new(),
        };
        // A cancelled handler did no work to remember: a later delivery may run it.
        if result.is_some() {
            self.entries.insert(
                key.to_owned(),
                Entry::Done {
                    result: result.clone(),
                    at_ms: now_ms,
                },
            );
            self.done_order.push_back((key.to_owned(), now_ms));
            while self.done_order.len() > MAX_DONE {
                self.drop_oldest();
            }
        }
        joined
    }

    fn forget_old(&mut self, now_ms: i64) {
        while self
            .done_order
            .front()
            .is_some_and(|(_, at)| now_ms - at > KEEP_MS)
        {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some((key, at)) = self.done_order.pop_front()
            && matches!(self.entries.get(&key), Some(Entry::Done { at_ms, .. }) if *at_ms == at)
        {
            self.entries.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(id: i64) -> AttemptRef {
        AttemptRef {
            id,
            handle: Some(format!("h{id}")),
        }
    }

    #[test]
    fn work_runs_once_and_later_deliveries_get_its_result() {
        let mut e = Effects::default();
        assert_eq!(e.begin("7:0:1", &a(100), 0), Effect::Run);
        assert_eq!(e.begin("7:0:1", &a(101), 1), Effect::Joined(100));
        assert_eq!(e.begin("7:1:1", &a(102), 1), Effect::Run, "another shard");
        let joined = e.finish("7:0:1", &Some(Ok(serde_json::json!(42))), 2);
        assert_eq!(joined, [a(101)]);
        match e.begin("7:0:1", &a(103), 3) {
            Effect::Done(r) => {
                assert_eq!(r.outcome, Outcome::Succeeded);
                assert_eq!(r.output, Some(serde_json::json!(42)));
            }
            other => panic!("{other:?}"),
        }
        // Forgotten after KEEP_MS.
        assert_eq!(e.begin("7:0:1", &a(104), 3 + KEEP_MS), Effect::Run);
    }

    #[test]
    fn a_cancelled_or_abandoned_run_is_not_remembered() {
        let mut e = Effects::default();
        assert_eq!(e.begin("k", &a(1), 0), Effect::Run);
        e.finish("k", &None, 1);
        assert_eq!(e.begin("k", &a(2), 2), Effect::Run);
        e.abandon("k");
        assert_eq!(e.begin("k", &a(3), 3), Effect::Run);
        // Joined while its start failed: abandoned all the same.
        assert_eq!(e.begin("k", &a(4), 4), Effect::Joined(3));
        e.abandon("k");
        assert_eq!(e.begin("k", &a(5), 5), Effect::Run);
    }

    #[test]
    fn at_most_max_done_keys_are_kept() {
        let mut e = Effects::default();
        for i in 0..MAX_DONE + 10 {
            let key = format!("{i}:0:1");
            e.begin(&key, &a(i as i64), 0);
            e.finish(&key, &Some(Ok(Value::Null)), 0);
        }
        assert_eq!(e.entries.len(), MAX_DONE);
        assert_eq!(
            e.begin("0:0:1", &a(1), 0),
            Effect::Run,
            "the oldest went first"
        );
    }
}
