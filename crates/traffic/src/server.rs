//! `tcplab serve`: accepts control connections and runs each client's test on its own
//! threads, so several clients are served at once and one client's failure or hostility
//! never touches another's test.
//!
//! Before a test, in order: the source's connection rate (checked at accept, refused
//! from one thread so a flood costs no thread per connection), a place among the
//! connections in their handshake (a newcomer takes one from a full table, see
//! [`crate::limits::Counts::connect`]), the hellos, whether the peer may use the server at
//! all ([`Access`]), the key ([`crate::auth`]), the request against the [`ServerLimits`],
//! and the caps on tests running. Each step of the handshake has one deadline, however
//! the peer trickles, and a connection that loses its place meets it at once.
//!
//! The handshake itself, to `Go`, is `tcplab_proto::handshake::tcplab::Server`'s: this
//! module moves its bytes, reads the clock, asks the shared admission for room, opens
//! the test's sockets and accepts its flows where the machine says they are the test's.

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
use tcplab_record::units::{count, format_duration_us};
use tcplab_record::{BufferSize, Host, TestParams};
use tcplab_sys::localnet::Neighbourhood;
use tcplab_sys::{clock::monotonic_us, poll, sockopt, sysctl};

use crate::auth::{self, PreSharedKey};
use crate::engine::{End, FlowSocket, Flows};
use crate::flow::Renew;
use crate::limits::{Admission, ServerLimits, Slot, Source};
use crate::probe::{self, Echo};
use crate::protocol::{
    self, ConnKind, Message, ProtocolError, Role, COOKIE_LEN, DATA_INTRO_LEN, SAMPLES_PER_CHUNK,
};
use crate::setup;
use crate::shell::{self, Input};
use crate::udp::{self, UdpFlow};
use crate::{flow_roles, TrafficError};
use tcplab_netsim::path::PacingTarget;
use tcplab_proto::handshake::tcplab::{
    DataIntro, Listening as HandshakeListening, Server as Handshake, ServerAction,
    ServerConfig as HandshakeConfig, Start,
};

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

pub use tcplab_proto::protocol::Rejected;

/// What every client thread of one server shares.
struct Shared {
    config: ServerConfig,
    admission: Admission,
    log: fn(&str),
    pacing: PeerPacing,
}

/// Where a lab server's senders publish their window rate, by the client's address:
/// the dynamic gap pacers (`pace cwnd`) on the way to that client.
pub type PeerPacing = std::collections::HashMap<std::net::IpAddr, PacingTarget>;

/// Serves until `stop` is set (noticed within `ACCEPT_POLL_MS`, or at once when the
/// listener is also shut down for reading). Each admitted control connection gets its own
/// thread. `pacing`: where the tests' senders publish their window rate, by the client's
/// address (a lab's dynamic pacers).
pub fn serve(
    listener: TcpListener,
    config: ServerConfig,
    log: fn(&str),
    stop: &AtomicBool,
    pacing: PeerPacing,
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
}

impl<'a> Deadlined<'a> {
    /// `limit` from now.
    fn new(stream: &'a TcpStream, limit: Duration) -> Deadlined<'a> {
        Deadlined::until(stream, Instant::now() + limit)
    }

    fn until(stream: &'a TcpStream, until: Instant) -> Deadlined<'a> {
        Deadlined { stream, until }
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "handshake step not done within --handshake-timeout",
        )
    }

    /// The time left, or the timeout error when there is none.
    fn left(&self) -> io::Result<Duration> {
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
            stream.set_read_timeout(Some(self.left()?))?;
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
    place: Slot,
    server: &Shared,
) -> Result<(), TrafficError> {
    control.set_nodelay(true)?;
    let limits = &server.config.limits;
    let (key, refusal) = match &server.config.access {
        Access::Key(key) => (Some(key.clone()), None),
        Access::LocalOnly => {
            let here = Neighbourhood::read()?;
            let refusal = (!here.is_local(peer)).then(|| {
                format!(
                    "{} is not on this host and this server has no key: it serves only \
                     local peers (start it with --key-file FILE, or --insecure-open)",
                    peer.ip().to_canonical()
                )
            });
            (None, refusal)
        }
        Access::Open => (None, None),
    };
    let config = HandshakeConfig {
        key,
        refusal,
        limits: limits.clone(),
        boot_id: sysctl::boot_id(),
        // Unreadable, the kernel's own refusal names a missing one at setup.
        congestion: sockopt::available_congestion().ok(),
        nonce: auth::nonce(),
    };
    let mut shell = ServerShell {
        machine: Handshake::new(config, monotonic_us()),
        control: &control,
        place: Some(place),
        buf: vec![0u8; 64 << 10],
    };
    // Everything before the test: the hellos, who the peer is, its key, its request and
    // room for one more test.
    let start = match shell.next()? {
        Next::Admit(start) => start,
        Next::Go(_) => unreachable!("Go before Start"),
    };
    let room = server.admission.start_test(Source::of(peer.ip()));
    let (room, _test) = match room {
        Ok(slot) => (Ok(()), Some(slot)),
        Err(reason) => (Err(reason), None),
    };
    shell.machine.admitted(monotonic_us(), room);
    if _test.is_some() {
        // The handshake's place is for connections still in their handshake.
        shell.place = None;
        (server.log)(&format!(
            "{peer}: test of {}, {:?}",
            count(start.params.streams, "stream"),
            start.params.mode
        ));
    }
    shell.flush()?;
    let (flows, echo) = open_flows(&mut shell, peer, &start)?;
    let client_t0_us = match shell.next()? {
        Next::Go(client_t0_us) => client_t0_us,
        Next::Admit(_) => unreachable!("Start after Start"),
    };
    let client_said_more = !shell.machine.take_leftover().is_empty();
    run_test(
        control,
        peer,
        &start,
        (flows, echo),
        client_t0_us,
        client_said_more,
        server,
    )
}

/// What the handshake asks of the socket code next.
enum Next {
    Admit(Box<Start>),
    Go(i64),
}

/// The socket code around a server's handshake machine.
struct ServerShell<'a> {
    machine: Handshake,
    control: &'a TcpStream,
    /// The connection's place among those in their handshake: once a newer connection
    /// has taken it, the machine is told at once.
    place: Option<Slot>,
    buf: Vec<u8>,
}

impl ServerShell<'_> {
    /// Carries out the machine's actions up to the next that needs more than bytes.
    fn act(&mut self) -> Result<Option<Next>, TrafficError> {
        while let Some(action) = self.machine.poll_action() {
            match action {
                ServerAction::Transmit(bytes) => {
                    // A refusal gets a fresh deadline: the reason is worth sending even to
                    // a peer that ran out of time.
                    let left = self
                        .machine
                        .poll_timeout()
                        .map(|d| Duration::from_micros((d - monotonic_us()).max(1) as u64))
                        .unwrap_or(REFUSAL_TIME);
                    let mut writer = self.control;
                    self.control.set_write_timeout(Some(left))?;
                    writer.write_all(&bytes)?;
                }
                ServerAction::Spoke => {
                    if let Some(place) = &self.place {
                        place.spoke();
                    }
                }
                ServerAction::Admit(start) => return Ok(Some(Next::Admit(start))),
                ServerAction::Go { client_t0_us } => return Ok(Some(Next::Go(client_t0_us))),
                ServerAction::Close(rejected) => {
                    close_gracefully(&mut Deadlined::new(self.control, REFUSAL_TIME));
                    return Err(match rejected {
                        Rejected::Refused(reason) => TrafficError::Refused(reason),
                        Rejected::Broken(e) => e.into(),
                    });
                }
            }
        }
        Ok(None)
    }

    /// Sends what the machine has to send; errors if it closed.
    fn flush(&mut self) -> Result<(), TrafficError> {
        match self.act()? {
            None => Ok(()),
            Some(_) => unreachable!("the machine asks nothing more without input"),
        }
    }

    /// Feeds the machine the control connection's bytes until it asks for more than
    /// bytes.
    fn next(&mut self) -> Result<Next, TrafficError> {
        loop {
            if let Some(next) = self.act()? {
                return Ok(next);
            }
            if let Some(reason) = self.place.as_ref().and_then(Slot::evicted) {
                self.machine.evict(monotonic_us(), reason);
                continue;
            }
            // A connection with a place wakes to see whether it still has it.
            let deadline = match (&self.place, self.machine.poll_timeout()) {
                (Some(_), Some(d)) => Some(d.min(monotonic_us() + PLACE_CHECK_US)),
                (_, d) => d,
            };
            match shell::read_by(self.control, &mut self.buf, deadline)? {
                Input::Bytes(n, now) => self.machine.handle_input(now, &self.buf[..n]),
                Input::Eof(now) => self.machine.handle_eof(now),
                Input::Timeout(now) => self.machine.handle_timeout(now),
            }
        }
    }

    /// The machine's deadline as an `Instant`.
    fn deadline(&self) -> Instant {
        let left = self
            .machine
            .poll_timeout()
            .map_or(0, |d| (d - monotonic_us()).max(0));
        Instant::now() + Duration::from_micros(left as u64)
    }
}

const PLACE_CHECK_US: i64 = PLACE_CHECK.as_micros() as i64;

fn run_test(
    mut control: TcpStream,
    peer: SocketAddr,
    start: &Start,
    (flows, echo): (Flows, Option<Echo>),
    client_t0_us: i64,
    client_said_more: bool,
    server: &Shared,
) -> Result<(), TrafficError> {
    let Start {
        clock,
        deflated_samples,
        params,
        ..
    } = start;
    let limits = &server.config.limits;
    // The client's clock against ours, for one-way delays: server = client + offset.
    let same_clock = clock
        .offset
        .same_clock(&clock.boot_id, &sysctl::host_meta().boot_id);
    let peer_offset_ns = if same_clock {
        0
    } else {
        -clock.offset.offset_us * 1000
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

    // A client that said more than Go (its Bye) is done with us already.
    let stop = Arc::new(AtomicBool::new(client_said_more));
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
            pacing: server.pacing.get(&peer.ip().to_canonical()).cloned(),
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
/// address may open flows or be answered; which connections and datagrams are the
/// test's flows, and by when, the machine says. A setup the kernel refuses is the
/// client's refusal.
fn open_flows(
    shell: &mut ServerShell,
    peer: SocketAddr,
    start: &Start,
) -> Result<(Flows, Option<Echo>), TrafficError> {
    let params = &start.params;
    let mut cookie = [0u8; COOKIE_LEN];
    rand::rng().fill_bytes(&mut cookie);
    let client = peer.ip().to_canonical();
    let sockets = match listen(shell.control, params, &cookie, client) {
        Ok(sockets) => sockets,
        Err(e) => {
            // Until Go the client waits for an answer: the reason (a tuning the kernel
            // refused), not a closed connection.
            shell
                .machine
                .refuse(format!("setting up the test's connections: {e}"));
            shell.flush()?;
            unreachable!("a refusal closes");
        }
    };
    let Listening {
        data_port,
        udp_ports,
        sockets,
        echo,
        probe_port,
    } = sockets;
    shell.machine.listening(
        monotonic_us(),
        HandshakeListening {
            data_port,
            udp_ports,
            probe_port,
            meta: sysctl::host_meta(),
            cookie,
        },
    );
    shell.flush()?;
    let roles = shell.machine.roles();
    // A flow the kernel would not set up is the client's refusal, as the sockets' is.
    let setup_failed = |shell: &mut ServerShell, e: TrafficError| {
        if !shell.machine.is_done() {
            shell
                .machine
                .refuse(format!("setting up the test's connections: {e}"));
        }
        match shell.flush() {
            Err(closed) => closed,
            Ok(()) => e,
        }
    };
    let flows = match sockets {
        Sockets::Udp(sockets) => match accept_udp(shell, client, sockets, &roles, params) {
            Ok(flows) => Flows::Udp(flows),
            Err(e) => return Err(setup_failed(shell, e)),
        },
        Sockets::Tcp {
            listener,
            receive_buffer,
        } => {
            let accepted = accept_tcp(shell, client, &listener, &roles, params, receive_buffer);
            let mut flows = match accepted {
                Ok(flows) => flows,
                Err(e) => return Err(setup_failed(shell, e)),
            };
            // A connection per transaction: the one flow accepts them on, the test's
            // listener.
            if params.transactions.is_some_and(|t| t.new_connection) {
                if let Some(flow) = flows.first_mut() {
                    flow.renew = Some(Renew::Accept {
                        listener,
                        cookie,
                        client,
                    });
                }
            }
            Flows::Tcp(flows)
        }
    };
    // Ready, or the close of a test whose flows did not all come.
    shell.flush()?;
    Ok((flows, echo))
}

/// The sockets a test's flows come to.
struct Listening {
    data_port: u16,
    udp_ports: Vec<u16>,
    probe_port: Option<u16>,
    echo: Option<Echo>,
    sockets: Sockets,
}

enum Sockets {
    Udp(Vec<UdpSocket>),
    Tcp {
        listener: TcpListener,
        receive_buffer: Option<BufferSize>,
    },
}

/// The test's listener (or UDP sockets) and its probes' echo, on the control
/// connection's address.
fn listen(
    control: &TcpStream,
    params: &TestParams,
    cookie: &[u8; COOKIE_LEN],
    client: std::net::IpAddr,
) -> Result<Listening, TrafficError> {
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
        .map(|socket| Echo::start(socket, probe::token(cookie), client))
        .transpose()?;
    let flows = flow_roles(params).len();
    if params.udp.is_some() {
        let sockets = (0..flows)
            .map(|_| UdpSocket::bind(SocketAddr::new(local.ip(), 0)))
            .collect::<io::Result<Vec<_>>>()?;
        let udp_ports = sockets
            .iter()
            .map(|s| s.local_addr().map(|a| a.port()))
            .collect::<io::Result<Vec<_>>>()?;
        return Ok(Listening {
            data_port: 0,
            udp_ports,
            probe_port,
            echo,
            sockets: Sockets::Udp(sockets),
        });
    }
    let receives = flow_roles(params)
        .iter()
        .any(|&(_, d)| Role::of(Host::Server, d) == Role::Receive);
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
    Ok(Listening {
        data_port,
        udp_ports: Vec::new(),
        probe_port,
        echo,
        sockets: Sockets::Tcp {
            listener: listener.into(),
            receive_buffer,
        },
    })
}

/// Registers each UDP flow's client socket: the first datagram from the client that
/// the machine takes for the flow's hello names the peer that port then talks to. A
/// hello from elsewhere would make us send to a third party (reflection).
fn accept_udp(
    shell: &mut ServerShell,
    client: std::net::IpAddr,
    sockets: Vec<UdpSocket>,
    roles: &[Role],
    params: &TestParams,
) -> Result<Vec<UdpFlow>, TrafficError> {
    let mut flows = Vec::with_capacity(sockets.len());
    for (id, (socket, &role)) in sockets.into_iter().zip(roles).enumerate() {
        let mut buf = [0u8; 64];
        let peer = loop {
            shell.machine.handle_timeout(monotonic_us());
            if shell.machine.is_done() {
                shell.flush()?;
            }
            let left = shell.deadline().saturating_duration_since(Instant::now());
            socket.set_read_timeout(Some(left.max(Duration::from_micros(1))))?;
            match socket.recv_from(&mut buf) {
                Ok((n, from)) if from.ip().to_canonical() == client => {
                    if shell
                        .machine
                        .udp_datagram(monotonic_us(), id as u32, &buf[..n])
                    {
                        break from;
                    }
                }
                // A stray datagram: keep waiting for the real hello.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
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
/// Connections from elsewhere, or that do not introduce themselves right, are dropped:
/// they are not this test's.
fn accept_tcp(
    shell: &mut ServerShell,
    client: std::net::IpAddr,
    listener: &TcpListener,
    roles: &[Role],
    params: &TestParams,
    receive_buffer: Option<BufferSize>,
) -> Result<Vec<FlowSocket>, TrafficError> {
    let mut flows: Vec<Option<FlowSocket>> = roles.iter().map(|_| None).collect();
    listener.set_nonblocking(true)?;
    while !shell.machine.all_flows_in() {
        shell.machine.handle_timeout(monotonic_us());
        if shell.machine.is_done() {
            shell.flush()?;
        }
        let stream = match listener.accept() {
            Ok((stream, from)) if from.ip().to_canonical() == client => stream,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        stream.set_nonblocking(false)?;
        let mut intro = [0u8; DATA_INTRO_LEN];
        let mut conn = Deadlined::until(&stream, shell.deadline());
        if conn.read_exact(&mut intro).is_err() {
            continue;
        }
        let id = match shell.machine.data_intro(monotonic_us(), &intro) {
            DataIntro::Flow(id) => id,
            DataIntro::Stranger if shell.machine.is_done() => {
                shell.flush()?;
                continue;
            }
            DataIntro::Stranger => continue,
        };
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
        flows[id as usize] = Some(FlowSocket {
            id,
            role,
            stream,
            buffer,
            renew: None,
        });
    }
    Ok(flows.into_iter().map(|f| f.expect("all filled")).collect())
}

/// The address a server listens on when none is given: all addresses, IPv6 and IPv4.
pub fn default_listen() -> SocketAddr {
    SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 5201))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_record::TestEnd;

    /// A server on loopback with these limits, stopped on drop.
    struct Loopback {
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        serving: Option<thread::JoinHandle<io::Result<()>>>,
    }

    impl Loopback {
        fn start(limits: ServerLimits) -> Loopback {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let serving = {
                let stop = Arc::clone(&stop);
                let config = ServerConfig {
                    access: Access::LocalOnly,
                    limits,
                };
                thread::spawn(move || serve(listener, config, |_| {}, &stop, PeerPacing::new()))
            };
            Loopback {
                addr,
                stop,
                serving: Some(serving),
            }
        }

        /// What a client asking for `params` hears.
        fn run(&self, params: TestParams) -> Result<tcplab_record::RunRecord, TrafficError> {
            let request = crate::client::Request {
                target: self.addr.to_string(),
                params,
                label: None,
                tags: Vec::new(),
                pacing: None,
                key: None,
                trace_events: false,
                test_start: None,
            };
            crate::client::run(&request, Arc::new(AtomicBool::new(false)), &mut |_| {})
        }
    }

    impl Drop for Loopback {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(serving) = self.serving.take() {
                serving.join().unwrap().unwrap();
            }
        }
    }

    fn short() -> TestParams {
        TestParams {
            end: TestEnd::Duration { us: 200_000 },
            ..TestParams::default()
        }
    }

    #[test]
    fn a_congestion_control_the_kernel_lacks_is_refused_by_name() {
        let server = Loopback::start(ServerLimits::default());
        let mut params = short();
        params.tuning.cc = Some("no-such-cc".into());
        let err = server.run(params).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "server refused the test: server has no congestion control 'no-such-cc'"
            ),
            "{err}"
        );
    }

    /// A tuning the server's kernel refuses (checks of the client's kernel aside) reaches
    /// the client as a refusal naming it.
    #[test]
    fn a_tuning_the_kernel_refuses_is_named_to_the_client() {
        let server = Loopback::start(ServerLimits::default());
        let mut params = short();
        params.tuning.mss = Some(10);
        let err = server.run(params).unwrap_err();
        assert_eq!(
            err.to_string(),
            "server refused the test: setting up the test's connections: the kernel refused \
             the MSS 10 (TCP_MAXSEG): Invalid argument (os error 22)"
        );
    }

    /// Reads the server's hello, then messages until a refusal: its reason.
    fn refusal_from(conn: &mut TcpStream) -> String {
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(protocol::read_hello(conn).unwrap(), ConnKind::Control);
        loop {
            match protocol::recv(conn, protocol::MAX_MESSAGE).unwrap() {
                Message::Refused { reason } => return reason,
                Message::Challenge { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_peer_trickling_its_hello_runs_out_of_time_like_a_silent_one() {
        let server = Loopback::start(ServerLimits {
            handshake_timeout: Duration::from_millis(350),
            ..ServerLimits::default()
        });
        let mut conn = TcpStream::connect(server.addr).unwrap();
        let mut writer = conn.try_clone().unwrap();
        let started = Instant::now();
        let trickle = thread::spawn(move || {
            for byte in protocol::client_hello() {
                if writer.write_all(&[byte]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(100));
            }
        });
        // Each byte came well within any per-read timeout; the whole hello did not.
        let reason = refusal_from(&mut conn);
        let took = started.elapsed();
        assert_eq!(reason, "handshake step not done within --handshake-timeout");
        assert!(
            took >= Duration::from_millis(350) && took < Duration::from_millis(700),
            "{took:?}"
        );
        drop(conn);
        trickle.join().unwrap();
    }

    #[test]
    fn a_connection_whose_place_a_newer_one_takes_is_told_at_once() {
        let server = Loopback::start(ServerLimits {
            max_handshakes: 1,
            max_connect_rate: None,
            ..ServerLimits::default()
        });
        let mut older = TcpStream::connect(server.addr).unwrap();
        let started = Instant::now();
        let newer = {
            let addr = server.addr;
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(150));
                TcpStream::connect(addr).unwrap()
            })
        };
        let reason = refusal_from(&mut older);
        let took = started.elapsed();
        assert!(
            reason.ends_with("(--max-handshakes 1), and this one made room for a newer one"),
            "{reason}"
        );
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
        let params = TestParams {
            udp: Some(tcplab_record::UdpParams {
                rate_bps: 1_000_000,
                datagram_size: 1000,
                burst: 1,
                header: Default::default(),
            }),
            ..TestParams::default()
        };
        let from = |ip: &str| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let _peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let control = listener.accept().unwrap().0;
            let config = HandshakeConfig {
                key: None,
                refusal: None,
                limits: ServerLimits {
                    handshake_timeout: Duration::from_millis(300),
                    ..ServerLimits::default()
                },
                boot_id: String::new(),
                congestion: None,
                nonce: [0; 32],
            };
            let mut machine = Handshake::new(config, monotonic_us());
            machine.handle_input(monotonic_us(), &protocol::client_hello());
            let auth = Message::Auth {
                nonce: protocol::to_hex(&[1; 32]),
                proof: None,
            };
            let start = Message::Start {
                params: params.clone(),
                clock: Default::default(),
                deflated_samples: false,
            };
            for message in [auth, start] {
                machine.handle_input(monotonic_us(), &protocol::frame(&message).unwrap());
            }
            machine.admitted(monotonic_us(), Ok(()));
            let cookie = [7u8; COOKIE_LEN];
            let server = UdpSocket::bind("127.0.0.1:0").unwrap();
            let listening = HandshakeListening {
                data_port: 0,
                udp_ports: vec![server.local_addr().unwrap().port()],
                probe_port: None,
                meta: Default::default(),
                cookie,
            };
            machine.listening(monotonic_us(), listening);
            while machine.poll_action().is_some() {}
            let mut shell = ServerShell {
                machine,
                control: &control,
                place: None,
                buf: Vec::new(),
            };
            let sender = UdpSocket::bind((ip, 0)).unwrap();
            sender
                .send_to(
                    &protocol::udp_hello(&cookie, 0),
                    server.local_addr().unwrap(),
                )
                .unwrap();
            let client = "127.0.0.2".parse().unwrap();
            accept_udp(&mut shell, client, vec![server], &[Role::Receive], &params)
        };
        // Anyone else naming the cookie would make the server send to a third party.
        let err = from("127.0.0.1")
            .err()
            .expect("a stranger's hello is ignored");
        assert!(err.to_string().contains("UDP flows"), "{err}");
        let flows = from("127.0.0.2").unwrap();
        assert_eq!(flows.len(), 1);
    }
}
