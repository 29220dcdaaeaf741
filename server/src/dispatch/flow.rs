//! Flow control in the start pass: a pending run of a job with a `flow` policy is put in line
//! under its key before it starts (`store::FlowStore`), and starts in the same pass when the
//! key has room; the keys whose queued runs wait on a rate window (or on an end that admitted
//! nothing) are admitted again by a pass of their own.

use std::collections::HashSet;

use super::Dispatcher;
use crate::states::RunState;
use crate::store::{self, Admitted, JobRecord, RunInLine, RunRecord};

/// How often keys whose queued runs wait are looked at again: the rate windows' resolution.
pub(super) const FLOW_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Most keys one recheck admits; more wait for the next.
const RECHECK_KEYS: i64 = 200;

/// A pending run's place before it starts.
pub(super) enum FlowPlace {
    /// No flow policy, or already admitted under its key: it starts as any run.
    Free,
    /// It goes in line under its key first.
    InLine(RunInLine),
}

impl Dispatcher {
    /// Where `run` of `job` stands: a run already admitted (its key set) or of a job without
    /// `flow` is free to start; an error when its key cannot be read from its arguments (a
    /// workflow's: its params).
    pub(super) fn flow_place(run: &RunRecord, job: &JobRecord) -> Result<FlowPlace, String> {
        if run.flow_key.is_some() {
            return Ok(FlowPlace::Free);
        }
        let Some(flow) = job.policy().ok().and_then(|p| p.flow.as_ref()) else {
            return Ok(FlowPlace::Free);
        };
        let args = job.args().map_err(|err| err.to_string())?;
        Ok(FlowPlace::InLine(RunInLine {
            run_id: run.run_id,
            key: flow.key_of(run.namespace_id.0, &args)?,
            limits: flow.limits(),
        }))
    }

    /// Puts `lining` in line; those of them that may start at once, with their keys.
    pub(super) async fn put_in_line(
        &self,
        lining: Vec<(RunRecord, RunInLine)>,
    ) -> Result<Vec<RunRecord>, store::Error> {
        if lining.is_empty() {
            return Ok(Vec::new());
        }
        let lines: Vec<RunInLine> = lining.iter().map(|(_, line)| line.clone()).collect();
        let admitted = self.store.runs_put_in_line(&lines).await?;
        let released: HashSet<i64> = admitted.released.iter().copied().collect();
        self.tell_dropped(&admitted, &lining);
        let mine: HashSet<i64> = lining.iter().map(|(run, _)| run.run_id).collect();
        if !released.is_subset(&mine) {
            // Runs that waited in line may start: their owners' passes take them.
            self.wake.notify_one();
        }
        Ok(lining
            .into_iter()
            .filter(|(run, _)| released.contains(&run.run_id))
            .map(|(run, line)| RunRecord {
                flow_key: Some(line.key),
                ..run
            })
            .collect())
    }

    /// Admits the keys whose row says to look again; how many runs it let start.
    pub(super) async fn flow_recheck(&self) -> Result<usize, store::Error> {
        let admitted = self.store.flow_keys_admit_due(RECHECK_KEYS).await?;
        if !admitted.released.is_empty() {
            self.wake.notify_one();
        }
        Ok(admitted.released.len())
    }

    /// Counts the runs of this pass that their full key dropped, as any run's end.
    fn tell_dropped(&self, admitted: &Admitted, lining: &[(RunRecord, RunInLine)]) {
        for (run_id, why) in &admitted.dropped {
            if let Some((run, _)) = lining.iter().find(|(run, _)| run.run_id == *run_id) {
                self.observer.run_ended(
                    run.run_id,
                    run.job_id,
                    Some(run.namespace_id),
                    RunState::Skipped,
                    Some(why),
                );
            }
        }
    }
}
