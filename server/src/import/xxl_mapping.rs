//! XXL-JOB's job rows as Carillon job documents: what maps to what, and what cannot come
//! across. No I/O.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Value, json};

use crate::jobs::{JobDefinition, JobInput};

/// An executor group (`xxl_job_group`): an XXL-JOB app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XxlGroup {
    pub id: i64,
    pub app_name: String,
    pub title: String,
}

/// A job (`xxl_job_info`), with the columns the import reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XxlJob {
    pub id: i64,
    pub job_group: i64,
    pub job_desc: String,
    pub author: String,
    pub alarm_email: String,
    pub schedule_type: String,
    pub schedule_conf: String,
    pub misfire_strategy: String,
    pub executor_route_strategy: String,
    pub executor_handler: String,
    pub executor_param: String,
    pub executor_block_strategy: String,
    /// Seconds; 0 for none.
    pub executor_timeout: i64,
    pub executor_fail_retry_count: i64,
    pub glue_type: String,
    /// XXL-JOB ids of the jobs to trigger after this one, comma-separated.
    pub child_jobid: String,
    /// 1 when the job is running.
    pub trigger_status: i64,
}

/// How the import reads XXL-JOB's jobs.
#[derive(Debug, Clone)]
pub struct MappingOptions {
    /// The zone XXL-JOB's admin evaluated cron in (its JVM's zone).
    pub timezone: String,
    /// XXL-JOB app name → Carillon app, where they differ.
    pub app_map: HashMap<String, String>,
}

/// One XXL-JOB job in the plan: a Carillon job, or why there is none.
#[derive(Debug, Clone, Serialize)]
pub struct Mapped {
    pub xxl_id: i64,
    pub name: String,
    /// The job document to create or update; `None` when the job cannot come across.
    pub document: Option<Value>,
    /// Whether the job is to run (XXL-JOB's trigger status), when it comes across.
    pub start: bool,
    /// What the reader should know: what was kept only as text, what was changed.
    pub notes: Vec<String>,
    /// Why the job does not come across.
    pub not_importable: Option<String>,
    /// XXL-JOB ids of the jobs to run after each of its runs that succeeds (its child jobs):
    /// set as `children.on_success` once those jobs have Carillon ids.
    pub children: Vec<i64>,
}

impl Mapped {
    /// The checked definition of the document (what `apply` compares with the server's).
    pub fn definition(&self) -> Option<JobDefinition> {
        let input: JobInput = serde_json::from_value(self.document.clone()?).ok()?;
        input.into_definition().ok()
    }
}

/// The name of an imported job: its XXL-JOB id first, which is what finds it again when the
/// import runs once more, even after its description changed.
pub fn job_name(xxl_id: i64, job_desc: &str) -> String {
    let desc: String = job_desc
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let desc = desc.trim();
    if desc.is_empty() {
        name_prefix(xxl_id).trim_end().to_owned()
    } else {
        format!("{}{desc}", name_prefix(xxl_id))
    }
}

/// What every name of the XXL-JOB job `xxl_id` starts with.
pub fn name_prefix(xxl_id: i64) -> String {
    format!("xxl-{xxl_id}: ")
}

/// Maps every job of `jobs`, in XXL-JOB id order.
pub fn map_all(groups: &[XxlGroup], jobs: &[XxlJob], options: &MappingOptions) -> Vec<Mapped> {
    let by_id: HashMap<i64, &XxlGroup> = groups.iter().map(|g| (g.id, g)).collect();
    let mut mapped: Vec<Mapped> = jobs
        .iter()
        .map(|job| map_job(by_id.get(&job.job_group).copied(), job, options))
        .collect();
    mapped.sort_by_key(|m| m.xxl_id);
    mapped
}

fn map_job(group: Option<&XxlGroup>, job: &XxlJob, options: &MappingOptions) -> Mapped {
    let mut mapped = Mapped {
        xxl_id: job.id,
        name: job_name(job.id, &job.job_desc),
        document: None,
        start: false,
        notes: Vec::new(),
        not_importable: None,
        children: job
            .child_jobid
            .split(',')
            .filter_map(|c| c.trim().parse().ok())
            .collect(),
    };
    match document_of(group, job, options, &mut mapped.notes) {
        Ok((document, start)) => {
            // The server's own checks, here, so the plan names a bad job before any write.
            let checked = serde_json::from_value::<JobInput>(document.clone())
                .map_err(|e| e.to_string())
                .and_then(|input| input.into_definition().map_err(|e| e.to_string()));
            match checked {
                Ok(_) => {
                    mapped.document = Some(document);
                    mapped.start = start;
                }
                Err(why) => mapped.not_importable = Some(format!("not a valid job here: {why}")),
            }
        }
        Err(why) => mapped.not_importable = Some(why),
    }
    mapped
}

/// The job document of `job` and whether to start it, or why it cannot come across.
fn document_of(
    group: Option<&XxlGroup>,
    job: &XxlJob,
    options: &MappingOptions,
    notes: &mut Vec<String>,
) -> Result<(Value, bool), String> {
    let glue = job.glue_type.trim();
    if !glue.is_empty() && glue != "BEAN" {
        return Err(format!(
            "a {glue} job: its script lives in XXL-JOB's database and runs in the executor's \
             GLUE engine; Carillon runs only handlers that executors register"
        ));
    }
    let group = group.ok_or_else(|| {
        format!(
            "its executor group {} is not in xxl_job_group",
            job.job_group
        )
    })?;
    let handler = job.executor_handler.trim();
    if handler.is_empty() {
        return Err("it names no executor handler".to_owned());
    }
    let app = options
        .app_map
        .get(&group.app_name)
        .cloned()
        .unwrap_or_else(|| group.app_name.clone());
    let conf = job.schedule_conf.trim();
    let running = job.trigger_status == 1;
    let (schedule, start) = match job.schedule_type.trim() {
        "CRON" => (json!({ "cron": conf }), running),
        "FIX_RATE" => {
            let seconds: u64 = conf
                .parse()
                .map_err(|_| format!("FIX_RATE schedule {conf:?} is not a number of seconds"))?;
            (json!({ "every": format!("{seconds}s") }), running)
        }
        "NONE" => {
            if running {
                notes.push("no schedule (NONE): imported stopped, runs when triggered".to_owned());
            }
            (json!({ "manual": true }), false)
        }
        other => return Err(format!("unknown schedule type {other:?}")),
    };
    let mut document = json!({
        "name": job_name(job.id, &job.job_desc),
        "app": app,
        "handler": handler,
        "schedule": schedule,
        "timezone": options.timezone,
        "args": if job.executor_param.is_empty() { Value::Null } else { json!(job.executor_param) },
        "misfire": misfire(&job.misfire_strategy)?,
        "overlap": overlap(&job.executor_block_strategy)?,
        "retry": { "max_attempts": job.executor_fail_retry_count.max(0) + 1 },
    });
    let route = job.executor_route_strategy.trim();
    if route == "SHARDING_BROADCAST" {
        document["sharding"] = json!({ "broadcast": true });
    } else {
        document["balance"] = json!(balance(route)?);
    }
    if job.executor_timeout > 0 {
        document["timeout_ms"] = json!(job.executor_timeout * 1_000);
    }
    let mut description = vec![job.job_desc.trim().to_owned()];
    if !job.author.trim().is_empty() {
        description.push(format!("Author: {}", job.author.trim()));
    }
    if !job.alarm_email.trim().is_empty() {
        description.push(format!("Alarm e-mail: {}", job.alarm_email.trim()));
        notes.push(
            "alarm e-mail kept in the description (Carillon alerts go to webhooks)".to_owned(),
        );
    }
    let children: Vec<&str> = job
        .child_jobid
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    if let Some(bad) = children.iter().find(|c| c.parse::<i64>().is_err()) {
        notes.push(format!("child job {bad:?} is not an XXL-JOB id; left out"));
    }
    if !children.is_empty() {
        notes.push(format!(
            "child jobs {} run after each success, as in XXL-JOB (children.on_success)",
            children.join(",")
        ));
    }
    description.push(format!(
        "Imported from XXL-JOB job {} ({})",
        job.id, group.title
    ));
    document["description"] = json!(description.join("\n"));
    Ok((document, start))
}

fn balance(route: &str) -> Result<&'static str, String> {
    Ok(match route {
        "FIRST" => "first",
        "LAST" => "last",
        "ROUND" | "" => "round_robin",
        "RANDOM" => "random",
        "CONSISTENT_HASH" => "consistent_hash",
        "LEAST_FREQUENTLY_USED" => "least_frequently_used",
        "LEAST_RECENTLY_USED" => "least_recently_used",
        "FAILOVER" => "failover",
        "BUSYOVER" => "busyover",
        other => return Err(format!("unknown route strategy {other:?}")),
    })
}

fn overlap(block: &str) -> Result<&'static str, String> {
    Ok(match block.trim() {
        "SERIAL_EXECUTION" | "" => "queue",
        "DISCARD_LATER" => "skip",
        "COVER_EARLY" => "replace",
        other => return Err(format!("unknown block strategy {other:?}")),
    })
}

fn misfire(strategy: &str) -> Result<&'static str, String> {
    Ok(match strategy.trim() {
        "DO_NOTHING" | "" => "skip",
        "FIRE_ONCE_NOW" => "fire_once",
        other => return Err(format!("unknown misfire strategy {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group() -> XxlGroup {
        XxlGroup {
            id: 1,
            app_name: "billing-executor".to_owned(),
            title: "Billing".to_owned(),
        }
    }

    fn bean(id: i64) -> XxlJob {
        XxlJob {
            id,
            job_group: 1,
            job_desc: "Nightly invoices".to_owned(),
            schedule_type: "CRON".to_owned(),
            schedule_conf: "0 30 2 * * ?".to_owned(),
            misfire_strategy: "DO_NOTHING".to_owned(),
            executor_route_strategy: "ROUND".to_owned(),
            executor_handler: "invoiceJob".to_owned(),
            executor_block_strategy: "SERIAL_EXECUTION".to_owned(),
            glue_type: "BEAN".to_owned(),
            trigger_status: 1,
            ..XxlJob::default()
        }
    }

    fn options() -> MappingOptions {
        MappingOptions {
            timezone: "Asia/Shanghai".to_owned(),
            app_map: HashMap::new(),
        }
    }

    #[test]
    fn a_cron_bean_job_maps_field_for_field() {
        let mut job = bean(7);
        job.executor_param = "region=eu".to_owned();
        job.executor_timeout = 90;
        job.executor_fail_retry_count = 2;
        job.executor_route_strategy = "LEAST_RECENTLY_USED".to_owned();
        job.executor_block_strategy = "COVER_EARLY".to_owned();
        job.misfire_strategy = "FIRE_ONCE_NOW".to_owned();
        job.alarm_email = "ops@example.com".to_owned();
        job.child_jobid = "8, 9".to_owned();
        let mapped = map_all(&[group()], &[job], &options()).remove(0);
        assert_eq!(mapped.not_importable, None);
        assert!(mapped.start);
        let doc = mapped.document.expect("a document");
        assert_eq!(doc["name"], "xxl-7: Nightly invoices");
        assert_eq!(doc["app"], "billing-executor");
        assert_eq!(doc["schedule"], json!({ "cron": "0 30 2 * * ?" }));
        assert_eq!(doc["timezone"], "Asia/Shanghai");
        assert_eq!(doc["args"], "region=eu");
        assert_eq!(doc["timeout_ms"], 90_000);
        assert_eq!(doc["retry"]["max_attempts"], 3);
        assert_eq!(doc["balance"], "least_recently_used");
        assert_eq!(doc["overlap"], "replace");
        assert_eq!(doc["misfire"], "fire_once");
        let description = doc["description"].as_str().unwrap_or_default();
        assert!(
            description.contains("Alarm e-mail: ops@example.com"),
            "{description}"
        );
        assert_eq!(mapped.children, vec![8, 9]);
        assert_eq!(mapped.notes.len(), 2, "{:?}", mapped.notes);
    }

    #[test]
    fn schedules_routes_and_blocks_map_as_documented() {
        let mut rate = bean(1);
        rate.schedule_type = "FIX_RATE".to_owned();
        rate.schedule_conf = "45".to_owned();
        rate.executor_route_strategy = "SHARDING_BROADCAST".to_owned();
        rate.executor_block_strategy = "DISCARD_LATER".to_owned();
        let mut none = bean(2);
        none.schedule_type = "NONE".to_owned();
        none.schedule_conf = String::new();
        let mapped = map_all(&[group()], &[none, rate], &options());
        let rate = mapped[0].document.clone().expect("FIX_RATE maps");
        assert_eq!(rate["schedule"], json!({ "every": "45s" }));
        assert_eq!(rate["sharding"], json!({ "broadcast": true }));
        assert_eq!(rate["overlap"], "skip");
        assert_eq!(rate["misfire"], "skip");
        let none = &mapped[1];
        assert_eq!(
            none.document.as_ref().map(|d| d["schedule"].clone()),
            Some(json!({ "manual": true }))
        );
        assert!(!none.start, "a job without a schedule is not started");
    }

    #[test]
    fn glue_jobs_and_broken_rows_are_listed_with_their_reason() {
        let mut glue = bean(1);
        glue.glue_type = "GLUE_SHELL".to_owned();
        let mut orphan = bean(2);
        orphan.job_group = 99;
        let mut bad_cron = bean(3);
        bad_cron.schedule_conf = "0 0 25 * * ?".to_owned();
        let mut mapped_app = bean(4);
        mapped_app.executor_route_strategy = "NOT_A_ROUTE".to_owned();
        let mapped = map_all(
            &[group()],
            &[glue, orphan, bad_cron, mapped_app],
            &options(),
        );
        let reasons: Vec<String> = mapped
            .iter()
            .map(|m| m.not_importable.clone().unwrap_or_default())
            .collect();
        assert!(reasons[0].contains("GLUE_SHELL"), "{reasons:?}");
        assert!(reasons[1].contains("group 99"), "{reasons:?}");
        assert!(reasons[2].contains("schedule.cron"), "{reasons:?}");
        assert!(reasons[3].contains("NOT_A_ROUTE"), "{reasons:?}");
        assert!(mapped.iter().all(|m| m.document.is_none()));
    }

    #[test]
    fn the_app_map_renames_apps() {
        let mut options = options();
        options
            .app_map
            .insert("billing-executor".to_owned(), "billing".to_owned());
        let mapped = map_all(&[group()], &[bean(1)], &options).remove(0);
        assert_eq!(
            mapped.document.map(|d| d["app"].clone()),
            Some(json!("billing"))
        );
    }
}
