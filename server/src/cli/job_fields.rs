//! The job fields `carillon jobs create` and `jobs edit` take as flags, over a file's.

use clap::Args;
use serde_json::{Value, json};

/// Job fields as flags.
#[derive(Debug, Default, Args)]
pub(crate) struct JobFields {
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    app: Option<String>,
    #[arg(long)]
    handler: Option<String>,
    #[arg(long, group = "schedule")]
    cron: Option<String>,
    #[arg(long, group = "schedule")]
    rrule: Option<String>,
    #[arg(long, group = "schedule")]
    at: Option<String>,
    /// A fixed rate: every this long from the job's start (`10s`, `5m`, `1h`).
    #[arg(long, group = "schedule")]
    every: Option<String>,
    /// Each run due this long after the previous one ended (`30s`, `5m`).
    #[arg(long, group = "schedule")]
    fixed_delay: Option<String>,
    /// IANA time zone.
    #[arg(long)]
    tz: Option<String>,
    /// Arguments, as JSON.
    #[arg(long)]
    args: Option<String>,
    /// No instant before this one (RFC 3339, or a wall time in the job's zone).
    #[arg(long)]
    not_before: Option<String>,
    /// No instant after this one: the job is done once its schedule passes it.
    #[arg(long)]
    not_after: Option<String>,
    /// The job is done after this many scheduled runs.
    #[arg(long)]
    max_runs: Option<u64>,
    /// Delay each scheduled run by up to this many milliseconds (fixed per instant).
    #[arg(long)]
    jitter_ms: Option<u64>,
    /// An exclusion calendar by name (repeat for several; replaces the job's list).
    #[arg(long = "calendar")]
    calendars: Vec<String>,
    /// A job (by id) to run after each run of this one succeeds; repeat for several. The three
    /// `--child-*` flags together replace the job's children.
    #[arg(long = "child-on-success")]
    child_on_success: Vec<i64>,
    /// A job (by id) to run after each run of this one fails or finds no executor.
    #[arg(long = "child-on-failure")]
    child_on_failure: Vec<i64>,
    /// A job (by id) to run after each run of this one succeeds or fails.
    #[arg(long = "child-always")]
    child_always: Vec<i64>,
    /// Stop the job after this many failed runs in a row, and alert.
    #[arg(long)]
    pause_after_failures: Option<u32>,
    /// at_least_once (the default), at_most_once or exactly_once_effect.
    #[arg(long)]
    delivery: Option<String>,
    /// Flow control: the key the job's runs are counted under, shared by every job and task
    /// of the namespace naming it.
    #[arg(long)]
    flow_key: Option<String>,
    /// A JSON pointer into the job's arguments (`/customer`) whose value makes a key per value.
    #[arg(long)]
    flow_key_arg: Option<String>,
    /// Most runs of the flow key pending or running at once.
    #[arg(long)]
    max_in_flight: Option<u32>,
    /// Most runs of the flow key started per `--rate-per-ms` window.
    #[arg(long)]
    rate_limit: Option<u32>,
    /// The rate window in milliseconds (with `--rate-limit`).
    #[arg(long)]
    rate_per_ms: Option<u64>,
    /// What a run finding its flow key full does: queue (the default) or drop.
    #[arg(long)]
    on_full: Option<String>,
    /// Free text for the job's operators.
    #[arg(long)]
    description: Option<String>,
    /// Start the job when it is created.
    #[arg(long)]
    start: bool,
}

impl JobFields {
    /// The fields given, over `base`; an error names the flag and what is wrong with it.
    pub(super) fn over(
        &self,
        mut base: Value,
        creating: bool,
    ) -> Result<Value, (&'static str, String)> {
        if !base.is_object() {
            base = json!({});
        }
        let set = |doc: &mut Value, key: &str, value: &Option<String>| {
            if let Some(v) = value {
                doc[key] = json!(v);
            }
        };
        set(&mut base, "name", &self.name);
        set(&mut base, "app", &self.app);
        set(&mut base, "handler", &self.handler);
        set(&mut base, "timezone", &self.tz);
        set(&mut base, "delivery", &self.delivery);
        set(&mut base, "description", &self.description);
        for (key, value) in [
            ("cron", &self.cron),
            ("rrule", &self.rrule),
            ("at", &self.at),
            ("every", &self.every),
            ("fixed_delay", &self.fixed_delay),
        ] {
            if let Some(v) = value {
                base["schedule"] = json!({ key: v });
            }
        }
        if let Some(args) = &self.args {
            base["args"] =
                serde_json::from_str(args).map_err(|e| ("args", format!("not JSON: {e}")))?;
        }
        for (key, value) in [
            ("not_before", self.not_before.as_ref().map(|v| json!(v))),
            ("not_after", self.not_after.as_ref().map(|v| json!(v))),
            ("max_runs", self.max_runs.map(|v| json!(v))),
        ] {
            if let Some(v) = value {
                if !base["bounds"].is_object() {
                    base["bounds"] = json!({});
                }
                base["bounds"][key] = v;
            }
        }
        if let Some(jitter) = self.jitter_ms {
            base["jitter_ms"] = json!(jitter);
        }
        if !self.calendars.is_empty() {
            base["calendars"] = json!(self.calendars);
        }
        let children = [
            ("on_success", &self.child_on_success),
            ("on_failure", &self.child_on_failure),
            ("always", &self.child_always),
        ];
        if children.iter().any(|(_, ids)| !ids.is_empty()) {
            base["children"] = children
                .iter()
                .filter(|(_, ids)| !ids.is_empty())
                .map(|(list, ids)| ((*list).to_owned(), json!(ids)))
                .collect::<serde_json::Map<String, Value>>()
                .into();
        }
        if let Some(failures) = self.pause_after_failures {
            base["pause_after_failures"] = json!(failures);
        }
        self.flow_over(&mut base)
            .map_err(|why| ("rate-limit", why))?;
        if creating && self.start {
            base["start"] = json!(true);
        }
        Ok(base)
    }

    /// The `--flow-*`, `--max-in-flight`, `--rate-*` and `--on-full` flags over the job's
    /// `flow` (the server checks what they make).
    fn flow_over(&self, base: &mut Value) -> Result<(), String> {
        let fields = [
            ("key", self.flow_key.as_ref().map(|v| json!(v))),
            ("key_arg", self.flow_key_arg.as_ref().map(|v| json!(v))),
            ("max_in_flight", self.max_in_flight.map(|v| json!(v))),
            ("on_full", self.on_full.as_ref().map(|v| json!(v))),
        ];
        let rate = match (self.rate_limit, self.rate_per_ms) {
            (Some(limit), Some(per_ms)) => Some(json!({"limit": limit, "per_ms": per_ms})),
            (None, None) => None,
            _ => return Err("--rate-limit and --rate-per-ms go together".to_owned()),
        };
        if fields.iter().all(|(_, v)| v.is_none()) && rate.is_none() {
            return Ok(());
        }
        if !base["flow"].is_object() {
            base["flow"] = json!({});
        }
        for (key, value) in fields {
            if let Some(value) = value {
                base["flow"][key] = value;
            }
        }
        if let Some(rate) = rate {
            base["flow"]["rate"] = rate;
        }
        Ok(())
    }
}
