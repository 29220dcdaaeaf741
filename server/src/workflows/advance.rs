//! The rule that moves a workflow run on: a waiting step runs once every upstream step it
//! needs has ended the way it needs; it is skipped as soon as one of them can no longer (it
//! ended otherwise, or was itself skipped or cancelled), and skips propagate; the workflow run
//! ends when no step is waiting or running. Pure: the store applies what it returns inside
//! the transaction that ended a step's run.

use std::collections::{HashMap, HashSet};

use super::{Definition, On};
use crate::states::{RunState, StepState};

/// What to do next in a workflow run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Next {
    /// Steps to run now, in definition order.
    pub ready: Vec<String>,
    /// Steps that will never run, in definition order.
    pub skipped: Vec<String>,
    /// The workflow run's end (`succeeded` or `failed`), when no step is left to wait for.
    pub finished: Option<RunState>,
}

/// What comes next, from each step's state (a step missing from `states` is waiting).
pub fn next(definition: &Definition, states: &HashMap<String, StepState>) -> Next {
    let mut state: HashMap<&str, StepState> = definition
        .steps
        .iter()
        .map(|s| {
            let st = states.get(&s.name).copied().unwrap_or(StepState::Waiting);
            (s.name.as_str(), st)
        })
        .collect();
    let mut next = Next::default();
    loop {
        let mut moved = false;
        for step in &definition.steps {
            if state.get(step.name.as_str()) != Some(&StepState::Waiting) {
                continue;
            }
            let mut all_met = true;
            let mut impossible = false;
            for need in &step.needs {
                let up = state
                    .get(need.step.as_str())
                    .copied()
                    .unwrap_or(StepState::Skipped);
                if !up.is_over() {
                    all_met = false;
                } else if !need.on.accepts(up) {
                    impossible = true;
                }
            }
            if impossible {
                state.insert(&step.name, StepState::Skipped);
                next.skipped.push(step.name.clone());
                moved = true;
            } else if all_met {
                state.insert(&step.name, StepState::Running);
                next.ready.push(step.name.clone());
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    if state.values().all(|s| s.is_over()) {
        next.finished = Some(outcome(definition, &state));
    }
    next
}

/// `failed` when a step failed with no step downstream taking its failure (one that needs it
/// `on: failure` or `always`), or a step was cancelled; `succeeded` otherwise.
fn outcome(definition: &Definition, state: &HashMap<&str, StepState>) -> RunState {
    let handled: HashSet<&str> = definition
        .steps
        .iter()
        .flat_map(|s| s.needs.iter())
        .filter(|n| n.on != On::Success)
        .map(|n| n.step.as_str())
        .collect();
    let failed = definition
        .steps
        .iter()
        .any(|s| match state.get(s.name.as_str()) {
            Some(&StepState::Failed) => !handled.contains(s.name.as_str()),
            Some(&StepState::Cancelled) => true,
            _ => false,
        });
    if failed {
        RunState::Failed
    } else {
        RunState::Succeeded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflows::{Need, Step};

    fn step(name: &str, needs: &[(&str, On)]) -> Step {
        Step {
            name: name.to_owned(),
            job_id: 1,
            needs: needs
                .iter()
                .map(|(s, on)| Need {
                    step: (*s).to_owned(),
                    on: *on,
                })
                .collect(),
        }
    }

    fn states(pairs: &[(&str, &str)]) -> HashMap<String, StepState> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.parse().expect("a step state")))
            .collect()
    }

    /// extract-eu and extract-us, then load (fan-in), then report; alert on load's failure.
    fn etl() -> Definition {
        use On::*;
        Definition {
            steps: vec![
                step("extract-eu", &[]),
                step("extract-us", &[]),
                step("load", &[("extract-eu", Success), ("extract-us", Success)]),
                step("report", &[("load", Success)]),
                step("alert", &[("load", Failure)]),
            ],
        }
    }

    #[test]
    fn roots_start_then_the_fan_in_waits_for_all_of_its_upstream() {
        let d = etl();
        let start = next(&d, &HashMap::new());
        assert_eq!(start.ready, ["extract-eu", "extract-us"]);
        assert_eq!(start.finished, None);
        let one = next(
            &d,
            &states(&[("extract-eu", "succeeded"), ("extract-us", "running")]),
        );
        assert!(one.ready.is_empty() && one.skipped.is_empty());
        let both = next(
            &d,
            &states(&[("extract-eu", "succeeded"), ("extract-us", "succeeded")]),
        );
        assert_eq!(both.ready, ["load"]);
    }

    #[test]
    fn a_failure_skips_what_needed_success_and_runs_what_needed_failure() {
        let d = etl();
        let failed = next(
            &d,
            &states(&[("extract-eu", "succeeded"), ("extract-us", "failed")]),
        );
        // load can no longer run, so report and alert (which need load) are skipped too.
        assert_eq!(failed.skipped, ["load", "report", "alert"]);
        assert_eq!(failed.finished, Some(RunState::Failed));
        let load_failed = next(
            &d,
            &states(&[
                ("extract-eu", "succeeded"),
                ("extract-us", "succeeded"),
                ("load", "failed"),
            ]),
        );
        assert_eq!(load_failed.ready, ["alert"]);
        assert_eq!(load_failed.skipped, ["report"]);
        // A failure some step takes in hand does not fail the workflow run.
        let handled = next(
            &d,
            &states(&[
                ("extract-eu", "succeeded"),
                ("extract-us", "succeeded"),
                ("load", "failed"),
                ("report", "skipped"),
                ("alert", "succeeded"),
            ]),
        );
        assert_eq!(handled.finished, Some(RunState::Succeeded));
    }

    #[test]
    fn always_runs_after_either_end_but_not_after_a_skip() {
        let d = Definition {
            steps: vec![
                step("a", &[]),
                step("b", &[("a", On::Success)]),
                step("cleanup", &[("b", On::Always)]),
            ],
        };
        let b_failed = next(&d, &states(&[("a", "succeeded"), ("b", "failed")]));
        assert_eq!(b_failed.ready, ["cleanup"]);
        let a_failed = next(&d, &states(&[("a", "failed")]));
        assert_eq!(a_failed.skipped, ["b", "cleanup"]);
        assert_eq!(a_failed.finished, Some(RunState::Failed));
    }
}
