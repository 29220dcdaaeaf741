//! `AuditStore` on the three backends.

/// Implements it for one backend's store.
macro_rules! audit_store {
    ($store:ident, $db:ty) => {
        #[async_trait]
        impl AuditStore for $store {
            async fn audit_insert(&self, event: &AuditWrite) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.q.audit_insert))
                    .bind(event.at_ms)
                    .bind(event.namespace_id)
                    .bind(&event.actor)
                    .bind(&event.source)
                    .bind(&event.operation)
                    .bind(&event.resource)
                    .bind(&event.outcome)
                    .bind(event.status)
                    .bind(event.detail.as_deref())
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn audit_list(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, Error> {
                Ok(sqlx::query_as::<$db, AuditRecord>(sql(&self.q.audit_list))
                    .bind(filter.namespace)
                    .bind(filter.namespace)
                    .bind(filter.actor.as_deref())
                    .bind(filter.actor.as_deref())
                    .bind(filter.operation.as_deref())
                    .bind(filter.operation.as_deref())
                    .bind(filter.outcome.as_deref())
                    .bind(filter.outcome.as_deref())
                    .bind(filter.before_id)
                    .bind(filter.before_id)
                    .bind(filter.limit)
                    .fetch_all(&self.pool)
                    .await?)
            }
        }
    };
}

pub(super) use audit_store;
