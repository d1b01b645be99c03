//! The `probes` table: a run's round-trip probes (`--probe`), one row each, the delays
//! NULL for a probe no answer came back for.

use std::path::Path;

use rusqlite::Transaction;
use tcplab_record::ProbeRecord;

use crate::error::Result;
use crate::rows::{int, opt_int, RowReader};
use crate::sqlite_err;

pub(crate) fn insert(
    tx: &Transaction<'_>,
    run_id: i64,
    probes: &[ProbeRecord],
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO probes (run_id, seq, scheduled_us, sent_us, rtt_us, up_owd_us, \
         down_owd_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for p in probes {
        let ProbeRecord {
            seq,
            scheduled_us,
            sent_us,
            rtt_us,
            up_owd_us,
            down_owd_us,
        } = *p;
        stmt.execute(rusqlite::params![
            run_id,
            int(seq),
            scheduled_us,
            sent_us,
            opt_int(rtt_us),
            opt_int(up_owd_us),
            opt_int(down_owd_us)
        ])?;
    }
    Ok(())
}

pub(crate) fn load(tx: &Transaction<'_>, path: &Path, run_id: i64) -> Result<Vec<ProbeRecord>> {
    let err = || sqlite_err(path, "loading a run (probes)");
    let mut stmt = tx
        .prepare_cached("SELECT * FROM probes WHERE run_id = ?1 ORDER BY seq")
        .map_err(err())?;
    let mut rows = stmt.query([run_id]).map_err(err())?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(err())? {
        let r = RowReader {
            row,
            table: "probes",
            path,
            run_id,
        };
        out.push(ProbeRecord {
            seq: r.int("seq")?,
            scheduled_us: r.int("scheduled_us")?,
            sent_us: r.int("sent_us")?,
            rtt_us: r.opt_int("rtt_us")?,
            up_owd_us: r.opt_int("up_owd_us")?,
            down_owd_us: r.opt_int("down_owd_us")?,
        });
    }
    Ok(out)
}
