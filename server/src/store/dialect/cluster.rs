//! The cluster: its clock, nodes, the leader lease, partitions.

use std::sync::Arc;

use super::Dialect;

queries! {
    ClusterQueries {
        now = "SELECT {now} AS now_ms";

        node_key_insert = "INSERT INTO node_keys (name, key_hex, created_at_ms) \
            SELECT ?, ?, {now} {from_dual} WHERE NOT EXISTS (SELECT 1 FROM node_keys WHERE name = ?)";
        node_key_get = "SELECT key_hex FROM node_keys WHERE name = ?";

        cluster_meta_get = "SELECT partition_count, created_at_ms FROM cluster_meta WHERE id = 1";
        cluster_meta_insert =
            "INSERT INTO cluster_meta (id, partition_count, created_at_ms) VALUES (1, ?, {now})";
        partition_insert = "INSERT INTO partitions \
            (partition_id, owner_node_id, pending_owner_node_id, epoch, updated_at_ms) \
            VALUES (?, NULL, NULL, 0, {now})";

        node_update_registration = "UPDATE nodes SET incarnation = ?, address = ?, version = ?, \
            started_at_ms = {now}, heartbeat_at_ms = {now}, left_at_ms = NULL WHERE node_id = ?";
        node_insert = "INSERT INTO nodes \
            (node_id, incarnation, address, version, started_at_ms, heartbeat_at_ms, left_at_ms) \
            VALUES (?, ?, ?, ?, {now}, {now}, NULL)";
        node_heartbeat = "UPDATE nodes SET heartbeat_at_ms = {now} \
            WHERE node_id = ? AND incarnation = ? AND left_at_ms IS NULL";
        node_mark_left = "UPDATE nodes SET left_at_ms = {now} \
            WHERE node_id = ? AND incarnation = ? AND left_at_ms IS NULL";
        nodes_list = "SELECT node_id, address, version, started_at_ms, heartbeat_at_ms, left_at_ms \
            FROM nodes ORDER BY node_id";

        leader_get = "SELECT node_id, term, lease_until_ms, acquired_at_ms, {now} AS now_ms \
            FROM leader WHERE id = 1";
        leader_lock = "SELECT node_id, term, lease_until_ms, acquired_at_ms, {now} AS now_ms \
            FROM leader WHERE id = 1 {for_update}";
        leader_take = "UPDATE leader SET node_id = ?, term = ?, lease_until_ms = {now} + ?, \
            acquired_at_ms = {now} WHERE id = 1";
        leader_renew = "UPDATE leader SET lease_until_ms = {now} + ? WHERE id = 1 AND node_id = ?";
        leader_release = "UPDATE leader SET node_id = NULL, lease_until_ms = 0 \
            WHERE id = 1 AND node_id = ?";

        partitions_list = "SELECT partition_id, owner_node_id, pending_owner_node_id, epoch, \
            updated_at_ms FROM partitions ORDER BY partition_id";
        partitions_owned = "SELECT partition_id, owner_node_id, pending_owner_node_id, epoch, \
            updated_at_ms FROM partitions WHERE owner_node_id = ? ORDER BY partition_id";
        partitions_release_owned = "UPDATE partitions SET owner_node_id = NULL, \
            pending_owner_node_id = NULL, epoch = epoch + 1, updated_at_ms = {now} \
            WHERE owner_node_id = ?";
        partitions_cancel_pending_to = "UPDATE partitions SET pending_owner_node_id = NULL, \
            updated_at_ms = {now} WHERE pending_owner_node_id = ?";
        partition_assign = "UPDATE partitions SET owner_node_id = ?, pending_owner_node_id = NULL, \
            epoch = epoch + 1, updated_at_ms = {now} WHERE partition_id = ? AND epoch = ?";
        partition_request_hand_off = "UPDATE partitions SET pending_owner_node_id = ?, \
            updated_at_ms = {now} WHERE partition_id = ? AND epoch = ?";
        partition_cancel_hand_off = "UPDATE partitions SET pending_owner_node_id = NULL, \
            updated_at_ms = {now} WHERE partition_id = ? AND epoch = ?";
        // MySQL applies single-table SET clauses left to right; owner is read before pending is
        // cleared on every backend.
        partition_hand_off = "UPDATE partitions SET owner_node_id = pending_owner_node_id, \
            pending_owner_node_id = NULL, epoch = epoch + 1, updated_at_ms = {now} \
            WHERE partition_id = ? AND owner_node_id = ? AND epoch = ? \
            AND pending_owner_node_id IS NOT NULL";
    }
}
