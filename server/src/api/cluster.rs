//! `GET /api/v1/cluster`: the leader, every node with the partitions it owns, and what this node
//! itself is acting on. Read from the database, judged by the database's clock.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, ApiState, rfc3339};

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ClusterView {
    partition_count: usize,
    leader: Option<LeaderView>,
    nodes: Vec<NodeView>,
    /// The node that answered, as it sees itself.
    this_node: ThisNode,
}

#[derive(Debug, Serialize, ToSchema)]
struct LeaderView {
    node_id: String,
    term: i64,
    lease_until: Option<String>,
    acquired_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
struct NodeView {
    node_id: String,
    address: String,
    version: String,
    started_at: Option<String>,
    last_heartbeat_at: Option<String>,
    alive: bool,
    leader: bool,
    partitions: Vec<i64>,
    /// Partitions the leader asked this node to hand to another.
    handing_off: Vec<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
struct ThisNode {
    node_id: String,
    member: bool,
    leader_term: Option<i64>,
    acting_partitions: usize,
    /// Running jobs of its partitions its scheduler holds in memory.
    jobs_held: usize,
}

/// The leader, every node with the partitions it owns, and what the answering node acts on.
#[utoipa::path(get, operation_id = "getCluster", path = "/cluster", tag = "cluster",
    responses((status = 200, description = "The cluster as the database records it", body = ClusterView)))]
pub(super) async fn show(State(state): State<ApiState>) -> Result<Json<ClusterView>, ApiError> {
    // Partitions first: an owner change seen here was made after its old owner's lease ran
    // out, so the nodes read afterwards (on a later database clock) show that owner dead, and
    // one answer never shows a partition taken from a node it still calls alive.
    let partitions = state.store.partitions_list().await?;
    let leader = state.store.leader_get().await?;
    let nodes = state.store.nodes_list().await?;
    let lease_ms = i64::try_from(state.timings.node_lease.as_millis()).unwrap_or(i64::MAX);

    let mut owned: BTreeMap<&str, (Vec<i64>, Vec<i64>)> = BTreeMap::new();
    for p in &partitions {
        if let Some(owner) = &p.owner_node_id {
            let entry = owned.entry(owner.as_str()).or_default();
            entry.0.push(p.partition_id);
            if p.pending_owner_node_id.is_some() {
                entry.1.push(p.partition_id);
            }
        }
    }
    let holder = leader.holder();
    let nodes = nodes
        .nodes
        .iter()
        .map(|n| {
            let (partitions, handing_off) = owned.remove(n.node_id.as_str()).unwrap_or_default();
            NodeView {
                node_id: n.node_id.clone(),
                address: n.address.clone(),
                version: n.version.clone(),
                started_at: rfc3339(n.started_at_ms),
                last_heartbeat_at: rfc3339(n.heartbeat_at_ms),
                alive: n.is_alive(nodes.now_ms, lease_ms),
                leader: holder == Some(n.node_id.as_str()),
                partitions,
                handing_off,
            }
        })
        .collect();
    let leader = holder.map(|node_id| LeaderView {
        node_id: node_id.to_owned(),
        term: leader.term,
        lease_until: rfc3339(leader.lease_until_ms),
        acquired_at: rfc3339(leader.acquired_at_ms),
    });
    let this_node = ThisNode {
        node_id: state.view.node_id().to_owned(),
        member: state.view.is_member(),
        leader_term: state.view.leader_term(),
        acting_partitions: state.view.owned_partitions().len(),
        jobs_held: state.view.jobs_held(),
    };
    Ok(Json(ClusterView {
        partition_count: partitions.len(),
        leader,
        nodes,
        this_node,
    }))
}
