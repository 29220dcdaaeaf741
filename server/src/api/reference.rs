//! The API reference (`docs/api.md`), rendered from the OpenAPI document: every operation
//! with its parameters, body and answers, every schema with its fields. The README teaches;
//! this is the one place the details are listed, and a test fails when the file no longer
//! matches the document (`CARILLON_WRITE_DOCS=1 cargo test -p carillon-server reference`
//! writes it again).

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The reference of `document` (the OpenAPI document as JSON), as Markdown.
pub(super) fn render(document: &Value) -> String {
    let mut out = String::new();
    let info = &document["info"];
    out.push_str("# Carillon API reference\n\n");
    out.push_str(
        "Generated from the OpenAPI document a node serves at `/api/v1/openapi.json` \
         (`server/src/api/reference.rs`); CI checks that it matches. The README's *HTTP* \
         section explains the API; this lists it.\n\n",
    );
    let _ = writeln!(out, "{}\n", text(&info["description"]));
    let empty = Map::new();
    let paths = document["paths"].as_object().unwrap_or(&empty);
    for tag in document["tags"].as_array().into_iter().flatten() {
        let name = tag["name"].as_str().unwrap_or_default();
        let _ = writeln!(out, "## {name}\n\n{}\n", text(&tag["description"]));
        for (path, item) in paths {
            for method in ["get", "post", "put", "patch", "delete"] {
                let operation = &item[method];
                let tagged = operation["tags"]
                    .as_array()
                    .is_some_and(|tags| tags.iter().any(|t| t == name));
                if tagged {
                    operation_of(&mut out, method, path, operation);
                }
            }
        }
    }
    out.push_str("## Schemas\n\n");
    let schemas = document["components"]["schemas"]
        .as_object()
        .unwrap_or(&empty);
    for (name, schema) in schemas {
        schema_of(&mut out, name, schema);
    }
    out.trim_end().to_owned() + "\n"
}

fn operation_of(out: &mut String, method: &str, path: &str, operation: &Value) {
    let _ = writeln!(out, "### `{} {path}`\n", method.to_uppercase());
    for part in ["summary", "description"] {
        let said = text(&operation[part]);
        if !said.trim().is_empty() {
            let _ = writeln!(out, "{}\n", said.trim());
        }
    }
    if let Some(id) = operation["operationId"].as_str() {
        match operation["x-carillon-permission"].as_str() {
            Some(need) => {
                let _ = writeln!(out, "Operation `{id}`; needs `{need}`.\n");
            }
            None => {
                let _ = writeln!(out, "Operation `{id}`.\n");
            }
        }
    }
    let parameters: Vec<&Value> = operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    if !parameters.is_empty() {
        out.push_str("| parameter | in | type | required | |\n| --- | --- | --- | --- | --- |\n");
        for p in parameters {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                text(&p["name"]),
                text(&p["in"]),
                type_of(&p["schema"]),
                if p["required"] == true { "yes" } else { "no" },
                cell(&p["description"]),
            );
        }
        out.push('\n');
    }
    if let Some(content) = operation["requestBody"]["content"].as_object() {
        for (media, body) in content {
            let _ = writeln!(out, "Body (`{media}`): {}.\n", type_of(&body["schema"]));
        }
    }
    if let Some(responses) = operation["responses"].as_object() {
        out.push_str("| answer | | body |\n| --- | --- | --- |\n");
        for (status, response) in responses {
            let body = response["content"]
                .as_object()
                .and_then(|c| c.values().next())
                .map(|c| type_of(&c["schema"]))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "| `{status}` | {} | {body} |",
                cell(&response["description"])
            );
        }
        out.push('\n');
    }
}

fn schema_of(out: &mut String, name: &str, schema: &Value) {
    let _ = writeln!(out, "### `{name}`\n");
    let description = text(&schema["description"]);
    if !description.is_empty() {
        let _ = writeln!(out, "{}\n", description.trim());
    }
    if let Some(properties) = schema["properties"].as_object() {
        fields_of(out, properties, &schema["required"]);
        return;
    }
    // A struct with a flattened member: the member's schema by name, and its own fields.
    let parts = schema["allOf"].as_array().into_iter().flatten();
    let (inline, named): (Vec<&Value>, Vec<&Value>) =
        parts.partition(|part| part["properties"].is_object());
    if inline.is_empty() {
        let _ = writeln!(out, "{}.\n", type_of(schema));
        return;
    }
    let named: Vec<String> = named.into_iter().map(type_of).collect();
    if !named.is_empty() {
        let _ = writeln!(out, "The fields of {}, and:\n", named.join(" and "));
    }
    for part in inline {
        if let Some(properties) = part["properties"].as_object() {
            fields_of(out, properties, &part["required"]);
        }
    }
}

/// A table of an object's fields.
fn fields_of(out: &mut String, properties: &serde_json::Map<String, Value>, required: &Value) {
    let required: Vec<&str> = required
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    out.push_str("| field | type | required | |\n| --- | --- | --- | --- |\n");
    for (field, property) in properties {
        let _ = writeln!(
            out,
            "| `{field}` | {} | {} | {} |",
            type_of(property),
            if required.contains(&field.as_str()) {
                "yes"
            } else {
                "no"
            },
            cell(&property["description"]),
        );
    }
    out.push('\n');
}

/// A schema in a few words: a link to a named schema, a type, a list or choice of them.
fn type_of(schema: &Value) -> String {
    if let Some(target) = schema["$ref"].as_str() {
        let name = target.rsplit('/').next().unwrap_or(target);
        return format!("[`{name}`](#{})", name.to_lowercase());
    }
    for (key, word) in [("oneOf", " or "), ("anyOf", " or "), ("allOf", " and ")] {
        if let Some(choices) = schema[key].as_array() {
            let parts: Vec<String> = choices.iter().map(type_of).collect();
            return parts.join(word);
        }
    }
    if let Some(values) = schema["enum"].as_array() {
        let parts: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        return parts.join(", ");
    }
    let kind = match &schema["type"] {
        Value::String(kind) => kind.clone(),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => return "any".to_owned(),
    };
    if kind.starts_with("array") {
        return format!("list of {}", type_of(&schema["items"]));
    }
    match schema["format"].as_str() {
        Some(format) => format!("{kind} ({format})"),
        None => kind,
    }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

/// Text for one table cell: on one line, pipes escaped.
fn cell(value: &Value) -> String {
    text(value)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn the_api_reference_matches_the_openapi_document() {
        let document: serde_json::Value = serde_json::from_str(super::super::openapi::document())
            .unwrap_or_else(|e| panic!("the OpenAPI document is not JSON: {e}"));
        let rendered = render(&document);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
        if std::env::var_os("CARILLON_WRITE_DOCS").is_some() {
            std::fs::write(&path, &rendered).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == rendered,
            "docs/api.md does not match the OpenAPI document: write it again with \
             CARILLON_WRITE_DOCS=1 cargo test -p carillon-server --lib reference"
        );
        for operation in ["createJobs", "triggerWorkflow", "cancelRun", "enqueueTasks"] {
            assert!(
                rendered.contains(&format!("Operation `{operation}`")),
                "{operation} is missing from the reference"
            );
        }
    }
}
