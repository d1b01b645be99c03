//! One end of a test: its data flows and the monitor that samples them.
//!
//! The same code runs on the client and on the server; only the roles of the flows
//! differ. Each flow runs on its own OS thread with blocking-or-polled I/O (no async
//! runtime: namespace work must stay on dedicated threads). One monitor thread reads
//! the sockets when [`tcplab_monitor::Monitor`] wakes it and does what its ticks say:
//! samples, report intervals, the ends of connections the drain limit stopped. A bulk
//! flow's thread samples its own socket between two writes or reads, once an interval
//! has passed since its last sample (`FlowShared::sample_if_due`): reading it there
//! waits for no lock, where the monitor's read would wait for the one the thread holds
//! while it copies, and the monitor's ticks then leave that flow unread.

use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use tcplab_analysis::limits;
use tcplab_analysis::throughput;
use tcplab_monitor::{Config, FlowStart, Monitor, Snapshot, Status, Watched, BOOK_EVERY_US};
use tcplab_netsim::path::{PacingTarget, RateShare};
use tcplab_record::tcpinfo::TcpInfo;
use tcplab_record::{
    BufferSize, Host, LimitShares, SampleRecord, SendMethod, TestEnd, TestParams, Transaction,
};
use tcplab_sys::clock::monotonic_us;
use tcplab_sys::cpu::{self, CpuTime};
use tcplab_sys::sockopt;

use crate::flow::{timed_out, FlowResult, FlowShared, Moved, Renew};
use crate::protocol::{Role, SideFlow, SideInterval, SideReport};
use crate::transact;

/// How long the sender of a byte count waits, after its last write, for the receiver to
/// acknowledge everything (a timed test's drain is bounded by
/// [`throughput::drain_limit_us`] instead).
const DRAIN_GRACE_US: i64 = 10_000_000;
/// How often a blocked receiver looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);
/// After a timed test's deadline, how long a receiver lets its connection stay silent
/// before it probes the sender (the shortest TCP keepalive time), and between probes.
const KEEPALIVE_AFTER_DEADLINE: Duration = Duration::from_secs(1);
/// Unanswered probes after which the receiver gives up on a sender gone silent.
const KEEPALIVE_PROBES: u32 = 10;
/// Timer slack of the monitor thread, ns.
const MONITOR_TIMER_SLACK_NS: libc::c_ulong = 200_000;
/// Longest a blocked write waits before the sender looks at the clock again: how far
/// past its end a timed test may send.
const WRITE_TIMEOUT: Duration = Duration::from_millis(10);

/// A connected data socket with its role on this end.
pub struct FlowSocket {
    pub id: u32,
    pub role: Role,
    pub stream: TcpStream,
    /// The role's buffer as set up (SO_SNDBUF when sending, SO_RCVBUF when receiving).
    pub buffer: BufferSize,
    /// Where a flow of a connection per transaction gets each one (`stream` is then the
    /// idle anchor).
    pub renew: Option<Renew>,
}

/// One end's data sockets, ready to run.
pub enum Flows {
    Tcp(Vec<FlowSocket>),
    Udp(Vec<crate::udp::UdpFlow>),
}

/// Where and when an end runs its flows.
pub struct End {
    pub host: Host,
    /// The test's start on this end's monotonic clock, µs.
    pub t0_us: i64,
    /// The peer's start on this end's clock, µs, when it may be earlier than ours (a
    /// server starts when `Go` arrives, which a lossy path can hold for seconds): a
    /// receiver takes a reset after the earlier start's deadline as its flow's end (the
    /// peer's sender reset at its drain limit), not as a failure.
    pub peer_t0_us: i64,
    /// The peer's monotonic clock minus ours, ns (0 on one machine), for UDP's one-way
    /// delays.
    pub peer_offset_ns: i64,
    /// Where the TCP senders publish their combined window rate at every sample (cwnd ×
    /// MSS over a round trip), for the dynamic gap pacers on their way in a lab.
    pub pacing: Option<PacingTarget>,
    /// Whether a sender that the drain limit stopped resets its connection, so that the
    /// receiver (a tcplab peer takes the reset as the end) stops waiting for the rest. A
    /// stock iperf3 would fail its test on a reset; it ends the test itself.
    pub reset_cut_drains: bool,
}

impl Flows {
    /// Runs this end's flows (see [`run_side`] and [`crate::udp::run_side`]).
    pub fn run(
        self,
        params: &TestParams,
        end: End,
        intervals: Sender<Vec<SideInterval>>,
        stop: Arc<AtomicBool>,
    ) -> SideOutcome {
        match self {
            Flows::Tcp(flows) => run_side(params, flows, end, intervals, stop),
            Flows::Udp(flows) => SideOutcome {
                report: crate::udp::run_side(
                    params,
                    flows,
                    end.t0_us,
                    end.peer_offset_ns,
                    intervals,
                    stop,
                ),
                // UDP sockets have no tcp_info to sample.
                samples: Vec::new(),
            },
        }
    }
}

/// What one end of a test produced.
pub struct SideOutcome {
    pub report: SideReport,
    /// Samples with `t_us` in this end's monotonic µs.
    pub samples: Vec<SampleRecord>,
}

/// Runs this end's flows from `t0_us` (this end's monotonic clock) to their end.
/// Report-interval records go to `intervals` as they are cut; `stop` ends the test early.
pub fn run_side(
    params: &TestParams,
    flows: Vec<FlowSocket>,
    end: End,
    intervals: Sender<Vec<SideInterval>>,
    stop: Arc<AtomicBool>,
) -> SideOutcome {
    let End {
        host,
        t0_us,
        peer_t0_us,
        peer_offset_ns: _,
        pacing,
        reset_cut_drains,
    } = end;
    if flows.is_empty() {
        // Probes alone: this end has nothing to move, but the test lasts its duration.
        return idle_until_deadline(params, t0_us, &stop);
    }
    let buffers: Vec<BufferSize> = flows.iter().map(|f| f.buffer).collect();
    // At BOOK_EVERY_US or longer the monitor reads every flow at each tick anyway.
    let every = params.sample_interval_us as i64;
    let self_sample_every_us = if pacing.is_some() || every >= BOOK_EVERY_US {
        0
    } else {
        every
    };
    let shared: Vec<Arc<FlowShared>> = flows
        .into_iter()
        .map(|f| {
            let bbr = f.role == Role::Send && sockopt::runs_bbr(&f.stream).unwrap_or(false);
            Arc::new(FlowShared {
                id: f.id,
                role: f.role,
                local_addr: addr_string(f.stream.local_addr()),
                peer_addr: addr_string(f.stream.peer_addr()),
                stream: f.stream,
                bytes: AtomicU64::new(0),
                writing: AtomicBool::new(f.role == Role::Send),
                in_write: AtomicBool::new(false),
                done: AtomicBool::new(false),
                reset: AtomicBool::new(false),
                reset_cut_drains,
                renew: f.renew,
                self_sample_every_us,
                bbr,
                last_sample_us: AtomicI64::new(i64::MIN),
                self_samples: Mutex::new(Vec::new()),
            })
        })
        .collect();

    // The monitor's starting point, taken before any flow moves a byte.
    let start_infos: Vec<Option<TcpInfo>> = shared
        .iter()
        .map(|f| sockopt::tcp_info(f.stream.as_fd()).ok())
        .collect();
    let monitor = {
        let shared = shared.clone();
        let params = params.clone();
        thread::Builder::new()
            .name("monitor".into())
            .spawn(move || {
                // Each sample is stamped when taken, so its wake-up may be late: a wide
                // timer slack lets the kernel fold these wake-ups into ones it takes
                // anyway, which is most of what 1 ms sampling costs a busy machine.
                // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects this thread only.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, MONITOR_TIMER_SLACK_NS, 0, 0, 0) };
                let cpu_start = cpu::thread_cpu_time().unwrap_or_default();
                let result = monitor(
                    &shared,
                    start_infos,
                    &params,
                    host,
                    t0_us,
                    &intervals,
                    pacing.map(RateShare::new),
                );
                (
                    result,
                    cpu::thread_cpu_time().unwrap_or_default() - cpu_start,
                )
            })
            .expect("spawning the monitor thread")
    };

    let workers: Vec<_> = shared
        .iter()
        .map(|flow| {
            let flow = Arc::clone(flow);
            let params = params.clone();
            let stop = Arc::clone(&stop);
            let monitor = monitor.thread().clone();
            thread::Builder::new()
                .name(format!("flow-{}", flow.id))
                .spawn(move || {
                    // Bulk transfer is batch work: SCHED_BATCH spares these threads the
                    // wake-up preemption that every peer wake-up would otherwise cost
                    // (A/B here: 4 streams +4 %, 1 stream +5 %, noisy). The monitor keeps
                    // normal scheduling so samples stay on time.
                    let param = libc::sched_param { sched_priority: 0 };
                    // SAFETY: pid 0 is this thread; `param` is valid for the call. A
                    // refusal only leaves the default policy.
                    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
                    let cpu_start = cpu::thread_cpu_time().unwrap_or_default();
                    let outcome = run_flow(&flow, &params, t0_us, peer_t0_us, &stop);
                    flow.done.store(true, Ordering::Release);
                    // The monitor cuts the flow's last interval now, not at its next tick.
                    monitor.unpark();
                    let cpu = cpu::thread_cpu_time().unwrap_or_default() - cpu_start;
                    (outcome, cpu)
                })
                .expect("spawning a flow thread")
        })
        .collect();

    let mut cpu_spent = CpuTime::default();
    let outcomes: Vec<FlowOutcome> = workers
        .into_iter()
        .map(|w| {
            let (outcome, cpu) = w.join().expect("flow thread panicked");
            cpu_spent = cpu_spent + cpu;
            outcome
        })
        .collect();
    let ((watched, samples), monitor_cpu) = monitor.join().expect("monitor thread panicked");
    cpu_spent = cpu_spent + monitor_cpu;

    let end_us = outcomes.iter().map(|o| o.end_us).max().unwrap_or(t0_us);
    let flows = shared
        .iter()
        .zip(outcomes)
        .zip(buffers)
        .zip(watched)
        .map(|(((flow, outcome), buffer), watched)| side_flow(flow, outcome, buffer, watched))
        .collect();
    SideOutcome {
        report: SideReport {
            flows,
            cpu: cpu::usage(cpu_spent, (end_us - t0_us).max(1) as u64),
        },
        samples,
    }
}

/// An end without flows (probes alone) waits out the test's time.
fn idle_until_deadline(params: &TestParams, t0_us: i64, stop: &AtomicBool) -> SideOutcome {
    let deadline = params.end.deadline_us(t0_us).unwrap_or(t0_us);
    while !stop.load(Ordering::Relaxed) && monotonic_us() < deadline {
        let left = (deadline - monotonic_us()).max(0) as u64;
        thread::sleep(Duration::from_micros(left).min(STOP_POLL));
    }
    SideOutcome {
        report: SideReport {
            flows: Vec::new(),
            cpu: cpu::usage(CpuTime::default(), (monotonic_us() - t0_us).max(1) as u64),
        },
        samples: Vec::new(),
    }
}

fn side_flow(
    flow: &FlowShared,
    outcome: FlowOutcome,
    mut buffer: BufferSize,
    watched: Watched,
) -> SideFlow {
    let fd = flow.stream.as_fd();
    buffer.at_end = match flow.role {
        Role::Send => sockopt::sndbuf(fd),
        Role::Receive => sockopt::rcvbuf(fd),
    }
    .unwrap_or(buffer.effective);
    let elapsed = (outcome.end_us - outcome.start_us).max(0) as u64;
    let (kernel_limits, retransmits, mss) = match (&outcome.first, &outcome.last) {
        (Some(first), Some(last)) => (
            limits::chrono_shares(first, last, elapsed),
            u64::from(last.total_retrans.saturating_sub(first.total_retrans)),
            last.snd_mss,
        ),
        _ => (LimitShares::default(), 0, 0),
    };
    // The intervals' count runs to the flow's last interval, cut once the socket can
    // send no more (its FIN acknowledged, or ended at the drain limit): one count for
    // the summary, the intervals and the kernel's events.
    let retransmits = watched.retransmits.unwrap_or(retransmits);
    // Where nothing was sampled the kernel's counters are all there is.
    let limits = watched.limits.unwrap_or(kernel_limits);
    SideFlow {
        id: flow.id,
        role: flow.role,
        local_addr: flow.local_addr.clone(),
        peer_addr: flow.peer_addr.clone(),
        cc: sockopt::congestion(fd).unwrap_or_default(),
        mss,
        buffer,
        bytes: outcome.bytes,
        start_us: outcome.start_us,
        end_us: outcome.end_us,
        retransmits,
        samples: watched.samples,
        limits,
        kernel_limits,
        rtt: watched.rtt,
        error: outcome.error,
        udp: None,
        at_deadline: watched.at_deadline,
        unacked: outcome.unacked,
        transactions: outcome.transactions,
    }
}

fn addr_string(addr: io::Result<std::net::SocketAddr>) -> String {
    addr.map(|a| a.to_string()).unwrap_or_default()
}

struct FlowOutcome {
    bytes: u64,
    /// A sender's bytes left unacknowledged at the drain limit.
    unacked: u64,
    start_us: i64,
    end_us: i64,
    /// tcp_info at the start and at the end of the flow's window.
    first: Option<TcpInfo>,
    last: Option<TcpInfo>,
    error: Option<String>,
    /// A request/response flow's transactions, as its requester timed them.
    transactions: Vec<Transaction>,
}

fn run_flow(
    flow: &FlowShared,
    params: &TestParams,
    t0_us: i64,
    peer_t0_us: i64,
    stop: &AtomicBool,
) -> FlowOutcome {
    let fd = flow.stream.as_fd();
    let first = sockopt::tcp_info(fd).ok();
    let mut transactions = Vec::new();
    let result = match (flow.role, params.transactions) {
        (Role::Send, None) => {
            let acked_base = first.as_ref().map_or(0, |i| i.bytes_acked);
            send_until_end(flow, params, t0_us, acked_base, stop)
        }
        (Role::Receive, None) => receive_until_eof(flow, params, t0_us.min(peer_t0_us), stop),
        (Role::Receive, Some(rr)) if rr.new_connection => transact::accept_each(flow, rr, stop),
        (Role::Send, Some(rr)) => {
            transact::request_until_end(flow, params, rr, t0_us, &mut transactions, stop)
        }
        (Role::Receive, Some(rr)) => {
            transact::respond_until_eof(flow, params, rr, t0_us.min(peer_t0_us), stop)
        }
    };
    let end_us = monotonic_us();
    let last = sockopt::tcp_info(fd).ok();
    let (moved, error) = match result {
        Ok(moved) => (moved, None),
        Err((bytes, e)) => (Moved { bytes, unacked: 0 }, Some(e.to_string())),
    };
    FlowOutcome {
        bytes: moved.bytes,
        unacked: moved.unacked,
        start_us: t0_us,
        end_us,
        first,
        last,
        error,
        transactions,
    }
}

/// Sends until the duration or byte budget is spent, then closes the write side and
/// waits until the receiver has acknowledged every byte, so sender and receiver count the
/// same bytes. A timed test's rates end at its deadline (the monitor counts the bytes
/// then), so what its socket still holds only settles the counts: that drain is bounded
/// by [`throughput::drain_limit_us`], after which the sender reports the bytes still
/// unacknowledged and, between tcplab ends, has the monitor reset the connection (the
/// receiver takes that as the end).
///
/// Writes block, as most applications' do, each wait bounded by SO_SNDTIMEO so a timed
/// test ends on time. Measured on Linux 6.18 through a 32 KiB send buffer over 20 ms
/// with 8 KiB writes, a non-blocking writer woken by poll() queues even further past
/// SO_SNDBUF than a blocking one (480 vs 350 Mbit/s; see docs/run.md on send buffers).
fn send_until_end(
    flow: &FlowShared,
    params: &TestParams,
    t0_us: i64,
    acked_base: u64,
    stop: &AtomicBool,
) -> FlowResult {
    let deadline = params.end.deadline_us(t0_us);
    let mut budget = match params.end {
        TestEnd::Duration { .. } => u64::MAX,
        TestEnd::Bytes { bytes } => bytes,
    };
    let mut payload = Payload::new(params.tuning.send_method, params.tuning.write_size as usize)
        .map_err(|e| (0, e))?;
    let stream = &flow.stream;
    stream
        .set_write_timeout(Some(WRITE_TIMEOUT))
        .map_err(|e| (0, e))?;
    let mut sent = 0u64;
    let app_rate = params.tuning.app_rate;
    if app_rate.is_some() {
        // A paced application must not pile a backlog into the socket while the
        // window is small (slow start): TCP would send it at line rate once the window
        // opens, a burst pacing is meant to prevent.
        sockopt::set_notsent_lowat(stream.as_fd(), params.tuning.write_size).map_err(|e| (0, e))?;
    }
    let mut next_write_us = monotonic_us();
    while budget > 0 && !stop.load(Ordering::Relaxed) {
        let now = monotonic_us();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if app_rate.is_some() && next_write_us > now {
            let until = deadline.map_or(next_write_us, |d| next_write_us.min(d));
            thread::sleep(Duration::from_micros((until - now) as u64).min(STOP_POLL));
            continue;
        }
        let want = budget.min(params.tuning.write_size as u64) as usize;
        flow.in_write.store(true, Ordering::Relaxed);
        let written = payload.send(stream, want);
        flow.in_write.store(false, Ordering::Relaxed);
        match written {
            Ok(n) => {
                sent += n as u64;
                budget -= n as u64;
                flow.bytes.store(sent, Ordering::Relaxed);
                flow.sample_if_due();
                if let Some(bps) = app_rate {
                    // The next write falls due when these bytes have left at the rate;
                    // a writer that fell behind catches up by one write, not in a burst.
                    let spacing = (n as f64 * 8e6 / bps as f64) as i64;
                    next_write_us = next_write_us.max(now - spacing) + spacing;
                }
            }
            // The write timed out with nothing sent: look at the clock and stop flag again.
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err((sent, e)),
        }
    }
    flow.writing.store(false, Ordering::Release);
    stream.shutdown(Shutdown::Write).map_err(|e| (sent, e))?;
    let unacked = match deadline {
        Some(deadline) => {
            let srtt_us = sockopt::tcp_info(stream.as_fd()).map_or(0, |i| i.rtt);
            let limit = deadline + throughput::drain_limit_us(srtt_us) as i64;
            let unacked = wait_all_acked(stream, limit, stop)
                .map_err(|e| (sent, e))?
                .map_or(0, |acked| {
                    sent.saturating_sub(acked.saturating_sub(acked_base))
                });
            flow.reset
                .store(unacked > 0 && flow.reset_cut_drains, Ordering::Release);
            unacked
        }
        None => match wait_all_acked(stream, monotonic_us() + DRAIN_GRACE_US, stop) {
            Ok(None) => 0,
            Ok(Some(_)) => {
                return Err((
                    sent,
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the receiver did not acknowledge the last bytes in time",
                    ),
                ))
            }
            Err(e) => return Err((sent, e)),
        },
    };
    Ok(Moved {
        bytes: sent,
        unacked,
    })
}

/// Waits, at most `within`, until the peer has acknowledged all that was written on
/// each data connection before the test (its handshake and intro), so that no setup
/// segment is left to retransmit once the test starts: its retransmissions, counted
/// from tcp_info read at the start, and its kernel events, kept from the start, are
/// then the same ones.
pub fn await_setup_acknowledged(
    flows: &[FlowSocket],
    within: Duration,
    stop: &AtomicBool,
) -> io::Result<()> {
    let limit = monotonic_us() + within.as_micros() as i64;
    for flow in flows {
        if wait_all_acked(&flow.stream, limit, stop)?.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the peer did not acknowledge data connection {}'s setup within {} s",
                    flow.id,
                    within.as_secs()
                ),
            ));
        }
    }
    Ok(())
}

/// Waits until every byte written is acknowledged, `stop` is set, or `deadline_us`
/// passes; then `Some` of tcpi_bytes_acked, or `None` when nothing is left.
fn wait_all_acked(
    stream: &TcpStream,
    deadline_us: i64,
    stop: &AtomicBool,
) -> io::Result<Option<u64>> {
    loop {
        let info = sockopt::tcp_info(stream.as_fd())?;
        if (info.unacked == 0 && info.notsent_bytes == 0) || stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if monotonic_us() > deadline_us {
            return Ok(Some(info.bytes_acked));
        }
        thread::sleep(Duration::from_micros(200));
    }
}

/// Reads until the end of the stream: the sender's FIN, or, after a timed test's
/// deadline, its reset when the drain limit ended the connection.
fn receive_until_eof(
    flow: &FlowShared,
    params: &TestParams,
    earliest_t0_us: i64,
    stop: &AtomicBool,
) -> FlowResult {
    let deadline = params.end.deadline_us(earliest_t0_us).unwrap_or(i64::MAX);
    let done = |bytes| Ok(Moved { bytes, unacked: 0 });
    let mut buf = vec![0u8; params.tuning.read_size as usize];
    let mut stream = &flow.stream;
    stream
        .set_read_timeout(Some(STOP_POLL))
        .map_err(|e| (0, e))?;
    let mut total = 0u64;
    let mut probing = false;
    // Checked before every read: a receiver kept busy must stop too.
    while !stop.load(Ordering::Relaxed) {
        if !probing && monotonic_us() > deadline {
            // The sender's reset at its drain limit is one packet, which a lossy path
            // can drop (or the challenge ACK that a reset out of sequence draws): once
            // the connection falls silent for a second after the deadline, a keepalive
            // probe draws the reset again, from the sender's host. Before the deadline
            // nothing changes.
            probing = true;
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(KEEPALIVE_AFTER_DEADLINE)
                .with_interval(KEEPALIVE_AFTER_DEADLINE)
                .with_retries(KEEPALIVE_PROBES);
            socket2::SockRef::from(stream)
                .set_tcp_keepalive(&keepalive)
                .map_err(|e| (total, e))?;
        }
        match stream.read(&mut buf) {
            Ok(0) => return done(total),
            Ok(n) => {
                total += n as u64;
                flow.bytes.store(total, Ordering::Relaxed);
                flow.sample_if_due();
                // A slow stream never times out a read: look at the flag here too.
                if stop.load(Ordering::Relaxed) {
                    return done(total);
                }
            }
            Err(e) if timed_out(&e) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && monotonic_us() > deadline => {
                return done(total)
            }
            Err(e) => return Err((total, e)),
        }
    }
    done(total)
}

/// The bytes a sender hands to the kernel.
enum Payload {
    Buffer(Vec<u8>),
    /// An in-memory file whose pages `sendfile` passes to the socket without copying.
    File {
        fd: OwnedFd,
        len: i64,
        offset: i64,
    },
}

impl Payload {
    fn new(method: SendMethod, write_size: usize) -> io::Result<Payload> {
        let pattern = |i: usize| (i % 251) as u8;
        match method {
            SendMethod::Write => Ok(Payload::Buffer((0..write_size).map(pattern).collect())),
            SendMethod::Sendfile => {
                // Several writes' worth so consecutive sendfile calls walk distinct pages.
                let len = (write_size * 8).max(1 << 20);
                // SAFETY: memfd_create with a valid NUL-terminated name.
                let raw =
                    unsafe { libc::memfd_create(c"tcplab-payload".as_ptr(), libc::MFD_CLOEXEC) };
                if raw < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: raw is a fresh descriptor we own.
                let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                let data: Vec<u8> = (0..len).map(pattern).collect();
                let mut file = std::fs::File::from(fd.try_clone()?);
                io::Write::write_all(&mut file, &data)?;
                Ok(Payload::File {
                    fd,
                    len: len as i64,
                    offset: 0,
                })
            }
        }
    }

    fn send(&mut self, stream: &TcpStream, want: usize) -> io::Result<usize> {
        match self {
            Payload::Buffer(buf) => io::Write::write(&mut &*stream, &buf[..want]),
            Payload::File { fd, len, offset } => {
                if *offset + want as i64 > *len {
                    *offset = 0;
                }
                // SAFETY: both descriptors are open; `offset` is a valid i64 the call updates.
                let n = unsafe { libc::sendfile(stream.as_raw_fd(), fd.as_raw_fd(), offset, want) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }
        }
    }
}

/// Samples every flow at the sampling interval and cuts report intervals until all
/// flows are done: the sockets and the clock around [`Monitor`].
fn monitor(
    flows: &[Arc<FlowShared>],
    start_infos: Vec<Option<TcpInfo>>,
    params: &TestParams,
    host: Host,
    t0_us: i64,
    intervals: &Sender<Vec<SideInterval>>,
    mut pacing: Option<RateShare>,
) -> (Vec<Watched>, Vec<SampleRecord>) {
    let config = Config::of_test(
        params,
        host,
        t0_us,
        flows.len(),
        pacing.as_ref().map(RateShare::rtt),
    );
    let starts = flows
        .iter()
        .zip(start_infos)
        .map(|(flow, first)| FlowStart {
            id: flow.id,
            role: flow.role,
            first,
            bbr: flow.bbr,
        })
        .collect();
    let mut core = Monitor::new(config, starts, t0_us);
    let mut snapshots: Vec<Option<Snapshot>> = vec![None; flows.len()];
    loop {
        for (i, flow) in flows.iter().enumerate() {
            for (t, snapshot) in flow.take_self_samples() {
                core.self_sampled(i, t, &snapshot);
            }
        }
        // Read before the counters: a flow seen ended here has all its bytes in them.
        let mut status: Vec<Status> = flows.iter().map(|f| f.status()).collect();
        let now = monotonic_us();
        let due = core.due(now, &status);
        for read in due.reads() {
            let flow = &flows[read.flow];
            if read.abort && sockopt::abort_connection(&flow.stream).is_ok() {
                flow.reset.store(false, Ordering::Release);
                status[read.flow].cut_drain = false;
            }
            snapshots[read.flow] = flow.snapshot(read.bbr);
            flow.last_sample_us.store(now, Ordering::Relaxed);
        }
        let tick = core.tick(due, &status, &snapshots);
        snapshots.fill(None);
        if let Some((share, rate)) = pacing.as_mut().zip(tick.window_rate_bps) {
            share.publish(rate);
        }
        for i in tick.resets {
            // Where no SOCK_DESTROY ended it: a retransmission between the last count and
            // this reset is left out of the count.
            if flows[i].reset.swap(false, Ordering::AcqRel) {
                // Should it fail, closing the socket at the end resets the connection.
                let _ = sockopt::reset_connection(flows[i].stream.as_fd());
            }
        }
        if !tick.intervals.is_empty() {
            let records = tick.intervals.into_iter().map(SideInterval::from).collect();
            // A closed receiver only means nobody watches live lines any more.
            let _ = intervals.send(records);
        }
        if tick.finished {
            break;
        }
        let wait = (core.next_wakeup() - monotonic_us()).clamp(0, 50_000);
        // A flow that ends unparks this thread: its end is cut when it comes.
        thread::park_timeout(Duration::from_micros(wait as u64));
    }
    core.finish()
}
