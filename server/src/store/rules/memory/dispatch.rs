//! The start pass's and the plain-success path's guarded updates over the in-memory tables.

use async_trait::async_trait;

use super::MemoryDb;
use crate::store::dispatch_records::attempt_state;
use crate::store::error::Error;
use crate::store::job_records::run_state;
use crate::store::rules::attempt_end::PlainSuccessTx;
use crate::store::rules::run_start::RunStartTx;

#[async_trait]
impl RunStartTx for MemoryDb {
    async fn start_pending_runs(&mut self, run_ids: &[i64]) -> Result<Vec<i64>, Error> {
        let mut moved = Vec::new();
        for run in &mut self.runs {
            if run_ids.contains(&run.run_id) && run.state == run_state::PENDING {
                run.state = run_state::RUNNING.to_owned();
                run.started = true;
                moved.push(run.run_id);
            }
        }
        Ok(moved)
    }
}

#[async_trait]
impl PlainSuccessTx for MemoryDb {
    async fn succeed_live_attempts(
        &mut self,
        executor_id: &str,
        attempt_ids: &[i64],
    ) -> Result<Vec<i64>, Error> {
        let mut runs = Vec::new();
        for attempt in &mut self.attempts {
            let live = matches!(
                attempt.state.as_str(),
                attempt_state::PENDING | attempt_state::RUNNING
            );
            if live && attempt_ids.contains(&attempt.attempt_id) {
                attempt.state = attempt_state::SUCCEEDED.to_owned();
                attempt.executor_id = Some(executor_id.to_owned());
                runs.push(attempt.run_id);
            }
        }
        Ok(runs)
    }

    async fn succeed_runs(&mut self, run_ids: &[i64]) -> Result<u64, Error> {
        let now = self.now_ms;
        let mut ended = 0;
        for run in &mut self.runs {
            if run_ids.contains(&run.run_id) && run_state::UNFINISHED.contains(&run.state.as_str())
            {
                run.state = run_state::SUCCEEDED.to_owned();
                run.finished_at_ms = Some(now);
                ended += 1;
            }
        }
        Ok(ended)
    }
}
