//! A node's copy of a small table (service tokens, role grants), read again when older than
//! [`FRESH_FOR`], so that an API call costs no query and a change made on another node is seen
//! within that time.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::store;

/// How old a copy may be before its next use reads the table again.
pub(super) const FRESH_FOR: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Copy<T> {
    value: Arc<T>,
    read_at: Option<Instant>,
    ever_read: bool,
    /// Counts [`Snapshot::forget`]s: a read begun before one is used, but not kept as fresh
    /// (it may predate the change that made the node forget).
    generation: u64,
}

/// The copy of one table.
#[derive(Debug)]
pub(super) struct Snapshot<T> {
    copy: Mutex<Copy<T>>,
    /// One reader at a time: callers arriving during a read wait for it.
    reading: tokio::sync::Mutex<()>,
}

impl<T: Default> Default for Snapshot<T> {
    fn default() -> Self {
        Self {
            copy: Mutex::new(Copy {
                value: Arc::new(T::default()),
                read_at: None,
                ever_read: false,
                generation: 0,
            }),
            reading: tokio::sync::Mutex::new(()),
        }
    }
}

impl<T> Snapshot<T> {
    /// Makes the next use read the table again (after this node changed it).
    pub(super) fn forget(&self) {
        let mut copy = self.copy();
        copy.read_at = None;
        copy.generation += 1;
    }

    fn copy(&self) -> std::sync::MutexGuard<'_, Copy<T>> {
        self.copy.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fresh(&self) -> Option<Arc<T>> {
        let copy = self.copy();
        copy.read_at
            .is_some_and(|at| at.elapsed() < FRESH_FOR)
            .then(|| Arc::clone(&copy.value))
    }

    /// The copy, read with `read` first when it is stale. When the table cannot be read, the
    /// last copy serves (what it grants could not be taken back meanwhile either); a node
    /// that never read it fails.
    pub(super) async fn current<F, Fut>(&self, what: &str, read: F) -> Result<Arc<T>, store::Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, store::Error>>,
    {
        if let Some(value) = self.fresh() {
            return Ok(value);
        }
        let _reading = self.reading.lock().await;
        if let Some(value) = self.fresh() {
            return Ok(value);
        }
        let generation = self.copy().generation;
        match read().await {
            Ok(value) => {
                let value = Arc::new(value);
                let mut copy = self.copy();
                copy.value = Arc::clone(&value);
                if copy.generation == generation {
                    copy.read_at = Some(Instant::now());
                }
                copy.ever_read = true;
                Ok(value)
            }
            Err(err) if self.copy().ever_read => {
                tracing::warn!(error = %err, "could not read the {what}; using the last copy");
                Ok(Arc::clone(&self.copy().value))
            }
            Err(err) => Err(err),
        }
    }
}
