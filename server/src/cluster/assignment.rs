//! The leader's partition plan: spread partitions evenly over live nodes, moving as few as
//! possible. Pure: no I/O, no clock, so it is tested by tables of cases.

use std::collections::BTreeMap;

use crate::store::{PartitionChange, PartitionRecord};

/// Computes the changes that bring `partitions` to an even spread over `live` nodes.
///
/// Each live node's quota is `P / N` or one more; the nodes that already hold the most keep the
/// extra ones, so a balanced cluster yields no change and a join or death moves only the
/// partitions it must. A partition whose owner is dead is assigned directly; one whose owner is
/// alive is only asked to move (`RequestHandOff`), and its owner completes the move after it has
/// stopped acting on it, so no two live nodes ever act on one partition.
pub fn plan(partitions: &[PartitionRecord], live: &[String]) -> Vec<PartitionChange> {
    if live.is_empty() {
        return Vec::new();
    }
    let is_live = |id: &Option<String>| id.as_ref().is_some_and(|id| live.contains(id));

    // Where each partition is headed: its pending owner if that node lives, else its owner.
    let mut holdings: BTreeMap<&str, Vec<&PartitionRecord>> =
        live.iter().map(|id| (id.as_str(), Vec::new())).collect();
    let mut unplaced: Vec<&PartitionRecord> = Vec::new();
    for p in partitions {
        let target = if is_live(&p.pending_owner_node_id) {
            p.pending_owner_node_id.as_deref()
        } else if is_live(&p.owner_node_id) {
            p.owner_node_id.as_deref()
        } else {
            None
        };
        match target.and_then(|t| holdings.get_mut(t)) {
            Some(held) => held.push(p),
            None => unplaced.push(p),
        }
    }

    let quotas = quotas(&holdings, partitions.len());
    let mut changes = Vec::new();
    let mut wanting: Vec<(&str, usize)> = Vec::new();
    for (node, held) in &mut holdings {
        let quota = quotas[node];
        if held.len() > quota {
            // Give away the highest-numbered partitions: deterministic and easy to follow.
            held.sort_by_key(|p| p.partition_id);
            unplaced.extend(held.drain(quota..));
        } else if held.len() < quota {
            wanting.push((node, quota - held.len()));
        }
        for p in held.iter() {
            changes.extend(confirm(p, node, &is_live));
        }
    }

    unplaced.sort_by_key(|p| p.partition_id);
    let mut unplaced = unplaced.into_iter();
    for (node, missing) in wanting {
        for p in unplaced.by_ref().take(missing) {
            changes.push(move_to(p, node, &is_live));
        }
    }
    changes.sort_by_key(partition_of);
    changes
}

/// Quota per live node: `total / n`, plus one for the `total % n` nodes holding the most
/// (ties broken by node id).
fn quotas<'a>(
    holdings: &BTreeMap<&'a str, Vec<&PartitionRecord>>,
    total: usize,
) -> BTreeMap<&'a str, usize> {
    let n = holdings.len();
    let (base, extra) = (total / n, total % n);
    let mut by_size: Vec<(&str, usize)> = holdings.iter().map(|(k, v)| (*k, v.len())).collect();
    by_size.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    by_size
        .into_iter()
        .enumerate()
        .map(|(rank, (node, _))| (node, base + usize::from(rank < extra)))
        .collect()
}

/// A partition staying with (or already headed to) `node`: tidy what the move left behind.
fn confirm(
    p: &PartitionRecord,
    node: &str,
    is_live: &impl Fn(&Option<String>) -> bool,
) -> Option<PartitionChange> {
    let headed_to_node = p.pending_owner_node_id.as_deref() == Some(node);
    if headed_to_node && !is_live(&p.owner_node_id) {
        // The owner died before handing over: nobody acts on it, assign it outright.
        return Some(assign(p, node));
    }
    if p.pending_owner_node_id.is_some() && !headed_to_node {
        // The hand-off target is gone; the owner keeps it.
        return Some(PartitionChange::CancelHandOff {
            partition_id: p.partition_id,
            expected_epoch: p.epoch,
        });
    }
    None
}

fn move_to(
    p: &PartitionRecord,
    node: &str,
    is_live: &impl Fn(&Option<String>) -> bool,
) -> PartitionChange {
    if is_live(&p.owner_node_id) && p.owner_node_id.as_deref() != Some(node) {
        PartitionChange::RequestHandOff {
            partition_id: p.partition_id,
            expected_epoch: p.epoch,
            to: node.to_owned(),
        }
    } else {
        assign(p, node)
    }
}

fn assign(p: &PartitionRecord, node: &str) -> PartitionChange {
    PartitionChange::Assign {
        partition_id: p.partition_id,
        expected_epoch: p.epoch,
        owner: node.to_owned(),
    }
}

fn partition_of(change: &PartitionChange) -> i64 {
    match change {
        PartitionChange::Assign { partition_id, .. }
        | PartitionChange::RequestHandOff { partition_id, .. }
        | PartitionChange::CancelHandOff { partition_id, .. } => *partition_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions(owners: &[Option<&str>]) -> Vec<PartitionRecord> {
        owners
            .iter()
            .enumerate()
            .map(|(i, owner)| PartitionRecord {
                partition_id: i as i64,
                owner_node_id: owner.map(str::to_owned),
                pending_owner_node_id: None,
                epoch: 7,
                updated_at_ms: 0,
            })
            .collect()
    }

    fn nodes(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    /// Applies a plan the way the cluster would once every hand-off completes.
    fn settle(
        mut parts: Vec<PartitionRecord>,
        changes: &[PartitionChange],
    ) -> Vec<PartitionRecord> {
        for change in changes {
            match change {
                PartitionChange::Assign {
                    partition_id,
                    owner,
                    ..
                }
                | PartitionChange::RequestHandOff {
                    partition_id,
                    to: owner,
                    ..
                } => {
                    let p = &mut parts[*partition_id as usize];
                    p.owner_node_id = Some(owner.clone());
                    p.pending_owner_node_id = None;
                    p.epoch += 1;
                }
                PartitionChange::CancelHandOff { partition_id, .. } => {
                    parts[*partition_id as usize].pending_owner_node_id = None;
                }
            }
        }
        parts
    }

    fn counts(parts: &[PartitionRecord], live: &[String]) -> Vec<usize> {
        live.iter()
            .map(|n| {
                parts
                    .iter()
                    .filter(|p| p.owner_node_id.as_ref() == Some(n))
                    .count()
            })
            .collect()
    }

    #[test]
    fn fresh_partitions_are_spread_evenly_and_assigned_directly() {
        let live = nodes(&["a", "b", "c"]);
        let parts = partitions(&[None; 256]);
        let changes = plan(&parts, &live);
        assert_eq!(changes.len(), 256);
        assert!(
            changes
                .iter()
                .all(|c| matches!(c, PartitionChange::Assign { .. }))
        );
        let mut c = counts(&settle(parts, &changes), &live);
        c.sort();
        assert_eq!(c, vec![85, 85, 86]);
    }

    #[test]
    fn a_balanced_cluster_needs_no_change() {
        let live = nodes(&["a", "b", "c"]);
        let parts = settle(
            partitions(&[None; 100]),
            &plan(&partitions(&[None; 100]), &live),
        );
        assert_eq!(plan(&parts, &live), vec![]);
    }

    #[test]
    fn a_joining_node_takes_only_its_share_by_hand_off() {
        let live = nodes(&["a", "b", "c"]);
        let parts = settle(
            partitions(&[None; 256]),
            &plan(&partitions(&[None; 256]), &live),
        );
        let live4 = nodes(&["a", "b", "c", "d"]);
        let changes = plan(&parts, &live4);
        assert_eq!(changes.len(), 64, "only the new node's quota moves");
        assert!(changes.iter().all(|c| matches!(
            c,
            PartitionChange::RequestHandOff { to, .. } if to == "d"
        )));
        let settled = settle(parts, &changes);
        assert_eq!(counts(&settled, &live4), vec![64, 64, 64, 64]);
        assert_eq!(plan(&settled, &live4), vec![]);
    }

    #[test]
    fn a_dead_nodes_partitions_go_to_the_living_and_nothing_else_moves() {
        let live = nodes(&["a", "b", "c"]);
        let parts = settle(
            partitions(&[None; 90]),
            &plan(&partitions(&[None; 90]), &live),
        );
        let survivors = nodes(&["a", "c"]);
        let changes = plan(&parts, &survivors);
        assert_eq!(changes.len(), 30);
        for change in &changes {
            let PartitionChange::Assign {
                partition_id,
                owner,
                ..
            } = change
            else {
                panic!("a dead owner's partition is assigned directly: {change:?}");
            };
            assert_eq!(
                parts[*partition_id as usize].owner_node_id.as_deref(),
                Some("b")
            );
            assert_ne!(owner, "b");
        }
        assert_eq!(counts(&settle(parts, &changes), &survivors), vec![45, 45]);
    }

    #[test]
    fn a_hand_off_to_a_dead_node_is_cancelled_and_redone() {
        let live = nodes(&["a", "b"]);
        let mut parts = partitions(&[Some("a"), Some("a"), Some("b"), Some("b")]);
        parts[0].pending_owner_node_id = Some("ghost".into());
        let changes = plan(&parts, &live);
        assert_eq!(
            changes,
            vec![PartitionChange::CancelHandOff {
                partition_id: 0,
                expected_epoch: 7
            }]
        );
    }

    #[test]
    fn a_hand_off_whose_owner_died_is_assigned_to_its_target() {
        let live = nodes(&["b"]);
        let mut parts = partitions(&[Some("a"), Some("b")]);
        parts[0].pending_owner_node_id = Some("b".into());
        assert_eq!(
            plan(&parts, &live),
            vec![PartitionChange::Assign {
                partition_id: 0,
                expected_epoch: 7,
                owner: "b".into()
            }]
        );
    }

    #[test]
    fn no_live_node_means_no_plan() {
        assert_eq!(plan(&partitions(&[Some("a")]), &[]), vec![]);
    }

    #[test]
    fn uneven_counts_settle_within_one_of_each_other() {
        for n in 1..=7 {
            for total in [1usize, 5, 16, 97, 256] {
                let live: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
                let parts = settle(
                    partitions(&vec![None; total]),
                    &plan(&partitions(&vec![None; total]), &live),
                );
                let c = counts(&parts, &live);
                let (min, max) = (c.iter().min().unwrap(), c.iter().max().unwrap());
                assert!(max - min <= 1, "{n} nodes, {total} partitions: {c:?}");
                assert_eq!(c.iter().sum::<usize>(), total);
            }
        }
    }
}
