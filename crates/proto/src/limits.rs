//! What a server lets its clients do: the bounds a test request must keep, and the
//! admission of connections and tests (connection rate per source, connections still in
//! their handshake, tests at once in all and per source). No I/O and no clock: time
//! comes in as µs, so the token bucket is tested in virtual time.
//!
//! Every refusal is one line naming the `tcplab serve` flag that sets the limit.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tcplab_record::units::{count, format_duration_us, format_rate, format_size};
use tcplab_record::{Mode, TestEnd, TestParams};

/// Bounds on what clients may ask of a server; each field is the `tcplab serve` flag of
/// the same name. `Default` is the public server's: sane for a host on the Internet.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerLimits {
    /// Parallel streams per direction in one test.
    pub max_streams: u16,
    /// Longest test; a byte-count test is cut there too.
    pub max_duration_us: u64,
    /// Largest write or read size a test may ask for (no flag: a memory bound).
    pub max_write_size: u32,
    /// The most one test may send in one direction, bit/s: UDP's `-b`, `--fq-rate` and
    /// `--app-rate` above it are refused, and the TCP flows the server sends are paced
    /// at it (SO_MAX_PACING_RATE, shared among them). `None`: no cap.
    pub max_rate_bps: Option<u64>,
    /// Tests running at once, from all clients.
    pub max_tests: u32,
    /// Tests running at once from one source (an IPv4 address or an IPv6 /64).
    pub max_tests_per_client: u32,
    /// Control connections one source may open per minute (a token bucket that holds a
    /// minute's worth). `None`: no limit.
    pub max_connect_rate: Option<u32>,
    /// Control connections still in their handshake, from all clients: bounds what
    /// silent or trickling peers can hold. A new connection is never refused for it: it
    /// takes the place of one already in (see [`Counts::connect`]).
    pub max_handshakes: u32,
    /// Largest control message the server reads, bytes.
    pub max_message: usize,
    /// Everything from the connection to `Go` must happen within this, whatever the
    /// peer trickles; the same bound holds for the data connections' hellos.
    pub handshake_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_streams: 32,
            max_duration_us: 300 * 1_000_000,
            max_write_size: 16 << 20,
            max_rate_bps: Some(1_000_000_000),
            max_tests: 16,
            max_tests_per_client: 4,
            max_connect_rate: Some(30),
            max_handshakes: 64,
            max_message: 64 << 10,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

impl ServerLimits {
    /// A lab's own server, which only the lab's hosts reach: any number of clients,
    /// streams, tests and connections, any rate and duration.
    pub fn lab() -> ServerLimits {
        ServerLimits {
            max_streams: u16::MAX,
            max_duration_us: u64::MAX,
            max_rate_bps: None,
            max_tests: u32::MAX,
            max_tests_per_client: u32::MAX,
            max_connect_rate: None,
            max_handshakes: u32::MAX,
            // A lossy path's handshake waits out SYN and RTO backoffs (1 s, 2 s, 4 s …):
            // at 20 % loss one run in three overran 10 s.
            handshake_timeout: Duration::from_secs(60),
            ..ServerLimits::default()
        }
    }
}

/// Smallest sampling interval a client may ask for, as its own front-ends check it.
pub use tcplab_model::test_builder::MIN_SAMPLE_INTERVAL_US;

/// Checks a test request against the limits, before any resource is spent on it.
pub fn check_request(params: &TestParams, limits: &ServerLimits) -> Result<(), String> {
    tcplab_model::probe::check_alone(params)?;
    if params.streams > limits.max_streams {
        return Err(format!(
            "{} streams exceed --max-streams {}",
            params.streams, limits.max_streams
        ));
    }
    tcplab_model::ranges::check_end(&params.end).map_err(|e| match params.end {
        TestEnd::Duration { .. } => format!("duration: {e}"),
        TestEnd::Bytes { .. } => format!("byte count: {e}"),
    })?;
    if let TestEnd::Duration { us } = params.end {
        if us > limits.max_duration_us {
            return Err(format!(
                "duration {} exceeds --max-duration {}",
                format_duration_us(us),
                format_duration_us(limits.max_duration_us)
            ));
        }
    }
    let t = &params.tuning;
    for (what, size) in [("write size", t.write_size), ("read size", t.read_size)] {
        if size == 0 || size > limits.max_write_size {
            return Err(format!(
                "{what} must be 1 B..={}",
                format_size(limits.max_write_size.into())
            ));
        }
    }
    if params.report_interval_us == 0 {
        return Err("report interval must be positive".into());
    }
    if let Some(udp) = &params.udp {
        if !(tcplab_model::udp::MIN_DATAGRAM..=tcplab_model::udp::MAX_DATAGRAM)
            .contains(&udp.datagram_size)
        {
            return Err(format!(
                "UDP datagram size must be {}..={} bytes",
                tcplab_model::udp::MIN_DATAGRAM,
                tcplab_model::udp::MAX_DATAGRAM
            ));
        }
        if udp.burst == 0 {
            return Err("UDP burst must be at least 1".into());
        }
    }
    if let Some(probe) = &params.probe {
        tcplab_model::probe::check(probe)?;
    }
    tcplab_model::transaction::check(params)?;
    if params.sample_interval_us != 0 && params.sample_interval_us < MIN_SAMPLE_INTERVAL_US {
        return Err(format!(
            "sampling interval must be 0 (off) or at least {MIN_SAMPLE_INTERVAL_US} µs"
        ));
    }
    if let Some(max) = limits.max_rate_bps {
        check_rates(params, max)?;
    }
    Ok(())
}

/// The rates a test asks for, per flow, against the cap on one direction's total.
fn check_rates(params: &TestParams, max: u64) -> Result<(), String> {
    let udp = params.udp.map(|u| ("UDP rate (-b)", u.rate_bps));
    let fq = params.tuning.pacing_rate.map(|r| ("--fq-rate", r));
    let app = params.tuning.app_rate.map(|r| ("--app-rate", r));
    for (what, per_flow) in [udp, fq, app].into_iter().flatten() {
        if per_flow == 0 {
            return Err(format!(
                "{what} 0 (as fast as possible) exceeds --max-rate {}",
                format_rate(max as f64)
            ));
        }
        let total = per_flow.saturating_mul(params.streams.into());
        if total > max {
            let streams = match params.streams {
                1 => String::new(),
                n => format!(" ({n} streams × {})", format_rate(per_flow as f64)),
            };
            return Err(format!(
                "{what} of {}{streams} exceeds --max-rate {}",
                format_rate(total as f64),
                format_rate(max as f64)
            ));
        }
    }
    Ok(())
}

/// The parameters the server's own flows run with: TCP flows it sends without a rate of
/// their own are paced so that together they stay within `--max-rate`.
pub fn server_params(params: &TestParams, limits: &ServerLimits) -> TestParams {
    let mut params = params.clone();
    if let Some(max) = rate_cap_bps(&params, limits) {
        params.tuning.pacing_rate = Some((max / u64::from(params.streams.max(1))).max(1));
    }
    params
}

/// The cap the server puts on the TCP flows it sends in a test, together, bit/s: its
/// `--max-rate`, for flows down that have no rate of their own; `None` where it caps
/// nothing.
pub fn rate_cap_bps(params: &TestParams, limits: &ServerLimits) -> Option<u64> {
    let sends = matches!(params.mode, Mode::Down | Mode::Bidir);
    let unpaced = params.udp.is_none()
        && params.tuning.pacing_rate.is_none()
        && params.tuning.app_rate.is_none();
    limits.max_rate_bps.filter(|_| sends && unpaced)
}

/// Where connections come from, as the limits count them: an IPv4 address, or an IPv6
/// /64 (what one subscriber usually gets, so one host cannot multiply itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source(IpAddr);

impl Source {
    pub fn of(ip: IpAddr) -> Source {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                Source(IpAddr::V6(prefix.into()))
            }
            v4 => Source(v4),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// A source's allowance of new connections: up to a minute's worth at once, refilled
/// continuously at the per-minute rate.
#[derive(Clone, Copy, Debug)]
struct TokenBucket {
    tokens: f64,
    at_us: i64,
}

impl TokenBucket {
    fn full(per_minute: u32, now_us: i64) -> TokenBucket {
        TokenBucket {
            tokens: per_minute.into(),
            at_us: now_us,
        }
    }

    fn refill(&mut self, per_minute: u32, now_us: i64) {
        let elapsed_us = (now_us - self.at_us).max(0) as f64;
        let capacity = f64::from(per_minute);
        self.tokens = (self.tokens + elapsed_us * capacity / 60e6).min(capacity);
        self.at_us = now_us.max(self.at_us);
    }

    fn take(&mut self, per_minute: u32, now_us: i64) -> bool {
        self.refill(per_minute, now_us);
        let taken = self.tokens >= 1.0;
        if taken {
            self.tokens -= 1.0;
        }
        taken
    }
}

/// Above this many remembered sources, full buckets (which say nothing) are forgotten.
const FORGET_FULL_BUCKETS_ABOVE: usize = 1024;

/// A control connection's place among those in their handshake; places are numbered
/// in the order the connections came.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HandshakeId(u64);

/// A control connection in its handshake, as [`Counts::connect`] ranks it.
#[derive(Clone, Copy, Debug)]
struct Handshake {
    source: Source,
    /// Its hello has come: the first thing a tcplab client sends, at once.
    spoke: bool,
}

/// The admission counts of one server: which connections and tests it takes on.
#[derive(Debug)]
pub struct Counts {
    limits: ServerLimits,
    buckets: HashMap<Source, TokenBucket>,
    handshakes: BTreeMap<HandshakeId, Handshake>,
    next_handshake: u64,
    tests: HashMap<Source, u32>,
    running: u32,
}

impl Counts {
    pub fn new(limits: &ServerLimits) -> Counts {
        Counts {
            limits: limits.clone(),
            buckets: HashMap::new(),
            handshakes: BTreeMap::new(),
            next_handshake: 0,
            tests: HashMap::new(),
            running: 0,
        }
    }

    /// A new control connection from `source` at `now_us`: within the source's rate, it
    /// is counted as in its handshake. Where `--max-handshakes` are in already, it takes
    /// the place of the one `Counts::making_room` names (which then is no longer
    /// [`Counts::in_handshake`]): a crowd of idle connections cannot lock a client out.
    pub fn connect(&mut self, source: Source, now_us: i64) -> Result<HandshakeId, String> {
        if let Some(per_minute) = self.limits.max_connect_rate {
            if self.buckets.len() > FORGET_FULL_BUCKETS_ABOVE {
                self.buckets.retain(|_, b| {
                    b.refill(per_minute, now_us);
                    b.tokens < f64::from(per_minute)
                });
            }
            let bucket = self
                .buckets
                .entry(source)
                .or_insert_with(|| TokenBucket::full(per_minute, now_us));
            if !bucket.take(per_minute, now_us) {
                return Err(format!(
                    "too many connections from {source}: more than --max-connect-rate \
                     {per_minute} per minute"
                ));
            }
        }
        if self.handshakes.len() >= self.limits.max_handshakes as usize {
            if let Some(evicted) = self.making_room() {
                self.handshakes.remove(&evicted);
            }
        }
        let id = HandshakeId(self.next_handshake);
        self.next_handshake += 1;
        let spoke = false;
        self.handshakes.insert(id, Handshake { source, spoke });
        Ok(id)
    }

    /// The handshake that gives its place to a newcomer: one that has not said its hello
    /// (a tcplab client says it at once) before one that has; then one from the source
    /// with the most connections in their handshake, so a crowd from one address makes
    /// room from its own; then the oldest.
    fn making_room(&self) -> Option<HandshakeId> {
        let mut per_source: HashMap<Source, usize> = HashMap::new();
        for h in self.handshakes.values() {
            *per_source.entry(h.source).or_default() += 1;
        }
        self.handshakes
            .iter()
            .min_by_key(|(&id, h)| (h.spoke, Reverse(per_source[&h.source]), id))
            .map(|(&id, _)| id)
    }

    /// The connection's hello has come.
    pub fn spoke(&mut self, id: HandshakeId) {
        if let Some(h) = self.handshakes.get_mut(&id) {
            h.spoke = true;
        }
    }

    /// Whether the connection still has its place (it had to make room for a newer one).
    pub fn in_handshake(&self, id: HandshakeId) -> bool {
        self.handshakes.contains_key(&id)
    }

    /// Why a connection lost its place.
    pub fn evicted_reason(&self) -> String {
        format!(
            "server busy: {} in their handshake (--max-handshakes {}), and this one made \
             room for a newer one",
            count(self.limits.max_handshakes, "connection"),
            self.limits.max_handshakes
        )
    }

    pub fn handshake_over(&mut self, id: HandshakeId) {
        self.handshakes.remove(&id);
    }

    /// A test from `source` about to start: within the caps, it is counted as running.
    pub fn start_test(&mut self, source: Source) -> Result<(), String> {
        if self.running >= self.limits.max_tests {
            return Err(format!(
                "server busy: {} running (--max-tests {})",
                count(self.running, "test"),
                self.limits.max_tests
            ));
        }
        let mine = self.tests.entry(source).or_default();
        if *mine >= self.limits.max_tests_per_client {
            return Err(format!(
                "{} from {source} already running (--max-tests-per-client {})",
                count(*mine, "test"),
                self.limits.max_tests_per_client
            ));
        }
        *mine += 1;
        self.running += 1;
        Ok(())
    }

    pub fn end_test(&mut self, source: Source) {
        if let Some(mine) = self.tests.get_mut(&source) {
            *mine -= 1;
            if *mine == 0 {
                self.tests.remove(&source);
            }
        }
        self.running = self.running.saturating_sub(1);
    }
}

/// [`Counts`] shared by a server's threads; each admitted connection or test holds a
/// [`Slot`] that gives its place back when dropped, however the thread ends.
#[derive(Clone, Debug)]
pub struct Admission(Arc<Mutex<Counts>>);

/// A place in the handshake or test counts.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<Mutex<Counts>>,
    held: Held,
}

#[derive(Debug)]
enum Held {
    Handshake(HandshakeId),
    Test(Source),
}

impl Admission {
    pub fn new(limits: &ServerLimits) -> Admission {
        Admission(Arc::new(Mutex::new(Counts::new(limits))))
    }

    /// A place in the handshake (see [`Counts::connect`]); a connection that lost its
    /// place to it learns so from its own [`Slot::evicted`].
    pub fn connect(&self, source: Source, now_us: i64) -> Result<Slot, String> {
        let id = self.lock().connect(source, now_us)?;
        Ok(self.slot(Held::Handshake(id)))
    }

    pub fn start_test(&self, source: Source) -> Result<Slot, String> {
        self.lock().start_test(source)?;
        Ok(self.slot(Held::Test(source)))
    }

    fn slot(&self, held: Held) -> Slot {
        Slot {
            counts: Arc::clone(&self.0),
            held,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        lock(&self.0)
    }
}

/// The counts stay right even if a thread panicked while holding the lock.
fn lock(counts: &Mutex<Counts>) -> MutexGuard<'_, Counts> {
    counts.lock().unwrap_or_else(|e| e.into_inner())
}

impl Slot {
    /// A handshake's hello has come.
    pub fn spoke(&self) {
        if let Held::Handshake(id) = self.held {
            lock(&self.counts).spoke(id);
        }
    }

    /// Why this handshake lost its place to a newer connection, if it has.
    pub fn evicted(&self) -> Option<String> {
        let Held::Handshake(id) = self.held else {
            return None;
        };
        let counts = lock(&self.counts);
        (!counts.in_handshake(id)).then(|| counts.evicted_reason())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = lock(&self.counts);
        match self.held {
            Held::Handshake(id) => counts.handshake_over(id),
            Held::Test(source) => counts.end_test(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_record::{Mode, UdpParams};

    fn refused(params: &TestParams, limits: &ServerLimits) -> String {
        check_request(params, limits).unwrap_err()
    }

    #[test]
    fn requests_beyond_the_limits_are_refused_naming_the_limit() {
        let limits = ServerLimits::default();
        assert!(check_request(&TestParams::default(), &limits).is_ok());
        let check = |change: fn(&mut TestParams), words: &[&str]| {
            let mut p = TestParams::default();
            change(&mut p);
            let reason = refused(&p, &limits);
            for word in words {
                assert!(reason.contains(word), "{reason} lacks {word}");
            }
        };
        check(|p| p.streams = 0, &["streams"]);
        check(|p| p.streams = 33, &["33 streams", "--max-streams 32"]);
        check(|p| p.end = TestEnd::Duration { us: 0 }, &["duration"]);
        check(
            |p| p.end = TestEnd::Duration { us: 301_000_000 },
            &["duration 301 s", "--max-duration 300 s"],
        );
        check(|p| p.tuning.write_size = 0, &["write size"]);
        check(|p| p.tuning.read_size = 64 << 20, &["read size", "16 MiB"]);
        check(|p| p.report_interval_us = 0, &["report interval"]);
        check(|p| p.sample_interval_us = 1, &["sampling interval"]);
        check(
            |p| p.tuning.pacing_rate = Some(2_000_000_000),
            &["--fq-rate of 2.00 Gbit/s", "--max-rate 1.00 Gbit/s"],
        );
        check(
            |p| {
                p.streams = 4;
                p.tuning.app_rate = Some(300_000_000);
            },
            &["--app-rate of 1.20 Gbit/s (4 streams × 300 Mbit/s)"],
        );
        let udp = |rate_bps| UdpParams {
            rate_bps,
            datagram_size: 1448,
            burst: 1,
            header: Default::default(),
        };
        let mut p = TestParams {
            udp: Some(udp(0)),
            ..TestParams::default()
        };
        assert!(refused(&p, &limits).contains("UDP rate (-b) 0 (as fast as possible)"));
        p.udp = Some(udp(2_000_000_000));
        assert!(refused(&p, &limits).contains("--max-rate"));
        p.udp = Some(udp(1_000_000_000));
        assert!(check_request(&p, &limits).is_ok());
        // A lab's server takes what the default one refuses.
        p.udp = Some(udp(0));
        p.streams = 128;
        p.end = TestEnd::Duration {
            us: 7200 * 1_000_000,
        };
        assert!(check_request(&p, &ServerLimits::lab()).is_ok());
    }

    #[test]
    fn the_servers_unpaced_tcp_senders_share_the_rate_cap() {
        let limits = ServerLimits::default();
        let p = TestParams {
            streams: 4,
            mode: Mode::Down,
            ..TestParams::default()
        };
        assert_eq!(
            server_params(&p, &limits).tuning.pacing_rate,
            Some(250_000_000)
        );
        // A rate the client asked for (already within the cap) stays as asked.
        let mut asked = p.clone();
        asked.tuning.pacing_rate = Some(100_000_000);
        assert_eq!(server_params(&asked, &limits), asked);
        assert_eq!(server_params(&p, &ServerLimits::lab()), p);
    }

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_slash_64s() {
        let a = Source::of("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = Source::of("2001:db8:1:2:bbbb::9".parse().unwrap());
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_ne!(a, Source::of("2001:db8:1:3::1".parse().unwrap()));
        // An IPv4 client on a dual-stack listener is still its IPv4 address.
        let mapped = Source::of("::ffff:10.0.0.1".parse().unwrap());
        assert_eq!(mapped, Source::of("10.0.0.1".parse().unwrap()));
        assert_eq!(mapped.to_string(), "10.0.0.1");
    }

    const S: i64 = 1_000_000;

    #[test]
    fn a_source_gets_a_minutes_worth_at_once_then_the_rate() {
        let limits = ServerLimits {
            max_connect_rate: Some(6),
            ..ServerLimits::default()
        };
        let mut counts = Counts::new(&limits);
        let (me, other) = (
            Source::of("10.0.0.1".parse().unwrap()),
            Source::of("10.0.0.2".parse().unwrap()),
        );
        for _ in 0..6 {
            let id = counts.connect(me, 0).unwrap();
            counts.handshake_over(id);
        }
        let reason = counts.connect(me, 0).unwrap_err();
        assert!(
            reason.contains("10.0.0.1") && reason.contains("--max-connect-rate 6 per minute"),
            "{reason}"
        );
        // Another source has its own bucket.
        assert!(counts.connect(other, 0).is_ok());
        // One token per 10 s: not yet at 9.9 s, then one, then none again.
        assert!(counts.connect(me, 9_900_000).is_err());
        assert!(counts.connect(me, 10 * S).is_ok());
        assert!(counts.connect(me, 10 * S).is_err());
        // A long silence refills the bucket, never beyond a minute's worth.
        for _ in 0..6 {
            counts.connect(me, 3600 * S).unwrap();
        }
        assert!(counts.connect(me, 3600 * S).is_err());
    }

    #[test]
    fn full_buckets_are_forgotten_when_many_sources_came() {
        let mut counts = Counts::new(&ServerLimits {
            max_handshakes: u32::MAX,
            // A lossy path's handshake waits out SYN and RTO backoffs (1 s, 2 s, 4 s …):
            // at 20 % loss one run in three overran 10 s.
            handshake_timeout: Duration::from_secs(60),
            ..ServerLimits::default()
        });
        for i in 0..=FORGET_FULL_BUCKETS_ABOVE as u32 {
            counts.connect(Source::of(IpAddr::V4(i.into())), 0).unwrap();
        }
        // A minute later all are full again: the next connection forgets them.
        counts
            .connect(Source::of("10.0.0.1".parse().unwrap()), 60 * S)
            .unwrap();
        assert_eq!(counts.buckets.len(), 1);
    }

    fn source(i: u8) -> Source {
        Source::of(IpAddr::V4([10, 0, 0, i].into()))
    }

    /// Counts that take `max_handshakes` handshakes and any number of connections.
    fn handshake_counts(max_handshakes: u32) -> Counts {
        Counts::new(&ServerLimits {
            max_handshakes,
            max_connect_rate: None,
            ..ServerLimits::default()
        })
    }

    #[test]
    fn a_full_handshake_table_makes_room_from_the_silent_then_the_oldest() {
        let mut counts = handshake_counts(4);
        // Four peers from four sources; two have said their hello.
        let ids: Vec<HandshakeId> = (1..=4)
            .map(|i| counts.connect(source(i), 0).unwrap())
            .collect();
        counts.spoke(ids[0]);
        counts.spoke(ids[2]);
        let kept = |counts: &Counts| -> Vec<bool> {
            ids.iter().map(|&id| counts.in_handshake(id)).collect()
        };
        // A newcomer takes the place of the oldest that has not spoken: the second.
        let fifth = counts.connect(source(5), 0).unwrap();
        assert_eq!(kept(&counts), [true, false, true, true]);
        // Then the fourth, older than the fifth.
        let sixth = counts.connect(source(6), 0).unwrap();
        assert_eq!(kept(&counts), [true, false, true, false]);
        // Only peers that spoke are older than the newcomers: the fifth and sixth go
        // first, whatever their age.
        counts.connect(source(7), 0).unwrap();
        assert!(!counts.in_handshake(fifth) && counts.in_handshake(sixth));
        counts.connect(source(8), 0).unwrap();
        assert!(!counts.in_handshake(sixth));
        assert_eq!(kept(&counts), [true, false, true, false]);
        // All that are left spoke (the two first, and these two newcomers now): the
        // oldest goes.
        let newest: Vec<HandshakeId> = counts.handshakes.keys().copied().skip(2).collect();
        newest.iter().for_each(|&id| counts.spoke(id));
        counts.connect(source(9), 0).unwrap();
        assert_eq!(kept(&counts), [false, false, true, false]);
        // Never more than the cap.
        assert_eq!(counts.handshakes.len(), 4);
    }

    #[test]
    fn a_crowd_from_one_source_makes_room_from_its_own() {
        let mut counts = handshake_counts(4);
        let alone = counts.connect(source(1), 0).unwrap();
        let crowd: Vec<HandshakeId> = (0..3)
            .map(|_| counts.connect(source(2), 0).unwrap())
            .collect();
        // The lone peer is the oldest, yet the crowd's oldest gives way, then the next.
        for (n, &id) in crowd.iter().enumerate() {
            counts.connect(source(2), 0).unwrap();
            assert!(counts.in_handshake(alone));
            assert!(!counts.in_handshake(id), "{n}");
        }
    }

    #[test]
    fn a_connection_that_made_room_hears_the_limit_by_name() {
        let admission = Admission::new(&ServerLimits {
            max_handshakes: 2,
            max_connect_rate: None,
            ..ServerLimits::default()
        });
        let first = admission.connect(source(1), 0).unwrap();
        let second = admission.connect(source(2), 0).unwrap();
        assert_eq!(first.evicted(), None);
        let third = admission.connect(source(3), 0).unwrap();
        assert_eq!(
            first.evicted().unwrap(),
            "server busy: 2 connections in their handshake (--max-handshakes 2), \
             and this one made room for a newer one"
        );
        assert_eq!(second.evicted(), None);
        // Its place went to the third: giving it back frees nothing more.
        drop(first);
        assert_eq!(lock(&admission.0).handshakes.len(), 2);
        drop((second, third));
        assert!(lock(&admission.0).handshakes.is_empty());
    }

    #[test]
    fn tests_are_capped_and_given_back() {
        let limits = ServerLimits {
            max_tests: 3,
            max_tests_per_client: 2,
            max_connect_rate: None,
            ..ServerLimits::default()
        };
        let admission = Admission::new(&limits);
        let me = Source::of("10.0.0.1".parse().unwrap());
        let mine = [
            admission.start_test(me).unwrap(),
            admission.start_test(me).unwrap(),
        ];
        let reason = admission.start_test(me).unwrap_err();
        assert!(
            reason.contains("2 tests from 10.0.0.1") && reason.contains("--max-tests-per-client 2"),
            "{reason}"
        );
        let other = Source::of("10.0.0.2".parse().unwrap());
        let _theirs = admission.start_test(other).unwrap();
        let reason = admission.start_test(other).unwrap_err();
        assert!(reason.contains("--max-tests 3"), "{reason}");
        drop(mine);
        assert!(admission.start_test(other).is_ok());
        assert!(admission.start_test(me).is_ok());
    }
}
