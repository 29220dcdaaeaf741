//! Namespaces: the spaces of the teams sharing one cluster. Every job (workflows and steps are
//! jobs), task, calendar, executor app and run belongs to one; names are unique within it.

use std::fmt;

/// A namespace's id, the same on every node (its name is what people type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, sqlx::Type)]
#[sqlx(transparent)]
pub struct NamespaceId(pub i64);

impl NamespaceId {
    /// `default`: what is created without naming a namespace, and everything stored before
    /// namespaces existed (the migration's column default).
    pub const DEFAULT: NamespaceId = NamespaceId(1);
}

impl Default for NamespaceId {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for NamespaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
