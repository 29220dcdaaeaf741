//! What a skip alert is about: the instants of a job a schedule did not fire, and why.

/// Why a scheduled instant did not fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// No node fired it in time (nodes down, partitions moving) and the misfire policy left it.
    Misfire,
    /// The job was stopped at its instant, and its misfire policy left it when started again.
    Paused,
    /// A run of the job was unfinished and its overlap rule is `skip`.
    Overlap,
    /// One of the job's calendars excludes it.
    Calendar,
}

impl SkipReason {
    pub const ALL: [Self; 4] = [Self::Misfire, Self::Paused, Self::Overlap, Self::Calendar];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Misfire => "misfire",
            Self::Paused => "paused",
            Self::Overlap => "overlap",
            Self::Calendar => "calendar",
        }
    }

    /// The reason in a sentence's words.
    pub fn explained(self) -> &'static str {
        match self {
            Self::Misfire => "not fired in time (no node could) and left by the misfire policy",
            Self::Paused => "due while the job was stopped, and left by the misfire policy",
            Self::Overlap => "a run of the job was unfinished (overlap: skip)",
            Self::Calendar => "excluded by a calendar of the job",
        }
    }
}

/// Instants of one job skipped for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedInstants {
    pub reason: SkipReason,
    pub count: u64,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Whether more were skipped than `count` says (a long outage is counted only so far).
    pub at_least: bool,
    /// What the skip said last (the calendar, the unfinished run), if anything.
    pub detail: Option<String>,
}

impl SkippedInstants {
    /// One instant skipped.
    pub fn one(reason: SkipReason, at_ms: i64, detail: Option<String>) -> Self {
        Self {
            reason,
            count: 1,
            first_ms: at_ms,
            last_ms: at_ms,
            at_least: false,
            detail,
        }
    }

    pub(crate) fn merge(&mut self, other: Self) {
        self.count += other.count;
        self.first_ms = self.first_ms.min(other.first_ms);
        self.last_ms = self.last_ms.max(other.last_ms);
        self.at_least |= other.at_least;
        if other.detail.is_some() {
            self.detail = other.detail;
        }
    }
}
