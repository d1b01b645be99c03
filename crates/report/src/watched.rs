//! A watched run's connections (`tcplab watch --db`, `tcplab shell --record`): which are
//! long enough to draw over time as a tcplab flow is drawn, and the table of all of them,
//! where the short ones make one row, however many there were.

use std::collections::HashSet;

use tcplab_record::units::{count, format_duration_us};
use tcplab_record::{FlowRecord, Host, LimitShares, RunRecord, WatchRecord, WatchedFlow};

/// A connection is long when its life spans at least this many sample intervals: its
/// cwnd and RTT charts then have a line of 20 points or more, not a dot or two.
pub const LONG_SAMPLE_INTERVALS: u64 = 20;
/// … and at least this long: the throughput chart's bins are whole round trips nearest
/// 100 ms, so a connection drawn has about 5 bins or more.
pub const LONG_MIN_US: u64 = 500_000;

/// Whether a watched connection is drawn over time or only counted in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Length {
    /// Drawn as a tcplab flow is, with a row of its own in the table.
    Long,
    /// Aggregated with the other short ones into one row.
    Short,
}

impl Length {
    /// The least life of a long connection sampled every `sample_interval_us`.
    pub fn long_from_us(sample_interval_us: u64) -> u64 {
        (LONG_SAMPLE_INTERVALS * sample_interval_us).max(LONG_MIN_US)
    }

    /// A flow's length in a run sampled every `sample_interval_us`; a flow tcplab ran
    /// itself (not watched) is long.
    pub fn of(flow: &FlowRecord, sample_interval_us: u64) -> Length {
        match &flow.watched {
            Some(w) if life_us(w) < Length::long_from_us(sample_interval_us) => Length::Short,
            _ => Length::Long,
        }
    }
}

/// From the first sample of either end of the connection to the last of either, µs.
pub fn life_us(w: &WatchedFlow) -> u64 {
    let (start, end) = span_us(w);
    (end - start).max(0) as u64
}

fn span_us(w: &WatchedFlow) -> (i64, i64) {
    let ends = || std::iter::once(w).chain(w.peer.as_deref());
    (
        ends().map(|e| e.start_us).min().unwrap_or(0),
        ends().map(|e| e.end_us).max().unwrap_or(0),
    )
}

/// The connection's sending socket, where it was watched (the flow's client end).
fn sender(w: &WatchedFlow) -> Option<&WatchedFlow> {
    (w.end == Host::Client).then_some(w)
}

/// The connection's receiving socket, where it was watched.
fn receiver(w: &WatchedFlow) -> Option<&WatchedFlow> {
    match w.end {
        Host::Server => Some(w),
        Host::Client => w.peer.as_deref(),
    }
}

/// "curl (pid 4242)", or "—" where the socket was not watched or its owner not read.
fn process(w: Option<&WatchedFlow>) -> String {
    match w.and_then(|w| Some((w.comm.as_deref()?, w.pid?))) {
        Some((comm, pid)) => format!("{comm} (pid {pid})"),
        None => "—".into(),
    }
}

/// A watched flow's name in charts: its number, its sender's program (else its
/// receiver's) and its ends, as the table lists it.
pub fn flow_name(flow: &FlowRecord, w: &WatchedFlow) -> String {
    let comm = [sender(w), receiver(w)]
        .into_iter()
        .flatten()
        .find_map(|e| e.comm.as_deref())
        .map(|c| format!(" {c}"))
        .unwrap_or_default();
    format!(
        "#{}{comm} {} → {}",
        flow.id, flow.client_addr, flow.server_addr
    )
}

/// What watched, for titles and captions: the shell's commands or watch's filter, as
/// typed.
pub fn what(watch: &WatchRecord) -> String {
    match &watch.shell {
        Some(shell) => {
            let server = shell
                .server
                .as_ref()
                .map(|s| format!(" --server-cmd {s:?}"))
                .unwrap_or_default();
            let words: Vec<String> = shell
                .client
                .iter()
                .map(|w| match w.contains(char::is_whitespace) {
                    true => format!("{w:?}"),
                    false => w.clone(),
                })
                .collect();
            format!("tcplab shell{server} -- {}", words.join(" "))
        }
        None => format!("tcplab watch {}", watch.filter)
            .trim_end()
            .to_owned(),
    }
}

/// The short connections together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShortConnections {
    pub count: usize,
    /// Payload acknowledged to the senders and received, summed (the flows' counts).
    pub acked_bytes: u64,
    pub received_bytes: u64,
    pub retransmits: u64,
    /// Each connection's life, µs, shortest first.
    pub lives_us: Vec<u64>,
    /// The earliest and latest start, µs since t0.
    pub first_start_us: i64,
    pub last_start_us: i64,
    /// The least minimum RTT any of them measured, µs (0: none).
    pub min_rtt_us: u32,
    /// Their senders' limits, weighted by the time each booked, and that time.
    pub limits: LimitShares,
    pub limited_us: u64,
    /// The programs at either end, each once, in order of first appearance.
    pub programs: Vec<String>,
}

/// A watched run's connections: the long ones, and the short ones summed.
#[derive(Clone, Debug)]
pub struct Connections<'a> {
    pub long: Vec<&'a FlowRecord>,
    pub short: ShortConnections,
    /// A long connection's least life, µs.
    pub long_from_us: u64,
}

impl<'a> Connections<'a> {
    pub fn of(run: &'a RunRecord) -> Connections<'a> {
        let interval = run.params.sample_interval_us;
        let mut long = Vec::new();
        let mut short = ShortConnections::default();
        let mut booked: Vec<(LimitShares, f64)> = Vec::new();
        for f in &run.flows {
            let Some(w) = &f.watched else { continue };
            if Length::of(f, interval) == Length::Long {
                long.push(f);
                continue;
            }
            let (start, _) = span_us(w);
            if short.count == 0 || start < short.first_start_us {
                short.first_start_us = start;
            }
            short.last_start_us = short.last_start_us.max(start);
            short.count += 1;
            short.acked_bytes += f.sent_bytes;
            short.received_bytes += f.received_bytes;
            short.retransmits += f.retransmits;
            short.lives_us.push(life_us(w));
            let rtt = w.counters.min_rtt_us;
            if rtt > 0 && (short.min_rtt_us == 0 || rtt < short.min_rtt_us) {
                short.min_rtt_us = rtt;
            }
            if let Some(s) = sender(w).filter(|s| s.counters.limited_us > 0) {
                booked.push((s.counters.limits, s.counters.limited_us as f64));
                short.limited_us += s.counters.limited_us;
            }
            for comm in [sender(w), receiver(w)]
                .into_iter()
                .flatten()
                .filter_map(|e| e.comm.clone())
            {
                if !short.programs.contains(&comm) {
                    short.programs.push(comm);
                }
            }
        }
        short.lives_us.sort_unstable();
        short.limits = LimitShares::weighted_mean(&booked);
        Connections {
            long,
            short,
            long_from_us: Length::long_from_us(interval),
        }
    }

    /// The table: a header, a row per long connection, one for the short ones (if any)
    /// and one for all. Byte counts are whole numbers, to be checked against others'.
    pub fn rows(&self, run: &RunRecord) -> Vec<Vec<String>> {
        let mut rows = vec![[
            "#",
            "sender → receiver",
            "programs (sender → receiver)",
            "start",
            "duration",
            "acked, bytes",
            "received, bytes",
            "retransmits",
            "min RTT",
            "dominant limit",
        ]
        .map(String::from)
        .to_vec()];
        for f in &self.long {
            let Some(w) = &f.watched else { continue };
            let (start, _) = span_us(w);
            rows.push(vec![
                f.id.to_string(),
                format!("{} → {}", f.client_addr, f.server_addr),
                format!("{} → {}", process(sender(w)), process(receiver(w))),
                seconds(start),
                format_duration_us(life_us(w)),
                grouped(f.sent_bytes),
                grouped(f.received_bytes),
                grouped(f.retransmits),
                rtt(w.counters.min_rtt_us),
                limit(sender(w).map(|s| (s.counters.limits, s.counters.limited_us))),
            ]);
        }
        let s = &self.short;
        if s.count > 0 {
            let lives = &s.lives_us;
            rows.push(vec![
                "short".into(),
                format!(
                    "{}, each under {}",
                    count(s.count, "connection"),
                    format_duration_us(self.long_from_us)
                ),
                if s.programs.is_empty() {
                    "—".into()
                } else {
                    s.programs.join(", ")
                },
                if s.first_start_us == s.last_start_us {
                    seconds(s.first_start_us)
                } else {
                    format!(
                        "{} to {}",
                        seconds(s.first_start_us),
                        seconds(s.last_start_us)
                    )
                },
                format!(
                    "median {}, longest {}",
                    format_duration_us(lives[lives.len() / 2]),
                    format_duration_us(lives[lives.len() - 1])
                ),
                grouped(s.acked_bytes),
                grouped(s.received_bytes),
                grouped(s.retransmits),
                rtt(s.min_rtt_us),
                limit(Some((s.limits, s.limited_us))),
            ]);
        }
        let flows = run.flows.iter().filter(|f| f.watched.is_some());
        rows.push(vec![
            "all".into(),
            count(self.long.len() + s.count, "connection"),
            String::new(),
            String::new(),
            String::new(),
            grouped(flows.clone().map(|f| f.sent_bytes).sum()),
            grouped(flows.clone().map(|f| f.received_bytes).sum()),
            grouped(flows.map(|f| f.retransmits).sum()),
            String::new(),
            String::new(),
        ]);
        rows
    }
}

/// Only the run's long connections, with their samples, intervals and events: what its
/// charts draw. Flows keep their numbers, so a chart's series and the table's rows agree.
pub fn long_only(mut run: RunRecord) -> RunRecord {
    let interval = run.params.sample_interval_us;
    run.flows
        .retain(|f| Length::of(f, interval) == Length::Long);
    let ids: HashSet<u32> = run.flows.iter().map(|f| f.id).collect();
    run.samples.retain(|s| ids.contains(&s.flow));
    run.intervals.retain(|i| ids.contains(&i.flow));
    run.events.retain(|e| ids.contains(&e.flow));
    run
}

fn seconds(us: i64) -> String {
    format!("{:.3} s", us as f64 / 1e6)
}

fn rtt(us: u32) -> String {
    if us == 0 {
        "—".into()
    } else {
        format_duration_us(u64::from(us))
    }
}

/// "cwnd 99 % of 2.00 s", or "—" where no sender's time was booked.
fn limit(booked: Option<(LimitShares, u64)>) -> String {
    match booked {
        Some((limits, us)) if us > 0 => {
            let dominant = limits.dominant();
            format!(
                "{} {:.0} % of {}",
                dominant.name(),
                limits.get(dominant) * 100.0,
                format_duration_us(us)
            )
        }
        _ => "—".into(),
    }
}

/// A whole number in groups of three digits: "49 912 832".
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::watched_run;

    /// The first flow of a watched run, its socket living `life_us` and its peer, if
    /// any, `peer_us`.
    fn living(life_us: i64, peer_us: Option<i64>) -> FlowRecord {
        let mut f = watched_run(1, 0).flows.remove(0);
        let w = f.watched.as_mut().unwrap();
        w.end_us = w.start_us + life_us;
        w.peer = peer_us.map(|life| {
            let mut peer = w.clone();
            peer.end = Host::Server;
            peer.end_us = w.start_us + life;
            Box::new(peer)
        });
        f
    }

    #[test]
    fn a_connection_is_long_from_20_sample_intervals_and_half_a_second() {
        // At 10 ms, 500 ms is the floor: 20 intervals (200 ms) would be two bins.
        assert_eq!(Length::of(&living(499_999, None), 10_000), Length::Short);
        assert_eq!(Length::of(&living(500_000, None), 10_000), Length::Long);
        // At 100 ms, 20 intervals: 2 s.
        assert_eq!(Length::of(&living(1_999_999, None), 100_000), Length::Short);
        assert_eq!(Length::of(&living(2_000_000, None), 100_000), Length::Long);
        // The connection lives from either end's first sample to either end's last.
        assert_eq!(
            Length::of(&living(100_000, Some(600_000)), 10_000),
            Length::Long
        );
        // A flow tcplab ran is drawn whatever its length.
        let mut ours = living(1, None);
        ours.watched = None;
        assert_eq!(Length::of(&ours, 10_000), Length::Long);
    }

    #[test]
    fn the_table_sums_the_short_connections_into_one_row() {
        let run = watched_run(2, 1000);
        let c = Connections::of(&run);
        assert_eq!(c.long.iter().map(|f| f.id).collect::<Vec<_>>(), [0, 1]);
        let short: Vec<&FlowRecord> = run.flows.iter().filter(|f| f.id >= 2).collect();
        let s = &c.short;
        assert_eq!(s.count, 1000);
        assert_eq!(
            s.acked_bytes,
            short.iter().map(|f| f.sent_bytes).sum::<u64>()
        );
        assert_eq!(
            s.received_bytes,
            short.iter().map(|f| f.received_bytes).sum::<u64>()
        );
        assert_eq!(
            s.retransmits,
            short.iter().map(|f| f.retransmits).sum::<u64>()
        );
        assert_eq!(s.lives_us.len(), 1000);
        assert_eq!(
            (s.first_start_us, s.last_start_us),
            (1_000_000, 1_000_000 + 999 * 5_000)
        );
        assert_eq!(s.programs, ["nginx", "curl"]);
        // Half the short senders were rwnd-limited, half app-limited, for equal times.
        assert!((s.limits.rwnd - 0.5).abs() < 1e-9, "{:?}", s.limits);

        let rows = c.rows(&run);
        // A header, the long ones, one row for the 1 000 short ones, the total.
        assert_eq!(rows.len(), 1 + 2 + 1 + 1, "{rows:?}");
        let row = |name: &str| rows.iter().find(|r| r[0] == name).unwrap();
        let column = |title: &str| rows[0].iter().position(|c| c == title).unwrap();
        let (acked, received, retrans) = (
            column("acked, bytes"),
            column("received, bytes"),
            column("retransmits"),
        );
        let number = |cell: &str| -> u64 { cell.replace(' ', "").parse().unwrap() };
        assert_eq!(row("short")[1], "1000 connections, each under 500 ms");
        assert_eq!(number(&row("short")[acked]), s.acked_bytes);
        for (column, total) in [
            (acked, run.flows.iter().map(|f| f.sent_bytes).sum::<u64>()),
            (received, run.flows.iter().map(|f| f.received_bytes).sum()),
            (retrans, run.flows.iter().map(|f| f.retransmits).sum()),
        ] {
            assert_eq!(number(&row("all")[column]), total);
            // The rows above the total add up to it.
            let rows_sum: u64 = rows[1..rows.len() - 1]
                .iter()
                .map(|r| number(&r[column]))
                .sum();
            assert_eq!(rows_sum, total);
        }
        assert_eq!(row("0")[1], "10.0.0.1:40000 → 10.0.0.2:80");
        assert_eq!(row("0")[2], "nginx (pid 10) → curl (pid 20)");
        assert_eq!(row("0")[9], "cwnd 90 % of 2.00 s");
        assert_eq!(row("all")[1], "1002 connections");
    }

    #[test]
    fn only_the_long_connections_are_kept_for_the_charts() {
        let run = watched_run(1, 50);
        let samples = run.samples.iter().filter(|s| s.flow == 0).count();
        let charted = long_only(run);
        assert_eq!(charted.flows.len(), 1);
        assert_eq!(charted.samples.len(), samples);
        assert!(charted.samples.iter().all(|s| s.flow == 0));
        assert!(charted.intervals.iter().all(|i| i.flow == 0));
    }

    #[test]
    fn numbers_are_grouped_by_three_digits() {
        for (n, text) in [
            (0, "0"),
            (999, "999"),
            (1000, "1 000"),
            (49_912_832, "49 912 832"),
        ] {
            assert_eq!(grouped(n), text);
        }
    }
}
