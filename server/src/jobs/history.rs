//! How long run history is kept: the node's `[retention]` settings, the `KeepFor` durations
//! they and a job's own `history` rule are written in. No I/O.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How long finished runs are kept: `"30d"`, `"12h"`, `"90m"`, `"45s"`, `"2w"` (or several,
/// `"1d12h"`), or `"forever"` (also written `"0"`), which turns deletion off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct KeepFor {
    /// Milliseconds; 0 for ever.
    ms: u64,
}

/// The longest a duration may be: 100 years, far past any retention and still exact in i64.
const MAX_KEEP_MS: u64 = 100 * 366 * 86_400_000;

impl KeepFor {
    pub const FOREVER: KeepFor = KeepFor { ms: 0 };

    pub const fn days(days: u64) -> KeepFor {
        KeepFor {
            ms: days * 86_400_000,
        }
    }

    /// How long, in milliseconds; `None` for ever.
    pub fn millis(self) -> Option<u64> {
        (self.ms > 0).then_some(self.ms)
    }

    /// As the job's `history_keep_ms` column holds it: 0 for ever.
    pub fn column(self) -> i64 {
        i64::try_from(self.ms).unwrap_or(i64::MAX)
    }

    pub fn parse(text: &str) -> Result<KeepFor, String> {
        let text = text.trim();
        if text == "forever" || text == "0" {
            return Ok(KeepFor::FOREVER);
        }
        let bad = |why: &str| {
            format!(
                "{text:?} {why}: use a duration like 30d, 12h, 90m or 45s, or \"forever\" (\"0\")"
            )
        };
        if text.is_empty() || text.len() > 32 {
            return Err(bad("is not a duration"));
        }
        let mut total: u64 = 0;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            if digits == 0 {
                return Err(bad("is not a duration"));
            }
            let amount: u64 = rest[..digits].parse().map_err(|_| bad("is too large"))?;
            rest = &rest[digits..];
            let unit_len = rest.chars().take_while(char::is_ascii_alphabetic).count();
            let unit: u64 = match &rest[..unit_len] {
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                "w" => 7 * 86_400_000,
                "" => return Err(bad("needs a unit after each number")),
                _ => return Err(bad("has an unknown unit")),
            };
            rest = &rest[unit_len..];
            total = amount
                .checked_mul(unit)
                .and_then(|ms| total.checked_add(ms))
                .filter(|ms| *ms <= MAX_KEEP_MS)
                .ok_or_else(|| bad("is longer than 100 years"))?;
        }
        if total == 0 {
            // "0s" is a mistake more often than a wish to keep nothing: say so.
            return Err(bad(
                "keeps nothing; write \"forever\" or \"0\" to keep runs for ever",
            ));
        }
        Ok(KeepFor { ms: total })
    }
}

impl TryFrom<String> for KeepFor {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        KeepFor::parse(&text)
    }
}

impl From<KeepFor> for String {
    fn from(keep: KeepFor) -> String {
        keep.to_string()
    }
}

impl std::fmt::Display for KeepFor {
    /// The largest unit that divides it: `30d`, `90m`; `forever` for ever.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.ms == 0 {
            return f.write_str("forever");
        }
        let (unit, size) = [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ]
        .into_iter()
        .find(|(_, size)| self.ms.is_multiple_of(*size))
        .unwrap_or(("s", 1_000));
        write!(f, "{}{unit}", self.ms / size)
    }
}

/// A job's own history rule: how long its finished runs are kept and how many at most. A run
/// is deleted when either says so; dead letters are kept for `retention.dead_letters` at
/// least, unless `max_runs` removes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobHistory {
    /// Instead of the node's `retention.runs`; `"forever"` keeps this job's runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "7d")]
    pub keep: Option<KeepFor>,
    /// At most this many of the job's newest runs are kept (1 to 1,000,000,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub max_runs: Option<u64>,
}

impl JobHistory {
    pub const MAX_RUNS: u64 = 1_000_000_000;
}

/// `[retention]`: how long run history is kept, and how fast it is deleted.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Finished runs (not dead letters): `30d`, or `forever`.
    pub runs: KeepFor,
    /// Dead letters, kept longer by default so a failure can still be looked into.
    pub dead_letters: KeepFor,
    /// The audit trail's events (deleted by the leader).
    pub audit: KeepFor,
    /// Rows per delete statement.
    pub batch: u32,
    /// The pause between two batches, so deletion yields to firing.
    pub pause_ms: u64,
    /// How often a node looks for history to delete.
    pub interval_ms: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            runs: KeepFor::days(30),
            dead_letters: KeepFor::days(90),
            audit: KeepFor::days(365),
            batch: 2_000,
            pause_ms: 50,
            interval_ms: 60_000,
        }
    }
}

impl RetentionConfig {
    /// Why the settings cannot be used, naming the setting.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(1..=50_000).contains(&self.batch) {
            return Err((
                "retention.batch",
                format!("{} is outside 1..=50000", self.batch),
            ));
        }
        if self.pause_ms > 60_000 {
            return Err((
                "retention.pause_ms",
                format!("{} is over 60000 (a minute)", self.pause_ms),
            ));
        }
        if !(100..=86_400_000).contains(&self.interval_ms) {
            return Err((
                "retention.interval_ms",
                format!("{} is outside 100..=86400000 (a day)", self.interval_ms),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_and_print_in_their_largest_unit() {
        for (text, ms, shown) in [
            ("30d", 30 * 86_400_000, "30d"),
            ("1d12h", 36 * 3_600_000, "36h"),
            ("90m", 5_400_000, "90m"),
            ("2w", 14 * 86_400_000, "14d"),
            ("45s", 45_000, "45s"),
        ] {
            let keep = KeepFor::parse(text).unwrap();
            assert_eq!(keep.millis(), Some(ms), "{text}");
            assert_eq!(keep.to_string(), shown);
        }
        assert_eq!(KeepFor::parse("forever"), Ok(KeepFor::FOREVER));
        assert_eq!(KeepFor::parse("0"), Ok(KeepFor::FOREVER));
        assert_eq!(KeepFor::FOREVER.millis(), None);
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        for (text, says) in [
            ("", "is not a duration"),
            ("7", "needs a unit"),
            ("7y", "unknown unit"),
            ("0s", "keeps nothing"),
            ("99999999d", "longer than 100 years"),
            ("-1d", "is not a duration"),
        ] {
            let err = KeepFor::parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
