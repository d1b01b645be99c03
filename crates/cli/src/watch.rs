//! `tcplab watch`: the matching connections followed by
//! [`tcplab_experiment::watch::follow`], printed as lines or JSON lines and stored.

use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;
use tcplab_experiment::watch::{
    follow, open_trace, polling_only, provisional_record, Keep, Selection, SpoolTarget, Watch,
    WatchLabels, WatchOutput,
};
use tcplab_model::sockfilter::Filter;
use tcplab_monitor::watch::{Connection, Tracker, WatchEvent};
use tcplab_record::units::{count, format_duration_us, format_size};
use tcplab_record::IntervalRecord;
use tcplab_report::describe::run as run_text;
use tcplab_sys::sockdiag::{Query, SockDiag};
use tcplab_sys::userns::{self, Mode};

use crate::args::WatchArgs;
use crate::shared::{interrupt_flag, open_store};
use crate::stdio::{errln, outln};

pub fn watch(args: WatchArgs) -> Result<ExitCode> {
    // Everything the user named is checked before anything starts.
    let selection = Selection::new(
        &args.port,
        &args.addr,
        args.cgroup.as_deref(),
        args.pid,
        args.comm.clone(),
    )?;
    let mut store = args.store.db.as_deref().map(open_store).transpose()?;
    let filter_text = describe(&args);
    let query = Query::new(
        selection
            .filter()
            .map(Filter::compile)
            .transpose()
            .context("the filter")?,
    );
    let diag = SockDiag::open()?;
    // Without root, the one line that says polling only says the rest of what is less.
    let less = match userns::mode() {
        Mode::Rootless => {
            "; as a user, the sockets of other users' processes show no process (their \
             /proc/PID/fd is closed to you), so --pid and --comm find only your own"
        }
        Mode::Privileged => "",
    };
    let trace = open_trace(&args.port)
        .map_err(|e| {
            errln!(
                "{}{less}",
                polling_only("tcplab watch", args.sample_interval, &e)
            )
        })
        .ok();
    if !args.json {
        errln!(
            "tcplab watch: {} every {}{}; Ctrl-C ends",
            if filter_text.is_empty() {
                "every TCP connection".to_string()
            } else {
                format!("connections with {filter_text}")
            },
            format_duration_us(args.sample_interval),
            args.time
                .map(|t| format!(" for {}", format_duration_us(t)))
                .unwrap_or_default()
        );
    }
    let labels = |interrupted| WatchLabels {
        label: args.store.label.clone(),
        tags: args.store.tags.clone(),
        filter: filter_text.clone(),
        interrupted,
    };
    // Samples go to the database as they come, so a long watch does not grow.
    let keep = match &store {
        Some(store) => Keep::Spool(Box::new(SpoolTarget {
            db: store.path().to_owned(),
            provisional: provisional_record(labels(true), args.sample_interval),
        })),
        None => Keep::Nothing,
    };
    let watched = follow(Watch {
        diags: vec![diag],
        query,
        selection,
        trace,
        stop: interrupt_flag(),
        time_us: args.time,
        sample_interval_us: args.sample_interval,
        report_interval_us: args.report_interval,
        keep,
        output: Box::new(Printer {
            json: args.json,
            header_shown: false,
        }),
        filter_text: filter_text.clone(),
        drain_us: 0,
    })?;
    let (closed, open) = watched.tracker.counts();
    if !args.json {
        errln!("tcplab watch: {}", watched.summary_line(closed, open));
        if let Some(lag) = &watched.lag {
            errln!("tcplab watch: {}", lag.line());
        }
    }
    if let Some(store) = &mut store {
        let interrupted = watched.stopped;
        let id = watched.store(labels(interrupted), store)?;
        if !args.json {
            errln!(
                "tcplab watch: stored as run {id} in {}",
                store.path().display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The filter as the user gave it.
fn describe(args: &WatchArgs) -> String {
    let mut parts = Vec::new();
    parts.extend(args.port.iter().map(|p| format!("--port {p}")));
    parts.extend(args.addr.iter().map(|a| format!("--addr {a}")));
    parts.extend(args.pid.iter().map(|p| format!("--pid {p}")));
    parts.extend(args.comm.iter().map(|c| format!("--comm {c}")));
    parts.extend(
        args.cgroup
            .iter()
            .map(|c| format!("--cgroup {}", c.display())),
    );
    parts.join(" ")
}

/// Prints the tracker's events as text lines or JSON lines.
struct Printer {
    json: bool,
    header_shown: bool,
}

impl WatchOutput for Printer {
    fn event(&mut self, tracker: &Tracker, t0: i64, event: &WatchEvent) {
        match event {
            WatchEvent::Opened(id) => {
                let c = tracker.connection(*id).expect("opened");
                self.opened(c, t0);
            }
            WatchEvent::Interval(record) => self.interval(record),
            WatchEvent::Closed(id) => {
                let c = tracker.connection(*id).expect("closed");
                self.closed(c, t0);
            }
        }
    }

    fn no_match(&mut self, filter_text: &str) {
        errln!(
            "tcplab watch: no connection matches {} now; watching",
            if filter_text.is_empty() {
                "at all"
            } else {
                filter_text
            }
        );
    }
}

impl Printer {
    fn opened(&self, c: &Connection, t0: i64) {
        let process = c.process.as_ref();
        if self.json {
            outln!(
                "{}",
                json!({
                    "event": "opened",
                    "flow": c.id,
                    "t_us": c.first_us - t0,
                    "local": c.key.local.to_string(),
                    "remote": c.key.remote.to_string(),
                    "cookie": c.key.cookie,
                    "state": c.state,
                    "opened": c.opened,
                    "cc": c.congestion.map(|n| n.to_string()),
                    "pid": process.map(|p| p.pid),
                    "comm": process.map(|p| p.comm.clone()),
                })
            );
        } else {
            outln!(
                "[{:>4}] {} {} → {} {}{}",
                c.id,
                if c.opened { "opened" } else { "open  " },
                c.key.local,
                c.key.remote,
                c.congestion.map(|n| n.to_string()).unwrap_or_default(),
                process
                    .map(|p| format!("  {} (pid {})", p.comm, p.pid))
                    .unwrap_or_default()
            );
        }
    }

    fn interval(&mut self, r: &IntervalRecord) {
        if self.json {
            let mut value = serde_json::to_value(r).expect("a record serializes");
            value["event"] = json!("interval");
            value["sent_bps"] = json!(run_text::interval_bps(r, r.acked_bytes));
            value["received_bps"] = json!(run_text::interval_bps(r, r.received_bytes));
            outln!("{value}");
        } else if r.end_us > r.start_us {
            if !std::mem::replace(&mut self.header_shown, true) {
                outln!("{}", run_text::watched_interval_header());
            }
            outln!("{}", run_text::watched_interval_line(r));
        }
    }

    fn closed(&self, c: &Connection, t0: i64) {
        let w = c.watched(t0);
        if self.json {
            outln!("{}", json!({"event": "closed", "flow": c.id, "watched": w}));
        } else {
            let k = &w.counters;
            outln!(
                "[{:>4}] closed after {} ({}): acked {}, received {}, {} retransmitted, min RTT {}, {} limited by {}",
                c.id,
                format_duration_us((w.end_us - w.start_us).max(0) as u64),
                w.last_state,
                format_size(k.bytes_acked),
                format_size(k.bytes_received),
                count(k.retransmits, "segment"),
                format_duration_us(u64::from(k.min_rtt_us)),
                format_duration_us(k.limited_us),
                k.limits.dominant().name()
            );
        }
    }
}
