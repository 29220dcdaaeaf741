//! What a node counts of its own work, for `/metrics`. Each node counts what it did (its
//! claims, its deliveries, the runs it ended); a cluster's totals are the sum over its nodes.
//! Gauges of the cluster's state (executors, in-flight attempts, the leader) are read at
//! scrape time by the endpoint, not kept here.

use super::prometheus::{Counter, Histogram, LabelledCounter};

/// Buckets of fire lateness, in seconds: a fire on time is a few milliseconds late, a node
/// failover a few seconds, a misfire catch-up minutes.
const LATENESS_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The series a node keeps.
#[derive(Debug)]
pub struct NodeMetrics {
    /// Runs this node's scheduler claimed, by trigger (`schedule`, `misfire`).
    pub fires: LabelledCounter,
    /// Claims this node's scheduler made, by outcome (`claimed`, `stale`, `fenced`).
    pub claims: LabelledCounter,
    /// Delivery time minus scheduled instant of each run's first dispatch.
    pub lateness: Histogram,
    /// Offers of an attempt to an executor, by what the executor made of it.
    pub dispatches: LabelledCounter,
    /// Retries queued after an attempt failed, timed out or was lost.
    pub retries: Counter,
    /// Runs this node ended, by final state.
    pub runs_finished: LabelledCounter,
    /// Runs this node ended without success for good (`failed`, `no_executor`).
    pub dead_letters: Counter,
    /// Workflow runs whose end this node stored (or cancelled), by final state.
    pub workflow_runs_finished: LabelledCounter,
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
            fires: LabelledCounter::new(
                "carillon_fires_total",
                "Runs claimed by this node's scheduler, by trigger.",
                "trigger",
                &["schedule", "misfire"],
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
            runs_finished: LabelledCounter::new(
                "carillon_runs_finished_total",
                "Runs this node ended, by final state.",
                "state",
                &["succeeded", "failed", "cancelled", "no_executor"],
            ),
            workflow_runs_finished: LabelledCounter::new(
                "carillon_workflow_runs_finished_total",
                "Workflow runs whose last step's end (or cancel) this node stored, by final state.",
                "state",
                &["succeeded", "failed", "cancelled"],
            ),
            dead_letters: Counter::new(
                "carillon_dead_letters_total",
                "Runs this node ended without success for good (failed after their last attempt, or no executor).",
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

    /// The counters and histograms, in the text format.
    pub fn render(&self, out: &mut String) {
        self.fires.render(out);
        self.claims.render(out);
        self.lateness.render(out);
        self.dispatches.render(out);
        self.retries.render(out);
        self.runs_finished.render(out);
        self.workflow_runs_finished.render(out);
        self.dead_letters.render(out);
        self.alerts.render(out);
        self.history_deleted.render(out);
    }
}
