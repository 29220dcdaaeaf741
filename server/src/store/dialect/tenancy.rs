//! Namespaces, the audit trail, service tokens, secrets and role grants.

use std::sync::Arc;

use super::Dialect;

queries! {
    TenancyQueries {
        // Namespaces (`sql_store/namespaces.rs`).
        namespaces_list = "SELECT namespace_id, name, description, created_at_ms, alert_webhook, \
            max_jobs, max_pending_tasks, max_enqueue_per_second FROM namespaces ORDER BY name";
        namespace_by_name = "SELECT namespace_id, name, description, created_at_ms, alert_webhook, \
            max_jobs, max_pending_tasks, max_enqueue_per_second FROM namespaces WHERE name = ?";
        namespace_by_id = "SELECT namespace_id, name, description, created_at_ms, alert_webhook, \
            max_jobs, max_pending_tasks, max_enqueue_per_second FROM namespaces \
            WHERE namespace_id = ?";
        namespace_insert = "INSERT INTO namespaces (name, description, alert_webhook, max_jobs, \
            max_pending_tasks, max_enqueue_per_second, created_at_ms) \
            VALUES (?, ?, ?, ?, ?, ?, {now})";
        namespace_update = "UPDATE namespaces SET description = ?, alert_webhook = ?, \
            max_jobs = ?, max_pending_tasks = ?, max_enqueue_per_second = ? \
            WHERE namespace_id = ?";
        namespaces_jobs = "SELECT namespace_id, COUNT(*) FROM jobs WHERE kind <> 'step' \
            GROUP BY namespace_id";
        namespaces_pending_tasks = "SELECT namespace_id, COUNT(*) FROM tasks WHERE state = 'pending' \
            GROUP BY namespace_id";
        namespace_counts = "SELECT \
            (SELECT COUNT(*) FROM jobs WHERE namespace_id = ? AND kind <> 'step'), \
            (SELECT COUNT(*) FROM tasks WHERE namespace_id = ? AND state = 'pending') {from_dual}";
        namespace_lock = "SELECT namespace_id FROM namespaces WHERE namespace_id = ? {for_update}";
        // Jobs and tasks by the indexes that lead with the namespace; calendars by their key.
        namespace_usage = "SELECT \
            (SELECT COUNT(*) FROM jobs WHERE namespace_id = ?), \
            (SELECT COUNT(*) FROM tasks WHERE namespace_id = ? AND state = 'pending'), \
            (SELECT COUNT(*) FROM calendars WHERE namespace_id = ?), \
            (SELECT COUNT(*) FROM apps WHERE namespace_id = ?) {from_dual}";
        namespace_delete = "DELETE FROM namespaces WHERE namespace_id = ?";
        namespace_tokens_delete = "DELETE FROM service_tokens WHERE namespace_id = ?";

        // The audit trail (`sql_store/audit.rs`).
        audit_insert = "INSERT INTO audit_events (at_ms, namespace_id, actor, source, operation, \
            resource, outcome, status, detail, changes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        audit_list = "SELECT event_id, at_ms, namespace_id, actor, source, operation, resource, \
            outcome, status, detail, changes FROM audit_events \
            WHERE (? IS NULL OR namespace_id = ?) AND (? IS NULL OR actor = ?) \
            AND (? IS NULL OR operation = ?) AND (? IS NULL OR outcome = ?) \
            AND (? IS NULL OR at_ms >= ?) AND (? IS NULL OR at_ms < ?) \
            AND (? IS NULL OR event_id < ?) ORDER BY event_id DESC LIMIT ?";
        audit_purge_upto = "SELECT MAX(event_id) FROM (SELECT event_id FROM audit_events \
            WHERE at_ms < ? ORDER BY event_id LIMIT ?) oldest";
        audit_purge = "DELETE FROM audit_events WHERE event_id <= ? AND at_ms < ?";

        // Service tokens (`sql_store/tokens.rs`).
        tokens_all = "SELECT token_id, namespace_id, name, role, secret_sha256, display_prefix, \
            created_at_ms, created_by, expires_at_ms, last_used_at_ms FROM service_tokens \
            ORDER BY namespace_id, name";
        token_by_secret = "SELECT token_id, namespace_id, name, role, secret_sha256, display_prefix, \
            created_at_ms, created_by, expires_at_ms, last_used_at_ms FROM service_tokens \
            WHERE secret_sha256 = ?";
        token_insert = "INSERT INTO service_tokens (namespace_id, name, role, secret_sha256, \
            display_prefix, created_by, expires_at_ms, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, {now})";
        token_delete = "DELETE FROM service_tokens WHERE token_id = ?";
        token_used = "UPDATE service_tokens SET last_used_at_ms = ? WHERE token_id = ?";

        // Secrets (`sql_store/secrets.rs`).
        secrets_list = "SELECT secret_id, namespace_id, name, sealed, key_id, version, created_at_ms, \
            updated_at_ms, updated_by FROM secrets WHERE namespace_id = ? ORDER BY name";
        secret_by_name = "SELECT secret_id, namespace_id, name, sealed, key_id, version, \
            created_at_ms, updated_at_ms, updated_by FROM secrets WHERE namespace_id = ? AND name = ?";
        secret_update = "UPDATE secrets SET sealed = ?, key_id = ?, updated_by = ?, \
            version = version + 1, updated_at_ms = {now} WHERE namespace_id = ? AND name = ?";
        secret_insert = "INSERT INTO secrets (namespace_id, name, sealed, key_id, updated_by, \
            version, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, 1, {now}, {now})";
        secret_delete = "DELETE FROM secrets WHERE namespace_id = ? AND name = ?";
        secrets_under_other_keys = "SELECT secret_id, namespace_id, name, sealed, key_id, version, \
            created_at_ms, updated_at_ms, updated_by FROM secrets \
            WHERE key_id <> ? AND secret_id > ? ORDER BY secret_id LIMIT ?";
        secret_reseal = "UPDATE secrets SET sealed = ?, key_id = ? \
            WHERE secret_id = ? AND version = ?";
        namespace_secrets_delete = "DELETE FROM secrets WHERE namespace_id = ?";

        // Role grants (`sql_store/grants.rs`).
        grants_all = "SELECT grant_id, namespace_id, group_name, role, created_at_ms, created_by \
            FROM role_grants ORDER BY namespace_id, group_name";
        grant_by_group = "SELECT grant_id, namespace_id, group_name, role, created_at_ms, created_by \
            FROM role_grants WHERE namespace_id = ? AND group_name = ?";
        grant_insert = "INSERT INTO role_grants (namespace_id, group_name, role, created_by, \
            created_at_ms) VALUES (?, ?, ?, ?, {now})";
        grant_delete = "DELETE FROM role_grants WHERE grant_id = ?";
        namespace_grants_delete = "DELETE FROM role_grants WHERE namespace_id = ?";
    }
}
