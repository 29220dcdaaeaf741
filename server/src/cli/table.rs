//! Plain-text tables for the terminal.

use serde_json::Value;

/// Renders `rows` (JSON objects) as a table of `columns` (header, JSON pointer).
pub(crate) fn render(rows: &[Value], columns: &[(&str, &str)]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .map(|(_, pointer)| cell(row.pointer(pointer).unwrap_or(&Value::Null)))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (header, _))| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([header.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: Vec<String>| {
        values
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(columns.iter().map(|(h, _)| h.to_string()).collect())];
    out.extend(cells.into_iter().map(line));
    out.join("\n")
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", cell(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_missing_values_show_a_dash() {
        let rows = vec![
            serde_json::json!({"id": 1, "name": "a", "schedule": {"cron": "* * * * *"}}),
            serde_json::json!({"id": 22, "name": "longer"}),
        ];
        let table = render(
            &rows,
            &[("ID", "/id"), ("NAME", "/name"), ("SCHEDULE", "/schedule")],
        );
        assert_eq!(
            table,
            "ID  NAME    SCHEDULE\n1   a       cron=* * * * *\n22  longer  -"
        );
    }
}
