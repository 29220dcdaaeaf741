//! Child jobs in an `apply` file: named by job name (or id), resolved against the file's jobs
//! and the server's before anything is written, and set once every job of the file exists.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::states::ChildOutcome;

/// The child job names a job document gives (strings in its `children` lists).
pub(super) fn names(job: &Value) -> Vec<String> {
    ChildOutcome::ALL
        .iter()
        .flat_map(|list| {
            job["children"][list.as_str()]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

/// `job` with its `children` named by id: names looked up in `ids`, numbers kept; an error
/// names the child that is neither in the file nor on the server.
pub(super) fn by_id(job: &Value, ids: &HashMap<String, Value>) -> Result<Value, String> {
    let mut job = job.clone();
    let Some(children) = job.get_mut("children").and_then(Value::as_object_mut) else {
        return Ok(job);
    };
    for (list, entries) in children.iter_mut() {
        let Some(entries) = entries.as_array_mut() else {
            continue;
        };
        for (i, entry) in entries.iter_mut().enumerate() {
            if let Some(name) = entry.as_str() {
                *entry = ids.get(name).cloned().ok_or_else(|| {
                    format!(
                        "children.{list}[{i}]: no job named {name:?} in the file or on the server"
                    )
                })?;
            }
        }
    }
    Ok(job)
}

/// `job` without children, as it is created before the jobs it names exist.
pub(super) fn without(job: &Value) -> Value {
    let mut job = job.clone();
    if let Some(fields) = job.as_object_mut() {
        fields.remove("children");
    }
    job
}

/// `job` with every named child as a stand-in id, to check the rest of it before the names
/// are known.
pub(super) fn with_stand_ins(job: &Value) -> Value {
    let stand_ins: HashMap<String, Value> = names(job).into_iter().map(|n| (n, json!(0))).collect();
    by_id(job, &stand_ins).unwrap_or_else(|_| job.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_by_name_become_ids_and_an_unknown_one_is_named() {
        let job = json!({"name": "extract", "children": {"on_success": ["load", 7], "always": ["report"]}});
        assert_eq!(names(&job), vec!["load".to_owned(), "report".to_owned()]);
        let ids = HashMap::from([
            ("load".to_owned(), json!(11)),
            ("report".to_owned(), json!(12)),
        ]);
        assert_eq!(
            by_id(&job, &ids).unwrap()["children"],
            json!({"on_success": [11, 7], "always": [12]})
        );
        let missing = by_id(&job, &HashMap::new()).unwrap_err();
        assert!(
            missing.contains("children.always[0]") || missing.contains("children.on_success[0]"),
            "{missing}"
        );
        assert!(without(&job).get("children").is_none());
        assert_eq!(
            with_stand_ins(&job)["children"]["on_success"],
            json!([0, 7])
        );
    }
}
