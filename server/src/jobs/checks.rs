//! The checks a job document's fields pass beyond their types: bounds, calendar names, alert
//! webhooks, what a job and a task share (app, handler, arguments, priority, retry,
//! timeout), and which app and handler a job names (an HTTP job: none of its own).

use chrono_tz::Tz;

use super::{
    Bounds, Delivery, HTTP_APP, HttpCall, JobError, JobPolicy, MAX_ARGS_BYTES, MAX_IDENT,
    MAX_TIMEOUT_MS,
};
use crate::schedule::{Window, parse_instant};

/// The instants `bounds` allow, read in `zone`.
pub fn window_of(bounds: Option<&Bounds>, zone: Tz) -> Result<Window, JobError> {
    let Some(bounds) = bounds else {
        return Ok(Window::default());
    };
    let read = |text: &Option<String>, field: &'static str| {
        text.as_deref()
            .map(|t| parse_instant(t, zone, field).map(|i| i.timestamp_millis()))
            .transpose()
    };
    let window = Window {
        not_before_ms: read(&bounds.not_before, "bounds.not_before")?,
        not_after_ms: read(&bounds.not_after, "bounds.not_after")?,
    };
    if let (Some(start), Some(end)) = (window.not_before_ms, window.not_after_ms)
        && end < start
    {
        return Err(JobError::new(
            "bounds.not_after",
            "is before bounds.not_before",
        ));
    }
    Ok(window)
}

/// Why `name` cannot name a calendar, if it cannot.
pub fn check_calendar_name(name: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_IDENT || !name.chars().all(ok) {
        return Err(format!(
            "{name:?} is not a calendar name: 1 to {MAX_IDENT} letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(())
}

/// Why `url` cannot be an alert webhook, if it cannot.
pub fn check_webhook(url: &str) -> Result<(), String> {
    const MAX_WEBHOOK: usize = 2_048;
    let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
    let host = url.split_once("://").map_or("", |(_, rest)| rest);
    if !scheme_ok || host.is_empty() || host.starts_with('/') {
        return Err("must be an http:// or https:// URL".to_owned());
    }
    if url.len() > MAX_WEBHOOK || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "must be at most {MAX_WEBHOOK} characters, without spaces"
        ));
    }
    Ok(())
}

/// The checks a job and a task share: what runs (app, handler, arguments) and how (priority,
/// retry, timeout).
pub fn validate_work(
    app: &str,
    handler: &str,
    args: &serde_json::Value,
    p: &JobPolicy,
) -> Result<(), JobError> {
    let ident = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    check_text("app", app, MAX_IDENT, ident)?;
    check_text("handler", handler, MAX_IDENT, ident)?;
    let args_len = serde_json::to_vec(args).map_or(usize::MAX, |v| v.len());
    if args_len > MAX_ARGS_BYTES {
        return Err(JobError::new(
            "args",
            format!("is {args_len} bytes of JSON; the limit is {MAX_ARGS_BYTES}"),
        ));
    }
    if !(0..=10).contains(&p.priority) {
        return Err(JobError::new(
            "priority",
            format!("{} is outside 0..=10", p.priority),
        ));
    }
    if !(1..=100).contains(&p.retry.max_attempts) {
        return Err(JobError::new(
            "retry.max_attempts",
            format!("{} is outside 1..=100", p.retry.max_attempts),
        ));
    }
    if p.delivery == Delivery::AtMostOnce && p.retry.max_attempts > 1 {
        return Err(JobError::new(
            "retry.max_attempts",
            format!(
                "is {}, but delivery at_most_once is never tried again: leave it at 1",
                p.retry.max_attempts
            ),
        ));
    }
    if p.retry.initial_delay_ms > p.retry.max_delay_ms {
        return Err(JobError::new(
            "retry.initial_delay_ms",
            "must not exceed retry.max_delay_ms",
        ));
    }
    if let Some(timeout) = p.timeout_ms
        && !(1..=MAX_TIMEOUT_MS).contains(&timeout)
    {
        return Err(JobError::new(
            "timeout_ms",
            format!("{timeout} is outside 1..={MAX_TIMEOUT_MS} (7 days)"),
        ));
    }
    Ok(())
}

pub(super) fn check_text(
    field: &str,
    value: &str,
    max: usize,
    allowed: impl Fn(char) -> bool,
) -> Result<(), JobError> {
    if value.trim().is_empty() {
        return Err(JobError::new(field, "must not be empty"));
    }
    if value.chars().count() > max {
        return Err(JobError::new(
            field,
            format!("is longer than {max} characters"),
        ));
    }
    if let Some(bad) = value.chars().find(|c| !allowed(*c)) {
        return Err(JobError::new(field, format!("must not contain {bad:?}")));
    }
    Ok(())
}

/// The app and handler a job document names: an executor's, or for an HTTP job (which names
/// neither) [`HTTP_APP`] and the call's method.
/// Why a job's `secrets` cannot be: too many, a name that is not one, or an HTTP job's
/// (which names its secrets in its headers).
pub(super) fn check_secret_names(names: &[String], http: bool) -> Result<(), JobError> {
    const MAX_SECRETS: usize = 16;
    if names.is_empty() {
        return Ok(());
    }
    if http {
        return Err(JobError::new(
            "secrets",
            "an HTTP job names its secrets in its headers ({\"secret\": \"name\"})",
        ));
    }
    if names.len() > MAX_SECRETS {
        return Err(JobError::new(
            "secrets",
            format!("names {}; the limit is {MAX_SECRETS}", names.len()),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        crate::secrets::names::check_name(name)
            .map_err(|why| JobError::new(&format!("secrets[{i}]"), why))?;
    }
    Ok(())
}

pub(super) fn work_named(
    app: Option<String>,
    handler: Option<String>,
    http: Option<&HttpCall>,
) -> Result<(String, String), JobError> {
    match (app, handler, http) {
        (None, None, Some(call)) => Ok((HTTP_APP.to_owned(), call.method.clone())),
        (Some(_), _, Some(_)) => Err(JobError::new(
            "app",
            "an HTTP job has no app: its http call says where it goes",
        )),
        (None, Some(_), Some(_)) => Err(JobError::new(
            "handler",
            "an HTTP job has no handler: its http call says where it goes",
        )),
        (Some(app), Some(handler), None) => Ok((app, handler)),
        (None, _, None) => Err(JobError::new(
            "app",
            "is required: the executor app that runs the job (or http, for a job that calls a URL)",
        )),
        (Some(_), None, None) => Err(JobError::new("handler", "is required")),
    }
}
