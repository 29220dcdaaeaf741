//! What is wrong with a JSON document a user sent, in the words of Carillon's API, never
//! serde's (which name Rust types: `expected i64`): the field at fault by its path
//! (`retry.max_attempts`) and what it must be. Used by the API and the CLI alike; a leaf that
//! imports nothing of the server.

/// The field `err` is about (`None` for the document itself) and what is wrong with it.
pub fn described(err: &serde_path_to_error::Error<serde_json::Error>) -> (Option<String>, String) {
    let raw = err.inner().to_string();
    let message = if err.inner().is_data() {
        plain(without_position(&raw))
    } else {
        format!("is not valid JSON: {raw}")
    };
    (field_of(&err.path().to_string(), &raw), message)
}

/// `value` as a `T`, or the field at fault and what is wrong with it (`field: message`).
pub fn from_value<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|err| match described(&err) {
        (Some(field), message) => format!("{field}: {message}"),
        (None, message) => message,
    })
}

/// serde's message without the " at line L column C" it ends with: for a value of the wrong
/// shape the field's path says where.
fn without_position(message: &str) -> &str {
    match message.rsplit_once(" at line ") {
        Some((head, tail)) if tail.contains(" column ") => head,
        _ => message,
    }
}

/// serde's message about a value, in the API's words: what the field must be and what it was
/// given (`must be an integer, not the string "nightly"`), never Rust's type names. A message
/// of our own (a schedule that does not parse, say) passes unchanged.
pub fn plain(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((got, expected)) = rest.split_once(", expected ")
    {
        return format!("must be {}, not {}", expectation(expected), given(got));
    }
    if let Some(rest) = message.strip_prefix("invalid value: ")
        && let Some((got, expected)) = rest.split_once(", expected ")
    {
        // A number out of its type's range: say the range.
        let range = match expected {
            "i32" => Some("from -2147483648 to 2147483647"),
            "u32" => Some("from 0 to 4294967295"),
            "u16" => Some("from 0 to 65535"),
            "u8" => Some("from 0 to 255"),
            "i64" | "u64" | "usize" if got.starts_with("integer") => Some("within 64 bits"),
            _ => None,
        };
        return match range {
            Some(range) if got.starts_with("integer") => {
                format!("must be an integer {range}, not {}", given(got))
            }
            _ => format!("must be {}, not {}", expectation(expected), given(got)),
        };
    }
    if let Some(rest) = message.strip_prefix("unknown variant ")
        && let Some((got, expected)) = rest.split_once(", expected ")
    {
        return format!("{} is not one of {}", quoted(got), names(expected));
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (got, known) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let got = got.trim_end_matches(", there are no fields");
        return if known.is_empty() {
            format!("unknown field {}", quoted(got))
        } else {
            format!("unknown field {} (known: {})", quoted(got), names(known))
        };
    }
    if message.starts_with("missing field ") {
        return "is required".to_owned();
    }
    if let Some(rest) = message.strip_prefix("duplicate field ") {
        return format!("field {} is given twice", quoted(rest));
    }
    if message.starts_with("data did not match any variant of untagged enum ") {
        return "is not in any of the forms this field takes (see the OpenAPI document)".to_owned();
    }
    if let Some(rest) = message.strip_prefix("invalid length ")
        && let Some((got, expected)) = rest.split_once(", expected ")
    {
        return format!("must hold {expected}, not {got} items");
    }
    message.to_owned()
}

/// `a, b` for serde's `` `a`, `b` `` or `` one of `a`, `b` ``.
fn names(list: &str) -> String {
    list.trim_start_matches("one of ")
        .replace(" or ", ", ")
        .replace('`', "")
}

/// `"x"` for serde's `` `x` ``.
fn quoted(name: &str) -> String {
    format!("{:?}", name.trim().trim_matches('`'))
}

/// What serde says a value was, as a user would say it.
fn given(got: &str) -> String {
    let value = |prefix: &str| got.strip_prefix(prefix).map(|v| v.trim_matches('`'));
    if let Some(text) = got.strip_prefix("string ") {
        return format!("the string {text}");
    }
    if let Some(v) = value("integer ").or_else(|| value("floating point ")) {
        return format!("the number {v}");
    }
    if let Some(v) = value("boolean ") {
        return v.to_owned();
    }
    match got {
        "map" => "an object".to_owned(),
        "sequence" => "a list".to_owned(),
        "unit value" | "null" => "null".to_owned(),
        other => other.to_owned(),
    }
}

/// What serde says a value must be, in the API's words.
fn expectation(expected: &str) -> String {
    match expected {
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer".to_owned(),
        "u8" | "u16" | "u32" | "u64" | "usize" => "an integer of 0 or more".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "a sequence" => "a list".to_owned(),
        "a map" => "an object".to_owned(),
        "a borrowed string" => "a string".to_owned(),
        other if other.starts_with("struct ") || other.starts_with("map") => "an object".to_owned(),
        other if other.starts_with("a sequence") => "a list".to_owned(),
        other => other.to_owned(),
    }
}

/// The field a serde error is about: its path, or for a missing field the field itself;
/// `None` for the document itself.
fn field_of(path: &str, message: &str) -> Option<String> {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    // serde_path_to_error writes "." for the root and "?" where the input was not JSON.
    let prefix = if path == "." || path == "?" { "" } else { path };
    match missing {
        Some(name) if prefix.is_empty() => Some(name.to_owned()),
        Some(name) => Some(format!("{prefix}.{name}")),
        None if prefix.is_empty() => None,
        None => Some(prefix.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::{field_of, plain, without_position};

    #[test]
    fn serde_messages_are_said_in_the_apis_words() {
        let check = |raw: &str, said: &str| assert_eq!(plain(without_position(raw)), said);
        check(
            r#"invalid type: string "no-such-job", expected i64 at line 1 column 104"#,
            r#"must be an integer, not the string "no-such-job""#,
        );
        check(
            "invalid value: integer `-5`, expected u32",
            "must be an integer from 0 to 4294967295, not the number -5",
        );
        check(
            "invalid value: integer `3000000000`, expected i32",
            "must be an integer from -2147483648 to 2147483647, not the number 3000000000",
        );
        check(
            "invalid type: map, expected a string",
            "must be a string, not an object",
        );
        check(
            "invalid type: boolean `true`, expected struct Retry",
            "must be an object, not true",
        );
        check(
            "unknown variant `sometimes`, expected one of `allow`, `skip`, `queue`, `replace`",
            r#""sometimes" is not one of allow, skip, queue, replace"#,
        );
        check(
            "unknown variant `x`, expected `a` or `b`",
            r#""x" is not one of a, b"#,
        );
        check(
            "unknown field `colour`, expected one of `name`, `app`",
            r#"unknown field "colour" (known: name, app)"#,
        );
        check("missing field `app`", "is required");
        check(
            "data did not match any variant of untagged enum JobRef",
            "is not in any of the forms this field takes (see the OpenAPI document)",
        );
        check(
            "cron: expected 6 or 7 fields at line 1 column 30",
            "cron: expected 6 or 7 fields",
        );
        for raw in [
            "invalid type: string \"x\", expected i64",
            "unknown field `x`, expected `y`",
        ] {
            let said = plain(raw);
            for rust in ["i64", "`", "expected"] {
                assert!(!said.contains(rust), "{said} (from {raw})");
            }
        }
    }

    #[test]
    fn fields_are_named_by_path() {
        let some = |f: &str| Some(f.to_owned());
        assert_eq!(field_of(".", "missing field `app` at line 1"), some("app"));
        assert_eq!(field_of("retry", "missing field `x`"), some("retry.x"));
        assert_eq!(
            field_of("retry.max_attempts", "invalid type"),
            some("retry.max_attempts")
        );
        assert_eq!(field_of(".", "EOF while parsing"), None);
        assert_eq!(field_of("?", "key must be a string"), None);
    }
}
