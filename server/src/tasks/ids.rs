//! Task ids, handed out by each node from blocks it takes from the database (`id_blocks`): a
//! batch of 10,000 tasks costs one short transaction at most, not one generated key per row,
//! and the node knows each task's id, and so its partition, before inserting it.

use tokio::sync::Mutex;

use crate::store::{self, TaskStore};

/// Ids taken at once when the block runs out (more when a batch needs more).
const BLOCK: i64 = 65_536;

/// This node's current block of task ids: `next..end`.
#[derive(Debug, Default)]
pub struct TaskIds {
    block: Mutex<(i64, i64)>,
}

impl TaskIds {
    /// `count` fresh ids, in ascending order.
    pub async fn take(
        &self,
        store: &dyn TaskStore,
        count: usize,
    ) -> Result<Vec<i64>, store::Error> {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        let mut block = self.block.lock().await;
        let (mut next, mut end) = *block;
        let mut ids = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        while (ids.len() as i64) < count {
            if next >= end {
                let want = BLOCK.max(count - ids.len() as i64);
                next = store.task_ids_take(want).await?;
                end = next + want;
            }
            let n = (end - next).min(count - ids.len() as i64);
            ids.extend(next..next + n);
            next += n;
        }
        *block = (next, end);
        Ok(ids)
    }
}
