//! The path spec: what the two links between client and server do, in one line.
//!
//! The grammar is written once, in the parser's own key table (`Key::usage`):
//! [`grammar`] prints it, as `tcplab path-spec` does and docs/paths.md shows (a test
//! holds the two equal). In short: `[up.|down.]key value`, clauses in any order,
//! e.g. `rtt 20ms rate 100mbit queue 1bdp up.loss 1%`.
//!
//! A direction-prefixed key overrides the same key without prefix (`rate 100mbit
//! down.rate 10mbit`); the same key twice in one scope is an error, whatever the order.
//! After `jitter`, `reorder` followed by a percentage is the `reorder` key, not the flag.
//! Without `rate` or `trace` a direction has no bottleneck: `queue` and `aqm` are then
//! ignored. Parsing never reads the trace file; [`PathSpec`] only records its path.
//!
//! The same spec in an experiment's TOML: top-level keys apply to both directions, tables
//! `up` and `down` to one, and each value is the text after the key in the grammar above
//! (numbers may be TOML numbers):
//!
//! ```toml
//! [path]
//! rtt = "20ms"
//! rate = "100mbit"
//! queue = "1bdp"
//! aqm = "codel target 5ms"
//! [path.up]
//! loss = "gemodel 1% 10%"
//! ```
//!
//! [`PathSpec`]'s `Display` prints the normalized spec: each unit back in one spelling,
//! defaults left out, so parsing it gives the same spec again.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use tcplab_record::units::{parse_duration, parse_percent, parse_rate, parse_size};

mod schedule;
pub use schedule::{Schedule, Step, Timeline};

pub const DEFAULT_MTU: u32 = 1500;
pub const DEFAULT_QUEUE_PACKETS: u64 = 1000;
pub const CODEL_TARGET_US: u64 = 5_000;
pub const CODEL_INTERVAL_US: u64 = 100_000;
/// tc's fq_codel defaults: a quantum of one Ethernet frame, 1024 queues, ECN on.
pub const FQ_CODEL_QUANTUM: u32 = 1514;
pub const FQ_CODEL_FLOWS: u32 = 1024;
/// tc's (and RFC 8033's) PIE defaults; alpha and beta in tc's units of 1/16 Hz.
pub const PIE_TARGET_US: u64 = 15_000;
pub const PIE_TUPDATE_US: u64 = 15_000;
pub const PIE_ALPHA: u32 = 2;
pub const PIE_BETA: u32 = 20;
/// The IPv4 minimum and the IP maximum.
pub const MTU_RANGE: std::ops::RangeInclusive<u32> = 68..=65_535;

/// The hosts' interface queues a path may set (`txqueuelen`), packets: a TUN device with
/// none drops every packet, and a million is far beyond any real host's.
pub const TXQUEUELEN_RANGE: std::ops::RangeInclusive<u32> = 1..=1_000_000;

/// Which way packets travel: up = client → server (the record's own).
pub use tcplab_record::Direction;

/// A probability, exact to one part per billion so that printing and parsing it again
/// gives the same value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prob(u32);

impl Prob {
    pub const SCALE: u32 = 1_000_000_000;
    pub const ZERO: Prob = Prob(0);
    pub const ONE: Prob = Prob(Prob::SCALE);

    /// `None` above 100%.
    pub fn from_ppb(ppb: u32) -> Option<Prob> {
        (ppb <= Prob::SCALE).then_some(Prob(ppb))
    }

    /// Parts per billion.
    pub fn ppb(self) -> u32 {
        self.0
    }

    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / f64::from(Prob::SCALE)
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// 1 − self.
    pub fn complement(self) -> Prob {
        Prob(Prob::SCALE - self.0)
    }
}

/// Exact: `1%`, `0.25%`, `0.0000001%`.
impl fmt::Display for Prob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One percent is 10^7 ppb.
        let (int, frac) = (self.0 / 10_000_000, self.0 % 10_000_000);
        if frac == 0 {
            write!(f, "{int}%")
        } else {
            let digits = format!("{frac:07}");
            write!(f, "{int}.{}%", digits.trim_end_matches('0'))
        }
    }
}

/// Parses a percentage with [`parse_percent`] and rounds it to whole ppb, rejecting what
/// is finer (the f64 it returns is within a few ulps of the decimal typed).
pub(crate) fn parse_prob(text: &str) -> Result<Prob, String> {
    let fraction = parse_percent(text).map_err(|e| e.to_string())?;
    let ppb = fraction * f64::from(Prob::SCALE);
    let rounded = ppb.round();
    if (ppb - rounded).abs() > 1e-3 {
        return Err(format!(
            "invalid percentage '{text}': finer than 0.0000001%"
        ));
    }
    Ok(Prob(rounded as u32))
}

/// How the jittered delay is drawn; netem's distributions, see `link` for the formulas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum JitterDist {
    /// delay ± jitter, uniformly.
    Uniform,
    /// σ = jitter.
    #[default]
    Normal,
    /// netem's `pareto` table (shape 3, mean 0, scaled by jitter).
    Pareto,
    /// netem's `paretonormal`: ¼ normal + ¾ pareto of the same quantile.
    ParetoNormal,
}

impl JitterDist {
    const ALL: [JitterDist; 4] = [
        JitterDist::Uniform,
        JitterDist::Normal,
        JitterDist::Pareto,
        JitterDist::ParetoNormal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            JitterDist::Uniform => "uniform",
            JitterDist::Normal => "normal",
            JitterDist::Pareto => "pareto",
            JitterDist::ParetoNormal => "paretonormal",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Jitter {
    /// > 0.
    pub jitter_us: u64,
    pub dist: JitterDist,
    /// Packets may overtake each other; off, each is held until the one before it is out.
    pub reorder: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Loss {
    #[default]
    None,
    /// Each packet independently; > 0.
    Random(Prob),
    /// netem's `gemodel`.
    GilbertElliott {
        /// good → bad, per packet.
        p: Prob,
        /// bad → good, per packet.
        r: Prob,
        /// Loss probability in the bad state (netem's 1-h).
        loss_bad: Prob,
        /// Loss probability in the good state (netem's 1-k).
        loss_good: Prob,
    },
}

/// netem's `reorder`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reorder {
    /// > 0.
    pub prob: Prob,
    pub correlation: Prob,
    /// ≥ 1: after an early packet, the next `gap - 1` are always delayed.
    pub gap: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Bottleneck {
    /// No rate limit: no queue, no serialization.
    #[default]
    Unlimited,
    Rate {
        /// bit/s, > 0.
        bps: u64,
        /// Bytes added to each packet's size on the wire.
        overhead: u32,
    },
    /// A mahimahi trace; the caller loads the file.
    Trace { path: String },
}

/// The bottleneck buffer as written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QueueLimit {
    Packets(u64),
    Bytes(u64),
    /// A multiple (finite, ≥ 0) of rate × path RTT; needs a fixed rate.
    Bdp(f64),
}

impl Default for QueueLimit {
    fn default() -> Self {
        QueueLimit::Packets(DEFAULT_QUEUE_PACKETS)
    }
}

/// The bottleneck buffer in packets or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    Packets(u64),
    Bytes(u64),
}

/// The bottleneck queue's discipline, with its parameters as tc spells them. `ecn`:
/// mark ECN-capable packets Congestion Experienced instead of dropping them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Aqm {
    #[default]
    DropTail,
    /// RFC 8289.
    Codel {
        target_us: u64,
        interval_us: u64,
        ecn: bool,
    },
    /// RFC 8290: a CoDel per flow queue, served by deficit round robin.
    FqCodel {
        target_us: u64,
        interval_us: u64,
        quantum: u32,
        flows: u32,
        ecn: bool,
    },
    /// RFC 8033.
    Pie {
        target_us: u64,
        tupdate_us: u64,
        alpha: u32,
        beta: u32,
        ecn: bool,
    },
}

impl Aqm {
    /// Its name as the path spec and tc spell it.
    pub fn name(&self) -> &'static str {
        match self {
            Aqm::DropTail => "droptail",
            Aqm::Codel { .. } => "codel",
            Aqm::FqCodel { .. } => "fq_codel",
            Aqm::Pie { .. } => "pie",
        }
    }

    /// Whether it marks instead of dropping (ECN).
    pub fn ecn(&self) -> bool {
        match *self {
            Aqm::DropTail => false,
            Aqm::Codel { ecn, .. } | Aqm::FqCodel { ecn, .. } | Aqm::Pie { ecn, .. } => ecn,
        }
    }

    /// The queue delay it aims at, µs; none for drop-tail.
    pub fn target_us(&self) -> Option<u64> {
        match *self {
            Aqm::DropTail => None,
            Aqm::Codel { target_us, .. }
            | Aqm::FqCodel { target_us, .. }
            | Aqm::Pie { target_us, .. } => Some(target_us),
        }
    }
}

/// One direction of the path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkSpec {
    /// One-way propagation delay.
    pub delay_us: u64,
    pub jitter: Option<Jitter>,
    pub loss: Loss,
    pub duplicate: Prob,
    pub corrupt: Prob,
    pub reorder: Option<Reorder>,
    pub bottleneck: Bottleneck,
    pub queue: QueueLimit,
    pub aqm: Aqm,
    /// A policer before the queue.
    pub police: Option<Police>,
    /// A gap pacer before the bottleneck.
    pub pace: Option<Pace>,
    /// One-way delay over time from a file, added to `delay_us`.
    pub delay_trace: Option<DelayTrace>,
    /// Random loss whose probability over time a file gives, besides `loss`: the file's
    /// path.
    pub loss_trace: Option<String>,
    /// The interface queue of the hosts sending into this direction (up: the clients',
    /// down: the server's), packets: `txqueuelen` of their device; `None` leaves the
    /// kernel's (500 for a TUN device).
    pub txqueuelen: Option<u32>,
}

/// A token-bucket policer, as ISPs and `tc police` have: packets that find tokens for
/// their bytes pass (and take them), the others are dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Police {
    /// The tokens' rate, bit/s (> 0).
    pub bps: u64,
    /// The bucket, bytes (> 0): the most that passes at once after a pause.
    pub burst_bytes: u64,
}

impl Police {
    /// The most it lets through over `span_us`: its rate, and its full bucket at the
    /// start, bit/s.
    pub fn bound_bps(&self, span_us: u64) -> u64 {
        self.bps + self.burst_bytes * 8 * 1_000_000 / span_us.max(1)
    }
}

/// A delay trace: its file (see `link::StepTrace` for the format), and whether a delay
/// that falls faster than packets are spaced may reorder them (by default a packet is
/// held until the one before it is out).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DelayTrace {
    pub path: String,
    pub reorder: bool,
}

/// A gap pacer's rate. Stored as `{"rate": BPS}` or `{"window": "smoothed"}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pace {
    /// Fixed, bit/s.
    Rate(u64),
    /// The sending flows' cwnd × MSS over a round trip, from their live tcp_info.
    Window(PaceRtt),
}

/// The round trip a window-following gap pacer divides the senders' windows by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaceRtt {
    /// The smoothed RTT (`pace cwnd`), PSPacer's dynamic mode. It includes the queue
    /// the pacer itself holds, so the rate it follows falls as that queue grows.
    Smoothed,
    /// The minimum RTT (`pace cwnd/minrtt`): the path's round trip without queues, so
    /// the pacer spaces a window over the time the path needs for it.
    Min,
}

impl PaceRtt {
    /// Its spelling after `pace`.
    pub fn name(self) -> &'static str {
        match self {
            PaceRtt::Smoothed => "cwnd",
            PaceRtt::Min => "cwnd/minrtt",
        }
    }

    /// A sender's window rate, bit/s: cwnd × MSS over this round trip (0 before the
    /// kernel has one).
    pub fn window_rate_bps(self, info: &tcplab_record::tcpinfo::TcpInfo) -> f64 {
        let rtt_us = match self {
            PaceRtt::Smoothed => info.rtt,
            PaceRtt::Min => info.min_rtt,
        };
        if rtt_us == 0 {
            return 0.0;
        }
        f64::from(info.snd_cwnd) * f64::from(info.snd_mss) * 8e6 / f64::from(rtt_us)
    }
}

/// Where a sender publishes the rate the window-following gap pacers on its way follow
/// (`pace cwnd`, `pace cwnd/minrtt`): each pacer's rate, bit/s, and the round trip they
/// spread a window over. Each pacer's rate is the sum of what every end sending through
/// it publishes ([`RateShare`]).
#[derive(Clone, Debug)]
pub struct PacingTarget {
    pub rates: Vec<Arc<AtomicU64>>,
    pub rtt: PaceRtt,
}

/// One end's part of its [`PacingTarget`]'s rates: publishing replaces what this end
/// published before, leaving the other ends' parts, and dropping it takes its part out.
/// Ends sharing a pacer so add up their senders' window rates, where storing each end's
/// sum would keep only the last.
#[derive(Debug)]
pub struct RateShare {
    target: PacingTarget,
    published: u64,
}

impl RateShare {
    pub fn new(target: PacingTarget) -> Self {
        RateShare {
            target,
            published: 0,
        }
    }

    /// The round trip the end's window rate is over.
    pub fn rtt(&self) -> PaceRtt {
        self.target.rtt
    }

    /// This end's senders' window rate now, bit/s.
    pub fn publish(&mut self, bps: u64) {
        // Wrapping: a part that falls moves every pacer's sum down by the difference.
        let change = bps.wrapping_sub(self.published);
        for rate in &self.target.rates {
            rate.fetch_add(change, Ordering::Relaxed);
        }
        self.published = bps;
    }
}

impl Drop for RateShare {
    fn drop(&mut self) {
        self.publish(0);
    }
}

impl LinkSpec {
    /// Whether this direction only delays: packets need no per-packet treatment, so
    /// GSO super-packets may pass whole.
    pub fn delays_only(&self) -> bool {
        let LinkSpec {
            delay_us: _,
            jitter,
            loss,
            duplicate,
            corrupt,
            reorder,
            bottleneck,
            queue: _,
            aqm: _,
            police,
            pace,
            // Each packet takes the delay of its own time.
            delay_trace,
            loss_trace,
            // The hosts' own queue, before the emulator reads a packet.
            txqueuelen: _,
        } = self;
        jitter.is_none()
            && police.is_none()
            && delay_trace.is_none()
            && loss_trace.is_none()
            && matches!(loss, Loss::None)
            && duplicate.is_zero()
            && corrupt.is_zero()
            && reorder.is_none()
            && matches!(bottleneck, Bottleneck::Unlimited)
            && pace.is_none()
    }

    /// Its fixed rate (bit/s) and per-packet overhead (bytes); `None` unlimited or
    /// following a trace.
    pub fn fixed_rate(&self) -> Option<(u64, u32)> {
        match self.bottleneck {
            Bottleneck::Rate { bps, overhead } => Some((bps, overhead)),
            Bottleneck::Unlimited | Bottleneck::Trace { .. } => None,
        }
    }

    /// The buffer in packets or bytes; a BDP multiple becomes
    /// ⌊multiple × rate × path RTT / 8⌋ bytes. `None` for a BDP multiple without a fixed
    /// rate, which the parser rejects.
    pub fn queue_limit(&self, path_rtt_us: u64) -> Option<Limit> {
        Some(match self.queue {
            QueueLimit::Packets(n) => Limit::Packets(n),
            QueueLimit::Bytes(n) => Limit::Bytes(n),
            QueueLimit::Bdp(multiple) => {
                let Bottleneck::Rate { bps, .. } = self.bottleneck else {
                    return None;
                };
                // Exact integer BDP first; only the multiple goes through f64.
                let bdp = u128::from(bps) * u128::from(path_rtt_us) / 8_000_000;
                Limit::Bytes((bdp as f64 * multiple).floor() as u64)
            }
        })
    }

    /// Whether packets may overtake each other on the wire (jitter's or the delay
    /// trace's `reorder`; netem's `reorder` sends packets early apart from this).
    pub fn delay_reorders(&self) -> bool {
        self.jitter.is_some_and(|j| j.reorder)
            || self.delay_trace.as_ref().is_some_and(|d| d.reorder)
    }

    /// The trace files this direction reads: its rate's, its delay's, its loss's.
    pub fn trace_files(&self) -> impl Iterator<Item = &str> {
        let rate = match &self.bottleneck {
            Bottleneck::Trace { path } => Some(path.as_str()),
            _ => None,
        };
        let delay = self.delay_trace.as_ref().map(|d| d.path.as_str());
        [rate, delay, self.loss_trace.as_deref()]
            .into_iter()
            .flatten()
    }

    fn trace_files_mut(&mut self) -> impl Iterator<Item = &mut String> {
        let rate = match &mut self.bottleneck {
            Bottleneck::Trace { path } => Some(path),
            _ => None,
        };
        let delay = self.delay_trace.as_mut().map(|d| &mut d.path);
        [rate, delay, self.loss_trace.as_mut()]
            .into_iter()
            .flatten()
    }

    /// Why this direction cannot be built, naming the key at fault.
    fn problem(&self) -> Option<(Key, String)> {
        if self.reorder.is_some() && self.delay_us == 0 {
            return Some((
                Key::Reorder,
                "reorder needs a delay on this direction (reordered packets are the ones sent without it)".into(),
            ));
        }
        if matches!(self.queue, QueueLimit::Bdp(_))
            && !matches!(self.bottleneck, Bottleneck::Rate { .. })
        {
            return Some((
                Key::Queue,
                "a queue in bdp needs a fixed rate on this direction".into(),
            ));
        }
        None
    }
}

/// Both directions and what they share.
#[derive(Clone, Debug, PartialEq)]
pub struct PathSpec {
    /// Client → server.
    pub up: LinkSpec,
    /// Server → client.
    pub down: LinkSpec,
    pub mtu: u32,
    /// Pins the randomness of every link of a lab (see `dumbbell::link_seed`); `None`
    /// lets each lab draw its own.
    pub seed: Option<u64>,
    /// How `up` and `down` change during the test (`at`, `every`); empty for a fixed path.
    pub schedule: Schedule,
}

impl Default for PathSpec {
    fn default() -> Self {
        PathSpec {
            up: LinkSpec::default(),
            down: LinkSpec::default(),
            mtu: DEFAULT_MTU,
            seed: None,
            schedule: Schedule::default(),
        }
    }
}

impl PathSpec {
    pub fn link(&self, dir: Direction) -> &LinkSpec {
        match dir {
            Direction::Up => &self.up,
            Direction::Down => &self.down,
        }
    }

    /// One direction over the test: its settings from the start and each change of the
    /// schedule, as its link follows them.
    pub fn timeline(&self, dir: Direction) -> Timeline {
        self.schedule.timeline(self.link(dir), dir)
    }

    /// The trace files its links read (rate, delay and loss), as written.
    pub fn trace_files(&self) -> impl Iterator<Item = &str> {
        [&self.up, &self.down]
            .into_iter()
            .flat_map(|l| l.trace_files())
    }

    /// The spec with its relative trace files taken from `dir` (an experiment file's
    /// directory) instead of the working directory.
    pub fn traces_under(&self, dir: &std::path::Path) -> PathSpec {
        let mut spec = self.clone();
        for link in [&mut spec.up, &mut spec.down] {
            for path in link.trace_files_mut() {
                *path = dir.join(&*path).to_string_lossy().into_owned();
            }
        }
        spec
    }

    /// Base round trip: both one-way delays, without jitter or queuing.
    pub fn rtt_us(&self) -> u64 {
        self.up.delay_us.saturating_add(self.down.delay_us)
    }

    /// Checks what the parser checks, for a spec built in code.
    pub fn validate(&self) -> Result<(), PathError> {
        if !MTU_RANGE.contains(&self.mtu) {
            return Err(PathError::whole(format!(
                "mtu {} is outside {}..={}",
                self.mtu,
                MTU_RANGE.start(),
                MTU_RANGE.end()
            )));
        }
        for dir in [Direction::Up, Direction::Down] {
            if let Some((key, message)) = self.link(dir).problem() {
                return Err(PathError::whole(format!(
                    "{}.{}: {message}",
                    dir.name(),
                    key.name()
                )));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Errors

/// Where in the input an error is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// 1-based word of the text.
    Word(usize),
    /// The text ended after this word.
    End { after_word: usize },
    /// A key of the TOML form (`rate`, `up.loss`).
    Key(String),
    /// The spec as a whole.
    Whole,
}

/// A rejected path spec; one line naming the offending token and its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathError {
    /// The offending text: a word, or a TOML value.
    pub token: String,
    pub position: Position,
    pub message: String,
}

impl PathError {
    fn whole(message: String) -> Self {
        PathError {
            token: String::new(),
            position: Position::Whole,
            message,
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = self.token.escape_debug();
        match &self.position {
            Position::Word(n) => write!(f, "path spec: at '{token}' (word {n}): ")?,
            Position::End { after_word } => write!(
                f,
                "path spec: at the end, after '{token}' (word {after_word}): "
            )?,
            Position::Key(key) => write!(f, "path spec: at '{token}' (key {key}): ")?,
            Position::Whole => f.write_str("path spec: ")?,
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for PathError {}

// ---------------------------------------------------------------------------------------
// Parsing

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Delay,
    Rtt,
    Jitter,
    Loss,
    Duplicate,
    Corrupt,
    Reorder,
    Rate,
    Trace,
    DelayTrace,
    LossTrace,
    Queue,
    Aqm,
    Police,
    Pace,
    TxQueueLen,
    Mtu,
    Seed,
}

impl Key {
    const ALL: [Key; 18] = [
        Key::Delay,
        Key::Rtt,
        Key::Jitter,
        Key::Loss,
        Key::Duplicate,
        Key::Corrupt,
        Key::Reorder,
        Key::Rate,
        Key::Trace,
        Key::DelayTrace,
        Key::LossTrace,
        Key::Queue,
        Key::Aqm,
        Key::Police,
        Key::Pace,
        Key::TxQueueLen,
        Key::Mtu,
        Key::Seed,
    ];

    fn name(self) -> &'static str {
        match self {
            Key::Delay => "delay",
            Key::Rtt => "rtt",
            Key::Jitter => "jitter",
            Key::Loss => "loss",
            Key::Duplicate => "duplicate",
            Key::Corrupt => "corrupt",
            Key::Reorder => "reorder",
            Key::Rate => "rate",
            Key::Trace => "trace",
            Key::DelayTrace => "delay-trace",
            Key::LossTrace => "loss-trace",
            Key::Queue => "queue",
            Key::Aqm => "aqm",
            Key::Police => "police",
            Key::Pace => "pace",
            Key::TxQueueLen => "txqueuelen",
            Key::Mtu => "mtu",
            Key::Seed => "seed",
        }
    }

    fn from_name(name: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The key's forms and what each does, one (form, meaning) per line of the grammar.
    fn usage(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Key::Delay => &[("delay D", "one-way propagation delay")],
            Key::Rtt => &[("rtt D", "D/2 each way (an odd µs goes to up)")],
            Key::Jitter => &[
                (
                    "jitter D [dist uniform|normal|pareto|paretonormal] [reorder|noreorder]",
                    "",
                ),
                ("", "delay varies by D (normal: σ = D); default"),
                ("", "`dist normal noreorder`: a packet is never"),
                ("", "delivered before an earlier one"),
            ],
            Key::Loss => &[
                ("loss P", "random loss (also `loss random P`)"),
                (
                    "loss gemodel p [r [1-h [1-k]]]",
                    "Gilbert–Elliott as netem's gemodel",
                ),
            ],
            Key::Duplicate => &[("duplicate P", "P of packets arrive twice")],
            Key::Corrupt => &[("corrupt P", "P of packets arrive with a flipped bit")],
            Key::Reorder => &[(
                "reorder P [CORR] [gap N]",
                "as netem: P of packets skip the delay",
            )],
            Key::Rate => &[(
                "rate R [overhead BYTES]",
                "bottleneck rate; BYTES added to every packet",
            )],
            Key::Trace => &[("trace FILE", "mahimahi trace instead of a rate")],
            Key::DelayTrace => &[
                (
                    "delay-trace FILE [reorder]",
                    "one-way delay over time from FILE, added",
                ),
                ("", "to delay (or rtt's half); a packet is never"),
                ("", "delivered before an earlier one unless"),
                ("", "reorder. FILE's lines: `TIME DELAY` from"),
                ("", "TIME on (the first at 0), then `TIME` alone:"),
                ("", "its length; it repeats from the test's start"),
            ],
            Key::LossTrace => &[
                (
                    "loss-trace FILE",
                    "random loss besides `loss`, its probability",
                ),
                ("", "over time from FILE: `TIME P` lines as"),
                ("", "delay-trace's"),
            ],
            Key::Queue => &[
                ("queue N", "bottleneck buffer, default 1000p:"),
                ("", "  100 or 100p   packets"),
                ("", "  64KiB, 1500B  bytes"),
                ("", "  1bdp, 0.5bdp  times rate × end-to-end RTT"),
            ],
            Key::Aqm => &[
                ("aqm droptail", "the default: a full queue drops arrivals"),
                (
                    "aqm codel [target D] [interval D] [ecn]",
                    "RFC 8289; 5ms, 100ms, noecn",
                ),
                (
                    "aqm fq_codel [target D] [interval D] [quantum BYTES] [flows N] [noecn]",
                    "",
                ),
                ("", "RFC 8290: a CoDel per flow (5-tuple hash),"),
                ("", "deficit round robin, new flows first;"),
                ("", "5ms, 100ms, 1514, 1024, ecn"),
                (
                    "aqm pie [target D] [tupdate D] [alpha N] [beta N] [ecn]",
                    "",
                ),
                ("", "RFC 8033; 15ms, 15ms, 2, 20 (1/16 Hz), noecn"),
                ("", "ecn: mark ECN-capable packets CE instead of"),
                ("", "dropping them (PIE drops above 10 %); the"),
                ("", "limit is the link's queue"),
            ],
            Key::Police => &[
                (
                    "police R burst BYTES",
                    "a policer (token bucket, as tc police)",
                ),
                ("", "before the queue: a packet beyond rate R"),
                ("", "and BYTES of burst is dropped, not queued"),
            ],
            Key::Pace => &[
                ("pace R", "a gap pacer (PSPacer) where the path enters"),
                ("", "the bottleneck: packets leave it spaced as at"),
                ("", "rate R, none dropped (`up.pace 900mbit`)"),
                ("pace cwnd", "the same, following the senders' cwnd ×"),
                ("", "MSS / smoothed RTT (run and sweeps)"),
                (
                    "pace cwnd/minrtt",
                    "the same over their min RTT: the pacer's",
                ),
                ("", "own queue does not slow it"),
            ],
            Key::TxQueueLen => &[
                ("txqueuelen N", "the sending hosts' interface queue, N"),
                ("", "packets (1 to 1000000): up the clients',"),
                ("", "down the server's (default: the kernel's,"),
                ("", "500 for a TUN device)"),
            ],
            Key::Mtu => &[("mtu BYTES", "whole path only, default 1500")],
            Key::Seed => &[
                ("seed N", "whole path only: pins every link's draws"),
                ("", "(default: each lab draws its own)"),
            ],
        }
    }

    /// Keys that only exist for the path as a whole.
    fn whole_path_only(self) -> bool {
        matches!(self, Key::Rtt | Key::Mtu | Key::Seed)
    }
}

/// The path-spec grammar, from the parser's own key table: what `tcplab path-spec`
/// prints and docs/paths.md shows (a test holds them equal).
pub fn grammar() -> String {
    const MEANING_AT: usize = 43;
    let mut text = String::from(
        "spec      := clause*                       (clauses separated by spaces, any order)\n\
         clause    := [dir \".\"] key value\n\
         dir       := \"up\" | \"down\"                 (up = client → server; no prefix = both)\n\
         \n\
         key value:\n",
    );
    for key in Key::ALL {
        for (form, meaning) in key.usage() {
            let line = if meaning.is_empty() {
                format!("  {form}")
            } else if form.len() + 2 >= MEANING_AT {
                format!("  {form}\n{:MEANING_AT$}{meaning}", "")
            } else {
                format!("  {form:<width$}{meaning}", width = MEANING_AT - 2)
            };
            text.push_str(&line);
            text.push('\n');
        }
    }
    text.push('\n');
    text.push_str(schedule::GRAMMAR);
    text.push_str(
        "\nD: 250us, 10ms, 1.5s, with a unit (at most 1h; an rtt 2h)   R: 100mbit, 1gbit, 500kbit\n\
         P: 1%, 0.25%   BYTES: 1500, 64K\n",
    );
    text
}

fn expected_keys() -> String {
    let names: Vec<_> = Key::ALL.iter().map(|k| k.name()).collect();
    format!(
        "expected one of {} (prefix up. or down. for one direction)",
        names.join(", ")
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Both,
    Up,
    Down,
}

impl Scope {
    fn prefix(self) -> &'static str {
        match self {
            Scope::Both => "",
            Scope::Up => "up.",
            Scope::Down => "down.",
        }
    }

    fn covers(self, dir: Direction) -> bool {
        matches!(
            (self, dir),
            (Scope::Both, _) | (Scope::Up, Direction::Up) | (Scope::Down, Direction::Down)
        )
    }
}

/// One word of input, with what an error about it should quote and where it is.
#[derive(Clone, Debug)]
struct Token {
    text: String,
    /// The word itself for text input; the whole value for TOML.
    shown: String,
    /// TOML: the whole value, quoted when it ends too early.
    value: String,
    position: Position,
}

impl Token {
    fn error(&self, message: impl Into<String>) -> PathError {
        PathError {
            token: self.shown.clone(),
            position: self.position.clone(),
            message: message.into(),
        }
    }

    /// The input ended right after this token while a value was still expected.
    fn missing(&self, message: impl Into<String>) -> PathError {
        let (token, position) = match self.position {
            Position::Word(n) => (self.shown.clone(), Position::End { after_word: n }),
            ref other => (self.value.clone(), other.clone()),
        };
        PathError {
            token,
            position,
            message: message.into(),
        }
    }

    fn looks_numeric(&self) -> bool {
        self.text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
    }
}

struct Cursor<'a> {
    tokens: &'a [Token],
    next: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<&'a Token> {
        self.tokens.get(self.next)
    }

    fn peek2(&self) -> Option<&'a Token> {
        self.tokens.get(self.next + 1)
    }

    fn bump(&mut self) -> Option<&'a Token> {
        let t = self.tokens.get(self.next)?;
        self.next += 1;
        Some(t)
    }

    /// The next token, which must exist: `what` names the value for the error.
    fn value(&mut self, what: &str) -> Result<&'a Token, PathError> {
        match self.bump() {
            Some(t) => Ok(t),
            None => Err(self
                .last()
                .missing(format!("missing value; expected {what}"))),
        }
    }

    fn last(&self) -> &'a Token {
        &self.tokens[self.next - 1]
    }
}

const DURATION: &str = "a duration such as 250us, 10ms, 1.5s";
const RATE: &str = "a rate such as 100mbit, 1gbit, 500kbit";
const PERCENT: &str = "a percentage such as 1% or 0.1%";
const SIZE: &str = "a size in bytes such as 1500, 64K, 1MiB";

/// The longest delay, jitter or AQM time a path takes (an hour; an rtt, two): far
/// beyond any real path, and small enough that the link model's nanosecond arithmetic
/// cannot overflow.
pub(crate) const MAX_HOURS: u64 = 1;

fn duration(t: &Token) -> Result<u64, PathError> {
    duration_within(t, MAX_HOURS)
}

fn duration_within(t: &Token, hours: u64) -> Result<u64, PathError> {
    duration_text(&t.text, hours).map_err(|e| t.error(e))
}

/// A duration as a path writes it, µs: with a unit (only 0 may go without), at most
/// `hours`.
pub(crate) fn duration_text(text: &str, hours: u64) -> Result<u64, String> {
    // tc reads a bare number as µs and iperf3 as seconds: a path takes neither guess.
    let bare = !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.');
    if bare && parse_duration(text).is_ok_and(|d| d != 0) {
        return Err(format!(
            "a duration needs a unit, as in {text}ms, {text}us or {text}s"
        ));
    }
    match parse_duration(text).map_err(|e| e.to_string())? {
        d if d > hours * 3_600_000_000 => Err(format!("too long; at most {hours}h")),
        d => Ok(d),
    }
}

fn positive_duration(t: &Token) -> Result<u64, PathError> {
    match duration(t)? {
        0 => Err(t.error("must be above zero")),
        d => Ok(d),
    }
}

fn prob(t: &Token) -> Result<Prob, PathError> {
    parse_prob(&t.text).map_err(|e| t.error(e))
}

fn size(t: &Token) -> Result<u64, PathError> {
    parse_size(&t.text).map_err(|e| t.error(e.to_string()))
}

fn small_size(t: &Token) -> Result<u32, PathError> {
    u32::try_from(size(t)?).map_err(|_| t.error("too large"))
}

/// What one clause sets.
#[derive(Clone, Debug, PartialEq)]
enum Setting {
    Delay(u64),
    Rtt(u64),
    Jitter(Option<Jitter>),
    Loss(Loss),
    Duplicate(Prob),
    Corrupt(Prob),
    Reorder(Option<Reorder>),
    Bottleneck(Bottleneck),
    DelayTrace(DelayTrace),
    LossTrace(String),
    Queue(QueueLimit),
    Aqm(Aqm),
    Police(Police),
    Pace(Pace),
    TxQueueLen(u32),
    Mtu(u32),
    Seed(u64),
}

struct Clause<'a> {
    scope: Scope,
    key: Key,
    /// The key's own token, for errors about the clause as a whole.
    at: &'a Token,
    setting: Setting,
}

/// Reads one clause: a key and its value words. `in_step`: the clause of an `at`, where
/// `rate 0` is an outage.
fn clause<'a>(cur: &mut Cursor<'a>, in_step: bool) -> Result<Clause<'a>, PathError> {
    let at = cur.bump().expect("caller checked for a token");
    let (scope, name) = if let Some(rest) = at.text.strip_prefix("up.") {
        (Scope::Up, rest)
    } else if let Some(rest) = at.text.strip_prefix("down.") {
        (Scope::Down, rest)
    } else {
        (Scope::Both, at.text.as_str())
    };
    let Some(key) = Key::from_name(name) else {
        return Err(at.error(unknown_key_message(at, cur)));
    };
    if scope != Scope::Both && key.whole_path_only() {
        let hint = if key == Key::Rtt {
            format!("rtt sets both directions; use {}delay", scope.prefix())
        } else {
            format!("{} applies to the whole path; drop the prefix", key.name())
        };
        return Err(at.error(hint));
    }
    let setting = match key {
        Key::Delay => Setting::Delay(duration(cur.value(DURATION)?)?),
        Key::Rtt => Setting::Rtt(duration_within(cur.value(DURATION)?, 2 * MAX_HOURS)?),
        Key::Jitter => Setting::Jitter(jitter(cur)?),
        Key::Loss => Setting::Loss(loss(cur)?),
        Key::Duplicate => Setting::Duplicate(prob(cur.value(PERCENT)?)?),
        Key::Corrupt => Setting::Corrupt(prob(cur.value(PERCENT)?)?),
        Key::Reorder => Setting::Reorder(reorder(cur)?),
        Key::Rate => {
            let t = cur.value(RATE)?;
            let bps = parse_rate(&t.text).map_err(|e| t.error(e.to_string()))?;
            if bps == 0 && !in_step {
                return Err(t.error(
                    "a rate must be above zero; leave out rate for no limit (rate 0, an outage, is for at)",
                ));
            }
            let mut overhead = 0;
            if cur.peek().is_some_and(|t| t.text == "overhead") {
                cur.bump();
                overhead = small_size(cur.value(SIZE)?)?;
            }
            Setting::Bottleneck(Bottleneck::Rate { bps, overhead })
        }
        Key::Trace => Setting::Bottleneck(Bottleneck::Trace {
            path: cur.value("a trace file")?.text.clone(),
        }),
        Key::DelayTrace => Setting::DelayTrace(delay_trace(cur)?),
        Key::LossTrace => Setting::LossTrace(cur.value("a loss trace file")?.text.clone()),
        Key::Queue => Setting::Queue(queue(cur.value("a queue size such as 100p, 256K, 1bdp")?)?),
        Key::Aqm => Setting::Aqm(aqm(cur)?),
        Key::Police => Setting::Police(police(cur)?),
        Key::Pace => {
            let t = cur.value("a rate such as 900mbit, or cwnd, or cwnd/minrtt")?;
            if let Some(rtt) = [PaceRtt::Smoothed, PaceRtt::Min]
                .into_iter()
                .find(|r| r.name() == t.text)
            {
                Setting::Pace(Pace::Window(rtt))
            } else {
                let bps = parse_rate(&t.text).map_err(|e| {
                    t.error(format!(
                        "{e}, or cwnd or cwnd/minrtt (the senders' windows)"
                    ))
                })?;
                if bps == 0 {
                    return Err(
                        t.error("a pacing rate must be above zero; leave out pace for none")
                    );
                }
                Setting::Pace(Pace::Rate(bps))
            }
        }
        Key::TxQueueLen => {
            let t = cur.value("a whole number of packets")?;
            match t.text.parse::<u32>() {
                Ok(n) if TXQUEUELEN_RANGE.contains(&n) => Setting::TxQueueLen(n),
                _ => {
                    return Err(t.error(format!(
                        "invalid txqueuelen; expected a whole number of packets within {}..={}",
                        TXQUEUELEN_RANGE.start(),
                        TXQUEUELEN_RANGE.end()
                    )))
                }
            }
        }
        Key::Mtu => {
            let t = cur.value(SIZE)?;
            let mtu = small_size(t)?;
            if !MTU_RANGE.contains(&mtu) {
                return Err(t.error(format!(
                    "mtu must be within {}..={} bytes",
                    MTU_RANGE.start(),
                    MTU_RANGE.end()
                )));
            }
            Setting::Mtu(mtu)
        }
        Key::Seed => {
            let t = cur.value("a whole number")?;
            let seed = t
                .text
                .parse()
                .map_err(|_| t.error("invalid seed; expected a whole number"))?;
            Setting::Seed(seed)
        }
    };
    Ok(Clause {
        scope,
        key,
        at,
        setting,
    })
}

fn unknown_key_message(at: &Token, cur: &Cursor<'_>) -> String {
    let mut message = if at.looks_numeric() {
        format!("a value where a key was expected; {}", expected_keys())
    } else {
        format!("unknown key; {}", expected_keys())
    };
    // `rate 10 mbit`: the unit was split from its number.
    let one = format!("1{}", at.text);
    let is_unit = !at.looks_numeric()
        && (parse_rate(&one).is_ok() || parse_duration(&one).is_ok() || parse_size(&one).is_ok());
    if is_unit && cur.next >= 2 {
        let previous = &cur.tokens[cur.next - 2];
        message.push_str(&format!(
            "; a unit follows its number without a space, as in '{}{}'",
            previous.text, at.text
        ));
    }
    message
}

fn jitter(cur: &mut Cursor<'_>) -> Result<Option<Jitter>, PathError> {
    let jitter_us = duration(cur.value(DURATION)?)?;
    let mut dist = None;
    let mut reorder = None;
    while let Some(t) = cur.peek() {
        match t.text.as_str() {
            "dist" | "distribution" => {
                cur.bump();
                if dist.is_some() {
                    return Err(t.error("distribution given twice"));
                }
                let v = cur.value("uniform, normal, pareto or paretonormal")?;
                let found = JitterDist::ALL.into_iter().find(|d| d.name() == v.text);
                dist = Some(found.ok_or_else(|| {
                    v.error(
                        "unknown distribution; expected uniform, normal, pareto or paretonormal",
                    )
                })?);
            }
            // `reorder 25%` right after jitter is netem's reorder key, not the flag.
            "reorder" if cur.peek2().is_some_and(Token::looks_numeric) => break,
            "reorder" | "noreorder" => {
                cur.bump();
                if reorder.is_some() {
                    return Err(t.error("reorder or noreorder given twice"));
                }
                reorder = Some(t.text == "reorder");
            }
            _ => break,
        }
    }
    Ok((jitter_us > 0).then(|| Jitter {
        jitter_us,
        dist: dist.unwrap_or_default(),
        reorder: reorder.unwrap_or(false),
    }))
}

fn delay_trace(cur: &mut Cursor<'_>) -> Result<DelayTrace, PathError> {
    let path = cur.value("a delay trace file")?.text.clone();
    // `reorder 25%` right after the file is netem's reorder key, not the flag.
    let reorder = cur
        .peek()
        .is_some_and(|t| t.text == "reorder" && !cur.peek2().is_some_and(Token::looks_numeric));
    if reorder {
        cur.bump();
    }
    Ok(DelayTrace { path, reorder })
}

fn loss(cur: &mut Cursor<'_>) -> Result<Loss, PathError> {
    let first = cur.value("a percentage, or gemodel p [r [1-h [1-k]]]")?;
    match first.text.as_str() {
        "gemodel" => {
            let p = prob(cur.value(PERCENT)?)?;
            let mut optional = [p.complement(), Prob::ONE, Prob::ZERO];
            for slot in &mut optional {
                match cur.peek() {
                    Some(t) if t.looks_numeric() => *slot = prob(cur.bump().expect("peeked"))?,
                    _ => break,
                }
            }
            let [r, loss_bad, loss_good] = optional;
            Ok(Loss::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            })
        }
        "random" => random_loss(cur.value(PERCENT)?),
        _ => random_loss(first),
    }
}

fn random_loss(t: &Token) -> Result<Loss, PathError> {
    let p = prob(t)?;
    Ok(if p.is_zero() {
        Loss::None
    } else {
        Loss::Random(p)
    })
}

fn reorder(cur: &mut Cursor<'_>) -> Result<Option<Reorder>, PathError> {
    let prob_ = prob(cur.value(PERCENT)?)?;
    let mut correlation = Prob::ZERO;
    if cur.peek().is_some_and(Token::looks_numeric) {
        correlation = prob(cur.bump().expect("peeked"))?;
    }
    let mut gap = 1;
    if cur.peek().is_some_and(|t| t.text == "gap") {
        cur.bump();
        let t = cur.value("a whole number of packets")?;
        gap = match t.text.parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(t.error("invalid gap; expected a whole number of packets ≥ 1")),
        };
    }
    Ok((!prob_.is_zero()).then_some(Reorder {
        prob: prob_,
        correlation,
        gap,
    }))
}

/// `100`/`100p` packets, `1bdp`/`0.5bdp` BDP multiples, anything else a size in bytes
/// (so a bare number is packets, as tc's `limit`, and bytes always carry a unit).
fn queue(t: &Token) -> Result<QueueLimit, PathError> {
    let text = t.text.as_str();
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let packets = text.strip_suffix('p').unwrap_or(text);
    if all_digits(packets) {
        return packets
            .parse()
            .map(QueueLimit::Packets)
            .map_err(|_| t.error("too many packets"));
    }
    if let Some(number) = text.strip_suffix("bdp") {
        let decimal = {
            let (int, frac) = number.split_once('.').unwrap_or((number, ""));
            (all_digits(int) || all_digits(frac))
                && int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        };
        return match number.parse::<f64>() {
            Ok(m) if decimal && m.is_finite() => Ok(QueueLimit::Bdp(m)),
            _ => Err(t.error("invalid BDP multiple; expected a number such as 1bdp or 0.5bdp")),
        };
    }
    match parse_size(text) {
        Ok(bytes) => Ok(QueueLimit::Bytes(bytes)),
        Err(e) => Err(t.error(format!(
            "{e}; a queue is packets (100, 100p), bytes with a unit (1500B, 64K) or a BDP multiple (1bdp)"
        ))),
    }
}

/// `R burst BYTES`.
fn police(cur: &mut Cursor<'_>) -> Result<Police, PathError> {
    let t = cur.value(RATE)?;
    let bps = parse_rate(&t.text).map_err(|e| t.error(e.to_string()))?;
    if bps == 0 {
        return Err(t.error("a policer's rate must be above zero"));
    }
    match cur.bump() {
        Some(w) if w.text == "burst" => {}
        Some(w) => {
            return Err(w.error(format!(
                "expected burst after the policer's rate, as in police {} burst 64K",
                t.text
            )))
        }
        None => {
            return Err(t.missing(format!(
                "missing burst; a policer has a bucket, as in police {} burst 64K",
                t.text
            )))
        }
    }
    let b = cur.value(SIZE)?;
    match size(b)? {
        0 => Err(b.error("a policer's burst must be above zero bytes")),
        burst_bytes => Ok(Police { bps, burst_bytes }),
    }
}

fn aqm(cur: &mut Cursor<'_>) -> Result<Aqm, PathError> {
    let t = cur.value("droptail, codel, fq_codel or pie")?;
    let name = t.text.as_str();
    let words: &[&str] = match name {
        "droptail" => return Ok(Aqm::DropTail),
        "codel" => &["target", "interval"],
        "fq_codel" => &["target", "interval", "quantum", "flows"],
        "pie" => &["target", "tupdate", "alpha", "beta"],
        _ => return Err(t.error("unknown aqm; expected droptail, codel, fq_codel or pie")),
    };
    let mut values: [Option<u64>; 4] = [None; 4];
    let mut ecn = None;
    while let Some(t) = cur.peek() {
        if let Some(on) = match t.text.as_str() {
            "ecn" => Some(true),
            "noecn" => Some(false),
            _ => None,
        } {
            cur.bump();
            if ecn.replace(on).is_some() {
                return Err(t.error("ecn given twice"));
            }
            continue;
        }
        let Some(k) = words.iter().position(|w| *w == t.text) else {
            break;
        };
        cur.bump();
        if values[k].is_some() {
            return Err(t.error("given twice"));
        }
        let v = cur.value("a value")?;
        values[k] = Some(match words[k] {
            "target" | "interval" | "tupdate" => positive_duration(v)?,
            "quantum" => match parse_size(&v.text) {
                Ok(b) if (1..=u64::from(u32::MAX)).contains(&b) => b,
                _ => return Err(v.error("invalid quantum; expected bytes (1514, 3K)")),
            },
            _ => match v.text.parse::<u32>() {
                Ok(n) if n >= 1 => u64::from(n),
                _ => return Err(v.error("expected a whole number ≥ 1")),
            },
        });
    }
    let [a, b, c, d] = values;
    let int = |v: Option<u64>, default: u32| v.map_or(default, |v| v as u32);
    Ok(match name {
        "codel" => Aqm::Codel {
            target_us: a.unwrap_or(CODEL_TARGET_US),
            interval_us: b.unwrap_or(CODEL_INTERVAL_US),
            ecn: ecn.unwrap_or(false),
        },
        "fq_codel" => Aqm::FqCodel {
            target_us: a.unwrap_or(CODEL_TARGET_US),
            interval_us: b.unwrap_or(CODEL_INTERVAL_US),
            quantum: int(c, FQ_CODEL_QUANTUM),
            flows: int(d, FQ_CODEL_FLOWS),
            ecn: ecn.unwrap_or(true),
        },
        _ => Aqm::Pie {
            target_us: a.unwrap_or(PIE_TARGET_US),
            tupdate_us: b.unwrap_or(PIE_TUPDATE_US),
            alpha: int(c, PIE_ALPHA),
            beta: int(d, PIE_BETA),
            ecn: ecn.unwrap_or(false),
        },
    })
}

/// The clauses of a whole spec into a [`PathSpec`]; order does not matter.
fn build(clauses: &[Clause<'_>]) -> Result<PathSpec, PathError> {
    check_each_key_once(clauses)?;
    let mut path = PathSpec::default();
    for dir in [Direction::Up, Direction::Down] {
        // The clause that decides `key` for this direction: its own scope wins.
        let pick = |key: Key| {
            let mut found = None;
            for c in clauses
                .iter()
                .filter(|c| c.key == key && c.scope.covers(dir))
            {
                if found.is_none() || c.scope != Scope::Both {
                    found = Some(c);
                }
            }
            found
        };
        let rate = pick(Key::Rate);
        let trace = pick(Key::Trace);
        if let (Some(rate), Some(trace)) = (rate, trace) {
            let later = if rate.at.position_index() > trace.at.position_index() {
                rate
            } else {
                trace
            };
            return Err(later.at.error(format!(
                "rate and trace both set the {} direction; a direction has either a rate or a trace",
                dir.name()
            )));
        }
        let link = match dir {
            Direction::Up => &mut path.up,
            Direction::Down => &mut path.down,
        };
        let mut at = BTreeMap::new();
        for key in Key::ALL {
            let Some(c) = pick(key) else { continue };
            at.insert(key, c.at);
            match &c.setting {
                Setting::Mtu(m) => path.mtu = *m,
                Setting::Seed(s) => path.seed = Some(*s),
                setting => apply(link, dir, setting),
            }
        }
        if let Some((key, message)) = link.problem() {
            let token = at.get(&key).expect("a problem names a key that was set");
            return Err(token.error(format!("{message} ({})", dir.name())));
        }
    }
    Ok(path)
}

/// What a clause of one direction's key sets in that direction's link.
fn apply(link: &mut LinkSpec, dir: Direction, setting: &Setting) {
    match setting {
        Setting::Delay(d) => link.delay_us = *d,
        // An odd µs goes up so that up + down = rtt exactly.
        Setting::Rtt(rtt) => {
            link.delay_us = match dir {
                Direction::Up => rtt.div_ceil(2),
                Direction::Down => rtt / 2,
            }
        }
        Setting::Jitter(j) => link.jitter = *j,
        Setting::Loss(l) => link.loss = *l,
        Setting::Duplicate(p) => link.duplicate = *p,
        Setting::Corrupt(p) => link.corrupt = *p,
        Setting::Reorder(r) => link.reorder = *r,
        Setting::Bottleneck(b) => link.bottleneck = b.clone(),
        Setting::DelayTrace(d) => link.delay_trace = Some(d.clone()),
        Setting::LossTrace(path) => link.loss_trace = Some(path.clone()),
        Setting::Queue(q) => link.queue = *q,
        Setting::Aqm(a) => link.aqm = *a,
        Setting::Police(p) => link.police = Some(*p),
        Setting::Pace(bps) => link.pace = Some(*bps),
        Setting::TxQueueLen(n) => link.txqueuelen = Some(*n),
        Setting::Mtu(_) | Setting::Seed(_) => unreachable!("whole-path keys"),
    }
}

/// The same key twice in one scope, or both rtt and delay, is an error.
fn check_each_key_once(clauses: &[Clause<'_>]) -> Result<(), PathError> {
    for (i, c) in clauses.iter().enumerate() {
        if let Some(first) = clauses[..i]
            .iter()
            .find(|o| o.scope == c.scope && same_slot(o.key, c.key))
        {
            let message = if first.key == c.key {
                format!("{} set twice", c.at.text)
            } else {
                format!(
                    "{} and {} both set this direction's bottleneck; a direction has either a rate or a trace",
                    first.at.text, c.at.text
                )
            };
            return Err(c.at.error(message));
        }
    }
    let rtt = clauses.iter().find(|c| c.key == Key::Rtt);
    if let (Some(_), Some(delay)) = (rtt, clauses.iter().find(|c| c.key == Key::Delay)) {
        return Err(delay
            .at
            .error("rtt already sets the delay of both directions; use either rtt or delay"));
    }
    Ok(())
}

/// Rate and trace fill the same slot: the bottleneck.
fn same_slot(a: Key, b: Key) -> bool {
    let bottleneck = |k| matches!(k, Key::Rate | Key::Trace);
    a == b || (bottleneck(a) && bottleneck(b))
}

impl Token {
    fn position_index(&self) -> usize {
        match self.position {
            Position::Word(n) | Position::End { after_word: n } => n,
            _ => 0,
        }
    }
}

impl FromStr for PathSpec {
    type Err = PathError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let tokens: Vec<Token> = text
            .split_whitespace()
            .enumerate()
            .map(|(i, w)| Token {
                text: w.to_owned(),
                shown: w.to_owned(),
                value: String::new(),
                position: Position::Word(i + 1),
            })
            .collect();
        let mut cur = Cursor {
            tokens: &tokens,
            next: 0,
        };
        let mut clauses = Vec::new();
        while cur.peek().is_some_and(|t| !schedule::begins(t)) {
            clauses.push(clause(&mut cur, false)?);
        }
        let path = build(&clauses)?;
        let schedule = schedule::parse(&mut cur, &path)?;
        Ok(PathSpec { schedule, ..path })
    }
}

// ---------------------------------------------------------------------------------------
// Printing

/// Exact rate in the largest unit that divides it.
fn fmt_rate(bps: u64) -> String {
    if bps == 0 {
        // An outage (`at T rate 0`).
        return "0".into();
    }
    for (unit, per) in [
        ("tbit", 1_000_000_000_000),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ] {
        if bps.is_multiple_of(per) {
            return format!("{}{unit}", bps / per);
        }
    }
    format!("{bps}bit")
}

/// Exact duration (µs) in the largest unit that divides it.
fn fmt_duration(us: u64) -> String {
    if us != 0 && us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us != 0 && us.is_multiple_of(1_000) {
        format!("{}ms", us / 1_000)
    } else {
        format!("{us}us")
    }
}

/// Exact size with a unit: the largest binary or decimal unit that divides it, else B.
fn fmt_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 8] = [
        ("TiB", 1 << 40),
        ("TB", 1_000_000_000_000),
        ("GiB", 1 << 30),
        ("GB", 1_000_000_000),
        ("MiB", 1 << 20),
        ("MB", 1_000_000),
        ("KiB", 1 << 10),
        ("kB", 1_000),
    ];
    if bytes != 0 {
        for (unit, per) in UNITS {
            if bytes.is_multiple_of(per) {
                return format!("{}{unit}", bytes / per);
            }
        }
    }
    format!("{bytes}B")
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Packets(n) => write!(f, "{n}p"),
            QueueLimit::Bytes(n) => f.write_str(&fmt_size(*n)),
            // f64's Display is the shortest text that parses back to the same value.
            QueueLimit::Bdp(m) => write!(f, "{m}bdp"),
        }
    }
}

fn fmt_jitter(j: &Jitter) -> String {
    let mut s = fmt_duration(j.jitter_us);
    if j.dist != JitterDist::Normal {
        s.push_str(" dist ");
        s.push_str(j.dist.name());
    }
    if j.reorder {
        s.push_str(" reorder");
    }
    s
}

fn fmt_loss(l: &Loss) -> Option<String> {
    match l {
        Loss::None => None,
        Loss::Random(p) => Some(p.to_string()),
        Loss::GilbertElliott {
            p,
            r,
            loss_bad,
            loss_good,
        } => {
            let mut args = vec![*p, *r, *loss_bad, *loss_good];
            let defaults = [*p, p.complement(), Prob::ONE, Prob::ZERO];
            // Positional: only trailing defaults can go.
            while args.len() > 1 && args[args.len() - 1] == defaults[args.len() - 1] {
                args.pop();
            }
            let args: Vec<String> = args.iter().map(Prob::to_string).collect();
            Some(format!("gemodel {}", args.join(" ")))
        }
    }
}

fn fmt_reorder(r: &Reorder) -> String {
    let mut s = r.prob.to_string();
    if !r.correlation.is_zero() {
        s.push_str(&format!(" {}", r.correlation));
    }
    if r.gap != 1 {
        s.push_str(&format!(" gap {}", r.gap));
    }
    s
}

fn fmt_bottleneck(b: &Bottleneck) -> Option<(Key, String)> {
    match b {
        Bottleneck::Unlimited => None,
        Bottleneck::Rate { bps, overhead } => {
            let mut s = fmt_rate(*bps);
            if *overhead != 0 {
                s.push_str(&format!(" overhead {overhead}"));
            }
            Some((Key::Rate, s))
        }
        Bottleneck::Trace { path } => Some((Key::Trace, path.clone())),
    }
}

fn fmt_aqm(a: &Aqm) -> Option<String> {
    // (word, value, whether it is tc's default and so left out)
    let codel = |target_us: u64, interval_us: u64| {
        [
            (
                "target",
                fmt_duration(target_us),
                target_us == CODEL_TARGET_US,
            ),
            (
                "interval",
                fmt_duration(interval_us),
                interval_us == CODEL_INTERVAL_US,
            ),
        ]
    };
    let (params, ecn_default): (Vec<(&str, String, bool)>, bool) = match *a {
        Aqm::DropTail => return None,
        Aqm::Codel {
            target_us,
            interval_us,
            ecn: _,
        } => (codel(target_us, interval_us).to_vec(), false),
        Aqm::FqCodel {
            target_us,
            interval_us,
            quantum,
            flows,
            ecn: _,
        } => {
            let mut params = codel(target_us, interval_us).to_vec();
            params.push(("quantum", quantum.to_string(), quantum == FQ_CODEL_QUANTUM));
            params.push(("flows", flows.to_string(), flows == FQ_CODEL_FLOWS));
            (params, true)
        }
        Aqm::Pie {
            target_us,
            tupdate_us,
            alpha,
            beta,
            ecn: _,
        } => (
            vec![
                (
                    "target",
                    fmt_duration(target_us),
                    target_us == PIE_TARGET_US,
                ),
                (
                    "tupdate",
                    fmt_duration(tupdate_us),
                    tupdate_us == PIE_TUPDATE_US,
                ),
                ("alpha", alpha.to_string(), alpha == PIE_ALPHA),
                ("beta", beta.to_string(), beta == PIE_BETA),
            ],
            false,
        ),
    };
    let mut s = a.name().to_owned();
    for (word, value, default) in params {
        if !default {
            s.push_str(&format!(" {word} {value}"));
        }
    }
    match (a.ecn(), ecn_default) {
        (true, false) => s.push_str(" ecn"),
        (false, true) => s.push_str(" noecn"),
        _ => {}
    }
    Some(s)
}

/// Each per-direction setting but the delay as (key, value) when not the default, in one
/// order. Destructured whole: a new setting does not compile until it says how it prints.
fn direction_settings(l: &LinkSpec) -> [Option<(Key, String)>; 13] {
    let LinkSpec {
        delay_us: _, // printed above, as rtt or per direction
        jitter,
        loss,
        duplicate,
        corrupt,
        reorder,
        bottleneck,
        queue,
        aqm,
        police,
        pace,
        delay_trace,
        loss_trace,
        txqueuelen,
    } = l;
    [
        jitter.as_ref().map(|j| (Key::Jitter, fmt_jitter(j))),
        fmt_loss(loss).map(|v| (Key::Loss, v)),
        (!duplicate.is_zero()).then(|| (Key::Duplicate, duplicate.to_string())),
        (!corrupt.is_zero()).then(|| (Key::Corrupt, corrupt.to_string())),
        reorder.as_ref().map(|r| (Key::Reorder, fmt_reorder(r))),
        fmt_bottleneck(bottleneck),
        (*queue != QueueLimit::default()).then(|| (Key::Queue, queue.to_string())),
        fmt_aqm(aqm).map(|v| (Key::Aqm, v)),
        police.map(|p| {
            (
                Key::Police,
                format!("{} burst {}", fmt_rate(p.bps), fmt_size(p.burst_bytes)),
            )
        }),
        pace.map(|p| match p {
            Pace::Rate(bps) => (Key::Pace, fmt_rate(bps)),
            Pace::Window(rtt) => (Key::Pace, rtt.name().to_owned()),
        }),
        delay_trace.as_ref().map(|d| {
            let reorder = if d.reorder { " reorder" } else { "" };
            (Key::DelayTrace, format!("{}{reorder}", d.path))
        }),
        loss_trace
            .as_ref()
            .map(|path| (Key::LossTrace, path.clone())),
        txqueuelen.map(|n| (Key::TxQueueLen, n.to_string())),
    ]
}

/// One printed clause.
struct Item {
    scope: Scope,
    key: Key,
    value: String,
}

impl PathSpec {
    /// The normalized clauses: a field equal in both directions once without prefix,
    /// otherwise once per direction; defaults left out.
    fn items(&self) -> Vec<Item> {
        let mut items = Vec::new();
        let (up, down) = (&self.up, &self.down);
        if up.delay_us == down.delay_us {
            if up.delay_us != 0 {
                items.push(Item {
                    scope: Scope::Both,
                    key: Key::Rtt,
                    value: fmt_duration(up.delay_us * 2),
                });
            }
        } else {
            for (scope, d) in [(Scope::Up, up.delay_us), (Scope::Down, down.delay_us)] {
                if d != 0 {
                    items.push(Item {
                        scope,
                        key: Key::Delay,
                        value: fmt_duration(d),
                    });
                }
            }
        }
        for (u, d) in direction_settings(up)
            .into_iter()
            .zip(direction_settings(down))
        {
            if u == d {
                if let Some((key, value)) = u {
                    items.push(Item {
                        scope: Scope::Both,
                        key,
                        value,
                    });
                }
            } else {
                for (scope, v) in [(Scope::Up, u), (Scope::Down, d)] {
                    if let Some((key, value)) = v {
                        items.push(Item { scope, key, value });
                    }
                }
            }
        }
        if self.mtu != DEFAULT_MTU {
            items.push(Item {
                scope: Scope::Both,
                key: Key::Mtu,
                value: self.mtu.to_string(),
            });
        }
        if let Some(seed) = self.seed {
            items.push(Item {
                scope: Scope::Both,
                key: Key::Seed,
                value: seed.to_string(),
            });
        }
        items
    }
}

/// The normalized spec; empty for an ideal path (no delay, no limits, defaults).
impl fmt::Display for PathSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words: Vec<String> = self.items().iter().map(Item::to_string).collect();
        if let Some(every) = self.schedule.every_us {
            words.push(format!("every {}", fmt_duration(every)));
        }
        words.extend(
            self.schedule
                .changes(self)
                .iter()
                .map(|c| format!("at {c}")),
        );
        f.write_str(&words.join(" "))
    }
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{} {}",
            self.scope.prefix(),
            self.key.name(),
            self.value
        )
    }
}

// ---------------------------------------------------------------------------------------
// serde: the TOML form

/// Both-direction keys at the top, then `up` and `down` tables; values are grammar text,
/// except `mtu` and `seed`, which are numbers.
impl Serialize for PathSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let items = self.items();
        let table = |scope: Scope| -> BTreeMap<&'static str, &str> {
            items
                .iter()
                .filter(|i| i.scope == scope)
                .map(|i| (i.key.name(), i.value.as_str()))
                .collect()
        };
        let (up, down) = (table(Scope::Up), table(Scope::Down));
        let mut map = serializer.serialize_map(None)?;
        for item in items.iter().filter(|i| i.scope == Scope::Both) {
            match item.key {
                Key::Mtu => map.serialize_entry("mtu", &self.mtu)?,
                // TOML integers are i64; a larger seed goes as text.
                Key::Seed => match self.seed.map(i64::try_from) {
                    Some(Ok(seed)) => map.serialize_entry("seed", &seed)?,
                    _ => map.serialize_entry("seed", &item.value)?,
                },
                key => map.serialize_entry(key.name(), &item.value)?,
            }
        }
        if let Some(every) = self.schedule.every_us {
            map.serialize_entry("every", &fmt_duration(every))?;
        }
        let at = self.schedule.changes(self);
        if !at.is_empty() {
            map.serialize_entry("at", &at)?;
        }
        // Tables last: TOML cannot put plain keys after a table.
        if !up.is_empty() {
            map.serialize_entry("up", &up)?;
        }
        if !down.is_empty() {
            map.serialize_entry("down", &down)?;
        }
        map.end()
    }
}

/// A TOML (or JSON) value as written.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawValue {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Text(String),
    List(Vec<RawValue>),
    Table(BTreeMap<String, RawValue>),
}

impl<'de> Deserialize<'de> for PathSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, RawValue>::deserialize(deserializer)?;
        PathSpec::from_table(map).map_err(D::Error::custom)
    }
}

impl PathSpec {
    fn from_table(map: BTreeMap<String, RawValue>) -> Result<PathSpec, PathError> {
        // Each key with its value words is a group that must be read whole.
        let mut groups: Vec<Vec<Token>> = Vec::new();
        // `every` and `at` read as the text form's: `every P at T CLAUSE… at …`.
        let (mut every, mut at) = (Vec::new(), Vec::new());
        for (key, value) in map {
            match (key.as_str(), value) {
                ("up" | "down", RawValue::Table(table)) => {
                    for (inner, value) in table {
                        groups.push(group(&format!("{key}.{inner}"), value)?);
                    }
                }
                ("every", value) => every = group(&key, value)?,
                ("at", RawValue::List(items)) => {
                    for item in items {
                        at.extend(group(&key, item)?);
                    }
                }
                ("at", value) => at = group(&key, value)?,
                (_, value) => groups.push(group(&key, value)?),
            }
        }
        let mut clauses = Vec::new();
        for tokens in &groups {
            let mut cur = Cursor { tokens, next: 0 };
            clauses.push(clause(&mut cur, false)?);
            if let Some(extra) = cur.peek() {
                return Err(extra.error(format!(
                    "unexpected '{}' after the value of {}{}",
                    extra.text,
                    tokens[0].text,
                    if extra.looks_numeric() {
                        ""
                    } else {
                        "; a unit follows its number without a space"
                    }
                )));
            }
        }
        let path = build(&clauses)?;
        every.extend(at);
        let schedule = schedule::parse(
            &mut Cursor {
                tokens: &every,
                next: 0,
            },
            &path,
        )?;
        Ok(PathSpec { schedule, ..path })
    }
}

fn group(key: &str, value: RawValue) -> Result<Vec<Token>, PathError> {
    let position = Position::Key(key.to_owned());
    let text =
        match value {
            RawValue::Text(s) => s,
            RawValue::Int(n) => n.to_string(),
            RawValue::UInt(n) => n.to_string(),
            RawValue::Float(x) => x.to_string(),
            RawValue::Bool(b) => {
                return Err(PathError {
                    token: b.to_string(),
                    position,
                    message: "expected a string or a number".into(),
                })
            }
            RawValue::List(_) => return Err(PathError {
                token: key.to_owned(),
                position,
                message:
                    "unexpected list; only at takes one (of strings such as \"10s rate 10mbit\")"
                        .into(),
            }),
            RawValue::Table(_) => {
                return Err(PathError {
                    token: key.to_owned(),
                    position,
                    message: format!(
                        "unexpected table; only up and down hold keys, {}",
                        expected_keys()
                    ),
                })
            }
        };
    let key_token = Token {
        text: key.to_owned(),
        shown: key.to_owned(),
        value: text.clone(),
        position: position.clone(),
    };
    let words = text.split_whitespace().map(|w| Token {
        text: w.to_owned(),
        shown: text.clone(),
        value: text.clone(),
        position: position.clone(),
    });
    Ok(std::iter::once(key_token).chain(words).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> PathSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        s.parse::<PathSpec>().unwrap_err().to_string()
    }

    #[test]
    fn ends_sharing_a_pacer_add_up_and_an_end_that_goes_takes_its_part() {
        let (first, second) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let target = |rates: Vec<&Arc<AtomicU64>>| PacingTarget {
            rates: rates.into_iter().map(Arc::clone).collect(),
            rtt: PaceRtt::Smoothed,
        };
        let read = |rate: &AtomicU64| rate.load(Ordering::Relaxed);
        // One end crosses both pacers, the other only the second.
        let mut long = RateShare::new(target(vec![&first, &second]));
        let mut short = RateShare::new(target(vec![&second]));
        long.publish(30_000_000);
        short.publish(20_000_000);
        assert_eq!((read(&first), read(&second)), (30_000_000, 50_000_000));
        // A part that falls lowers the sums by as much.
        long.publish(10_000_000);
        assert_eq!((read(&first), read(&second)), (10_000_000, 30_000_000));
        drop(short);
        assert_eq!((read(&first), read(&second)), (10_000_000, 10_000_000));
        drop(long);
        assert_eq!((read(&first), read(&second)), (0, 0));
    }

    #[test]
    fn relative_trace_files_move_under_a_directory_and_absolute_ones_stay() {
        let spec = parse("rtt 40ms up.trace a.up down.trace /abs/b.down");
        let moved = spec.traces_under(std::path::Path::new("/x/examples"));
        assert_eq!(
            moved.trace_files().collect::<Vec<_>>(),
            ["/x/examples/a.up", "/abs/b.down"]
        );
        assert_eq!(moved.rtt_us(), spec.rtt_us());
        assert_eq!(parse("rtt 40ms rate 10mbit").trace_files().count(), 0);
        let all = parse("up.trace r delay-trace d down.loss-trace l")
            .traces_under(std::path::Path::new("/x"));
        assert_eq!(
            all.trace_files().collect::<Vec<_>>(),
            ["/x/r", "/x/d", "/x/d", "/x/l"]
        );
    }

    #[test]
    fn delay_and_loss_traces_add_to_the_fixed_settings_and_print_back() {
        let p = parse("rtt 40ms up.delay-trace d.txt reorder loss-trace l.txt");
        assert_eq!(p.up.delay_us, 20_000, "the trace adds to rtt's half");
        assert_eq!(
            p.up.delay_trace,
            Some(DelayTrace {
                path: "d.txt".into(),
                reorder: true
            })
        );
        assert_eq!(p.down.delay_trace, None);
        assert_eq!(p.down.loss_trace.as_deref(), Some("l.txt"));
        assert!(p.up.delay_reorders() && !p.down.delay_reorders());
        assert!(!p.up.delays_only(), "each packet takes its own delay");
        assert_eq!(
            p.to_string(),
            "rtt 40ms up.delay-trace d.txt reorder loss-trace l.txt"
        );
        // `reorder` with a percentage after the file is netem's key.
        let p = parse("delay 5ms delay-trace d reorder 1%");
        assert_eq!(p.up.delay_trace.as_ref().map(|d| d.reorder), Some(false));
        assert!(p.up.reorder.is_some());
        assert!(err("delay-trace").contains("a delay trace file"));
        assert!(err("delay-trace a delay-trace b").contains("set twice"));
        let toml: PathSpec =
            toml::from_str("delay-trace = \"d reorder\"\n[up]\nloss-trace = \"l\"\n").unwrap();
        assert_eq!(toml, parse("delay-trace d reorder up.loss-trace l"));
        // A trace is its own schedule.
        let e = err("rtt 20ms delay-trace d at 1s delay-trace e");
        assert!(e.contains("delay-trace"), "{e}");
    }

    #[test]
    fn probabilities_print_exactly() {
        for (text, ppb) in [
            ("1%", 10_000_000),
            ("0.25%", 2_500_000),
            ("100%", 1_000_000_000),
        ] {
            assert_eq!(parse_prob(text), Ok(Prob(ppb)));
            assert_eq!(Prob(ppb).to_string(), text);
        }
        assert_eq!(Prob(1).to_string(), "0.0000001%");
        assert_eq!(parse_prob("0.0000001%"), Ok(Prob(1)));
        assert!(parse_prob("0.00000001%").is_err());
    }

    #[test]
    fn simple_spec() {
        let p = parse("rtt 20ms rate 100mbit queue 1bdp up.loss 1%");
        assert_eq!(p.up.delay_us, 10_000);
        assert_eq!(p.down.delay_us, 10_000);
        assert_eq!(p.up.loss, Loss::Random(Prob(10_000_000)));
        assert_eq!(p.down.loss, Loss::None);
        assert_eq!(
            p.up.bottleneck,
            Bottleneck::Rate {
                bps: 100_000_000,
                overhead: 0
            }
        );
        // 100 Mbit/s × 20 ms = 250 000 bytes.
        assert_eq!(p.up.queue_limit(p.rtt_us()), Some(Limit::Bytes(250_000)));
        assert_eq!(p.to_string(), "rtt 20ms up.loss 1% rate 100mbit queue 1bdp");
    }

    #[test]
    fn error_names_token_and_word() {
        assert_eq!(
            err("rtt 20ms ratte 10mbit"),
            format!(
                "path spec: at 'ratte' (word 3): unknown key; {}",
                expected_keys()
            )
        );
        let e = err("rate 10 mbit");
        assert!(
            e.starts_with("path spec: at 'mbit' (word 3): unknown key"),
            "{e}"
        );
        assert!(e.ends_with("as in '10mbit'"), "{e}");
        assert!(
            err("rtt").starts_with("path spec: at the end, after 'rtt' (word 1): missing value")
        );
        assert!(err("rtt 20ms up.delay 5ms").contains("(word 3): rtt already sets"));
        assert!(err("loss 1% loss 2%").contains("at 'loss' (word 3): loss set twice"));
        assert!(err("up.rtt 10ms").contains("use up.delay"));
        assert!(err("reorder 25%").contains("reorder needs a delay"));
        assert!(err("delay 10ms queue 1bdp").contains("needs a fixed rate"));
        assert!(err("rate 10mbit down.trace x.down").contains("rate and trace both set the down"));
        assert!(err("up.mtu 9000").contains("drop the prefix"));
        assert!(err("rate 0").contains("above zero"));
        // The bound keeps twice a delay and its nanoseconds inside u64 (found by fuzzing).
        assert!(err("delay 9999999999999s").contains("(word 2): too long; at most 1h"));
        assert!(err("rtt 7201s").contains("too long; at most 2h"));
        assert!(err("delay 10ms jitter 2h").contains("too long"));
        assert_eq!(parse("delay 1h").to_string(), "rtt 7200s");
        assert_eq!(parse("rtt 7200s").up.delay_us, 3_600_000_000);
    }

    #[test]
    fn a_duration_without_a_unit_is_refused_with_a_hint() {
        // tc would read `rtt 20` as 20 µs, iperf3 as 20 s: neither is taken.
        assert_eq!(
            err("rtt 20 rate 100mbit"),
            "path spec: at '20' (word 2): a duration needs a unit, as in 20ms, 20us or 20s"
        );
        for spec in [
            "delay 5",
            "delay 5ms jitter 0.5",
            "rate 10mbit aqm codel target 5",
            "rate 10mbit aqm codel interval 100",
            "up.delay 7",
        ] {
            assert!(err(spec).contains("a duration needs a unit"), "{spec}");
        }
        // Zero is zero in every unit.
        assert_eq!(parse("delay 0 jitter 0"), parse(""));
    }

    #[test]
    fn overrides_and_defaults() {
        let p = parse("rate 100mbit down.rate 10mbit delay 5ms up.delay 7ms");
        assert_eq!(p.up.delay_us, 7_000);
        assert_eq!(p.down.delay_us, 5_000);
        assert_eq!(
            p.down.bottleneck,
            Bottleneck::Rate {
                bps: 10_000_000,
                overhead: 0
            }
        );
        assert_eq!(parse("").to_string(), "");
        assert_eq!(parse(""), PathSpec::default());
    }

    #[test]
    fn a_seed_is_pinned_only_when_given_and_then_printed_back() {
        assert_eq!(parse("loss 1%").seed, None);
        // Any value given is printed back, 1 included: it pins the draws.
        let p = parse("seed 1 loss 1%");
        assert_eq!(p.seed, Some(1));
        assert_eq!(p.to_string(), "loss 1% seed 1");
    }

    #[test]
    fn the_hosts_interface_queues_are_set_per_direction_and_printed_back() {
        let p = parse("rate 1gbit txqueuelen 10");
        assert_eq!((p.up.txqueuelen, p.down.txqueuelen), (Some(10), Some(10)));
        assert_eq!(p.to_string(), "rate 1gbit txqueuelen 10");
        let p = parse("up.txqueuelen 4");
        assert_eq!((p.up.txqueuelen, p.down.txqueuelen), (Some(4), None));
        assert_eq!(p.to_string(), "up.txqueuelen 4");
        assert!(
            p.up.delays_only(),
            "the hosts' queue is not the emulator's work"
        );
        assert_eq!(parse("").up.txqueuelen, None);
        for bad in [
            "txqueuelen 0",
            "txqueuelen 1000001",
            "txqueuelen 10p",
            "txqueuelen",
        ] {
            let e = err(bad);
            assert!(e.contains("txqueuelen"), "{bad}: {e}");
        }
        assert!(err("txqueuelen 0").contains("within 1..=1000000"));
        // The TOML form: a number or text.
        let toml: PathSpec = toml::from_str("txqueuelen = 20\n[up]\ntxqueuelen = \"5\"\n").unwrap();
        assert_eq!(
            (toml.up.txqueuelen, toml.down.txqueuelen),
            (Some(5), Some(20))
        );
    }

    #[test]
    fn aqms_take_tcs_parameters_and_defaults() {
        let aqm = |spec: &str| parse(spec).up.aqm;
        assert_eq!(
            aqm("rate 10mbit aqm fq_codel"),
            Aqm::FqCodel {
                target_us: 5_000,
                interval_us: 100_000,
                quantum: 1514,
                flows: 1024,
                ecn: true
            }
        );
        assert_eq!(
            aqm("rate 10mbit aqm fq_codel noecn flows 16 quantum 3K target 2ms"),
            Aqm::FqCodel {
                target_us: 2_000,
                interval_us: 100_000,
                quantum: 3072,
                flows: 16,
                ecn: false
            }
        );
        assert_eq!(
            aqm("rate 10mbit aqm pie ecn target 20ms beta 10"),
            Aqm::Pie {
                target_us: 20_000,
                tupdate_us: 15_000,
                alpha: 2,
                beta: 10,
                ecn: true
            }
        );
        assert!(aqm("rate 10mbit aqm codel ecn").ecn());
        // Printed back with only what differs from tc's defaults.
        for (spec, printed) in [
            ("rate 10mbit aqm fq_codel", "rate 10mbit aqm fq_codel"),
            (
                "rate 10mbit aqm fq_codel noecn",
                "rate 10mbit aqm fq_codel noecn",
            ),
            (
                "rate 10mbit aqm pie ecn alpha 4",
                "rate 10mbit aqm pie alpha 4 ecn",
            ),
            ("rate 10mbit aqm codel ecn", "rate 10mbit aqm codel ecn"),
        ] {
            assert_eq!(parse(spec).to_string(), printed);
        }
        for (spec, words) in [
            (
                "rate 1mbit aqm red",
                "unknown aqm; expected droptail, codel, fq_codel or pie",
            ),
            ("rate 1mbit aqm fq_codel quantum 0", "invalid quantum"),
            ("rate 1mbit aqm pie alpha x", "expected a whole number"),
            ("rate 1mbit aqm codel ecn noecn", "ecn given twice"),
            ("rate 1mbit aqm codel quantum 1514", "quantum"),
        ] {
            assert!(err(spec).contains(words), "{spec}: {}", err(spec));
        }
    }

    #[test]
    fn queue_forms() {
        let q = |s: &str| parse(&format!("rate 1mbit queue {s}")).up.queue;
        assert_eq!(q("100"), QueueLimit::Packets(100));
        assert_eq!(q("100p"), QueueLimit::Packets(100));
        assert_eq!(q("1500B"), QueueLimit::Bytes(1500));
        assert_eq!(q("256K"), QueueLimit::Bytes(256 * 1024));
        assert_eq!(q("1MB"), QueueLimit::Bytes(1_000_000));
        assert_eq!(q("0.5bdp"), QueueLimit::Bdp(0.5));
        assert!(err("rate 1mbit queue 1e3bdp").contains("invalid BDP multiple"));
        assert!(err("rate 1mbit queue 10x").contains("a queue is packets"));
    }

    #[test]
    fn jitter_and_reorder_words() {
        let p = parse("delay 10ms jitter 2ms reorder 25% 50% gap 5");
        let j = p.up.jitter.unwrap();
        assert!(!j.reorder, "'reorder 25%' is the key");
        assert_eq!(
            p.up.reorder,
            Some(Reorder {
                prob: Prob(250_000_000),
                correlation: Prob(500_000_000),
                gap: 5
            })
        );
        let p = parse("delay 10ms jitter 2ms dist pareto reorder loss 1%");
        let j = p.up.jitter.unwrap();
        assert!(j.reorder);
        assert_eq!(j.dist, JitterDist::Pareto);
        assert_eq!(
            p.to_string(),
            "rtt 20ms jitter 2ms dist pareto reorder loss 1%"
        );
    }

    #[test]
    fn gemodel_defaults_follow_netem() {
        let p = parse("loss gemodel 1%");
        assert_eq!(
            p.up.loss,
            Loss::GilbertElliott {
                p: Prob(10_000_000),
                r: Prob(990_000_000),
                loss_bad: Prob::ONE,
                loss_good: Prob::ZERO
            }
        );
        assert_eq!(p.to_string(), "loss gemodel 1%");
        let p = parse("loss gemodel 1% 10% 100% 0.5%");
        assert_eq!(p.to_string(), "loss gemodel 1% 10% 100% 0.5%");
    }

    #[test]
    fn odd_rtt_splits_exactly() {
        let p = parse("rtt 3us");
        assert_eq!((p.up.delay_us, p.down.delay_us), (2, 1));
        assert_eq!(parse(&p.to_string()), p);
    }
}
