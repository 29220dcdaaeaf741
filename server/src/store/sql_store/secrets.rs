//! `SecretStore` on the three backends.

/// Implements it for one backend's store.
macro_rules! secret_store {
    ($store:ident, $db:ty) => {
        #[async_trait]
        impl SecretStore for $store {
            async fn secrets_list(
                &self,
                namespace: NamespaceId,
            ) -> Result<Vec<SecretRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, SecretRecord>(sql(&self.q.tenancy.secrets_list))
                        .bind(namespace)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn secret_put(
                &self,
                secret: &SecretWrite,
                audit: Option<&AuditWrite>,
            ) -> Result<(SecretRecord, bool), Error> {
                let mut tx = self.begin_write().await?;
                let updated = sqlx::query::<$db>(sql(&self.q.tenancy.secret_update))
                    .bind(&secret.sealed)
                    .bind(&secret.key_id)
                    .bind(&secret.updated_by)
                    .bind(secret.namespace_id)
                    .bind(&secret.name)
                    .execute(&mut *tx)
                    .await?;
                let created = updated.rows_affected() == 0;
                if created {
                    let inserted = sqlx::query::<$db>(sql(&self.q.tenancy.secret_insert))
                        .bind(secret.namespace_id)
                        .bind(&secret.name)
                        .bind(&secret.sealed)
                        .bind(&secret.key_id)
                        .bind(&secret.updated_by)
                        .execute(&mut *tx)
                        .await;
                    Error::conflict_on_unique(inserted, || {
                        format!("secret {:?}, written at the same time", secret.name)
                    })?;
                }
                let record =
                    sqlx::query_as::<$db, SecretRecord>(sql(&self.q.tenancy.secret_by_name))
                        .bind(secret.namespace_id)
                        .bind(&secret.name)
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or(Error::NotInitialised)?;
                // The event was drafted before the store knew whether the name was new.
                let event = audit.map(|event| AuditWrite {
                    status: if created { 201 } else { event.status },
                    ..event.clone()
                });
                self.audit_in(&mut tx, event.as_ref()).await?;
                tx.commit().await?;
                Ok((record, created))
            }

            async fn secret_delete(
                &self,
                namespace: NamespaceId,
                name: &str,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let mut tx = self.begin_write().await?;
                let done = sqlx::query::<$db>(sql(&self.q.tenancy.secret_delete))
                    .bind(namespace)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                self.commit_changed(tx, done.rows_affected() > 0, audit)
                    .await
            }

            async fn secrets_under_other_keys(
                &self,
                key_id: &str,
                after: i64,
                limit: i64,
            ) -> Result<Vec<SecretRecord>, Error> {
                Ok(sqlx::query_as::<$db, SecretRecord>(sql(&self
                    .q
                    .tenancy
                    .secrets_under_other_keys))
                .bind(key_id)
                .bind(after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn secret_reseal(
                &self,
                secret_id: i64,
                version: i64,
                sealed: &str,
                key_id: &str,
            ) -> Result<bool, Error> {
                let done = sqlx::query::<$db>(sql(&self.q.tenancy.secret_reseal))
                    .bind(sealed)
                    .bind(key_id)
                    .bind(secret_id)
                    .bind(version)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

pub(super) use secret_store;
