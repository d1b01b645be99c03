//! `tcplab run HOST:PORT`: one test against a tcplab server.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tcplab_netsim::traffic::TestStart;
use tcplab_record::{Host, IntervalRecord, RunRecord, TestParams};
use tcplab_sys::clock::{monotonic_us, realtime_us};
use tcplab_sys::sysctl;

use crate::auth::{self, PreSharedKey};
use crate::engine::{self, End, FlowSocket, Flows};
use crate::events::{self, TestTrace};
use crate::flow::Renew;
use crate::merge::{self, EndReport, IntervalMerger, TestContext};
use crate::probe::{self, Prober};
use crate::protocol::{self, Message, ProtocolError, Role, SideInterval, SideReport};
use crate::setup;
use crate::shell::{self, Input};
use crate::udp::{self, UdpFlow};
use crate::{flow_roles, TrafficError};
use tcplab_netsim::path::PacingTarget;
use tcplab_proto::handshake::tcplab::{Accepted, Client as Handshake, ClientAction, ClientConfig};
pub use tcplab_proto::handshake::tcplab::{HELLO_TIMEOUT as HANDSHAKE_TIMEOUT, TIME_PROBES};

pub const DEFAULT_PORT: u16 = 5201;
/// Five SYNs (at 0, 1, 3, 7 and 15 s): a lossy path drops three in a row often enough.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(16);
/// How long the client waits for any later message of a server that has spoken (it
/// bounds its handshake itself and reports every interval): a lossy path's
/// retransmission backoff (3 s after a lost SYN, then 6 s …) can hold one message
/// longer than 10 s.
const SERVER_SILENCE: Duration = Duration::from_secs(60);

/// A test to run and how to label it.
#[derive(Clone, Debug)]
pub struct Request {
    /// `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 address.
    pub target: String,
    pub params: TestParams,
    pub label: Option<String>,
    pub tags: Vec<String>,
    /// Where this end's senders publish their window rate for a lab's dynamic pacer.
    pub pacing: Option<PacingTarget>,
    /// The server's pre-shared key: proved to the server, and the server must prove it.
    pub key: Option<PreSharedKey>,
    /// Take the kernel's events of the test's sockets (`--trace-events`).
    pub trace_events: bool,
    /// Where a lab's links learn when the test starts (its t0): their schedules count
    /// from it.
    pub test_start: Option<TestStart>,
}

/// Resolves a target as users write it; the port defaults to 5201.
pub fn resolve(target: &str) -> Result<Vec<SocketAddr>, TrafficError> {
    let resolve_err = |reason: String| TrafficError::Resolve {
        target: target.to_string(),
        reason,
    };
    if let Ok(addr) = target.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let (host, port) = host_and_port(target).map_err(resolve_err)?;
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| resolve_err(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(resolve_err("no addresses".into()));
    }
    Ok(addrs)
}

/// A target's host and port (5201 when it names none): `HOST`, `HOST:PORT`, a bare
/// IPv6 address, or one in brackets with or without `:PORT`.
fn host_and_port(target: &str) -> Result<(&str, u16), String> {
    let port = |text: &str| {
        text.parse::<u16>()
            .map_err(|_| format!("bad port '{text}'"))
    };
    if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "an IPv6 address in brackets lacks its ']'".to_string())?;
        return match after {
            "" => Ok((host, DEFAULT_PORT)),
            _ => match after.strip_prefix(':') {
                Some(p) => Ok((host, port(p)?)),
                None => Err(format!("unexpected '{after}' after ']'")),
            },
        };
    }
    if target.parse::<std::net::Ipv6Addr>().is_ok() {
        return Ok((target, DEFAULT_PORT));
    }
    match target.rsplit_once(':') {
        Some((host, p)) => Ok((host, port(p)?)),
        None => Ok((target, DEFAULT_PORT)),
    }
}

/// Runs one test. `on_interval` sees each report interval as soon as both ends have
/// reported it. Returns a record even when the test was cut short (status
/// `incomplete`); errors only when nothing was measured.
pub fn run(
    request: &Request,
    stop: Arc<AtomicBool>,
    on_interval: &mut dyn FnMut(&[IntervalRecord]),
) -> Result<RunRecord, TrafficError> {
    let addrs = resolve(&request.target)?;
    let (mut control, server_addr) = connect_any(&addrs, &request.target)?;
    control.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    control.set_nodelay(true)?;
    let client_meta = sysctl::host_meta();
    let config = ClientConfig {
        params: request.params.clone(),
        key: request.key.clone(),
        nonce: auth::nonce(),
        boot_id: client_meta.boot_id.clone(),
        time_probes: TIME_PROBES,
        deflated_samples: true,
    };
    let mut handshake = Handshake::new(config, monotonic_us());
    let mut trace = None;
    let mut opened: Option<(Accepted, Flows)> = None;
    let mut buf = vec![0u8; 64 << 10];
    // The handshake, to Ready: the machine says what to send and open, this loop moves
    // the bytes and reads the clock.
    'handshake: loop {
        while let Some(action) = handshake.poll_action() {
            match action {
                ClientAction::Transmit(bytes) => control.write_all(&bytes)?,
                ClientAction::Accepted(accepted) => {
                    let flows = if request.params.udp.is_some() {
                        Flows::Udp(open_udp_flows(
                            &request.params,
                            server_addr,
                            &accepted.udp_ports,
                        )?)
                    } else {
                        let data_port = accepted.data_port;
                        let data_addr = SocketAddr::new(server_addr.ip(), data_port);
                        let test_trace =
                            trace.insert(request.trace_events.then(|| TestTrace::start(data_port)));
                        let flows = open_flows(&request.params, data_addr, &accepted.cookie)?;
                        if let Some(test_trace) = test_trace {
                            test_trace.add_flows(&flows);
                        }
                        Flows::Tcp(flows)
                    };
                    opened = Some((accepted, flows));
                    handshake.flows_opened(monotonic_us());
                }
                ClientAction::SayUdpHellos => {
                    if let Some((accepted, Flows::Udp(flows))) = &opened {
                        for flow in flows {
                            // A refused send (nothing listening yet) is retried with the
                            // next round.
                            let _ = flow
                                .socket
                                .send(&protocol::udp_hello(&accepted.cookie, flow.id));
                        }
                    }
                }
                ClientAction::Ready => break 'handshake,
                ClientAction::Failed(e) => {
                    return Err(TrafficError::from_handshake(e, &request.target))
                }
            }
        }
        match shell::read_by(&control, &mut buf, handshake.poll_timeout())? {
            Input::Bytes(n, now) => handshake.handle_input(now, &buf[..n]),
            Input::Eof(now) => handshake.handle_eof(now),
            Input::Timeout(now) => handshake.handle_timeout(now),
        }
    }
    let (accepted, flows) = opened.expect("Ready follows Accepted");
    if let Flows::Tcp(flows) = &flows {
        engine::await_setup_acknowledged(flows, CONNECT_TIMEOUT, &stop)?;
    }
    let prober = match (request.params.probe, accepted.probe_port) {
        (Some(probe), Some(port)) => {
            let prober = start_probes(
                &control,
                server_addr,
                port,
                &accepted.cookie,
                probe.interval_us,
            )?;
            // The idle phase: probes before the load, which Go starts.
            sleep_unless_stopped(Duration::from_micros(probe.idle_us), &stop);
            Some(prober)
        }
        // The machine has checked that a test with probes has their port.
        _ => None,
    };

    let context = TestContext {
        target: request.target.clone(),
        label: request.label.clone(),
        tags: request.tags.clone(),
        params: request.params.clone(),
        started_unix_us: realtime_us(),
        t0_us: monotonic_us(),
        clock: accepted.offset,
        client_meta,
        server_meta: accepted.meta,
    };
    let t0_us = context.t0_us;
    if let Some(start) = &request.test_start {
        start.publish(t0_us as u64 * 1000);
    }
    handshake.go(t0_us);
    while let Some(action) = handshake.poll_action() {
        if let ClientAction::Transmit(bytes) = action {
            control.write_all(&bytes)?;
        }
    }
    // The server says nothing between Ready and Go: anything after is the test's.
    let leftover = handshake.take_leftover();
    let reader = control.try_clone()?;
    let side = ClientSide {
        flows,
        pacing: request.pacing.clone(),
        prober,
    };
    let mut record = run_started(
        control,
        (leftover, reader),
        side,
        context,
        stop,
        on_interval,
    );
    events::attach(&mut record, trace.flatten(), request.trace_events, t0_us);
    Ok(record)
}

/// A message from the server, which may send up to the protocol's limit.
fn recv(control: &mut impl Read) -> Result<Message, ProtocolError> {
    protocol::recv(control, protocol::MAX_MESSAGE)
}

pub(crate) fn connect_any(
    addrs: &[SocketAddr],
    target: &str,
) -> Result<(TcpStream, SocketAddr), TrafficError> {
    let mut last = io::Error::other("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(addr, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok((stream, *addr)),
            Err(e) => last = e,
        }
    }
    Err(TrafficError::Connect {
        target: target.to_string(),
        source: last,
    })
}

/// Opens one data connection per flow, tuned for its role before the handshake.
fn open_flows(
    params: &TestParams,
    data_addr: SocketAddr,
    cookie: &[u8; protocol::COOKIE_LEN],
) -> Result<Vec<FlowSocket>, TrafficError> {
    flow_roles(params)
        .into_iter()
        .map(|(id, direction)| {
            let role = Role::of(Host::Client, direction);
            let socket = setup::tcp_socket(&data_addr)?;
            let buffer = setup::apply(&socket, &params.tuning, role)?;
            socket
                .connect_timeout(&data_addr.into(), CONNECT_TIMEOUT)
                .map_err(|source| TrafficError::Connect {
                    target: data_addr.to_string(),
                    source,
                })?;
            let mut stream: TcpStream = socket.into();
            stream.write_all(&protocol::data_intro(cookie, id))?;
            let per_transaction = params.transactions.is_some_and(|t| t.new_connection);
            Ok(FlowSocket {
                id,
                role,
                stream,
                buffer,
                renew: per_transaction.then(|| Renew::Connect {
                    addr: data_addr,
                    cookie: *cookie,
                }),
            })
        })
        .collect()
}

/// One UDP socket per flow, connected to its server port and prepared for its role.
fn open_udp_flows(
    params: &TestParams,
    server_addr: SocketAddr,
    ports: &[u16],
) -> Result<Vec<UdpFlow>, TrafficError> {
    let roles = flow_roles(params);
    if ports.len() != roles.len() {
        return Err(ProtocolError::Malformed(format!(
            "server gave {} UDP ports for {} flows",
            ports.len(),
            roles.len()
        ))
        .into());
    }
    roles
        .into_iter()
        .zip(ports)
        .map(|((id, direction), &port)| {
            let role = if direction.sender() == Host::Client {
                Role::Send
            } else {
                Role::Receive
            };
            let unspecified: std::net::IpAddr = if server_addr.is_ipv6() {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            };
            let socket = UdpSocket::bind(SocketAddr::new(unspecified, 0))?;
            socket.connect(SocketAddr::new(server_addr.ip(), port))?;
            let buffer = udp::prepare(&socket, role, params)?;
            Ok(UdpFlow {
                id,
                role,
                socket,
                buffer,
            })
        })
        .collect()
}

enum Event {
    Local(Vec<SideInterval>),
    LocalDone(engine::SideOutcome),
    Remote(Result<Message, ProtocolError>),
}

/// Runs the client's side while following the server's messages, until both ends are
/// done or the server is gone.
/// What this end runs once the test has started.
struct ClientSide {
    flows: Flows,
    /// Where the senders publish their window rate for a lab's dynamic pacer.
    pacing: Option<PacingTarget>,
    prober: Option<Prober>,
}

fn run_started(
    mut control: TcpStream,
    (leftover, reader): (Vec<u8>, TcpStream),
    side: ClientSide,
    context: TestContext,
    stop: Arc<AtomicBool>,
    on_interval: &mut dyn FnMut(&[IntervalRecord]),
) -> RunRecord {
    let ClientSide {
        flows,
        pacing,
        prober,
    } = side;
    let t0_us = context.t0_us;
    let deadline_us = context.params.end.deadline_us(t0_us);
    if let (Some(prober), Some(deadline)) = (&prober, deadline_us) {
        prober.stop_at(deadline);
    }
    let mut load_end_us = deadline_us.unwrap_or(i64::MAX);
    let mut probes_echoed = None;
    let (events, inbox) = mpsc::channel::<Event>();
    let (local_tx, local_rx) = mpsc::channel::<Vec<SideInterval>>();
    let side = {
        let (params, stop) = (context.params.clone(), Arc::clone(&stop));
        let end = End {
            host: Host::Client,
            t0_us: context.t0_us,
            // The server starts when Go arrives, after us.
            peer_t0_us: context.t0_us,
            // The server's clock against ours: server = client + offset.
            peer_offset_ns: if context.same_clock() {
                0
            } else {
                context.clock.offset_us * 1000
            },
            pacing,
            reset_cut_drains: true,
        };
        thread::spawn(move || flows.run(&params, end, local_tx, stop))
    };
    {
        // One thread relays this end's intervals, then its outcome: in that order, so the
        // loop below never sees the end before the last interval.
        let events = events.clone();
        thread::spawn(move || {
            for records in local_rx {
                let _ = events.send(Event::Local(records));
            }
            let outcome = side.join().expect("client side panicked");
            let _ = events.send(Event::LocalDone(outcome));
        });
    }
    // A live test has no natural silence bound; the server reports every interval.
    let silence = Duration::from_micros(context.params.report_interval_us) + SERVER_SILENCE;
    let _ = reader.set_read_timeout(Some(silence));
    let mut reader = io::Cursor::new(leftover).chain(reader);
    thread::spawn(move || loop {
        let msg = recv(&mut reader);
        let more = matches!(
            msg,
            Ok(Message::Interval { .. }
                | Message::SideDone { .. }
                | Message::Samples { .. }
                | Message::SamplesDeflated { .. })
        );
        if events.send(Event::Remote(msg)).is_err() || !more {
            return;
        }
    });

    let mut merger = IntervalMerger::new(&context);
    let mut local: Option<engine::SideOutcome> = None;
    let mut remote_report: Option<SideReport> = None;
    let mut remote_samples = Vec::new();
    let mut remote_finished = false;
    let mut error: Option<String> = None;
    while local.is_none() || !remote_finished {
        let Ok(event) = inbox.recv() else { break };
        match event {
            Event::Local(records) => emit(merger.add(Host::Client, records), on_interval),
            Event::LocalDone(outcome) => {
                // Interrupted: tell the server to end its side too (any message does),
                // instead of letting it read a stream a lossy path delivers slowly.
                if stop.load(Ordering::Relaxed) {
                    let _ = protocol::send(&mut control, &Message::Bye);
                }
                // A byte count's load ends with this end's flows.
                load_end_us = load_end_us.min(monotonic_us());
                if let Some(prober) = &prober {
                    prober.stop_at(load_end_us);
                }
                local = Some(outcome)
            }
            Event::Remote(Ok(Message::Interval { records })) => {
                emit(merger.add(Host::Server, records), on_interval)
            }
            Event::Remote(Ok(Message::SideDone {
                report,
                cut,
                probes_echoed: echoed,
            })) => {
                remote_report = Some(report);
                probes_echoed = echoed;
                // The server's reason explains whatever broke on our side.
                if let Some(cut) = cut {
                    error = Some(cut);
                }
            }
            Event::Remote(Ok(Message::Samples { samples })) => remote_samples.extend(samples),
            Event::Remote(Ok(Message::SamplesDeflated { hex })) => {
                match protocol::inflate_samples(&hex) {
                    Ok(samples) => remote_samples.extend(samples),
                    Err(e) => {
                        error.get_or_insert(format!("the server's samples: {e}"));
                    }
                }
            }
            Event::Remote(Ok(Message::SamplesEnd)) => remote_finished = true,
            Event::Remote(other) => {
                let why = match other {
                    Ok(msg) => format!("unexpected message from server: {msg:?}"),
                    Err(ProtocolError::Closed) => {
                        "server closed the control connection mid-test".to_string()
                    }
                    Err(e) => format!("lost the server: {e}"),
                };
                remote_finished = true;
                if remote_report.is_none() {
                    // The server is gone mid-test: end our side now instead of waiting on dead sockets.
                    stop.store(true, Ordering::Relaxed);
                }
                error.get_or_insert(why);
            }
        }
    }
    if stop.load(Ordering::Relaxed) && error.is_none() {
        error = Some("interrupted".into());
    }
    let _ = protocol::send(&mut control, &Message::Bye);
    let local = local.expect("local side reports before the loop ends");
    let server = remote_report.map(|report| EndReport {
        report,
        samples: remote_samples,
    });
    let intervals = merger.finish();
    let mut record = merge::merge(
        &context,
        EndReport {
            report: local.report,
            samples: local.samples,
        },
        server,
        intervals,
        error,
    );
    if let Some(prober) = prober {
        attach_probes(&mut record, prober, &context, load_end_us, probes_echoed);
    }
    record
}

/// A socket for the test's probes, from the control connection's address to the
/// server's probe port, and the probes started.
fn start_probes(
    control: &TcpStream,
    server: SocketAddr,
    port: u16,
    cookie: &[u8],
    interval_us: u64,
) -> Result<Prober, TrafficError> {
    let socket = UdpSocket::bind(SocketAddr::new(control.local_addr()?.ip(), 0))?;
    socket.connect(SocketAddr::new(server.ip(), port))?;
    Ok(Prober::start(socket, probe::token(cookie), interval_us)?)
}

fn sleep_unless_stopped(duration: Duration, stop: &AtomicBool) {
    let end = std::time::Instant::now() + duration;
    while !stop.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Puts the probes and their figures into the record. The last probe left at the end
/// of the load, before the server's last report: answers still on their way get
/// 100 ms more.
fn attach_probes(
    record: &mut RunRecord,
    prober: Prober,
    context: &TestContext,
    load_end_us: i64,
    echoed: Option<u64>,
) {
    let Some(params) = context.params.probe else {
        return;
    };
    let (sent, answers) = match prober.finish(Duration::from_millis(100)) {
        Ok(got) => got,
        Err(e) => {
            record.error.get_or_insert(format!("probes: {e}"));
            return;
        }
    };
    let same_clock = context.same_clock();
    let offset_us = if same_clock {
        0
    } else {
        context.clock.offset_us
    };
    record.probes = tcplab_model::probe::records(&sent, &answers, context.t0_us, offset_us);
    record.summary.latency = Some(tcplab_model::probe::latency(
        &record.probes,
        params.interval_us,
        load_end_us - context.t0_us,
        echoed.unwrap_or(0),
        same_clock,
    ));
}

fn emit(groups: Vec<Vec<IntervalRecord>>, on_interval: &mut dyn FnMut(&[IntervalRecord])) {
    for group in groups {
        on_interval(&group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_port_or_get_5201() {
        for (target, host, port) in [
            ("example.org", "example.org", 5201),
            ("example.org:7", "example.org", 7),
            ("10.0.0.1", "10.0.0.1", 5201),
            ("fd00:77::1", "fd00:77::1", 5201),
            ("[fd00:77::1]", "fd00:77::1", 5201),
            ("[fd00:77::1]:6000", "fd00:77::1", 6000),
            ("[host.example]:6000", "host.example", 6000),
        ] {
            assert_eq!(host_and_port(target), Ok((host, port)), "{target}");
        }
        assert_eq!(host_and_port("h:99999").unwrap_err(), "bad port '99999'");
        assert_eq!(
            host_and_port("[fd00::1").unwrap_err(),
            "an IPv6 address in brackets lacks its ']'"
        );
        assert_eq!(
            host_and_port("[fd00::1]x").unwrap_err(),
            "unexpected 'x' after ']'"
        );
        // Bracketed and bare addresses resolve without a lookup.
        let want: SocketAddr = "[fd00:77::1]:5201".parse().unwrap();
        assert_eq!(resolve("[fd00:77::1]").unwrap(), vec![want]);
        assert_eq!(resolve("fd00:77::1").unwrap(), vec![want]);
    }

    /// A server that welcomes with its clock on `boot_id`, answers clock probes, and
    /// refuses the test at `Start`: how many probes the client sent before it.
    fn probes_before_start(boot_id: String) -> usize {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap().to_string();
        let server = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            protocol::write_hello(&mut conn, protocol::ConnKind::Control).unwrap();
            protocol::send(
                &mut conn,
                &Message::Challenge {
                    nonce: "00".repeat(32),
                },
            )
            .unwrap();
            protocol::read_client_hello(&mut conn).unwrap();
            let recv = |conn: &mut TcpStream| protocol::recv(conn, protocol::MAX_MESSAGE).unwrap();
            assert!(matches!(recv(&mut conn), Message::Auth { .. }));
            let now = monotonic_us();
            let clock = protocol::ServerClock {
                boot_id,
                recv_us: now,
                send_us: now,
            };
            let welcome = Message::Welcome {
                proof: None,
                clock: Some(clock),
            };
            protocol::send(&mut conn, &welcome).unwrap();
            let mut probes = 0;
            loop {
                match recv(&mut conn) {
                    Message::TimeProbe { client_send_us } => {
                        probes += 1;
                        let now = monotonic_us();
                        let reply = Message::TimeReply {
                            client_send_us,
                            server_recv_us: now,
                            server_send_us: now,
                        };
                        protocol::send(&mut conn, &reply).unwrap();
                    }
                    Message::Start { .. } => break,
                    other => panic!("{other:?}"),
                }
            }
            let refused = Message::Refused {
                reason: "enough".into(),
            };
            protocol::send(&mut conn, &refused).unwrap();
            probes
        });
        let request = Request {
            target,
            params: TestParams::default(),
            label: None,
            tags: Vec::new(),
            pacing: None,
            key: None,
            trace_events: false,
            test_start: None,
        };
        let outcome = run(&request, Arc::default(), &mut |_| {});
        assert!(matches!(outcome, Err(TrafficError::Refused(r)) if r == "enough"));
        server.join().unwrap()
    }

    #[test]
    fn on_one_clock_the_welcome_is_the_only_clock_exchange() {
        assert_eq!(probes_before_start(sysctl::boot_id()), 0);
        // Another boot is another clock: the probes follow.
        assert_eq!(probes_before_start("another boot".into()), TIME_PROBES);
    }
}
