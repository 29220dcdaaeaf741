//! The SQL of every query, written once, and its rendering for each backend.
//!
//! Templates use `?` for parameters, `{now}` for the database clock in epoch milliseconds and
//! `{for_update}` for a row lock. Only these differ between the backends we support; anything
//! that differs more gets its own template per backend. The queries are in a file per concern
//! (`cluster.rs`, `jobs.rs`, …), each a struct of [`Queries`]; a store reads them as
//! `q.<concern>.<query>`.

use std::sync::Arc;

use super::Backend;

/// Backend-specific fragments.
#[derive(Debug, Clone, Copy)]
struct Dialect {
    now_ms: &'static str,
    for_update: &'static str,
    /// MySQL needs a table in `SELECT … WHERE`; the others need none.
    from_dual: &'static str,
    numbered_params: bool,
    /// What makes an `INSERT` into `runs` skip a row whose (job, instant) is taken.
    ignore_duplicate_run: &'static str,
    /// The type a `CAST` to a 64-bit integer names (`SUM` is `DECIMAL` on MySQL).
    bigint: &'static str,
    /// What makes an `INSERT` into `flow_keys` replace the limits of a key that has a row.
    upsert_flow_key: &'static str,
}

/// `{upsert_flow_key}` where the new row is `excluded` (PostgreSQL, SQLite).
const UPSERT_FLOW_KEY_EXCLUDED: &str = "ON CONFLICT (flow_key) DO UPDATE SET \
    max_in_flight = excluded.max_in_flight, rate_limit = excluded.rate_limit, \
    rate_per_ms = excluded.rate_per_ms, drop_when_full = excluded.drop_when_full, \
    hold_failed = excluded.hold_failed, updated_at_ms = excluded.updated_at_ms";

/// PostgreSQL's `{now}`, as a literal for the statements written for PostgreSQL alone
/// (`sql_store/bulk.rs`).
macro_rules! postgres_now {
    () => {
        "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
    };
}
pub(super) use postgres_now;

impl Dialect {
    fn of(backend: Backend) -> Self {
        match backend {
            Backend::Postgres => Dialect {
                // clock_timestamp(), not now(): a lease must be compared with the time of the
                // statement, not with the start of its transaction.
                now_ms: postgres_now!(),
                for_update: "FOR UPDATE",
                from_dual: "",
                numbered_params: true,
                ignore_duplicate_run: "ON CONFLICT (job_id, scheduled_at_ms) DO NOTHING",
                bigint: "BIGINT",
                upsert_flow_key: UPSERT_FLOW_KEY_EXCLUDED,
            },
            Backend::Mysql => Dialect {
                // sqlx sets the session time zone to UTC, so this round trip is exact.
                now_ms: "CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)",
                for_update: "FOR UPDATE",
                from_dual: "FROM DUAL",
                numbered_params: false,
                // A no-op update; unlike INSERT IGNORE it does not hide other errors.
                ignore_duplicate_run: "ON DUPLICATE KEY UPDATE job_id = job_id",
                bigint: "SIGNED",
                upsert_flow_key: "ON DUPLICATE KEY UPDATE \
                    max_in_flight = VALUES(max_in_flight), rate_limit = VALUES(rate_limit), \
                    rate_per_ms = VALUES(rate_per_ms), drop_when_full = VALUES(drop_when_full), \
                    hold_failed = VALUES(hold_failed), updated_at_ms = VALUES(updated_at_ms)",
            },
            Backend::Sqlite => Dialect {
                now_ms: "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
                // SQLite has no row locks: writers are serialised by BEGIN IMMEDIATE instead.
                for_update: "",
                from_dual: "",
                numbered_params: false,
                ignore_duplicate_run: "ON CONFLICT (job_id, scheduled_at_ms) DO NOTHING",
                bigint: "INTEGER",
                upsert_flow_key: UPSERT_FLOW_KEY_EXCLUDED,
            },
        }
    }

    fn render(self, template: &str) -> Arc<str> {
        let text = template
            .replace("{now}", self.now_ms)
            .replace("{for_update}", self.for_update)
            .replace("{from_dual}", self.from_dual)
            .replace("{ignore_duplicate_run}", self.ignore_duplicate_run)
            .replace("{bigint}", self.bigint)
            .replace("{upsert_flow_key}", self.upsert_flow_key);
        if !self.numbered_params {
            return text.into();
        }
        let mut out = String::with_capacity(text.len() + 8);
        let mut n = 0;
        for ch in text.chars() {
            if ch == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(ch);
            }
        }
        out.into()
    }
}

/// A job listing: filters, then a keyset condition (`?` the key after which the page starts,
/// or NULL for the first page) and the order it pages in.
macro_rules! jobs_list {
    ($after:literal, $order:literal) => {
        concat!(
            "SELECT job_id, partition_id, name, app_name, handler_name, schedule_json, \
            timezone, args_json, policy_json, state, version, last_fired_at_ms, created_at_ms, \
            updated_at_ms, started_at_ms, fired_count, kind, namespace_id FROM jobs \
            WHERE (? IS NULL OR namespace_id = ?) AND (? IS NULL OR kind = ?) \
            AND (? IS NULL OR app_name = ?) AND (? IS NULL OR state = ?) \
            AND (? IS NULL OR name LIKE ? ESCAPE '!') \
            AND (? IS NULL OR LOWER(name) LIKE LOWER(?) ESCAPE '!') AND (? IS NULL OR ",
            $after,
            ") ORDER BY ",
            $order,
            " LIMIT ?"
        )
    };
}

/// A run listing, paged like [`jobs_list!`].
macro_rules! runs_list {
    ($after:literal, $order:literal) => {
        concat!(
            "SELECT run_id, job_id, scheduled_at_ms, partition_id, epoch, node_id, \
            trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms, \
            message, namespace_id FROM runs WHERE (? IS NULL OR namespace_id = ?) \
            AND (? IS NULL OR job_id = ?) AND (? IS NULL OR state = ?) \
            AND (? IS NULL OR ",
            $after,
            ") ORDER BY ",
            $order,
            " LIMIT ?"
        )
    };
}

/// A task with its run once fired (`runs.job_id = -task_id` at the task's instant), and a
/// condition.
macro_rules! tasks_where {
    ($condition:literal) => {
        concat!(
            "SELECT t.task_id, t.partition_id, t.task_key, t.app_name, t.handler_name, \
            t.args_json, t.policy_json, t.priority, t.due_at_ms, t.state, t.created_at_ms, \
            t.ended_at_ms, t.message, r.run_id, r.state AS run_state, t.namespace_id FROM tasks t \
            LEFT JOIN runs r ON r.job_id = -t.task_id AND r.scheduled_at_ms = t.due_at_ms \
            WHERE ",
            $condition
        )
    };
}

macro_rules! queries {
    ($group:ident { $($name:ident = $template:expr;)* }) => {
        /// Queries of the store, rendered for one backend at connect time.
        #[derive(Debug)]
        pub(in crate::store) struct $group {
            $(pub(in crate::store) $name: Arc<str>,)*
        }

        impl $group {
            pub(super) fn render(dialect: Dialect) -> Self {
                $group { $($name: dialect.render($template),)* }
            }
        }
    };
}

// Declared after the macros, which they use.
mod cluster;
mod dispatch;
mod flow;
mod follow_ups;
mod jobs;
mod tasks;
mod tenancy;

/// Every query of the store, rendered for one backend at connect time, by concern.
#[derive(Debug)]
pub(super) struct Queries {
    pub(super) cluster: cluster::ClusterQueries,
    pub(super) jobs: jobs::JobQueries,
    pub(super) dispatch: dispatch::DispatchQueries,
    pub(super) follow_ups: follow_ups::FollowUpQueries,
    pub(super) tasks: tasks::TaskQueries,
    pub(super) tenancy: tenancy::TenancyQueries,
    pub(super) flow: flow::FlowQueries,
}

impl Queries {
    pub(super) fn for_backend(backend: Backend) -> Self {
        let dialect = Dialect::of(backend);
        Queries {
            cluster: cluster::ClusterQueries::render(dialect),
            jobs: jobs::JobQueries::render(dialect),
            dispatch: dispatch::DispatchQueries::render(dialect),
            follow_ups: follow_ups::FollowUpQueries::render(dialect),
            tasks: tasks::TaskQueries::render(dialect),
            tenancy: tenancy::TenancyQueries::render(dialect),
            flow: flow::FlowQueries::render(dialect),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_parameters_are_numbered_in_order() {
        let q = Queries::for_backend(Backend::Postgres);
        assert!(q.cluster.partition_assign.contains("owner_node_id = $1"));
        assert!(
            q.cluster
                .partition_assign
                .contains("partition_id = $2 AND epoch = $3")
        );
        assert!(q.cluster.leader_lock.ends_with("FOR UPDATE"));
    }

    #[test]
    fn sqlite_and_mysql_keep_question_marks_and_clock_is_inlined() {
        for backend in [Backend::Mysql, Backend::Sqlite] {
            let q = Queries::for_backend(backend);
            assert!(
                q.cluster
                    .node_heartbeat
                    .contains("node_id = ? AND incarnation = ?")
            );
            assert!(!q.cluster.node_heartbeat.contains("{now}"));
        }
        assert!(
            !Queries::for_backend(Backend::Sqlite)
                .cluster
                .leader_lock
                .contains("FOR UPDATE")
        );
    }
}
