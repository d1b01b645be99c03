//! The monitor of a set of TCP connections, without I/O: when to sample them, where
//! report intervals end (report ticks, a timed test's deadline, a connection's end), what
//! the drain limit asks of a connection, and what held each sender back
//! ([`tcplab_analysis::limits`]). Time comes in as µs and sockets as [`Snapshot`]s, so one
//! core serves tcplab's engine, a watcher of sockets it did not create and stored
//! samples alike, and is tested in virtual time.
//!
//! A shell drives it: at [`Monitor::next_wakeup`] it reads the connections' status,
//! asks [`Monitor::due`] what to read, ends the connections a [`Read`] names to abort,
//! reads the sockets in that order (status first: a connection seen ended then has all
//! its bytes in the counters read after), and hands the snapshots to [`Monitor::tick`],
//! whose [`Tick`] says what to do: intervals to report, connections to reset, the
//! senders' window rate. A flow's own thread may read its socket between two of its
//! writes or reads, where no lock it holds is waited for, and hand that in
//! ([`Monitor::self_sampled`]): sample ticks then leave the flow unread while such
//! samples come at least once an interval.
//!
//! Connections that come and go ([`watch`]'s) join with [`Monitor::add_flow`], are
//! sampled whenever their shell reads them ([`Monitor::sample_now`]), have their report
//! intervals cut from their latest samples ([`Monitor::cut_sampled`]) and end at their
//! final one ([`Monitor::end_flow`]), and are let go of ([`Monitor::remove_flow`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tcplab_analysis::limits::{self, LimitTally, Writer};
use tcplab_netsim::path::PaceRtt;
use tcplab_record::tcpinfo::{BbrInfo, SkMemInfo, TcpInfo};
use tcplab_record::{Direction, Host, LimitShares, RttStats, SampleRecord, TestEnd, TestParams};

/// How often BBR's model (TCP_CC_INFO) is kept in the samples, µs: it moves once a
/// round trip, and reading it every 10 ms keeps the detail and halves the locked
/// getsockopts of a 1 ms sampler.
pub const BBR_EVERY_US: i64 = 10_000;

/// How often the monitor reads a flow whose own thread samples it all the same, µs: a
/// sender's time is booked to its limits at these reads only, since a sample taken
/// between two writes always sees the moment the writer has just filled its buffer,
/// never the writer blocked on it. A read within an interval of such a sample books
/// and keeps no record (unless it carries BBR's model): the flow's own samples do.
pub const BOOK_EVERY_US: i64 = 10_000;

/// Samples reserved up front at most (~100 MB).
const MAX_RESERVED_SAMPLES: usize = 400_000;

/// What one flow does on one end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Send,
    Receive,
}

impl Role {
    /// What `host` does in a flow going `direction`.
    pub fn of(host: Host, direction: Direction) -> Role {
        if direction.sender() == host {
            Role::Send
        } else {
            Role::Receive
        }
    }
}

/// A flow's bytes counted when the test's deadline passed: acknowledged (sender) or read
/// (receiver), and when they were counted (this end's monotonic µs, just after the
/// deadline).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadlineCount {
    pub bytes: u64,
    pub t_us: i64,
}

/// How a monitor samples and reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The end whose sockets are sampled, as the samples name it.
    pub host: Host,
    /// Between samples, µs; 0 samples nothing (limits then come from the kernel's
    /// chrono counters).
    pub sample_interval_us: u64,
    /// Between report intervals' ends, µs.
    pub report_interval_us: u64,
    /// A timed test's deadline, µs: an interval ends there, and those after it are the
    /// drain's.
    pub deadline_us: Option<i64>,
    /// The sending application writes at a set rate (`--app-rate`).
    pub app_paced: bool,
    /// Sum the senders' window rate over this round trip at every sample, for a dynamic
    /// pacer.
    pub pacing: Option<PaceRtt>,
    /// Samples to make room for up front, so sampling never reallocates mid-test.
    pub reserved_samples: usize,
    /// Keep every sample taken, for [`Monitor::finish`]; a shell that keeps them its own
    /// way (or not at all) leaves them out.
    pub keep_samples: bool,
}

impl Config {
    /// The monitor of one end of a test of `flows` flows starting at `t0_us`.
    pub fn of_test(
        params: &TestParams,
        host: Host,
        t0_us: i64,
        flows: usize,
        pacing: Option<PaceRtt>,
    ) -> Config {
        let reserved_samples = match (params.end, params.sample_interval_us) {
            // A little slack for the drain after the last write.
            (TestEnd::Duration { us }, every) if every > 0 => {
                ((us / every + 100) as usize * flows).min(MAX_RESERVED_SAMPLES)
            }
            _ => 0,
        };
        Config {
            host,
            sample_interval_us: params.sample_interval_us,
            report_interval_us: params.report_interval_us,
            deadline_us: params.end.deadline_us(t0_us),
            app_paced: params.tuning.app_rate.is_some(),
            pacing,
            reserved_samples,
            keep_samples: true,
        }
    }
}

/// A connection as the monitor starts with it.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowStart {
    pub id: u32,
    /// What it does. A socket tcplab did not open is a [`Role::Send`] whichever way its
    /// data goes: its own sending is what its time is booked to, and its intervals count
    /// both directions ([`Interval::acked_bytes`], [`Interval::received_bytes`]).
    pub role: Role,
    /// tcp_info at the start: its bytes (the handshake, a data intro) are not payload,
    /// and its counters are where the first interval's start. `None`: the connection
    /// could not be read and gets no intervals.
    pub first: Option<TcpInfo>,
    /// A sender under BBR: its samples carry BBR's model every [`BBR_EVERY_US`].
    pub bbr: bool,
}

/// What the shell knows of a connection's life at a tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// It will move no more bytes (its sender has stopped and drained, or it closed):
    /// its last interval is cut at this tick.
    pub ended: bool,
    /// Its sender was stopped by the drain limit with bytes unacknowledged, and its end
    /// wants the connection ended so the receiver stops waiting.
    pub cut_drain: bool,
}

/// One socket read at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub info: TcpInfo,
    pub mem: Option<SkMemInfo>,
    pub bbr: Option<BbrInfo>,
    /// What the application on this socket was doing; `None` for a socket whose
    /// application is not ours (its sender is then taken to be writing, never inside a
    /// write, and its bytes come from tcp_info).
    pub app: Option<App>,
}

impl Snapshot {
    /// A stored sample read back: what its socket showed, without the application's
    /// state, which samples do not keep.
    pub fn of_sample(sample: &SampleRecord) -> Snapshot {
        Snapshot {
            info: sample.info,
            mem: sample.skmem,
            bbr: sample.bbr,
            app: None,
        }
    }
}

/// What tcplab's own flow thread was doing at a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct App {
    /// Bytes written (sender) or read (receiver) so far.
    pub moved: u64,
    /// A sender still writes: after its last write it only waits for acknowledgements,
    /// which no limit describes.
    pub writing: bool,
    /// A sender is inside a write call.
    pub in_write: bool,
}

/// What is due at one tick; [`Monitor::tick`] takes it back with the snapshots.
#[derive(Clone, Debug, PartialEq)]
pub struct Due {
    now: i64,
    sample: bool,
    cut: bool,
    at_deadline: bool,
    reads: Vec<Read>,
}

impl Due {
    /// The sockets to read, in flow order.
    pub fn reads(&self) -> &[Read] {
        &self.reads
    }

    /// Samples are due at this tick.
    pub fn samples(&self) -> bool {
        self.sample
    }

    /// Report intervals are cut at this tick.
    pub fn cuts(&self) -> bool {
        self.cut
    }
}

/// One socket to read at a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// The flow's index, in the order given to [`Monitor::new`].
    pub flow: usize,
    /// Read BBR's model too.
    pub bbr: bool,
    /// First end the connection keeping its counters (SOCK_DESTROY), as the drain limit
    /// stopped its sender: the count read then is its last, as no retransmission can
    /// follow. Where that worked, pass its [`Status::cut_drain`] as false to
    /// [`Monitor::tick`]; where not, the tick asks for a reset once the count is taken.
    pub abort: bool,
}

/// What a tick produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tick {
    /// Report intervals cut, in flow order.
    pub intervals: Vec<Interval>,
    /// Flows whose connections to reset now (a reset zeroes the counters, so only once
    /// their last interval is counted): a drain cut where no abort worked.
    pub resets: Vec<usize>,
    /// The senders' window rates summed, bit/s, when a pacer follows it and it is known.
    pub window_rate_bps: Option<u64>,
    /// Every flow has ended and has its last interval: the monitor is done.
    pub finished: bool,
}

/// One report interval of one flow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub flow: u32,
    pub index: u32,
    pub role: Role,
    /// Its bounds, µs on the shell's clock.
    pub start_us: i64,
    pub end_us: i64,
    /// Sender: bytes newly acknowledged; receiver: bytes read.
    pub bytes: u64,
    /// The socket's own counters over the interval, whatever its role: bytes newly
    /// acknowledged (tcpi_bytes_acked) and received (tcpi_bytes_received).
    pub acked_bytes: u64,
    pub received_bytes: u64,
    pub retransmits: u64,
    pub cwnd: u32,
    pub srtt_us: u32,
    pub limits: LimitShares,
    /// After the test's deadline: the drain of the sender's backlog.
    pub drain: bool,
}

/// What the monitor learned of one flow over its life.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Watched {
    /// Samples taken.
    pub samples: u64,
    /// A sender's smoothed RTT over its samples and intervals.
    pub rtt: RttStats,
    /// A sender's time booked sample by sample to what held it back; `None` where
    /// nothing was booked (no samples: the kernel's chrono shares are all there is).
    pub limits: Option<LimitShares>,
    /// The time booked to those limits, µs.
    pub limited_us: u64,
    /// Bytes counted when the deadline passed.
    pub at_deadline: Option<DeadlineCount>,
    /// Segments retransmitted over the intervals cut: after the last, cut from a read
    /// once the flow ended, its final count. `None` before any interval.
    pub retransmits: Option<u64>,
}

/// The monitor's state of one flow.
struct Flow {
    id: u32,
    role: Role,
    bbr: bool,
    /// When BBR's model was last kept, µs.
    bbr_read_us: i64,
    samples: u64,
    rtt: RttAccumulator,
    /// The flow's whole time, booked to limits.
    tally: LimitTally,
    at_deadline: Option<DeadlineCount>,
    retransmits: Option<u64>,
    /// Its latest sample and when it was taken: the counters an interval cut without
    /// reading the socket ends on.
    last: Option<(i64, Snapshot)>,
    /// When the flow's own thread last sampled its socket ([`Monitor::self_sampled`]).
    self_sampled_us: Option<i64>,
    /// When a tick last read its socket.
    read_us: i64,
    cursor: IntervalCursor,
}

/// Where the monitor is in a flow's current report interval.
struct IntervalCursor {
    index: u32,
    start_us: i64,
    /// tcp_info at the interval's start; `None` once the last interval is cut.
    info: Option<TcpInfo>,
    /// tcpi_bytes_acked and tcpi_bytes_received at t0: the handshake and a data intro
    /// are not payload.
    acked_base: u64,
    received_base: u64,
    /// Payload bytes counted so far (acknowledged for a sender, read for a receiver).
    counted: u64,
    /// The interval's time so far, booked to limits.
    tally: LimitTally,
    /// Up to when the sender's time is booked, µs.
    booked_us: i64,
}

impl Flow {
    fn new(start: FlowStart, t0_us: i64) -> Flow {
        let FlowStart {
            id,
            role,
            first,
            bbr,
        } = start;
        Flow {
            id,
            role,
            bbr,
            bbr_read_us: 0,
            samples: 0,
            rtt: RttAccumulator::default(),
            tally: LimitTally::default(),
            at_deadline: None,
            retransmits: None,
            last: None,
            self_sampled_us: None,
            read_us: t0_us,
            cursor: IntervalCursor {
                index: 0,
                start_us: t0_us,
                acked_base: first.map_or(0, |i| i.bytes_acked),
                received_base: first.map_or(0, |i| i.bytes_received),
                info: first,
                counted: 0,
                tally: LimitTally::default(),
                booked_us: t0_us,
            },
        }
    }

    /// Its last interval is not cut yet.
    fn open(&self) -> bool {
        self.cursor.info.is_some()
    }

    fn bbr_due(&self, now: i64) -> bool {
        self.bbr && now - self.bbr_read_us >= BBR_EVERY_US
    }

    /// Its own thread sampled it less than `every` before `now`.
    fn self_sampled_within(&self, now: i64, every: i64) -> bool {
        self.self_sampled_us.is_some_and(|t| now - t < every)
    }

    /// [`Flow::self_sampled_within`] an interval, and a tick read it less than
    /// [`BOOK_EVERY_US`] before: a sample tick need not read it.
    fn carried(&self, now: i64, every: i64) -> bool {
        self.self_sampled_within(now, every) && now - self.read_us < BOOK_EVERY_US
    }

    /// Books a sender's time since its last booking to what `snapshot` shows held it
    /// back, in the interval and the flow's whole; not once it has stopped writing.
    fn book(&mut self, now: i64, snapshot: &Snapshot, app_paced: bool) {
        if snapshot.app.is_none_or(|a| a.writing) {
            let writer = Writer {
                paced: app_paced,
                writing: snapshot.app.is_some_and(|a| a.in_write),
            };
            let limit = limits::classify(&snapshot.info, snapshot.mem.as_ref(), writer);
            let span = (now - self.cursor.booked_us).max(0) as u64;
            self.cursor.tally.book(limit, span);
            self.tally.book(limit, span);
        }
        // An interval cut at a report tick before the latest sample does not take back
        // the time booked up to that sample.
        self.cursor.booked_us = self.cursor.booked_us.max(now);
    }

    /// Takes `snapshot` read at `now` as a sample: where `book`, a sender's time booked;
    /// its RTT counted; the record to keep, with BBR's model when due.
    fn sample(
        &mut self,
        now: i64,
        snapshot: &Snapshot,
        app_paced: bool,
        host: Host,
        book: bool,
    ) -> SampleRecord {
        // A snapshot without BBR's model (a self-sample) leaves it due.
        let bbr = if self.bbr_due(now) && snapshot.bbr.is_some() {
            self.bbr_read_us = now;
            snapshot.bbr
        } else {
            None
        };
        if self.role == Role::Send {
            if book {
                self.book(now, snapshot, app_paced);
            }
            self.rtt.add(snapshot.info.rtt);
        }
        self.samples += 1;
        self.last = Some((now, *snapshot));
        SampleRecord {
            flow: self.id,
            host,
            t_us: now,
            info: snapshot.info,
            bbr,
            skmem: snapshot.mem,
        }
    }

    fn watched(&self) -> Watched {
        Watched {
            samples: self.samples,
            rtt: self.rtt.stats(),
            limits: self.tally.shares(),
            limited_us: self.tally.total_us(),
            at_deadline: self.at_deadline,
            retransmits: self.retransmits,
        }
    }

    /// Closes the current report interval at `now`, if one is open and the socket was
    /// read. A sampled sender (`app_paced` is then its application's pacing) books the
    /// time since its last sample here too; an unsampled one gets the kernel's chrono
    /// shares.
    fn cut(
        &mut self,
        now: i64,
        status: Status,
        snapshot: Option<&Snapshot>,
        app_paced: Option<bool>,
        drain: bool,
    ) -> Option<Interval> {
        if self.cursor.start_us >= now || !self.open() {
            return None;
        }
        let snapshot = snapshot?;
        let info = snapshot.info;
        let prev = self.cursor.info.replace(info).expect("checked above");
        let elapsed = (now - self.cursor.start_us) as u64;
        let limits = match app_paced.filter(|_| self.role == Role::Send) {
            Some(app_paced) => {
                self.book(now, snapshot, app_paced);
                std::mem::take(&mut self.cursor.tally)
                    .shares()
                    .unwrap_or_else(|| limits::chrono_shares(&prev, &info, elapsed))
            }
            None => limits::chrono_shares(&prev, &info, elapsed),
        };
        let moved = snapshot.app.map(|a| a.moved);
        let counted = match self.role {
            // The FIN takes one sequence number that tcpi_bytes_acked counts too.
            Role::Send => {
                let acked = info.bytes_acked.saturating_sub(self.cursor.acked_base);
                moved.map_or(acked, |m| acked.min(m))
            }
            Role::Receive => moved.unwrap_or_else(|| {
                info.bytes_received
                    .saturating_sub(self.cursor.received_base)
            }),
        };
        let retransmits = u64::from(info.total_retrans.saturating_sub(prev.total_retrans));
        let acked_bytes = info.bytes_acked.saturating_sub(prev.bytes_acked);
        let received_bytes = info.bytes_received.saturating_sub(prev.bytes_received);
        *self.retransmits.get_or_insert(0) += retransmits;
        let interval = Interval {
            flow: self.id,
            index: self.cursor.index,
            role: self.role,
            start_us: self.cursor.start_us,
            end_us: now,
            bytes: counted.saturating_sub(self.cursor.counted),
            acked_bytes,
            received_bytes,
            retransmits,
            cwnd: info.snd_cwnd,
            srtt_us: info.rtt,
            limits,
            drain,
        };
        if self.role == Role::Send {
            self.rtt.add(info.rtt);
        }
        self.cursor.index += 1;
        self.cursor.start_us = now;
        self.cursor.counted = counted;
        if status.ended {
            // The flow's last interval: nothing follows it.
            self.cursor.info = None;
        }
        Some(interval)
    }
}

/// Samples a set of connections and cuts their report intervals: see the crate's doc.
pub struct Monitor {
    config: Config,
    /// By index, in the order added; a watcher removes those that ended.
    flows: BTreeMap<usize, Flow>,
    /// The index the next flow added gets: none is given twice.
    next_flow: usize,
    samples: Vec<SampleRecord>,
    next_sample: i64,
    next_report: i64,
    past_deadline: bool,
    /// At the last sample tick, every flow still going sampled itself.
    all_self_sampled: bool,
}

impl Monitor {
    /// A monitor of `flows` from `t0_us`, when the test starts.
    pub fn new(config: Config, flows: Vec<FlowStart>, t0_us: i64) -> Monitor {
        let samples = Vec::with_capacity(config.reserved_samples);
        Monitor {
            next_sample: t0_us + config.sample_interval_us as i64,
            next_report: t0_us + config.report_interval_us.max(1) as i64,
            next_flow: flows.len(),
            flows: flows
                .into_iter()
                .map(|f| Flow::new(f, t0_us))
                .enumerate()
                .collect(),
            samples,
            past_deadline: false,
            all_self_sampled: false,
            config,
        }
    }

    fn sample_every(&self) -> i64 {
        self.config.sample_interval_us as i64
    }

    fn report_every(&self) -> i64 {
        self.config.report_interval_us.max(1) as i64
    }

    fn next_sample_wakeup(&self) -> i64 {
        let booking = self
            .flows
            .values()
            .filter(|f| f.open())
            .map(|f| f.read_us + BOOK_EVERY_US)
            .min();
        match booking {
            Some(t) if self.all_self_sampled => t.max(self.next_sample),
            _ => self.next_sample,
        }
    }

    /// When something next falls due, µs: a sample, a report tick or the deadline; a
    /// flow's end is due at once (the shell wakes the monitor for it). While every flow
    /// samples itself, no sample tick is due until the next booking read
    /// ([`BOOK_EVERY_US`]): a flow whose own samples stop is read from then on.
    pub fn next_wakeup(&self) -> i64 {
        let mut next = self.next_report;
        if self.sample_every() > 0 {
            next = next.min(self.next_sample_wakeup());
        }
        if let Some(d) = self.config.deadline_us.filter(|_| !self.past_deadline) {
            next = next.min(d);
        }
        next
    }

    /// What falls due at `now` with the flows in `status` (one per flow, in order):
    /// which sockets to read, which connections to end first.
    pub fn due(&self, now: i64, status: &[Status]) -> Due {
        assert_eq!(status.len(), self.flows.len(), "one status per flow");
        let all_ended = status.iter().all(|s| s.ended);
        let at_deadline = !self.past_deadline && self.config.deadline_us.is_some_and(|d| now >= d);
        let sample = self.sample_every() > 0 && now >= self.next_sample;
        let drain_cut = status.iter().any(|s| s.ended && s.cut_drain);
        let cut = now >= self.next_report || all_ended || at_deadline || drain_cut;
        let reads = self
            .flows
            .values()
            .zip(status)
            .enumerate()
            .filter_map(|(i, (flow, st))| {
                let sampled = sample && !st.ended;
                let bbr = sampled && flow.bbr_due(now);
                let cut_here = cut && flow.open() && flow.cursor.start_us < now;
                let read = cut_here || bbr || (sampled && !flow.carried(now, self.sample_every()));
                read.then_some(Read {
                    flow: i,
                    bbr,
                    abort: cut_here && st.ended && st.cut_drain,
                })
            })
            .collect();
        Due {
            now,
            sample,
            cut,
            at_deadline,
            reads,
        }
    }

    /// Takes the snapshots `due` asked for (one slot per flow, `None` where nothing was
    /// read or the read failed) with the flows' status after any abort.
    pub fn tick(&mut self, due: Due, status: &[Status], snapshots: &[Option<Snapshot>]) -> Tick {
        assert_eq!(status.len(), self.flows.len(), "one status per flow");
        assert_eq!(
            snapshots.len(),
            self.flows.len(),
            "one snapshot slot per flow"
        );
        let Due {
            now,
            sample,
            cut,
            at_deadline,
            reads: _,
        } = due;
        let mut tick = Tick::default();
        let app_paced = self.config.app_paced;
        if sample {
            let mut window_rate_bps = 0.0;
            let every = self.sample_every();
            for ((flow, st), snapshot) in self.flows.values_mut().zip(status).zip(snapshots) {
                let Some(snapshot) = snapshot.as_ref().filter(|_| !st.ended) else {
                    continue;
                };
                flow.read_us = now;
                if flow.self_sampled_within(now, every) && snapshot.bbr.is_none() {
                    // The flow's own samples keep the record: this read only books.
                    if flow.role == Role::Send {
                        flow.book(now, snapshot, app_paced);
                    }
                    continue;
                }
                let record = flow.sample(now, snapshot, app_paced, self.config.host, true);
                if flow.role == Role::Send {
                    if let Some(rtt) = self.config.pacing {
                        window_rate_bps += rtt.window_rate_bps(&snapshot.info);
                    }
                }
                if self.config.keep_samples {
                    self.samples.push(record);
                }
            }
            tick.window_rate_bps = (window_rate_bps > 0.0).then_some(window_rate_bps as u64);
            self.all_self_sampled = self
                .flows
                .values()
                .zip(status)
                .filter(|(flow, st)| flow.open() && !st.ended)
                .all(|(flow, _)| flow.self_sampled_within(now, every));
            // Skip ticks overslept instead of bursting to catch up.
            let every = self.sample_every();
            self.next_sample += every * ((now - self.next_sample) / every + 1);
        }
        if cut {
            let sampled = (self.sample_every() > 0).then_some(app_paced);
            let drain = self.past_deadline;
            for ((flow, &st), snapshot) in self.flows.values_mut().zip(status).zip(snapshots) {
                let Some(interval) = flow.cut(now, st, snapshot.as_ref(), sampled, drain) else {
                    continue;
                };
                if at_deadline {
                    flow.at_deadline = Some(DeadlineCount {
                        bytes: flow.cursor.counted,
                        t_us: now,
                    });
                }
                tick.intervals.push(interval);
            }
            self.past_deadline |= at_deadline;
            tick.resets = self
                .flows
                .values()
                .zip(status)
                .enumerate()
                .filter(|(_, (flow, st))| !flow.open() && st.ended && st.cut_drain)
                .map(|(i, _)| i)
                .collect();
            let every = self.report_every();
            self.next_report += every * ((now - self.next_report) / every + 1);
        }
        tick.finished = cut && status.iter().all(|s| s.ended);
        tick
    }

    /// A connection that joins at `now` (it opened, or was first seen, while the others
    /// ran): its intervals start there. Returns its index.
    pub fn add_flow(&mut self, start: FlowStart, now: i64) -> usize {
        let index = self.next_flow;
        self.next_flow += 1;
        self.flows.insert(index, Flow::new(start, now));
        index
    }

    fn flow_mut(&mut self, flow: usize) -> &mut Flow {
        self.flows.get_mut(&flow).expect("a flow of this monitor")
    }

    /// Samples flow `flow` read at `now`, off the schedule (a state change, a closing
    /// socket's lookup, a dump of its own timing): its time booked and the sample kept
    /// as a scheduled one is. A sample older than the flow's latest is nothing new.
    pub fn sample_now(&mut self, flow: usize, now: i64, snapshot: &Snapshot) {
        self.sample_off_schedule(flow, now, snapshot, true);
    }

    /// A sample off the schedule, its time booked where `book`; whether it was taken.
    fn sample_off_schedule(
        &mut self,
        flow: usize,
        now: i64,
        snapshot: &Snapshot,
        book: bool,
    ) -> bool {
        let app_paced = self.config.app_paced;
        let host = self.config.host;
        let keep = self.config.keep_samples;
        let flow = self.flow_mut(flow);
        if !flow.open() || flow.last.is_some_and(|(t, _)| now < t) {
            return false;
        }
        let record = flow.sample(now, snapshot, app_paced, host, book);
        if keep {
            self.samples.push(record);
        }
        true
    }

    /// Samples flow `flow` as its own thread read it at `now`, between two of its writes
    /// or reads (where reading its socket waits for no lock the thread holds): kept as
    /// [`Monitor::sample_now`] keeps a sample, but no time booked by it (see
    /// [`BOOK_EVERY_US`]). For the next interval the sample ticks leave the flow unread
    /// ([`Monitor::due`]) unless a cut, BBR's model or the booking asks, and while every
    /// flow samples itself the monitor wakes only for those ([`Monitor::next_wakeup`]).
    pub fn self_sampled(&mut self, flow: usize, now: i64, snapshot: &Snapshot) {
        if self.sample_off_schedule(flow, now, snapshot, false) {
            self.flow_mut(flow).self_sampled_us = Some(now);
        }
    }

    /// When the next report tick comes, µs.
    pub fn next_report(&self) -> i64 {
        self.next_report
    }

    /// A report tick has come at `now`, for [`Monitor::cut_sampled`].
    pub fn report_due(&self, now: i64) -> bool {
        now >= self.next_report
    }

    /// At a report tick, cuts every open flow's interval without reading its socket: at
    /// its latest sample, or at the tick where that sample came later. Nothing before
    /// the tick.
    pub fn cut_sampled(&mut self, now: i64) -> Vec<Interval> {
        if !self.report_due(now) {
            return Vec::new();
        }
        let tick = self.next_report;
        let every = self.report_every();
        self.next_report += every * ((now - self.next_report) / every + 1);
        let app_paced = Some(self.config.app_paced);
        self.flows
            .values_mut()
            .filter_map(|flow| {
                let (t, snapshot) = flow.last?;
                flow.cut(
                    t.min(tick),
                    Status::default(),
                    Some(&snapshot),
                    app_paced,
                    false,
                )
            })
            .collect()
    }

    /// Ends flow `flow` at its latest sample, whenever that was: its last interval cut
    /// there from it (none if no time passed since the last cut), and nothing after.
    pub fn end_flow(&mut self, flow: usize) -> Option<Interval> {
        let app_paced = Some(self.config.app_paced);
        let flow = self.flow_mut(flow);
        let ended = Status {
            ended: true,
            cut_drain: false,
        };
        let last = flow.last;
        let interval =
            last.and_then(|(t, snapshot)| flow.cut(t, ended, Some(&snapshot), app_paced, false));
        flow.cursor.info = None;
        interval
    }

    /// What was learned of flow `flow` so far.
    pub fn watched(&self, flow: usize) -> Watched {
        self.flows
            .get(&flow)
            .expect("a flow of this monitor")
            .watched()
    }

    /// Lets go of a flow ended by [`Monitor::end_flow`]: what was learned of it, and its
    /// place freed, so a watch that sees connections come and go for days keeps only
    /// those open. The others keep their indices; [`Monitor::due`] and
    /// [`Monitor::tick`] then take one status per flow held, in order.
    pub fn remove_flow(&mut self, flow: usize) -> Watched {
        let removed = self.flows.remove(&flow).expect("a flow of this monitor");
        assert!(!removed.open(), "only an ended flow is removed");
        removed.watched()
    }

    /// What was learned of each flow, in order, and the samples taken.
    pub fn finish(self) -> (Vec<Watched>, Vec<SampleRecord>) {
        let watched = self.flows.values().map(Flow::watched).collect();
        (watched, self.samples)
    }
}

#[derive(Default)]
struct RttAccumulator {
    min: u32,
    max: u32,
    sum: u64,
    count: u64,
}

impl RttAccumulator {
    fn add(&mut self, rtt_us: u32) {
        if rtt_us == 0 {
            return;
        }
        self.min = if self.count == 0 {
            rtt_us
        } else {
            self.min.min(rtt_us)
        };
        self.max = self.max.max(rtt_us);
        self.sum += u64::from(rtt_us);
        self.count += 1;
    }

    fn stats(&self) -> RttStats {
        RttStats {
            min_us: self.min,
            mean_us: if self.count == 0 {
                0.0
            } else {
                self.sum as f64 / self.count as f64
            },
            max_us: self.max,
        }
    }
}

pub mod watch;

#[cfg(test)]
mod tests;
