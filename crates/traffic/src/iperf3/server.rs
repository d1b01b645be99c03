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
use tcplab_model::udp::{MAX_DATAGRAM, MIN_DATAGRAM};
use tcplab_record::units::count;
use tcplab_record::{Host, Mode, TestEnd, TestParams, Tuning, UdpHeaderFormat, UdpParams};
use tcplab_sys::clock::monotonic_us;
use tcplab_sys::localnet::Neighbourhood;

use super::client::our_results;
use super::wire::{self, Cookie, Params, Results, State, COOKIE_LEN};
use crate::engine::{End, FlowSocket, Flows};
use crate::protocol::Role;
use crate::udp::{self, UdpFlow};
use crate::{flow_roles, setup};

/// How long each step of the handshake and of the results exchange may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
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

/// One test; errors are one line naming the step.
fn serve_one(listener: &TcpListener, mut control: TcpStream) -> Result<String, String> {
    control
        .set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(step("control connection"))?;
    control
        .set_nodelay(true)
        .map_err(step("control connection"))?;
    let mut cookie: Cookie = [0; COOKIE_LEN];
    control
        .read_exact(&mut cookie)
        .map_err(step("reading the cookie (not an iperf3 client?)"))?;
    wire::write_state(&mut control, State::ParamExchange).map_err(step("PARAM_EXCHANGE"))?;
    let asked: Params = wire::read_json(&mut control).map_err(step("reading the parameters"))?;
    // A test we cannot serve is closed: iperf3's client then says the control socket
    // closed unexpectedly, and our log says why (iperf3's error codes have no
    // "unsupported" for these).
    let params = from_iperf3(&asked)?;
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
    wire::write_state(&mut control, State::CreateStreams).map_err(step("CREATE_STREAMS"))?;
    let flows = match udp_listening {
        Some((first, local)) => accept_udp_flows(first, local, &params).map(Flows::Udp),
        None => accept_flows(listener, &cookie, &params).map(Flows::Tcp),
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
    wire::write_state(&mut control, State::TestStart).map_err(step("TEST_START"))?;
    wire::write_state(&mut control, State::TestRunning).map_err(step("TEST_RUNNING"))?;

    // The client ends the test with TEST_END: its streams stay open until then. Reads
    // are shut down at once, so a receiver waiting for data ends its window on time.
    let flows_stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let mut reader = control.try_clone().map_err(step("control connection"))?;
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
    control
        .set_read_timeout(Some(STEP_TIMEOUT))
        .map_err(step("control connection"))?;
    match state.map(State::from_byte) {
        Ok(Some(State::TestEnd)) => {}
        Ok(other) => return Err(format!("{other:?} where TEST_END was due")),
        Err(e) => return Err(format!("waiting for TEST_END: {e}")),
    }
    wire::write_state(&mut control, State::ExchangeResults).map_err(step("EXCHANGE_RESULTS"))?;
    let theirs: Results =
        wire::read_json(&mut control).map_err(step("reading the client's results"))?;
    let sending = params.mode == Mode::Down;
    wire::write_json(
        &mut control,
        &our_results(&local, sending, params.udp.is_some()),
    )
    .map_err(step("sending our results"))?;
    wire::write_state(&mut control, State::DisplayResults).map_err(step("DISPLAY_RESULTS"))?;
    // IPERF_DONE, or the client just closing: either ends the test.
    let _ = wire::read_state(&mut control);

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

/// An iperf3 client's parameters as tcplab's. What we cannot serve is refused by name.
fn from_iperf3(asked: &Params) -> Result<TestParams, String> {
    let udp = asked.udp.then(|| udp_from_iperf3(asked)).transpose()?;
    if asked.bidirectional {
        return Err("--bidir is not served with --iperf3".into());
    }
    let streams = u16::try_from(asked.parallel.max(1)).map_err(|_| "too many streams")?;
    let end = match (asked.time, asked.num) {
        // iperf3's client stops the test with TEST_END; the margin keeps our senders
        // writing until it does.
        (0, 0) => return Err("-k (block count) is not served with --iperf3".into()),
        (0, bytes) => TestEnd::Bytes {
            bytes: bytes.div_ceil(u64::from(streams)),
        },
        (seconds, _) => TestEnd::Duration {
            us: (u64::from(seconds) + 1) * 1_000_000,
        },
    };
    Ok(TestParams {
        streams,
        end,
        mode: if asked.reverse { Mode::Down } else { Mode::Up },
        tuning: Tuning {
            sndbuf: asked.window,
            rcvbuf: asked.window,
            write_size: asked.len,
            read_size: asked.len,
            nodelay: asked.nodelay,
            mss: asked.mss,
            cc: asked.congestion.clone(),
            pacing_rate: asked.fqrate,
            app_rate: asked.bandwidth.filter(|&b| b > 0 && udp.is_none()),
            ..Tuning::default()
        },
        udp,
        ..TestParams::default()
    })
}

/// A UDP test's rate (`-b`; 0 or none: as fast as we can), datagram size (`-l`) and
/// burst, with iperf3's datagram header.
fn udp_from_iperf3(asked: &Params) -> Result<UdpParams, String> {
    if asked.udp_counters_64bit {
        return Err("--udp-counters-64bit is not served with --iperf3".into());
    }
    if !(MIN_DATAGRAM..=MAX_DATAGRAM).contains(&asked.len) {
        return Err(format!(
            "-l {} is not a datagram size tcplab sends ({MIN_DATAGRAM}..={MAX_DATAGRAM} bytes)",
            asked.len
        ));
    }
    Ok(UdpParams {
        rate_bps: asked.bandwidth.unwrap_or(0),
        datagram_size: asked.len,
        burst: asked.burst.unwrap_or(1).max(1),
        header: UdpHeaderFormat::Iperf3,
    })
}

/// The client's data connections on the control port, each opened with the cookie and
/// tuned for our role in it.
fn accept_flows(
    listener: &TcpListener,
    cookie: &Cookie,
    params: &TestParams,
) -> io::Result<Vec<FlowSocket>> {
    flow_roles(params)
        .into_iter()
        .map(|(id, direction)| {
            let (mut stream, _) = listener.accept()?;
            stream.set_read_timeout(Some(STEP_TIMEOUT))?;
            let mut theirs: Cookie = [0; COOKIE_LEN];
            stream.read_exact(&mut theirs)?;
            if &theirs != cookie {
                // Another client's control connection: iperf3 tells it we are busy.
                let _ = wire::write_state(&mut stream, State::AccessDenied);
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
                                let _ = wire::write_state(&mut other, State::AccessDenied);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_iperf3_clients_parameters_become_a_test() {
        // iperf3 3.12's `send_parameters` for `iperf3 -c … -t 1 -P 2 -w 256K -l 64K -C cubic -R`.
        let asked: Params = serde_json::from_str(
            r#"{"tcp": true, "omit": 0, "time": 1, "num": 0, "blockcount": 0, "parallel": 2,
                "reverse": true, "window": 262144, "len": 65536, "pacing_timer": 1000,
                "congestion": "cubic", "client_version": "3.12"}"#,
        )
        .unwrap();
        let params = from_iperf3(&asked).unwrap();
        assert_eq!(params.streams, 2);
        assert_eq!(params.mode, Mode::Down);
        assert_eq!(params.tuning.sndbuf, Some(262_144));
        assert_eq!(params.tuning.rcvbuf, Some(262_144));
        assert_eq!(params.tuning.write_size, 65_536);
        assert_eq!(params.tuning.cc.as_deref(), Some("cubic"));
        // Our senders outlast the client's timer: its TEST_END ends the test.
        assert_eq!(params.end, TestEnd::Duration { us: 2_000_000 });
    }

    #[test]
    fn a_udp_clients_rate_size_and_burst_become_ours() {
        // iperf3 3.12's `send_parameters` for `iperf3 -c … -u -b 50M -l 1400 -t 2 -R`.
        let asked: Params = serde_json::from_str(
            r#"{"udp": true, "omit": 0, "time": 2, "num": 0, "blockcount": 0, "parallel": 1,
                "reverse": true, "len": 1400, "bandwidth": 50000000, "pacing_timer": 1000,
                "client_version": "3.12"}"#,
        )
        .unwrap();
        let params = from_iperf3(&asked).unwrap();
        assert_eq!(params.mode, Mode::Down);
        assert_eq!(
            params.udp,
            Some(UdpParams {
                rate_bps: 50_000_000,
                datagram_size: 1400,
                burst: 1,
                header: UdpHeaderFormat::Iperf3,
            })
        );
        // -b paces UDP datagrams, not TCP writes.
        assert_eq!(params.tuning.app_rate, None);
    }

    #[test]
    fn what_we_do_not_serve_is_named() {
        let wide = Params {
            udp: true,
            udp_counters_64bit: true,
            parallel: 1,
            time: 1,
            len: 1400,
            ..Params::default()
        };
        assert!(from_iperf3(&wide)
            .unwrap_err()
            .contains("--udp-counters-64bit"));
        let tiny = Params {
            udp: true,
            parallel: 1,
            time: 1,
            len: 4,
            ..Params::default()
        };
        assert!(from_iperf3(&tiny).unwrap_err().contains("-l 4"));
        let blocks = Params {
            tcp: true,
            parallel: 1,
            blockcount: 10,
            ..Params::default()
        };
        assert!(from_iperf3(&blocks).unwrap_err().contains("-k"));
    }
}
