//! `tcplab serve`: accepts control connections and runs each client's test on its own
//! threads, so several clients are served at once and one client's failure or hostility
//! never touches another's test.
//!
//! Before a test, in order: the source's connection rate (checked at accept, refused
//! from one thread so a flood costs no thread per connection), a place among the
//! connections in their handshake (a newcomer takes one from a full table, see
//! [`limits::Counts::connect`]), the hellos, whether the peer may use the server at all
//! ([`Access`]), the key ([`crate::auth`]), the request against the [`ServerLimits`], and
//! the caps on tests running. Each step of the handshake has one deadline, however the
//! peer trickles, and a connection that loses its place meets it at once.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rand::RngCore;
use tcplab_record::units::{count, format_duration_us, format_size};
use tcplab_record::{BufferSize, Host, HostMeta, TestParams};
use tcplab_sys::localnet::Neighbourhood;
use tcplab_sys::{clock::monotonic_us, poll, sockopt, sysctl};

use crate::auth::{self, PreSharedKey};
use crate::engine::{End, FlowSocket, Flows, RateTarget};
use crate::flow::Renew;
use crate::limits::{self, Admission, ServerLimits, Slot, Source};
use crate::probe::{self, Echo};
use crate::protocol::{
    self, ClientClock, ConnKind, Message, ProtocolError, Role, COOKIE_LEN, SAMPLES_PER_CHUNK,
};
use crate::setup;
use crate::udp::{self, UdpFlow};
use crate::{flow_roles, TrafficError};

/// How often the control watcher wakes to see whether the test has finished.
const WATCH_POLL: Duration = Duration::from_millis(200);
/// Refusals waiting for the refusing thread; beyond, connections close unanswered.
const REFUSAL_QUEUE: usize = 64;
/// How long a refused or broken connection is held, after its answer, for the peer to
/// read it and close.
const REFUSAL_TIME: Duration = Duration::from_millis(500);
/// Refused connections the refusing thread holds at once; beyond, it closes the oldest
/// (its answer long sent).
const REFUSALS_HELD: usize = 256;
/// How often the refusing thread reads what the connections it holds sent.
const REFUSAL_TICK: Duration = Duration::from_millis(20);
/// How often a connection in its handshake looks whether a newer one took its place.
const PLACE_CHECK: Duration = Duration::from_millis(100);

/// Who may use a server.
#[derive(Clone, Debug)]
pub enum Access {
    /// Clients prove the pre-shared key (`--key-file`).
    Key(PreSharedKey),
    /// No key: only peers on this host (see `tcplab_sys::localnet`). `tcplab serve`'s default.
    LocalOnly,
    /// No key, any peer: `--insecure-open`, and a lab's own server.
    Open,
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub access: Access,
    pub limits: ServerLimits,
}

/// Why the server did not admit a client.
#[derive(Debug)]
pub enum Rejected {
    /// A reason for the client, sent to it as `Refused`.
    Refused(String),
    /// The connection broke or spoke nonsense: nothing to tell it.
    Broken(ProtocolError),
}

impl From<ProtocolError> for Rejected {
    /// A message over the size limit and a handshake out of time are limits the client
    /// ran into: it hears which.
    fn from(e: ProtocolError) -> Self {
        match e {
            ProtocolError::TooLarge { len, limit } => Rejected::Refused(format!(
                "control message of {len} bytes exceeds --max-message {}",
                format_size(limit as u64)
            )),
            ProtocolError::Io(e) if e.kind() == io::ErrorKind::TimedOut => {
                Rejected::Refused(e.to_string())
            }
            e => Rejected::Broken(e),
        }
    }
}

/// What every client thread of one server shares.
struct Shared {
    config: ServerConfig,
    admission: Admission,
    log: fn(&str),
    pacing: Option<RateTarget>,
}

/// Serves until `stop` is set (noticed within `ACCEPT_POLL_MS`, or at once when the
/// listener is also shut down for reading). Each admitted control connection gets its own
/// thread. `pacing`: where the tests' senders publish their window rate (a lab's dynamic
/// pacer).
pub fn serve(
    listener: TcpListener,
    config: ServerConfig,
    log: fn(&str),
    stop: &AtomicBool,
    pacing: Option<RateTarget>,
) -> io::Result<()> {
    let shared = Arc::new(Shared {
        admission: Admission::new(&config.limits),
        config,
        log,
        pacing,
    });
    let refusals = refuser(log)?;
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Relaxed) {
        let (stream, peer) = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                poll::wait_for(&listener, libc::POLLIN, ACCEPT_POLL_MS)?;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A listener shut down to stop us at once.
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(e) => {
                log(&format!("accept failed: {e}"));
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let handshake = match shared
            .admission
            .connect(Source::of(peer.ip()), monotonic_us())
        {
            Ok(slot) => slot,
            Err(reason) => {
                // A full queue means a flood: those connections just close.
                let _ = refusals.try_send((stream, peer, reason));
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("client-{peer}"))
            .spawn(move || {
                let outcome = handle_client(stream, peer, handshake, &shared);
                (shared.log)(&match outcome {
                    Ok(()) => format!("{peer}: test done"),
                    Err(TrafficError::Refused(reason)) => format!("{peer}: refused: {reason}"),
                    Err(e) => format!("{peer}: dropped: {e}"),
                });
            });
        if let Err(e) = spawned {
            log(&format!("{peer}: cannot spawn a thread: {e}"));
        }
    }
    Ok(())
}

/// Stops a [`serve`] loop on `listener` (or a clone of it) at once: sets `stop` and shuts
/// the listener down, which wakes the loop's wait and fails its accept.
pub fn stop_now(listener: &TcpListener, stop: &AtomicBool) {
    stop.store(true, Ordering::Relaxed);
    // Should it fail, the loop still sees `stop` within its poll.
    let _ = socket2::SockRef::from(listener).shutdown(Shutdown::Read);
}

/// How often an idle server looks at its stop flag: also how long stopping it takes,
/// which every run of a sweep pays once.
const ACCEPT_POLL_MS: i32 = 10;

type Refusal = (TcpStream, SocketAddr, String);

/// The thread that answers connections refused at accept: our hello and the reason at
/// once, without waiting for the peer's, then each connection held until its peer
/// closes (or [`REFUSAL_TIME`]), what it sent read and dropped, since closing on unread
/// bytes would reset the connection and could lose the reason before the client reads
/// it. No refusal waits for another's peer: a crowd of silent ones delays none.
fn refuser(log: fn(&str)) -> io::Result<mpsc::SyncSender<Refusal>> {
    let (refusals, queue) = mpsc::sync_channel::<Refusal>(REFUSAL_QUEUE);
    thread::Builder::new()
        .name("refuser".into())
        .spawn(move || {
            let mut held: VecDeque<(TcpStream, Instant)> = VecDeque::new();
            loop {
                let next = if held.is_empty() {
                    queue
                        .recv()
                        .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
                } else {
                    queue.recv_timeout(REFUSAL_TICK)
                };
                match next {
                    Ok((stream, peer, reason)) => {
                        log(&format!("{peer}: refused: {reason}"));
                        if answer_at_once(&stream, reason).is_ok() {
                            if held.len() == REFUSALS_HELD {
                                held.pop_front();
                            }
                            held.push_back((stream, Instant::now() + REFUSAL_TIME));
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
                let now = Instant::now();
                held.retain(|(stream, until)| now < *until && !peer_closed(stream));
            }
        })?;
    Ok(refusals)
}

/// Our hello and `reason` on a fresh connection, in one write that its empty send
/// buffer takes whole; then our side closed.
fn answer_at_once(stream: &TcpStream, reason: String) -> io::Result<()> {
    let mut answer = Vec::new();
    protocol::write_hello(&mut answer, ConnKind::Control)?;
    protocol::send(&mut answer, &Message::Refused { reason }).map_err(io::Error::other)?;
    stream.set_nonblocking(true)?;
    let mut writer = stream;
    writer.write_all(&answer)?;
    stream.shutdown(Shutdown::Write)
}

/// Reads and drops what a held connection's peer sent (a bounded amount per look);
/// whether the peer has closed or the connection broke.
fn peer_closed(stream: &TcpStream) -> bool {
    let mut reader = stream;
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        match reader.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    false
}

/// Sends `reason` and closes gracefully.
fn refuse(conn: &mut Deadlined, reason: String) {
    if protocol::send(conn, &Message::Refused { reason }).is_ok() {
        close_gracefully(conn);
    }
}

/// Closes our side, then reads and drops what the peer sent until it closes too (or the
/// deadline): closing on unread bytes would reset the connection and could lose what we
/// sent before the peer reads it.
fn close_gracefully(conn: &mut Deadlined) {
    if conn.stream.shutdown(Shutdown::Write).is_ok() {
        let _ = io::copy(conn, &mut io::sink());
    }
}

/// A connection whose reads and writes must all be done by one deadline, however the
/// peer trickles its bytes: a slow-loris peer is dropped as surely as a silent one.
struct Deadlined<'a> {
    stream: &'a TcpStream,
    until: Instant,
    /// The connection's place among those in their handshake: once a newer connection
    /// has taken it, the deadline is now.
    place: Option<&'a Slot>,
}

impl<'a> Deadlined<'a> {
    /// `limit` from now.
    fn new(stream: &'a TcpStream, limit: Duration) -> Deadlined<'a> {
        Deadlined::until(stream, Instant::now() + limit)
    }

    fn until(stream: &'a TcpStream, until: Instant) -> Deadlined<'a> {
        Deadlined {
            stream,
            until,
            place: None,
        }
    }

    fn in_place(self, place: &'a Slot) -> Deadlined<'a> {
        Deadlined {
            place: Some(place),
            ..self
        }
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "handshake step not done within --handshake-timeout",
        )
    }

    /// The time left, or the timeout error when there is none.
    fn left(&self) -> io::Result<Duration> {
        if let Some(reason) = self.place.and_then(Slot::evicted) {
            return Err(io::Error::new(io::ErrorKind::TimedOut, reason));
        }
        match self.until.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Ok(left),
            _ => Err(self.timed_out()),
        }
    }

    fn explain(&self, e: io::Error) -> io::Error {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => self.timed_out(),
            _ => e,
        }
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut stream = self.stream;
        loop {
            let left = self.left()?;
            // A connection with a place wakes to see whether it still has it.
            let wait = match self.place {
                Some(_) => left.min(PLACE_CHECK),
                None => left,
            };
            stream.set_read_timeout(Some(wait))?;
            match stream.read(buf) {
                // `left` says whether the time is up.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                read => return read,
            }
        }
    }
}

impl Write for Deadlined<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut stream = self.stream;
        stream.set_write_timeout(Some(self.left()?))?;
        stream.write(buf).map_err(|e| self.explain(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn handle_client(
    control: TcpStream,
    peer: SocketAddr,
    handshake: Slot,
    server: &Shared,
) -> Result<(), TrafficError> {
    control.set_nodelay(true)?;
    let limits = &server.config.limits;
    let mut conn = Deadlined::new(&control, limits.handshake_timeout).in_place(&handshake);
    let admitted = admit(&mut conn, peer, &handshake, server);
    let (start, _test) = match admitted {
        Ok(admitted) => admitted,
        Err(rejected) => {
            // A fresh deadline: the reason is worth sending even to a peer that ran out
            // of time.
            let mut conn = Deadlined::new(&control, REFUSAL_TIME);
            return Err(match rejected {
                Rejected::Refused(reason) => {
                    refuse(&mut conn, reason.clone());
                    TrafficError::Refused(reason)
                }
                Rejected::Broken(e) => {
                    close_gracefully(&mut conn);
                    e.into()
                }
            });
        }
    };
    drop(handshake);
    (server.log)(&format!(
        "{peer}: test of {}, {:?}",
        count(start.params.streams, "stream"),
        start.params.mode
    ));
    run_test(control, peer, &start, server)
}

/// What a client's `Start` asked for.
struct Start {
    params: TestParams,
    clock: ClientClock,
    /// Send the samples as `SamplesDeflated`.
    deflated_samples: bool,
}

/// Everything before the test: the hellos, who the peer is, its key, its request, and
/// room for one more test. Returns the request and the test's place in the counts.
///
/// Our hello goes first, so that any peer can name us (one of another version, an iperf3
/// client), and the challenge right after it (or the refusal), without waiting for the
/// client's hello: they reach the client together, a round trip sooner.
fn admit(
    conn: &mut Deadlined,
    peer: SocketAddr,
    place: &Slot,
    server: &Shared,
) -> Result<(Start, Slot), Rejected> {
    protocol::write_hello(conn, ConnKind::Control).map_err(ProtocolError::Io)?;
    let limits = &server.config.limits;
    let key = match &server.config.access {
        Access::Key(key) => Some(key),
        Access::LocalOnly => {
            let here = Neighbourhood::read().map_err(ProtocolError::Io)?;
            if !here.is_local(peer) {
                return Err(Rejected::Refused(format!(
                    "{} is not on this host and this server has no key: it serves only \
                     local peers (start it with --key-file FILE, or --insecure-open)",
                    peer.ip().to_canonical()
                )));
            }
            None
        }
        Access::Open => None,
    };
    let nonce = auth::send_challenge(conn)?;
    protocol::read_client_hello(conn)?;
    place.spoke();
    auth::check_answer(conn, &nonce, key, limits.max_message)?;
    let start = loop {
        match protocol::recv(conn, limits.max_message)? {
            Message::TimeProbe { client_send_us } => {
                let server_recv_us = monotonic_us();
                protocol::send(
                    conn,
                    &Message::TimeReply {
                        client_send_us,
                        server_recv_us,
                        server_send_us: monotonic_us(),
                    },
                )?;
            }
            Message::Start {
                params,
                clock,
                deflated_samples,
            } => {
                break Start {
                    params,
                    clock,
                    deflated_samples,
                }
            }
            other => return Err(unexpected(&other, "Start").into()),
        }
    };
    limits::check_request(&start.params, limits)
        .and_then(|()| check_congestion(&start.params))
        .map_err(Rejected::Refused)?;
    let test = server
        .admission
        .start_test(Source::of(peer.ip()))
        .map_err(Rejected::Refused)?;
    Ok((start, test))
}

fn unexpected(msg: &Message, wanted: &str) -> ProtocolError {
    ProtocolError::Malformed(format!("expected {wanted}, got {msg:?}"))
}

/// A congestion control the client asks for must exist in this server's kernel.
fn check_congestion(params: &TestParams) -> Result<(), String> {
    let Some(cc) = &params.tuning.cc else {
        return Ok(());
    };
    let available = sockopt::available_congestion().map_err(|e| e.to_string())?;
    if available.iter().any(|a| a == cc) {
        Ok(())
    } else {
        Err(format!(
            "server has no congestion control '{cc}' (available: {})",
            available.join(" ")
        ))
    }
}

fn run_test(
    mut control: TcpStream,
    peer: SocketAddr,
    start: &Start,
    server: &Shared,
) -> Result<(), TrafficError> {
    let Start {
        params: asked,
        clock,
        deflated_samples,
    } = start;
    let limits = &server.config.limits;
    let params = &limits::server_params(asked, limits);
    let rate_cap_bps = limits::rate_cap_bps(asked, limits);
    let (flows, echo) = match open_flows(&control, peer, params, limits, rate_cap_bps) {
        Ok(opened) => opened,
        Err(e) => {
            // Until Go the client waits for an answer: the reason (a tuning the kernel
            // refused), not a closed connection.
            let reason = format!("setting up the test's connections: {e}");
            refuse(&mut Deadlined::new(&control, REFUSAL_TIME), reason.clone());
            return Err(TrafficError::Refused(reason));
        }
    };
    // The client's clock against ours, for one-way delays: server = client + offset.
    let same_clock = clock
        .offset
        .same_clock(&clock.boot_id, &sysctl::host_meta().boot_id);
    let peer_offset_ns = if same_clock {
        0
    } else {
        -clock.offset.offset_us * 1000
    };
    // The client's idle probes come between Ready and Go.
    let idle = Duration::from_micros(params.probe.map_or(0, |p| p.idle_us));
    let mut conn = Deadlined::new(&control, limits.handshake_timeout + idle);
    protocol::send(&mut conn, &Message::Ready)?;
    let client_t0_us = match protocol::recv(&mut conn, limits.max_message)? {
        Message::Go { client_t0_us } => client_t0_us,
        other => return Err(unexpected(&other, "Go").into()),
    };
    // This end starts when the client's first bytes can arrive: `Go`'s arrival, or on
    // one clock the client's start plus the path's one way (half the best exchange's
    // round trip), however late a busy server reads `Go` (one serving 16 clients' tests
    // started its receivers' intervals hundreds of ms after their senders'). A
    // receiver's intervals then hold what the sender's sent in theirs.
    let now = monotonic_us();
    let t0 = if same_clock {
        now.min(client_t0_us + clock.offset.uncertainty_us)
    } else {
        now
    };

    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let cut = Arc::new(AtomicBool::new(false));
    let watcher = {
        let mut reader = control.try_clone()?;
        reader.set_read_timeout(Some(WATCH_POLL))?;
        let watch = Watch {
            stop: Arc::clone(&stop),
            finished: Arc::clone(&finished),
            cut: Arc::clone(&cut),
            // A byte-count test has no end of its own: it ends at --max-duration too.
            cut_at: Instant::now().checked_add(
                Duration::from_micros(limits.max_duration_us) + limits.handshake_timeout,
            ),
            linger: limits.handshake_timeout,
            max_message: limits.max_message,
        };
        thread::spawn(move || watch.run(&mut reader))
    };
    let (tx, rx) = mpsc::channel();
    let side = {
        let params = params.clone();
        let stop = Arc::clone(&stop);
        let end = End {
            host: Host::Server,
            t0_us: t0,
            // The client's start on our clock.
            peer_t0_us: client_t0_us - peer_offset_ns / 1000,
            peer_offset_ns,
            pacing: server.pacing.clone(),
            reset_cut_drains: true,
        };
        thread::spawn(move || flows.run(&params, end, tx, stop))
    };
    // (The read timeout is the watcher's: clones share the socket's timeouts.)
    control.set_write_timeout(Some(limits.handshake_timeout))?;
    for records in rx {
        if protocol::send(&mut control, &Message::Interval { records }).is_err() {
            stop.store(true, Ordering::Relaxed);
        }
    }
    let outcome = side.join().expect("server side panicked");
    let cut = cut.load(Ordering::Relaxed).then(|| {
        format!(
            "cut by the server at --max-duration {}",
            format_duration_us(limits.max_duration_us)
        )
    });
    if let Some(cut) = &cut {
        (server.log)(&format!("{peer}: {cut}"));
    }
    protocol::send(
        &mut control,
        &Message::SideDone {
            report: outcome.report,
            cut,
            probes_echoed: echo.map(Echo::finish),
        },
    )?;
    for chunk in outcome.samples.chunks(SAMPLES_PER_CHUNK) {
        let message = if *deflated_samples {
            protocol::deflate_samples(chunk)
        } else {
            Message::Samples {
                samples: chunk.to_vec(),
            }
        };
        protocol::send(&mut control, &message)?;
    }
    protocol::send(&mut control, &Message::SamplesEnd)?;
    finished.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    Ok(())
}

/// The control connection during a test. The client may vanish or cancel mid-test, and
/// a test may outlast --max-duration: either sets `stop`. After our results are sent it
/// waits a little for the client's Bye, so closing never resets a connection whose last
/// messages the client has not read yet.
struct Watch {
    stop: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
    /// Set when the test ran into `cut_at`.
    cut: Arc<AtomicBool>,
    cut_at: Option<Instant>,
    /// How long to wait for Bye after the results.
    linger: Duration,
    max_message: usize,
}

impl Watch {
    fn run(&self, reader: &mut TcpStream) {
        let mut idle_after_finish = Duration::ZERO;
        loop {
            match protocol::recv(reader, self.max_message) {
                Err(ProtocolError::Io(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if self.finished.load(Ordering::Relaxed) {
                        idle_after_finish += WATCH_POLL;
                        if idle_after_finish >= self.linger {
                            return;
                        }
                    } else if self.cut_at.is_some_and(|at| Instant::now() >= at) {
                        self.cut.store(true, Ordering::Relaxed);
                        self.stop.store(true, Ordering::Relaxed);
                    }
                }
                // Bye, anything else, EOF or an error: the client is done with us.
                _ => {
                    self.stop.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

/// Tells the client where its flows (and probes) go, with a fresh random cookie, and
/// takes its flows; the probes' echo answers from then on. Only the client's own
/// address may open flows or be answered; all flows must be there within one
/// --handshake-timeout.
fn open_flows(
    control: &TcpStream,
    peer: SocketAddr,
    params: &TestParams,
    limits: &ServerLimits,
    rate_cap_bps: Option<u64>,
) -> Result<(Flows, Option<Echo>), TrafficError> {
    let roles: Vec<Role> = flow_roles(params)
        .iter()
        .map(|&(_, d)| Role::of(Host::Server, d))
        .collect();
    let mut cookie = [0u8; COOKIE_LEN];
    rand::rng().fill_bytes(&mut cookie);
    let local = control.local_addr()?;
    let probe_socket = match params.probe {
        Some(_) => Some(UdpSocket::bind(SocketAddr::new(local.ip(), 0))?),
        None => None,
    };
    let probe_port = match &probe_socket {
        Some(socket) => Some(socket.local_addr()?.port()),
        None => None,
    };
    let echo = probe_socket
        .map(|socket| Echo::start(socket, probe::token(&cookie), peer.ip().to_canonical()))
        .transpose()?;
    let accepted = |data_port, udp_ports| Message::Accepted {
        data_port,
        cookie: protocol::to_hex(&cookie),
        meta: HostMeta {
            rate_cap_bps,
            ..sysctl::host_meta()
        },
        udp_ports,
        probe_port,
    };
    let client = FlowsFrom {
        ip: peer.ip().to_canonical(),
        cookie,
        deadline: Instant::now() + limits.handshake_timeout,
    };
    let mut conn = Deadlined::until(control, client.deadline);
    if params.udp.is_some() {
        let sockets = roles
            .iter()
            .map(|_| UdpSocket::bind(SocketAddr::new(local.ip(), 0)))
            .collect::<io::Result<Vec<_>>>()?;
        let udp_ports = sockets
            .iter()
            .map(|s| s.local_addr().map(|a| a.port()))
            .collect::<io::Result<Vec<_>>>()?;
        protocol::send(&mut conn, &accepted(0, udp_ports))?;
        return Ok((
            Flows::Udp(client.accept_udp(sockets, &roles, params)?),
            echo,
        ));
    }
    let receives = roles.contains(&Role::Receive);
    let listener = setup::data_listener(local, &params.tuning, receives)?;
    let receive_buffer = if receives {
        Some(setup::apply(&listener, &params.tuning, Role::Receive)?)
    } else {
        None
    };
    let data_port = listener
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("data listener has no port"))?;
    protocol::send(&mut conn, &accepted(data_port, Vec::new()))?;
    let listener: TcpListener = listener.into();
    let mut flows = client.accept_tcp(&listener, &roles, params, receive_buffer)?;
    // A connection per transaction: the one flow accepts them on, the test's listener.
    if params.transactions.is_some_and(|t| t.new_connection) {
        if let Some(flow) = flows.first_mut() {
            flow.renew = Some(Renew::Accept {
                listener,
                cookie: client.cookie,
                client: client.ip,
            });
        }
    }
    Ok((Flows::Tcp(flows), echo))
}

/// Whose flows a test takes, and until when.
struct FlowsFrom {
    /// The control connection's peer: flows from elsewhere are not this test's, and a
    /// UDP hello from elsewhere would make us send to a third party (reflection).
    ip: std::net::IpAddr,
    cookie: [u8; COOKIE_LEN],
    deadline: Instant,
}

impl FlowsFrom {
    fn late(&self, what: &str) -> TrafficError {
        ProtocolError::Malformed(format!(
            "client did not open all {what} within --handshake-timeout"
        ))
        .into()
    }

    fn is_client(&self, from: SocketAddr) -> bool {
        from.ip().to_canonical() == self.ip
    }

    /// Registers each UDP flow's client socket: the first hello with the test's cookie
    /// on a flow's port names the peer that port then talks to.
    fn accept_udp(
        &self,
        sockets: Vec<UdpSocket>,
        roles: &[Role],
        params: &TestParams,
    ) -> Result<Vec<UdpFlow>, TrafficError> {
        let mut flows = Vec::with_capacity(sockets.len());
        for (id, (socket, &role)) in sockets.into_iter().zip(roles).enumerate() {
            let mut buf = [0u8; 64];
            let peer = loop {
                let left = self
                    .deadline
                    .checked_duration_since(Instant::now())
                    .filter(|left| !left.is_zero())
                    .ok_or_else(|| self.late("UDP flows"))?;
                socket.set_read_timeout(Some(left))?;
                match socket.recv_from(&mut buf) {
                    Ok((n, from)) if self.is_client(from) => {
                        match protocol::read_udp_hello(&buf[..n]) {
                            Some((presented, flow))
                                if presented == self.cookie && flow == id as u32 =>
                            {
                                break from
                            }
                            _ => continue,
                        }
                    }
                    // A stray datagram: keep waiting for the real hello.
                    Ok(_) => continue,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        continue
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            socket.connect(peer)?;
            let buffer = udp::prepare(&socket, role, params)?;
            flows.push(UdpFlow {
                id: id as u32,
                role,
                socket,
                buffer,
            });
        }
        Ok(flows)
    }

    /// Accepts exactly one data connection per flow, each presenting the test's cookie.
    /// Connections from elsewhere, or that do not introduce themselves right, are
    /// dropped: they are not this test's.
    fn accept_tcp(
        &self,
        listener: &TcpListener,
        roles: &[Role],
        params: &TestParams,
        receive_buffer: Option<BufferSize>,
    ) -> Result<Vec<FlowSocket>, TrafficError> {
        let mut flows: Vec<Option<FlowSocket>> = roles.iter().map(|_| None).collect();
        listener.set_nonblocking(true)?;
        while flows.iter().any(Option::is_none) {
            if Instant::now() >= self.deadline {
                return Err(self.late("data connections"));
            }
            let stream = match listener.accept() {
                Ok((stream, from)) if self.is_client(from) => stream,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            stream.set_nonblocking(false)?;
            let mut conn = Deadlined::until(&stream, self.deadline);
            let intro = protocol::read_hello(&mut conn)
                .ok()
                .filter(|kind| *kind == ConnKind::Data)
                .and_then(|_| protocol::read_data_intro(&mut conn).ok());
            let Some((_, id)) = intro.filter(|(presented, _)| *presented == self.cookie) else {
                continue;
            };
            let slot = flows
                .get_mut(id as usize)
                .filter(|s| s.is_none())
                .ok_or_else(|| ProtocolError::Malformed(format!("bad or repeated flow id {id}")))?;
            stream.set_read_timeout(None)?;
            let role = roles[id as usize];
            let buffer = match (role, receive_buffer) {
                (Role::Receive, Some(mut b)) => {
                    b.effective = sockopt::rcvbuf(stream.as_fd())?;
                    b.at_end = b.effective;
                    b
                }
                _ => setup::apply(&stream, &params.tuning, role)?,
            };
            *slot = Some(FlowSocket {
                id,
                role,
                stream,
                buffer,
                renew: None,
            });
        }
        Ok(flows.into_iter().map(|f| f.expect("all filled")).collect())
    }
}

/// The address a server listens on when none is given: all addresses, IPv6 and IPv4.
pub fn default_listen() -> SocketAddr {
    SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 5201))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_record::TestEnd;

    #[test]
    fn a_congestion_control_the_kernel_lacks_is_refused_by_name() {
        let mut params = TestParams::default();
        assert!(check_congestion(&params).is_ok());
        params.tuning.cc = Some("no-such-cc".into());
        assert!(check_congestion(&params)
            .unwrap_err()
            .contains("no-such-cc"));
    }

    /// A tuning the server's kernel refuses (checks of the client's kernel aside) reaches
    /// the client as a refusal naming it, and the server's log says the same.
    #[test]
    fn a_tuning_the_kernel_refuses_is_named_to_the_client() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let serving = {
            let stop = Arc::clone(&stop);
            let config = ServerConfig {
                access: Access::LocalOnly,
                limits: ServerLimits::default(),
            };
            thread::spawn(move || serve(listener, config, |_| {}, &stop, None))
        };
        let mut params = TestParams {
            end: TestEnd::Duration { us: 200_000 },
            ..TestParams::default()
        };
        params.tuning.mss = Some(10);
        let request = crate::client::Request {
            target,
            params,
            label: None,
            tags: Vec::new(),
            pacing: None,
            key: None,
            trace_events: false,
        };
        let err = crate::client::run(&request, Arc::new(AtomicBool::new(false)), &mut |_| {})
            .unwrap_err();
        stop.store(true, Ordering::Relaxed);
        serving.join().unwrap().unwrap();
        assert_eq!(
            err.to_string(),
            "server refused the test: setting up the test's connections: the kernel refused \
             the MSS 10 (TCP_MAXSEG): Invalid argument (os error 22)"
        );
    }

    /// A connected pair on loopback: (our end, the peer's).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (listener.accept().unwrap().0, peer)
    }

    #[test]
    fn a_peer_trickling_its_hello_runs_out_of_time_like_a_silent_one() {
        let (ours, mut theirs) = pair();
        let trickle = thread::spawn(move || {
            for byte in protocol::client_hello() {
                if theirs.write_all(&[byte]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(100));
            }
        });
        let started = Instant::now();
        let err = protocol::read_hello(&mut Deadlined::new(&ours, Duration::from_millis(350)))
            .unwrap_err();
        let took = started.elapsed();
        // Each byte came well within any per-read timeout; the whole hello did not.
        assert!(err.to_string().contains("--handshake-timeout"), "{err}");
        assert!(
            took >= Duration::from_millis(350) && took < Duration::from_millis(600),
            "{took:?}"
        );
        drop(ours);
        trickle.join().unwrap();
    }

    #[test]
    fn a_connection_whose_place_a_newer_one_takes_is_told_at_once() {
        let admission = limits::Admission::new(&ServerLimits {
            max_handshakes: 1,
            max_connect_rate: None,
            ..ServerLimits::default()
        });
        let source = |i| Source::of(std::net::IpAddr::from([10, 0, 0, i]));
        let place = admission.connect(source(1), 0).unwrap();
        let (ours, _theirs) = pair();
        let newer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(150));
            admission.connect(source(2), 0).unwrap()
        });
        let started = Instant::now();
        let mut conn = Deadlined::new(&ours, Duration::from_secs(10)).in_place(&place);
        let err = protocol::read_hello(&mut conn).unwrap_err();
        let took = started.elapsed();
        assert!(matches!(
            Rejected::from(err),
            Rejected::Refused(r) if r.ends_with("(--max-handshakes 1), and this one made room for a newer one")
        ),);
        // Within a look or two after it lost its place, not at the deadline.
        assert!(
            took >= Duration::from_millis(150)
                && took < Duration::from_millis(150) + 3 * PLACE_CHECK,
            "{took:?}"
        );
        drop(newer.join().unwrap());
    }

    #[test]
    fn a_udp_hello_from_another_address_than_the_clients_is_ignored() {
        let cookie = [7u8; COOKIE_LEN];
        let from = |ip: &str| {
            let client = FlowsFrom {
                ip: "127.0.0.2".parse().unwrap(),
                cookie,
                deadline: Instant::now() + Duration::from_millis(300),
            };
            let server = UdpSocket::bind("127.0.0.1:0").unwrap();
            let sender = UdpSocket::bind((ip, 0)).unwrap();
            sender
                .send_to(
                    &protocol::udp_hello(&cookie, 0),
                    server.local_addr().unwrap(),
                )
                .unwrap();
            let params = TestParams {
                udp: Some(tcplab_record::UdpParams {
                    rate_bps: 1_000_000,
                    datagram_size: 1000,
                    burst: 1,
                    header: Default::default(),
                }),
                ..TestParams::default()
            };
            client.accept_udp(vec![server], &[Role::Receive], &params)
        };
        // Anyone else naming the cookie would make the server send to a third party.
        let err = from("127.0.0.1")
            .err()
            .expect("a stranger's hello is ignored");
        assert!(err.to_string().contains("UDP flows"), "{err}");
        let flows = from("127.0.0.2").unwrap();
        assert_eq!(flows.len(), 1);
    }

    #[test]
    fn an_oversized_message_or_a_timeout_is_a_refusal_naming_its_limit() {
        let too_large = Rejected::from(ProtocolError::TooLarge {
            len: 70_000,
            limit: 65_536,
        });
        assert!(
            matches!(&too_large, Rejected::Refused(r) if r == "control message of 70000 bytes exceeds --max-message 64 KiB"),
            "{too_large:?}"
        );
        let (ours, _theirs) = pair();
        let late = Deadlined::new(&ours, Duration::ZERO).left().unwrap_err();
        assert!(matches!(
            Rejected::from(ProtocolError::Io(late)),
            Rejected::Refused(r) if r.contains("--handshake-timeout")
        ));
        assert!(matches!(
            Rejected::from(ProtocolError::Closed),
            Rejected::Broken(_)
        ));
    }
}
