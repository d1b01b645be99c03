//! Migration 10: the `samples` table, one row of INTEGER columns per sample, becomes
//! `sample_blocks` ([`crate::sample_blocks`]). This reader of the old table serves that
//! migration alone.

use std::path::Path;

use rusqlite::Transaction;
use tcplab_record::tcpinfo::{BbrInfo, SkMemInfo, TcpInfo, SK_MEMINFO_WORDS};
use tcplab_record::SampleRecord;

use crate::columns::{
    SAMPLE_BBR_COLUMNS, SAMPLE_KEY_COLUMNS, SAMPLE_SKMEM_COLUMNS, TCP_INFO_COLUMNS,
};
use crate::error::Result;
use crate::rows::RowReader;
use crate::{sample_blocks, sqlite_err};

/// The `tcp_info` columns `samples` had when it was last written (version 9): a field
/// added to `TcpInfo` since is not in the table and reads as 0.
pub(crate) const LEGACY_INFO_FIELDS: usize = 62;

/// Moves every run's rows of `samples` into `sample_blocks`, then drops `samples`.
pub(crate) fn migration_10(tx: &Transaction<'_>, path: &Path) -> Result<()> {
    let err = || sqlite_err(path, "migrating samples to sample_blocks");
    tx.execute_batch(
        "CREATE TABLE sample_blocks (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    block INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run_id, block)
);",
    )
    .map_err(err())?;
    let runs: Vec<i64> = tx
        .prepare("SELECT DISTINCT run_id FROM samples ORDER BY run_id")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(err())?;
    for run_id in runs {
        let samples = load(tx, path, run_id)?;
        sample_blocks::insert(tx, run_id, 0, &samples).map_err(err())?;
    }
    tx.execute_batch("DROP TABLE samples").map_err(err())
}

/// The SELECT of one run's samples: the version-9 columns after `run_id`, in table
/// order, scanning the run's rowid range (a run's samples were inserted in one
/// transaction, so they form one range, in insertion order, without a sort).
fn select_sql() -> String {
    let names: Vec<String> = SAMPLE_KEY_COLUMNS[1..]
        .iter()
        .copied()
        .chain(
            TCP_INFO_COLUMNS[..LEGACY_INFO_FIELDS]
                .iter()
                .map(|c| c.name),
        )
        .chain(SAMPLE_BBR_COLUMNS)
        .chain(SAMPLE_SKMEM_COLUMNS)
        .map(|c| format!("\"{c}\""))
        .collect();
    format!(
        "SELECT {} FROM samples NOT INDEXED \
         WHERE rowid BETWEEN ?2 AND ?3 AND run_id = ?1 ORDER BY rowid",
        names.join(", ")
    )
}

fn load(tx: &Transaction<'_>, path: &Path, run_id: i64) -> Result<Vec<SampleRecord>> {
    let err = |op| sqlite_err(path, op);
    let mut stmt = tx
        .prepare_cached(&select_sql())
        .map_err(err("loading a run (samples)"))?;
    let (first, last): (Option<i64>, Option<i64>) = tx
        .query_row(
            "SELECT min(rowid), max(rowid) FROM samples WHERE run_id = ?1",
            [run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(err("loading a run (samples)"))?;
    let (Some(first), Some(last)) = (first, last) else {
        return Ok(Vec::new());
    };
    let mut rows = stmt
        .query([run_id, first, last])
        .map_err(err("loading a run (samples)"))?;
    // Positions in the SELECT, which is sample_columns() without run_id.
    debug_assert_eq!(SAMPLE_KEY_COLUMNS[1..], ["flow", "host", "t_us"]);
    let info_at = SAMPLE_KEY_COLUMNS.len() - 1;
    let bbr_at = info_at + LEGACY_INFO_FIELDS;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(err("loading a run (samples)"))? {
        let r = RowReader {
            row,
            table: "samples",
            path,
            run_id,
        };
        let mut info = TcpInfo::default();
        for (i, c) in TCP_INFO_COLUMNS[..LEGACY_INFO_FIELDS].iter().enumerate() {
            let v = row
                .get_ref(info_at + i)
                .map_err(err("loading a run (samples)"))?;
            match v {
                rusqlite::types::ValueRef::Integer(n) if (c.set)(&mut info, n) => {}
                other => {
                    return Err(r.bad(
                        (info_at + i, c.name),
                        other,
                        "not an integer of the field's type",
                    ))
                }
            }
        }
        let bbr_col = |i: usize| (bbr_at + i, SAMPLE_BBR_COLUMNS[i]);
        let bbr = match (
            r.opt_int(bbr_col(0))?,
            r.opt_int(bbr_col(1))?,
            r.opt_int(bbr_col(2))?,
            r.opt_int(bbr_col(3))?,
        ) {
            (Some(bw), Some(min_rtt), Some(pacing_gain), Some(cwnd_gain)) => Some(BbrInfo {
                bw,
                min_rtt,
                pacing_gain,
                cwnd_gain,
            }),
            (None, None, None, None) => None,
            _ => {
                return Err(r.bad(
                    bbr_col(0),
                    "partial",
                    "bbr_* columns must be all NULL or all set",
                ))
            }
        };
        let skmem_at = bbr_at + SAMPLE_BBR_COLUMNS.len();
        let mut words = [None; SK_MEMINFO_WORDS];
        for (i, word) in words.iter_mut().enumerate() {
            *word = r.opt_int((skmem_at + i, SAMPLE_SKMEM_COLUMNS[i]))?;
        }
        let skmem = if words.iter().all(Option::is_some) {
            Some(SkMemInfo::from_words(words.map(|w| w.expect("checked"))))
        } else if words.iter().all(Option::is_none) {
            None
        } else {
            return Err(r.bad(
                (skmem_at, SAMPLE_SKMEM_COLUMNS[0]),
                "partial",
                "skmem_* columns must be all NULL or all set",
            ));
        };
        out.push(SampleRecord {
            flow: r.int((0, "flow"))?,
            host: r.enum_((1, "host"))?,
            t_us: r.int((2, "t_us"))?,
            info,
            bbr,
            skmem,
        });
    }
    Ok(out)
}
