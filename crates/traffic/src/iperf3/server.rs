//! `tcplab serve --iperf3`: serves stock iperf3 clients, one test at a time as iperf3's
//! own server does (its data connections and UDP streams arrive on the control port).
//!
//! iperf3's server state machine (`iperf_server_api.c`): cookie → we send PARAM_EXCHANGE
//! and read the parameters → CREATE_STREAMS (the client's data connections, each opened
//! with the cookie; or its UDP streams, each opened with a connect datagram) →
//! TEST_START, TEST_RUNNING → flows run until the client sends TEST_END →
//! EXCHANGE_RESULTS (the client's, then ours) → DISPLAY_RESULTS → the client's
//! IPERF_DONE. Our flows run on tcplab's engine.

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tcplab_record::units::count;
use tcplab_record::{Host, Mode, TestParams};
use tcplab_sys::clock::monotonic_us;
use tcplab_sys::localnet::Neighbourhood;

use super::client::our_results;
use super::wire::{self, Cookie, Results, COOKIE_LEN};
use crate::engine::{End, FlowSocket, Flows};
use crate::protocol::Role;
use crate::shell::{self, Input};
use crate::udp::{self, UdpFlow};
use crate::{flow_roles, setup};
pub use tcplab_proto::handshake::iperf3::from_iperf3;
use tcplab_proto::handshake::iperf3::{Server as Handshake, ServerAction, STEP_TIMEOUT};

/// How often a busy server looks for other clients to turn away.
const BUSY_POLL: Duration = Duration::from_millis(20);

/// Serves iperf3 clients until `stop`; `log` gets one line per test or failure. iperf3
/// clients cannot prove tcplab's key, so unless `open` only peers on this host are
/// served, as by `tcplab serve` without a key.
pub fn serve(
    listener: TcpListener,
    open: bool,
    log: impl Fn(String),
    stop: &AtomicBool,
) -> io::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        let (control, peer) = listener.accept()?;
        if !open && !Neighbourhood::read()?.is_local(peer) {
            log(format!(
                "iperf3 client {peer}: refused, not on this host (--insecure-open serves anyone)"
            ));
            continue;
        }
        match serve_one(&listener, control) {
            Ok(summary) => log(format!("iperf3 client {peer}: {summary}")),
            Err(why) => log(format!("iperf3 client {peer}: {why}")),
        }
    }
    Ok(())
}

/// An I/O error as one line naming the step it broke.
fn step(what: &'static str) -> impl Fn(io::Error) -> String {
    move |e| format!("{what}: {e}")
}

/// One test; errors are one line naming the step. The handshake is the machine's
/// (`tcplab_proto::handshake::iperf3::Server`); this moves its bytes and runs the test.
fn serve_one(listener: &TcpListener, control: TcpStream) -> Result<String, String> {
    control
        .set_nodelay(true)
        .map_err(step("control connection"))?;
    control
        .set_write_timeout(Some(STEP_TIMEOUT))
        .map_err(step("control connection"))?;
    let mut shell = Shell {
        control,
        machine: Handshake::new(monotonic_us()),
        buf: vec![0u8; 64 << 10],
    };
    // The cookie, PARAM_EXCHANGE, the parameters. A test we cannot serve is closed:
    // iperf3's client then says the control socket closed unexpectedly, and our log
    // says why (iperf3's error codes have no "unsupported" for these).
    let params = match shell.drive()? {
        Next::Prepare(params) => *params,
        _ => unreachable!("the parameters come first"),
    };
    // A UDP stream's connect datagram follows CREATE_STREAMS at once: its socket must be
    // there first, or the client gets "connection refused".
    let udp_listening = match params.udp {
        Some(_) => Some(
            listener
                .local_addr()
                .and_then(|local| Ok((udp_listener(local)?, local)))
                .map_err(step("opening the UDP port"))?,
        ),
        None => None,
    };
    shell.machine.streams_ready(monotonic_us());
    shell.flush()?;
    let flows = match udp_listening {
        Some((first, local)) => accept_udp_flows(first, local, &params).map(Flows::Udp),
        None => accept_flows(listener, &shell.machine, &params).map(Flows::Tcp),
    }
    .map_err(step("accepting a stream"))?;
    let _busy = Busy::turn_away(listener).map_err(step("listener"))?;
    // Kept open until the client is done, as iperf3 does (see the client).
    let open_until_done: Vec<TcpStream> = match &flows {
        Flows::Tcp(flows) => flows
            .iter()
            .map(|f| f.stream.try_clone())
            .collect::<io::Result<_>>()
            .map_err(step("keeping the streams"))?,
        // A UDP receiver looks at the stop flag between reads.
        Flows::Udp(_) => Vec::new(),
    };
    shell.machine.streams_open(monotonic_us());
    shell.flush()?;

    // The client ends the test with TEST_END: its streams stay open until then. Reads
    // are shut down at once, so a receiver waiting for data ends its window on time.
    let flows_stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let mut reader = shell
            .control
            .try_clone()
            .map_err(step("control connection"))?;
        let _ = reader.set_read_timeout(None);
        let flows_stop = flows_stop.clone();
        thread::spawn(move || {
            let state = wire::read_state(&mut reader);
            flows_stop.store(true, Ordering::Relaxed);
            for stream in &open_until_done {
                let _ = stream.shutdown(Shutdown::Read);
            }
            (state, open_until_done)
        })
    };
    let (tx, _intervals) = mpsc::channel();
    let t0_us = monotonic_us();
    let end = End {
        host: Host::Server,
        t0_us,
        peer_t0_us: t0_us,
        peer_offset_ns: 0,
        pacing: None,
        // iperf3 fails its test on a reset; it ends the test itself.
        reset_cut_drains: false,
    };
    let local = flows.run(&params, end, tx, flows_stop);
    let (state, _open_until_done) = watcher.join().expect("watcher panicked");
    match state {
        Ok(byte) => shell.machine.handle_input(monotonic_us(), &[byte]),
        Err(e) => return Err(format!("waiting for TEST_END: {e}")),
    }
    let sending = params.mode == Mode::Down;
    let ours = our_results(&local, sending, params.udp.is_some());
    shell.machine.results(monotonic_us(), ours);
    // EXCHANGE_RESULTS, the client's results, ours, DISPLAY_RESULTS, and IPERF_DONE
    // (or the client just closing).
    let theirs = loop {
        match shell.drive()? {
            Next::Done(theirs) => break *theirs,
            Next::TestEnd => {}
            Next::Prepare(_) => unreachable!("parameters after the test"),
        }
    };

    let bytes: u64 = local.report.flows.iter().map(|f| f.bytes).sum();
    let seconds = local
        .report
        .flows
        .iter()
        .map(|f| (f.end_us - f.start_us) as f64 / 1e6)
        .fold(0.0, f64::max);
    let client_bytes: u64 = theirs.streams.iter().map(|s| s.bytes).sum();
    Ok(format!(
        "{} {}, {} in {seconds:.2} s = {:.3} Gbit/s here, {} at the client",
        count(
            params.streams,
            if params.udp.is_some() {
                "UDP stream"
            } else {
                "TCP stream"
            }
        ),
        if params.mode == Mode::Down {
            "sent"
        } else {
            "received"
        },
        count(bytes, "byte"),
        bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
        count(client_bytes, "byte"),
    ))
}

/// What the handshake asks of the socket code next.
enum Next {
    Prepare(Box<TestParams>),
    TestEnd,
    Done(Box<Results>),
}

/// The control connection and its handshake's machine.
struct Shell {
    control: TcpStream,
    machine: Handshake,
    buf: Vec<u8>,
}

impl Shell {
    /// Sends what the machine has to send, up to what it asks of us next.
    fn act(&mut self) -> Result<Option<Next>, String> {
        while let Some(action) = self.machine.poll_action() {
            match action {
                ServerAction::Transmit(bytes) => {
                    io::Write::write_all(&mut self.control, &bytes)
                        .map_err(step("sending to the client"))?;
                }
                ServerAction::Prepare(params) => return Ok(Some(Next::Prepare(params))),
                ServerAction::TestEnd => return Ok(Some(Next::TestEnd)),
                ServerAction::Done(theirs) => return Ok(Some(Next::Done(theirs))),
                ServerAction::Failed(why) => return Err(why),
            }
        }
        Ok(None)
    }

    fn flush(&mut self) -> Result<(), String> {
        match self.act()? {
            None => Ok(()),
            Some(_) => unreachable!("the machine asks nothing more without input"),
        }
    }

    /// Feeds the machine the control connection's bytes until it asks for more.
    fn drive(&mut self) -> Result<Next, String> {
        loop {
            if let Some(next) = self.act()? {
                return Ok(next);
            }
            let input = shell::read_by(&self.control, &mut self.buf, self.machine.poll_timeout())
                .map_err(step("control connection"))?;
            match input {
                Input::Bytes(n, now) => self.machine.handle_input(now, &self.buf[..n]),
                Input::Eof(now) => self.machine.handle_eof(now),
                Input::Timeout(now) => self.machine.handle_timeout(now),
            }
        }
    }
}

/// The client's data connections on the control port, each opened with the cookie and
/// tuned for our role in it.
fn accept_flows(
    listener: &TcpListener,
    machine: &Handshake,
    params: &TestParams,
) -> io::Result<Vec<FlowSocket>> {
    flow_roles(params)
        .into_iter()
        .map(|(id, direction)| {
            let (mut stream, _) = listener.accept()?;
            stream.set_read_timeout(Some(STEP_TIMEOUT))?;
            let mut theirs: Cookie = [0; COOKIE_LEN];
            stream.read_exact(&mut theirs)?;
            if !machine.is_our_stream(&theirs) {
                // Another client's control connection: iperf3 tells it we are busy.
                let _ = io::Write::write_all(&mut stream, &Handshake::busy());
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "another client connected while this one opened its streams",
                ));
            }
            stream.set_read_timeout(None)?;
            let role = Role::of(Host::Server, direction);
            let buffer = setup::apply(&stream, &params.tuning, role)?;
            Ok(FlowSocket {
                id,
                role,
                stream,
                buffer,
                renew: None,
            })
        })
        .collect()
}

/// A UDP socket on the control port's address, beside the streams' connected ones.
fn udp_listener(local: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&local.into())?;
    let socket = UdpSocket::from(socket);
    socket.set_read_timeout(Some(STEP_TIMEOUT))?;
    Ok(socket)
}

/// The client's UDP streams, as iperf3's server takes them (`iperf_udp_accept`): the
/// listening socket reads a stream's connect datagram and connects to its sender; a new
/// one listens for the next stream before the answer lets the client open it.
fn accept_udp_flows(
    first: UdpSocket,
    local: SocketAddr,
    params: &TestParams,
) -> io::Result<Vec<UdpFlow>> {
    let roles = flow_roles(params);
    let mut listening = Some(first);
    let mut flows = Vec::with_capacity(roles.len());
    for (k, &(id, direction)) in roles.iter().enumerate() {
        let socket = listening.take().expect("a socket listens for every stream");
        let mut hello = [0u8; 4];
        let (n, peer) = socket.recv_from(&mut hello)?;
        if !wire::is_udp_connect(&hello[..n]) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a UDP stream opened with {:02x?}, not iperf3's connect datagram",
                    &hello[..n]
                ),
            ));
        }
        socket.connect(peer)?;
        if k + 1 < roles.len() {
            listening = Some(udp_listener(local)?);
        }
        socket.send(&wire::UDP_CONNECT_REPLY)?;
        socket.set_read_timeout(None)?;
        let role = Role::of(Host::Server, direction);
        let buffer = udp::prepare(&socket, role, params)?;
        flows.push(UdpFlow {
            id,
            role,
            socket,
            buffer,
        });
    }
    Ok(flows)
}

/// While a test runs, turns other clients away with ACCESS_DENIED, as iperf3 does.
struct Busy {
    done: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Busy {
    fn turn_away(listener: &TcpListener) -> io::Result<Busy> {
        let listener = listener.try_clone()?;
        // Shared with the serving loop's listener: blocking again when the test ends.
        listener.set_nonblocking(true)?;
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let done = done.clone();
            thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut other, _)) => {
                            let _ = other.set_nonblocking(false);
                            let _ = other.set_read_timeout(Some(STEP_TIMEOUT));
                            let mut cookie: Cookie = [0; COOKIE_LEN];
                            if other.read_exact(&mut cookie).is_ok() {
                                let _ = io::Write::write_all(&mut other, &Handshake::busy());
                            }
                        }
                        Err(_) => thread::sleep(BUSY_POLL),
                    }
                }
                let _ = listener.set_nonblocking(false);
            })
        };
        Ok(Busy {
            done,
            thread: Some(thread),
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
