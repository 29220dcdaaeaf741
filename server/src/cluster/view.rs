//! What this node may act on right now: its membership, its leadership and its partitions,
//! each valid only until a deadline on the monotonic clock.
//!
//! Architecture invariant: a deadline is always the instant the renewing request was sent, plus
//! the lease, minus a safety margin. The database measured the lease from a later instant, so
//! the node stops acting before anyone else may take over (self-fencing), even if it never hears
//! back.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::time::Instant;

use crate::store::LeaderFence;

/// A partition this node owns, with the epoch that fences its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OwnedPartition {
    pub partition_id: i64,
    pub epoch: i64,
}

#[derive(Debug, Default)]
struct ViewState {
    member_until: Option<Instant>,
    leader: Option<(i64, Instant)>,
    partitions: Vec<OwnedPartition>,
}

/// This node's current rights, shared between the coordinator (which renews them) and
/// everything that acts on them (the API, and later the timer and dispatcher).
#[derive(Debug)]
pub struct LocalView {
    node_id: String,
    state: Mutex<ViewState>,
    /// Running jobs the scheduler holds in memory (for the API and the benchmark).
    jobs_held: AtomicUsize,
    /// Since when the dispatcher's deliveries have waited for the database's standbys.
    standby_wait_since: Mutex<Option<Instant>>,
}

impl LocalView {
    pub fn new(node_id: String) -> Self {
        Self {
            node_id,
            state: Mutex::new(ViewState::default()),
            jobs_held: AtomicUsize::new(0),
            standby_wait_since: Mutex::new(None),
        }
    }

    /// The dispatcher's deliveries wait for standbys since `since`, or no longer (`None`).
    pub fn set_standby_wait(&self, since: Option<Instant>) {
        if let Ok(mut wait) = self.standby_wait_since.lock() {
            *wait = since;
        }
    }

    /// How long deliveries have waited for standbys so far; zero when they are not waiting.
    pub fn standby_wait(&self) -> std::time::Duration {
        self.standby_wait_since
            .lock()
            .ok()
            .and_then(|wait| *wait)
            .map_or(std::time::Duration::ZERO, |since| since.elapsed())
    }

    pub fn set_jobs_held(&self, count: usize) {
        self.jobs_held.store(count, Ordering::Relaxed);
    }

    pub fn jobs_held(&self) -> usize {
        self.jobs_held.load(Ordering::Relaxed)
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// True while the last successful heartbeat still covers now.
    pub fn is_member(&self) -> bool {
        let state = self.lock();
        state
            .member_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// The term this node leads with, while its lease is certainly still valid.
    pub fn leader_term(&self) -> Option<i64> {
        let state = self.lock();
        let member = state
            .member_until
            .is_some_and(|until| Instant::now() < until);
        match state.leader {
            Some((term, until)) if member && Instant::now() < until => Some(term),
            _ => None,
        }
    }

    /// The fence a leader write must carry, while this node leads.
    pub fn leader_fence(&self) -> Option<LeaderFence> {
        self.leader_term().map(|term| LeaderFence {
            node_id: self.node_id.clone(),
            term,
        })
    }

    /// The partitions this node may act on now; none once its membership has lapsed.
    pub fn owned_partitions(&self) -> Vec<OwnedPartition> {
        if !self.is_member() {
            return Vec::new();
        }
        self.lock().partitions.clone()
    }

    /// Whether this node may act on `partition_id` now.
    pub fn owns(&self, partition_id: i64) -> bool {
        self.is_member()
            && self
                .lock()
                .partitions
                .iter()
                .any(|p| p.partition_id == partition_id)
    }

    pub(super) fn renew_membership(&self, until: Instant) {
        self.lock().member_until = Some(until);
    }

    pub(super) fn set_leader(&self, leadership: Option<(i64, Instant)>) {
        self.lock().leader = leadership;
    }

    pub(super) fn set_partitions(&self, partitions: Vec<OwnedPartition>) {
        self.lock().partitions = partitions;
    }

    /// Stops acting on everything at once (on shutdown or when the node id was taken over).
    pub(super) fn revoke_all(&self) {
        *self.lock() = ViewState::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ViewState> {
        // The state is plain data with no invariant spanning fields a panic could break, so
        // a poisoned lock is still safe to use.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rights_lapse_at_their_deadline_without_any_call() {
        let view = LocalView::new("n1".into());
        let until = Instant::now() + Duration::from_secs(4);
        view.renew_membership(until);
        view.set_leader(Some((3, until)));
        view.set_partitions(vec![OwnedPartition {
            partition_id: 1,
            epoch: 2,
        }]);
        assert_eq!(view.leader_term(), Some(3));
        assert_eq!(view.owned_partitions().len(), 1);

        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(!view.is_member());
        assert_eq!(view.leader_term(), None);
        assert!(view.owned_partitions().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_ends_with_membership() {
        let view = LocalView::new("n1".into());
        let now = Instant::now();
        view.renew_membership(now + Duration::from_secs(1));
        view.set_leader(Some((1, now + Duration::from_secs(10))));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(view.leader_fence(), None);
    }
}
