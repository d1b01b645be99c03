//! A socket filter (ports, addresses with prefixes, cgroup; and, or, not) compiled into
//! inet_diag bytecode (`INET_DIAG_REQ_BYTECODE`), which the kernel runs on every socket
//! of a dump before it fills anything: the cost of a dump then follows the sockets that
//! match, not all of them. Compiled as iproute2's `ss` does (`ssfilter_bytecompile` in
//! misc/ss.c), byte for byte for the filters both can say. No I/O.
//!
//! The program is a list of ops `{code: u8, yes: u8, no: u16}`, each followed by its
//! operand; `yes` and `no` are how far to move on, in bytes. The socket is accepted when
//! the program ends exactly at its end, rejected when it jumps 4 bytes past it.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use crate::sockdiag::SocketKey;

const BC_JMP: u8 = 1;
const BC_S_GE: u8 = 2;
const BC_S_LE: u8 = 3;
const BC_D_GE: u8 = 4;
const BC_D_LE: u8 = 5;
const BC_S_COND: u8 = 7;
const BC_D_COND: u8 = 8;
const BC_S_EQ: u8 = 11;
const BC_D_EQ: u8 = 12;
const BC_CGROUP_COND: u8 = 13;
const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// `struct inet_diag_bc_op`.
const OP_LEN: usize = 4;
/// `struct inet_diag_hostcond` without its address: family, prefix length, 2 bytes of
/// padding, the port as a C int (-1: any).
const HOSTCOND_LEN: usize = 8;

/// The longest program: its attribute's length is a u16 with the 4-byte header.
pub const MAX_BYTECODE: usize = u16::MAX as usize - 4;

/// Which end of the socket a condition looks at: `ss`'s `src`/`sport` (local) and
/// `dst`/`dport` (remote).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Local,
    Remote,
}

impl Side {
    fn of(self, key: &SocketKey) -> SocketAddr {
        match self {
            Side::Local => key.local,
            Side::Remote => key.remote,
        }
    }
}

/// A port comparison the kernel runs itself (`!=`, `<`, `>` are [`Filter::Not`] of
/// these).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortOp {
    /// `INET_DIAG_BC_S_EQ`/`D_EQ` (Linux 4.17+).
    Eq,
    Ge,
    Le,
}

/// An address prefix: `10.0.0.0/8`, `2001:db8::/32`, or one address (its full length).
/// The kernel compares the first `len` bits, so bits past them do not matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// `None` if `len` is longer than the address (32 or 128 bits).
    pub fn new(addr: IpAddr, len: u8) -> Option<Prefix> {
        (len <= max_len(addr)).then_some(Prefix { addr, len })
    }

    /// The one address.
    pub fn host(addr: IpAddr) -> Prefix {
        Prefix {
            addr,
            len: max_len(addr),
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn bits(&self) -> u8 {
        self.len
    }

    /// Whether `addr` is inside, as the kernel decides: an IPv4 prefix also holds the
    /// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) of dual-stack sockets; an IPv6
    /// prefix holds no IPv4 address.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = match (self.addr, addr) {
            (IpAddr::V4(_), IpAddr::V6(a)) => match a.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            (_, addr) => addr,
        };
        match (self.addr, addr) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                leading_bits_match(&p.octets(), &a.octets(), self.len)
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                leading_bits_match(&p.octets(), &a.octets(), self.len)
            }
            _ => false,
        }
    }
}

fn max_len(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn leading_bits_match(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (bytes, rest) = (usize::from(bits / 8), bits % 8);
    if a[..bytes] != b[..bytes] {
        return false;
    }
    rest == 0 || (a[bytes] ^ b[bytes]) & (0xff << (8 - rest)) == 0
}

/// Why a prefix could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("'{0}' is not an IP address (a.b.c.d or an IPv6 address, with an optional /LEN)")]
    Address(String),
    #[error("'{text}': prefix length {len} is longer than the address's {max} bits")]
    Length { text: String, len: String, max: u8 },
}

impl FromStr for Prefix {
    type Err = PrefixError;

    /// `ADDR` or `ADDR/LEN`.
    fn from_str(text: &str) -> Result<Prefix, PrefixError> {
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| PrefixError::Address(addr.to_owned()))?;
        let Some(len) = len else {
            return Ok(Prefix::host(addr));
        };
        let too_long = || PrefixError::Length {
            text: text.to_owned(),
            len: len.to_owned(),
            max: max_len(addr),
        };
        let len: u8 = len.parse().map_err(|_| too_long())?;
        Prefix::new(addr, len).ok_or_else(too_long)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Which sockets a dump returns. Leaves are what the kernel can test; [`Filter::And`],
/// [`Filter::Or`] and [`Filter::Not`] combine them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Filter {
    /// A port against a number: `sport >= :1024`.
    Port {
        side: Side,
        op: PortOp,
        port: u16,
    },
    /// An address in a prefix and/or a port (`src 10.0.0.0/8`, `dst [::1]:5201`,
    /// `sport = :22`): `ss`'s host condition. Neither: any socket.
    Host {
        side: Side,
        prefix: Option<Prefix>,
        port: Option<u16>,
    },
    /// The socket was created in this cgroup v2 (its id: the directory's inode number),
    /// not in one below it (Linux 5.10+; a mini-socket has none).
    Cgroup(u64),
    And(Box<Filter>, Box<Filter>),
    Or(Box<Filter>, Box<Filter>),
    Not(Box<Filter>),
}

impl Filter {
    /// The port on `side` equals `port`.
    pub fn port(side: Side, port: u16) -> Filter {
        Filter::Port {
            side,
            op: PortOp::Eq,
            port,
        }
    }

    /// The port on `side` is in `low..=high`.
    pub fn port_range(side: Side, low: u16, high: u16) -> Filter {
        let bound = |op, port| Filter::Port { side, op, port };
        bound(PortOp::Ge, low).and(bound(PortOp::Le, high))
    }

    /// The address on `side` is in `prefix`.
    pub fn addr(side: Side, prefix: Prefix) -> Filter {
        Filter::Host {
            side,
            prefix: Some(prefix),
            port: None,
        }
    }

    /// Exactly this socket's 4-tuple (its cookie aside).
    pub fn socket(key: &SocketKey) -> Filter {
        let end = |side, addr: SocketAddr| Filter::Host {
            side,
            prefix: Some(Prefix::host(addr.ip())),
            port: Some(addr.port()),
        };
        end(Side::Local, key.local).and(end(Side::Remote, key.remote))
    }

    pub fn and(self, other: Filter) -> Filter {
        Filter::And(Box::new(self), Box::new(other))
    }

    pub fn or(self, other: Filter) -> Filter {
        Filter::Or(Box::new(self), Box::new(other))
    }

    pub fn negate(self) -> Filter {
        Filter::Not(Box::new(self))
    }

    /// All of `filters` (`None` for none), as a balanced tree: thousands of them (the
    /// sockets of a lookup) nest only a dozen deep.
    pub fn all_of(filters: impl IntoIterator<Item = Filter>) -> Option<Filter> {
        balanced(filters.into_iter().collect(), &Filter::and)
    }

    /// Any of `filters` (`None` for none), as a balanced tree.
    pub fn any_of(filters: impl IntoIterator<Item = Filter>) -> Option<Filter> {
        balanced(filters.into_iter().collect(), &Filter::or)
    }

    /// Whether the kernel's program accepts this socket (`cgroup_id` 0 for none): the
    /// meaning the compiled bytecode has, for samples already taken.
    pub fn matches(&self, key: &SocketKey, cgroup_id: u64) -> bool {
        match self {
            Filter::Port { side, op, port } => {
                let own = side.of(key).port();
                match op {
                    PortOp::Eq => own == *port,
                    PortOp::Ge => own >= *port,
                    PortOp::Le => own <= *port,
                }
            }
            Filter::Host { side, prefix, port } => {
                let end = side.of(key);
                port.is_none_or(|p| end.port() == p) && prefix.is_none_or(|p| p.contains(end.ip()))
            }
            Filter::Cgroup(id) => cgroup_id == *id,
            Filter::And(a, b) => a.matches(key, cgroup_id) && b.matches(key, cgroup_id),
            Filter::Or(a, b) => a.matches(key, cgroup_id) || b.matches(key, cgroup_id),
            Filter::Not(a) => !a.matches(key, cgroup_id),
        }
    }

    /// The kernel's program for this filter.
    pub fn compile(&self) -> Result<Bytecode, FilterError> {
        Ok(Bytecode {
            bytes: self.emit()?,
            cgroup: self.uses_cgroup(),
        })
    }

    fn uses_cgroup(&self) -> bool {
        match self {
            Filter::Cgroup(_) => true,
            Filter::And(a, b) | Filter::Or(a, b) => a.uses_cgroup() || b.uses_cgroup(),
            Filter::Not(a) => a.uses_cgroup(),
            Filter::Port { .. } | Filter::Host { .. } => false,
        }
    }

    fn emit(&self) -> Result<Vec<u8>, FilterError> {
        let code = match self {
            Filter::Port { side, op, port } => {
                let code = match (side, op) {
                    (Side::Local, PortOp::Eq) => BC_S_EQ,
                    (Side::Local, PortOp::Ge) => BC_S_GE,
                    (Side::Local, PortOp::Le) => BC_S_LE,
                    (Side::Remote, PortOp::Eq) => BC_D_EQ,
                    (Side::Remote, PortOp::Ge) => BC_D_GE,
                    (Side::Remote, PortOp::Le) => BC_D_LE,
                };
                // The port rides in a second op's `no`.
                let mut code = op_bytes(code, 8, 12);
                code.extend(op_bytes(0, 0, *port));
                code
            }
            Filter::Host { side, prefix, port } => {
                let code = match side {
                    Side::Local => BC_S_COND,
                    Side::Remote => BC_D_COND,
                };
                // Without an address ss sends family AF_UNSPEC and 4 zero bytes.
                let (family, len, addr) = match prefix.map(|p| (p.addr, p.len)) {
                    None => (AF_UNSPEC, 0, vec![0; 4]),
                    Some((IpAddr::V4(a), len)) => (AF_INET, len, a.octets().to_vec()),
                    Some((IpAddr::V6(a), len)) => (AF_INET6, len, a.octets().to_vec()),
                };
                let op_len = OP_LEN + HOSTCOND_LEN + addr.len();
                let mut code = op_bytes(code, op_len as u8, op_len as u16 + 4);
                code.extend([family, len, 0, 0]);
                code.extend(port.map_or(-1, i32::from).to_ne_bytes());
                code.extend(addr);
                code
            }
            Filter::Cgroup(id) => {
                let mut code = op_bytes(BC_CGROUP_COND, 12, 16);
                code.extend(id.to_ne_bytes());
                code
            }
            Filter::And(a, b) => {
                let (mut first, second) = (a.emit()?, b.emit()?);
                check_len(first.len() + second.len())?;
                // The first's rejections jump past the second's end too.
                relocate_rejections(&mut first, second.len());
                first.extend(second);
                first
            }
            Filter::Or(a, b) => {
                let (mut first, second) = (a.emit()?, b.emit()?);
                check_len(first.len() + OP_LEN + second.len())?;
                // The first's acceptance jumps over the second; its rejections land on it.
                first.extend(op_bytes(BC_JMP, 4, second.len() as u16 + 4));
                first.extend(second);
                first
            }
            Filter::Not(a) => {
                let mut code = a.emit()?;
                check_len(code.len() + OP_LEN)?;
                // Accepted: jump to rejection. Rejected: lands here, at the end, accepted.
                code.extend(op_bytes(BC_JMP, 4, 8));
                code
            }
        };
        Ok(code)
    }
}

fn balanced(mut filters: Vec<Filter>, join: &dyn Fn(Filter, Filter) -> Filter) -> Option<Filter> {
    if filters.len() <= 1 {
        return filters.pop();
    }
    let second = filters.split_off(filters.len() / 2);
    Some(join(balanced(filters, join)?, balanced(second, join)?))
}

fn op_bytes(code: u8, yes: u8, no: u16) -> Vec<u8> {
    let mut op = vec![code, yes];
    op.extend(no.to_ne_bytes());
    op
}

fn check_len(len: usize) -> Result<(), FilterError> {
    if len > MAX_BYTECODE {
        return Err(FilterError::TooLong { bytes: len });
    }
    Ok(())
}

/// `ssfilter_patch`: every op of `code` that rejects (jumps 4 bytes past the end) jumps
/// `by` bytes further.
fn relocate_rejections(code: &mut [u8], by: usize) {
    let mut at = 0;
    while at < code.len() {
        let left = code.len() - at;
        let no = usize::from(u16::from_ne_bytes([code[at + 2], code[at + 3]]));
        if no == left + 4 {
            // check_len keeps the sum within a u16.
            code[at + 2..at + 4].copy_from_slice(&((no + by) as u16).to_ne_bytes());
        }
        at += usize::from(code[at + 1]);
    }
}

/// Why a filter cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("the socket filter compiles to {bytes} bytes, more than the kernel's {MAX_BYTECODE}")]
    TooLong { bytes: usize },
}

/// A compiled filter, ready for a dump request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bytecode {
    bytes: Vec<u8>,
    cgroup: bool,
}

impl Bytecode {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether it tests a cgroup, which kernels before 5.10 refuse (EINVAL).
    pub fn uses_cgroup(&self) -> bool {
        self.cgroup
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn host(side: Side, prefix: Option<&str>, port: Option<u16>) -> Filter {
        Filter::Host {
            side,
            prefix: prefix.map(|p| p.parse().unwrap()),
            port,
        }
    }

    /// `ss -tin 'sport = :5201'`, as strace shows iproute2 6.1 sending it.
    #[test]
    fn sport_equal_is_the_bytes_ss_sends() {
        let code = host(Side::Local, None, Some(5201)).compile().unwrap();
        assert_eq!(hex(code.as_bytes()), "07101400000000005114000000000000");
    }

    /// `ss -tn '( sport >= :5200 and sport < :5300 ) or dst 10.1.0.0/16 or not dport =
    /// :22'`, as strace shows iproute2 6.1 sending it (its `or` binds to the left).
    #[test]
    fn a_compound_filter_is_the_bytes_ss_sends() {
        let ge = |port| Filter::Port {
            side: Side::Local,
            op: PortOp::Ge,
            port,
        };
        let filter = ge(5200)
            .and(ge(5300).negate())
            .or(host(Side::Remote, Some("10.1.0.0/16"), None))
            .or(host(Side::Remote, None, Some(22)).negate());
        let ss = concat!(
            "02081800", "00005014", // sport >= 5200, else reject (patched: 12 + 12)
            "02080c00", "0000b414", // sport >= 5300
            "01040800", // not
            "01041400", // or: jump over the next
            "08101400", "02100000", "ffffffff", "0a010000", // dst 10.1.0.0/16
            "01041800", // or
            "08101400", "00000000", "16000000", "00000000", // dport = :22
            "01040800", // not
        );
        assert_eq!(hex(filter.compile().unwrap().as_bytes()), ss);
    }

    #[test]
    fn port_comparisons_cgroups_and_v6_prefixes_have_their_layouts() {
        let eq = Filter::port(Side::Remote, 443).compile().unwrap();
        assert_eq!(hex(eq.as_bytes()), "0c080c000000bb01");
        let cg = Filter::Cgroup(0x0102_0304_0506_0708).compile().unwrap();
        assert_eq!(hex(cg.as_bytes()), "0d0c10000807060504030201");
        assert!(cg.uses_cgroup() && !eq.uses_cgroup());
        let v6 = host(Side::Local, Some("2001:db8::/32"), Some(80))
            .compile()
            .unwrap();
        assert_eq!(
            hex(v6.as_bytes()),
            "071c20000a2000005000000020010db8000000000000000000000000"
        );
    }

    #[test]
    fn prefixes_parse_and_refuse_with_one_line() {
        assert_eq!(
            "10.0.0.0/8".parse::<Prefix>().unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!("::1".parse::<Prefix>().unwrap().bits(), 128);
        assert_eq!(
            "10.0.0.0/33".parse::<Prefix>().unwrap_err().to_string(),
            "'10.0.0.0/33': prefix length 33 is longer than the address's 32 bits"
        );
        assert_eq!(
            "example.com".parse::<Prefix>().unwrap_err().to_string(),
            "'example.com' is not an IP address (a.b.c.d or an IPv6 address, with an optional /LEN)"
        );
        let p: Prefix = "10.1.0.0/16".parse().unwrap();
        assert!(p.contains("10.1.200.3".parse().unwrap()));
        assert!(p.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(!p.contains("10.2.0.1".parse().unwrap()));
        assert!(!"::/0"
            .parse::<Prefix>()
            .unwrap()
            .contains("10.2.0.1".parse().unwrap()));
    }

    #[test]
    fn a_filter_too_long_for_the_kernel_is_refused() {
        let many = Filter::any_of((0..3000).map(|p| host(Side::Local, Some("::1"), Some(p))));
        assert!(matches!(
            many.unwrap().compile(),
            Err(FilterError::TooLong { .. })
        ));
    }

    /// What the kernel knows of a socket when it runs a program (`inet_diag_entry`).
    #[derive(Debug, Clone)]
    struct Entry {
        family: u8,
        saddr: [u8; 16],
        daddr: [u8; 16],
        sport: u16,
        dport: u16,
        cgroup: u64,
    }

    impl Entry {
        fn of(key: &SocketKey, cgroup: u64) -> Entry {
            let bytes = |a: SocketAddr| match a.ip() {
                IpAddr::V4(v4) => {
                    let mut b = [0; 16];
                    b[..4].copy_from_slice(&v4.octets());
                    b
                }
                IpAddr::V6(v6) => v6.octets(),
            };
            Entry {
                family: if key.local.is_ipv4() {
                    AF_INET
                } else {
                    AF_INET6
                },
                saddr: bytes(key.local),
                daddr: bytes(key.remote),
                sport: key.local.port(),
                dport: key.remote.port(),
                cgroup,
            }
        }
    }

    fn op(bc: &[u8], at: usize) -> (u8, usize, usize) {
        let no = u16::from_ne_bytes([bc[at + 2], bc[at + 3]]);
        (bc[at], usize::from(bc[at + 1]), usize::from(no))
    }

    /// `inet_diag_bc_audit` and `valid_cc` (net/ipv4/inet_diag.c, Linux 6.x), as root.
    fn kernel_audit(bc: &[u8]) -> bool {
        let valid_cc = |cc: usize| {
            let mut len = bc.len();
            let mut at = 0;
            loop {
                if cc > len {
                    return false;
                }
                if cc == len {
                    return true;
                }
                let (_, yes, _) = op(bc, at);
                if yes < 4 || yes % 4 != 0 || yes > len {
                    return false;
                }
                len -= yes;
                at += yes;
            }
        };
        let (mut at, mut len) = (0usize, bc.len() as isize);
        while len > 0 {
            let (code, yes, no) = op(bc, at);
            let mut min_len = 4isize;
            match code {
                BC_S_COND | BC_D_COND => {
                    min_len += HOSTCOND_LEN as isize;
                    if len < min_len {
                        return false;
                    }
                    let (family, prefix) = (bc[at + 4], bc[at + 5]);
                    let addr_len = match family {
                        AF_UNSPEC => 0,
                        AF_INET => 4,
                        AF_INET6 => 16,
                        _ => return false,
                    };
                    min_len += addr_len;
                    if len < min_len || isize::from(prefix) > 8 * addr_len {
                        return false;
                    }
                }
                BC_S_EQ | BC_S_GE | BC_S_LE | BC_D_EQ | BC_D_GE | BC_D_LE => min_len += 4,
                BC_CGROUP_COND => min_len += 8,
                BC_JMP | 0 | 6 => {}
                _ => return false,
            }
            if len < min_len {
                return false;
            }
            if code != 0 {
                let no = no as isize;
                if no < min_len || no > len + 4 || no % 4 != 0 {
                    return false;
                }
                if no < len && !valid_cc((len - no) as usize) {
                    return false;
                }
            }
            let yes = yes as isize;
            if yes < min_len || yes > len + 4 || yes % 4 != 0 {
                return false;
            }
            at += yes as usize;
            len -= yes;
        }
        len == 0
    }

    /// `inet_diag_bc_run`.
    fn kernel_run(bc: &[u8], e: &Entry) -> bool {
        let (mut at, mut len) = (0usize, bc.len() as isize);
        while len > 0 {
            let (code, yes_len, no_len) = op(bc, at);
            let arg = || op(bc, at + 4).2 as u16;
            let yes = match code {
                BC_JMP => false,
                BC_S_EQ => e.sport == arg(),
                BC_S_GE => e.sport >= arg(),
                BC_S_LE => e.sport <= arg(),
                BC_D_EQ => e.dport == arg(),
                BC_D_GE => e.dport >= arg(),
                BC_D_LE => e.dport <= arg(),
                BC_S_COND | BC_D_COND => {
                    let (family, prefix) = (bc[at + 4], bc[at + 5]);
                    let port = i32::from_ne_bytes(bc[at + 8..at + 12].try_into().unwrap());
                    let cond_addr = &bc[at + 12..];
                    let (own_port, addr) = if code == BC_S_COND {
                        (e.sport, &e.saddr)
                    } else {
                        (e.dport, &e.daddr)
                    };
                    let bits = |a: &[u8], b: &[u8]| leading_bits_match(a, b, prefix);
                    if port != -1 && port != i32::from(own_port) {
                        false
                    } else if family != AF_UNSPEC && family != e.family {
                        e.family == AF_INET6
                            && family == AF_INET
                            && addr[..10] == [0; 10]
                            && addr[10..12] == [0xff, 0xff]
                            && bits(&addr[12..], cond_addr)
                    } else {
                        prefix == 0 || bits(addr, cond_addr)
                    }
                }
                BC_CGROUP_COND => {
                    e.cgroup == u64::from_ne_bytes(bc[at + 4..at + 12].try_into().unwrap())
                }
                _ => true,
            };
            let step = if yes { yes_len } else { no_len };
            at += step;
            len -= step as isize;
        }
        len == 0
    }

    fn side() -> impl Strategy<Value = Side> {
        prop_oneof![Just(Side::Local), Just(Side::Remote)]
    }

    const PORTS: [u16; 5] = [0, 22, 5201, 5202, 65535];
    const ADDRS: [&str; 6] = [
        "10.1.2.3",
        "10.1.9.9",
        "127.0.0.1",
        "::1",
        "2001:db8::1",
        "::ffff:10.1.2.3",
    ];

    fn port() -> impl Strategy<Value = u16> {
        prop_oneof![prop::sample::select(&PORTS[..]), any::<u16>()]
    }

    fn prefix() -> impl Strategy<Value = Prefix> {
        (prop::sample::select(&ADDRS[..]), any::<u8>()).prop_map(|(a, len)| {
            let addr: IpAddr = a.parse().unwrap();
            Prefix::new(addr, len % (max_len(addr) + 1)).unwrap()
        })
    }

    fn filter() -> impl Strategy<Value = Filter> {
        let op = prop_oneof![Just(PortOp::Eq), Just(PortOp::Ge), Just(PortOp::Le)];
        let leaf = prop_oneof![
            (side(), op, port()).prop_map(|(side, op, port)| Filter::Port { side, op, port }),
            (side(), prop::option::of(prefix()), prop::option::of(port()))
                .prop_map(|(side, prefix, port)| Filter::Host { side, prefix, port }),
            (0u64..3).prop_map(Filter::Cgroup),
        ];
        leaf.prop_recursive(5, 40, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
                inner.prop_map(Filter::negate),
            ]
        })
    }

    fn key() -> impl Strategy<Value = SocketKey> {
        let v4 = &ADDRS[..3];
        let v6 = &ADDRS[3..];
        let pair = prop_oneof![
            (prop::sample::select(v4), prop::sample::select(v4)),
            (prop::sample::select(v6), prop::sample::select(v6)),
        ];
        (pair, port(), port()).prop_map(|((l, r), lp, rp)| {
            SocketKey::tuple(
                SocketAddr::new(l.parse().unwrap(), lp),
                SocketAddr::new(r.parse().unwrap(), rp),
            )
        })
    }

    proptest! {
        /// Every program passes the kernel's audit, and the kernel's interpreter accepts
        /// exactly the sockets the filter matches.
        #[test]
        fn the_kernel_runs_what_the_filter_means(
            f in filter(),
            keys in prop::collection::vec((key(), 0u64..3), 1..20),
        ) {
            let code = f.compile().unwrap();
            prop_assert!(kernel_audit(code.as_bytes()), "{f:?}: {}", hex(code.as_bytes()));
            for (key, cgroup) in keys {
                let run = kernel_run(code.as_bytes(), &Entry::of(&key, cgroup));
                prop_assert_eq!(run, f.matches(&key, cgroup), "{:?} on {:?}", f, key);
            }
        }
    }

    #[test]
    fn the_interpreter_can_tell_a_broken_program() {
        // The test's kernel model must fail a program that is wrong, or it proves
        // nothing: a jump off the 4-byte grid, and a negation whose jump lands short.
        let mut code = Filter::port(Side::Local, 22).compile().unwrap().bytes;
        code[2] = 13;
        assert!(!kernel_audit(&code));
        let not = Filter::port(Side::Local, 22)
            .negate()
            .compile()
            .unwrap()
            .bytes;
        let mut short = not.clone();
        let last = short.len() - 2;
        short[last] = 4;
        let e = Entry::of(
            &SocketKey::tuple("1.2.3.4:22".parse().unwrap(), "1.2.3.5:9".parse().unwrap()),
            0,
        );
        assert!(!kernel_run(&not, &e));
        assert!(kernel_run(&short, &e));
    }
}
