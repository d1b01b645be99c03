//! A run as `tcplab run` shows it: the live interval lines, the flows' setup, the
//! final summary, and a line of `tcplab runs`.

use tcplab_netsim::path::PathSpec;
use tcplab_record::events::{EventRecord, TraceRecord};
use tcplab_record::units::{count, format_duration_us, format_rate, format_size};
use tcplab_record::Limit;
use tcplab_record::{
    BufferSize, ClockOffset, FlowRecord, IntervalRecord, LatencySummary, LimitShares,
    NamedCounters, PathRecord, Quantiles, RunRecord, RunStatus, Timed, TransactionParams,
    TransactionStats, UdpStats, CLOCK_STEP_TOLERANCE_US,
};

/// The columns over `group`'s lines: a TCP flow's window, RTT and limits, which UDP
/// flows have none of.
pub fn interval_header(group: &[IntervalRecord]) -> String {
    if group.iter().all(|r| r.udp.is_some()) {
        return format!(
            "{:<7} {:>15}  {:>12}   datagrams, jitter",
            "[flow]", "interval", "throughput"
        );
    }
    let names: Vec<&str> = Limit::ALL.iter().map(|l| l.name()).collect();
    format!(
        "{:<7} {:>15}  {:>12} {:>6} {:>7} {:>10}   limits {}",
        "[flow]",
        "interval",
        "throughput",
        "retr",
        "cwnd",
        "srtt",
        names.join("/")
    )
}

/// One line per flow of one report interval, and a sum line when there are several.
pub fn interval_lines(group: &[IntervalRecord]) -> Vec<String> {
    let mut lines: Vec<String> = group
        .iter()
        .map(|r| interval_line(&format!("[{:>4}]", r.flow), r))
        .collect();
    if group.len() > 1 {
        let first = &group[0];
        let sum = IntervalRecord {
            flow: 0,
            index: first.index,
            start_us: group.iter().map(|r| r.start_us).min().unwrap_or(0),
            end_us: group.iter().map(|r| r.end_us).max().unwrap_or(0),
            acked_bytes: group.iter().map(|r| r.acked_bytes).sum(),
            received_bytes: group.iter().map(|r| r.received_bytes).sum(),
            retransmits: group.iter().map(|r| r.retransmits).sum(),
            cwnd: 0,
            srtt_us: 0,
            limits: LimitShares::weighted_mean(
                &group.iter().map(|r| (r.limits, 1.0)).collect::<Vec<_>>(),
            ),
            udp: None,
            drain: group.iter().all(|r| r.drain),
        };
        lines.push(interval_line("[ SUM]", &sum));
    }
    lines
}

/// `bytes` over `r`'s span, bit/s; 0 over none.
pub fn interval_bps(r: &IntervalRecord, bytes: u64) -> f64 {
    let seconds = r.end_us.saturating_sub(r.start_us) as f64 / 1e6;
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

fn interval_line(tag: &str, r: &IntervalRecord) -> String {
    // The receiver's count is what arrived; the sender's acked count is the same bytes
    // seen from the other end, used when the receiver's half is missing.
    let bytes = if r.received_bytes > 0 {
        r.received_bytes
    } else {
        r.acked_bytes
    };
    let bps = interval_bps(r, bytes);
    let drain = if r.drain {
        "   drain (after the deadline; in no rate)"
    } else {
        ""
    };
    if let Some(u) = &r.udp {
        return format!(
            "{tag:<7} {:>6.2}-{:>6.2} s  {:>12}   datagrams {} sent, {} received, {} lost, {} out of order   jitter {:.1} µs{drain}",
            r.start_us as f64 / 1e6,
            r.end_us as f64 / 1e6,
            format_rate(bps),
            u.sent,
            u.received,
            u.lost,
            u.out_of_order,
            u.jitter_us
        );
    }
    let dash = |v: u32, s: String| if v == 0 { "-".to_string() } else { s };
    format!(
        "{tag:<7} {:>6.2}-{:>6.2} s  {:>12} {:>6} {:>7} {:>10}   {}{}",
        r.start_us as f64 / 1e6,
        r.end_us as f64 / 1e6,
        format_rate(bps),
        r.retransmits,
        dash(r.cwnd, r.cwnd.to_string()),
        dash(r.srtt_us, format_duration_us(u64::from(r.srtt_us))),
        shares(&r.limits),
        drain,
    )
}

/// The columns over `tcplab watch`'s interval lines.
pub fn watched_interval_header() -> String {
    let names: Vec<&str> = Limit::ALL.iter().map(|l| l.name()).collect();
    format!(
        "[flow]  interval, sent and received, retransmits, cwnd, srtt; limits {}",
        names.join("/")
    )
}

/// One interval of a connection `tcplab watch` follows: a socket not tcplab's both
/// sends and receives, so the line has both.
pub fn watched_interval_line(r: &IntervalRecord) -> String {
    format!(
        "[{:>4}] {:>6.2}-{:>6.2} s  sent {:>12}  received {:>12}  retr {:>4}  cwnd {:>5}  srtt {:>9}   {}",
        r.flow,
        r.start_us as f64 / 1e6,
        r.end_us as f64 / 1e6,
        format_rate(interval_bps(r, r.acked_bytes)),
        format_rate(interval_bps(r, r.received_bytes)),
        r.retransmits,
        r.cwnd,
        format_duration_us(u64::from(r.srtt_us)),
        shares(&r.limits)
    )
}

/// Each limit's share of an interval, in the order the header names them: "  0%  12%".
fn shares(l: &LimitShares) -> String {
    let shares: Vec<String> = Limit::ALL
        .iter()
        .map(|&limit| format!("{:>3.0}%", l.get(limit) * 100.0))
        .collect();
    shares.join(" ")
}

/// The one line that says a server capped what it sent in the test.
pub fn server_cap_line(cap_bps: u64) -> String {
    format!(
        "cap:    the server paced what it sent to {} in all (its --max-rate)",
        format_rate(cap_bps as f64)
    )
}

/// The tunings each flow got, requested against effective.
pub fn flow_setup(run: &RunRecord) -> Vec<String> {
    if run.flows.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "{:<7} {:<5} {:<8} {:>5}  {:<36} {}",
        "[flow]", "dir", "cc", "mss", "sndbuf (sender)", "rcvbuf (receiver)"
    )];
    for f in &run.flows {
        // A UDP flow has no congestion control and no MSS.
        let (cc, mss) = match f.udp {
            Some(_) => ("udp".to_string(), "-".to_string()),
            None => (f.cc.clone(), f.mss.to_string()),
        };
        lines.push(format!(
            "[{:>4}]  {:<5} {:<8} {:>5}  {:<36} {}",
            f.id,
            f.direction.name(),
            cc,
            mss,
            buffer(&f.sndbuf, "wmem_max"),
            buffer(&f.rcvbuf, "rmem_max"),
        ));
    }
    lines
}

/// "256 KiB → 512 KiB effective" and the cap when Linux applied one.
fn buffer(b: &BufferSize, cap_sysctl: &str) -> String {
    match (b.requested, b.capped_at) {
        (Some(req), Some(cap)) => format!(
            "{} → {} (capped by net.core.{cap_sysctl} = {}, the host's: only root raises it)",
            format_size(req),
            format_size(b.effective),
            format_size(cap)
        ),
        (Some(req), None) => format!(
            "{} → {} effective",
            format_size(req),
            format_size(b.effective)
        ),
        (None, _) => format!(
            "auto {} → {}",
            format_size(b.effective),
            format_size(b.at_end)
        ),
    }
}

pub fn summary(run: &RunRecord) -> Vec<String> {
    let s = &run.summary;
    let mut lines = Vec::new();
    lines.push(String::new());
    for f in &run.flows {
        lines.push(flow_summary(f));
    }
    let retransmits = if run.flows.iter().any(|f| f.udp.is_none()) {
        format!("   retransmits {}", s.retransmits)
    } else {
        String::new()
    };
    // Probes alone move no data.
    if !run.flows.is_empty() {
        lines.push(format!(
        "total:  {} over the run's {:.2} s (sender's count {})   sent {}, received {}{retransmits}",
        format_rate(s.received_bps),
        s.window_seconds,
        format_rate(s.sent_bps),
        format_size(s.sent_bytes),
        format_size(s.received_bytes),
    ));
    }
    if let Some(u) = &s.udp {
        lines.push(udp_line(u, &run.clock));
    }
    if let Some(l) = &s.latency {
        lines.extend(latency_lines(l, &run.clock));
    }
    if let (Some(t), Some(rr)) = (&s.transactions, &run.params.transactions) {
        lines.push(transactions_line(t, rr));
    }
    if s.rtt.max_us > 0 {
        lines.push(format!(
            "rtt:    min {} / mean {} / max {} (smoothed, sender)",
            format_duration_us(u64::from(s.rtt.min_us)),
            format_duration_us(s.rtt.mean_us as u64),
            format_duration_us(u64::from(s.rtt.max_us))
        ));
    }
    if let Some(limit) = s.dominant_limit {
        let shares: Vec<String> = Limit::ALL
            .iter()
            .map(|&l| format!("{} {:.1}%", l.name(), s.limits.get(l) * 100.0))
            .collect();
        lines.push(format!(
            "limits: {}  → mostly {}-limited",
            shares.join("  "),
            limit.name()
        ));
    }
    if let Some(cap) = run.server.rate_cap_bps {
        lines.push(server_cap_line(cap));
    }
    lines.push(format!(
        "cpu:    client {:.1}% (user {:.1}%, system {:.1}%)   server {:.1}% (user {:.1}%, system {:.1}%)",
        s.cpu_client.total_pct,
        s.cpu_client.user_pct,
        s.cpu_client.system_pct,
        s.cpu_server.total_pct,
        s.cpu_server.user_pct,
        s.cpu_server.system_pct
    ));
    if let Some(path) = &run.path {
        // A topology's links are each named with their way, all under `up`.
        let ways = match &path.topology {
            Some(t) => {
                lines.push(format!(
                    "path:   topology {} (seed {}): {}, {}",
                    t.file,
                    t.seed,
                    count(t.hosts.len(), "host"),
                    count(t.links.len(), "link")
                ));
                [("", &path.up), ("", &path.down)]
            }
            None => {
                lines.push(format!("path:   \"{}\"", path.spec));
                [("up", &path.up), ("down", &path.down)]
            }
        };
        for (dir, stats) in ways {
            for link in &stats.links {
                let c = &link.counters;
                let marked = match c.marked_ce {
                    0 => String::new(),
                    n => format!("; marked CE {n}"),
                };
                lines.push(format!(
                    "  {dir:<4} {:<16} {} pkts in, {} delivered; dropped: loss {}, queue {}, aqm {}{}{marked}; queue peak {}; emulator lateness p50 {:.0} µs, p99 {:.0} µs",
                    link.name,
                    c.packets_in,
                    c.delivered_packets,
                    c.dropped_loss,
                    c.dropped_queue,
                    c.dropped_aqm,
                    policed(c, ", "),
                    format_size(c.max_queue_bytes),
                    stats.lateness.p50_us,
                    stats.lateness.p99_us,
                ));
                if let Some(own) = own_traffic(link) {
                    lines.push(format!("  {dir:<4} {:<16} {own}", ""));
                }
            }
        }
        lines.extend(host_queue_lines(path));
        if let Some(file) = &path.capture_file {
            lines.push(capture_line(file, path));
        }
    }
    if let Some(trace) = &run.trace {
        lines.push(events_line(trace, &run.events));
    }
    if run.status != RunStatus::Done {
        lines.push(format!(
            "status: {} — {}",
            format!("{:?}", run.status).to_lowercase(),
            run.error.as_deref().unwrap_or("")
        ));
    }
    lines
}

/// What a link carried of tcplab's own traffic, apart from the test's: "not the
/// test's: control 412 pkts in, 373 delivered, dropped loss 2 queue 37 aqm 0; probe …";
/// A policer's drops after the others (`, police 12`), where it dropped any.
pub fn policed(c: &tcplab_record::link::LinkCounters, separator: &str) -> String {
    match c.dropped_police {
        0 => String::new(),
        n => format!("{separator}police {n}"),
    }
}

/// `None` when none crossed it.
pub fn own_traffic(link: &NamedCounters) -> Option<String> {
    let kinds: Vec<String> = link
        .own()
        .map(|(traffic, c)| {
            format!(
                "{} {} pkts in, {} delivered, dropped loss {} queue {} aqm {}{}",
                traffic.name(),
                c.packets_in,
                c.delivered_packets,
                c.dropped_loss,
                c.dropped_queue,
                c.dropped_aqm,
                policed(c, " ")
            )
        })
        .collect();
    (!kinds.is_empty()).then(|| format!("not the test's: {}", kinds.join("; ")))
}

/// The sending hosts' interface queues, where the path sets them (`txqueuelen`) or they
/// dropped anything: a line per host, under the direction it sends into.
fn host_queue_lines(path: &PathRecord) -> Vec<String> {
    let set = path
        .spec
        .parse::<PathSpec>()
        .is_ok_and(|s| s.up.txqueuelen.or(s.down.txqueuelen).is_some());
    [("up", &path.up), ("down", &path.down)]
        .into_iter()
        .flat_map(|(dir, stats)| stats.host_queues.iter().map(move |q| (dir, q)))
        .filter(|(_, q)| set || q.drops() > 0)
        .map(|(dir, q)| {
            format!(
                "  {dir:<4} {:<16} txqueuelen {}, {}: {} pkts; dropped: device {}, qdisc {}; requeues {}; retransmissions held {}",
                format!("{} queue", q.host),
                q.txqueuelen,
                q.qdisc,
                q.qdisc_packets,
                q.device_drops,
                q.qdisc_drops,
                q.requeues,
                q.held_retransmits
            )
        })
        .collect()
}

/// The round-trip probes' figures: idle and loaded round trips, one-way delays, losses
/// per direction, RPM and the probes' own timing error.
fn latency_lines(l: &LatencySummary, clock: &ClockOffset) -> Vec<String> {
    let ms = |us: f64| format!("{:.2}", us / 1000.0);
    let quantiles = |q: &Option<Quantiles>| match q {
        Some(q) => format!(
            "p50 {} / p90 {} / p99 {} / max {} ms",
            ms(q.p50),
            ms(q.p90),
            ms(q.p99),
            ms(q.max)
        ),
        None => "no answer".into(),
    };
    let clock = if l.owd_exact {
        "one clock".to_string()
    } else {
        format!("through the clock offset, ± {} µs", clock.uncertainty_us)
    };
    let rpm = l.rpm.map_or("—".into(), |r| format!("{r:.0}"));
    vec![
        format!(
            "latency: probes every {}, {} sent, lost up {} / down {}   RPM {rpm}   send error p50 {:.0} µs, p99 {:.0} µs",
            format_duration_us(l.interval_us),
            l.sent,
            l.lost_up,
            l.lost_down,
            l.send_error_us.p50,
            l.send_error_us.p99,
        ),
        format!("  idle   rtt {}", quantiles(&l.idle_rtt_us)),
        format!("  loaded rtt {}", quantiles(&l.loaded_rtt_us)),
        format!(
            "  loaded one-way up {}; down {} ({clock})",
            quantiles(&l.up_owd_us),
            quantiles(&l.down_owd_us)
        ),
    ]
}

/// The transactions' rate and times, with what each one moved.
fn transactions_line(t: &TransactionStats, rr: &TransactionParams) -> String {
    let ms = |us: f64| format!("{:.2}", us / 1000.0);
    format!(
        "transactions: {} ({:.1}/s), {}   time p50 {} / p90 {} / p99 {} / max {} ms",
        t.count,
        t.per_second,
        rr.describe(),
        ms(t.latency_us.p50),
        ms(t.latency_us.p90),
        ms(t.latency_us.p99),
        ms(t.latency_us.max),
    )
}

/// Datagram counts, jitter and one-way delay of UDP flows.
fn udp_line(u: &UdpStats, clock: &ClockOffset) -> String {
    let lost_pct = if u.sent > 0 {
        u.lost as f64 * 100.0 / u.sent as f64
    } else {
        0.0
    };
    let local = match (u.send_errors, u.socket_drops) {
        (0, 0) => String::new(),
        (tx, rx) => format!("   not on the path: {tx} refused by the sender's kernel, {rx} dropped by the receiving socket"),
    };
    let behind = match (u.unsent, u.late) {
        (0, _) => String::new(),
        (unsent, 0) => format!("   the sender fell behind: {unsent} due, never sent"),
        (unsent, late) => format!(
            "   the sender fell behind: {unsent} due, never sent ({late}× over 100 ms late)"
        ),
    };
    let clock = if u.owd_exact {
        " (one clock)".to_string()
    } else if u.clock_step_us > CLOCK_STEP_TOLERANCE_US {
        format!(
            " (the wall clock stepped {:.0} µs during the flow)",
            u.clock_step_us
        )
    } else {
        let doubt = if clock.resolves(u.owd_us.p50) {
            ""
        } else {
            ": too uncertain for these delays to mean much"
        };
        format!(
            " (through the estimated clock offset, ± {} µs{doubt})",
            clock.uncertainty_us
        )
    };
    format!(
        "udp:    sent {}, received {}, lost {} ({lost_pct:.3} %), out of order {}, duplicates {}   jitter {:.1} µs   one-way delay min {} / p50 {} / p99 {} / max {}{}{local}{behind}",
        u.sent,
        u.received,
        u.lost,
        u.out_of_order,
        u.duplicates,
        u.jitter_us,
        format_duration_us(u.owd_us.min as u64),
        format_duration_us(u.owd_us.p50 as u64),
        format_duration_us(u.owd_us.p99 as u64),
        format_duration_us(u.owd_us.max as u64),
        clock,
    )
}

fn flow_summary(f: &FlowRecord) -> String {
    let moved = match &f.timed {
        None => format!(
            "sent {} in {:.2} s = {}   received {} in {:.2} s = {}",
            format_size(f.sent_bytes),
            f.sender_seconds,
            format_rate(f.sent_bps),
            format_size(f.received_bytes),
            f.receiver_seconds,
            format_rate(f.received_bps),
        ),
        Some(t) => format!(
            "by the {:.2} s deadline: acknowledged {} = {}, read {} = {}   in all: sent {}, received {} ({})",
            t.seconds,
            format_size(t.acked_bytes),
            format_rate(f.sent_bps),
            format_size(t.received_bytes),
            format_rate(f.received_bps),
            format_size(f.sent_bytes),
            format_size(f.received_bytes),
            drain(t),
        ),
    };
    // UDP has no retransmits and no tcp_info to sample.
    match f.udp {
        Some(_) => format!("[{:>4}]  {moved}", f.id),
        None => format!(
            "[{:>4}]  {moved}   retr {}   samples {}+{}",
            f.id, f.retransmits, f.samples, f.receiver_samples,
        ),
    }
}

/// How a timed flow's backlog drained after its deadline.
fn drain(t: &Timed) -> String {
    if t.unacked_bytes == 0 {
        format!("drained in {:.2} s", t.drain_seconds)
    } else {
        format!(
            "the drain limit reset the connection after {:.2} s with {} unacknowledged",
            t.drain_seconds,
            format_size(t.unacked_bytes)
        )
    }
}

/// The run in one sentence, as the report's page opens its section: how it ended, when,
/// against what, and what it moved.
pub fn in_a_sentence(run: &RunRecord) -> String {
    let started = started_utc(run.started_unix_us);
    let s = &run.summary;
    match &run.watch {
        None => format!(
            "{:?}, started {started} (UTC), server {}: {} over the run's {:.2} s, received {} in all, retransmits {}, smoothed RTT mean {}.",
            run.status,
            run.target,
            format_rate(s.received_bps),
            s.window_seconds,
            format_size(s.received_bytes),
            s.retransmits,
            format_duration_us(s.rtt.mean_us.round().max(0.0) as u64),
        ),
        Some(watch) => format!(
            "{:?}, started {started} (UTC), watched by {} for {:.2} s: {}, {} received in all, retransmits {}.",
            run.status,
            crate::watched::what(watch),
            s.window_seconds,
            count(run.flows.len(), "connection"),
            format_size(s.received_bytes),
            s.retransmits,
        ),
    }
}

/// When a run started, UTC to the second: "2026-11-28T00:47:47Z".
fn started_utc(unix_us: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(unix_us.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// One line of `tcplab runs`.
pub fn run_row(run: &tcplab_store::RunSummaryRow) -> String {
    let rate = |bps: Option<f64>| bps.map_or_else(|| "-".to_string(), format_rate);
    format!(
        "{:>5}  {:<26}  {:<10}  {:<6}  {:>14}  {:>14}  {}{}",
        run.id,
        started_utc(run.started_unix_us),
        run.status,
        format!("{:?}", run.mode).to_lowercase(),
        rate(run.sent_bps),
        rate(run.received_bps),
        run.target,
        super::label(&run.label),
    )
}

/// What the kernel's events hold, by kind: "events: 48211 kernel events (probe 48102,
/// retransmit 37, cong_state 62, rcvbuf_grow 10)", or why they were not taken.
fn events_line(trace: &TraceRecord, events: &[EventRecord]) -> String {
    if !trace.taken {
        return format!("events: {}", trace.note.as_deref().unwrap_or("not taken"));
    }
    let mut by_kind: Vec<(&str, usize)> = Vec::new();
    for e in events {
        match by_kind.iter_mut().find(|(kind, _)| *kind == e.event.kind()) {
            Some((_, n)) => *n += 1,
            None => by_kind.push((e.event.kind(), 1)),
        }
    }
    let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let mut line = format!(
        "events: {} ({})",
        count(trace.events, "kernel event"),
        kinds.join(", ")
    );
    if trace.lost > 0 {
        line += &format!(
            "; {} lost: the reader fell behind the kernel's buffer",
            count(trace.lost, "event")
        );
    }
    line
}

/// Where the capture went and what it holds: "capture: run.pcapng (52 301 packets; 0 lost
/// to a full buffer)".
fn capture_line(file: &str, path: &tcplab_record::PathRecord) -> String {
    let [up, down] = [&path.up, &path.down].map(|d| d.capture.clone().unwrap_or_default());
    let lost = up.overflow + down.overflow;
    let mut line = format!(
        "capture: {file} ({} up, {} down, at the {}",
        count(up.packets as usize, "packet"),
        down.packets,
        path.capture_at.name()
    );
    if lost > 0 {
        line += &format!(
            "; {} missing: the writer fell behind and its buffer was full",
            count(lost as usize, "packet")
        );
    }
    line + ")"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(start_us: u64, end_us: u64) -> IntervalRecord {
        IntervalRecord {
            flow: 3,
            index: 0,
            start_us,
            end_us,
            acked_bytes: 1_000_000,
            received_bytes: 250,
            retransmits: 2,
            cwnd: 10,
            srtt_us: 1500,
            limits: LimitShares {
                cwnd: 0.25,
                app: 0.75,
                ..LimitShares::default()
            },
            udp: None,
            drain: false,
        }
    }

    /// A watched socket's interval: what it sent and received, each over the span, and
    /// its limits in the header's order.
    #[test]
    fn a_watched_interval_has_both_rates_and_its_limits() {
        let r = interval(500_000, 1_000_000);
        assert_eq!(interval_bps(&r, r.acked_bytes), 16e6);
        assert_eq!(interval_bps(&interval(7, 7), 1000), 0.0);
        assert_eq!(
            watched_interval_header(),
            "[flow]  interval, sent and received, retransmits, cwnd, srtt; limits rwnd/sndbuf/cwnd/pacing/app"
        );
        assert_eq!(
            watched_interval_line(&r),
            "[   3]   0.50-  1.00 s  sent  16.0 Mbit/s  received  4.00 kbit/s  retr    2  cwnd    10  srtt   1.50 ms     0%   0%  25%   0%  75%"
        );
    }
}
