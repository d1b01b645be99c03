//! Why a run got the throughput it got: the measured rate against each bound (what the
//! link, the windows and any cap allowed) and each loss model's estimate, what limited
//! the senders, what went wrong on the way, and what to change. Pure: it reads a stored
//! [`RunRecord`] (with its tcp_info samples) and nothing else.
//!
//! The verdict is the senders' dominant limit, as their samples booked it
//! ([`crate::limits`]): the live lines, `flows[].limits`, `dominant_limit` and this
//! verdict tell one story. Where that limit is the network's (`cwnd`), the verdict names
//! the element the run reached: the bottleneck link carried at its rate (`link`), or a
//! gap pacer's rate (`pacing`).

use serde::Serialize;

use crate::bounds;
use crate::changes;
use crate::events::{kernel_episodes, KernelEpisodes};
use crate::links::{self, FlowLinks};
use crate::stats::jain;
use crate::throughput::{self, Counted};
use crate::tseq::RetransmitCauses;
use tcplab_netsim::dumbbell::{Dumbbell, LinkRole};
use tcplab_netsim::link::DropReason;
use tcplab_netsim::path::{self, Bottleneck, LinkSpec, Pace, PathSpec};
use tcplab_record as record;
use tcplab_record::capture::CapturePoint;
use tcplab_record::events::EventRecord;
use tcplab_record::tcpinfo::TcpInfo;
use tcplab_record::units::{count, format_duration_us, format_rate, format_size};
use tcplab_record::{
    BufferSize, Direction, FlowRecord, Host, LimitShares, NamedCounters, PathRecord, QueueSample,
    RunRecord, SampleRecord,
};

/// tcp_info's ssthresh before the first loss ("infinite").
const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;
/// TCP_CA_CWR: the sender cuts its window for an ECN mark.
const CA_CWR: u8 = 2;
/// TCP_CA_Recovery and TCP_CA_Loss: the sender is repairing a loss.
const CA_RECOVERY: u8 = 3;
const CA_LOSS: u8 = 4;
/// A configured rate counts as reached at this share of it.
const REACHED: f64 = 0.8;
/// The link counts as full at this share of its goodput.
const LINK_FULL: f64 = 0.85;
/// The least share of a watched run's bytes a connection carries to bear on its
/// throughput's explanation.
const CARRIED_DATA: f64 = 0.01;
const SHARE_NOTED: f64 = 0.1;
/// Samples from the first fifth of a flow are slow start, not its steady state.
const STEADY_FROM: f64 = 0.2;
/// The loss models describe a steady state of repeated loss; fewer loss events than
/// this (a slow-start overshoot, say) are not one.
const MIN_LOSS_EVENTS: u64 = 4;
/// A transaction held this much longer than its round trips waited for a delayed ACK
/// (Linux delays one 40 ms at least, TCP_DELACK_MIN).
const NAGLE_STALL_US: f64 = 10_000.0;
/// Below this Jain index parallel streams count as unfair.
const UNFAIR_BELOW: f64 = 0.9;
/// A flow's 99th-percentile train at least this share of the bottleneck queue
/// overflows it from half full: bursts, not only the window, fill it.
const TRAIN_FILLS_QUEUE: f64 = 0.5;

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
    pub estimates: Estimates,
    /// Time shares under each limit, weighted over the TCP flows.
    pub limits: LimitShares,
    pub episodes: Episodes,
    /// What the kernel's events say, where they were taken (`--trace-events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelEpisodes>,
    /// What the retransmissions in the run's capture followed ([`Explanation::cite_capture`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmit_causes: Option<RetransmitCauses>,
    pub verdict: Verdict,
    pub findings: Vec<Finding>,
    pub recommendations: Vec<String>,
    /// A topology run: each TCP flow's way through it and the link that bound it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_links: Option<Vec<FlowLinks>>,
    /// The senders' answer to each change of the path's schedule (`at`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<changes::Response>,
}

/// What a bottleneck whose capacity changes offered over the measured window, used or
/// not, as IP bytes: the emulator's samples of 100 ms that meet the window, whole, so
/// never less than it offered.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ChangingCapacity {
    /// Its mean, bit/s.
    pub bps: f64,
    pub by: Changing,
}

/// What changes a bottleneck's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Changing {
    /// A mahimahi trace's opportunities.
    Trace,
    /// A rate on the path's schedule (`at`).
    Schedule,
}

impl Changing {
    /// As the text names the bound: "the trace's mean".
    pub fn name(self) -> &'static str {
        match self {
            Changing::Trace => "trace",
            Changing::Schedule => "schedule",
        }
    }
}

/// The path as configured, in the data direction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathFacts {
    pub spec: String,
    /// The data direction's bottleneck rate, bit/s; `None` without a fixed rate.
    pub bottleneck_bps: Option<u64>,
    /// A bottleneck whose capacity changes: its mean over the measured window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ChangingCapacity>,
    /// The round trip of the flows' client without queueing, µs: its access link's and
    /// the bottleneck's delays, both directions. The lab holds every packet that long
    /// (its own time comes on top), the BDP is reckoned over it and a queue in BDP was
    /// sized over it.
    pub base_rtt_us: u64,
    /// Whose end-to-end round trip `base_rtt_us` is, from 1, in a lab with access links
    /// that delay; of several clients sending, the one with the longest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<u32>,
    pub bdp_bytes: Option<u64>,
    /// The bottleneck queue, bytes (a queue in BDP sized as the lab sized it).
    pub queue_bytes: Option<u64>,
    /// A policer where the data's direction enters the link (`police`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub police: Option<PolicerFacts>,
}

/// A token-bucket policer: its rate, bit/s, and its bucket, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PolicerFacts {
    pub bps: u64,
    pub burst_bytes: u64,
}

impl PolicerFacts {
    /// The most it lets through over `span_us`: its rate, and its full bucket at the
    /// start, bit/s.
    pub fn bound_bps(&self, span_us: u64) -> u64 {
        let PolicerFacts { bps, burst_bytes } = *self;
        path::Police { bps, burst_bytes }.bound_bps(span_us)
    }
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
    /// A request/response run's requests and responses, in place of bulk writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactions: Option<record::TransactionParams>,
    pub nodelay: bool,
    /// "none", "kernel 90 Mbit/s", "app 20 Mbit/s", "gap 93 Mbit/s", "gap cwnd".
    pub pacing: String,
}

/// Upper bounds on the TCP flows' summed throughput, bit/s: each is built from inputs
/// that make it one (what the path allowed, the most that was in flight, the shortest
/// round trip), so a measurement never exceeds it. `None` where one does not apply.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Bounds {
    /// The bottleneck's rate less the headers of full segments.
    pub link_bps: Option<f64>,
    /// The most each flow could have in flight per its shortest round trip, summed:
    /// the smaller of the largest window the receiver advertised and the send buffer,
    /// or what the samples saw in flight where that was more (Linux lets a write
    /// append to a buffer's last packet past SO_SNDBUF).
    pub window_bps: Option<f64>,
    /// A cap on the senders' rate: a gap pacer's (less headers), SO_MAX_PACING_RATE's
    /// (`--fq-rate`, a server's `--max-rate`), or the application's (`--app-rate`), for
    /// all flows together.
    pub pacing_bps: Option<f64>,
    /// Which cap `pacing_bps` is: "gap pacer", "--fq-rate", "--app-rate", "the
    /// server's --max-rate".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pacing_cap: Option<&'static str>,
}

impl Bounds {
    /// The smallest bound and its name.
    pub fn binding(&self) -> Option<(&'static str, f64)> {
        [
            ("link", self.link_bps),
            ("window", self.window_bps),
            ("pacing", self.pacing_bps),
        ]
        .into_iter()
        .filter_map(|(name, b)| b.map(|b| (name, b)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// Models of what loss allows, bit/s: estimates a flow can exceed (a few loss events
/// over a short run, a loss-based sender between its halvings), never bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Estimates {
    /// Mathis et al. with the measured loss-event rate (recovery episodes per data
    /// segment sent; the models' p counts congestion events, not lost packets), for
    /// loss-based congestion control (not BBR) with at least 4 loss events.
    pub mathis_bps: Option<f64>,
    /// Padhye–Firoiu–Towsley–Kurose with the measured loss-event rate, RTO and window.
    pub pftk_bps: Option<f64>,
}

/// What the senders' congestion control went through.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Episodes {
    /// Segments the senders retransmitted (the flows' `retransmits`).
    pub retransmits: u64,
    /// `retransmits` over the data segments sent.
    pub retransmit_rate: f64,
    /// Entries into loss recovery: a fast recovery, or the loss state after a
    /// retransmission timeout. Counted from the kernel's events where they were taken
    /// (`recovery_from`), else from the samples: spans of consecutive samples in either
    /// state or with new retransmissions, which merge episodes closer than a sample.
    pub recovery_episodes: u64,
    pub recovery_from: Source,
    /// Times a sender left slow start, from its samples: a loss-based sender is in slow
    /// start while its window is below ssthresh (or no ssthresh is set yet) outside a
    /// recovery — a window cut below ssthresh in fast recovery or CWR is not slow
    /// start, the restart after a timeout is —; BBR is in slow start while in STARTUP,
    /// which it leaves once, setting ssthresh.
    pub slow_start_exits: u64,
    /// When the first sender first left slow start, µs since t0.
    pub first_slow_start_exit_us: Option<i64>,
}

/// Where a figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The tcp_info samples, one every `every_us`.
    Samples { every_us: u64 },
    /// The kernel's tcp events (`--trace-events`), each one.
    KernelEvents,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub limit: Limit,
    pub reason: String,
}

/// One thing a detector noticed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub message: String,
}

/// The one registry of finding kinds: each variant's stable name (the JSON's
/// `findings[].kind`, the list in docs/explain.md) and what it means, so the enum, its
/// names, [`FindingKind::ALL`] and the docs cannot disagree.
macro_rules! finding_kinds {
    ($($variant:ident => $name:literal: $meaning:literal,)+) => {
        /// What a finding is about.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum FindingKind {
            $($variant,)+
        }

        impl FindingKind {
            /// Every kind, in the order the detectors look.
            pub const ALL: &'static [FindingKind] = &[$(FindingKind::$variant,)+];

            /// Its stable snake_case name, as the JSON and the docs spell it.
            pub fn name(self) -> &'static str {
                match self {
                    $(FindingKind::$variant => $name,)+
                }
            }

            /// What a finding of this kind says, in one line.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(FindingKind::$variant => $meaning,)+
                }
            }
        }
    };
}

finding_kinds! {
    EmulatorLate => "emulator_late":
        "the emulator fell behind its path: its median packet was written 1 ms or more after it was due, in either direction",
    Delay => "delay":
        "the data packets' one-way delay across an emulator lab, and how much of it was the path's own, queueing and serialization",
    MinRtt => "min_rtt":
        "TCP's shortest round trip (tcpi_min_rtt) lies more than 3 % from the path's base RTT, and why",
    KernelEvents => "kernel_events":
        "the kernel's own account of the senders (`--trace-events`): cwnd cuts, fast recoveries, timeouts, ECN reductions, retransmission events",
    ZeroWindow => "zero_window":
        "the longest time the receiver advertised a zero window, from the kernel's events, with the advice to read faster",
    BufferCapped => "buffer_capped":
        "a buffer request was capped by `net.core.wmem_max` or `net.core.rmem_max`",
    BufferBelowBdp => "buffer_below_bdp":
        "a buffer asked for is below the path's BDP once Linux doubled it, with the size to ask for",
    NagleDelayedAck => "nagle_delayed_ack":
        "writes below the MSS with Nagle on and under half the smallest bound: each may wait for the receiver's delayed ACK",
    Transactions => "transactions":
        "a request/response run's transactions (`--rr`): their count, rate and median time in round trips",
    NagleStall => "nagle_stall":
        "requests split into writes with Nagle on took 10 ms or more beyond their round trips: the server's delayed ACK, with its arithmetic",
    QueueOverflow => "queue_overflow":
        "the bottleneck queue dropped packets, with the flows' trains against the queue (and pacing advised where the trains overflow it from half full)",
    Aqm => "aqm":
        "what an AQM did where the data met it (a dumbbell's bottleneck, each link of a topology on the flows' ways): its early drops, CE marks and drops on overflow, and the delay its queue held against its target",
    Policer => "policer":
        "what a policer (`police`) dropped where the data met it (as `aqm`): the packets beyond its rate and bucket, each a loss to the senders where a shaper would have queued it",
    HostQueue => "host_queue":
        "a sending host's interface queue (`txqueuelen`) overflowed: its device's drops, and the retransmissions the host held back",
    UnfairStreams => "unfair_streams":
        "parallel streams shared unevenly: Jain's index below 0.9",
    ReceiverLimited => "receiver_limited":
        "the receiver's window limited the senders 10 % of the time or more",
    WindowSegments => "window_segments":
        "a receive window the user set, in the whole segments it has room for, and when and why it changed",
    ApplicationLimited => "application_limited":
        "the application had nothing to send 10 % of the time or more",
    Loss => "loss":
        "a cwnd-limited run's retransmissions, with its recovery episodes and Mathis' estimate",
    SlowStart => "slow_start":
        "when the first sender left slow start, and how many times the senders left it",
    OtherDirection => "other_direction":
        "a bidirectional run: what the other direction's flows, left out of the figures, carried through their own bottleneck",
    BindingLink => "binding_link":
        "a topology run: for each TCP flow, the link whose queue held its packets longest (its binding link) with that link's drops of them and the trains they reached it in, what the other links on its way added, its one-way delay across them all, and its bound, the least goodput of its links, pacers and policers",
    RetransmitCauses => "retransmit_causes":
        "what the retransmissions in the run's capture (`--capture`) followed: the emulator's drops by why, and those no drop explains",
}

impl FindingKind {
    /// The kind named `name`, as [`FindingKind::name`] spells it.
    pub fn from_name(name: &str) -> Option<FindingKind> {
        FindingKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The list of kinds docs/explain.md shows under its findings marker (a test holds
    /// them equal): a line `- `name`: meaning` each.
    pub fn docs_list() -> String {
        FindingKind::ALL
            .iter()
            .map(|k| format!("- `{}`: {}\n", k.name(), k.meaning()))
            .collect()
    }
}

impl std::fmt::Display for FindingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Serialized as its name: stored and printed JSON keeps the strings it always had.
impl Serialize for FindingKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for FindingKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        FindingKind::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("no finding kind {name:?}")))
    }
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
    /// The send buffer, as [`send_buffer_bytes`] knows it (not a median).
    sndbuf: f64,
}

/// Explains `run`. UDP flows are left out; a run without TCP flows gets a verdict of
/// `app` (a UDP sender sends what it is told). A bidirectional run is explained in its
/// first flow's direction, against that direction's bottleneck; a finding gives the
/// other direction's throughput.
pub fn explain(run: &RunRecord) -> Explanation {
    let first = run.flows.iter().find(|f| f.udp.is_none());
    explain_in(run, first.map_or(Direction::Up, |f| f.direction))
}

/// The bound that binds the run's TCP flows as a whole: in a bidirectional run, each
/// direction's against its own bottleneck, added (named by the first direction's).
pub fn binding_bound(run: &RunRecord) -> Option<(&'static str, f64)> {
    let mut directions: Vec<Direction> = Vec::new();
    for f in run.flows.iter().filter(|f| f.udp.is_none()) {
        if !directions.contains(&f.direction) {
            directions.push(f.direction);
        }
    }
    let bounds: Vec<(&'static str, f64)> = directions
        .into_iter()
        .map(|d| explain_in(run, d).bounds.binding())
        .collect::<Option<_>>()?;
    let (name, _) = *bounds.first()?;
    Some((name, bounds.iter().map(|b| b.1).sum()))
}

/// [`explain`] for the TCP flows going `direction`.
fn explain_in(run: &RunRecord, direction: Direction) -> Explanation {
    let all_tcp: Vec<&FlowRecord> = run.flows.iter().filter(|f| f.udp.is_none()).collect();
    let (mut tcp, other): (Vec<&FlowRecord>, Vec<&FlowRecord>) =
        all_tcp.iter().partition(|f| f.direction == direction);
    if run.watch.is_some() {
        // Another program's connections include some that carried next to nothing (a
        // control connection, a keep-alive): idle, they would book their time as `app`.
        let total: u64 = tcp.iter().map(|f| f.received_bytes).sum();
        tcp.retain(|f| f.received_bytes as f64 >= CARRIED_DATA * total as f64);
    }
    let spec: Option<PathSpec> = run.path.as_ref().and_then(|p| p.spec.parse().ok());
    let window = throughput::window(&run.intervals, Counted::Received, 0, |id| {
        tcp.iter().any(|f| f.id == id)
    });
    let flow_links: Option<Vec<FlowLinks>> = links::flow_links(run).map(|all| {
        all.into_iter()
            .filter(|l| tcp.iter().any(|f| f.id == l.flow))
            .collect()
    });
    let facts = run
        .path
        .as_ref()
        .filter(|p| p.topology.is_none())
        .zip(spec.as_ref())
        .map(|(p, s)| PathFacts {
            capacity: window
                .as_ref()
                .zip(changing(s, direction))
                .and_then(|(w, by)| {
                    let bps = capacity_bps(run, p, direction, w)?;
                    Some(ChangingCapacity { bps, by })
                }),
            ..path_facts(p, s, &tcp, direction)
        });
    let tunings = tuning_facts(run, &tcp, spec.as_ref(), direction);
    let measured_bps = window.and_then(|w| w.bps()).unwrap_or(0.0);
    let samples: Vec<Vec<&SampleRecord>> = tcp.iter().map(|f| sender_samples(run, f)).collect();
    let mss = tcp.first().map_or(0, |f| f.mss);
    let pacing = pacing_cap(run, spec.as_ref(), direction, tcp.len(), mss);
    // The link's rate, and a policer's in front of it over the measured window: the
    // lower binds.
    let link_rate = facts
        .as_ref()
        .and_then(|p| p.bottleneck_bps.or(p.capacity.map(|c| c.bps.ceil() as u64)));
    let policer_rate = facts
        .as_ref()
        .and_then(|p| p.police)
        .zip(window.as_ref())
        .map(|(p, w)| p.bound_bps(w.end_us.saturating_sub(w.start_us)));
    let policed = policer_rate.is_some_and(|p| link_rate.is_none_or(|l| p < l));
    // A topology's flows: no more than links each of them crosses one of carry.
    let topology_bound = flow_links
        .as_ref()
        .filter(|flows| flows.len() == tcp.len())
        .and_then(|flows| links::together_bound_bps(run, flows));
    let bounds = Bounds {
        link_bps: link_rate
            .into_iter()
            .chain(policer_rate)
            .min()
            .filter(|_| mss > 0)
            .map(|r| bounds::link_goodput_bps(r, mss, 0))
            .or(topology_bound),
        window_bps: sum_over_flows(&tcp, &samples, &|f, s| {
            bounds::window_bps(window_bytes(f, s)?, min_rtt_us(f, s)?)
        }),
        pacing_bps: pacing.map(|p| p.1),
        pacing_cap: pacing.map(|p| p.0),
    };
    let traced = run.trace.as_ref().is_some_and(|t| t.taken) && !run.events.is_empty();
    let recoveries = Recoveries {
        events: traced.then_some(run.events.as_slice()),
        sample_interval_us: run.params.sample_interval_us,
    };
    let estimates = loss_estimates(&tcp, &samples, recoveries);
    let limits = weighted_limits(&tcp);
    let episodes = episodes(&tcp, &samples, recoveries);
    let kernel = traced.then(|| {
        let senders: Vec<(u32, Host)> = tcp.iter().map(|f| (f.id, f.direction.sender())).collect();
        kernel_episodes(&run.events, &senders)
    });
    let steady: Vec<Steady> = tcp
        .iter()
        .zip(&samples)
        .map(|(f, s)| steady(f, s))
        .collect();
    let gap_pacer = spec
        .as_ref()
        .is_some_and(|s| matches!(s.link(direction).pace, Some(Pace::Rate(_))));
    let link = match facts.as_ref().and_then(|p| p.capacity) {
        _ if policed => "the policer's".to_owned(),
        Some(c) => format!("the {}'s mean", c.by.name()),
        None => "the bottleneck's".to_owned(),
    };
    let verdict = verdict(
        &tcp,
        &steady,
        limits,
        measured_bps,
        &bounds,
        gap_pacer,
        &link,
    );
    let real_path = (facts.is_none() && flow_links.is_none())
        .then(|| real_path(run, &tcp))
        .flatten();
    let mut explanation = Explanation {
        path: facts,
        real_path,
        tunings,
        measured_bps,
        bounds,
        estimates,
        limits,
        episodes,
        kernel,
        retransmit_causes: None,
        verdict,
        findings: Vec::new(),
        recommendations: Vec::new(),
        changes: changes::responses(run, direction, &samples, mss),
        flow_links,
    };
    detect(run, &tcp, &steady, direction, &mut explanation);
    if !other.is_empty() {
        let back = throughput::bps(&run.intervals, Counted::Received, 0, |id| {
            other.iter().any(|f| f.id == id)
        })
        .unwrap_or(0.0);
        explanation.findings.push(Finding {
            kind: FindingKind::OtherDirection,
            message: format!(
                "the run is bidirectional: these figures are its {} flows'; its {} flows ({}) carried {} through their own bottleneck",
                direction.name(),
                other[0].direction.name(),
                other.len(),
                format_rate(back)
            ),
        });
    }
    explanation
}

fn path_facts(
    record: &PathRecord,
    spec: &PathSpec,
    tcp: &[&FlowRecord],
    direction: Direction,
) -> PathFacts {
    let access: Vec<PathSpec> = record
        .access
        .iter()
        .map(|a| a.parse().unwrap_or_default())
        .collect();
    let lab = Dumbbell::new(spec, &access);
    let client = flows_client(&lab, tcp);
    let base_rtt_us = lab.client_rtt_us(client);
    let dir = direction;
    // Each setting of the data's way, destructured whole: a new one does not compile
    // until explain says what it makes of it.
    let LinkSpec {
        delay_us: _, // in the base RTT, through the lab's dumbbell
        // Losses the flows measured, never the configured ones: retransmissions and
        // the estimates read them from tcp_info.
        jitter: _,
        loss: _,
        duplicate: _,
        corrupt: _,
        reorder: _,
        bottleneck,
        queue: _, // through the lab's queue limit, which sizes a queue in BDP
        aqm: _,   // the aqm finding reads the link's counters
        police,
        pace: _,       // the pacing bound (`pacing_cap`)
        txqueuelen: _, // the host_queue finding reads the hosts' queues
        // Left out of the base RTT: a window over a shorter round trip is a higher rate,
        // so the bounds stay bounds.
        delay_trace: _,
        loss_trace: _, // as `loss`: measured, never configured
    } = spec.link(dir);
    let bottleneck_bps = match *bottleneck {
        Bottleneck::Rate { bps, .. } if changing(spec, dir).is_none() => Some(bps),
        Bottleneck::Rate { .. } | Bottleneck::Trace { .. } | Bottleneck::Unlimited => None,
    };
    let queue_bytes = lab.queue_limit(LinkRole::Bottleneck, dir).map(|l| match l {
        path::Limit::Bytes(b) => b,
        path::Limit::Packets(p) => p * u64::from(spec.mtu),
    });
    PathFacts {
        spec: record.spec.clone(),
        bottleneck_bps,
        capacity: None,
        base_rtt_us,
        client: access
            .iter()
            .any(|a| a.rtt_us() > 0)
            .then_some(client as u32 + 1),
        bdp_bytes: bottleneck_bps.map(|r| bounds::bdp_bytes(r, base_rtt_us) as u64),
        queue_bytes: queue_bytes.filter(|_| *bottleneck != Bottleneck::Unlimited),
        police: police.map(|p| PolicerFacts {
            bps: p.bps,
            burst_bytes: p.burst_bytes,
        }),
    }
}

/// What changes the capacity of the bottleneck carrying `direction`'s data, if anything
/// does.
fn changing(spec: &PathSpec, direction: Direction) -> Option<Changing> {
    let link = spec.link(direction);
    match link.bottleneck {
        Bottleneck::Trace { .. } => Some(Changing::Trace),
        Bottleneck::Rate { .. } => spec
            .timeline(direction)
            .specs()
            .any(|s| s.bottleneck != link.bottleneck)
            .then_some(Changing::Schedule),
        Bottleneck::Unlimited => None,
    }
}

/// What the bottleneck carrying `direction`'s data offered over the measured `window`,
/// bit/s, from the emulator's samples of its capacity; `None` without samples. The
/// run's times move to the emulator's clock by the wall-clock anchors of both (the
/// bytes read in the window crossed the bottleneck in it: none was sent before t0).
fn capacity_bps(
    run: &RunRecord,
    path: &PathRecord,
    direction: Direction,
    window: &throughput::Window,
) -> Option<f64> {
    let stats = match direction {
        path::Direction::Up => &path.up,
        path::Direction::Down => &path.down,
    };
    let shift = u64::try_from(run.started_unix_us - path.epoch_unix_us).ok()?;
    let span = window
        .end_us
        .checked_sub(window.start_us)
        .filter(|s| *s > 0)?;
    let bytes = stats.offered_bytes(window.start_us + shift, window.end_us + shift)?;
    Some(bytes * 8e6 / span as f64)
}

/// The client (from 0) the TCP flows ran from, the one with the longest end-to-end
/// RTT if several; flows that name none ran from the only client, or from one the
/// record does not say, taken as the one the lab sized its queue for.
fn flows_client(lab: &Dumbbell, tcp: &[&FlowRecord]) -> usize {
    let named = tcp.iter().filter_map(|f| {
        f.host
            .as_deref()?
            .strip_prefix("client")?
            .parse::<usize>()
            .ok()?
            .checked_sub(1)
    });
    named
        .max_by_key(|&k| lab.client_rtt_us(k))
        .unwrap_or_else(|| lab.sizing_client())
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
        spec.and_then(|s| s.link(direction).pace),
    ) {
        (_, _, Some(Pace::Window(rtt))) => format!("gap {}", rtt.name()),
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
        transactions: run.params.transactions,
        nodelay: t.nodelay,
        pacing,
    }
}

/// The sending end's samples of `flow`, in time order.
pub fn sender_samples<'a>(run: &'a RunRecord, flow: &FlowRecord) -> Vec<&'a SampleRecord> {
    end_samples(run, flow, flow.direction.sender())
}

/// `host`'s samples of `flow`, in time order.
fn end_samples<'a>(run: &'a RunRecord, flow: &FlowRecord, host: Host) -> Vec<&'a SampleRecord> {
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

/// A per-flow figure summed over the flows that have it; `None` if none has.
fn sum_over_flows(
    tcp: &[&FlowRecord],
    samples: &[Vec<&SampleRecord>],
    per_flow: &dyn Fn(&FlowRecord, &[&SampleRecord]) -> Option<f64>,
) -> Option<f64> {
    let values: Vec<f64> = tcp
        .iter()
        .zip(samples)
        .filter_map(|(f, s)| per_flow(f, s))
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Per flow, then summed: parallel streams each get their own window and loss.
fn loss_estimates(
    tcp: &[&FlowRecord],
    samples: &[Vec<&SampleRecord>],
    recoveries: Recoveries,
) -> Estimates {
    Estimates {
        mathis_bps: sum_over_flows(tcp, samples, &|f, s| {
            bounds::mathis_bps(f.mss, flow_rtt_us(f), loss_event_rate(f, s, recoveries)?)
        }),
        pftk_bps: sum_over_flows(tcp, samples, &|f, s| {
            let rto_us = s.last().map_or(0, |s| u64::from(s.info.rto));
            bounds::pftk_bps(
                f.mss,
                flow_rtt_us(f),
                loss_event_rate(f, s, recoveries)?,
                rto_us,
                2.0,
                window_bytes(f, s),
            )
        }),
    }
}

/// The shortest round trip the flow saw: the kernel's minimum RTT from its samples,
/// else the smallest smoothed RTT. The window bound is per this round trip.
pub fn min_rtt_us(flow: &FlowRecord, samples: &[&SampleRecord]) -> Option<u64> {
    samples
        .iter()
        .map(|s| s.info.min_rtt)
        .filter(|&r| r > 0)
        .min()
        .or(Some(flow.rtt.min_us).filter(|&r| r > 0))
        .map(u64::from)
}

/// The most a flow could keep in flight on average: the smaller of the largest window
/// the receiver advertised (as the sender saw it) and the send buffer (as set, or as
/// large as autotuning grew it), but never less than the samples' mean outstanding —
/// Linux lets a write fill a buffer's last packet past SO_SNDBUF (up to 64 KiB). By
/// Little's law a flow delivers its mean in flight per mean round trip, so this per the
/// shortest round trip bounds it.
fn window_bytes(flow: &FlowRecord, samples: &[&SampleRecord]) -> Option<u64> {
    let rwnd = samples
        .iter()
        .map(|s| u64::from(s.info.snd_wnd))
        .max()
        .filter(|w| *w > 0);
    let sndbuf = Some(send_buffer_bytes(flow.sndbuf, samples)).filter(|b| *b > 0);
    let mean_outstanding = mean_outstanding_bytes(samples);
    let buffer = match (sndbuf, mean_outstanding) {
        (Some(b), Some(m)) => Some(b.max(m)),
        (b, m) => b.or(m),
    };
    match (rwnd, buffer) {
        (Some(r), Some(b)) => Some(r.min(b)),
        (r, b) => r.or(b),
    }
}

/// The bytes in flight averaged over time: each sample holds until the next. Little's
/// law wants the time average; a watched socket's samples are not evenly spaced (its
/// state changes and its closing are looked up between ticks, when little is in
/// flight), and their plain mean fell 20 % below it (an scp of 4 MB: 86.8 against
/// 108.3 KB), which made the bound less than the throughput it bounds.
fn mean_outstanding_bytes(samples: &[&SampleRecord]) -> Option<u64> {
    let in_flight = |s: &SampleRecord| u64::from(s.info.unacked) * u64::from(s.info.snd_mss);
    let (first, last) = (samples.first()?, samples.last()?);
    let span = last.t_us - first.t_us;
    if span <= 0 {
        let sum: u64 = samples.iter().map(|s| in_flight(s)).sum();
        return Some(sum / samples.len() as u64);
    }
    let weighted: f64 = samples
        .windows(2)
        .map(|w| in_flight(w[0]) as f64 * (w[1].t_us - w[0].t_us).max(0) as f64)
        .sum();
    Some((weighted / span as f64) as u64)
}

/// A send buffer as set, or as large as autotuning grew it: at the end, or in any
/// sample's socket memory (a watched connection's buffer is known only from these).
fn send_buffer_bytes(b: BufferSize, samples: &[&SampleRecord]) -> u64 {
    if b.requested.is_some() {
        return b.effective;
    }
    let sampled = samples
        .iter()
        .filter_map(|s| s.skmem.map(|m| u64::from(m.sndbuf)))
        .max()
        .unwrap_or(0);
    b.effective.max(b.at_end).max(sampled)
}

/// Loss events (recovery episodes) per data segment sent; `None` with fewer than
/// [`MIN_LOSS_EVENTS`], and for BBR, which does not halve its window on loss as the
/// loss models assume.
fn loss_event_rate(
    flow: &FlowRecord,
    samples: &[&SampleRecord],
    recoveries: Recoveries,
) -> Option<f64> {
    if flow.cc == "bbr" {
        return None;
    }
    let events = recoveries.of(flow, samples);
    let sent = samples.last()?.info.data_segs_out;
    (events >= MIN_LOSS_EVENTS && sent > 0).then(|| events as f64 / f64::from(sent))
}

/// How a flow's recovery episodes are counted: from the kernel's events where the run
/// has them, else from its samples.
#[derive(Clone, Copy)]
struct Recoveries<'a> {
    events: Option<&'a [EventRecord]>,
    sample_interval_us: u64,
}

impl Recoveries<'_> {
    fn source(self) -> Source {
        match self.events {
            Some(_) => Source::KernelEvents,
            None => Source::Samples {
                every_us: self.sample_interval_us,
            },
        }
    }

    /// `flow`'s entries into fast recovery or the loss state.
    fn of(self, flow: &FlowRecord, samples: &[&SampleRecord]) -> u64 {
        match self.events {
            Some(events) => {
                let k = kernel_episodes(events, &[(flow.id, flow.direction.sender())]);
                k.fast_recoveries + k.timeouts
            }
            None => recovery_episodes(samples),
        }
    }
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

fn steady(flow: &FlowRecord, samples: &[&SampleRecord]) -> Steady {
    let part = steady_part(samples);
    let bytes =
        |f: &dyn Fn(&TcpInfo) -> f64| median(part.iter().map(|s| f(&s.info))).unwrap_or(0.0);
    Steady {
        sampled: !part.is_empty(),
        in_flight: bytes(&|i| f64::from(i.unacked) * f64::from(i.snd_mss)),
        cwnd: bytes(&|i| f64::from(i.snd_cwnd) * f64::from(i.snd_mss)),
        rwnd: bytes(&|i| f64::from(i.snd_wnd)),
        unsent: bytes(&|i| f64::from(i.notsent_bytes)),
        sndbuf: send_buffer_bytes(flow.sndbuf, samples) as f64,
    }
}

/// Each stream's rate, or for many streams their range and median.
fn stream_rates(rates: &[f64]) -> String {
    const LISTED: usize = 8;
    if rates.len() <= LISTED {
        let list: Vec<String> = rates.iter().map(|r| format_rate(*r)).collect();
        return list.join(", ");
    }
    let lowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = rates.iter().copied().fold(0.0, f64::max);
    let middle = median(rates.iter().copied()).unwrap_or(0.0);
    format!(
        "from {} to {}, median {}",
        format_rate(lowest),
        format_rate(highest),
        format_rate(middle)
    )
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn episodes(
    tcp: &[&FlowRecord],
    samples: &[Vec<&SampleRecord>],
    recoveries: Recoveries,
) -> Episodes {
    let mut e = Episodes {
        retransmits: tcp.iter().map(|f| f.retransmits).sum(),
        retransmit_rate: 0.0,
        recovery_episodes: 0,
        recovery_from: recoveries.source(),
        slow_start_exits: 0,
        first_slow_start_exit_us: None,
    };
    let mut sent = 0u64;
    for (flow, flow_samples) in tcp.iter().zip(samples) {
        if let Some(last) = flow_samples.last() {
            sent += u64::from(last.info.data_segs_out);
        }
        e.recovery_episodes += recoveries.of(flow, flow_samples);
        let in_slow_start = |s: &SampleRecord| slow_start(flow, &s.info);
        for pair in flow_samples.windows(2) {
            if in_slow_start(pair[0]) && !in_slow_start(pair[1]) {
                e.slow_start_exits += 1;
                let t = pair[1].t_us;
                e.first_slow_start_exit_us =
                    Some(e.first_slow_start_exit_us.map_or(t, |f| f.min(t)));
            }
        }
    }
    e.retransmit_rate = if sent > 0 {
        e.retransmits as f64 / sent as f64
    } else {
        0.0
    };
    e
}

/// Whether a sender is in slow start (see [`Episodes::slow_start_exits`]): BBR in
/// STARTUP, before it sets ssthresh; any other below ssthresh (or with none) while not
/// repairing a loss in fast recovery or reducing its window for ECN (CWR).
fn slow_start(flow: &FlowRecord, info: &TcpInfo) -> bool {
    if flow.cc == "bbr" {
        return info.snd_ssthresh >= INFINITE_SSTHRESH;
    }
    !matches!(info.ca_state, CA_RECOVERY | CA_CWR) && info.snd_cwnd < info.snd_ssthresh
}

/// The cap on the TCP flows' rate together and its name, bit/s of goodput: a gap
/// pacer's for the whole direction (its packets' headers taken off), SO_MAX_PACING_RATE
/// (`--fq-rate`) or the application's (`--app-rate`) per flow, a server's `--max-rate`
/// on what it sends; the smallest where several apply.
fn pacing_cap(
    run: &RunRecord,
    spec: Option<&PathSpec>,
    direction: Direction,
    streams: usize,
    mss: u32,
) -> Option<(&'static str, f64)> {
    let gap = spec
        .and_then(|s| match s.link(direction).pace {
            Some(Pace::Rate(bps)) => Some(bps),
            _ => None,
        })
        .filter(|_| mss > 0)
        .map(|bps| bounds::link_goodput_bps(bps, mss, 0));
    let t = &run.params.tuning;
    let per_flow = |cap: Option<u64>| cap.map(|r| r as f64 * streams as f64);
    let server = run
        .server
        .rate_cap_bps
        .filter(|_| direction == Direction::Down)
        .map(|r| r as f64);
    [
        ("gap pacer", gap),
        ("--fq-rate", per_flow(t.pacing_rate)),
        ("--app-rate", per_flow(t.app_rate)),
        ("the server's --max-rate", server),
    ]
    .into_iter()
    .filter_map(|(name, cap)| cap.map(|c| (name, c)))
    .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The verdict tells the same story as the senders' limits (see [`crate::limits`]):
/// their dominant limit, where the network's (`cwnd`) is named by its element when
/// the run reached one — the bottleneck link full, or a gap pacer's rate.
fn verdict(
    tcp: &[&FlowRecord],
    steady: &[Steady],
    limits: LimitShares,
    measured: f64,
    bounds: &Bounds,
    gap_pacer: bool,
    link_name: &str,
) -> Verdict {
    let rate = |bps: f64| format_rate(bps);
    let v = |limit, reason: String| Verdict { limit, reason };
    if tcp.is_empty() {
        return v(
            Limit::App,
            "no TCP flows: nothing adapts its rate to the path (UDP flows send at the rate they are given, probes at their interval)".into(),
        );
    }
    let link_full = bounds.link_bps.filter(|l| measured >= LINK_FULL * l);
    let link = |l: f64| {
        v(
            Limit::Link,
            format!(
                "{} measured carries {link_name} {} of goodput at {:.0} %",
                rate(measured),
                rate(l),
                100.0 * measured / l
            ),
        )
    };
    let sampled: Vec<(&FlowRecord, &Steady)> = tcp
        .iter()
        .copied()
        .zip(steady)
        .filter(|(_, s)| s.sampled)
        .collect();
    if sampled.is_empty() {
        return match link_full {
            Some(l) => link(l),
            None => v(
                Limit::Unknown,
                "no sender's tcp_info was sampled (an iperf3 sender, or --sample-interval 0): its windows are not known".into(),
            ),
        };
    }
    let dominant = limits.dominant();
    let share = format!(
        "{}-limited {:.0} % of the time",
        dominant.name(),
        100.0 * limits.get(dominant)
    );
    if dominant == record::Limit::Cwnd {
        let paced_to = bounds
            .pacing_bps
            .filter(|p| gap_pacer && measured >= REACHED * p);
        if let Some(p) = paced_to.filter(|p| bounds.link_bps.is_none_or(|l| *p < l)) {
            return v(
                Limit::Pacing,
                format!(
                    "{} measured against the gap pacer's {} of goodput ({share})",
                    rate(measured),
                    rate(p)
                ),
            );
        }
        if let Some(l) = link_full {
            return link(l);
        }
    }
    // The flow that carried the most bytes among those this limit held.
    let (_, figures) = sampled
        .iter()
        .copied()
        .filter(|(f, _)| f.limits.dominant() == dominant)
        .chain(sampled.iter().copied())
        .max_by(|a, b| a.0.received_bytes.cmp(&b.0.received_bytes))
        .expect("sampled flows");
    let held = sampled
        .iter()
        .filter(|(f, _)| f.limits.dominant() == dominant)
        .count();
    let of_flows = if tcp.len() > 1 {
        format!("; {held} of {}", count(tcp.len(), "flow"))
    } else {
        String::new()
    };
    let limit = match dominant {
        record::Limit::Rwnd => Limit::Rwnd,
        record::Limit::Sndbuf => Limit::Sndbuf,
        record::Limit::Cwnd => Limit::Cwnd,
        record::Limit::Pacing => Limit::Pacing,
        record::Limit::App => Limit::App,
    };
    v(
        limit,
        format!(
            "{} ({share}{of_flows})",
            why(dominant, figures, measured, bounds)
        ),
    )
}

/// What one flow's steady state shows of `limit`.
fn why(limit: record::Limit, s: &Steady, measured: f64, bounds: &Bounds) -> String {
    let size = |b: f64| format_size(b as u64);
    match limit {
        record::Limit::Rwnd => format!(
            "{} in flight fills the receiver's advertised window of {}",
            size(s.in_flight),
            size(s.rwnd)
        ),
        record::Limit::Sndbuf => format!(
            "{} in flight, nothing left unsent and the send buffer ({}) full, with room for {} in the congestion window",
            size(s.in_flight),
            size(s.sndbuf),
            size(s.cwnd)
        ),
        record::Limit::Cwnd => format!(
            "{} in flight ≈ the congestion window of {}: the network (loss, the queue) held the sender back",
            size(s.in_flight),
            size(s.cwnd)
        ),
        record::Limit::Pacing => match (bounds.pacing_cap, bounds.pacing_bps) {
            (Some(cap), Some(p)) => format!(
                "{} measured against {cap} of {} on the senders' rate",
                format_rate(measured),
                format_rate(p)
            ),
            _ => "the senders were paced at a cap".into(),
        },
        record::Limit::App => format!(
            "{} in flight with room in both windows and the send buffer: the application wrote no more",
            size(s.in_flight)
        ),
    }
}

/// Runs every detector, adding findings and recommendations.
impl Explanation {
    /// Cites what the retransmissions in the run's capture followed: the drops of the
    /// emulator by why, and those no drop explains.
    pub fn cite_capture(&mut self, causes: RetransmitCauses, at: CapturePoint) {
        let mut parts: Vec<(u64, &str)> = causes
            .after_drops
            .iter()
            .map(|&(reason, n)| {
                let by = match reason {
                    DropReason::Loss => "random loss",
                    DropReason::Queue => "drops by the full bottleneck queue",
                    DropReason::Aqm => "drops by the AQM",
                    DropReason::Oversize => "drops of packets above the MTU",
                    DropReason::Police => "drops by the policer",
                };
                (n, by)
            })
            .collect();
        if causes.unexplained() > 0 {
            parts.push((
                causes.unexplained(),
                "no drop of the emulator's (spurious, or lost before the bottleneck)",
            ));
        }
        if let Some(((n, by), rest)) = parts.split_first() {
            // "37 of 41 retransmissions follow drops by …; 4 follow random loss"
            let total = count(causes.retransmits, "retransmission");
            let (of, noun) = total.split_once(' ').unwrap_or((&total, ""));
            let follow = |n: u64| if n == 1 { "follows" } else { "follow" };
            let mut message = format!("{n} of {of} {noun} {} {by}", follow(*n));
            for (n, by) in rest {
                message += &format!("; {n} {} {by}", follow(*n));
            }
            self.findings.push(Finding {
                kind: FindingKind::RetransmitCauses,
                message: format!("{message} (the capture at the {})", at.name()),
            });
        }
        self.retransmit_causes = Some(causes);
    }
}

fn detect(
    run: &RunRecord,
    tcp: &[&FlowRecord],
    steady: &[Steady],
    direction: Direction,
    e: &mut Explanation,
) {
    let bdp = e.path.as_ref().and_then(|p| p.bdp_bytes);
    let t = &run.params.tuning;
    let kernel = e.kernel;
    let mut find = |kind, message: String, recommendation: Option<String>| {
        e.findings.push(Finding { kind, message });
        if let Some(r) = recommendation {
            e.recommendations.push(r);
        }
    };
    if let Some(message) = emulator_behind(run) {
        find(FindingKind::EmulatorLate, message, None);
    }
    if let Some(message) = own_delay(run, direction) {
        find(FindingKind::Delay, message, None);
    }
    for l in e.flow_links.iter().flatten() {
        find(FindingKind::BindingLink, binding_link(l), None);
    }
    if let Some(message) = min_rtt_beside_base(run, tcp, direction, e.path.as_ref()) {
        find(FindingKind::MinRtt, message, None);
    }
    // The kernel's own account, where its events were taken.
    if let Some(k) = kernel {
        find(
            FindingKind::KernelEvents,
            format!(
                "the kernel's events: cwnd cut {} ({}, {}, {}), {}",
                count(k.cwnd_cuts(), "time"),
                count(k.fast_recoveries, "fast recovery episode"),
                count(k.timeouts, "retransmission timeout"),
                count(k.ecn_reductions, "ECN reduction"),
                count(k.retransmit_events, "retransmission event"),
            ),
            None,
        );
        if let Some(z) = k.longest_zero_window.filter(|z| z.lasted_us > 0) {
            find(
                FindingKind::ZeroWindow,
                format!(
                    "the send window stalled for {} at {} while the receiver advertised 0 (flow {}, the kernel's tcp_probe events)",
                    format_duration_us(z.lasted_us as u64),
                    format_duration_us(z.at_us.max(0) as u64),
                    z.flow
                ),
                Some("the receiving application did not read fast enough: read more often or in larger reads (--read-size), or give it more CPU".into()),
            );
        }
    }
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
                FindingKind::BufferCapped,
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
                FindingKind::BufferBelowBdp,
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
                FindingKind::NagleDelayedAck,
                format!(
                    "writes of {} are below the MSS ({mss} B) with Nagle on, and the throughput is under half the smallest bound: a small write waits for the ACK of the previous one, which the receiver may delay up to 40 ms",
                    format_size(u64::from(t.write_size))
                ),
                Some("turn Nagle off (--no-delay, TCP_NODELAY) or write at least an MSS at a time".into()),
            );
        }
    }
    if let Some((message, advice)) = transactions(run, tcp) {
        find(FindingKind::Transactions, message, None);
        if let Some(stall) = advice {
            find(FindingKind::NagleStall, stall.0, Some(stall.1));
        }
    }
    if let Some((message, pace)) =
        queue_overflow(run, e.path.as_ref(), &e.tunings, direction, tcp.len())
    {
        find(FindingKind::QueueOverflow, message, pace);
    }
    for way in data_ways(run, direction, e.flow_links.as_deref()) {
        if let Some(message) = aqm_effect(run, &way) {
            find(FindingKind::Aqm, message, None);
        }
        if let Some(message) = policer_drops(&way) {
            find(FindingKind::Policer, message, None);
        }
    }
    if let Some((message, advice)) = host_queue(run, direction, e.episodes.retransmits) {
        find(FindingKind::HostQueue, message, Some(advice));
    }
    // Parallel streams sharing unevenly.
    if tcp.len() > 1 {
        let rates: Vec<f64> = tcp.iter().map(|f| f.received_bps).collect();
        if let Some(j) = jain(&rates).filter(|j| *j < UNFAIR_BELOW) {
            find(
                FindingKind::UnfairStreams,
                format!(
                    "the {} streams shared unevenly: Jain's index {j:.2} ({})",
                    tcp.len(),
                    stream_rates(&rates)
                ),
                None,
            );
        }
    }
    if e.limits.rwnd >= SHARE_NOTED {
        let rwnd = steady.iter().map(|s| s.rwnd).fold(0.0, f64::max);
        find(
            FindingKind::ReceiverLimited,
            format!(
                "the receiver's window limited the senders {:.0} % of the time (advertised {})",
                100.0 * e.limits.rwnd,
                format_size(rwnd as u64)
            ),
            bdp.map(|b| format!("let the receiver advertise ≥ the BDP of {}: a larger --rcvbuf, or leave it to autotuning (tcp_rmem's maximum)", format_size(b))),
        );
    }
    if let Some(message) = tcp.first().and_then(|f| window_in_segments(run, f)) {
        find(FindingKind::WindowSegments, message, None);
    }
    if !tcp.is_empty() && e.limits.app >= SHARE_NOTED {
        find(
            FindingKind::ApplicationLimited,
            format!(
                "the application had nothing to send {:.0} % of the time",
                100.0 * e.limits.app
            ),
            None,
        );
    }
    if e.episodes.retransmits > 0 && e.verdict.limit == Limit::Cwnd {
        let mathis = e
            .estimates
            .mathis_bps
            .map(|m| format!("; Mathis' model allows {}", format_rate(m)))
            .unwrap_or_default();
        find(
            FindingKind::Loss,
            format!(
                "{} retransmitted ({:.3} % of those sent) in {}{mathis}",
                count(e.episodes.retransmits, "segment"),
                100.0 * e.episodes.retransmit_rate,
                count(e.episodes.recovery_episodes, "recovery episode")
            ),
            (e.tunings.cc != "bbr").then(|| {
                "loss bounds a loss-based sender (cubic, reno) at about MSS/RTT·1.22/√p: find the loss, or try BBR (-C bbr), which does not read loss as congestion".to_string()
            }),
        );
    }
    if let Some(t) = e.episodes.first_slow_start_exit_us {
        find(
            FindingKind::SlowStart,
            format!(
                "the first sender left slow start at {}{}",
                format_duration_us(t.max(0) as u64),
                match e.episodes.slow_start_exits {
                    1 => String::new(),
                    n => format!(" ({} in all)", count(n, "exit")),
                }
            ),
            None,
        );
    }
}

/// A window held this share of a flow's samples is one it ran with.
const WINDOW_HELD: f64 = 0.05;

/// What a receive window set by the user (`--rcvbuf`, `-w`) let an rwnd-limited flow
/// keep in flight: whole segments, since a sender sends no part of one to fill a
/// window (a window a few bytes short of a segment more holds a segment less), per
/// round trip; and, where the flow ran with two such windows, when it changed and the
/// receiver's rcv_ssthresh that let it (Linux offers no window above rcv_ssthresh,
/// which grows only to the room its buffer has beside each packet that arrives, so
/// identical runs can end up with either).
fn window_in_segments(run: &RunRecord, flow: &FlowRecord) -> Option<String> {
    if flow.rcvbuf.requested.is_none() || flow.limits.rwnd < SHARE_NOTED {
        return None;
    }
    let samples = sender_samples(run, flow);
    let rtt_us = min_rtt_us(flow, &samples)?;
    let mss = samples.last()?.info.snd_mss;
    if mss == 0 {
        return None;
    }
    // Each window in the order it was first seen, with how many samples had it.
    let mut windows: Vec<(u32, i64, usize)> = Vec::new();
    for s in &samples {
        let w = s.info.snd_wnd;
        match windows.iter_mut().find(|(bytes, ..)| *bytes == w) {
            Some((_, _, n)) => *n += 1,
            None => windows.push((w, s.t_us, 1)),
        }
    }
    let held: Vec<(u32, i64)> = windows
        .into_iter()
        .filter(|&(w, _, n)| w > 0 && n as f64 >= WINDOW_HELD * samples.len() as f64)
        .map(|(w, since, _)| (w, since))
        .collect();
    let short = |w: u32| w % mss;
    // A window whose bytes past its whole segments are worth noting: 2 % of it.
    let wasted = |w: u32| f64::from(short(w)) >= 0.02 * f64::from(w);
    if !(held.len() > 1 || held.iter().any(|&(w, _)| wasted(w))) {
        return None;
    }
    let rate = |w: u32| f64::from(w / mss * mss) * 8e6 / rtt_us as f64;
    let describe = |w: u32| {
        let whole = w / mss;
        let beyond = if short(w) > 0 {
            format!(" ({} B short of {})", mss - short(w), whole + 1)
        } else {
            String::new()
        };
        format!(
            "{w} B, room for {} of {mss} B{beyond}, {} over round trips of {}",
            count(u64::from(whole), "whole segment"),
            format_rate(rate(w)),
            format_duration_us(rtt_us)
        )
    };
    let whose = if run.flows.iter().filter(|f| f.udp.is_none()).count() > 1 {
        format!("flow {}'s ", flow.id)
    } else {
        String::new()
    };
    let mut message = match held.as_slice() {
        [(w, _)] => format!("{whose}receive window of {}", describe(*w)),
        _ => {
            let steps: Vec<String> = held
                .iter()
                .enumerate()
                .map(|(k, &(w, since))| match k {
                    0 => describe(w),
                    _ => format!(
                        "from {} {}",
                        format_duration_us(since.max(0) as u64),
                        describe(w)
                    ),
                })
                .collect();
            format!(
                "{whose}receive window changed during the run: {}",
                steps.join("; ")
            )
        }
    };
    message += " (a sender sends whole segments only";
    if held.iter().any(|&(w, _)| short(w) > 0) {
        message += "; Linux keeps a window it offered while its free space stays within a segment of it instead of rounding it to whole segments again";
    }
    message += ")";
    if let [(_, _), (_, changed_at), ..] = held.as_slice() {
        let receiver = end_samples(run, flow, flow.direction.receiver());
        let ssthresh = |before: bool| {
            median(
                receiver
                    .iter()
                    .filter(|s| (s.t_us < *changed_at) == before)
                    .map(|s| f64::from(s.info.rcv_ssthresh)),
            )
        };
        if let (Some(a), Some(b)) = (ssthresh(true), ssthresh(false)) {
            message += &format!(
                "; the receiver's rcv_ssthresh, above which it offers no window, grew from {} B to {} B: it grows only to the room its buffer has beside each packet arriving, so identical runs end with either window",
                a as u64, b as u64
            );
        }
    }
    Some(message)
}

/// A request/response run's transactions: their rate and median time in round trips;
/// and, when each request was split into writes with Nagle on and the median
/// transaction took a delayed ACK's time more than its round trips (two: Nagle holds
/// the later write for the first's ACK; three with a handshake), the stall named from
/// its evidence with its arithmetic, and what to change.
fn transactions(
    run: &RunRecord,
    tcp: &[&FlowRecord],
) -> Option<(String, Option<(String, String)>)> {
    let (rr, stats) = (run.params.transactions?, run.summary.transactions?);
    let rtt_us = tcp
        .iter()
        .filter_map(|f| min_rtt_us(f, &sender_samples(run, f)))
        .min();
    let median_us = stats.latency_us.p50;
    let in_round_trips = rtt_us
        .map(|r| {
            format!(
                " ({:.1} round trips of {})",
                median_us / r as f64,
                format_duration_us(r)
            )
        })
        .unwrap_or_default();
    let message = format!(
        "{} transactions, {:.1} a second: {}{}; median time {}{in_round_trips}",
        stats.count,
        stats.per_second,
        rr.describe(),
        if rr.new_connection {
            " (the handshake's round trip included)"
        } else {
            ""
        },
        format_duration_us(median_us.round() as u64),
    );
    // The round trips a transaction takes with no delayed ACK: the request's and the
    // response's; a round trip more when Nagle holds a request's later write until
    // its first is acknowledged; and a connection's handshake.
    let split = !run.params.tuning.nodelay && rr.request_writes > 1;
    let round_trips = 1 + u64::from(split) + u64::from(rr.new_connection);
    let Some(rtt_us) = rtt_us else {
        return Some((message, None));
    };
    let held_us = median_us - (round_trips * rtt_us) as f64;
    if !split || held_us < NAGLE_STALL_US {
        return Some((message, None));
    }
    // The responder's ACK timeout while it waited for the rest of each request.
    let ato = median(tcp.iter().flat_map(|f| {
        end_samples(run, f, f.direction.receiver())
            .into_iter()
            .map(|s| f64::from(s.info.ato))
            .filter(|&a| a > 0.0)
    }))
    .map(|a| {
        format!(
            " (its ACK timeout, tcpi_ato, was {})",
            format_duration_us(a as u64)
        )
    })
    .unwrap_or_default();
    let handshake = if rr.new_connection {
        "the handshake's, "
    } else {
        ""
    };
    let stall = format!(
        "Nagle's algorithm and the delayed ACK stalled each transaction: the request's first write left at once, its later write (below the MSS) waited for the first's ACK, which the server delayed{ato} since it answers only a whole request, and then took its own round trip to the response; the median transaction took {} = {} round trips of {} ({handshake}the first write's, the later write's) + {} of the server's delayed ACK",
        format_duration_us(median_us.round() as u64),
        round_trips,
        format_duration_us(rtt_us),
        format_duration_us(held_us.round() as u64)
    );
    let advice = "turn Nagle off (-N, TCP_NODELAY) or write each request in one write (--rr-writes 1, as netperf's TCP_RR does)".to_string();
    Some((message, Some((stall, advice))))
}

/// The bottleneck queue dropped packets: how many, and the trains (`crate::burst`) of
/// the TCP flow with the longest against the queue. Pacing is advised (to unpaced
/// senders) only when those trains overflow the queue: when 99 % of the flow's packets
/// came in trains of at most half of it, the senders' window filled it, which pacing
/// does not shrink; more in longer trains overflow it from half full on their own.
/// What the bottleneck's AQM did in the data's direction: its drops and CE marks, and
/// the queue delay it held (the median of the queue series over the bottleneck's rate).
/// An emulator whose median packet left this late fell behind its path: the path's
/// delays were longer than configured, for most packets.
const EMULATOR_BEHIND_US: f64 = 1_000.0;

/// The directions in which the emulator fell behind (its median lateness at least
/// [`EMULATOR_BEHIND_US`]), said with their lateness.
fn emulator_behind(run: &RunRecord) -> Option<String> {
    let path = run.path.as_ref()?;
    let late: Vec<String> = [("up", &path.up), ("down", &path.down)]
        .into_iter()
        .filter(|(_, d)| d.lateness.p50_us >= EMULATOR_BEHIND_US)
        .map(|(name, d)| {
            format!(
                "{name} p50 {}, p99 {} (of {} packets)",
                format_duration_us(d.lateness.p50_us.round() as u64),
                format_duration_us(d.lateness.p99_us.round() as u64),
                d.lateness.packets
            )
        })
        .collect();
    (!late.is_empty()).then(|| {
        format!(
            "the emulator fell behind: it wrote packets late by {}; the path's delays were longer than configured (this machine could not emulate this path under this load: fewer flows, a lower rate or a faster machine)",
            late.join("; ")
        )
    })
}

/// How far TCP's shortest round trip may lie from the path's base RTT, as a share of
/// it, before explain names the difference.
const MIN_RTT_TOLERANCE: f64 = 0.03;

/// TCP's shortest round trip (tcpi_min_rtt, over the flows of the client whose base RTT
/// the path's facts give) against that base RTT, when they differ by more than
/// [`MIN_RTT_TOLERANCE`]: above it by a full segment's and its ACK's serialization at
/// the links' rates and the lab's own time per packet, below it only by jitter.
fn min_rtt_beside_base(
    run: &RunRecord,
    tcp: &[&FlowRecord],
    direction: Direction,
    facts: Option<&PathFacts>,
) -> Option<String> {
    let facts = facts?;
    let spec = run.path.as_ref()?.spec.parse::<PathSpec>().ok()?;
    let access: Vec<PathSpec> = run
        .path
        .as_ref()?
        .access
        .iter()
        .map(|a| a.parse().unwrap_or_default())
        .collect();
    let lab = Dumbbell::new(&spec, &access);
    let client = facts.client.map_or(0, |c| c as usize - 1);
    let client_name = format!("client{}", client + 1);
    let (flow, min_us) = tcp
        .iter()
        .filter(|f| f.host.as_deref().is_none_or(|h| h == client_name))
        .filter_map(|f| Some((*f, min_rtt_us(f, &sender_samples(run, f))?)))
        .min_by_key(|&(_, rtt)| rtt)?;
    let base = facts.base_rtt_us;
    let diff = min_us as f64 - base as f64;
    if base == 0 || diff.abs() <= MIN_RTT_TOLERANCE * base as f64 {
        return None;
    }
    let us = |x: f64| format_duration_us(x.abs().round() as u64);
    let head = format!(
        "TCP's shortest round trip (tcpi_min_rtt) was {}, {} ({:.1} %) {} the path's base RTT of {}",
        format_duration_us(min_us),
        us(diff),
        100.0 * diff.abs() / base as f64,
        if diff > 0.0 { "above" } else { "below" },
        format_duration_us(base)
    );
    if diff < 0.0 {
        let jitter = [&spec, access.get(client).unwrap_or(&PathSpec::default())]
            .iter()
            .any(|s| s.up.jitter.is_some() || s.down.jitter.is_some());
        return Some(if jitter {
            format!("{head}: the path's jitter drew delays below it")
        } else {
            head
        });
    }
    let data = direction;
    let acks = match data {
        path::Direction::Up => path::Direction::Down,
        path::Direction::Down => path::Direction::Up,
    };
    let segment = u64::from(flow.mss + bounds::TCP_IP_HEADERS);
    let serialized = lab.serialization_us(client, data, segment)
        + lab.serialization_us(client, acks, u64::from(bounds::TCP_IP_HEADERS));
    let own = "the time the hosts' kernels and the emulator take per packet, which the lab adds to the path's delays";
    Some(if serialized >= 1.0 {
        format!(
            "{head}: {} of it a full segment's and its ACK's serialization at the links' rates, the rest {own}",
            us(serialized)
        )
    } else {
        format!("{head}: {own}")
    })
}

/// One flow's binding link, in a line.
fn binding_link(l: &FlowLinks) -> String {
    let ms = |us: f64| format_duration_us(us.max(0.0).round() as u64);
    let way = format!(
        "flow {} ({} → {}, {})",
        l.flow,
        l.from,
        l.to,
        count(l.hops.len() as u64, "link")
    );
    let bound = l.bound_bps.map_or(String::new(), |b| {
        format!(
            "; its bound, the least goodput of its links, pacers and policers: {}",
            format_rate(b)
        )
    });
    let trains = l.binding_trains().map_or(String::new(), |t| {
        format!(
            " (they reached it in trains of {:.1} packets on average, {:.0} at p99)",
            t.mean, t.p99
        )
    });
    match &l.binding {
        Some(link) => format!(
            "{way}: bound at {link}, whose queue held its packets {} on average and dropped {} of them{trains}; the other links added {} of queueing, {} one way in all{bound}",
            ms(l.binding_queue_us),
            l.binding_drops,
            ms(l.others_queue_us),
            ms(l.one_way_us),
        ),
        None => format!(
            "{way}: no link on its way queued or dropped its packets, {} one way{bound}",
            ms(l.one_way_us)
        ),
    }
}

/// Where the run lands in delay (Pantheon's chart): its data packets' one-way delay
/// across the emulator, how much of it beyond the path's own delay they spent queued
/// (with their serialization), and what the bottleneck queue held.
fn own_delay(run: &RunRecord, direction: Direction) -> Option<String> {
    let record = run.path.as_ref().filter(|p| p.topology.is_none())?;
    let spec = record.spec.parse::<PathSpec>().ok()?;
    let (link, stats) = match direction {
        Direction::Up => (&spec.up, &record.up),
        Direction::Down => (&spec.down, &record.down),
    };
    let delay = stats.delay?;
    let ms = |us: f64| format_duration_us(us.max(0.0).round() as u64);
    let crossed = format!(
        "its data packets crossed the emulator in {} at the median and {} at p95",
        ms(delay.p50_us),
        ms(delay.p95_us),
    );
    let timeline = spec.timeline(direction);
    let (least_us, most_us) = timeline
        .specs()
        .map(|s| s.delay_us)
        .fold((u64::MAX, 0), |(lo, hi), d| (lo.min(d), hi.max(d)));
    let mut message = match &link.delay_trace {
        // The path's own delay changes packet by packet: what was queued is not the rest.
        Some(trace) => format!(
            "{crossed} (the path's own delay {} one way plus its delay trace {})",
            ms(link.delay_us as f64),
            trace.path
        ),
        // Nor where the schedule changes it.
        None if least_us != most_us => format!(
            "{crossed} (the path's own delay {} to {} one way as its schedule changes it)",
            ms(least_us as f64),
            ms(most_us as f64),
        ),
        None => format!(
            "{crossed} (the path's own delay {} one way): up to {} of it at p95 queued and serialized",
            ms(link.delay_us as f64),
            ms(delay.p95_us - link.delay_us as f64),
        ),
    };
    let mut queue = queue_while_testing(run, &stats.queue);
    if let Some(&most) = queue.iter().max() {
        queue.sort_unstable();
        let median = queue[queue.len() / 2];
        message += &format!(
            "; the bottleneck queue held {} at the median and {} at most",
            format_size(median),
            format_size(most),
        );
        // Its drain time where one rate drains it throughout.
        let rates: Vec<_> = timeline.specs().map(|s| &s.bottleneck).collect();
        if let [Bottleneck::Rate { bps, .. }, rest @ ..] = rates.as_slice() {
            if rest
                .iter()
                .all(|b| matches!(b, Bottleneck::Rate { bps: r, .. } if r == bps))
            {
                let drain_us = |bytes: u64| bytes as f64 * 8e6 / *bps as f64;
                message += &format!(
                    " ({} and {} at its rate)",
                    ms(drain_us(median)),
                    ms(drain_us(most))
                );
            }
        }
    }
    Some(message)
}

/// The test's bytes in a direction's bottleneck queue, sampled from the run's start to
/// the end of its window (the emulator samples from the lab's start to its end).
fn queue_while_testing(run: &RunRecord, queue: &[QueueSample]) -> Vec<u64> {
    let Some(record) = &run.path else {
        return Vec::new();
    };
    // The emulator's clock at the run's t0, µs.
    let t0_us = run.started_unix_us - record.epoch_unix_us;
    let end_us = t0_us + (run.summary.window_seconds * 1e6) as i64;
    queue
        .iter()
        .filter(|s| (t0_us..=end_us).contains(&(s.t_us as i64)))
        .map(|s| s.bytes)
        .collect()
}

/// A link way the data crossed, as the link findings (`aqm`, `policer`) read it: a
/// dumbbell's bottleneck in the data's direction, or each link way of a topology on
/// the TCP flows' routes.
struct DataWay<'a> {
    /// How a finding names it: "the bottleneck", "link l2 r1→r2".
    label: String,
    /// Its settings that way.
    link: LinkSpec,
    counters: &'a NamedCounters,
    /// Its queue over time.
    queue: &'a [QueueSample],
}

fn data_ways<'a>(
    run: &'a RunRecord,
    direction: Direction,
    flow_links: Option<&[FlowLinks]>,
) -> Vec<DataWay<'a>> {
    let Some(record) = &run.path else {
        return Vec::new();
    };
    let Some(topology) = &record.topology else {
        let Ok(spec) = record.spec.parse::<PathSpec>() else {
            return Vec::new();
        };
        let stats = match direction {
            Direction::Up => &record.up,
            Direction::Down => &record.down,
        };
        return stats
            .links
            .iter()
            .find(|l| l.name == "bottleneck")
            .map(|counters| DataWay {
                label: "the bottleneck".into(),
                link: spec.link(direction).clone(),
                counters,
                queue: &stats.queue,
            })
            .into_iter()
            .collect();
    };
    let mut hops: Vec<&String> = flow_links
        .into_iter()
        .flatten()
        .flat_map(|l| &l.hops)
        .collect();
    hops.sort();
    hops.dedup();
    hops.into_iter()
        .filter_map(|hop| {
            let (spec, dir) = links::hop_link(topology, hop)?;
            let counters = record.links().find(|l| &l.name == hop)?;
            Some(DataWay {
                label: format!("link {hop}"),
                link: spec.link(dir).clone(),
                counters,
                queue: &counters.queue,
            })
        })
        .collect()
}

/// What an AQM on `way` did: its early drops and marks, its drops on overflow, and the
/// delay its queue held against its target.
fn aqm_effect(run: &RunRecord, way: &DataWay) -> Option<String> {
    let link = &way.link;
    let target_us = link.aqm.target_us()?;
    let Bottleneck::Rate { bps, .. } = link.bottleneck else {
        return None;
    };
    let c = &way.counters.counters;
    let mut queue = queue_while_testing(run, way.queue);
    queue.sort_unstable();
    let held = queue
        .get(queue.len() / 2)
        .map(|&bytes| {
            format!(
                "; its queue held a median {} of delay (target {})",
                format_duration_us(bytes * 8 * 1_000_000 / bps.max(1)),
                format_duration_us(target_us)
            )
        })
        .unwrap_or_default();
    let ecn = if link.aqm.ecn() {
        format!(
            ", marked {} Congestion Experienced",
            count(c.marked_ce, "packet")
        )
    } else {
        String::new()
    };
    Some(format!(
        "{}'s {} dropped {} early{ecn} and {} on overflow{held}",
        way.label,
        link.aqm.name(),
        count(c.dropped_aqm, "packet"),
        count(c.dropped_queue, "packet"),
    ))
}

/// What a policer on `way` dropped, where it dropped any.
fn policer_drops(way: &DataWay) -> Option<String> {
    let police = way.link.police?;
    let c = &way.counters.counters;
    (c.dropped_police > 0).then(|| {
        format!(
            "the policer of {} ({}, a bucket of {}) dropped {} of the {} that reached it ({:.1} %) instead of queueing them: each was a loss to the senders, where a shaper of its rate would have delayed it",
            way.label,
            format_rate(police.bps as f64),
            format_size(police.burst_bytes),
            count(c.dropped_police, "packet"),
            c.packets_in,
            100.0 * c.dropped_police as f64 / c.packets_in.max(1) as f64
        )
    })
}

/// The sending hosts' own interface queues, where they dropped packets: a device's
/// drops (a TUN device's ring full) reach TCP as losses on the path, a qdisc's as send
/// stalls (the congestion window cut at the host, no loss on the path). With what to
/// raise.
fn host_queue(run: &RunRecord, direction: Direction, retransmits: u64) -> Option<(String, String)> {
    let record = run.path.as_ref()?;
    let queues = match direction {
        Direction::Up => &record.up.host_queues,
        Direction::Down => &record.down.host_queues,
    };
    let dropping: Vec<String> = queues
        .iter()
        .filter(|q| q.drops() > 0)
        .map(|q| {
            let mut parts = Vec::new();
            if q.device_drops > 0 {
                parts.push(format!(
                    "its device dropped {} (a full ring: TCP saw each as a loss on the path)",
                    count(q.device_drops, "packet")
                ));
            }
            if q.qdisc_drops > 0 {
                parts.push(format!(
                    "its {} qdisc dropped {} (send stalls: TCP cut its window at the host)",
                    q.qdisc,
                    count(q.qdisc_drops, "packet")
                ));
            }
            format!(
                "the {}'s interface queue (txqueuelen {}) overflowed: {}",
                q.host,
                q.txqueuelen,
                parts.join(", ")
            )
        })
        .collect();
    if dropping.is_empty() {
        return None;
    }
    let held: u64 = queues.iter().map(|q| q.held_retransmits).sum();
    let mut message = dropping.join("; ");
    message += &format!(
        "; the senders retransmitted {}",
        count(retransmits, "segment")
    );
    if held > 0 {
        message += &format!(
            ", and held back {} while the original was still in the host's queue",
            count(held, "retransmission")
        );
    }
    let largest = queues.iter().map(|q| q.txqueuelen).max().unwrap_or(0);
    Some((
        message,
        format!(
            "lengthen the sending host's interface queue (txqueuelen {} in the path; on a host, ip link set DEV txqueuelen N) so a window's worth of packets fits",
            (largest * 4).max(100)
        ),
    ))
}

fn queue_overflow(
    run: &RunRecord,
    path: Option<&PathFacts>,
    tunings: &TuningFacts,
    direction: Direction,
    streams: usize,
) -> Option<(String, Option<String>)> {
    let record = run.path.as_ref()?;
    let stats = match direction {
        Direction::Up => &record.up,
        Direction::Down => &record.down,
    };
    let dropped: u64 = stats.links.iter().map(|l| l.counters.dropped_queue).sum();
    if dropped == 0 {
        return None;
    }
    let queue = match &record.topology {
        Some(_) => "the topology's link queues",
        None => "the bottleneck queue",
    };
    let mut message = format!("{queue} overflowed: {} dropped", count(dropped, "packet"));
    let trains = stats
        .bursts
        .iter()
        .filter(|b| b.traffic.is_test() && b.flow.starts_with("tcp"))
        .max_by(|a, b| {
            a.burst_p99
                .total_cmp(&b.burst_p99)
                .then(a.packets.cmp(&b.packets))
        });
    let mtu = record.spec.parse::<PathSpec>().map_or(1500, |s| s.mtu);
    let queue = path.and_then(|p| p.queue_bytes);
    let (Some(t), Some(queue)) = (trains, queue) else {
        return Some((message, None));
    };
    let p99_bytes = t.burst_p99 * f64::from(mtu);
    let overflow = p99_bytes >= TRAIN_FILLS_QUEUE * queue as f64;
    message += &format!(
        "; packets arrived back to back in trains of {:.1} on average (the burstiest flow), 99 % of them in trains of at most {:.0} ({}), the longest {}, against a queue of {}: {}",
        t.burst_mean,
        t.burst_p99,
        format_size(p99_bytes as u64),
        t.burst_max,
        format_size(queue),
        if overflow {
            "trains that long overflow it from half full"
        } else {
            "too short to overflow it from half full, so the senders' window filled it, not bursts"
        }
    );
    let pace = (overflow && tunings.pacing == "none").then(|| {
        let rate = path
            .and_then(|p| p.bottleneck_bps)
            .map(|r| {
                format!(
                    " at about 95 % of the link ({})",
                    format_rate(r as f64 * 0.95 / streams.max(1) as f64)
                )
            })
            .unwrap_or_default();
        let bbr = if tunings.cc == "bbr" { "" } else { " or use BBR (-C bbr)" };
        format!("pace the senders (--fq-rate{rate} per flow, or a gap pacer: `pace` in the path){bbr} to keep the queue from overflowing")
    });
    Some((message, pace))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tcplab_record::link::LinkCounters;
    use tcplab_record::tcpinfo::SkMemInfo;
    use tcplab_record::traffic::Traffic;
    use tcplab_record::{
        BurstStats, CapacitySample, ClockOffset, HostMeta, IntervalRecord, NamedCounters,
        PathRecord, RttStats, RunStatus, Summary, TestParams,
    };

    const MSS: u32 = 1448;

    #[test]
    fn finding_kinds_have_unique_names_that_serde_round_trips() {
        let mut names: Vec<&str> = FindingKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FindingKind::ALL.len(), "a name used twice");
        for &kind in FindingKind::ALL {
            let name = kind.name();
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}: not snake_case"
            );
            assert!(!kind.meaning().contains('\n'), "{name}: not one line");
            // The JSON keeps the strings stored runs and scripts already hold.
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<FindingKind>(&json).unwrap(), kind);
        }
        assert_eq!(
            serde_json::to_value(Finding {
                kind: FindingKind::BufferBelowBdp,
                message: "m".into()
            })
            .unwrap(),
            serde_json::json!({"kind": "buffer_below_bdp", "message": "m"})
        );
        assert!(serde_json::from_str::<FindingKind>("\"no_such_kind\"").is_err());
    }

    /// docs/explain.md lists every finding kind the enum has, as
    /// [`FindingKind::docs_list`] writes it: a kind added, renamed or reworded and not
    /// in the docs fails here, naming it.
    #[test]
    fn the_findings_in_the_docs_are_the_enums() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/explain.md"
        ))
        .expect("docs/explain.md");
        let marker = "<!-- findings: FindingKind::docs_list -->\n";
        let start = doc.find(marker).expect("the findings' marker") + marker.len();
        // The list runs to the first blank line, or to the end of the file.
        let end = doc[start..]
            .find("\n\n")
            .map_or(doc.len(), |i| start + i + 1);
        let listed = &doc[start..end];
        let expected = FindingKind::docs_list();
        let lines = |text: &str| -> Vec<String> { text.lines().map(String::from).collect() };
        let (listed_lines, expected_lines) = (lines(listed), lines(&expected));
        let missing: Vec<&String> = expected_lines
            .iter()
            .filter(|l| !listed_lines.contains(l))
            .collect();
        let extra: Vec<&String> = listed_lines
            .iter()
            .filter(|l| !expected_lines.contains(l))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "docs/explain.md's findings differ from FindingKind: missing {missing:#?}, extra {extra:#?}"
        );
        assert_eq!(
            listed, expected,
            "the docs' findings in another order:\n{expected}"
        );
    }

    /// A bulk flow up, 10 s, cubic, a 4 MiB send buffer, 10 ms of smoothed RTT.
    pub(crate) fn flow(id: u32, received_bps: f64) -> FlowRecord {
        FlowRecord {
            id,
            host: None,
            name: None,
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
            kernel_limits: LimitShares::default(),
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
            transactions: None,
            watched: None,
        }
    }

    /// `f` as its samples booked it: held by `limit` all the time.
    fn held(limit: record::Limit, f: FlowRecord) -> FlowRecord {
        let mut limits = LimitShares::default();
        match limit {
            record::Limit::Rwnd => limits.rwnd = 1.0,
            record::Limit::Sndbuf => limits.sndbuf = 1.0,
            record::Limit::Cwnd => limits.cwnd = 1.0,
            record::Limit::Pacing => limits.pacing = 1.0,
            record::Limit::App => limits.app = 1.0,
        }
        FlowRecord { limits, ..f }
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
            host: tcplab_record::Host::Client,
            t_us: k * 10_000,
            info,
            bbr: None,
            skmem: None,
        }
    }

    /// A finished run across `spec` with `flows` and `samples` (also changes.rs's).
    /// In a topology, the aqm and policer findings name each link way on the flows'
    /// routes that has one, with that way's own counters and queue; a policer bounds
    /// the flow it polices, its bucket spread over the run's window.
    #[test]
    fn a_topology_s_links_each_say_what_their_aqm_and_policer_did() {
        let mut run = crate::links::tests::run();
        run.summary.window_seconds = 10.0;
        let path = run.path.as_mut().unwrap();
        let links = &mut path.topology.as_mut().unwrap().links;
        // a → r polices a's flow at 4 Mbit/s; r → b's CoDel acts on both flows.
        links[0].path = "rtt 2ms rate 100mbit police 4mbit burst 10kB".into();
        links[2].path = "rtt 10ms rate 10mbit aqm codel".into();
        path.up.links[0].counters.packets_in = 1000;
        path.up.links[0].counters.dropped_police = 37;
        let rb = &mut path.up.links[2];
        (rb.counters.dropped_aqm, rb.counters.dropped_queue) = (12, 3);
        // 12.5 kB at 10 Mbit/s: 10 ms held.
        rb.queue = [12_500, 12_500, 20_000]
            .map(|bytes| QueueSample { t_us: 0, bytes })
            .to_vec();
        let e = explain(&run);
        let said = |kind| {
            e.findings
                .iter()
                .filter(|f| f.kind == kind)
                .map(|f| f.message.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            said(FindingKind::Aqm),
            ["link rb r→b's codel dropped 12 packets early and 3 packets on overflow; its queue held a median 10.0 ms of delay (target 5.00 ms)"]
        );
        assert_eq!(
            said(FindingKind::Policer),
            ["the policer of link ar a→r (4.00 Mbit/s, a bucket of 9.77 KiB) dropped 37 packets of the 1000 that reached it (3.7 %) instead of queueing them: each was a loss to the senders, where a shaper of its rate would have delayed it"]
        );
        // a's bound: the policer's 4 Mbit/s and its bucket over 10 s, as goodput.
        let a = &e.flow_links.as_ref().unwrap()[0];
        let policed = bounds::link_goodput_bps(4_000_000 + 10_000 * 8 / 10, 1448, 0);
        assert_eq!(a.bound_bps, Some(policed));
    }

    pub(crate) fn run(spec: &str, flows: Vec<FlowRecord>, samples: Vec<SampleRecord>) -> RunRecord {
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
            trace: None,
            events: Vec::new(),
            probes: Vec::new(),
            watch: None,
        }
    }

    /// A run whose kernel events show a receiver that stopped reading for 120 ms at
    /// 2.1 s (a zero window), and a sender that went through three fast recoveries and
    /// one timeout: explain cites both; without events it cites neither.
    #[test]
    fn the_kernels_events_are_cited_where_they_were_taken() {
        use tcplab_record::events::{CaState, EventRecord, KernelEvent, TraceRecord};
        let event = |t_us, event| EventRecord {
            flow: 0,
            host: record::Host::Client,
            t_us,
            event,
        };
        let probe = |t_us, snd_wnd| event(t_us, KernelEvent::window_probe(40, 20, snd_wnd));
        let state = |t_us, state| event(t_us, KernelEvent::CongState { state });
        let mut r = run(
            "rtt 10ms rate 1gbit",
            vec![held(record::Limit::Rwnd, flow(0, 50e6))],
            steady_samples(65_160, 400 * MSS, 65_536, 1 << 20),
        );
        r.events = vec![
            state(500_000, CaState::Recovery),
            event(500_001, KernelEvent::Retransmit),
            state(520_000, CaState::Open),
            state(900_000, CaState::Recovery),
            state(930_000, CaState::Open),
            state(1_200_000, CaState::Recovery),
            state(1_300_000, CaState::Loss),
            event(1_300_001, KernelEvent::Retransmit),
            state(1_500_000, CaState::Open),
            probe(2_000_000, 65_536),
            probe(2_100_000, 8_192),
            probe(2_110_000, 0),
            probe(2_200_000, 0),
            probe(2_220_000, 0),
            probe(2_230_000, 65_536),
        ];
        r.trace = Some(TraceRecord {
            taken: true,
            note: None,
            events: r.events.len() as u64,
            lost: 0,
        });
        let e = explain(&r);
        let said = |kind| {
            e.findings
                .iter()
                .find(|f| f.kind == kind)
                .map(|f| f.message.clone())
        };
        assert_eq!(
            said(FindingKind::KernelEvents).unwrap(),
            "the kernel's events: cwnd cut 4 times (3 fast recovery episodes, 1 retransmission timeout, 0 ECN reductions), 2 retransmission events"
        );
        let stall = said(FindingKind::ZeroWindow).unwrap();
        assert!(
            stall.starts_with(
                "the send window stalled for 120 ms at 2.10 s while the receiver advertised 0"
            ),
            "{stall}"
        );
        r.trace = None;
        let e = explain(&r);
        assert!(
            e.kernel.is_none()
                && e.findings
                    .iter()
                    .all(|f| f.kind != FindingKind::KernelEvents)
        );
    }

    #[test]
    fn a_capture_says_what_each_retransmission_followed() {
        let mut e = explain(&run(
            "rtt 10ms rate 1gbit",
            vec![held(record::Limit::Cwnd, flow(0, 50e6))],
            steady_samples(65_160, 40 * MSS, 1 << 20, 1 << 20),
        ));
        e.cite_capture(
            RetransmitCauses {
                retransmits: 41,
                after_drops: vec![(DropReason::Queue, 36), (DropReason::Loss, 4)],
            },
            CapturePoint::Bottleneck,
        );
        let finding = e
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::RetransmitCauses)
            .unwrap();
        assert_eq!(
            finding.message,
            "36 of 41 retransmissions follow drops by the full bottleneck queue; 4 follow random loss; 1 follows no drop of the emulator's (spurious, or lost before the bottleneck) (the capture at the bottleneck)"
        );
        assert_eq!(e.retransmit_causes.unwrap().unexplained(), 1);
    }

    #[test]
    fn a_64k_receive_window_at_10ms_binds_at_52_4_mbit() {
        let r = run(
            "rtt 10ms rate 1gbit",
            vec![held(record::Limit::Rwnd, flow(0, 50e6))],
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
    fn one_round_trip_sizes_the_queue_and_the_bdp() {
        // 1 Gbit/s × 200 µs = 25 000 B, for the BDP and for the queue of 1 BDP alike.
        let r = run(
            "rtt 200us rate 1gbit queue 1bdp",
            vec![flow(0, 50e6)],
            Vec::new(),
        );
        let p = explain(&r).path.unwrap();
        assert_eq!(
            (p.base_rtt_us, p.bdp_bytes, p.queue_bytes),
            (200, Some(25_000), Some(25_000))
        );
    }

    /// `run` of one flow over `spec` whose sender's samples show `min_rtt_us`.
    fn min_rtt_run(spec: &str, min_rtt_us: u32) -> RunRecord {
        let mut samples = steady_samples(65_160, 40 * MSS, 1 << 20, 1 << 20);
        for s in &mut samples {
            s.info.min_rtt = min_rtt_us;
        }
        run(
            spec,
            vec![held(record::Limit::Cwnd, flow(0, 50e6))],
            samples,
        )
    }

    fn min_rtt_finding(r: &RunRecord) -> Option<String> {
        let e = explain(r);
        e.findings
            .iter()
            .find(|f| f.kind == FindingKind::MinRtt)
            .map(|f| f.message.clone())
    }

    #[test]
    fn tcps_shortest_round_trip_is_named_beyond_3_percent_of_the_base_rtt() {
        // Within 3 %: nothing to say.
        assert_eq!(min_rtt_finding(&min_rtt_run("rtt 20ms", 20_600)), None);
        assert_eq!(min_rtt_finding(&min_rtt_run("rtt 2ms", 2_060)), None);
        assert_eq!(
            min_rtt_finding(&min_rtt_run("rtt 2ms", 2_118)).unwrap(),
            "TCP's shortest round trip (tcpi_min_rtt) was 2.12 ms, 118 µs (5.9 %) above the path's base RTT of 2.00 ms: the time the hosts' kernels and the emulator take per packet, which the lab adds to the path's delays"
        );
        // A 1500-byte packet at 100 Mbit/s takes 120 µs, its 52-byte ACK 4.16 µs.
        assert_eq!(
            min_rtt_finding(&min_rtt_run("rtt 500us rate 100mbit", 700)).unwrap(),
            "TCP's shortest round trip (tcpi_min_rtt) was 700 µs, 200 µs (40.0 %) above the path's base RTT of 500 µs: 124 µs of it a full segment's and its ACK's serialization at the links' rates, the rest the time the hosts' kernels and the emulator take per packet, which the lab adds to the path's delays"
        );
        // Below the base RTT only jitter takes a packet.
        assert_eq!(
            min_rtt_finding(&min_rtt_run("delay 10ms jitter 5ms", 14_000)).unwrap(),
            "TCP's shortest round trip (tcpi_min_rtt) was 14.0 ms, 6.00 ms (30.0 %) below the path's base RTT of 20.0 ms: the path's jitter drew delays below it"
        );
    }

    #[test]
    fn a_dumbbells_facts_are_the_flows_clients_end_to_end_round_trip() {
        // The dumbbell of docs/paths.md: the queue is sized for client2's 40 ms whoever sends.
        let dumbbell = |hosts: &[&str]| {
            let flows = hosts
                .iter()
                .enumerate()
                .map(|(i, h)| FlowRecord {
                    host: Some(h.to_string()),
                    ..flow(i as u32, 10e6)
                })
                .collect();
            let mut r = run("rate 50mbit queue 1bdp", flows, Vec::new());
            r.path.as_mut().unwrap().access = vec!["rtt 10ms".into(), "rtt 40ms".into()];
            explain(&r).path.unwrap()
        };
        let both = dumbbell(&["client1", "client2"]);
        // 50 Mbit/s × 40 ms / 8 = 250 000 bytes.
        assert_eq!(
            (
                both.base_rtt_us,
                both.client,
                both.bdp_bytes,
                both.queue_bytes
            ),
            (40_000, Some(2), Some(250_000), Some(250_000))
        );
        let near = dumbbell(&["client1"]);
        assert_eq!(
            (
                near.base_rtt_us,
                near.client,
                near.bdp_bytes,
                near.queue_bytes
            ),
            (10_000, Some(1), Some(62_500), Some(250_000))
        );
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
            vec![held(record::Limit::Sndbuf, f)],
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
            .find(|f| f.kind == FindingKind::BufferBelowBdp)
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

    /// Little's law's mean in flight is over time: samples crowded into a moment of
    /// little in flight (a watched socket's lookups as it closes) do not pull it down.
    #[test]
    fn the_mean_in_flight_is_over_time_not_over_samples() {
        let mut samples = steady_samples(100 * MSS, 200 * MSS, 1 << 30, 0);
        // Nine more samples in the last tick's 10 ms, nothing in flight.
        let last = samples.last().unwrap().t_us;
        samples.extend((1..=9).map(|k| SampleRecord {
            t_us: last + k * 1_000,
            ..sample(0, |i| i.snd_mss = MSS)
        }));
        let refs: Vec<&SampleRecord> = samples.iter().collect();
        // 100 segments until the first of those, 91 of the 99 ms; none for the last 8.
        let expected = (100 * MSS) as f64 * 91.0 / 99.0;
        let mean = mean_outstanding_bytes(&refs).unwrap() as f64;
        assert!((mean - expected).abs() <= 1.0, "{mean} vs {expected}");
        // The plain mean of the 19 samples, 52.6 segments, would be 57 % of it.
        assert!(mean > 1.7 * (10 * 100 * MSS) as f64 / 19.0);
    }

    /// Through a trace or a rate on a schedule the link bound is what the bottleneck
    /// offered over the measured window (the emulator's samples that meet it, whole),
    /// as goodput: a flow that carried most of it is link-limited.
    #[test]
    fn a_changing_paths_link_bound_is_what_it_offered_in_the_window() {
        for (spec, by) in [
            ("rtt 40ms up.trace a.up down.trace a.down", Changing::Trace),
            ("rtt 40ms rate 8mbit at 5s rate 4mbit", Changing::Schedule),
        ] {
            let mut r = run(spec, vec![flow(0, 5.6e6)], Vec::new());
            // The emulator started 2 s before the run; its bottleneck offered 8 Mbit/s
            // for 7 s, then 4: the run's 10 s are its 2nd to 12th.
            r.started_unix_us = 1_002_000_000;
            let path = r.path.as_mut().unwrap();
            path.epoch_unix_us = 1_000_000_000;
            path.up.capacity = (1..=140)
                .map(|k| CapacitySample {
                    t_us: k * 100_000,
                    bps: if k <= 70 { 8e6 } else { 4e6 },
                })
                .collect();
            // Samples are whole: 2.05–2.15 s meets the ones ending at 2.1 and 2.2 s.
            assert_eq!(path.up.offered_bytes(2_050_000, 2_150_000), Some(200_000.0));
            assert_eq!(path.down.offered_bytes(0, 1_000_000), None);
            let e = explain(&r);
            let p = e.path.as_ref().unwrap();
            assert_eq!(p.bottleneck_bps, None, "{spec}: no one rate binds");
            let capacity = p.capacity.unwrap();
            assert_eq!(capacity.by, by);
            // 5 s at 8 Mbit/s and 5 s at 4 over 10 s.
            assert!((capacity.bps - 6e6).abs() < 1e-3, "{capacity:?}");
            assert_eq!(
                e.bounds.link_bps,
                Some(bounds::link_goodput_bps(6_000_000, MSS, 0))
            );
            assert_eq!(e.verdict.limit, Limit::Link, "{}", e.verdict.reason);
            let mean = format!("the {}'s mean 5.79 Mbit/s", by.name());
            assert!(e.verdict.reason.contains(&mean), "{}", e.verdict.reason);
        }
        // A fixed rate, or a schedule that leaves the rate alone, has no changing
        // capacity.
        for spec in ["rtt 40ms rate 6mbit", "rtt 40ms rate 6mbit at 1s loss 1%"] {
            let fixed = explain(&run(spec, vec![flow(0, 5.6e6)], Vec::new()));
            let p = fixed.path.unwrap();
            assert_eq!((p.bottleneck_bps, p.capacity), (Some(6_000_000), None));
        }
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
        assert!(e
            .findings
            .iter()
            .all(|f| f.kind != FindingKind::BufferBelowBdp));
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
        assert_eq!(e.estimates.mathis_bps, None);
        samples[0].info.ca_state = CA_LOSS;
        let e = explain(&run("rtt 10ms rate 1gbit", vec![flow(0, 20e6)], samples));
        assert_eq!(e.episodes.recovery_episodes, 4);
        // 4 loss events in 10 000 segments at 10 ms.
        let mathis = bounds::mathis_bps(MSS, 10_000, 4.0 / 10_000.0);
        assert_eq!(e.estimates.mathis_bps, mathis);
        let pftk = bounds::pftk_bps(MSS, 10_000, 4e-4, 204_000, 2.0, Some(1 << 22));
        assert_eq!(e.estimates.pftk_bps, pftk);
    }

    #[test]
    fn one_retransmit_in_one_episode_is_said_in_the_singular() {
        let mut samples = steady_samples(100 * MSS, 100 * MSS, 1 << 22, 1 << 20);
        samples[2].info.ca_state = CA_RECOVERY;
        let mut f = flow(0, 20e6);
        f.retransmits = 1;
        let e = explain(&run("rtt 10ms rate 1gbit", vec![f], samples));
        let loss = e
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::Loss)
            .expect("loss");
        let (before, after) = loss.message.split_once(" % of those sent) in ").unwrap();
        assert!(before.starts_with("1 segment retransmitted ("), "{before}");
        assert_eq!(after, "1 recovery episode");
    }

    #[test]
    fn the_verdict_is_the_senders_dominant_limit_named_by_what_the_run_reached() {
        use record::Limit::{Cwnd, Pacing as Paced, Sndbuf};
        let busy = || steady_samples(100 * MSS, 100 * MSS, 1 << 22, 1 << 20);
        let verdict = |spec: &str, f: FlowRecord, set: &dyn Fn(&mut RunRecord)| {
            let mut r = run(spec, vec![f], busy());
            set(&mut r);
            explain(&r).verdict.limit
        };
        let none = |_: &mut RunRecord| {};
        // 100 Mbit/s of 1448-byte segments carry 96.5 Mbit/s; 92 is 95 % of it: the
        // network's limit is the link.
        assert_eq!(
            verdict("rtt 10ms rate 100mbit", held(Cwnd, flow(0, 92e6)), &none),
            Limit::Link
        );
        assert_eq!(
            verdict("rtt 10ms rate 100mbit", held(Cwnd, flow(0, 60e6)), &none),
            Limit::Cwnd
        );
        // A full link under a sender held by its buffer is still the buffer's story.
        assert_eq!(
            verdict("rtt 10ms rate 100mbit", held(Sndbuf, flow(0, 92e6)), &none),
            Limit::Sndbuf
        );
        // A gap pacer reached: 48 Mbit/s ≥ 80 % of 50 Mbit/s less headers.
        let gap = "rtt 10ms rate 100mbit up.pace 50mbit";
        assert_eq!(
            verdict(gap, held(Cwnd, flow(0, 48e6)), &none),
            Limit::Pacing
        );
        assert_eq!(verdict(gap, held(Cwnd, flow(0, 20e6)), &none), Limit::Cwnd);
        // A cap the samples saw binding (SO_MAX_PACING_RATE, --app-rate).
        let fq = |r: &mut RunRecord| r.params.tuning.pacing_rate = Some(50_000_000);
        assert_eq!(
            verdict("rtt 10ms rate 100mbit", held(Paced, flow(0, 48e6)), &fq),
            Limit::Pacing
        );
        assert_eq!(
            verdict("rtt 10ms rate 100mbit", held(Cwnd, flow(0, 10e6)), &fq),
            Limit::Cwnd
        );
        // Mixed shares: the largest decides.
        let mut f = flow(0, 30e6);
        f.limits = LimitShares {
            sndbuf: 0.6,
            cwnd: 0.4,
            ..LimitShares::default()
        };
        assert_eq!(verdict("rtt 10ms rate 100mbit", f, &none), Limit::Sndbuf);
    }

    #[test]
    fn every_cap_is_a_bound_of_goodput() {
        let mut r = run(
            "rtt 10ms rate 100mbit",
            vec![flow(0, 40e6), flow(1, 40e6)],
            Vec::new(),
        );
        r.params.tuning.pacing_rate = Some(30_000_000);
        // Two flows capped at 30 Mbit/s each.
        assert_eq!(explain(&r).bounds.pacing_bps, Some(60e6));
        r.params.tuning.app_rate = Some(25_000_000);
        assert_eq!(explain(&r).bounds.binding(), Some(("pacing", 50e6)));
        // A server's --max-rate caps what it sends, all flows together.
        let mut down = run("rtt 10ms rate 100mbit", vec![flow(0, 40e6)], Vec::new());
        down.flows[0].direction = Direction::Down;
        down.server.rate_cap_bps = Some(80_000_000);
        let b = explain(&down).bounds;
        assert_eq!(
            (b.pacing_cap, b.pacing_bps),
            (Some("the server's --max-rate"), Some(80e6))
        );
        // A gap pacer spaces whole packets: 50 Mbit/s carries 50 · 1448 / 1500.
        let gap = run(
            "rtt 10ms rate 100mbit up.pace 50mbit",
            vec![flow(0, 40e6)],
            Vec::new(),
        );
        let want = 50e6 * 1448.0 / 1500.0;
        assert!((explain(&gap).bounds.pacing_bps.unwrap() - want).abs() < 1e-6);
    }

    #[test]
    fn the_window_bound_takes_what_the_kernel_allowed_over_the_shortest_round_trip() {
        // A 64 KiB buffer, yet 96 KiB outstanding on average (writes filled packets past
        // SO_SNDBUF); smoothed RTT 10 ms but a minimum of 8 ms: 98 304 B · 8 / 8 ms.
        let mut f = flow(0, 50e6);
        f.sndbuf = BufferSize {
            requested: Some(32 << 10),
            effective: 64 << 10,
            capped_at: None,
            at_end: 64 << 10,
        };
        let mut samples = steady_samples((96 << 10) / MSS * MSS, 200 * MSS, 1 << 20, 0);
        for s in &mut samples {
            s.info.min_rtt = 8_000;
        }
        let outstanding = f64::from((96 << 10) / MSS * MSS);
        let e = explain(&run("rtt 8ms rate 1gbit", vec![f.clone()], samples.clone()));
        assert_eq!(e.bounds.window_bps, Some(outstanding * 8e6 / 8_000.0));
        // The receiver's largest window caps it.
        for s in &mut samples {
            s.info.snd_wnd = 80_000;
        }
        let e = explain(&run("rtt 8ms rate 1gbit", vec![f], samples));
        assert_eq!(e.bounds.window_bps, Some(80_000.0 * 8e6 / 8_000.0));
    }

    #[test]
    fn a_watched_flows_window_bound_takes_the_largest_sampled_send_buffer() {
        // A watched connection's buffer is unknown to tcplab (its BufferSize is all
        // zeros): the socket memory sampled on the way gives it. 32 KiB in flight on
        // average, but the buffer grew to 256 KiB, which bounds it over 8 ms.
        let f = FlowRecord {
            sndbuf: BufferSize::default(),
            ..flow(0, 50e6)
        };
        let mut samples = steady_samples((32 << 10) / MSS * MSS, 200 * MSS, 1 << 20, 0);
        for (k, s) in samples.iter_mut().enumerate() {
            s.info.min_rtt = 8_000;
            s.skmem = Some(SkMemInfo {
                sndbuf: (k as u32 + 1) * (256 << 10) / 10,
                ..SkMemInfo::default()
            });
        }
        let e = explain(&run("rtt 8ms rate 1gbit", vec![f.clone()], samples.clone()));
        assert_eq!(
            e.bounds.window_bps,
            Some(f64::from(256 << 10) * 8e6 / 8_000.0)
        );
        // Without socket memory, the mean in flight is all there is.
        for s in &mut samples {
            s.skmem = None;
        }
        let e = explain(&run("rtt 8ms rate 1gbit", vec![f], samples));
        let outstanding = f64::from((32 << 10) / MSS * MSS);
        assert_eq!(e.bounds.window_bps, Some(outstanding * 8e6 / 8_000.0));
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
            e.findings
                .iter()
                .any(|f| f.kind == FindingKind::NagleDelayedAck),
            "{e:?}"
        );
        r.params.tuning.nodelay = true;
        assert!(!explain(&r)
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::NagleDelayedAck));

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
            .find(|f| f.kind == FindingKind::UnfairStreams)
            .unwrap();
        assert!(unfair.message.contains("0.61"), "{}", unfair.message);
    }

    #[test]
    fn split_requests_under_nagle_are_named_a_stall_from_the_servers_ack_timeout() {
        // A 1 ms path; the client's samples saw its round trip, the server's its ACK
        // timeout of 40 ms.
        let mut samples: Vec<SampleRecord> =
            (0..10).map(|k| sample(k, |i| i.min_rtt = 1_000)).collect();
        samples.extend((0..10).map(|k| SampleRecord {
            host: Host::Server,
            ..sample(k, |i| i.ato = 40_000)
        }));
        let mut r = run(
            "rtt 1ms",
            vec![held(record::Limit::App, flow(0, 20e3))],
            samples,
        );
        r.params.transactions = Some(record::TransactionParams {
            request_size: 100,
            response_size: 100,
            request_writes: 2,
            new_connection: false,
        });
        let took = |p50: f64| record::TransactionStats {
            count: 200,
            per_second: 20.0,
            latency_us: record::Quantiles {
                p50,
                ..record::Quantiles::default()
            },
        };
        r.summary.transactions = Some(took(44_000.0));
        let kinds = |r: &RunRecord| -> Vec<FindingKind> {
            explain(r).findings.iter().map(|f| f.kind).collect()
        };
        let e = explain(&r);
        let stall = e
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::NagleStall)
            .unwrap();
        assert!(
            stall.message.contains("tcpi_ato, was 40.0 ms"),
            "{}",
            stall.message
        );
        assert!(
            stall.message.ends_with(
                "the median transaction took 44.0 ms = 2 round trips of 1.00 ms (the first write's, the later write's) + 42.0 ms of the server's delayed ACK"
            ),
            "{}",
            stall.message
        );
        assert!(e.recommendations.iter().any(|r| r.contains("-N")));
        let summary = e
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::Transactions)
            .unwrap();
        assert!(
            summary.message.contains("44.0 round trips of 1.00 ms"),
            "{}",
            summary.message
        );
        // Nagle off, one write, or a time a round trip explains: no stall.
        let mut nodelay = r.clone();
        nodelay.params.tuning.nodelay = true;
        assert!(!kinds(&nodelay).contains(&FindingKind::NagleStall));
        let mut whole = r.clone();
        whole.params.transactions.as_mut().unwrap().request_writes = 1;
        assert!(!kinds(&whole).contains(&FindingKind::NagleStall));
        // At 20 ms, 84 ms: two round trips and 44 ms, not a round trip and 64 ms.
        let mut far = r.clone();
        for s in &mut far.samples {
            s.info.min_rtt = 20_000;
        }
        far.summary.transactions = Some(took(84_100.0));
        let stall = explain(&far)
            .findings
            .into_iter()
            .find(|f| f.kind == FindingKind::NagleStall)
            .unwrap();
        assert!(
            stall
                .message
                .ends_with("84.1 ms = 2 round trips of 20.0 ms (the first write's, the later write's) + 44.1 ms of the server's delayed ACK"),
            "{}",
            stall.message
        );
        // A connection each: its handshake is a third round trip, and the server ACKs a
        // fresh connection at once: 60 ms at 20 ms is three round trips, no stall.
        let mut crr = far.clone();
        crr.params.transactions.as_mut().unwrap().new_connection = true;
        crr.summary.transactions = Some(took(60_400.0));
        assert!(!kinds(&crr).contains(&FindingKind::NagleStall));
        crr.summary.transactions = Some(took(104_000.0));
        let stall = explain(&crr)
            .findings
            .into_iter()
            .find(|f| f.kind == FindingKind::NagleStall)
            .unwrap();
        assert!(
            stall.message.contains("= 3 round trips of 20.0 ms (the handshake's, the first write's, the later write's) + 44.0 ms"),
            "{}",
            stall.message
        );
        let mut quick = r.clone();
        quick.summary.transactions = Some(took(1_100.0));
        assert_eq!(
            kinds(&quick)
                .into_iter()
                .filter(|k| [FindingKind::Transactions, FindingKind::NagleStall].contains(k))
                .collect::<Vec<_>>(),
            [FindingKind::Transactions]
        );
    }

    /// `run` across `spec` whose bottleneck dropped `dropped` packets of the test up,
    /// the data flow arriving in trains of `mean` packets, 99 % of them in trains of at
    /// most `p99`, the longest `max`; tcplab's control connection lost 39 packets of
    /// its samples there, sent in one train of 400 after the test.
    fn overflowed(spec: &str, dropped: u64, trains: Option<(f64, f64, u64)>) -> RunRecord {
        let mut r = run(spec, vec![flow(0, 900e6)], Vec::new());
        let path = r.path.as_mut().unwrap();
        path.up.links = vec![NamedCounters {
            name: "bottleneck".into(),
            counters: LinkCounters {
                dropped_queue: dropped,
                ..LinkCounters::default()
            },
            control: Some(LinkCounters {
                packets_in: 550,
                dropped_queue: 39,
                ..LinkCounters::default()
            }),
            ..NamedCounters::default()
        }];
        path.up.bursts = trains
            .map(|(mean, p99, max)| {
                // The control connection (trains of one) and the data flow.
                vec![
                    BurstStats {
                        flow: "tcp 10.77.1.1:40000 > 10.77.0.1:45000".into(),
                        packets: 250_000,
                        bursts: (250_000.0 / mean) as u64,
                        burst_mean: mean,
                        burst_p99: p99,
                        burst_max: max,
                        ..BurstStats::default()
                    },
                    BurstStats {
                        flow: "tcp 10.77.1.1:39000 > 10.77.0.1:5201".into(),
                        traffic: Traffic::Control,
                        packets: 550,
                        bursts: 151,
                        burst_mean: 3.6,
                        burst_p99: 400.0,
                        burst_max: 400,
                        ..BurstStats::default()
                    },
                ]
            })
            .unwrap_or_default();
        r
    }

    /// A run whose emulator wrote its data packets 24 ms late at the median (a
    /// 64-flow dumbbell on two CPUs): explain says so; 30 µs late, it says nothing.
    #[test]
    fn an_emulator_that_fell_behind_is_named() {
        let mut r = run(
            "rtt 10ms rate 1gbit",
            vec![flow(0, 50e6)],
            steady_samples(65_160, 400 * MSS, 65_536, 1 << 20),
        );
        let late = |e: &Explanation| {
            e.findings
                .iter()
                .find(|f| f.kind == FindingKind::EmulatorLate)
                .map(|f| f.message.clone())
        };
        let path = r.path.as_mut().unwrap();
        path.up.lateness = record::Lateness {
            packets: 241_775,
            p50_us: 30.0,
            p99_us: 80.0,
            max_us: 900.0,
        };
        assert_eq!(late(&explain(&r)), None);
        let path = r.path.as_mut().unwrap();
        path.up.lateness.p50_us = 23_920.6;
        path.up.lateness.p99_us = 58_622.0;
        let message = late(&explain(&r)).expect("a finding");
        assert!(
            message.contains("up p50 23.9 ms, p99 58.6 ms (of 241775 packets)"),
            "{message}"
        );
        assert!(!message.contains("down"), "{message}");
    }

    /// A run with its data packets' one-way delays and the queue's samples: explain
    /// says how long they took, how much of it the queue made, and what it held.
    #[test]
    fn the_data_packets_delay_and_the_queue_behind_it_are_named() {
        let mut r = run(
            "rtt 20ms rate 100mbit queue 1bdp",
            vec![flow(0, 90e6)],
            steady_samples(65_160, 400 * MSS, 65_536, 1 << 20),
        );
        let said = |e: &Explanation| {
            e.findings
                .iter()
                .find(|f| f.kind == FindingKind::Delay)
                .map(|f| f.message.clone())
        };
        assert_eq!(said(&explain(&r)), None, "no delays recorded, nothing said");
        let path = r.path.as_mut().unwrap();
        path.up.delay = Some(record::DelayQuantiles {
            packets: 10_000,
            mean_us: 22_000.0,
            p50_us: 21_500.0,
            p95_us: 29_800.0,
            p99_us: 29_900.0,
            max_us: 30_100.0,
        });
        // The emulator's clock starts 2 ms before the test's t0 and samples its queue
        // every ms until the lab is down, after the test's 4 ms window: what it held
        // before t0 and after the window is not the test's.
        path.epoch_unix_us = 1_000_000_000;
        r.started_unix_us = 1_000_002_000;
        r.summary.window_seconds = 0.004;
        let path = r.path.as_mut().unwrap();
        path.up.queue = [500_000, 500_000, 0, 100_000, 125_000, 240_000, 900_000]
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| record::QueueSample {
                t_us: i as u64 * 1000 + u64::from(i == 6) * 1000,
                bytes,
            })
            .collect();
        let message = said(&explain(&r)).expect("a finding");
        for part in [
            "21.5 ms at the median and 29.8 ms at p95",
            "the path's own delay 10.0 ms one way",
            "up to 19.8 ms of it at p95 queued",
            "held 122 KiB at the median and 234 KiB at most (10.0 ms and 19.2 ms at its rate)",
        ] {
            assert!(message.contains(part), "{part:?} in {message}");
        }
        // Where the path's delay or rate changes, neither is split off what was measured.
        let with = |r: &mut RunRecord, spec: &str| {
            r.path.as_mut().unwrap().spec = spec.into();
            said(&explain(r)).expect("a finding")
        };
        let scheduled = with(
            &mut r,
            "rtt 20ms rate 100mbit queue 1bdp at 1ms rtt 80ms rate 50mbit",
        );
        assert!(
            scheduled.contains(
                "the path's own delay 10.0 ms to 40.0 ms one way as its schedule changes it)"
            ),
            "{scheduled}"
        );
        assert!(
            scheduled.ends_with("held 122 KiB at the median and 234 KiB at most"),
            "{scheduled}"
        );
        let traced = with(
            &mut r,
            "rtt 20ms rate 100mbit queue 1bdp up.delay-trace d.txt",
        );
        assert!(
            traced.contains("(the path's own delay 10.0 ms one way plus its delay trace d.txt);"),
            "{traced}"
        );
        assert!(!traced.contains("queued and serialized"), "{traced}");
        assert!(traced.contains("at its rate"), "{traced}");
    }

    fn overflow_finding(e: &Explanation) -> Option<&str> {
        e.findings
            .iter()
            .find(|f| f.kind == FindingKind::QueueOverflow)
            .map(|f| f.message.as_str())
    }

    /// The client's TUN ring dropped packets: explain names the host, its txqueuelen,
    /// what TCP saw and what to raise; the server's queue (the ACKs' way) and a queue
    /// that dropped nothing are not named.
    #[test]
    fn a_sending_hosts_interface_queue_that_dropped_is_named() {
        let mut r = overflowed("rtt 2ms rate 2gbit up.txqueuelen 4", 0, None);
        let queue = |host: &str, txqueuelen, device_drops| record::HostQueue {
            host: host.into(),
            txqueuelen,
            qdisc: "pfifo_fast".into(),
            device_drops,
            ..record::HostQueue::default()
        };
        let path = r.path.as_mut().unwrap();
        path.up.host_queues = vec![queue("client", 4, 0)];
        path.down.host_queues = vec![queue("server", 500, 9)];
        let found = |e: &Explanation| {
            e.findings
                .iter()
                .find(|f| f.kind == FindingKind::HostQueue)
                .map(|f| f.message.clone())
        };
        assert_eq!(found(&explain(&r)), None);
        let path = r.path.as_mut().unwrap();
        path.up.host_queues[0].device_drops = 68;
        path.up.host_queues[0].held_retransmits = 3;
        let e = explain(&r);
        let message = found(&e).expect("a host_queue finding");
        assert!(
            message.starts_with("the client's interface queue (txqueuelen 4) overflowed: its device dropped 68 packets (a full ring: TCP saw each as a loss on the path); the senders retransmitted "),
            "{message}"
        );
        assert!(message.ends_with(", and held back 3 retransmissions while the original was still in the host's queue"), "{message}");
        assert!(!message.contains("server"), "{message}");
        assert!(
            e.recommendations.iter().any(|r| r.starts_with(
                "lengthen the sending host's interface queue (txqueuelen 100 in the path"
            )),
            "{:?}",
            e.recommendations
        );
    }

    fn advises_pacing(e: &Explanation) -> bool {
        e.recommendations
            .iter()
            .any(|r| r.starts_with("pace the senders"))
    }

    #[test]
    fn pacing_is_advised_only_for_trains_that_overflow_the_queue() {
        // Quickstart: one flow at 1 Gbit/s in GSO-sized trains (45 packets ≈ 66 KiB)
        // against a 1-BDP queue of 2.38 MiB. The queue overflowed, but no train could
        // overflow it from half full: its window filled it.
        let quickstart = "rtt 20ms rate 1gbit queue 1bdp";
        let e = explain(&overflowed(quickstart, 3246, Some((34.7, 45.0, 50))));
        let message = overflow_finding(&e).expect("an overflow finding");
        assert!(
            message.starts_with("the bottleneck queue overflowed: 3246 packets dropped; ")
                && message.contains("trains of 34.7 on average (the burstiest flow), 99 % of them in trains of at most 45 (65.9 KiB), the longest 50, against a queue of 2.38 MiB")
                && message.contains("too short to overflow it from half full"),
            "{message}"
        );
        assert!(!advises_pacing(&e), "{:?}", e.recommendations);
        // Cubic's slow-start trains against a fifth of the BDP (250 KB): 99 % of its
        // packets in trains of up to 180 (270 KB) overflow it from half full; pacing is
        // advised, with BBR.
        let small = "rtt 10ms rate 1gbit queue 0.2bdp";
        let e = explain(&overflowed(small, 5000, Some((45.7, 180.0, 2375))));
        assert!(
            overflow_finding(&e)
                .unwrap()
                .contains("trains that long overflow it from half full"),
            "{e:?}"
        );
        assert!(advises_pacing(&e), "{:?}", e.recommendations);
        assert!(e.recommendations.iter().any(|r| r.contains("or use BBR")));
    }

    #[test]
    fn half_the_queue_is_where_trains_start_to_overflow_it() {
        // 100 packets of 1500 bytes: a 99th-percentile train of 50 is half of it.
        for (p99, advised) in [(49.0, false), (50.0, true)] {
            let e = explain(&overflowed(
                "rtt 10ms rate 100mbit queue 100p",
                10,
                Some((20.0, p99, 60)),
            ));
            assert_eq!(advises_pacing(&e), advised, "p99 {p99}: {e:?}");
        }
    }

    #[test]
    fn paced_senders_or_unknown_trains_get_no_pacing_advice() {
        let long = Some((45.7, 180.0, 2375));
        let small = "rtt 10ms rate 1gbit queue 0.2bdp";
        // Already paced: the finding stays, the advice does not.
        let mut r = overflowed(small, 5000, long);
        r.params.tuning.pacing_rate = Some(900_000_000);
        let e = explain(&r);
        assert!(overflow_finding(&e).is_some());
        assert!(!advises_pacing(&e), "{:?}", e.recommendations);
        // No burst meter (a trace link, or netem): drops, and no guess at their cause.
        let e = explain(&overflowed(small, 5000, None));
        assert_eq!(
            overflow_finding(&e),
            Some("the bottleneck queue overflowed: 5000 packets dropped")
        );
        assert!(!advises_pacing(&e));
        // Nothing dropped: nothing to say.
        assert_eq!(
            overflow_finding(&explain(&overflowed(small, 0, long))),
            None
        );
    }

    /// An 8 KiB receive buffer (16 KiB effective) at 20 ms: a window of 7212 B holds 4
    /// whole segments, 2.32 Mbit/s; one of 8688 B, 6. A run that changed from one to
    /// the other says when, and the rcv_ssthresh that let it.
    #[test]
    fn a_set_receive_window_is_said_in_whole_segments_and_when_it_changed() {
        let mut f = held(record::Limit::Rwnd, flow(0, 2.32e6));
        f.rcvbuf = BufferSize {
            requested: Some(8192),
            effective: 16_384,
            at_end: 16_384,
            ..BufferSize::default()
        };
        let at = |k: i64, changed: Option<i64>| -> (u32, u32) {
            match changed {
                Some(c) if k >= c => (8688, 9350),
                _ => (7212, 7990),
            }
        };
        let samples = |changed: Option<i64>| -> Vec<SampleRecord> {
            let mut all: Vec<SampleRecord> = (0..10)
                .map(|k| {
                    sample(k, |i| {
                        i.snd_wnd = at(k, changed).0;
                        i.min_rtt = 20_000;
                    })
                })
                .collect();
            all.extend((0..10).map(|k| SampleRecord {
                host: Host::Server,
                ..sample(k, |i| i.rcv_ssthresh = at(k, changed).1)
            }));
            all
        };
        let finding = |r: &RunRecord| {
            explain(r)
                .findings
                .into_iter()
                .find(|f| f.kind == FindingKind::WindowSegments)
                .map(|f| f.message)
        };
        let stayed = run("rtt 20ms", vec![f.clone()], samples(None));
        assert_eq!(
            finding(&stayed).unwrap(),
            "receive window of 7212 B, room for 4 whole segments of 1448 B (28 B short of 5), 2.32 Mbit/s over round trips of 20.0 ms (a sender sends whole segments only; Linux keeps a window it offered while its free space stays within a segment of it instead of rounding it to whole segments again)"
        );
        let changed = run("rtt 20ms", vec![f.clone()], samples(Some(6)));
        let said = finding(&changed).unwrap();
        assert!(
            said.starts_with("receive window changed during the run: 7212 B, room for 4 whole segments of 1448 B (28 B short of 5), 2.32 Mbit/s over round trips of 20.0 ms; from 60.0 ms 8688 B, room for 6 whole segments of 1448 B, 3.48 Mbit/s over round trips of 20.0 ms ("),
            "{said}"
        );
        assert!(
            said.ends_with("the receiver's rcv_ssthresh, above which it offers no window, grew from 7990 B to 9350 B: it grows only to the room its buffer has beside each packet arriving, so identical runs end with either window"),
            "{said}"
        );
        // An autotuned buffer's window grows as it should; a window of whole segments
        // held all along says nothing new.
        let mut autotuned = changed.clone();
        autotuned.flows[0].rcvbuf.requested = None;
        assert_eq!(finding(&autotuned), None);
        let mut whole = stayed.clone();
        for s in whole.samples.iter_mut().filter(|s| s.host == Host::Client) {
            s.info.snd_wnd = 7240;
        }
        assert_eq!(finding(&whole), None);
    }

    /// Slow start ends at ssthresh or at the first loss; a window cut below ssthresh in
    /// fast recovery or CWR is not slow start (counted as one, a lossy run would show
    /// more slow-start exits than recovery episodes), the restart after a timeout is.
    #[test]
    fn slow_start_ends_when_the_window_reaches_ssthresh_or_loss_sets_it() {
        let mut samples = steady_samples(10 * MSS, 10 * MSS, 1 << 20, 1 << 20);
        let mut at = |k: usize, state: u8, cwnd: u32, ssthresh: u32| {
            let i = &mut samples[k].info;
            (i.ca_state, i.snd_cwnd, i.snd_ssthresh) = (state, cwnd, ssthresh);
        };
        // The first loss at sample 3 (fast recovery, the window cut below the new
        // ssthresh as PRR does): the first exit. Back in Open at ssthresh.
        at(3, CA_RECOVERY, 5, 7);
        at(4, 0, 7, 7);
        // An ECN mark: CWR below ssthresh, then Open at it: no slow start.
        at(5, CA_CWR, 4, 5);
        at(6, 0, 5, 5);
        // A timeout restarts slow start (the loss state, cwnd 1 < 3); ssthresh at 9.
        at(7, CA_LOSS, 1, 3);
        at(8, 0, 2, 3);
        at(9, 0, 4, 3);
        let e = explain(&run("rtt 10ms", vec![flow(0, 1e6)], samples.clone()));
        assert_eq!(e.episodes.slow_start_exits, 2);
        assert_eq!(e.episodes.first_slow_start_exit_us, Some(30_000));
        // No rate limit: no link bound and no BDP.
        assert_eq!(e.bounds.link_bps, None);
        assert_eq!(e.path.unwrap().bdp_bytes, None);

        // BBR leaves slow start (STARTUP) once, when it sets ssthresh; its window's
        // dips below it later (recovery, PROBE_RTT's 4 packets) are not slow start.
        let mut bbr = flow(0, 1e6);
        bbr.cc = "bbr".into();
        for (k, s) in samples.iter_mut().enumerate() {
            let i = &mut s.info;
            i.snd_ssthresh = if k < 2 { INFINITE_SSTHRESH } else { 120 };
            i.snd_cwnd = [300, 400, 190, 96, 190, 4, 4, 190, 99, 200][k];
            i.ca_state = if k == 3 || k == 8 { CA_RECOVERY } else { 0 };
        }
        let e = explain(&run("rtt 10ms", vec![bbr], samples));
        assert_eq!(e.episodes.slow_start_exits, 1);
        assert_eq!(e.episodes.first_slow_start_exit_us, Some(20_000));
    }

    /// With the kernel's events, recovery episodes are their entries into fast recovery
    /// and the loss state, for the episodes line, the loss finding and the loss models
    /// alike; without them, the samples' spans, said to be sampled.
    #[test]
    fn recovery_episodes_come_from_the_kernels_events_where_it_has_them() {
        use tcplab_record::events::{CaState, EventRecord, KernelEvent, TraceRecord};
        let mut samples = steady_samples(100 * MSS, 100 * MSS, 1 << 22, 1 << 20);
        // Two spans in recovery; the events hold five entries, the samples missed some.
        for k in [2, 3, 7] {
            samples[k].info.ca_state = CA_RECOVERY;
        }
        let mut f = flow(0, 20e6);
        f.retransmits = 9;
        let mut r = run("rtt 10ms rate 1gbit", vec![f], samples);
        r.params.sample_interval_us = 10_000;
        let sampled = explain(&r);
        assert_eq!(sampled.episodes.recovery_episodes, 2);
        assert_eq!(
            sampled.episodes.recovery_from,
            Source::Samples { every_us: 10_000 }
        );
        let state = |t_us, state| EventRecord {
            flow: 0,
            host: record::Host::Client,
            t_us,
            event: KernelEvent::CongState { state },
        };
        r.events = vec![
            state(15_000, CaState::Recovery),
            state(18_000, CaState::Open),
            state(20_000, CaState::Recovery),
            state(30_000, CaState::Loss),
            state(40_000, CaState::Open),
            state(50_000, CaState::Cwr),
            state(55_000, CaState::Open),
            state(70_000, CaState::Recovery),
            state(75_000, CaState::Open),
            state(76_000, CaState::Recovery),
            state(80_000, CaState::Open),
        ];
        r.trace = Some(TraceRecord {
            taken: true,
            note: None,
            events: r.events.len() as u64,
            lost: 0,
        });
        let traced = explain(&r);
        let k = traced.kernel.unwrap();
        assert_eq!((k.fast_recoveries, k.timeouts), (4, 1));
        assert_eq!(traced.episodes.recovery_episodes, 5);
        assert_eq!(traced.episodes.recovery_from, Source::KernelEvents);
        let loss = traced
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::Loss)
            .unwrap();
        assert!(
            loss.message.contains(" in 5 recovery episodes"),
            "{}",
            loss.message
        );
        // The loss models take the same five events over the 10 000 segments sent.
        let mathis = bounds::mathis_bps(MSS, 10_000, 5.0 / 10_000.0);
        assert_eq!(traced.estimates.mathis_bps, mathis);
        // 9 retransmitted of 10 000 sent: the flows' count over the segments sent.
        assert!((traced.episodes.retransmit_rate - 9e-4).abs() < 1e-12);
    }
}
