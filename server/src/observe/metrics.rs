//! What a node counts of its own work, for `/metrics`. Each node counts what it did (its
//! claims, its deliveries, the runs it ended); a cluster's totals are the sum over its nodes.
//! Gauges of the cluster's state (executors, in-flight attempts, the leader) are read at
//! scrape time by the endpoint, not kept here.

use super::prometheus::{Counter, Histogram, LabelledCounter, NamespacedCounter};
use crate::store::NamespaceId;

/// Buckets of fire lateness, in seconds: a fire on time is a few milliseconds late, a node
/// failover a few seconds, a misfire catch-up minutes.
const LATENESS_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The series a node keeps.
#[derive(Debug)]
pub struct NodeMetrics {
    /// Runs this node's scheduler claimed, by namespace and trigger (`schedule`, `misfire`,
    /// `task`).
    pub fires: NamespacedCounter,
    /// Claims this node's scheduler made, by outcome (`claimed`, `stale`, `fenced`).
    pub claims: LabelledCounter,
    /// Delivery time minus scheduled instant of each run's first dispatch.
    pub lateness: Histogram,
    /// Offers of an attempt to an executor, by what the executor made of it.
    pub dispatches: LabelledCounter,
    /// Retries queued after an attempt failed, timed out or was lost.
    pub retries: Counter,
    /// Runs this node ended, by namespace and final state.
    pub runs_finished: NamespacedCounter,
    /// Runs this node ended without success for good (`failed`, `no_executor`), by namespace.
    pub dead_letters: NamespacedCounter,
    /// Workflow runs whose end this node stored (or cancelled), by final state.
    pub workflow_runs_finished: LabelledCounter,
    /// Scheduled instants this node's scheduler did not fire, by namespace and reason
    /// (`misfire`, `paused`, `overlap`, `calendar`).
    pub instants_skipped: NamespacedCounter,
    /// Alerts, by outcome (`delivered`, `failed`, `dropped`).
    pub alerts: LabelledCounter,
    /// Rows of run history this node deleted (retention), by table (`runs`, `attempts`).
    pub history_deleted: LabelledCounter,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    pub fn new() -> Self {
        Self {
            fires: NamespacedCounter::new(
                "carillon_fires_total",
                "Runs claimed by this node's scheduler, by namespace and trigger.",
                Some("trigger"),
                &["schedule", "misfire"],
                &[NamespaceId::DEFAULT.0],
            ),
            claims: LabelledCounter::new(
                "carillon_claims_total",
                "Instants this node tried to claim, by outcome (stale: the job changed; fenced: the partition moved).",
                "outcome",
                &["claimed", "stale", "fenced"],
            ),
            lateness: Histogram::new(
                "carillon_fire_lateness_seconds",
                "Time from a run's scheduled instant to its first dispatch by this node.",
                LATENESS_BOUNDS,
            ),
            dispatches: LabelledCounter::new(
                "carillon_dispatches_total",
                "Offers of attempts to executors by this node, by outcome.",
                "outcome",
                &[
                    "accepted",
                    "answered",
                    "busy",
                    "unavailable",
                    "unreachable",
                    "refused",
                    "batch_failed",
                ],
            ),
            retries: Counter::new(
                "carillon_retries_total",
                "Retries queued by this node after an attempt failed, timed out or was lost.",
            ),
            runs_finished: NamespacedCounter::new(
                "carillon_runs_finished_total",
                "Runs this node ended, by namespace and final state.",
                Some("state"),
                &["succeeded", "failed", "cancelled", "no_executor"],
                &[NamespaceId::DEFAULT.0],
            ),
            workflow_runs_finished: LabelledCounter::new(
                "carillon_workflow_runs_finished_total",
                "Workflow runs whose last step's end (or cancel) this node stored, by final state.",
                "state",
                &["succeeded", "failed", "cancelled"],
            ),
            dead_letters: NamespacedCounter::new(
                "carillon_dead_letters_total",
                "Runs this node ended without success for good (failed after their last attempt, or no executor), by namespace.",
                None,
                &[],
                &[NamespaceId::DEFAULT.0],
            ),
            instants_skipped: NamespacedCounter::new(
                "carillon_instants_skipped_total",
                "Scheduled instants this node's scheduler did not fire, by namespace and reason (misfire, paused, overlap, calendar).",
                Some("reason"),
                &["misfire", "paused", "overlap", "calendar"],
                &[NamespaceId::DEFAULT.0],
            ),
            alerts: LabelledCounter::new(
                "carillon_alerts_total",
                "Alert webhooks sent by this node, by outcome (dropped: the queue was full).",
                "outcome",
                &["delivered", "failed", "dropped"],
            ),
            history_deleted: LabelledCounter::new(
                "carillon_history_deleted_total",
                "Rows of run history deleted by this node's retention, by table.",
                "table",
                &["runs", "attempts"],
            ),
        }
    }

    /// Counts rows deleted from the run history.
    pub fn count_history_deleted(&self, purged: crate::store::Purged) {
        self.history_deleted.add("runs", purged.runs);
        self.history_deleted.add("attempts", purged.attempts);
    }

    /// The namespaces the counters hold, by id: the ones [`Self::render`] names.
    pub fn namespaces(&self) -> Vec<NamespaceId> {
        let mut ids = self.fires.namespaces();
        ids.extend(self.runs_finished.namespaces());
        ids.extend(self.dead_letters.namespaces());
        ids.extend(self.instants_skipped.namespaces());
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().map(NamespaceId).collect()
    }

    /// The counters and histograms, in the text format, naming namespaces with `name_of`.
    pub fn render(&self, out: &mut String, name_of: &dyn Fn(i64) -> String) {
        self.fires.render(out, name_of);
        self.claims.render(out);
        self.lateness.render(out);
        self.dispatches.render(out);
        self.retries.render(out);
        self.runs_finished.render(out, name_of);
        self.workflow_runs_finished.render(out);
        self.dead_letters.render(out, name_of);
        self.instants_skipped.render(out, name_of);
        self.alerts.render(out);
        self.history_deleted.render(out);
    }
}
