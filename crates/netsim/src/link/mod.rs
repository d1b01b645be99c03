//! One direction of the emulated path, without I/O.
//!
//! ```text
//! push ─▶ loss / duplicate / corrupt ─▶ bottleneck queue (limit; drop-tail, CoDel,
//!      fq_codel or PIE, which may mark ECN-capable packets instead of dropping them)
//!      ─▶ serialization at rate (+ overhead) or trace opportunities
//!      ─▶ propagation delay + jitter, netem reorder ─▶ pop
//! ```
//!
//! Like quinn-proto, the link never reads a clock: every call takes `now`, virtual
//! nanoseconds since the link's start (time 0 is where a trace begins), and
//! [`Link::next_deadline`] says when to call again. Nanoseconds make serialization exact:
//! 1500 B at 10 Gbit/s is 1200 ns. `now` must not go backwards between calls.
//!
//! The runtime owns the payloads; the link moves handles `P` (buffer indices) and hands
//! each one back exactly once: from [`Link::pop`] when delivered, in a
//! [`PushOutcome::Dropped`] when refused at the door, or from [`Link::pop_dropped`] when
//! the queue's discipline drops it inside.
//!
//! Without a rate or trace there is no bottleneck: packets go straight to the delay line.
//! The queue holds packets waiting for the serializer, never the ones in flight on the
//! wire, so its limit is the router buffer alone. A packet that finds the link idle is
//! never refused by the limit. All randomness comes from one ChaCha8 generator seeded by
//! `seed`, so a seed fixes the whole schedule.

mod aqm;
mod dist;
mod queue;
mod step_trace;
mod trace;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::dumbbell::{link_seed, Dumbbell, LinkRole};
use crate::path::{Bottleneck, Direction, Jitter, Limit, LinkSpec, Loss, Prob, Timeline};
use aqm::Scheduler;
use queue::Queued;
pub use step_trace::StepTrace;
use tcplab_record::link::LinkCounters;
use tcplab_record::traffic::Traffic;
use trace::TraceCursor;
pub use trace::{Trace, TraceError, OPPORTUNITY_BYTES};

const NS_PER_US: u64 = 1_000;

/// What the link did with a pushed packet.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum PushOutcome<P> {
    /// In the link; it comes out of [`Link::pop`] (or [`Link::pop_dropped`]).
    Accepted,
    /// Accepted, and netem's `duplicate` fired: copy the payload now and give the copy to
    /// [`Link::push_duplicate`] with the same `now`.
    Duplicate,
    /// Refused: the handle comes back to be freed.
    Dropped(Dropped<P>),
}

/// What the link needs to know of a packet besides its handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketMeta {
    /// The IP packet's bytes.
    pub wire_len: u32,
    /// A hash of its 5-tuple: fq_codel's queue.
    pub flow: u32,
    /// ECN-capable (ECT(0) or ECT(1)): an AQM with ECN may mark it instead of dropping it.
    pub ect: bool,
    /// Whose it is: the link counts each kind apart.
    pub traffic: Traffic,
}

impl PacketMeta {
    /// A packet of `wire_len` bytes, of flow 0, not ECN-capable, the test's.
    pub fn len(wire_len: u32) -> Self {
        PacketMeta {
            wire_len,
            flow: 0,
            ect: false,
            traffic: Traffic::Test,
        }
    }
}

impl From<u32> for PacketMeta {
    fn from(wire_len: u32) -> Self {
        PacketMeta::len(wire_len)
    }
}

/// Why a packet did not get through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DropReason {
    /// Random or Gilbert–Elliott loss.
    Loss,
    /// The queue was full (drop-tail; fq_codel drops from its fattest flow).
    Queue,
    /// The AQM (CoDel, fq_codel's CoDel, PIE) dropped it.
    Aqm,
    /// Larger than the MTU: a super-packet that was not segmented.
    Oversize,
    /// A policer found too few tokens for it.
    Police,
}

/// A packet the link dropped.
#[derive(Debug, PartialEq, Eq)]
pub struct Dropped<P> {
    pub packet: P,
    pub reason: DropReason,
    /// When, ns.
    pub at: u64,
}

/// A packet leaving the link.
#[derive(Debug, PartialEq, Eq)]
pub struct Delivered<P> {
    pub packet: P,
    pub wire_len: u32,
    /// The runtime should flip a bit of it.
    pub corrupt: bool,
    /// The runtime should mark it Congestion Experienced (an AQM with ECN).
    pub ce: bool,
    /// It left after a packet that entered after it.
    pub reordered: bool,
    /// When it was pushed, ns.
    pub pushed_at: u64,
    /// Time spent waiting in the bottleneck queue, ns.
    pub queue_delay: u64,
    /// When it was due out (≤ the `now` of the pop), ns.
    pub due: u64,
    /// Whose it is, as pushed.
    pub traffic: Traffic,
}

/// The traces a direction's spec names, parsed: what [`Link::new`] takes besides the
/// spec. [`load`](Self::load) builds them; an empty one suits a spec that names none.
#[derive(Clone, Debug, Default)]
pub struct LinkTraces {
    pub rate: Option<Trace>,
    /// One-way delays, µs.
    pub delay: Option<StepTrace<u64>>,
    pub loss: Option<StepTrace<Prob>>,
}

/// A trace file that could not be read or parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFileError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for TraceFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace {}: {}", self.path, self.message)
    }
}

impl std::error::Error for TraceFileError {}

impl LinkTraces {
    /// Each trace `spec` names, its text from `read` (the caller's I/O), parsed.
    pub fn load(
        spec: &LinkSpec,
        mut read: impl FnMut(&str) -> std::io::Result<String>,
    ) -> Result<LinkTraces, TraceFileError> {
        let rate = match &spec.bottleneck {
            Bottleneck::Trace { path } => Some(read_trace(path, &mut read, Trace::parse)?),
            _ => None,
        };
        let delay = match &spec.delay_trace {
            Some(d) => Some(read_trace(&d.path, &mut read, StepTrace::parse_delays)?),
            None => None,
        };
        let loss = match &spec.loss_trace {
            Some(path) => Some(read_trace(path, &mut read, StepTrace::parse_losses)?),
            None => None,
        };
        Ok(LinkTraces { rate, delay, loss })
    }
}

fn read_trace<T>(
    path: &str,
    read: &mut impl FnMut(&str) -> std::io::Result<String>,
    parse: fn(&str) -> Result<T, TraceError>,
) -> Result<T, TraceFileError> {
    let fail = |message: String| TraceFileError {
        path: path.to_owned(),
        message,
    };
    let text = read(path).map_err(|e| fail(e.to_string()))?;
    parse(&text).map_err(|e| fail(e.to_string()))
}

/// Why a link could not be built from its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// The spec names a trace file but no trace was given.
    MissingTrace { path: String },
    /// A trace was given but the spec has none.
    UnexpectedTrace,
    /// A queue in BDP needs a fixed rate.
    BdpWithoutRate,
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::MissingTrace { path } => write!(f, "trace {path}: not loaded"),
            LinkError::UnexpectedTrace => f.write_str("a trace was given but the spec has none"),
            LinkError::BdpWithoutRate => f.write_str("a queue in bdp needs a fixed rate"),
        }
    }
}

impl std::error::Error for LinkError {}

/// netem's `gemodel` state, or plain random loss.
#[derive(Debug)]
enum LossState {
    None,
    Random(u32),
    GilbertElliott {
        p: u32,
        r: u32,
        loss_bad: u32,
        loss_good: u32,
        bad: bool,
    },
}

impl LossState {
    fn of(loss: &Loss) -> LossState {
        match *loss {
            Loss::None => LossState::None,
            Loss::Random(p) => LossState::Random(p.ppb()),
            Loss::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => LossState::GilbertElliott {
                p: p.ppb(),
                r: r.ppb(),
                loss_bad: loss_bad.ppb(),
                loss_good: loss_good.ppb(),
                bad: false,
            },
        }
    }
}

#[derive(Debug)]
struct ReorderState {
    prob: f64,
    correlation: f64,
    gap: u32,
    /// Packets delayed since the last early one.
    counter: u32,
    last: f64,
}

impl ReorderState {
    fn of(reorder: &Option<crate::path::Reorder>, rng: &mut ChaCha8Rng) -> Option<ReorderState> {
        reorder.map(|r| ReorderState {
            prob: r.prob.as_f64(),
            correlation: r.correlation.as_f64(),
            gap: r.gap.max(1),
            counter: 0,
            last: rng.random(),
        })
    }
}

/// A token bucket: tokens in bit·ns (bits × 10⁹), so that refilling at `bps` over whole
/// nanoseconds is exact.
#[derive(Debug)]
struct Policer {
    bps: u64,
    capacity: u128,
    tokens: u128,
    /// When the bucket was last filled, ns.
    filled_at: u64,
}

impl Policer {
    /// Full, as tc's is when it starts.
    fn new(p: crate::path::Police) -> Policer {
        let capacity = u128::from(p.burst_bytes) * 8 * 1_000_000_000;
        Policer {
            bps: p.bps,
            capacity,
            tokens: capacity,
            filled_at: 0,
        }
    }

    fn fill(&mut self, now: u64) {
        let elapsed = u128::from(now.saturating_sub(self.filled_at));
        self.tokens = (self.tokens + elapsed * u128::from(self.bps)).min(self.capacity);
        self.filled_at = now;
    }

    /// Whether a packet of `len` bytes at `now` finds its tokens, taking them if so.
    fn conforms(&mut self, now: u64, len: u32) -> bool {
        self.fill(now);
        let cost = u128::from(len) * 8 * 1_000_000_000;
        if cost > self.tokens {
            return false;
        }
        self.tokens -= cost;
        true
    }

    /// A new rate and bucket from `now`, keeping the tokens the bucket can hold.
    fn retune(&mut self, now: u64, p: crate::path::Police) {
        self.fill(now);
        self.bps = p.bps;
        self.capacity = u128::from(p.burst_bytes) * 8 * 1_000_000_000;
        self.tokens = self.tokens.min(self.capacity);
    }
}

/// Who empties the queue.
#[derive(Debug)]
enum Server {
    Unlimited,
    Rate {
        bps: u64,
        overhead: u32,
        /// The remainder of ⌊bits · 10⁹ / bps⌋, so back-to-back packets never drift.
        carry: u128,
    },
    Trace {
        trace: Trace,
        /// The next opportunity, valid while the link is busy.
        cursor: TraceCursor,
    },
}

/// The packet being serialized.
#[derive(Debug)]
struct InService<P> {
    q: Queued<P>,
    queue_delay: u64,
    /// Rate: when the last bit is out.
    done_at: u64,
    /// Trace: bytes still to send.
    remaining: u32,
}

/// A packet on the wire, due at `due`; the heap pops the smallest (due, seq).
#[derive(Debug)]
struct InFlight<P> {
    due: u64,
    seq: u64,
    q: Queued<P>,
    queue_delay: u64,
}

impl<P> PartialEq for InFlight<P> {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl<P> Eq for InFlight<P> {}
impl<P> PartialOrd for InFlight<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for InFlight<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// The packets on the wire, popped in (due, seq) order. Without reordering they are
/// pushed in that order (dues never go backwards), so a FIFO gives the heap's order
/// at O(1): at 10 Gbit/s and 20 ms some 17 000 packets are on the wire, and the heap's
/// pops were 8 % of the emulator's time.
#[derive(Debug)]
enum Wire<P> {
    Fifo(VecDeque<InFlight<P>>),
    Heap(BinaryHeap<InFlight<P>>),
}

impl<P> Wire<P> {
    fn new(reorders: bool) -> Self {
        if reorders {
            Wire::Heap(BinaryHeap::with_capacity(64))
        } else {
            Wire::Fifo(VecDeque::with_capacity(64))
        }
    }

    fn push(&mut self, f: InFlight<P>) {
        match self {
            Wire::Fifo(q) => {
                debug_assert!(q.back().is_none_or(|b| (b.due, b.seq) < (f.due, f.seq)));
                q.push_back(f)
            }
            Wire::Heap(h) => h.push(f),
        }
    }

    fn peek(&self) -> Option<&InFlight<P>> {
        match self {
            Wire::Fifo(q) => q.front(),
            Wire::Heap(h) => h.peek(),
        }
    }

    fn pop(&mut self) -> Option<InFlight<P>> {
        match self {
            Wire::Fifo(q) => q.pop_front(),
            Wire::Heap(h) => h.pop(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Wire::Fifo(q) => q.len(),
            Wire::Heap(h) => h.len(),
        }
    }
}

/// One direction of the path; see the [module docs](self).
#[derive(Debug)]
pub struct Link<P> {
    delay_ns: u64,
    jitter: Option<Jitter>,
    /// Delay added over time (µs), from the test's start.
    delay_trace: Option<StepTrace<u64>>,
    /// Packets may overtake each other: the jitter or the delay trace lets them.
    reorders: bool,
    loss: LossState,
    /// Loss over time, besides `loss`, from the test's start.
    loss_trace: Option<StepTrace<Prob>>,
    duplicate: u32,
    corrupt: u32,
    reorder: Option<ReorderState>,
    server: Server,
    limit: Limit,
    policer: Option<Policer>,
    mtu: u32,
    rng: ChaCha8Rng,

    now: u64,
    queue: Scheduler<P>,
    in_service: Option<InService<P>>,
    wire: Wire<P>,
    dropped: VecDeque<Dropped<P>>,
    next_seq: u64,
    /// The highest seq delivered, to count reordering.
    max_delivered: Option<u64>,
    /// Without reordering jitter no packet is due before this.
    last_due: u64,
    /// Per kind of traffic ([`Traffic::index`]); the queue's figures are its packets'.
    counters: [LinkCounters; Traffic::COUNT],
    /// The most the queue held at once, all traffic together.
    max_queue_bytes: u64,

    /// The settings over the test, those in force now, and when the schedule changes
    /// them next (ns on the link's clock, once the test has started).
    timeline: Timeline,
    settings: LinkSpec,
    next_change: Option<u64>,
    /// When the test started (the schedule's 0), ns on the link's clock.
    origin: Option<u64>,
    /// Sizes a queue given in BDP.
    path_rtt_us: u64,
    /// Its schedule changes its rate: its capacity over time is worth sampling.
    rate_scheduled: bool,
}

fn roll(rng: &mut ChaCha8Rng, ppb: u32) -> bool {
    ppb != 0 && rng.random_range(0..Prob::SCALE) < ppb
}

impl<P> Link<P> {
    /// A link for one direction, with its settings over the test
    /// ([`PathSpec::timeline`](crate::path::PathSpec::timeline)). `path_rtt_us` sizes a
    /// queue given in BDP; `traces` are the parsed files the spec names
    /// ([`LinkTraces::load`]).
    pub fn new(
        timeline: &Timeline,
        path_rtt_us: u64,
        mtu: u32,
        seed: u64,
        traces: LinkTraces,
    ) -> Result<Self, LinkError> {
        let spec = timeline.base();
        // Destructured whole: a new setting does not compile until the link decides.
        let LinkSpec {
            delay_us,
            jitter,
            loss,
            duplicate,
            corrupt,
            reorder,
            bottleneck,
            queue: _, // through `spec.queue_limit`, which sizes a queue in BDP
            aqm,
            police,
            // The gap pacer is a hop of its own before the bottleneck (the lab's).
            pace: _,
            delay_trace,
            loss_trace,
            // The sending hosts' interface queue: the lab sets their device's.
            txqueuelen: _,
        } = spec;
        let LinkTraces {
            rate: rate_trace,
            delay: delays,
            loss: losses,
        } = traces;
        for (named, given) in [
            (delay_trace.as_ref().map(|d| &d.path), delays.is_some()),
            (loss_trace.as_ref(), losses.is_some()),
        ] {
            match (named, given) {
                (Some(path), false) => return Err(LinkError::MissingTrace { path: path.clone() }),
                (None, true) => return Err(LinkError::UnexpectedTrace),
                _ => {}
            }
        }
        let server = match (bottleneck, rate_trace) {
            (Bottleneck::Trace { path }, None) => {
                return Err(LinkError::MissingTrace { path: path.clone() })
            }
            (Bottleneck::Trace { .. }, Some(trace)) => Server::Trace {
                trace,
                cursor: TraceCursor::default(),
            },
            (_, Some(_)) => return Err(LinkError::UnexpectedTrace),
            (Bottleneck::Unlimited, None) => Server::Unlimited,
            (&Bottleneck::Rate { bps, overhead }, None) => Server::Rate {
                bps,
                overhead,
                carry: 0,
            },
        };
        let limit = spec
            .queue_limit(path_rtt_us)
            .ok_or(LinkError::BdpWithoutRate)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let reorder_state = ReorderState::of(reorder, &mut rng);
        // The wire keeps time order unless some settings of the test reorder.
        let reorders_ever = timeline
            .specs()
            .any(|s| s.reorder.is_some() || s.delay_reorders());
        Ok(Link {
            delay_ns: delay_us * NS_PER_US,
            jitter: *jitter,
            delay_trace: delays,
            reorders: spec.delay_reorders(),
            loss: LossState::of(loss),
            loss_trace: losses,
            duplicate: duplicate.ppb(),
            corrupt: corrupt.ppb(),
            reorder: reorder_state,
            server,
            limit,
            policer: police.map(Policer::new),
            mtu,
            rng,
            now: 0,
            queue: Scheduler::new(aqm, mtu),
            in_service: None,
            wire: Wire::new(reorders_ever),
            dropped: VecDeque::new(),
            next_seq: 0,
            max_delivered: None,
            last_due: 0,
            counters: Default::default(),
            max_queue_bytes: 0,
            timeline: timeline.clone(),
            settings: spec.clone(),
            next_change: None,
            origin: None,
            path_rtt_us,
            rate_scheduled: timeline.specs().any(|s| s.bottleneck != spec.bottleneck),
        })
    }

    /// The test started at `origin`: the schedule's times count from there, its changes
    /// applying at their times to the next packets. Only the first call counts; an
    /// origin the link has passed already takes effect from the link's time.
    pub fn start_schedule(&mut self, origin: u64) {
        if self.origin.is_some() {
            return;
        }
        let now = origin.max(self.now);
        self.advance(now);
        self.origin = Some(origin);
        self.follow_schedule(now);
    }

    /// The settings in force at `t`, and when they change next.
    fn follow_schedule(&mut self, t: u64) {
        let Some(origin) = self.origin else { return };
        let (settings, next) = self.timeline.at((t - origin) / NS_PER_US);
        let settings = settings.clone();
        self.next_change = next.map(|us| origin + us * NS_PER_US);
        if settings != self.settings {
            self.retune(&settings, t);
        }
    }

    /// The link takes `spec` at `t`: the packets inside keep their place and their
    /// fate so far (one being serialized finishes at the old rate), what comes next
    /// meets the new settings.
    fn retune(&mut self, spec: &LinkSpec, t: u64) {
        // Destructured whole: a new setting does not compile until a step decides.
        let LinkSpec {
            delay_us,
            jitter,
            loss,
            duplicate,
            corrupt,
            reorder,
            bottleneck,
            queue,
            aqm,
            police,
            pace: _,        // the pacer's own hop follows its own timeline
            delay_trace: _, // its own schedule, fixed
            loss_trace: _,  // the same
            txqueuelen: _,  // the hosts', fixed
        } = spec;
        self.delay_ns = delay_us * NS_PER_US;
        self.jitter = *jitter;
        self.reorders = spec.delay_reorders();
        if *loss != self.settings.loss {
            self.loss = LossState::of(loss);
        }
        self.duplicate = duplicate.ppb();
        self.corrupt = corrupt.ppb();
        if *reorder != self.settings.reorder {
            self.reorder = ReorderState::of(reorder, &mut self.rng);
        }
        if let (
            Server::Rate {
                bps,
                overhead,
                carry,
            },
            &Bottleneck::Rate {
                bps: new_bps,
                overhead: new_overhead,
            },
        ) = (&mut self.server, bottleneck)
        {
            if *bps != new_bps {
                // The carry is a remainder of the old rate's division.
                *carry = 0;
            }
            (*bps, *overhead) = (new_bps, new_overhead);
        }
        // A buffer is sized once: a step that leaves the queue alone keeps it, even in
        // BDP while the rate changes, as a router's buffer stays when its link slows.
        if *queue != self.settings.queue {
            if let Some(limit) = spec.queue_limit(self.path_rtt_us) {
                self.limit = limit;
            }
        }
        if *aqm != self.settings.aqm {
            self.queue.retune(aqm);
        }
        if *police != self.settings.police {
            match (&mut self.policer, police) {
                (Some(policer), Some(p)) => policer.retune(t, *p),
                (policer, p) => *policer = p.map(Policer::new),
            }
        }
        self.settings = spec.clone();
        // A rate server an outage held idle starts again.
        if matches!(self.server, Server::Rate { .. }) {
            self.start_rate(t);
        }
    }

    /// One link of a lab in one direction: a queue in BDP sized over the lab's round
    /// trip for it, randomness drawn from that link's own stream of `lab_seed`.
    pub fn in_lab(
        lab: &Dumbbell,
        link: LinkRole,
        dir: Direction,
        lab_seed: u64,
        mtu: u32,
        traces: LinkTraces,
    ) -> Result<Self, LinkError> {
        Link::new(
            &lab.spec(link).timeline(dir),
            lab.bdp_rtt_us(link),
            mtu,
            link_seed(lab_seed, link, dir),
            traces,
        )
    }

    /// What happened to all the packets, whoever's.
    pub fn counters(&self) -> LinkCounters {
        let all = self
            .counters
            .iter()
            .fold(LinkCounters::default(), |all, c| all.plus(c));
        LinkCounters {
            max_queue_bytes: self.max_queue_bytes,
            ..all
        }
    }

    /// What happened to the packets of one kind of traffic; the queue's figures are
    /// the bytes and packets of that kind in it.
    pub fn counters_of(&self, traffic: Traffic) -> &LinkCounters {
        &self.counters[traffic.index()]
    }

    /// The resolved bottleneck buffer.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// Whether [`push`](Self::push) needs each packet's flow hash and ECN field (fq_codel,
    /// an AQM with ECN); otherwise [`PacketMeta::len`] is enough.
    pub fn needs_packet_meta(&self) -> bool {
        self.queue.needs_packet_meta()
    }

    /// Packets inside: queued, being serialized or on the wire.
    pub fn inside(&self) -> usize {
        self.queue.len() + usize::from(self.in_service.is_some()) + self.wire.len()
    }

    /// A packet arrives at `now` (`meta`: its IP length, flow and ECN). Call
    /// [`pop_dropped`](Self::pop_dropped) afterwards too: time moving on may have let
    /// the AQM drop queued packets.
    pub fn push(&mut self, now: u64, packet: P, meta: PacketMeta) -> PushOutcome<P> {
        let wire_len = meta.wire_len;
        self.advance(now);
        self.count_in(meta);
        if wire_len > self.mtu {
            return self.refuse(packet, meta, DropReason::Oversize);
        }
        // As netem: duplication is decided first, and a loss then takes one of the two
        // copies, so the packet goes on alone.
        let duplicate = roll(&mut self.rng, self.duplicate);
        if self.loss_event() {
            if !duplicate {
                return self.refuse(packet, meta, DropReason::Loss);
            }
            self.count_in(meta);
            let c = &mut self.counters[meta.traffic.index()];
            c.duplicated += 1;
            c.dropped_loss += 1;
            return match self.admit(packet, meta) {
                Ok(()) => PushOutcome::Accepted,
                Err(d) => PushOutcome::Dropped(d),
            };
        }
        match self.admit(packet, meta) {
            Ok(()) if duplicate => PushOutcome::Duplicate,
            Ok(()) => PushOutcome::Accepted,
            Err(d) => {
                if duplicate {
                    // netem drops the copy with the original when the queue is full.
                    self.count_in(meta);
                    let c = &mut self.counters[meta.traffic.index()];
                    c.duplicated += 1;
                    c.dropped_queue += 1;
                }
                PushOutcome::Dropped(d)
            }
        }
    }

    /// The copy asked for by [`PushOutcome::Duplicate`]. It faces loss again, as netem
    /// re-enqueues its clone, but is never duplicated itself.
    pub fn push_duplicate(&mut self, now: u64, packet: P, meta: PacketMeta) -> PushOutcome<P> {
        self.advance(now);
        self.count_in(meta);
        self.counters[meta.traffic.index()].duplicated += 1;
        if meta.wire_len > self.mtu {
            return self.refuse(packet, meta, DropReason::Oversize);
        }
        if self.loss_event() {
            return self.refuse(packet, meta, DropReason::Loss);
        }
        match self.admit(packet, meta) {
            Ok(()) => PushOutcome::Accepted,
            Err(d) => PushOutcome::Dropped(d),
        }
    }

    /// The next packet due by `now`, if any; call until `None`.
    pub fn pop(&mut self, now: u64) -> Option<Delivered<P>> {
        self.advance(now);
        if self.wire.peek()?.due > now {
            return None;
        }
        let f = self.wire.pop()?;
        let c = &mut self.counters[f.q.traffic.index()];
        c.delivered_packets += 1;
        c.marked_ce += u64::from(f.q.ce);
        c.delivered_bytes += u64::from(f.q.wire_len);
        let reordered = self.max_delivered.is_some_and(|max| f.seq < max);
        if reordered {
            c.reordered += 1;
        } else {
            self.max_delivered = Some(f.seq);
        }
        Some(Delivered {
            packet: f.q.packet,
            wire_len: f.q.wire_len,
            corrupt: f.q.corrupt,
            ce: f.q.ce,
            reordered,
            pushed_at: f.q.pushed_at,
            queue_delay: f.queue_delay,
            due: f.due,
            traffic: f.q.traffic,
        })
    }

    /// A packet the queue's discipline dropped inside the link, to be freed; call until
    /// `None` after each push or pop.
    pub fn pop_dropped(&mut self) -> Option<Dropped<P>> {
        self.dropped.pop_front()
    }

    /// The earliest time something happens inside: a serialization ends, an opportunity
    /// of a busy trace link comes, or a packet is due. `None` when the link is empty.
    pub fn next_deadline(&self) -> Option<u64> {
        let wire = self.wire.peek().map(|f| f.due);
        // A change matters now only to packets waiting; an empty link takes it with
        // its next packet.
        let waiting = self.in_service.is_some() || !self.queue.is_empty();
        let change = self.next_change.filter(|_| waiting);
        [self.server_deadline(), wire, change]
            .into_iter()
            .flatten()
            .min()
    }

    fn count_in(&mut self, meta: PacketMeta) {
        let c = &mut self.counters[meta.traffic.index()];
        c.packets_in += 1;
        c.bytes_in += u64::from(meta.wire_len);
    }

    fn refuse(&mut self, packet: P, meta: PacketMeta, reason: DropReason) -> PushOutcome<P> {
        self.counters[meta.traffic.index()].count_drop(reason);
        PushOutcome::Dropped(Dropped {
            packet,
            reason,
            at: self.now,
        })
    }

    /// netem's loss_event: the state's loss decides this packet, after the transition
    /// roll (netem draws the transition first but judges by the state it started in).
    fn loss_event(&mut self) -> bool {
        let netem = self.netem_loss_event();
        // Drawn after netem's, so that a spec without a trace draws as before.
        // Looked up only where there is a trace: this runs for every packet.
        let ppb = self
            .loss_trace
            .as_ref()
            .map(|trace| trace.at(self.since_start_us(self.now)).ppb());
        let traced = ppb.is_some_and(|ppb| roll(&mut self.rng, ppb));
        netem || traced
    }

    /// The time since the test's start at `t`, µs: where the delay and loss traces
    /// are; 0 before the start.
    fn since_start_us(&self, t: u64) -> u64 {
        self.origin
            .map_or(0, |origin| t.saturating_sub(origin) / NS_PER_US)
    }

    fn netem_loss_event(&mut self) -> bool {
        let rng = &mut self.rng;
        match &mut self.loss {
            LossState::None => false,
            LossState::Random(p) => roll(rng, *p),
            LossState::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
                bad,
            } => {
                if *bad {
                    if roll(rng, *r) {
                        *bad = false;
                    }
                    roll(rng, *loss_bad)
                } else {
                    if roll(rng, *p) {
                        *bad = true;
                    }
                    roll(rng, *loss_good)
                }
            }
        }
    }

    /// The policer, corruption, then the queue (or straight to the wire without a
    /// bottleneck).
    fn admit(&mut self, packet: P, meta: PacketMeta) -> Result<(), Dropped<P>> {
        if let Some(policer) = &mut self.policer {
            if !policer.conforms(self.now, meta.wire_len) {
                self.counters[meta.traffic.index()].count_drop(DropReason::Police);
                return Err(Dropped {
                    packet,
                    reason: DropReason::Police,
                    at: self.now,
                });
            }
        }
        let corrupt = roll(&mut self.rng, self.corrupt);
        if corrupt {
            self.counters[meta.traffic.index()].corrupted += 1;
        }
        let now = self.now;
        let q = Queued {
            packet,
            wire_len: meta.wire_len,
            corrupt,
            pushed_at: now,
            flow: meta.flow,
            ect: meta.ect,
            ce: false,
            traffic: meta.traffic,
        };
        if matches!(self.server, Server::Unlimited) {
            self.transmitted(q, 0, now);
            return Ok(());
        }
        let idle = self.in_service.is_none() && self.queue.is_empty();
        // A packet that finds the link idle is never refused by the limit.
        let limit = if idle {
            Limit::Packets(u64::MAX)
        } else {
            self.limit
        };
        // Counted in first: fq_codel may drop it (or others) on the way in.
        self.counters[meta.traffic.index()].enqueued(meta.wire_len);
        let (dropped, counters) = (&mut self.dropped, &mut self.counters);
        let refused = self
            .queue
            .enqueue(now, q, limit, &mut self.rng, &mut |(q, reason)| {
                Self::dropped_from_queue(counters, &q, reason);
                dropped.push_back(Dropped {
                    packet: q.packet,
                    reason,
                    at: now,
                });
            });
        if let Err((q, reason)) = refused {
            Self::dropped_from_queue(&mut self.counters, &q, reason);
            self.sync_queue_counters();
            return Err(Dropped {
                packet: q.packet,
                reason,
                at: now,
            });
        }
        if idle {
            match &mut self.server {
                Server::Rate { .. } => self.start_rate(now),
                Server::Trace { trace, cursor } => *cursor = trace.first_after(now),
                Server::Unlimited => unreachable!("handled above"),
            }
        }
        self.sync_queue_counters();
        Ok(())
    }

    /// A queued packet (or one counted in as queued) dropped for `reason`.
    fn dropped_from_queue(
        counters: &mut [LinkCounters; Traffic::COUNT],
        q: &Queued<P>,
        reason: DropReason,
    ) {
        let c = &mut counters[q.traffic.index()];
        c.dequeued(q.wire_len);
        c.count_drop(reason);
    }

    /// The queue's peaks, all traffic's and each kind's, after it changed.
    fn sync_queue_counters(&mut self) {
        debug_assert_eq!(
            self.counters.iter().map(|c| c.queue_bytes).sum::<u64>(),
            self.queue.bytes()
        );
        self.max_queue_bytes = self.max_queue_bytes.max(self.queue.bytes());
        for c in &mut self.counters {
            c.max_queue_bytes = c.max_queue_bytes.max(c.queue_bytes);
        }
    }

    /// The next packet to serialize at `now`, through the queue's discipline.
    fn dequeue(&mut self, now: u64) -> Option<Queued<P>> {
        let (dropped, counters) = (&mut self.dropped, &mut self.counters);
        let q = self.queue.dequeue(now, &mut |(q, reason)| {
            Self::dropped_from_queue(counters, &q, reason);
            dropped.push_back(Dropped {
                packet: q.packet,
                reason,
                at: now,
            });
        });
        if let Some(q) = &q {
            self.counters[q.traffic.index()].dequeued(q.wire_len);
        }
        self.sync_queue_counters();
        q
    }

    /// What a link whose capacity changes offers after `from_ns` up to `to_ns`, bytes,
    /// used or not: a trace's opportunities, or a rate as its schedule sets it (before
    /// the test's start, its own); `None` for a link whose capacity is fixed.
    pub fn offered_bytes(&self, from_ns: u64, to_ns: u64) -> Option<u64> {
        match &self.server {
            Server::Trace { trace, .. } => Some(trace.offered_bytes(from_ns, to_ns)),
            Server::Rate { .. } if self.rate_scheduled => {
                Some(self.scheduled_bytes(from_ns, to_ns))
            }
            Server::Rate { .. } | Server::Unlimited => None,
        }
    }

    /// The bytes a rate link's schedule offers after `from_ns` up to `to_ns`.
    fn scheduled_bytes(&self, from_ns: u64, to_ns: u64) -> u64 {
        // bit/s × ns, summed piece by piece between changes.
        let mut bit_ns: u128 = 0;
        let mut t = from_ns;
        while t < to_ns {
            let (spec, next) = match self.origin {
                Some(origin) if t >= origin => {
                    let (spec, next) = self.timeline.at((t - origin) / NS_PER_US);
                    (spec, next.map(|us| origin + us * NS_PER_US))
                }
                Some(origin) => (self.timeline.base(), Some(origin)),
                None => (self.timeline.base(), None),
            };
            let end = next.map_or(to_ns, |n| n.min(to_ns));
            if let Bottleneck::Rate { bps, .. } = spec.bottleneck {
                bit_ns += u128::from(bps) * u128::from(end - t);
            }
            t = end;
        }
        (bit_ns / 8_000_000_000) as u64
    }

    fn server_deadline(&self) -> Option<u64> {
        match &self.server {
            Server::Unlimited => None,
            Server::Rate { .. } => self.in_service.as_ref().map(|s| s.done_at),
            Server::Trace { trace, cursor } => (self.in_service.is_some()
                || !self.queue.is_empty())
            .then(|| trace.time_ns(*cursor)),
        }
    }

    /// Runs every internal event up to `now`, in time order.
    fn advance(&mut self, now: u64) {
        debug_assert!(now >= self.now, "time went backwards: {now} < {}", self.now);
        let now = now.max(self.now);
        loop {
            let server = self.server_deadline().filter(|&t| t <= now);
            // A change at a packet's time applies to it: changes go first.
            if let Some(change) = self
                .next_change
                .filter(|&c| c <= now && server.is_none_or(|s| c <= s))
            {
                self.now = change;
                self.follow_schedule(change);
                continue;
            }
            let Some(t) = server else { break };
            // Events happen at their own time, not at the time we noticed them.
            self.now = t;
            match self.server {
                Server::Rate { .. } => {
                    let s = self
                        .in_service
                        .take()
                        .expect("a rate deadline has a packet");
                    self.transmitted(s.q, s.queue_delay, t);
                    self.start_rate(t);
                }
                Server::Trace { .. } => self.opportunity(t),
                Server::Unlimited => unreachable!("no deadline"),
            }
        }
        self.now = now;
    }

    /// The rate serving the queue at `t` (ns, not before the link's last event) as the
    /// path and its schedule set it, bit/s: 0 in an outage, `None` for a trace or no
    /// limit.
    pub fn rate_bps_at(&self, t: u64) -> Option<u64> {
        let spec = match self.origin {
            Some(origin) if self.rate_scheduled && t >= origin => {
                self.timeline.at((t - origin) / NS_PER_US).0
            }
            _ => &self.settings,
        };
        match spec.bottleneck {
            Bottleneck::Rate { bps, .. } => Some(bps),
            Bottleneck::Trace { .. } | Bottleneck::Unlimited => None,
        }
    }

    /// Changes a rate link's rate from the next packet on (a dynamic pacer follows its
    /// flow); no effect on a trace or unlimited link, or for a rate of 0.
    pub fn set_rate(&mut self, new_bps: u64) {
        if let Server::Rate { bps, .. } = &mut self.server {
            if new_bps > 0 {
                *bps = new_bps;
            }
        }
    }

    /// Starts serializing the next packet at `t` if the rate server is free and not in
    /// an outage (rate 0).
    fn start_rate(&mut self, t: u64) {
        if self.in_service.is_some() || matches!(self.server, Server::Rate { bps: 0, .. }) {
            return;
        }
        let next = self.dequeue(t);
        let Server::Rate {
            bps,
            overhead,
            carry,
        } = &mut self.server
        else {
            unreachable!("rate server")
        };
        let Some(q) = next else {
            // Idle: the next packet starts on its own arrival time.
            *carry = 0;
            return;
        };
        let bits = u128::from(q.wire_len + *overhead) * 8;
        let scaled = bits * 1_000_000_000 + *carry;
        let tx_ns = (scaled / u128::from(*bps)) as u64;
        *carry = scaled % u128::from(*bps);
        self.in_service = Some(InService {
            queue_delay: t - q.pushed_at,
            q,
            done_at: t + tx_ns,
            remaining: 0,
        });
    }

    /// One trace opportunity at `t`: 1500 bytes for the packet in service and then the
    /// next ones, as mahimahi's `rationalize`; unused bytes are lost.
    fn opportunity(&mut self, t: u64) {
        if let Server::Trace { trace, cursor } = &mut self.server {
            *cursor = trace.next(*cursor);
        }
        let mut budget = OPPORTUNITY_BYTES;
        loop {
            if self.in_service.is_none() {
                let Some(q) = self.dequeue(t) else { break };
                self.in_service = Some(InService {
                    queue_delay: t - q.pushed_at,
                    remaining: q.wire_len,
                    q,
                    done_at: 0,
                });
            }
            let s = self.in_service.as_mut().expect("just filled");
            if s.remaining > budget {
                s.remaining -= budget;
                break;
            }
            budget -= s.remaining;
            let s = self.in_service.take().expect("just filled");
            self.transmitted(s.q, s.queue_delay, t);
            if budget == 0 {
                break;
            }
        }
    }

    /// The last bit left the bottleneck at `t`: propagation, jitter and reorder.
    fn transmitted(&mut self, q: Queued<P>, queue_delay: u64, t: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let due = if self.sent_early() {
            t
        } else {
            let mut due = t + self.propagation_delay(t);
            if !self.reorders {
                due = due.max(self.last_due);
                self.last_due = due;
            }
            due
        };
        self.wire.push(InFlight {
            due,
            seq,
            q,
            queue_delay,
        });
    }

    /// netem's reorder: after `gap - 1` delayed packets, each goes out without the delay
    /// with the (correlated) probability.
    fn sent_early(&mut self) -> bool {
        let Some(r) = &mut self.reorder else {
            return false;
        };
        if r.counter + 1 < r.gap {
            r.counter += 1;
            return false;
        }
        let fresh: f64 = self.rng.random();
        let u = (1.0 - r.correlation) * fresh + r.correlation * r.last;
        r.last = u;
        if u < r.prob {
            r.counter = 0;
            true
        } else {
            r.counter += 1;
            false
        }
    }

    /// The delay of a packet leaving the bottleneck at `t`: the fixed delay, the
    /// trace's then, plus a jitter draw, never below zero.
    fn propagation_delay(&mut self, t: u64) -> u64 {
        let traced = self
            .delay_trace
            .as_ref()
            .map_or(0, |trace| trace.at(self.since_start_us(t)) * NS_PER_US);
        let delay_ns = self.delay_ns + traced;
        let Some(j) = self.jitter else {
            return delay_ns;
        };
        let u: f64 = self.rng.random();
        let offset = dist::offset(j.dist, u) * (j.jitter_us * NS_PER_US) as f64;
        (delay_ns as f64 + offset).max(0.0).round() as u64
    }
}

/// The link's own bookkeeping of its counters, packet by packet.
trait Tally {
    fn enqueued(&mut self, wire_len: u32);
    fn dequeued(&mut self, wire_len: u32);
    fn count_drop(&mut self, reason: DropReason);
}

impl Tally for LinkCounters {
    /// The packet came into the queue.
    fn enqueued(&mut self, wire_len: u32) {
        self.queue_packets += 1;
        self.queue_bytes += u64::from(wire_len);
    }

    /// The packet left the queue (served or dropped).
    fn dequeued(&mut self, wire_len: u32) {
        self.queue_packets -= 1;
        self.queue_bytes -= u64::from(wire_len);
    }

    fn count_drop(&mut self, reason: DropReason) {
        match reason {
            DropReason::Loss => self.dropped_loss += 1,
            DropReason::Queue => self.dropped_queue += 1,
            DropReason::Aqm => self.dropped_aqm += 1,
            DropReason::Oversize => self.dropped_oversize += 1,
            DropReason::Police => self.dropped_police += 1,
        }
    }
}

#[cfg(test)]
mod wire_tests {
    use super::*;
    use crate::path::PathSpec;

    /// A delivered packet: its id, due time, queue delay and whether it was reordered.
    type Out = (u64, u64, u64, bool);

    /// What a link delivers and drops for the same arrivals and pop times.
    fn run(mut link: Link<u64>, seed: u64) -> (Vec<Out>, Vec<u64>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut delivered, mut dropped) = (Vec::new(), Vec::new());
        let mut now = 0;
        for id in 0..20_000u64 {
            // Bursts and gaps: GSO-like trains of up to 44 packets, then a pause.
            now += if rng.random_range(0..44) == 0 {
                rng.random_range(0..2_000_000)
            } else {
                rng.random_range(0..300)
            };
            while let Some(d) = link.pop(now) {
                delivered.push((d.packet, d.due, d.queue_delay, d.reordered));
            }
            let len = [64, 1500, 1514][rng.random_range(0..3)];
            match link.push(now, id, PacketMeta::len(len)) {
                PushOutcome::Dropped(d) => dropped.push(d.packet),
                PushOutcome::Duplicate => {
                    if let PushOutcome::Dropped(d) =
                        link.push_duplicate(now, id | 1 << 40, PacketMeta::len(len))
                    {
                        dropped.push(d.packet);
                    }
                }
                PushOutcome::Accepted => {}
            }
            while let Some(d) = link.pop_dropped() {
                dropped.push(d.packet);
            }
        }
        while let Some(due) = link.next_deadline() {
            while let Some(d) = link.pop(due) {
                delivered.push((d.packet, d.due, d.queue_delay, d.reordered));
            }
            while let Some(d) = link.pop_dropped() {
                dropped.push(d.packet);
            }
        }
        (delivered, dropped)
    }

    /// The FIFO wire of a link that does not reorder delivers exactly what the heap
    /// delivers, packet for packet and nanosecond for nanosecond.
    #[test]
    fn a_fifo_wire_delivers_what_the_heap_does() {
        for spec in [
            "rtt 20ms rate 10gbit queue 1bdp",
            "rtt 20ms loss 0.01%",
            "rtt 2ms rate 1gbit queue 100 loss 1% duplicate 1% corrupt 1%",
            "delay 5ms jitter 1ms rate 100mbit queue 30",
            "rtt 10ms rate 100mbit queue 1bdp aqm fq_codel",
        ] {
            let path: PathSpec = spec.parse().unwrap();
            let make = || {
                Link::<u64>::new(
                    &path.timeline(Direction::Up),
                    path.rtt_us(),
                    path.mtu,
                    7,
                    LinkTraces::default(),
                )
                .unwrap()
            };
            let fifo = make();
            assert!(matches!(fifo.wire, Wire::Fifo(_)), "{spec}");
            let mut heap = make();
            heap.wire = Wire::Heap(BinaryHeap::new());
            let (a, b) = (run(fifo, 3), run(heap, 3));
            assert!(a.0.len() > 1000, "{spec}: {} delivered", a.0.len());
            assert_eq!(a, b, "{spec}");
        }
        let reordering: PathSpec = "delay 5ms jitter 1ms reorder".parse().unwrap();
        let link = Link::<u64>::new(
            &reordering.timeline(Direction::Up),
            reordering.rtt_us(),
            1500,
            7,
            LinkTraces::default(),
        )
        .unwrap();
        assert!(matches!(link.wire, Wire::Heap(_)));
    }
}
