//! The kernel's sock_diag protocol for TCP sockets (NETLINK_SOCK_DIAG, inet_diag;
//! include/uapi/linux/inet_diag.h and sock_diag.h): the requests, and the replies decoded
//! into [`SocketSample`]s. No I/O: `tcplab_sys::sockdiag` moves the bytes and reads the
//! clock; the kernel-side filter is compiled in [`crate::sockfilter`].
//!
//! A reply is `struct inet_diag_msg` (72 bytes: family, state, the socket's id — ports,
//! addresses, interface, cookie —, queues, uid, inode) followed by attributes, each asked
//! for by a bit of the request's `idiag_ext` ([`Extensions`]):
//!
//! | attribute | decoded into | asked by |
//! |---|---|---|
//! | `INET_DIAG_INFO` | [`TcpInfo`] (our decoder: any length, newer fields kept) | `tcp_info` |
//! | `INET_DIAG_CONG` | [`CongestionName`] | `congestion` |
//! | `INET_DIAG_BBRINFO` | [`BbrInfo`] (only a BBR socket sends it) | `cc_info` (the `INET_DIAG_VEGASINFO` bit: `idiag_ext` is 8 bits, BBR's bit 16 does not fit) |
//! | `INET_DIAG_SKMEMINFO` | [`SkMemInfo`] | `skmem` |
//! | `INET_DIAG_CGROUP_ID` | `cgroup_id` | always sent by kernels with it (5.10+) |
//!
//! What the kernel cannot give: a socket in TIME_WAIT, and one in FIN_WAIT2 after its
//! application closed it (both "timewait" mini-sockets), and a connection still in its
//! handshake at the listener (SYN_RECV, a request socket) answer with the header alone —
//! no tcp_info, no attributes. Every full socket answers with all of them, whatever its
//! state: ESTABLISHED, FIN_WAIT1, FIN_WAIT2 while the application holds it, CLOSE_WAIT,
//! LAST_ACK, CLOSING.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use tcplab_record::tcp_state::TcpState;
use tcplab_record::tcpinfo::{BbrInfo, SkMemInfo, TcpInfo};

/// `sizeof(struct nlmsghdr)`.
pub const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
/// sock_diag's request and reply type: one family a request.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// inet_diag's first request and reply type, which the kernel still serves: a dump of
/// it covers every family (AF_UNSPEC) in one walk of the table.
const TCPDIAG_GETSOCK: u16 = 18;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
/// `sizeof(struct inet_diag_req_v2)`.
const REQ_V2_LEN: usize = 56;
/// `sizeof(struct inet_diag_req)`, [`TCPDIAG_GETSOCK`]'s request.
const REQ_V1_LEN: usize = 60;
/// `sizeof(struct inet_diag_msg)`.
pub const INET_DIAG_MSG_LEN: usize = 72;
const NLA_HDRLEN: usize = 4;
/// Attribute types carry two flag bits (nested, byte order) above these.
const NLA_TYPE_MASK: u16 = 0x3fff;

const INET_DIAG_REQ_BYTECODE: u16 = 1;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_VEGASINFO: u16 = 3;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_SKMEMINFO: u16 = 7;
const INET_DIAG_BBRINFO: u16 = 16;
const INET_DIAG_CGROUP_ID: u16 = 21;

/// The size of a dump request of `families` with `bytecode_len` bytes of filter.
pub fn dump_request_len(families: Families, bytecode_len: usize) -> usize {
    let filter = if bytecode_len > 0 {
        NLA_HDRLEN + bytecode_len
    } else {
        0
    };
    let request = match families {
        Families::Both => REQ_V1_LEN,
        Families::Only(_) => REQ_V2_LEN,
    };
    NLMSG_HDRLEN + request + filter
}

/// The states a dump asks for (`idiag_states`, one bit per [`TcpState`]); the kernel
/// skips the others before it fills anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateSet(u32);

impl StateSet {
    pub const EMPTY: StateSet = StateSet(0);
    /// Every state but LISTEN, CLOSE and TIME_WAIT: the connections that have a peer
    /// and tcp_info (or, in SYN_RECV and an orphaned FIN_WAIT2, are about to or did).
    pub const CONNECTED: StateSet = StateSet::EMPTY
        .with(TcpState::Established)
        .with(TcpState::SynSent)
        .with(TcpState::SynRecv)
        .with(TcpState::FinWait1)
        .with(TcpState::FinWait2)
        .with(TcpState::CloseWait)
        .with(TcpState::LastAck)
        .with(TcpState::Closing);

    pub const fn with(self, state: TcpState) -> StateSet {
        StateSet(self.0 | 1 << state as u8)
    }

    pub const fn contains(self, state: TcpState) -> bool {
        self.0 & 1 << state as u8 != 0
    }

    /// The kernel's `idiag_states`.
    pub const fn bits(self) -> u32 {
        self.0
    }
}

/// Which attributes the kernel adds to each reply (`idiag_ext`). Each costs the kernel
/// time per socket; the header (5-tuple, state, queues, uid, inode, cookie) is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extensions {
    /// `INET_DIAG_INFO`: the whole `struct tcp_info`.
    pub tcp_info: bool,
    /// `INET_DIAG_CONG`: the congestion control's name.
    pub congestion: bool,
    /// The congestion control's own state: BBR's model (`INET_DIAG_BBRINFO`).
    pub cc_info: bool,
    /// `INET_DIAG_SKMEMINFO`: the socket's memory, as `ss -m` shows it.
    pub skmem: bool,
}

impl Extensions {
    pub const ALL: Extensions = Extensions {
        tcp_info: true,
        congestion: true,
        cc_info: true,
        skmem: true,
    };
    pub const NONE: Extensions = Extensions {
        tcp_info: false,
        congestion: false,
        cc_info: false,
        skmem: false,
    };

    /// The kernel's `idiag_ext`: bit `attribute - 1` for each attribute.
    pub fn bits(self) -> u8 {
        let Extensions {
            tcp_info,
            congestion,
            cc_info,
            skmem,
        } = self;
        let bit = |on: bool, attribute: u16| if on { 1u8 << (attribute - 1) } else { 0 };
        bit(tcp_info, INET_DIAG_INFO)
            | bit(congestion, INET_DIAG_CONG)
            | bit(cc_info, INET_DIAG_VEGASINFO)
            | bit(skmem, INET_DIAG_SKMEMINFO)
    }
}

/// Which address families a dump covers: the kernel dumps one per request. An IPv6
/// socket may carry IPv4 traffic (a dual-stack listener's connections, with addresses
/// `::ffff:a.b.c.d`), so an IPv4 filter does not mean IPv4 sockets only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

/// Which families a dump covers. The kernel walks its whole table of connections once
/// per dump request, whatever matches: `Both` is one walk (an inet_diag request of the
/// first kind, `TCPDIAG_GETSOCK`, whose dump takes every family), where a request of
/// each family would walk it twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Families {
    Both,
    Only(Family),
}

impl Family {
    pub const BOTH: [Family; 2] = [Family::V4, Family::V6];

    fn af(self) -> u8 {
        match self {
            Family::V4 => AF_INET,
            Family::V6 => AF_INET6,
        }
    }
}

/// Which socket: its two ends, the interface it is bound to (0: none), and its cookie —
/// the kernel's id of the socket, unique while the kernel runs, so a new connection that
/// reuses a 4-tuple has another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SocketKey {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub interface: u32,
    pub cookie: u64,
}

impl SocketKey {
    /// `INET_DIAG_NOCOOKIE`: a lookup with it matches whichever socket has the 4-tuple.
    pub const NO_COOKIE: u64 = u64::MAX;

    /// The socket with this 4-tuple, whatever its cookie (e.g. from a tracepoint, which
    /// knows no cookie). Both addresses must be of one family.
    pub fn tuple(local: SocketAddr, remote: SocketAddr) -> SocketKey {
        SocketKey {
            local,
            remote,
            interface: 0,
            cookie: SocketKey::NO_COOKIE,
        }
    }

    pub fn family(&self) -> Family {
        match self.local {
            SocketAddr::V4(_) => Family::V4,
            SocketAddr::V6(_) => Family::V6,
        }
    }
}

/// A congestion control's name (`TCP_CA_NAME_MAX` is 16 with the NUL), held inline so a
/// sample needs no allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CongestionName {
    len: u8,
    bytes: [u8; CongestionName::MAX],
}

impl CongestionName {
    pub const MAX: usize = 15;

    /// `None` unless 1–15 printable ASCII characters, as the kernel's names are.
    pub fn new(name: &str) -> Option<CongestionName> {
        let valid = !name.is_empty()
            && name.len() <= Self::MAX
            && name.bytes().all(|b| b.is_ascii_graphic());
        valid.then(|| {
            let mut bytes = [0; Self::MAX];
            bytes[..name.len()].copy_from_slice(name.as_bytes());
            CongestionName {
                len: name.len() as u8,
                bytes,
            }
        })
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }

    /// A BBR variant (`bbr`, `bbr2`, …), whose model [`SocketSample::bbr`] carries.
    pub fn is_bbr(&self) -> bool {
        self.as_str().starts_with("bbr")
    }
}

impl fmt::Display for CongestionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for CongestionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl TryFrom<String> for CongestionName {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        CongestionName::new(&name).ok_or_else(|| format!("not a congestion control: {name:?}"))
    }
}

impl From<CongestionName> for String {
    fn from(name: CongestionName) -> String {
        name.as_str().to_owned()
    }
}

/// One socket as one reply described it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SocketSample {
    pub key: SocketKey,
    pub state: TcpState,
    /// CLOCK_MONOTONIC µs when the reply was read: the kernel fills a dump's replies as
    /// they are read, so this is within microseconds of the kernel's read of the socket.
    pub t_us: i64,
    /// The socket's owner (its creator's effective uid).
    pub uid: u32,
    /// The socket's inode (as `/proc/PID/fd` links name it: `socket:[INODE]`); 0 for a
    /// timewait or request mini-socket, which no process holds.
    pub inode: u32,
    /// Bytes received and not read yet (a listener: its accept queue).
    pub recv_queue: u32,
    /// Bytes written and not acknowledged yet (a listener: its backlog).
    pub send_queue: u32,
    pub tcp_info: Option<TcpInfo>,
    pub congestion: Option<CongestionName>,
    pub bbr: Option<BbrInfo>,
    pub skmem: Option<SkMemInfo>,
    /// The cgroup (v2) the socket was created in; 0 for a mini-socket, `None` from a
    /// kernel before 5.10.
    pub cgroup_id: Option<u64>,
}

/// Appends a dump request: every socket of `families` in `states`, with `extensions`,
/// that the filter compiled to `bytecode` accepts (`sockfilter::Bytecode::as_bytes`;
/// empty: every socket).
pub fn encode_dump(
    out: &mut Vec<u8>,
    seq: u32,
    families: Families,
    states: StateSet,
    extensions: Extensions,
    bytecode: &[u8],
) {
    let len = dump_request_len(families, bytecode.len());
    match families {
        Families::Both => {
            put_nlmsghdr(out, len, TCPDIAG_GETSOCK, NLM_F_REQUEST | NLM_F_DUMP, seq);
            put_req_v1(out, extensions, states.bits());
        }
        Families::Only(family) => {
            put_nlmsghdr(
                out,
                len,
                SOCK_DIAG_BY_FAMILY,
                NLM_F_REQUEST | NLM_F_DUMP,
                seq,
            );
            put_req_v2(out, family.af(), extensions, states.bits(), None);
        }
    }
    if !bytecode.is_empty() {
        // The compiler keeps the filter below u16::MAX less this header.
        out.extend_from_slice(&((NLA_HDRLEN + bytecode.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
        out.extend_from_slice(bytecode);
    }
}

/// Appends a request for the one socket `key` names: the kernel looks it up by its
/// 4-tuple (no walk over the others) and, unless the cookie is
/// [`SocketKey::NO_COOKIE`], answers ESTALE if the socket there has another cookie.
pub fn encode_lookup(out: &mut Vec<u8>, seq: u32, key: &SocketKey, extensions: Extensions) {
    put_nlmsghdr(
        out,
        NLMSG_HDRLEN + REQ_V2_LEN,
        SOCK_DIAG_BY_FAMILY,
        NLM_F_REQUEST,
        seq,
    );
    // A lookup ignores the states; all of them, as ss sends.
    put_req_v2(out, key.family().af(), extensions, u32::MAX, Some(key));
}

fn put_nlmsghdr(out: &mut Vec<u8>, len: usize, kind: u16, flags: u16, seq: u32) {
    // Requests are a few hundred bytes to 64 KiB: they fit.
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // the kernel's port
}

/// `struct inet_diag_req` of a dump: the family is not asked (the kernel dumps them all),
/// nor are address prefix lengths (a filter says which addresses).
fn put_req_v1(out: &mut Vec<u8>, extensions: Extensions, states: u32) {
    out.extend_from_slice(&[0, 0, 0, extensions.bits()]);
    out.extend_from_slice(&NO_SOCKET_ID);
    out.extend_from_slice(&states.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // idiag_dbs, unused
}

/// `struct inet_diag_sockid` of a dump: no socket, no cookie.
const NO_SOCKET_ID: [u8; 48] = {
    let mut id = [0u8; 48];
    let mut i = 40;
    while i < 48 {
        id[i] = 0xff;
        i += 1;
    }
    id
};

fn put_req_v2(
    out: &mut Vec<u8>,
    af: u8,
    extensions: Extensions,
    states: u32,
    key: Option<&SocketKey>,
) {
    out.extend_from_slice(&[af, IPPROTO_TCP, extensions.bits(), 0]);
    out.extend_from_slice(&states.to_ne_bytes());
    // struct inet_diag_sockid: ports and addresses in network order, then the interface
    // and the cookie's two native words, low first.
    let mut id = NO_SOCKET_ID;
    if let Some(key) = key {
        id[0..2].copy_from_slice(&key.local.port().to_be_bytes());
        id[2..4].copy_from_slice(&key.remote.port().to_be_bytes());
        put_addr(&mut id[4..20], key.local.ip());
        put_addr(&mut id[20..36], key.remote.ip());
        id[36..40].copy_from_slice(&key.interface.to_ne_bytes());
        id[40..44].copy_from_slice(&(key.cookie as u32).to_ne_bytes());
        id[44..48].copy_from_slice(&((key.cookie >> 32) as u32).to_ne_bytes());
    }
    out.extend_from_slice(&id);
}

fn put_addr(slot: &mut [u8], addr: IpAddr) {
    match addr {
        IpAddr::V4(a) => slot[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => slot.copy_from_slice(&a.octets()),
    }
}

/// Why a datagram from the kernel could not be read. `at` is the byte offset in the
/// datagram.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("netlink message at byte {at}: length {len} does not fit the {left} bytes left")]
    BadLength { at: usize, len: usize, left: usize },
    #[error("netlink error at byte {at}: {len} bytes, too short for its code")]
    ShortError { at: usize, len: usize },
    #[error("sock_diag reply at byte {at}: {len} bytes, shorter than inet_diag_msg's 72")]
    ShortReply { at: usize, len: usize },
    #[error("sock_diag reply at byte {at}: unknown address family {family}")]
    Family { at: usize, family: u8 },
    #[error("sock_diag reply at byte {at}: unknown TCP state {state}")]
    State { at: usize, state: u8 },
    #[error("sock_diag attribute at byte {at}: length {len} does not fit the {left} bytes left")]
    Attribute { at: usize, len: usize, left: usize },
    #[error(
        "sock_diag attribute at byte {at}: congestion control name is not 1-15 ASCII characters"
    )]
    Congestion { at: usize },
}

/// One netlink message of a reply datagram.
#[derive(Clone, Debug, PartialEq)]
// A socket is moved straight into the caller's Vec: a box would allocate per socket.
#[allow(clippy::large_enum_variant)]
pub enum Message {
    Socket(SocketSample),
    /// The end of a dump.
    Done,
    /// The kernel refused the request of this sequence number: a positive errno
    /// (ENOENT: a looked-up socket is gone; ESTALE: its 4-tuple has another cookie now).
    Error {
        errno: i32,
    },
    /// An acknowledgement (an error message with code 0), or a type sock_diag does not
    /// send.
    Other,
}

/// The messages of one datagram, each with its request's sequence number. Stops at the
/// first error; a datagram the kernel wrote has none.
pub struct Messages<'a> {
    datagram: &'a [u8],
    at: usize,
    t_us: i64,
}

/// Reads `datagram` (one recv's bytes); `t_us` stamps its samples.
pub fn messages(datagram: &[u8], t_us: i64) -> Messages<'_> {
    Messages {
        datagram,
        at: 0,
        t_us,
    }
}

impl Iterator for Messages<'_> {
    type Item = Result<(u32, Message), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let at = self.at;
        let rest = self
            .datagram
            .get(at..)
            .filter(|r| r.len() >= NLMSG_HDRLEN)?;
        let len = u32_at(rest, 0) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            self.at = self.datagram.len();
            return Some(Err(DecodeError::BadLength {
                at,
                len,
                left: rest.len(),
            }));
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        let seq = u32_at(rest, 8);
        // Messages are 4-byte aligned (NLMSG_ALIGN); the last one's padding may be cut.
        self.at = at + len.next_multiple_of(4);
        let payload = &rest[NLMSG_HDRLEN..len];
        let message = match kind {
            NLMSG_DONE => Ok(Message::Done),
            NLMSG_ERROR => match payload.first_chunk::<4>() {
                None => Err(DecodeError::ShortError { at, len }),
                Some(code) => match i32::from_ne_bytes(*code) {
                    0 => Ok(Message::Other),
                    code => Ok(Message::Error {
                        errno: code.saturating_neg(),
                    }),
                },
            },
            SOCK_DIAG_BY_FAMILY | TCPDIAG_GETSOCK => {
                decode_socket(payload, at + NLMSG_HDRLEN, self.t_us).map(Message::Socket)
            }
            _ => Ok(Message::Other),
        };
        if message.is_err() {
            self.at = self.datagram.len();
        }
        Some(message.map(|m| (seq, m)))
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// Decodes one reply's payload (`struct inet_diag_msg` and its attributes); `at` is its
/// offset in the datagram, for errors.
fn decode_socket(payload: &[u8], at: usize, t_us: i64) -> Result<SocketSample, DecodeError> {
    if payload.len() < INET_DIAG_MSG_LEN {
        return Err(DecodeError::ShortReply {
            at,
            len: payload.len(),
        });
    }
    let state = TcpState::from_kernel(payload[1]).ok_or(DecodeError::State {
        at: at + 1,
        state: payload[1],
    })?;
    let id = &payload[4..52];
    let port = |k: usize| u16::from_be_bytes([id[k], id[k + 1]]);
    let (local, remote) = match payload[0] {
        AF_INET => {
            let addr = |k: usize| IpAddr::V4(Ipv4Addr::new(id[k], id[k + 1], id[k + 2], id[k + 3]));
            (addr(4), addr(20))
        }
        AF_INET6 => {
            let addr = |k: usize| {
                let octets: [u8; 16] = id[k..k + 16].try_into().expect("16 bytes");
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            (addr(4), addr(20))
        }
        family => return Err(DecodeError::Family { at, family }),
    };
    let key = SocketKey {
        local: SocketAddr::new(local, port(0)),
        remote: SocketAddr::new(remote, port(2)),
        interface: u32_at(id, 36),
        cookie: u64::from(u32_at(id, 40)) | u64::from(u32_at(id, 44)) << 32,
    };
    let mut sample = SocketSample {
        key,
        state,
        t_us,
        recv_queue: u32_at(payload, 56),
        send_queue: u32_at(payload, 60),
        uid: u32_at(payload, 64),
        inode: u32_at(payload, 68),
        tcp_info: None,
        congestion: None,
        bbr: None,
        skmem: None,
        cgroup_id: None,
    };
    let mut offset = INET_DIAG_MSG_LEN;
    while payload.len() - offset >= NLA_HDRLEN {
        let attr_at = at + offset;
        let rest = &payload[offset..];
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        if len < NLA_HDRLEN || len > rest.len() {
            return Err(DecodeError::Attribute {
                at: attr_at,
                len,
                left: rest.len(),
            });
        }
        let value = &rest[NLA_HDRLEN..len];
        match u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK {
            INET_DIAG_INFO => sample.tcp_info = Some(TcpInfo::decode(value)),
            INET_DIAG_CONG => {
                let name = value.split(|&b| b == 0).next().unwrap_or_default();
                let name = std::str::from_utf8(name).ok().and_then(CongestionName::new);
                sample.congestion = Some(name.ok_or(DecodeError::Congestion { at: attr_at })?);
            }
            INET_DIAG_BBRINFO => sample.bbr = BbrInfo::decode(value),
            INET_DIAG_SKMEMINFO => sample.skmem = SkMemInfo::decode(value),
            INET_DIAG_CGROUP_ID => {
                sample.cgroup_id = value.first_chunk::<8>().map(|b| u64::from_ne_bytes(*b));
            }
            _ => {}
        }
        offset += len.next_multiple_of(4).min(rest.len());
    }
    Ok(sample)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tcplab_record::tcpinfo::TCP_INFO_LEN;

    /// A reply as the kernel lays it out, written field by field from the header's
    /// struct definitions (independently of the decoder's offsets).
    pub(crate) struct ReplyImage {
        pub family: u8,
        pub state: u8,
        pub sport: u16,
        pub dport: u16,
        pub src: Vec<u8>,
        pub dst: Vec<u8>,
        pub ifindex: u32,
        pub cookie: [u32; 2],
        pub queues: [u32; 2],
        pub uid: u32,
        pub inode: u32,
        pub attributes: Vec<(u16, Vec<u8>)>,
    }

    impl ReplyImage {
        pub fn v4() -> ReplyImage {
            ReplyImage {
                family: AF_INET,
                state: 1,
                sport: 5201,
                dport: 40000,
                src: vec![127, 0, 0, 1],
                dst: vec![10, 1, 2, 3],
                ifindex: 0,
                cookie: [0x1234, 0x5],
                queues: [7, 9],
                uid: 1000,
                inode: 424242,
                attributes: Vec::new(),
            }
        }

        pub fn message(&self, seq: u32) -> Vec<u8> {
            let mut body = vec![self.family, self.state, 0, 0];
            body.extend_from_slice(&self.sport.to_be_bytes());
            body.extend_from_slice(&self.dport.to_be_bytes());
            for addr in [&self.src, &self.dst] {
                let mut slot = [0u8; 16];
                slot[..addr.len()].copy_from_slice(addr);
                body.extend_from_slice(&slot);
            }
            body.extend_from_slice(&self.ifindex.to_ne_bytes());
            for w in self.cookie {
                body.extend_from_slice(&w.to_ne_bytes());
            }
            body.extend_from_slice(&0u32.to_ne_bytes()); // expires
            for w in [self.queues[0], self.queues[1], self.uid, self.inode] {
                body.extend_from_slice(&w.to_ne_bytes());
            }
            assert_eq!(body.len(), 72);
            for (kind, value) in &self.attributes {
                body.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
                body.extend_from_slice(&kind.to_ne_bytes());
                body.extend_from_slice(value);
                body.resize(body.len().next_multiple_of(4), 0);
            }
            let mut msg = Vec::new();
            put_nlmsghdr(&mut msg, 16 + body.len(), SOCK_DIAG_BY_FAMILY, 0x2, seq);
            msg.extend_from_slice(&body);
            msg
        }
    }

    fn done(seq: u32) -> Vec<u8> {
        let mut m = Vec::new();
        put_nlmsghdr(&mut m, 20, NLMSG_DONE, 0x2, seq);
        m.extend_from_slice(&0i32.to_ne_bytes());
        m
    }

    fn error(seq: u32, errno: i32) -> Vec<u8> {
        let mut m = Vec::new();
        put_nlmsghdr(&mut m, 36, NLMSG_ERROR, 0, seq);
        m.extend_from_slice(&(-errno).to_ne_bytes());
        m.extend_from_slice(&[0; 16]); // the request's header, echoed
        m
    }

    fn decode_all(datagram: &[u8]) -> Vec<(u32, Message)> {
        messages(datagram, 77).collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn a_v4_reply_decodes_its_header_and_every_attribute() {
        let mut image = ReplyImage::v4();
        let mut info = vec![0u8; TCP_INFO_LEN];
        info[80..84].copy_from_slice(&42u32.to_ne_bytes()); // snd_cwnd
        let bbr: Vec<u8> = [1000u32, 0, 20, 256, 512]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let skmem: Vec<u8> = (1u32..=9).flat_map(u32::to_ne_bytes).collect();
        image.attributes = vec![
            (INET_DIAG_INFO, info),
            (INET_DIAG_CONG, b"bbr\0".to_vec()),
            (INET_DIAG_BBRINFO, bbr),
            (INET_DIAG_SKMEMINFO, skmem),
            (INET_DIAG_CGROUP_ID, 99u64.to_ne_bytes().to_vec()),
            (8, vec![3]), // INET_DIAG_SHUTDOWN: skipped
        ];
        let mut datagram = image.message(7);
        datagram.extend(done(7));
        let messages = decode_all(&datagram);
        assert_eq!(messages.len(), 2);
        let (7, Message::Socket(s)) = &messages[0] else {
            panic!("{messages:?}")
        };
        assert_eq!(s.key.local, "127.0.0.1:5201".parse().unwrap());
        assert_eq!(s.key.remote, "10.1.2.3:40000".parse().unwrap());
        assert_eq!(s.key.cookie, 0x5_0000_1234);
        assert_eq!(
            (s.state, s.t_us, s.uid, s.inode),
            (TcpState::Established, 77, 1000, 424242)
        );
        assert_eq!((s.recv_queue, s.send_queue), (7, 9));
        assert_eq!(s.tcp_info.unwrap().snd_cwnd, 42);
        assert_eq!(s.congestion.unwrap().as_str(), "bbr");
        let bbr = s.bbr.unwrap();
        assert_eq!(
            (bbr.bw, bbr.min_rtt, bbr.pacing_gain, bbr.cwnd_gain),
            (1000, 20, 256, 512)
        );
        assert_eq!(s.skmem.unwrap().drops, 9);
        assert_eq!(s.cgroup_id, Some(99));
        assert_eq!(messages[1], (7, Message::Done));
    }

    #[test]
    fn a_v6_reply_and_a_timewait_socket_without_attributes() {
        let mut image = ReplyImage::v4();
        image.family = AF_INET6;
        image.state = TcpState::TimeWait as u8;
        image.src = "::ffff:10.0.0.1"
            .parse::<Ipv6Addr>()
            .unwrap()
            .octets()
            .to_vec();
        image.dst = "2001:db8::2".parse::<Ipv6Addr>().unwrap().octets().to_vec();
        image.inode = 0;
        let messages = decode_all(&image.message(1));
        let (_, Message::Socket(s)) = &messages[0] else {
            panic!()
        };
        assert_eq!(s.key.local, "[::ffff:10.0.0.1]:5201".parse().unwrap());
        assert_eq!(s.key.remote, "[2001:db8::2]:40000".parse().unwrap());
        assert_eq!(s.key.family(), Family::V6);
        assert_eq!(s.state, TcpState::TimeWait);
        assert_eq!(
            (s.tcp_info, s.congestion, s.skmem, s.cgroup_id),
            (None, None, None, None)
        );
    }

    #[test]
    fn a_reply_to_a_dump_of_both_families_is_a_socket_too() {
        let mut message = ReplyImage::v4().message(1);
        message[4..6].copy_from_slice(&TCPDIAG_GETSOCK.to_ne_bytes());
        assert_eq!(
            decode_all(&message),
            decode_all(&ReplyImage::v4().message(1))
        );
    }

    #[test]
    fn a_short_tcp_info_from_an_older_kernel_is_kept_with_its_length() {
        let mut image = ReplyImage::v4();
        // An older kernel's shorter struct: 104 bytes end at total_retrans.
        image.attributes = vec![(INET_DIAG_INFO, vec![1u8; 104])];
        let (_, Message::Socket(s)) = &decode_all(&image.message(1))[0] else {
            panic!()
        };
        let info = s.tcp_info.unwrap();
        assert_eq!(info.valid_len, 104);
        assert!(info.has(TcpInfo::TOTAL_RETRANS) && !info.has(TcpInfo::PACING_RATE));
    }

    #[test]
    fn errors_acks_and_several_messages_in_one_datagram() {
        let enoent = 2;
        let mut datagram = error(3, enoent);
        datagram.extend(ReplyImage::v4().message(4));
        // An acknowledgement without the request echoed (NETLINK_CAP_ACK).
        let mut ack = error(5, 0);
        ack.truncate(20);
        ack[0..4].copy_from_slice(&20u32.to_ne_bytes());
        datagram.extend(ack);
        let messages = decode_all(&datagram);
        assert_eq!(messages[0], (3, Message::Error { errno: 2 }));
        assert!(matches!(messages[1], (4, Message::Socket(_))));
        assert_eq!(messages[2], (5, Message::Other));
    }

    #[test]
    fn malformed_input_is_an_error_naming_its_byte() {
        let good = ReplyImage::v4().message(1);
        let mut long = good.clone();
        long[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        let first = |d: &[u8]| messages(d, 0).next().unwrap().unwrap_err();
        assert_eq!(
            first(&long),
            DecodeError::BadLength {
                at: 0,
                len: 1000,
                left: good.len()
            }
        );
        let mut short = good[..16 + 40].to_vec();
        short[0..4].copy_from_slice(&56u32.to_ne_bytes());
        assert_eq!(first(&short), DecodeError::ShortReply { at: 16, len: 40 });
        let mut family = good.clone();
        family[16] = 1;
        assert_eq!(first(&family), DecodeError::Family { at: 16, family: 1 });
        let mut state = good.clone();
        state[17] = 99;
        assert_eq!(first(&state), DecodeError::State { at: 17, state: 99 });
        let mut image = ReplyImage::v4();
        image.attributes = vec![(INET_DIAG_CONG, b"no way\0".to_vec())];
        assert_eq!(first(&image.message(1)), DecodeError::Congestion { at: 88 });
        let mut attr = ReplyImage::v4().message(1);
        attr.extend_from_slice(&[200, 0, 2, 0, 0, 0, 0, 0]);
        let len = attr.len() as u32;
        attr[0..4].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(
            first(&attr),
            DecodeError::Attribute {
                at: 88,
                len: 200,
                left: 8
            }
        );
        // After an error the iterator ends.
        let mut it = messages(&long, 0);
        it.next();
        assert!(it.next().is_none());
    }

    #[test]
    fn a_lookup_request_carries_the_socket_id_in_network_order() {
        let key = SocketKey {
            local: "10.0.0.1:5201".parse().unwrap(),
            remote: "10.0.0.2:40000".parse().unwrap(),
            interface: 3,
            cookie: 0x0000_0002_0000_0001,
        };
        let mut out = Vec::new();
        encode_lookup(&mut out, 9, &key, Extensions::ALL);
        assert_eq!(out.len(), 72);
        assert_eq!(u32_at(&out, 0), 72);
        assert_eq!(u16::from_ne_bytes([out[6], out[7]]), NLM_F_REQUEST);
        assert_eq!(u32_at(&out, 8), 9);
        let r = &out[16..];
        assert_eq!(&r[..4], &[AF_INET, IPPROTO_TCP, 0b0100_1110, 0]);
        assert_eq!(&r[8..12], &[0x14, 0x51, 0x9c, 0x40]);
        assert_eq!(&r[12..16], &[10, 0, 0, 1]);
        assert_eq!(&r[28..32], &[10, 0, 0, 2]);
        assert_eq!(u32_at(r, 44), 3);
        assert_eq!((u32_at(r, 48), u32_at(r, 52)), (1, 2));
    }

    #[test]
    fn a_dump_request_without_a_filter_is_ss_s_own() {
        // `ss -tin` (iproute2 6.1, strace): 72 bytes, INFO|VEGASINFO|CONG, no cookie.
        let mut out = Vec::new();
        let states = StateSet::CONNECTED;
        let ext = Extensions {
            skmem: false,
            ..Extensions::ALL
        };
        encode_dump(
            &mut out,
            123456,
            Families::Only(Family::V4),
            states,
            ext,
            &[],
        );
        assert_eq!(out.len(), 72);
        assert_eq!(
            u16::from_ne_bytes([out[6], out[7]]),
            NLM_F_REQUEST | NLM_F_DUMP
        );
        assert_eq!(&out[16..20], &[AF_INET, IPPROTO_TCP, 2 | 4 | 8, 0]);
        assert_eq!(&out[16 + 48..16 + 56], &[0xff; 8]);
    }

    #[test]
    fn a_dump_of_both_families_is_one_request_of_inet_diag_s_first_kind() {
        // struct inet_diag_req: family (0: all), prefix lengths, extensions, the socket
        // id (no cookie), states, tables.
        let mut out = Vec::new();
        // Any filter's bytecode, which the request carries as it is.
        let filter = [1, 2, 3, 4, 5, 6, 7, 8];
        let states = StateSet::CONNECTED;
        encode_dump(
            &mut out,
            7,
            Families::Both,
            states,
            Extensions::ALL,
            &filter,
        );
        assert_eq!(out.len(), dump_request_len(Families::Both, filter.len()));
        assert_eq!(u32_at(&out, 0) as usize, out.len());
        assert_eq!(u16::from_ne_bytes([out[4], out[5]]), TCPDIAG_GETSOCK);
        assert_eq!(&out[16..20], &[0, 0, 0, Extensions::ALL.bits()]);
        assert_eq!(&out[16 + 4..16 + 44], &[0; 40]);
        assert_eq!(&out[16 + 44..16 + 52], &[0xff; 8]);
        assert_eq!(u32_at(&out, 16 + 52), states.bits());
        assert_eq!(u32_at(&out, 16 + 56), 0);
        let attribute = 16 + REQ_V1_LEN;
        assert_eq!(
            u16::from_ne_bytes([out[attribute + 2], out[attribute + 3]]),
            INET_DIAG_REQ_BYTECODE
        );
        assert_eq!(&out[attribute + NLA_HDRLEN..], &filter[..]);
    }

    #[test]
    fn the_states_ss_asks_for_are_connected_less_syn_recv() {
        // ss's default (strace): ESTABLISHED SYN_SENT FIN_WAIT1 FIN_WAIT2 CLOSE_WAIT
        // LAST_ACK CLOSING (and bit 0).
        let ss = 1 << 1 | 1 << 2 | 1 << 4 | 1 << 5 | 1 << 8 | 1 << 9 | 1 << 11;
        assert_eq!(StateSet::CONNECTED.bits(), ss | 1 << 3);
        assert!(!StateSet::CONNECTED.contains(TcpState::TimeWait));
    }
}
