//! Deleting a namespace: never `default`, and only when it holds nothing but history.

use async_trait::async_trait;

use super::super::error::Error;
use super::super::namespace_records::{NamespaceDeletion, NamespaceId, NamespaceUsage};

/// What the deletion needs of a write transaction.
#[async_trait]
pub(crate) trait NamespaceTx: Send {
    /// Locks the namespace's row; false when there is none.
    async fn lock_namespace(&mut self, namespace: NamespaceId) -> Result<bool, Error>;

    /// What the namespace holds.
    async fn namespace_usage(&mut self, namespace: NamespaceId) -> Result<NamespaceUsage, Error>;

    async fn delete_namespace(&mut self, namespace: NamespaceId) -> Result<(), Error>;
}

/// Deletes `namespace` if it may be.
pub(crate) async fn delete<T: NamespaceTx + ?Sized>(
    tx: &mut T,
    namespace: NamespaceId,
) -> Result<NamespaceDeletion, Error> {
    if namespace == NamespaceId::DEFAULT {
        return Ok(NamespaceDeletion::Default);
    }
    if !tx.lock_namespace(namespace).await? {
        return Ok(NamespaceDeletion::Missing);
    }
    let usage = tx.namespace_usage(namespace).await?;
    if !usage.is_empty() {
        return Ok(NamespaceDeletion::InUse(usage));
    }
    tx.delete_namespace(namespace).await?;
    Ok(NamespaceDeletion::Deleted)
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryDb;
    use super::super::memory::tasks::task_row;
    use super::*;
    use crate::store::task_records::TaskWrite;

    const TEAM: NamespaceId = NamespaceId(2);

    fn db_with_team() -> MemoryDb {
        let mut db = MemoryDb::default();
        db.namespaces.insert(NamespaceId::DEFAULT);
        db.namespaces.insert(TEAM);
        db
    }

    #[tokio::test]
    async fn an_empty_namespace_is_deleted_and_default_never() {
        let mut db = db_with_team();
        assert_eq!(
            delete(&mut db, NamespaceId::DEFAULT).await.unwrap(),
            NamespaceDeletion::Default
        );
        assert_eq!(
            delete(&mut db, TEAM).await.unwrap(),
            NamespaceDeletion::Deleted
        );
        assert!(!db.namespaces.contains(&TEAM));
        assert_eq!(
            delete(&mut db, TEAM).await.unwrap(),
            NamespaceDeletion::Missing
        );
        assert!(db.namespaces.contains(&NamespaceId::DEFAULT));
    }

    #[tokio::test]
    async fn a_namespace_holding_a_job_or_a_pending_task_stays() {
        let mut db = db_with_team();
        db.jobs.insert(
            4,
            super::super::memory::MemoryJob {
                namespace_id: TEAM,
                ..Default::default()
            },
        );
        let held = delete(&mut db, TEAM).await.unwrap();
        assert_eq!(
            held,
            NamespaceDeletion::InUse(NamespaceUsage {
                jobs: 1,
                ..NamespaceUsage::default()
            })
        );
        db.jobs.clear();
        db.tasks.push(task_row(&TaskWrite {
            task_id: 9,
            partition_id: 0,
            namespace_id: TEAM,
            key: None,
            app_name: "billing".to_owned(),
            handler_name: "invoice".to_owned(),
            args_json: "null".to_owned(),
            policy_json: "{}".to_owned(),
            priority: 5,
            due_at_ms: 0,
        }));
        assert!(matches!(
            delete(&mut db, TEAM).await.unwrap(),
            NamespaceDeletion::InUse(u) if u.pending_tasks == 1
        ));
        assert!(db.namespaces.contains(&TEAM), "nothing was deleted");
    }
}
