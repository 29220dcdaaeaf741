//! `GrantStore` on the three backends.

/// Implements it for one backend's store.
macro_rules! grant_store {
    ($store:ident, $db:ty) => {
        #[async_trait]
        impl GrantStore for $store {
            async fn grants_all(&self) -> Result<Vec<GrantRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, GrantRecord>(sql(&self.q.tenancy.grants_all))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn grant_insert(
                &self,
                grant: &GrantWrite,
                audit: Option<&AuditWrite>,
            ) -> Result<GrantRecord, Error> {
                let mut tx = self.begin_write().await?;
                let inserted = sqlx::query::<$db>(sql(&self.q.tenancy.grant_insert))
                    .bind(grant.namespace_id)
                    .bind(&grant.group_name)
                    .bind(&grant.role)
                    .bind(&grant.created_by)
                    .execute(&mut *tx)
                    .await;
                Error::conflict_on_unique(inserted, || {
                    format!("a role of group {:?}", grant.group_name)
                })?;
                let record =
                    sqlx::query_as::<$db, GrantRecord>(sql(&self.q.tenancy.grant_by_group))
                        .bind(grant.namespace_id)
                        .bind(&grant.group_name)
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or(Error::NotInitialised)?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn grant_delete(
                &self,
                grant_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let mut tx = self.begin_write().await?;
                let done = sqlx::query::<$db>(sql(&self.q.tenancy.grant_delete))
                    .bind(grant_id)
                    .execute(&mut *tx)
                    .await?;
                self.commit_changed(tx, done.rows_affected() > 0, audit)
                    .await
            }
        }
    };
}

pub(super) use grant_store;
