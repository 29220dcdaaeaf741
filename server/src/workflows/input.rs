//! The workflow document of `POST /api/v1/workflows`: its schedule and policies (a job's),
//! its default parameters, and its steps, each an existing job or a handler of its own.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::{Need, On};
use crate::jobs::{
    Balance, Bounds, Delivery, Flow, JobAlerts, JobDefinition, JobError, JobInput, Misfire,
    Overlap, Retry, Sharding,
};
use crate::schedule::ScheduleSpec;

/// What the workflow's own row of `jobs` names as its app and handler: a workflow's run runs
/// steps, never a handler of its own.
pub const WORKFLOW_APP: &str = "carillon";
pub const WORKFLOW_HANDLER: &str = "workflow";

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowInput {
    pub name: String,
    pub schedule: ScheduleSpec,
    #[serde(default = "utc")]
    pub timezone: String,
    /// What every step is given as `params` (a trigger may give others).
    #[serde(default)]
    pub params: Value,
    pub steps: Vec<StepInput>,
    #[serde(default)]
    pub misfire: Misfire,
    #[serde(default)]
    pub catch_up_window_ms: Option<u64>,
    /// What to do when an instant comes while the previous workflow run is unfinished.
    #[serde(default)]
    pub overlap: Overlap,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 10)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub alerts: Option<JobAlerts>,
    #[serde(default)]
    pub bounds: Option<Bounds>,
    #[serde(default)]
    pub calendars: Vec<String>,
    /// Stop the workflow after this many failed runs in a row, and alert.
    #[serde(default)]
    pub pause_after_failures: Option<u32>,
    /// Flow control of the workflow's runs as a whole: a workflow run counts under its key
    /// from its start to its last step's end (`key_arg` points into the workflow's params).
    #[serde(default)]
    pub flow: Option<Flow>,
    #[serde(default)]
    pub description: Option<String>,
    /// Start the workflow at once (default: created stopped).
    #[serde(default)]
    pub start: bool,
}

fn utc() -> String {
    "UTC".to_owned()
}

/// A step: an existing job's run (`job`), or a handler of its own (`app`, `handler` and its
/// arguments and policies), after the steps it `needs`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepInput {
    pub name: String,
    /// The job whose run this step is: its id, or its name (as `apply` files give it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub args: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<Sharding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<Balance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
    /// Flow control of this step's runs (with those of every job and task naming its key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<Flow>,
    /// The steps that must have ended first: a name (it must have succeeded) or
    /// `{"step": name, "on": "success" | "failure" | "always"}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<NeedInput>,
}

/// A job named by its id or by its name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum JobRef {
    Id(i64),
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum NeedInput {
    Step(String),
    Need(Need),
}

impl NeedInput {
    pub fn need(&self) -> Need {
        match self {
            NeedInput::Step(step) => Need {
                step: step.clone(),
                on: On::Success,
            },
            NeedInput::Need(need) => need.clone(),
        }
    }
}

impl WorkflowInput {
    /// The workflow's own row, checked as a job: its schedule and policies, its parameters
    /// as the job's arguments.
    pub fn job_definition(&self) -> Result<JobDefinition, JobError> {
        let input = JobInput {
            name: self.name.clone(),
            app: Some(WORKFLOW_APP.to_owned()),
            handler: Some(WORKFLOW_HANDLER.to_owned()),
            http: None,
            secrets: Vec::new(),
            flow: self.flow.clone(),
            schedule: self.schedule.clone(),
            timezone: self.timezone.clone(),
            args: self.params.clone(),
            sharding: Sharding::default(),
            balance: Balance::default(),
            retry: Retry::default(),
            timeout_ms: None,
            delivery: Delivery::default(),
            misfire: self.misfire,
            catch_up_window_ms: self.catch_up_window_ms,
            overlap: self.overlap,
            priority: self.priority,
            alerts: self.alerts.clone(),
            history: None,
            bounds: self.bounds.clone(),
            jitter_ms: None,
            calendars: self.calendars.clone(),
            pause_after_failures: self.pause_after_failures,
            children: Default::default(),
            description: self.description.clone(),
            start: self.start,
        };
        if self.overlap == Overlap::Replace {
            return Err(JobError::new(
                "overlap",
                "replace is not offered for workflows: skip, queue or allow, and cancel a \
                 workflow run with POST /api/v1/workflow-runs/{id}/cancel",
            ));
        }
        let mut definition = input.into_definition()?;
        definition.policy.workflow = true;
        Ok(definition)
    }
}

impl StepInput {
    /// The id of the existing job this step runs, once a name has been resolved to it.
    pub fn job_id(&self) -> Option<i64> {
        match self.job {
            Some(JobRef::Id(id)) => Some(id),
            _ => None,
        }
    }

    /// The hidden job of a step with a handler of its own, named `name`; `None` for a step
    /// that is an existing job's run. Either one or the other, else the error says which.
    pub fn own_job(&self, index: usize, name: &str) -> Result<Option<JobDefinition>, JobError> {
        let field = |f: &str| format!("steps[{index}].{f}");
        match (&self.job, &self.app, &self.handler) {
            (Some(_), None, None) => {
                if self.sharding.is_some()
                    || self.retry.is_some()
                    || self.timeout_ms.is_some()
                    || self.flow.is_some()
                    || !self.args.is_null()
                {
                    return Err(JobError::new(
                        &field("job"),
                        "a step that runs an existing job takes that job's arguments and \
                         policies: give app and handler instead to set them",
                    ));
                }
                Ok(None)
            }
            (None, Some(_), Some(_)) => {
                let doc = json!({
                    "name": name,
                    "app": self.app,
                    "handler": self.handler,
                    "schedule": {"manual": true},
                    "args": self.args,
                    "sharding": self.sharding.clone().unwrap_or_default(),
                    "balance": self.balance.unwrap_or_default(),
                    "retry": self.retry.clone().unwrap_or_default(),
                    "timeout_ms": self.timeout_ms,
                    "delivery": self.delivery.unwrap_or_default(),
                    "flow": self.flow,
                });
                let input: JobInput = crate::input_text::from_value(doc)
                    .map_err(|e| JobError::new(&field("name"), e))?;
                input.into_definition().map(Some).map_err(|e| JobError {
                    field: field(&e.field),
                    message: e.message,
                })
            }
            _ => Err(JobError::new(
                &field("job"),
                "give either job (an existing job's id or name) or app and handler",
            )),
        }
    }
}
