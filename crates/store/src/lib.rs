//! The SQLite store of tcplab runs: one file per experiment holding every run's
//! parameters, metadata, summaries, flows, intervals and raw tcp_info samples, so every
//! printed number can be recomputed from rows.
//!
//! - [`Store::open`] creates or opens the file (WAL, foreign keys on, busy timeout) and
//!   migrates its schema (`PRAGMA user_version`, see [`SCHEMA_VERSION`] and `schema.rs`).
//! - [`Store::insert_run`] / [`Store::load_run`] write and read a whole
//!   [`RunRecord`]; a loaded record equals the inserted one.
//! - [`Store::open_to_read`] opens a file to read it without writing anything, so a
//!   read-only file can be read.
//! - [`Store::export`] writes any table as CSV or JSON lines for pandas and R.
//! - [`keep_beside`] writes a run the database would not take as JSON next to it.
//!
//! Tables, columns and units are documented in `SCHEMA.md` next to this crate's
//! `Cargo.toml`.

mod columns;
mod error;
mod events;
mod experiments;
mod export;
mod kept;
mod legacy_samples;
mod probes;
mod rows;
mod sample_blocks;
mod schema;
mod spool;
#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{
    params_from_iter, Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior,
};
use tcplab_record::Limit;
use tcplab_record::{
    BufferSize, ClockOffset, CpuUse, FlowRecord, IntervalRecord, LimitShares, Mode, RttStats,
    RunRecord, Summary, TestEnd,
};

pub use error::{ParseNameError, Result, StoreError};
pub use experiments::{ExperimentRow, Outcome, PlanRow, PlanStatus};
pub use export::{ExportFormat, Table};
pub use kept::{keep_beside, NotStored};
pub use schema::SCHEMA_VERSION;
pub use spool::SampleSpool;

use rows::{enum_value, int, opt_enum_value, opt_int, opt_json, opt_text, real, text, RowReader};
use schema::{Migration, MIGRATIONS};

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// An open tcplab database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// One line of `tcplab list`: the `runs` columns that identify a run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummaryRow {
    pub id: i64,
    /// Wall-clock time of t0, µs since the Unix epoch.
    pub started_unix_us: i64,
    pub label: Option<String>,
    /// `done`, `incomplete`, `failed`, or `running` (reserved: a run being written).
    pub status: String,
    pub target: String,
    pub mode: Mode,
    /// Total rates, bit/s; `None` when not recorded (a running run, or NaN).
    pub sent_bps: Option<f64>,
    pub received_bps: Option<f64>,
}

/// Maps an SQLite error to [`StoreError`], recognising "file is not a database" and the
/// ways a database cannot be written.
fn sqlite_err<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(rusqlite::Error) -> StoreError + 'a {
    move |error| {
        let path = path.to_owned();
        match read_only_reason(&error) {
            _ if error.sqlite_error_code() == Some(ErrorCode::NotADatabase) => {
                StoreError::NotSqlite { path }
            }
            Some(why) => StoreError::ReadOnly { path, why },
            None => StoreError::Sqlite { path, op, error },
        }
    }
}

/// Why SQLite could not write, in the user's terms; `None` for other errors.
fn read_only_reason(error: &rusqlite::Error) -> Option<&'static str> {
    use rusqlite::ffi;
    let rusqlite::Error::SqliteFailure(e, _) = error else {
        return None;
    };
    if e.code != ErrorCode::ReadOnly {
        return None;
    }
    Some(match e.extended_code {
        ffi::SQLITE_READONLY_DIRECTORY => {
            "its directory is not writable, and SQLite keeps its journal there"
        }
        ffi::SQLITE_READONLY_CANTINIT
        | ffi::SQLITE_READONLY_CANTLOCK
        | ffi::SQLITE_READONLY_RECOVERY
        | ffi::SQLITE_READONLY_ROLLBACK => "its journal files (-wal, -shm) are not writable",
        ffi::SQLITE_READONLY_DBMOVED => "the file was moved or removed while open",
        _ => "the file is read-only (its permissions, or its file system)",
    })
}

fn json_err<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(serde_json::Error) -> StoreError + 'a {
    move |error| StoreError::Json {
        path: path.to_owned(),
        op,
        error,
    }
}

/// A connection that never writes the database. Where the file may be written it is
/// opened read-write with `query_only` on, so that closing it removes the write-ahead
/// log and shared-memory files as a writer's close does (a read-only connection leaves
/// them behind). Elsewhere it is opened in SQLite's read-only mode; a WAL database needs
/// its `-shm` even to be read, and where that cannot be made (a directory this process
/// may not write) and no `-wal` is left to read, the file is opened as immutable.
fn read_only_connection(path: &Path) -> Result<Connection> {
    fn open(target: &Path, flags: OpenFlags, query_only: bool) -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(target, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        if query_only {
            conn.pragma_update(None, "query_only", true)?;
        }
        // The first read of the file's header (and of its -wal and -shm).
        user_version(&conn)?;
        Ok(conn)
    }
    let err = |e| sqlite_err(path, "opening to read")(e);
    let unwritable = |e: &rusqlite::Error| {
        e.sqlite_error_code() == Some(ErrorCode::CannotOpen) || read_only_reason(e).is_some()
    };
    match open(path, OpenFlags::SQLITE_OPEN_READ_WRITE, true) {
        // SQLite falls back to reading a file it may not write, without an error.
        Ok(conn) if !conn.is_readonly(rusqlite::MAIN_DB).map_err(err)? => return Ok(conn),
        Err(e) if !unwritable(&e) => return Err(err(e)),
        _ => {}
    }
    match open(path, OpenFlags::SQLITE_OPEN_READ_ONLY, false) {
        Err(e) if unwritable(&e) && !wal_file(path).exists() => {
            let uri = format!("file:{}?immutable=1", uri_path(path));
            let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI;
            open(Path::new(&uri), flags, false).map_err(err)
        }
        other => other.map_err(err),
    }
}

/// The write-ahead log SQLite keeps beside a WAL database.
fn wal_file(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// A path as a `file:` URI's path: `%`, `?` and `#` escaped.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' | '?' | '#' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Makes an open connection ready to write: WAL mode, the schema migrated, the write
/// lock taken once. Refuses a file that is not SQLite or may not be written.
fn prepare_to_write(conn: &mut Connection, path: &Path) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sqlite_err(path, "setting the busy timeout"))?;
    // The first statement to read the file's header: fails here if it is not SQLite.
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
        .map_err(sqlite_err(path, "switching to WAL mode"))?;
    // SQLite falls back to reading a file it may not write, without an error.
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(sqlite_err(path, "opening"))?
    {
        return Err(StoreError::ReadOnly {
            path: path.to_owned(),
            why: "the file is read-only (its permissions, or its file system)",
        });
    }
    // In WAL mode NORMAL loses at most the last commits on power loss, never corrupts.
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sqlite_err(path, "setting synchronous"))?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(sqlite_err(path, "enabling foreign keys"))?;
    migrate(conn, path)?;
    // The write lock, taken and given back: its journal files can be written too.
    conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK")
        .map_err(sqlite_err(path, "taking the write lock"))
}

/// An SQLite error that stands for a failed system call ("disk I/O error", "unable to
/// open database file", "database or disk is full") with the call's own error, which
/// names the cause (no space left on the device, permission denied …).
fn with_os_cause(conn: &Connection, e: StoreError) -> StoreError {
    let (path, op, error) = match e {
        StoreError::Sqlite { path, op, error } => (path, op, error),
        StoreError::Migrate { path, error, .. } => (path, "migrating the schema", error),
        other => return other,
    };
    let from_a_system_call = matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::SystemIoFailure | ErrorCode::DiskFull | ErrorCode::CannotOpen)
    );
    // SAFETY: the handle is only read, by SQLite's own function, while `conn` lives.
    let errno = unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) };
    if !from_a_system_call || errno == 0 {
        return StoreError::Sqlite { path, op, error };
    }
    StoreError::System {
        path,
        op,
        cause: io::Error::from_raw_os_error(errno),
        error,
    }
}

/// Checks that `path` can hold a database before SQLite is asked, whose errors ("unable
/// to open database file", "disk I/O error") name no cause: an existing file must be a
/// file that can be read; a new one's directory, where it exists, must be a directory
/// (a missing one is made when the database is: [`create_dir`]). Creates nothing.
pub fn check_path(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(_) => check_readable(path),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            // The nearest part of the directory that exists must be a directory.
            match parent_dir(path).and_then(|dir| dir.ancestors().find(|d| d.exists())) {
                Some(found) if !found.is_dir() => Err(unusable(
                    path,
                    format!("cannot be created: {} is not a directory", found.display()),
                )),
                _ => Ok(()),
            }
        }
        Err(e) => Err(unusable(path, format!("cannot be reached: {e}"))),
    }
}

/// Makes the directory a database goes in, as `mkdir -p` would (`--db results/x.db`
/// from a study's first run, or a shard's first part), naming the database if it cannot.
pub fn create_dir(path: &Path) -> Result<()> {
    let Some(dir) = parent_dir(path) else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        unusable(
            path,
            format!("cannot be created: its directory {}: {e}", dir.display()),
        )
    })
}

/// An existing database file that is a file and can be read.
fn check_readable(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(unusable(path, "is a directory, not a database file".into()));
    }
    match may_read(path) {
        Ok(()) => Ok(()),
        // The caller says there is no database there.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(unusable(path, format!("cannot be read: {e}"))),
    }
}

/// Whether this process may read `path`, asked with access(2) rather than by opening
/// it: closing a file drops every POSIX lock this process holds on it, SQLite's too.
/// Where another connection of this process has the database open (a watch's store and
/// its spool), a connection of another process would then take itself for the last,
/// and delete the WAL the first still writes to.
fn may_read(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path that the call only reads.
    if unsafe { libc::access(c_path.as_ptr(), libc::R_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Creates `path` empty (SQLite makes a database of an empty file) unless it exists, so
/// that the file system says why a new database cannot be made; `true` if it was created.
fn create_if_missing(path: &Path) -> Result<bool> {
    check_path(path)?;
    create_dir(path)?;
    match std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let dir = parent_dir(path)
                .map_or("the current directory".into(), |d| d.display().to_string());
            Err(unusable(path, format!("cannot be created in {dir}: {e}")))
        }
        Err(e) => Err(unusable(path, format!("cannot be created: {e}"))),
    }
}

/// A database this process created but could not finish, with its journal files: a stub
/// of a few KiB on a full disk would pass for a database.
fn remove_new_database(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        // What was never made is not there to remove.
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
}

/// The directory a database file goes in, `None` for the current one.
fn parent_dir(path: &Path) -> Option<&Path> {
    path.parent().filter(|p| !p.as_os_str().is_empty())
}

fn unusable(path: &Path, why: String) -> StoreError {
    StoreError::Unusable {
        path: path.to_owned(),
        why,
    }
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

impl Store {
    /// Opens the database at `path` to write it, creating it if missing, and migrates its
    /// schema to [`SCHEMA_VERSION`]. Refuses a file that is not SQLite
    /// ([`StoreError::NotSqlite`]), a database from a newer tcplab
    /// ([`StoreError::TooNew`]), and one this process cannot write
    /// ([`StoreError::ReadOnly`]): checked here, before a test is spent on it.
    ///
    /// A file this call creates is removed again if it cannot be made a database (a full
    /// disk), with the journal files SQLite left beside it.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_owned();
        let created = create_if_missing(&path)?;
        Store::open_file(path.clone()).inspect_err(|_| {
            if created {
                remove_new_database(&path);
            }
        })
    }

    /// [`Store::open`] of a file that exists.
    fn open_file(path: PathBuf) -> Result<Store> {
        let mut conn = Connection::open(&path).map_err(sqlite_err(&path, "opening"))?;
        match prepare_to_write(&mut conn, &path) {
            Ok(()) => Ok(Store { conn, path }),
            Err(e) => Err(with_os_cause(&conn, e)),
        }
    }

    /// Opens an existing database to read it, writing nothing (SQLite's read-only mode:
    /// no switch to WAL, no migration), so a file this process may not write can be
    /// read. A database from an older tcplab is migrated first where it can be written,
    /// and refused in one line where it cannot ([`StoreError::OlderReadOnly`]).
    pub fn open_to_read(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_owned();
        check_readable(&path)?;
        let conn = read_only_connection(&path)?;
        let found = user_version(&conn).map_err(sqlite_err(&path, "reading the schema version"))?;
        match found.cmp(&SCHEMA_VERSION) {
            std::cmp::Ordering::Equal => Ok(Store { conn, path }),
            std::cmp::Ordering::Greater => Err(StoreError::TooNew {
                path,
                found,
                known: SCHEMA_VERSION,
            }),
            std::cmp::Ordering::Less => {
                drop(conn);
                match Store::open(&path) {
                    Ok(migrated) => {
                        drop(migrated);
                        Store::open_to_read(path)
                    }
                    Err(StoreError::ReadOnly { .. }) => Err(StoreError::OlderReadOnly {
                        path,
                        found,
                        known: SCHEMA_VERSION,
                    }),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// The file this store was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores a whole run (the run row, its flows, intervals and samples) in one
    /// transaction and returns its id.
    pub fn insert_run(&mut self, run: &RunRecord) -> Result<i64> {
        let path = &self.path;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite_err(path, "starting to insert a run"))?;
        let run_id = insert_run_in(&tx, run, path)
            .and_then(|id| {
                tx.commit()
                    .map_err(sqlite_err(path, "committing an inserted run"))?;
                Ok(id)
            })
            .map_err(|e| with_os_cause(&self.conn, e))?;
        Ok(run_id)
    }

    /// Reads back the run stored under `id`, equal to what [`Store::insert_run`] stored
    /// (flows, intervals, samples and events in their original order).
    pub fn load_run(&self, id: i64) -> Result<RunRecord> {
        self.load_run_with(id, true)
    }

    /// [`Store::load_run`] without the raw samples and kernel events (most of a run's
    /// rows): enough for summaries, intervals, statistics and the probes' charts.
    pub fn load_run_without_samples(&self, id: i64) -> Result<RunRecord> {
        self.load_run_with(id, false)
    }

    fn load_run_with(&self, id: i64, with_samples: bool) -> Result<RunRecord> {
        let path = &self.path;
        let err = |op| sqlite_err(path, op);
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(err("starting to load a run"))?;

        let mut stmt = tx
            .prepare_cached("SELECT * FROM runs WHERE id = ?1")
            .map_err(err("loading a run (runs)"))?;
        let mut rows = stmt.query([id]).map_err(err("loading a run (runs)"))?;
        let Some(row) = rows.next().map_err(err("loading a run (runs)"))? else {
            return Err(StoreError::NoSuchRun {
                path: path.clone(),
                id,
            });
        };
        let r = RowReader {
            row,
            table: "runs",
            path,
            run_id: id,
        };
        let mut run = read_run(&r)?;
        drop(rows);
        drop(stmt);

        run.flows = load_rows(&tx, path, id, "flows", read_flow)?;
        run.intervals = load_rows(&tx, path, id, "intervals", read_interval)?;
        // Probes are few (one per millisecond at most) and the latency charts need them.
        run.probes = probes::load(&tx, path, id)?;
        if with_samples {
            run.samples = sample_blocks::load(&tx, path, id)?;
            run.events = events::load(&tx, path, id)?;
        }
        Ok(run)
    }

    /// Every run, oldest first.
    pub fn list_runs(&self) -> Result<Vec<RunSummaryRow>> {
        let err = || sqlite_err(&self.path, "listing runs");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, started_unix_us, label, status, target, mode, sent_bps, received_bps
                 FROM runs ORDER BY id",
            )
            .map_err(err())?;
        let mut out = Vec::new();
        let mut rows = stmt.query([]).map_err(err())?;
        while let Some(row) = rows.next().map_err(err())? {
            let id: i64 = row.get("id").map_err(err())?;
            let r = RowReader {
                row,
                table: "runs",
                path: &self.path,
                run_id: id,
            };
            let opt_real = |col| {
                let v = r.real(col)?;
                Ok::<_, StoreError>((!v.is_nan()).then_some(v))
            };
            out.push(RunSummaryRow {
                id,
                started_unix_us: r.int("started_unix_us")?,
                label: r.opt_text("label")?,
                status: r.text("status")?,
                target: r.text("target")?,
                mode: r.enum_("mode")?,
                sent_bps: opt_real("sent_bps")?,
                received_bps: opt_real("received_bps")?,
            });
        }
        Ok(out)
    }

    /// The id of the most recently inserted run, `None` when there are no runs.
    pub fn last_run_id(&self) -> Result<Option<i64>> {
        self.conn
            .query_row("SELECT max(id) FROM runs", [], |r| r.get(0))
            .map_err(sqlite_err(&self.path, "finding the last run"))
    }

    /// Deletes a run with its flows, intervals and samples; `false` if there was none.
    pub fn delete_run(&mut self, id: i64) -> Result<bool> {
        let n = self
            .conn
            .execute("DELETE FROM runs WHERE id = ?1", [id])
            .map_err(sqlite_err(&self.path, "deleting a run"))?;
        Ok(n > 0)
    }
}

/// Inserts a whole run inside `tx` and returns its id.
fn insert_run_in(tx: &Transaction<'_>, run: &RunRecord, path: &Path) -> Result<i64> {
    let run_id = insert_run_but_samples(tx, run, path)?;
    sample_blocks::insert(tx, run_id, 0, &run.samples)
        .map_err(sqlite_err(path, "inserting a run (samples)"))?;
    Ok(run_id)
}

/// Inserts a run inside `tx`, all of it but its samples, and returns its id.
fn insert_run_but_samples(tx: &Transaction<'_>, run: &RunRecord, path: &Path) -> Result<i64> {
    let run_id = insert_named(tx, "runs", &run_values(run, path)?)
        .map_err(sqlite_err(path, "inserting a run (runs)"))?;
    for flow in &run.flows {
        insert_named(tx, "flows", &flow_values(run_id, flow))
            .map_err(sqlite_err(path, "inserting a run (flows)"))?;
    }
    for interval in &run.intervals {
        insert_named(tx, "intervals", &interval_values(run_id, interval))
            .map_err(sqlite_err(path, "inserting a run (intervals)"))?;
    }
    events::insert(tx, run_id, &run.events)
        .map_err(sqlite_err(path, "inserting a run (events)"))?;
    probes::insert(tx, run_id, &run.probes)
        .map_err(sqlite_err(path, "inserting a run (probes)"))?;
    Ok(run_id)
}

/// Applies the missing migrations, each in its own transaction.
fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    loop {
        let current = user_version(conn).map_err(sqlite_err(path, "reading the schema version"))?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: path.to_owned(),
                found: current,
                known: SCHEMA_VERSION,
            });
        }
        if current == SCHEMA_VERSION {
            return Ok(());
        }
        if current < 0 {
            return Err(StoreError::Schema {
                path: path.to_owned(),
                detail: format!("negative schema version {current}"),
            });
        }
        let next = current + 1;
        let migrate_err = |error| match read_only_reason(&error) {
            Some(why) => StoreError::ReadOnly {
                path: path.to_owned(),
                why,
            },
            None => StoreError::Migrate {
                path: path.to_owned(),
                version: next,
                error,
            },
        };
        // IMMEDIATE takes the write lock first, so two processes opening a new file at
        // once migrate it once: the second sees the new version below and starts over.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite_err(path, "starting a migration"))?;
        if user_version(&tx).map_err(migrate_err)? != current {
            continue;
        }
        match &MIGRATIONS[current as usize] {
            Migration::Sql(sql) => tx.execute_batch(&sql()).map_err(migrate_err)?,
            Migration::Code(run) => run(&tx, path)?,
        }
        tx.pragma_update(None, "user_version", next)
            .map_err(migrate_err)?;
        tx.commit().map_err(migrate_err)?;
    }
}

/// Column names shared by the writers and readers below.
const CPU_CLIENT: [&str; 3] = [
    "cpu_client_user_pct",
    "cpu_client_system_pct",
    "cpu_client_total_pct",
];
const CPU_SERVER: [&str; 3] = [
    "cpu_server_user_pct",
    "cpu_server_system_pct",
    "cpu_server_total_pct",
];
const SNDBUF: [&str; 4] = [
    "sndbuf_requested",
    "sndbuf_effective",
    "sndbuf_capped_at",
    "sndbuf_at_end",
];
const RCVBUF: [&str; 4] = [
    "rcvbuf_requested",
    "rcvbuf_effective",
    "rcvbuf_capped_at",
    "rcvbuf_at_end",
];

type Columns = Vec<(&'static str, rusqlite::types::Value)>;

/// `INSERT INTO table (names) VALUES (values)`; returns the new rowid.
fn insert_named(tx: &Transaction<'_>, table: &str, cols: &Columns) -> rusqlite::Result<i64> {
    let names: Vec<&str> = cols.iter().map(|(n, _)| *n).collect();
    let marks = vec!["?"; cols.len()].join(", ");
    let sql = format!(
        "INSERT INTO {table} ({}) VALUES ({marks})",
        names.join(", ")
    );
    let mut stmt = tx.prepare_cached(&sql)?;
    stmt.execute(params_from_iter(cols.iter().map(|(_, v)| v)))?;
    Ok(tx.last_insert_rowid())
}

/// The columns of the limit shares in [`Limit::ALL`] order: `limit_` + each name
/// (`limit_columns_follow_the_names`).
pub(crate) const LIMIT_COLUMNS: [&str; Limit::ALL.len()] = [
    "limit_rwnd",
    "limit_sndbuf",
    "limit_cwnd",
    "limit_pacing",
    "limit_app",
];
/// A flow's kernel chrono shares (no pacing: the kernel has no such counter).
const KERNEL_LIMIT_COLUMNS: [&str; 4] = [
    "kernel_limit_rwnd",
    "kernel_limit_sndbuf",
    "kernel_limit_cwnd",
    "kernel_limit_app",
];

fn limit_values(l: &LimitShares) -> Vec<(&'static str, rusqlite::types::Value)> {
    LIMIT_COLUMNS
        .into_iter()
        .zip(Limit::ALL)
        .map(|(column, limit)| (column, real(l.get(limit))))
        .collect()
}

fn kernel_limit_values(l: &LimitShares) -> Vec<(&'static str, rusqlite::types::Value)> {
    let [rwnd, sndbuf, cwnd, app] = KERNEL_LIMIT_COLUMNS;
    vec![
        (rwnd, real(l.rwnd)),
        (sndbuf, real(l.sndbuf)),
        (cwnd, real(l.cwnd)),
        (app, real(l.app)),
    ]
}

fn rtt_values(r: &RttStats) -> [(&'static str, rusqlite::types::Value); 3] {
    [
        ("rtt_min_us", int(r.min_us)),
        ("rtt_mean_us", real(r.mean_us)),
        ("rtt_max_us", int(r.max_us)),
    ]
}

fn run_values(run: &RunRecord, path: &Path) -> Result<Columns> {
    let json = |v: String| rusqlite::types::Value::Text(v);
    let enc = |r: serde_json::Result<String>| r.map(json).map_err(json_err(path, "encoding a run"));
    let p = &run.params;
    let (end_kind, end_value) = match p.end {
        TestEnd::Duration { us } => ("duration", us),
        TestEnd::Bytes { bytes } => ("bytes", bytes),
    };
    let s = &run.summary;
    let mut cols: Columns = vec![
        ("schema", text(&run.schema)),
        ("tool_version", text(&run.tool_version)),
        ("label", opt_text(run.label.as_deref())),
        ("tags", enc(serde_json::to_string(&run.tags))?),
        ("status", enum_value(&run.status)),
        ("error", opt_text(run.error.as_deref())),
        ("started_unix_us", int(run.started_unix_us)),
        ("target", text(&run.target)),
        ("mode", enum_value(&p.mode)),
        ("streams", int(p.streams)),
        ("end_kind", text(end_kind)),
        ("end_value", int(end_value)),
        ("sample_interval_us", int(p.sample_interval_us)),
        ("report_interval_us", int(p.report_interval_us)),
        ("params_json", enc(serde_json::to_string(p))?),
        (
            "path_spec",
            opt_text(run.path.as_ref().map(|p| p.spec.as_str())),
        ),
        (
            "path_json",
            match &run.path {
                Some(path) => enc(serde_json::to_string(path))?,
                None => opt_text(None),
            },
        ),
        ("client_meta_json", enc(serde_json::to_string(&run.client))?),
        ("server_meta_json", enc(serde_json::to_string(&run.server))?),
        ("clock_offset_us", int(run.clock.offset_us)),
        ("clock_uncertainty_us", int(run.clock.uncertainty_us)),
        ("sent_bytes", int(s.sent_bytes)),
        ("received_bytes", int(s.received_bytes)),
        ("sent_bps", real(s.sent_bps)),
        ("received_bps", real(s.received_bps)),
        ("window_seconds", real(s.window_seconds)),
        ("retransmits", int(s.retransmits)),
    ];
    cols.extend(rtt_values(&s.rtt));
    cols.extend(limit_values(&s.limits));
    cols.push(("dominant_limit", opt_enum_value(s.dominant_limit.as_ref())));
    for (names, cpu) in [(CPU_CLIENT, &s.cpu_client), (CPU_SERVER, &s.cpu_server)] {
        let [user, system, total] = names;
        cols.extend([
            (user, real(cpu.user_pct)),
            (system, real(cpu.system_pct)),
            (total, real(cpu.total_pct)),
        ]);
    }
    cols.push(("udp_json", opt_json(s.udp.as_ref())));
    cols.push(("trace_json", opt_json(run.trace.as_ref())));
    cols.push(("latency_json", opt_json(s.latency.as_ref())));
    cols.push(("transactions_json", opt_json(s.transactions.as_ref())));
    cols.push(("kind", enum_value(&run.kind())));
    cols.push(("watch_json", opt_json(run.watch.as_ref())));
    Ok(cols)
}

fn buffer_values(
    [requested, effective, capped_at, at_end]: [&'static str; 4],
    b: &BufferSize,
) -> [(&'static str, rusqlite::types::Value); 4] {
    [
        (requested, opt_int(b.requested)),
        (effective, int(b.effective)),
        (capped_at, opt_int(b.capped_at)),
        (at_end, int(b.at_end)),
    ]
}

fn flow_values(run_id: i64, f: &FlowRecord) -> Columns {
    let mut cols: Columns = vec![
        ("run_id", int(run_id)),
        ("flow", int(f.id)),
        ("direction", enum_value(&f.direction)),
        ("host", opt_text(f.host.as_deref())),
        ("name", opt_text(f.name.as_deref())),
        ("client_addr", text(&f.client_addr)),
        ("server_addr", text(&f.server_addr)),
        ("cc", text(&f.cc)),
        ("mss", int(f.mss)),
    ];
    cols.extend(buffer_values(SNDBUF, &f.sndbuf));
    cols.extend(buffer_values(RCVBUF, &f.rcvbuf));
    cols.extend([
        ("sent_bytes", int(f.sent_bytes)),
        ("received_bytes", int(f.received_bytes)),
        ("sent_bps", real(f.sent_bps)),
        ("received_bps", real(f.received_bps)),
        ("sender_seconds", real(f.sender_seconds)),
        ("receiver_seconds", real(f.receiver_seconds)),
        ("retransmits", int(f.retransmits)),
        ("samples", int(f.samples)),
        ("receiver_samples", int(f.receiver_samples)),
    ]);
    cols.extend(limit_values(&f.limits));
    cols.extend(kernel_limit_values(&f.kernel_limits));
    cols.extend(rtt_values(&f.rtt));
    cols.push(("udp_json", opt_json(f.udp.as_ref())));
    cols.push(("timed_json", opt_json(f.timed.as_ref())));
    cols.push(("transactions_json", opt_json(f.transactions.as_ref())));
    cols.push(("watched_json", opt_json(f.watched.as_ref())));
    cols
}

fn interval_values(run_id: i64, i: &IntervalRecord) -> Columns {
    let mut cols: Columns = vec![
        ("run_id", int(run_id)),
        ("flow", int(i.flow)),
        ("idx", int(i.index)),
        ("start_us", int(i.start_us)),
        ("end_us", int(i.end_us)),
        ("acked_bytes", int(i.acked_bytes)),
        ("received_bytes", int(i.received_bytes)),
        ("retransmits", int(i.retransmits)),
        ("cwnd", int(i.cwnd)),
        ("srtt_us", int(i.srtt_us)),
    ];
    cols.extend(limit_values(&i.limits));
    cols.push(("udp_json", opt_json(i.udp.as_ref())));
    cols.push(("drain", int(i.drain)));
    cols
}

/// One run's rows of a child table (`flows`, `intervals`) in insertion order.
fn load_rows<T>(
    tx: &Transaction<'_>,
    path: &Path,
    run_id: i64,
    table: &'static str,
    read: fn(&RowReader<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let err = || sqlite_err(path, "loading a run");
    let sql = format!("SELECT * FROM {table} WHERE run_id = ?1 ORDER BY rowid");
    let mut stmt = tx.prepare_cached(&sql).map_err(err())?;
    let mut rows = stmt.query([run_id]).map_err(err())?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(err())? {
        out.push(read(&RowReader {
            row,
            table,
            path,
            run_id,
        })?);
    }
    Ok(out)
}

fn read_limits(r: &RowReader<'_>) -> Result<LimitShares> {
    let [rwnd, sndbuf, cwnd, pacing, app] = LIMIT_COLUMNS;
    Ok(LimitShares {
        rwnd: r.real(rwnd)?,
        sndbuf: r.real(sndbuf)?,
        cwnd: r.real(cwnd)?,
        pacing: r.real(pacing)?,
        app: r.real(app)?,
    })
}

fn read_kernel_limits(r: &RowReader<'_>) -> Result<LimitShares> {
    let [rwnd, sndbuf, cwnd, app] = KERNEL_LIMIT_COLUMNS;
    Ok(LimitShares {
        rwnd: r.real(rwnd)?,
        sndbuf: r.real(sndbuf)?,
        cwnd: r.real(cwnd)?,
        pacing: 0.0,
        app: r.real(app)?,
    })
}

fn read_rtt(r: &RowReader<'_>) -> Result<RttStats> {
    Ok(RttStats {
        min_us: r.int("rtt_min_us")?,
        mean_us: r.real("rtt_mean_us")?,
        max_us: r.int("rtt_max_us")?,
    })
}

fn read_cpu(r: &RowReader<'_>, [user, system, total]: [&str; 3]) -> Result<CpuUse> {
    Ok(CpuUse {
        user_pct: r.real(user)?,
        system_pct: r.real(system)?,
        total_pct: r.real(total)?,
    })
}

/// The run row, with empty flows, intervals and samples.
fn read_run(r: &RowReader<'_>) -> Result<RunRecord> {
    let status = r.text("status")?;
    if status == "running" {
        return Err(r.bad(
            "status",
            status,
            "the run is still being written and has no record yet",
        ));
    }
    Ok(RunRecord {
        schema: r.text("schema")?,
        tool_version: r.text("tool_version")?,
        label: r.opt_text("label")?,
        tags: r.json("tags")?,
        status: r.enum_("status")?,
        error: r.opt_text("error")?,
        started_unix_us: r.int("started_unix_us")?,
        target: r.text("target")?,
        // The columns mode … report_interval_us repeat parts of params_json for queries.
        params: r.json("params_json")?,
        path: r.opt_json("path_json")?,
        client: r.json("client_meta_json")?,
        server: r.json("server_meta_json")?,
        clock: ClockOffset {
            offset_us: r.int("clock_offset_us")?,
            uncertainty_us: r.int("clock_uncertainty_us")?,
        },
        summary: Summary {
            sent_bytes: r.int("sent_bytes")?,
            received_bytes: r.int("received_bytes")?,
            sent_bps: r.real("sent_bps")?,
            received_bps: r.real("received_bps")?,
            // Not recorded before schema 5.
            window_seconds: r.opt_real("window_seconds")?.unwrap_or_default(),
            retransmits: r.int("retransmits")?,
            rtt: read_rtt(r)?,
            limits: read_limits(r)?,
            dominant_limit: r.opt_enum("dominant_limit")?,
            cpu_client: read_cpu(r, CPU_CLIENT)?,
            cpu_server: read_cpu(r, CPU_SERVER)?,
            udp: r.opt_json("udp_json")?,
            latency: r.opt_json("latency_json")?,
            transactions: r.opt_json("transactions_json")?,
        },
        flows: Vec::new(),
        intervals: Vec::new(),
        samples: Vec::new(),
        trace: r.opt_json("trace_json")?,
        events: Vec::new(),
        probes: Vec::new(),
        watch: r.opt_json("watch_json")?,
    })
}

fn read_buffer(
    r: &RowReader<'_>,
    [requested, effective, capped_at, at_end]: [&str; 4],
) -> Result<BufferSize> {
    Ok(BufferSize {
        requested: r.opt_int(requested)?,
        effective: r.int(effective)?,
        capped_at: r.opt_int(capped_at)?,
        at_end: r.int(at_end)?,
    })
}

fn read_flow(r: &RowReader<'_>) -> Result<FlowRecord> {
    Ok(FlowRecord {
        id: r.int("flow")?,
        direction: r.enum_("direction")?,
        host: r.opt_text("host")?,
        name: r.opt_text("name")?,
        client_addr: r.text("client_addr")?,
        server_addr: r.text("server_addr")?,
        cc: r.text("cc")?,
        mss: r.int("mss")?,
        sndbuf: read_buffer(r, SNDBUF)?,
        rcvbuf: read_buffer(r, RCVBUF)?,
        sent_bytes: r.int("sent_bytes")?,
        received_bytes: r.int("received_bytes")?,
        sent_bps: r.real("sent_bps")?,
        received_bps: r.real("received_bps")?,
        sender_seconds: r.real("sender_seconds")?,
        receiver_seconds: r.real("receiver_seconds")?,
        retransmits: r.int("retransmits")?,
        samples: r.int("samples")?,
        receiver_samples: r.int("receiver_samples")?,
        limits: read_limits(r)?,
        kernel_limits: read_kernel_limits(r)?,
        rtt: read_rtt(r)?,
        udp: r.opt_json("udp_json")?,
        timed: r.opt_json("timed_json")?,
        transactions: r.opt_json("transactions_json")?,
        watched: r.opt_json("watched_json")?,
    })
}

fn read_interval(r: &RowReader<'_>) -> Result<IntervalRecord> {
    Ok(IntervalRecord {
        flow: r.int("flow")?,
        index: r.int("idx")?,
        start_us: r.int("start_us")?,
        end_us: r.int("end_us")?,
        acked_bytes: r.int("acked_bytes")?,
        received_bytes: r.int("received_bytes")?,
        retransmits: r.int("retransmits")?,
        cwnd: r.int("cwnd")?,
        srtt_us: r.int("srtt_us")?,
        limits: read_limits(r)?,
        udp: r.opt_json("udp_json")?,
        drain: r.int("drain")?,
    })
}
