//! Flow control: keys, and the runs in line for them.

use std::sync::Arc;

use super::Dialect;

queries! {
    FlowQueries {
        flow_key_upsert = "INSERT INTO flow_keys (flow_key, max_in_flight, rate_limit, \
            rate_per_ms, drop_when_full, hold_failed, window_start_ms, window_count, recheck_at_ms, \
            updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, 0, 0, NULL, {now}) {upsert_flow_key}";
        flow_key_lock = "SELECT max_in_flight, rate_limit, rate_per_ms, drop_when_full, \
            hold_failed, window_start_ms, window_count, recheck_at_ms, {now} AS now_ms \
            FROM flow_keys WHERE flow_key = ? {for_update}";
        flow_key_save = "UPDATE flow_keys SET window_start_ms = ?, window_count = ?, \
            recheck_at_ms = ?, updated_at_ms = {now} WHERE flow_key = ?";
        flow_keys_due = "SELECT flow_key FROM flow_keys WHERE recheck_at_ms <= {now} \
            ORDER BY recheck_at_ms LIMIT ?";
        // `{partitions}`: run ids.
        runs_flow_enqueue = "UPDATE runs SET state = 'queued', flow_key = ?, message = ? \
            WHERE state = 'pending' AND flow_key IS NULL AND run_id IN ({partitions})";
        runs_flow_in_flight = "SELECT COUNT(*) FROM runs WHERE flow_key = ? \
            AND state IN ('pending', 'running')";
        runs_flow_holding = "SELECT COUNT(*) FROM runs WHERE flow_key = ? \
            AND state IN ('pending', 'running', 'failed', 'timed_out', 'no_executor')";
        run_flow_key_held = "SELECT flow_key FROM runs WHERE run_id = ? \
            AND state IN ('failed', 'timed_out', 'no_executor') AND flow_key IS NOT NULL";
        run_flow_unhold = "UPDATE runs SET flow_key = NULL WHERE run_id = ? AND flow_key = ? \
            AND state IN ('failed', 'timed_out', 'no_executor')";
        // `{partitions}`: attempt ids.
        runs_flow_keys_of_attempts = "SELECT DISTINCT r.flow_key FROM attempts a \
            JOIN runs r ON r.run_id = a.run_id \
            WHERE a.attempt_id IN ({partitions}) AND r.flow_key IS NOT NULL";
        runs_flow_unhold_all = "UPDATE runs SET flow_key = NULL WHERE flow_key = ? \
            AND state IN ('failed', 'timed_out', 'no_executor')";
        run_flow_take_place = "UPDATE runs SET flow_key = ?, state = 'pending', message = NULL \
            WHERE run_id = ? AND ((state = 'pending' AND flow_key IS NULL) \
            OR (state = 'queued' AND flow_key = ?))";
        runs_flow_queued = "SELECT run_id FROM runs WHERE flow_key = ? AND state = 'queued' \
            ORDER BY run_id LIMIT ?";
        // `{partitions}`: run ids.
        runs_flow_release = "UPDATE runs SET state = 'pending', message = NULL \
            WHERE state = 'queued' AND run_id IN ({partitions})";
        run_flow_drop = "UPDATE runs SET state = 'skipped', finished_at_ms = {now}, message = ? \
            WHERE run_id = ? AND state = 'queued'";
    }
}
