//! Flow control's statements over the maps.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::MemoryDb;
use crate::jobs::FlowLimits;
use crate::states::RunState;
use crate::store::error::Error;
use crate::store::rules::flow::{FlowKeyRow, FlowKeySave, FlowTx};

/// The states of a run that failed for good: under a `fifo` key it holds the key.
const HOLDING: [&str; 3] = ["failed", "timed_out", "no_executor"];

/// A row of `flow_keys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryFlowKey {
    pub(crate) limits: FlowLimits,
    pub(crate) window_start_ms: i64,
    pub(crate) window_count: i64,
    pub(crate) recheck_at_ms: Option<i64>,
}

/// The keys' rows, and `runs.flow_key` by run.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryFlow {
    pub(crate) keys: BTreeMap<String, MemoryFlowKey>,
    pub(crate) run_keys: BTreeMap<i64, String>,
}

impl MemoryDb {
    fn runs_of_key(&self, key: &str) -> impl Iterator<Item = &super::MemoryRun> {
        self.runs
            .iter()
            .filter(move |r| self.flow.run_keys.get(&r.run_id).is_some_and(|k| k == key))
    }
}

#[async_trait]
impl FlowTx for MemoryDb {
    async fn lock_flow_key(
        &mut self,
        key: &str,
        limits: Option<&FlowLimits>,
    ) -> Result<Option<FlowKeyRow>, Error> {
        if let Some(limits) = limits {
            self.flow
                .keys
                .entry(key.to_owned())
                .and_modify(|row| row.limits = *limits)
                .or_insert(MemoryFlowKey {
                    limits: *limits,
                    window_start_ms: 0,
                    window_count: 0,
                    recheck_at_ms: None,
                });
        }
        Ok(self.flow.keys.get(key).map(|row| FlowKeyRow {
            limits: row.limits,
            saved: FlowKeySave {
                window_start_ms: row.window_start_ms,
                window_count: row.window_count,
                recheck_at_ms: row.recheck_at_ms,
            },
            now_ms: self.now_ms,
        }))
    }

    async fn flow_enqueue(
        &mut self,
        run_ids: &[i64],
        key: &str,
        message: &str,
    ) -> Result<u64, Error> {
        let mut moved = 0;
        for run in &mut self.runs {
            if run_ids.contains(&run.run_id)
                && run.state == RunState::Pending
                && !self.flow.run_keys.contains_key(&run.run_id)
            {
                run.state = RunState::Queued;
                run.message = Some(message.to_owned());
                self.flow.run_keys.insert(run.run_id, key.to_owned());
                moved += 1;
            }
        }
        Ok(moved)
    }

    async fn flow_in_flight(&mut self, key: &str, holding: bool) -> Result<i64, Error> {
        Ok(self
            .runs_of_key(key)
            .filter(|r| {
                matches!(r.state, RunState::Pending | RunState::Running)
                    || (holding && HOLDING.contains(&r.state.as_str()))
            })
            .count() as i64)
    }

    async fn flow_key_held_by(&mut self, run_id: i64) -> Result<Option<String>, Error> {
        let failed = self
            .runs
            .iter()
            .any(|r| r.run_id == run_id && HOLDING.contains(&r.state.as_str()));
        Ok(failed
            .then(|| self.flow.run_keys.get(&run_id).cloned())
            .flatten())
    }

    async fn flow_unhold_all(&mut self, key: &str) -> Result<(), Error> {
        let failed: Vec<i64> = self
            .runs_of_key(key)
            .filter(|r| HOLDING.contains(&r.state.as_str()))
            .map(|r| r.run_id)
            .collect();
        for run_id in failed {
            self.flow.run_keys.remove(&run_id);
        }
        Ok(())
    }

    async fn flow_take_place(&mut self, run_id: i64, key: &str) -> Result<bool, Error> {
        let current = self.flow.run_keys.get(&run_id).cloned();
        let Some(run) = self.runs.iter_mut().find(|r| {
            r.run_id == run_id
                && match current.as_deref() {
                    None => r.state == RunState::Pending,
                    Some(k) => k == key && r.state == RunState::Queued,
                }
        }) else {
            return Ok(false);
        };
        run.state = RunState::Pending;
        run.message = None;
        self.flow.run_keys.insert(run_id, key.to_owned());
        Ok(true)
    }

    async fn flow_unhold(&mut self, run_id: i64, key: &str) -> Result<bool, Error> {
        if self.flow_key_held_by(run_id).await?.as_deref() != Some(key) {
            return Ok(false);
        }
        self.flow.run_keys.remove(&run_id);
        Ok(true)
    }

    async fn flow_queued(&mut self, key: &str, limit: i64) -> Result<Vec<i64>, Error> {
        let mut queued: Vec<i64> = self
            .runs_of_key(key)
            .filter(|r| r.state == RunState::Queued)
            .map(|r| r.run_id)
            .collect();
        queued.sort_unstable();
        queued.truncate(usize::try_from(limit).unwrap_or(0));
        Ok(queued)
    }

    async fn flow_release(&mut self, run_ids: &[i64]) -> Result<(), Error> {
        for run in &mut self.runs {
            if run_ids.contains(&run.run_id) && run.state == RunState::Queued {
                run.state = RunState::Pending;
                run.message = None;
            }
        }
        Ok(())
    }

    async fn flow_drop(&mut self, run_ids: &[i64], message: &str) -> Result<Vec<i64>, Error> {
        let now = self.now_ms;
        let mut ended = Vec::new();
        for run in &mut self.runs {
            if run_ids.contains(&run.run_id) && run.state == RunState::Queued {
                run.state = RunState::Skipped;
                run.message = Some(message.to_owned());
                run.finished_at_ms = Some(now);
                ended.push(run.run_id);
            }
        }
        Ok(ended)
    }

    async fn save_flow_key(&mut self, key: &str, save: &FlowKeySave) -> Result<(), Error> {
        if let Some(row) = self.flow.keys.get_mut(key) {
            row.window_start_ms = save.window_start_ms;
            row.window_count = save.window_count;
            row.recheck_at_ms = save.recheck_at_ms;
        }
        Ok(())
    }
}
