//! The `events` table: a run's kernel events (`--trace-events`), one row each, the
//! columns of its kind set and the others NULL.

use std::path::Path;

use rusqlite::types::Value;
use rusqlite::Transaction;
use tcplab_record::events::{CaState, EventRecord, KernelEvent};

use crate::error::Result;
use crate::rows::{enum_name, RowReader};
use crate::sqlite_err;

/// The columns of `events` in table order.
pub(crate) const EVENT_COLUMNS: [&str; 17] = [
    "run_id",
    "flow",
    "host",
    "t_us",
    "kind",
    "data_len",
    "snd_nxt",
    "snd_una",
    "snd_cwnd",
    "ssthresh",
    "snd_wnd",
    "srtt_us",
    "rcv_wnd",
    "state",
    "rcvbuf",
    "rcv_ssthresh",
    "window_clamp",
];

/// One event's values after `run_id`, in [`EVENT_COLUMNS`] order.
fn values(e: &EventRecord) -> [Value; 16] {
    let int = |v: u32| Value::Integer(i64::from(v));
    let none = || Value::Null;
    let [mut data_len, mut snd_nxt, mut snd_una, mut snd_cwnd, mut ssthresh, mut snd_wnd] =
        std::array::from_fn(|_| none());
    let [mut srtt_us, mut rcv_wnd, mut state, mut rcvbuf, mut rcv_ssthresh, mut window_clamp] =
        std::array::from_fn(|_| none());
    match &e.event {
        KernelEvent::Probe {
            data_len: len,
            snd_nxt: nxt,
            snd_una: una,
            snd_cwnd: cwnd,
            ssthresh: thresh,
            snd_wnd: swnd,
            srtt_us: srtt,
            rcv_wnd: rwnd,
        } => {
            (data_len, snd_nxt, snd_una, snd_cwnd) = (int(*len), int(*nxt), int(*una), int(*cwnd));
            (ssthresh, snd_wnd, srtt_us, rcv_wnd) =
                (int(*thresh), int(*swnd), int(*srtt), int(*rwnd));
        }
        KernelEvent::Retransmit => {}
        KernelEvent::CongState { state: s } => state = Value::Text(s.name().to_owned()),
        KernelEvent::RcvbufGrow {
            rcvbuf: buf,
            rcv_ssthresh: thresh,
            window_clamp: clamp,
            rcv_wnd: rwnd,
        } => {
            (rcvbuf, rcv_ssthresh, window_clamp) = (int(*buf), int(*thresh), int(*clamp));
            rcv_wnd = int(*rwnd);
        }
    }
    [
        Value::Integer(i64::from(e.flow)),
        Value::Text(enum_name(&e.host)),
        Value::Integer(e.t_us),
        Value::Text(e.event.kind().to_owned()),
        data_len,
        snd_nxt,
        snd_una,
        snd_cwnd,
        ssthresh,
        snd_wnd,
        srtt_us,
        rcv_wnd,
        state,
        rcvbuf,
        rcv_ssthresh,
        window_clamp,
    ]
}

pub(crate) fn insert(
    tx: &Transaction<'_>,
    run_id: i64,
    events: &[EventRecord],
) -> rusqlite::Result<()> {
    let marks: Vec<String> = (1..=EVENT_COLUMNS.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "INSERT INTO events ({}) VALUES ({})",
        EVENT_COLUMNS.join(", "),
        marks.join(", ")
    );
    let mut stmt = tx.prepare_cached(&sql)?;
    for e in events {
        stmt.raw_bind_parameter(1, run_id)?;
        for (i, v) in values(e).into_iter().enumerate() {
            stmt.raw_bind_parameter(i + 2, v)?;
        }
        stmt.raw_execute()?;
    }
    Ok(())
}

pub(crate) fn load(tx: &Transaction<'_>, path: &Path, run_id: i64) -> Result<Vec<EventRecord>> {
    let err = || sqlite_err(path, "loading a run (events)");
    let mut stmt = tx
        .prepare_cached("SELECT * FROM events WHERE run_id = ?1 ORDER BY rowid")
        .map_err(err())?;
    let mut rows = stmt.query([run_id]).map_err(err())?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(err())? {
        out.push(read(&RowReader {
            row,
            table: "events",
            path,
            run_id,
        })?);
    }
    Ok(out)
}

fn read(r: &RowReader<'_>) -> Result<EventRecord> {
    let kind = r.text("kind")?;
    let event = match kind.as_str() {
        "probe" => KernelEvent::Probe {
            data_len: r.int("data_len")?,
            snd_nxt: r.int("snd_nxt")?,
            snd_una: r.int("snd_una")?,
            snd_cwnd: r.int("snd_cwnd")?,
            ssthresh: r.int("ssthresh")?,
            snd_wnd: r.int("snd_wnd")?,
            srtt_us: r.int("srtt_us")?,
            rcv_wnd: r.int("rcv_wnd")?,
        },
        "retransmit" => KernelEvent::Retransmit,
        "cong_state" => KernelEvent::CongState {
            state: r.enum_::<CaState>("state")?,
        },
        "rcvbuf_grow" => KernelEvent::RcvbufGrow {
            rcvbuf: r.int("rcvbuf")?,
            rcv_ssthresh: r.int("rcv_ssthresh")?,
            window_clamp: r.int("window_clamp")?,
            rcv_wnd: r.int("rcv_wnd")?,
        },
        _ => return Err(r.bad("kind", kind, "unknown kind")),
    };
    Ok(EventRecord {
        flow: r.int("flow")?,
        host: r.enum_("host")?,
        t_us: r.int("t_us")?,
        event,
    })
}
