//! Balancers: given the executors that can take an attempt, the order to offer it to them.
//! The first is the choice; the others are fallbacks when it is busy or unreachable.

use std::collections::HashMap;

use crate::jobs::Balance;

/// An executor that can take the attempt now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub executor_id: &'a str,
    /// Where it is reached: `first`, `last`, `failover` and `busyover` go by this order, as
    /// XXL-JOB's strategies go by its sorted address list.
    pub address: &'a str,
    pub weight: u32,
    /// Attempts it is running.
    pub load: u32,
    pub capacity: u32,
}

/// Balancer state, per group of executors (an app's handler).
#[derive(Debug, Default)]
pub struct Balancers {
    round_robin: HashMap<String, u64>,
    weighted: HashMap<String, HashMap<String, i64>>,
    /// Per group, how many attempts each executor was first offered (`least_frequently_used`).
    uses: HashMap<String, HashMap<String, u64>>,
    /// Per group, the pick number at which each executor was last first offered
    /// (`least_recently_used`), and the group's pick counter.
    last_used: HashMap<String, (u64, HashMap<String, u64>)>,
    rng: u64,
}

impl Balancers {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: seed | 1,
            ..Self::default()
        }
    }

    /// The order in which to offer an attempt to `candidates`. `key` places `consistent_hash`
    /// (the same key goes to the same executor while it is there); `avoid` (the executor that
    /// failed the previous attempt) goes last.
    pub fn order(
        &mut self,
        balance: Balance,
        group: &str,
        candidates: &[Candidate<'_>],
        key: u64,
        avoid: Option<&str>,
    ) -> Vec<usize> {
        let n = candidates.len();
        let mut order: Vec<usize> = match balance {
            Balance::Random => {
                let mut order: Vec<usize> = (0..n).collect();
                for i in (1..n).rev() {
                    let j = (self.next_random() % (i as u64 + 1)) as usize;
                    order.swap(i, j);
                }
                order
            }
            Balance::RoundRobin => {
                let counter = self.round_robin.entry(group.to_owned()).or_default();
                let start = if n == 0 {
                    0
                } else {
                    (*counter % n as u64) as usize
                };
                *counter = counter.wrapping_add(1);
                (0..n).map(|i| (start + i) % n).collect()
            }
            Balance::Weighted => self.smooth_weighted(group, candidates),
            Balance::LeastBusy => {
                let mut order: Vec<usize> = (0..n).collect();
                // Compare load/capacity as fractions without dividing.
                order.sort_by(|&a, &b| {
                    let (ca, cb) = (&candidates[a], &candidates[b]);
                    (u64::from(ca.load) * u64::from(cb.capacity.max(1)))
                        .cmp(&(u64::from(cb.load) * u64::from(ca.capacity.max(1))))
                        .then_with(|| ca.executor_id.cmp(cb.executor_id))
                });
                order
            }
            Balance::First | Balance::Failover => by_address(candidates),
            Balance::Last => {
                let mut order = by_address(candidates);
                order.reverse();
                order
            }
            Balance::Busyover => {
                // The first by address that is idle; executors busy with other attempts after.
                let mut order = by_address(candidates);
                order.sort_by_key(|&i| candidates[i].load > 0);
                order
            }
            Balance::LeastFrequentlyUsed => self.least_frequently_used(group, candidates),
            Balance::LeastRecentlyUsed => self.least_recently_used(group, candidates),
            Balance::ConsistentHash => {
                // Rendezvous hashing: the highest score wins; only the keys of an executor that
                // leaves move.
                let mut scored: Vec<(u64, usize)> = candidates
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (mix(key ^ mix(fnv(c.executor_id))), i))
                    .collect();
                scored.sort_by_key(|s| std::cmp::Reverse(s.0));
                scored.into_iter().map(|(_, i)| i).collect()
            }
        };
        if let Some(avoid) = avoid
            && order.len() > 1
            && let Some(pos) = order
                .iter()
                .position(|&i| candidates[i].executor_id == avoid)
        {
            let avoided = order.remove(pos);
            order.push(avoided);
        }
        order
    }

    /// Smooth weighted round robin (as in nginx): each pick adds every weight to its current
    /// value, takes the highest, and subtracts the total from it; weights 1:2 give A B B A B B…
    /// evenly interleaved.
    fn smooth_weighted(&mut self, group: &str, candidates: &[Candidate<'_>]) -> Vec<usize> {
        let current = self.weighted.entry(group.to_owned()).or_default();
        current.retain(|id, _| candidates.iter().any(|c| c.executor_id == id));
        let total: i64 = candidates.iter().map(|c| i64::from(c.weight.max(1))).sum();
        for c in candidates {
            *current.entry(c.executor_id.to_owned()).or_default() += i64::from(c.weight.max(1));
        }
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        order.sort_by(|&a, &b| {
            let (ca, cb) = (candidates[a].executor_id, candidates[b].executor_id);
            current[cb].cmp(&current[ca]).then_with(|| ca.cmp(cb))
        });
        if let Some(&first) = order.first()
            && let Some(chosen) = current.get_mut(candidates[first].executor_id)
        {
            *chosen -= total;
        }
        order
    }

    /// The executor first offered the fewest attempts of the group goes first. One that joins
    /// starts at the group's lowest count, so it shares the work instead of taking all of it
    /// until it has caught up.
    fn least_frequently_used(&mut self, group: &str, candidates: &[Candidate<'_>]) -> Vec<usize> {
        let uses = self.uses.entry(group.to_owned()).or_default();
        uses.retain(|id, _| candidates.iter().any(|c| c.executor_id == id));
        let floor = uses.values().copied().min().unwrap_or(0);
        for c in candidates {
            uses.entry(c.executor_id.to_owned()).or_insert(floor);
        }
        let mut order = by_address(candidates);
        order.sort_by_key(|&i| uses[candidates[i].executor_id]);
        if let Some(&first) = order.first()
            && let Some(count) = uses.get_mut(candidates[first].executor_id)
        {
            *count += 1;
        }
        order
    }

    /// The executor whose last first offer in the group is oldest (or that never had one)
    /// goes first.
    fn least_recently_used(&mut self, group: &str, candidates: &[Candidate<'_>]) -> Vec<usize> {
        let (picks, last) = self.last_used.entry(group.to_owned()).or_default();
        last.retain(|id, _| candidates.iter().any(|c| c.executor_id == id));
        let mut order = by_address(candidates);
        order.sort_by_key(|&i| last.get(candidates[i].executor_id).copied().unwrap_or(0));
        if let Some(&first) = order.first() {
            *picks += 1;
            last.insert(candidates[first].executor_id.to_owned(), *picks);
        }
        order
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: plenty for spreading load.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Candidates in the order of their addresses (then ids, for executors sharing one).
fn by_address(candidates: &[Candidate<'_>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let (ca, cb) = (&candidates[a], &candidates[b]);
        (ca.address, ca.executor_id).cmp(&(cb.address, cb.executor_id))
    });
    order
}

/// FNV-1a of `text`: stable across processes and releases, unlike std's hasher.
pub(crate) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands<'a>(spec: &[(&'a str, u32, u32)]) -> Vec<Candidate<'a>> {
        spec.iter()
            .map(|(id, weight, load)| Candidate {
                executor_id: id,
                address: id,
                weight: *weight,
                load: *load,
                capacity: 10,
            })
            .collect()
    }

    fn picks(balance: Balance, c: &[Candidate<'_>], rounds: usize) -> HashMap<String, usize> {
        let mut b = Balancers::new(42);
        let mut counts = HashMap::new();
        for key in 0..rounds {
            let first = b.order(balance, "g", c, key as u64, None)[0];
            *counts.entry(c[first].executor_id.to_owned()).or_default() += 1;
        }
        counts
    }

    #[test]
    fn weighted_one_to_two_gives_one_to_two_evenly_interleaved() {
        let c = cands(&[("a", 1, 0), ("b", 2, 0)]);
        let mut b = Balancers::new(1);
        let seq: String = (0..6)
            .map(|_| c[b.order(Balance::Weighted, "g", &c, 0, None)[0]].executor_id)
            .collect();
        assert_eq!(seq, "babbab");
        let counts = picks(Balance::Weighted, &c, 300);
        assert_eq!((counts["a"], counts["b"]), (100, 200));
    }

    #[test]
    fn round_robin_and_random_spread_evenly() {
        let c = cands(&[("a", 1, 0), ("b", 1, 0), ("c", 1, 0)]);
        let rr = picks(Balance::RoundRobin, &c, 300);
        assert!(rr.values().all(|n| *n == 100), "{rr:?}");
        let random = picks(Balance::Random, &c, 3_000);
        assert!(
            random.values().all(|n| (800..1_200).contains(n)),
            "{random:?}"
        );
    }

    #[test]
    fn least_busy_prefers_the_lowest_load_for_its_capacity() {
        let mut c = cands(&[("a", 1, 5), ("b", 1, 2), ("c", 1, 9)]);
        c[2].capacity = 100;
        let order = Balancers::new(1).order(Balance::LeastBusy, "g", &c, 0, None);
        assert_eq!(order, vec![2, 1, 0]);
    }

    #[test]
    fn consistent_hash_keeps_keys_in_place_when_others_leave() {
        let c = cands(&[("a", 1, 0), ("b", 1, 0), ("c", 1, 0)]);
        let mut b = Balancers::new(1);
        let before: Vec<&str> = (0..100)
            .map(|k| c[b.order(Balance::ConsistentHash, "g", &c, k, None)[0]].executor_id)
            .collect();
        let without_c = cands(&[("a", 1, 0), ("b", 1, 0)]);
        for (k, owner) in before.iter().enumerate() {
            let now = without_c
                [b.order(Balance::ConsistentHash, "g", &without_c, k as u64, None)[0]]
                .executor_id;
            if *owner != "c" {
                assert_eq!(now, *owner, "key {k} moved although its executor stayed");
            }
        }
        assert!(before.contains(&"a") && before.contains(&"b") && before.contains(&"c"));
    }

    #[test]
    fn the_avoided_executor_goes_last() {
        let c = cands(&[("a", 1, 0), ("b", 1, 0)]);
        for balance in [
            Balance::RoundRobin,
            Balance::Weighted,
            Balance::LeastBusy,
            Balance::ConsistentHash,
            Balance::Random,
            Balance::First,
            Balance::Last,
            Balance::Failover,
            Balance::Busyover,
            Balance::LeastFrequentlyUsed,
            Balance::LeastRecentlyUsed,
        ] {
            let order = Balancers::new(7).order(balance, "g", &c, 3, Some("a"));
            assert_eq!(c[order[0]].executor_id, "b", "{balance:?}");
        }
    }

    #[test]
    fn first_last_failover_and_busyover_go_by_address() {
        let c = cands(&[("b", 1, 0), ("c", 1, 0), ("a", 1, 0)]);
        let mut b = Balancers::new(1);
        let ids = |order: Vec<usize>| order.iter().map(|&i| c[i].executor_id).collect::<String>();
        assert_eq!(ids(b.order(Balance::First, "g", &c, 0, None)), "abc");
        assert_eq!(ids(b.order(Balance::Failover, "g", &c, 0, None)), "abc");
        assert_eq!(ids(b.order(Balance::Last, "g", &c, 0, None)), "cba");
        let busy = cands(&[("b", 1, 0), ("c", 1, 0), ("a", 1, 3)]);
        let order = b.order(Balance::Busyover, "g", &busy, 0, None);
        let ids: String = order.iter().map(|&i| busy[i].executor_id).collect();
        assert_eq!(ids, "bca", "the busy executor goes after the idle ones");
    }

    #[test]
    fn least_frequently_used_shares_evenly_and_a_newcomer_does_not_take_everything() {
        let c = cands(&[("a", 1, 0), ("b", 1, 0)]);
        let counts = picks(Balance::LeastFrequentlyUsed, &c, 100);
        assert_eq!((counts["a"], counts["b"]), (50, 50));
        let mut b = Balancers::new(1);
        for _ in 0..100 {
            b.order(Balance::LeastFrequentlyUsed, "g", &c, 0, None);
        }
        let joined = cands(&[("a", 1, 0), ("b", 1, 0), ("c", 1, 0)]);
        let next: String = (0..6)
            .map(|_| {
                joined[b.order(Balance::LeastFrequentlyUsed, "g", &joined, 0, None)[0]].executor_id
            })
            .collect();
        assert_eq!(next, "abcabc", "the newcomer starts level with the others");
    }

    #[test]
    fn least_recently_used_picks_the_one_idle_longest() {
        let c = cands(&[("a", 1, 0), ("b", 1, 0), ("c", 1, 0)]);
        let mut b = Balancers::new(1);
        let seq: String = (0..6)
            .map(|_| c[b.order(Balance::LeastRecentlyUsed, "g", &c, 0, Some("zz"))[0]].executor_id)
            .collect();
        assert_eq!(seq, "abcabc");
        // Offered to `b` out of turn (it was avoided by the others), `b` waits longest next.
        let only_b = cands(&[("b", 1, 0)]);
        b.order(Balance::LeastRecentlyUsed, "g", &only_b, 0, None);
        let after: String = (0..3)
            .map(|_| c[b.order(Balance::LeastRecentlyUsed, "g", &c, 0, None)[0]].executor_id)
            .collect();
        assert_eq!(after, "acb");
    }
}
