//! HTTP jobs: the call a job makes instead of a dispatch to an executor (method, URL, headers,
//! body, what counts as success), its checks, and the template values a call's URL, headers and
//! body may hold. No I/O: `dispatch::http_jobs` makes the call.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::JobError;

/// The app name an HTTP job is listed under; its handler is the call's method.
pub const HTTP_APP: &str = "http";

const METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];
const MAX_URL: usize = 2_048;
const MAX_HEADERS: usize = 32;
const MAX_HEADER_VALUE: usize = 8 * 1024;
/// Largest body template accepted.
pub const MAX_BODY: usize = 16 * 1024;
/// Largest call as stored (in the job's policy, a MySQL `TEXT` of 64 KiB with the rest).
const MAX_CALL: usize = 32 * 1024;
/// Headers a job may not set: the client sets them from the call itself.
const RESERVED_HEADERS: [&str; 4] = ["host", "content-length", "transfer-encoding", "connection"];

/// The call an HTTP job makes at each of its instants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpCall {
    /// `GET` (the default), `POST`, `PUT`, `PATCH`, `DELETE` or `HEAD`.
    #[serde(default = "get")]
    pub method: String,
    /// An `http://` or `https://` URL; template values in it are percent-encoded. The node's
    /// `[egress]` decides what it may reach (public addresses only, unless the operators name
    /// more); an address outside it is refused as the job is written.
    pub url: String,
    /// Request headers: a value is text (templates allowed) or `{"secret": "name"}`, a secret
    /// of the job's namespace read when the call is made.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, HeaderValue>,
    /// The request body, with template values (`{{instant}}`, `{{instant_ms}}`, `{{run_id}}`, `{{attempt}}`,
    /// `{{job}}`, `{{job_id}}`, `{{shard.index}}`, `{{shard.total}}`, `{{args}}`,
    /// `{{args.field}}`; `params` is another name for `args`). Sent as
    /// `application/json` when it is JSON, else as text, unless a `Content-Type` header says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// What counts as success; by default any `2xx` status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<HttpSuccess>,
}

fn get() -> String {
    "GET".to_owned()
}

/// What an HTTP job's answer must be for its run to succeed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpSuccess {
    /// The statuses that count as success (default: any `2xx`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<u16>,
    /// A JSON pointer (RFC 6901, e.g. `/result/ok`) into the answer's JSON body, whose value
    /// must equal `equals`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_pointer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
}

/// A header's value: text with template values, or a secret's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum HeaderValue {
    Text(String),
    Secret { secret: String },
}

impl<'de> Deserialize<'de> for HeaderValue {
    // By hand: an untagged enum's error says only that nothing matched.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let not = || {
            serde::de::Error::custom(
                "a header's value is text or {\"secret\": \"name of a secret\"}",
            )
        };
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(HeaderValue::Text(text)),
            Value::Object(map) if map.len() == 1 => match map.get("secret") {
                Some(Value::String(name)) => Ok(HeaderValue::Secret {
                    secret: name.clone(),
                }),
                _ => Err(not()),
            },
            _ => Err(not()),
        }
    }
}

impl HttpCall {
    /// The secrets the call's headers name, in header order.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.headers.values().filter_map(|v| match v {
            HeaderValue::Secret { secret } => Some(secret.as_str()),
            HeaderValue::Text(_) => None,
        })
    }

    /// Whether its body is JSON: its template, with every value in place as a string, reads
    /// as JSON.
    pub fn body_is_json(&self) -> bool {
        let Some(body) = &self.body else {
            return false;
        };
        // `0` reads as JSON inside a string and out of one.
        let mut shape = String::with_capacity(body.len());
        let mut rest = body.as_str();
        while let Some(start) = rest.find("{{") {
            shape.push_str(&rest[..start]);
            match rest[start..].split_once("}}") {
                Some((_, tail)) => {
                    shape.push('0');
                    rest = tail;
                }
                None => {
                    rest = &rest[start..];
                    break;
                }
            }
        }
        shape.push_str(rest);
        serde_json::from_str::<Value>(&shape).is_ok()
    }

    /// Checks every field, naming the first at fault under `http.`.
    pub fn validate(&self) -> Result<(), JobError> {
        if !METHODS.contains(&self.method.as_str()) {
            return Err(JobError::new(
                "http.method",
                format!("{:?} is not one of {}", self.method, METHODS.join(", ")),
            ));
        }
        check_url(&self.url).map_err(|why| JobError::new("http.url", why))?;
        let stored = serde_json::to_string(self).map_or(usize::MAX, |text| text.len());
        if stored > MAX_CALL {
            return Err(JobError::new(
                "http",
                format!("is {stored} bytes as stored; the limit is {MAX_CALL}"),
            ));
        }
        check_templates(&self.url).map_err(|why| JobError::new("http.url", why))?;
        if self.headers.len() > MAX_HEADERS {
            return Err(JobError::new(
                "http.headers",
                format!("{} headers; the limit is {MAX_HEADERS}", self.headers.len()),
            ));
        }
        for (name, value) in &self.headers {
            let field = format!("http.headers.{name}");
            check_header_name(name).map_err(|why| JobError::new(&field, why))?;
            match value {
                HeaderValue::Text(text) => {
                    if text.len() > MAX_HEADER_VALUE || text.chars().any(char::is_control) {
                        return Err(JobError::new(
                            &field,
                            format!(
                                "must be at most {MAX_HEADER_VALUE} bytes, without control characters"
                            ),
                        ));
                    }
                    check_templates(text).map_err(|why| JobError::new(&field, why))?;
                }
                HeaderValue::Secret { secret } => {
                    crate::secrets::names::check_name(secret)
                        .map_err(|why| JobError::new(&format!("{field}.secret"), why))?;
                }
            }
        }
        if let Some(body) = &self.body {
            if body.len() > MAX_BODY {
                return Err(JobError::new(
                    "http.body",
                    format!("is {} bytes; the limit is {MAX_BODY}", body.len()),
                ));
            }
            if matches!(self.method.as_str(), "GET" | "HEAD") {
                return Err(JobError::new(
                    "http.body",
                    format!("a {} request has no body", self.method),
                ));
            }
            check_templates(body).map_err(|why| JobError::new("http.body", why))?;
        }
        if let Some(success) = &self.success {
            if let Some(bad) = success.status.iter().find(|s| !(100..=599).contains(*s)) {
                return Err(JobError::new(
                    "http.success.status",
                    format!("{bad} is not an HTTP status"),
                ));
            }
            match (&success.json_pointer, &success.equals) {
                (Some(pointer), Some(_)) if pointer.is_empty() || pointer.starts_with('/') => {}
                (Some(pointer), Some(_)) => {
                    return Err(JobError::new(
                        "http.success.json_pointer",
                        format!("{pointer:?} is not a JSON pointer: it starts with '/'"),
                    ));
                }
                (None, None) => {}
                (Some(_), None) => {
                    return Err(JobError::new(
                        "http.success.equals",
                        "is needed with json_pointer: the value the answer must hold",
                    ));
                }
                (None, Some(_)) => {
                    return Err(JobError::new(
                        "http.success.json_pointer",
                        "is needed with equals: where in the answer to look",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether an answer of `status` with `body` is a success.
    pub fn succeeded(&self, status: u16, body: Option<&Value>) -> Result<(), String> {
        let success = self.success.clone().unwrap_or_default();
        let status_ok = if success.status.is_empty() {
            (200..300).contains(&status)
        } else {
            success.status.contains(&status)
        };
        if !status_ok {
            return Err(format!("the URL answered {status}"));
        }
        if let (Some(pointer), Some(expected)) = (&success.json_pointer, &success.equals) {
            let found = body.and_then(|b| b.pointer(pointer));
            if found != Some(expected) {
                let found = found.map_or("nothing".to_owned(), Value::to_string);
                return Err(format!(
                    "the answer holds {found} at {pointer}, not {expected}"
                ));
            }
        }
        Ok(())
    }
}

fn check_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_URL || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "must be at most {MAX_URL} characters, without spaces"
        ));
    }
    // The host is the operators' to allow: no template value may choose it.
    let authority = url.split_once("://").map_or(url, |(_, rest)| {
        rest.split(['/', '?', '#']).next().unwrap_or(rest)
    });
    if authority.contains("{{") {
        return Err("must name its host itself: no template value before the path".to_owned());
    }
    // The URL as sent has its template values in place; check its shape with empty ones.
    let shape = render(url, &TemplateValues::default(), Encoding::Url);
    let parsed = reqwest::Url::parse(&shape).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err("must be an http:// or https:// URL with a host".to_owned());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(
            "must not hold credentials: put them in a header whose value is a secret".to_owned(),
        );
    }
    Ok(())
}

fn check_header_name(name: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || name.len() > 128 || !name.chars().all(token) {
        return Err(format!("{name:?} is not a header name"));
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!("{name} is set by the call itself"));
    }
    Ok(())
}

/// The values a call's templates are filled with, from the run being delivered.
#[derive(Debug, Clone, Default)]
pub struct TemplateValues {
    /// The run's scheduled instant, RFC 3339.
    pub instant: String,
    /// The same, in milliseconds since the Unix epoch.
    pub instant_ms: i64,
    pub run_id: i64,
    pub attempt: u32,
    pub job: String,
    pub job_id: i64,
    pub shard_index: u32,
    pub shard_total: u32,
    pub args: Value,
}

/// How a template value is written into its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As is (a header, a body).
    Plain,
    /// Percent-encoded (a URL).
    Url,
    /// As the content of a JSON string (a JSON body); `{{args}}` stays JSON.
    JsonString,
}

const NAMES: &str = "instant, instant_ms, run_id, attempt, job, job_id, shard.index, shard.total, args, args.<field>";

/// Why `text` holds a template value that is not one of [`TemplateValues`], if it does.
fn check_templates(text: &str) -> Result<(), String> {
    for name in placeholders(text) {
        let known = matches!(
            name,
            "instant"
                | "instant_ms"
                | "run_id"
                | "attempt"
                | "job"
                | "job_id"
                | "shard.index"
                | "shard.total"
                | "args"
                | "params"
        ) || field_path(name).is_some_and(|path| !path.is_empty());
        if !known {
            return Err(format!(
                "{{{{{name}}}}} is not a template value; use {NAMES}"
            ));
        }
    }
    if text.matches("{{").count() != placeholders(text).count() {
        return Err("holds a '{{' that is not closed by '}}'".to_owned());
    }
    Ok(())
}

/// The names between `{{` and `}}` in `text`, trimmed.
fn placeholders(text: &str) -> impl Iterator<Item = &str> {
    text.split("{{")
        .skip(1)
        .filter_map(|rest| rest.split_once("}}").map(|(name, _)| name.trim()))
}

/// The field path of `args.a.b` / `params.a.b`, if `name` is one.
fn field_path(name: &str) -> Option<&str> {
    name.strip_prefix("args.")
        .or_else(|| name.strip_prefix("params."))
}

/// `text` with its template values filled in from `values`.
pub fn render(text: &str, values: &TemplateValues, encoding: Encoding) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some((name, tail)) = after.split_once("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = name.trim();
        let value = value_of(name, values);
        match encoding {
            Encoding::Plain => out.push_str(&value),
            Encoding::Url => out.push_str(&percent_encode(&value)),
            Encoding::JsonString if matches!(name, "args" | "params") => {
                out.push_str(&value);
            }
            Encoding::JsonString => {
                let quoted = Value::String(value).to_string();
                out.push_str(&quoted[1..quoted.len() - 1]);
            }
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

fn value_of(name: &str, v: &TemplateValues) -> String {
    match name {
        "instant" => v.instant.clone(),
        "instant_ms" => v.instant_ms.to_string(),
        "run_id" => v.run_id.to_string(),
        "attempt" => v.attempt.to_string(),
        "job" => v.job.clone(),
        "job_id" => v.job_id.to_string(),
        "shard.index" => v.shard_index.to_string(),
        "shard.total" => v.shard_total.to_string(),
        "args" | "params" => v.args.to_string(),
        other => {
            let found = field_path(other).and_then(|path| {
                path.split('.').try_fold(&v.args, |value, key| match value {
                    Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
                    _ => value.get(key),
                })
            });
            match found {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            }
        }
    }
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(json: Value) -> Result<HttpCall, String> {
        let call: HttpCall = serde_json::from_value(json).map_err(|e| e.to_string())?;
        call.validate().map(|()| call).map_err(|e| e.to_string())
    }

    #[test]
    fn a_call_with_a_secret_header_and_a_template_body_is_accepted() {
        let c = call(serde_json::json!({
            "method": "POST", "url": "https://hooks.example.com/run?at={{instant}}",
            "headers": {"Authorization": {"secret": "hook-token"}, "X-Run": "{{run_id}}"},
            "body": "{\"day\": \"{{args.day}}\"}",
            "success": {"status": [200, 201], "json_pointer": "/ok", "equals": true}}))
        .unwrap();
        assert_eq!(c.secrets().collect::<Vec<_>>(), ["hook-token"]);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (serde_json::json!({"url": "ftp://x"}), "http.url"),
            (serde_json::json!({"url": "http://u:p@x/"}), "http.url"),
            (serde_json::json!({"url": "http://x/{{nope}}"}), "http.url"),
            (
                serde_json::json!({"url": "http://x", "method": "TRACE"}),
                "http.method",
            ),
            (
                serde_json::json!({"url": "http://x", "body": "a"}),
                "http.body",
            ),
            (
                serde_json::json!({"url": "http://x", "method": "POST", "body": "{{args"}),
                "http.body",
            ),
            (
                serde_json::json!({"url": "http://x", "headers": {"Host": "y"}}),
                "http.headers.Host",
            ),
            (
                serde_json::json!({"url": "http://x", "headers": {"A": {"secret": "bad name"}}}),
                "http.headers.A.secret",
            ),
            (
                serde_json::json!({"url": "http://x", "success": {"status": [700]}}),
                "http.success.status",
            ),
            (
                serde_json::json!({"url": "http://x", "success": {"json_pointer": "/a"}}),
                "http.success.equals",
            ),
        ];
        for (doc, field) in cases {
            let err = call(doc.clone()).unwrap_err();
            assert!(err.starts_with(&format!("{field}:")), "{doc}: {err}");
        }
        let err = serde_json::from_value::<HttpCall>(
            serde_json::json!({"url": "http://x", "headers": {"A": 3}}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("{\"secret\""), "{err}");
    }

    #[test]
    fn templates_are_filled_and_encoded_for_urls() {
        let values = TemplateValues {
            instant: "2026-11-29T02:00:00Z".to_owned(),
            instant_ms: 1_795_917_600_000,
            run_id: 42,
            attempt: 2,
            job: "ping".to_owned(),
            job_id: 7,
            shard_index: 1,
            shard_total: 3,
            args: serde_json::json!({"day": "mon day", "n": 3, "list": ["a", "b"]}),
        };
        assert_eq!(
            render("/r?at={{instant}}&d={{ args.day }}", &values, Encoding::Url),
            "/r?at=2026-11-29T02%3A00%3A00Z&d=mon%20day"
        );
        assert_eq!(
            render(
                "{{instant_ms}} {{run_id}}/{{attempt}}/{{job}}/{{job_id}}/{{shard.index}}of{{shard.total}} {{params.n}} {{args.list.1}} [{{args.none}}]",
                &values,
                Encoding::Plain
            ),
            "1795917600000 42/2/ping/7/1of3 3 b []"
        );
        assert_eq!(
            render("{{args}}", &values, Encoding::Plain),
            values.args.to_string()
        );
    }

    #[test]
    fn a_json_body_escapes_its_values_and_a_host_is_never_a_template() {
        let c = call(serde_json::json!({"method": "POST", "url": "http://x/",
            "body": "{\"note\": \"{{args.note}}\", \"n\": {{args.n}}, \"all\": {{args}}}"}))
        .unwrap();
        assert!(c.body_is_json());
        let values = TemplateValues {
            args: serde_json::json!({"note": "x\", \"admin\": true, \"y\": \"", "n": 3}),
            ..TemplateValues::default()
        };
        let body = render(c.body.as_deref().unwrap(), &values, Encoding::JsonString);
        let parsed: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed["note"], values.args["note"], "{body}");
        assert!(
            parsed.get("admin").is_none(),
            "a value added a field: {body}"
        );
        assert_eq!(parsed["n"], 3);
        assert_eq!(parsed["all"], values.args);
        let err = call(serde_json::json!({"url": "http://{{args.host}}/x"})).unwrap_err();
        assert!(err.starts_with("http.url:"), "{err}");
    }

    #[test]
    fn success_is_any_2xx_or_the_listed_statuses_and_the_pointed_value() {
        let plain = call(serde_json::json!({"url": "http://x"})).unwrap();
        assert!(plain.succeeded(204, None).is_ok());
        assert_eq!(
            plain.succeeded(500, None).unwrap_err(),
            "the URL answered 500"
        );
        let strict = call(serde_json::json!({"url": "http://x",
            "success": {"status": [202], "json_pointer": "/state", "equals": "queued"}}))
        .unwrap();
        assert!(strict.succeeded(200, None).is_err());
        let body = serde_json::json!({"state": "failed"});
        let err = strict.succeeded(202, Some(&body)).unwrap_err();
        assert!(err.contains("\"failed\" at /state"), "{err}");
        let body = serde_json::json!({"state": "queued"});
        assert!(strict.succeeded(202, Some(&body)).is_ok());
    }
}
