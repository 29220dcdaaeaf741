//! The policy values both sides name: how a node picks among an app's executors, and what a
//! delivery promises. The admin API's job and task documents and the SDK's task client use
//! these types, so their spellings cannot drift apart.

use serde::{Deserialize, Serialize};

/// How a node picks among an app's healthy executors for an attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    Random,
    #[default]
    RoundRobin,
    Weighted,
    LeastBusy,
    ConsistentHash,
    /// The executor with the lowest address (XXL-JOB's FIRST).
    First,
    /// The executor with the highest address (XXL-JOB's LAST).
    Last,
    /// The executor first offered the fewest of the job's attempts by this node.
    LeastFrequentlyUsed,
    /// The executor whose last offer of the job's attempts by this node is oldest.
    LeastRecentlyUsed,
    /// The first executor by address that answers (XXL-JOB executors: its `/beat`).
    Failover,
    /// The first executor by address that is idle (XXL-JOB executors: its `/idleBeat`).
    Busyover,
}

/// What a run's delivery to its executor promises when a node, an executor or the network
/// fails in the middle of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Delivered until an executor answers for it: an attempt whose answer was lost (the
    /// node died, the executor vanished) is delivered again, and retried per `retry`.
    #[default]
    AtLeastOnce,
    /// Marked delivered before it is sent, and never delivered again nor retried: a delivery
    /// whose fate is unknown is recorded as lost and its run fails.
    AtMostOnce,
    /// At least once, with the executor answering a delivery of work it already did from its
    /// record of the result (the dispatch carries an `effect_key`; the Rust SDK keeps the
    /// record), so the handler runs once per run and shard. A failover goes back to the
    /// executor that had the attempt while it is healthy.
    ExactlyOnceEffect,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_spells_each_value_in_snake_case() {
        let texts = |v: &[serde_json::Value]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let balances: Vec<serde_json::Value> = [Balance::RoundRobin, Balance::LeastFrequentlyUsed]
            .iter()
            .map(|b| serde_json::json!(b))
            .collect();
        assert_eq!(
            texts(&balances),
            ["\"round_robin\"", "\"least_frequently_used\""]
        );
        let delivery = serde_json::json!(Delivery::ExactlyOnceEffect);
        assert_eq!(delivery, "exactly_once_effect");
        let read: Result<Delivery, _> = serde_json::from_str("\"at_most_once\"");
        assert_eq!(read.ok(), Some(Delivery::AtMostOnce));
    }
}
