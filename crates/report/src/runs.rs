//! One run over time: throughput ([`crate::rates`]), the senders' tcp_info (cwnd and
//! ssthresh, smoothed RTT, bytes in flight), what limited them, UDP loss and jitter, and
//! the bottleneck queue moved onto the run's time base.

use tcplab_analysis::explain::explain;
use tcplab_analysis::links::{flow_links, hop_rate, Trains};
use tcplab_netsim::capture::CapturedPacket;
use tcplab_netsim::path::PathSpec;
use tcplab_record::events::KernelEvent;
use tcplab_record::topology::hop_name;
use tcplab_record::units::{count, format_duration_us, format_rate, format_size};
use tcplab_record::Limit;
use tcplab_record::{
    DelaySample, Direction, DirectionStats, FlowRecord, ProbeRecord, QueueSample, RunRecord,
    SampleRecord, UdpInterval,
};

use crate::axes::Quantity;
use crate::chart::{Body, Chart, Edge, Node, Pt, Series, XAxis, YAxis};
use crate::describe::{self, flow_name};
use crate::palette::{Palette, ALL_FLOWS, TOTAL};
use crate::rates::{self, Cell, Rates, Source};
use crate::sequence;
use crate::watched;

/// Linux's "no threshold yet" ssthresh (TCP_INFINITE_SSTHRESH): not a value to plot.
pub const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// A trace longer than this is thinned (keeping each bucket's peak) before drawing: a
/// chart is some 700 pixels wide.
const MAX_TRACE_POINTS: usize = 1500;

/// A run's charts, in drawing order: the one registry of their names (`plot --chart`,
/// the report, the docs' table and their tests read it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunChart {
    Throughput,
    Cwnd,
    Rtt,
    Inflight,
    Limits,
    UdpLoss,
    UdpJitter,
    Queue,
    Topology,
    Links,
    Trains,
    Latency,
    Delay,
    Tseq,
}

impl RunChart {
    pub const ALL: [RunChart; 14] = [
        RunChart::Throughput,
        RunChart::Cwnd,
        RunChart::Rtt,
        RunChart::Inflight,
        RunChart::Limits,
        RunChart::UdpLoss,
        RunChart::UdpJitter,
        RunChart::Queue,
        RunChart::Topology,
        RunChart::Links,
        RunChart::Trains,
        RunChart::Latency,
        RunChart::Delay,
        RunChart::Tseq,
    ];

    /// Its name for `--chart`.
    pub fn name(self) -> &'static str {
        match self {
            RunChart::Throughput => "throughput",
            RunChart::Cwnd => "cwnd",
            RunChart::Rtt => "rtt",
            RunChart::Inflight => "inflight",
            RunChart::Limits => "limits",
            RunChart::UdpLoss => "udp_loss",
            RunChart::UdpJitter => "udp_jitter",
            RunChart::Queue => "queue",
            RunChart::Topology => "topology",
            RunChart::Links => "links",
            RunChart::Trains => "trains",
            RunChart::Latency => "latency",
            RunChart::Delay => "delay",
            RunChart::Tseq => "tseq",
        }
    }

    fn title(self) -> &'static str {
        match self {
            RunChart::Throughput => "throughput over time",
            RunChart::Cwnd => "congestion window",
            RunChart::Rtt => "smoothed RTT",
            RunChart::Inflight => "bytes in flight",
            RunChart::Limits => "what limited the senders",
            RunChart::UdpLoss => "UDP loss",
            RunChart::UdpJitter => "UDP jitter",
            RunChart::Queue => "bottleneck queue",
            RunChart::Topology => "the topology and each link's load",
            RunChart::Links => "what each link carried",
            RunChart::Trains => "the trains each flow reached each link in",
            RunChart::Latency => "latency under load",
            RunChart::Delay => "one-way delay",
            RunChart::Tseq => "time-sequence graph",
        }
    }
}

/// What a run's charts may show beyond its record: the packets of its capture, read
/// back, and how to draw its time-sequence graph.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    pub packets: Option<Vec<CapturedPacket>>,
    /// The flow of the time-sequence graph: the first TCP flow unless given.
    pub flow: Option<u32>,
    /// The time-sequence graph's span, seconds since t0: the whole transfer unless given.
    pub zoom: Option<(f64, f64)>,
}

/// The charts of run `id` that have something to show. `run` needs its samples for the
/// tcp_info charts, `evidence` its packets for the time-sequence graph.
pub fn charts(id: i64, run: &RunRecord, evidence: &Evidence, palette: &mut Palette) -> Vec<Chart> {
    let of = Run {
        run,
        time: XAxis::time(end_seconds(run)),
        tcp: run.flows.iter().filter(|f| f.udp.is_none()).collect(),
        udp: run.flows.iter().filter(|f| f.udp.is_some()).collect(),
        evidence,
    };
    let context = context(id, run);
    RunChart::ALL
        .into_iter()
        .filter_map(|which| {
            let (what, body) = of.chart(which, palette)?;
            Some(Chart {
                id: which.name().to_owned(),
                title: format!("Run {id}: {}", which.title()),
                caption: format!("{what} {context}"),
                body,
            })
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// A run with what its charts share.
struct Run<'a> {
    run: &'a RunRecord,
    /// The time axis every chart of the run has, so they line up.
    time: XAxis,
    tcp: Vec<&'a FlowRecord>,
    udp: Vec<&'a FlowRecord>,
    evidence: &'a Evidence,
}

impl Run<'_> {
    /// Chart `which`'s caption (what it draws) and body; `None` where the run has
    /// nothing for it.
    fn chart(&self, which: RunChart, palette: &mut Palette) -> Option<(String, Body)> {
        let run = self.run;
        Some(match which {
            RunChart::Throughput => {
                let rates = rates::rates(run)?;
                let (mut series, mut what) = throughput(run, &rates, &self.tcp, palette);
                let offered = capacity(run, palette);
                if !offered.is_empty() {
                    what += " Dashed: what the trace bottleneck offered, per 100 ms (its packet opportunities, used or not, as IP bytes).";
                }
                series.extend(offered);
                (what, self.lines("throughput", Quantity::Rate, series))
            }
            RunChart::Cwnd => {
                let from_events = self.tcp.iter().any(|f| !sender_probes(run, f).is_empty());
                let mut windows = Vec::new();
                for f in &self.tcp {
                    let (cwnd, ssthresh) = if from_events {
                        event_windows(run, f)
                    } else {
                        let cwnd = sender_trace(run, f, &|s| Some(f64::from(s.info.snd_cwnd)));
                        let ssthresh = sender_trace(run, f, &|s| {
                            (s.info.snd_ssthresh < INFINITE_SSTHRESH)
                                .then_some(f64::from(s.info.snd_ssthresh))
                        });
                        (cwnd, ssthresh)
                    };
                    windows.push(flow_series(palette, " cwnd", false, f, cwnd));
                    windows.push(flow_series(palette, " ssthresh", true, f, ssthresh));
                }
                let source = if from_events {
                    "at every change, from the kernel's tcp_probe events (--trace-events; each change at the segment whose processing made it; drawn as each pixel's lowest and highest value)"
                } else {
                    "from tcp_info"
                };
                (
                    format!("The senders' congestion window (solid) and slow-start threshold (dashed, once set) {source}, in segments."),
                    self.lines("segments", Quantity::Number, windows),
                )
            }
            RunChart::Rtt => {
                let mut rtt = self.per_sender(palette, &|s| {
                    (s.info.rtt > 0).then_some(f64::from(s.info.rtt))
                });
                let path = path_rtt(run, palette);
                let what = match path {
                    Some(_) => ", over the path's own round trip as its schedule changes it (dashed)",
                    None => "",
                };
                rtt.extend(path);
                (
                    format!("The senders' smoothed round-trip time (tcp_info rtt), queueing included{what}."),
                    self.lines("smoothed RTT", Quantity::Duration, rtt),
                )
            }
            RunChart::Inflight => {
                let inflight = self.per_sender(palette, &|s| {
                    Some(f64::from(s.info.unacked) * f64::from(s.info.snd_mss))
                });
                (
                    "Bytes sent and not yet acknowledged (tcp_info unacked × snd_mss) per sender.".into(),
                    self.lines("in flight", Quantity::Size, inflight),
                )
            }
            RunChart::Limits => (
                "Share of each report interval the senders spent limited by the receive window (rwnd), their send buffer (sndbuf), the congestion window (cwnd), a pacing rate (pacing) or the application (app), from their tcp_info samples (the kernel's busy and limited timers where a sender was not sampled), averaged over the TCP flows.".into(),
                limits(run, &self.tcp, self.time.clone(), palette)?,
            ),
            RunChart::UdpLoss => {
                let loss = self.per_udp_flow(palette, &|u| {
                    (u.sent > 0).then(|| u.lost as f64 / u.sent as f64)
                });
                (
                    "Datagrams lost per report interval, as a share of those sent in it (sequence numbers the receiver never saw).".into(),
                    self.lines("lost", Quantity::Percent, loss),
                )
            }
            RunChart::UdpJitter => {
                let jitter = self.per_udp_flow(palette, &|u| Some(u.jitter_us));
                (
                    "RFC 3550 interarrival jitter at the end of each report interval.".into(),
                    self.lines("jitter", Quantity::Duration, jitter),
                )
            }
            RunChart::Tseq => {
                let e = self.evidence;
                let flow = match e.flow {
                    Some(id) => self.tcp.iter().find(|f| f.id == id)?,
                    None => self.tcp.first()?,
                };
                sequence::chart(run, flow, e.packets.as_deref()?, e.zoom, palette)?
            }
            RunChart::Latency => {
                let latency = run.summary.latency.as_ref()?;
                let idle = latency
                    .idle_rtt_us
                    .map(|q| {
                        format!(
                            " The idle path's median, before the load: {}.",
                            format_duration_us(q.p50 as u64)
                        )
                    })
                    .unwrap_or_default();
                (
                    format!("Each round-trip probe's round trip (solid) and one-way delays up and down (dashed; they add up to it), at the time it was sent, one every {}.{idle}", format_duration_us(latency.interval_us)),
                    self.lines("delay", Quantity::Duration, probe_series(run, palette)),
                )
            }
            RunChart::Delay => (
                "The one-way delay of the data packets across the emulator (read on the sender's side to written on the receiver's), per 100 ms in each direction carrying data: their mean (solid) and the largest (dashed), moved onto the test's time base.".into(),
                self.lines("one-way delay", Quantity::Duration, delay(run, palette)),
            ),
            RunChart::Queue => {
                let end = self.time.span.map_or(0.0, |s| s.1);
                let what = match run.path.as_ref().and_then(|p| p.topology.as_ref()) {
                    Some(_) => "Bytes waiting in each queue of the topology's links that held any, each way (sampled every 10 ms by the emulator, moved onto the test's time base).",
                    None => "Bytes waiting in the emulated bottleneck's queue (sampled every millisecond by the emulator, moved onto the test's time base).",
                };
                (
                    what.into(),
                    self.lines("queue", Quantity::Size, queue(run, end, palette)),
                )
            }
            RunChart::Topology => topology(run)?,
            RunChart::Links => links(run, palette)?,
            RunChart::Trains => trains(run, palette)?,
        })
    }

    fn lines(&self, label: &str, quantity: Quantity, series: Vec<Series>) -> Body {
        Body::Lines {
            x: self.time.clone(),
            y: YAxis {
                label: label.into(),
                quantity,
            },
            series,
        }
    }

    /// One series per TCP flow of a value of its sender's samples.
    fn per_sender(
        &self,
        palette: &mut Palette,
        value: &dyn Fn(&SampleRecord) -> Option<f64>,
    ) -> Vec<Series> {
        self.tcp
            .iter()
            .map(|f| flow_series(palette, "", false, f, sender_trace(self.run, f, value)))
            .collect()
    }

    /// One series per UDP flow of a value of its intervals.
    fn per_udp_flow(
        &self,
        palette: &mut Palette,
        value: &dyn Fn(&UdpInterval) -> Option<f64>,
    ) -> Vec<Series> {
        self.udp
            .iter()
            .map(|f| {
                let points = steps(self.run, f.id, &|i| i.udp.as_ref().and_then(value));
                flow_series(palette, "", false, f, points)
            })
            .collect()
    }
}

/// A flow's series, `suffix` after its name, in its colour.
fn flow_series(
    palette: &mut Palette,
    suffix: &str,
    dashed: bool,
    f: &FlowRecord,
    points: Vec<Pt>,
) -> Series {
    Series {
        name: format!("{}{suffix}", flow_name(f)),
        color: palette.color(&flow_name(f)),
        dashed,
        points,
    }
}

/// The run, its path and its flows, for captions.
fn context(id: i64, run: &RunRecord) -> String {
    let label = run
        .label
        .as_deref()
        .map(|l| format!(" \"{}\"", l.trim()))
        .unwrap_or_default();
    let path = match (&run.path, &run.watch) {
        (Some(p), _) => match &p.topology {
            Some(t) => format!(
                "topology {} ({})",
                t.file,
                count(t.links.len() as u64, "link")
            ),
            None => format!("path \"{}\"", p.spec),
        },
        (None, Some(_)) => "no emulated path (the host's own network, or its namespace's)".into(),
        (None, None) => format!("no emulated path (server {})", run.target),
    };
    if let Some(watch) = &run.watch {
        return format!(
            "Run {id}{label}: {path}; watched by {}, sampled every {}; the connections lasting {} or more, each named by its number in the run's table, its program and its ends (sender → receiver).",
            watched::what(watch),
            format_duration_us(run.params.sample_interval_us),
            format_duration_us(watched::Length::long_from_us(run.params.sample_interval_us)),
        );
    }
    // Equal flows once, counted: a dumbbell of 64 flows is one phrase, not 64.
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for f in &run.flows {
        let kind = if f.udp.is_some() {
            "udp".to_owned()
        } else {
            format!("{} mss {}", f.cc, f.mss)
        };
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
    }
    let kinds: Vec<String> = kinds
        .into_iter()
        .map(|(kind, n)| match n {
            1 => kind,
            n => format!("{n} × {kind}"),
        })
        .collect();
    format!(
        "Run {id}{label}: {path}; {}; flows as run: {}.",
        describe::params(&run.params),
        kinds.join(", ")
    )
}

/// The path's own round trip (its delays both ways) from t0 to the run's end, where its
/// schedule changes it: a step at each change. None with a delay trace: its delays are
/// in its file, not in the record, and the schedule's alone would mislead.
fn path_rtt(run: &RunRecord, palette: &mut Palette) -> Option<Series> {
    let path = run.path.as_ref()?;
    let spec: PathSpec = path.spec.parse().ok()?;
    if spec.up.delay_trace.is_some() || spec.down.delay_trace.is_some() {
        return None;
    }
    let start_us = path.test_start_us?;
    let (up, down) = (spec.timeline(Direction::Up), spec.timeline(Direction::Down));
    let rtt_at = |t: u64| (up.at(t).0.delay_us + down.at(t).0.delay_us) as f64;
    let end = end_seconds(run);
    let mut points = Vec::new();
    let mut t = 0;
    loop {
        let rtt = rtt_at(t);
        points.push(Pt::at(
            emulator_seconds(run, start_us + t).unwrap_or(0.0),
            rtt,
        ));
        let next = [up.at(t).1, down.at(t).1].into_iter().flatten().min();
        match next.and_then(|n| Some((n, emulator_seconds(run, start_us + n)?))) {
            Some((n, x)) if x < end => {
                points.push(Pt::at(x, rtt));
                t = n;
            }
            _ => {
                points.push(Pt::at(end, rtt));
                break;
            }
        }
    }
    if points.iter().all(|p| p.y == points[0].y) {
        return None;
    }
    let name = "path RTT".to_owned();
    Some(Series {
        color: palette.color(&name),
        name,
        dashed: true,
        points,
    })
}

/// The end of the run's last interval or sample, seconds since t0.
fn end_seconds(run: &RunRecord) -> f64 {
    let intervals = run.intervals.iter().map(|i| i.end_us as f64);
    let samples = run.samples.iter().map(|s| s.t_us as f64);
    seconds(intervals.chain(samples).fold(1.0, f64::max))
}

/// Seconds since t0.
fn seconds(us: f64) -> f64 {
    us / 1e6
}

/// A value of each of the flow's sender's samples, in time order.
fn sender_trace(
    run: &RunRecord,
    flow: &FlowRecord,
    value: &dyn Fn(&SampleRecord) -> Option<f64>,
) -> Vec<Pt> {
    let host = flow.direction.sender();
    let points: Vec<Pt> = run
        .samples
        .iter()
        .filter(|s| s.flow == flow.id && s.host == host)
        .filter_map(|s| value(s).map(|v| Pt::at(seconds(s.t_us as f64), v)))
        .collect();
    thin(points, MAX_TRACE_POINTS)
}

/// What a tcp_probe event says of a sender's window.
struct WindowProbe {
    t_us: i64,
    cwnd: u32,
    ssthresh: u32,
}

/// The flow's sender's tcp_probe events in time order.
fn sender_probes(run: &RunRecord, flow: &FlowRecord) -> Vec<WindowProbe> {
    let host = flow.direction.sender();
    run.events
        .iter()
        .filter(|e| e.flow == flow.id && e.host == host)
        .filter_map(|e| match e.event {
            KernelEvent::Probe {
                snd_cwnd, ssthresh, ..
            } => Some(WindowProbe {
                t_us: e.t_us,
                cwnd: snd_cwnd,
                ssthresh,
            }),
            _ => None,
        })
        .collect()
}

/// cwnd and ssthresh (once set) as steps at every change the probes show. A probe
/// shows the state before its segment is processed, so a change it reveals was made at
/// the previous probe's segment, and is drawn at that time.
fn event_windows(run: &RunRecord, flow: &FlowRecord) -> (Vec<Pt>, Vec<Pt>) {
    let probes = sender_probes(run, flow);
    let steps = |value: &dyn Fn(&WindowProbe) -> Option<f64>| {
        let mut points: Vec<Pt> = Vec::new();
        for pair in probes.windows(2) {
            let (at, now) = (seconds(pair[0].t_us as f64), value(&pair[1]));
            let before = value(&pair[0]);
            match (points.is_empty(), before, now) {
                (true, Some(v), _) => points.push(Pt::at(at, v)),
                (false, Some(b), Some(n)) if b != n => {
                    points.push(Pt::at(at, b));
                    points.push(Pt::at(at, n));
                }
                _ => {}
            }
        }
        if let (Some(last), Some(probe)) = (points.last().copied(), probes.last()) {
            points.push(Pt::at(seconds(probe.t_us as f64), last.y));
        }
        envelope(points, MAX_TRACE_POINTS)
    };
    let cwnd = steps(&|p| Some(f64::from(p.cwnd)));
    let ssthresh = steps(&|p| (p.ssthresh < INFINITE_SSTHRESH).then_some(f64::from(p.ssthresh)));
    (cwnd, ssthresh)
}

/// At most about `max` points that keep each bucket's lowest and highest value, in
/// time order: what a chart's pixel columns can show of a longer trace.
fn envelope(points: Vec<Pt>, max: usize) -> Vec<Pt> {
    if points.len() <= max {
        return points;
    }
    let bucket = points.len().div_ceil(max / 2);
    points
        .chunks(bucket)
        .flat_map(|c| {
            let low = c
                .iter()
                .copied()
                .fold(c[0], |a, p| if p.y < a.y { p } else { a });
            let high = c
                .iter()
                .copied()
                .fold(c[0], |a, p| if p.y > a.y { p } else { a });
            if low.x <= high.x {
                [low, high]
            } else {
                [high, low]
            }
        })
        .collect()
}

/// Each of the flow's intervals as a level from its start to its end.
fn steps(
    run: &RunRecord,
    flow: u32,
    value: &dyn Fn(&tcplab_record::IntervalRecord) -> Option<f64>,
) -> Vec<Pt> {
    run.intervals
        .iter()
        .filter(|i| i.flow == flow && i.end_us > i.start_us)
        .filter_map(|i| {
            value(i).map(|v| {
                [
                    Pt::at(seconds(i.start_us as f64), v),
                    Pt::at(seconds(i.end_us as f64), v),
                ]
            })
        })
        .flatten()
        .collect()
}

/// Each flow's throughput over time as steps, with several flows their sum, and the
/// bound that binds the TCP flows together (dashed); with the caption's words for
/// what they are.
fn throughput(
    run: &RunRecord,
    rates: &Rates,
    tcp: &[&FlowRecord],
    palette: &mut Palette,
) -> (Vec<Series>, String) {
    let steps = |cells: &[Cell]| -> Vec<Pt> {
        cells
            .iter()
            .flat_map(|c| {
                [
                    Pt::at(seconds(c.start_us as f64), c.bps()),
                    Pt::at(seconds(c.end_us as f64), c.bps()),
                ]
            })
            .collect()
    };
    let mut series: Vec<Series> = run
        .flows
        .iter()
        .filter_map(|f| {
            let flow = rates.flows.iter().find(|r| r.flow == f.id)?;
            Some(Series {
                name: flow_name(f),
                color: palette.color(&flow_name(f)),
                dashed: false,
                points: steps(&flow.cells),
            })
        })
        .collect();
    // Both ways, each direction's total, since each crosses its own bottleneck (the
    // bound below is one direction's).
    if !rates.by_direction.is_empty() {
        for (direction, cells) in &rates.by_direction {
            let name = format!("{ALL_FLOWS} {}", direction.name());
            series.push(Series {
                color: palette.color(&name),
                name,
                dashed: false,
                points: steps(cells),
            });
        }
    } else if rates.flows.len() > 1 {
        series.push(Series {
            name: ALL_FLOWS.into(),
            color: palette.color(ALL_FLOWS),
            dashed: false,
            points: steps(&rates.total),
        });
    }
    // A changing bottleneck's link bound (a trace's, a schedule's) is its mean: its
    // capacity per 100 ms, drawn dashed beside (see `capacity`), is the bound over time,
    // which a flow's bin may not exceed.
    let traced = data_directions(run)
        .iter()
        .any(|(_, stats)| !stats.capacity.is_empty());
    let bound = (!tcp.is_empty())
        .then(|| explain(run).bounds.binding())
        .flatten()
        .filter(|(name, _)| !(traced && *name == "link"));
    if let Some((name, bps)) = bound {
        let (start, end) = rates.span();
        series.push(Series {
            name: format!("bound: {name}"),
            color: TOTAL,
            dashed: true,
            points: vec![
                Pt::at(seconds(start as f64), bps),
                Pt::at(seconds(end as f64), bps),
            ],
        });
    }
    (series, rates_words(run, rates, bound.is_some()))
}

/// What the throughput chart draws, from which counters, over which bins.
fn rates_words(run: &RunRecord, rates: &Rates, bound: bool) -> String {
    let bin = format_duration_us(rates.bin_us);
    let bins = match rates.rtt_us {
        Some(rtt) => format!(
            "bins of {bin} ({} round trips of {}, the TCP flows' shortest)",
            rates.bin_us / rtt,
            format_duration_us(rtt)
        ),
        None => format!("bins of {bin}"),
    };
    let has = |source| rates.flows.iter().any(|f| f.source == source);
    let mut sources = Vec::new();
    if has(Source::Sender) {
        sources.push(format!(
            "a TCP flow's bytes acknowledged to its sender in each bin, with the segments it held SACKed (tcp_info bytes_acked + sacked × snd_mss, sampled every {}): what reached the receiver, so a repaired loss shows no burst",
            format_duration_us(run.params.sample_interval_us)
        ));
    }
    if has(Source::Receiver) {
        sources.push("a TCP flow sampled at its receiver only: the bytes its kernel received (tcp_info bytes_received)".into());
    }
    if has(Source::Intervals) {
        sources.push(format!(
            "a flow without samples (UDP, an unsampled TCP flow) per report interval of {}: the bytes its receiver read over it",
            format_duration_us(run.params.report_interval_us)
        ));
    }
    let mut words = format!(
        "Throughput over time in {bins}: {}. The bins end at the run's last deadline; a flow's piece of a bin (or interval) shorter than half of one joins its neighbour, its rate over both, so a start or a deadline inside a bin shows no spike or drop; after a deadline (the sender's drain) nothing counts.",
        sources.join("; ")
    );
    let out_of_order: f64 = rates.flows.iter().map(|f| f.out_of_order_bytes).sum();
    if out_of_order >= 1.0 {
        words += &format!(
            " {} reached the receivers behind a loss still unrepaired at the deadline: in the last bins, in no rate of the run (its drain delivers them in order).",
            format_size(out_of_order as u64)
        );
    }
    if rates.flows.len() > 1 {
        words += " All flows: every flow's bytes in a bin over the bin's length (a flow known per interval spread evenly over it)";
        let up = run.flows.iter().any(|f| f.direction == Direction::Up);
        let down = run.flows.iter().any(|f| f.direction == Direction::Down);
        words += if up && down {
            ", both directions together."
        } else {
            "."
        };
    }
    if bound {
        words += " Dashed: the bound that binds the TCP flows together (tcplab explain's smallest of the link's goodput, the window per shortest round trip and a pacing cap).";
    }
    words
}

/// The TCP flows' limit shares per interval index, averaged over the flows, stacked: one
/// layer per limit.
fn limits(run: &RunRecord, tcp: &[&FlowRecord], x: XAxis, palette: &mut Palette) -> Option<Body> {
    let ids: Vec<u32> = tcp.iter().map(|f| f.id).collect();
    let intervals: Vec<_> = run
        .intervals
        .iter()
        .filter(|i| ids.contains(&i.flow) && i.end_us > i.start_us)
        .collect();
    let last = intervals.iter().map(|i| i.index).max()?;
    let mut spans = Vec::new();
    let mut shares: Vec<[f64; Limit::ALL.len()]> = Vec::new();
    for index in 0..=last {
        let these: Vec<_> = intervals.iter().filter(|i| i.index == index).collect();
        if these.is_empty() {
            continue;
        }
        let start = these.iter().map(|i| i.start_us).min().unwrap_or(0);
        let end = these.iter().map(|i| i.end_us).max().unwrap_or(0);
        let n = these.len() as f64;
        spans.push((seconds(start as f64), seconds(end as f64)));
        shares.push(
            Limit::ALL.map(|limit| these.iter().map(|i| i.limits.get(limit)).sum::<f64>() / n),
        );
    }
    let layers = Limit::ALL
        .iter()
        .enumerate()
        .map(|(k, limit)| Series {
            name: limit.name().into(),
            color: palette.color(limit.name()),
            dashed: false,
            points: shares.iter().map(|s| Pt::at(0.0, s[k])).collect(),
        })
        .collect();
    Some(Body::Stacked { x, spans, layers })
}

/// The bottleneck queue of each direction that held anything, on the run's time base up
/// to `end` (seconds).
/// The probes' round trip and one-way delays over the load's time (from t0 on).
fn probe_series(run: &RunRecord, palette: &mut Palette) -> Vec<Series> {
    type Delay = fn(&ProbeRecord) -> Option<i64>;
    let delays: [(&str, bool, Delay); 3] = [
        ("probe round trip", false, |p| p.rtt_us),
        ("one way up", true, |p| p.up_owd_us),
        ("one way down", true, |p| p.down_owd_us),
    ];
    delays
        .into_iter()
        .map(|(name, dashed, delay)| Series {
            color: palette.color(name),
            name: name.to_owned(),
            dashed,
            points: thin(
                run.probes
                    .iter()
                    .filter(|p| p.sent_us >= 0)
                    .filter_map(|p| Some(Pt::at(seconds(p.sent_us as f64), delay(p)? as f64)))
                    .collect(),
                MAX_TRACE_POINTS,
            ),
        })
        .collect()
}

/// The emulator's directions that carry a flow's data: ("up", its stats) and so on.
fn data_directions(run: &RunRecord) -> Vec<(&'static str, &DirectionStats)> {
    let Some(path) = &run.path else {
        return Vec::new();
    };
    let carries = |d: Direction| run.flows.iter().any(|f| f.direction == d);
    [
        ("up", &path.up, carries(Direction::Up)),
        ("down", &path.down, carries(Direction::Down)),
    ]
    .into_iter()
    .filter(|(_, _, data)| *data)
    .map(|(name, stats, _)| (name, stats))
    .collect()
}

/// Seconds since the run's t0 of a time on its lab's emulator clock (µs), if after t0.
fn emulator_seconds(run: &RunRecord, t_us: u64) -> Option<f64> {
    run_seconds(t_us, run.started_unix_us, run.path.as_ref()?.epoch_unix_us)
}

/// A time on the emulator's clock (µs since `epoch_unix_us` on the wall clock) as
/// seconds since the run's t0 at `started_unix_us`; `None` before t0.
fn run_seconds(t_us: u64, started_unix_us: i64, epoch_unix_us: i64) -> Option<f64> {
    let t = t_us as i64 - (started_unix_us - epoch_unix_us);
    (t >= 0).then(|| seconds(t as f64))
}

/// The data packets' one-way delay over time in each direction carrying data: the
/// mean per 100 ms solid, the largest dashed.
fn delay(run: &RunRecord, palette: &mut Palette) -> Vec<Series> {
    let mut out = Vec::new();
    for (direction, stats) in data_directions(run) {
        if stats.delay_series.is_empty() {
            continue;
        }
        type Value = fn(&DelaySample) -> f64;
        let values: [(&str, bool, Value); 2] = [
            ("mean", false, |s| s.mean_us),
            ("largest", true, |s| s.max_us),
        ];
        for (what, dashed, value) in values {
            let name = format!("{what} one way {direction}");
            out.push(Series {
                color: palette.color(&format!("one way {direction}")),
                name,
                dashed,
                points: stats
                    .delay_series
                    .iter()
                    .filter_map(|s| Some(Pt::at(emulator_seconds(run, s.t_us)?, value(s))))
                    .collect(),
            });
        }
    }
    out
}

/// The capacity of a bottleneck that changes (a trace, a rate on a schedule) in each
/// direction that has one and carries a flow's data, dashed, on the run's time base.
fn capacity(run: &RunRecord, palette: &mut Palette) -> Vec<Series> {
    data_directions(run)
        .into_iter()
        .filter(|(_, stats)| !stats.capacity.is_empty())
        .map(|(direction, stats)| {
            let name = format!("capacity {direction}");
            Series {
                color: palette.color(&name),
                name,
                dashed: true,
                points: stats
                    .capacity
                    .iter()
                    .filter_map(|s| Some(Pt::at(emulator_seconds(run, s.t_us)?, s.bps)))
                    .collect(),
            }
        })
        .collect()
}

fn queue(run: &RunRecord, end: f64, palette: &mut Palette) -> Vec<Series> {
    let Some(path) = &run.path else {
        return Vec::new();
    };
    let bottleneck = [("up", &path.up.queue), ("down", &path.down.queue)]
        .into_iter()
        .map(|(direction, q)| (format!("bottleneck {direction}"), q));
    // A topology's links, each way.
    let links = path.links().map(|l| (l.name.clone(), &l.queue));
    bottleneck
        .chain(links)
        .filter(|(_, q)| q.iter().any(|s| s.bytes > 0))
        .map(|(name, q)| Series {
            color: palette.color(&name),
            name,
            dashed: false,
            points: thin(
                on_run_time(q, run.started_unix_us, path.epoch_unix_us)
                    .into_iter()
                    .filter(|p| p.x <= end)
                    .collect(),
                MAX_TRACE_POINTS,
            ),
        })
        .collect()
}

/// A topology drawn ([`graph_layout`]), each link labelled with what it carried the
/// busier way and its drops, coloured by its load.
fn topology(run: &RunRecord) -> Option<(String, Body)> {
    let path = run.path.as_ref()?;
    let t = path.topology.as_ref()?;
    let mut names: Vec<&str> = t.hosts.iter().map(String::as_str).collect();
    for l in &t.links {
        for end in &l.between {
            if !names.contains(&end.as_str()) {
                names.push(end);
            }
        }
    }
    let index = |name: &str| names.iter().position(|n| *n == name);
    let ends: Vec<[usize; 2]> = t
        .links
        .iter()
        .filter_map(|l| Some([index(&l.between[0])?, index(&l.between[1])?]))
        .collect();
    let at = graph_layout(names.len(), &ends);
    let span = end_seconds(run);
    let hop = |name: &str| path.links().find(|h| h.name == name);
    let edges = t
        .links
        .iter()
        .zip(&ends)
        .map(|(l, &ends)| {
            let [a, b] = &l.between;
            let ways = [hop_name(&l.name, a, b), hop_name(&l.name, b, a)];
            let carried = ways
                .clone()
                .map(|w| hop(&w).map_or(0.0, |h| h.counters.delivered_bytes as f64 * 8.0 / span));
            let dropped: u64 = ways
                .iter()
                .filter_map(|w| hop(w))
                .map(|h| h.counters.dropped())
                .sum();
            let load = ways
                .iter()
                .zip(carried)
                .filter_map(|(w, bps)| Some(bps / hop_rate(t, w)?.0 as f64))
                .reduce(f64::max);
            let label = format!(
                "{} {}{}",
                l.name,
                format_rate(carried[0].max(carried[1])),
                match dropped {
                    0 => String::new(),
                    n => format!(", {n} dropped"),
                }
            );
            Edge { ends, label, load }
        })
        .collect();
    let nodes = names
        .iter()
        .enumerate()
        .map(|(i, name)| Node {
            name: name.to_string(),
            host: i < t.hosts.len(),
            at: at[i],
        })
        .collect();
    Some((
        format!("The topology of {}: hosts (discs) and routers (squares), each link labelled with what it carried the busier way (the test's packets as IP bytes, on average over the run's {span:.1} s) and its drops both ways, and coloured by its load: the busier way's share of its rate (grey without a fixed rate). `tcplab plot --chart links` has each way.", t.file),
        Body::Graph { nodes, edges },
    ))
}

/// Where to draw each of `n` nodes joined by `ends` (x, y in 0..=1): the nodes with two
/// links or more (routers, mostly) on a line across the middle in the order a walk
/// from the first of them meets them, and each other node (a host at the edge) beside
/// its neighbour on that line, above and below in turn.
fn graph_layout(n: usize, ends: &[[usize; 2]]) -> Vec<(f64, f64)> {
    let neighbours = |node: usize| {
        ends.iter()
            .filter_map(move |&[a, b]| match (a == node, b == node) {
                (true, _) => Some(b),
                (_, true) => Some(a),
                _ => None,
            })
    };
    let spine_node = |node: usize| neighbours(node).count() >= 2;
    let mut spine: Vec<usize> = Vec::new();
    for start in (0..n).filter(|&m| spine_node(m)) {
        if spine.contains(&start) {
            continue;
        }
        // Breadth first along the spine from each part not yet placed.
        let mut frontier = vec![start];
        spine.push(start);
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for &m in &frontier {
                for other in neighbours(m).filter(|&o| spine_node(o)) {
                    if !spine.contains(&other) {
                        spine.push(other);
                        next.push(other);
                    }
                }
            }
            frontier = next;
        }
    }
    let across = |k: usize, count: usize| match count {
        0 | 1 => 0.5,
        _ => k as f64 / (count - 1) as f64,
    };
    let mut at = vec![(0.5, 0.5); n];
    for (k, &m) in spine.iter().enumerate() {
        at[m] = (across(k, spine.len()), 0.5);
    }
    // The others: beside their neighbour on the spine (around it where it is the only
    // one: a star), or on a line of their own.
    let loose: Vec<usize> = (0..n).filter(|m| !spine.contains(m)).collect();
    let anchor_of = |m: usize| neighbours(m).find(|o| spine.contains(o));
    let leaves = |anchor: usize| {
        loose
            .iter()
            .filter(|&&m| anchor_of(m) == Some(anchor))
            .count()
    };
    let mut hung: Vec<usize> = vec![0; n];
    let mut alone = 0;
    for &m in &loose {
        match anchor_of(m) {
            Some(anchor) if spine.len() == 1 => {
                let k = hung[anchor];
                hung[anchor] += 1;
                let angle = std::f64::consts::TAU * k as f64 / leaves(anchor) as f64;
                at[m] = (0.5 - 0.45 * angle.cos(), 0.5 - 0.45 * angle.sin());
            }
            Some(anchor) => {
                let k = hung[anchor];
                hung[anchor] += 1;
                let (x, _) = at[anchor];
                let side = if k.is_multiple_of(2) { -1.0 } else { 1.0 };
                let step = (k / 2) as f64;
                at[m] = (
                    (x + step * 0.08 * side).clamp(0.0, 1.0),
                    0.5 + side * (0.3 + 0.12 * step).min(0.5),
                );
            }
            None => {
                at[m] = (across(alone, loose.len()), 0.15 + 0.7 * (alone % 2) as f64);
                alone += 1;
            }
        }
    }
    at
}

/// A topology's links, each way, that the test's packets crossed: what each carried on
/// average over the run, its drops in its name.
fn links(run: &RunRecord, palette: &mut Palette) -> Option<(String, Body)> {
    let path = run.path.as_ref()?;
    path.topology.as_ref()?;
    let span = end_seconds(run);
    let crossed: Vec<&tcplab_record::NamedCounters> =
        path.links().filter(|l| l.counters.packets_in > 0).collect();
    let categories = crossed
        .iter()
        .map(|l| match l.counters.dropped() {
            0 => l.name.clone(),
            n => format!("{} ({n} dropped)", l.name),
        })
        .collect();
    let name = "carried".to_owned();
    let series = Series {
        color: palette.color(&name),
        name,
        dashed: false,
        points: crossed
            .iter()
            .enumerate()
            .map(|(i, l)| Pt::at(i as f64, l.counters.delivered_bytes as f64 * 8.0 / span))
            .collect(),
    };
    Some((
        format!("What each link of the topology carried each way, the test's packets as IP bytes, on average over the run's {span:.1} s; its drops (queue, loss, AQM, policer) beside its name."),
        Body::Bars {
            x_label: "link, each way".into(),
            categories,
            y: YAxis {
                label: "carried".into(),
                quantity: Quantity::Rate,
            },
            series: vec![series],
        },
    ))
}

/// Across a topology, the trains each TCP flow reached each metered stage of its way in
/// (a link way with a fixed rate, or a gap pacer, where packets go one by one): the
/// mean length as a bar, the length 99 % of its packets arrived within as a level
/// across it.
fn trains(run: &RunRecord, palette: &mut Palette) -> Option<(String, Body)> {
    let ways = flow_links(run)?;
    let mut categories: Vec<String> = Vec::new();
    for (stage, _) in ways.iter().flat_map(|w| &w.trains) {
        if !categories.contains(stage) {
            categories.push(stage.clone());
        }
    }
    let at = |stage: &String| categories.iter().position(|c| c == stage).expect("listed") as f64;
    let mut series = Vec::new();
    for way in ways.iter().filter(|w| !w.trains.is_empty()) {
        let flow = run.flows.iter().find(|f| f.id == way.flow)?;
        let points = |value: &dyn Fn(&Trains) -> f64| {
            way.trains
                .iter()
                .map(|(stage, t)| Pt::at(at(stage), value(t)))
                .collect()
        };
        series.push(flow_series(palette, "", false, flow, points(&|t| t.mean)));
        series.push(flow_series(palette, " p99", true, flow, points(&|t| t.p99)));
    }
    Some((
        "The trains each TCP flow reached each link of its way in (packets arriving back to back at the link's rate), where a link with a fixed rate or a gap pacer meters them: the mean length (bars) and the length within which 99 % of its packets arrived (dashed); a flow spaced by an earlier, slower link reaches the next one packet at a time.".into(),
        Body::Bars {
            x_label: "link, each way".into(),
            categories,
            y: YAxis {
                label: "packets a train".into(),
                quantity: Quantity::Number,
            },
            series,
        },
    ))
}

/// Queue samples (µs on the emulator's clock, whose 0 is `epoch_unix_us` on the wall
/// clock) as (seconds since the run's t0 at `started_unix_us`, bytes); samples from
/// before t0 are left out.
pub fn on_run_time(queue: &[QueueSample], started_unix_us: i64, epoch_unix_us: i64) -> Vec<Pt> {
    queue
        .iter()
        .filter_map(|s| {
            let t = run_seconds(s.t_us, started_unix_us, epoch_unix_us)?;
            Some(Pt::at(t, s.bytes as f64))
        })
        .collect()
}

/// At most about `max` points: each bucket of consecutive points keeps its first point's
/// time and its largest value, so peaks survive.
fn thin(points: Vec<Pt>, max: usize) -> Vec<Pt> {
    if points.len() <= max {
        return points;
    }
    let bucket = points.len().div_ceil(max);
    points
        .chunks(bucket)
        .map(|c| Pt::at(c[0].x, c.iter().map(|p| p.y).fold(f64::MIN, f64::max)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_samples_move_onto_the_runs_time_base() {
        // The emulator started 1.5 s before the test's t0.
        let epoch = 1_700_000_000_000_000;
        let started = epoch + 1_500_000;
        let q = [
            QueueSample {
                t_us: 1_000_000,
                bytes: 10,
            },
            QueueSample {
                t_us: 1_500_000,
                bytes: 20,
            },
            QueueSample {
                t_us: 2_750_000,
                bytes: 30,
            },
        ];
        assert_eq!(
            on_run_time(&q, started, epoch),
            [Pt::at(0.0, 20.0), Pt::at(1.25, 30.0)]
        );
    }

    #[test]
    fn the_envelope_keeps_each_buckets_lowest_and_highest_in_time_order() {
        let points: Vec<Pt> = (0..100)
            .map(|i| {
                Pt::at(
                    f64::from(i),
                    if i == 37 {
                        1.0
                    } else if i == 12 {
                        90.0
                    } else {
                        50.0
                    },
                )
            })
            .collect();
        let drawn = envelope(points, 10);
        assert!(drawn.len() <= 10, "{drawn:?}");
        assert!(drawn.contains(&Pt::at(37.0, 1.0)) && drawn.contains(&Pt::at(12.0, 90.0)));
        assert!(drawn.windows(2).all(|w| w[0].x <= w[1].x));
    }

    #[test]
    fn thinning_keeps_peaks() {
        let points: Vec<Pt> = (0..10)
            .map(|i| Pt::at(f64::from(i), if i == 7 { 100.0 } else { 1.0 }))
            .collect();
        let thinned = thin(points, 5);
        assert_eq!(thinned.len(), 5);
        assert_eq!(thinned[3], Pt::at(6.0, 100.0));
    }

    /// a — r1 — r2 — b, and c on r1: the routers across the middle in order, the hosts
    /// beside their router, above and below in turn.
    #[test]
    fn a_chain_lies_across_with_its_hosts_beside_their_routers() {
        // a 0, b 1, c 2, r1 3, r2 4.
        let at = graph_layout(5, &[[0, 3], [3, 4], [4, 1], [2, 3]]);
        assert_eq!((at[3], at[4]), ((0.0, 0.5), (1.0, 0.5)));
        assert!(at[0].0 == 0.0 && at[0].1 < 0.5, "{at:?}");
        assert!(at[1].0 == 1.0 && at[1].1 < 0.5, "{at:?}");
        assert!(at[2].0 == 0.0 && at[2].1 > 0.5, "{at:?}");
    }

    /// One router and five hosts: a star, each host its own place around it.
    #[test]
    fn a_star_spreads_its_hosts_around_the_router() {
        let at = graph_layout(6, &[[0, 5], [1, 5], [2, 5], [3, 5], [4, 5]]);
        assert_eq!(at[5], (0.5, 0.5));
        for (i, a) in at[..5].iter().enumerate() {
            assert!((a.0 - 0.5).hypot(a.1 - 0.5) > 0.4, "{at:?}");
            for b in &at[..i] {
                assert!((a.0 - b.0).hypot(a.1 - b.1) > 0.2, "{at:?}");
            }
        }
        // Two hosts and one link: no router, both on a line of their own.
        let pair = graph_layout(2, &[[0, 1]]);
        assert_ne!(pair[0], pair[1]);
    }
}
