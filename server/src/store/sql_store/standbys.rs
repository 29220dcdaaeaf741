//! `StandbyStore`: PostgreSQL's standbys, from `pg_replication_slots` and
//! `pg_stat_replication`; nothing to wait for on MySQL and SQLite.
//!
//! A standby counts when it streams from this server or holds a physical replication slot on
//! it (Patroni keeps one per member, so a member that is down still counts): it could be
//! promoted. A logical slot's consumer cannot, and is left out. Its position is what it has
//! flushed: `flush_lsn` while it streams (read by superusers and `pg_monitor` members; for
//! others it is NULL, and only the slots say anything), else its slot's `restart_lsn`.

use super::*;

/// Standbys behind `$1`, by name: a slot's name, or the streaming standby's
/// `application_name` (`cluster_name` or `walreceiver` by default).
const POSTGRES_STANDBYS_BEHIND: &str = "\
    SELECT slot_name FROM pg_replication_slots \
    WHERE slot_type = 'physical' AND (restart_lsn IS NULL OR restart_lsn < $1::pg_lsn) \
    UNION ALL \
    SELECT application_name FROM pg_stat_replication r \
    WHERE r.flush_lsn < $1::pg_lsn \
    AND NOT EXISTS (SELECT 1 FROM pg_replication_slots s WHERE s.active_pid = r.pid)";

#[async_trait]
impl StandbyStore for PostgresStore {
    async fn log_position(&self) -> Result<Option<String>, Error> {
        let (position,): (String,) = sqlx::query_as("SELECT pg_current_wal_lsn()::text")
            .fetch_one(&self.pool)
            .await?;
        Ok(Some(position))
    }

    async fn timeline(&self) -> Result<Option<String>, Error> {
        // The first eight hex digits of a WAL file's name are its timeline.
        let (timeline,): (String,) =
            sqlx::query_as("SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")
                .fetch_one(&self.pool)
                .await?;
        Ok(Some(timeline))
    }

    async fn standbys_behind(&self, position: &str) -> Result<Vec<String>, Error> {
        let behind: Vec<(Option<String>,)> = sqlx::query_as(POSTGRES_STANDBYS_BEHIND)
            .bind(position)
            .fetch_all(&self.pool)
            .await?;
        Ok(behind
            .into_iter()
            .map(|(name,)| name.unwrap_or_else(|| "a standby".to_owned()))
            .collect())
    }
}

macro_rules! no_standbys {
    ($store:ident) => {
        #[async_trait]
        impl StandbyStore for $store {
            async fn log_position(&self) -> Result<Option<String>, Error> {
                Ok(None)
            }

            async fn standbys_behind(&self, _position: &str) -> Result<Vec<String>, Error> {
                Ok(Vec::new())
            }

            async fn timeline(&self) -> Result<Option<String>, Error> {
                Ok(None)
            }
        }
    };
}

no_standbys!(MysqlStore);
no_standbys!(SqliteStore);
