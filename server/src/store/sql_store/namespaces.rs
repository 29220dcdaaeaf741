//! `NamespaceStore` on the three backends: the namespaces table, and the statements of a
//! namespace's deletion (the rule: `super::rules::namespaces`).

/// Implements it for one backend's store.
macro_rules! namespace_store {
    ($store:ident, $db:ty) => {
        #[async_trait]
        impl NamespaceTx for StoreTx<'_, $store, Tx<$db>> {
            async fn lock_namespace(&mut self, namespace: NamespaceId) -> Result<bool, Error> {
                Ok(
                    sqlx::query_scalar::<$db, i64>(sql(&self.store.q.tenancy.namespace_lock))
                        .bind(namespace)
                        .fetch_optional(&mut **self.tx)
                        .await?
                        .is_some(),
                )
            }

            async fn namespace_usage(
                &mut self,
                namespace: NamespaceId,
            ) -> Result<NamespaceUsage, Error> {
                let (jobs, pending_tasks, calendars, apps) =
                    sqlx::query_as::<$db, (i64, i64, i64, i64)>(sql(&self
                        .store
                        .q
                        .tenancy
                        .namespace_usage))
                    .bind(namespace)
                    .bind(namespace)
                    .bind(namespace)
                    .bind(namespace)
                    .fetch_one(&mut **self.tx)
                    .await?;
                Ok(NamespaceUsage {
                    jobs,
                    pending_tasks,
                    calendars,
                    apps,
                })
            }

            async fn delete_namespace(&mut self, namespace: NamespaceId) -> Result<(), Error> {
                // Its tokens, grants and secrets serve nothing once it is gone, and a
                // namespace of the same name made later must not inherit them.
                for query in [
                    &self.store.q.tenancy.namespace_tokens_delete,
                    &self.store.q.tenancy.namespace_grants_delete,
                    &self.store.q.tenancy.namespace_secrets_delete,
                ] {
                    sqlx::query::<$db>(sql(query))
                        .bind(namespace)
                        .execute(&mut **self.tx)
                        .await?;
                }
                sqlx::query::<$db>(sql(&self.store.q.tenancy.namespace_delete))
                    .bind(namespace)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }
        }

        #[async_trait]
        impl NamespaceStore for $store {
            async fn namespaces_list(&self) -> Result<Vec<NamespaceRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, NamespaceRecord>(sql(&self.q.tenancy.namespaces_list))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn namespace_counts(&self, namespace: NamespaceId) -> Result<(i64, i64), Error> {
                Ok(
                    sqlx::query_as::<$db, (i64, i64)>(sql(&self.q.tenancy.namespace_counts))
                        .bind(namespace)
                        .bind(namespace)
                        .fetch_one(&self.pool)
                        .await?,
                )
            }

            async fn namespaces_counts(&self) -> Result<Vec<(NamespaceId, i64, i64)>, Error> {
                let jobs =
                    sqlx::query_as::<$db, (NamespaceId, i64)>(sql(&self.q.tenancy.namespaces_jobs))
                        .fetch_all(&self.pool)
                        .await?;
                let pending = sqlx::query_as::<$db, (NamespaceId, i64)>(sql(&self
                    .q
                    .tenancy
                    .namespaces_pending_tasks))
                .fetch_all(&self.pool)
                .await?;
                let mut counts: std::collections::BTreeMap<NamespaceId, (i64, i64)> =
                    std::collections::BTreeMap::new();
                for (namespace, count) in jobs {
                    counts.entry(namespace).or_default().0 = count;
                }
                for (namespace, count) in pending {
                    counts.entry(namespace).or_default().1 = count;
                }
                Ok(counts.into_iter().map(|(n, (j, t))| (n, j, t)).collect())
            }

            async fn namespace_insert(
                &self,
                namespace: &NamespaceWrite,
                audit: Option<&AuditWrite>,
            ) -> Result<NamespaceRecord, Error> {
                let name = &namespace.name;
                let mut tx = self.begin_write().await?;
                let inserted = sqlx::query::<$db>(sql(&self.q.tenancy.namespace_insert))
                    .bind(name)
                    .bind(&namespace.description)
                    .bind(namespace.alert_webhook.as_deref())
                    .bind(namespace.quotas.max_jobs)
                    .bind(namespace.quotas.max_pending_tasks)
                    .bind(namespace.quotas.max_enqueue_per_second)
                    .execute(&mut *tx)
                    .await
                    .map_err(Error::from);
                match inserted {
                    Ok(_) => {}
                    Err(err) if err.is_unique_violation() => {
                        return Err(Error::Conflict {
                            what: format!("namespace name {name:?}"),
                        });
                    }
                    Err(err) => return Err(err),
                }
                let record =
                    sqlx::query_as::<$db, NamespaceRecord>(sql(&self.q.tenancy.namespace_by_name))
                        .bind(name)
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or(Error::NotInitialised)?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn namespace_update(
                &self,
                namespace: NamespaceId,
                write: &NamespaceWrite,
                audit: Option<&AuditWrite>,
            ) -> Result<Option<NamespaceRecord>, Error> {
                let mut tx = self.begin_write().await?;
                // Read back whatever the update counted (MySQL counts only rows it changed).
                sqlx::query::<$db>(sql(&self.q.tenancy.namespace_update))
                    .bind(&write.description)
                    .bind(write.alert_webhook.as_deref())
                    .bind(write.quotas.max_jobs)
                    .bind(write.quotas.max_pending_tasks)
                    .bind(write.quotas.max_enqueue_per_second)
                    .bind(namespace)
                    .execute(&mut *tx)
                    .await?;
                let Some(record) =
                    sqlx::query_as::<$db, NamespaceRecord>(sql(&self.q.tenancy.namespace_by_id))
                        .bind(namespace)
                        .fetch_optional(&mut *tx)
                        .await?
                else {
                    return Ok(None);
                };
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(Some(record))
            }

            async fn namespace_delete(
                &self,
                namespace: NamespaceId,
                audit: Option<&AuditWrite>,
            ) -> Result<NamespaceDeletion, Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let deletion = super::rules::namespaces::delete(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        namespace,
                    )
                    .await?;
                    if deletion == NamespaceDeletion::Deleted {
                        self.audit_in(&mut tx, audit).await?;
                    }
                    tx.commit().await?;
                    Ok(deletion)
                })
                .await
            }
        }
    };
}

pub(super) use namespace_store;
