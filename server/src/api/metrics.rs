//! `GET /metrics`: the node's counters and the cluster's state in the Prometheus text format.
//! Counters are this node's own work (sum them over the nodes); gauges read at scrape time
//! describe the cluster as the database has it, the same on every node.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;

use super::error::Problem;
use super::{ApiError, ApiState, auth, permissions};
use crate::access::Need;
use crate::observe::prometheus::{counter, gauge, labelled_gauge};

/// How long the scrape waits for the database before it leaves its gauges out.
const DATABASE_PROBE_LIMIT: Duration = Duration::from_secs(2);

/// The node's metrics (admin or read-only token: they describe every namespace).
#[utoipa::path(get, operation_id = "getMetrics", path = "/metrics", tag = "health",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain; version=0.0.4", body = String),
        (status = 401, description = "No token, or not one of this cluster's", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "An executor token", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn metrics(
    State(state): State<ApiState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let caller = auth::caller(&state, &headers).await?;
    permissions::check(caller.decide(Need::ClusterViewer, None), || {
        ApiError::NotFound
    })?;
    let mut out = String::with_capacity(8 * 1024);
    let metrics = &state.observer.metrics;
    let mut names = BTreeMap::new();
    for id in metrics.namespaces() {
        // A namespace deleted since is named as views name it; an unknown one (a deleted
        // job's run) is left blank.
        let name = if id == crate::observe::UNKNOWN_NAMESPACE {
            String::new()
        } else {
            super::namespaces::name_of(&state, id).await?
        };
        names.insert(id.0, name);
    }
    metrics.render(&mut out, &|id| names.get(&id).cloned().unwrap_or_default());
    node_gauges(&state, &mut out);
    let traces = &state.observer.traces;
    if traces.exporting() {
        counter(
            &mut out,
            "carillon_trace_spans_dropped_total",
            "Spans dropped because the OTLP exporter fell behind (telemetry.otlp_endpoint).",
            traces.dropped(),
        );
    }
    cluster_gauges(&state, &mut out).await;
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    ))
}

/// What this node acts on now.
fn node_gauges(state: &ApiState, out: &mut String) {
    let view = &state.view;
    gauge(
        out,
        "carillon_node_member",
        "1 while this node is a cluster member (its heartbeat holds).",
        f64::from(u8::from(view.is_member())),
    );
    gauge(
        out,
        "carillon_node_leader",
        "1 while this node holds the leader lease.",
        f64::from(u8::from(view.leader_term().is_some())),
    );
    gauge(
        out,
        "carillon_partitions_owned",
        "Partitions this node acts on.",
        view.owned_partitions().len() as f64,
    );
    gauge(
        out,
        "carillon_jobs_held",
        "Running jobs of this node's partitions held by its scheduler.",
        view.jobs_held() as f64,
    );
    gauge(
        out,
        "carillon_deliveries_held_for_standbys_seconds",
        "How long this node's deliveries have waited for a PostgreSQL standby to catch up (database.wait_for_standbys); 0 when they are not waiting.",
        view.standby_wait().as_secs_f64(),
    );
    gauge(
        out,
        "carillon_clock_offset_seconds",
        "The database clock minus this machine's, as last measured.",
        state.clock.offset_ms() as f64 / 1_000.0,
    );
}

/// The cluster as the database has it; left out when the database does not answer in time.
async fn cluster_gauges(state: &ApiState, out: &mut String) {
    let started = Instant::now();
    let probe = tokio::time::timeout(DATABASE_PROBE_LIMIT, state.store.now_ms()).await;
    gauge(
        out,
        "carillon_database_up",
        "1 when the database answered this scrape's probe.",
        f64::from(u8::from(matches!(probe, Ok(Ok(_))))),
    );
    if !matches!(probe, Ok(Ok(_))) {
        return;
    }
    gauge(
        out,
        "carillon_database_round_trip_seconds",
        "Round trip of a trivial query from this node, measured at this scrape.",
        started.elapsed().as_secs_f64(),
    );
    let reads = tokio::time::timeout(DATABASE_PROBE_LIMIT, async {
        (
            state.store.leader_get().await,
            state.store.executors_list(None).await,
            state.store.executor_loads().await,
            state.store.history_oldest_run_ms().await,
        )
    })
    .await;
    let Ok((leader, executors, loads, oldest_run)) = reads else {
        return;
    };
    if let Ok(Some(created_ms)) = oldest_run {
        gauge(
            out,
            "carillon_history_oldest_run_timestamp_seconds",
            "When the oldest run kept in the run history was created (retention deletes older ones).",
            created_ms as f64 / 1000.0,
        );
    }
    if let Ok(leader) = leader {
        gauge(
            out,
            "carillon_leader_term",
            "The leader lease's term (fencing token); it rises at every change of leader.",
            leader.term as f64,
        );
    }
    if let Ok(list) = executors {
        let lease = i64::try_from(state.executor_lease_ms).unwrap_or(i64::MAX);
        // Every app ever registered shows, at 0 when all its executors left, so an alert
        // rule on `== 0` fires.
        let mut by_app: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
        for e in &list.executors {
            let entry = by_app.entry(e.app_name.as_str()).or_default();
            if e.state != "left" {
                entry.0 += 1;
            }
            if e.is_healthy(list.now_ms, lease) {
                entry.1 += 1;
            }
        }
        labelled_gauge(
            out,
            "carillon_executors",
            "Executors registered per app (not left).",
            "app",
            by_app.iter().map(|(app, (all, _))| (*app, f64::from(*all))),
        );
        labelled_gauge(
            out,
            "carillon_executors_healthy",
            "Executors per app that take work now: active and heard from within the lease.",
            "app",
            by_app
                .iter()
                .map(|(app, (_, healthy))| (*app, f64::from(*healthy))),
        );
    }
    if let Ok(loads) = loads {
        gauge(
            out,
            "carillon_attempts_in_flight",
            "Attempts running on executors, cluster-wide.",
            loads.iter().map(|l| l.running).sum::<i64>() as f64,
        );
    }
    namespace_gauges(state, out).await;
}

/// What each namespace holds, and its quotas where it has them (`usage / quota` is how full
/// it is); every namespace shows, at 0 when it holds nothing.
async fn namespace_gauges(state: &ApiState, out: &mut String) {
    let reads = tokio::time::timeout(DATABASE_PROBE_LIMIT, async {
        (
            state.namespaces.list().await,
            state.store.namespaces_counts().await,
        )
    })
    .await;
    let Ok((Ok(namespaces), Ok(counts))) = reads else {
        return;
    };
    let held = |id| {
        counts
            .iter()
            .find(|(n, _, _)| *n == id)
            .map_or((0, 0), |(_, jobs, tasks)| (*jobs, *tasks))
    };
    let series = |pick: &dyn Fn(&crate::store::NamespaceRecord) -> Option<i64>| {
        namespaces
            .iter()
            .filter_map(|n| pick(n).map(|value| (n.name.as_str(), value as f64)))
            .collect::<Vec<_>>()
    };
    labelled_gauge(
        out,
        "carillon_namespace_jobs",
        "Jobs and workflows a namespace holds (not their steps).",
        "namespace",
        series(&|n| Some(held(n.namespace_id).0)),
    );
    labelled_gauge(
        out,
        "carillon_namespace_pending_tasks",
        "Tasks of a namespace pending (not yet fired).",
        "namespace",
        series(&|n| Some(held(n.namespace_id).1)),
    );
    labelled_gauge(
        out,
        "carillon_namespace_quota_jobs",
        "A namespace's quota of jobs and workflows, where it has one.",
        "namespace",
        series(&|n| n.quotas.max_jobs),
    );
    labelled_gauge(
        out,
        "carillon_namespace_quota_pending_tasks",
        "A namespace's quota of pending tasks, where it has one.",
        "namespace",
        series(&|n| n.quotas.max_pending_tasks),
    );
}
