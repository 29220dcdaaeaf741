//! Figures: percentiles, duplicates and missed instants, and their printing.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::executor::Receipt;

/// The `q`-quantile (0..=1) of sorted values.
pub(crate) fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// What arrived for the instants of a window.
#[derive(Debug, Default)]
pub(crate) struct Delivery {
    pub(crate) expected: u64,
    pub(crate) delivered: u64,
    pub(crate) duplicates: u64,
    pub(crate) missed: u64,
    pub(crate) lateness_sorted: Vec<i64>,
    /// Per instant of the window, the lateness of its last receipt, largest first: whether a
    /// p99 is every instant's tail or a few bad seconds.
    pub(crate) instant_max_desc: Vec<i64>,
}

/// Checks the receipts for `jobs`, each due at every instant of `instants`: one receipt per
/// (job, instant) is right, none is a miss, two or more are duplicates.
pub(crate) fn delivery(receipts: &[Receipt], jobs: &[i64], instants: &[i64]) -> Delivery {
    let wanted: std::collections::HashSet<i64> = jobs.iter().copied().collect();
    let window: std::collections::HashSet<i64> = instants.iter().copied().collect();
    let mut seen: HashMap<(i64, i64), u32> = HashMap::new();
    let mut lateness = Vec::new();
    let mut instant_max: HashMap<i64, i64> = HashMap::new();
    for r in receipts {
        if wanted.contains(&r.job_id) && window.contains(&r.scheduled_ms) {
            *seen.entry((r.job_id, r.scheduled_ms)).or_default() += 1;
            let late = r.received_ms - r.scheduled_ms;
            lateness.push(late);
            let max = instant_max.entry(r.scheduled_ms).or_insert(late);
            *max = (*max).max(late);
        }
    }
    lateness.sort_unstable();
    let mut instant_max_desc: Vec<i64> = instant_max.into_values().collect();
    instant_max_desc.sort_unstable_by(|a, b| b.cmp(a));
    let expected = (jobs.len() * instants.len()) as u64;
    let delivered = seen.len() as u64;
    Delivery {
        expected,
        delivered,
        duplicates: seen.values().map(|&n| u64::from(n.saturating_sub(1))).sum(),
        missed: expected.saturating_sub(delivered),
        lateness_sorted: lateness,
        instant_max_desc,
    }
}

/// A scenario's figures, printed as a table or one JSON object.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) scenario: String,
    rows: Vec<(String, Value)>,
}

impl Report {
    pub(crate) fn new(scenario: &str) -> Self {
        Self {
            scenario: scenario.to_owned(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn add(&mut self, key: &str, value: impl Into<Value>) {
        self.rows.push((key.to_owned(), value.into()));
    }

    /// The integer figure `key`, 0 when absent.
    pub(crate) fn count(&self, key: &str) -> u64 {
        self.rows
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(0)
    }

    pub(crate) fn add_all(&mut self, rows: Vec<(String, Value)>) {
        self.rows.extend(rows);
    }

    pub(crate) fn add_delivery(&mut self, d: &Delivery) {
        self.add("instants_expected", d.expected);
        self.add("instants_delivered", d.delivered);
        self.add("duplicates", d.duplicates);
        self.add("missed", d.missed);
        self.add("lateness_p50_ms", quantile(&d.lateness_sorted, 0.50));
        self.add("lateness_p99_ms", quantile(&d.lateness_sorted, 0.99));
        self.add(
            "lateness_max_ms",
            d.lateness_sorted.last().copied().unwrap_or(0),
        );
        if d.instant_max_desc.len() > 1 {
            let within = d.instant_max_desc.iter().filter(|&&m| m < 100).count();
            self.add(
                "instants_done_within_100ms",
                format!("{within} of {}", d.instant_max_desc.len()),
            );
            let worst: Vec<String> = d
                .instant_max_desc
                .iter()
                .take(5)
                .map(i64::to_string)
                .collect();
            self.add("slowest_instants_ms", worst.join(" "));
        }
    }

    pub(crate) fn print(&self, json: bool) {
        let mut out = String::new();
        if json {
            let mut map = Map::new();
            map.insert("scenario".into(), Value::from(self.scenario.clone()));
            for (k, v) in &self.rows {
                map.insert(k.clone(), v.clone());
            }
            out.push_str(&Value::Object(map).to_string());
        } else {
            let width = self.rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
            out.push_str(&format!("scenario: {}\n", self.scenario));
            for (k, v) in &self.rows {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.push_str(&format!("  {k:<width$}  {v}\n"));
            }
        }
        // The figures are this tool's output.
        #[allow(clippy::print_stdout, reason = "the bench prints its figures")]
        {
            println!("{}", out.trim_end());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_and_misses_are_counted_per_job_and_instant() {
        let r = |job_id, scheduled_ms, received_ms| Receipt {
            job_id,
            run_id: 0,
            scheduled_ms,
            received_ms,
        };
        let receipts = [
            r(1, 1000, 1005),
            r(1, 1000, 1010),
            r(2, 1000, 1003),
            r(1, 2000, 2001),
        ];
        let d = delivery(&receipts, &[1, 2], &[1000, 2000]);
        assert_eq!(
            (d.expected, d.delivered, d.duplicates, d.missed),
            (4, 3, 1, 1)
        );
        assert_eq!(d.lateness_sorted, vec![1, 3, 5, 10]);
        assert_eq!(quantile(&d.lateness_sorted, 0.5), 5);
    }
}
