//! Export of whole tables as CSV or JSON lines, for pandas and R.
//!
//! One function serves every table: it takes the column names from the statement and
//! writes each SQLite value as it is stored (see SCHEMA.md for units).

use std::fmt;
use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};
use std::str::FromStr;

use rusqlite::types::ValueRef;

use crate::error::{ParseNameError, Result, StoreError};
use crate::{sqlite_err, Store};

/// A table of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    Runs,
    Flows,
    Intervals,
    Samples,
    Events,
    Probes,
    Experiments,
    Points,
    Plan,
}

impl Table {
    pub const ALL: [Table; 9] = [
        Table::Runs,
        Table::Flows,
        Table::Intervals,
        Table::Samples,
        Table::Events,
        Table::Probes,
        Table::Experiments,
        Table::Points,
        Table::Plan,
    ];
    const NAMES: &'static [&'static str] = &[
        "runs",
        "flows",
        "intervals",
        "samples",
        "events",
        "probes",
        "experiments",
        "points",
        "plan",
    ];

    /// The SQL table name.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Table {
    type Err = ParseNameError;
    fn from_str(s: &str) -> Result<Self, ParseNameError> {
        Table::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| ParseNameError {
                kind: "table",
                given: s.to_owned(),
                valid: Table::NAMES,
            })
    }
}

/// How [`Store::export`] writes rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExportFormat {
    /// RFC 4180 CSV with a header row; NULL is an empty field, REAL uses Rust's shortest
    /// round-trip form (`1.5`, `1e-7`), text is quoted when needed.
    Csv,
    /// One JSON object per line, keys in column order; INTEGER → number, REAL → number
    /// (non-finite → null), TEXT → string, NULL → null.
    Jsonl,
}

impl ExportFormat {
    pub const ALL: [ExportFormat; 2] = [ExportFormat::Csv, ExportFormat::Jsonl];
    const NAMES: &'static [&'static str] = &["csv", "jsonl"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

impl fmt::Display for ExportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ExportFormat {
    type Err = ParseNameError;
    fn from_str(s: &str) -> Result<Self, ParseNameError> {
        ExportFormat::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| ParseNameError {
                kind: "export format",
                given: s.to_owned(),
                valid: ExportFormat::NAMES,
            })
    }
}

/// Why an export stopped: reading the database or writing the output.
enum Failure {
    Db(rusqlite::Error),
    Out(io::Error),
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure::Db(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Out(e)
    }
}

impl From<csv::Error> for Failure {
    fn from(e: csv::Error) -> Self {
        match e.into_kind() {
            csv::ErrorKind::Io(e) => Failure::Out(e),
            other => Failure::Out(io::Error::other(format!("{other:?}"))),
        }
    }
}

impl Store {
    /// Writes every row of `table` to `out` in `format`, in insertion order (runs by id,
    /// then each run's rows in the order of its record). Streams: memory use does not
    /// grow with the table.
    pub fn export(&self, table: Table, format: ExportFormat, out: &mut dyn Write) -> Result<()> {
        export_rows(&self.conn, table, format, out).map_err(|f| match f {
            Failure::Db(e) => sqlite_err(&self.path, "exporting")(e),
            Failure::Out(error) => StoreError::Export {
                path: self.path.clone(),
                table: table.name(),
                format: format.name(),
                error,
            },
        })
    }
}

fn export_rows(
    conn: &rusqlite::Connection,
    table: Table,
    format: ExportFormat,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    // rowid order is insertion order: each run is inserted in one transaction after all
    // earlier runs, so this is (run, position in the record) without a sort.
    let sql = format!("SELECT * FROM {} ORDER BY rowid", table.name());
    let mut stmt = conn.prepare(&sql)?;
    let names: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
    let mut rows = stmt.query([])?;
    match format {
        ExportFormat::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(&names)?;
            let mut field = String::new();
            while let Some(row) = rows.next()? {
                for i in 0..names.len() {
                    field.clear();
                    match row.get_ref(i)? {
                        ValueRef::Null => {}
                        ValueRef::Integer(v) => write!(field, "{v}").expect("write to String"),
                        ValueRef::Real(v) => write!(field, "{v:?}").expect("write to String"),
                        ValueRef::Text(t) => field.push_str(&String::from_utf8_lossy(t)),
                        ValueRef::Blob(b) => hex(&mut field, b),
                    }
                    w.write_field(&field)?;
                }
                w.write_record(None::<&[u8]>)?;
            }
            w.flush()?;
        }
        ExportFormat::Jsonl => {
            let mut w = BufWriter::new(out);
            let mut blob = String::new();
            while let Some(row) = rows.next()? {
                w.write_all(b"{")?;
                for (i, name) in names.iter().enumerate() {
                    if i > 0 {
                        w.write_all(b",")?;
                    }
                    serde_json::to_writer(&mut w, name).map_err(io::Error::from)?;
                    w.write_all(b":")?;
                    match row.get_ref(i)? {
                        ValueRef::Null => w.write_all(b"null")?,
                        ValueRef::Integer(v) => write!(w, "{v}")?,
                        ValueRef::Real(v) => {
                            serde_json::to_writer(&mut w, &v).map_err(io::Error::from)?
                        }
                        ValueRef::Text(t) => {
                            serde_json::to_writer(&mut w, &String::from_utf8_lossy(t))
                                .map_err(io::Error::from)?
                        }
                        ValueRef::Blob(b) => {
                            blob.clear();
                            hex(&mut blob, b);
                            serde_json::to_writer(&mut w, &blob).map_err(io::Error::from)?
                        }
                    }
                }
                w.write_all(b"}\n")?;
            }
            w.flush()?;
        }
    }
    Ok(())
}

/// BLOBs (none in the current schema) are written as lowercase hex.
fn hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        write!(out, "{b:02x}").expect("write to String");
    }
}
