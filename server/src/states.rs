//! The states and kinds the store writes in its text columns, as enums: a row read with a text
//! this version does not know is an error naming the column's kind and the text, never a
//! default in its place.

use std::fmt;
use std::str::FromStr;

/// A stored or given text that names none of a kind's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a {kind} (expected one of: {expected})")]
pub struct UnknownText {
    pub kind: &'static str,
    pub text: String,
    pub expected: String,
}

/// Writes the enum, its texts and the conversions every such enum has; only boilerplate.
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $kind:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The text stored and shown for this value.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownText;

            fn from_str(text: &str) -> Result<Self, UnknownText> {
                match text {
                    $( $text => Ok($name::$variant), )+
                    _ => Err(UnknownText {
                        kind: $kind,
                        text: text.to_owned(),
                        expected: [$($text),+].join(", "),
                    }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = UnknownText;

            fn try_from(text: String) -> Result<Self, UnknownText> {
                text.parse()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

text_enum! {
    /// The states of a run (`runs.state`).
    RunState, "run state" {
        /// Claimed and waiting for an executor.
        Pending = "pending",
        /// Waiting behind an unfinished run of the same job (overlap `queue`).
        Queued = "queued",
        Running = "running",
        Succeeded = "succeeded",
        /// Its attempts failed, or it could not start (a definition that does not read).
        Failed = "failed",
        /// Not started because the previous run was unfinished (overlap `skip`).
        Skipped = "skipped",
        /// Cancelled (overlap `replace`, or through the API).
        Cancelled = "cancelled",
        /// No executor could take it: recorded so that nothing is dropped silently.
        NoExecutor = "no_executor",
    }
}

impl RunState {
    /// The states in which a run is unfinished, for the overlap policy.
    pub const UNFINISHED: [RunState; 3] = [RunState::Pending, RunState::Queued, RunState::Running];
    /// The states a purge may delete: finished ones only.
    pub const FINISHED: [RunState; 5] = [
        RunState::Succeeded,
        RunState::Failed,
        RunState::Cancelled,
        RunState::Skipped,
        RunState::NoExecutor,
    ];
}

text_enum! {
    /// The states of an attempt (`attempts.state`).
    AttemptState, "attempt state" {
        /// Waiting to be dispatched (at `not_before_ms` or later).
        Pending = "pending",
        /// Accepted by an executor.
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        /// Ran past the job's timeout.
        TimedOut = "timed_out",
        /// Its executor stopped heartbeating.
        Lost = "lost",
        Cancelled = "cancelled",
    }
}

impl AttemptState {
    /// Not yet ended: an attempt in one of these may still be answered.
    pub fn is_live(self) -> bool {
        matches!(self, AttemptState::Pending | AttemptState::Running)
    }
}

text_enum! {
    /// The states of a job (`jobs.state`).
    JobState, "job state" {
        Stopped = "stopped",
        Running = "running",
        /// A schedule with no more instants (a one-shot that ran, a job past its bounds).
        Done = "done",
    }
}

text_enum! {
    /// What a row of `jobs` is (`jobs.kind`).
    JobKind, "job kind" {
        /// A job of the API (`/api/v1/jobs`).
        Job = "job",
        /// A workflow (`/api/v1/workflows`): scheduled like a job, its runs run steps.
        Workflow = "workflow",
        /// A workflow step's own handler, arguments and policies: never scheduled, run only as
        /// a step, listed with its workflow.
        Step = "step",
    }
}

text_enum! {
    /// Why a run exists (`runs.trigger_kind`).
    TriggerKind, "trigger kind" {
        /// An instant of the job's schedule.
        Schedule = "schedule",
        /// An instant the scheduler found late and fired by the misfire policy.
        Misfire = "misfire",
        /// Triggered through the API, the CLI or the console.
        Manual = "manual",
        /// A child run of another run's outcome (`policy.children`).
        Child = "child",
        /// A step of a workflow run.
        Step = "step",
        /// An instant of a backfill.
        Backfill = "backfill",
        /// A task's run.
        Task = "task",
    }
}

impl TriggerKind {
    /// Runs of the job's own schedule, late or not (not triggered by hand or by another run).
    pub fn is_scheduled(self) -> bool {
        matches!(self, TriggerKind::Schedule | TriggerKind::Misfire)
    }
}

text_enum! {
    /// A task's stored states (`tasks.state`). A fired task's progress is its run's.
    TaskState, "task state" {
        /// Waiting for its instant.
        Pending = "pending",
        /// Its run exists (`runs.job_id = -task_id`).
        Fired = "fired",
        /// How the API shows a task it cancelled and deleted (no row is stored so).
        Cancelled = "cancelled",
    }
}

text_enum! {
    /// The states of a backfill (`backfills.state`).
    BackfillState, "backfill state" {
        Running = "running",
        Done = "done",
        Cancelled = "cancelled",
    }
}

text_enum! {
    /// The states of a step within a workflow run (`step_runs.state`).
    StepState, "step state" {
        /// Its upstream steps have not all ended.
        Waiting = "waiting",
        /// Its run was created (pending, then running).
        Running = "running",
        Succeeded = "succeeded",
        /// Its run failed or found no executor.
        Failed = "failed",
        /// Never run: what it needs of an upstream step can no longer happen.
        Skipped = "skipped",
        /// Its run, or the workflow run, was cancelled.
        Cancelled = "cancelled",
    }
}

impl StepState {
    /// The state of a step whose run ended in `run`.
    pub fn of_run(run: RunState) -> StepState {
        match run {
            RunState::Succeeded => StepState::Succeeded,
            RunState::Cancelled | RunState::Skipped => StepState::Cancelled,
            _ => StepState::Failed,
        }
    }

    /// Ended: neither waiting for its upstream steps nor running.
    pub fn is_over(self) -> bool {
        !matches!(self, StepState::Waiting | StepState::Running)
    }
}

text_enum! {
    /// The lists of `policy.children`, by the outcome that triggers them.
    ChildOutcome, "child outcome" {
        OnSuccess = "on_success",
        OnFailure = "on_failure",
        Always = "always",
    }
}

impl ChildOutcome {
    /// The lists a run ending in `run` triggers: none for a run that was cancelled or skipped
    /// (it did not run to an outcome).
    pub fn triggered_by(run: RunState) -> &'static [ChildOutcome] {
        match run {
            RunState::Succeeded => &[ChildOutcome::OnSuccess, ChildOutcome::Always],
            RunState::Failed | RunState::NoExecutor => {
                &[ChildOutcome::OnFailure, ChildOutcome::Always]
            }
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T>(all: &[T])
    where
        T: Copy
            + fmt::Debug
            + PartialEq
            + FromStr<Err = UnknownText>
            + fmt::Display
            + serde::Serialize,
    {
        for value in all {
            let text = value.to_string();
            assert_eq!(text.parse::<T>().as_ref(), Ok(value), "{text}");
            assert_eq!(
                serde_json::to_string(value).ok(),
                Some(format!("\"{text}\""))
            );
        }
    }

    #[test]
    fn every_text_reads_back_as_its_value() {
        round_trips(RunState::ALL);
        round_trips(AttemptState::ALL);
        round_trips(JobState::ALL);
        round_trips(JobKind::ALL);
        round_trips(TriggerKind::ALL);
        round_trips(TaskState::ALL);
        round_trips(BackfillState::ALL);
        round_trips(StepState::ALL);
        round_trips(ChildOutcome::ALL);
    }

    #[test]
    fn an_unknown_text_names_its_kind_and_the_values_expected() {
        let error = "paused".parse::<RunState>().err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "`paused` is not a run state (expected one of: pending, queued, running, \
                 succeeded, failed, skipped, cancelled, no_executor)"
            )
        );
        assert!("".parse::<JobState>().is_err());
        assert!("Running".parse::<JobState>().is_err());
    }

    #[test]
    fn the_serialised_text_is_the_stored_one() {
        assert_eq!(
            serde_json::to_string(&RunState::NoExecutor).ok().as_deref(),
            Some("\"no_executor\"")
        );
        assert_eq!(
            serde_json::to_string(&AttemptState::TimedOut)
                .ok()
                .as_deref(),
            Some("\"timed_out\"")
        );
    }

    #[test]
    fn unfinished_and_finished_run_states_split_them_all() {
        for state in RunState::ALL {
            assert_ne!(
                RunState::UNFINISHED.contains(state),
                RunState::FINISHED.contains(state),
                "{state}"
            );
        }
    }
}
