//! Both ends of each handshake wired together in memory, in virtual time, as quinn's
//! tests drive a `Pair`: no sockets, no clock, no root.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use tcplab_record::{ClockOffset, HostMeta, Mode, ProbeParams, TestEnd, TestParams, UdpParams};

use super::iperf3;
use super::tcplab::{
    Accepted, Client, ClientAction, ClientConfig, ClientError, DataIntro, Listening, Server,
    ServerAction, ServerConfig, HELLO_TIMEOUT, SERVER_SILENCE, STEP_LATE, TIME_PROBES,
    UDP_HELLO_EVERY,
};
use super::Micros;
use crate::auth::PreSharedKey;
use crate::iperf3::wire::{self, Params, Results, State, StreamResult};
use crate::limits::{Admission, ServerLimits, Source};
use crate::protocol::{
    self, Message, ProtocolError, Rejected, CONTROL_HELLO_LEN, COOKIE_LEN, VERSION,
};

const MS: Micros = 1_000;
const S: Micros = 1_000_000;
const COOKIE: [u8; COOKIE_LEN] = [0xc0; COOKIE_LEN];
const BOOT: &str = "boot-a";

fn key(byte: u8) -> PreSharedKey {
    PreSharedKey::new(vec![byte; 32]).unwrap()
}

fn params() -> TestParams {
    TestParams {
        end: TestEnd::Duration { us: 2 * S as u64 },
        ..TestParams::default()
    }
}

fn client_config(params: TestParams, key: Option<PreSharedKey>, boot_id: &str) -> ClientConfig {
    ClientConfig {
        params,
        key,
        nonce: [0x11; 32],
        boot_id: boot_id.into(),
        time_probes: TIME_PROBES,
        deflated_samples: true,
    }
}

fn server_config(key: Option<PreSharedKey>) -> ServerConfig {
    ServerConfig {
        key,
        refusal: None,
        limits: ServerLimits::default(),
        boot_id: BOOT.into(),
        congestion: Some(vec!["cubic".into(), "reno".into()]),
        nonce: [0x22; 32],
    }
}

/// What travels in the pair's network.
#[derive(Debug)]
enum Packet {
    ToServer(Vec<u8>),
    ToClient(Vec<u8>),
    /// A data connection's introduction.
    Intro(Vec<u8>),
    /// A UDP datagram to the server's port of this index.
    Datagram(u32, Vec<u8>),
    ServerEof,
}

/// The messages one direction carried, as read off the wire after its hello.
#[derive(Default)]
struct Tap {
    hello: usize,
    buf: Vec<u8>,
    messages: Vec<(Micros, Message)>,
}

impl Tap {
    fn feed(&mut self, now: Micros, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        if self.hello > 0 {
            let n = self.hello.min(self.buf.len());
            self.buf.drain(..n);
            self.hello -= n;
        }
        while let Ok(Some(message)) = protocol::take_frame(&mut self.buf, protocol::MAX_MESSAGE) {
            self.messages.push((now, message));
        }
    }

    fn types(&self) -> Vec<String> {
        self.messages
            .iter()
            .map(|(_, m)| {
                let json = serde_json::to_value(m).unwrap();
                json["type"].as_str().unwrap().to_string()
            })
            .collect()
    }
}

/// A tcplab client and server in memory. Each direction's bytes take `one_way` µs; the
/// server's clock reads `server_offset` µs more than the client's.
struct Pair {
    now: Micros,
    one_way: Micros,
    server_offset: Micros,
    client: Client,
    server: Server,
    network: BTreeMap<(Micros, u64), Packet>,
    seq: u64,
    /// What the server's side answers the machine's admission question.
    admission: Admission,
    source: Source,
    /// The client opens its flows (and says Go at Ready).
    open_flows: bool,
    go: bool,
    /// Each flow's introduction, when not the right one.
    intros: Option<Vec<Vec<u8>>>,
    up: Tap,
    down: Tap,
    client_failed: Option<ClientError>,
    client_accepted: Option<Accepted>,
    client_ready_at: Option<Micros>,
    udp_hellos: Vec<Micros>,
    server_closed: Option<(Micros, Rejected)>,
    server_go: Option<(Micros, Micros)>,
    flows_in: Vec<DataIntro>,
    spoke: bool,
    _slots: Vec<crate::limits::Slot>,
}

impl Pair {
    fn new(client: ClientConfig, server: ServerConfig) -> Pair {
        Pair::with_offset(client, server, 0)
    }

    /// The server's clock reads `offset` µs more than the client's.
    fn with_offset(client: ClientConfig, server: ServerConfig, offset: Micros) -> Pair {
        let admission = Admission::new(&server.limits);
        Pair {
            now: 0,
            one_way: 5 * MS,
            server_offset: offset,
            client: Client::new(client, 0),
            server: Server::new(server, offset),
            network: BTreeMap::new(),
            seq: 0,
            admission,
            source: Source::of(IpAddr::from([10, 0, 0, 1])),
            open_flows: true,
            go: true,
            intros: None,
            up: Tap {
                hello: CONTROL_HELLO_LEN,
                ..Tap::default()
            },
            down: Tap {
                hello: 8,
                ..Tap::default()
            },
            client_failed: None,
            client_accepted: None,
            client_ready_at: None,
            udp_hellos: Vec::new(),
            server_closed: None,
            server_go: None,
            flows_in: Vec::new(),
            spoke: false,
            _slots: Vec::new(),
        }
    }

    fn of(params: TestParams) -> Pair {
        Pair::new(client_config(params, None, BOOT), server_config(None))
    }

    fn send(&mut self, delay: Micros, packet: Packet) {
        self.seq += 1;
        self.network.insert((self.now + delay, self.seq), packet);
    }

    fn server_now(&self) -> Micros {
        self.now + self.server_offset
    }

    /// Carries out what both machines asked for until neither wants anything more.
    fn actions(&mut self) {
        loop {
            let mut moved = false;
            while let Some(action) = self.client.poll_action() {
                moved = true;
                match action {
                    ClientAction::Transmit(bytes) => {
                        self.up.feed(self.now, &bytes);
                        self.send(self.one_way, Packet::ToServer(bytes));
                    }
                    ClientAction::Accepted(accepted) => {
                        if self.open_flows && accepted.udp_ports.is_empty() {
                            let n = crate::flow_roles(&self.client_params()).len();
                            let intros = self.intros.clone().unwrap_or_else(|| {
                                (0..n as u32)
                                    .map(|id| protocol::data_intro(&accepted.cookie, id).to_vec())
                                    .collect()
                            });
                            for intro in intros {
                                // A SYN, its answer, then the introduction.
                                self.send(3 * self.one_way, Packet::Intro(intro));
                            }
                        }
                        self.client_accepted = Some(accepted);
                    }
                    ClientAction::SayUdpHellos => {
                        self.udp_hellos.push(self.now);
                        if self.open_flows {
                            let cookie = self.client_accepted.as_ref().unwrap().cookie;
                            let n = self.client_accepted.as_ref().unwrap().udp_ports.len();
                            for id in 0..n as u32 {
                                let hello = protocol::udp_hello(&cookie, id);
                                self.send(self.one_way, Packet::Datagram(id, hello));
                            }
                        }
                    }
                    ClientAction::Ready => {
                        self.client_ready_at = Some(self.now);
                        if self.go {
                            self.client.go(self.now);
                        }
                    }
                    ClientAction::Failed(e) => self.client_failed = Some(e),
                }
            }
            while let Some(action) = self.server.poll_action() {
                moved = true;
                let now = self.server_now();
                match action {
                    ServerAction::Transmit(bytes) => {
                        self.down.feed(self.now, &bytes);
                        self.send(self.one_way, Packet::ToClient(bytes));
                    }
                    ServerAction::Spoke => self.spoke = true,
                    ServerAction::Admit(start) => {
                        let room = self.admission.start_test(self.source);
                        let admitted = room.is_ok();
                        self.server
                            .admitted(now, room.map(|slot| self._slots.push(slot)));
                        if admitted {
                            let udp_ports = match start.params.udp {
                                Some(_) => (0..crate::flow_roles(&start.params).len())
                                    .map(|k| 6000 + k as u16)
                                    .collect(),
                                None => Vec::new(),
                            };
                            let listening = Listening {
                                data_port: if udp_ports.is_empty() { 5300 } else { 0 },
                                udp_ports,
                                probe_port: start.params.probe.map(|_| 5400),
                                meta: HostMeta {
                                    hostname: "server".into(),
                                    ..HostMeta::default()
                                },
                                cookie: COOKIE,
                            };
                            self.server.listening(now, listening);
                        }
                    }
                    ServerAction::Go { client_t0_us } => {
                        self.server_go = Some((self.now, client_t0_us))
                    }
                    ServerAction::Close(rejected) => {
                        self.server_closed = Some((self.now, rejected));
                        self.send(self.one_way, Packet::ServerEof);
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn client_params(&self) -> TestParams {
        // The machine's own copy is private: the pair's tests ask with `params()` or
        // their own, which the server's Start holds.
        self.server
            .start()
            .map(|s| s.asked.clone())
            .unwrap_or_default()
    }

    /// Runs until nothing is in flight and no deadline is due before `until`.
    fn run_until(&mut self, until: Micros) {
        self.actions();
        loop {
            let next_packet = self.network.keys().next().map(|k| k.0);
            let next_timer = [
                self.client.poll_timeout(),
                self.server.poll_timeout().map(|t| t - self.server_offset),
            ]
            .into_iter()
            .flatten()
            .min();
            let next = match (next_packet, next_timer) {
                (Some(p), Some(t)) => p.min(t),
                (p, t) => match p.or(t) {
                    Some(n) => n,
                    None => return,
                },
            };
            if next > until {
                return;
            }
            self.now = self.now.max(next);
            if next_packet == Some(next) {
                let (_, packet) = self.network.pop_first().unwrap();
                let server_now = self.server_now();
                match packet {
                    Packet::ToServer(bytes) => self.server.handle_input(server_now, &bytes),
                    Packet::ToClient(bytes) => self.client.handle_input(self.now, &bytes),
                    Packet::Intro(intro) => {
                        let got = self.server.data_intro(server_now, &intro);
                        self.flows_in.push(got);
                    }
                    Packet::Datagram(port, bytes) => {
                        if self.server.udp_datagram(server_now, port, &bytes) {
                            self.flows_in.push(DataIntro::Flow(port));
                        }
                    }
                    Packet::ServerEof => self.client.handle_eof(self.now),
                }
            } else {
                self.client.handle_timeout(self.now);
                let server_now = self.server_now();
                self.server.handle_timeout(server_now);
            }
            self.actions();
        }
    }

    fn run(&mut self) {
        self.run_until(Micros::MAX);
    }

    fn refusal(&self) -> &str {
        match &self.server_closed {
            Some((_, Rejected::Refused(reason))) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn client_refused(&self) -> &str {
        match &self.client_failed {
            Some(ClientError::Refused(reason)) => reason,
            other => panic!("expected the client refused, got {other:?}"),
        }
    }
}

// ----------------------------------------------------------------------------------
// tcplab: handshakes that succeed
// ----------------------------------------------------------------------------------

#[test]
fn a_handshake_without_a_key_runs_to_go_on_one_clock() {
    let mut pair = Pair::of(params());
    pair.run();
    assert!(pair.client_failed.is_none(), "{:?}", pair.client_failed);
    assert!(pair.server_closed.is_none());
    assert!(pair.spoke);
    // One clock: the Welcome's exchange is the only one.
    assert_eq!(pair.up.types(), ["auth", "start", "go"]);
    assert_eq!(
        pair.down.types(),
        ["challenge", "welcome", "accepted", "ready"]
    );
    // hello+challenge arrive at 5 ms, Auth at 10, Welcome at 15, Start at 20, Accepted
    // at 25; the data connections at 25 + 15; Ready at 45; Go leaves at 45, arrives at 50.
    assert_eq!(pair.client_ready_at, Some(45 * MS));
    assert_eq!(pair.server_go, Some((50 * MS, 45 * MS)));
    assert_eq!(pair.flows_in, [DataIntro::Flow(0)]);
    let accepted = pair.client_accepted.unwrap();
    assert_eq!(accepted.data_port, 5300);
    assert_eq!(accepted.cookie, COOKIE);
    assert_eq!(
        accepted.offset,
        ClockOffset {
            offset_us: 0,
            uncertainty_us: 5 * MS,
        }
    );
    assert!(pair.client.is_done() && pair.server.is_done());
    assert_eq!(pair.client.poll_timeout(), None);
    assert_eq!(pair.server.poll_timeout(), None);
}

#[test]
fn a_handshake_with_the_right_key_is_proved_both_ways() {
    let mut pair = Pair::new(
        client_config(params(), Some(key(7)), BOOT),
        server_config(Some(key(7))),
    );
    pair.run();
    assert!(pair.client_failed.is_none(), "{:?}", pair.client_failed);
    assert!(pair.server_go.is_some());
    let (_, auth) = &pair.up.messages[0];
    let Message::Auth { nonce, proof } = auth else {
        panic!("{auth:?}")
    };
    assert_eq!(nonce, &protocol::to_hex(&[0x11; 32]));
    assert_eq!(
        proof.as_deref(),
        Some(&*protocol::to_hex(
            &key(7).client_proof(&[0x22; 32], &[0x11; 32])
        ))
    );
    let (_, welcome) = &pair.down.messages[1];
    let Message::Welcome { proof, clock } = welcome else {
        panic!("{welcome:?}")
    };
    assert_eq!(
        proof.as_deref(),
        Some(&*protocol::to_hex(
            &key(7).server_proof(&[0x22; 32], &[0x11; 32])
        ))
    );
    let clock = clock.as_ref().unwrap();
    assert_eq!((clock.recv_us, clock.send_us), (10 * MS, 10 * MS));
    assert_eq!(clock.boot_id, BOOT);
}

#[test]
fn on_another_clock_eight_probes_set_the_offset() {
    let mut pair = Pair::with_offset(
        client_config(params(), None, "boot-b"),
        server_config(None),
        1_000 * S,
    );
    pair.run();
    assert!(pair.client_failed.is_none(), "{:?}", pair.client_failed);
    let types = pair.up.types();
    assert_eq!(
        types.iter().filter(|t| *t == "time_probe").count(),
        TIME_PROBES
    );
    assert_eq!(types.first().map(String::as_str), Some("auth"));
    assert_eq!(&types[types.len() - 2..], ["start", "go"]);
    let accepted = pair.client_accepted.unwrap();
    assert_eq!(
        accepted.offset,
        ClockOffset {
            offset_us: 1_000 * S,
            uncertainty_us: 5 * MS,
        }
    );
    // The Start tells the server the offset and the client's boot.
    let start = pair.server.start().unwrap();
    assert_eq!(start.clock.offset, accepted.offset);
    assert_eq!(start.clock.boot_id, "boot-b");
    // Auth left at 5 ms and Welcome came back at 15; then each probe is a round trip
    // of 10 ms: Start leaves at 95 ms.
    assert_eq!(pair.up.messages[TIME_PROBES + 1].0, 15 * MS + 8 * 10 * MS);
}

#[test]
fn the_fastest_probe_sets_the_offset_on_an_asymmetric_path() {
    let mut pair = Pair::with_offset(
        client_config(params(), None, "boot-b"),
        server_config(None),
        -250 * MS,
    );
    pair.one_way = 20 * MS;
    pair.run();
    let accepted = pair.client_accepted.expect("accepted");
    assert_eq!(accepted.offset.offset_us, -250 * MS);
    assert_eq!(accepted.offset.uncertainty_us, 20 * MS);
}

#[test]
fn the_same_boot_but_an_offset_beyond_the_round_trip_is_probed() {
    // The server's clock is 1 s off though it names the same boot: not one clock.
    let mut pair = Pair::with_offset(client_config(params(), None, BOOT), server_config(None), S);
    pair.run();
    assert_eq!(
        pair.up
            .types()
            .iter()
            .filter(|t| *t == "time_probe")
            .count(),
        TIME_PROBES
    );
    assert_eq!(pair.client_accepted.unwrap().offset.offset_us, S);
}

#[test]
fn a_udp_test_says_its_hellos_every_50_ms_until_ready() {
    let mut p = params();
    p.streams = 2;
    p.udp = Some(UdpParams {
        rate_bps: 1_000_000,
        datagram_size: 1000,
        burst: 1,
        header: Default::default(),
    });
    let mut pair = Pair::of(p);
    pair.one_way = 40 * MS;
    pair.run();
    assert!(pair.client_failed.is_none(), "{:?}", pair.client_failed);
    let accepted = pair.client_accepted.as_ref().unwrap();
    assert_eq!(accepted.udp_ports, [6000, 6001]);
    assert_eq!(accepted.data_port, 0);
    // Accepted reaches the client at 200 ms; the hellos arrive 40 ms later, Ready 40 ms
    // after that: hellos at 200 and 250 ms.
    assert_eq!(pair.udp_hellos, [200 * MS, 250 * MS]);
    assert_eq!(pair.client_ready_at, Some(280 * MS));
    assert_eq!(pair.flows_in, [DataIntro::Flow(0), DataIntro::Flow(1)]);
}

#[test]
fn a_udp_test_whose_hellos_never_arrive_gives_up_after_10_s() {
    let mut p = params();
    p.udp = Some(UdpParams {
        rate_bps: 1_000_000,
        datagram_size: 1000,
        burst: 1,
        header: Default::default(),
    });
    let mut pair = Pair::of(p);
    pair.open_flows = false;
    pair.run();
    // Accepted at 25 ms: hellos every 50 ms until 10.025 s.
    assert_eq!(pair.udp_hellos.len(), 200);
    assert_eq!(pair.udp_hellos[199], 25 * MS + 199 * 50 * MS);
    // The server gave up at its own deadline, 10 s after Accepted left at 20 ms, and
    // its reason reached the client as its own deadline came.
    assert_eq!(
        pair.client_refused(),
        "client did not open all UDP flows within --handshake-timeout"
    );
    assert_eq!(
        pair.refusal(),
        "client did not open all UDP flows within --handshake-timeout"
    );
    assert_eq!(pair.server_closed.as_ref().unwrap().0, 20 * MS + 10 * S);
}

#[test]
fn a_udp_client_whose_server_never_says_ready_is_silent_after_10_s() {
    let p = TestParams {
        udp: Some(UdpParams {
            rate_bps: 1_000_000,
            datagram_size: 1000,
            burst: 1,
            header: Default::default(),
        }),
        ..params()
    };
    let mut client = Client::new(client_config(p, None, BOOT), 0);
    drive_client_to_start(&mut client);
    let accepted = Message::Accepted {
        data_port: 0,
        cookie: protocol::to_hex(&COOKIE),
        meta: HostMeta::default(),
        udp_ports: vec![6000],
        probe_port: None,
    };
    client.handle_input(2 * MS, &protocol::frame(&accepted).unwrap());
    assert!(matches!(
        client.poll_action(),
        Some(ClientAction::Accepted(_))
    ));
    assert!(matches!(
        client.poll_action(),
        Some(ClientAction::SayUdpHellos)
    ));
    assert_eq!(
        client.poll_timeout(),
        Some(2 * MS + UDP_HELLO_EVERY.as_micros() as Micros)
    );
    // A late wake-up says them once and keeps the 50 ms beat.
    client.handle_timeout(130 * MS);
    assert!(matches!(
        client.poll_action(),
        Some(ClientAction::SayUdpHellos)
    ));
    assert!(client.poll_action().is_none());
    assert_eq!(client.poll_timeout(), Some(152 * MS));
    client.handle_timeout(2 * MS + 10 * S);
    assert!(matches!(
        failure(&mut client),
        ClientError::Silent { waited_s: 10 }
    ));
}

#[test]
fn bidir_takes_one_connection_per_flow_each_way() {
    let mut p = params();
    p.streams = 3;
    p.mode = Mode::Bidir;
    let mut pair = Pair::of(p);
    pair.run();
    assert_eq!(
        pair.flows_in,
        (0..6).map(DataIntro::Flow).collect::<Vec<_>>()
    );
    assert_eq!(pair.server.roles().len(), 6);
    assert!(pair.server_go.is_some());
}

#[test]
fn a_down_test_is_paced_at_the_servers_rate_cap() {
    let mut p = params();
    p.mode = Mode::Down;
    p.streams = 4;
    let mut pair = Pair::of(p);
    pair.run();
    let start = pair.server.start().unwrap();
    assert_eq!(start.rate_cap_bps, Some(1_000_000_000));
    assert_eq!(start.params.tuning.pacing_rate, Some(250_000_000));
    assert_eq!(
        pair.client_accepted.unwrap().meta.rate_cap_bps,
        Some(1_000_000_000)
    );
}

#[test]
fn probes_get_a_port_and_their_idle_time_before_go() {
    let mut p = params();
    p.probe = Some(ProbeParams {
        interval_us: 10_000,
        idle_us: 3 * S as u64,
    });
    let mut pair = Pair::of(p);
    pair.go = false;
    pair.run();
    assert_eq!(
        pair.client_accepted.as_ref().unwrap().probe_port,
        Some(5400)
    );
    // Ready left at 40 ms: Go may come 10 s + the 3 s idle phase later.
    assert_eq!(pair.refusal(), STEP_LATE);
    assert_eq!(pair.server_closed.as_ref().unwrap().0, 40 * MS + 13 * S);
}

#[test]
fn probes_alone_have_no_flows_to_wait_for() {
    let mut p = params();
    p.streams = 0;
    p.probe = Some(ProbeParams {
        interval_us: 2_000,
        idle_us: 0,
    });
    let mut pair = Pair::of(p);
    pair.run();
    assert!(pair.client_failed.is_none(), "{:?}", pair.client_failed);
    assert_eq!(pair.flows_in, []);
    // Ready right behind Accepted, both at 20 ms; Go back at 30.
    assert_eq!(
        pair.down.types(),
        ["challenge", "welcome", "accepted", "ready"]
    );
    assert_eq!(pair.down.messages[3].0, 20 * MS);
    assert_eq!(pair.server_go, Some((30 * MS, 25 * MS)));
}

#[test]
fn without_a_probe_port_the_client_gives_up() {
    let mut client = Client::new(
        client_config(
            TestParams {
                probe: Some(ProbeParams {
                    interval_us: 10_000,
                    idle_us: 0,
                }),
                ..params()
            },
            None,
            BOOT,
        ),
        0,
    );
    drive_client_to_start(&mut client);
    let accepted = Message::Accepted {
        data_port: 1,
        cookie: protocol::to_hex(&COOKIE),
        meta: HostMeta::default(),
        udp_ports: Vec::new(),
        probe_port: None,
    };
    client.handle_input(2 * MS, &protocol::frame(&accepted).unwrap());
    assert_eq!(
        failure(&mut client).to_string(),
        "malformed message: the server gave no port for the test's probes"
    );
}

/// Feeds a client the hello, the Challenge and a same-clock Welcome.
fn drive_client_to_start(client: &mut Client) {
    let mut bytes = b"TCPLABC".to_vec();
    bytes.push(VERSION);
    bytes.extend(
        protocol::frame(&Message::Challenge {
            nonce: "00".repeat(32),
        })
        .unwrap(),
    );
    client.handle_input(0, &bytes);
    let welcome = Message::Welcome {
        proof: None,
        clock: Some(protocol::ServerClock {
            boot_id: BOOT.into(),
            recv_us: 500,
            send_us: 500,
        }),
    };
    client.handle_input(MS, &protocol::frame(&welcome).unwrap());
    while let Some(action) = client.poll_action() {
        assert!(matches!(action, ClientAction::Transmit(_)), "{action:?}");
    }
}

fn failure(client: &mut Client) -> ClientError {
    while let Some(action) = client.poll_action() {
        if let ClientAction::Failed(e) = action {
            return e;
        }
    }
    panic!("the client did not fail")
}

// ----------------------------------------------------------------------------------
// tcplab: keys
// ----------------------------------------------------------------------------------

#[test]
fn a_wrong_client_proof_is_refused_and_the_client_hears_why() {
    let mut pair = Pair::new(
        client_config(params(), Some(key(8)), BOOT),
        server_config(Some(key(7))),
    );
    pair.run();
    assert_eq!(
        pair.refusal(),
        "wrong key: the proof does not match this server's pre-shared key"
    );
    assert_eq!(
        pair.client_refused(),
        "wrong key: the proof does not match this server's pre-shared key"
    );
    assert_eq!(pair.down.types(), ["challenge", "refused"]);
    // Refused the moment Auth arrived, 10 ms in.
    assert_eq!(pair.server_closed.as_ref().unwrap().0, 10 * MS);
}

#[test]
fn a_client_without_the_servers_key_is_told_to_give_it() {
    let mut pair = Pair::new(
        client_config(params(), None, BOOT),
        server_config(Some(key(7))),
    );
    pair.run();
    assert!(pair.client_refused().contains("--key-file FILE"));
    assert!(pair.server.start().is_none());
}

#[test]
fn a_wrong_server_proof_is_not_trusted() {
    let mut client = Client::new(client_config(params(), Some(key(7)), BOOT), 0);
    let mut bytes = b"TCPLABC".to_vec();
    bytes.push(VERSION);
    bytes.extend(
        protocol::frame(&Message::Challenge {
            nonce: protocol::to_hex(&[0x22; 32]),
        })
        .unwrap(),
    );
    client.handle_input(0, &bytes);
    // A server with another key proves that one.
    let welcome = Message::Welcome {
        proof: Some(protocol::to_hex(
            &key(8).server_proof(&[0x22; 32], &[0x11; 32]),
        )),
        clock: None,
    };
    client.handle_input(MS, &protocol::frame(&welcome).unwrap());
    assert!(matches!(
        failure(&mut client),
        ClientError::ServerNotProven(r) if r == "its proof does not match the key"
    ));
}

#[test]
fn a_client_with_a_key_does_not_trust_a_server_without_one() {
    let mut pair = Pair::new(
        client_config(params(), Some(key(7)), BOOT),
        server_config(None),
    );
    pair.run();
    assert!(matches!(
        &pair.client_failed,
        Some(ClientError::ServerNotProven(r)) if r.contains("no key")
    ));
    // The client went no further than Auth.
    assert_eq!(pair.up.types(), ["auth"]);
}

#[test]
fn a_client_proof_replayed_on_another_challenge_is_refused() {
    // A proof recorded against one server nonce…
    let recorded = Message::Auth {
        nonce: protocol::to_hex(&[0x11; 32]),
        proof: Some(protocol::to_hex(
            &key(7).client_proof(&[0x99; 32], &[0x11; 32]),
        )),
    };
    // …played to a server whose nonce is another.
    let mut server = Server::new(server_config(Some(key(7))), 0);
    server.handle_input(MS, &protocol::client_hello());
    server.handle_input(MS, &protocol::frame(&recorded).unwrap());
    assert_eq!(
        closed(&mut server),
        Some("wrong key: the proof does not match this server's pre-shared key".to_string())
    );
}

#[test]
fn a_proof_that_is_not_hex_breaks_the_handshake() {
    let mut server = Server::new(server_config(Some(key(7))), 0);
    server.handle_input(0, &protocol::client_hello());
    let auth = Message::Auth {
        nonce: protocol::to_hex(&[0x11; 32]),
        proof: Some("zz".into()),
    };
    server.handle_input(0, &protocol::frame(&auth).unwrap());
    let rejected = last_close(&mut server);
    assert!(
        matches!(&rejected, Rejected::Broken(ProtocolError::Malformed(m)) if m.contains("expected 32 bytes of hex")),
        "{rejected:?}"
    );
}

/// The server's close, after draining its actions: the refusal's reason, or `None` for
/// a broken connection.
fn closed(server: &mut Server) -> Option<String> {
    match last_close(server) {
        Rejected::Refused(reason) => Some(reason),
        Rejected::Broken(_) => None,
    }
}

fn last_close(server: &mut Server) -> Rejected {
    let mut close = None;
    let mut refused_sent = None;
    while let Some(action) = server.poll_action() {
        match action {
            ServerAction::Close(rejected) => close = Some(rejected),
            ServerAction::Transmit(bytes) => {
                let mut buf = bytes;
                if let Ok(Some(Message::Refused { reason })) =
                    protocol::take_frame(&mut buf, protocol::MAX_MESSAGE)
                {
                    refused_sent = Some(reason);
                }
            }
            _ => {}
        }
    }
    let close = close.expect("the server closed");
    // A refusal is always sent before the close, with the same reason.
    if let Rejected::Refused(reason) = &close {
        assert_eq!(refused_sent.as_ref(), Some(reason));
    }
    close
}

// ----------------------------------------------------------------------------------
// tcplab: hellos, versions, bad and oversized messages
// ----------------------------------------------------------------------------------

#[test]
fn a_client_of_another_version_is_closed_without_a_word() {
    let mut server = Server::new(server_config(None), 0);
    let mut hello = protocol::client_hello();
    hello[7] = VERSION - 1;
    server.handle_input(0, &hello);
    assert!(matches!(
        last_close(&mut server),
        Rejected::Broken(ProtocolError::Version { peer }) if peer == VERSION - 1
    ));
}

#[test]
fn a_server_of_another_version_is_named() {
    let mut client = Client::new(client_config(params(), None, BOOT), 0);
    client.handle_input(0, b"TCPLABC\x07");
    assert_eq!(
        failure(&mut client).to_string(),
        format!("peer speaks tcplab protocol version 7, this is version {VERSION}")
    );
}

#[test]
fn an_http_client_is_named_at_its_first_wrong_byte() {
    let mut server = Server::new(server_config(None), 0);
    server.handle_input(0, b"G");
    assert!(matches!(
        last_close(&mut server),
        Rejected::Broken(ProtocolError::BadMagic(b)) if b == b"G"
    ));
}

#[test]
fn an_iperf3_server_is_named_by_its_one_state_byte() {
    let mut client = Client::new(client_config(params(), None, BOOT), 0);
    client.handle_input(3 * MS, &[State::ParamExchange.byte()]);
    assert!(matches!(failure(&mut client), ClientError::Iperf3Server));
}

#[test]
fn a_data_hello_on_the_control_port_is_refused_both_ways() {
    let mut server = Server::new(server_config(None), 0);
    server.handle_input(0, &protocol::data_intro(&COOKIE, 0));
    assert!(matches!(
        last_close(&mut server),
        Rejected::Broken(ProtocolError::Malformed(m)) if m == "data connection to the control port"
    ));
    let mut client = Client::new(client_config(params(), None, BOOT), 0);
    client.handle_input(0, b"TCPLABD\x04");
    assert_eq!(
        failure(&mut client).to_string(),
        "malformed message: server answered with a data hello"
    );
}

#[test]
fn a_message_over_max_message_is_refused_by_its_length_alone() {
    let mut server = Server::new(server_config(None), 0);
    server.handle_input(0, &protocol::client_hello());
    // Only the length: the server does not wait for 70 000 bytes to refuse them.
    server.handle_input(0, &70_000u32.to_be_bytes());
    assert_eq!(
        closed(&mut server).as_deref(),
        Some("control message of 70000 bytes exceeds --max-message 64 KiB")
    );
}

#[test]
fn a_client_refuses_a_message_over_the_protocols_limit() {
    let mut client = Client::new(client_config(params(), None, BOOT), 0);
    client.handle_input(0, b"TCPLABC\x04");
    client.handle_input(0, &((protocol::MAX_MESSAGE + 1) as u32).to_be_bytes());
    assert!(matches!(
        failure(&mut client),
        ClientError::Protocol(ProtocolError::TooLarge { len, limit }) if len == protocol::MAX_MESSAGE + 1 && limit == protocol::MAX_MESSAGE
    ));
}

#[test]
fn garbage_json_breaks_the_handshake() {
    let mut server = Server::new(server_config(None), 0);
    server.handle_input(0, &protocol::client_hello());
    let mut frame = 5u32.to_be_bytes().to_vec();
    frame.extend_from_slice(b"{{{{{");
    server.handle_input(0, &frame);
    assert!(matches!(
        last_close(&mut server),
        Rejected::Broken(ProtocolError::Malformed(_))
    ));
}

#[test]
fn a_message_out_of_turn_breaks_the_handshake() {
    let mut server = Server::new(server_config(None), 0);
    server.handle_input(0, &protocol::client_hello());
    server.handle_input(
        0,
        &protocol::frame(&Message::Go { client_t0_us: 1 }).unwrap(),
    );
    assert!(matches!(
        last_close(&mut server),
        Rejected::Broken(ProtocolError::Malformed(m)) if m == "expected Auth, got Go { client_t0_us: 1 }"
    ));
}

#[test]
fn a_message_split_byte_by_byte_is_read_whole() {
    let mut server = Server::new(server_config(None), 0);
    let mut bytes = protocol::client_hello().to_vec();
    bytes.extend(
        protocol::frame(&Message::Auth {
            nonce: protocol::to_hex(&[1; 32]),
            proof: None,
        })
        .unwrap(),
    );
    for (k, byte) in bytes.iter().enumerate() {
        server.handle_input(k as Micros, &[*byte]);
    }
    let mut sent = Vec::new();
    while let Some(action) = server.poll_action() {
        sent.push(format!("{action:?}").split('(').next().unwrap().to_string());
    }
    assert_eq!(sent, ["Transmit", "Transmit", "Spoke", "Transmit"]);
    assert!(server.poll_timeout() == Some(10 * S));
}

#[test]
fn a_refused_message_mid_handshake_ends_the_client_with_its_reason() {
    let mut client = Client::new(client_config(params(), None, BOOT), 0);
    let mut bytes = b"TCPLABC\x04".to_vec();
    bytes.extend(
        protocol::frame(&Message::Refused {
            reason: "full".into(),
        })
        .unwrap(),
    );
    client.handle_input(0, &bytes);
    assert!(matches!(failure(&mut client), ClientError::Refused(r) if r == "full"));
}

#[test]
fn inconsistent_clock_replies_are_refused() {
    let mut client = Client::new(client_config(params(), None, "boot-b"), 0);
    let mut bytes = b"TCPLABC\x04".to_vec();
    bytes.extend(
        protocol::frame(&Message::Challenge {
            nonce: "00".repeat(32),
        })
        .unwrap(),
    );
    client.handle_input(0, &bytes);
    client.handle_input(
        MS,
        &protocol::frame(&Message::Welcome {
            proof: None,
            clock: None,
        })
        .unwrap(),
    );
    for k in 0..TIME_PROBES as Micros {
        // The probe went at the time of the last input; the server's times run backwards.
        let sent = MS + k * MS;
        let reply = Message::TimeReply {
            client_send_us: sent,
            server_recv_us: 100,
            server_send_us: 50,
        };
        client.handle_input(sent + MS, &protocol::frame(&reply).unwrap());
    }
    assert_eq!(
        failure(&mut client).to_string(),
        "malformed message: the server's clock replies are inconsistent"
    );
}

#[test]
fn a_time_reply_to_another_probe_is_malformed() {
    let mut client = Client::new(client_config(params(), None, "boot-b"), 0);
    let mut bytes = b"TCPLABC\x04".to_vec();
    bytes.extend(
        protocol::frame(&Message::Challenge {
            nonce: "00".repeat(32),
        })
        .unwrap(),
    );
    client.handle_input(0, &bytes);
    client.handle_input(
        MS,
        &protocol::frame(&Message::Welcome {
            proof: None,
            clock: None,
        })
        .unwrap(),
    );
    let reply = Message::TimeReply {
        client_send_us: 12345,
        server_recv_us: 1,
        server_send_us: 1,
    };
    client.handle_input(2 * MS, &protocol::frame(&reply).unwrap());
    assert!(failure(&mut client)
        .to_string()
        .contains("expected TimeReply"));
}

// ----------------------------------------------------------------------------------
// tcplab: limits and refusals
// ----------------------------------------------------------------------------------

fn refused_request(p: TestParams, limits: ServerLimits) -> Pair {
    let mut config = server_config(None);
    config.limits = limits;
    let mut pair = Pair::new(client_config(p, None, BOOT), config);
    pair.run();
    assert_eq!(pair.down.types(), ["challenge", "welcome", "refused"]);
    assert_eq!(pair.refusal(), pair.client_refused());
    pair
}

#[test]
fn too_many_streams_are_refused_by_the_flag() {
    let mut p = params();
    p.streams = 33;
    let pair = refused_request(p, ServerLimits::default());
    assert_eq!(pair.refusal(), "33 streams exceed --max-streams 32");
}

#[test]
fn too_long_a_test_is_refused_by_the_flag() {
    let p = TestParams {
        end: TestEnd::Duration { us: 301 * S as u64 },
        ..params()
    };
    let pair = refused_request(p, ServerLimits::default());
    assert_eq!(
        pair.refusal(),
        "duration 301 s exceeds --max-duration 300 s"
    );
}

#[test]
fn a_rate_over_max_rate_is_refused_by_the_flag() {
    let mut p = params();
    p.streams = 2;
    p.tuning.app_rate = Some(600_000_000);
    let pair = refused_request(p, ServerLimits::default());
    assert!(
        pair.refusal().starts_with("--app-rate of ")
            && pair.refusal().contains("exceeds --max-rate"),
        "{}",
        pair.refusal()
    );
}

#[test]
fn a_congestion_control_the_server_lacks_is_refused_by_name() {
    let mut p = params();
    p.tuning.cc = Some("bbr".into());
    let pair = refused_request(p, ServerLimits::default());
    assert_eq!(
        pair.refusal(),
        "server has no congestion control 'bbr' (available: cubic reno)"
    );
}

#[test]
fn tests_at_once_from_one_source_are_refused_by_the_flag() {
    let limits = ServerLimits {
        max_tests_per_client: 1,
        ..ServerLimits::default()
    };
    let admission = Admission::new(&limits);
    let source = Source::of(IpAddr::from([10, 0, 0, 1]));
    let _running = admission.start_test(source).unwrap();
    let mut config = server_config(None);
    config.limits = limits;
    let mut pair = Pair::new(client_config(params(), None, BOOT), config);
    pair.admission = admission;
    pair.run();
    assert!(
        pair.refusal().contains("--max-tests-per-client 1"),
        "{}",
        pair.refusal()
    );
    assert_eq!(pair.refusal(), pair.client_refused());
    // Refused at Start's arrival.
    assert_eq!(pair.server_closed.as_ref().unwrap().0, 20 * MS);
}

#[test]
fn tests_at_once_from_all_sources_are_refused_by_the_flag() {
    let limits = ServerLimits {
        max_tests: 1,
        ..ServerLimits::default()
    };
    let admission = Admission::new(&limits);
    let _running = admission
        .start_test(Source::of(IpAddr::from([10, 0, 0, 9])))
        .unwrap();
    let mut config = server_config(None);
    config.limits = limits;
    let mut pair = Pair::new(client_config(params(), None, BOOT), config);
    pair.admission = admission;
    pair.run();
    assert!(
        pair.refusal().contains("--max-tests 1"),
        "{}",
        pair.refusal()
    );
}

#[test]
fn a_source_over_its_connection_rate_is_refused_at_accept() {
    let limits = ServerLimits {
        max_connect_rate: Some(2),
        ..ServerLimits::default()
    };
    let admission = Admission::new(&limits);
    let source = Source::of(IpAddr::from([10, 0, 0, 1]));
    let _a = admission.connect(source, 0).unwrap();
    let _b = admission.connect(source, 0).unwrap();
    let refused = admission.connect(source, 0).unwrap_err();
    assert!(refused.contains("--max-connect-rate 2"), "{refused}");
    // A minute's worth refills in a minute of virtual time.
    drop((_a, _b));
    assert!(admission.connect(source, 30 * S).is_ok());
}

#[test]
fn a_peer_refused_before_the_challenge_hears_why_at_once() {
    let mut config = server_config(None);
    config.refusal = Some("10.0.0.1 is not on this host".into());
    let mut pair = Pair::new(client_config(params(), None, BOOT), config);
    pair.run();
    assert_eq!(pair.down.types(), ["refused"]);
    assert_eq!(pair.client_refused(), "10.0.0.1 is not on this host");
    assert_eq!(pair.server_closed.as_ref().unwrap().0, 0);
}

#[test]
fn a_setup_the_kernel_refuses_is_a_refusal_before_go() {
    let mut server = Server::new(server_config(None), 0);
    server.handle_input(0, &protocol::client_hello());
    let mut bytes = protocol::frame(&Message::Auth {
        nonce: protocol::to_hex(&[1; 32]),
        proof: None,
    })
    .unwrap();
    bytes.extend(
        protocol::frame(&Message::Start {
            params: params(),
            clock: Default::default(),
            deflated_samples: false,
        })
        .unwrap(),
    );
    server.handle_input(MS, &bytes);
    let mut admit = false;
    while let Some(action) = server.poll_action() {
        admit |= matches!(action, ServerAction::Admit(_));
    }
    assert!(admit);
    server.admitted(MS, Ok(()));
    server.refuse("the kernel refused the MSS 10".into());
    assert_eq!(
        closed(&mut server).as_deref(),
        Some("the kernel refused the MSS 10")
    );
}

// ----------------------------------------------------------------------------------
// tcplab: deadlines (slow loris)
// ----------------------------------------------------------------------------------

#[test]
fn a_silent_peer_is_refused_at_the_handshake_deadline_exactly() {
    let mut server = Server::new(server_config(None), 7 * S);
    assert_eq!(server.poll_timeout(), Some(17 * S));
    server.handle_timeout(17 * S - 1);
    assert!(!server.is_done());
    server.handle_timeout(17 * S);
    assert_eq!(closed(&mut server).as_deref(), Some(STEP_LATE));
}

#[test]
fn a_peer_trickling_half_a_hello_meets_the_same_deadline() {
    let mut server = Server::new(server_config(None), 0);
    let hello = protocol::client_hello();
    // One byte a second: each comes in time, the whole never.
    for k in 0..10 {
        server.handle_input(k * S, &hello[k as usize..=k as usize]);
        assert_eq!(server.poll_timeout(), Some(10 * S));
    }
    server.handle_timeout(10 * S);
    assert_eq!(closed(&mut server).as_deref(), Some(STEP_LATE));
}

#[test]
fn half_a_message_then_silence_meets_the_deadline() {
    let mut config = server_config(None);
    config.limits.handshake_timeout = Duration::from_secs(3);
    let mut server = Server::new(config, 7 * S);
    server.handle_input(7 * S, &protocol::client_hello());
    let auth = protocol::frame(&Message::Auth {
        nonce: protocol::to_hex(&[1; 32]),
        proof: None,
    })
    .unwrap();
    server.handle_input(8 * S, &auth[..auth.len() / 2]);
    // --handshake-timeout 3s from the connection at 7 s.
    server.handle_timeout(10 * S - 1);
    assert!(!server.is_done());
    server.handle_timeout(10 * S);
    assert_eq!(closed(&mut server).as_deref(), Some(STEP_LATE));
}

#[test]
fn a_client_that_opens_no_data_connections_is_refused_at_the_deadline() {
    let mut pair = Pair::of(params());
    pair.open_flows = false;
    pair.run();
    assert_eq!(
        pair.refusal(),
        "client did not open all data connections within --handshake-timeout"
    );
    // Accepted left at 20 ms.
    assert_eq!(pair.server_closed.as_ref().unwrap().0, 20 * MS + 10 * S);
    assert_eq!(pair.client_refused(), pair.refusal());
}

#[test]
fn a_client_that_never_says_go_is_refused_at_the_deadline() {
    let mut pair = Pair::of(params());
    pair.go = false;
    pair.run();
    assert_eq!(pair.refusal(), STEP_LATE);
    assert_eq!(pair.server_closed.as_ref().unwrap().0, 40 * MS + 10 * S);
}

#[test]
fn a_silent_server_is_no_answer_after_10_s_and_a_mute_one_silent_after_60() {
    let mut client = Client::new(client_config(params(), None, BOOT), S);
    assert_eq!(client.poll_timeout(), Some(S + 10 * S));
    client.handle_timeout(11 * S);
    assert!(matches!(
        failure(&mut client),
        ClientError::NoAnswer { waited_s } if waited_s == HELLO_TIMEOUT.as_secs()
    ));
    let mut client = Client::new(client_config(params(), None, BOOT), 0);
    client.handle_input(2 * S, b"TCPLABC\x04");
    assert_eq!(client.poll_timeout(), Some(2 * S + 60 * S));
    client.handle_timeout(62 * S);
    assert!(matches!(
        failure(&mut client),
        ClientError::Silent { waited_s } if waited_s == SERVER_SILENCE.as_secs()
    ));
}

#[test]
fn a_connection_evicted_from_its_place_is_told_why() {
    let mut server = Server::new(server_config(None), 0);
    server.evict(5 * S, "made room for a newer one".into());
    assert_eq!(
        closed(&mut server).as_deref(),
        Some("made room for a newer one")
    );
}

#[test]
fn a_peer_that_closes_mid_handshake_is_broken_not_refused() {
    let mut server = Server::new(server_config(None), 0);
    server.handle_input(0, &protocol::client_hello()[..10]);
    server.handle_eof(MS);
    assert!(matches!(
        last_close(&mut server),
        Rejected::Broken(ProtocolError::Closed)
    ));
    let mut client = Client::new(client_config(params(), None, BOOT), 0);
    client.handle_eof(MS);
    assert!(matches!(
        failure(&mut client),
        ClientError::Protocol(ProtocolError::Closed)
    ));
}

// ----------------------------------------------------------------------------------
// tcplab: data connections
// ----------------------------------------------------------------------------------

#[test]
fn a_data_connection_with_another_cookie_is_a_stranger() {
    let mut pair = Pair::of(params());
    pair.intros = Some(vec![
        protocol::data_intro(&[0xee; COOKIE_LEN], 0).to_vec(),
        b"GET / HTTP/1.1\r\n\r\n0123456789".to_vec(),
        protocol::data_intro(&COOKIE, 0).to_vec(),
    ]);
    pair.run();
    assert_eq!(
        pair.flows_in,
        [DataIntro::Stranger, DataIntro::Stranger, DataIntro::Flow(0)]
    );
    assert!(pair.server_go.is_some());
}

#[test]
fn a_data_connection_with_a_bad_or_repeated_flow_id_breaks_the_test() {
    for ids in [vec![0, 0], vec![7]] {
        let mut p = params();
        p.streams = 2;
        let mut pair = Pair::of(p);
        pair.intros = Some(
            ids.iter()
                .map(|&id| protocol::data_intro(&COOKIE, id).to_vec())
                .collect(),
        );
        pair.run();
        let bad = *ids.last().unwrap();
        assert!(
            matches!(&pair.server_closed, Some((_, Rejected::Broken(ProtocolError::Malformed(m)))) if *m == format!("bad or repeated flow id {bad}")),
            "{ids:?}: {:?}",
            pair.server_closed
        );
    }
}

#[test]
fn a_udp_hello_for_another_port_or_cookie_is_ignored() {
    let mut p = params();
    p.udp = Some(UdpParams {
        rate_bps: 1_000_000,
        datagram_size: 1000,
        burst: 1,
        header: Default::default(),
    });
    let mut server = Server::new(server_config(None), 0);
    server.handle_input(0, &protocol::client_hello());
    let mut bytes = protocol::frame(&Message::Auth {
        nonce: protocol::to_hex(&[1; 32]),
        proof: None,
    })
    .unwrap();
    bytes.extend(
        protocol::frame(&Message::Start {
            params: p,
            clock: Default::default(),
            deflated_samples: false,
        })
        .unwrap(),
    );
    server.handle_input(0, &bytes);
    server.admitted(0, Ok(()));
    server.listening(
        0,
        Listening {
            data_port: 0,
            udp_ports: vec![6000],
            probe_port: None,
            meta: HostMeta::default(),
            cookie: COOKIE,
        },
    );
    assert!(!server.udp_datagram(MS, 0, &protocol::udp_hello(&[1; COOKIE_LEN], 0)));
    assert!(!server.udp_datagram(MS, 1, &protocol::udp_hello(&COOKIE, 1)));
    assert!(!server.udp_datagram(MS, 0, b"junk"));
    assert!(!server.all_flows_in());
    assert!(server.udp_datagram(MS, 0, &protocol::udp_hello(&COOKIE, 0)));
    assert!(server.all_flows_in());
    // A TCP introduction is no UDP test's.
    assert_eq!(
        server.data_intro(MS, &protocol::data_intro(&COOKIE, 0)),
        DataIntro::Stranger
    );
}

#[test]
fn bytes_after_go_are_left_for_the_test() {
    let mut pair = Pair::of(params());
    pair.run();
    let bye = protocol::frame(&Message::Bye).unwrap();
    pair.server.handle_input(60 * MS, &bye);
    assert_eq!(pair.server.take_leftover(), bye);
}

// ----------------------------------------------------------------------------------
// iperf3
// ----------------------------------------------------------------------------------

const IPERF3_COOKIE: wire::Cookie = *b"abcdefghijklmnopqrstuvwxyz234567abcd\0";

fn iperf3_params(reverse: bool) -> Params {
    Params {
        tcp: true,
        time: 2,
        parallel: 2,
        reverse,
        len: 131_072,
        ..Params::default()
    }
}

fn results(bytes: u64) -> Results {
    Results {
        streams: vec![StreamResult {
            id: 1,
            bytes,
            ..StreamResult::default()
        }],
        ..Results::default()
    }
}

enum Iperf3Packet {
    ToServer(Vec<u8>),
    ToClient(Vec<u8>),
    /// The client's streams, each with the cookie.
    Streams(u16),
}

/// An iperf3 client and server in memory; each direction's bytes take `one_way`.
struct Iperf3Pair {
    now: Micros,
    one_way: Micros,
    client: iperf3::Client,
    server: iperf3::Server,
    network: BTreeMap<(Micros, u64), Iperf3Packet>,
    seq: u64,
    /// How long the test runs once both ends are running.
    test_us: Micros,
    streams: usize,
    client_log: Vec<(Micros, String)>,
    server_log: Vec<(Micros, String)>,
    client_done: Option<Results>,
    server_done: Option<Results>,
    client_failed: Option<iperf3::Failure>,
    server_failed: Option<String>,
    prepared: Option<TestParams>,
    test_end_at: Option<Micros>,
}

impl Iperf3Pair {
    fn new(params: Params) -> Iperf3Pair {
        Iperf3Pair {
            now: 0,
            one_way: 5 * MS,
            client: iperf3::Client::new(&IPERF3_COOKIE, params, 0),
            server: iperf3::Server::new(0),
            network: BTreeMap::new(),
            seq: 0,
            test_us: 2 * S,
            streams: 0,
            client_log: Vec::new(),
            server_log: Vec::new(),
            client_done: None,
            server_done: None,
            client_failed: None,
            server_failed: None,
            prepared: None,
            test_end_at: None,
        }
    }

    fn send(&mut self, packet: Iperf3Packet) {
        self.seq += 1;
        self.network
            .insert((self.now + self.one_way, self.seq), packet);
    }

    fn actions(&mut self) {
        loop {
            let mut moved = false;
            while let Some(action) = self.client.poll_action() {
                moved = true;
                self.client_log
                    .push((self.now, label(&format!("{action:?}"))));
                match action {
                    iperf3::ClientAction::Transmit(bytes) => {
                        self.send(Iperf3Packet::ToServer(bytes))
                    }
                    iperf3::ClientAction::CreateStreams => {
                        let n = self.prepared.as_ref().map_or(1, |p| p.streams);
                        self.send(Iperf3Packet::Streams(n))
                    }
                    iperf3::ClientAction::Running => {
                        self.test_end_at = Some(self.now + self.test_us)
                    }
                    iperf3::ClientAction::Done(theirs) => self.client_done = Some(*theirs),
                    iperf3::ClientAction::Failed(f) => self.client_failed = Some(f),
                }
            }
            while let Some(action) = self.server.poll_action() {
                moved = true;
                self.server_log
                    .push((self.now, label(&format!("{action:?}"))));
                match action {
                    iperf3::ServerAction::Transmit(bytes) => {
                        self.send(Iperf3Packet::ToClient(bytes))
                    }
                    iperf3::ServerAction::Prepare(params) => {
                        self.prepared = Some(*params);
                        self.server.streams_ready(self.now);
                    }
                    iperf3::ServerAction::TestEnd => self.server.results(self.now, results(222)),
                    iperf3::ServerAction::Done(theirs) => self.server_done = Some(*theirs),
                    iperf3::ServerAction::Failed(why) => self.server_failed = Some(why),
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn run(&mut self) {
        self.actions();
        loop {
            let packet = self.network.keys().next().map(|k| k.0);
            let timers = [
                self.client.poll_timeout(),
                self.server.poll_timeout(),
                self.test_end_at,
            ];
            let timer = timers.into_iter().flatten().min();
            let next = match (packet, timer) {
                (Some(p), Some(t)) => p.min(t),
                (p, t) => match p.or(t) {
                    Some(n) => n,
                    None => return,
                },
            };
            self.now = self.now.max(next);
            if packet == Some(next) {
                match self.network.pop_first().unwrap().1 {
                    Iperf3Packet::ToServer(bytes) => self.server.handle_input(self.now, &bytes),
                    Iperf3Packet::ToClient(bytes) => self.client.handle_input(self.now, &bytes),
                    Iperf3Packet::Streams(n) => {
                        // Each stream presents the cookie on its own connection.
                        for _ in 0..n {
                            assert!(self.server.is_our_stream(&IPERF3_COOKIE));
                            self.streams += 1;
                        }
                        self.server.streams_open(self.now);
                    }
                }
            } else if self.test_end_at == Some(next) {
                self.test_end_at = None;
                self.client.test_done(self.now, results(111));
            } else {
                self.client.handle_timeout(self.now);
                self.server.handle_timeout(self.now);
            }
            self.actions();
        }
    }
}

fn label(debug: &str) -> String {
    debug.split(['(', ' ']).next().unwrap().to_string()
}

fn iperf3_both_ways(reverse: bool) {
    let mut pair = Iperf3Pair::new(iperf3_params(reverse));
    pair.run();
    assert!(pair.client_failed.is_none(), "{:?}", pair.client_failed);
    assert!(pair.server_failed.is_none(), "{:?}", pair.server_failed);
    let prepared = pair.prepared.as_ref().unwrap();
    assert_eq!(prepared.mode, if reverse { Mode::Down } else { Mode::Up });
    assert_eq!(prepared.streams, 2);
    // iperf3's client ends the test; the server's flows run a second longer.
    assert_eq!(prepared.end, TestEnd::Duration { us: 3 * S as u64 });
    assert_eq!(pair.streams, 2);
    // Each end has the other's results.
    assert_eq!(pair.client_done, Some(results(222)));
    assert_eq!(pair.server_done, Some(results(111)));
    let client: Vec<_> = pair
        .client_log
        .iter()
        .map(|(t, a)| (*t / MS, a.as_str()))
        .collect();
    // cookie at 0; PARAM_EXCHANGE back at 10 ms; CREATE_STREAMS at 20; TEST_START and
    // TEST_RUNNING at 25 (the streams' arrival) + 5; the test 2 s; TEST_END; results.
    assert_eq!(
        client,
        [
            (0, "Transmit"),
            (10, "Transmit"),
            (20, "CreateStreams"),
            (30, "Running"),
            (2030, "Transmit"),
            (2040, "Transmit"),
            (2050, "Transmit"),
            (2050, "Done"),
        ]
    );
    let server: Vec<_> = pair
        .server_log
        .iter()
        .map(|(t, a)| (*t / MS, a.as_str()))
        .collect();
    assert_eq!(
        server,
        [
            (5, "Transmit"),
            (15, "Prepare"),
            (15, "Transmit"),
            (25, "Transmit"),
            (25, "Transmit"),
            (2035, "Transmit"),
            (2035, "TestEnd"),
            (2045, "Transmit"),
            (2045, "Transmit"),
            (2055, "Done"),
        ]
    );
    assert!(pair.client.is_done() && pair.server.is_done());
}

#[test]
fn iperf3_client_and_server_run_a_test_up() {
    iperf3_both_ways(false);
}

#[test]
fn iperf3_client_and_server_run_a_test_down_with_r() {
    iperf3_both_ways(true);
}

#[test]
fn iperf3_the_wait_for_test_start_begins_when_the_streams_are_open() {
    let mut client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
    client.handle_input(MS, &[State::ParamExchange.byte()]);
    client.handle_input(2 * MS, &[State::CreateStreams.byte()]);
    assert_eq!(client.poll_timeout(), Some(2 * MS + 10 * S));
    // Opening the streams took 4 s.
    client.streams_created(4 * S);
    assert_eq!(client.poll_timeout(), Some(14 * S));
    client.handle_timeout(2 * MS + 10 * S);
    assert!(!client.is_done());
    client.handle_timeout(14 * S);
    assert_eq!(
        iperf3_failure(&mut client),
        iperf3::Failure::NotIperf3("no TestStart within 10 s".into())
    );
}

#[test]
fn the_wait_for_ready_begins_when_the_flows_are_open() {
    let mut client = Client::new(client_config(params(), None, BOOT), 0);
    drive_client_to_start(&mut client);
    let accepted = Message::Accepted {
        data_port: 1,
        cookie: protocol::to_hex(&COOKIE),
        meta: HostMeta::default(),
        udp_ports: Vec::new(),
        probe_port: None,
    };
    client.handle_input(2 * MS, &protocol::frame(&accepted).unwrap());
    assert_eq!(client.poll_timeout(), Some(2 * MS + 60 * S));
    client.flows_opened(5 * S);
    assert_eq!(client.poll_timeout(), Some(65 * S));
    client.handle_timeout(64 * S);
    assert!(!client.is_done());
    client.handle_input(64 * S, &protocol::frame(&Message::Ready).unwrap());
    let actions: Vec<_> = std::iter::from_fn(|| client.poll_action()).collect();
    assert!(
        matches!(actions.last(), Some(ClientAction::Ready)),
        "{actions:?}"
    );
    assert_eq!(client.poll_timeout(), None);
    client.go(64 * S + 3);
    let Some(ClientAction::Transmit(go)) = client.poll_action() else {
        panic!("no Go")
    };
    assert_eq!(
        protocol::take_frame(&mut go.clone(), 1 << 10).unwrap(),
        Some(Message::Go {
            client_t0_us: 64 * S + 3
        })
    );
    assert!(client.is_done());
}

#[test]
fn iperf3_the_server_says_params_it_cannot_serve_and_closes() {
    let mut pair = Iperf3Pair::new(Params {
        bidirectional: true,
        ..iperf3_params(false)
    });
    pair.run();
    assert_eq!(
        pair.server_failed.as_deref(),
        Some("--bidir is not served with --iperf3")
    );
    // The client hears nothing more: its CREATE_STREAMS never comes.
    assert_eq!(
        pair.client_failed,
        Some(iperf3::Failure::NotIperf3(
            "no CreateStreams within 10 s".into()
        ))
    );
    assert_eq!(pair.client_log.last().unwrap().0, 10 * MS + 10 * S);
}

#[test]
fn iperf3_a_bad_state_byte_is_named() {
    let mut client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
    client.handle_input(MS, &[0x63]);
    assert_eq!(
        iperf3_failure(&mut client),
        iperf3::Failure::NotIperf3("byte 0x63 where ParamExchange was due".into())
    );
    let mut client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
    client.handle_input(MS, &[State::TestStart.byte()]);
    assert_eq!(
        iperf3_failure(&mut client),
        iperf3::Failure::NotIperf3("TestStart where ParamExchange was due".into())
    );
}

#[test]
fn iperf3_busy_error_and_terminate_are_named() {
    let mut client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
    client.handle_input(MS, &iperf3::Server::busy());
    assert_eq!(iperf3_failure(&mut client), iperf3::Failure::Busy);
    let mut client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
    client.handle_input(MS, &[State::ServerError.byte(), 0, 0, 0]);
    assert!(client
        .poll_action()
        .is_some_and(|a| matches!(a, iperf3::ClientAction::Transmit(_))));
    // The codes are not all there yet.
    assert_eq!(client.poll_action(), None);
    client.handle_input(MS, &[111, 0, 0, 0, 2]);
    assert_eq!(
        iperf3_failure(&mut client),
        iperf3::Failure::ServerError {
            code: 111,
            errno: 2
        }
    );
    let mut client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
    client.handle_input(MS, &[State::ServerTerminate.byte()]);
    assert_eq!(iperf3_failure(&mut client), iperf3::Failure::Terminated);
}

#[test]
fn iperf3_a_tcplab_server_is_named_by_its_hello() {
    let mut client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
    client.handle_input(MS, b"TCP");
    // Three bytes could still be anything.
    assert!(client.poll_action().is_some());
    assert_eq!(client.poll_action(), None);
    client.handle_input(MS, b"LABC\x09");
    assert_eq!(iperf3_failure(&mut client), iperf3::Failure::TcplabServer);
}

#[test]
fn iperf3_results_json_too_big_is_not_iperf3() {
    let mut client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
    for state in [
        State::ParamExchange,
        State::CreateStreams,
        State::TestStart,
        State::TestRunning,
    ] {
        client.handle_input(MS, &[state.byte()]);
    }
    client.test_done(2 * S, results(1));
    client.handle_input(2 * S, &[State::ExchangeResults.byte()]);
    client.handle_input(2 * S, &(wire::MAX_JSON + 1).to_be_bytes());
    assert_eq!(
        iperf3_failure(&mut client),
        iperf3::Failure::NotIperf3(format!(
            "reading its results: a {}-byte JSON message (at most {})",
            wire::MAX_JSON + 1,
            wire::MAX_JSON
        ))
    );
}

#[test]
fn iperf3_server_refuses_params_json_too_big() {
    let mut server = iperf3::Server::new(0);
    server.handle_input(MS, &IPERF3_COOKIE);
    server.handle_input(MS, &u32::MAX.to_be_bytes());
    assert_eq!(
        iperf3_server_failure(&mut server),
        format!(
            "reading the parameters: a {}-byte JSON message (at most {})",
            u32::MAX,
            wire::MAX_JSON
        )
    );
}

#[test]
fn iperf3_server_waits_10_s_for_a_cookie_exactly() {
    let mut server = iperf3::Server::new(3 * S);
    server.handle_input(4 * S, &IPERF3_COOKIE[..20]);
    assert_eq!(server.poll_timeout(), Some(13 * S));
    server.handle_timeout(13 * S - 1);
    assert!(!server.is_done());
    server.handle_timeout(13 * S);
    assert_eq!(
        iperf3_server_failure(&mut server),
        "reading the cookie (not an iperf3 client?): none within 10 s"
    );
}

#[test]
fn iperf3_server_knows_only_its_streams_cookie() {
    let mut server = iperf3::Server::new(0);
    assert!(!server.is_our_stream(&IPERF3_COOKIE));
    server.handle_input(0, &IPERF3_COOKIE);
    assert!(server.is_our_stream(&IPERF3_COOKIE));
    let mut other = IPERF3_COOKIE;
    other[0] = b'z';
    assert!(!server.is_our_stream(&other));
}

#[test]
fn iperf3_anything_but_test_end_while_running_fails_the_test() {
    let mut server = iperf3::Server::new(0);
    server.handle_input(0, &IPERF3_COOKIE);
    server.handle_input(0, &wire::json_frame(&iperf3_params(false)).unwrap());
    server.streams_ready(0);
    server.streams_open(0);
    server.handle_input(S, &[State::IperfDone.byte()]);
    assert_eq!(
        iperf3_server_failure(&mut server),
        "Some(IperfDone) where TEST_END was due"
    );
}

#[test]
fn iperf3_a_client_closing_instead_of_iperf_done_still_ends_the_test() {
    let mut server = iperf3::Server::new(0);
    server.handle_input(0, &IPERF3_COOKIE);
    server.handle_input(0, &wire::json_frame(&iperf3_params(false)).unwrap());
    server.streams_ready(0);
    server.streams_open(0);
    server.handle_input(S, &[State::TestEnd.byte()]);
    server.handle_input(S, &wire::json_frame(&results(5)).unwrap());
    server.results(S, results(6));
    server.handle_eof(S + MS);
    let mut done = None;
    while let Some(action) = server.poll_action() {
        if let iperf3::ServerAction::Done(theirs) = action {
            done = Some(*theirs);
        }
    }
    assert_eq!(done, Some(results(5)));
}

#[test]
fn iperf3_udp_params_become_tcplabs_with_iperf3_headers() {
    let params = iperf3::from_iperf3(&Params {
        udp: true,
        len: 1200,
        bandwidth: Some(5_000_000),
        ..iperf3_params(false)
    })
    .unwrap();
    let udp = params.udp.unwrap();
    assert_eq!(
        (udp.rate_bps, udp.datagram_size, udp.burst),
        (5_000_000, 1200, 1)
    );
    assert_eq!(udp.header, tcplab_record::UdpHeaderFormat::Iperf3);
    assert!(iperf3::from_iperf3(&Params {
        udp: true,
        len: 10,
        ..iperf3_params(false)
    })
    .unwrap_err()
    .starts_with("-l 10 is not a datagram size"));
}

fn iperf3_failure(client: &mut iperf3::Client) -> iperf3::Failure {
    while let Some(action) = client.poll_action() {
        if let iperf3::ClientAction::Failed(f) = action {
            return f;
        }
    }
    panic!("the client did not fail")
}

fn iperf3_server_failure(server: &mut iperf3::Server) -> String {
    while let Some(action) = server.poll_action() {
        if let iperf3::ServerAction::Failed(why) = action {
            return why;
        }
    }
    panic!("the server did not fail")
}

#[test]
fn random_bytes_are_refused_or_read_never_a_panic() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(26);
    let valid_start = {
        let mut bytes = protocol::client_hello().to_vec();
        bytes.extend(
            protocol::frame(&Message::Auth {
                nonce: protocol::to_hex(&[1; 32]),
                proof: None,
            })
            .unwrap(),
        );
        bytes
    };
    for round in 0..3000 {
        let len = rng.random_range(0..200);
        let mut data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        // Half the rounds start right, so the later steps see garbage too.
        if round % 2 == 0 {
            data.splice(0..0, valid_start.iter().copied());
        }
        let cut = rng.random_range(0..=data.len());
        let mut server = Server::new(server_config(None), 0);
        let mut client = Client::new(client_config(params(), None, BOOT), 0);
        for (now, part) in [&data[..cut], &data[cut..]].into_iter().enumerate() {
            server.handle_input(now as Micros, part);
            client.handle_input(now as Micros, part);
        }
        server.handle_timeout(20 * S);
        client.handle_timeout(100 * S);
        while server.poll_action().is_some() {}
        while client.poll_action().is_some() {}
        assert!(server.is_done() && client.is_done(), "{data:02x?}");
        let mut iperf3_client = iperf3::Client::new(&IPERF3_COOKIE, iperf3_params(false), 0);
        let mut iperf3_server = iperf3::Server::new(0);
        iperf3_client.handle_input(1, &data);
        iperf3_server.handle_input(1, &data);
        iperf3_client.handle_eof(2);
        iperf3_server.handle_eof(2);
        while iperf3_client.poll_action().is_some() {}
        while iperf3_server.poll_action().is_some() {}
    }
}
