//! An explanation in words: what `tcplab explain` prints, and what `run` and
//! `quickstart` print after their summary.

use tcplab_analysis::explain::{Changing, Explanation, Source};
use tcplab_record::units::{count, format_duration_us, format_rate, format_size};
use tcplab_record::{BufferSize, Host, Limit, RunRecord, WatchedFlow};

use super::label;

/// What `tcplab explain` prints of run `id`: its first line, what went wrong, the
/// explanation, and a watched run's connections.
pub fn explained_run(id: i64, run: &RunRecord, e: &Explanation) -> String {
    let mut s = format!(
        "run {id}{}: {} received by {}\n",
        label(&run.label),
        format_rate(e.measured_bps),
        count(e.tunings.streams, "TCP flow")
    );
    if let Some(error) = &run.error {
        s += &format!("error:     {error}\n");
    }
    match &run.watch {
        None => s += &render(e),
        Some(_) => {
            // A watched run has no tunings of tcplab's: its flows are other programs'.
            for line in render(e).lines().filter(|l| !l.starts_with("tunings:")) {
                s += line;
                s += "\n";
            }
            s += &watched_connections(run);
            s += "cannot know: why a program wrote or read no more (an app limit says only that the application did not write); a connection that carried under 1 % of the bytes is listed, not explained\n";
        }
    }
    s
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
        let bottleneck = match (p.bottleneck_bps, p.capacity) {
            (Some(r), _) => format_rate(r as f64),
            (None, Some(c)) => format!(
                "{} offering {} over the run",
                match c.by {
                    Changing::Trace => "a trace",
                    Changing::Schedule => "a rate on a schedule",
                },
                format_rate(c.bps)
            ),
            (None, None) => "—".into(),
        };
        let bottleneck = match p.police {
            Some(police) => format!(
                "{bottleneck}, a policer at {} (burst {})",
                format_rate(police.bps as f64),
                format_size(police.burst_bytes)
            ),
            None => bottleneck,
        };
        s += &format!(
            "path:      {}\n           bottleneck {bottleneck}, base RTT {}{whose}, BDP {}, queue {}\n",
            p.spec,
            format_duration_us(p.base_rtt_us),
            opt(p.bdp_bytes, format_size),
            opt(p.queue_bytes, format_size),
        );
    }
    if let Some(flows) = &e.flow_links {
        s += &format!(
            "path:      a topology; each of its {} TCP flows' way and binding link are findings below\n",
            flows.len()
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
    let shares: Vec<String> = Limit::ALL
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
    for (i, c) in e.changes.iter().enumerate() {
        let share = 100.0 * tcplab_analysis::changes::CONVERGED;
        let converged = match c.converged_us {
            _ if c.bound_bps == 0.0 => "an outage".to_owned(),
            Some(us) => format!(
                "{share:.0} % of its {} after {}",
                format_rate(c.bound_bps),
                format_duration_us(us)
            ),
            None => format!(
                "never {share:.0} % of its {} before the next change",
                format_rate(c.bound_bps)
            ),
        };
        let delay = c
            .queue_delay_peak_us
            .map(|us| format!(" ({})", format_duration_us(us)))
            .unwrap_or_default();
        s += &format!(
            "{}{}: {converged}; queue up to {}{delay}; {}\n",
            if i == 0 { "changes:   " } else { "           " },
            c.change,
            format_size(c.queue_peak_bytes),
            count(c.retransmits, "retransmit")
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{run, watched_run};
    use tcplab_analysis::explain::explain;

    /// `explain`'s text: its first line with the label, what went wrong, then the
    /// explanation just as `run` prints it after its summary.
    #[test]
    fn an_explained_run_opens_with_its_rate_label_and_error() {
        let mut r = run(20.0, 2, false);
        r.label = Some("baseline".into());
        r.error = Some("cut short".into());
        let e = explain(&r);
        let text = explained_run(7, &r, &e);
        let first = format!(
            "run 7 (baseline): {} received by 2 TCP flows\nerror:     cut short\n",
            format_rate(e.measured_bps)
        );
        assert!(text.starts_with(&first), "{text}");
        assert_eq!(text[first.len()..], render(&e));
    }

    /// A watched run's flows are other programs': no tunings of tcplab's, and its
    /// connections listed after the explanation.
    #[test]
    fn a_watched_run_lists_its_connections_instead_of_tunings() {
        let r = watched_run(2, 1);
        let e = explain(&r);
        assert!(render(&e).contains("\ntunings:   "));
        let text = explained_run(1, &r, &e);
        assert!(!text.contains("\ntunings:"), "{text}");
        assert!(
            text.contains("connections (each watched socket; limits of its own sending):\n  ["),
            "{text}"
        );
        assert!(text.ends_with("is listed, not explained\n"), "{text}");
    }
}
