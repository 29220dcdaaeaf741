//! After a PostgreSQL failover, the scheduler reads every job again from the new primary.
//!
//! A standby promoted while it lagged (asynchronous replication) lacks the claims the old
//! primary committed last. The scheduler remembers having claimed those instants and would go
//! on from the next ones; claimed there, the next instants would advance each job past the lost
//! ones, which would then never run. Their runs were never delivered (the dispatcher waits for
//! the standbys, `dispatch/standbys.rs`), so they are owed: on a new timeline the scheduler
//! forgets what it holds and loads its partitions again, and the jobs' last fired instants as
//! the new primary has them bring the lost instants back as catch-ups, under each job's
//! misfire policy.

use tracing::warn;

use super::Scheduler;
use crate::store;

impl Scheduler {
    /// Reads the database's timeline; on a new one, forgets every partition so that
    /// `follow_cluster` loads them again, and says so.
    pub(super) async fn follow_timeline(&mut self) -> Result<bool, store::Error> {
        let Some(timeline) = self.store.standbys.timeline().await? else {
            return Ok(false);
        };
        match self.timeline.replace(timeline.clone()) {
            Some(known) if known != timeline => {
                warn!(
                    from = %known,
                    to = %timeline,
                    "the database failed over to a new timeline; reading every job again from it"
                );
                let held: Vec<i64> = self.partitions.keys().copied().collect();
                for partition in held {
                    self.forget_partition(partition);
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
