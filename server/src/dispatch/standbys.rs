//! Nothing is delivered before the standbys have it (`database.wait_for_standbys`, on by
//! default).
//!
//! With asynchronous streaming replication a PostgreSQL primary commits without waiting for
//! its standbys. If it dies and a standby that had not yet received a claim is promoted, the
//! claim is gone: its job has not fired that instant as far as the new primary knows, and
//! whichever node owns it claims the instant again. Had the run been delivered, the instant
//! would run twice (the failover scenario measured it). So a delivery pass first waits until
//! every standby has flushed the log up to where it ended when the pass read its due
//! attempts, which holds every claim and start before them. Runs are claimed a second ahead
//! of their instant, so on a healthy standby the wait costs nothing; a standby that lags or
//! is down holds deliveries back (as a synchronous standby holds commits back), and the node
//! says so. A run lost with its primary before it was delivered is claimed again on the new
//! one and runs once, late.

use std::time::{Duration, Instant};

use tracing::warn;

use super::Dispatcher;
use crate::store;

/// How long one delivery pass waits for the standbys before it gives up its turn (the
/// attempts stay due and the next pass reads them again).
const WAIT_PER_PASS: Duration = Duration::from_millis(500);
/// How often the standbys are asked while waiting: at first (a healthy standby flushes within
/// milliseconds), and at most, for one that lags.
const POLL_FIRST: Duration = Duration::from_millis(2);
const POLL_MOST: Duration = Duration::from_millis(50);
/// How often a node that keeps waiting says so.
const SAY_EVERY: Duration = Duration::from_secs(10);

/// Since when deliveries have waited, and when that was last said.
#[derive(Debug, Default)]
pub(super) struct StandbyWait {
    since: Option<Instant>,
    said: Option<Instant>,
}

impl Dispatcher {
    /// Whether every standby has what was committed before now; waits up to `WAIT_PER_PASS`.
    pub(super) async fn standbys_have_it(&self) -> Result<bool, store::Error> {
        if !self.settings.wait_for_standbys {
            return Ok(true);
        }
        let Some(position) = self.store.log_position().await? else {
            return Ok(true);
        };
        let began = Instant::now();
        let mut poll = POLL_FIRST;
        loop {
            let behind = self.store.standbys_behind(&position).await?;
            if behind.is_empty() {
                self.note_standby_wait(None);
                return Ok(true);
            }
            if began.elapsed() >= WAIT_PER_PASS {
                self.note_standby_wait(Some(&behind));
                return Ok(false);
            }
            tokio::time::sleep(poll).await;
            poll = (poll * 2).min(POLL_MOST);
        }
    }

    fn note_standby_wait(&self, behind: Option<&[String]>) {
        let Ok(mut wait) = self.standby_wait.lock() else {
            return;
        };
        let Some(behind) = behind else {
            *wait = StandbyWait::default();
            self.view.set_standby_wait(None);
            return;
        };
        let now = Instant::now();
        let since = *wait.since.get_or_insert(now);
        self.view
            .set_standby_wait(Some(tokio::time::Instant::from_std(since)));
        if wait
            .said
            .is_none_or(|said| now.duration_since(said) >= SAY_EVERY)
        {
            wait.said = Some(now);
            warn!(
                standbys = ?behind,
                waited_s = now.duration_since(since).as_secs(),
                "deliveries wait until these standbys have the runs (a failover to one without \
                 them would fire those instants again); bring them back, drop the replication \
                 slot of one that is gone, or set database.wait_for_standbys = false"
            );
        }
    }
}
