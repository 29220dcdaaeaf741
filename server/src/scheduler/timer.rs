//! The node's timer: every owned job's next instant in one binary heap, so a tick costs
//! O(log n) per due job and nothing for the others (no scan of all jobs, no task per job).
//! Entries are never removed in place: an entry whose job changed since is skipped when popped.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One scheduled instant of one job at one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimerEntry {
    pub due_ms: i64,
    pub job_id: i64,
    pub version: i64,
}

#[derive(Debug, Default)]
pub struct Timer {
    heap: BinaryHeap<Reverse<TimerEntry>>,
}

impl Timer {
    pub fn push(&mut self, entry: TimerEntry) {
        self.heap.push(Reverse(entry));
    }

    /// The earliest due instant, stale entries included.
    pub fn next_due(&self) -> Option<i64> {
        self.heap.peek().map(|Reverse(e)| e.due_ms)
    }

    /// Removes and returns the earliest entry if it is due at `now_ms`.
    pub fn pop_due(&mut self, now_ms: i64) -> Option<TimerEntry> {
        match self.heap.peek() {
            Some(Reverse(e)) if e.due_ms <= now_ms => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Drops stale entries when they outnumber live ones, so churn cannot grow the heap.
    pub fn compact(&mut self, is_live: impl Fn(&TimerEntry) -> bool) {
        self.heap.retain(|Reverse(e)| is_live(e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_out_in_due_order_and_only_when_due() {
        let mut timer = Timer::default();
        for (due, id) in [(30, 3), (10, 1), (20, 2)] {
            timer.push(TimerEntry {
                due_ms: due,
                job_id: id,
                version: 1,
            });
        }
        assert_eq!(timer.next_due(), Some(10));
        assert_eq!(timer.pop_due(15).map(|e| e.job_id), Some(1));
        assert_eq!(timer.pop_due(15), None);
        assert_eq!(timer.pop_due(30).map(|e| e.job_id), Some(2));
        assert_eq!(timer.pop_due(30).map(|e| e.job_id), Some(3));
        assert!(timer.is_empty());
    }
}
