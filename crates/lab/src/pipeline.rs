//! One thread of the emulator, binding link models to TUN devices in real time.
//!
//! Packets read from the ingress devices pass through the links of their route (an
//! access link, then the shared bottleneck, or the reverse; any chain of a topology's)
//! and are written to an egress device when the last link delivers them. The links are the sans-IO models of
//! `tcplab_netsim::link`; this loop only reads the clock, moves buffers and sleeps until
//! the next deadline.
//!
//! Where any link of the direction applies a per-packet effect, GSO super-packets
//! from the kernel are segmented into wire-size packets before the first link, and
//! consecutive segments of a flow are coalesced again on the way out (GRO-style), so
//! the receiving kernel's per-packet cost does not cap the emulator. Where no link
//! does (delay only), super-packets pass through whole.

use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;
use tcplab_analysis::burst::BurstMeter;
use tcplab_analysis::delay::DelayMeter;
use tcplab_analysis::hop::HopMeter;
use tcplab_netsim::capture::Fate;
use tcplab_netsim::link::{Link, PacketMeta, PushOutcome};
use tcplab_netsim::packet::{
    finish_checksum, is_ect, set_ce, Coalescer, CsumMode, FlowKey, PacketInfo, Segmenter,
    Transport, VirtioNetHdr, MAX_COALESCE_SEGMENTS, MAX_SEGMENT_HEAD,
};
use tcplab_netsim::traffic::{Classifier, TestStart};
use tcplab_record::traffic::Traffic;
use tcplab_record::{CapacitySample, DelayQuantiles, DirectionStats, Lateness, NamedCounters};
use tcplab_sys::clock::monotonic_ns;
use tcplab_sys::cpu::CpusAwake;
use tcplab_sys::poll::Waker;
use tcplab_sys::tun::{Tun, MAX_PACKET};

use crate::capture::Tap;
use crate::pool::{segmenter, write_segment, BufId, Bytes, Pool};

/// Packets read from one device before looking at the links again.
const READ_BATCH: usize = 64;
/// How often the loop publishes its counters.
const PUBLISH_EVERY_NS: u64 = 20_000_000;
/// How often the capture taps hand a part-filled batch to their writer (a full one goes
/// at once): each hand-over takes one of the writer's queued places whatever it holds,
/// so a writer kept off the CPU (a loaded machine) overflows sooner the more often.
const CAPTURE_FLUSH_EVERY_NS: u64 = 200_000_000;
/// How often a publication recomputes the lateness quantiles: a walk over the whole
/// histogram, ~0.5 ms in a debug build — at every publication, 5 % of a CPU for an idle
/// lab and more under load, taken from the emulator and the flows it carries.
const LATENESS_EVERY_NS: u64 = 1_000_000_000;
/// Real-time priority of the emulator threads (SCHED_FIFO, 1–99).
const RT_PRIORITY: i32 = 10;
/// Shortest sleep. A wake-up costs several µs of CPU (in a VM, timer exits made them
/// half the emulator's time at 1 Gbit/s), so deadlines closer than this share one, at
/// the price of at most this much lateness. Measured here at 1 Gbit/s (lateness p99,
/// data direction): per-packet wake-ups 35 ms (the loop saturated), 20 µs floor 81–91
/// µs, 10 µs floor 59–66 µs, 5 µs floor costs throughput. Spinning through the last
/// 30–60 µs instead made p50 1 µs but kept the data direction's thread ~90 % busy, past
/// the kernel's real-time budget (`sched_rt_runtime_us`, 95 % of a CPU): throttled for
/// up to 50 ms a second, its p99 went to milliseconds.
const MIN_SLEEP_NS: u64 = 10_000;
/// Longest sleep at normal priority: the kernel lets `ppoll` wake a thread that is not
/// real-time up to 0.1 % of its timeout late (`select_estimate_accuracy`), 20 µs for
/// the 20 ms between publications; in steps of 1 ms, at most 1 µs, for 1000 wake-ups a
/// second of an idle lab. Real-time threads get no slack.
const NORMAL_PRIORITY_MAX_SLEEP_NS: u64 = 1_000_000;
/// How late a read may stamp a packet while the loop watches its devices: one wake-up
/// after the packet came. Measured on a 2-vCPU VM, the loop's timer wake-ups come 15 µs
/// late at the median, 23–28 µs at p90; a packet's read lags its capture on the sending
/// side 15 µs at the median, 34 at p90.
const READ_LAG_NS: u64 = 25_000;

/// Where a packet goes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Into the link with this index.
    Hop(usize),
    /// Out through the egress device with this index.
    Egress(usize),
    /// Along the packet's path, by its source and destination ([`DirectionPlan::paths`]):
    /// the stage after hop `after`, or the path's first from an ingress device.
    Path { after: Option<usize> },
    /// Into hop `hop` of another thread, through its [`Inbox`] (`outboxes[thread]`).
    Handoff { thread: usize, hop: usize },
}

/// A packet one thread hands another: its bytes as they would be written to a device
/// (a segment whole, with its own virtio header), and when it is due at the hop.
pub struct Handed {
    bytes: Vec<u8>,
    at: u64,
    arrived: u64,
    hop: usize,
    wire_len: u32,
    traffic: Traffic,
}

/// The packets handed to one thread, and what wakes it when there are some.
pub struct Inbox {
    handed: Mutex<Vec<Handed>>,
    waker: Waker,
}

impl Inbox {
    pub fn new() -> io::Result<Inbox> {
        Ok(Inbox {
            handed: Mutex::default(),
            waker: Waker::new()?,
        })
    }

    fn push(&self, packet: Handed) {
        self.handed.lock().expect("inbox lock").push(packet);
    }

    /// Everything handed so far. The waker is taken first: a packet handed after it is
    /// taken here or wakes the thread again.
    fn take(&self, into: &mut Vec<Handed>) {
        self.waker.take();
        std::mem::swap(into, &mut self.handed.lock().expect("inbox lock"));
    }
}

pub struct Hop {
    /// For counters: e.g. "bottleneck" or "access client2".
    pub name: String,
    pub link: Link<BufId>,
    pub then: Target,
    /// Measures the burstiness of what enters the link and its queue over time.
    pub meter: Option<BurstMeter>,
    /// What each flow met on the link, and its queue over time (a topology's links).
    pub hop_meter: Option<HopMeter>,
    /// A rate set from outside (a dynamic pacer's target, bit/s; 0 = none yet).
    pub rate_control: Option<Arc<AtomicU64>>,
    /// Records what enters the link and its fate (`--capture`).
    pub capture: Option<Tap>,
}

/// How often a metered link's queue occupancy is recorded.
pub const QUEUE_SAMPLE_NS: u64 = 1_000_000;
/// How often the capacity of a bottleneck that changes (a trace, a rate on a schedule)
/// is sampled: a trace's own resolution is a millisecond, far finer than a throughput
/// chart's.
const CAPACITY_SAMPLE_NS: u64 = 100_000_000;

/// Everything one direction's thread owns.
pub struct DirectionPlan {
    pub ingress: Vec<(Arc<Tun>, Target)>,
    pub hops: Vec<Hop>,
    /// Which of them is the bottleneck, whose capacity a chart draws where it changes.
    pub bottleneck: usize,
    pub egress: Vec<Arc<Tun>>,
    /// The stages a packet from one address to another takes, in order, the last an
    /// egress device ([`Target::Path`]): a route may differ by source, and each way. A
    /// path from or to [`any_of`] an address's family is the way of a packet to or from
    /// beyond the lab (`--far host`), where no path names both its addresses.
    pub paths: foldhash::HashMap<(IpAddr, IpAddr), Vec<Target>>,
    /// Segment super-packets (some link applies a per-packet effect).
    pub per_packet: bool,
    /// Largest IP packet on the wire.
    pub mtu: u32,
    /// Tells tcplab's own packets from the test's: the links count them apart.
    pub classifier: Classifier,
    /// Polled beside the devices: woken when the loop must stop, so it stops at once
    /// rather than at its next deadline.
    pub wake: Arc<Waker>,
    /// When the test started: the links' schedules count from it.
    pub test_start: TestStart,
    /// Where other threads hand this one their packets ([`Target::Handoff`]), and each
    /// thread's, by its number; none where routes never change threads (a dumbbell).
    pub inbox: Option<Arc<Inbox>>,
    pub outboxes: Vec<Arc<Inbox>>,
}

/// The address that stands for every other of `addr`'s family in
/// [`DirectionPlan::paths`]: the unspecified one.
pub fn any_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

fn set_realtime() -> bool {
    tcplab_sys::cpu::set_realtime(RT_PRIORITY)
}

/// Whether the emulator's threads get real-time priority in this process, tried on a
/// thread of its own.
pub fn realtime_allowed() -> bool {
    std::thread::spawn(set_realtime).join().unwrap_or(false)
}

/// Runs one direction until `stop`. `epoch_ns` is the monotonic time the links call 0.
pub fn run(
    plan: DirectionPlan,
    stats: Arc<Mutex<DirectionStats>>,
    stop: Arc<AtomicBool>,
    epoch_ns: u64,
) -> io::Result<()> {
    // Microsecond deadlines: the default 50 µs timer slack would be the error itself.
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects this thread only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    // The emulator is the network: when a packet is due, its thread must run before the
    // TCP endpoints it competes with for the CPU, or their load becomes path delay. The
    // loop never spins, so real-time priority cannot starve them; without the privilege
    // it runs at normal priority and says so in its counters.
    let realtime = set_realtime();
    // An idle lab's packet wakes this thread twice a crossing (its arrival, then its due
    // time), each on a CPU that may have gone to sleep: held awake (root), the idle
    // echo's excess halves here (docs/performance.md).
    let awake = tcplab_sys::cpu::hold_cpus_awake().ok();
    for (tun, _) in &plan.ingress {
        tun.set_nonblocking(true)?;
    }
    let mut direction = Direction::new(plan, epoch_ns, realtime, awake);
    let (mut next_publish, mut next_capture_flush) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        direction.follow_rates();
        direction.start_schedules();
        direction.ingest()?;
        let now = direction.now();
        direction.deliver(now);
        direction.wake_handed();
        direction.flush();
        direction.sample_queues(now);
        if now >= next_capture_flush {
            direction.flush_captures(now);
            next_capture_flush = now + CAPTURE_FLUSH_EVERY_NS;
        }
        if now >= next_publish {
            *stats.lock().expect("stats lock") = direction.stats(now, false);
            next_publish = now + PUBLISH_EVERY_NS;
        }
        let next = direction
            .next_deadline()
            .map_or(next_publish, |d| d.min(next_publish));
        direction.wait_until(next)?;
    }
    let now = direction.now();
    direction.flush_captures(now);
    *stats.lock().expect("stats lock") = direction.stats(now, true);
    Ok(())
}

/// The IP packet in a buffer that starts with its virtio-net header.
fn ip_of(bytes: &[u8]) -> &[u8] {
    VirtioNetHdr::split(bytes).map_or(bytes, |(_, ip)| ip)
}

/// fq_codel's queue of a flow: a fixed hash of its 5-tuple, the same in every run.
fn flow_hash(key: &tcplab_netsim::packet::FlowKey) -> u32 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish() as u32
}

/// What the links ask of a packet's headers: its flow, whether it is ECN-capable, and
/// whose it is.
#[derive(Clone, Copy)]
struct Headers {
    key: tcplab_netsim::packet::FlowKey,
    ect: bool,
    traffic: Traffic,
}

impl Headers {
    /// Of the IP packet in a buffer that starts with its virtio-net header.
    fn of(bytes: &[u8], classifier: &Classifier) -> Option<Headers> {
        Headers::of_ip(ip_of(bytes), classifier)
    }

    fn of_ip(ip: &[u8], classifier: &Classifier) -> Option<Headers> {
        // The headers alone where a segment's payload is elsewhere (its tail).
        let info = PacketInfo::parse_head(ip).ok()?;
        Some(Headers {
            key: info.flow_key(),
            ect: is_ect(ip),
            traffic: classifier.classify(&info, ip),
        })
    }
}

/// Whose a packet is, from its headers where they parsed.
fn traffic_of(headers: Option<Headers>) -> Traffic {
    headers.map_or(Traffic::Test, |h| h.traffic)
}

struct Direction {
    plan: DirectionPlan,
    epoch_ns: u64,
    pool: Pool,
    /// Segments cut from one packet, waiting to be dispatched (kept for its capacity).
    segments: Vec<(BufId, u32)>,
    coalescers: Vec<Coalescer>,
    /// The packets waiting in each coalescer: the coalesced write gathers their payloads
    /// from their buffers (the coalescers hold headers only), and their lateness is
    /// taken then.
    held: Vec<Vec<Held>>,
    /// Each hop's clock (its last push or pop): a link's time never goes backwards, so
    /// a packet reaching a hop that was already advanced to `now` enters it at `now`.
    hop_clock: Vec<u64>,
    /// How the packets written fared: lateness and one-way delay.
    written: Written,
    /// The quantiles last computed, and when.
    lateness_published: (Lateness, u64),
    /// The data packets' one-way delay as last published with the lateness.
    delay_published: Option<DelayQuantiles>,
    malformed: u64,
    unroutable: u64,
    write_errors: u64,
    pollfds: Vec<libc::pollfd>,
    realtime: bool,
    /// Idle CPUs held awake while this thread runs, where allowed.
    awake: Option<CpusAwake>,
    /// What other threads handed this one, taken from its inbox (kept for its space).
    handed: Vec<Handed>,
    /// The threads handed packets since they were last woken, one bit each.
    to_wake: u64,
    watch: Watch,
    /// How much earlier than their times the packets being dispatched may have
    /// arrived: read from a device in the current batch, or 0, delivered by a link.
    lag_ns: u64,
    /// A changing bottleneck's capacity so far, and where its next sample starts.
    capacity: Vec<CapacitySample>,
    capacity_from: u64,
    /// The links follow their schedules (the test has started).
    schedules_started: bool,
}

/// When the loop last watched its devices, so the burst meter knows how long a packet
/// it reads may have waited: since a read last found the device empty, less the time
/// the loop slept in `ppoll`, which wakes it when a packet comes (one wake-up late).
struct Watch {
    /// Per ingress device: when a read last found it empty, and `slept_ns` then.
    empty: Vec<(u64, u64)>,
    /// Time slept in `ppoll` before its timeout, summed.
    slept_ns: u64,
}

impl Watch {
    /// The loop slept from `from` until `woke` with a timeout at `deadline`: beyond the
    /// deadline it was late, not watching.
    fn slept(&mut self, from: u64, deadline: u64, woke: u64) {
        self.slept_ns += woke.min(deadline).saturating_sub(from);
    }

    /// How long before `now` the packets of a batch read from device `i`, whose first
    /// read returned at `now`, may have arrived.
    fn lag(&self, i: usize, now: u64) -> u64 {
        let (empty_at, slept_then) = self.empty[i];
        let unwatched = now
            .saturating_sub(empty_at)
            .saturating_sub(self.slept_ns - slept_then);
        unwatched.max(READ_LAG_NS)
    }
}

impl Direction {
    fn new(
        plan: DirectionPlan,
        epoch_ns: u64,
        realtime: bool,
        awake: Option<CpusAwake>,
    ) -> Direction {
        let small = VirtioNetHdr::LEN + plan.mtu as usize + 64;
        let pollfds = plan
            .ingress
            .iter()
            .map(|(tun, _)| tun.as_raw_fd())
            .chain([plan.wake.as_fd().as_raw_fd()])
            .chain(
                plan.inbox
                    .iter()
                    .map(|inbox| inbox.waker.as_fd().as_raw_fd()),
            )
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        Direction {
            pool: Pool::new(small, MAX_PACKET),
            segments: Vec::new(),
            coalescers: plan.egress.iter().map(|_| Coalescer::holding()).collect(),
            held: plan.egress.iter().map(|_| Vec::new()).collect(),
            hop_clock: vec![0; plan.hops.len()],
            written: Written {
                lateness: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                    .expect("valid histogram bounds"),
                delays: DelayMeter::default(),
                last: None,
                classifier: plan.classifier,
            },
            lateness_published: (Lateness::default(), 0),
            delay_published: None,
            malformed: 0,
            unroutable: 0,
            write_errors: 0,
            pollfds,
            realtime,
            awake,
            handed: Vec::new(),
            to_wake: 0,
            watch: Watch {
                empty: vec![(0, 0); plan.ingress.len()],
                slept_ns: 0,
            },
            lag_ns: 0,
            capacity: Vec::new(),
            capacity_from: 0,
            schedules_started: false,
            plan,
            epoch_ns,
        }
    }

    fn now(&self) -> u64 {
        monotonic_ns().saturating_sub(self.epoch_ns)
    }

    /// Reads what the devices have, up to a batch each, into the first links. Each
    /// packet is stamped just after its read returns: a stamp taken before the read
    /// could predate a packet that arrived while the thread was preempted in between,
    /// and it would leave early. All the packets of one batch share the lag of its
    /// first read: how long they may have waited.
    fn ingest(&mut self) -> io::Result<()> {
        for i in 0..self.plan.ingress.len() {
            let mut batch_lag = None;
            for _ in 0..READ_BATCH {
                let tun = Arc::clone(&self.plan.ingress[i].0);
                let target = self.plan.ingress[i].1;
                let id = self.pool.alloc_large();
                let read = match tun.read(&mut self.pool.get_mut(id).data) {
                    Ok(n) => {
                        let now = self.now();
                        self.lag_ns = *batch_lag.get_or_insert(self.watch.lag(i, now));
                        let buf = self.pool.get_mut(id);
                        buf.len = n;
                        buf.arrived = now;
                        if self.plan.per_packet {
                            self.segment(id, target, now);
                        } else {
                            // Most packets are small (ACKs): keep the large buffer free.
                            let id = self.pool.shrink(id);
                            let wire_len = (n - VirtioNetHdr::LEN.min(n)) as u32;
                            // Read here: every link counts the packet by whose it is.
                            let headers =
                                Headers::of(self.pool.get(id).bytes(), &self.plan.classifier);
                            self.dispatch(target, now, id, wire_len, headers, traffic_of(headers));
                        }
                        Ok(())
                    }
                    Err(e) => {
                        self.pool.release(id);
                        Err(e)
                    }
                };
                match read {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.watch.empty[i] = (self.now(), self.watch.slept_ns);
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.lag_ns = 0;
        self.take_handed();
        Ok(())
    }

    /// Puts what other threads handed this one into its hops, each at its due time
    /// there, or the hop's clock if that is later: it may have waited for this thread
    /// to wake, as a read packet does, and its lag says how long.
    fn take_handed(&mut self) {
        let Some(inbox) = &self.plan.inbox else {
            return;
        };
        let mut handed = std::mem::take(&mut self.handed);
        inbox.take(&mut handed);
        let now = self.now();
        for packet in handed.drain(..) {
            let n = packet.bytes.len();
            let id = self.pool.alloc_fitting(n);
            let buf = self.pool.get_mut(id);
            buf.data[..n].copy_from_slice(&packet.bytes);
            buf.len = n;
            buf.arrived = packet.arrived;
            self.lag_ns = now.saturating_sub(packet.at);
            // Its time slips by as much as it waited to be taken: lateness, as a
            // write's is.
            let _ = self.written.lateness.record(self.lag_ns.max(1));
            let to = Target::Hop(packet.hop);
            self.dispatch(to, packet.at, id, packet.wire_len, None, packet.traffic);
        }
        self.lag_ns = 0;
        self.handed = handed;
    }

    /// Hands packet `id`, due at `at`, to hop `hop` of thread `thread`, as the bytes a
    /// device would be written.
    fn hand_off(
        &mut self,
        (thread, hop): (usize, usize),
        at: u64,
        id: BufId,
        wire_len: u32,
        traffic: Traffic,
    ) {
        let mut scratch = [0u8; MAX_SEGMENT_HEAD];
        let Some(parts) = Parts::of(&self.pool, id, &mut scratch) else {
            self.malformed += 1;
            self.pool.release(id);
            return;
        };
        let packet = Handed {
            bytes: [parts.head, parts.payload].concat(),
            at,
            arrived: self.pool.arrived(id),
            hop,
            wire_len,
            traffic,
        };
        self.pool.release(id);
        self.plan.outboxes[thread].push(packet);
        self.to_wake |= 1 << thread;
    }

    /// Wakes the threads handed packets since the last call, once each.
    fn wake_handed(&mut self) {
        while self.to_wake != 0 {
            let thread = self.to_wake.trailing_zeros() as usize;
            self.plan.outboxes[thread].waker.wake();
            self.to_wake &= self.to_wake - 1;
        }
    }

    /// Splits the packet read into large buffer `packet` into wire-size segments: those
    /// of a GSO super-packet are ids naming it and their place in it (no copy); a
    /// packet that is one segment is copied whole into a small buffer. Dispatches them,
    /// and lets go of `packet`.
    fn segment(&mut self, packet: BufId, target: Target, now: u64) {
        // Taken out while the segments are cut (a move, no copy), and put back before
        // they are dispatched: their tails are read from it from then on.
        let data = std::mem::take(&mut self.pool.get_mut(packet).data);
        let n = self.pool.get(packet).len;
        let mut cut = std::mem::take(&mut self.segments);
        let headers = self.cut(packet, &data[..n], &mut cut);
        self.pool.get_mut(packet).data = data;
        for (id, wire_len) in cut.drain(..) {
            self.dispatch(target, now, id, wire_len, headers, traffic_of(headers));
        }
        self.segments = cut;
        self.pool.release(packet);
    }

    /// Cuts `bytes` (large buffer `packet`'s) into segments, each with its wire length
    /// in `cut`; the headers they share, where they parse.
    fn cut(&mut self, packet: BufId, bytes: &[u8], cut: &mut Vec<(BufId, u32)>) -> Option<Headers> {
        let Ok((hdr, ip)) = VirtioNetHdr::split(bytes) else {
            self.malformed += 1;
            return None;
        };
        let Ok(segments) = Segmenter::new(&hdr, ip) else {
            self.malformed += 1;
            return None;
        };
        let shared = segments.len() > 1;
        for i in 0..segments.len() {
            let id = match shared.then(|| self.pool.segment(packet, i)).flatten() {
                Some(id) => id,
                None => {
                    let arrived = self.pool.get(packet).arrived;
                    let id = self.pool.alloc_small();
                    let buf = self.pool.get_mut(id);
                    buf.arrived = arrived;
                    match segments.write_segment(i, CsumMode::Partial, true, &mut buf.data) {
                        Ok(len) => buf.len = len,
                        Err(_) => {
                            self.pool.release(id);
                            self.malformed += 1;
                            continue;
                        }
                    }
                    id
                }
            };
            cut.push((id, segments.wire_len(i) as u32));
        }
        // Every segment has the super-packet's addresses, ports and ECN field.
        Headers::of_ip(ip, &self.plan.classifier)
    }

    /// Hands a packet (whose is `traffic`) to its next stage at time `at`; `headers`
    /// where they were read already (a segment's are its super-packet's), else they
    /// are read here if needed.
    fn dispatch(
        &mut self,
        target: Target,
        at: u64,
        id: BufId,
        wire_len: u32,
        headers: Option<Headers>,
        traffic: Traffic,
    ) {
        match target {
            Target::Hop(h) => {
                let at = at.max(self.hop_clock[h]);
                self.hop_clock[h] = at;
                let mut meta = PacketMeta {
                    traffic,
                    ..PacketMeta::len(wire_len)
                };
                let hop = &mut self.plan.hops[h];
                let needs_meta = hop.link.needs_packet_meta();
                if hop.meter.is_some() || needs_meta {
                    let classifier = &self.plan.classifier;
                    if let Some(headers) = headers
                        .or_else(|| Headers::of(self.pool.bytes(id).headers_from(), classifier))
                    {
                        if let Some(meter) = &mut hop.meter {
                            if let Some(bps) = hop.link.rate_bps_at(at) {
                                meter.follow_rate(bps);
                            }
                            meter.arrival(headers.key, traffic, at, wire_len, self.lag_ns);
                        }
                        if needs_meta {
                            meta.flow = flow_hash(&headers.key);
                        }
                        meta.ect = headers.ect;
                    }
                }
                let outcome = hop.link.push(at, id, meta);
                let copy = match outcome {
                    PushOutcome::Duplicate => self.pool.duplicate(id),
                    _ => None,
                };
                let copy_outcome =
                    copy.map(|copy| self.plan.hops[h].link.push_duplicate(at, copy, meta));
                let (hop, pool) = (&mut self.plan.hops[h], &self.pool);
                if let Some(tap) = &mut hop.capture {
                    let mut take = |id: BufId, outcome: &PushOutcome<BufId>, copy: bool| {
                        let sent = pool.arrived(id);
                        match outcome {
                            PushOutcome::Dropped(d) => with_ip(pool, id, |ip| {
                                tap.refused(at, sent, ip, Fate::Dropped(d.reason))
                            }),
                            _ => tap.entered(id, at, sent, wire_len, copy),
                        }
                    };
                    take(id, &outcome, false);
                    if let (Some(copy), Some(outcome)) = (copy, &copy_outcome) {
                        take(copy, outcome, true);
                    }
                }
                for outcome in [Some(outcome), copy_outcome].into_iter().flatten() {
                    if let PushOutcome::Dropped(d) = outcome {
                        self.meter_drop(h, d.packet, headers);
                        self.pool.release(d.packet);
                    }
                }
            }
            Target::Egress(e) => self.write(e, id, at),
            Target::Handoff { thread, hop } => {
                self.hand_off((thread, hop), at, id, wire_len, traffic)
            }
            Target::Path { after } => match self.route(after, id, headers) {
                Some(next) => self.dispatch(next, at, id, wire_len, headers, traffic),
                None => {
                    self.unroutable += 1;
                    self.pool.release(id);
                }
            },
        }
    }

    /// Where a packet goes along its path ([`Target::Path`]) after hop `after`, or
    /// first from an ingress device.
    fn route(&self, after: Option<usize>, id: BufId, headers: Option<Headers>) -> Option<Target> {
        let key = headers
            .or_else(|| Headers::of(self.pool.bytes(id).headers_from(), &self.plan.classifier))?
            .key;
        let paths = &self.plan.paths;
        let stages = paths
            .get(&(key.src, key.dst))
            .or_else(|| paths.get(&(key.src, any_of(key.dst))))
            .or_else(|| paths.get(&(any_of(key.src), key.dst)))?;
        let next = match after {
            None => 0,
            Some(h) => stages.iter().position(|&t| t == Target::Hop(h))? + 1,
        };
        stages.get(next).copied()
    }

    /// Moves every packet due by `now` to its next stage, in time order across the
    /// hops (as [`tcplab_netsim::fabric::Fabric`] does): a packet leaving one link enters
    /// the next at its due time exactly, whatever the hops' order, so its time across
    /// a chain is the sum of its times on each link.
    fn deliver(&mut self, now: u64) {
        while let Some((h, t)) = self.next_due(now) {
            self.collect_dropped(h);
            // A packet read from a device may have entered the link after `t`: its time
            // does not go back.
            self.hop_clock[h] = self.hop_clock[h].max(t);
            let t = self.hop_clock[h];
            while let Some(d) = self.plan.hops[h].link.pop(t) {
                let packet = if d.corrupt || d.ce {
                    // Changed in place: a segment gets a buffer of its own.
                    match self.pool.own(d.packet) {
                        Some(packet) => packet,
                        None => {
                            self.malformed += 1;
                            if let Some(tap) = &mut self.plan.hops[h].capture {
                                tap.forget(d.packet);
                            }
                            continue;
                        }
                    }
                } else {
                    d.packet
                };
                if d.corrupt {
                    self.corrupt(packet);
                }
                if d.ce {
                    let buf = self.pool.get_mut(packet);
                    let len = buf.len;
                    if len > VirtioNetHdr::LEN {
                        set_ce(&mut buf.data[VirtioNetHdr::LEN..len]);
                    }
                }
                // Recorded as it leaves: its CE mark or flipped bit in it.
                let (hop, pool) = (&mut self.plan.hops[h], &self.pool);
                if let Some(tap) = &mut hop.capture {
                    let fate = match (d.corrupt, d.ce, d.reordered) {
                        (true, _, _) => Fate::Corrupted,
                        (false, true, _) => Fate::MarkedCe,
                        (false, false, true) => Fate::Reordered,
                        (false, false, false) => Fate::Delivered,
                    };
                    with_ip(pool, packet, |ip| {
                        tap.left(d.packet, fate, d.queue_delay, d.due, ip)
                    });
                }
                // Read once as it leaves, for its flow's tally here and its route on.
                let then = self.plan.hops[h].then;
                let routed = matches!(then, Target::Path { .. });
                let hop = &mut self.plan.hops[h];
                let headers = (hop.hop_meter.is_some() || routed)
                    .then(|| {
                        Headers::of(
                            self.pool.bytes(packet).headers_from(),
                            &self.plan.classifier,
                        )
                    })
                    .flatten();
                if let (Some(meter), Some(headers)) = (&mut hop.hop_meter, headers) {
                    meter.delivered(
                        headers.key,
                        d.queue_delay,
                        d.due.saturating_sub(d.pushed_at),
                    );
                }
                self.dispatch(then, d.due, packet, d.wire_len, headers, d.traffic);
            }
        }
        for h in 0..self.plan.hops.len() {
            self.collect_dropped(h);
            self.hop_clock[h] = self.hop_clock[h].max(now);
        }
    }

    /// The hop whose next event is the earliest, and its time, if it is by `now`.
    fn next_due(&self, now: u64) -> Option<(usize, u64)> {
        self.plan
            .hops
            .iter()
            .enumerate()
            .filter_map(|(h, hop)| Some((h, hop.link.next_deadline()?)))
            .filter(|&(_, t)| t <= now)
            .min_by_key(|&(h, t)| (t, h))
    }

    /// Counts a packet hop `h` dropped against its flow, where the hop is metered;
    /// `headers` where they were read already.
    fn meter_drop(&mut self, h: usize, id: BufId, headers: Option<Headers>) {
        let classifier = &self.plan.classifier;
        if let Some(meter) = &mut self.plan.hops[h].hop_meter {
            if let Some(headers) =
                headers.or_else(|| Headers::of(self.pool.bytes(id).headers_from(), classifier))
            {
                meter.dropped(headers.key);
            }
        }
    }

    /// Lets go of what hop `h` dropped inside (an AQM at dequeue), recorded first.
    fn collect_dropped(&mut self, h: usize) {
        while let Some(dropped) = self.plan.hops[h].link.pop_dropped() {
            self.meter_drop(h, dropped.packet, None);
            let (hop, pool) = (&mut self.plan.hops[h], &self.pool);
            if let Some(tap) = &mut hop.capture {
                let fate = Fate::Dropped(dropped.reason);
                with_ip(pool, dropped.packet, |ip| {
                    tap.dropped_inside(dropped.packet, fate, dropped.at, ip)
                });
            }
            self.pool.release(dropped.packet);
        }
    }

    /// Flips one bit of a packet so the receiver's checksum catches it: the checksum
    /// the kernel left to us is completed first, or the receiver would trust it.
    fn corrupt(&mut self, id: BufId) {
        let buf = self.pool.get_mut(id);
        let len = buf.len;
        let (head, ip) = buf.data[..len].split_at_mut(VirtioNetHdr::LEN);
        if let Ok(mut hdr) = VirtioNetHdr::parse(head) {
            if finish_checksum(&mut hdr, ip).is_ok() {
                let mut bytes = [0u8; VirtioNetHdr::LEN];
                hdr.write_to(&mut bytes);
                head.copy_from_slice(&bytes);
            }
        }
        if let Some(last) = ip.last_mut() {
            *last ^= 0x01;
        }
    }

    /// Writes a packet due at `due` to its egress device, or holds it in the device's
    /// coalescer until the coalesced packet is complete.
    fn write(&mut self, egress: usize, id: BufId, due: u64) {
        let now = self.now();
        let tun = &self.plan.egress[egress];
        let written = &mut self.written;
        let mut result = Ok(0);
        if self.plan.per_packet {
            let (coalescer, held) = (&mut self.coalescers[egress], &mut self.held[egress]);
            let mut scratch = [0u8; MAX_SEGMENT_HEAD];
            let Some(parts) = Parts::of(&self.pool, id, &mut scratch) else {
                self.malformed += 1;
                self.pool.release(id);
                return;
            };
            let push = |coalescer: &mut Coalescer| match parts.head {
                [] => coalescer.push(parts.payload),
                head => coalescer.push_split(head, parts.payload),
            };
            // Written but still to be released: the packet's bytes are borrowed here.
            let mut flushed = 0;
            let joined = push(coalescer) || {
                result = write_held(coalescer, held, &self.pool, tun, written, now);
                flushed = held.len();
                push(coalescer)
            };
            if joined {
                let payload = if parts.head.is_empty() {
                    coalescer.payload_offset()..parts.payload.len()
                } else {
                    parts.at..parts.at + parts.payload.len()
                };
                held.push(Held { id, due, payload });
            } else {
                written.record(&self.pool, id, due, now);
                let alone = tun.writev(&[IoSlice::new(parts.head), IoSlice::new(parts.payload)]);
                result = result.and(alone);
            }
            for old in held.drain(..flushed) {
                self.pool.release(old.id);
            }
            if !joined {
                self.pool.release(id);
            }
        } else {
            written.record(&self.pool, id, due, now);
            result = tun.write(self.pool.get(id).bytes());
            self.pool.release(id);
        }
        if result.is_err() {
            self.write_errors += 1;
        }
    }

    fn flush(&mut self) {
        let now = self.now();
        for ((coalescer, held), tun) in self
            .coalescers
            .iter_mut()
            .zip(&mut self.held)
            .zip(&self.plan.egress)
        {
            if write_held(coalescer, held, &self.pool, tun, &mut self.written, now).is_err() {
                self.write_errors += 1;
            }
            for old in held.drain(..) {
                self.pool.release(old.id);
            }
        }
    }

    /// Hands what the taps recorded to their writer, with whether packets wait in a
    /// link upstream of theirs (hops are listed upstream first).
    fn flush_captures(&mut self, now: u64) {
        for h in 0..self.plan.hops.len() {
            let (upstream, rest) = self.plan.hops.split_at_mut(h);
            if let Some(tap) = &mut rest[0].capture {
                tap.flush(now, upstream.iter().any(|u| u.link.inside() > 0));
            }
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        self.plan
            .hops
            .iter()
            .filter_map(|h| h.link.next_deadline())
            .min()
    }

    /// Sleeps until `deadline` or until a device has a packet, on a high-resolution
    /// timer (slack 1 ns, or at most 1 µs at normal priority); lateness is the kernel's
    /// wake-up latency.
    fn wait_until(&mut self, deadline: u64) -> io::Result<()> {
        let now = self.now();
        if deadline <= now {
            return Ok(());
        }
        let mut sleep = (deadline - now).max(MIN_SLEEP_NS);
        if !self.realtime {
            sleep = sleep.min(NORMAL_PRIORITY_MAX_SLEEP_NS);
        }
        let ts = libc::timespec {
            tv_sec: (sleep / 1_000_000_000) as libc::time_t,
            tv_nsec: (sleep % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: valid pollfd array and timespec for the duration of the call.
        let ready = unsafe {
            libc::ppoll(
                self.pollfds.as_mut_ptr(),
                self.pollfds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        self.watch.slept(now, now + sleep, self.now());
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Once the test has started, the links follow their schedules from its start.
    fn start_schedules(&mut self) {
        if self.schedules_started {
            return;
        }
        let Some(start) = self.plan.test_start.get() else {
            return;
        };
        let origin = start.saturating_sub(self.epoch_ns);
        for (hop, clock) in self.plan.hops.iter_mut().zip(&mut self.hop_clock) {
            hop.link.start_schedule(origin);
            *clock = (*clock).max(origin);
        }
        self.schedules_started = true;
    }

    /// Links whose rate is set from outside take the current value.
    fn follow_rates(&mut self) {
        for hop in &mut self.plan.hops {
            if let Some(control) = &hop.rate_control {
                hop.link.set_rate(control.load(Ordering::Relaxed));
            }
        }
    }

    fn sample_queues(&mut self, now: u64) {
        for hop in &mut self.plan.hops {
            let queued = hop.link.counters_of(Traffic::Test).queue_bytes;
            // A topology's link keeps its queue in its hop meter (its burst meter's
            // would go unread); a dumbbell's bottleneck in its burst meter.
            match (&mut hop.hop_meter, &mut hop.meter) {
                (Some(meter), _) => meter.queue(now, queued),
                (None, Some(meter)) => meter.queue(now, queued),
                (None, None) => {}
            }
        }
        let from = self.capacity_from;
        if now >= from + CAPACITY_SAMPLE_NS {
            let offered = self.plan.hops[self.plan.bottleneck]
                .link
                .offered_bytes(from, now);
            if let Some(bytes) = offered {
                self.capacity.push(CapacitySample {
                    t_us: now / 1000,
                    bps: bytes as f64 * 8e9 / (now - from) as f64,
                });
            }
            self.capacity_from = now;
        }
    }

    /// What the loop publishes: the counters, and the lateness and one-way delay
    /// quantiles as last computed (afresh once a second). `last` (the final stats) adds
    /// fresh quantiles, each flow's delays, the metered link's bursts and queue samples
    /// and the series over time, too costly to build every time.
    fn stats(&mut self, now: u64, last: bool) -> DirectionStats {
        let (published, at) = &mut self.lateness_published;
        if last || now >= *at + LATENESS_EVERY_NS {
            let lateness = &self.written.lateness;
            let q = |q: f64| lateness.value_at_quantile(q) as f64 / 1000.0;
            *published = Lateness {
                packets: lateness.len(),
                p50_us: q(0.5),
                p99_us: q(0.99),
                max_us: lateness.max() as f64 / 1000.0,
            };
            self.delay_published = self.written.delays.overall();
            *at = now;
        }
        // A dumbbell's bottleneck's trains are the direction's; a topology's links (each
        // metered per flow) keep their own.
        let (bursts, queue) = self
            .plan
            .hops
            .iter()
            .filter(|h| last && h.hop_meter.is_none())
            .find_map(|h| h.meter.as_ref())
            .map(BurstMeter::report)
            .unwrap_or_default();
        let (delay, flow_delays) = if last {
            self.written.delays.report()
        } else {
            (self.delay_published, Vec::new())
        };
        DirectionStats {
            per_packet: self.plan.per_packet,
            realtime: self.realtime,
            cpus_awake: self.awake.is_some(),
            links: self
                .plan
                .hops
                .iter()
                .map(|h| {
                    let own =
                        |traffic| Some(*h.link.counters_of(traffic)).filter(|c| !c.is_empty());
                    let (flows, queue) = h
                        .hop_meter
                        .as_ref()
                        .filter(|_| last)
                        .map(HopMeter::report)
                        .unwrap_or_default();
                    let bursts = match (&h.meter, &h.hop_meter) {
                        (Some(meter), Some(_)) if last => meter.report().0,
                        _ => Vec::new(),
                    };
                    NamedCounters {
                        name: h.name.clone(),
                        counters: *h.link.counters_of(Traffic::Test),
                        control: own(Traffic::Control),
                        probe: own(Traffic::Probe),
                        flows,
                        queue,
                        bursts,
                    }
                })
                .collect(),
            lateness: self.lateness_published.0,
            malformed: self.malformed,
            unroutable: self.unroutable,
            write_errors: self.write_errors,
            buffers: self.pool.allocated(),
            bursts,
            queue,
            delay,
            flow_delays,
            delay_series: if last {
                self.written.delays.series()
            } else {
                Vec::new()
            },
            capacity: if last {
                self.capacity.clone()
            } else {
                Vec::new()
            },
            capture: self
                .plan
                .hops
                .iter()
                .find_map(|h| h.capture.as_ref())
                .map(Tap::counts),
            // The hosts' queues are before the emulator: the lab reads them.
            host_queues: Vec::new(),
        }
    }
}

/// A packet waiting in a coalescer: when it was due, and where its payload lies in its
/// buffer ([`Pool::buffer`]).
struct Held {
    id: BufId,
    due: u64,
    payload: Range<usize>,
}

/// A packet as a coalescer takes it: its head (virtio header first; empty when the
/// packet is whole in `payload`) and its payload, which starts at `at` in its buffer.
/// A segment's head is written here, from its super-packet's headers.
struct Parts<'a> {
    head: &'a [u8],
    payload: &'a [u8],
    at: usize,
}

impl<'a> Parts<'a> {
    fn of(pool: &'a Pool, id: BufId, scratch: &'a mut [u8; MAX_SEGMENT_HEAD]) -> Option<Parts<'a>> {
        match pool.bytes(id) {
            Bytes::Whole(bytes) => Some(Parts {
                head: &[],
                payload: bytes,
                at: 0,
            }),
            Bytes::Segment { packet, index } => {
                let segments = segmenter(packet)?;
                let n = segments.head(index, CsumMode::Partial, true, scratch);
                let range = segments.payload_range(index);
                let at = VirtioNetHdr::LEN + range.start;
                Some(Parts {
                    head: &scratch[..n],
                    payload: &packet[at..at + range.len()],
                    at,
                })
            }
        }
    }
}

/// `f` of the IP bytes of packet `id` (a segment written whole first).
fn with_ip<R>(pool: &Pool, id: BufId, f: impl FnOnce(&[u8]) -> R) -> R {
    match pool.bytes(id) {
        Bytes::Whole(bytes) => f(ip_of(bytes)),
        Bytes::Segment { packet, index } => f(ip_of(&segment_bytes(packet, index))),
    }
}

/// Segment `index` of the super-packet `packet`, whole (virtio header first); empty if
/// it does not parse.
fn segment_bytes(packet: &[u8], index: usize) -> Vec<u8> {
    // A segment is never longer than its super-packet.
    let mut whole = vec![0u8; packet.len()];
    let n = write_segment(packet, index, &mut whole).unwrap_or(0);
    whole.truncate(n);
    whole
}

/// Writes what a coalescer holds, if anything, in one gathering write of its headers
/// and the held packets' payloads, and records how they fared; the caller releases
/// them.
fn write_held(
    coalescer: &mut Coalescer,
    held: &[Held],
    pool: &Pool,
    tun: &Tun,
    written: &mut Written,
    now: u64,
) -> io::Result<usize> {
    let result = match coalescer.finish() {
        Some(headers) => {
            // On the stack: this runs for every coalesced write.
            let mut parts = [IoSlice::new(&[]); MAX_COALESCE_SEGMENTS + 1];
            parts[0] = IoSlice::new(headers);
            for (part, h) in parts[1..].iter_mut().zip(held) {
                *part = IoSlice::new(&pool.buffer(h.id)[h.payload.clone()]);
            }
            tun.writev(&parts[..held.len() + 1])
        }
        None => Ok(0),
    };
    for h in held {
        written.record(pool, h.id, h.due, now);
    }
    result
}

/// How the packets written fared.
struct Written {
    /// Write time − due time.
    lateness: Histogram<u64>,
    /// Write time − read time, per flow, of the packets with a payload.
    delays: DelayMeter,
    /// The last packet's buffer, when it was read, and its flow and whose it is: the
    /// segments of one super-packet leave together, and their headers are parsed once.
    last: Option<((BufId, u64), Option<DataFlow>)>,
    classifier: Classifier,
}

impl Written {
    /// Packet `id`, due at `due`, written at `now`.
    fn record(&mut self, pool: &Pool, id: BufId, due: u64, now: u64) {
        let _ = self.lateness.record(now.saturating_sub(due).max(1));
        let arrived = pool.arrived(id);
        // A buffer is read again only after its last segment left: with its read
        // time, it names one packet.
        let source = (Pool::holder(id), arrived);
        let flow = match self.last {
            Some((last, flow)) if last == source => flow,
            _ => data_flow(&pool.bytes(id), &self.classifier),
        };
        self.last = Some((source, flow));
        if let Some((flow, traffic)) = flow {
            self.delays
                .record(flow, traffic, now.saturating_sub(arrived), now);
        }
    }
}

/// A data packet's flow and whose it is.
type DataFlow = (FlowKey, Traffic);

/// The flow of a packet with a TCP or UDP payload (a segment of a GSO packet always has
/// one), from its headers, and whose it is.
fn data_flow(bytes: &Bytes, classifier: &Classifier) -> Option<DataFlow> {
    let ip = ip_of(bytes.headers_from());
    let info = PacketInfo::parse_head(ip).ok()?;
    let carries = match bytes {
        Bytes::Segment { .. } => true,
        Bytes::Whole(_) => info.ip_len > info.ip_header_len + info.l4_header_len(),
    };
    (carries
        && matches!(
            info.transport,
            Transport::Tcp { .. } | Transport::Udp { .. }
        ))
    .then(|| (info.flow_key(), classifier.classify(&info, ip)))
}
