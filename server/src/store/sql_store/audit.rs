//! `AuditStore` on the three backends.

/// Implements it for one backend's store, and `audit_in`: the event of a change, written in
/// the change's own transaction by the store methods that take one.
macro_rules! audit_store {
    ($store:ident, $db:ty) => {
        impl $store {
            /// Writes `event`, when there is one, in `tx` (a change's transaction).
            async fn audit_in(
                &self,
                tx: &mut Tx<$db>,
                event: Option<&AuditWrite>,
            ) -> Result<(), Error> {
                let Some(event) = event else {
                    return Ok(());
                };
                sqlx::query::<$db>(sql(&self.q.tenancy.audit_insert))
                    .bind(event.at_ms)
                    .bind(event.namespace_id)
                    .bind(&event.actor)
                    .bind(&event.source)
                    .bind(&event.operation)
                    .bind(&event.resource)
                    .bind(&event.outcome)
                    .bind(event.status)
                    .bind(event.detail.as_deref())
                    .bind(event.changes.as_deref())
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }

            /// Commits `tx` with `audit` when its change was made (`changed`); otherwise
            /// drops it, rolling back, and answers false.
            async fn commit_changed(
                &self,
                mut tx: Tx<$db>,
                changed: bool,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                if !changed {
                    return Ok(false);
                }
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(true)
            }
        }

        #[async_trait]
        impl AuditStore for $store {
            async fn audit_insert(&self, event: &AuditWrite) -> Result<(), Error> {
                let mut tx = self.begin_write().await?;
                self.audit_in(&mut tx, Some(event)).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn audit_list(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, AuditRecord>(sql(&self.q.tenancy.audit_list))
                        .bind(filter.namespace)
                        .bind(filter.namespace)
                        .bind(filter.actor.as_deref())
                        .bind(filter.actor.as_deref())
                        .bind(filter.operation.as_deref())
                        .bind(filter.operation.as_deref())
                        .bind(filter.outcome.as_deref())
                        .bind(filter.outcome.as_deref())
                        .bind(filter.from_ms)
                        .bind(filter.from_ms)
                        .bind(filter.to_ms)
                        .bind(filter.to_ms)
                        .bind(filter.before_id)
                        .bind(filter.before_id)
                        .bind(filter.limit)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn audit_purge(&self, before_ms: i64, batch: i64) -> Result<u64, Error> {
                // The last id of the batch first, then a range delete: the same two
                // statements on every backend (PostgreSQL has no DELETE … LIMIT, MySQL no
                // LIMIT in an IN subquery).
                let upto: Option<i64> =
                    sqlx::query_scalar::<$db, Option<i64>>(sql(&self.q.tenancy.audit_purge_upto))
                        .bind(before_ms)
                        .bind(batch)
                        .fetch_one(&self.pool)
                        .await?;
                let Some(upto) = upto else {
                    return Ok(0);
                };
                let done = sqlx::query::<$db>(sql(&self.q.tenancy.audit_purge))
                    .bind(upto)
                    .bind(before_ms)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected())
            }
        }
    };
}

pub(super) use audit_store;
