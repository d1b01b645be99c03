//! iperf3's control protocol (3.x, `src/iperf_api.c`), both ends, as state machines:
//! the cookie, the parameters, the streams, the test, the results.
//!
//! Client: cookie → PARAM_EXCHANGE ← params → CREATE_STREAMS ← (streams) → TEST_START ←
//! TEST_RUNNING ← (test) → TEST_END → EXCHANGE_RESULTS ← our results → their results ←
//! DISPLAY_RESULTS ← IPERF_DONE →.

use std::collections::VecDeque;
use std::time::Duration;

use tcplab_model::udp::{MAX_DATAGRAM, MIN_DATAGRAM};
use tcplab_record::{Mode, TestEnd, TestParams, Tuning, UdpHeaderFormat, UdpParams};

use super::{micros, Micros, Steps};
use crate::iperf3::wire::{self, Cookie, Params, Results, State, COOKIE_LEN};
use crate::protocol::{self, ProtocolError};

/// How long either end waits for the other's next step (the test itself aside).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

// ----------------------------------------------------------------------------------
// The client
// ----------------------------------------------------------------------------------

/// Why an iperf3 server's handshake failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("busy running another test (iperf3's ACCESS_DENIED)")]
    Busy,
    #[error("reported an error: i_errno {code}, errno {errno}")]
    ServerError { code: i32, errno: i32 },
    #[error("terminated the test")]
    Terminated,
    #[error("a tcplab server, not an iperf3 one")]
    TcplabServer,
    #[error("does not speak iperf3's protocol: {0}")]
    NotIperf3(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum ClientAction {
    Transmit(Vec<u8>),
    /// Open the test's streams (each TCP stream starts with the cookie).
    CreateStreams,
    /// The test runs: call [`Client::test_done`] with this end's results at its end.
    Running,
    /// The test is over; the server's results.
    Done(Box<Results>),
    Failed(Failure),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientStep {
    Expect(State),
    Running,
    TheirResults,
    Done,
    Failed,
}

/// iperf3's client handshake, against an iperf3 server.
#[derive(Debug)]
pub struct Client {
    params: Params,
    step: ClientStep,
    inbox: Vec<u8>,
    actions: VecDeque<ClientAction>,
    deadline: Option<Micros>,
    ours: Option<Results>,
    theirs: Option<Results>,
}

impl Client {
    /// A client that has just connected: its cookie goes first.
    pub fn new(cookie: &Cookie, params: Params, now: Micros) -> Client {
        let mut client = Client {
            params,
            step: ClientStep::Expect(State::ParamExchange),
            inbox: Vec::new(),
            actions: VecDeque::new(),
            deadline: Some(now + micros(STEP_TIMEOUT)),
            ours: None,
            theirs: None,
        };
        client
            .actions
            .push_back(ClientAction::Transmit(cookie.to_vec()));
        client
    }

    pub fn poll_action(&mut self) -> Option<ClientAction> {
        self.actions.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Micros> {
        self.deadline
    }

    pub fn is_done(&self) -> bool {
        matches!(self.step, ClientStep::Done | ClientStep::Failed)
    }

    /// The streams of [`ClientAction::CreateStreams`] are open: the wait for TEST_START
    /// starts now, however long opening them took.
    pub fn streams_created(&mut self, now: Micros) {
        if self.step == ClientStep::Expect(State::TestStart) {
            self.deadline = Some(now + micros(STEP_TIMEOUT));
        }
    }

    /// The test is over on this end: TEST_END, then the results exchange.
    pub fn test_done(&mut self, now: Micros, ours: Results) {
        if self.step != ClientStep::Running {
            return;
        }
        self.ours = Some(ours);
        self.actions
            .push_back(ClientAction::Transmit(vec![State::TestEnd.byte()]));
        self.expect(State::ExchangeResults, now);
        self.run(now);
    }

    pub fn handle_timeout(&mut self, now: Micros) {
        if self.is_done() || self.deadline.is_none_or(|d| now < d) {
            return;
        }
        let failure = match self.step {
            ClientStep::Expect(want) => self.pending_byte(want).unwrap_or_else(|| {
                Failure::NotIperf3(format!("no {want:?} within {} s", STEP_TIMEOUT.as_secs()))
            }),
            _ => Failure::NotIperf3(format!(
                "reading its results: none within {} s",
                STEP_TIMEOUT.as_secs()
            )),
        };
        self.fail(failure);
    }

    pub fn handle_eof(&mut self, _now: Micros) {
        if self.is_done() {
            return;
        }
        let failure = match self.step {
            ClientStep::Expect(want) => self.pending_byte(want).unwrap_or_else(|| {
                Failure::NotIperf3(format!(
                    "it closed the connection where iperf3 sends {want:?}"
                ))
            }),
            _ => Failure::NotIperf3("it closed the connection where iperf3 sends results".into()),
        };
        self.fail(failure);
    }

    pub fn handle_input(&mut self, now: Micros, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
        self.run(now);
    }

    fn expect(&mut self, state: State, now: Micros) {
        self.step = ClientStep::Expect(state);
        self.deadline = Some(now + micros(STEP_TIMEOUT));
    }

    fn fail(&mut self, failure: Failure) {
        self.step = ClientStep::Failed;
        self.deadline = None;
        self.actions.push_back(ClientAction::Failed(failure));
    }

    /// An unknown byte that waited for more: what it was.
    fn pending_byte(&self, want: State) -> Option<Failure> {
        let byte = *self.inbox.first()?;
        Some(Failure::NotIperf3(format!(
            "byte {byte:#04x} where {want:?} was due"
        )))
    }

    fn step(&mut self, now: Micros) -> Result<bool, Failure> {
        match self.step {
            ClientStep::Expect(want) => {
                let Some(&byte) = self.inbox.first() else {
                    return Ok(false);
                };
                match State::from_byte(byte) {
                    Some(state) if state == want => {
                        self.inbox.remove(0);
                    }
                    Some(State::AccessDenied) => return Err(Failure::Busy),
                    Some(State::ServerError) => {
                        // iperf3 follows SERVER_ERROR with its i_errno and errno, 4 bytes each.
                        let Some(codes) = self.inbox.get(1..9) else {
                            return Ok(false);
                        };
                        return Err(Failure::ServerError {
                            code: i32::from_be_bytes(codes[..4].try_into().expect("4 bytes")),
                            errno: i32::from_be_bytes(codes[4..].try_into().expect("4 bytes")),
                        });
                    }
                    Some(State::ServerTerminate) => return Err(Failure::Terminated),
                    Some(other) => {
                        return Err(Failure::NotIperf3(format!(
                            "{other:?} where {want:?} was due"
                        )))
                    }
                    // A tcplab server says its hello (of any version) as soon as it is
                    // connected.
                    None => {
                        return match protocol::check_hello(&self.inbox) {
                            Ok(None) => Ok(false),
                            Ok(Some(_)) | Err(ProtocolError::Version { .. }) => {
                                Err(Failure::TcplabServer)
                            }
                            Err(_) => Err(Failure::NotIperf3(format!(
                                "byte {byte:#04x} where {want:?} was due"
                            ))),
                        }
                    }
                }
                match want {
                    State::ParamExchange => {
                        let frame = wire::json_frame(&self.params)
                            .map_err(|e| Failure::NotIperf3(e.to_string()))?;
                        self.actions.push_back(ClientAction::Transmit(frame));
                        self.expect(State::CreateStreams, now);
                    }
                    State::CreateStreams => {
                        self.actions.push_back(ClientAction::CreateStreams);
                        self.expect(State::TestStart, now);
                    }
                    State::TestStart => self.expect(State::TestRunning, now),
                    State::TestRunning => {
                        self.step = ClientStep::Running;
                        // The test takes what it takes: the client ends it.
                        self.deadline = None;
                        self.actions.push_back(ClientAction::Running);
                    }
                    State::ExchangeResults => {
                        let ours = self.ours.take().unwrap_or_default();
                        let frame = wire::json_frame(&ours)
                            .map_err(|e| Failure::NotIperf3(e.to_string()))?;
                        self.actions.push_back(ClientAction::Transmit(frame));
                        self.step = ClientStep::TheirResults;
                        self.deadline = Some(now + micros(STEP_TIMEOUT));
                    }
                    State::DisplayResults => {
                        self.actions
                            .push_back(ClientAction::Transmit(vec![State::IperfDone.byte()]));
                        let theirs = self.theirs.take().unwrap_or_default();
                        self.actions.push_back(ClientAction::Done(Box::new(theirs)));
                        self.step = ClientStep::Done;
                        self.deadline = None;
                    }
                    _ => unreachable!("the client expects no {want:?}"),
                }
                Ok(true)
            }
            ClientStep::TheirResults => match wire::take_json::<Results>(&mut self.inbox) {
                Ok(None) => Ok(false),
                Ok(Some(theirs)) => {
                    self.theirs = Some(theirs);
                    self.expect(State::DisplayResults, now);
                    Ok(true)
                }
                Err(e) => Err(Failure::NotIperf3(format!("reading its results: {e}"))),
            },
            // Whatever comes while the test runs waits for its end.
            ClientStep::Running | ClientStep::Done | ClientStep::Failed => Ok(false),
        }
    }
}

// ----------------------------------------------------------------------------------
// The server
// ----------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub enum ServerAction {
    Transmit(Vec<u8>),
    /// The client's test as tcplab's: prepare what must exist before CREATE_STREAMS (a
    /// UDP test's socket), then call [`Server::streams_ready`].
    Prepare(Box<TestParams>),
    /// TEST_END: the client ended the test. Call [`Server::results`] with this end's.
    TestEnd,
    /// The test is over; the client's results.
    Done(Box<Results>),
    /// The test failed; one line naming the step.
    Failed(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ServerStep {
    Cookie,
    Params,
    Prepare,
    Streams,
    Running,
    Results,
    IperfDone,
    Done,
    Failed,
}

/// iperf3's server handshake, for an iperf3 client.
#[derive(Debug)]
pub struct Server {
    step: ServerStep,
    cookie: Option<Cookie>,
    inbox: Vec<u8>,
    actions: VecDeque<ServerAction>,
    deadline: Option<Micros>,
    ours: Option<Results>,
    theirs: Option<Results>,
}

impl Server {
    /// A server that has just accepted a control connection: it waits for the cookie.
    pub fn new(now: Micros) -> Server {
        Server {
            step: ServerStep::Cookie,
            cookie: None,
            inbox: Vec::new(),
            actions: VecDeque::new(),
            deadline: Some(now + micros(STEP_TIMEOUT)),
            ours: None,
            theirs: None,
        }
    }

    pub fn poll_action(&mut self) -> Option<ServerAction> {
        self.actions.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Micros> {
        self.deadline
    }

    pub fn is_done(&self) -> bool {
        matches!(self.step, ServerStep::Done | ServerStep::Failed)
    }

    /// The test's cookie, once the client has sent it.
    pub fn cookie(&self) -> Option<&Cookie> {
        self.cookie.as_ref()
    }

    /// Whether a data connection's first [`COOKIE_LEN`] bytes are this test's cookie.
    pub fn is_our_stream(&self, cookie: &[u8]) -> bool {
        self.cookie.as_ref().is_some_and(|c| c[..] == *cookie)
    }

    /// What iperf3's server says to another client's connection while a test runs.
    pub fn busy() -> Vec<u8> {
        vec![State::AccessDenied.byte()]
    }

    /// Ready for the streams: CREATE_STREAMS.
    pub fn streams_ready(&mut self, _now: Micros) {
        if self.step != ServerStep::Prepare {
            return;
        }
        self.transmit_state(State::CreateStreams);
        self.step = ServerStep::Streams;
        self.deadline = None;
    }

    /// All streams are open: TEST_START, TEST_RUNNING.
    pub fn streams_open(&mut self, _now: Micros) {
        if self.step != ServerStep::Streams {
            return;
        }
        self.transmit_state(State::TestStart);
        self.transmit_state(State::TestRunning);
        self.step = ServerStep::Running;
    }

    /// This end's results, for the exchange after TEST_END.
    pub fn results(&mut self, now: Micros, ours: Results) {
        self.ours = Some(ours);
        self.run(now);
    }

    pub fn handle_timeout(&mut self, now: Micros) {
        if self.is_done() || self.deadline.is_none_or(|d| now < d) {
            return;
        }
        let s = STEP_TIMEOUT.as_secs();
        match self.step {
            ServerStep::Cookie => self.fail(format!(
                "reading the cookie (not an iperf3 client?): none within {s} s"
            )),
            ServerStep::Params => self.fail(format!("reading the parameters: none within {s} s")),
            ServerStep::Results => {
                self.fail(format!("reading the client's results: none within {s} s"))
            }
            // IPERF_DONE, or the client just closing, or nothing: the test is over.
            ServerStep::IperfDone => self.done(),
            _ => {}
        }
    }

    pub fn handle_eof(&mut self, now: Micros) {
        let closed = "the client closed the connection";
        match self.step {
            ServerStep::Cookie => self.fail(format!(
                "reading the cookie (not an iperf3 client?): {closed}"
            )),
            ServerStep::Params => self.fail(format!("reading the parameters: {closed}")),
            ServerStep::Prepare | ServerStep::Streams => self.fail(format!("streams: {closed}")),
            ServerStep::Running => self.fail(format!("waiting for TEST_END: {closed}")),
            ServerStep::Results => self.fail(format!("reading the client's results: {closed}")),
            ServerStep::IperfDone => {
                self.run(now);
                if !self.is_done() {
                    self.done()
                }
            }
            ServerStep::Done | ServerStep::Failed => {}
        }
    }

    pub fn handle_input(&mut self, now: Micros, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
        self.run(now);
    }

    fn transmit_state(&mut self, state: State) {
        self.actions
            .push_back(ServerAction::Transmit(vec![state.byte()]));
    }

    fn fail(&mut self, why: String) {
        self.step = ServerStep::Failed;
        self.deadline = None;
        self.actions.push_back(ServerAction::Failed(why));
    }

    fn done(&mut self) {
        self.step = ServerStep::Done;
        self.deadline = None;
        let theirs = self.theirs.take().unwrap_or_default();
        self.actions.push_back(ServerAction::Done(Box::new(theirs)));
    }

    fn step(&mut self, now: Micros) -> Result<bool, String> {
        match self.step {
            ServerStep::Cookie => {
                if self.inbox.len() < COOKIE_LEN {
                    return Ok(false);
                }
                let cookie: Cookie = self.inbox[..COOKIE_LEN].try_into().expect("37 bytes");
                self.inbox.drain(..COOKIE_LEN);
                self.cookie = Some(cookie);
                self.transmit_state(State::ParamExchange);
                self.step = ServerStep::Params;
                self.deadline = Some(now + micros(STEP_TIMEOUT));
                Ok(true)
            }
            ServerStep::Params => {
                let asked: Params = match wire::take_json(&mut self.inbox) {
                    Ok(Some(asked)) => asked,
                    Ok(None) => return Ok(false),
                    Err(e) => return Err(format!("reading the parameters: {e}")),
                };
                // A test we cannot serve is closed: iperf3's client then says the control
                // socket closed unexpectedly, and our log says why.
                let params = from_iperf3(&asked)?;
                self.step = ServerStep::Prepare;
                self.deadline = None;
                self.actions
                    .push_back(ServerAction::Prepare(Box::new(params)));
                Ok(true)
            }
            ServerStep::Prepare | ServerStep::Streams => Ok(false),
            ServerStep::Running => {
                let Some(&byte) = self.inbox.first() else {
                    return Ok(false);
                };
                self.inbox.remove(0);
                match State::from_byte(byte) {
                    Some(State::TestEnd) => {}
                    other => return Err(format!("{other:?} where TEST_END was due")),
                }
                self.transmit_state(State::ExchangeResults);
                self.actions.push_back(ServerAction::TestEnd);
                self.step = ServerStep::Results;
                self.deadline = Some(now + micros(STEP_TIMEOUT));
                Ok(true)
            }
            ServerStep::Results => {
                if self.theirs.is_none() {
                    match wire::take_json::<Results>(&mut self.inbox) {
                        Ok(Some(theirs)) => self.theirs = Some(theirs),
                        Ok(None) => return Ok(false),
                        Err(e) => return Err(format!("reading the client's results: {e}")),
                    }
                }
                let Some(ours) = self.ours.take() else {
                    return Ok(false);
                };
                let frame =
                    wire::json_frame(&ours).map_err(|e| format!("sending our results: {e}"))?;
                self.actions.push_back(ServerAction::Transmit(frame));
                self.transmit_state(State::DisplayResults);
                self.step = ServerStep::IperfDone;
                self.deadline = Some(now + micros(STEP_TIMEOUT));
                Ok(true)
            }
            ServerStep::IperfDone => {
                if self.inbox.is_empty() {
                    return Ok(false);
                }
                self.inbox.clear();
                self.done();
                Ok(true)
            }
            ServerStep::Done | ServerStep::Failed => Ok(false),
        }
    }
}

/// An iperf3 client's parameters as tcplab's. What we cannot serve is refused by name.
pub fn from_iperf3(asked: &Params) -> Result<TestParams, String> {
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

impl Steps for Client {
    type Failure = Failure;

    fn ended(&self) -> bool {
        self.is_done()
    }

    fn advance(&mut self, now: Micros) -> Result<bool, Failure> {
        self.step(now)
    }

    fn end(&mut self, failure: Failure) {
        self.fail(failure)
    }
}

impl Steps for Server {
    type Failure = String;

    fn ended(&self) -> bool {
        self.is_done()
    }

    fn advance(&mut self, now: Micros) -> Result<bool, String> {
        self.step(now)
    }

    fn end(&mut self, failure: String) {
        self.fail(failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iperf3::wire::Params;

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
