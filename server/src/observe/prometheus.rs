//! The three kinds of series `/metrics` shows, written in the Prometheus text format (0.0.4).
//! Small on purpose: a node has a dozen series, and a counter must cost one atomic add (or one
//! short lock for a labelled one) on the dispatch path.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// A counter without labels.
#[derive(Debug)]
pub struct Counter {
    name: &'static str,
    help: &'static str,
    value: AtomicU64,
}

impl Counter {
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            value: AtomicU64::new(0),
        }
    }

    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }

    pub fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "counter");
        let _ = writeln!(out, "{} {}", self.name, self.get());
    }
}

/// A counter per value of one label, e.g. dispatches by outcome. Values are created on first
/// use; `preset` ones show as 0 before that, so a rate over them is defined from the start.
#[derive(Debug)]
pub struct LabelledCounter {
    name: &'static str,
    help: &'static str,
    label: &'static str,
    values: Mutex<BTreeMap<String, u64>>,
}

impl LabelledCounter {
    pub fn new(
        name: &'static str,
        help: &'static str,
        label: &'static str,
        preset: &[&str],
    ) -> Self {
        Self {
            name,
            help,
            label,
            values: Mutex::new(preset.iter().map(|v| ((*v).to_owned(), 0)).collect()),
        }
    }

    pub fn add(&self, value: &str, n: u64) {
        let mut values = match self.values.lock() {
            Ok(values) => values,
            Err(poisoned) => poisoned.into_inner(),
        };
        match values.get_mut(value) {
            Some(count) => *count += n,
            None => {
                values.insert(value.to_owned(), n);
            }
        }
    }

    pub fn get(&self, value: &str) -> u64 {
        let values = match self.values.lock() {
            Ok(values) => values,
            Err(poisoned) => poisoned.into_inner(),
        };
        values.get(value).copied().unwrap_or(0)
    }

    pub fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "counter");
        let values = match self.values.lock() {
            Ok(values) => values.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        for (value, count) in values {
            let _ = writeln!(
                out,
                "{}{{{}=\"{}\"}} {count}",
                self.name,
                self.label,
                escape(&value)
            );
        }
    }
}

/// A counter per namespace and per value of one more label (or of none), e.g. runs finished
/// by namespace and state. Namespaces are counted by id and named when rendered, so counting
/// never looks a name up. `preset` values of the `preset_namespaces` show as 0 from the start.
#[derive(Debug)]
pub struct NamespacedCounter {
    name: &'static str,
    help: &'static str,
    label: Option<&'static str>,
    values: Mutex<BTreeMap<i64, BTreeMap<String, u64>>>,
}

impl NamespacedCounter {
    pub fn new(
        name: &'static str,
        help: &'static str,
        label: Option<&'static str>,
        preset: &[&str],
        preset_namespaces: &[i64],
    ) -> Self {
        let values = preset_namespaces
            .iter()
            .map(|namespace| {
                let zeros = if label.is_some() {
                    preset.iter().map(|v| ((*v).to_owned(), 0)).collect()
                } else {
                    BTreeMap::from([(String::new(), 0)])
                };
                (*namespace, zeros)
            })
            .collect();
        Self {
            name,
            help,
            label,
            values: Mutex::new(values),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, BTreeMap<String, u64>>> {
        match self.values.lock() {
            Ok(values) => values,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Counts `n` for `namespace` and `value` (`""` for a counter without a second label).
    pub fn add(&self, namespace: i64, value: &str, n: u64) {
        let mut values = self.lock();
        let counts = values.entry(namespace).or_default();
        match counts.get_mut(value) {
            Some(count) => *count += n,
            None => {
                counts.insert(value.to_owned(), n);
            }
        }
    }

    /// The namespaces counted, by id.
    pub fn namespaces(&self) -> Vec<i64> {
        self.lock().keys().copied().collect()
    }

    /// Writes the series, naming each namespace with `name_of`.
    pub fn render(&self, out: &mut String, name_of: &dyn Fn(i64) -> String) {
        header(out, self.name, self.help, "counter");
        let values = self.lock().clone();
        for (namespace, counts) in values {
            let namespace = escape(&name_of(namespace));
            for (value, count) in counts {
                match self.label {
                    Some(label) => {
                        let _ = writeln!(
                            out,
                            "{}{{namespace=\"{namespace}\",{label}=\"{}\"}} {count}",
                            self.name,
                            escape(&value)
                        );
                    }
                    None => {
                        let _ = writeln!(out, "{}{{namespace=\"{namespace}\"}} {count}", self.name);
                    }
                }
            }
        }
    }
}

/// A histogram with fixed buckets, in seconds.
#[derive(Debug)]
pub struct Histogram {
    name: &'static str,
    help: &'static str,
    /// Upper bounds in seconds, ascending; `+Inf` is implied.
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative; the last is above every bound).
    buckets: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn new(name: &'static str, help: &'static str, bounds: &'static [f64]) -> Self {
        Self {
            name,
            help,
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation of `millis` milliseconds (negative counts as 0).
    pub fn observe_ms(&self, millis: i64) {
        let millis = millis.max(0);
        let seconds = millis as f64 / 1_000.0;
        let index = self
            .bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(self.bounds.len());
        if let Some(bucket) = self.buckets.get(index) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros.fetch_add(
            u64::try_from(millis).unwrap_or(0).saturating_mul(1_000),
            Ordering::Relaxed,
        );
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "histogram");
        let mut cumulative = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = self
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| format!("{b}"));
            let _ = writeln!(out, "{}_bucket{{le=\"{le}\"}} {cumulative}", self.name);
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1_000_000.0;
        let _ = writeln!(out, "{}_sum {sum}", self.name);
        // The count written is the buckets' total, so the two always agree in one scrape.
        let _ = writeln!(out, "{}_count {cumulative}", self.name);
    }
}

/// A counter kept outside [`NodeMetrics`], read at scrape time.
pub fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    header(out, name, help, "counter");
    let _ = writeln!(out, "{name} {value}");
}

/// A gauge read at scrape time.
pub fn gauge(out: &mut String, name: &str, help: &str, value: f64) {
    header(out, name, help, "gauge");
    let _ = writeln!(out, "{name} {value}");
}

/// A gauge per value of one label, read at scrape time.
pub fn labelled_gauge<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, f64)>,
) {
    header(out, name, help, "gauge");
    for (value, number) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {number}", escape(value));
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets_its_sum_and_count() {
        let h = Histogram::new("lateness_seconds", "how late", &[0.1, 1.0]);
        h.observe_ms(50);
        h.observe_ms(500);
        h.observe_ms(5_000);
        h.observe_ms(-3);
        let mut out = String::new();
        h.render(&mut out);
        assert!(out.contains("# TYPE lateness_seconds histogram"), "{out}");
        assert!(
            out.contains("lateness_seconds_bucket{le=\"0.1\"} 2"),
            "{out}"
        );
        assert!(out.contains("lateness_seconds_bucket{le=\"1\"} 3"), "{out}");
        assert!(
            out.contains("lateness_seconds_bucket{le=\"+Inf\"} 4"),
            "{out}"
        );
        assert!(out.contains("lateness_seconds_sum 5.55"), "{out}");
        assert!(out.contains("lateness_seconds_count 4"), "{out}");
    }

    #[test]
    fn labelled_counters_show_presets_at_zero_and_escape_values() {
        let c = LabelledCounter::new("dispatches_total", "d", "outcome", &["accepted"]);
        c.add("we\"ird\n", 2);
        let mut out = String::new();
        c.render(&mut out);
        assert!(
            out.contains("dispatches_total{outcome=\"accepted\"} 0"),
            "{out}"
        );
        assert!(
            out.contains("dispatches_total{outcome=\"we\\\"ird\\n\"} 2"),
            "{out}"
        );
    }

    #[test]
    fn namespaced_counters_name_namespaces_when_rendered() {
        let c = NamespacedCounter::new("runs_total", "r", Some("state"), &["failed"], &[1]);
        c.add(7, "failed", 2);
        c.add(1, "succeeded", 1);
        let plain = NamespacedCounter::new("dead_total", "d", None, &[], &[1]);
        plain.add(7, "", 3);
        let name_of = |id: i64| {
            if id == 1 {
                "default".to_owned()
            } else {
                format!("team-{id}")
            }
        };
        let mut out = String::new();
        c.render(&mut out, &name_of);
        plain.render(&mut out, &name_of);
        for series in [
            "runs_total{namespace=\"default\",state=\"failed\"} 0",
            "runs_total{namespace=\"default\",state=\"succeeded\"} 1",
            "runs_total{namespace=\"team-7\",state=\"failed\"} 2",
            "dead_total{namespace=\"default\"} 0",
            "dead_total{namespace=\"team-7\"} 3",
        ] {
            assert!(out.contains(series), "{series} in {out}");
        }
        assert_eq!(c.namespaces(), [1, 7]);
    }
}
