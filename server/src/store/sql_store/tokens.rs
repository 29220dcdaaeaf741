//! `TokenStore` on the three backends.

/// Implements it for one backend's store.
macro_rules! token_store {
    ($store:ident, $db:ty) => {
        #[async_trait]
        impl TokenStore for $store {
            async fn tokens_all(&self) -> Result<Vec<TokenRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, TokenRecord>(sql(&self.q.tenancy.tokens_all))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn token_insert(
                &self,
                token: &TokenWrite,
                audit: Option<&AuditWrite>,
            ) -> Result<TokenRecord, Error> {
                let mut tx = self.begin_write().await?;
                let inserted = sqlx::query::<$db>(sql(&self.q.tenancy.token_insert))
                    .bind(token.namespace_id)
                    .bind(&token.name)
                    .bind(&token.role)
                    .bind(&token.secret_sha256)
                    .bind(&token.display_prefix)
                    .bind(&token.created_by)
                    .bind(token.expires_at_ms)
                    .execute(&mut *tx)
                    .await;
                Error::conflict_on_unique(inserted, || format!("token name {:?}", token.name))?;
                let record =
                    sqlx::query_as::<$db, TokenRecord>(sql(&self.q.tenancy.token_by_secret))
                        .bind(&token.secret_sha256)
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or(Error::NotInitialised)?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn token_delete(
                &self,
                token_id: i64,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let mut tx = self.begin_write().await?;
                let done = sqlx::query::<$db>(sql(&self.q.tenancy.token_delete))
                    .bind(token_id)
                    .execute(&mut *tx)
                    .await?;
                self.commit_changed(tx, done.rows_affected() > 0, audit)
                    .await
            }

            async fn token_used(&self, token_id: i64, at_ms: i64) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.q.tenancy.token_used))
                    .bind(at_ms)
                    .bind(token_id)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }
        }
    };
}

pub(super) use token_store;
