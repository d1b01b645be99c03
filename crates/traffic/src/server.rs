//! `tcplab serve`: accepts control connections and runs each client's test on its own
//! threads, so several clients are served at once and one client's failure or hostility
//! never touches another's test.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rand::RngCore;
use tcplab_model::record::{BufferSize, Host, TestEnd, TestParams};
use tcplab_sys::{clock::monotonic_us, poll, sockopt, sysctl};

use crate::engine::{End, FlowSocket, Flows, RateTarget};
use crate::protocol::{
    self, ClientClock, ConnKind, Message, ProtocolError, Role, COOKIE_LEN, SAMPLES_PER_CHUNK,
};
use crate::setup;
use crate::udp::{self, UdpFlow};
use crate::{flow_roles, TrafficError};

/// How long a connected peer may stay silent before a test starts.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finest sampling a client may ask for: finer would only burn the server's CPU.
pub const MIN_SAMPLE_INTERVAL_US: u64 = 100;
/// How often the control watcher wakes to see whether the test has finished.
const WATCH_POLL: Duration = Duration::from_millis(200);

/// Bounds on what one client may ask of this server.
#[derive(Clone, Debug)]
pub struct ServerLimits {
    pub max_streams: u16,
    pub max_duration_us: u64,
    pub max_write_size: u32,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_streams: 128,
            max_duration_us: 3600 * 1_000_000,
            max_write_size: 16 << 20,
        }
    }
}

/// Serves until `stop` is set. Each control connection gets its own thread. `pacing`:
/// where the tests' senders publish their window rate (a lab's dynamic pacer).
pub fn serve(
    listener: TcpListener,
    limits: ServerLimits,
    log: fn(&str),
    stop: &AtomicBool,
    pacing: Option<RateTarget>,
) -> io::Result<()> {
    let limits = Arc::new(limits);
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Relaxed) {
        let (stream, peer) = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                poll::wait_for(&listener, libc::POLLIN, ACCEPT_POLL_MS)?;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log(&format!("accept failed: {e}"));
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let (limits, pacing) = (Arc::clone(&limits), pacing.clone());
        let spawned = thread::Builder::new()
            .name(format!("client-{peer}"))
            .spawn(move || match handle_client(stream, &limits, log, pacing) {
                Ok(()) => log(&format!("{peer}: test done")),
                Err(e) => log(&format!("{peer}: dropped: {e}")),
            });
        if let Err(e) = spawned {
            log(&format!("{peer}: cannot spawn a thread: {e}"));
        }
    }
    Ok(())
}

/// How often an idle server looks at its stop flag: also how long stopping it takes,
/// which every run of a sweep pays once.
const ACCEPT_POLL_MS: i32 = 10;

fn handle_client(
    mut control: TcpStream,
    limits: &ServerLimits,
    log: fn(&str),
    pacing: Option<RateTarget>,
) -> Result<(), TrafficError> {
    control.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    control.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    control.set_nodelay(true)?;
    match protocol::read_hello(&mut control)? {
        ConnKind::Control => {}
        ConnKind::Data => {
            return Err(
                ProtocolError::Malformed("data connection to the control port".into()).into(),
            )
        }
    }
    protocol::write_hello(&mut control, ConnKind::Control)?;
    let (params, clock) = loop {
        match protocol::recv(&mut control)? {
            Message::TimeProbe { client_send_us } => {
                let server_recv_us = monotonic_us();
                protocol::send(
                    &mut control,
                    &Message::TimeReply {
                        client_send_us,
                        server_recv_us,
                        server_send_us: monotonic_us(),
                    },
                )?;
            }
            Message::Start { params, clock } => break (params, clock),
            other => return Err(unexpected(&other, "Start")),
        }
    };
    if let Err(reason) = validate(&params, limits) {
        protocol::send(
            &mut control,
            &Message::Refused {
                reason: reason.clone(),
            },
        )?;
        return Err(TrafficError::Refused(reason));
    }
    log(&format!(
        "{}: test of {} stream(s), {:?}",
        control
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default(),
        params.streams,
        params.mode
    ));
    run_test(control, &params, &clock, pacing)
}

fn unexpected(msg: &Message, wanted: &str) -> TrafficError {
    ProtocolError::Malformed(format!("expected {wanted}, got {msg:?}")).into()
}

/// Checks a request against the server's limits and the kernel, before any resource
/// is spent on it.
fn validate(params: &TestParams, limits: &ServerLimits) -> Result<(), String> {
    if params.streams == 0 || params.streams > limits.max_streams {
        return Err(format!(
            "streams must be 1..={}, got {}",
            limits.max_streams, params.streams
        ));
    }
    if let TestEnd::Duration { us } = params.end {
        if us == 0 || us > limits.max_duration_us {
            return Err(format!(
                "duration must be between 1 µs and {} s",
                limits.max_duration_us / 1_000_000
            ));
        }
    }
    let t = &params.tuning;
    if t.write_size == 0 || t.write_size > limits.max_write_size {
        return Err(format!(
            "write size must be 1..={} bytes",
            limits.max_write_size
        ));
    }
    if t.read_size == 0 || t.read_size > limits.max_write_size {
        return Err(format!(
            "read size must be 1..={} bytes",
            limits.max_write_size
        ));
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
    if params.sample_interval_us != 0 && params.sample_interval_us < MIN_SAMPLE_INTERVAL_US {
        return Err(format!(
            "sampling interval must be 0 (off) or at least {MIN_SAMPLE_INTERVAL_US} µs"
        ));
    }
    if let Some(cc) = &t.cc {
        let available = sockopt::available_congestion().map_err(|e| e.to_string())?;
        if !available.iter().any(|a| a == cc) {
            return Err(format!(
                "server has no congestion control '{cc}' (available: {})",
                available.join(" ")
            ));
        }
    }
    Ok(())
}

fn run_test(
    mut control: TcpStream,
    params: &TestParams,
    clock: &ClientClock,
    pacing: Option<RateTarget>,
) -> Result<(), TrafficError> {
    let roles = flow_roles(params);
    let server_roles: Vec<Role> = roles
        .iter()
        .map(|(_, d)| role_of(d.sender() == Host::Server))
        .collect();
    let mut cookie = [0u8; COOKIE_LEN];
    rand::rng().fill_bytes(&mut cookie);
    let flows = if params.udp.is_some() {
        let sockets = server_roles
            .iter()
            .map(|_| UdpSocket::bind(SocketAddr::new(control.local_addr()?.ip(), 0)))
            .collect::<io::Result<Vec<_>>>()?;
        let udp_ports = sockets
            .iter()
            .map(|s| s.local_addr().map(|a| a.port()))
            .collect::<io::Result<Vec<_>>>()?;
        protocol::send(
            &mut control,
            &Message::Accepted {
                data_port: 0,
                cookie: protocol::cookie_hex(&cookie),
                meta: sysctl::host_meta(),
                udp_ports,
            },
        )?;
        Flows::Udp(accept_udp_flows(sockets, &cookie, &server_roles, params)?)
    } else {
        let receives = server_roles.contains(&Role::Receive);
        let listener = setup::data_listener(control.local_addr()?, &params.tuning, receives)?;
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
        protocol::send(
            &mut control,
            &Message::Accepted {
                data_port,
                cookie: protocol::cookie_hex(&cookie),
                meta: sysctl::host_meta(),
                udp_ports: Vec::new(),
            },
        )?;
        let listener: TcpListener = listener.into();
        Flows::Tcp(accept_flows(
            &listener,
            &cookie,
            &server_roles,
            params,
            receive_buffer,
        )?)
    };
    // The client's clock against ours, for one-way delays: server = client + offset.
    let peer_offset_ns = if clock.boot_id == sysctl::host_meta().boot_id {
        0
    } else {
        -clock.offset.offset_us * 1000
    };
    protocol::send(&mut control, &Message::Ready)?;
    match protocol::recv(&mut control)? {
        Message::Go => {}
        other => return Err(unexpected(&other, "Go")),
    }
    let t0 = monotonic_us();

    // The client may vanish or cancel mid-test: a reader thread turns that into `stop`.
    // After our results are sent it waits a little for the client's Bye, so closing
    // never resets a connection whose last messages the client has not read yet.
    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let watcher = {
        let mut reader = control.try_clone()?;
        reader.set_read_timeout(Some(WATCH_POLL))?;
        let (stop, finished) = (Arc::clone(&stop), Arc::clone(&finished));
        thread::spawn(move || {
            let mut idle_after_finish = Duration::ZERO;
            loop {
                match protocol::recv(&mut reader) {
                    Err(ProtocolError::Io(e))
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        if finished.load(Ordering::Relaxed) {
                            idle_after_finish += WATCH_POLL;
                            if idle_after_finish >= HANDSHAKE_TIMEOUT {
                                return;
                            }
                        }
                    }
                    // Bye, anything else, EOF or an error: the client is done with us.
                    _ => {
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            }
        })
    };
    let (tx, rx) = mpsc::channel();
    let side = {
        let params = params.clone();
        let stop = Arc::clone(&stop);
        let end = End {
            host: Host::Server,
            t0_us: t0,
            peer_offset_ns,
            pacing,
        };
        thread::spawn(move || flows.run(&params, end, tx, stop))
    };
    control.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    for records in rx {
        if protocol::send(&mut control, &Message::Interval { records }).is_err() {
            stop.store(true, Ordering::Relaxed);
        }
    }
    let outcome = side.join().expect("server side panicked");
    protocol::send(
        &mut control,
        &Message::SideDone {
            report: outcome.report,
        },
    )?;
    for chunk in outcome.samples.chunks(SAMPLES_PER_CHUNK) {
        protocol::send(
            &mut control,
            &Message::Samples {
                samples: chunk.to_vec(),
            },
        )?;
    }
    protocol::send(&mut control, &Message::SamplesEnd)?;
    finished.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    Ok(())
}

fn role_of(sends: bool) -> Role {
    if sends {
        Role::Send
    } else {
        Role::Receive
    }
}

/// Registers each UDP flow's client socket: the first hello with the test's cookie on a
/// flow's port names the peer that port then talks to.
fn accept_udp_flows(
    sockets: Vec<UdpSocket>,
    cookie: &[u8; COOKIE_LEN],
    roles: &[Role],
    params: &TestParams,
) -> Result<Vec<UdpFlow>, TrafficError> {
    let deadline = monotonic_us() + HANDSHAKE_TIMEOUT.as_micros() as i64;
    let mut flows = Vec::with_capacity(sockets.len());
    for (id, (socket, &role)) in sockets.into_iter().zip(roles).enumerate() {
        let mut buf = [0u8; 64];
        let peer = loop {
            let left = deadline - monotonic_us();
            if left <= 0 {
                return Err(ProtocolError::Malformed(
                    "client did not open all UDP flows in time".into(),
                )
                .into());
            }
            socket.set_read_timeout(Some(Duration::from_micros(left as u64)))?;
            match socket.recv_from(&mut buf) {
                Ok((n, from)) => match protocol::read_udp_hello(&buf[..n]) {
                    Some((presented, flow)) if presented == *cookie && flow == id as u32 => {
                        break from
                    }
                    // A stray datagram: keep waiting for the real hello.
                    _ => continue,
                },
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
fn accept_flows(
    listener: &TcpListener,
    cookie: &[u8; COOKIE_LEN],
    roles: &[Role],
    params: &TestParams,
    receive_buffer: Option<BufferSize>,
) -> Result<Vec<FlowSocket>, TrafficError> {
    let deadline = monotonic_us() + HANDSHAKE_TIMEOUT.as_micros() as i64;
    let mut flows: Vec<Option<FlowSocket>> = roles.iter().map(|_| None).collect();
    listener.set_nonblocking(true)?;
    while flows.iter().any(Option::is_none) {
        if monotonic_us() > deadline {
            return Err(TrafficError::Protocol(ProtocolError::Malformed(
                "client did not open all data connections in time".into(),
            )));
        }
        let mut stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        if protocol::read_hello(&mut stream)? != ConnKind::Data {
            return Err(
                ProtocolError::Malformed("control hello on a data connection".into()).into(),
            );
        }
        let (presented, id) = protocol::read_data_intro(&mut stream)?;
        if &presented != cookie {
            // A stray or hostile connection: ignore it, keep waiting for the real ones.
            continue;
        }
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

    fn params() -> TestParams {
        TestParams::default()
    }

    #[test]
    fn requests_beyond_the_limits_are_refused_by_name() {
        let limits = ServerLimits::default();
        assert!(validate(&params(), &limits).is_ok());
        let refused = |change: fn(&mut TestParams), word: &str| {
            let mut p = params();
            change(&mut p);
            let reason = validate(&p, &limits).unwrap_err();
            assert!(reason.contains(word), "{reason}");
        };
        refused(|p| p.streams = 0, "streams");
        refused(|p| p.streams = 1000, "streams");
        refused(|p| p.end = TestEnd::Duration { us: 0 }, "duration");
        refused(|p| p.tuning.write_size = 0, "write size");
        refused(|p| p.tuning.read_size = 64 << 20, "read size");
        refused(|p| p.report_interval_us = 0, "report interval");
        refused(|p| p.sample_interval_us = 1, "sampling interval");
        refused(|p| p.tuning.cc = Some("no-such-cc".into()), "no-such-cc");
    }
}
