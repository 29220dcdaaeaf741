//! A workflow's graph checked: step names unique and well formed, every need naming a step of
//! the workflow other than itself, and no cycle (refused naming its steps in order).

use std::collections::{HashMap, HashSet};

use super::{MAX_STEPS, Need};

/// What is wrong with a graph: the field (`steps[3].needs[0]`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphError {
    pub field: String,
    pub message: String,
}

impl GraphError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Checks steps given as `(name, needs)` in order.
pub fn check(steps: &[(&str, &[Need])]) -> Result<(), GraphError> {
    if steps.is_empty() {
        return Err(GraphError::new(
            "steps",
            "a workflow needs at least one step",
        ));
    }
    if steps.len() > MAX_STEPS {
        return Err(GraphError::new(
            "steps",
            format!("has {} steps; the limit is {MAX_STEPS}", steps.len()),
        ));
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, (name, _)) in steps.iter().enumerate() {
        let field = format!("steps[{i}].name");
        if name.is_empty() || name.chars().count() > 128 {
            return Err(GraphError::new(field, "must be 1 to 128 characters"));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Err(GraphError::new(
                field,
                format!("{bad:?} is not allowed: use letters, digits, '-', '_' and '.'"),
            ));
        }
        if let Some(first) = index.insert(name, i) {
            return Err(GraphError::new(
                field,
                format!("{name:?} is also the name of steps[{first}]"),
            ));
        }
    }
    for (i, (name, needs)) in steps.iter().enumerate() {
        let mut seen = HashSet::new();
        for (j, need) in needs.iter().enumerate() {
            let field = format!("steps[{i}].needs[{j}]");
            if need.step == *name {
                return Err(GraphError::new(
                    field,
                    format!("step {name:?} cannot need itself"),
                ));
            }
            if !index.contains_key(need.step.as_str()) {
                return Err(GraphError::new(
                    field,
                    format!(
                        "step {name:?} needs {:?}, which is not a step of this workflow",
                        need.step
                    ),
                ));
            }
            if !seen.insert(need.step.as_str()) {
                return Err(GraphError::new(
                    field,
                    format!("step {name:?} names {:?} twice", need.step),
                ));
            }
        }
    }
    if let Some(cycle) = find_cycle(steps, &index) {
        return Err(GraphError::new(
            "steps",
            format!("the steps form a cycle: {}", cycle.join(" → ")),
        ));
    }
    Ok(())
}

/// A cycle of the graph (upstream → downstream, its first step repeated last), if any.
fn find_cycle(steps: &[(&str, &[Need])], index: &HashMap<&str, usize>) -> Option<Vec<String>> {
    // Downstream edges: from each step to the steps that need it.
    let mut downstream: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    for (i, (_, needs)) in steps.iter().enumerate() {
        for need in needs.iter() {
            if let Some(&up) = index.get(need.step.as_str()) {
                downstream[up].push(i);
            }
        }
    }
    // 0: not visited, 1: on the current path, 2: done.
    let mut mark = vec![0_u8; steps.len()];
    for start in 0..steps.len() {
        if mark[start] != 0 {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = 1;
        while let Some((node, next)) = path.last().copied() {
            let Some(&child) = downstream[node].get(next) else {
                mark[node] = 2;
                path.pop();
                continue;
            };
            if let Some(top) = path.last_mut() {
                top.1 += 1;
            }
            match mark[child] {
                0 => {
                    mark[child] = 1;
                    path.push((child, 0));
                }
                1 => {
                    let from = path.iter().position(|(n, _)| *n == child).unwrap_or(0);
                    let mut cycle: Vec<String> = path[from..]
                        .iter()
                        .map(|(n, _)| steps[*n].0.to_owned())
                        .collect();
                    cycle.push(steps[child].0.to_owned());
                    return Some(cycle);
                }
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflows::On;
    use proptest::prelude::*;

    fn needs(names: &[&str]) -> Vec<Need> {
        names
            .iter()
            .map(|s| Need {
                step: (*s).to_owned(),
                on: On::Success,
            })
            .collect()
    }

    #[test]
    fn unknown_self_duplicate_and_circular_needs_are_named() {
        let (a, b, c) = (needs(&[]), needs(&["a", "c"]), needs(&["b"]));
        let err = check(&[("a", &a), ("b", &b), ("c", &c)]).unwrap_err();
        assert_eq!(err.field, "steps");
        assert!(
            err.message.contains("b → c → b") || err.message.contains("c → b → c"),
            "{err:?}"
        );
        let selfish = needs(&["a"]);
        let err = check(&[("a", &selfish)]).unwrap_err();
        assert_eq!(err.field, "steps[0].needs[0]");
        let unknown = needs(&["x"]);
        let err = check(&[("a", &unknown)]).unwrap_err();
        assert!(err.message.contains("\"x\""), "{err:?}");
        let none = needs(&[]);
        let err = check(&[("a", &none), ("a", &none)]).unwrap_err();
        assert_eq!(err.field, "steps[1].name");
        assert!(check(&[]).is_err());
    }

    /// A random DAG: step i needs only steps before it.
    fn dag() -> impl Strategy<Value = Vec<Vec<usize>>> {
        (1_usize..40).prop_flat_map(|n| {
            (0..n)
                .map(|i| proptest::sample::subsequence((0..i).collect::<Vec<_>>(), 0..=i.min(4)))
                .collect::<Vec<_>>()
        })
    }

    proptest! {
        #[test]
        fn every_dag_is_accepted_and_any_back_edge_is_refused_as_a_real_cycle(
            graph in dag(), back in any::<(usize, usize)>()
        ) {
            let names: Vec<String> = (0..graph.len()).map(|i| format!("s{i}")).collect();
            let mut all: Vec<Vec<Need>> = graph
                .iter()
                .map(|ups| ups.iter().map(|u| Need { step: names[*u].clone(), on: On::Success }).collect())
                .collect();
            let steps: Vec<(&str, &[Need])> =
                names.iter().map(String::as_str).zip(all.iter().map(Vec::as_slice)).collect();
            prop_assert!(check(&steps).is_ok());
            // An edge making an earlier step need a later one that (transitively) needs it.
            if graph.len() >= 2 {
                let later = 1 + back.0 % (graph.len() - 1);
                let earlier = back.1 % later;
                // Make `later` need `earlier` directly, then `earlier` need `later`.
                if !all[later].iter().any(|n| n.step == names[earlier]) {
                    all[later].push(Need { step: names[earlier].clone(), on: On::Success });
                }
                all[earlier].push(Need { step: names[later].clone(), on: On::Always });
                let steps: Vec<(&str, &[Need])> =
                    names.iter().map(String::as_str).zip(all.iter().map(Vec::as_slice)).collect();
                let err = check(&steps).unwrap_err();
                prop_assert_eq!(&err.field, "steps");
                // The cycle named is real: each step in it needs the one before.
                let text = err.message.split(": ").nth(1).unwrap_or("").to_owned();
                let cycle: Vec<&str> = text.split(" → ").collect();
                prop_assert!(cycle.len() >= 3 && cycle.first() == cycle.last());
                for pair in cycle.windows(2) {
                    let down = names.iter().position(|n| n == pair[1]).unwrap();
                    prop_assert!(all[down].iter().any(|n| n.step == pair[0]), "{} does not need {}", pair[1], pair[0]);
                }
            }
        }
    }
}
