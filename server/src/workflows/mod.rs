//! Workflows: a named DAG of steps, each step one run of a job (an existing job, or a hidden
//! job of the workflow's own holding a handler with its own arguments, sharding, retries and
//! timeout), with what each step needs of its upstream steps. A workflow is a row of `jobs`
//! of kind `workflow`, so its schedule, misfire, overlap, bounds, calendars, pausing and
//! manual triggers are a job's; its definition (this module's [`Definition`]) is pinned into
//! each workflow run when the run starts, so an edit never changes runs in flight. No I/O:
//! the store runs [`advance`] inside the transactions that end step runs.

pub mod advance;
pub mod graph;
pub mod input;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::states::StepState;

/// Most steps a workflow may have.
pub const MAX_STEPS: usize = 500;

/// What an upstream step's end must be for a step that needs it to run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum On {
    /// The upstream step succeeded (the default).
    #[default]
    Success,
    /// The upstream step failed (or found no executor).
    Failure,
    /// The upstream step ended either way (not when it was skipped or cancelled).
    Always,
}

impl On {
    /// Whether an upstream step that ended in `state` (a step state) satisfies this.
    pub fn accepts(self, state: StepState) -> bool {
        match self {
            On::Success => state == StepState::Succeeded,
            On::Failure => state == StepState::Failed,
            On::Always => state == StepState::Succeeded || state == StepState::Failed,
        }
    }
}

/// An upstream step a step needs, and how it must have ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Need {
    pub step: String,
    #[serde(default)]
    pub on: On,
}

/// A step of a pinned definition: the job whose run it is, and what it needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Step {
    pub name: String,
    pub job_id: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<Need>,
}

/// The steps of a workflow, each naming the job it runs. Stored with the workflow, and copied
/// into each of its runs when the run starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Definition {
    pub steps: Vec<Step>,
}
