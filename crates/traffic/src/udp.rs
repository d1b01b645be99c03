//! UDP flows on one end of a test: a sender that keeps its rate against the monotonic
//! clock (batches through sendmmsg), and a receiver that accounts for every datagram
//! with the kernel's arrival time (recvmmsg with SO_TIMESTAMPNS). The schedule and the
//! accounting are pure ([`tcplab_model::udp`]); this is the I/O around them.

use std::io;
use std::mem::MaybeUninit;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tcplab_model::udp::{Header, Receiver, Schedule, HEADER_LEN};
use tcplab_record::{
    BufferSize, LimitShares, RttStats, TestEnd, TestParams, UdpInterval, UdpParams, UdpStats,
};
use tcplab_sys::clock::{self, monotonic_ns, monotonic_us, sleep_until_ns};
use tcplab_sys::cpu::{self, CpuTime};
use tcplab_sys::sockopt;

use crate::protocol::{Role, SideFlow, SideInterval, SideReport};
use crate::setup::untouched;

/// How often a sleeping sender can count on waking: it may send what falls due in this
/// time as one batch (measured wake-up latency here: p50 20–40 µs, p99 100–200 µs).
const TIMER_GRANULARITY_NS: f64 = 200_000.0;
/// Datagrams per sendmmsg / recvmmsg call at most.
const BATCH: usize = 64;
/// How long a receiver waits in one read before it looks at the clock.
const READ_TIMEOUT: Duration = Duration::from_millis(20);
/// After the sender's end, a receiver stops once nothing arrived for this long…
pub const QUIET_AFTER_END_US: i64 = 200_000;
/// …or at the latest this long after the end (datagrams still queued on a slow path).
const LINGER_AFTER_END_US: i64 = 3_000_000;
/// Receive buffer asked for: a burst at 1 Gbit/s must not overflow it while the
/// receiver sleeps.
const RECEIVE_BUFFER: u64 = 8 << 20;

/// A UDP socket connected to its peer, with its role on this end.
pub struct UdpFlow {
    pub id: u32,
    pub role: Role,
    pub socket: UdpSocket,
    pub buffer: BufferSize,
}

/// Prepares a flow's socket for its role: timestamps and a large buffer to receive,
/// ENOBUFS reported to send.
pub fn prepare(socket: &UdpSocket, role: Role, params: &TestParams) -> io::Result<BufferSize> {
    let fd = socket.as_fd();
    match role {
        Role::Send => {
            sockopt::set_recverr(fd, socket.local_addr()?.is_ipv6())?;
            match params.tuning.sndbuf {
                Some(bytes) => sockopt::set_sndbuf(fd, bytes),
                None => untouched(sockopt::sndbuf(fd)?),
            }
        }
        Role::Receive => {
            sockopt::set_timestamp_ns(fd)?;
            sockopt::set_rcvbuf(fd, params.tuning.rcvbuf.unwrap_or(RECEIVE_BUFFER))
        }
    }
}

/// What a flow thread shares with the interval cutter.
struct Shared {
    /// Sender: datagrams sent; receiver: bytes read.
    sent: AtomicU64,
    bytes: AtomicU64,
    receiver: Mutex<Receiver>,
    done: AtomicBool,
}

/// Runs this end's UDP flows from `t0_us` to their end: their report (UDP sockets have
/// no tcp_info to sample). `offset_ns` is the peer's monotonic clock minus ours (0 when
/// both share one clock).
pub fn run_side(
    params: &TestParams,
    flows: Vec<UdpFlow>,
    t0_us: i64,
    offset_ns: i64,
    intervals: Sender<Vec<SideInterval>>,
    stop: Arc<AtomicBool>,
) -> SideReport {
    let udp = params.udp.expect("a UDP test has UDP parameters");
    let shared: Vec<Arc<Shared>> = flows
        .iter()
        .map(|_| {
            Arc::new(Shared {
                sent: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
                receiver: Mutex::new(Receiver::default()),
                done: AtomicBool::new(false),
            })
        })
        .collect();
    let roles: Vec<Role> = flows.iter().map(|f| f.role).collect();
    let workers: Vec<_> = flows
        .into_iter()
        .zip(&shared)
        .map(|(flow, shared)| {
            let (shared, stop, params) = (Arc::clone(shared), Arc::clone(&stop), params.clone());
            thread::Builder::new()
                .name(format!("udp-{}", flow.id))
                .spawn(move || {
                    let cpu_start = cpu::thread_cpu_time().unwrap_or_default();
                    let side = match flow.role {
                        Role::Send => send(&flow, &udp, &params, t0_us, &shared, &stop),
                        Role::Receive => receive(&flow, &params, t0_us, offset_ns, &shared, &stop),
                    };
                    shared.done.store(true, Ordering::Release);
                    (side, cpu::thread_cpu_time().unwrap_or_default() - cpu_start)
                })
                .expect("spawning a UDP flow thread")
        })
        .collect();
    cut_intervals(params, &roles, &shared, t0_us, &intervals);
    drop(intervals);
    let mut cpu_spent = CpuTime::default();
    let flows: Vec<SideFlow> = workers
        .into_iter()
        .map(|w| {
            let (side, cpu) = w.join().expect("UDP flow thread panicked");
            cpu_spent = cpu_spent + cpu;
            side
        })
        .collect();
    let end_us = flows.iter().map(|f| f.end_us).max().unwrap_or(t0_us);
    SideReport {
        flows,
        cpu: cpu::usage(cpu_spent, (end_us - t0_us).max(1) as u64),
    }
}

/// How long the interval cut at the deadline waits for the senders to stop: they stop
/// at the deadline, and a sender kept off the CPU a while longer is counted then.
const SENDER_STOPS_WITHIN: Duration = Duration::from_millis(500);

/// Cuts a report interval of every flow each report period until all flows are done.
fn cut_intervals(
    params: &TestParams,
    roles: &[Role],
    shared: &[Arc<Shared>],
    t0_us: i64,
    out: &Sender<Vec<SideInterval>>,
) {
    let period = params.report_interval_us as i64;
    // As for TCP: an interval ends at the deadline, and the rates leave out those after
    // it (datagrams still arriving).
    let deadline = params.end.deadline_us(t0_us);
    let mut last: Vec<(u64, u64)> = vec![(0, 0); shared.len()];
    let mut start_us = t0_us;
    for index in 0u32.. {
        let all_done = shared.iter().all(|s| s.done.load(Ordering::Acquire));
        let drain = deadline.is_some_and(|d| start_us >= d);
        let end_us = if all_done {
            monotonic_us()
        } else {
            let next_tick = t0_us + period * ((start_us - t0_us) / period + 1);
            let due = deadline
                .filter(|&d| d > start_us)
                .map_or(next_tick, |d| next_tick.min(d));
            while monotonic_us() < due && !shared.iter().all(|s| s.done.load(Ordering::Acquire)) {
                thread::sleep(
                    Duration::from_millis(5)
                        .min(Duration::from_micros((due - monotonic_us()).max(0) as u64)),
                );
            }
            monotonic_us().min(due)
        };
        // A sender sends nothing after the deadline, but may still be counting what it
        // sent just before: the interval that ends there waits for it to stop (it does
        // at once), or its last datagrams would land in the drain interval as sent
        // after the deadline.
        if deadline.is_some_and(|d| !drain && end_us >= d) {
            let waited = Instant::now();
            while waited.elapsed() < SENDER_STOPS_WITHIN
                && roles
                    .iter()
                    .zip(shared)
                    .any(|(role, s)| *role == Role::Send && !s.done.load(Ordering::Acquire))
            {
                thread::sleep(Duration::from_micros(200));
            }
        }
        let records = shared
            .iter()
            .zip(roles)
            .zip(&mut last)
            .enumerate()
            .map(|(id, ((s, role), last))| {
                let (sent, bytes) = (
                    s.sent.load(Ordering::Relaxed),
                    s.bytes.load(Ordering::Relaxed),
                );
                let udp = match role {
                    Role::Send => UdpInterval {
                        sent: sent - last.0,
                        ..UdpInterval::default()
                    },
                    Role::Receive => s.receiver.lock().expect("receiver lock").cut(),
                };
                let interval = SideInterval {
                    flow: id as u32,
                    index,
                    role: *role,
                    start_us,
                    end_us,
                    bytes: bytes - last.1,
                    retransmits: 0,
                    cwnd: 0,
                    srtt_us: 0,
                    limits: LimitShares::default(),
                    udp: Some(udp),
                    drain,
                };
                *last = (sent, bytes);
                interval
            })
            .collect();
        if out.send(records).is_err() || all_done {
            return;
        }
        start_us = end_us;
    }
}

/// The most datagrams a sender sends back to back: the burst, or what falls due
/// between two wake-ups where the rate is too high to wake for each.
fn max_batch(udp: &UdpParams) -> u64 {
    let burst = u64::from(udp.burst.max(1));
    if udp.rate_bps == 0 {
        return BATCH as u64;
    }
    let per_datagram_ns = f64::from(udp.datagram_size) * 8.0 * 1e9 / udp.rate_bps as f64;
    burst.max((TIMER_GRANULARITY_NS / per_datagram_ns).ceil() as u64)
}

fn send(
    flow: &UdpFlow,
    udp: &UdpParams,
    params: &TestParams,
    t0_us: i64,
    shared: &Shared,
    stop: &AtomicBool,
) -> SideFlow {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects this thread only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let size = udp.datagram_size as usize;
    let batch = (max_batch(udp) as usize).min(BATCH);
    let mut buffers = vec![0u8; size * batch];
    let (end_ns, max_datagrams) = match params.end {
        TestEnd::Duration { us } => ((t0_us + us as i64) * 1000, u64::MAX),
        TestEnd::Bytes { bytes } => (i64::MAX, bytes.div_ceil(size as u64)),
    };
    let start_ns = monotonic_ns() as i64;
    let mut schedule = Schedule::new(udp, start_ns, batch as u64);
    let (mut sent, mut send_errors, mut error) = (0u64, 0u64, None);
    loop {
        let now = monotonic_ns() as i64;
        if stop.load(Ordering::Relaxed) || now >= end_ns || sent >= max_datagrams {
            break;
        }
        let due = schedule
            .due(now, sent)
            .min(batch as u64)
            .min(max_datagrams - sent) as usize;
        if due == 0 {
            if let Some(next) = schedule.next_ns(sent) {
                sleep_until_ns(next.min(end_ns));
            }
            continue;
        }
        for (k, buf) in buffers.chunks_mut(size).take(due).enumerate() {
            Header {
                flow: flow.id,
                seq: sent + k as u64,
                sent_ns: monotonic_ns() as i64,
            }
            .write_as(udp.header, buf);
        }
        match send_batch(&flow.socket, &buffers[..due * size], size) {
            Ok(n) => sent += n as u64,
            // The local queue is full: the datagram is not sent and its number is
            // reused, so the receiver does not count it as path loss.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => send_errors += 1,
            // An ICMP error for an earlier datagram (the receiver's port closed).
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
            Err(e) => {
                error = Some(format!("sending: {e}"));
                break;
            }
        }
        if schedule
            .next_ns(sent)
            .is_some_and(|next| next < monotonic_ns() as i64)
        {
            sleep_until_ns(monotonic_ns() as i64 + schedule.catch_up_gap_ns());
        }
        shared.sent.store(sent, Ordering::Relaxed);
        shared.bytes.store(sent * size as u64, Ordering::Relaxed);
    }
    let end_us = monotonic_us();
    side_flow(
        flow,
        start_ns / 1000,
        end_us,
        sent * size as u64,
        UdpStats {
            sent,
            send_errors,
            late: schedule.late,
            unsent: schedule
                .unsent(end_ns.min(monotonic_ns() as i64), sent)
                .min(max_datagrams - sent),
            ..UdpStats::default()
        },
        error,
    )
}

/// Sends `buffers` (datagrams of `size` bytes each) with one sendmmsg; returns how
/// many the kernel took.
fn send_batch(socket: &UdpSocket, buffers: &[u8], size: usize) -> io::Result<usize> {
    let mut iovecs: Vec<libc::iovec> = buffers
        .chunks(size)
        .map(|b| libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iovecs
        .iter_mut()
        .map(|iov| {
            // SAFETY: mmsghdr is plain C data; all-zero is valid.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    // SAFETY: msgs and the iovecs and buffers they point to outlive the call; the
    // socket is connected, so no address is needed.
    let n = unsafe {
        libc::sendmmsg(
            socket.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            0,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn receive(
    flow: &UdpFlow,
    params: &TestParams,
    t0_us: i64,
    offset_ns: i64,
    shared: &Shared,
    stop: &AtomicBool,
) -> SideFlow {
    let udp = params.udp.expect("UDP parameters");
    let size = (udp.datagram_size as usize).max(HEADER_LEN);
    let end_us = params.end.deadline_us(t0_us).unwrap_or(i64::MAX);
    let _ = flow.socket.set_read_timeout(Some(READ_TIMEOUT));
    let mut batch = RecvBatch::new(size);
    let (mut last_us, mut bytes) = (t0_us, 0u64);
    let mut error = None;
    let (mut first_real_minus_mono_ns, mut clock_step_ns) = (None, 0);
    let expected = match params.end {
        TestEnd::Bytes { bytes } => Some(bytes.div_ceil(u64::from(udp.datagram_size))),
        TestEnd::Duration { .. } => None,
    };
    loop {
        let now = monotonic_us();
        let quiet_since = now - last_us;
        let after_end = now - end_us.min(now);
        // The receiver's count is only needed (and locked for) in a test of a byte count.
        let all_in = || {
            expected.is_some_and(|n| shared.receiver.lock().expect("receiver lock").received >= n)
        };
        if stop.load(Ordering::Relaxed)
            || (now > end_us
                && (quiet_since > QUIET_AFTER_END_US || after_end > LINGER_AFTER_END_US))
            || all_in()
        {
            break;
        }
        match batch.recv(&flow.socket) {
            Ok(n) => {
                // The kernel stamps arrivals on CLOCK_REALTIME; move them to ours.
                let real_minus_mono_ns = clock::realtime_minus_monotonic_ns();
                let first = *first_real_minus_mono_ns.get_or_insert(real_minus_mono_ns);
                clock_step_ns = clock_step_ns.max((real_minus_mono_ns - first).abs());
                let mut receiver = shared.receiver.lock().expect("receiver lock");
                for k in 0..n {
                    let (data, stamp_ns) = batch.datagram(k);
                    let Some(header) = Header::read_as(udp.header, data, flow.id) else {
                        continue;
                    };
                    let arrived_ns =
                        stamp_ns.map_or(monotonic_ns() as i64, |t| t - real_minus_mono_ns);
                    receiver.push(&header, arrived_ns, offset_ns);
                    bytes += data.len() as u64;
                }
                drop(receiver);
                last_us = monotonic_us();
                shared.bytes.store(bytes, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
            Err(e) => {
                error = Some(format!("receiving: {e}"));
                break;
            }
        }
    }
    let mut receiver = shared.receiver.lock().expect("receiver lock");
    let stats = UdpStats {
        received: receiver.received,
        // This end's view; with the sender's count the merge makes it sent − received.
        lost: receiver.missing(),
        duplicates: receiver.duplicates,
        out_of_order: receiver.out_of_order,
        jitter_us: receiver.jitter_us(),
        owd_us: receiver.owd(),
        socket_drops: sockopt::socket_drops(flow.socket.as_fd()).unwrap_or(0),
        clock_step_us: clock_step_ns as f64 / 1000.0,
        ..UdpStats::default()
    };
    // The receiver's window runs from the test's start, as for TCP.
    side_flow(flow, t0_us, last_us, bytes, stats, error)
}

fn side_flow(
    flow: &UdpFlow,
    start_us: i64,
    end_us: i64,
    bytes: u64,
    udp: UdpStats,
    error: Option<String>,
) -> SideFlow {
    let addr = |a: io::Result<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    let mut buffer = flow.buffer;
    buffer.at_end = buffer.effective;
    SideFlow {
        id: flow.id,
        role: flow.role,
        local_addr: addr(flow.socket.local_addr()),
        peer_addr: addr(flow.socket.peer_addr()),
        cc: String::new(),
        mss: 0,
        buffer,
        bytes,
        start_us,
        end_us,
        retransmits: 0,
        samples: 0,
        limits: LimitShares::default(),
        kernel_limits: LimitShares::default(),
        rtt: RttStats::default(),
        error,
        udp: Some(udp),
        at_deadline: None,
        unacked: 0,
        transactions: Vec::new(),
    }
}

/// Buffers for one recvmmsg of up to [`BATCH`] datagrams with their timestamps.
struct RecvBatch {
    size: usize,
    data: Vec<u8>,
    control: Vec<tcplab_sys::stamp::ControlBuf>,
    iovecs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl RecvBatch {
    fn new(size: usize) -> RecvBatch {
        // Room for a datagram larger than expected, so a stranger is never mistaken.
        let size = size + 1;
        let mut batch = RecvBatch {
            size,
            data: vec![0; size * BATCH],
            control: vec![[0; 8]; BATCH],
            iovecs: Vec::with_capacity(BATCH),
            msgs: Vec::with_capacity(BATCH),
        };
        for k in 0..BATCH {
            batch.iovecs.push(libc::iovec {
                iov_base: batch.data[k * size..].as_mut_ptr() as *mut libc::c_void,
                iov_len: size,
            });
        }
        for k in 0..BATCH {
            // SAFETY: mmsghdr is plain C data; all-zero is valid.
            let mut m: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
            m.msg_hdr.msg_iov = &mut batch.iovecs[k];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = batch.control[k].as_mut_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_controllen = std::mem::size_of::<tcplab_sys::stamp::ControlBuf>();
            batch.msgs.push(m);
        }
        batch
    }

    /// Waits for at least one datagram (up to the socket's read timeout), then takes
    /// what is queued; returns how many.
    fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        for m in &mut self.msgs {
            m.msg_hdr.msg_controllen = std::mem::size_of::<tcplab_sys::stamp::ControlBuf>();
            m.msg_len = 0;
        }
        // SAFETY: every mmsghdr points into buffers owned by self, which outlive the call.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Datagram `k` of the last batch and its kernel arrival time (CLOCK_REALTIME, ns).
    fn datagram(&self, k: usize) -> (&[u8], Option<i64>) {
        let m = &self.msgs[k];
        let data = &self.data[k * self.size..k * self.size + m.msg_len as usize];
        // SAFETY: the kernel filled this message's control data in the last recvmmsg.
        let stamp = unsafe { tcplab_sys::stamp::arrival_ns(&m.msg_hdr) };
        (data, stamp)
    }
}
