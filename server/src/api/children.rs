//! Child jobs at the API: a job's children must exist, must not be the job itself, and must
//! not lead back to it (a chain that would run forever); a job that is another's child is not
//! deleted from under it.

use std::collections::{HashMap, HashSet};

use super::ApiState;
use super::error::ApiError;
use crate::jobs::Children;
use crate::states::ChildOutcome;
use crate::store::{JobPolicyRow, NamespaceId, policy_children};

/// Most children a job may name, over its three lists.
const MAX_CHILDREN: usize = 100;

/// Refuses `children` of the job `job_id` (`None` for a job not created yet) named `name`, of
/// `namespace`, naming the field and the jobs at fault. A child is of the same namespace.
pub(super) async fn check(
    state: &ApiState,
    namespace: NamespaceId,
    job_id: Option<i64>,
    name: &str,
    children: &Children,
) -> Result<(), ApiError> {
    let named: Vec<(ChildOutcome, i64)> = children.named().collect();
    if named.len() > MAX_CHILDREN {
        return Err(ApiError::invalid(
            "children",
            format!("names {} jobs; the limit is {MAX_CHILDREN}", named.len()),
        ));
    }
    if named.is_empty() {
        return Ok(());
    }
    let mut ids: Vec<i64> = named.iter().map(|(_, id)| *id).collect();
    ids.sort_unstable();
    ids.dedup();
    // Another team's job is as good as none: its existence is not told.
    let found: HashMap<i64, String> = state
        .store
        .jobs_get_many(&ids)
        .await?
        .into_iter()
        .filter(|j| j.namespace_id == namespace)
        .map(|j| (j.job_id, j.name))
        .collect();
    let positions = positions(children);
    for ((list, id), (_, index)) in named.iter().zip(&positions) {
        let field = format!("children.{list}[{index}]");
        if Some(*id) == job_id {
            return Err(ApiError::invalid(
                &field,
                format!("job {id} is this job: a job cannot be its own child"),
            ));
        }
        if !found.contains_key(id) {
            return Err(ApiError::invalid(
                &field,
                format!("there is no job {id} in this job's namespace"),
            ));
        }
    }
    // A new job has no parents yet, so nothing it names can lead back to it.
    let Some(job_id) = job_id else {
        return Ok(());
    };
    let mut graph: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut names: HashMap<i64, String> = found;
    names.insert(job_id, name.to_owned());
    for parent in state.store.jobs_with_children().await? {
        if parent.job_id != job_id {
            graph.insert(
                parent.job_id,
                children_of(&parent)?.into_iter().map(|(_, c)| c).collect(),
            );
        }
        names.insert(parent.job_id, parent.name);
    }
    graph.insert(job_id, ids);
    if let Some(cycle) = cycle_through(&graph, job_id) {
        let chain = cycle
            .iter()
            .map(|id| match names.get(id) {
                Some(name) => format!("{id} ({name})"),
                None => id.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" → ");
        return Err(ApiError::invalid(
            "children",
            format!("would run in a circle: {chain}"),
        ));
    }
    Ok(())
}

/// Refuses to delete `job_id` while another job names it as a child.
pub(super) async fn check_unused(state: &ApiState, job_id: i64) -> Result<(), ApiError> {
    let mut parents: Vec<String> = Vec::new();
    for parent in state.store.jobs_with_children().await? {
        if parent.job_id != job_id && children_of(&parent)?.iter().any(|(_, c)| *c == job_id) {
            parents.push(format!("{} ({})", parent.job_id, parent.name));
        }
    }
    if parents.is_empty() {
        return Ok(());
    }
    Err(ApiError::Conflict(format!(
        "job {job_id} is a child of job {}: remove it from their children first",
        parents.join(", job ")
    )))
}

/// The index of each named child within its own list, in [`Children::named`]'s order.
fn positions(children: &Children) -> Vec<(ChildOutcome, usize)> {
    let mut at: HashMap<ChildOutcome, usize> = HashMap::new();
    children
        .named()
        .map(|(list, _)| {
            let i = at.entry(list).or_default();
            *i += 1;
            (list, *i - 1)
        })
        .collect()
}

/// A path `start → … → start` in `graph`, if there is one.
fn cycle_through(graph: &HashMap<i64, Vec<i64>>, start: i64) -> Option<Vec<i64>> {
    // Depth first, with the path kept, from each of start's children.
    let mut seen: HashSet<i64> = HashSet::new();
    let mut stack: Vec<(i64, usize)> = vec![(start, 0)];
    while let Some((node, next)) = stack.last().copied() {
        let children = graph.get(&node).map_or(&[][..], Vec::as_slice);
        let Some(&child) = children.get(next) else {
            stack.pop();
            continue;
        };
        if let Some(top) = stack.last_mut() {
            top.1 += 1;
        }
        if child == start {
            let mut path: Vec<i64> = stack.iter().map(|(n, _)| *n).collect();
            path.push(start);
            return Some(path);
        }
        if seen.insert(child) {
            stack.push((child, 0));
        }
    }
    None
}

/// The children job `id`'s stored policy names, or the error naming the job: a check that
/// cannot read a parent cannot pass.
fn children_of(job: &JobPolicyRow) -> Result<Vec<(ChildOutcome, i64)>, ApiError> {
    policy_children(&job.policy_json).map_err(|e| {
        ApiError::unreadable(
            format!("the stored policy of job {} ({})", job.job_id, job.name),
            &e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::cycle_through;
    use std::collections::HashMap;

    #[test]
    fn a_chain_back_to_the_job_is_found_with_its_path() {
        let graph: HashMap<i64, Vec<i64>> =
            HashMap::from([(1, vec![2, 5]), (2, vec![3]), (3, vec![1]), (5, vec![])]);
        assert_eq!(cycle_through(&graph, 1), Some(vec![1, 2, 3, 1]));
        let acyclic: HashMap<i64, Vec<i64>> =
            HashMap::from([(1, vec![2, 3]), (2, vec![3]), (3, vec![])]);
        assert_eq!(cycle_through(&acyclic, 1), None);
        // A circle elsewhere is not this job's.
        let elsewhere: HashMap<i64, Vec<i64>> =
            HashMap::from([(1, vec![2]), (2, vec![3]), (3, vec![2])]);
        assert_eq!(cycle_through(&elsewhere, 1), None);
    }
}
