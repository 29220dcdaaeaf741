//! Namespaces as the API sees them: the rule for their names, and a directory of names and
//! ids each node keeps in memory (namespaces are few and rarely change), read again from the
//! database when it does not know a name or id, and at least every few seconds, so a
//! namespace made or deleted through another node is seen here within that time.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::store::{self, NamespaceId, NamespaceRecord, NamespaceStore};

/// The name of [`NamespaceId::DEFAULT`].
pub const DEFAULT_NAME: &str = "default";

/// How long the directory trusts what it read.
const FRESH_FOR: Duration = Duration::from_secs(5);

/// The most characters in a name (as a Kubernetes namespace, or a DNS label).
const MAX_NAME: usize = 63;

/// Why `name` cannot name a namespace, if it cannot: 1 to 63 lowercase letters, digits and
/// `-`, starting and ending with a letter or digit.
pub fn check_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let ends_ok = !name.starts_with('-') && !name.ends_with('-');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(allowed) || !ends_ok {
        return Err(format!(
            "{name:?} is not a namespace name: 1 to {MAX_NAME} lowercase letters, digits and \
             '-', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// What the directory read last.
#[derive(Debug, Default)]
struct Known {
    by_name: HashMap<String, NamespaceRecord>,
    names: HashMap<NamespaceId, String>,
    read_at: Option<Instant>,
}

impl Known {
    fn fresh(&self) -> bool {
        self.read_at.is_some_and(|at| at.elapsed() < FRESH_FOR)
    }
}

/// The node's view of the namespaces.
#[derive(Debug)]
pub struct Directory {
    store: Arc<dyn NamespaceStore>,
    known: RwLock<Known>,
}

impl Directory {
    pub fn new(store: Arc<dyn NamespaceStore>) -> Self {
        Self {
            store,
            known: RwLock::new(Known::default()),
        }
    }

    /// Every namespace, by name, read from the database now.
    pub async fn list(&self) -> Result<Vec<NamespaceRecord>, store::Error> {
        let records = self.store.namespaces_list().await?;
        let mut known = Known {
            read_at: Some(Instant::now()),
            ..Known::default()
        };
        for record in &records {
            known.names.insert(record.namespace_id, record.name.clone());
            known.by_name.insert(record.name.clone(), record.clone());
        }
        if let Ok(mut slot) = self.known.write() {
            *slot = known;
        }
        Ok(records)
    }

    /// Namespace `name`, if there is one.
    pub async fn find(&self, name: &str) -> Result<Option<NamespaceRecord>, store::Error> {
        if let Some(found) = self.read_fresh(|k| k.by_name.get(name).cloned()) {
            return Ok(Some(found));
        }
        Ok(self
            .list()
            .await?
            .into_iter()
            .find(|record| record.name == name))
    }

    /// The name of namespace `id`; `None` once it is deleted (its runs stay until retention
    /// removes them).
    pub async fn name_of(&self, id: NamespaceId) -> Result<Option<String>, store::Error> {
        if let Some(name) = self.read_fresh(|k| k.names.get(&id).cloned()) {
            return Ok(Some(name));
        }
        Ok(self
            .list()
            .await?
            .into_iter()
            .find(|record| record.namespace_id == id)
            .map(|record| record.name))
    }

    /// Namespace `id`, if there is one (its quotas are read from here, at most 5 s old).
    pub async fn get(&self, id: NamespaceId) -> Result<Option<NamespaceRecord>, store::Error> {
        let fresh = self.read_fresh(|k| k.names.get(&id).and_then(|n| k.by_name.get(n)).cloned());
        if let Some(found) = fresh {
            return Ok(Some(found));
        }
        Ok(self
            .list()
            .await?
            .into_iter()
            .find(|record| record.namespace_id == id))
    }

    /// What `pick` finds in a fresh read; `None` when the read is stale or finds nothing.
    fn read_fresh<T>(&self, pick: impl FnOnce(&Known) -> Option<T>) -> Option<T> {
        let known = self.known.read().ok()?;
        if known.fresh() { pick(&known) } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        for good in ["default", "team-a", "a", "billing2", &"x".repeat(63)] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "Team",
            "team_a",
            "-a",
            "a-",
            "a.b",
            "é",
            &"x".repeat(64),
        ] {
            let err = check_name(bad).unwrap_err();
            assert!(err.contains("is not a namespace name"), "{bad}: {err}");
        }
    }
}
