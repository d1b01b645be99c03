//! Experiment files: one TOML file describes a study — a path, host sysctls, flows and
//! their tunings — and axes that vary any of those values. [`parse`] expands it into
//! points (one per combination of axis values), each with the complete configuration
//! of its runs; [`Experiment::schedule`] orders points × repetitions, shuffled by a seed.
//!
//! The file's reference is `docs/experiments.md`. In short:
//!
//! ```toml
//! name = "buffer"
//! repetitions = 3
//! duration = "10s"
//! warmup = "2s"
//! path = "rtt 20ms rate 1gbit queue 1bdp"
//!
//! [[flow]]
//! cc = "cubic"
//!
//! [[axis]]
//! key = "flow.window"                  # a key of this file, set at each point
//! values = ["64K", "256K", "1M"]
//!
//! [[axis]]
//! name = "where"                       # no key: written as {where} in text values
//! values = ["", "up."]
//! ```
//!
//! Errors carry the line and column of the value at fault; an error that only some
//! combination of axis values produces names the point instead.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use sha2::{Digest, Sha256};
use toml::{Spanned, Table, Value};

use crate::test_builder::{
    self, ProbeInput, Source, Streams, TestInput, TransactionInput, UdpInput,
};
use tcplab_netsim::dumbbell::{derive_seed, Dumbbell};
use tcplab_netsim::path::{Pace, PaceRtt, PathSpec};
use tcplab_netsim::topology::{NodeKind, Topology};
use tcplab_record::units::{parse_duration, parse_rate, parse_size, UnitError};
use tcplab_record::{Mode, SendMethod, TestEnd, TestParams, Tuning};

/// Defaults of the keys a file leaves out.
pub const DEFAULT_DURATION_US: u64 = 10_000_000;
pub const DEFAULT_CONFIDENCE: f64 = 0.95;
/// A range that would plan more values than this is refused as a likely typo.
const MAX_RANGE_VALUES: usize = 10_000;

/// How the values of several axes combine into points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// Every combination (the cross product), first axis varying slowest.
    #[default]
    Cross,
    /// The i-th value of every axis together; all axes have the same length.
    Zip,
}

/// An experiment file, expanded.
#[derive(Clone, Debug, PartialEq)]
pub struct Experiment {
    pub name: String,
    pub description: Option<String>,
    pub repetitions: u32,
    /// The shuffle seed the file fixes; `None` lets the sweep draw one and record it.
    pub seed: Option<u64>,
    /// Confidence level of the intervals `results` prints, e.g. 0.95.
    pub confidence: f64,
    pub combine: Combine,
    pub axes: Vec<Axis>,
    pub points: Vec<Point>,
}

/// One axis: what it varies and its values as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    /// How tables and charts name it: `name`, or the key.
    pub name: String,
    /// The dotted key it sets; `None` for an axis only used as `{name}` in text.
    pub key: Option<String>,
    pub values: Vec<String>,
}

/// One combination of axis values and the configuration its runs use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// 0-based, in planning order (the cross product's order).
    pub index: u32,
    /// One value per axis, in axis order, as written.
    pub values: Vec<String>,
    pub config: RunConfig,
}

/// Everything one run of a point needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// How long flows send unless they say otherwise, µs.
    pub duration_us: u64,
    /// The start of every run excluded from its statistics, µs.
    pub warmup_us: u64,
    /// The bottleneck between the clients and the server.
    #[serde(with = "spec_text")]
    pub path: PathSpec,
    /// One access link per client host (an empty spec for none).
    #[serde(with = "spec_texts")]
    pub access: Vec<PathSpec>,
    /// Set on every host of the lab, after the lab's own defaults.
    pub sysctl: BTreeMap<String, String>,
    pub flows: Vec<FlowConfig>,
    /// A real host the flows run against from this machine, instead of a lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<RemoteHost>,
    /// Capture each run's packets at the lab's bottleneck (a pcapng file per run).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capture: bool,
    /// Record the kernel's events of each run's sockets.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trace_events: bool,
    /// A lab of any shape instead of the dumbbell of `path` and `access`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologySource>,
}

/// Where a run's topology comes from (`topology = "FILE"` or its tables inline).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologySource {
    /// A topology file as written: relative to the experiment file.
    File(String),
    /// The topology's tables written in the experiment file, as TOML text.
    Inline(String),
}

impl TopologySource {
    /// The checked graph; `read` reads a file named relative to the experiment file.
    pub fn load(
        &self,
        read: impl FnOnce(&str) -> std::io::Result<String>,
    ) -> Result<Topology, String> {
        match self {
            TopologySource::File(file) => {
                let text = read(file).map_err(|e| format!("topology file '{file}': {e}"))?;
                text.parse()
                    .map_err(|e| format!("topology file '{file}': {e}"))
            }
            TopologySource::Inline(text) => parse_inline(text),
        }
    }
}

/// A topology written in the experiment file, as its TOML text.
fn parse_inline(text: &str) -> Result<Topology, String> {
    text.parse().map_err(|e| format!("{e}"))
}

/// Refuses flows that do not run between two hosts of `topology`: one line naming the
/// flow and the host.
pub fn check_flow_hosts(topology: &Topology, flows: &[FlowConfig]) -> Result<(), String> {
    for flow in flows {
        let Some(hosts) = flow.hosts() else {
            return Err(format!(
                "flow '{}': in a topology a flow names its hosts: client = \"…\" and server = \"…\"",
                flow.name
            ));
        };
        for (role, name) in [("client", &hosts.client), ("server", &hosts.server)] {
            match topology.node(name).map(|id| topology.nodes[id].kind) {
                Some(NodeKind::Host) => {}
                Some(NodeKind::Router) => {
                    return Err(format!(
                        "flow '{}': {role} '{name}' is a router; a flow runs between hosts",
                        flow.name
                    ))
                }
                None => {
                    let known: Vec<&str> = topology
                        .hosts()
                        .map(|id| topology.nodes[id].name.as_str())
                        .collect();
                    return Err(format!(
                        "flow '{}': {role} '{name}' is not a host of the topology (hosts: {})",
                        flow.name,
                        known.join(", ")
                    ));
                }
            }
        }
        if hosts.client == hosts.server {
            return Err(format!(
                "flow '{}': client and server are both '{}'; a flow runs between two hosts",
                flow.name, hosts.client
            ));
        }
    }
    Ok(())
}

impl RunConfig {
    /// The seed of the lab of one repetition: derived from the path's `seed` where it
    /// pins one, else from the experiment's recorded seed. Repetitions draw apart; every
    /// point's repetition k draws the same, so points compare under the same draws; the
    /// same seed gives every run its draws again.
    pub fn lab_seed(&self, experiment_seed: u64, repetition: u32) -> u64 {
        derive_seed(
            self.path.seed.unwrap_or(experiment_seed),
            u64::from(repetition),
        )
    }
}

/// A real host: a `tcplab serve` agent (with its key) or a stock iperf3 server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteHost {
    /// Its name in the file's `[host.NAME]`.
    pub name: String,
    /// `HOST`, `HOST:PORT` or `[V6]:PORT`, as `tcplab run` takes it.
    pub address: String,
    /// The agent's pre-shared key file as written (relative to the experiment file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    /// A stock iperf3 server rather than a tcplab agent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub iperf3: bool,
}

/// One group of flows: parallel streams with one set of tunings, from one client; or a
/// command whose connections are the run's flows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowConfig {
    pub name: String,
    /// The hosts it runs between.
    #[serde(flatten)]
    pub ends: FlowEnds,
    /// When its test starts, µs after the run's start.
    pub start_us: u64,
    /// A command flow's: its time limit (`end`, as the command's `limit_us`), its hosts'
    /// congestion control (`cc`) and ECN; the rest left at their defaults.
    pub params: TestParams,
    /// `protocol = "command"`: the programs run instead of tcplab's own flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandSpec>,
    /// In a topology, `pacing = "gap"` or `"gap_cwnd…"`: the gap pacer on each sending
    /// host's first link toward the other ([`Topology::pace_first_link`]); a dumbbell's
    /// is its path's `pace`. A plan stored before it could follow the window kept the
    /// rate alone, as `gap_pace_bps`.
    #[serde(
        default,
        alias = "gap_pace_bps",
        deserialize_with = "stored_pace",
        skip_serializing_if = "Option::is_none"
    )]
    pub gap_pace: Option<Pace>,
}

/// A flow's gap pacer as stored: a [`Pace`], or a rate alone (bit/s) as plans stored it
/// before.
fn stored_pace<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Pace>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Bps(u64),
        Pace(Pace),
    }
    Ok(
        Option::<Stored>::deserialize(d)?.map(|stored| match stored {
            Stored::Bps(bps) => Pace::Rate(bps),
            Stored::Pace(pace) => pace,
        }),
    )
}

/// Where a flow runs: from a dumbbell's client to its server, or between two hosts of a
/// topology. Stored as `"client": N` or `"hosts": {…}` (a plan stored before this type
/// has both for a topology's flow, its `client` unused: `hosts` is read first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FlowEnds {
    Topology {
        hosts: FlowHosts,
    },
    /// Client k, from 1.
    Dumbbell {
        client: u16,
    },
}

impl FlowConfig {
    /// The host its connections start from: a topology's by name, else "client N".
    pub fn client_host(&self) -> String {
        match &self.ends {
            FlowEnds::Topology { hosts } => hosts.client.clone(),
            FlowEnds::Dumbbell { client } => format!("client {client}"),
        }
    }

    /// A topology's hosts it runs between; `None` for a dumbbell's flow.
    pub fn hosts(&self) -> Option<&FlowHosts> {
        match &self.ends {
            FlowEnds::Topology { hosts } => Some(hosts),
            FlowEnds::Dumbbell { .. } => None,
        }
    }
}

/// A topology's flow: its client opens the connections to its server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowHosts {
    pub client: String,
    pub server: String,
}

/// A command flow's programs, each run by `sh -c` in a lab's host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSpec {
    /// Run in the flow's client host; the run ends when it does (or at its time limit).
    pub client: String,
    /// Started first in the server host, waited on until it listens, ended after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The client's program is ended (its process group) this long after it started,
    /// µs: the flow's `duration`, the run's by default.
    pub limit_us: u64,
}

/// A run in the plan: which point, which repetition (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRun {
    pub point: u32,
    pub repetition: u32,
}

/// What is wrong with an experiment file, and where: one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// 1-based line and column of the value at fault, when one value is.
    pub at: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, column)) => write!(f, "line {line}, column {column}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SpecError {}

/// One of `count` disjoint parts of a plan (`sweep --shard K/N`): the planned runs whose
/// place in the shuffled plan is K − 1 modulo N. The parts together are the plan, each
/// run in one, and every part mixes the points as the whole plan does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 1-based.
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Whether planned run `seq` (its place in the plan, from 0) is this part's.
    pub fn holds(&self, seq: u32) -> bool {
        seq % self.count == self.index - 1
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = || format!("'{text}' is not K/N with 1 ≤ K ≤ N (e.g. 2/4)");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Experiment {
    /// All runs, points × repetitions, in the order `seed` shuffles them to: so that a
    /// drift of the machine over the sweep does not line up with any axis.
    pub fn schedule(&self, seed: u64) -> Vec<PlannedRun> {
        let mut runs: Vec<PlannedRun> = self
            .points
            .iter()
            .flat_map(|p| {
                (0..self.repetitions).map(move |repetition| PlannedRun {
                    point: p.index,
                    repetition,
                })
            })
            .collect();
        runs.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        runs
    }

    /// The seed that orders the plan: the file's, or for a sharded sweep without one the
    /// plan hash's first 32 bits, so that every shard, on any machine, plans the same
    /// order (a sweep of its own draws one).
    pub fn shard_seed(&self) -> u64 {
        self.seed
            .unwrap_or_else(|| u64::from_str_radix(&self.plan_hash()[..8], 16).expect("hex"))
    }

    /// A digest of everything that decides what the runs do and measure: the points'
    /// configurations, the axes and the repetitions (not the name, the description or
    /// the comments). Two files with the same hash plan the same sweep.
    pub fn plan_hash(&self) -> String {
        #[derive(Serialize)]
        struct Planned<'a> {
            repetitions: u32,
            seed: Option<u64>,
            axes: &'a [Axis],
            points: &'a [Point],
        }
        let json = serde_json::to_vec(&Planned {
            repetitions: self.repetitions,
            seed: self.seed,
            axes: &self.axes,
            points: &self.points,
        })
        .expect("plans serialize");
        Sha256::digest(&json)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// `rtt=20ms window=64K`: a point's axis values, for progress lines and tables.
    pub fn label(&self, point: &Point) -> String {
        point_label(&self.axes, &point.values)
    }
}

/// `name=value` for each axis, space-separated ("" for a file without axes).
pub fn point_label(axes: &[Axis], values: &[String]) -> String {
    axes.iter()
        .zip(values)
        .map(|(a, v)| format!("{}={}", a.name, if v.is_empty() { "\"\"" } else { v }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads and expands an experiment file; `default_name` names it when the file does not.
pub fn parse(text: &str, default_name: &str) -> Result<Experiment, SpecError> {
    let doc: Table = text.parse().map_err(|e| toml_error(text, &e))?;
    let sweep: Sweep = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    // The file as written, checked value by value with positions; a value holding an
    // axis placeholder can only be checked once the axis fills it in (below).
    if let Err(e) = toml::from_str::<File>(text) {
        let deferred = e
            .span()
            .is_some_and(|span| text[span].contains('{') && !sweep.axis.is_empty());
        if !deferred {
            return Err(toml_error(text, &e));
        }
    }
    let combine = sweep.combine;
    let axes = sweep
        .axis
        .iter()
        .map(|a| ResolvedAxis::new(text, a))
        .collect::<Result<Vec<_>, _>>()?;
    check_axes(text, &axes, &doc)?;
    if combine == Combine::Zip {
        if let Some(first) = axes.first() {
            if let Some(other) = axes.iter().find(|a| a.values.len() != first.values.len()) {
                return Err(SpecError {
                    at: Some(position(text, other.span.start)),
                    message: format!(
                        "combine = \"zip\" needs axes of one length: '{}' has {} values, '{}' has {}",
                        other.name,
                        other.values.len(),
                        first.name,
                        first.values.len()
                    ),
                });
            }
        }
    }
    // Each axis value on its own first, so an error points at the value.
    for (i, axis) in axes.iter().enumerate() {
        for (j, (value, span)) in axis.values.iter().enumerate() {
            let choice: Vec<usize> = (0..axes.len())
                .map(|k| if k == i { j } else { 0 })
                .collect();
            if let Err(message) = point_file(&doc, &axes, &choice) {
                return Err(SpecError {
                    at: Some(position(text, span.start)),
                    message: format!("axis '{}' value {}: {message}", axis.name, show(value)),
                });
            }
        }
    }
    let choices = combinations(&axes, combine);
    let mut points = Vec::with_capacity(choices.len());
    let mut first = None;
    for (index, choice) in choices.iter().enumerate() {
        let values: Vec<String> = axes
            .iter()
            .zip(choice)
            .map(|(a, &j)| display(&a.values[j].0))
            .collect();
        let at_point = |message: String| SpecError {
            at: None,
            message: if axes.is_empty() {
                message
            } else {
                format!(
                    "at point {}: {message}",
                    point_label(&infos(&axes), &values)
                )
            },
        };
        let file = point_file(&doc, &axes, choice).map_err(at_point)?;
        let config = file.config().map_err(at_point)?;
        first.get_or_insert(file);
        points.push(Point {
            index: index as u32,
            values,
            config,
        });
    }
    let file = first.expect("a file plans at least one point");
    Ok(Experiment {
        name: file.name.unwrap_or_else(|| default_name.to_owned()),
        description: file.description,
        repetitions: file.repetitions.unwrap_or(1),
        seed: file.seed,
        confidence: file.confidence.unwrap_or(DEFAULT_CONFIDENCE),
        combine,
        axes: infos(&axes),
        points,
    })
}

// ---------------------------------------------------------------------------------------
// The file's typed form

/// Top-level keys that describe the sweep rather than a run: no axis may set them.
const SWEEP_KEYS: &[&str] = &[
    "name",
    "description",
    "repetitions",
    "seed",
    "confidence",
    "combine",
    "axis",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: Option<String>,
    description: Option<String>,
    repetitions: Option<u32>,
    seed: Option<u64>,
    confidence: Option<f64>,
    /// Accepted here, read with positions by [`Sweep`].
    #[serde(rename = "combine")]
    _combine: Option<de::IgnoredAny>,
    duration: Option<Micros>,
    warmup: Option<Micros>,
    /// tcp_info sampling period.
    sample_interval: Option<Micros>,
    /// Report interval (intervals stored per flow).
    interval: Option<Micros>,
    path: Option<PathValue>,
    #[serde(default)]
    access: Vec<PathValue>,
    #[serde(default)]
    sysctl: BTreeMap<String, Scalar>,
    #[serde(default)]
    flow: Vec<FlowFile>,
    /// Real hosts by name.
    #[serde(default)]
    host: BTreeMap<String, HostFile>,
    /// The real host the flows run against (a name of `host`) instead of a lab path.
    server: Option<String>,
    /// A pcapng capture of each run at the bottleneck.
    #[serde(default)]
    capture: bool,
    /// The kernel's events of each run's sockets.
    #[serde(default)]
    trace_events: bool,
    /// Accepted here, read with positions by [`Sweep`].
    #[serde(rename = "axis")]
    _axis: Option<de::IgnoredAny>,
    /// A lab of any shape: a topology file's name, or its tables inline.
    topology: Option<TopologyValue>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TopologyValue {
    File(String),
    Inline(Table),
}

/// A flow's client: a dumbbell's by number, a topology's host by name.
#[derive(Clone, Deserialize)]
#[serde(untagged)]
enum FlowClient {
    Number(u16),
    Name(String),
}

impl fmt::Display for FlowClient {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            FlowClient::Number(n) => write!(f, "{n}"),
            FlowClient::Name(name) => write!(f, "'{name}'"),
        }
    }
}

/// The lab a file's flows run in: a dumbbell with its clients, or a topology.
#[derive(Clone, Copy)]
enum Shape {
    Dumbbell { clients: usize },
    Topology,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    address: String,
    key_file: Option<String>,
    #[serde(default)]
    iperf3: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowFile {
    name: Option<String>,
    protocol: Option<Protocol>,
    /// A UDP flow's payload rate.
    rate: Option<Bits>,
    /// A UDP flow's payload per datagram.
    datagram_size: Option<Bytes>,
    /// A UDP flow's datagrams per burst.
    burst: Option<u32>,
    /// A request/response flow's request and response sizes.
    request: Option<Bytes>,
    response: Option<Bytes>,
    /// Writes each request is split into (1 when not given).
    request_writes: Option<u32>,
    /// A dumbbell's client by number (from 1), a topology's host by name.
    client: Option<FlowClient>,
    /// A topology's host the flow's connections go to.
    server: Option<String>,
    direction: Option<Mode>,
    streams: Option<u16>,
    start: Option<Micros>,
    duration: Option<Micros>,
    bytes: Option<Bytes>,
    window: Option<Bytes>,
    sndbuf: Option<Bytes>,
    rcvbuf: Option<Bytes>,
    write_size: Option<Bytes>,
    read_size: Option<Bytes>,
    nodelay: Option<bool>,
    mss: Option<Bytes>,
    cc: Option<String>,
    pacing: Option<Pacing>,
    pacing_rate: Option<Bits>,
    send_method: Option<SendMethod>,
    /// Round-trip probes beside this flow's test, one every this long.
    probe: Option<Micros>,
    /// How long the probes measure the idle path first (2 s when not given).
    probe_idle: Option<Micros>,
    /// Ask for ECN: net.ipv4.tcp_ecn = 1 on the flow's client host.
    ecn: Option<bool>,
    /// `protocol = "command"`: the program run in the client host.
    command: Option<String>,
    /// `protocol = "command"`: the program run in the server host first.
    server_command: Option<String>,
}

#[derive(Clone, Copy, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Protocol {
    Tcp,
    Udp,
    /// Request/response transactions over TCP (netperf's TCP_RR).
    Rr,
    /// The same, a new connection for each (netperf's TCP_CRR).
    Crr,
    /// Round-trip probes alone, no load (`probe`, 10 ms when not given).
    Probe,
    /// A program (`command`, with `server_command` in the server host) whose TCP
    /// connections, watched, are the run's flows.
    Command,
}

/// The protocols of tcplab's own flows, which the engine runs with their tunings.
#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Tcp,
    Udp,
    Rr,
    Crr,
    Probe,
}

impl Protocol {
    /// The engine's protocol; `None` for a command's.
    fn engine(self) -> Option<Engine> {
        match self {
            Protocol::Tcp => Some(Engine::Tcp),
            Protocol::Udp => Some(Engine::Udp),
            Protocol::Rr => Some(Engine::Rr),
            Protocol::Crr => Some(Engine::Crr),
            Protocol::Probe => Some(Engine::Probe),
            Protocol::Command => None,
        }
    }
}

/// A probe flow's interval unless the file says otherwise (flent samples every 200 ms).
const DEFAULT_PROBE_INTERVAL_US: u64 = 10_000;

/// How a flow's sender is paced.
#[derive(Clone, Copy, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Pacing {
    /// No cap (the kernel still paces BBR flows by its own model).
    None,
    /// TCP's internal pacing capped at `pacing_rate` (SO_MAX_PACING_RATE).
    Kernel,
    /// The application writes at `pacing_rate`.
    App,
    /// A gap pacer (PSPacer) at `pacing_rate` on the sending host's egress: the path's
    /// `pace` in the flow's direction (it spaces every flow of that direction); in a
    /// topology, `pace` on the sending host's first link toward the other.
    Gap,
    /// The gap pacer following the senders' cwnd × MSS / smoothed RTT (`pace cwnd`).
    GapCwnd,
    /// The gap pacer following the senders' cwnd × MSS / min RTT (`pace cwnd/minrtt`).
    GapCwndMinrtt,
}

impl File {
    fn config(&self) -> Result<RunConfig, String> {
        if self.repetitions == Some(0) {
            return Err("repetitions must be at least 1".into());
        }
        if let Some(c) = self.confidence.filter(|c| !(*c > 0.0 && *c < 1.0)) {
            return Err(format!("confidence {c} is not between 0 and 1 (e.g. 0.95)"));
        }
        let duration_us = self.duration.map_or(DEFAULT_DURATION_US, |d| d.0);
        test_builder::check_end(Source::Key, &TestEnd::Duration { us: duration_us })
            .map_err(|e| e.to_string())?;
        let warmup_us = self.warmup.map_or(0, |d| d.0);
        if warmup_us >= duration_us {
            return Err(format!(
                "warmup {} is not shorter than the duration {}",
                us(warmup_us),
                us(duration_us)
            ));
        }
        let defaults = TestParams::default();
        let sample_interval_us = self
            .sample_interval
            .map_or(defaults.sample_interval_us, |d| d.0);
        let report_interval_us = self.interval.map_or(defaults.report_interval_us, |d| d.0);
        // Keys of the run, checked once for it rather than for each flow.
        test_builder::check_sample_interval(Source::Key, sample_interval_us)
            .and_then(|()| test_builder::check_report_interval(Source::Key, report_interval_us))
            .map_err(|e| e.to_string())?;
        let access: Vec<PathSpec> = if self.access.is_empty() {
            vec![PathSpec::default()]
        } else {
            self.access.iter().map(|a| a.0.clone()).collect()
        };
        let default_flow = [FlowFile::default()];
        let flows = if self.flow.is_empty() {
            &default_flow[..]
        } else {
            &self.flow[..]
        };
        let server = self.server()?;
        if let Some(host) = &server {
            self.check_against_real_host(host, flows)?;
        }
        let topology = self.topology()?;
        let inline = match &topology {
            Some(TopologySource::Inline(text)) => Some(parse_inline(text)?),
            _ => None,
        };
        let shape = match &topology {
            Some(_) => Shape::Topology,
            None => Shape::Dumbbell {
                clients: access.len(),
            },
        };
        let mut flows = flows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.config(
                    i,
                    duration_us,
                    shape,
                    sample_interval_us,
                    report_interval_us,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut names = HashSet::new();
        if let Some(dup) = flows.iter().find(|f| !names.insert(&f.name)) {
            return Err(format!("two flows are named '{}'", dup.name));
        }
        if let Some(inline) = &inline {
            check_flow_hosts(inline, &flows)?;
        }
        if let Some(command) = flows.iter().find(|f| f.command.is_some()) {
            // Its watch takes every connection of the lab's hosts as the command's.
            if let Some(other) = flows.iter().find(|f| f.name != command.name) {
                return Err(format!(
                    "flow '{}': protocol = \"command\" takes every TCP connection of the lab's hosts as its own, so it runs alone, but flow '{}' runs beside it: give one [[flow]]",
                    command.name, other.name
                ));
            }
            if self.trace_events {
                return Err(format!(
                    "flow '{}': trace_events is not taken for protocol = \"command\" (the kernel's events are filtered on tcplab's own ports): remove one of them",
                    command.name
                ));
            }
        }
        // ECN is the client host's: its flows ask for it together or not at all.
        for (i, a) in flows.iter().enumerate() {
            if let Some(b) = flows[..i].iter().find(|b| {
                b.client_host() == a.client_host() && b.params.tuning.ecn != a.params.tuning.ecn
            }) {
                return Err(format!(
                    "flows '{}' and '{}' run from {} but only one asks for ecn: it is the host's (net.ipv4.tcp_ecn), so give both the same",
                    b.name,
                    a.name,
                    a.client_host()
                ));
            }
        }
        let mut path = self.path.as_ref().map(|p| p.0.clone()).unwrap_or_default();
        Dumbbell::new(&path, &access)
            .check()
            .map_err(|e| format!("path: {e}"))?;
        for (file, flow) in self.flow.iter().zip(&mut flows) {
            let pace = match file.pacing {
                Some(Pacing::Gap) => Some(Pace::Rate(
                    file.pacing_rate
                        .ok_or_else(|| {
                            format!("flow '{}': pacing = \"gap\" needs a pacing_rate", flow.name)
                        })?
                        .0,
                )),
                Some(Pacing::GapCwnd) => Some(Pace::Window(PaceRtt::Smoothed)),
                Some(Pacing::GapCwndMinrtt) => Some(Pace::Window(PaceRtt::Min)),
                _ => None,
            };
            if topology.is_some() {
                flow.gap_pace = pace;
            } else if pace.is_some() {
                match flow.params.mode {
                    Mode::Up => path.up.pace = pace,
                    Mode::Down => path.down.pace = pace,
                    Mode::Bidir => (path.up.pace, path.down.pace) = (pace, pace),
                }
            }
        }
        Ok(RunConfig {
            duration_us,
            warmup_us,
            path,
            access,
            sysctl: self
                .sysctl
                .iter()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect(),
            flows,
            server,
            capture: self.capture,
            trace_events: self.trace_events,
            topology,
        })
    }

    /// `topology`, checked against the keys only a dumbbell has; an inline one as text.
    fn topology(&self) -> Result<Option<TopologySource>, String> {
        let Some(value) = &self.topology else {
            return Ok(None);
        };
        let dumbbell_only = [
            ("path", self.path.is_some()),
            ("access", !self.access.is_empty()),
            ("server", self.server.is_some()),
        ];
        if let Some((key, _)) = dumbbell_only.iter().find(|(_, set)| *set) {
            return Err(format!(
                "{key} is a dumbbell's, but topology gives the lab its links: remove one of them (a topology's link has its own path)"
            ));
        }
        Ok(Some(match value {
            TopologyValue::File(file) if file.trim().is_empty() => {
                return Err("topology: the file name is empty".into())
            }
            TopologyValue::File(file) => TopologySource::File(file.trim().to_owned()),
            TopologyValue::Inline(table) => {
                let text = toml::to_string(table).map_err(|e| format!("topology: {e}"))?;
                parse_inline(&text)?;
                TopologySource::Inline(text)
            }
        }))
    }

    /// The host `server` names, checked.
    fn server(&self) -> Result<Option<RemoteHost>, String> {
        let Some(name) = &self.server else {
            return Ok(None);
        };
        let Some(host) = self.host.get(name) else {
            let known: Vec<&str> = self.host.keys().map(String::as_str).collect();
            return Err(if known.is_empty() {
                format!("server '{name}' names no host: describe it in a [host.{name}] table with its address")
            } else {
                format!(
                    "server '{name}' is not a host of this file (hosts: {})",
                    known.join(", ")
                )
            });
        };
        if host.address.trim().is_empty() {
            return Err(format!("host '{name}': address is empty"));
        }
        if host.iperf3 && host.key_file.is_some() {
            return Err(format!(
                "host '{name}': an iperf3 server takes no key_file (iperf3's own authentication is not supported)"
            ));
        }
        Ok(Some(RemoteHost {
            name: name.clone(),
            address: host.address.trim().to_owned(),
            key_file: host.key_file.clone(),
            iperf3: host.iperf3,
        }))
    }

    /// What only a lab can do, refused for a run against a real host.
    fn check_against_real_host(&self, host: &RemoteHost, flows: &[FlowFile]) -> Result<(), String> {
        let name = &host.name;
        let lab_only = [
            ("path", self.path.is_some()),
            ("access", !self.access.is_empty()),
            ("sysctl", !self.sysctl.is_empty()),
            ("capture", self.capture),
        ];
        if let Some((key, _)) = lab_only.iter().find(|(_, set)| *set) {
            return Err(format!(
                "{key} is for a lab, but server = '{name}' runs across a real network: remove one of them"
            ));
        }
        for (i, flow) in flows.iter().enumerate() {
            if flow.protocol == Some(Protocol::Command) {
                return Err(format!(
                    "flow '{}': protocol = \"command\" runs its programs in a lab's hosts, but server = '{name}' is a real host: remove one of them",
                    flow.name(i)
                ));
            }
            if let Some(client) = flow
                .client
                .as_ref()
                .filter(|c| !matches!(c, FlowClient::Number(1)))
            {
                return Err(format!(
                    "flow '{}': client {client}, but against a real host every flow runs from this machine (client 1)",
                    flow.name(i)
                ));
            }
            if matches!(
                flow.pacing,
                Some(Pacing::Gap | Pacing::GapCwnd | Pacing::GapCwndMinrtt)
            ) {
                return Err(format!(
                    "flow '{}': the gap pacer is an element of the lab's emulator; against real host '{name}' use pacing = \"kernel\" or \"app\"",
                    flow.name(i)
                ));
            }
            if flow.ecn == Some(true) {
                return Err(format!(
                    "flow '{}': ecn sets a lab client's net.ipv4.tcp_ecn; against real host '{name}' set it on this machine (sysctl -w net.ipv4.tcp_ecn=1)",
                    flow.name(i)
                ));
            }
        }
        if host.iperf3 {
            if flows.len() > 1 {
                return Err(format!(
                    "host '{name}' is an iperf3 server, which runs one test at a time: give one [[flow]] (streams for parallel connections)"
                ));
            }
            if flows.iter().any(|f| f.start.is_some_and(|s| s.0 > 0)) {
                return Err(format!(
                    "host '{name}' is an iperf3 server: a flow's start must be 0"
                ));
            }
        }
        Ok(())
    }
}

impl Default for FlowFile {
    fn default() -> Self {
        toml::from_str("").expect("every flow key is optional")
    }
}

impl FlowFile {
    /// Its name, or `flowN` for the N-th group.
    fn name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("flow{}", index + 1))
    }

    fn config(
        &self,
        index: usize,
        run_us: u64,
        shape: Shape,
        sample_interval_us: u64,
        report_interval_us: u64,
    ) -> Result<FlowConfig, String> {
        let name = self.name(index);
        let ends = self.ends(&name, shape)?;
        let Some(protocol) = self.protocol.unwrap_or(Protocol::Tcp).engine() else {
            return self.command_config(name, ends, run_us, sample_interval_us, report_interval_us);
        };
        if self.command.is_some() || self.server_command.is_some() {
            return Err(format!(
                "flow '{name}': command and server_command are for protocol = \"command\""
            ));
        }
        if protocol == Engine::Probe && self.streams.is_some() {
            return Err(format!(
                "flow '{name}': protocol = \"probe\" is probes alone: it has no streams"
            ));
        }
        let start_us = self.start.map_or(0, |s| s.0);
        let end = match (self.bytes, self.duration) {
            (Some(_), Some(_)) => {
                return Err(format!("flow '{name}': give bytes or duration, not both"))
            }
            (Some(Bytes(bytes)), None) => TestEnd::Bytes { bytes },
            (None, Some(Micros(us))) => TestEnd::Duration { us },
            (None, None) if start_us < run_us => TestEnd::Duration {
                us: run_us - start_us,
            },
            (None, None) => {
                return Err(format!(
                    "flow '{name}': start {} is not before the end of the run ({})",
                    us(start_us),
                    us(run_us)
                ))
            }
        };
        let transacts = matches!(protocol, Engine::Rr | Engine::Crr);
        if !transacts
            && (self.request.is_some() || self.response.is_some() || self.request_writes.is_some())
        {
            return Err(format!(
                "flow '{name}': request, response and request_writes are for protocol = \"rr\" or \"crr\""
            ));
        }
        if protocol != Engine::Udp
            && (self.rate.is_some() || self.datagram_size.is_some() || self.burst.is_some())
        {
            return Err(format!(
                "flow '{name}': rate, datagram_size and burst are for protocol = \"udp\""
            ));
        }
        let probe_interval = match protocol {
            Engine::Probe => self.probe.or(Some(Micros(DEFAULT_PROBE_INTERVAL_US))),
            Engine::Tcp | Engine::Udp | Engine::Rr | Engine::Crr => self.probe,
        };
        if probe_interval.is_none() && self.probe_idle.is_some() {
            return Err(format!("flow '{name}': probe_idle needs probe"));
        }
        let input = TestInput {
            streams: match (protocol, self.streams) {
                (Engine::Probe, _) => Streams::ProbesAlone,
                (_, Some(n)) => Streams::Parallel(n),
                (_, None) => Streams::Default,
            },
            end: Some(end),
            mode: self.direction,
            window: self.window.map(|b| b.0),
            sndbuf: self.sndbuf.map(|b| b.0),
            rcvbuf: self.rcvbuf.map(|b| b.0),
            write_size: self.write_size.map(|b| b.0),
            read_size: self.read_size.map(|b| b.0),
            nodelay: self.nodelay,
            mss: self.mss.map(|b| b.0),
            cc: self.cc.clone(),
            pacing_rate: self.kernel_pacing_rate(&name)?,
            app_rate: self.app_rate(&name)?,
            send_method: self.send_method,
            ecn: self.ecn,
            sample_interval_us: Some(sample_interval_us),
            report_interval_us: Some(report_interval_us),
            udp: match protocol {
                Engine::Udp => Some(UdpInput {
                    rate_bps: self
                        .rate
                        .ok_or_else(|| format!("flow '{name}': a UDP flow needs a rate"))?
                        .0,
                    datagram_size: self.datagram_size.map(|b| b.0),
                    burst: self.burst,
                }),
                Engine::Tcp | Engine::Rr | Engine::Crr | Engine::Probe => None,
            },
            probe: probe_interval.map(|interval| ProbeInput {
                interval_us: interval.0,
                idle_us: self.probe_idle.map(|d| d.0),
            }),
            transactions: transacts.then_some(TransactionInput {
                request: self.request.map(|b| b.0),
                response: self.response.map(|b| b.0),
                request_writes: self.request_writes,
                new_connection: protocol == Engine::Crr,
            }),
        };
        let params =
            test_builder::build(&input, Source::Key).map_err(|e| format!("flow '{name}': {e}"))?;
        Ok(FlowConfig {
            name,
            ends,
            start_us,
            params,
            command: None,
            gap_pace: None,
        })
    }

    /// Where the flow runs: a dumbbell's client by number, or a topology's two hosts by
    /// name (checked against its graph by [`check_flow_hosts`]).
    fn ends(&self, name: &str, shape: Shape) -> Result<FlowEnds, String> {
        match (shape, &self.client) {
            (Shape::Dumbbell { .. }, Some(FlowClient::Name(host))) => Err(format!(
                "flow '{name}': client '{host}' names a host, which only a topology's flows do; a dumbbell's client is a number (1 for the first)"
            )),
            (Shape::Dumbbell { .. }, _) if self.server.is_some() => Err(format!(
                "flow '{name}': server names a topology's host; a dumbbell has one server"
            )),
            (Shape::Dumbbell { clients }, client) => {
                let client = match client {
                    Some(FlowClient::Number(n)) => *n,
                    _ => 1,
                };
                if client == 0 || usize::from(client) > clients {
                    return Err(format!(
                        "flow '{name}': client {client} does not exist (the lab has {}; `access` lists one link per client)",
                        tcplab_record::units::count(clients, "client")
                    ));
                }
                Ok(FlowEnds::Dumbbell { client })
            }
            (Shape::Topology, Some(FlowClient::Name(client))) => {
                let server = self.server.clone().ok_or_else(|| {
                    format!("flow '{name}': in a topology a flow names its server host too: server = \"…\"")
                })?;
                Ok(FlowEnds::Topology {
                    hosts: FlowHosts {
                        client: client.clone(),
                        server,
                    },
                })
            }
            (Shape::Topology, client) => Err(format!(
                "flow '{name}': {}; in a topology a flow names its hosts: client = \"…\" and server = \"…\"",
                client.as_ref().map_or("no client".to_owned(), |c| format!("client {c}"))
            )),
        }
    }

    /// SO_MAX_PACING_RATE: `pacing_rate` with `pacing = "kernel"` or no `pacing`.
    fn kernel_pacing_rate(&self, name: &str) -> Result<Option<u64>, String> {
        match (self.pacing, self.pacing_rate) {
            (Some(Pacing::Kernel), None) => Err(format!(
                "flow '{name}': pacing = \"kernel\" needs a pacing_rate"
            )),
            (None | Some(Pacing::Kernel), rate) => Ok(rate.map(|r| r.0)),
            (
                Some(
                    Pacing::None
                    | Pacing::App
                    | Pacing::Gap
                    | Pacing::GapCwnd
                    | Pacing::GapCwndMinrtt,
                ),
                _,
            ) => Ok(None),
        }
    }

    /// The application's own pacing: `pacing_rate` with `pacing = "app"`.
    fn app_rate(&self, name: &str) -> Result<Option<u64>, String> {
        match (self.pacing, self.pacing_rate) {
            (Some(Pacing::App), None) => Err(format!(
                "flow '{name}': pacing = \"app\" needs a pacing_rate"
            )),
            (Some(Pacing::App), Some(rate)) => Ok(Some(rate.0)),
            _ => Ok(None),
        }
    }
}

impl FlowFile {
    /// A `protocol = "command"` flow: its programs, its time limit (`duration`, the run's
    /// by default), and the host-wide settings its sockets take (`cc`, `ecn`); every key
    /// that tunes tcplab's own sockets refused.
    fn command_config(
        &self,
        name: String,
        ends: FlowEnds,
        run_us: u64,
        sample_interval_us: u64,
        report_interval_us: u64,
    ) -> Result<FlowConfig, String> {
        let FlowFile {
            name: _,
            protocol: _,
            client: _,
            server: _,
            start,
            duration,
            cc,
            ecn,
            command,
            server_command,
            rate,
            datagram_size,
            burst,
            request,
            response,
            request_writes,
            direction,
            streams,
            bytes,
            window,
            sndbuf,
            rcvbuf,
            write_size,
            read_size,
            nodelay,
            mss,
            pacing,
            pacing_rate,
            send_method,
            probe,
            probe_idle,
        } = self;
        let engine_only = [
            ("rate", rate.is_some()),
            ("datagram_size", datagram_size.is_some()),
            ("burst", burst.is_some()),
            ("request", request.is_some()),
            ("response", response.is_some()),
            ("request_writes", request_writes.is_some()),
            ("direction", direction.is_some()),
            ("streams", streams.is_some()),
            ("bytes", bytes.is_some()),
            ("window", window.is_some()),
            ("sndbuf", sndbuf.is_some()),
            ("rcvbuf", rcvbuf.is_some()),
            ("write_size", write_size.is_some()),
            ("read_size", read_size.is_some()),
            ("nodelay", nodelay.is_some()),
            ("mss", mss.is_some()),
            ("pacing", pacing.is_some()),
            ("pacing_rate", pacing_rate.is_some()),
            ("send_method", send_method.is_some()),
            ("probe", probe.is_some()),
            ("probe_idle", probe_idle.is_some()),
        ];
        if let Some((key, _)) = engine_only.iter().find(|(_, set)| *set) {
            return Err(format!(
                "flow '{name}': {key} tunes tcplab's own flows, but protocol = \"command\" runs a program with sockets of its own: set the hosts' [sysctl] instead"
            ));
        }
        let program = |key: &str, text: &Option<String>| -> Result<Option<String>, String> {
            match text.as_deref().map(str::trim) {
                Some("") => Err(format!("flow '{name}': {key} is empty")),
                other => Ok(other.map(str::to_owned)),
            }
        };
        let client_command = program("command", command)?.ok_or_else(|| {
            format!(
                "flow '{name}': protocol = \"command\" needs command = \"…\", the program run in its client host"
            )
        })?;
        let start_us = start.map_or(0, |s| s.0);
        let limit_us = match duration {
            Some(Micros(us)) => *us,
            None if start_us < run_us => run_us - start_us,
            None => {
                return Err(format!(
                    "flow '{name}': start {} is not before the end of the run ({})",
                    us(start_us),
                    us(run_us)
                ))
            }
        };
        let end = TestEnd::Duration { us: limit_us };
        crate::ranges::check_end(&end).map_err(|e| format!("flow '{name}': duration: {e}"))?;
        let defaults = Tuning::default();
        Ok(FlowConfig {
            name: name.clone(),
            ends,
            start_us,
            params: TestParams {
                streams: 1,
                end,
                sample_interval_us,
                report_interval_us,
                tuning: Tuning {
                    cc: cc.clone(),
                    ecn: ecn.unwrap_or(defaults.ecn),
                    ..defaults
                },
                ..TestParams::default()
            },
            command: Some(CommandSpec {
                client: client_command,
                server: program("server_command", server_command)?,
                limit_us,
            }),
            gap_pace: None,
        })
    }
}

fn us(v: u64) -> String {
    tcplab_record::units::format_duration_us(v)
}

// ---------------------------------------------------------------------------------------
// Values with units: text with a unit, or a bare TOML number

/// A duration (µs): "10s", "250ms", or a number of seconds.
#[derive(Clone, Copy)]
struct Micros(u64);
/// A size in bytes: "64K", or a number of bytes.
#[derive(Clone, Copy)]
struct Bytes(u64);
/// A rate in bit/s: "100mbit", or a number of bit/s.
#[derive(Clone, Copy)]
struct Bits(u64);

macro_rules! unit_value {
    ($t:ident, $parse:path, $what:literal) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = d.deserialize_any(TextOrNumber($what))?;
                $parse(&text)
                    .map($t)
                    .map_err(|e: UnitError| de::Error::custom(e))
            }
        }
    };
}
unit_value!(Micros, parse_duration, "a duration such as \"10s\"");
unit_value!(Bytes, parse_size, "a size such as \"64K\"");
unit_value!(Bits, parse_rate, "a rate such as \"100mbit\"");

/// Reads a string or a number as its text.
struct TextOrNumber(&'static str);

impl Visitor<'_> for TextOrNumber {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
}

/// A sysctl value: text or a number, written as the kernel reads it.
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextOrNumber("a sysctl value (text or a number)"))
            .map(Scalar)
    }
}

/// A path spec as one line of text or as a table (see [`tcplab_netsim::path`]).
struct PathValue(PathSpec);

impl<'de> Deserialize<'de> for PathValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PathVisitor;
        impl<'de> Visitor<'de> for PathVisitor {
            type Value = PathSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a path spec such as \"rtt 20ms rate 100mbit\", or a table")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PathSpec, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PathSpec, A::Error> {
                PathSpec::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_any(PathVisitor).map(PathValue)
    }
}

/// Path specs stored as their normalized text.
mod spec_text {
    use super::*;
    pub fn serialize<S: Serializer>(spec: &PathSpec, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(spec)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathSpec, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

mod spec_texts {
    use super::*;
    pub fn serialize<S: Serializer>(specs: &[PathSpec], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(specs.iter().map(|p| p.to_string()))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathSpec>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|s| s.parse().map_err(de::Error::custom))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Axes

/// The sweep's own keys, read from the text so that errors keep their positions.
#[derive(Deserialize)]
struct Sweep {
    #[serde(default)]
    combine: Combine,
    #[serde(default)]
    axis: Vec<Spanned<AxisFile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AxisFile {
    name: Option<String>,
    key: Option<Spanned<String>>,
    values: Option<Vec<Spanned<Value>>>,
    range: Option<Spanned<RangeFile>>,
}

/// `from`, `to` (inclusive), and either `step` (linear) or `factor` (geometric); `unit`
/// is appended to every value ("K" gives "2K", "4K", …).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeFile {
    from: f64,
    to: f64,
    step: Option<f64>,
    factor: Option<f64>,
    unit: Option<String>,
}

struct ResolvedAxis {
    name: String,
    key: Option<String>,
    span: std::ops::Range<usize>,
    key_span: Option<std::ops::Range<usize>>,
    /// Each value with where it was written (a range's values: the range).
    values: Vec<(Value, std::ops::Range<usize>)>,
}

impl ResolvedAxis {
    fn new(text: &str, spanned: &Spanned<AxisFile>) -> Result<ResolvedAxis, SpecError> {
        let axis = spanned.get_ref();
        let at = |offset: usize| Some(position(text, offset));
        let err = |offset: usize, message: String| SpecError {
            at: at(offset),
            message,
        };
        let key = axis.key.as_ref().map(|k| k.get_ref().trim().to_owned());
        let name =
            match (&axis.name, &key) {
                (Some(name), _) => name.clone(),
                (None, Some(key)) => key.clone(),
                (None, None) => return Err(err(
                    spanned.span().start,
                    "an axis needs a key (the value it sets) or a name (used as {name} in text)"
                        .into(),
                )),
            };
        let values = match (&axis.values, &axis.range) {
            (Some(values), None) => values
                .iter()
                .map(|v| (v.get_ref().clone(), v.span()))
                .collect(),
            (None, Some(range)) => range_values(range.get_ref())
                .map_err(|m| err(range.span().start, format!("axis '{name}': {m}")))?
                .into_iter()
                .map(|v| (v, range.span()))
                .collect(),
            _ => {
                return Err(err(
                    spanned.span().start,
                    format!("axis '{name}' needs either values = [...] or range = {{ from, to, step or factor }}"),
                ))
            }
        };
        let values: Vec<(Value, std::ops::Range<usize>)> = values;
        if values.is_empty() {
            return Err(err(
                spanned.span().start,
                format!("axis '{name}' has no values"),
            ));
        }
        if let Some((v, span)) = values
            .iter()
            .find(|(v, _)| matches!(v, Value::Array(_) | Value::Table(_) | Value::Datetime(_)))
        {
            return Err(err(
                span.start,
                format!(
                    "axis '{name}': value {} is not text, a number or a boolean",
                    show(v)
                ),
            ));
        }
        Ok(ResolvedAxis {
            name,
            key,
            span: spanned.span(),
            key_span: axis.key.as_ref().map(|k| k.span()),
            values,
        })
    }
}

fn range_values(r: &RangeFile) -> Result<Vec<Value>, String> {
    let numbers = match (r.step, r.factor) {
        (Some(step), None) if step > 0.0 && r.from <= r.to => {
            let n = ((r.to - r.from) / step + 1e-9).floor() as usize + 1;
            if n > MAX_RANGE_VALUES {
                return Err(format!(
                    "the range has {n} values (at most {MAX_RANGE_VALUES})"
                ));
            }
            (0..n).map(|i| r.from + i as f64 * step).collect::<Vec<_>>()
        }
        (None, Some(factor)) if factor > 1.0 && r.from > 0.0 && r.from <= r.to => {
            let mut v = vec![r.from];
            while let Some(&last) = v.last() {
                let next = last * factor;
                if next > r.to * (1.0 + 1e-9) {
                    break;
                }
                if v.len() == MAX_RANGE_VALUES {
                    return Err(format!("the range has more than {MAX_RANGE_VALUES} values"));
                }
                v.push(next);
            }
            v
        }
        (Some(_), Some(_)) => return Err("give step or factor, not both".into()),
        (Some(_), None) => return Err("a range needs step > 0 and from <= to".into()),
        (None, Some(_)) => return Err("a range needs factor > 1 and 0 < from <= to".into()),
        (None, None) => return Err("a range needs step (linear) or factor (geometric)".into()),
    };
    Ok(numbers
        .into_iter()
        .map(|x| {
            // Round off the float noise of repeated steps (0.1 + 0.2).
            let x = (x * 1e9).round() / 1e9;
            match &r.unit {
                Some(unit) => Value::String(format!("{x}{unit}")),
                None if x.fract() == 0.0 && x.abs() < 9e15 => Value::Integer(x as i64),
                None => Value::Float(x),
            }
        })
        .collect())
}

fn infos(axes: &[ResolvedAxis]) -> Vec<Axis> {
    axes.iter()
        .map(|a| Axis {
            name: a.name.clone(),
            key: a.key.clone(),
            values: a.values.iter().map(|(v, _)| display(v)).collect(),
        })
        .collect()
}

/// Names unique; keys not sweep-level; a key-less axis used somewhere as `{name}`.
fn check_axes(text: &str, axes: &[ResolvedAxis], doc: &Table) -> Result<(), SpecError> {
    for (i, axis) in axes.iter().enumerate() {
        let at = Some(position(text, axis.span.start));
        if axes[..i].iter().any(|a| a.name == axis.name) {
            return Err(SpecError {
                at,
                message: format!("two axes are named '{}'", axis.name),
            });
        }
        match &axis.key {
            Some(key) => {
                let first = key.split('.').next().unwrap_or_default();
                if key.is_empty() || SWEEP_KEYS.contains(&first) {
                    return Err(SpecError {
                        at: axis.key_span.as_ref().map(|s| position(text, s.start)),
                        message: format!(
                            "axis key '{key}' cannot vary (an axis sets a run's values: duration, warmup, path.*, access, sysctl.*, flow.*, server, host.*)"
                        ),
                    });
                }
            }
            None => {
                let placeholder = format!("{{{}}}", axis.name);
                if !mentions(&Value::Table(doc.clone()), &placeholder) {
                    return Err(SpecError {
                        at,
                        message: format!(
                            "axis '{}' has no key and {placeholder} appears in no value",
                            axis.name
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

fn mentions(value: &Value, needle: &str) -> bool {
    match value {
        Value::String(s) => s.contains(needle),
        Value::Array(items) => items.iter().any(|v| mentions(v, needle)),
        Value::Table(t) => t
            .iter()
            .any(|(k, v)| k != "axis" && (k.contains(needle) || mentions(v, needle))),
        _ => false,
    }
}

/// Value indices, one per axis, for every point in planning order.
fn combinations(axes: &[ResolvedAxis], combine: Combine) -> Vec<Vec<usize>> {
    match combine {
        Combine::Zip => {
            let n = axes.first().map_or(1, |a| a.values.len());
            (0..n).map(|j| vec![j; axes.len()]).collect()
        }
        Combine::Cross => axes.iter().fold(vec![vec![]], |acc, axis| {
            acc.into_iter()
                .flat_map(|prefix| {
                    (0..axis.values.len()).map(move |j| {
                        let mut c = prefix.clone();
                        c.push(j);
                        c
                    })
                })
                .collect()
        }),
    }
}

/// The file with each axis at its chosen value, typed.
fn point_file(doc: &Table, axes: &[ResolvedAxis], choice: &[usize]) -> Result<File, String> {
    let mut table = doc.clone();
    table.remove("axis");
    let chosen: Vec<(&ResolvedAxis, &Value)> = axes
        .iter()
        .zip(choice)
        .map(|(a, &j)| (a, &a.values[j].0))
        .collect();
    for (axis, value) in &chosen {
        fill_in(&mut table, &format!("{{{}}}", axis.name), &display(value));
    }
    for (axis, value) in &chosen {
        if let Some(key) = &axis.key {
            set_key(&mut table, key, (*value).clone())?;
        }
    }
    Value::Table(table)
        .try_into::<File>()
        .map_err(|e| e.message().to_owned())
}

/// Replaces `placeholder` in every text value (and table key) with `value`.
fn fill_in(table: &mut Table, placeholder: &str, value: &str) {
    fn walk(v: &mut Value, placeholder: &str, value: &str) {
        match v {
            Value::String(s) if s.contains(placeholder) => *s = s.replace(placeholder, value),
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, placeholder, value)),
            Value::Table(t) => fill_in(t, placeholder, value),
            _ => {}
        }
    }
    let keys: Vec<String> = table
        .keys()
        .filter(|k| k.contains(placeholder))
        .cloned()
        .collect();
    for key in keys {
        let v = table.remove(&key).expect("listed above");
        table.insert(key.replace(placeholder, value), v);
    }
    for (_, v) in table.iter_mut() {
        walk(v, placeholder, value);
    }
}

/// Sets a dotted key: `path.rtt`, `path.up.loss`, `flow.cc` (every flow), `flow.2.cc` or
/// `flow.bulk.cc` (one flow, by 1-based number or name), `sysctl.net.ipv4.tcp_sack`.
fn set_key(table: &mut Table, key: &str, value: Value) -> Result<(), String> {
    let (head, rest) = key.split_once('.').unwrap_or((key, ""));
    match head {
        // Sysctl names hold dots themselves.
        "sysctl" if !rest.is_empty() => {
            let sysctl = table
                .entry("sysctl")
                .or_insert_with(|| Value::Table(Table::new()));
            let Value::Table(sysctl) = sysctl else {
                return Err("sysctl is not a table".into());
            };
            sysctl.insert(rest.to_owned(), value);
            Ok(())
        }
        "path" if !rest.is_empty() => {
            let path = table
                .entry("path")
                .or_insert_with(|| Value::Table(Table::new()));
            if let Value::String(text) = path {
                // A path written as one line is set key by key in its table form.
                let spec: PathSpec = text.parse().map_err(|e| format!("path: {e}"))?;
                *path = Value::try_from(&spec).map_err(|e| format!("path: {e}"))?;
            }
            set_in(path, rest, value, key)
        }
        "flow" if !rest.is_empty() => {
            let flows = table
                .entry("flow")
                .or_insert_with(|| Value::Array(vec![Value::Table(Table::new())]));
            set_in(flows, rest, value, key)
        }
        _ => set_in_table(table, key, value, key),
    }
}

fn set_in_table(table: &mut Table, rest: &str, value: Value, key: &str) -> Result<(), String> {
    match rest.split_once('.') {
        None => {
            table.insert(rest.to_owned(), value);
            Ok(())
        }
        Some((head, tail)) => {
            let child = table
                .entry(head)
                .or_insert_with(|| Value::Table(Table::new()));
            set_in(child, tail, value, key)
        }
    }
}

fn set_in(target: &mut Value, rest: &str, value: Value, key: &str) -> Result<(), String> {
    let items = match target {
        Value::Table(t) => return set_in_table(t, rest, value, key),
        Value::Array(items) => items,
        _ => {
            return Err(format!(
                "key '{key}': '{rest}' is inside a value that is not a table"
            ))
        }
    };
    let (head, tail) = rest
        .split_once('.')
        .map_or((rest, None), |(h, t)| (h, Some(t)));
    let len = items.len();
    let item = if let Ok(n) = head.parse::<usize>() {
        n.checked_sub(1)
            .and_then(|i| items.get_mut(i))
            .ok_or_else(|| format!("key '{key}': there is no item {n} (there are {len})"))?
    } else if let Some(i) = items
        .iter()
        .position(|v| v.get("name").and_then(Value::as_str) == Some(head))
    {
        &mut items[i]
    } else {
        // Neither a number nor a name: the field of every item.
        return items
            .iter_mut()
            .try_for_each(|item| set_in(item, rest, value.clone(), key));
    };
    match tail {
        Some(tail) => set_in(item, tail, value, key),
        None => {
            *item = value;
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------
// Helpers

/// An axis value as tables and labels show it: text bare, numbers as written.
fn display(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An axis value quoted for an error message.
fn show(value: &Value) -> String {
    value.to_string()
}

fn toml_error(text: &str, e: &toml::de::Error) -> SpecError {
    SpecError {
        at: e.span().map(|s| position(text, s.start)),
        message: e.message().trim().replace('\n', "; "),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
