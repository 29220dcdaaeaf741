//! `ClusterStore` on the three backends: nodes, the leader lease, partitions.

/// Implements it for one backend's store; see `super` for the arguments.
macro_rules! cluster_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            fn from_pool(pool: Db<$db>) -> Self {
                Self {
                    pool,
                    q: Arc::new(Queries::for_backend($backend)),
                    events: Arc::new(FollowUpEvents::default()),
                }
            }

            async fn cluster_meta_get(&self) -> Result<Option<ClusterMeta>, Error> {
                let row = sqlx::query_as::<$db, (i64, i64)>(sql(&self.q.cluster.cluster_meta_get))
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.map(|(partition_count, created_at_ms)| ClusterMeta {
                    partition_count,
                    created_at_ms,
                }))
            }
        }

        #[async_trait]
        impl ClusterTx for StoreTx<'_, $store, Tx<$db>> {
            async fn lock_leader(&mut self) -> Result<LeaderRecord, Error> {
                Ok(
                    sqlx::query_as::<$db, LeaderRecord>(sql(&self.store.q.cluster.leader_lock))
                        .fetch_one(&mut **self.tx)
                        .await?,
                )
            }

            async fn leader(&mut self) -> Result<LeaderRecord, Error> {
                Ok(
                    sqlx::query_as::<$db, LeaderRecord>(sql(&self.store.q.cluster.leader_get))
                        .fetch_one(&mut **self.tx)
                        .await?,
                )
            }

            async fn renew_lease(&mut self, node_id: &str, lease_ms: i64) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.cluster.leader_renew))
                    .bind(lease_ms)
                    .bind(node_id)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn take_lease(
                &mut self,
                node_id: &str,
                term: i64,
                lease_ms: i64,
            ) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.cluster.leader_take))
                    .bind(node_id)
                    .bind(term)
                    .bind(lease_ms)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn release_lease(&mut self, node_id: &str) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.cluster.leader_release))
                    .bind(node_id)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn release_partitions(&mut self, node_id: &str) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.cluster.partitions_release_owned))
                    .bind(node_id)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn cancel_hand_offs_to(&mut self, node_id: &str) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.cluster.partitions_cancel_pending_to))
                    .bind(node_id)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn update_node(&mut self, node: &NodeRegistration) -> Result<bool, Error> {
                let updated =
                    sqlx::query::<$db>(sql(&self.store.q.cluster.node_update_registration))
                        .bind(&node.incarnation)
                        .bind(&node.address)
                        .bind(&node.version)
                        .bind(&node.node_id)
                        .execute(&mut **self.tx)
                        .await?
                        .rows_affected();
                Ok(updated != 0)
            }

            async fn insert_node(&mut self, node: &NodeRegistration) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.cluster.node_insert))
                    .bind(&node.node_id)
                    .bind(&node.incarnation)
                    .bind(&node.address)
                    .bind(&node.version)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn mark_node_left(
                &mut self,
                node_id: &str,
                incarnation: &str,
            ) -> Result<bool, Error> {
                let left = sqlx::query::<$db>(sql(&self.store.q.cluster.node_mark_left))
                    .bind(node_id)
                    .bind(incarnation)
                    .execute(&mut **self.tx)
                    .await?
                    .rows_affected();
                Ok(left != 0)
            }

            async fn apply_partition_change(
                &mut self,
                change: &PartitionChange,
            ) -> Result<u64, Error> {
                let q = &self.store.q;
                let query = match change {
                    PartitionChange::Assign {
                        partition_id,
                        expected_epoch,
                        owner,
                    } => sqlx::query::<$db>(sql(&q.cluster.partition_assign))
                        .bind(owner.as_str())
                        .bind(*partition_id)
                        .bind(*expected_epoch),
                    PartitionChange::RequestHandOff {
                        partition_id,
                        expected_epoch,
                        to,
                    } => sqlx::query::<$db>(sql(&q.cluster.partition_request_hand_off))
                        .bind(to.as_str())
                        .bind(*partition_id)
                        .bind(*expected_epoch),
                    PartitionChange::CancelHandOff {
                        partition_id,
                        expected_epoch,
                    } => sqlx::query::<$db>(sql(&q.cluster.partition_cancel_hand_off))
                        .bind(*partition_id)
                        .bind(*expected_epoch),
                };
                Ok(query.execute(&mut **self.tx).await?.rows_affected())
            }
        }

        #[async_trait]
        impl ClusterStore for $store {
            fn backend(&self) -> Backend {
                $backend
            }

            async fn migrate(&self) -> Result<(), Error> {
                self.migrate_schema().await
            }

            async fn schema_version(&self) -> Result<SchemaVersion, Error> {
                // sqlx's own table, the same on every backend; a database without it has no
                // schema yet.
                let applied = sqlx::query_scalar::<$db, Option<i64>>(
                    "SELECT MAX(version) FROM _sqlx_migrations WHERE success",
                )
                .fetch_one(&self.pool)
                .await;
                let applied = match applied {
                    Ok(version) => version,
                    Err(sqlx::Error::Database(_)) => None,
                    Err(other) => return Err(other.into()),
                };
                Ok(SchemaVersion {
                    applied,
                    wanted: Self::migrator()
                        .iter()
                        .map(|m| m.version)
                        .max()
                        .unwrap_or(0),
                })
            }

            async fn now_ms(&self) -> Result<i64, Error> {
                let (now,) = sqlx::query_as::<$db, (i64,)>(sql(&self.q.cluster.now))
                    .fetch_one(&self.pool)
                    .await?;
                Ok(now)
            }

            async fn cluster_init(&self, partition_count: i64) -> Result<ClusterMeta, Error> {
                // Nodes starting together race to initialise; on Galera the loser learns it at
                // commit, as a certification failure (a deadlock), and tries again to find the
                // winner's row.
                retry_transient(|| async {
                    if let Some(meta) = self.cluster_meta_get().await? {
                        return Ok(meta);
                    }
                    let mut tx = self.begin_write().await?;
                    let inserted = sqlx::query::<$db>(sql(&self.q.cluster.cluster_meta_insert))
                        .bind(partition_count)
                        .execute(&mut *tx)
                        .await
                        .map_err(Error::from);
                    match inserted {
                        Ok(_) => {
                            for partition_id in 0..partition_count {
                                sqlx::query::<$db>(sql(&self.q.cluster.partition_insert))
                                    .bind(partition_id)
                                    .execute(&mut *tx)
                                    .await?;
                            }
                            tx.commit().await?;
                        }
                        // Another node initialised the cluster at the same moment: use theirs.
                        Err(err) if err.is_unique_violation() => tx.rollback().await?,
                        Err(err) => return Err(err),
                    }
                    self.cluster_meta_get().await?.ok_or(Error::NotInitialised)
                })
                .await
            }

            async fn node_key(&self, name: &str, candidate: &str) -> Result<String, Error> {
                retry_transient(|| async {
                    let inserted = sqlx::query::<$db>(sql(&self.q.cluster.node_key_insert))
                        .bind(name)
                        .bind(candidate)
                        .bind(name)
                        .execute(&self.pool)
                        .await
                        .map_err(Error::from);
                    match inserted {
                        // Another node stored its own at the same moment: theirs is read.
                        Ok(_) => {}
                        Err(err) if err.is_unique_violation() => {}
                        Err(err) => return Err(err),
                    }
                    sqlx::query_scalar::<$db, String>(sql(&self.q.cluster.node_key_get))
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?
                        .ok_or_else(|| Error::Unreadable {
                            what: format!("the nodes' key {name}"),
                            reason: "it was stored and then not found".to_owned(),
                        })
                })
                .await
            }

            async fn node_register(&self, node: &NodeRegistration) -> Result<(), Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    super::rules::cluster::register_node(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        node,
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(())
                })
                .await
            }

            async fn node_leave(&self, node_id: &str, incarnation: &str) -> Result<(), Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    super::rules::cluster::leave(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        node_id,
                        incarnation,
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(())
                })
                .await
            }

            async fn partitions_apply(
                &self,
                fence: &LeaderFence,
                changes: &[PartitionChange],
            ) -> Result<u64, Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let applied = super::rules::cluster::apply_partition_changes(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        fence,
                        changes,
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(applied)
                })
                .await
            }
            async fn node_heartbeat(&self, node_id: &str, incarnation: &str) -> Result<(), Error> {
                let beat = sqlx::query::<$db>(sql(&self.q.cluster.node_heartbeat))
                    .bind(node_id)
                    .bind(incarnation)
                    .execute(&self.pool)
                    .await?;
                if beat.rows_affected() == 0 {
                    return Err(Error::IncarnationLost {
                        node_id: node_id.to_owned(),
                    });
                }
                Ok(())
            }

            async fn nodes_list(&self) -> Result<NodeList, Error> {
                let nodes = sqlx::query_as::<$db, NodeRecord>(sql(&self.q.cluster.nodes_list))
                    .fetch_all(&self.pool)
                    .await?;
                // Read after the rows, so a node is never judged by a clock older than its beat.
                let now_ms = self.now_ms().await?;
                Ok(NodeList { nodes, now_ms })
            }

            async fn leader_get(&self) -> Result<LeaderRecord, Error> {
                Ok(
                    sqlx::query_as::<$db, LeaderRecord>(sql(&self.q.cluster.leader_get))
                        .fetch_one(&self.pool)
                        .await?,
                )
            }

            async fn leader_try_acquire(
                &self,
                node_id: &str,
                lease_ms: i64,
            ) -> Result<LeaderRecord, Error> {
                let mut tx = self.begin_write().await?;
                let after = super::rules::cluster::acquire_lease(
                    &mut StoreTx {
                        store: self,
                        tx: &mut tx,
                    },
                    node_id,
                    lease_ms,
                )
                .await?;
                tx.commit().await?;
                Ok(after)
            }

            async fn partitions_list(&self) -> Result<Vec<PartitionRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, PartitionRecord>(sql(&self.q.cluster.partitions_list))
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn partitions_owned(&self, node_id: &str) -> Result<Vec<PartitionRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, PartitionRecord>(sql(&self.q.cluster.partitions_owned))
                        .bind(node_id)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn partition_hand_off(
                &self,
                node_id: &str,
                partition: &PartitionRecord,
            ) -> Result<bool, Error> {
                let moved = sqlx::query::<$db>(sql(&self.q.cluster.partition_hand_off))
                    .bind(partition.partition_id)
                    .bind(node_id)
                    .bind(partition.epoch)
                    .execute(&self.pool)
                    .await?;
                Ok(moved.rows_affected() == 1)
            }
        }
    };
}

pub(super) use cluster_store;
