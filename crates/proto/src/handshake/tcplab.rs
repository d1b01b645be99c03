//! tcplab's control handshake, both ends, from the hellos to `Go`: the key's
//! challenge–response, the clock exchanges, the request and its limits, the data
//! connections' cookie, `Ready` and `Go`. What follows `Go` (intervals, reports,
//! samples) is the test's, not the handshake's.

use std::collections::VecDeque;
use std::time::Duration;

use tcplab_analysis::clock::{self, Exchange};
use tcplab_record::{ClockOffset, Host, HostMeta, TestParams};

use super::{micros, Micros, Steps};
use crate::auth::{Nonce, PreSharedKey, WelcomeClock, NONCE_LEN, PROOF_LEN};
use crate::flow_roles;
use crate::iperf3::wire::State;
use crate::limits::{self, ServerLimits};
use crate::protocol::{
    self, ClientClock, ConnKind, Message, ProtocolError, Rejected, Role, ServerClock,
    CONTROL_HELLO_LEN, COOKIE_LEN, MAX_MESSAGE,
};

/// How long a client waits for the server's hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client waits for any later message of a server that has spoken: a lossy
/// path's retransmission backoff (3 s after a lost SYN, then 6 s …) can hold one message
/// longer than 10 s.
pub const SERVER_SILENCE: Duration = Duration::from_secs(60);
/// Clock-offset exchanges before a test whose server reads another clock (or does not
/// say), one round trip each; on one clock the Auth/Welcome exchange is enough.
pub const TIME_PROBES: usize = 8;
/// How often a UDP test's client repeats its flows' hellos until the server has them.
pub const UDP_HELLO_EVERY: Duration = Duration::from_millis(50);
/// How long a UDP test's client says its hellos before it gives up.
pub const UDP_HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server says of a handshake step out of time.
pub const STEP_LATE: &str = "handshake step not done within --handshake-timeout";

// ----------------------------------------------------------------------------------
// The client
// ----------------------------------------------------------------------------------

/// Why a client gave up its handshake.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("server refused the test: {0}")]
    Refused(String),
    #[error("cannot trust the server: {0}")]
    ServerNotProven(String),
    #[error("the server is an iperf3 server, not a tcplab one")]
    Iperf3Server,
    #[error("no answer within {waited_s} s")]
    NoAnswer { waited_s: u64 },
    #[error("the server fell silent in the handshake: no answer for {waited_s} s")]
    Silent { waited_s: u64 },
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// Where a client's flows go, as the server's `Accepted` says, and the clocks' offset.
#[derive(Clone, Debug, PartialEq)]
pub struct Accepted {
    pub data_port: u16,
    pub cookie: [u8; COOKIE_LEN],
    pub meta: HostMeta,
    pub udp_ports: Vec<u16>,
    pub probe_port: Option<u16>,
    /// The server's clock against ours (server = client + offset).
    pub offset: ClockOffset,
}

#[derive(Debug)]
pub enum ClientAction {
    /// Send these bytes on the control connection.
    Transmit(Vec<u8>),
    /// The server took the test: open its flows (a TCP test's data connections, each
    /// introduced with [`protocol::data_intro`]; a UDP test's sockets, which then say
    /// their hellos at every [`ClientAction::SayUdpHellos`]).
    Accepted(Accepted),
    /// (UDP) Send every flow's hello ([`protocol::udp_hello`]) once more.
    SayUdpHellos,
    /// The server has all flows: call [`Client::go`] when this end starts.
    Ready,
    /// The handshake failed; nothing more comes.
    Failed(ClientError),
}

/// What a client knows before it connects.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub params: TestParams,
    pub key: Option<PreSharedKey>,
    /// This connection's nonce (fresh, [`crate::auth::nonce`]).
    pub nonce: Nonce,
    /// This host's kernel boot id.
    pub boot_id: String,
    /// Clock exchanges when the Welcome's is not enough ([`TIME_PROBES`]).
    pub time_probes: usize,
    /// Ask for the samples deflated.
    pub deflated_samples: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum ClientState {
    Hello,
    Challenge,
    Welcome {
        server_nonce: Nonce,
        sent_us: Micros,
    },
    Probes {
        exchanges: Vec<Exchange>,
        sent_us: Micros,
    },
    Accepted {
        offset: ClockOffset,
    },
    Ready {
        udp: bool,
    },
    Go,
    Done,
    Failed,
}

/// tcplab's client handshake: from the hellos to `Go`.
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    state: ClientState,
    inbox: Vec<u8>,
    actions: VecDeque<ClientAction>,
    /// When the client gives up waiting.
    deadline: Option<Micros>,
    /// (UDP) When the hellos are next said.
    next_hello: Option<Micros>,
    probes_sent: usize,
}

impl Client {
    /// A client that has just connected: its hello goes first.
    pub fn new(config: ClientConfig, now: Micros) -> Client {
        let mut client = Client {
            config,
            state: ClientState::Hello,
            inbox: Vec::new(),
            actions: VecDeque::new(),
            deadline: Some(now + micros(HELLO_TIMEOUT)),
            next_hello: None,
            probes_sent: 0,
        };
        client.transmit_bytes(protocol::client_hello().to_vec());
        client
    }

    pub fn poll_action(&mut self) -> Option<ClientAction> {
        self.actions.pop_front()
    }

    /// When [`Client::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Micros> {
        match (self.deadline, self.next_hello) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the handshake is over (`Go` sent) or failed.
    pub fn is_done(&self) -> bool {
        matches!(self.state, ClientState::Done | ClientState::Failed)
    }

    /// Bytes that arrived after the handshake's last message, the test's.
    pub fn take_leftover(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.inbox)
    }

    pub fn handle_timeout(&mut self, now: Micros) {
        if self.is_done() {
            return;
        }
        if self.deadline.is_some_and(|d| now >= d) {
            let error = match self.state {
                ClientState::Hello => ClientError::NoAnswer {
                    waited_s: HELLO_TIMEOUT.as_secs(),
                },
                ClientState::Ready { udp: true } => ClientError::Silent {
                    waited_s: UDP_HELLO_TIMEOUT.as_secs(),
                },
                _ => ClientError::Silent {
                    waited_s: SERVER_SILENCE.as_secs(),
                },
            };
            return self.fail(error);
        }
        if let Some(at) = self.next_hello.filter(|&at| now >= at) {
            self.actions.push_back(ClientAction::SayUdpHellos);
            // Every 50 ms from the first, however late this wake-up.
            let every = micros(UDP_HELLO_EVERY);
            self.next_hello = Some(at + every * ((now - at) / every + 1));
        }
    }

    /// The server closed the connection.
    pub fn handle_eof(&mut self, _now: Micros) {
        if !self.is_done() {
            self.fail(ProtocolError::Closed.into());
        }
    }

    pub fn handle_input(&mut self, now: Micros, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
        self.run(now);
    }

    /// The flows of [`ClientAction::Accepted`] are open: the wait for `Ready` starts
    /// now, however long opening them took.
    pub fn flows_opened(&mut self, now: Micros) {
        if self.state == (ClientState::Ready { udp: false }) {
            self.deadline = Some(now + micros(SERVER_SILENCE));
        }
    }

    /// This end starts: `Go`, with its start on its clock.
    pub fn go(&mut self, now: Micros) {
        if self.state != ClientState::Go {
            return;
        }
        self.transmit(&Message::Go { client_t0_us: now });
        self.state = ClientState::Done;
        self.deadline = None;
    }

    fn fail(&mut self, error: ClientError) {
        self.state = ClientState::Failed;
        self.deadline = None;
        self.next_hello = None;
        self.actions.push_back(ClientAction::Failed(error));
    }

    fn transmit_bytes(&mut self, bytes: Vec<u8>) {
        self.actions.push_back(ClientAction::Transmit(bytes));
    }

    fn transmit(&mut self, message: &Message) {
        // Our own messages are small: a failure here is a bug.
        let frame = protocol::frame(message).expect("a client message frames");
        self.transmit_bytes(frame);
    }

    /// The server's next message; a refusal, which may come at any step until Go, is
    /// the error.
    fn message(&mut self, now: Micros) -> Result<Option<Message>, ClientError> {
        match protocol::take_frame(&mut self.inbox, MAX_MESSAGE)? {
            Some(Message::Refused { reason }) => Err(ClientError::Refused(reason)),
            Some(message) => {
                self.deadline = Some(now + micros(SERVER_SILENCE));
                Ok(Some(message))
            }
            None => Ok(None),
        }
    }

    /// One step on what arrived; whether it moved.
    fn step(&mut self, now: Micros) -> Result<bool, ClientError> {
        match self.state.clone() {
            ClientState::Hello => {
                let kind = match protocol::check_hello(&self.inbox) {
                    Ok(Some(kind)) => kind,
                    Ok(None) => return Ok(false),
                    // An iperf3 server answers the padded hello with one state byte.
                    Err(ProtocolError::BadMagic(first)) if matches!(&first[..], [byte] if State::from_byte(*byte).is_some()) => {
                        return Err(ClientError::Iperf3Server)
                    }
                    Err(e) => return Err(e.into()),
                };
                if kind == ConnKind::Data {
                    return Err(malformed("server answered with a data hello"));
                }
                self.inbox.drain(..8);
                self.state = ClientState::Challenge;
                self.deadline = Some(now + micros(SERVER_SILENCE));
                Ok(true)
            }
            ClientState::Challenge => {
                let Some(message) = self.message(now)? else {
                    return Ok(false);
                };
                let Message::Challenge { nonce } = message else {
                    return Err(unexpected(&message, "Challenge"));
                };
                let server_nonce = protocol::parse_hex::<NONCE_LEN>(&nonce)?;
                let client_nonce = self.config.nonce;
                let proof = self
                    .config
                    .key
                    .as_ref()
                    .map(|k| protocol::to_hex(&k.client_proof(&server_nonce, &client_nonce)));
                self.transmit(&Message::Auth {
                    nonce: protocol::to_hex(&client_nonce),
                    proof,
                });
                self.state = ClientState::Welcome {
                    server_nonce,
                    sent_us: now,
                };
                Ok(true)
            }
            ClientState::Welcome {
                server_nonce,
                sent_us,
            } => {
                let Some(message) = self.message(now)? else {
                    return Ok(false);
                };
                let Message::Welcome { proof, clock } = message else {
                    return Err(unexpected(&message, "Welcome"));
                };
                self.check_server_proof(&server_nonce, proof)?;
                let welcome = clock.map(|c| WelcomeClock {
                    exchange: Exchange {
                        client_send_us: sent_us,
                        server_recv_us: c.recv_us,
                        server_send_us: c.send_us,
                        client_recv_us: now,
                    },
                    boot_id: c.boot_id,
                });
                let mut exchanges = Vec::with_capacity(self.config.time_probes + 1);
                if let Some(welcome) = welcome {
                    // On one clock (the same boot, an offset within the round trip of 0)
                    // the Welcome's exchange is the only one.
                    let one_clock = clock::estimate(&[welcome.exchange])
                        .filter(|o| o.same_clock(&welcome.boot_id, &self.config.boot_id));
                    if let Some(offset) = one_clock {
                        self.start(offset);
                        return Ok(true);
                    }
                    exchanges.push(welcome.exchange);
                }
                self.probe_or_start(exchanges, now)?;
                Ok(true)
            }
            ClientState::Probes { exchanges, sent_us } => {
                let Some(message) = self.message(now)? else {
                    return Ok(false);
                };
                match message {
                    Message::TimeReply {
                        client_send_us,
                        server_recv_us,
                        server_send_us,
                    } if client_send_us == sent_us => {
                        let mut exchanges = exchanges;
                        exchanges.push(Exchange {
                            client_send_us,
                            server_recv_us,
                            server_send_us,
                            client_recv_us: now,
                        });
                        self.probe_or_start(exchanges, now)?;
                        Ok(true)
                    }
                    other => Err(unexpected(&other, "TimeReply")),
                }
            }
            ClientState::Accepted { offset } => {
                let Some(message) = self.message(now)? else {
                    return Ok(false);
                };
                let Message::Accepted {
                    data_port,
                    cookie,
                    meta,
                    udp_ports,
                    probe_port,
                } = message
                else {
                    return Err(unexpected(&message, "Accepted"));
                };
                let cookie = protocol::parse_hex::<COOKIE_LEN>(&cookie)?;
                let params = &self.config.params;
                let udp = params.udp.is_some();
                let flows = flow_roles(params).len();
                if udp && udp_ports.len() != flows {
                    return Err(malformed(&format!(
                        "server gave {} UDP ports for {flows} flows",
                        udp_ports.len()
                    )));
                }
                if params.probe.is_some() && probe_port.is_none() {
                    return Err(malformed("the server gave no port for the test's probes"));
                }
                self.actions.push_back(ClientAction::Accepted(Accepted {
                    data_port,
                    cookie,
                    meta,
                    udp_ports,
                    probe_port,
                    offset,
                }));
                self.state = ClientState::Ready { udp };
                if udp {
                    self.actions.push_back(ClientAction::SayUdpHellos);
                    self.next_hello = Some(now + micros(UDP_HELLO_EVERY));
                    self.deadline = Some(now + micros(UDP_HELLO_TIMEOUT));
                }
                Ok(true)
            }
            ClientState::Ready { .. } => {
                let Some(message) = self.message(now)? else {
                    return Ok(false);
                };
                if message != Message::Ready {
                    return Err(unexpected(&message, "Ready"));
                }
                self.next_hello = None;
                // Between Ready and Go the client says nothing, the server nothing.
                self.deadline = None;
                self.state = ClientState::Go;
                self.actions.push_back(ClientAction::Ready);
                Ok(true)
            }
            ClientState::Go | ClientState::Done | ClientState::Failed => Ok(false),
        }
    }

    fn check_server_proof(
        &self,
        server_nonce: &Nonce,
        proof: Option<String>,
    ) -> Result<(), ClientError> {
        let Some(key) = &self.config.key else {
            return Ok(());
        };
        let Some(proof) = proof else {
            return Err(ClientError::ServerNotProven(
                "it has no key (it serves without --key-file), so it may not be the server \
                 you meant; leave out --key-file to test against it anyway"
                    .into(),
            ));
        };
        let proof = protocol::parse_hex::<PROOF_LEN>(&proof)?;
        if !key.verify_server(server_nonce, &self.config.nonce, &proof) {
            return Err(ClientError::ServerNotProven(
                "its proof does not match the key".into(),
            ));
        }
        Ok(())
    }

    /// One more clock probe, or, with all done, the offset and the request.
    fn probe_or_start(&mut self, exchanges: Vec<Exchange>, now: Micros) -> Result<(), ClientError> {
        if self.probes_sent < self.config.time_probes {
            self.transmit(&Message::TimeProbe {
                client_send_us: now,
            });
            self.probes_sent += 1;
            self.state = ClientState::Probes {
                exchanges,
                sent_us: now,
            };
            return Ok(());
        }
        // A broken or hostile server can answer with times no clock could produce.
        let offset = clock::estimate(&exchanges)
            .ok_or_else(|| malformed("the server's clock replies are inconsistent"))?;
        self.start(offset);
        Ok(())
    }

    fn start(&mut self, offset: ClockOffset) {
        let clock = ClientClock {
            offset,
            boot_id: self.config.boot_id.clone(),
        };
        self.transmit(&Message::Start {
            params: self.config.params.clone(),
            clock,
            deflated_samples: self.config.deflated_samples,
        });
        self.state = ClientState::Accepted { offset };
    }
}

fn malformed(what: &str) -> ClientError {
    ProtocolError::Malformed(what.to_string()).into()
}

fn unexpected(message: &Message, wanted: &str) -> ClientError {
    ProtocolError::Malformed(format!("expected {wanted}, got {message:?}")).into()
}

// ----------------------------------------------------------------------------------
// The server
// ----------------------------------------------------------------------------------

/// What a server knows before a client's first byte.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The pre-shared key clients must prove, if any.
    pub key: Option<PreSharedKey>,
    /// Why this peer may not use the server at all (not on this host, and no key),
    /// said right after the hello.
    pub refusal: Option<String>,
    pub limits: ServerLimits,
    /// This host's kernel boot id, which the Welcome says.
    pub boot_id: String,
    /// The congestion controls this server's kernel has; `None`: not checked.
    pub congestion: Option<Vec<String>>,
    /// This connection's nonce (fresh, [`crate::auth::nonce`]).
    pub nonce: Nonce,
}

/// What a client's `Start` asked for, and what the server makes of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    pub asked: TestParams,
    pub clock: ClientClock,
    pub deflated_samples: bool,
    /// The test as this server runs it ([`limits::server_params`]).
    pub params: TestParams,
    /// The rate cap of this server's senders ([`limits::rate_cap_bps`]).
    pub rate_cap_bps: Option<u64>,
}

/// Where the server takes the test's flows, from the socket code.
#[derive(Clone, Debug, PartialEq)]
pub struct Listening {
    pub data_port: u16,
    pub udp_ports: Vec<u16>,
    pub probe_port: Option<u16>,
    /// This host, as `Accepted` describes it (its rate cap is set here).
    pub meta: HostMeta,
    /// The test's cookie (fresh and random).
    pub cookie: [u8; COOKIE_LEN],
}

#[derive(Debug)]
pub enum ServerAction {
    /// Send these bytes on the control connection.
    Transmit(Vec<u8>),
    /// The client's hello arrived: its connection now counts as one that spoke.
    Spoke,
    /// The request is within the limits: is there room for one more test? Answer with
    /// [`Server::admitted`].
    Admit(Box<Start>),
    /// The client said Go at `client_t0_us` on its clock: the test starts.
    Go { client_t0_us: Micros },
    /// Close the connection (gracefully, after any refusal sent).
    Close(Rejected),
}

/// What [`Server::data_intro`] makes of a data connection's first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataIntro {
    /// One of the test's flows.
    Flow(u32),
    /// Not this test's: dropped.
    Stranger,
}

#[derive(Clone, Debug, PartialEq)]
enum ServerState {
    Hello,
    Auth,
    Start,
    Admitting,
    Admitted,
    Flows {
        cookie: [u8; COOKIE_LEN],
        arrived: Vec<bool>,
        udp: bool,
    },
    Go,
    Done,
    Closed,
}

/// tcplab's server handshake: from the hellos to `Go`. Every step before `Go` has a
/// deadline however the peer trickles; a limit, a missing or wrong key, a late or
/// oversized message is answered with `Refused` and the connection closed.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    state: ServerState,
    inbox: Vec<u8>,
    actions: VecDeque<ServerAction>,
    deadline: Option<Micros>,
    start: Option<Start>,
}

impl Server {
    /// A server that has just accepted a connection: its hello and the challenge (or the
    /// refusal) go at once, without waiting for the client's hello.
    pub fn new(config: ServerConfig, now: Micros) -> Server {
        let deadline = now + micros(config.limits.handshake_timeout);
        let mut server = Server {
            config,
            state: ServerState::Hello,
            inbox: Vec::new(),
            actions: VecDeque::new(),
            deadline: Some(deadline),
            start: None,
        };
        let mut hello = Vec::new();
        protocol::write_hello(&mut hello, ConnKind::Control).expect("write to Vec");
        server.actions.push_back(ServerAction::Transmit(hello));
        if let Some(reason) = server.config.refusal.clone() {
            server.refuse(reason);
        } else {
            let nonce = protocol::to_hex(&server.config.nonce);
            server.transmit(&Message::Challenge { nonce });
        }
        server
    }

    pub fn poll_action(&mut self) -> Option<ServerAction> {
        self.actions.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Micros> {
        self.deadline
    }

    /// Whether the handshake is over (`Go` received) or the connection closed.
    pub fn is_done(&self) -> bool {
        matches!(self.state, ServerState::Done | ServerState::Closed)
    }

    /// The request, once `Start` has come.
    pub fn start(&self) -> Option<&Start> {
        self.start.as_ref()
    }

    /// Bytes that arrived after `Go`, the test's.
    pub fn take_leftover(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.inbox)
    }

    pub fn handle_timeout(&mut self, now: Micros) {
        if self.is_done() || self.deadline.is_none_or(|d| now < d) {
            return;
        }
        let reason = match &self.state {
            ServerState::Flows { udp, .. } => format!(
                "client did not open all {} within --handshake-timeout",
                if *udp {
                    "UDP flows"
                } else {
                    "data connections"
                }
            ),
            _ => STEP_LATE.to_string(),
        };
        self.reject(ProtocolError::Deadline(reason).into());
    }

    /// A newer connection took this one's place among those in their handshake.
    pub fn evict(&mut self, _now: Micros, reason: String) {
        if matches!(
            self.state,
            ServerState::Hello | ServerState::Auth | ServerState::Start
        ) {
            self.reject(ProtocolError::Deadline(reason).into());
        }
    }

    /// The client closed the connection.
    pub fn handle_eof(&mut self, _now: Micros) {
        if !self.is_done() {
            self.reject(Rejected::Broken(ProtocolError::Closed));
        }
    }

    pub fn handle_input(&mut self, now: Micros, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
        self.run(now);
    }

    /// The answer to [`ServerAction::Admit`]: room for the test, or why not.
    pub fn admitted(&mut self, _now: Micros, room: Result<(), String>) {
        if self.state != ServerState::Admitting {
            return;
        }
        match room {
            Ok(()) => self.state = ServerState::Admitted,
            Err(reason) => self.refuse(reason),
        }
    }

    /// The test's flows can come: `Accepted` tells the client where. Its flows must all
    /// be there within one --handshake-timeout.
    pub fn listening(&mut self, now: Micros, listening: Listening) {
        if self.state != ServerState::Admitted {
            return;
        }
        let start = self.start.as_ref().expect("admitted after Start");
        let udp = start.params.udp.is_some();
        let flows = flow_roles(&start.params).len();
        let accepted = Message::Accepted {
            data_port: listening.data_port,
            cookie: protocol::to_hex(&listening.cookie),
            meta: HostMeta {
                rate_cap_bps: start.rate_cap_bps,
                ..listening.meta
            },
            udp_ports: listening.udp_ports,
            probe_port: listening.probe_port,
        };
        self.transmit(&accepted);
        self.deadline = Some(now + micros(self.config.limits.handshake_timeout));
        self.state = ServerState::Flows {
            cookie: listening.cookie,
            arrived: vec![false; flows],
            udp,
        };
        // A test of probes alone (`-P 0`) has no flows to wait for.
        if flows == 0 {
            self.all_arrived(now);
        }
    }

    /// The roles of this end's flows, by flow id.
    pub fn roles(&self) -> Vec<Role> {
        self.start.as_ref().map_or_else(Vec::new, |s| {
            flow_roles(&s.params)
                .iter()
                .map(|&(_, d)| Role::of(Host::Server, d))
                .collect()
        })
    }

    /// Refuses the test now, before `Go` (a tuning the kernel refused, say).
    pub fn refuse(&mut self, reason: String) {
        if self.is_done() {
            return;
        }
        self.reject(Rejected::Refused(reason));
    }

    /// A data connection's first [`protocol::DATA_INTRO_LEN`] bytes: one of the test's
    /// flows, or a stranger to drop. A right cookie with a bad or repeated flow id
    /// breaks the test.
    pub fn data_intro(&mut self, now: Micros, intro: &[u8]) -> DataIntro {
        let ServerState::Flows {
            cookie, udp: false, ..
        } = &self.state
        else {
            return DataIntro::Stranger;
        };
        match protocol::parse_data_intro(intro) {
            Some((presented, flow)) if presented == *cookie => self.flow_arrived(now, flow),
            _ => DataIntro::Stranger,
        }
    }

    /// A datagram on the UDP port of flow `port_index`, from the client's address:
    /// whether it is that flow's hello, which names the peer the port then talks to.
    pub fn udp_datagram(&mut self, now: Micros, port_index: u32, datagram: &[u8]) -> bool {
        let ServerState::Flows {
            cookie,
            arrived,
            udp: true,
        } = &self.state
        else {
            return false;
        };
        match protocol::read_udp_hello(datagram) {
            Some((presented, flow))
                if presented == *cookie
                    && flow == port_index
                    && arrived.get(flow as usize) == Some(&false) =>
            {
                self.flow_arrived(now, flow) == DataIntro::Flow(flow)
            }
            _ => false,
        }
    }

    /// Whether all the test's flows are in (and `Ready` said).
    pub fn all_flows_in(&self) -> bool {
        matches!(self.state, ServerState::Go | ServerState::Done)
    }

    fn flow_arrived(&mut self, now: Micros, flow: u32) -> DataIntro {
        let ServerState::Flows { arrived, .. } = &mut self.state else {
            return DataIntro::Stranger;
        };
        match arrived.get_mut(flow as usize) {
            Some(slot) if !*slot => *slot = true,
            _ => {
                self.reject(Rejected::Broken(ProtocolError::Malformed(format!(
                    "bad or repeated flow id {flow}"
                ))));
                return DataIntro::Stranger;
            }
        }
        if arrived.iter().all(|&a| a) {
            self.all_arrived(now);
        }
        DataIntro::Flow(flow)
    }

    /// Every flow is in: `Ready`, then `Go` within the deadline.
    fn all_arrived(&mut self, now: Micros) {
        self.transmit(&Message::Ready);
        // The client's idle probes come between Ready and Go.
        let idle = self
            .start
            .as_ref()
            .and_then(|s| s.params.probe)
            .map_or(0, |p| p.idle_us as i64);
        self.deadline = Some(now + micros(self.config.limits.handshake_timeout) + idle);
        self.state = ServerState::Go;
    }

    fn transmit(&mut self, message: &Message) {
        let frame = protocol::frame(message).expect("a server handshake message frames");
        self.actions.push_back(ServerAction::Transmit(frame));
    }

    fn reject(&mut self, rejected: Rejected) {
        if let Rejected::Refused(reason) = &rejected {
            let reason = reason.clone();
            self.transmit(&Message::Refused { reason });
        }
        self.state = ServerState::Closed;
        self.deadline = None;
        self.actions.push_back(ServerAction::Close(rejected));
    }

    fn message(&mut self) -> Result<Option<Message>, ProtocolError> {
        protocol::take_frame(&mut self.inbox, self.config.limits.max_message)
    }

    fn step(&mut self, now: Micros) -> Result<bool, Rejected> {
        match self.state {
            ServerState::Hello => {
                match protocol::check_hello(&self.inbox)? {
                    None => return Ok(false),
                    Some(ConnKind::Data) => {
                        return Err(ProtocolError::Malformed(
                            "data connection to the control port".into(),
                        )
                        .into())
                    }
                    Some(ConnKind::Control) if self.inbox.len() < CONTROL_HELLO_LEN => {
                        return Ok(false)
                    }
                    Some(ConnKind::Control) => {}
                }
                self.inbox.drain(..CONTROL_HELLO_LEN);
                self.actions.push_back(ServerAction::Spoke);
                self.state = ServerState::Auth;
                Ok(true)
            }
            ServerState::Auth => {
                let Some(message) = self.message()? else {
                    return Ok(false);
                };
                self.check_auth(message, now)?;
                self.state = ServerState::Start;
                Ok(true)
            }
            ServerState::Start => {
                let Some(message) = self.message()? else {
                    return Ok(false);
                };
                match message {
                    Message::TimeProbe { client_send_us } => {
                        self.transmit(&Message::TimeReply {
                            client_send_us,
                            server_recv_us: now,
                            server_send_us: now,
                        });
                        Ok(true)
                    }
                    Message::Start {
                        params,
                        clock,
                        deflated_samples,
                    } => {
                        let limits = &self.config.limits;
                        limits::check_request(&params, limits)
                            .and_then(|()| self.check_congestion(&params))
                            .map_err(Rejected::Refused)?;
                        let start = Start {
                            params: limits::server_params(&params, limits),
                            rate_cap_bps: limits::rate_cap_bps(&params, limits),
                            asked: params,
                            clock,
                            deflated_samples,
                        };
                        self.start = Some(start.clone());
                        self.state = ServerState::Admitting;
                        self.actions.push_back(ServerAction::Admit(Box::new(start)));
                        Ok(true)
                    }
                    other => Err(server_unexpected(&other, "Start").into()),
                }
            }
            ServerState::Go => {
                let Some(message) = self.message()? else {
                    return Ok(false);
                };
                let Message::Go { client_t0_us } = message else {
                    return Err(Rejected::Broken(server_unexpected(&message, "Go")));
                };
                self.state = ServerState::Done;
                self.deadline = None;
                self.actions.push_back(ServerAction::Go { client_t0_us });
                Ok(true)
            }
            // The client says nothing while the server sets up or takes the flows.
            ServerState::Admitting | ServerState::Admitted | ServerState::Flows { .. } => {
                match self.message()? {
                    None => Ok(false),
                    Some(other) => Err(Rejected::Broken(server_unexpected(&other, "nothing"))),
                }
            }
            ServerState::Done | ServerState::Closed => Ok(false),
        }
    }

    /// The client's answer to the challenge: with a key, admitted only with a right
    /// proof; welcomed with the server's clock.
    fn check_auth(&mut self, message: Message, now: Micros) -> Result<(), Rejected> {
        let Message::Auth { nonce, proof } = message else {
            return Err(server_unexpected(&message, "Auth").into());
        };
        let client_nonce = protocol::parse_hex::<NONCE_LEN>(&nonce)?;
        let welcome = |proof| Message::Welcome {
            proof,
            clock: Some(ServerClock {
                boot_id: self.config.boot_id.clone(),
                recv_us: now,
                send_us: now,
            }),
        };
        let Some(key) = &self.config.key else {
            let welcome = welcome(None);
            self.transmit(&welcome);
            return Ok(());
        };
        let Some(proof) = proof else {
            return Err(Rejected::Refused(
                "this server requires its pre-shared key: give tcplab run --key-file FILE".into(),
            ));
        };
        let proof = protocol::parse_hex::<PROOF_LEN>(&proof)?;
        let server_nonce = &self.config.nonce;
        if !key.verify_client(server_nonce, &client_nonce, &proof) {
            return Err(Rejected::Refused(
                "wrong key: the proof does not match this server's pre-shared key".into(),
            ));
        }
        let proof = protocol::to_hex(&key.server_proof(server_nonce, &client_nonce));
        let welcome = welcome(Some(proof));
        self.transmit(&welcome);
        Ok(())
    }

    /// A congestion control the client asks for must exist in this server's kernel.
    fn check_congestion(&self, params: &TestParams) -> Result<(), String> {
        let (Some(cc), Some(available)) = (&params.tuning.cc, &self.config.congestion) else {
            return Ok(());
        };
        if available.iter().any(|a| a == cc) {
            Ok(())
        } else {
            Err(format!(
                "server has no congestion control '{cc}' (available: {})",
                available.join(" ")
            ))
        }
    }
}

fn server_unexpected(message: &Message, wanted: &str) -> ProtocolError {
    ProtocolError::Malformed(format!("expected {wanted}, got {message:?}"))
}

impl Steps for Client {
    type Failure = ClientError;

    fn ended(&self) -> bool {
        self.is_done()
    }

    fn advance(&mut self, now: Micros) -> Result<bool, ClientError> {
        self.step(now)
    }

    fn end(&mut self, failure: ClientError) {
        self.fail(failure)
    }
}

impl Steps for Server {
    type Failure = Rejected;

    fn ended(&self) -> bool {
        self.is_done()
    }

    fn advance(&mut self, now: Micros) -> Result<bool, Rejected> {
        self.step(now)
    }

    fn end(&mut self, failure: Rejected) {
        self.reject(failure)
    }
}
