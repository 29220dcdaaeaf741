//! The namespace deletion's statements on the in-memory tables (calendars and apps are not
//! modelled: they count none).

use async_trait::async_trait;

use super::MemoryDb;
use crate::states::TaskState;
use crate::store::error::Error;
use crate::store::namespace_records::{NamespaceId, NamespaceUsage};
use crate::store::rules::namespaces::NamespaceTx;

#[async_trait]
impl NamespaceTx for MemoryDb {
    async fn lock_namespace(&mut self, namespace: NamespaceId) -> Result<bool, Error> {
        Ok(self.namespaces.contains(&namespace))
    }

    async fn namespace_usage(&mut self, namespace: NamespaceId) -> Result<NamespaceUsage, Error> {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        Ok(NamespaceUsage {
            jobs: count(
                self.jobs
                    .values()
                    .filter(|j| j.namespace_id == namespace)
                    .count(),
            ),
            pending_tasks: count(
                self.tasks
                    .iter()
                    .filter(|t| t.namespace_id == namespace && t.state == TaskState::Pending)
                    .count(),
            ),
            calendars: 0,
            apps: 0,
        })
    }

    async fn delete_namespace(&mut self, namespace: NamespaceId) -> Result<(), Error> {
        self.namespaces.remove(&namespace);
        Ok(())
    }
}
