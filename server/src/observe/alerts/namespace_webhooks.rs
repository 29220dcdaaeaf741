//! Each namespace's own alert webhook, as the worker last read it: read again when older than a
//! few seconds, so an alert costs no read of its own while its namespace's setting is fresh.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use tracing::warn;

use crate::store::{NamespaceId, NamespaceStore};

/// How long a read is trusted.
const FRESH_FOR: Duration = Duration::from_secs(5);

/// Each namespace's name and webhook, by id.
type ByNamespace = HashMap<NamespaceId, (String, Option<String>)>;

#[derive(Debug)]
pub(super) struct NamespaceWebhooks {
    store: Arc<dyn NamespaceStore>,
    /// The last read, and when.
    read: Mutex<Option<(Instant, ByNamespace)>>,
}

/// A namespace's name and webhook, for an alert of one of its jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NamespaceAlerts {
    pub(super) name: String,
    pub(super) webhook: Option<String>,
}

impl NamespaceWebhooks {
    pub(super) fn new(store: Arc<dyn NamespaceStore>) -> Self {
        Self {
            store,
            read: Mutex::new(None),
        }
    }

    /// Namespace `id`'s name and webhook; `None` when it cannot be read (the alert still goes
    /// to the job's and the node's webhooks).
    pub(super) async fn of(&self, id: NamespaceId) -> Option<NamespaceAlerts> {
        let mut read = self.read.lock().await;
        let stale = read
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= FRESH_FOR);
        if stale {
            match self.store.namespaces_list().await {
                Ok(records) => {
                    let by_id = records
                        .into_iter()
                        .map(|r| (r.namespace_id, (r.name, r.alert_webhook)))
                        .collect();
                    *read = Some((Instant::now(), by_id));
                }
                Err(err) => warn!(error = %err, "cannot read the namespaces' alert webhooks"),
            }
        }
        let (_, by_id) = read.as_ref()?;
        by_id.get(&id).map(|(name, webhook)| NamespaceAlerts {
            name: name.clone(),
            webhook: webhook.clone(),
        })
    }
}
