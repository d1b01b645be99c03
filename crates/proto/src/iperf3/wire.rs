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
pub const MAX_JSON: u32 = 1 << 20;

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

/// The datagram that opens a UDP stream: iperf3 writes the integer 0x36373839 in host
/// order, "9876" on the little-endian machines it mostly runs on.
pub const UDP_CONNECT: [u8; 4] = *b"9876";

/// The server's answer, as iperf3's server writes it: 0x39383736 in host order.
pub const UDP_CONNECT_REPLY: [u8; 4] = 0x3938_3736u32.to_ne_bytes();

/// Whether a datagram is [`UDP_CONNECT`] (or old versions' 123456789), in either byte order.
pub fn is_udp_connect(datagram: &[u8]) -> bool {
    is_integer_of(datagram, &[0x3637_3839, 123_456_789])
}

/// Whether a datagram is the server's answer to [`UDP_CONNECT`]: 0x39383736 (or old
/// versions' 987654321), in either byte order.
pub fn is_udp_connect_reply(datagram: &[u8]) -> bool {
    is_integer_of(datagram, &[0x3938_3736, 987_654_321])
}

/// Whether a datagram is exactly one of `values` as a 32-bit integer in either byte order.
fn is_integer_of(datagram: &[u8], values: &[u32]) -> bool {
    let Ok(bytes) = <[u8; 4]>::try_from(datagram) else {
        return false;
    };
    values
        .iter()
        .any(|&v| bytes == v.to_be_bytes() || bytes == v.to_le_bytes())
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
    w.write_all(&json_frame(value)?)
}

/// A JSON message as it travels.
pub fn json_frame(value: &impl Serialize) -> io::Result<Vec<u8>> {
    let text = serde_json::to_vec(value)?;
    let mut frame = Vec::with_capacity(4 + text.len());
    frame.extend_from_slice(&(text.len() as u32).to_be_bytes());
    frame.extend_from_slice(&text);
    Ok(frame)
}

/// One whole JSON message from the front of `buf`, taken off it: `Ok(None)` until all
/// its bytes are there. Errors as [`read_json`]'s, `InvalidData`.
pub fn take_json<T: for<'de> Deserialize<'de>>(buf: &mut Vec<u8>) -> io::Result<Option<T>> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(len.try_into().expect("4 bytes"));
    if len > MAX_JSON {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a {len}-byte JSON message (at most {MAX_JSON})"),
        ));
    }
    let end = 4 + len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let value = serde_json::from_slice(&buf[4..end])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
    buf.drain(..end);
    value.map(Some)
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
    #[serde(default, skip_serializing_if = "std::ops::Not::not", with = "flag")]
    pub tcp: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not", with = "flag")]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What iperf3 3.12's server printed (`-d`, "get_results") for the results of
    /// `iperf3 -c 127.0.0.1 -t 1 -P 2 -w 256K -l 64K -C cubic`: a receiver's, with
    /// retransmits unknown (−1 printed as 2⁶⁴−1).
    const RECEIVER_RESULTS: &str = r#"{
        "cpu_util_total": 68.407821312449428, "cpu_util_user": 0.758166109835558,
        "cpu_util_system": 67.649555679627554, "sender_has_retransmits": 18446744073709551615,
        "congestion_used": "cubic",
        "streams": [{"id": 1, "bytes": 1160051411, "retransmits": 18446744073709551615,
                     "jitter": 0, "errors": 0, "packets": 0, "start_time": 0, "end_time": 1.00478},
                    {"id": 3, "bytes": 1096612775, "retransmits": 18446744073709551615,
                     "jitter": 0, "errors": 0, "packets": 0, "start_time": 0, "end_time": 1.004789}]
    }"#;

    /// The parameters iperf3 3.12's client sent for that test (`-d`, "send_parameters").
    const CLIENT_PARAMS: &str = r#"{"tcp": true, "omit": 0, "time": 1, "num": 0,
        "blockcount": 0, "parallel": 2, "window": 262144, "len": 65536,
        "pacing_timer": 1000, "congestion": "cubic", "client_version": "3.12"}"#;

    #[test]
    fn states_are_iperf3s_signed_bytes() {
        assert_eq!(State::ParamExchange.byte(), 9);
        assert_eq!(State::CreateStreams.byte(), 10);
        assert_eq!(State::ExchangeResults.byte(), 13);
        assert_eq!(State::IperfDone.byte(), 16);
        assert_eq!(State::AccessDenied.byte(), 0xff);
        assert_eq!(State::ServerError.byte(), 0xfe);
        for byte in 0..=255u8 {
            if let Some(state) = State::from_byte(byte) {
                assert_eq!(state.byte(), byte);
            }
        }
        assert_eq!(State::from_byte(3), None);
    }

    #[test]
    fn cookie_is_36_characters_of_iperf3s_alphabet_and_a_nul() {
        let cookie = new_cookie();
        assert_eq!(cookie[36], 0);
        assert!(cookie[..36]
            .iter()
            .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(c)));
        assert_ne!(new_cookie(), cookie);
    }

    #[test]
    fn real_receiver_results_parse_with_unknown_retransmits() {
        let results: Results = serde_json::from_str(RECEIVER_RESULTS).unwrap();
        assert_eq!(results.sender_has_retransmits, None);
        assert_eq!(results.congestion_used.as_deref(), Some("cubic"));
        assert_eq!(results.streams.len(), 2);
        assert_eq!(results.streams[1].id, 3);
        assert_eq!(results.streams[1].bytes, 1_096_612_775);
        assert_eq!(results.streams[1].retransmits, None);
        assert_eq!(results.streams[1].end_time, 1.004789);
    }

    #[test]
    fn unknown_counts_are_written_as_minus_one() {
        let results = Results {
            sender_has_retransmits: None,
            streams: vec![StreamResult {
                id: 1,
                retransmits: Some(7),
                ..StreamResult::default()
            }],
            ..Results::default()
        };
        let json: serde_json::Value = serde_json::to_value(&results).unwrap();
        assert_eq!(json["sender_has_retransmits"], -1);
        assert_eq!(json["streams"][0]["retransmits"], 7);
    }

    #[test]
    fn real_client_params_round_trip() {
        let params: Params = serde_json::from_str(CLIENT_PARAMS).unwrap();
        assert!(params.tcp && !params.udp && !params.reverse);
        assert_eq!(params.window, Some(262_144));
        assert_eq!(params.congestion.as_deref(), Some("cubic"));
        let again: serde_json::Value = serde_json::to_value(&params).unwrap();
        let original: serde_json::Value = serde_json::from_str(CLIENT_PARAMS).unwrap();
        assert_eq!(again, original);
    }

    #[test]
    fn old_iperf3_flags_as_numbers_are_read() {
        let params: Params =
            serde_json::from_str(r#"{"tcp": 1, "reverse": 1, "parallel": 1, "len": 8}"#).unwrap();
        assert!(params.reverse);
        assert!(!params.nodelay);
    }

    #[test]
    fn udp_connect_replies_of_every_version_and_byte_order_are_known() {
        // iperf3 3.12 on x86 answers "6789" (0x39383736 little-endian).
        assert!(is_udp_connect_reply(b"6789"));
        assert!(is_udp_connect_reply(b"9876"));
        assert!(is_udp_connect_reply(&987_654_321u32.to_le_bytes()));
        assert!(!is_udp_connect_reply(b"678"));
        assert!(!is_udp_connect_reply(b"abcd"));
    }

    #[test]
    fn json_frames_carry_a_big_endian_length() {
        let mut frame = Vec::new();
        write_json(&mut frame, &serde_json::json!({"a": 1})).unwrap();
        assert_eq!(&frame[..4], &[0, 0, 0, 7]);
        assert_eq!(&frame[4..], br#"{"a":1}"#);
        let back: serde_json::Value = read_json(&mut frame.as_slice()).unwrap();
        assert_eq!(back["a"], 1);
    }

    #[test]
    fn oversized_or_garbled_json_is_invalid_data() {
        let huge = (MAX_JSON + 1).to_be_bytes();
        let err = read_json::<Params>(&mut huge.as_slice()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let garbled = [0, 0, 0, 3, b'x', b'y', b'z'];
        let err = read_json::<Params>(&mut garbled.as_slice()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
