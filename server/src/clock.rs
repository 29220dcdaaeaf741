//! The only place a node reads the wall clock.
//!
//! Scheduling decisions use [`ClusterClock`]: the node's clock corrected by the offset to the
//! database clock measured at every heartbeat, so every node fires by the same clock and a node
//! whose own clock is minutes off neither fires early nor late. Leases never use it: they are
//! compared in SQL.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::watch;

/// This machine's clock in epoch milliseconds.
pub fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Wall time as the database tells it, read locally.
#[derive(Debug)]
pub struct ClusterClock {
    offset_ms: AtomicI64,
    /// Whether the database clock has been read once: before that, `now_ms` is this
    /// machine's clock, which may be minutes off.
    synced: watch::Sender<bool>,
}

impl Default for ClusterClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ClusterClock {
    pub fn new() -> Self {
        Self {
            offset_ms: AtomicI64::new(0),
            synced: watch::channel(false).0,
        }
    }

    /// Returns once the database clock has been read: scheduling must not start on this
    /// machine's clock.
    pub async fn synced(&self) {
        let mut readings = self.synced.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = readings.wait_for(|synced| *synced).await;
    }

    /// Now, by the database's clock, in epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        system_now_ms() + self.offset_ms.load(Ordering::Relaxed)
    }

    /// Records a reading of the database clock taken between `sent_ms` and `received_ms` (both
    /// local): the database read it, on average, half-way.
    pub fn observe(&self, sent_ms: i64, database_ms: i64, received_ms: i64) {
        let midpoint = sent_ms + (received_ms - sent_ms) / 2;
        self.offset_ms
            .store(database_ms - midpoint, Ordering::Relaxed);
        self.synced
            .send_if_modified(|synced| !std::mem::replace(synced, true));
    }

    /// The current correction, database minus local (for the API and logs).
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }
}

/// Epoch milliseconds as RFC 3339 UTC with milliseconds: how every surface (the API, alerts,
/// dispatches) writes an instant.
pub fn rfc3339(ms: i64) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_clock_is_synced_once_the_database_clock_was_read() {
        let clock = ClusterClock::new();
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), clock.synced());
        assert!(waiting.await.is_err(), "not synced before a reading");
        clock.observe(1_000, 1_050, 1_100);
        let waiting = tokio::time::timeout(std::time::Duration::from_secs(5), clock.synced());
        assert!(waiting.await.is_ok(), "synced after a reading");
    }

    #[test]
    fn the_offset_is_taken_at_the_round_trips_midpoint() {
        let clock = ClusterClock::new();
        clock.observe(1_000, 61_050, 1_100);
        assert_eq!(clock.offset_ms(), 60_000);
        let diff = clock.now_ms() - system_now_ms();
        assert!((59_990..=60_010).contains(&diff), "{diff}");
    }
}
