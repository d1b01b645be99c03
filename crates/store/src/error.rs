//! Errors of the store. Every variant names the database file and the operation, so a
//! message printed by the CLI says what failed where without more context. The cause is
//! part of the message, not a `source`: error chains would print it twice.

use std::path::PathBuf;

/// Failure of a store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// What the file system says against the file, asked before SQLite (whose messages
    /// name no cause): a directory, a file that cannot be read, a new file that cannot
    /// be created (a missing directory, one that may not be written, a full disk).
    #[error("{}: {why}", path.display())]
    Unusable { path: PathBuf, why: String },

    /// The file exists but is not an SQLite database.
    #[error("{}: not an SQLite database (is this a tcplab database?)", path.display())]
    NotSqlite { path: PathBuf },

    /// The database was written by a newer tcplab whose schema this build does not know.
    #[error(
        "{}: schema version {found} is newer than this tcplab knows ({known}); \
         use a newer tcplab to read it",
        path.display()
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },

    /// Applying migration `version` failed; the database stays at the version before it.
    #[error("{}: migrating the schema to version {version}: {error}", path.display())]
    Migrate {
        path: PathBuf,
        version: i64,
        error: rusqlite::Error,
    },

    /// The schema on disk does not match what this build expects at its version.
    #[error("{}: schema mismatch: {detail}", path.display())]
    Schema { path: PathBuf, detail: String },

    /// An SQLite call failed during `op` (e.g. "opening", "inserting a run").
    #[error("{}: {op}: {error}", path.display())]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        error: rusqlite::Error,
    },

    /// An SQLite call failed because a system call did: `cause` is the system call's
    /// error, which names what SQLite's message ("disk I/O error") does not.
    #[error("{}: {op}: {cause}; SQLite: {error}", path.display())]
    System {
        path: PathBuf,
        op: &'static str,
        cause: std::io::Error,
        error: rusqlite::Error,
    },

    /// The database cannot be written: its file, or the directory SQLite keeps its
    /// journal in. Read commands open it read-only instead.
    #[error("{}: cannot be written: {why}", path.display())]
    ReadOnly { path: PathBuf, why: &'static str },

    /// A database from an older tcplab, opened read-only: migrating it needs a write.
    #[error(
        "{}: schema version {found} is older than this tcplab's ({known}) and the file \
         cannot be written: open it once where it can (any tcplab command, as a user who \
         may write it and its directory) to migrate it",
        path.display()
    )]
    OlderReadOnly {
        path: PathBuf,
        found: i64,
        known: i64,
    },

    /// A JSON column could not be encoded or decoded during `op`.
    #[error("{}: {op}: JSON: {error}", path.display())]
    Json {
        path: PathBuf,
        op: &'static str,
        error: serde_json::Error,
    },

    /// A stored value is outside what the record type allows (e.g. an unknown status, a
    /// negative count); `what` names the table, column and value.
    #[error("{}: run {run_id}: bad stored value: {what}", path.display())]
    BadValue {
        path: PathBuf,
        run_id: i64,
        what: String,
    },

    /// No run with this id.
    #[error("{}: no run with id {id}", path.display())]
    NoSuchRun { path: PathBuf, id: i64 },

    /// Writing the export failed (the output, not the database).
    #[error("{}: exporting table {table} as {format}: {error}", path.display())]
    Export {
        path: PathBuf,
        table: &'static str,
        format: &'static str,
        error: std::io::Error,
    },

    /// A run that could not be stored could not be kept as JSON either: `tried` lists
    /// each place with why it failed.
    #[error("the run's JSON could not be written either ({tried})")]
    NotKept { tried: String },
}

/// Result of the store's operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A name given for a [`crate::Table`] or [`crate::ExportFormat`] that is not one of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} '{given}' (valid: {})", valid.join(", "))]
pub struct ParseNameError {
    /// "table" or "export format".
    pub kind: &'static str,
    pub given: String,
    pub valid: &'static [&'static str],
}
