//! Cron expressions for Carillon, in the two dialects job tables hold, chosen by the number of
//! fields:
//! - **5 fields**, or an alias (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
//!   `@midnight`, `@hourly`): Unix cron, minute first, day-of-week 0–7 with Sunday 0 and 7;
//!   when both day fields are restricted a day matching either fires (Vixie cron's rule).
//!   Matched by `croner`.
//! - **6 or 7 fields**: Quartz 2.3 (what XXL-JOB and Spring users write): seconds first,
//!   optional year, day-of-week 1–7 = SUN–SAT, `?`, `N/S`, `L`, `L-n`, `LW`, `nW`, `nL`,
//!   `n#k`, wrapping ranges, a step after names as Quartz reads it (dropped, and said by
//!   [`CronExpr::notes`]). Matched by our own engine (`quartz`), checked against Quartz
//!   itself by the server's `tests/quartz_oracle.rs`.
//!
//! Both match wall-clock time, to the second. Time zones and the DST rule are the caller's
//! (Carillon's server applies one rule to cron and RRULE alike); this crate knows neither, so
//! the executor SDK's `#[job]` macro checks expressions at compile time with the same code.

mod quartz;

use chrono::NaiveDateTime;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

pub use quartz::QuartzCron;

/// The longest expression accepted.
pub const MAX_LEN: usize = 512;

/// Why an expression was refused, naming the field and token at fault where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CronError(String);

impl CronError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// Which reading an expression was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Unix,
    Quartz,
}

/// A parsed cron expression of either dialect.
#[derive(Debug)]
pub enum CronExpr {
    Unix(Box<Cron>),
    Quartz(Box<QuartzCron>),
}

impl CronExpr {
    /// Parses `expression`; the number of fields chooses the dialect (see the crate's doc).
    pub fn parse(expression: &str) -> Result<Self, CronError> {
        let expression = expression.trim();
        if expression.is_empty() {
            return Err(CronError::new("is empty"));
        }
        if expression.len() > MAX_LEN {
            return Err(CronError::new(format!(
                "is {} characters long; the limit is {MAX_LEN}",
                expression.len()
            )));
        }
        let alias = expression.starts_with('@');
        let fields = expression.split_whitespace().count();
        if !alias && (fields == 6 || fields == 7) {
            return QuartzCron::parse(expression).map(|q| Self::Quartz(Box::new(q)));
        }
        if !alias && fields != 5 {
            return Err(CronError::new(format!(
                "has {fields} fields; use 5 (Unix: minute hour day-of-month month day-of-week) \
                 or 6–7 (Quartz: seconds first, optional year)"
            )));
        }
        CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expression)
            .map(|cron| Self::Unix(Box::new(cron)))
            .map_err(|e| CronError::new(describe(&e)))
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Self::Unix(_) => Dialect::Unix,
            Self::Quartz(_) => Dialect::Quartz,
        }
    }

    /// What the expression means that its text may not say (Quartz: a step after names,
    /// which Quartz drops), one sentence each; to be shown to whoever wrote it.
    pub fn notes(&self) -> &[String] {
        match self {
            Self::Quartz(quartz) => quartz.notes(),
            Self::Unix(_) => &[],
        }
    }

    /// The first wall time strictly after `after` that the expression matches (to the
    /// second), or `None` when it never matches again.
    pub fn next_after(&self, after: NaiveDateTime) -> Result<Option<NaiveDateTime>, CronError> {
        match self {
            Self::Quartz(quartz) => Ok(quartz.next_after(after)),
            Self::Unix(cron) => match cron.find_next_occurrence(&after, false) {
                Ok(wall) => Ok(Some(wall)),
                Err(croner::errors::CronError::TimeSearchLimitExceeded) => Ok(None),
                Err(e) => Err(CronError::new(describe(&e))),
            },
        }
    }
}

fn describe(err: &croner::errors::CronError) -> String {
    use croner::errors::CronError as E;
    match err {
        E::EmptyPattern => "is empty".to_owned(),
        E::TimeSearchLimitExceeded => "never matches a real date".to_owned(),
        other => other.to_string().trim_end_matches('.').to_owned(),
    }
}
