//! iperf3's control protocol as bytes, without I/O: the cookie, the one-byte states, the
//! length-prefixed JSON of the parameters and results (iperf3 3.x, `src/iperf_api.c`).

use std::io::{self, Read, Write};

use rand::Rng;
use serde::{Deserialize, Serialize};

/// The cookie: 36 characters and a NUL, sent first on the control connection and on
/// every data connection, so the server can tell a test's streams from strangers.
pub const COOKIE_LEN: usize = 37;
pub type Cookie = [u8; COOKIE_LEN];
/// iperf3's parameter and result messages are small; anything larger is not iperf3.
const MAX_JSON: u32 = 1 << 20;

/// The states the server announces (and the client answers) on the control connection,
/// each one signed byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfStart,
    IperfDone,
    AccessDenied,
    ServerError,
}

impl State {
    pub fn byte(self) -> u8 {
        let value: i8 = match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfStart => 15,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
        };
        value as u8
    }

    pub fn from_byte(byte: u8) -> Option<State> {
        [
            State::TestStart,
            State::TestRunning,
            State::TestEnd,
            State::ParamExchange,
            State::CreateStreams,
            State::ServerTerminate,
            State::ClientTerminate,
            State::ExchangeResults,
            State::DisplayResults,
            State::IperfStart,
            State::IperfDone,
            State::AccessDenied,
            State::ServerError,
        ]
        .into_iter()
        .find(|s| s.byte() == byte)
    }
}

/// A fresh cookie from iperf3's alphabet.
pub fn new_cookie() -> Cookie {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut rng = rand::rng();
    let mut cookie = [0u8; COOKIE_LEN];
    for c in &mut cookie[..COOKIE_LEN - 1] {
        *c = ALPHABET[rng.random_range(0..ALPHABET.len())];
    }
    cookie
}

pub fn read_state(r: &mut impl Read) -> io::Result<u8> {
    let mut byte = [0u8; 1];
    r.read_exact(&mut byte)?;
    Ok(byte[0])
}

pub fn write_state(w: &mut impl Write, state: State) -> io::Result<()> {
    w.write_all(&[state.byte()])
}

/// One JSON message: a 4-byte big-endian length, then the JSON text.
pub fn write_json(w: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    let text = serde_json::to_vec(value)?;
    let mut frame = Vec::with_capacity(4 + text.len());
    frame.extend_from_slice(&(text.len() as u32).to_be_bytes());
    frame.extend_from_slice(&text);
    w.write_all(&frame)
}

pub fn read_json<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len > MAX_JSON {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a {len}-byte JSON message (at most {MAX_JSON})"),
        ));
    }
    let mut text = vec![0u8; len as usize];
    r.read_exact(&mut text)?;
    serde_json::from_slice(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The test parameters the client sends in PARAM_EXCHANGE (iperf3's `send_parameters`).
/// Fields iperf3 omits when unset are optional here too.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
    #[serde(default)]
    pub omit: u32,
    /// Seconds; 0 when `num` sets the end.
    #[serde(default)]
    pub time: u32,
    /// Bytes to send over all streams together; 0 = timed.
    #[serde(default)]
    pub num: u64,
    #[serde(default)]
    pub blockcount: u64,
    #[serde(rename = "MSS", default, skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not", with = "flag")]
    pub nodelay: bool,
    pub parallel: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not", with = "flag")]
    pub reverse: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not", with = "flag")]
    pub bidirectional: bool,
    /// SO_SNDBUF and SO_RCVBUF on every data socket, both ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// Bytes per write (TCP) or datagram (UDP), and per read.
    pub len: u32,
    /// Bits per second: UDP's rate, TCP's application pacing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<u64>,
    /// SO_MAX_PACING_RATE, bits per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fqrate: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_timer: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not", with = "flag")]
    pub zerocopy: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not", with = "flag")]
    pub udp_counters_64bit: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
}

/// iperf3 sends its flags as JSON `true`, older versions as `1`.
mod flag {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(*value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        Ok(match serde_json::Value::deserialize(d)? {
            serde_json::Value::Bool(b) => b,
            serde_json::Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
            _ => false,
        })
    }
}

/// One end's results, exchanged after TEST_END (iperf3's `send_results`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// 1 when this end sent and knows its retransmits, 0 when it sent without, −1
    /// (printed by iperf3 as 2⁶⁴−1) when it received.
    #[serde(with = "count")]
    pub sender_has_retransmits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResult>,
}

/// One stream's results. Times are seconds since this end's TEST_START.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    pub id: u32,
    pub bytes: u64,
    #[serde(with = "count")]
    pub retransmits: Option<u64>,
    /// UDP: the receiver's interarrival jitter, seconds.
    #[serde(default)]
    pub jitter: f64,
    /// UDP: datagrams lost (receiver).
    #[serde(default)]
    pub errors: i64,
    /// UDP: datagrams sent or received.
    #[serde(default)]
    pub packets: i64,
    pub start_time: f64,
    pub end_time: f64,
}

/// A count iperf3 may not know: −1, which iperf3 prints through an unsigned conversion
/// as 2⁶⁴−1.
mod count {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(n) => s.serialize_u64(*n),
            None => s.serialize_i64(-1),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let number = serde_json::Number::deserialize(d)?;
        Ok(number.as_u64().filter(|&n| n != u64::MAX))
    }
}
