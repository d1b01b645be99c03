//! `tcplab watch` without I/O: TCP connections tcplab did not open, followed from the
//! sock_diag samples of their sockets ([`tcplab_model::sockdiag`]) and the kernel's state
//! changes (`sock:inet_sock_set_state`), each from its first sample to its final
//! counters. The shell (the CLI) dumps, looks sockets up, reads the tracepoint and the
//! clock; the [`Tracker`] decides what is a connection and when it opened and closed, in
//! whatever time it is given, and has a [`Monitor`] cut its intervals and book its
//! limits as it does for tcplab's own flows.
//!
//! A connection is one socket, named by its cookie. It opens at its first sample with
//! tcp_info (a request or timewait mini-socket has none) and closes at the first of:
//! a sample in TIME_WAIT or CLOSE, a complete dump without it, a lookup that finds it
//! gone. Its final counters are those of its last sample with tcp_info; while it is
//! closing (FIN_WAIT1/2, CLOSE_WAIT, LAST_ACK, CLOSING) the shell looks it up every
//! [`CLOSING_POLL_US`], so that sample is as late as the socket allows.
//!
//! Each sample tick reads every matching socket with a dump, which walks the kernel's
//! whole table of connections (some 150 µs here, whatever matches). Where the tracepoint
//! announces every open and close ([`WatchConfig::announced`]), a tick reads the open
//! connections by lookup instead, which walks nothing, and a dump comes only every
//! [`DISCOVERY_DUMP_US`], to find what the tracepoint's reader may have lost, or when
//! more than [`LOOKUP_AT_MOST`] connections are open, where a dump is the cheaper.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

use tcplab_analysis::limits::chrono_shares;
use tcplab_model::sockdiag::{CongestionName, SocketKey, SocketSample};
use tcplab_record::tcp_state::TcpState;
use tcplab_record::tcpinfo::TcpInfo;
use tcplab_record::{
    BufferSize, ClockOffset, Direction, FinalCounters, FlowRecord, Host, HostMeta, IntervalRecord,
    LimitShares, RttStats, RunRecord, RunStatus, SampleRecord, Summary, TestEnd, TestParams,
    WatchRecord, WatchedFlow, SCHEMA,
};

use crate::{Config, FlowStart, Interval, Monitor, Role, Snapshot, Watched};

/// How often a closing connection is looked up again, µs: its last counters are at most
/// this old when it goes.
pub const CLOSING_POLL_US: i64 = 1_000;

/// With the tracepoint, how often a dump still comes, µs.
pub const DISCOVERY_DUMP_US: i64 = 100_000;

/// With the tracepoint, the most open connections a tick looks up rather than dumps:
/// bench/watch.sh measured 2.0–2.1 µs a socket looked up against a dump's 1.1 µs a
/// socket plus its walk of about 150 µs, the same cost near 140 sockets.
pub const LOOKUP_AT_MOST: usize = 128;

/// How a sample tick reads the sockets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SampleRead {
    /// Every socket the filter matches: hand the result to [`Tracker::dump`].
    Dump,
    /// These open connections' sockets: hand what is found and gone to
    /// [`Tracker::sampled`].
    Lookup(Vec<SocketKey>),
}

/// The process holding a socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
}

/// What the shell says of a socket the tracker has not seen: watch it (with its
/// process, if known), not, or ask again at its next sample (its owner is not known
/// yet).
pub enum Admit {
    Watch(Option<Process>),
    Ignore,
    Later,
}

/// One state change of a TCP socket, from a `sock:inet_sock_set_state` trace line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateChange {
    /// The trace clock's time (CLOCK_MONOTONIC with `trace_clock mono`), µs.
    pub t_us: i64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub new: TcpState,
}

impl StateChange {
    /// The socket to look up for it.
    pub fn key(&self) -> SocketKey {
        SocketKey::tuple(self.local, self.remote)
    }
}

/// The tracepoint's filter: TCP sockets only (the same tracepoint serves SCTP and MPTCP).
pub const TRACE_FILTER: &str = "protocol == 6";

/// Parses one line of `trace_pipe` holding an `inet_sock_set_state` event; `None` for
/// any other line.
pub fn parse_state_change(line: &str) -> Option<StateChange> {
    let at = line.find(": inet_sock_set_state: ")?;
    let t_us = tcplab_analysis::events::parse_line_time(&line[..at])?;
    let fields = &line[at + ": inet_sock_set_state: ".len()..];
    let field = |key: &str| {
        fields
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    if field("protocol")? != "IPPROTO_TCP" {
        return None;
    }
    let (saddr, daddr) = match field("family")? {
        "AF_INET" => ("saddr", "daddr"),
        "AF_INET6" => ("saddrv6", "daddrv6"),
        _ => return None,
    };
    let addr = |key: &str, port: &str| -> Option<SocketAddr> {
        let ip: IpAddr = field(key)?.parse().ok()?;
        Some(SocketAddr::new(ip, field(port)?.parse().ok()?))
    };
    let new = match field("newstate")?.strip_prefix("TCP_")? {
        "NEW_SYN_RECV" => TcpState::SynRecv,
        name => TcpState::ALL.into_iter().find(|s| s.name() == name)?,
    };
    Some(StateChange {
        t_us,
        local: addr(saddr, "sport")?,
        remote: addr(daddr, "dport")?,
        new,
    })
}

/// What the tracker tells the shell, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    Opened(u32),
    Interval(IntervalRecord),
    Closed(u32),
}

/// The tracker's settings.
#[derive(Clone, Copy, Debug)]
pub struct WatchConfig {
    /// The watch's t0, on the samples' clock (CLOCK_MONOTONIC µs).
    pub t0_us: i64,
    pub sample_interval_us: u64,
    /// Intervals are cut (and live lines printed) this often.
    pub report_interval_us: u64,
    /// Keep every ended connection, and every sample until the shell takes it
    /// ([`Tracker::take_samples`]), for `--db`; without, an ended connection is dropped
    /// once the shell has read its events.
    pub keep: bool,
    /// The shell reads the tracepoint and looks up each socket whose state changes, so
    /// every connection that opens is announced: sample ticks may look the open ones up
    /// instead of dumping (see the module's doc).
    pub announced: bool,
}

/// One connection followed: what the shell prints and stores.
#[derive(Clone, Debug)]
pub struct Connection {
    pub id: u32,
    pub key: SocketKey,
    /// Its inode (0: no process holds it — not accepted yet, or an orphan), and when a
    /// sample first showed it.
    pub inode: u32,
    inode_us: i64,
    pub process: Option<Process>,
    pub first_us: i64,
    pub last_us: i64,
    /// Opened while watched, rather than found open at the first dump.
    pub opened: bool,
    pub closed: bool,
    pub state: TcpState,
    pub congestion: Option<CongestionName>,
    /// Its first and last tcp_info.
    pub first_info: TcpInfo,
    pub last_info: TcpInfo,
    pub sample_count: u64,
    /// Its flow in the tracker's monitor.
    flow: usize,
    /// What the monitor learned of it, once it ended.
    learned: Watched,
}

impl Connection {
    /// The record of it a stored run keeps.
    pub fn watched(&self, t0_us: i64) -> WatchedFlow {
        let info = &self.last_info;
        let limited_us = self.learned.limited_us;
        WatchedFlow {
            cookie: self.key.cookie,
            pid: self.process.as_ref().map(|p| p.pid),
            comm: self.process.as_ref().map(|p| p.comm.clone()),
            start_us: self.first_us - t0_us,
            end_us: self.last_us - t0_us,
            opened: self.opened,
            closed: self.closed,
            last_state: self.state,
            counters: FinalCounters {
                bytes_acked: info.bytes_acked,
                bytes_received: info.bytes_received,
                bytes_sent: info.bytes_sent,
                retransmits: u64::from(info.total_retrans),
                min_rtt_us: info.min_rtt,
                limited_us,
                limits: self.limit_shares(),
            },
            end: if self.sends() {
                Host::Client
            } else {
                Host::Server
            },
            peer: None,
        }
    }

    /// What held its sending back over the samples; all `app` where no time was booked.
    pub fn limit_shares(&self) -> LimitShares {
        self.learned.limits.unwrap_or(LimitShares {
            app: 1.0,
            ..LimitShares::default()
        })
    }

    pub fn rtt(&self) -> RttStats {
        self.learned.rtt
    }

    /// Its socket sent more than it received: the flow's sender.
    pub fn sends(&self) -> bool {
        self.last_info.bytes_acked >= self.last_info.bytes_received
    }
}

/// How long a connection's `Opened` waits for its process: an accepted socket is a
/// process's once the server calls accept(), and the shell reads sockets' owners at
/// most every 10 ms. It comes once the process is known, or this long after the
/// connection was first seen (a socket of another user's stays without), or as it
/// ends.
pub const OPENED_WAITS_FOR_PROCESS_US: i64 = 50_000;

/// Follows the connections of one watch.
pub struct Tracker {
    config: WatchConfig,
    /// Every connection's intervals and limits: a flow each, added as it opens.
    monitor: Monitor,
    open: BTreeMap<u64, Connection>,
    /// Open connections by 4-tuple: a tracepoint names a socket by it.
    by_tuple: HashMap<(SocketAddr, SocketAddr), u64>,
    /// Sockets the shell said not to watch, and closed connections' cookies, so neither
    /// is asked about or opened again.
    settled: HashSet<u64>,
    closed: Vec<Connection>,
    /// Each ended connection's place in `closed`.
    closed_at: HashMap<u32, usize>,
    /// Connections that closed, and that were open at the end.
    closed_count: u64,
    open_at_end: u64,
    events: Vec<WatchEvent>,
    /// Open connections whose `Opened` waits for their process
    /// ([`OPENED_WAITS_FOR_PROCESS_US`]).
    unannounced: Vec<u32>,
    /// With [`WatchConfig::keep`], the samples not yet taken, each under its
    /// connection's id, on the client's side.
    kept: Vec<SampleRecord>,
    next_id: u32,
    next_sample_us: i64,
    /// With [`WatchConfig::announced`], when a tick must dump rather than look up.
    next_discovery_us: i64,
    next_closing_us: i64,
    dumps: u64,
    missed: u64,
}

impl Tracker {
    pub fn new(config: WatchConfig) -> Tracker {
        let monitor = Monitor::new(
            Config {
                host: Host::Client,
                sample_interval_us: config.sample_interval_us,
                report_interval_us: config.report_interval_us,
                deadline_us: None,
                app_paced: false,
                pacing: None,
                reserved_samples: 0,
                // Each connection keeps its own, to be dropped with it.
                keep_samples: false,
            },
            Vec::new(),
            config.t0_us,
        );
        Tracker {
            config,
            monitor,
            open: BTreeMap::new(),
            by_tuple: HashMap::new(),
            settled: HashSet::new(),
            closed: Vec::new(),
            closed_at: HashMap::new(),
            closed_count: 0,
            open_at_end: 0,
            unannounced: Vec::new(),
            events: Vec::new(),
            kept: Vec::new(),
            next_id: 0,
            next_sample_us: config.t0_us,
            next_discovery_us: config.t0_us,
            next_closing_us: config.t0_us,
            dumps: 0,
            missed: 0,
        }
    }

    /// When the shell should next call in: a sample tick, a report tick, or a closing
    /// connection's lookup.
    pub fn next_wakeup(&self) -> i64 {
        let closing = if self.closing().next().is_some() {
            self.next_closing_us
        } else {
            i64::MAX
        };
        self.next_sample_us
            .min(self.monitor.next_report())
            .min(closing)
    }

    /// How to read the sockets at `now`, if a sample tick is due.
    pub fn sample_due(&self, now: i64) -> Option<SampleRead> {
        if now < self.next_sample_us {
            return None;
        }
        let lookup = self.config.announced
            && self.dumps > 0
            && now < self.next_discovery_us
            && self.open.len() <= LOOKUP_AT_MOST;
        Some(if lookup {
            SampleRead::Lookup(self.open.values().map(|c| c.key).collect())
        } else {
            SampleRead::Dump
        })
    }

    /// The sample tick is taken at `t_us`: the next is an interval later, ticks missed
    /// meanwhile skipped, not caught up.
    fn ticked(&mut self, t_us: i64) {
        let interval = self.config.sample_interval_us as i64;
        self.next_sample_us += interval;
        if self.next_sample_us <= t_us {
            self.next_sample_us = t_us + interval;
        }
    }

    /// The closing connections to look up at `now`, if their time has come (empty
    /// otherwise); the next lookup is then [`CLOSING_POLL_US`] later.
    pub fn closing_due(&mut self, now: i64) -> Vec<SocketKey> {
        if now < self.next_closing_us {
            return Vec::new();
        }
        self.next_closing_us = now + CLOSING_POLL_US;
        self.closing().map(|c| c.key).collect()
    }

    fn closing(&self) -> impl Iterator<Item = &Connection> {
        self.open.values().filter(|c| {
            matches!(
                c.state,
                TcpState::FinWait1
                    | TcpState::FinWait2
                    | TcpState::CloseWait
                    | TcpState::LastAck
                    | TcpState::Closing
            )
        })
    }

    /// A complete dump taken at `t_us`: every socket the filter matched. A connection
    /// missing from it is gone. `admit` is asked once about each socket not seen before.
    pub fn dump(
        &mut self,
        t_us: i64,
        samples: &[SocketSample],
        admit: &mut dyn FnMut(&SocketSample) -> Admit,
    ) {
        let first = self.dumps == 0;
        self.dumps += 1;
        self.ticked(t_us);
        self.next_discovery_us = t_us + DISCOVERY_DUMP_US;
        let mut seen = HashSet::with_capacity(samples.len());
        for sample in samples {
            seen.insert(sample.key.cookie);
            self.observe(sample, !first, admit);
        }
        let gone: Vec<u64> = self
            .open
            .keys()
            .filter(|cookie| !seen.contains(cookie))
            .copied()
            .collect();
        for cookie in gone {
            self.close(cookie);
        }
    }

    /// A sample tick's lookup ([`SampleRead::Lookup`]) taken at `t_us`: the sockets
    /// found, and the keys found gone.
    pub fn sampled(
        &mut self,
        t_us: i64,
        found: &[SocketSample],
        gone: &[SocketKey],
        admit: &mut dyn FnMut(&SocketSample) -> Admit,
    ) {
        self.ticked(t_us);
        self.looked_up(found, gone, admit);
    }

    /// Lookups of sockets whose state changed, or of closing connections: the sockets
    /// found, and the keys found gone.
    pub fn looked_up(
        &mut self,
        found: &[SocketSample],
        gone: &[SocketKey],
        admit: &mut dyn FnMut(&SocketSample) -> Admit,
    ) {
        for sample in found {
            self.observe(sample, true, admit);
        }
        for key in gone {
            let cookie = match key.cookie {
                SocketKey::NO_COOKIE => self.by_tuple.get(&(key.local, key.remote)).copied(),
                cookie => Some(cookie),
            };
            if let Some(cookie) = cookie {
                self.close(cookie);
            }
        }
    }

    /// Cuts each open connection's interval when a report tick has come.
    pub fn advance(&mut self, now: i64) {
        self.announce(now);
        for interval in self.monitor.cut_sampled(now) {
            let record = self.record(interval);
            self.events.push(WatchEvent::Interval(record));
        }
    }

    /// A monitor's interval as the run keeps it, on the watch's time base.
    fn record(&self, interval: Interval) -> IntervalRecord {
        let Interval {
            flow,
            index,
            role: _,
            start_us,
            end_us,
            // A watched socket's count is one of the two below, as its run pairs it.
            bytes: _,
            acked_bytes,
            received_bytes,
            retransmits,
            cwnd,
            srtt_us,
            limits,
            drain,
        } = interval;
        let since = |t: i64| (t - self.config.t0_us).max(0) as u64;
        IntervalRecord {
            flow,
            index,
            start_us: since(start_us),
            end_us: since(end_us),
            acked_bytes,
            received_bytes,
            retransmits,
            cwnd,
            srtt_us,
            limits,
            udp: None,
            drain,
        }
    }

    /// Ends the watch: every open connection's last interval is cut at its latest sample
    /// and it is kept as still open.
    pub fn finish(&mut self) {
        let open = std::mem::take(&mut self.open);
        for (_, conn) in open {
            self.open_at_end += 1;
            self.announce_now(conn.id);
            self.end(conn);
        }
        self.by_tuple.clear();
    }

    /// What happened since the last call, in order. Without [`WatchConfig::keep`],
    /// the connections that ended before the last call are dropped.
    pub fn events(&mut self) -> std::vec::Drain<'_, WatchEvent> {
        if !self.config.keep {
            self.closed.retain(|c| {
                self.events.iter().any(|e| {
                    *e == WatchEvent::Closed(c.id)
                        || matches!(e, WatchEvent::Interval(i) if i.flow == c.id)
                })
            });
            self.closed_at = self
                .closed
                .iter()
                .enumerate()
                .map(|(k, c)| (c.id, k))
                .collect();
        }
        self.events.drain(..)
    }

    /// An open or ended connection.
    pub fn connection(&self, id: u32) -> Option<&Connection> {
        match self.closed_at.get(&id) {
            Some(&k) => self.closed.get(k),
            None => self.open.values().find(|c| c.id == id),
        }
    }

    /// How many connections closed, and how many were open at [`Tracker::finish`].
    pub fn counts(&self) -> (u64, u64) {
        (self.closed_count, self.open_at_end)
    }

    /// The connections that closed (or were open at [`Tracker::finish`]), in the order
    /// they ended: all of them with [`WatchConfig::keep`], else those whose events are
    /// still to be read.
    pub fn ended(&self) -> &[Connection] {
        &self.closed
    }

    /// The samples kept since the last call, in the order taken, each under its
    /// connection's id on the client's side ([`SampleOwners`] names them as stored).
    pub fn take_samples(&mut self) -> Vec<SampleRecord> {
        std::mem::take(&mut self.kept)
    }

    /// How many samples are kept and not yet taken.
    pub fn kept_samples(&self) -> usize {
        self.kept.len()
    }

    /// Open connections whose process is not known but may be, their inode first seen at
    /// or after `since_us`: their id and inode.
    pub fn unowned(&self, since_us: i64) -> Vec<(u32, u32)> {
        self.open
            .values()
            .filter(|c| c.process.is_none() && c.inode != 0 && c.inode_us >= since_us)
            .map(|c| (c.id, c.inode))
            .collect()
    }

    /// The process of open connection `id`, read after it was first seen.
    pub fn set_process(&mut self, id: u32, process: Process) {
        if let Some(conn) = self.open.values_mut().find(|c| c.id == id) {
            conn.process = Some(process);
        }
    }

    /// How many connections are open now.
    pub fn open_now(&self) -> usize {
        self.open.len()
    }

    /// Whether any connection was ever followed.
    pub fn any(&self) -> bool {
        self.next_id > 0
    }

    /// Sockets first seen without tcp_info, after a dump's start: connections that
    /// opened and reached TIME_WAIT before any sample.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    pub fn config(&self) -> &WatchConfig {
        &self.config
    }

    fn observe(
        &mut self,
        sample: &SocketSample,
        opened: bool,
        admit: &mut dyn FnMut(&SocketSample) -> Admit,
    ) {
        let cookie = sample.key.cookie;
        if self.settled.contains(&cookie) {
            return;
        }
        let Some(info) = sample.tcp_info else {
            // A mini-socket: a connection in its handshake, or one that is done.
            if self.open.contains_key(&cookie) {
                self.close(cookie);
            } else if matches!(sample.state, TcpState::TimeWait | TcpState::FinWait2) {
                self.missed += 1;
                self.settled.insert(cookie);
            }
            return;
        };
        if !self.open.contains_key(&cookie) {
            if matches!(
                sample.state,
                TcpState::SynSent | TcpState::SynRecv | TcpState::Listen | TcpState::Close
            ) {
                // Not a connection (yet): a handshake is asked about again once
                // established; a listener, or a socket closed before it was seen, never is.
                return;
            }
            let process = match admit(sample) {
                Admit::Watch(process) => process,
                Admit::Ignore => {
                    self.settled.insert(cookie);
                    return;
                }
                Admit::Later => return,
            };
            let id = self.next_id;
            self.next_id += 1;
            if process.is_some() {
                self.events.push(WatchEvent::Opened(id));
            } else {
                self.unannounced.push(id);
            }
            let conn = Connection {
                id,
                key: sample.key,
                inode: sample.inode,
                inode_us: sample.t_us,
                process,
                first_us: sample.t_us,
                last_us: sample.t_us,
                opened: opened || info.bytes_acked + info.bytes_received == 0,
                closed: false,
                state: sample.state,
                congestion: sample.congestion,
                first_info: info,
                last_info: info,
                sample_count: 0,
                flow: self.monitor.add_flow(
                    FlowStart {
                        id,
                        role: Role::Send,
                        first: Some(info),
                        bbr: false,
                    },
                    sample.t_us,
                ),
                learned: Watched::default(),
            };
            self.by_tuple
                .insert((sample.key.local, sample.key.remote), cookie);
            self.open.insert(cookie, conn);
        }
        let t0 = self.config.t0_us;
        let keep = self.config.keep;
        let conn = self.open.get_mut(&cookie).expect("opened above");
        if sample.t_us < conn.last_us {
            // A lookup answered before a dump read later: nothing new.
            return;
        }
        if conn.inode == 0 && sample.inode != 0 {
            // Accepted since: a process holds it now.
            conn.inode = sample.inode;
            conn.inode_us = sample.t_us;
        }
        let snapshot = Snapshot {
            info,
            mem: sample.skmem,
            bbr: sample.bbr,
            app: None,
        };
        self.monitor.sample_now(conn.flow, sample.t_us, &snapshot);
        conn.last_us = sample.t_us;
        conn.state = sample.state;
        conn.last_info = info;
        conn.congestion = sample.congestion.or(conn.congestion);
        conn.sample_count += 1;
        if keep {
            self.kept.push(SampleRecord {
                flow: conn.id,
                host: Host::Client,
                t_us: sample.t_us - t0,
                info,
                bbr: sample.bbr,
                skmem: sample.skmem,
            });
        }
        if matches!(sample.state, TcpState::TimeWait | TcpState::Close) {
            self.close(cookie);
        }
    }

    fn close(&mut self, cookie: u64) {
        let Some(mut conn) = self.open.remove(&cookie) else {
            return;
        };
        self.by_tuple.remove(&(conn.key.local, conn.key.remote));
        self.settled.insert(cookie);
        conn.closed = true;
        self.closed_count += 1;
        let id = conn.id;
        self.announce_now(id);
        self.end(conn);
        self.events.push(WatchEvent::Closed(id));
    }

    /// The `Opened` of each connection waiting for its process that has it now, or has
    /// waited long enough at `now`.
    fn announce(&mut self, now: i64) {
        let open = &self.open;
        let mut due = Vec::new();
        self.unannounced.retain(|&id| {
            let ready = open.values().find(|c| c.id == id).is_none_or(|c| {
                c.process.is_some() || now - c.first_us >= OPENED_WAITS_FOR_PROCESS_US
            });
            if ready {
                due.push(id);
            }
            !ready
        });
        self.events.extend(due.into_iter().map(WatchEvent::Opened));
    }

    /// Connection `id`'s `Opened`, if it still waits: it ends now.
    fn announce_now(&mut self, id: u32) {
        if let Some(k) = self.unannounced.iter().position(|&u| u == id) {
            self.unannounced.remove(k);
            self.events.push(WatchEvent::Opened(id));
        }
    }

    /// Cuts its last interval, at its latest sample, and keeps what was learned of it.
    fn end(&mut self, mut conn: Connection) {
        if let Some(interval) = self.monitor.end_flow(conn.flow) {
            let record = self.record(interval);
            self.events.push(WatchEvent::Interval(record));
        }
        conn.learned = self.monitor.remove_flow(conn.flow);
        self.closed_at.insert(conn.id, self.closed.len());
        self.closed.push(conn);
    }
}

/// What a watch's stored run says of itself besides its connections.
#[derive(Clone, Debug)]
pub struct WatchMeta {
    pub started_unix_us: i64,
    pub tool_version: String,
    pub host: HostMeta,
    pub label: Option<String>,
    pub tags: Vec<String>,
    /// The filter as given.
    pub filter: String,
    pub tracepoint: bool,
    /// How long the watch lasted, µs.
    pub duration_us: u64,
    /// Interrupted (Ctrl-C) rather than run to its `-t`.
    pub interrupted: bool,
}

/// Where a finished watch's run keeps each connection's samples: under its flow's id,
/// the receiver's as the server's.
pub struct SampleOwners {
    by_connection: HashMap<u32, (u32, Host)>,
}

impl SampleOwners {
    /// The ended connections' owners in `tracker`'s run.
    pub fn of(tracker: &Tracker) -> SampleOwners {
        SampleOwners::of_pairs(&pair_ends(&ended_in_order(tracker)))
    }

    /// The owners where each flow is one of `pairs`, in order.
    fn of_pairs(pairs: &[Ends]) -> SampleOwners {
        let mut by_connection = HashMap::new();
        for (id, ends) in pairs.iter().enumerate() {
            for (end, host) in [(ends.sender, Host::Client), (ends.receiver, Host::Server)] {
                if let Some(c) = end {
                    by_connection.insert(c.id, (id as u32, host));
                }
            }
        }
        SampleOwners { by_connection }
    }

    /// `sample`, as [`Tracker::take_samples`] gave it, as the run keeps it; `None` for
    /// a connection the run does not keep.
    pub fn relabel(&self, sample: SampleRecord) -> Option<SampleRecord> {
        let &(flow, host) = self.by_connection.get(&sample.flow)?;
        Some(SampleRecord {
            flow,
            host,
            ..sample
        })
    }
}

/// The connections that ended, in the order they opened.
fn ended_in_order(tracker: &Tracker) -> Vec<&Connection> {
    let mut ended: Vec<&Connection> = tracker.ended().iter().collect();
    ended.sort_by_key(|c| c.id);
    ended
}

/// A finished watch as a run of kind `watch`: each connection a flow, with its intervals
/// (as the tracker cut them) and `samples` (as [`Tracker::take_samples`] gave them).
pub fn run_record(
    tracker: &Tracker,
    intervals: Vec<IntervalRecord>,
    samples: Vec<SampleRecord>,
    meta: WatchMeta,
) -> RunRecord {
    let config = tracker.config();
    let ended = ended_in_order(tracker);
    let pairs = pair_ends(&ended);
    let flows: Vec<FlowRecord> = pairs
        .iter()
        .enumerate()
        .map(|(id, ends)| flow_record(id as u32, ends, config.t0_us))
        .collect();
    let owners = SampleOwners::of_pairs(&pairs);
    let samples = samples
        .into_iter()
        .filter_map(|s| owners.relabel(s))
        .collect();
    // A flow's intervals are its sender's where it was watched.
    let mut interval_of: HashMap<u32, (u32, bool)> = HashMap::new();
    for (id, ends) in pairs.iter().enumerate() {
        let id = id as u32;
        match (ends.sender, ends.receiver) {
            (Some(s), _) => interval_of.insert(s.id, (id, true)),
            (None, Some(r)) => interval_of.insert(r.id, (id, false)),
            (None, None) => None,
        };
    }
    let intervals = intervals
        .into_iter()
        .filter_map(|i| {
            let (flow, sender) = *interval_of.get(&i.flow)?;
            // The other end's count: what one end saw acknowledged the other received.
            let bytes = if sender {
                i.acked_bytes
            } else {
                i.received_bytes
            };
            Some(IntervalRecord {
                flow,
                acked_bytes: bytes,
                received_bytes: bytes,
                ..i
            })
        })
        .collect();
    let window_seconds = meta.duration_us as f64 / 1e6;
    let rate = |bytes: u64| {
        if window_seconds > 0.0 {
            bytes as f64 * 8.0 / window_seconds
        } else {
            0.0
        }
    };
    let sent_bytes = flows.iter().map(|f| f.sent_bytes).sum();
    let received_bytes = flows.iter().map(|f| f.received_bytes).sum();
    let senders: Vec<(LimitShares, f64)> = flows
        .iter()
        .filter(|f| f.samples > 0)
        .map(|f| (f.limits, f.sender_seconds))
        .collect();
    let limits = LimitShares::weighted_mean(&senders);
    let rtts: Vec<&RttStats> = flows
        .iter()
        .map(|f| &f.rtt)
        .filter(|r| r.min_us > 0)
        .collect();
    let rtt = RttStats {
        min_us: rtts.iter().map(|r| r.min_us).min().unwrap_or(0),
        mean_us: if rtts.is_empty() {
            0.0
        } else {
            rtts.iter().map(|r| r.mean_us).sum::<f64>() / rtts.len() as f64
        },
        max_us: rtts.iter().map(|r| r.max_us).max().unwrap_or(0),
    };
    RunRecord {
        schema: SCHEMA.into(),
        tool_version: meta.tool_version,
        label: meta.label,
        tags: meta.tags,
        status: if meta.interrupted {
            RunStatus::Incomplete
        } else {
            RunStatus::Done
        },
        error: None,
        started_unix_us: meta.started_unix_us,
        target: format!("watch {}", meta.filter).trim_end().to_owned(),
        params: TestParams {
            streams: u16::try_from(flows.len()).unwrap_or(u16::MAX),
            end: TestEnd::Duration {
                us: meta.duration_us,
            },
            sample_interval_us: config.sample_interval_us,
            report_interval_us: config.report_interval_us,
            ..TestParams::default()
        },
        client: meta.host,
        server: HostMeta::default(),
        clock: ClockOffset::default(),
        summary: Summary {
            sent_bytes,
            received_bytes,
            sent_bps: rate(sent_bytes),
            received_bps: rate(received_bytes),
            window_seconds,
            retransmits: flows.iter().map(|f| f.retransmits).sum(),
            rtt,
            limits,
            dominant_limit: (!senders.is_empty()).then(|| limits.dominant()),
            ..Summary::default()
        },
        flows,
        intervals,
        path: None,
        samples,
        trace: None,
        events: Vec::new(),
        probes: Vec::new(),
        watch: Some(WatchRecord {
            filter: meta.filter,
            tracepoint: meta.tracepoint,
            missed: tracker.missed(),
            shell: None,
        }),
    }
}

/// The payload a socket's counters show, acknowledged and received: the kernel counts
/// sequence space, where the connecting side's SYN and each FIN take a byte. What was
/// acknowledged is at most the data sent once (`bytes_sent` − `bytes_retrans`: data
/// only), and a socket in `state` past the peer's FIN received it as a byte.
pub fn payload(info: &TcpInfo, state: TcpState) -> (u64, u64) {
    let acked = info
        .bytes_acked
        .min(info.bytes_sent.saturating_sub(info.bytes_retrans));
    let fin = matches!(
        state,
        TcpState::CloseWait | TcpState::LastAck | TcpState::Closing | TcpState::TimeWait
    );
    (acked, info.bytes_received.saturating_sub(u64::from(fin)))
}

/// A connection's payload in a socket's counters, from its first sample unless it
/// opened while watched: sent (acknowledged) and received.
fn payload_of(c: &Connection) -> (u64, u64) {
    let (sent, received) = payload(&c.last_info, c.state);
    if c.opened {
        return (sent, received);
    }
    let (first_sent, first_received) = payload(&c.first_info, TcpState::Established);
    (
        sent.saturating_sub(first_sent),
        received.saturating_sub(first_received),
    )
}

/// The ends of one connection as far as they were watched: the socket that sent more
/// (the flow's client), and the other (its server).
struct Ends<'a> {
    sender: Option<&'a Connection>,
    receiver: Option<&'a Connection>,
}

/// Each watched socket with its peer where that was watched too (the reversed 4-tuple,
/// alive at the same time), in the order of their ids.
fn pair_ends<'a>(ended: &[&'a Connection]) -> Vec<Ends<'a>> {
    // An IPv6 listener's accepted socket names an IPv4 peer as ::ffff:a.b.c.d.
    let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let mut by_tuple: HashMap<(SocketAddr, SocketAddr), Vec<usize>> = HashMap::new();
    for (k, c) in ended.iter().enumerate() {
        by_tuple
            .entry((canonical(c.key.local), canonical(c.key.remote)))
            .or_default()
            .push(k);
    }
    let mut used = vec![false; ended.len()];
    let mut pairs = Vec::new();
    for (k, c) in ended.iter().enumerate() {
        if used[k] {
            continue;
        }
        used[k] = true;
        let peer = by_tuple
            .get(&(canonical(c.key.remote), canonical(c.key.local)))
            .and_then(|ks| {
                ks.iter().copied().find(|&p| {
                    !used[p] && c.first_us <= ended[p].last_us && ended[p].first_us <= c.last_us
                })
            })
            .map(|p| {
                used[p] = true;
                ended[p]
            });
        pairs.push(match peer {
            Some(p) if payload_of(p).0 > payload_of(c).0 => Ends {
                sender: Some(p),
                receiver: Some(c),
            },
            Some(p) => Ends {
                sender: Some(c),
                receiver: Some(p),
            },
            None if c.sends() => Ends {
                sender: Some(c),
                receiver: None,
            },
            None => Ends {
                sender: None,
                receiver: Some(c),
            },
        });
    }
    pairs
}

/// Whether the receiver's count `received` holds its peer's FIN that its state did not
/// show yet (sock_diag fills the two apart, and a sample can fall between): the sender
/// sent its FIN, and the count is one above all the data it sent, both watched from
/// their start.
fn fin_counted_early(ends: &Ends<'_>, received: u64) -> bool {
    let (Some(sender), Some(receiver)) = (ends.sender, ends.receiver) else {
        return false;
    };
    let info = &sender.last_info;
    let sent_fin = matches!(
        sender.state,
        TcpState::FinWait1
            | TcpState::FinWait2
            | TcpState::Closing
            | TcpState::LastAck
            | TcpState::TimeWait
    );
    sender.opened
        && receiver.opened
        && sent_fin
        && received == info.bytes_sent.saturating_sub(info.bytes_retrans) + 1
}

/// One connection as flow `id`, `up` from the end that sent more (the client) to the
/// other (the server). Its bytes are payload ([`payload`]): sent as the sender's socket
/// saw them acknowledged, received as the receiver's socket counted them — each taken
/// from the other end where only one was watched.
fn flow_record(id: u32, ends: &Ends<'_>, t0_us: i64) -> FlowRecord {
    let main = ends.sender.or(ends.receiver).expect("a watched end");
    let sent = ends.sender.map(|s| payload_of(s).0);
    let received = ends.receiver.map(|r| payload_of(r).1);
    let (sent_bytes, received_bytes) = match (sent, received) {
        (Some(s), Some(r)) => (s, r - u64::from(fin_counted_early(ends, r))),
        (Some(s), None) => (s, s),
        (None, Some(r)) => (r, r),
        (None, None) => (0, 0),
    };
    let seconds = |c: &Connection| (c.last_us - c.first_us).max(0) as f64 / 1e6;
    let bps = |bytes: u64, seconds: f64| {
        if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds
        } else {
            0.0
        }
    };
    let sender_seconds = seconds(ends.sender.unwrap_or(main));
    let receiver_seconds = seconds(ends.receiver.unwrap_or(main));
    let (client_addr, server_addr) = match (ends.sender, ends.receiver) {
        (Some(s), _) => (s.key.local, s.key.remote),
        (None, Some(r)) => (r.key.remote, r.key.local),
        (None, None) => unreachable!("a watched end"),
    };
    let mut watched = main.watched(t0_us);
    watched.end = if ends.sender.is_some() {
        Host::Client
    } else {
        Host::Server
    };
    watched.peer = ends.receiver.filter(|_| ends.sender.is_some()).map(|r| {
        let mut peer = r.watched(t0_us);
        peer.end = Host::Server;
        Box::new(peer)
    });
    let sender = ends.sender;
    FlowRecord {
        id,
        host: None,
        name: None,
        direction: Direction::Up,
        client_addr: client_addr.to_string(),
        server_addr: server_addr.to_string(),
        cc: main.congestion.map(|n| n.to_string()).unwrap_or_default(),
        mss: main.last_info.snd_mss,
        sndbuf: BufferSize::default(),
        rcvbuf: BufferSize::default(),
        sent_bytes,
        received_bytes,
        sent_bps: bps(sent_bytes, sender_seconds),
        received_bps: bps(received_bytes, receiver_seconds),
        sender_seconds,
        receiver_seconds,
        retransmits: sender.map_or(0, |s| {
            let base = if s.opened {
                0
            } else {
                s.first_info.total_retrans
            };
            u64::from(s.last_info.total_retrans.saturating_sub(base))
        }),
        samples: sender.map_or(0, |s| s.sample_count),
        receiver_samples: ends.receiver.map_or(0, |r| r.sample_count),
        limits: sender.map_or_else(LimitShares::default, Connection::limit_shares),
        kernel_limits: sender.map_or_else(LimitShares::default, |s| {
            let elapsed = (s.last_us - s.first_us).max(0) as u64;
            chrono_shares(&s.first_info, &s.last_info, elapsed)
        }),
        rtt: main.rtt(),
        udp: None,
        timed: None,
        transactions: None,
        watched: Some(watched),
    }
}

#[cfg(test)]
mod tests;
