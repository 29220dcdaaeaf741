//! The storage layer's error type.

/// What can go wrong in the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database error: {0}{hint}", hint = pooler_hint(.0))]
    Database(sqlx::Error),
    #[error("applying migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot take the migration lock: {reason}")]
    MigrationLock { reason: String },
    #[error("{what} was left partly applied by a node that stopped while applying it: {detail}")]
    MigrationInterrupted { what: String, detail: String },
    #[error("unsupported database url {url}: expected postgres://, mysql:// or sqlite:")]
    UnsupportedUrl { url: String },
    #[error(
        "database {name:?} does not exist and could not be created as {user:?} ({reason}): \
         create it ({how}) or name one that exists in database.url"
    )]
    NoDatabase {
        name: String,
        user: String,
        reason: String,
        how: String,
    },
    #[error("the database cannot be used as it is: {reason}")]
    UnsuitableDatabase { reason: String },
    #[error("invalid database url {url}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("fenced: this node's leader term {term} is no longer current")]
    Fenced { term: i64 },
    #[error("node {node_id} was registered again by another process or has left")]
    IncarnationLost { node_id: String },
    #[error("the schema has no cluster row; run the migrations first")]
    NotInitialised,
    #[error("{what} is already taken")]
    Conflict { what: String },
    /// A stored document (a calendar's definition) no longer reads as this version expects.
    #[error("{what} is unreadable: {reason}")]
    Unreadable { what: String, reason: String },
}

impl From<sqlx::Error> for Error {
    /// A column that does not decode (a state this version does not know) is a record to
    /// mend, not a database to wait for.
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::ColumnDecode { index, source } => Error::Unreadable {
                what: format!("a stored row's column {index}"),
                reason: source.to_string(),
            },
            err => Error::Database(err),
        }
    }
}

impl From<crate::states::UnknownText> for Error {
    fn from(unknown: crate::states::UnknownText) -> Self {
        Error::Unreadable {
            what: format!("a stored {}", unknown.kind),
            reason: unknown.to_string(),
        }
    }
}

/// What a pooler in transaction mode answers when the nodes do not know it is there: a refused
/// startup option, or the named prepared statements of another server connection.
fn pooler_hint(err: &sqlx::Error) -> &'static str {
    let said = err.to_string();
    let pooler = said.contains("unsupported startup parameter")
        || (said.contains("prepared statement \"sqlx_s_")
            && (said.contains("does not exist") || said.contains("already exists")));
    if pooler {
        " (is the database reached through a pooler in transaction mode, such as pgbouncer? \
         then set database.pooler = \"transaction\")"
    } else {
        ""
    }
}

impl Error {
    /// True when the database aborted a transaction to break a deadlock or a serialisation
    /// conflict; the whole transaction may be tried again.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Database(sqlx::Error::Database(db)) => {
                // 40001: serialisation failure (and MySQL's deadlock, error 1213);
                // 40P01: Postgres deadlock.
                matches!(db.code().as_deref(), Some("40001" | "40P01" | "1213"))
            }
            _ => false,
        }
    }

    /// True when the database refused a row because a unique key already holds it.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            Error::Database(sqlx::Error::Database(db)) => db.is_unique_violation(),
            _ => false,
        }
    }

    /// A write's outcome, with a unique key's refusal as [`Error::Conflict`] over `what`.
    pub(crate) fn conflict_on_unique<T>(
        outcome: Result<T, sqlx::Error>,
        what: impl FnOnce() -> String,
    ) -> Result<T, Error> {
        outcome.map_err(Error::from).map_err(|err| {
            if err.is_unique_violation() {
                Error::Conflict { what: what() }
            } else {
                err
            }
        })
    }
}
