//! A run the database would not take is kept as JSON beside it: what was measured is
//! never lost to a read-only file, a full disk or a lock.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use tcplab_record::RunRecord;

use crate::{Result, StoreError};

/// A run the database would not take, and where it was kept instead.
#[derive(Debug, thiserror::Error)]
#[error("the run was not stored ({error}); {}", kept_text(.kept, .db))]
pub struct NotStored {
    pub error: StoreError,
    /// The database that refused the run.
    pub db: PathBuf,
    /// The JSON file, or why it could not be written; `None` when there was no record.
    pub kept: Option<Result<PathBuf, StoreError>>,
}

impl NotStored {
    /// Keeps `run` (if the test got as far as one) beside `db`, which refused it.
    pub fn keeping(db: &Path, error: StoreError, run: Option<&RunRecord>) -> NotStored {
        NotStored {
            error,
            db: db.to_owned(),
            kept: run.map(|run| keep_beside(db, run)),
        }
    }
}

/// Where the run is and the command that stores it once the database takes it.
fn kept_text(kept: &Option<Result<PathBuf, StoreError>>, db: &Path) -> String {
    match kept {
        Some(Ok(path)) => format!(
            "it is kept in {}; `tcplab import {} --db {}` stores it",
            path.display(),
            path.display(),
            db.display()
        ),
        Some(Err(e)) => e.to_string(),
        None => "nothing was measured".into(),
    }
}

/// Writes `run` whole (the `tcplab.run/1` JSON with its samples) as `DB.run-TIME.json`
/// next to the database `db`, or in the current directory when the database's cannot be
/// written; `TIME` is the run's start (UTC). Returns the file written.
pub fn keep_beside(db: &Path, run: &RunRecord) -> Result<PathBuf> {
    let beside = match db.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = db.file_name().map_or("tcplab.db".into(), |n| n.to_owned());
    let started = UNIX_EPOCH + Duration::from_micros(run.started_unix_us.max(0) as u64);
    let stamp = humantime::format_rfc3339_seconds(started)
        .to_string()
        .replace(':', "");
    let stem = format!("{}.run-{stamp}", name.to_string_lossy());
    keep_in(&[beside, Path::new(".")], &stem, run)
}

/// Writes `run` as `STEM.json` in the first of `dirs` that takes it.
pub(crate) fn keep_in(dirs: &[&Path], stem: &str, run: &RunRecord) -> Result<PathBuf> {
    let mut tried: Vec<(&Path, io::Error)> = Vec::new();
    for &dir in dirs {
        if tried.iter().any(|(d, _)| *d == dir) {
            continue;
        }
        match write_new(dir, stem, run) {
            Ok(path) => return Ok(path),
            Err(e) => tried.push((dir, e)),
        }
    }
    Err(StoreError::NotKept {
        tried: tried
            .iter()
            .map(|(dir, e)| format!("{}: {e}", dir.display()))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// `DIR/STEM.json`, or `STEM-2.json`, … when a file of that name exists.
fn write_new(dir: &Path, stem: &str, run: &RunRecord) -> io::Result<PathBuf> {
    for n in 1.. {
        let path = match n {
            1 => dir.join(format!("{stem}.json")),
            n => dir.join(format!("{stem}-{n}.json")),
        };
        let file = match File::options().write(true).create_new(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let mut out = BufWriter::new(file);
        let written = serde_json::to_writer_pretty(&mut out, run)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            // Half a file would pass for a run: none at all.
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        return Ok(path);
    }
    unreachable!("a name is free before the counter ends")
}
