//! `tcplab run --iperf3 HOST[:5201]`: one test against a stock iperf3 server.
//!
//! iperf3's client state machine (`iperf_client_api.c`): cookie → PARAM_EXCHANGE
//! (our parameters) → CREATE_STREAMS (data connections, each opened with the cookie) →
//! TEST_START, TEST_RUNNING → flows run → we send TEST_END → EXCHANGE_RESULTS (ours,
//! then the server's) → DISPLAY_RESULTS → we send IPERF_DONE. This end's flows run on
//! tcplab's engine, so they carry samples and limits; the server's side of each flow is
//! what iperf3 reports of it (bytes, retransmits, its time window, CPU).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use tcplab_record::{
    BufferSize, CpuUse, Host, HostMeta, Mode, RunRecord, TestEnd, TestParams, UdpHeaderFormat,
    UdpStats,
};
use tcplab_sys::clock::{monotonic_us, realtime_us};
use tcplab_sys::sysctl;

use super::wire::{self, Cookie, Params, Results, StreamResult};
use super::Iperf3Error;
use crate::client::{self, Request};
use crate::engine::{self, End, FlowSocket, Flows, SideOutcome};
use crate::events::{self, TestTrace};
use crate::merge::{self, EndReport, IntervalMerger, TestContext};
use crate::protocol::{Role, SideFlow, SideReport};
use crate::shell::{self, Input};
use crate::udp::{self, UdpFlow};
use crate::{flow_roles, setup, TrafficError};
use tcplab_proto::handshake::iperf3::{Client as Handshake, ClientAction, Failure, STEP_TIMEOUT};

/// How often the watcher of a receiving test looks at the clock and the stop flag.
const WATCH_EVERY: Duration = Duration::from_millis(5);

/// Runs one test against an iperf3 server. Errors when the server refuses or breaks
/// the protocol; a test cut short by `stop` still returns its record (`incomplete`).
pub fn run(request: &Request, stop: Arc<AtomicBool>) -> Result<RunRecord, Iperf3Error> {
    let mut params = request.params.clone();
    if let Some(udp) = &mut params.udp {
        udp.header = UdpHeaderFormat::Iperf3;
    }
    let params = &params;
    let iperf3_params = to_iperf3(params)?;
    let target = request.target.clone();
    let addrs = client::resolve(&target)?;
    let (control, server_addr) = client::connect_any(&addrs, &target).map_err(|e| match e {
        TrafficError::Connect { target, source } => Iperf3Error::Connect { target, source },
        other => other.into(),
    })?;
    let cookie = wire::new_cookie();
    let mut session = Session {
        control,
        target,
        machine: Handshake::new(&cookie, iperf3_params, monotonic_us()),
        buf: vec![0u8; 64 << 10],
    };
    session.setup()?;
    // Cookie, PARAM_EXCHANGE, the parameters, CREATE_STREAMS.
    session.drive()?;
    // iperf3's data connections go to its control port.
    let mut trace = (request.trace_events && params.udp.is_none())
        .then(|| TestTrace::start(server_addr.port()));
    let flows = match params.udp {
        Some(_) => open_udp_flows(params, server_addr).map(Flows::Udp),
        None => open_flows(params, server_addr, &cookie).map(Flows::Tcp),
    }
    .map_err(|source| session.io_error("opening a data connection", source))?;
    if let (Some(trace), Flows::Tcp(flows)) = (&mut trace, &flows) {
        trace.add_flows(flows);
    }
    // iperf3 closes the data connections after IPERF_DONE; closed earlier, with data
    // still arriving, they would reset and an iperf3 sender would fail the test.
    let _open_until_done = data_fds(&flows)
        .map_err(|source| session.io_error("keeping the data connections", source))?;
    // TEST_START, TEST_RUNNING.
    session.machine.streams_created(monotonic_us());
    session.drive()?;
    if let Flows::Tcp(flows) = &flows {
        engine::await_setup_acknowledged(flows, STEP_TIMEOUT, &stop).map_err(|source| {
            session.io_error("waiting for the data connections' setup", source)
        })?;
    }

    let context = TestContext {
        target: request.target.clone(),
        label: request.label.clone(),
        tags: request.tags.clone(),
        params: params.clone(),
        started_unix_us: realtime_us(),
        t0_us: monotonic_us(),
        clock: Default::default(),
        client_meta: sysctl::host_meta(),
        server_meta: HostMeta {
            hostname: format!("iperf3 at {}", request.target),
            ..HostMeta::default()
        },
    };
    let (local, intervals) = run_flows(flows, &context, &stop, request);

    let ours = our_results(&local, params.mode == Mode::Up, params.udp.is_some());
    session.machine.test_done(monotonic_us(), ours);
    // TEST_END, EXCHANGE_RESULTS, both ends' results, DISPLAY_RESULTS, IPERF_DONE.
    let theirs = match session.drive()? {
        Step::Done(theirs) => *theirs,
        _ => unreachable!("the results end the exchange"),
    };

    let server = server_report(&theirs, &local.report, &context)
        .map_err(|detail| session.not_iperf3(detail))?;
    let mut merger = IntervalMerger::new(&context);
    for records in intervals {
        merger.add(Host::Client, records);
    }
    let error = stop
        .load(Ordering::Relaxed)
        .then(|| "interrupted".to_string());
    let mut record = merge::merge(
        &context,
        EndReport {
            report: local.report,
            samples: local.samples,
        },
        Some(EndReport {
            report: server,
            samples: Vec::new(),
        }),
        merger.finish(),
        error,
    );
    if params.mode == Mode::Down {
        // The senders were iperf3's: what limited them is unknown, not "rwnd".
        record.summary.dominant_limit = None;
    }
    events::attach(&mut record, trace, request.trace_events, context.t0_us);
    Ok(record)
}

/// What the handshake asks of the socket code next.
enum Step {
    CreateStreams,
    Running,
    Done(Box<Results>),
}

/// The control connection, the handshake's machine, and the name of the server it
/// leads to, for error messages.
struct Session {
    control: TcpStream,
    target: String,
    machine: Handshake,
    buf: Vec<u8>,
}

impl Session {
    fn setup(&self) -> Result<(), Iperf3Error> {
        let what = "setting up the control connection";
        self.io(what, self.control.set_write_timeout(Some(STEP_TIMEOUT)))?;
        self.io(what, self.control.set_nodelay(true))
    }

    fn io<T>(&self, what: &'static str, result: io::Result<T>) -> Result<T, Iperf3Error> {
        result.map_err(|source| self.io_error(what, source))
    }

    fn io_error(&self, what: &'static str, source: io::Error) -> Iperf3Error {
        match source.kind() {
            io::ErrorKind::InvalidData => self.not_iperf3(format!("{what}: {source}")),
            _ => Iperf3Error::Io {
                target: self.target.clone(),
                what,
                source,
            },
        }
    }

    fn not_iperf3(&self, detail: String) -> Iperf3Error {
        Iperf3Error::NotIperf3 {
            target: self.target.clone(),
            detail,
        }
    }

    fn failure(&self, failure: Failure) -> Iperf3Error {
        let target = self.target.clone();
        match failure {
            Failure::Busy => Iperf3Error::Busy { target },
            Failure::ServerError { code, errno } => Iperf3Error::ServerError {
                target,
                code,
                errno,
            },
            Failure::Terminated => Iperf3Error::Terminated { target },
            Failure::TcplabServer => Iperf3Error::TcplabServer { target },
            Failure::NotIperf3(detail) => Iperf3Error::NotIperf3 { target, detail },
        }
    }

    /// Moves the machine's bytes until it asks for more than bytes.
    fn drive(&mut self) -> Result<Step, Iperf3Error> {
        loop {
            while let Some(action) = self.machine.poll_action() {
                match action {
                    ClientAction::Transmit(bytes) => {
                        let result = io::Write::write_all(&mut self.control, &bytes);
                        self.io("sending to the server", result)?;
                    }
                    ClientAction::CreateStreams => return Ok(Step::CreateStreams),
                    ClientAction::Running => return Ok(Step::Running),
                    ClientAction::Done(theirs) => return Ok(Step::Done(theirs)),
                    ClientAction::Failed(failure) => return Err(self.failure(failure)),
                }
            }
            let input = shell::read_by(&self.control, &mut self.buf, self.machine.poll_timeout());
            match self.io("reading from the server", input)? {
                Input::Bytes(n, now) => self.machine.handle_input(now, &self.buf[..n]),
                Input::Eof(now) => self.machine.handle_eof(now),
                Input::Timeout(now) => self.machine.handle_timeout(now),
            }
        }
    }
}

/// tcplab's test parameters as iperf3's. iperf3 has one buffer size for both ends and
/// a byte count over all streams; what it cannot express is refused by name.
pub fn to_iperf3(params: &TestParams) -> Result<Params, Iperf3Error> {
    let unsupported = |what: &str| Err(Iperf3Error::Unsupported(what.to_string()));
    let tuning = &params.tuning;
    if params.mode == Mode::Bidir {
        return unsupported("--bidir is not supported; use -R or the default direction");
    }
    if params.probe.is_some() {
        return unsupported("--probe needs a tcplab server, which echoes the probes");
    }
    if params.transactions.is_some() {
        return unsupported("--rr needs a tcplab server, which answers the requests");
    }
    if tuning.sndbuf != tuning.rcvbuf {
        return unsupported(
            "iperf3 sets one buffer size on both ends (-w), not --sndbuf/--rcvbuf apart",
        );
    }
    let (time, num) = match params.end {
        TestEnd::Duration { us } if us % 1_000_000 == 0 => ((us / 1_000_000) as u32, 0),
        TestEnd::Duration { .. } => return unsupported("iperf3 takes whole seconds for -t"),
        TestEnd::Bytes { .. } if params.mode == Mode::Down => {
            return unsupported("-n with -R: iperf3's client could not tell when to stop")
        }
        TestEnd::Bytes { bytes } => (0, bytes * u64::from(params.streams)),
    };
    Ok(Params {
        tcp: params.udp.is_none(),
        udp: params.udp.is_some(),
        time,
        num,
        mss: tuning.mss,
        nodelay: tuning.nodelay,
        parallel: u32::from(params.streams),
        reverse: params.mode == Mode::Down,
        window: tuning.sndbuf,
        len: params.udp.map_or(tuning.write_size, |u| u.datagram_size),
        bandwidth: params.udp.map_or(tuning.app_rate, |u| Some(u.rate_bps)),
        burst: params.udp.map(|u| u.burst).filter(|&b| b > 1),
        fqrate: tuning.pacing_rate,
        congestion: tuning.cc.clone(),
        zerocopy: tuning.send_method == tcplab_record::SendMethod::Sendfile,
        pacing_timer: Some(1000),
        client_version: Some(format!("tcplab {}", env!("CARGO_PKG_VERSION"))),
        ..Params::default()
    })
}

/// One data connection per stream, tuned for its role before the handshake, each
/// opened with the cookie as iperf3's server expects.
fn open_flows(
    params: &TestParams,
    server: SocketAddr,
    cookie: &Cookie,
) -> io::Result<Vec<FlowSocket>> {
    flow_roles(params)
        .into_iter()
        .map(|(id, direction)| {
            let role = Role::of(Host::Client, direction);
            let socket = setup::tcp_socket(&server)?;
            let buffer = setup::apply(&socket, &params.tuning, role)?;
            socket.connect_timeout(&server.into(), STEP_TIMEOUT)?;
            let mut stream: TcpStream = socket.into();
            io::Write::write_all(&mut stream, cookie)?;
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

/// One UDP socket per stream, connected to the server's port and announced with
/// iperf3's connect datagram, which the server answers before it opens the next one.
fn open_udp_flows(params: &TestParams, server: SocketAddr) -> io::Result<Vec<UdpFlow>> {
    flow_roles(params)
        .into_iter()
        .map(|(id, direction)| {
            let role = Role::of(Host::Client, direction);
            let any: IpAddr = if server.is_ipv6() {
                Ipv6Addr::UNSPECIFIED.into()
            } else {
                Ipv4Addr::UNSPECIFIED.into()
            };
            let socket = UdpSocket::bind(SocketAddr::new(any, 0))?;
            socket.connect(server)?;
            let buffer = udp::prepare(&socket, role, params)?;
            socket.send(&wire::UDP_CONNECT)?;
            socket.set_read_timeout(Some(STEP_TIMEOUT))?;
            let mut reply = [0u8; 4];
            let n = socket.recv(&mut reply)?;
            if !wire::is_udp_connect_reply(&reply[..n]) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("UDP connect reply {:02x?}", &reply[..n]),
                ));
            }
            Ok(UdpFlow {
                id,
                role,
                socket,
                buffer,
            })
        })
        .collect()
}

/// Duplicates of the data sockets' descriptors.
fn data_fds(flows: &Flows) -> io::Result<Vec<OwnedFd>> {
    match flows {
        Flows::Tcp(flows) => flows
            .iter()
            .map(|f| f.stream.as_fd().try_clone_to_owned())
            .collect(),
        Flows::Udp(flows) => flows
            .iter()
            .map(|f| f.socket.as_fd().try_clone_to_owned())
            .collect(),
    }
}

/// Runs this end's flows to their end. An iperf3 sender never closes its streams, so
/// when we receive, the test ends at its duration: a watcher stops our receivers then
/// (and on `stop`), as iperf3's own client does.
fn run_flows(
    flows: Flows,
    context: &TestContext,
    stop: &Arc<AtomicBool>,
    request: &Request,
) -> (SideOutcome, Vec<Vec<crate::protocol::SideInterval>>) {
    let flows_stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let deadline_us = match (context.params.mode, context.params.end) {
        (Mode::Down, TestEnd::Duration { us }) => Some(context.t0_us + us as i64),
        _ => None,
    };
    let watcher = {
        let (flows_stop, finished, stop) = (flows_stop.clone(), finished.clone(), stop.clone());
        thread::spawn(move || {
            while !finished.load(Ordering::Relaxed) {
                if stop.load(Ordering::Relaxed) || deadline_us.is_some_and(|d| monotonic_us() >= d)
                {
                    flows_stop.store(true, Ordering::Relaxed);
                    return;
                }
                thread::sleep(WATCH_EVERY);
            }
        })
    };
    let (tx, rx) = mpsc::channel();
    let end = End {
        host: Host::Client,
        t0_us: context.t0_us,
        peer_t0_us: context.t0_us,
        peer_offset_ns: 0,
        pacing: request.pacing.clone(),
        // iperf3 fails its test on a reset; it ends the test itself.
        reset_cut_drains: false,
    };
    let outcome = flows.run(&context.params, end, tx, flows_stop);
    finished.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    (outcome, rx.into_iter().collect())
}

/// iperf3 numbers streams 1, 3, 4, 5, … (its `iperf_add_stream`); ours count from 0.
fn iperf3_stream_id(flow: u32) -> u32 {
    if flow == 0 {
        1
    } else {
        flow + 2
    }
}

/// Our end's results as iperf3's `send_results` writes them; `sending` when this end
/// sent the data.
pub(super) fn our_results(local: &SideOutcome, sending: bool, udp: bool) -> Results {
    // iperf3's TCP sender knows its retransmits (1), its UDP sender has none (0).
    let tcp_sending = sending && !udp;
    let cpu = local.report.cpu;
    Results {
        cpu_util_total: cpu.total_pct,
        cpu_util_user: cpu.user_pct,
        cpu_util_system: cpu.system_pct,
        sender_has_retransmits: sending.then_some(u64::from(tcp_sending)),
        congestion_used: local.report.flows.first().map(|f| f.cc.clone()),
        streams: local
            .report
            .flows
            .iter()
            .map(|f| StreamResult {
                id: iperf3_stream_id(f.id),
                bytes: f.bytes,
                retransmits: tcp_sending.then_some(f.retransmits),
                // A receiver reports, as iperf3's does, the datagrams up to the highest
                // number seen and the gaps below it; its peer prints their ratio as loss.
                packets: f
                    .udp
                    .map_or(0, |u| if sending { u.sent } else { u.received + u.lost })
                    as i64,
                errors: f.udp.filter(|_| !sending).map_or(0, |u| u.lost) as i64,
                jitter: f.udp.map_or(0.0, |u| u.jitter_us / 1e6),
                start_time: 0.0,
                end_time: (f.end_us - f.start_us).max(0) as f64 / 1e6,
            })
            .collect(),
    }
}

/// The server's side of each flow as iperf3 reported it, on our time base: its times
/// count from its TEST_START, which we take as our t0 (they are one round trip apart).
fn server_report(
    theirs: &Results,
    ours: &SideReport,
    context: &TestContext,
) -> Result<SideReport, String> {
    let flows = ours
        .flows
        .iter()
        .map(|mine| {
            let id = iperf3_stream_id(mine.id);
            let stream = theirs
                .streams
                .iter()
                .find(|s| s.id == id)
                .ok_or_else(|| format!("its results lack stream {id}"))?;
            let at = |seconds: f64| context.t0_us + (seconds * 1e6) as i64;
            Ok(SideFlow {
                id: mine.id,
                role: match mine.role {
                    Role::Send => Role::Receive,
                    Role::Receive => Role::Send,
                },
                local_addr: mine.peer_addr.clone(),
                peer_addr: mine.local_addr.clone(),
                cc: theirs.congestion_used.clone().unwrap_or_default(),
                mss: 0,
                buffer: BufferSize {
                    requested: context.params.tuning.sndbuf,
                    ..BufferSize::default()
                },
                bytes: stream.bytes,
                start_us: at(stream.start_time),
                end_us: at(stream.end_time),
                retransmits: stream.retransmits.unwrap_or(0),
                samples: 0,
                limits: Default::default(),
                kernel_limits: Default::default(),
                rtt: Default::default(),
                error: None,
                udp: mine.udp.map(|_| their_udp(stream, mine.role)),
                // iperf3 reports its totals only.
                at_deadline: None,
                unacked: 0,
                transactions: Vec::new(),
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(SideReport {
        flows,
        cpu: CpuUse {
            user_pct: theirs.cpu_util_user,
            system_pct: theirs.cpu_util_system,
            total_pct: theirs.cpu_util_total,
        },
    })
}

/// A UDP stream as iperf3 reported it: the sender's datagram count, or the receiver's
/// arrivals (the highest number seen less the gaps) and jitter.
fn their_udp(stream: &StreamResult, our_role: Role) -> UdpStats {
    let packets = stream.packets.max(0) as u64;
    match our_role {
        Role::Receive => UdpStats {
            sent: packets,
            ..UdpStats::default()
        },
        Role::Send => UdpStats {
            received: packets.saturating_sub(stream.errors.max(0) as u64),
            jitter_us: stream.jitter * 1e6,
            ..UdpStats::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_record::{Tuning, UdpParams};

    /// `tcplab run -t 1 -P 2 -w 256K -l 64K -C cubic`.
    fn like_iperf3_example() -> TestParams {
        TestParams {
            streams: 2,
            end: TestEnd::Duration { us: 1_000_000 },
            tuning: Tuning {
                sndbuf: Some(256 << 10),
                rcvbuf: Some(256 << 10),
                write_size: 64 << 10,
                cc: Some("cubic".into()),
                ..Tuning::default()
            },
            ..TestParams::default()
        }
    }

    #[test]
    fn parameters_are_what_iperf3s_own_client_sends() {
        // iperf3 3.12's `send_parameters` for `iperf3 -c … -t 1 -P 2 -w 256K -l 64K -C cubic`.
        let real: serde_json::Value = serde_json::from_str(
            r#"{"tcp": true, "omit": 0, "time": 1, "num": 0, "blockcount": 0, "parallel": 2,
                "window": 262144, "len": 65536, "pacing_timer": 1000, "congestion": "cubic"}"#,
        )
        .unwrap();
        let mut ours = serde_json::to_value(to_iperf3(&like_iperf3_example()).unwrap()).unwrap();
        ours.as_object_mut().unwrap().remove("client_version");
        assert_eq!(ours, real);
    }

    #[test]
    fn reverse_and_byte_counts_map_to_iperf3s_meaning() {
        let mut params = like_iperf3_example();
        params.mode = Mode::Down;
        assert!(to_iperf3(&params).unwrap().reverse);
        params.mode = Mode::Up;
        params.end = TestEnd::Bytes { bytes: 1000 };
        // iperf3's -n counts all streams together; tcplab's counts each.
        assert_eq!(to_iperf3(&params).unwrap().num, 2000);
    }

    #[test]
    fn udp_maps_to_iperf3s_rate_length_and_burst() {
        let mut params = like_iperf3_example();
        params.udp = Some(UdpParams {
            rate_bps: 100_000_000,
            datagram_size: 1400,
            burst: 4,
            header: UdpHeaderFormat::Iperf3,
        });
        let udp = to_iperf3(&params).unwrap();
        assert!(udp.udp && !udp.tcp);
        assert_eq!(
            (udp.bandwidth, udp.len, udp.burst),
            (Some(100_000_000), 1400, Some(4))
        );
    }

    #[test]
    fn what_iperf3_cannot_express_is_refused_by_name() {
        let refused = |change: &dyn Fn(&mut TestParams), word: &str| {
            let mut params = like_iperf3_example();
            change(&mut params);
            let err = to_iperf3(&params).unwrap_err().to_string();
            assert!(err.starts_with("--iperf3: ") && err.contains(word), "{err}");
        };
        refused(&|p| p.tuning.rcvbuf = None, "--sndbuf/--rcvbuf");
        refused(&|p| p.mode = Mode::Bidir, "--bidir");
        refused(
            &|p| {
                p.probe = Some(tcplab_record::ProbeParams {
                    interval_us: 10_000,
                    idle_us: 0,
                })
            },
            "--probe",
        );
        refused(
            &|p| {
                p.transactions = Some(tcplab_record::TransactionParams {
                    request_size: 100,
                    response_size: 100,
                    request_writes: 2,
                    new_connection: false,
                })
            },
            "--rr",
        );
        refused(
            &|p| p.end = TestEnd::Duration { us: 1_500_000 },
            "whole seconds",
        );
        refused(
            &|p| {
                p.mode = Mode::Down;
                p.end = TestEnd::Bytes { bytes: 1 }
            },
            "-n with -R",
        );
    }

    #[test]
    fn stream_ids_follow_iperf3s_numbering() {
        let ids: Vec<u32> = (0..4).map(iperf3_stream_id).collect();
        assert_eq!(ids, [1, 3, 4, 5]);
    }
}
