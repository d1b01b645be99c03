//! Export of whole tables as CSV or JSON lines, for pandas and R.
//!
//! One function serves every table: it takes the column names from the statement and
//! writes each SQLite value as it is stored (see SCHEMA.md for units).

use std::fmt;
use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};
use std::str::FromStr;

use rusqlite::types::ValueRef;

use crate::columns::sample_columns;
use crate::error::{ParseNameError, Result, StoreError};
use crate::{sample_blocks, sqlite_err, Store};

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
    if table == Table::Samples {
        return export_samples(conn, format, out);
    }
    // rowid order is insertion order: each run is inserted in one transaction after all
    // earlier runs, so this is (run, position in the record) without a sort.
    let sql = format!("SELECT * FROM {} ORDER BY rowid", table.name());
    let mut stmt = conn.prepare(&sql)?;
    let names: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
    let mut sink = Sink::new(format, out, names)?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let values = (0..sink.names.len())
            .map(|i| row.get_ref(i))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        sink.row(&values)?;
    }
    sink.finish()
}

/// The samples, decoded from their blocks one run at a time, as the rows of a table
/// with one INTEGER column per field (NULL where a sample has no BBR or socket-memory
/// fields).
fn export_samples(
    conn: &rusqlite::Connection,
    format: ExportFormat,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let names = sample_columns().map(String::from).collect();
    let mut sink = Sink::new(format, out, names)?;
    let mut stmt =
        conn.prepare("SELECT run_id, block, data FROM sample_blocks ORDER BY run_id, block")?;
    let mut rows = stmt.query([])?;
    let mut values: Vec<ValueRef<'static>> = Vec::new();
    while let Some(row) = rows.next()? {
        let run_id: i64 = row.get(0)?;
        let block: i64 = row.get(1)?;
        let samples =
            sample_blocks::decode(row.get_ref(2)?.as_blob().map_err(rusqlite::Error::from)?)
                .map_err(|e| {
                    Failure::Db(rusqlite::Error::FromSqlConversionFailure(
                        2,
                        rusqlite::types::Type::Blob,
                        format!("run {run_id}, sample block {block}: {e}").into(),
                    ))
                })?;
        for s in &samples {
            values.clear();
            sample_blocks::values(run_id, s, |v| values.push(v));
            sink.row(&values)?;
        }
    }
    sink.finish()
}

/// Writes rows in one format, header first.
struct Sink<'a> {
    names: Vec<String>,
    out: SinkKind<'a>,
    field: String,
}

enum SinkKind<'a> {
    Csv(Box<csv::Writer<&'a mut dyn Write>>),
    Jsonl(BufWriter<&'a mut dyn Write>),
}

impl<'a> Sink<'a> {
    fn new(
        format: ExportFormat,
        out: &'a mut dyn Write,
        names: Vec<String>,
    ) -> Result<Self, Failure> {
        let out = match format {
            ExportFormat::Csv => {
                let mut w = csv::Writer::from_writer(out);
                w.write_record(&names)?;
                SinkKind::Csv(Box::new(w))
            }
            ExportFormat::Jsonl => SinkKind::Jsonl(BufWriter::new(out)),
        };
        Ok(Sink {
            names,
            out,
            field: String::new(),
        })
    }

    fn row(&mut self, values: &[ValueRef<'_>]) -> Result<(), Failure> {
        let field = &mut self.field;
        match &mut self.out {
            SinkKind::Csv(w) => {
                for v in values {
                    field.clear();
                    match *v {
                        ValueRef::Null => {}
                        ValueRef::Integer(v) => write!(field, "{v}").expect("write to String"),
                        ValueRef::Real(v) => write!(field, "{v:?}").expect("write to String"),
                        ValueRef::Text(t) => field.push_str(&String::from_utf8_lossy(t)),
                        ValueRef::Blob(b) => hex(field, b),
                    }
                    w.write_field(&field)?;
                }
                w.write_record(None::<&[u8]>)?;
            }
            SinkKind::Jsonl(w) => {
                w.write_all(b"{")?;
                for (i, (name, v)) in self.names.iter().zip(values).enumerate() {
                    if i > 0 {
                        w.write_all(b",")?;
                    }
                    serde_json::to_writer(&mut *w, name).map_err(io::Error::from)?;
                    w.write_all(b":")?;
                    match *v {
                        ValueRef::Null => w.write_all(b"null")?,
                        ValueRef::Integer(v) => write!(w, "{v}")?,
                        ValueRef::Real(v) => {
                            serde_json::to_writer(&mut *w, &v).map_err(io::Error::from)?
                        }
                        ValueRef::Text(t) => {
                            serde_json::to_writer(&mut *w, &String::from_utf8_lossy(t))
                                .map_err(io::Error::from)?
                        }
                        ValueRef::Blob(b) => {
                            field.clear();
                            hex(field, b);
                            serde_json::to_writer(&mut *w, &field).map_err(io::Error::from)?
                        }
                    }
                }
                w.write_all(b"}\n")?;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<(), Failure> {
        match self.out {
            SinkKind::Csv(mut w) => w.flush()?,
            SinkKind::Jsonl(mut w) => w.flush()?,
        }
        Ok(())
    }
}

/// BLOBs (none in the exported tables) are written as lowercase hex.
fn hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        write!(out, "{b:02x}").expect("write to String");
    }
}
