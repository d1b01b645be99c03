//! Why a run got the throughput it got: the measured rate against each textbook bound,
//! what limited the senders, what went wrong on the way, and what to change. Pure: it
//! reads a stored [`RunRecord`] (with its tcp_info samples) and nothing else.
//!
//! The verdict follows the Web100 reading of a sender's state. A configured pacing or
//! application rate that was reached is the limit; a link carried at its rate is the
//! limit; otherwise the window arithmetic of the sender's own samples decides: in flight
//! ≈ the receiver's advertised window → `rwnd`; in flight below both the receiver's and
//! the congestion window with nothing left unsent → the send buffer; else `cwnd` (the
//! network: loss or the queue). The kernel's own chrono counters (tcpi_rwnd_limited,
//! tcpi_sndbuf_limited) count too, but Linux books a sender as cwnd-limited whenever it
//! is not blocked on the other two, which slow start never is, so they are not enough.

use serde::Serialize;

use crate::bounds;
use crate::path::{self, Bottleneck, Pace, PathSpec};
use crate::record::{BufferSize, Direction, FlowRecord, LimitShares, RunRecord, SampleRecord};
use crate::stats::jain;
use crate::tcpinfo::TcpInfo;
use crate::throughput::{self, Counted};
use crate::units::{format_duration_us, format_rate, format_size};

/// tcp_info's ssthresh before the first loss ("infinite").
const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;
/// TCP_CA_Recovery and TCP_CA_Loss: the sender is repairing a loss.
const CA_RECOVERY: u8 = 3;
const CA_LOSS: u8 = 4;
/// A configured rate counts as reached at this share of it.
const REACHED: f64 = 0.8;
/// The link counts as full at this share of its goodput.
const LINK_FULL: f64 = 0.85;
/// A limit share that makes its limit the verdict (or a finding) on its own.
const SHARE_DECIDES: f64 = 0.3;
const SHARE_NOTED: f64 = 0.1;
/// Samples from the first fifth of a flow are slow start, not its steady state.
const STEADY_FROM: f64 = 0.2;
/// The loss models describe a steady state of repeated loss; fewer loss events than
/// this (a slow-start overshoot, say) are not one.
const MIN_LOSS_EVENTS: u64 = 4;
/// Below this Jain index parallel streams count as unfair.
const UNFAIR_BELOW: f64 = 0.9;

/// What bounded the run's throughput.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The bottleneck link was full.
    Link,
    /// The congestion window: the network (loss, queue) held the sender back.
    Cwnd,
    /// The receiver's advertised window.
    Rwnd,
    /// The sender's own socket buffer.
    Sndbuf,
    /// The application did not supply data faster.
    App,
    /// A pacing rate (SO_MAX_PACING_RATE or the gap pacer) held the sender back.
    Pacing,
    /// No sender's tcp_info was sampled (an iperf3 sender, or sampling off): nothing
    /// to tell the windows apart by.
    Unknown,
}

impl Limit {
    pub fn name(self) -> &'static str {
        match self {
            Limit::Link => "link",
            Limit::Cwnd => "cwnd",
            Limit::Rwnd => "rwnd",
            Limit::Sndbuf => "sndbuf",
            Limit::App => "app",
            Limit::Pacing => "pacing",
            Limit::Unknown => "unknown",
        }
    }
}

/// The whole answer, as `tcplab explain` prints it and `--json` carries it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    pub path: Option<PathFacts>,
    /// Without an emulated path (a real network): what the TCP flows measured of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_path: Option<RealPath>,
    pub tunings: TuningFacts,
    /// The TCP flows' received throughput summed, bit/s.
    pub measured_bps: f64,
    pub bounds: Bounds,
    /// Time shares under each limit, weighted over the TCP flows.
    pub limits: LimitShares,
    pub episodes: Episodes,
    pub verdict: Verdict,
    pub findings: Vec<Finding>,
    pub recommendations: Vec<String>,
}

/// The path as configured, in the data direction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathFacts {
    pub spec: String,
    /// The data direction's bottleneck rate, bit/s; `None` without a fixed rate.
    pub bottleneck_bps: Option<u64>,
    /// The configured round trip (both directions' delays), µs.
    pub base_rtt_us: u64,
    pub bdp_bytes: Option<u64>,
    /// The bottleneck queue, bytes.
    pub queue_bytes: Option<u64>,
}

/// A real network's path as the TCP flows saw it: its round trip, never its bottleneck,
/// which a window-limited flow cannot tell from its own rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RealPath {
    /// The server as the user named it.
    pub target: String,
    /// The smallest RTT any TCP flow measured (`tcpi_min_rtt`), µs.
    pub min_rtt_us: u64,
    /// The smoothed RTT averaged over the flows' samples, µs.
    pub mean_rtt_us: u64,
}

/// The tunings that decide a window, as asked for and as the kernel made them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TuningFacts {
    pub cc: String,
    pub streams: usize,
    pub mss: u32,
    pub sndbuf: BufferSize,
    pub rcvbuf: BufferSize,
    pub write_size: u32,
    pub nodelay: bool,
    /// "none", "kernel 90 Mbit/s", "app 20 Mbit/s", "gap 93 Mbit/s", "gap cwnd".
    pub pacing: String,
}

/// Each model's bound on the TCP flows' summed throughput, bit/s; `None` where a model
/// does not apply (no rate limit, no loss).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Bounds {
    /// The bottleneck's rate less the headers of full segments.
    pub link_bps: Option<f64>,
    /// The smaller of the receiver's advertised window and the effective send buffer,
    /// per measured round trip. Linux checks a send buffer for room before it queues
    /// a write's packet, not after, so a full buffer is overshot by up to that packet:
    /// a send-buffer-limited flow can run ~15 % above this.
    pub window_bps: Option<f64>,
    /// Mathis et al. with the measured loss-event rate (recovery episodes per data
    /// segment sent; the models' p counts congestion events, not lost packets), for
    /// loss-based congestion control (not BBR) with at least 4 loss events.
    pub mathis_bps: Option<f64>,
    /// Padhye–Firoiu–Towsley–Kurose with the measured loss-event rate, RTO and window.
    pub pftk_bps: Option<f64>,
}

impl Bounds {
    /// The smallest bound and its name.
    pub fn binding(&self) -> Option<(&'static str, f64)> {
        [
            ("link", self.link_bps),
            ("window", self.window_bps),
            ("mathis", self.mathis_bps),
            ("pftk", self.pftk_bps),
        ]
        .into_iter()
        .filter_map(|(name, b)| b.map(|b| (name, b)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// What the senders' congestion control went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Episodes {
    pub retransmits: u64,
    /// Retransmitted segments over data segments sent.
    pub retransmit_rate: f64,
    /// Spans of consecutive samples in loss recovery (or with retransmissions).
    pub recovery_episodes: u64,
    /// Times a sender's window grew past ssthresh (left slow start).
    pub slow_start_exits: u64,
    /// When the first sender first left slow start, µs since t0.
    pub first_slow_start_exit_us: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub limit: Limit,
    pub reason: String,
}

/// One thing a detector noticed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// buffer_below_bdp, buffer_capped, nagle_delayed_ack, queue_overflow,
    /// unfair_streams, receiver_limited, application_limited, loss.
    pub kind: &'static str,
    pub message: String,
}

/// What one TCP flow's sender samples show in its steady state (medians, bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Steady {
    /// The sender was sampled: the figures below are measured, not zeros.
    sampled: bool,
    in_flight: f64,
    cwnd: f64,
    rwnd: f64,
    unsent: f64,
}

/// Explains `run`. UDP flows are left out; a run without TCP flows gets a verdict of
/// `app` (a UDP sender sends what it is told).
pub fn explain(run: &RunRecord) -> Explanation {
    let tcp: Vec<&FlowRecord> = run.flows.iter().filter(|f| f.udp.is_none()).collect();
    let direction = tcp.first().map_or(Direction::Up, |f| f.direction);
    let spec: Option<PathSpec> = run.path.as_ref().and_then(|p| p.spec.parse().ok());
    let facts = run
        .path
        .as_ref()
        .zip(spec.as_ref())
        .map(|(p, s)| path_facts(&p.spec, s, direction));
    let tunings = tuning_facts(run, &tcp, spec.as_ref(), direction);
    let measured_bps = throughput::bps(&run.intervals, Counted::Received, 0, |id| {
        tcp.iter().any(|f| f.id == id)
    })
    .unwrap_or(0.0);
    let samples: Vec<Vec<&SampleRecord>> = tcp.iter().map(|f| sender_samples(run, f)).collect();
    let bounds = model_bounds(&tcp, &samples, facts.as_ref());
    let limits = weighted_limits(&tcp);
    let episodes = episodes(&tcp, &samples);
    let steady: Vec<Steady> = samples.iter().map(|s| steady(s)).collect();
    let pacing_bps = pacing_rate_bps(run, spec.as_ref(), direction, tcp.len());
    let verdict = verdict(
        run,
        &tcp,
        &steady,
        limits,
        measured_bps,
        bounds.link_bps,
        pacing_bps,
    );
    let real_path = facts.is_none().then(|| real_path(run, &tcp)).flatten();
    let mut explanation = Explanation {
        path: facts,
        real_path,
        tunings,
        measured_bps,
        bounds,
        limits,
        episodes,
        verdict,
        findings: Vec::new(),
        recommendations: Vec::new(),
    };
    detect(run, &tcp, &steady, direction, &mut explanation);
    explanation
}

fn path_facts(spec_text: &str, spec: &PathSpec, direction: Direction) -> PathFacts {
    let link = spec.link(path_direction(direction));
    let base_rtt_us = spec.rtt_us();
    let bottleneck_bps = match link.bottleneck {
        Bottleneck::Rate { bps, .. } => Some(bps),
        _ => None,
    };
    let queue_bytes = link.queue_limit(base_rtt_us).map(|l| match l {
        path::Limit::Bytes(b) => b,
        path::Limit::Packets(p) => p * u64::from(spec.mtu),
    });
    PathFacts {
        spec: spec_text.to_string(),
        bottleneck_bps,
        base_rtt_us,
        bdp_bytes: bottleneck_bps.map(|r| bounds::bdp_bytes(r, base_rtt_us) as u64),
        queue_bytes: queue_bytes.filter(|_| bottleneck_bps.is_some()),
    }
}

fn real_path(run: &RunRecord, tcp: &[&FlowRecord]) -> Option<RealPath> {
    let measured: Vec<&FlowRecord> = tcp.iter().copied().filter(|f| f.rtt.min_us > 0).collect();
    let min_rtt_us = measured.iter().map(|f| u64::from(f.rtt.min_us)).min()?;
    let mean_rtt_us = measured.iter().map(|f| flow_rtt_us(f)).sum::<u64>() / measured.len() as u64;
    Some(RealPath {
        target: run.target.clone(),
        min_rtt_us,
        mean_rtt_us,
    })
}

fn path_direction(d: Direction) -> path::Direction {
    match d {
        Direction::Up => path::Direction::Up,
        Direction::Down => path::Direction::Down,
    }
}

fn tuning_facts(
    run: &RunRecord,
    tcp: &[&FlowRecord],
    spec: Option<&PathSpec>,
    direction: Direction,
) -> TuningFacts {
    let t = &run.params.tuning;
    let first = tcp.first();
    let pacing = match (
        t.pacing_rate,
        t.app_rate,
        spec.and_then(|s| s.link(path_direction(direction)).pace),
    ) {
        (_, _, Some(Pace::Cwnd)) => "gap cwnd".to_string(),
        (_, _, Some(Pace::Rate(bps))) => format!("gap {}", format_rate(bps as f64)),
        (Some(bps), _, _) => format!("kernel {}", format_rate(bps as f64)),
        (_, Some(bps), _) => format!("app {}", format_rate(bps as f64)),
        _ => "none".to_string(),
    };
    TuningFacts {
        cc: first.map(|f| f.cc.clone()).unwrap_or_default(),
        streams: tcp.len(),
        mss: first.map_or(0, |f| f.mss),
        sndbuf: first.map(|f| f.sndbuf).unwrap_or_default(),
        rcvbuf: first.map(|f| f.rcvbuf).unwrap_or_default(),
        write_size: t.write_size,
        nodelay: t.nodelay,
        pacing,
    }
}

/// The sending end's samples of `flow`, in time order.
fn sender_samples<'a>(run: &'a RunRecord, flow: &FlowRecord) -> Vec<&'a SampleRecord> {
    let host = flow.direction.sender();
    let mut samples: Vec<&SampleRecord> = run
        .samples
        .iter()
        .filter(|s| s.flow == flow.id && s.host == host)
        .collect();
    samples.sort_by_key(|s| s.t_us);
    samples
}

/// The flow's round trip as it saw it: the mean smoothed RTT, else the minimum.
fn flow_rtt_us(flow: &FlowRecord) -> u64 {
    if flow.rtt.mean_us > 0.0 {
        flow.rtt.mean_us as u64
    } else {
        u64::from(flow.rtt.min_us)
    }
}

fn model_bounds(
    tcp: &[&FlowRecord],
    samples: &[Vec<&SampleRecord>],
    path: Option<&PathFacts>,
) -> Bounds {
    let mss = tcp.first().map_or(0, |f| f.mss);
    let link_bps = path
        .and_then(|p| p.bottleneck_bps)
        .filter(|_| mss > 0)
        .map(|r| bounds::link_goodput_bps(r, mss, 0));
    // Per flow, then summed: parallel streams each get their own window and loss.
    let sum = |per_flow: &dyn Fn(&FlowRecord, &[&SampleRecord]) -> Option<f64>| -> Option<f64> {
        let values: Vec<f64> = tcp
            .iter()
            .zip(samples)
            .filter_map(|(f, s)| per_flow(f, s))
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    Bounds {
        link_bps,
        window_bps: sum(&|f, s| bounds::window_bps(window_bytes(f, s)?, flow_rtt_us(f))),
        mathis_bps: sum(&|f, s| bounds::mathis_bps(f.mss, flow_rtt_us(f), loss_event_rate(f, s)?)),
        pftk_bps: sum(&|f, s| {
            let rto_us = s.last().map_or(0, |s| u64::from(s.info.rto));
            bounds::pftk_bps(
                f.mss,
                flow_rtt_us(f),
                loss_event_rate(f, s)?,
                rto_us,
                2.0,
                window_bytes(f, s),
            )
        }),
    }
}

/// The most a flow could have in flight: the smaller of the receiver's advertised window
/// (its steady median as the sender saw it) and the send buffer (as set, or as large as
/// autotuning grew it).
fn window_bytes(flow: &FlowRecord, samples: &[&SampleRecord]) -> Option<u64> {
    let rwnd = median(
        steady_part(samples)
            .iter()
            .map(|s| f64::from(s.info.snd_wnd)),
    )
    .filter(|w| *w > 0.0)
    .map(|w| w as u64);
    let sndbuf = Some(send_buffer_bytes(flow.sndbuf)).filter(|b| *b > 0);
    match (rwnd, sndbuf) {
        (Some(r), Some(s)) => Some(r.min(s)),
        (r, s) => r.or(s),
    }
}

/// A send buffer as set, or as large as autotuning grew it.
fn send_buffer_bytes(b: BufferSize) -> u64 {
    if b.requested.is_some() {
        b.effective
    } else {
        b.effective.max(b.at_end)
    }
}

/// Loss events (recovery episodes) per data segment sent; `None` with fewer than
/// [`MIN_LOSS_EVENTS`], and for BBR, which does not halve its window on loss as the
/// loss models assume.
fn loss_event_rate(flow: &FlowRecord, samples: &[&SampleRecord]) -> Option<f64> {
    if flow.cc == "bbr" {
        return None;
    }
    let events = recovery_episodes(samples);
    let sent = samples.last()?.info.data_segs_out;
    (events >= MIN_LOSS_EVENTS && sent > 0).then(|| events as f64 / f64::from(sent))
}

/// Spans of consecutive samples in loss recovery or with new retransmissions.
fn recovery_episodes(samples: &[&SampleRecord]) -> u64 {
    let repairing: Vec<bool> = samples
        .iter()
        .enumerate()
        .map(|(k, s)| {
            matches!(s.info.ca_state, CA_RECOVERY | CA_LOSS)
                || (k > 0 && s.info.total_retrans > samples[k - 1].info.total_retrans)
        })
        .collect();
    (0..repairing.len())
        .filter(|&k| repairing[k] && (k == 0 || !repairing[k - 1]))
        .count() as u64
}

fn weighted_limits(tcp: &[&FlowRecord]) -> LimitShares {
    let items: Vec<(LimitShares, f64)> = tcp.iter().map(|f| (f.limits, f.sender_seconds)).collect();
    LimitShares::weighted_mean(&items)
}

fn steady_part<T>(samples: &[T]) -> &[T] {
    &samples[(samples.len() as f64 * STEADY_FROM) as usize..]
}

fn steady(samples: &[&SampleRecord]) -> Steady {
    let part = steady_part(samples);
    let bytes =
        |f: &dyn Fn(&TcpInfo) -> f64| median(part.iter().map(|s| f(&s.info))).unwrap_or(0.0);
    Steady {
        sampled: !part.is_empty(),
        in_flight: bytes(&|i| f64::from(i.unacked) * f64::from(i.snd_mss)),
        cwnd: bytes(&|i| f64::from(i.snd_cwnd) * f64::from(i.snd_mss)),
        rwnd: bytes(&|i| f64::from(i.snd_wnd)),
        unsent: bytes(&|i| f64::from(i.notsent_bytes)),
    }
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn episodes(tcp: &[&FlowRecord], samples: &[Vec<&SampleRecord>]) -> Episodes {
    let mut e = Episodes {
        retransmits: tcp.iter().map(|f| f.retransmits).sum(),
        ..Episodes::default()
    };
    let (mut retransmitted, mut sent) = (0u64, 0u64);
    for flow_samples in samples {
        if let Some(last) = flow_samples.last() {
            retransmitted += u64::from(last.info.total_retrans);
            sent += u64::from(last.info.data_segs_out);
        }
        e.recovery_episodes += recovery_episodes(flow_samples);
        for pair in flow_samples.windows(2) {
            let (a, b) = (&pair[0].info, &pair[1].info);
            let in_slow_start = |i: &TcpInfo| i.snd_cwnd < i.snd_ssthresh;
            // A drop of ssthresh from "infinite" (the first loss) ends slow start too.
            let left = (in_slow_start(a) && !in_slow_start(b))
                || (a.snd_ssthresh >= INFINITE_SSTHRESH && b.snd_ssthresh < INFINITE_SSTHRESH);
            if left {
                e.slow_start_exits += 1;
                let t = pair[1].t_us;
                e.first_slow_start_exit_us =
                    Some(e.first_slow_start_exit_us.map_or(t, |f| f.min(t)));
            }
        }
    }
    e.retransmit_rate = if sent > 0 {
        retransmitted as f64 / sent as f64
    } else {
        0.0
    };
    e
}

/// The pacing rate configured for the TCP flows together, bit/s: the kernel's per
/// socket, or a gap pacer's for the whole direction.
fn pacing_rate_bps(
    run: &RunRecord,
    spec: Option<&PathSpec>,
    direction: Direction,
    streams: usize,
) -> Option<f64> {
    let gap = spec.and_then(|s| match s.link(path_direction(direction)).pace {
        Some(Pace::Rate(bps)) => Some(bps as f64),
        _ => None,
    });
    let kernel = run
        .params
        .tuning
        .pacing_rate
        .map(|r| r as f64 * streams as f64);
    match (gap, kernel) {
        (Some(g), Some(k)) => Some(g.min(k)),
        (g, k) => g.or(k),
    }
}

fn verdict(
    run: &RunRecord,
    tcp: &[&FlowRecord],
    steady: &[Steady],
    limits: LimitShares,
    measured: f64,
    link_bps: Option<f64>,
    pacing_bps: Option<f64>,
) -> Verdict {
    let rate = |bps: f64| format_rate(bps);
    let v = |limit, reason: String| Verdict { limit, reason };
    if tcp.is_empty() {
        return v(
            Limit::App,
            "no TCP flows: UDP senders send at the rate they are given".into(),
        );
    }
    if let Some(p) =
        pacing_bps.filter(|p| link_bps.is_none_or(|l| *p < l) && measured >= REACHED * p)
    {
        return v(
            Limit::Pacing,
            format!(
                "{} measured against {} of pacing configured",
                rate(measured),
                rate(p)
            ),
        );
    }
    let app_rate = run
        .params
        .tuning
        .app_rate
        .map(|r| r as f64 * tcp.len() as f64);
    if let Some(a) = app_rate.filter(|a| measured >= REACHED * a) {
        return v(
            Limit::App,
            format!(
                "{} measured: the application wrote at {}",
                rate(measured),
                rate(a)
            ),
        );
    }
    if let Some(l) = link_bps.filter(|l| measured >= LINK_FULL * l) {
        return v(
            Limit::Link,
            format!(
                "{} measured carries the bottleneck's {} of goodput at {:.0} %",
                rate(measured),
                rate(l),
                100.0 * measured / l
            ),
        );
    }
    if limits.app >= SHARE_DECIDES {
        return v(
            Limit::App,
            format!(
                "the senders had nothing to send {:.0} % of the time",
                100.0 * limits.app
            ),
        );
    }
    // The window arithmetic, flow by flow, weighted by bytes; only where the sender
    // was sampled.
    let mut votes: Vec<(Limit, f64, String)> = Vec::new();
    for (f, s) in tcp.iter().zip(steady).filter(|(_, s)| s.sampled) {
        let (limit, reason) = flow_window_limit(f, s, app_rate.is_some());
        votes.push((limit, f.received_bytes as f64, reason));
    }
    if votes.is_empty() {
        return v(
            Limit::Unknown,
            "no sender's tcp_info was sampled (an iperf3 sender, or --sample-interval 0): its windows are not known".into(),
        );
    }
    let total: f64 = votes.iter().map(|v| v.1).sum();
    let best = [Limit::Rwnd, Limit::Sndbuf, Limit::Cwnd, Limit::App]
        .into_iter()
        .max_by(|a, b| {
            let weight = |l: &Limit| votes.iter().filter(|v| v.0 == *l).map(|v| v.1).sum::<f64>();
            weight(a).total_cmp(&weight(b))
        })
        .expect("four limits");
    let reason = votes
        .iter()
        .find(|v| v.0 == best)
        .map(|v| v.2.clone())
        .unwrap_or_default();
    let share = votes
        .iter()
        .filter(|v| v.0 == best)
        .map(|v| v.1)
        .sum::<f64>()
        / total.max(1.0);
    let of_flows = if tcp.len() > 1 {
        format!(" ({:.0} % of the bytes' flows)", 100.0 * share)
    } else {
        String::new()
    };
    v(best, format!("{reason}{of_flows}"))
}

/// What held one flow back, from its steady state and its limit shares; `app_paced`:
/// the application paces its writes (`--app-rate`).
fn flow_window_limit(f: &FlowRecord, s: &Steady, app_paced: bool) -> (Limit, String) {
    let size = |b: f64| format_size(b as u64);
    if f.limits.rwnd >= SHARE_DECIDES || (s.rwnd > 0.0 && s.in_flight >= 0.85 * s.rwnd) {
        return (
            Limit::Rwnd,
            format!(
                "{} in flight fills the receiver's advertised window of {} (receive-window-limited {:.0} % of the time)",
                size(s.in_flight),
                size(s.rwnd),
                100.0 * f.limits.rwnd
            ),
        );
    }
    let room = s
        .cwnd
        .min(if s.rwnd > 0.0 { s.rwnd } else { f64::INFINITY });
    let mss = f64::from(f.mss.max(1));
    let nothing_to_send = s.in_flight <= 0.8 * room && s.unsent < mss;
    if app_paced && nothing_to_send && f.limits.sndbuf < SHARE_DECIDES {
        return (
            Limit::App,
            format!(
                "{} in flight with room for {} in both windows and nothing left unsent: the application, pacing its writes, fell behind its rate",
                size(s.in_flight),
                size(room)
            ),
        );
    }
    if f.limits.sndbuf >= SHARE_DECIDES || nothing_to_send {
        return (
            Limit::Sndbuf,
            format!(
                "{} in flight with room for {} in both windows and nothing left unsent: the send buffer ({}) held no more",
                size(s.in_flight),
                size(room),
                size(send_buffer_bytes(f.sndbuf) as f64)
            ),
        );
    }
    (
        Limit::Cwnd,
        format!(
            "{} in flight ≈ the congestion window of {}: the network (loss, the queue) held the sender back",
            size(s.in_flight),
            size(s.cwnd)
        ),
    )
}

/// Runs every detector, adding findings and recommendations.
fn detect(
    run: &RunRecord,
    tcp: &[&FlowRecord],
    steady: &[Steady],
    direction: Direction,
    e: &mut Explanation,
) {
    let bdp = e.path.as_ref().and_then(|p| p.bdp_bytes);
    let t = &run.params.tuning;
    let mut find = |kind, message: String, recommendation: Option<String>| {
        e.findings.push(Finding { kind, message });
        if let Some(r) = recommendation {
            e.recommendations.push(r);
        }
    };
    // Buffers below the BDP, with the doubling spelled out.
    for (name, requested_flag, buffer, requested) in [
        ("send", "--sndbuf", e.tunings.sndbuf, t.sndbuf),
        ("receive", "--rcvbuf", e.tunings.rcvbuf, t.rcvbuf),
    ] {
        if let Some(cap) = buffer.capped_at {
            let sysctl = if name == "send" {
                "wmem_max"
            } else {
                "rmem_max"
            };
            find(
                "buffer_capped",
                format!(
                    "the {name} buffer request was capped by net.core.{sysctl} at {}",
                    format_size(cap)
                ),
                Some(format!(
                    "raise net.core.{sysctl} (sysctl -w net.core.{sysctl}=…) above the buffer you request"
                )),
            );
        }
        let (Some(bdp), Some(requested)) = (bdp, requested) else {
            continue;
        };
        if buffer.effective < bdp {
            find(
                "buffer_below_bdp",
                format!(
                    "the {name} buffer is below the path's BDP: requested {} became {} effective (Linux doubles a request to cover its bookkeeping); the BDP is {}",
                    format_size(requested),
                    format_size(buffer.effective),
                    format_size(bdp)
                ),
                Some(format!(
                    "set the {name} buffer to ≥ {} ({requested_flag}, or -w for both): requested {} became {} effective; the BDP is {}",
                    format_size(bdp),
                    format_size(requested),
                    format_size(buffer.effective),
                    format_size(bdp)
                )),
            );
        }
    }
    // Nagle with writes below the MSS: each small write may wait for the ACK of the
    // previous one, which the receiver delays (up to 40 ms on Linux).
    let mss = e.tunings.mss;
    let smallest_bound = e.bounds.binding().map(|b| b.1);
    if !t.nodelay && mss > 0 && t.write_size < mss {
        let stalled = smallest_bound.is_some_and(|b| e.measured_bps < 0.5 * b);
        if stalled {
            find(
                "nagle_delayed_ack",
                format!(
                    "writes of {} are below the MSS ({mss} B) with Nagle on, and the throughput is under half the smallest bound: a small write waits for the ACK of the previous one, which the receiver may delay up to 40 ms",
                    format_size(u64::from(t.write_size))
                ),
                Some("turn Nagle off (--no-delay, TCP_NODELAY) or write at least an MSS at a time".into()),
            );
        }
    }
    // Bursts and queue overflow at the bottleneck.
    if let Some(p) = &run.path {
        let stats = match direction {
            Direction::Up => &p.up,
            Direction::Down => &p.down,
        };
        let overflowed: u64 = stats.links.iter().map(|l| l.counters.dropped_queue).sum();
        if overflowed > 0 {
            let bursts = stats
                .bursts
                .iter()
                .find(|b| b.flow.starts_with("tcp"))
                .map(|b| format!("; the busiest flow arrived in bursts of {:.1} packets on average (longest {})", b.burst_mean, b.burst_max))
                .unwrap_or_default();
            let unpaced = e.tunings.pacing == "none";
            find(
                "queue_overflow",
                format!("the bottleneck queue overflowed: {overflowed} packets dropped{bursts}"),
                unpaced.then(|| {
                    let rate = e
                        .path
                        .as_ref()
                        .and_then(|p| p.bottleneck_bps)
                        .map(|r| format!(" at about 95 % of the link ({})", format_rate(r as f64 * 0.95 / tcp.len().max(1) as f64)))
                        .unwrap_or_default();
                    let bbr = if e.tunings.cc == "bbr" { "" } else { " or use BBR (-C bbr)" };
                    format!("pace the senders (--fq-rate{rate} per flow, or a gap pacer: `pace` in the path){bbr} to keep the queue from overflowing")
                }),
            );
        }
    }
    // Parallel streams sharing unevenly.
    if tcp.len() > 1 {
        let rates: Vec<f64> = tcp.iter().map(|f| f.received_bps).collect();
        if let Some(j) = jain(&rates).filter(|j| *j < UNFAIR_BELOW) {
            let list: Vec<String> = rates.iter().map(|r| format_rate(*r)).collect();
            find(
                "unfair_streams",
                format!(
                    "the {} streams shared unevenly: Jain's index {j:.2} ({})",
                    tcp.len(),
                    list.join(", ")
                ),
                None,
            );
        }
    }
    if e.limits.rwnd >= SHARE_NOTED {
        let rwnd = steady.iter().map(|s| s.rwnd).fold(0.0, f64::max);
        find(
            "receiver_limited",
            format!(
                "the receiver's window limited the senders {:.0} % of the time (advertised {})",
                100.0 * e.limits.rwnd,
                format_size(rwnd as u64)
            ),
            bdp.map(|b| format!("let the receiver advertise ≥ the BDP of {}: a larger --rcvbuf, or leave it to autotuning (tcp_rmem's maximum)", format_size(b))),
        );
    }
    if e.limits.app >= SHARE_NOTED {
        find(
            "application_limited",
            format!(
                "the application had nothing to send {:.0} % of the time",
                100.0 * e.limits.app
            ),
            None,
        );
    }
    if e.episodes.retransmits > 0 && e.verdict.limit == Limit::Cwnd {
        let mathis = e
            .bounds
            .mathis_bps
            .map(|m| format!("; Mathis' model allows {}", format_rate(m)))
            .unwrap_or_default();
        find(
            "loss",
            format!(
                "{} segments retransmitted ({:.3} % of those sent) in {} recovery episodes{mathis}",
                e.episodes.retransmits,
                100.0 * e.episodes.retransmit_rate,
                e.episodes.recovery_episodes
            ),
            (e.tunings.cc != "bbr").then(|| {
                "loss bounds a loss-based sender (cubic, reno) at about MSS/RTT·1.22/√p: find the loss, or try BBR (-C bbr), which does not read loss as congestion".to_string()
            }),
        );
    }
    if let Some(t) = e.episodes.first_slow_start_exit_us {
        find(
            "slow_start",
            format!(
                "the first sender left slow start at {}{}",
                format_duration_us(t.max(0) as u64),
                match e.episodes.slow_start_exits {
                    1 => String::new(),
                    n => format!(" ({n} exits in all)"),
                }
            ),
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        ClockOffset, HostMeta, IntervalRecord, PathRecord, RttStats, RunStatus, Summary, TestParams,
    };

    const MSS: u32 = 1448;

    /// A bulk flow up, 10 s, cubic, a 4 MiB send buffer, 10 ms of smoothed RTT.
    fn flow(id: u32, received_bps: f64) -> FlowRecord {
        FlowRecord {
            id,
            host: None,
            direction: Direction::Up,
            client_addr: String::new(),
            server_addr: String::new(),
            cc: "cubic".into(),
            mss: MSS,
            sndbuf: BufferSize {
                effective: 4 << 20,
                at_end: 4 << 20,
                ..BufferSize::default()
            },
            rcvbuf: BufferSize::default(),
            sent_bytes: (received_bps * 10.0 / 8.0) as u64,
            received_bytes: (received_bps * 10.0 / 8.0) as u64,
            sent_bps: received_bps,
            received_bps,
            sender_seconds: 10.0,
            receiver_seconds: 10.0,
            retransmits: 0,
            samples: 0,
            receiver_samples: 0,
            limits: LimitShares {
                cwnd: 1.0,
                ..LimitShares::default()
            },
            rtt: RttStats {
                min_us: 10_000,
                mean_us: 10_000.0,
                max_us: 10_000,
            },
            udp: None,
            timed: None,
        }
    }

    /// Ten sender samples of flow 0, 10 ms apart, 1000 segments each: `in_flight`,
    /// `cwnd` and `rwnd` in bytes, and `unsent` bytes written but not yet sent.
    fn steady_samples(in_flight: u32, cwnd: u32, rwnd: u32, unsent: u32) -> Vec<SampleRecord> {
        (0..10)
            .map(|k| {
                sample(k, |i| {
                    i.unacked = in_flight / MSS;
                    i.snd_cwnd = cwnd / MSS;
                    i.snd_wnd = rwnd;
                    i.notsent_bytes = unsent;
                    i.data_segs_out = 1000 * (k as u32 + 1);
                })
            })
            .collect()
    }

    fn sample(k: i64, set: impl Fn(&mut TcpInfo)) -> SampleRecord {
        let mut info = TcpInfo {
            snd_mss: MSS,
            snd_ssthresh: INFINITE_SSTHRESH,
            rto: 204_000,
            ..TcpInfo::default()
        };
        set(&mut info);
        SampleRecord {
            flow: 0,
            host: crate::record::Host::Client,
            t_us: k * 10_000,
            info,
            bbr: None,
        }
    }

    fn run(spec: &str, flows: Vec<FlowRecord>, samples: Vec<SampleRecord>) -> RunRecord {
        RunRecord {
            schema: String::new(),
            tool_version: String::new(),
            label: None,
            tags: Vec::new(),
            status: RunStatus::Done,
            error: None,
            started_unix_us: 0,
            target: String::new(),
            params: TestParams::default(),
            client: HostMeta::default(),
            server: HostMeta::default(),
            clock: ClockOffset::default(),
            summary: Summary::default(),
            // Each flow's 10 s in one interval, at its rate.
            intervals: flows
                .iter()
                .map(|f| IntervalRecord {
                    flow: f.id,
                    index: 0,
                    start_us: 0,
                    end_us: (f.receiver_seconds * 1e6) as u64,
                    acked_bytes: f.sent_bytes,
                    received_bytes: f.received_bytes,
                    retransmits: f.retransmits,
                    cwnd: 0,
                    srtt_us: 0,
                    limits: f.limits,
                    udp: None,
                    drain: false,
                })
                .collect(),
            flows,
            path: Some(PathRecord {
                spec: spec.into(),
                ..PathRecord::default()
            }),
            samples,
        }
    }

    #[test]
    fn a_64k_receive_window_at_10ms_binds_at_52_4_mbit() {
        let r = run(
            "rtt 10ms rate 1gbit",
            vec![flow(0, 50e6)],
            steady_samples(65_160, 400 * MSS, 65_536, 1 << 20),
        );
        let e = explain(&r);
        // 65536 B · 8 / 10 ms = 52 428 800 bit/s, under the link's 965 Mbit/s goodput.
        assert_eq!(e.bounds.window_bps, Some(52_428_800.0));
        assert_eq!(e.bounds.binding(), Some(("window", 52_428_800.0)));
        assert_eq!(e.verdict.limit, Limit::Rwnd, "{}", e.verdict.reason);
        let p = e.path.unwrap();
        assert_eq!((p.base_rtt_us, p.bdp_bytes), (10_000, Some(1_250_000)));
        // The default queue: 1000 packets of the 1500-byte MTU.
        assert_eq!(p.queue_bytes, Some(1_500_000));
    }

    #[test]
    fn room_in_both_windows_and_nothing_unsent_is_the_send_buffer() {
        let mut f = flow(0, 40e6);
        f.sndbuf = BufferSize {
            requested: Some(32 << 10),
            effective: 64 << 10,
            capped_at: None,
            at_end: 64 << 10,
        };
        let mut r = run(
            "rtt 20ms rate 100mbit",
            vec![f],
            steady_samples(60_000, 200 * MSS, 1 << 20, 0),
        );
        r.params.tuning.sndbuf = Some(32 << 10);
        let e = explain(&r);
        assert_eq!(e.verdict.limit, Limit::Sndbuf, "{}", e.verdict.reason);
        // The window bound is the effective buffer per RTT: 65536 · 8 / 10 ms.
        assert_eq!(e.bounds.window_bps, Some(52_428_800.0));
        let finding = e
            .findings
            .iter()
            .find(|f| f.kind == "buffer_below_bdp")
            .expect("buffer finding");
        assert!(
            finding
                .message
                .contains("requested 32 KiB became 64 KiB effective")
                && finding.message.contains("BDP is 244 KiB"),
            "{}",
            finding.message
        );
        assert!(e.recommendations[0].starts_with("set the send buffer to ≥ 244 KiB"));
    }

    #[test]
    fn a_real_network_is_its_measured_round_trip_and_no_bdp() {
        let mut slower = flow(1, 30e6);
        slower.rtt = RttStats {
            min_us: 9_000,
            mean_us: 14_000.0,
            max_us: 20_000,
        };
        let mut r = run("", vec![flow(0, 30e6), slower], Vec::new());
        r.path = None;
        r.target = "mcr.example.net:5201".into();
        let e = explain(&r);
        assert_eq!(e.path, None);
        assert_eq!(
            e.real_path,
            Some(RealPath {
                target: "mcr.example.net:5201".into(),
                min_rtt_us: 9_000,
                mean_rtt_us: 12_000,
            })
        );
        assert!(e.findings.iter().all(|f| f.kind != "buffer_below_bdp"));
        // A lab run has its configured path instead.
        let lab = run("rtt 10ms rate 1gbit", vec![flow(0, 30e6)], Vec::new());
        assert_eq!(explain(&lab).real_path, None);
    }

    #[test]
    fn an_unsampled_sender_gets_no_window_verdict() {
        // An iperf3 sender (`run --iperf3 -R`): our end received, nobody sampled the
        // sender. Its zeros must not read as "nothing in flight: the send buffer".
        let r = run("rtt 10ms rate 1gbit", vec![flow(0, 20e6)], Vec::new());
        let e = explain(&r);
        assert_eq!(e.verdict.limit, Limit::Unknown, "{}", e.verdict.reason);
        assert!(e.verdict.reason.contains("no sender's tcp_info"));
        // The link still decides where it was full.
        let full = run("rtt 10ms rate 100mbit", vec![flow(0, 94e6)], Vec::new());
        assert_eq!(explain(&full).verdict.limit, Limit::Link);
    }

    #[test]
    fn a_full_congestion_window_with_repeated_loss_is_cwnd_and_meets_mathis() {
        // In flight = cwnd, data waiting; in recovery at samples 2, 5 and 7–8: 3
        // episodes, too few for the loss models, then a fourth.
        let mut samples = steady_samples(100 * MSS, 100 * MSS, 1 << 22, 1 << 20);
        for k in [2, 5, 7, 8] {
            samples[k].info.ca_state = CA_RECOVERY;
        }
        let r = run("rtt 10ms rate 1gbit", vec![flow(0, 20e6)], samples.clone());
        let e = explain(&r);
        assert_eq!(e.verdict.limit, Limit::Cwnd, "{}", e.verdict.reason);
        assert_eq!(e.episodes.recovery_episodes, 3);
        assert_eq!(e.bounds.mathis_bps, None);
        samples[0].info.ca_state = CA_LOSS;
        let e = explain(&run("rtt 10ms rate 1gbit", vec![flow(0, 20e6)], samples));
        assert_eq!(e.episodes.recovery_episodes, 4);
        // 4 loss events in 10 000 segments at 10 ms.
        let mathis = bounds::mathis_bps(MSS, 10_000, 4.0 / 10_000.0);
        assert_eq!(e.bounds.mathis_bps, mathis);
        let pftk = bounds::pftk_bps(MSS, 10_000, 4e-4, 204_000, 2.0, Some(1 << 22));
        assert_eq!(e.bounds.pftk_bps, pftk);
    }

    #[test]
    fn a_full_link_pacing_and_the_application_are_named_before_the_windows() {
        let busy = || steady_samples(100 * MSS, 100 * MSS, 1 << 22, 1 << 20);
        // 100 Mbit/s of 1448-byte segments carry 96.5 Mbit/s; 92 is 95 % of it.
        let e = explain(&run("rtt 10ms rate 100mbit", vec![flow(0, 92e6)], busy()));
        assert_eq!(e.verdict.limit, Limit::Link, "{}", e.verdict.reason);
        let mut r = run("rtt 10ms rate 100mbit", vec![flow(0, 48e6)], busy());
        r.params.tuning.pacing_rate = Some(50_000_000);
        assert_eq!(explain(&r).verdict.limit, Limit::Pacing);
        let gap = run(
            "rtt 10ms rate 100mbit up.pace 50mbit",
            vec![flow(0, 48e6)],
            busy(),
        );
        assert_eq!(explain(&gap).verdict.limit, Limit::Pacing);
        let mut r = run("rtt 10ms rate 100mbit", vec![flow(0, 19e6)], busy());
        r.params.tuning.app_rate = Some(20_000_000);
        assert_eq!(explain(&r).verdict.limit, Limit::App);
        // An application pacing its writes that falls behind leaves nothing unsent:
        // the application, not the send buffer.
        let mut r = run(
            "rtt 10ms rate 1gbit",
            vec![flow(0, 500e6)],
            steady_samples(400_000, 1 << 20, 1 << 21, 0),
        );
        r.params.tuning.app_rate = Some(930_000_000);
        assert_eq!(explain(&r).verdict.limit, Limit::App);
        r.params.tuning.app_rate = None;
        assert_eq!(explain(&r).verdict.limit, Limit::Sndbuf);
        // Pacing that was not reached is not the limit.
        let mut r = run("rtt 10ms rate 100mbit", vec![flow(0, 10e6)], busy());
        r.params.tuning.pacing_rate = Some(50_000_000);
        assert_eq!(explain(&r).verdict.limit, Limit::Cwnd);
    }

    #[test]
    fn detectors_find_nagle_stalls_and_unfair_streams() {
        let mut r = run(
            "rtt 10ms rate 1gbit",
            vec![flow(0, 1e6)],
            steady_samples(2_000, 10 * MSS, 1 << 20, 0),
        );
        r.params.tuning.write_size = 100;
        let e = explain(&r);
        assert!(
            e.findings.iter().any(|f| f.kind == "nagle_delayed_ack"),
            "{e:?}"
        );
        r.params.tuning.nodelay = true;
        assert!(!explain(&r)
            .findings
            .iter()
            .any(|f| f.kind == "nagle_delayed_ack"));

        // 90 and 10 Mbit/s: Jain = 100² / (2 · (90² + 10²)) = 0.61.
        let r = run(
            "rtt 10ms rate 1gbit",
            vec![flow(0, 90e6), flow(1, 10e6)],
            Vec::new(),
        );
        let e = explain(&r);
        let unfair = e
            .findings
            .iter()
            .find(|f| f.kind == "unfair_streams")
            .unwrap();
        assert!(unfair.message.contains("0.61"), "{}", unfair.message);
    }

    #[test]
    fn slow_start_ends_when_the_window_reaches_ssthresh_or_loss_sets_it() {
        let mut samples = steady_samples(10 * MSS, 10 * MSS, 1 << 20, 1 << 20);
        // ssthresh falls from "infinite" at sample 3: the first exit.
        for s in &mut samples[3..] {
            s.info.snd_ssthresh = 50;
        }
        // A timeout at sample 6 restarts slow start (cwnd 1 < 50); cwnd 60 at 8.
        samples[6].info.snd_cwnd = 1;
        samples[7].info.snd_cwnd = 20;
        samples[8].info.snd_cwnd = 60;
        samples[9].info.snd_cwnd = 61;
        let e = explain(&run("rtt 10ms", vec![flow(0, 1e6)], samples));
        assert_eq!(e.episodes.slow_start_exits, 2);
        assert_eq!(e.episodes.first_slow_start_exit_us, Some(30_000));
        // No rate limit: no link bound and no BDP.
        assert_eq!(e.bounds.link_bps, None);
        assert_eq!(e.path.unwrap().bdp_bytes, None);
    }
}
