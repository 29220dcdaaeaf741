//! Splitting a run into shards.

use std::ops::Range;

use serde_json::Value;

use crate::jobs::Sharding;
use crate::store::{ExecutorRecord, NewAttempt};

/// Splits `len` elements into contiguous ranges in proportion to `weights` (largest
/// remainder), covering every element exactly once, in order. Krest-Job's example: weights 1
/// and 2 split nine elements as the first three and the last six.
pub fn split(len: usize, weights: &[u32]) -> Vec<Range<usize>> {
    if weights.is_empty() {
        return Vec::new();
    }
    let total: u128 = weights.iter().map(|w| u128::from((*w).max(1))).sum();
    let exact: Vec<(usize, u128)> = weights
        .iter()
        .map(|w| {
            let share = len as u128 * u128::from((*w).max(1));
            ((share / total) as usize, share % total)
        })
        .collect();
    let mut sizes: Vec<usize> = exact.iter().map(|(q, _)| *q).collect();
    let mut left = len - sizes.iter().sum::<usize>();
    // Hand the remainder to the largest fractional parts, earlier executors first on ties.
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    by_remainder.sort_by(|&a, &b| exact[b].1.cmp(&exact[a].1).then(a.cmp(&b)));
    for i in by_remainder {
        if left == 0 {
            break;
        }
        sizes[i] += 1;
        left -= 1;
    }
    let mut start = 0;
    sizes
        .into_iter()
        .map(|size| {
            let range = start..start + size;
            start += size;
            range
        })
        .collect()
}

/// The first attempts of a run: one per shard (broadcast: one per executor; a count; or
/// the args array split over the executors by weight).
pub fn first_attempts(
    sharding: &Sharding,
    args: &Value,
    executors: &[&ExecutorRecord],
) -> Vec<NewAttempt> {
    let one = |index: usize, total: usize, args: &Value, prefer: Option<&str>| NewAttempt {
        shard_index: index as i64,
        shard_total: total as i64,
        args_json: args.to_string(),
        prefer_executor_id: prefer.map(str::to_owned),
        delay_ms: 0,
    };
    if sharding.broadcast {
        let total = executors.len();
        return executors
            .iter()
            .enumerate()
            .map(|(i, e)| one(i, total, args, Some(&e.executor_id)))
            .collect();
    }
    if let Some(count) = sharding.count {
        let total = count.max(1) as usize;
        return (0..total).map(|i| one(i, total, args, None)).collect();
    }
    if sharding.split
        && let Some(items) = args.as_array()
    {
        let weights: Vec<u32> = executors
            .iter()
            .map(|e| u32::try_from(e.weight).unwrap_or(1))
            .collect();
        let parts: Vec<(usize, std::ops::Range<usize>)> = split(items.len(), &weights)
            .into_iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .collect();
        if parts.is_empty() {
            return vec![one(0, 1, args, None)];
        }
        let total = parts.len();
        return parts
            .into_iter()
            .enumerate()
            .map(|(index, (executor, range))| {
                let part = Value::Array(items[range].to_vec());
                one(index, total, &part, Some(&executors[executor].executor_id))
            })
            .collect();
    }
    vec![one(0, 1, args, None)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_krest_job_example() {
        assert_eq!(split(9, &[1, 2]), vec![0..3, 3..9]);
    }

    #[test]
    fn every_element_exactly_once_for_any_number_of_executors() {
        for len in [0usize, 1, 2, 7, 9, 100, 1_001] {
            for weights in [
                vec![1],
                vec![1, 1],
                vec![3, 1, 2],
                vec![1, 2, 3, 4, 5],
                vec![5; 7],
                vec![1; 13],
            ] {
                let ranges = split(len, &weights);
                assert_eq!(ranges.len(), weights.len());
                let mut next = 0;
                for r in &ranges {
                    assert_eq!(
                        r.start, next,
                        "contiguous: {len} over {weights:?}: {ranges:?}"
                    );
                    next = r.end;
                }
                assert_eq!(next, len);
                let total: u32 = weights.iter().sum();
                for (r, w) in ranges.iter().zip(&weights) {
                    let ideal = len as f64 * f64::from(*w) / f64::from(total);
                    assert!(
                        (r.len() as f64 - ideal).abs() < 1.0,
                        "{len} over {weights:?}: {ranges:?}"
                    );
                }
            }
        }
    }
}
