//! The control protocol between `tcplab run` and `tcplab serve`.
//!
//! Every connection starts with an 8-byte hello: the magic `TCPLAB`, a kind byte
//! (`C` control, `D` data) and the protocol version. On a control connection the server
//! says its hello at once, and the client's is padded to [`CONTROL_HELLO_LEN`]: each end
//! can then name a peer of another protocol at once, a tcplab one or an iperf3 one. A
//! control connection then carries
//! length-delimited JSON messages (u32 big-endian length, at most [`MAX_MESSAGE`] bytes
//! towards a client, at most the server's `--max-message` towards the server); a data
//! connection carries the test's cookie and its flow id, then raw payload.
//!
//! A test, in order:
//! 1. server → `Challenge`, client → `Auth`, server → `Welcome` (see [`crate::auth`]),
//!    which carries the server's clock: the Auth/Welcome round trip is a first clock
//!    exchange, and on one clock (the same boot, no offset) the only one;
//! 2. otherwise client → `TimeProbe` × n, server → `TimeReply` (clock offset, see
//!    `tcplab_analysis::clock`);
//! 3. client → `Start{params}`, server → `Accepted{data_port, cookie}` or `Refused`;
//! 4. client opens the data connections to `data_port`, server → `Ready` when all arrived;
//! 5. client → `Go{client_t0}`: both ends start their flows; each end's report-interval records
//!    travel as they happen (`Interval`), so both ends' figures reach the client live;
//! 6. server → `SideDone{report}`, then `Samples` chunks (deflated, `SamplesDeflated`,
//!    where the client's `Start` asked: a twentieth of the bytes, one round trip at the
//!    initial window where the JSON took several) and `SamplesEnd`; client → `Bye`.
//!
//! Until `Go` the server may answer anything with `Refused{reason}` and close: the reason
//! names the limit or the missing key.

use std::io::{self, Read, Write};

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};
use tcplab_record::{
    BufferSize, ClockOffset, CpuUse, HostMeta, LimitShares, RttStats, SampleRecord, TestParams,
    Transaction, UdpInterval, UdpStats,
};

pub const MAGIC: &[u8; 6] = b"TCPLAB";
/// 2: authentication before anything else. 3: the server's hello first, the client's
/// control hello padded. 4: `Go` carries the client's start.
pub const VERSION: u8 = 4;
/// A client's control hello is as long as iperf3's cookie, zeros after the 8 bytes: an
/// iperf3 server answers it at once with a state byte, which the client names, where it
/// would wait for the rest of its cookie.
pub const CONTROL_HELLO_LEN: usize = 37;
/// Largest control message a client accepts; anything longer is hostile or broken. The
/// server reads far smaller messages (its `--max-message`).
pub const MAX_MESSAGE: usize = 4 << 20;
/// Samples per `Samples` message, to stay well below [`MAX_MESSAGE`].
pub const SAMPLES_PER_CHUNK: usize = 1000;
pub const COOKIE_LEN: usize = 16;

/// What a connection is for, from its hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnKind {
    Control,
    Data,
}

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("not a tcplab peer (hello was {0:02x?})")]
    BadMagic(Vec<u8>),
    #[error("peer speaks tcplab protocol version {peer}, this is version {VERSION}")]
    Version { peer: u8 },
    #[error("control message of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge { len: usize, limit: usize },
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("peer closed the control connection")]
    Closed,
    /// A handshake step out of time (or a place in the handshake lost): the reason.
    #[error("{0}")]
    Deadline(String),
}

/// Why a server did not admit a client.
#[derive(Debug)]
pub enum Rejected {
    /// A reason for the client, sent to it as `Refused`.
    Refused(String),
    /// The connection broke or spoke nonsense: nothing to tell it.
    Broken(ProtocolError),
}

impl From<ProtocolError> for Rejected {
    /// A message over the size limit and a handshake out of time are limits the client
    /// ran into: it hears which.
    fn from(e: ProtocolError) -> Self {
        match e {
            ProtocolError::TooLarge { len, limit } => Rejected::Refused(format!(
                "control message of {len} bytes exceeds --max-message {}",
                tcplab_record::units::format_size(limit as u64)
            )),
            ProtocolError::Deadline(reason) => Rejected::Refused(reason),
            ProtocolError::Io(e) if e.kind() == io::ErrorKind::TimedOut => {
                Rejected::Refused(e.to_string())
            }
            e => Rejected::Broken(e),
        }
    }
}

pub fn write_hello(w: &mut impl Write, kind: ConnKind) -> io::Result<()> {
    let mut hello = [0u8; 8];
    hello[..6].copy_from_slice(MAGIC);
    hello[6] = match kind {
        ConnKind::Control => b'C',
        ConnKind::Data => b'D',
    };
    hello[7] = VERSION;
    w.write_all(&hello)
}

/// A client's control hello, padded.
pub fn client_hello() -> [u8; CONTROL_HELLO_LEN] {
    let mut hello = [0u8; CONTROL_HELLO_LEN];
    write_hello(&mut &mut hello[..], ConnKind::Control).expect("37 bytes hold 8");
    hello
}

/// Reads a hello. The magic is read byte by byte: a peer of another protocol that
/// answers one byte and waits (an iperf3 server's state) is named at once.
pub fn read_hello(r: &mut impl Read) -> Result<ConnKind, ProtocolError> {
    let mut hello = [0u8; 8];
    for (i, expected) in MAGIC.iter().enumerate() {
        r.read_exact(&mut hello[i..=i]).map_err(closed_on_eof)?;
        if hello[i] != *expected {
            return Err(ProtocolError::BadMagic(hello[..=i].to_vec()));
        }
    }
    r.read_exact(&mut hello[MAGIC.len()..])
        .map_err(closed_on_eof)?;
    parse_hello(&hello)
}

/// Reads what a server reads first: a client's control hello with its padding.
pub fn read_client_hello(r: &mut impl Read) -> Result<(), ProtocolError> {
    match read_hello(r)? {
        ConnKind::Control => {
            let mut padding = [0u8; CONTROL_HELLO_LEN - 8];
            r.read_exact(&mut padding).map_err(closed_on_eof)
        }
        ConnKind::Data => Err(ProtocolError::Malformed(
            "data connection to the control port".into(),
        )),
    }
}

/// What a hello's first bytes say so far: `Ok(None)` until all 8 are there. A wrong
/// byte of the magic is named as soon as it arrives, with the bytes up to it.
pub fn check_hello(bytes: &[u8]) -> Result<Option<ConnKind>, ProtocolError> {
    for (i, expected) in MAGIC.iter().enumerate() {
        match bytes.get(i) {
            None => return Ok(None),
            Some(b) if b != expected => return Err(ProtocolError::BadMagic(bytes[..=i].to_vec())),
            Some(_) => {}
        }
    }
    match bytes.get(..8) {
        Some(hello) => parse_hello(hello.try_into().expect("8 bytes")).map(Some),
        None => Ok(None),
    }
}

/// The cookie and flow id of a data connection's hello and introduction
/// ([`DATA_INTRO_LEN`] bytes); `None` for anything else.
pub fn parse_data_intro(intro: &[u8]) -> Option<([u8; COOKIE_LEN], u32)> {
    if intro.len() != DATA_INTRO_LEN || check_hello(intro).ok()?? != ConnKind::Data {
        return None;
    }
    let cookie = intro[8..8 + COOKIE_LEN].try_into().ok()?;
    let flow = u32::from_be_bytes(intro[8 + COOKIE_LEN..].try_into().ok()?);
    Some((cookie, flow))
}

fn parse_hello(hello: &[u8; 8]) -> Result<ConnKind, ProtocolError> {
    if &hello[..6] != MAGIC {
        return Err(ProtocolError::BadMagic(hello.to_vec()));
    }
    let kind = match hello[6] {
        b'C' => ConnKind::Control,
        b'D' => ConnKind::Data,
        _ => return Err(ProtocolError::BadMagic(hello.to_vec())),
    };
    if hello[7] != VERSION {
        return Err(ProtocolError::Version { peer: hello[7] });
    }
    Ok(kind)
}

/// Bytes of a data connection's hello and introduction.
pub const DATA_INTRO_LEN: usize = 8 + COOKIE_LEN + 4;

/// The first bytes of a data connection: its hello, the test's cookie and the flow id,
/// for one write (in two, Nagle would hold the second for the first's ACK: a round
/// trip before the server has its data connections).
pub fn data_intro(cookie: &[u8; COOKIE_LEN], flow: u32) -> [u8; DATA_INTRO_LEN] {
    let mut intro = [0u8; DATA_INTRO_LEN];
    write_hello(&mut &mut intro[..8], ConnKind::Data).expect("8 bytes hold the hello");
    intro[8..8 + COOKIE_LEN].copy_from_slice(cookie);
    intro[8 + COOKIE_LEN..].copy_from_slice(&flow.to_be_bytes());
    intro
}

pub fn read_data_intro(r: &mut impl Read) -> io::Result<([u8; COOKIE_LEN], u32)> {
    let mut intro = [0u8; COOKIE_LEN + 4];
    r.read_exact(&mut intro)?;
    let mut cookie = [0u8; COOKIE_LEN];
    cookie.copy_from_slice(&intro[..COOKIE_LEN]);
    let flow = u32::from_be_bytes(intro[COOKIE_LEN..].try_into().expect("4 bytes"));
    Ok((cookie, flow))
}

pub fn send(w: &mut impl Write, msg: &Message) -> Result<(), ProtocolError> {
    w.write_all(&frame(msg)?)?;
    Ok(())
}

/// A message as it travels: its length (u32 big-endian), then its JSON.
pub fn frame(msg: &Message) -> Result<Vec<u8>, ProtocolError> {
    let body = serde_json::to_vec(msg).map_err(|e| ProtocolError::Malformed(e.to_string()))?;
    if body.len() > MAX_MESSAGE {
        return Err(ProtocolError::TooLarge {
            len: body.len(),
            limit: MAX_MESSAGE,
        });
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// One whole message from the front of `buf`, taken off it: `Ok(None)` until all its
/// bytes are there. A length over `limit` is refused before its body arrives.
pub fn take_frame(buf: &mut Vec<u8>, limit: usize) -> Result<Option<Message>, ProtocolError> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
    if len > limit {
        return Err(ProtocolError::TooLarge { len, limit });
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let message = serde_json::from_slice(&buf[4..4 + len])
        .map_err(|e| ProtocolError::Malformed(e.to_string()));
    buf.drain(..4 + len);
    message.map(Some)
}

/// Reads one message of at most `limit` bytes; a longer one is refused unread.
pub fn recv(r: &mut impl Read, limit: usize) -> Result<Message, ProtocolError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(closed_on_eof)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > limit {
        return Err(ProtocolError::TooLarge { len, limit });
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(closed_on_eof)?;
    serde_json::from_slice(&body).map_err(|e| ProtocolError::Malformed(e.to_string()))
}

fn closed_on_eof(e: io::Error) -> ProtocolError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        ProtocolError::Closed
    } else {
        ProtocolError::Io(e)
    }
}

/// Every control message, both directions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Server → client after the hellos: hex of a fresh 32-byte nonce.
    Challenge {
        nonce: String,
    },
    /// Client → server: hex of the client's nonce and, when it has a key, of its proof.
    Auth {
        nonce: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proof: Option<String>,
    },
    /// Server → client: authenticated; with a key, hex of the server's own proof.
    Welcome {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proof: Option<String>,
        /// The server's clock around this answer (absent from servers before it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        clock: Option<ServerClock>,
    },
    TimeProbe {
        client_send_us: i64,
    },
    TimeReply {
        client_send_us: i64,
        server_recv_us: i64,
        server_send_us: i64,
    },
    Start {
        params: TestParams,
        /// The client's clocks as the server needs them for one-way delays.
        #[serde(default)]
        clock: ClientClock,
        /// The client reads the server's samples as `SamplesDeflated` (a server before it
        /// sends `Samples`, which the client reads too).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        deflated_samples: bool,
    },
    Accepted {
        data_port: u16,
        /// Hex of the cookie every data connection must present.
        cookie: String,
        meta: HostMeta,
        /// A UDP test's ports, one per flow: the client sends each a hello datagram
        /// (magic, cookie, flow id) from its flow's socket.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        udp_ports: Vec<u16>,
        /// Where the test's round-trip probes go, when it asked for them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probe_port: Option<u16>,
    },
    Refused {
        reason: String,
    },
    Ready,
    /// The client's start on its own clock: the server knows its flows' deadline however
    /// long a lossy path held this message.
    Go {
        client_t0_us: i64,
    },
    Interval {
        records: Vec<SideInterval>,
    },
    SideDone {
        report: SideReport,
        /// Why the server ended the test before its end, when it did (a limit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cut: Option<String>,
        /// How many distinct probes the server answered, when the test had probes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probes_echoed: Option<u64>,
    },
    Samples {
        samples: Vec<SampleRecord>,
    },
    /// A `Samples` chunk's samples as deflated JSON, in hex ([`deflate_samples`]).
    SamplesDeflated {
        hex: String,
    },
    SamplesEnd,
    Bye,
}

/// The server's clock as its `Welcome` gives it: the Auth/Welcome round trip as a clock
/// exchange, and which boot the clock is of.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerClock {
    /// The server's kernel boot id.
    pub boot_id: String,
    /// When `Auth` arrived and when `Welcome` left, on the server's clock, µs.
    pub recv_us: i64,
    pub send_us: i64,
}

/// What the server needs to know of the client's clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientClock {
    /// The estimated offset (server = client + offset).
    pub offset: ClockOffset,
    /// The client's kernel boot id: the same as the server's means one clock.
    pub boot_id: String,
}

/// The hello a UDP flow's socket sends until the server has it.
pub fn udp_hello(cookie: &[u8; COOKIE_LEN], flow: u32) -> Vec<u8> {
    let mut hello = b"TLUH".to_vec();
    hello.extend_from_slice(cookie);
    hello.extend_from_slice(&flow.to_be_bytes());
    hello
}

/// The cookie and flow id of a UDP hello; `None` for anything else.
pub fn read_udp_hello(datagram: &[u8]) -> Option<([u8; COOKIE_LEN], u32)> {
    let rest = datagram.strip_prefix(b"TLUH")?;
    if rest.len() != COOKIE_LEN + 4 {
        return None;
    }
    let cookie = rest[..COOKIE_LEN].try_into().ok()?;
    let flow = u32::from_be_bytes(rest[COOKIE_LEN..].try_into().ok()?);
    Some((cookie, flow))
}

pub use tcplab_monitor::{DeadlineCount, Role};

/// One end's view of one report interval of one flow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SideInterval {
    pub flow: u32,
    pub index: u32,
    pub role: Role,
    /// The interval's bounds in this end's monotonic µs.
    pub start_us: i64,
    pub end_us: i64,
    /// Sender: bytes newly acknowledged; receiver: bytes read.
    pub bytes: u64,
    pub retransmits: u64,
    pub cwnd: u32,
    pub srtt_us: u32,
    pub limits: LimitShares,
    /// A UDP flow's datagrams (sender: `sent`; receiver: the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpInterval>,
    /// After the test's deadline: the drain of the sender's backlog.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drain: bool,
}

impl From<tcplab_monitor::Interval> for SideInterval {
    fn from(interval: tcplab_monitor::Interval) -> SideInterval {
        let tcplab_monitor::Interval {
            flow,
            index,
            role,
            start_us,
            end_us,
            bytes,
            // Each end sends the count of its role; the merge pairs them.
            acked_bytes: _,
            received_bytes: _,
            retransmits,
            cwnd,
            srtt_us,
            limits,
            drain,
        } = interval;
        SideInterval {
            flow,
            index,
            role,
            start_us,
            end_us,
            bytes,
            retransmits,
            cwnd,
            srtt_us,
            limits,
            udp: None,
            drain,
        }
    }
}

/// One end's results for one flow. Times are that end's monotonic µs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SideFlow {
    pub id: u32,
    pub role: Role,
    pub local_addr: String,
    pub peer_addr: String,
    pub cc: String,
    pub mss: u32,
    /// The buffer that matters for the role: SO_SNDBUF when sending, SO_RCVBUF when receiving.
    pub buffer: BufferSize,
    /// Bytes written (sender) or read (receiver).
    pub bytes: u64,
    pub start_us: i64,
    pub end_us: i64,
    pub retransmits: u64,
    pub samples: u64,
    /// What held a sender back, from its samples (see `tcplab_analysis::limits`).
    pub limits: LimitShares,
    /// The same from the kernel's chrono counters alone, a cross-check.
    #[serde(default)]
    pub kernel_limits: LimitShares,
    pub rtt: RttStats,
    /// Set when the flow broke before its end.
    pub error: Option<String>,
    /// A UDP flow's counts as this end knows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpStats>,
    /// A timed TCP flow's bytes when its deadline passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_deadline: Option<DeadlineCount>,
    /// A sender's bytes not acknowledged when the drain limit ended the connection.
    #[serde(default)]
    pub unacked: u64,
    /// A request/response flow's transactions, timed by the client that made them
    /// (relative to its t0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transactions: Vec<Transaction>,
}

/// One end's results for a whole test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SideReport {
    pub flows: Vec<SideFlow>,
    pub cpu: CpuUse,
}

/// Bytes as lowercase hex, as cookies, nonces and proofs travel in JSON.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `samples` as a [`Message::SamplesDeflated`]: their JSON, deflated, in hex. tcp_info
/// samples repeat their field names and change little: 300 KB of JSON took 14 KB.
pub fn deflate_samples(samples: &[SampleRecord]) -> Message {
    // Whole: serde's many small writes straight into the encoder cost 20–50 ms where
    // one takes 2.
    let json = serde_json::to_vec(samples).expect("samples serialize");
    let mut out = DeflateEncoder::new(Vec::new(), Compression::default());
    out.write_all(&json).expect("write to Vec");
    Message::SamplesDeflated {
        hex: to_hex(&out.finish().expect("write to Vec")),
    }
}

/// The samples of a [`Message::SamplesDeflated`]'s hex, inflated to at most
/// [`MAX_MESSAGE`] bytes, what a `Samples` message may hold.
pub fn inflate_samples(hex: &str) -> Result<Vec<SampleRecord>, ProtocolError> {
    let bad = |what: &str| ProtocolError::Malformed(format!("deflated samples: {what}"));
    let bytes = from_hex(hex).ok_or_else(|| bad("not hex"))?;
    let mut json = Vec::new();
    DeflateDecoder::new(&bytes[..])
        .take(MAX_MESSAGE as u64 + 1)
        .read_to_end(&mut json)
        .map_err(|e| bad(&e.to_string()))?;
    if json.len() > MAX_MESSAGE {
        return Err(bad(&format!("more than {MAX_MESSAGE} bytes inflated")));
    }
    serde_json::from_slice(&json).map_err(|e| bad(&e.to_string()))
}

/// Exactly `N` bytes from their hex.
pub fn parse_hex<const N: usize>(hex: &str) -> Result<[u8; N], ProtocolError> {
    let bad = || ProtocolError::Malformed(format!("expected {N} bytes of hex, got '{hex}'"));
    if hex.len() != N * 2 {
        return Err(bad());
    }
    from_hex(hex)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)
}

/// The bytes of `hex` (two digits each); `None` for anything else.
fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_record::Host;

    #[test]
    fn hello_round_trip_and_rejects() {
        let mut buf = Vec::new();
        write_hello(&mut buf, ConnKind::Data).unwrap();
        assert_eq!(&buf, b"TCPLABD\x04");
        assert_eq!(read_hello(&mut &buf[..]).unwrap(), ConnKind::Data);
        let hello = client_hello();
        assert_eq!(&hello[..8], b"TCPLABC\x04");
        assert_eq!(hello[8..], [0; 29]);
        let mut r = &hello[..];
        read_client_hello(&mut r).unwrap();
        assert!(r.is_empty());
        assert!(matches!(
            read_client_hello(&mut &hello[..36]),
            Err(ProtocolError::Closed)
        ));
        assert!(matches!(
            read_client_hello(&mut &buf[..]),
            Err(ProtocolError::Malformed(_))
        ));
        assert!(matches!(
            read_hello(&mut &b"GET / HT"[..]),
            Err(ProtocolError::BadMagic(_))
        ));
        // The first byte off the magic is the last read: an iperf3 server's one state
        // byte, then silence, is named without waiting for more.
        assert!(matches!(
            read_hello(&mut &b"TC\x09"[..]),
            Err(ProtocolError::BadMagic(b)) if b == b"TC\x09"
        ));
        assert!(matches!(
            read_hello(&mut &b"TCPLABC\x07"[..]),
            Err(ProtocolError::Version { peer: 7 })
        ));
        assert!(matches!(
            read_hello(&mut &b"TCP"[..]),
            Err(ProtocolError::Closed)
        ));
    }

    #[test]
    fn a_data_intro_is_one_buffer_of_hello_cookie_and_flow() {
        let intro = data_intro(&[7; COOKIE_LEN], 3);
        let mut r = &intro[..];
        assert_eq!(read_hello(&mut r).unwrap(), ConnKind::Data);
        assert_eq!(read_data_intro(&mut r).unwrap(), ([7; COOKIE_LEN], 3));
        assert!(r.is_empty());
    }

    #[test]
    fn message_frames_round_trip() {
        let mut buf = Vec::new();
        send(&mut buf, &Message::Go { client_t0_us: 42 }).unwrap();
        send(&mut buf, &Message::Refused { reason: "x".into() }).unwrap();
        let mut r = &buf[..];
        assert_eq!(
            recv(&mut r, MAX_MESSAGE).unwrap(),
            Message::Go { client_t0_us: 42 }
        );
        assert_eq!(
            recv(&mut r, MAX_MESSAGE).unwrap(),
            Message::Refused { reason: "x".into() }
        );
        assert!(matches!(
            recv(&mut r, MAX_MESSAGE),
            Err(ProtocolError::Closed)
        ));
    }

    #[test]
    fn oversized_and_garbage_frames_are_rejected() {
        let huge = ((MAX_MESSAGE + 1) as u32).to_be_bytes();
        assert!(matches!(
            recv(&mut &huge[..], MAX_MESSAGE),
            Err(ProtocolError::TooLarge { .. })
        ));
        // A reader's own limit, far below the protocol's, is the one that counts.
        let mut go = Vec::new();
        send(&mut go, &Message::Go { client_t0_us: 42 }).unwrap();
        let err = recv(&mut &go[..], 5).unwrap_err().to_string();
        assert!(err.contains("exceeds the limit of 5 bytes"), "{err}");
        let mut garbage = 5u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(b"{{{{{");
        assert!(matches!(
            recv(&mut &garbage[..], MAX_MESSAGE),
            Err(ProtocolError::Malformed(_))
        ));
    }

    #[test]
    fn an_oversized_message_or_a_deadline_is_a_refusal_naming_its_limit() {
        let too_large = Rejected::from(ProtocolError::TooLarge {
            len: 70_000,
            limit: 65_536,
        });
        assert!(
            matches!(&too_large, Rejected::Refused(r) if r == "control message of 70000 bytes exceeds --max-message 64 KiB"),
            "{too_large:?}"
        );
        assert!(matches!(
            Rejected::from(ProtocolError::Deadline("late".into())),
            Rejected::Refused(r) if r == "late"
        ));
        assert!(matches!(
            Rejected::from(ProtocolError::Closed),
            Rejected::Broken(_)
        ));
    }

    #[test]
    fn hello_prefixes_are_judged_byte_by_byte() {
        assert!(matches!(check_hello(b""), Ok(None)));
        assert!(matches!(check_hello(b"TCPLA"), Ok(None)));
        assert!(matches!(check_hello(b"TCPLABC"), Ok(None)));
        assert!(matches!(check_hello(b"TCX"), Err(ProtocolError::BadMagic(b)) if b == b"TCX"));
        assert!(matches!(
            check_hello(b"TCPLABC\x04rest"),
            Ok(Some(ConnKind::Control))
        ));
        assert!(matches!(
            check_hello(b"TCPLABX\x04"),
            Err(ProtocolError::BadMagic(_))
        ));
        let intro = data_intro(&[9; COOKIE_LEN], 5);
        assert_eq!(parse_data_intro(&intro), Some(([9; COOKIE_LEN], 5)));
        assert_eq!(parse_data_intro(&intro[..20]), None);
        assert_eq!(parse_data_intro(&client_hello()[..DATA_INTRO_LEN]), None);
    }

    #[test]
    fn hex_round_trip() {
        let cookie = [0xab; COOKIE_LEN];
        assert_eq!(parse_hex::<COOKIE_LEN>(&to_hex(&cookie)).unwrap(), cookie);
        assert!(parse_hex::<COOKIE_LEN>("zz").is_err());
        assert!(parse_hex::<COOKIE_LEN>(&"é".repeat(16)).is_err());
        assert!(parse_hex::<2>("abcdef").is_err());
    }

    #[test]
    fn deflated_samples_round_trip_and_are_bounded() {
        let samples: Vec<SampleRecord> = (0..1000)
            .map(|k| {
                let info = tcplab_record::tcpinfo::TcpInfo {
                    rtt: 20_000 + (k % 7) as u32,
                    bytes_acked: 1448 * k as u64,
                    ..Default::default()
                };
                SampleRecord {
                    flow: 0,
                    host: Host::Server,
                    t_us: 10_000 * k,
                    info,
                    bbr: None,
                    skmem: None,
                }
            })
            .collect();
        let Message::SamplesDeflated { hex } = deflate_samples(&samples) else {
            panic!("not deflated samples")
        };
        let json = serde_json::to_vec(&samples).unwrap().len();
        assert!(
            hex.len() * 10 < json,
            "{} hex for {json} of JSON",
            hex.len()
        );
        assert_eq!(inflate_samples(&hex).unwrap(), samples);
        // A bomb: 5 MiB of zeros deflate to a few KB and are refused past MAX_MESSAGE.
        let mut bomb = DeflateEncoder::new(Vec::new(), Compression::best());
        bomb.write_all(&vec![b' '; 5 << 20]).unwrap();
        let err = inflate_samples(&to_hex(&bomb.finish().unwrap())).unwrap_err();
        assert!(err.to_string().contains("more than"), "{err}");
        assert!(inflate_samples("0g").is_err());
        assert!(inflate_samples("abc").is_err());
    }
}
