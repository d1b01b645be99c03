//! What a test asked for and what it measured: the records behind `tcplab run --json`
//! (schema [`SCHEMA`]) and the rows of the SQLite store.
//!
//! Units: bytes, bit/s, µs for times inside a test (relative to the test's start `t0` on
//! the client's monotonic clock), seconds as `f64` only for durations in summaries.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub mod capture;
pub mod events;
pub mod link;
pub mod tcp_state;
pub mod tcpinfo;
pub mod topology;
pub mod traffic;
pub mod units;

use capture::CapturePoint;
use events::{EventRecord, TraceRecord};
use link::LinkCounters;
use tcp_state::TcpState;
use tcpinfo::{BbrInfo, SkMemInfo, TcpInfo};
use traffic::Traffic;

/// Version tag of the JSON document. Additive changes keep it; a renamed or removed
/// field bumps it.
pub const SCHEMA: &str = "tcplab.run/1";

/// Which way data flows in a test. `Up` is client → server (iperf3's default),
/// `Down` is server → client (iperf3's `-R`), `Bidir` runs both at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Up,
    Down,
    Bidir,
}

/// Direction of one flow: up = client → server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Up,
    Down,
}

/// One end of a test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Host {
    Client,
    Server,
}

impl Direction {
    /// "up" or "down", as the JSON and the text name it.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }

    /// 0 up, 1 down: the place of each in what is kept per direction.
    pub fn index(self) -> usize {
        match self {
            Direction::Up => 0,
            Direction::Down => 1,
        }
    }

    pub fn sender(self) -> Host {
        match self {
            Direction::Up => Host::Client,
            Direction::Down => Host::Server,
        }
    }
    pub fn receiver(self) -> Host {
        match self {
            Direction::Up => Host::Server,
            Direction::Down => Host::Client,
        }
    }
}

/// When a test stops sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestEnd {
    /// Send for this long (µs).
    Duration { us: u64 },
    /// Send this many bytes per flow.
    Bytes { bytes: u64 },
}

impl TestEnd {
    /// A timed test's deadline for a start at `t0_us` (µs on any clock); `None` for a
    /// byte count.
    pub fn deadline_us(self, t0_us: i64) -> Option<i64> {
        match self {
            TestEnd::Duration { us } => Some(t0_us.saturating_add(us as i64)),
            TestEnd::Bytes { .. } => None,
        }
    }
}

/// How the sender hands data to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendMethod {
    /// `write(2)` from a user buffer (one copy per byte).
    Write,
    /// `sendfile(2)` from an in-memory file (no user-space copy).
    Sendfile,
}

/// The TCP tunings of every data connection of a test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tuning {
    /// SO_SNDBUF requested on the sending socket, bytes; `None` leaves autotuning on.
    pub sndbuf: Option<u64>,
    /// SO_RCVBUF requested on the receiving socket, bytes; `None` leaves autotuning on.
    pub rcvbuf: Option<u64>,
    /// Bytes per write (the message size).
    pub write_size: u32,
    /// Bytes per read.
    pub read_size: u32,
    /// TCP_NODELAY (Nagle off) on both ends.
    pub nodelay: bool,
    /// TCP_MAXSEG requested on both ends, bytes.
    pub mss: Option<u32>,
    /// Congestion control by name (TCP_CONGESTION); `None` keeps the kernel default.
    pub cc: Option<String>,
    /// SO_MAX_PACING_RATE on the sender, bit/s.
    pub pacing_rate: Option<u64>,
    pub send_method: SendMethod,
    /// Application pacing: the sender writes no faster than this, bit/s (each write
    /// whole, when its bytes fall due).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_rate: Option<u64>,
    /// Ask for ECN: the client host, which opens the connections, has
    /// net.ipv4.tcp_ecn = 1 (Linux has no per-socket switch; a lab sets it in the
    /// flow's client namespace).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ecn: bool,
}

/// `tcplab run`'s defaults: autotuned buffers, 128 KiB writes and reads, Nagle on,
/// the kernel's MSS and congestion control, no pacing cap, write().
impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            sndbuf: None,
            rcvbuf: None,
            write_size: 128 << 10,
            read_size: 128 << 10,
            nodelay: false,
            mss: None,
            cc: None,
            pacing_rate: None,
            send_method: SendMethod::Write,
            app_rate: None,
            ecn: false,
        }
    }
}

/// `tcplab run`'s defaults: one stream up for 10 s, sampled every 10 ms, reported
/// every second.
impl Default for TestParams {
    fn default() -> Self {
        TestParams {
            streams: 1,
            end: TestEnd::Duration { us: 10_000_000 },
            mode: Mode::Up,
            tuning: Tuning::default(),
            sample_interval_us: 10_000,
            report_interval_us: 1_000_000,
            udp: None,
            probe: None,
            transactions: None,
        }
    }
}

/// Everything a client asks of a test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestParams {
    /// Parallel data connections per direction.
    pub streams: u16,
    pub end: TestEnd,
    pub mode: Mode,
    pub tuning: Tuning,
    /// tcp_info sampling period, µs; 0 turns sampling off.
    pub sample_interval_us: u64,
    /// Period of the per-interval records and live lines, µs.
    pub report_interval_us: u64,
    /// Set for UDP flows: what each one sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpParams>,
    /// Round-trip probes beside the test (`--probe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeParams>,
    /// Set for request/response flows (`--rr`): what each transaction sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions: Option<TransactionParams>,
}

/// Request/response transactions on each data connection, as netperf's TCP_RR: the
/// client writes a request of `request_size` bytes in `request_writes` writes, the
/// server reads all of it and answers with one write of `response_size` bytes, and the
/// client reads the whole response before the next request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionParams {
    pub request_size: u32,
    pub response_size: u32,
    /// Writes each request is split into (2: the pattern that meets Nagle's algorithm
    /// and the peer's delayed ACK).
    pub request_writes: u32,
    /// A new connection for each transaction (netperf's TCP_CRR): its time includes the
    /// handshake; the server closes it after the response.
    #[serde(default)]
    pub new_connection: bool,
}

impl TransactionParams {
    /// "requests of 100 B in 2 writes, responses of 1 KiB, a new connection each": the
    /// words every output uses for a request/response flow.
    pub fn describe(&self) -> String {
        format!(
            "requests of {}{}, responses of {}{}",
            units::format_size(u64::from(self.request_size)),
            match self.request_writes {
                1 => String::new(),
                n => format!(" in {n} writes"),
            },
            units::format_size(u64::from(self.response_size)),
            if self.new_connection {
                ", a new connection each"
            } else {
                ""
            }
        )
    }
}

/// One transaction as its client timed it: from its request's first write to its
/// response's last byte read, µs; `start_us` relative to t0 on the client's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub start_us: i64,
    pub latency_us: i64,
}

/// What a flow's (or a run's) transactions did (`tcplab_model::transaction::stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TransactionStats {
    /// Transactions completed within the run's window.
    pub count: u64,
    /// `count` over the window's length.
    pub per_second: f64,
    /// Each transaction's time, request to whole response, µs.
    pub latency_us: Quantiles,
}

/// Round-trip probes: one small UDP request every `interval_us`, which the server
/// echoes with its own receive and send times; `idle_us` of them before the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeParams {
    pub interval_us: u64,
    pub idle_us: u64,
}

/// One round-trip probe, times µs relative to t0 on the client's clock (negative in the
/// idle phase before the load).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    pub seq: u64,
    /// When the schedule wanted it sent.
    pub scheduled_us: i64,
    pub sent_us: i64,
    /// `None` when no answer came back.
    pub rtt_us: Option<i64>,
    /// Client to server and back, offset-corrected across hosts.
    pub up_owd_us: Option<i64>,
    pub down_owd_us: Option<i64>,
}

/// What the round-trip probes measured (`tcplab_model::probe::latency`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub interval_us: u64,
    /// Probes sent, idle and loaded.
    pub sent: u64,
    /// Round trips before the load started; `None` without an answered idle probe.
    pub idle_rtt_us: Option<Quantiles>,
    /// Round trips while the load ran (from t0 to the test's deadline or last byte).
    pub loaded_rtt_us: Option<Quantiles>,
    /// One-way delays under load: exact when both ends share a clock (`owd_exact`),
    /// else within the clock offset's uncertainty.
    pub up_owd_us: Option<Quantiles>,
    pub down_owd_us: Option<Quantiles>,
    pub owd_exact: bool,
    /// Probes the server never received, and answers that never came back.
    pub lost_up: u64,
    pub lost_down: u64,
    /// Round trips per minute under load: 60 s over the mean of the loaded round trips
    /// at or below their 90th percentile.
    pub rpm: Option<f64>,
    /// How late each probe left against its schedule (the sender's timer error).
    pub send_error_us: Quantiles,
}

/// A UDP flow's sending pattern: `burst` datagrams of `datagram_size` bytes of payload
/// at a time, bursts spaced so the payload averages `rate_bps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpParams {
    /// Payload bits per second (as iperf3's `-b`); 0 = as fast as the sender can.
    pub rate_bps: u64,
    /// UDP payload bytes per datagram.
    pub datagram_size: u32,
    /// Datagrams sent back to back each time (1 = evenly spaced).
    pub burst: u32,
    /// The header every datagram starts with: tcplab's, or iperf3's to talk to iperf3.
    #[serde(default, skip_serializing_if = "UdpHeaderFormat::is_tcplab")]
    pub header: UdpHeaderFormat,
}

/// Which header starts each UDP datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UdpHeaderFormat {
    /// Magic, flow id, 64-bit sequence number, monotonic send time (`tcplab_model::udp::Header`).
    #[default]
    Tcplab,
    /// iperf3's: wall-clock seconds and µs at sending, then the datagram's number from 1.
    Iperf3,
}

impl UdpHeaderFormat {
    fn is_tcplab(&self) -> bool {
        *self == UdpHeaderFormat::Tcplab
    }
}

/// The wall-clock step under which one-way delays still count as exact, µs.
pub const CLOCK_STEP_TOLERANCE_US: f64 = 50.0;

/// What a UDP flow did, from both ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpStats {
    /// Datagrams the sender handed to the kernel.
    pub sent: u64,
    /// Distinct datagrams the receiver read.
    pub received: u64,
    /// sent − received: lost on the path (or still in flight when the receiver stopped).
    pub lost: u64,
    pub duplicates: u64,
    /// Datagrams that arrived after one with a higher sequence number.
    pub out_of_order: u64,
    /// RFC 3550 interarrival jitter at the end, µs.
    pub jitter_us: f64,
    /// One-way delay of the received datagrams, µs.
    pub owd_us: Quantiles,
    /// Whether `owd_us` rests on a shared clock (both ends on one machine, the wall
    /// clock steady: exact) or on the estimated clock offset (± its uncertainty).
    pub owd_exact: bool,
    /// How far the receiver's wall clock, on which the kernel stamps arrivals, moved
    /// against its monotonic clock during the flow, µs: a step (NTP, a VM resumed) moves
    /// one-way delays by as much. Over [`CLOCK_STEP_TOLERANCE_US`] `owd_exact` is false.
    #[serde(default)]
    pub clock_step_us: f64,
    /// Datagrams the sender's kernel refused (ENOBUFS: a full local queue): lost at
    /// the source, not on the path, and not in `sent`.
    pub send_errors: u64,
    /// Datagrams the receiving socket dropped (full receive buffer; SO_RXQ_OVFL's
    /// count): lost at the destination, and part of `lost`.
    pub socket_drops: u64,
    /// Times the sender fell more than one burst behind its schedule and skipped ahead
    /// rather than catch up in a burst.
    pub late: u64,
    /// Datagrams the schedule called for by the end that the sender never sent: skipped
    /// while late, or still owed when the time was up (a sender starved of CPU). With
    /// `sent`, what the rate and duration asked for.
    #[serde(default)]
    pub unsent: u64,
}

/// Quantiles of a distribution, µs; all 0 for no values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub min: f64,
    pub p50: f64,
    #[serde(default)]
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Quantiles {
    /// The worse of two flows' figures at each quantile (the lower minimum, the higher
    /// rest): what a summary of several flows can say without their values.
    pub fn worst(self, other: Quantiles) -> Quantiles {
        Quantiles {
            min: self.min.min(other.min),
            p50: self.p50.max(other.p50),
            p90: self.p90.max(other.p90),
            p99: self.p99.max(other.p99),
            max: self.max.max(other.max),
        }
    }
}

/// Outcome of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Ran to its end; all counts are complete.
    Done,
    /// Started but cut short (peer vanished, interrupted): the numbers cover what ran.
    Incomplete,
    /// Did not produce a measurement.
    Failed,
}

/// What bounded a sender during a span of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The receiver's advertised window.
    Rwnd,
    /// The sender's own socket buffer.
    Sndbuf,
    /// The congestion window (the network).
    Cwnd,
    /// A cap on the sender's rate: SO_MAX_PACING_RATE (`--fq-rate`, a server's
    /// `--max-rate`) or the application's own pacing (`--app-rate`).
    Pacing,
    /// The application did not supply data.
    App,
}

impl Limit {
    /// Every limit, in the order [`LimitShares::dominant`] breaks ties.
    pub const ALL: [Limit; 5] = [
        Limit::Rwnd,
        Limit::Sndbuf,
        Limit::Cwnd,
        Limit::Pacing,
        Limit::App,
    ];

    /// Its place in [`Limit::ALL`], for per-limit arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name in JSON, the store and the text output.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Rwnd => "rwnd",
            Limit::Sndbuf => "sndbuf",
            Limit::Cwnd => "cwnd",
            Limit::Pacing => "pacing",
            Limit::App => "app",
        }
    }
}

impl LimitShares {
    /// All of the time to `app`: what a span with nothing to tell limits apart gets.
    pub fn all_app() -> LimitShares {
        LimitShares {
            app: 1.0,
            ..LimitShares::default()
        }
    }

    /// The share of `limit`.
    pub fn get(&self, limit: Limit) -> f64 {
        match limit {
            Limit::Rwnd => self.rwnd,
            Limit::Sndbuf => self.sndbuf,
            Limit::Cwnd => self.cwnd,
            Limit::Pacing => self.pacing,
            Limit::App => self.app,
        }
    }

    /// The limit with the largest share; ties go to the first in [`Limit::ALL`].
    pub fn dominant(&self) -> Limit {
        let mut best = Limit::App;
        let mut best_share = f64::NEG_INFINITY;
        for limit in Limit::ALL {
            // `>` keeps the earlier limit on ties and skips NaN.
            if self.get(limit) > best_share {
                best = limit;
                best_share = self.get(limit);
            }
        }
        best
    }

    /// Mean of shares weighted by `f64` (typically the span's length). Weights that are
    /// not positive and finite are left out; with no weight left the result is all `app`.
    pub fn weighted_mean(items: &[(LimitShares, f64)]) -> LimitShares {
        let mut sum = [0.0; Limit::ALL.len()];
        let mut total = 0.0;
        for &(s, w) in items {
            if !(w.is_finite() && w > 0.0) {
                continue;
            }
            for (k, limit) in Limit::ALL.into_iter().enumerate() {
                sum[k] += s.get(limit) * w;
            }
            total += w;
        }
        if total == 0.0 {
            return LimitShares::all_app();
        }
        let share = |l: Limit| sum[l.index()] / total;
        LimitShares {
            rwnd: share(Limit::Rwnd),
            sndbuf: share(Limit::Sndbuf),
            cwnd: share(Limit::Cwnd),
            pacing: share(Limit::Pacing),
            app: share(Limit::App),
        }
    }
}

/// Fractions of a time span spent under each limit; they sum to 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitShares {
    pub rwnd: f64,
    pub sndbuf: f64,
    pub cwnd: f64,
    #[serde(default)]
    pub pacing: f64,
    pub app: f64,
}

/// Requested and effective size of one socket buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferSize {
    /// What was asked with setsockopt, bytes; `None` = not set (kernel autotuning).
    pub requested: Option<u64>,
    /// What getsockopt reported after setup (Linux doubles the request), bytes.
    pub effective: u64,
    /// Set when the request exceeded `net.core.[rw]mem_max`: the cap, bytes.
    pub capped_at: Option<u64>,
    /// getsockopt at the end of the test (autotuning may have grown it), bytes.
    pub at_end: u64,
}

/// Min / mean / max of a flow's smoothed RTT samples, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RttStats {
    pub min_us: u32,
    pub mean_us: f64,
    pub max_us: u32,
}

/// CPU time of the threads of one end of a test, as a share of one core over the
/// test's wall time (iperf3's `cpu_utilization_percent`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuUse {
    pub user_pct: f64,
    pub system_pct: f64,
    pub total_pct: f64,
}

/// Facts about one host that explain its numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostMeta {
    pub hostname: String,
    pub kernel: String,
    /// The sysctls that matter (`tcp_rmem`, `tcp_wmem`, `core.[rw]mem_max`, …), by name.
    pub sysctls: BTreeMap<String, String>,
    /// The kernel's boot id: two ends with the same one share CLOCK_MONOTONIC, so
    /// one-way delays between them need no clock estimate.
    #[serde(default)]
    pub boot_id: String,
    /// A server that paced the TCP flows it sent in this test to this rate together,
    /// bit/s (its `--max-rate`; SO_MAX_PACING_RATE, shared among the flows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_cap_bps: Option<u64>,
}

/// Estimated offset of the server's clock against the client's: server = client + offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    pub offset_us: i64,
    /// Half the round trip of the best exchange: the offset is exact within ± this.
    pub uncertainty_us: i64,
}

impl ClockOffset {
    /// Whether two ends read one CLOCK_MONOTONIC: the same boot and an estimate
    /// consistent with no offset. A shared boot alone is not enough: ends in different
    /// time namespaces (containers, `unshare --time`) share a boot, not the clock. On
    /// one clock the estimate is within its uncertainty of 0 by construction.
    pub fn same_clock(&self, boot_a: &str, boot_b: &str) -> bool {
        !boot_a.is_empty() && boot_a == boot_b && self.offset_us.abs() <= self.uncertainty_us + 1
    }

    /// Whether delays of about `delay_us` measured through this offset mean something:
    /// its uncertainty is at most a tenth of them.
    pub fn resolves(&self, delay_us: f64) -> bool {
        self.uncertainty_us as f64 <= 0.1 * delay_us
    }
}

/// One data connection's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowRecord {
    /// 0-based index within the test.
    pub id: u32,
    /// The client host that ran it, in a lab with several clients ("client2").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The experiment file's `[[flow]]` it belongs to, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub direction: Direction,
    /// Client-side and server-side socket addresses.
    pub client_addr: String,
    pub server_addr: String,
    /// Congestion control read back with TCP_CONGESTION on the sender.
    pub cc: String,
    /// Sender's MSS (tcpi_snd_mss) at the end.
    pub mss: u32,
    /// The sending socket's buffer.
    pub sndbuf: BufferSize,
    /// The receiving socket's buffer.
    pub rcvbuf: BufferSize,
    /// Bytes handed to the kernel by the sender.
    pub sent_bytes: u64,
    /// Bytes read by the receiver.
    pub received_bytes: u64,
    /// The flow's rate as its sender saw it, bit/s: over its timed part when it has one
    /// (`timed.acked_bytes` over `timed.seconds`), else sent_bytes over sender_seconds.
    pub sent_bps: f64,
    /// The flow's rate as its receiver saw it, bit/s: over its timed part when it has one
    /// (`timed.received_bytes` over `timed.seconds`), else received_bytes over
    /// receiver_seconds.
    pub received_bps: f64,
    /// How long the sender was busy, s: from the test's start to its last byte
    /// acknowledged (after a timed test's deadline, the drain included).
    pub sender_seconds: f64,
    /// How long the receiver was busy, s: from the test's start to the end of the stream.
    pub receiver_seconds: f64,
    /// Segments retransmitted (tcpi_total_retrans).
    pub retransmits: u64,
    /// tcp_info samples taken on the sender.
    pub samples: u64,
    /// tcp_info samples taken on the receiver.
    pub receiver_samples: u64,
    /// What held the sender back, from its samples (see `tcplab_analysis::limits`); from the
    /// kernel's chrono counters where it was not sampled.
    pub limits: LimitShares,
    /// What the kernel's chrono counters alone say (tcpi_busy_time, rwnd_limited,
    /// sndbuf_limited over the flow): a cross-check of `limits` where they fire.
    #[serde(default)]
    pub kernel_limits: LimitShares,
    pub rtt: RttStats,
    /// A UDP flow's datagram statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpStats>,
    /// A timed TCP flow's part up to its deadline, and the drain after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed: Option<Timed>,
    /// A request/response flow's transactions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions: Option<TransactionStats>,
    /// A connection `tcplab watch` followed: its socket is the flow's client end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watched: Option<WatchedFlow>,
}

/// A socket of a TCP connection tcplab did not open, as `tcplab watch` followed it. The
/// flow goes `up` from the end that sent more (its client) to the other (its server);
/// the socket is the one end named by `end` (its samples that host's), and `peer` the
/// other where that was watched too.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchedFlow {
    /// The kernel's id of the socket (unique while the kernel runs).
    pub cookie: u64,
    /// The process holding the socket when it was first seen, if one could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// First and last sample, µs since the run's t0.
    pub start_us: i64,
    pub end_us: i64,
    /// It opened while watched (its counters start at 0), rather than being found open.
    pub opened: bool,
    /// It closed while watched (its last counters are its final ones).
    pub closed: bool,
    /// Its state in the last sample with tcp_info.
    pub last_state: TcpState,
    /// The socket's own counters in its last sample with tcp_info.
    pub counters: FinalCounters,
    /// Which end of the flow the socket is: `client`, the sender, or `server`.
    pub end: Host,
    /// The other end's socket, where it was watched too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<Box<WatchedFlow>>,
}

/// A watched socket's totals as the kernel counted them, from its last tcp_info. The
/// kernel counts sequence space: `bytes_acked` includes the connecting side's SYN, and
/// either count a FIN once it is acknowledged or received (one byte each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalCounters {
    /// tcpi_bytes_acked: bytes it sent that the peer acknowledged.
    pub bytes_acked: u64,
    /// tcpi_bytes_received: bytes it received (in order).
    pub bytes_received: u64,
    /// tcpi_bytes_sent: bytes it sent, retransmissions included.
    pub bytes_sent: u64,
    /// tcpi_total_retrans: segments retransmitted.
    pub retransmits: u64,
    /// tcpi_min_rtt, µs (0: no RTT measured).
    pub min_rtt_us: u32,
    /// Time its samples booked to a limit, µs, and the shares of it.
    pub limited_us: u64,
    pub limits: LimitShares,
}

/// What a run is: a test tcplab ran, or connections it watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    Test,
    Watch,
}

/// What `tcplab watch` was asked and how it saw connections open and close.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchRecord {
    /// The filter as given (`--port 443 --comm curl`), "" for every connection.
    pub filter: String,
    /// Opens and closes came from the `sock:inet_sock_set_state` tracepoint; without,
    /// polling alone.
    pub tracepoint: bool,
    /// Connections seen only without tcp_info (already in TIME_WAIT or an orphaned
    /// FIN_WAIT2 when first seen): counted, not recorded.
    pub missed: u64,
    /// Set where `tcplab shell --record` watched its programs behind a lab's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellCommands>,
}

/// The programs `tcplab shell --record` ran: their connections are the run's flows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShellCommands {
    /// The command run in the client host, word by word.
    pub client: Vec<String>,
    /// `--server-cmd`, run by `sh -c` in the server host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// How the client's command ended, where an experiment's command flow ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<CommandEnd>,
}

/// How a command flow's client program ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandEnd {
    /// Its exit code; `None` where a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Its time limit ended it (SIGTERM, then SIGKILL, to its process group).
    pub timed_out: bool,
    /// From its start to its end, µs.
    pub wall_us: u64,
    /// The end of what it wrote on stderr (at most [`STDERR_TAIL`] bytes).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
}

/// How much of a command's stderr a run keeps: its last bytes.
pub const STDERR_TAIL: usize = 1024;

/// What a TCP flow that ran for a duration delivered by its deadline (the part its rates
/// measure), and how its sender's backlog drained after it. The sender stops writing at
/// the deadline; what its socket still holds then is delivered in the drain, which
/// `tcplab_analysis::throughput::drain_limit_us` bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timed {
    /// The flow's duration: from its start to its deadline, s.
    pub seconds: f64,
    /// Bytes acknowledged to the sender by the deadline (tcpi_bytes_acked).
    pub acked_bytes: u64,
    /// Bytes the receiver had read by the deadline.
    pub received_bytes: u64,
    /// From the receiver's start to its count at the deadline, s, on its own clock: a
    /// receiver woken late counts the bytes of a longer time, and its rate is theirs over
    /// it. 0 in records stored before it was kept (then `seconds` stands for it).
    #[serde(default)]
    pub received_seconds: f64,
    /// From the deadline until the sender's last byte was acknowledged, or until the
    /// drain limit ended the connection, s.
    pub drain_seconds: f64,
    /// Bytes the sender had written but not seen acknowledged when the drain limit ended
    /// the connection; 0 when the drain finished. The receiver got sent_bytes −
    /// received_bytes fewer than were sent: at most these, at least these less the
    /// acknowledgements still on their way.
    pub unacked_bytes: u64,
}

impl Timed {
    /// The bytes acknowledged by the deadline over the sender's timed part, bit/s.
    pub fn acked_bps(&self) -> f64 {
        rate_bps(self.acked_bytes, self.seconds)
    }

    /// The bytes read by the deadline over the receiver's timed part, bit/s.
    pub fn received_bps(&self) -> f64 {
        let seconds = if self.received_seconds > 0.0 {
            self.received_seconds
        } else {
            self.seconds
        };
        rate_bps(self.received_bytes, seconds)
    }
}

fn rate_bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// One report interval of one flow, merged from both ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntervalRecord {
    pub flow: u32,
    /// 0-based interval number.
    pub index: u32,
    /// Interval bounds, µs since t0.
    pub start_us: u64,
    pub end_us: u64,
    /// Bytes newly acknowledged to the sender in the interval (tcpi_bytes_acked delta).
    pub acked_bytes: u64,
    /// Bytes read by the receiver in the interval.
    pub received_bytes: u64,
    pub retransmits: u64,
    /// Sender's cwnd (segments) and smoothed RTT at the interval's end.
    pub cwnd: u32,
    pub srtt_us: u32,
    pub limits: LimitShares,
    /// A UDP flow's datagrams in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpInterval>,
    /// After the flow's deadline: its sender delivering what its socket still held.
    /// Left out of every rate (`tcplab_analysis::throughput`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drain: bool,
}

/// One report interval of a UDP flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpInterval {
    pub sent: u64,
    pub received: u64,
    /// Sequence numbers skipped in the interval (a late arrival counts in a later one
    /// as out of order).
    pub lost: u64,
    pub out_of_order: u64,
    /// RFC 3550 jitter at the interval's end, µs.
    pub jitter_us: f64,
}

/// One tcp_info snapshot of one socket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    pub flow: u32,
    /// The end whose socket was sampled.
    pub host: Host,
    /// µs since t0 on the client's clock.
    pub t_us: i64,
    pub info: TcpInfo,
    pub bbr: Option<BbrInfo>,
    /// The socket's memory read with it (SO_MEMINFO): how full its buffers were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skmem: Option<SkMemInfo>,
}

/// Totals over all flows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// The run's throughput as the senders saw it, bit/s: the bytes acknowledged to them
    /// (sent, for UDP) within the run's window, over it (`tcplab_analysis::throughput`).
    pub sent_bps: f64,
    /// The run's throughput, bit/s: the bytes the receivers read within the run's window,
    /// over it (`tcplab_analysis::throughput`).
    pub received_bps: f64,
    /// The run's window, s: from its first flow's start to its last flow's end (the
    /// deadline of a timed flow, the last byte of one sending a byte count).
    #[serde(default)]
    pub window_seconds: f64,
    pub retransmits: u64,
    pub rtt: RttStats,
    /// Time-weighted over the flows.
    pub limits: LimitShares,
    pub dominant_limit: Option<Limit>,
    pub cpu_client: CpuUse,
    pub cpu_server: CpuUse,
    /// Over the UDP flows: counts summed, jitter and delay quantiles the worst flow's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpStats>,
    /// The round-trip probes' figures, when the test had probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencySummary>,
    /// Over the request/response flows' transactions together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions: Option<TransactionStats>,
}

/// The emulated path a run went through and what its links did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathRecord {
    /// The bottleneck's path spec, normalized.
    pub spec: String,
    /// Each client's access-link spec ("" for none), in client order.
    pub access: Vec<String>,
    pub up: DirectionStats,
    pub down: DirectionStats,
    /// Wall-clock time of the emulator's time 0 (µs since the Unix epoch): queue samples
    /// minus `started_unix_us − epoch_unix_us` are on the run's time base.
    #[serde(default)]
    pub epoch_unix_us: i64,
    /// When the test started on the emulator's clock (µs since `epoch_unix_us`): the
    /// path's schedule (`at`) counts from it. `None` where none started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_start_us: Option<u64>,
    /// How a bottleneck queue given in BDP was sized; `None` when neither direction's is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bdp: Option<BdpSizing>,
    /// The pcapng file of the packets with their fates (`--capture`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_file: Option<String>,
    /// Where that capture saw them (`--capture-at`).
    #[serde(default, skip_serializing_if = "CapturePoint::is_bottleneck")]
    pub capture_at: CapturePoint,
    /// A lab of any shape: its hosts, links and routes (`spec` and `access` are then
    /// empty, and `up` holds every link's counters, each way named apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<topology::TopologyRecord>,
}

impl PathRecord {
    /// Every link way's counters, both emulator threads': a topology's ways toward its
    /// first host are `up`'s, the others `down`'s.
    pub fn links(&self) -> impl Iterator<Item = &NamedCounters> {
        self.up.links.iter().chain(&self.down.links)
    }

    /// The direction that carried more data packets: the one whose delay and drops are
    /// the run's.
    pub fn data_direction(&self) -> &DirectionStats {
        let packets = |d: &DirectionStats| d.delay.map_or(0, |q| q.packets);
        if packets(&self.down) > packets(&self.up) {
            &self.down
        } else {
            &self.up
        }
    }
}

/// A bottleneck queue given as a multiple of the BDP, as the lab sized it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BdpSizing {
    /// The round trip the BDP is reckoned over, µs: the largest end-to-end base RTT of
    /// the clients (access link + bottleneck, both directions' delays).
    pub rtt_us: u64,
    /// Whose round trip it is, from 1 ("client2").
    pub client: u32,
    /// Each direction's bottleneck queue, bytes; `None` where it is not given in BDP.
    pub up_bytes: Option<u64>,
    pub down_bytes: Option<u64>,
}

/// One direction of the emulator: its links' counters and how punctual it was.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionStats {
    /// Packets handled one by one (some link has a per-packet effect) or, when the
    /// links only delay, as the kernel's GSO units.
    pub per_packet: bool,
    /// Whether the emulator thread got real-time priority (needs CAP_SYS_NICE).
    #[serde(default)]
    pub realtime: bool,
    /// Whether idle CPUs were held in their shallowest idle state while it ran (needs
    /// root): else an idle lab's packets also wait for a sleeping CPU to wake.
    #[serde(default)]
    pub cpus_awake: bool,
    pub links: Vec<NamedCounters>,
    /// How late packets left the emulator against their due time: written to a device,
    /// or taken by its other thread where a topology's route turns.
    pub lateness: Lateness,
    /// Packets the emulator could not parse, route, or write.
    pub malformed: u64,
    pub unroutable: u64,
    pub write_errors: u64,
    /// Packet buffers allocated: the high-water mark of packets inside.
    pub buffers: usize,
    /// Burstiness of each flow entering the bottleneck (a link with a rate), busiest
    /// flow first; tcplab's own flows among them, named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bursts: Vec<BurstStats>,
    /// The bottleneck queue's occupancy over time: the test's packets in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<QueueSample>,
    /// The capacity over time of a bottleneck whose capacity changes: what its trace, or
    /// its rate on the path's schedule, offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<CapacitySample>,
    /// One-way delay of the test's data packets (with a TCP or UDP payload) across the
    /// emulator, all together (`tcplab_analysis::delay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<DelayQuantiles>,
    /// The same per flow, busiest first; tcplab's own flows among them, named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flow_delays: Vec<FlowDelay>,
    /// The same over time, the test's flows: per 100 ms that saw data packets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delay_series: Vec<DelaySample>,
    /// What a capture recorded of this direction (`--capture`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<capture::CaptureCounts>,
    /// The interface queues of the hosts that send into this direction (up: each
    /// client's, down: the server's), before the emulator reads their packets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_queues: Vec<HostQueue>,
}

/// A host's interface queue over its lab's life (a run's lab lives for the run): its
/// device's transmit queue and root qdisc, and its TCP's retransmissions held back by
/// them. Counted by the kernel for the whole interface: the test's flows and tcplab's
/// control connection alike.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostQueue {
    /// "server", "client" or "clientK".
    pub host: String,
    /// The device's transmit queue, packets (each up to a GSO super-packet).
    pub txqueuelen: u32,
    /// Its root qdisc ("pfifo_fast"; "noqueue" for none).
    pub qdisc: String,
    /// Packets the qdisc passed on, dropped, requeued (the device pushed back) and
    /// enqueued over its limit.
    pub qdisc_packets: u64,
    pub qdisc_drops: u64,
    pub requeues: u64,
    pub overlimits: u64,
    /// Packets the device dropped: for a lab's TUN device, those that found its ring of
    /// `txqueuelen` packets full.
    pub device_drops: u64,
    /// Retransmissions the host's TCP held back because the original was still in a
    /// host queue (TcpExt TCPSpuriousRtxHostQueues), all its sockets.
    pub held_retransmits: u64,
}

impl HostQueue {
    /// Packets the queue dropped, at the qdisc or the device.
    pub fn drops(&self) -> u64 {
        self.qdisc_drops + self.device_drops
    }
}

impl DirectionStats {
    /// What a changing bottleneck offered from `from_us` to `to_us` (the emulator's clock),
    /// bytes: each capacity sample's whole interval that meets that span, so never less
    /// than the trace offered in it. The samples follow one another from the
    /// emulator's start. `None` without samples.
    pub fn offered_bytes(&self, from_us: u64, to_us: u64) -> Option<f64> {
        let mut interval_start = 0;
        let mut bytes = None;
        for s in &self.capacity {
            if s.t_us > from_us && interval_start < to_us {
                *bytes.get_or_insert(0.0) += s.bps * (s.t_us - interval_start) as f64 / 8e6;
            }
            interval_start = s.t_us;
        }
        bytes
    }
}

/// How one flow arrived at the bottleneck, in trains: runs of packets arriving back to
/// back (`tcplab_analysis::burst`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BurstStats {
    /// "tcp 10.77.1.1:40000 > 10.77.0.1:39001".
    pub flow: String,
    /// Whose flow: the test's, or tcplab's own (its control connection, its probes).
    #[serde(default, skip_serializing_if = "Traffic::is_test")]
    pub traffic: Traffic,
    pub packets: u64,
    /// Trains, and their length in packets: the mean over trains, the length within
    /// which 99 % of the packets arrived, the longest.
    pub bursts: u64,
    pub burst_mean: f64,
    pub burst_p99: f64,
    pub burst_max: u64,
    /// Arrivals close enough to continue a train whose time the emulator could not
    /// tell finely enough: each started a new one.
    #[serde(default)]
    pub unresolved: u64,
    /// Time between consecutive packets of the flow, µs.
    pub gap_us: Quantiles,
}

/// One-way delays across the emulator, µs: from the packet's read on the sender's side
/// to its write on the receiver's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DelayQuantiles {
    pub packets: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// The one-way delays of the data packets written in the 100 ms up to `t_us` (µs on
/// the emulator's clock, as a [`QueueSample`]'s): their mean and largest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DelaySample {
    pub t_us: u64,
    pub mean_us: f64,
    pub max_us: f64,
}

/// One flow's one-way delays.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowDelay {
    /// "tcp 10.77.1.1:40000 > 10.77.0.1:39001".
    pub flow: String,
    /// Whose flow: the test's, or tcplab's own (its control connection, its probes).
    #[serde(default, skip_serializing_if = "Traffic::is_test")]
    pub traffic: Traffic,
    #[serde(flatten)]
    pub delay: DelayQuantiles,
}

/// What a trace bottleneck offered over the interval that ends at `t_us` (µs on the
/// emulator's clock, as a [`QueueSample`]'s), bit/s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacitySample {
    pub t_us: u64,
    pub bps: f64,
}

/// The bottleneck queue at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueSample {
    /// µs since the lab's emulator started (`PathRecord::epoch_unix_us`).
    pub t_us: u64,
    pub bytes: u64,
}

/// One link's counters, named ("bottleneck", "access client2"): the test's packets,
/// and tcplab's own apart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NamedCounters {
    pub name: String,
    /// The test's packets (in a lab where tcplab runs no test, everyone's).
    #[serde(flatten)]
    pub counters: LinkCounters,
    /// tcplab's control connection: the handshake, live intervals and the samples sent
    /// after the test; absent when it did not cross the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<LinkCounters>,
    /// tcplab's round-trip probes and their echoes; absent when none crossed the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<LinkCounters>,
    /// In a topology: what each flow met on this link, busiest first (every traffic's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<HopFlow>,
    /// In a topology: this link's queue over time (the test's packets), every 10 ms.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<QueueSample>,
    /// In a topology, on a link with a fixed rate (a gap pacer's too): the trains each
    /// flow arrived in, busiest flow first, as a dumbbell's bottleneck has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bursts: Vec<BurstStats>,
}

/// One flow on one link of a topology.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HopFlow {
    /// "tcp 10.77.0.1:40000 > 10.77.0.2:5201".
    pub flow: String,
    /// Its packets that left the link, and those the link dropped.
    pub packets: u64,
    pub dropped: u64,
    /// The time they queued on this link (not its delay or serialization), µs.
    pub queue_delay_mean_us: f64,
    pub queue_delay_max_us: f64,
    /// The time they spent on this link, entering to leaving: queueing, serialization
    /// and the link's delay, µs (the flow's one-way delay there).
    #[serde(default)]
    pub delay_mean_us: f64,
    #[serde(default)]
    pub delay_max_us: f64,
}

impl NamedCounters {
    /// The counters of one kind of traffic, if it crossed the link.
    pub fn of(&self, traffic: Traffic) -> Option<&LinkCounters> {
        match traffic {
            Traffic::Test => Some(&self.counters),
            Traffic::Control => self.control.as_ref(),
            Traffic::Probe => self.probe.as_ref(),
        }
    }

    /// The kinds of traffic that crossed the link besides the test's, with their
    /// counters.
    pub fn own(&self) -> impl Iterator<Item = (Traffic, &LinkCounters)> {
        [Traffic::Control, Traffic::Probe]
            .into_iter()
            .filter_map(|t| self.of(t).map(|c| (t, c)))
    }
}

/// Lateness of deliveries (time written − time due), µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Lateness {
    pub packets: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// One complete run: the JSON document of `tcplab run --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema: String,
    pub tool_version: String,
    pub label: Option<String>,
    pub tags: Vec<String>,
    pub status: RunStatus,
    pub error: Option<String>,
    /// Wall-clock time of t0, µs since the Unix epoch.
    pub started_unix_us: i64,
    /// The server as the user named it.
    pub target: String,
    pub params: TestParams,
    pub client: HostMeta,
    pub server: HostMeta,
    pub clock: ClockOffset,
    pub summary: Summary,
    pub flows: Vec<FlowRecord>,
    pub intervals: Vec<IntervalRecord>,
    /// The emulated path, when the run went through a lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathRecord>,
    /// Raw samples; left out of `--json` unless asked for, always stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<SampleRecord>,
    /// Whether the kernel's events were taken (`--trace-events`); absent when not asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRecord>,
    /// The kernel's events of the test's sockets, in time order; like the samples, left
    /// out of `--json` unless asked for, always stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventRecord>,
    /// Every round-trip probe; like the samples, left out of `--json` unless asked for,
    /// always stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ProbeRecord>,
    /// Set on a run of kind `watch`: what was watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchRecord>,
}

impl RunRecord {
    pub fn kind(&self) -> RunKind {
        match self.watch {
            Some(_) => RunKind::Watch,
            None => RunKind::Test,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_and_kind_of_traffic_is_at_its_index() {
        for (i, limit) in Limit::ALL.into_iter().enumerate() {
            assert_eq!(limit.index(), i);
        }
        for (i, traffic) in Traffic::ALL.into_iter().enumerate() {
            assert_eq!(traffic.index(), i);
        }
    }

    #[test]
    fn weighted_shares_skip_bad_weights_and_fall_back_to_app() {
        let cwnd = LimitShares {
            cwnd: 1.0,
            ..LimitShares::default()
        };
        let rwnd = LimitShares {
            rwnd: 1.0,
            ..LimitShares::default()
        };
        let mean = LimitShares::weighted_mean(&[(cwnd, 3.0), (rwnd, 1.0), (rwnd, f64::NAN)]);
        assert_eq!((mean.cwnd, mean.rwnd), (0.75, 0.25));
        assert_eq!(mean.dominant(), Limit::Cwnd);
        assert_eq!(
            LimitShares::weighted_mean(&[(cwnd, 0.0)]),
            LimitShares::all_app()
        );
    }

    #[test]
    fn a_clock_offset_resolves_delays_ten_times_its_uncertainty() {
        let offset = ClockOffset {
            offset_us: 123_456,
            uncertainty_us: 500,
        };
        assert!(offset.resolves(5_000.0));
        assert!(offset.resolves(30_000.0));
        assert!(!offset.resolves(4_999.0));
    }

    #[test]
    fn one_clock_needs_one_boot_and_an_offset_within_its_uncertainty() {
        let near = |offset_us| ClockOffset {
            offset_us,
            uncertainty_us: 40,
        };
        assert!(near(-40).same_clock("b1", "b1"));
        assert!(!near(0).same_clock("b1", "b2"));
        assert!(!near(0).same_clock("", ""));
        // One boot, another time namespace: an hour apart.
        assert!(!near(3_600_000_000).same_clock("b1", "b1"));
        assert!(!near(45).same_clock("b1", "b1"));
    }
}
