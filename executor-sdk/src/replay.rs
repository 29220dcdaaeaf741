//! The attempts this executor accepted, remembered while a replay of their request could
//! still pass the timestamp check (`protocol/README.md`, *Signatures*).

use std::collections::{HashMap, VecDeque};

/// Accepted attempt ids, each with the instant (epoch ms) until which it is remembered, and
/// the order they came in: expiry looks at the oldest only, never at the whole set, so a
/// dispatch costs the same however many attempts the window holds.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    until: HashMap<i64, i64>,
    /// In the order accepted. One remembered longer (signed later) keeps those behind it a
    /// little longer too: remembering longer is safe. An entry whose attempt was forgotten or
    /// remembered again since is skipped.
    order: VecDeque<(i64, i64)>,
}

impl Seen {
    /// Forgets what is past its instant at `now_ms`.
    pub(crate) fn expire(&mut self, now_ms: i64) {
        while let Some(&(until, attempt_id)) = self.order.front() {
            if until >= now_ms {
                break;
            }
            self.order.pop_front();
            if self.until.get(&attempt_id) == Some(&until) {
                self.until.remove(&attempt_id);
            }
        }
    }

    pub(crate) fn contains(&self, attempt_id: i64) -> bool {
        self.until.contains_key(&attempt_id)
    }

    pub(crate) fn remember(&mut self, attempt_id: i64, until_ms: i64) {
        self.until.insert(attempt_id, until_ms);
        self.order.push_back((until_ms, attempt_id));
    }

    /// An attempt not accepted after all: the same attempt may be offered again.
    pub(crate) fn forget(&mut self, attempt_id: i64) {
        self.until.remove(&attempt_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_remembered_until_their_instant_and_forgotten_ones_come_back() {
        let mut seen = Seen::default();
        seen.remember(1, 100);
        seen.remember(2, 300);
        seen.remember(3, 200);
        seen.expire(100);
        assert!(seen.contains(1), "remembered through its instant");
        seen.expire(101);
        assert!(!seen.contains(1));
        assert!(seen.contains(2) && seen.contains(3));
        // 3 sits behind 2 and stays with it: longer is safe.
        seen.expire(250);
        assert!(seen.contains(3));
        seen.expire(301);
        assert!(!seen.contains(2) && !seen.contains(3));

        // Forgotten, then accepted again: its old entry does not take the new one away.
        seen.remember(4, 400);
        seen.forget(4);
        assert!(!seen.contains(4));
        seen.remember(4, 900);
        seen.expire(500);
        assert!(seen.contains(4));
        seen.expire(901);
        assert!(!seen.contains(4));
    }
}
