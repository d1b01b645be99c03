//! `tcplab explain`: why a stored run got its throughput, in words or as JSON.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Result};
use serde::Serialize;
use tcplab_model::capture::Vantage;
use tcplab_model::explain::{explain, Explanation, Source};
use tcplab_model::limits::ALL_LIMITS;
use tcplab_model::record::{BufferSize, Host, RunRecord, WatchedFlow};
use tcplab_model::tseq::run_retransmit_causes;
use tcplab_model::units::{count, format_duration_us, format_rate, format_size};

use crate::args::ExplainArgs;
use crate::commands::open_existing_store;
use crate::stdio::{errln, Stdout};

/// `explain`, citing the run's capture where it has one and it saw what the senders
/// sent (a capture at a receiving host lacks what was lost). A capture that cannot be
/// read is said on stderr, and the run explained without it.
pub fn explain_with_evidence(run: &RunRecord) -> Explanation {
    let mut explanation = explain(run);
    let Some(at) = run.path.as_ref().map(|p| p.capture_at) else {
        return explanation;
    };
    let sees_the_senders = run
        .flows
        .iter()
        .all(|f| at.vantage(f.direction.into()) != Vantage::Receiver);
    if !sees_the_senders {
        return explanation;
    }
    match tcplab_report::run_capture(run) {
        Ok(Some(packets)) => {
            explanation.cite_capture(run_retransmit_causes(&packets, run), at);
        }
        Ok(None) => {}
        Err(e) => errln!("tcplab explain: {e}: explained without it"),
    }
    explanation
}

#[derive(Serialize)]
struct ExplainedRun<'a> {
    run_id: i64,
    label: &'a Option<String>,
    #[serde(flatten)]
    explanation: &'a Explanation,
}

pub fn run(args: ExplainArgs) -> Result<ExitCode> {
    let store = open_existing_store(&args.db)?;
    let id = match args.run {
        Some(id) => id,
        None => match store.last_run_id()? {
            Some(id) => id,
            None => bail!("{} holds no runs", args.db.display()),
        },
    };
    let run = store.load_run(id)?;
    let explanation = explain_with_evidence(&run);
    let mut out = Stdout;
    if args.json {
        let doc = ExplainedRun {
            run_id: id,
            label: &run.label,
            explanation: &explanation,
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        let label = run
            .label
            .as_ref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        let e = &explanation;
        writeln!(
            out,
            "run {id}{label}: {} received by {}",
            format_rate(e.measured_bps),
            count(e.tunings.streams, "TCP flow")
        )?;
        if let Some(error) = &run.error {
            writeln!(out, "error:     {error}")?;
        }
        match &run.watch {
            None => write!(out, "{}", render(e))?,
            Some(_) => {
                // A watched run has no tunings of tcplab's: its flows are other programs'.
                for line in render(e).lines().filter(|l| !l.starts_with("tunings:")) {
                    writeln!(out, "{line}")?;
                }
                write!(out, "{}", watched_connections(&run))?;
                writeln!(
                    out,
                    "cannot know: why a program wrote or read no more (an app limit says only that the application did not write); a connection that carried under 1 % of the bytes is listed, not explained"
                )?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A watched run's connections, a line per socket watched: the flow, its end, process,
/// life, counters and what held its own sending back.
fn watched_connections(run: &RunRecord) -> String {
    let mut s = String::from("connections (each watched socket; limits of its own sending):\n");
    for f in &run.flows {
        let Some(w) = &f.watched else { continue };
        for w in std::iter::once(w).chain(w.peer.as_deref()) {
            let (local, remote) = match w.end {
                Host::Client => (&f.client_addr, &f.server_addr),
                Host::Server => (&f.server_addr, &f.client_addr),
            };
            s += &format!("  [{:>4}] {local} → {remote}{}\n", f.id, watched_line(w));
        }
    }
    s
}

fn watched_line(w: &WatchedFlow) -> String {
    let k = &w.counters;
    let process = match (&w.comm, w.pid) {
        (Some(comm), Some(pid)) => format!(" {comm} (pid {pid})"),
        _ => String::new(),
    };
    let limits = if k.limited_us == 0 {
        "no samples to book".to_string()
    } else {
        let dominant = k.limits.dominant();
        format!(
            "{} {:.0} % of {}",
            dominant.name(),
            k.limits.get(dominant) * 100.0,
            format_duration_us(k.limited_us)
        )
    };
    format!(
        "{process}: {} {}, acked {}, received {}, {}, min RTT {}; {limits}",
        if w.closed { "closed after" } else { "open for" },
        format_duration_us((w.end_us - w.start_us).max(0) as u64),
        format_size(k.bytes_acked),
        format_size(k.bytes_received),
        count(k.retransmits, "retransmit"),
        format_duration_us(u64::from(k.min_rtt_us)),
    )
}

/// The explanation as text, one aspect per line: what `tcplab explain` prints under
/// its first line, and what `run` and `quickstart` print after their summary.
pub fn render(e: &Explanation) -> String {
    let mut s = String::new();
    if let Some(p) = &e.path {
        let opt = |v: Option<u64>, f: fn(u64) -> String| v.map_or("—".to_string(), f);
        let whose = p
            .client
            .map(|k| format!(" (client{k}'s, end to end)"))
            .unwrap_or_default();
        let bottleneck = match (p.bottleneck_bps, p.trace_bps) {
            (Some(r), _) => format_rate(r as f64),
            (None, Some(r)) => format!("a trace offering {} over the run", format_rate(r)),
            (None, None) => "—".into(),
        };
        s += &format!(
            "path:      {}\n           bottleneck {bottleneck}, base RTT {}{whose}, BDP {}, queue {}\n",
            p.spec,
            format_duration_us(p.base_rtt_us),
            opt(p.bdp_bytes, format_size),
            opt(p.queue_bytes, format_size),
        );
    }
    if let Some(p) = &e.real_path {
        s += &format!(
            "path:      {}, not emulated\n           RTT min {}, mean {} as TCP measured it; bottleneck and BDP unknown\n",
            p.target,
            format_duration_us(p.min_rtt_us),
            format_duration_us(p.mean_rtt_us),
        );
    }
    let t = &e.tunings;
    s += &format!(
        "tunings:   {}, MSS {}, send buffer {}, receive buffer {}, {}, Nagle {}, pacing {}\n",
        if t.cc.is_empty() { "-" } else { &t.cc },
        unless_zero(u64::from(t.mss), |m| format!("{m} B")),
        buffer(&t.sndbuf),
        buffer(&t.rcvbuf),
        match t.transactions {
            None => format!("writes of {}", format_size(u64::from(t.write_size))),
            Some(rr) => rr.describe(),
        },
        if t.nodelay { "off" } else { "on" },
        t.pacing
    );
    let binding = e.bounds.binding().map(|b| b.0);
    let bound = |name: &str, v: Option<f64>| {
        let mark = if binding == Some(name) {
            " (binds)"
        } else {
            ""
        };
        v.map_or(format!("{name} —"), |v| {
            format!("{name} {}{mark}", format_rate(v))
        })
    };
    s += &format!(
        "bounds:    {}   {}   {}\n",
        bound("link", e.bounds.link_bps),
        bound("window", e.bounds.window_bps),
        bound("pacing", e.bounds.pacing_bps)
            + &e.bounds
                .pacing_cap
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
    );
    if e.estimates.mathis_bps.is_some() || e.estimates.pftk_bps.is_some() {
        s += &format!(
            "estimates: {}   {}   (loss models: a run may exceed them)\n",
            bound("mathis", e.estimates.mathis_bps),
            bound("pftk", e.estimates.pftk_bps)
        );
    }
    if let Some((name, b)) = e.bounds.binding() {
        s += &format!(
            "measured:  {} = {:.0} % of the {name} bound\n",
            format_rate(e.measured_bps),
            100.0 * e.measured_bps / b
        );
    }
    let shares: Vec<String> = ALL_LIMITS
        .iter()
        .map(|&l| format!("{} {:.1} %", l.name(), 100.0 * e.limits.get(l)))
        .collect();
    s += &format!("limited:   {}\n", shares.join("  "));
    let ep = &e.episodes;
    s += &format!(
        "episodes:  {} ({:.3} %), {} ({}), {}{}\n",
        count(ep.retransmits, "retransmit"),
        100.0 * ep.retransmit_rate,
        count(ep.recovery_episodes, "recovery episode"),
        match ep.recovery_from {
            Source::KernelEvents => "the kernel's events".to_owned(),
            Source::Samples { every_us } => {
                format!("sampled every {}", format_duration_us(every_us))
            }
        },
        count(ep.slow_start_exits, "slow-start exit"),
        ep.first_slow_start_exit_us
            .map(|t| format!(" (first at {})", format_duration_us(t.max(0) as u64)))
            .unwrap_or_default()
    );
    s += &format!(
        "verdict:   {}: {}\n",
        e.verdict.limit.name(),
        e.verdict.reason
    );
    for (title, items) in [
        (
            "findings",
            e.findings
                .iter()
                .map(|f| f.message.clone())
                .collect::<Vec<_>>(),
        ),
        ("what to change", e.recommendations.clone()),
    ] {
        if !items.is_empty() {
            s += &format!("{title}:\n");
            for item in items {
                s += &format!("  - {item}\n");
            }
        }
    }
    s
}

fn buffer(b: &BufferSize) -> String {
    match b.requested {
        Some(r) => format!(
            "{} requested → {} effective",
            format_size(r),
            unless_zero(b.effective, format_size)
        ),
        None => format!(
            "autotuned ({} at the end)",
            unless_zero(b.at_end, format_size)
        ),
    }
}

/// A socket figure, or "—" for 0: what an end nobody sampled (an iperf3 peer) leaves,
/// never a measured MSS or buffer.
fn unless_zero(v: u64, show: impl Fn(u64) -> String) -> String {
    if v == 0 {
        "—".into()
    } else {
        show(v)
    }
}
