//! Packets as a TUN device with `IFF_VNET_HDR` hands them over: a `virtio_net_hdr`,
//! then an IP packet that may be a GSO super-packet of up to 64 KiB.
//!
//! Pure logic, no syscalls: header parsing, flow keys, the lengths of wire-size
//! segments, segmentation of a super-packet exactly as the kernel's software GSO
//! would, and internet checksums.
//!
//! # Segmentation
//! [`Segmenter`] splits a TCP (TSO) or UDP (USO, `VIRTIO_NET_HDR_GSO_UDP_L4`)
//! super-packet at `gso_size` bytes of payload, like `tcp_gso_segment` and
//! `__udp_gso_segment`: every segment repeats the IP and L4 headers (IPv4 options
//! included) with the IPv4 total length, id (incremented per segment) and header
//! checksum, the IPv6 payload length, the TCP sequence number or the UDP length fixed;
//! TCP FIN and PSH stay only on the last segment and CWR only on the first (the
//! classic `SKB_GSO_TCP_ECN` rule; AccECN's keep-CWR variant cannot be expressed in a
//! virtio header). Each segment is a *head* (a fresh copy of the headers, optionally
//! preceded by a virtio header) plus a borrowed slice of the original payload, so a
//! caller can `writev` it without copying the payload, or copy both into its own buffer
//! ([`Segmenter::write_segment`]). Nothing is allocated.
//!
//! Legacy UFO (`VIRTIO_NET_HDR_GSO_UDP`, IP fragmentation) is not supported (the
//! lab never enables `TUN_F_UFO`), nor IPv6 with extension headers between the IPv6
//! header and TCP/UDP: such GSO packets are rejected with an error. Non-GSO packets
//! pass through as one segment whatever they hold.
//!
//! # Coalescing
//! A receiving kernel pays per packet written into its TUN (no GRO there): writing
//! 1448-byte segments one by one caps a flow near 2–3 Gbit/s. [`Coalescer`] merges
//! consecutive segments of a flow back into a GSO super-packet, as GRO would, so the
//! emulator can apply per-packet effects to segments and still deliver super-packets.
//!
//! # Checksums: [`CsumMode`]
//! Locally generated packets leave the kernel as `CHECKSUM_PARTIAL` (virtio flag
//! `NEEDS_CSUM`): the L4 checksum field holds only the pseudo-header sum. There are two
//! correct ways to emit segments:
//! - [`CsumMode::Partial`] (fast): each segment carries a `NEEDS_CSUM` virtio header
//!   (`csum_start` = L4 offset, `csum_offset` = 16 for TCP, 6 for UDP) and the field
//!   is seeded with the segment's own pseudo-header sum (correct length), exactly
//!   what the kernel's GSO leaves for a checksum-offloading NIC. A kernel receiving it
//!   through a TUN accepts `CHECKSUM_PARTIAL` for local delivery without verifying,
//!   and would complete the checksum itself if it forwarded the packet to a device
//!   without offload. No payload byte is read.
//! - [`CsumMode::Full`]: the checksum is computed in user space; the virtio header
//!   (if any) has no flags. The receiving kernel verifies it in software.
//!
//! Use `Full` for any packet whose bytes the emulator corrupts *after* checksumming:
//! a `NEEDS_CSUM` packet is trusted by the receiver, so corruption would go
//! undetected and reach the application. Compute the checksum on the intact segment
//! (or call [`finish_checksum`]), then flip bits, then write it without `NEEDS_CSUM`.
//!
//! # Byte order of the virtio header
//! Fields are little-endian: the legacy header is in host order, and `sys::tun` sets
//! `TUNSETVNETLE` so it is little-endian on every host.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a packet could not be parsed or segmented.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("not an IP packet (version nibble {0})")]
    NotIp(u8),
    #[error("bad {what} length field {value}")]
    BadLength { what: &'static str, value: usize },
    #[error("virtio hdr_len {hdr_len} beyond the packet's {len} bytes")]
    HdrLenBeyondPacket { hdr_len: usize, len: usize },
    #[error("virtio csum_start {start} + csum_offset {offset} beyond the packet's {len} bytes")]
    CsumBeyondPacket {
        start: usize,
        offset: usize,
        len: usize,
    },
    #[error("GSO packet with gso_size 0")]
    ZeroGsoSize,
    #[error("unsupported virtio gso_type {0:#04x}")]
    UnsupportedGso(u8),
    #[error("virtio gso_type {gso_type:#04x} does not match the packet (IPv{version}, protocol {protocol})")]
    GsoMismatch {
        gso_type: u8,
        version: u8,
        protocol: u8,
    },
    #[error("GSO of an IPv4 fragment")]
    Fragment,
    #[error("a segment of {need} bytes does not fit the {have}-byte buffer")]
    BufferTooSmall { need: usize, have: usize },
}

fn need(what: &'static str, need: usize, have: usize) -> Result<(), PacketError> {
    if have < need {
        Err(PacketError::Truncated { what, need, have })
    } else {
        Ok(())
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

// ---------------------------------------------------------------------------------
// virtio_net_hdr
// ---------------------------------------------------------------------------------

/// `struct virtio_net_hdr` (include/uapi/linux/virtio_net.h), the 10-byte legacy
/// header a TUN with `IFF_VNET_HDR` puts in front of every packet (the default
/// `TUNSETVNETHDRSZ`). On a TUN there is no link header, so `csum_start` and `hdr_len`
/// count from the IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VirtioNetHdr {
    /// `F_NEEDS_CSUM`, `F_DATA_VALID`, `F_RSC_INFO`.
    pub flags: u8,
    /// `GSO_NONE`, `GSO_TCPV4`, `GSO_UDP`, `GSO_TCPV6`, `GSO_UDP_L4`, optionally or-ed
    /// with `GSO_ECN`.
    pub gso_type: u8,
    /// A hint: the kernel fills in the length of the skb's linear part, which may
    /// include payload. Never used as the header length here.
    pub hdr_len: u16,
    /// Payload bytes per segment (the MSS for TCP).
    pub gso_size: u16,
    /// With `F_NEEDS_CSUM`: checksum from this offset to the end...
    pub csum_start: u16,
    /// ...and store it this far after `csum_start`.
    pub csum_offset: u16,
}

impl VirtioNetHdr {
    pub const LEN: usize = 10;

    pub const F_NEEDS_CSUM: u8 = 1;
    pub const F_DATA_VALID: u8 = 2;
    pub const F_RSC_INFO: u8 = 4;

    pub const GSO_NONE: u8 = 0;
    pub const GSO_TCPV4: u8 = 1;
    /// Legacy UFO (IP fragmentation); not supported by [`Segmenter`].
    pub const GSO_UDP: u8 = 3;
    pub const GSO_TCPV6: u8 = 4;
    /// USO: UDP segmentation (`TUN_F_USO4`/`TUN_F_USO6`), both IP versions.
    pub const GSO_UDP_L4: u8 = 5;
    /// TCP with CWR set in the first segment (`SKB_GSO_TCP_ECN`).
    pub const GSO_ECN: u8 = 0x80;

    /// Parses the first [`VirtioNetHdr::LEN`] bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<VirtioNetHdr, PacketError> {
        need("virtio_net_hdr", Self::LEN, buf.len())?;
        let le = |at: usize| u16::from_le_bytes([buf[at], buf[at + 1]]);
        Ok(VirtioNetHdr {
            flags: buf[0],
            gso_type: buf[1],
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
        })
    }

    /// Splits a buffer read from a TUN into its header and the IP packet after it.
    pub fn split(buf: &[u8]) -> Result<(VirtioNetHdr, &[u8]), PacketError> {
        Ok((Self::parse(buf)?, &buf[Self::LEN..]))
    }

    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        self.write_to(&mut out);
        out
    }

    pub fn write_to(&self, out: &mut [u8; Self::LEN]) {
        out[0] = self.flags;
        out[1] = self.gso_type;
        out[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        out[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        out[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        out[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
    }

    pub fn needs_csum(&self) -> bool {
        self.flags & Self::F_NEEDS_CSUM != 0
    }

    /// The GSO type without the ECN bit.
    pub fn gso_kind(&self) -> u8 {
        self.gso_type & !Self::GSO_ECN
    }

    pub fn is_gso(&self) -> bool {
        self.gso_kind() != Self::GSO_NONE
    }

    pub fn ecn(&self) -> bool {
        self.gso_type & Self::GSO_ECN != 0
    }

    /// Checks the fields against the packet they precede: `hdr_len` and the
    /// checksum position inside it, a non-zero `gso_size` for GSO.
    pub fn validate(&self, packet_len: usize) -> Result<(), PacketError> {
        if usize::from(self.hdr_len) > packet_len {
            return Err(PacketError::HdrLenBeyondPacket {
                hdr_len: self.hdr_len.into(),
                len: packet_len,
            });
        }
        if self.needs_csum()
            && usize::from(self.csum_start) + usize::from(self.csum_offset) + 2 > packet_len
        {
            return Err(PacketError::CsumBeyondPacket {
                start: self.csum_start.into(),
                offset: self.csum_offset.into(),
                len: packet_len,
            });
        }
        if self.is_gso() && self.gso_size == 0 {
            return Err(PacketError::ZeroGsoSize);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// IP / TCP / UDP views
// ---------------------------------------------------------------------------------

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;
pub const TCP_URG: u8 = 0x20;
pub const TCP_ECE: u8 = 0x40;
pub const TCP_CWR: u8 = 0x80;

/// Longest IPv4 header (with options).
pub const MAX_IPV4_HEADER: usize = 60;
pub const IPV6_HEADER: usize = 40;
/// Longest TCP header (with options).
pub const MAX_TCP_HEADER: usize = 60;
pub const UDP_HEADER: usize = 8;
/// Longest segment head: virtio header, IPv4 header and TCP header at their maxima.
pub const MAX_SEGMENT_HEAD: usize = VirtioNetHdr::LEN + MAX_IPV4_HEADER + MAX_TCP_HEADER;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    V4,
    V6,
}

/// The transport header of a packet, when it is TCP or UDP (and, for IPv4, the
/// first fragment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp {
        src_port: u16,
        dst_port: u16,
        seq: u32,
        ack: u32,
        /// The low byte of the flags: FIN … CWR.
        flags: u8,
        header_len: usize,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
        /// The UDP length field.
        len: u16,
    },
    /// Another protocol, a later IPv4 fragment or an IPv6 extension header.
    Other,
}

/// What the lab needs to know of an IP packet: where the L4 header is, the protocol,
/// lengths, ports and TCP flags. IPv6 extension headers are not walked: a packet with
/// one reports its next-header value as `protocol` and [`Transport::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    pub version: IpVersion,
    /// Length of the IP header, i.e. the offset of the L4 header.
    pub ip_header_len: usize,
    /// The packet length according to the IP header (IPv4 total length, IPv6 40 +
    /// payload length); at most the buffer length.
    pub ip_len: usize,
    pub protocol: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 MF flag or fragment offset set.
    pub fragment: bool,
    pub transport: Transport,
}

/// A connection's 5-tuple, in the direction of the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.protocol {
            PROTO_TCP => "tcp".to_owned(),
            PROTO_UDP => "udp".to_owned(),
            p => format!("proto{p}"),
        };
        let sock = |ip: IpAddr, port: u16| match ip {
            IpAddr::V4(ip) => format!("{ip}:{port}"),
            IpAddr::V6(ip) => format!("[{ip}]:{port}"),
        };
        write!(
            f,
            "{proto} {} > {}",
            sock(self.src, self.src_port),
            sock(self.dst, self.dst_port)
        )
    }
}

impl PacketInfo {
    /// Parses the IP header at the start of `packet` and the TCP/UDP header after it.
    pub fn parse(packet: &[u8]) -> Result<PacketInfo, PacketError> {
        Self::parse_with(packet, false)
    }

    /// [`PacketInfo::parse`] of a packet's first bytes only, as a capture keeps them:
    /// the IP length may exceed them (`ip_len` is then what is there).
    pub fn parse_head(head: &[u8]) -> Result<PacketInfo, PacketError> {
        Self::parse_with(head, true)
    }

    fn parse_with(packet: &[u8], truncated: bool) -> Result<PacketInfo, PacketError> {
        need("IP header", 1, packet.len())?;
        let (version, ip_header_len, ip_len, protocol, src, dst, fragment) = match packet[0] >> 4 {
            4 => {
                need("IPv4 header", 20, packet.len())?;
                let ihl = usize::from(packet[0] & 0x0f) * 4;
                if ihl < 20 {
                    return Err(PacketError::BadLength {
                        what: "IPv4 header",
                        value: ihl,
                    });
                }
                need("IPv4 header", ihl, packet.len())?;
                let mut total = usize::from(be16(packet, 2));
                if truncated {
                    total = total.min(packet.len());
                }
                if total < ihl || total > packet.len() {
                    return Err(PacketError::BadLength {
                        what: "IPv4 total",
                        value: total,
                    });
                }
                let frag = be16(packet, 6);
                let src = Ipv4Addr::from(be32(packet, 12));
                let dst = Ipv4Addr::from(be32(packet, 16));
                (
                    IpVersion::V4,
                    ihl,
                    total,
                    packet[9],
                    IpAddr::V4(src),
                    IpAddr::V4(dst),
                    frag & 0x3fff != 0,
                )
            }
            6 => {
                need("IPv6 header", IPV6_HEADER, packet.len())?;
                let mut payload = usize::from(be16(packet, 4));
                if truncated {
                    payload = payload.min(packet.len() - IPV6_HEADER);
                }
                // Payload length 0 is a jumbogram (hop-by-hop option): not supported.
                if (payload == 0 && packet.len() > IPV6_HEADER)
                    || IPV6_HEADER + payload > packet.len()
                {
                    return Err(PacketError::BadLength {
                        what: "IPv6 payload",
                        value: payload,
                    });
                }
                let addr = |at: usize| {
                    let mut b = [0u8; 16];
                    b.copy_from_slice(&packet[at..at + 16]);
                    IpAddr::V6(Ipv6Addr::from(b))
                };
                (
                    IpVersion::V6,
                    IPV6_HEADER,
                    IPV6_HEADER + payload,
                    packet[6],
                    addr(8),
                    addr(24),
                    false,
                )
            }
            v => return Err(PacketError::NotIp(v)),
        };
        let l4 = &packet[ip_header_len..ip_len];
        let transport = match protocol {
            _ if fragment && version == IpVersion::V4 && be16(packet, 6) & 0x1fff != 0 => {
                Transport::Other
            }
            PROTO_TCP => {
                need("TCP header", 20, l4.len())?;
                let header_len = usize::from(l4[12] >> 4) * 4;
                if header_len < 20 {
                    return Err(PacketError::BadLength {
                        what: "TCP header",
                        value: header_len,
                    });
                }
                need("TCP header", header_len, l4.len())?;
                Transport::Tcp {
                    src_port: be16(l4, 0),
                    dst_port: be16(l4, 2),
                    seq: be32(l4, 4),
                    ack: be32(l4, 8),
                    flags: l4[13],
                    header_len,
                }
            }
            PROTO_UDP => {
                need("UDP header", UDP_HEADER, l4.len())?;
                Transport::Udp {
                    src_port: be16(l4, 0),
                    dst_port: be16(l4, 2),
                    len: be16(l4, 4),
                }
            }
            _ => Transport::Other,
        };
        Ok(PacketInfo {
            version,
            ip_header_len,
            ip_len,
            protocol,
            src,
            dst,
            fragment,
            transport,
        })
    }

    /// Length of the TCP or UDP header, 0 for anything else.
    pub fn l4_header_len(&self) -> usize {
        match self.transport {
            Transport::Tcp { header_len, .. } => header_len,
            Transport::Udp { .. } => UDP_HEADER,
            Transport::Other => 0,
        }
    }

    /// The 5-tuple; ports are 0 when the packet is neither TCP nor UDP.
    pub fn flow_key(&self) -> FlowKey {
        let (src_port, dst_port) = match self.transport {
            Transport::Tcp {
                src_port, dst_port, ..
            }
            | Transport::Udp {
                src_port, dst_port, ..
            } => (src_port, dst_port),
            Transport::Other => (0, 0),
        };
        FlowKey {
            src: self.src,
            dst: self.dst,
            protocol: self.protocol,
            src_port,
            dst_port,
        }
    }

    /// TCP flags, 0 for anything but TCP.
    pub fn tcp_flags(&self) -> u8 {
        match self.transport {
            Transport::Tcp { flags, .. } => flags,
            _ => 0,
        }
    }
}

// ---------------------------------------------------------------------------------
// ECN
// ---------------------------------------------------------------------------------

/// The ECN field of an IP packet (RFC 3168): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE;
/// `None` for anything but IPv4 or IPv6.
pub fn ecn_field(ip: &[u8]) -> Option<u8> {
    match ip.first()? >> 4 {
        4 => Some(ip.get(1)? & 0x03),
        6 => Some((ip.get(1)? >> 4) & 0x03),
        _ => None,
    }
}

/// Whether an IP packet is ECN-capable: ECT(0) or ECT(1) (a CE packet was marked already
/// and stays so).
pub fn is_ect(ip: &[u8]) -> bool {
    matches!(ecn_field(ip), Some(1 | 2))
}

/// Marks an ECN-capable IP packet Congestion Experienced, keeping an IPv4 header's
/// checksum right (the TCP and UDP checksums do not cover the field); returns whether
/// it was marked.
pub fn set_ce(ip: &mut [u8]) -> bool {
    if !is_ect(ip) {
        return false;
    }
    if ip[0] >> 4 == 6 {
        ip[1] |= 0x30;
        return true;
    }
    let header_len = usize::from(ip[0] & 0x0f) * 4;
    if ip.len() < header_len.max(20) {
        return false;
    }
    ip[1] |= 0x03;
    ip[10..12].fill(0);
    let checksum = internet_checksum(&ip[..header_len]);
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    true
}

// ---------------------------------------------------------------------------------
// Checksums
// ---------------------------------------------------------------------------------

/// Folded 16-bit one's-complement sum of `data` as big-endian words (an odd last byte
/// padded with zero), not complemented. Sums of consecutive ranges that start at even
/// offsets combine with [`csum_add`].
pub fn csum_sum(data: &[u8]) -> u16 {
    // One's-complement addition is byte-order independent: sum native-endian 32-bit
    // words into 64-bit accumulators (no carry is lost below 2^32 words), fold, and
    // swap the bytes at the end on little-endian hosts.
    let mut acc = [0u64; 4];
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        for (k, a) in acc.iter_mut().enumerate() {
            *a += u64::from(u32::from_ne_bytes([
                c[4 * k],
                c[4 * k + 1],
                c[4 * k + 2],
                c[4 * k + 3],
            ]));
        }
    }
    let mut sum = acc[0] + acc[1] + acc[2] + acc[3];
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(4);
    for w in &mut words {
        sum += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    let mut tail = [0u8; 4];
    let last = words.remainder();
    tail[..last.len()].copy_from_slice(last);
    sum += u64::from(u32::from_ne_bytes(tail));
    let folded = fold64(sum);
    if cfg!(target_endian = "little") {
        folded.swap_bytes()
    } else {
        folded
    }
}

fn fold64(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// One's-complement addition of two folded sums.
pub fn csum_add(a: u16, b: u16) -> u16 {
    fold64(u64::from(a) + u64::from(b))
}

/// The internet checksum of `data` (RFC 1071): the complement of [`csum_sum`]. Over
/// a header whose checksum field is correct, this gives 0.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !csum_sum(data)
}

/// Folded sum of the TCP/UDP pseudo-header: addresses (4 or 16 bytes each, both the
/// same family), protocol and L4 length (header and payload).
pub fn pseudo_header_sum(src: &[u8], dst: &[u8], protocol: u8, l4_len: u32) -> u16 {
    let addrs = csum_add(csum_sum(src), csum_sum(dst));
    let len = csum_add((l4_len >> 16) as u16, l4_len as u16);
    csum_add(csum_add(addrs, u16::from(protocol)), len)
}

/// Completes the checksum of a `NEEDS_CSUM` packet, as `skb_checksum_help` does:
/// sums from `csum_start` to the end (the field holds the pseudo-header sum) and
/// stores the complement at `csum_start + csum_offset` (0 becomes 0xffff). Clears
/// `F_NEEDS_CSUM`. A packet without the flag is left as it is.
///
/// `packet` is the IP packet after the virtio header. Not for GSO packets, whose
/// checksum covers each segment separately: segment them with [`CsumMode::Full`].
pub fn finish_checksum(hdr: &mut VirtioNetHdr, packet: &mut [u8]) -> Result<(), PacketError> {
    hdr.validate(packet.len())?;
    if !hdr.needs_csum() {
        return Ok(());
    }
    if hdr.is_gso() {
        return Err(PacketError::UnsupportedGso(hdr.gso_type));
    }
    let start = usize::from(hdr.csum_start);
    let at = start + usize::from(hdr.csum_offset);
    let sum = csum_sum(&packet[start..]);
    put16(
        packet,
        at,
        match !sum {
            0 => 0xffff,
            c => c,
        },
    );
    hdr.flags &= !VirtioNetHdr::F_NEEDS_CSUM;
    Ok(())
}

// ---------------------------------------------------------------------------------
// Segmentation
// ---------------------------------------------------------------------------------

/// How [`Segmenter`] leaves the L4 checksum of each segment; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsumMode {
    /// `NEEDS_CSUM` virtio header, field seeded with the pseudo-header sum. Fast; for
    /// a receiving kernel (local delivery or forwarding). Non-GSO packets pass unchanged.
    Partial,
    /// Complete checksum, no virtio flags. Needed before corrupting a packet, or when
    /// the consumer is not a kernel. Non-GSO `NEEDS_CSUM` packets are completed.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Not GSO: one segment, the packet itself. With `Full` and `NEEDS_CSUM`, the head
    /// covers up to the checksum field, which it completes.
    Single,
    Tcp,
    Udp,
}

/// Splits one packet from a TUN (virtio header + IP packet) into wire-size segments.
///
/// `new` validates everything once; afterwards no method fails or panics for
/// `i < len()` and a head buffer of [`Segmenter::head_len`] bytes. Segment `i` is
/// `head(i)` followed by `payload(i)`.
#[derive(Debug, Clone)]
pub struct Segmenter<'a> {
    vnet: VirtioNetHdr,
    packet: &'a [u8],
    kind: Kind,
    version: IpVersion,
    /// IP header length (L4 offset).
    l3: usize,
    /// IP + L4 header length; the payload starts here.
    headers: usize,
    /// End of the IP packet (IP length field), payload ends here.
    end: usize,
    mss: usize,
    count: usize,
    /// Folded sum of the two addresses and the protocol, for the pseudo-headers.
    addr_sum: u16,
}

impl<'a> Segmenter<'a> {
    /// Validates `vnet` against `packet` (the IP packet after the virtio header) and
    /// prepares the segmentation. Non-GSO packets are not parsed and give one segment.
    pub fn new(vnet: &VirtioNetHdr, packet: &'a [u8]) -> Result<Segmenter<'a>, PacketError> {
        vnet.validate(packet.len())?;
        let mut seg = Segmenter {
            vnet: *vnet,
            packet,
            kind: Kind::Single,
            version: IpVersion::V4,
            l3: 0,
            headers: 0,
            end: packet.len(),
            mss: packet.len().max(1),
            count: 1,
            addr_sum: 0,
        };
        if !vnet.is_gso() {
            return Ok(seg);
        }
        let gso = vnet.gso_kind();
        let info = PacketInfo::parse(packet)?;
        let mismatch = || PacketError::GsoMismatch {
            gso_type: vnet.gso_type,
            version: match info.version {
                IpVersion::V4 => 4,
                IpVersion::V6 => 6,
            },
            protocol: info.protocol,
        };
        seg.kind = match (gso, info.version, info.transport) {
            (VirtioNetHdr::GSO_TCPV4, IpVersion::V4, Transport::Tcp { .. })
            | (VirtioNetHdr::GSO_TCPV6, IpVersion::V6, Transport::Tcp { .. }) => Kind::Tcp,
            (VirtioNetHdr::GSO_UDP_L4, _, Transport::Udp { .. }) => Kind::Udp,
            (VirtioNetHdr::GSO_TCPV4 | VirtioNetHdr::GSO_TCPV6 | VirtioNetHdr::GSO_UDP_L4, ..) => {
                return Err(if info.fragment {
                    PacketError::Fragment
                } else {
                    mismatch()
                })
            }
            _ => return Err(PacketError::UnsupportedGso(vnet.gso_type)),
        };
        if info.fragment {
            return Err(PacketError::Fragment);
        }
        seg.version = info.version;
        seg.l3 = info.ip_header_len;
        seg.headers = info.ip_header_len + info.l4_header_len();
        seg.end = info.ip_len;
        seg.mss = usize::from(vnet.gso_size);
        let payload = seg.end - seg.headers;
        seg.count = payload.div_ceil(seg.mss).max(1);
        let (src, dst) = match info.version {
            IpVersion::V4 => (&packet[12..16], &packet[16..20]),
            IpVersion::V6 => (&packet[8..24], &packet[24..40]),
        };
        seg.addr_sum = csum_add(
            csum_add(csum_sum(src), csum_sum(dst)),
            u16::from(info.protocol),
        );
        Ok(seg)
    }

    /// Number of segments (1 for a non-GSO packet).
    pub fn len(&self) -> usize {
        self.count
    }

    /// Always false: every packet gives at least one segment.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether the packet is a GSO super-packet that is actually split.
    pub fn is_gso(&self) -> bool {
        self.kind != Kind::Single
    }

    /// IP length of segment `i` on the wire (no link overhead, no virtio header).
    pub fn wire_len(&self, i: usize) -> usize {
        match self.kind {
            Kind::Single => self.packet.len(),
            _ => self.headers + self.payload_range(i).len(),
        }
    }

    /// Sum of the wire lengths of all segments.
    pub fn total_wire_len(&self) -> usize {
        match self.kind {
            Kind::Single => self.packet.len(),
            _ => self.headers * self.count + (self.end - self.headers),
        }
    }

    /// Longest segment, headers included (no virtio header): a buffer for
    /// [`Segmenter::write_segment`] needs this plus [`VirtioNetHdr::LEN`].
    pub fn max_wire_len(&self) -> usize {
        self.wire_len(0)
    }

    /// Where segment `i`'s payload lies in the packet given to [`Segmenter::new`].
    pub fn payload_range(&self, i: usize) -> std::ops::Range<usize> {
        match self.kind {
            Kind::Single => {
                let split = self.single_split();
                split..self.packet.len()
            }
            _ => {
                let start = self.headers + i * self.mss;
                start..(start + self.mss).min(self.end)
            }
        }
    }

    /// For a single packet: how much goes into the head (what `Full` may rewrite).
    fn single_split(&self) -> usize {
        if self.vnet.needs_csum() {
            usize::from(self.vnet.csum_start) + usize::from(self.vnet.csum_offset) + 2
        } else {
            0
        }
    }

    /// Length of the head of segment `i` (with `vnet`, the virtio header included).
    /// At most [`MAX_SEGMENT_HEAD`], except for a non-GSO `NEEDS_CSUM` packet whose
    /// checksum field ends beyond byte 120 (IPv6 extension headers): its head runs to
    /// the end of that field.
    pub fn head_len(&self, i: usize, vnet: bool) -> usize {
        let off = if vnet { VirtioNetHdr::LEN } else { 0 };
        off + self.wire_len(i) - self.payload_range(i).len()
    }

    /// The payload of segment `i`: a slice of the original packet.
    pub fn payload(&self, i: usize) -> &'a [u8] {
        &self.packet[self.payload_range(i)]
    }

    /// Writes the head of segment `i` into `head` and returns its length: the virtio
    /// header first when `vnet` is true, then the segment's IP and L4 headers (for a
    /// non-GSO packet: the virtio header, and with `NEEDS_CSUM` the bytes up to the end
    /// of the checksum field). Panics if `head` is shorter than [`Segmenter::head_len`].
    pub fn head(&self, i: usize, mode: CsumMode, vnet: bool, head: &mut [u8]) -> usize {
        assert!(i < self.count, "segment {i} of {}", self.count);
        let off = if vnet { VirtioNetHdr::LEN } else { 0 };
        if self.kind == Kind::Single {
            let mut hdr = self.vnet;
            let split = self.single_split();
            head[off..off + split].copy_from_slice(&self.packet[..split]);
            if mode == CsumMode::Full && hdr.needs_csum() {
                // Sum of the part in the head after csum_start plus the payload.
                let start = usize::from(hdr.csum_start);
                let at = off + start + usize::from(hdr.csum_offset);
                let sum = csum_add(
                    csum_sum(&head[off + start..off + split]),
                    csum_sum_at(&self.packet[split..], split - start),
                );
                put16(head, at, nonzero(!sum));
                hdr.flags &= !VirtioNetHdr::F_NEEDS_CSUM;
            }
            if vnet {
                hdr.write_to((&mut head[..VirtioNetHdr::LEN]).try_into().unwrap());
            }
            return off + split;
        }

        let payload = self.payload(i);
        let h = &mut head[off..off + self.headers];
        h.copy_from_slice(&self.packet[..self.headers]);
        let l4_len = self.headers - self.l3 + payload.len();
        match self.version {
            IpVersion::V4 => {
                put16(h, 2, (self.l3 + l4_len) as u16);
                let id = be16(h, 4).wrapping_add(i as u16);
                put16(h, 4, id);
                put16(h, 10, 0);
                let c = internet_checksum(&h[..self.l3]);
                put16(h, 10, c);
            }
            IpVersion::V6 => put16(h, 4, l4_len as u16),
        }
        let l4 = self.l3;
        let csum_at = match self.kind {
            Kind::Tcp => {
                let seq = be32(h, l4 + 4).wrapping_add((i * self.mss) as u32);
                h[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
                let mut flags = h[l4 + 13];
                if i + 1 != self.count {
                    flags &= !(TCP_FIN | TCP_PSH);
                }
                if i != 0 {
                    flags &= !TCP_CWR;
                }
                h[l4 + 13] = flags;
                l4 + 16
            }
            _ => {
                put16(h, l4 + 4, l4_len as u16);
                l4 + 6
            }
        };
        let pseudo = csum_add(
            self.addr_sum,
            csum_add((l4_len >> 16) as u16, l4_len as u16),
        );
        let mut hdr = VirtioNetHdr {
            hdr_len: self.headers as u16,
            ..VirtioNetHdr::default()
        };
        match mode {
            CsumMode::Partial => {
                put16(h, csum_at, pseudo);
                hdr.flags = VirtioNetHdr::F_NEEDS_CSUM;
                hdr.csum_start = l4 as u16;
                hdr.csum_offset = (csum_at - l4) as u16;
            }
            CsumMode::Full => {
                put16(h, csum_at, 0);
                // The L4 header has an even length, so the payload starts even.
                let sum = csum_add(csum_add(pseudo, csum_sum(&h[l4..])), csum_sum(payload));
                put16(h, csum_at, nonzero(!sum));
            }
        }
        if vnet {
            hdr.write_to((&mut head[..VirtioNetHdr::LEN]).try_into().unwrap());
        }
        off + self.headers
    }

    /// Writes segment `i` contiguously into `out` (virtio header first when `vnet`)
    /// and returns its length.
    pub fn write_segment(
        &self,
        i: usize,
        mode: CsumMode,
        vnet: bool,
        out: &mut [u8],
    ) -> Result<usize, PacketError> {
        let payload = self.payload(i);
        let off = if vnet { VirtioNetHdr::LEN } else { 0 };
        let len = off + self.packet.len().min(self.wire_len(i));
        if out.len() < len {
            return Err(PacketError::BufferTooSmall {
                need: len,
                have: out.len(),
            });
        }
        let head_len = if self.kind == Kind::Single {
            self.head(i, mode, vnet, out)
        } else {
            let mut head = [0u8; MAX_SEGMENT_HEAD];
            let n = self.head(i, mode, vnet, &mut head);
            out[..n].copy_from_slice(&head[..n]);
            n
        };
        out[head_len..head_len + payload.len()].copy_from_slice(payload);
        Ok(head_len + payload.len())
    }
}

/// [`csum_sum`] of a range that starts `offset` bytes after an even position: an odd
/// offset swaps the bytes of the sum.
fn csum_sum_at(data: &[u8], offset: usize) -> u16 {
    let s = csum_sum(data);
    if offset % 2 == 1 {
        s.swap_bytes()
    } else {
        s
    }
}

/// Checksum fields store 0xffff for a zero result, as `skb_checksum_help` (and UDP,
/// where 0 means "no checksum") do.
fn nonzero(c: u16) -> u16 {
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// Segments one packet read from a TUN and hands each segment to `out`, returning
/// the number of segments. `buf` is scratch space of at least
/// [`Segmenter::max_wire_len`] + [`VirtioNetHdr::LEN`] bytes (65 546 always suffice);
/// nothing is allocated.
pub fn segment(
    vnet: &VirtioNetHdr,
    packet: &[u8],
    mode: CsumMode,
    with_vnet: bool,
    buf: &mut [u8],
    mut out: impl FnMut(&[u8]),
) -> Result<usize, PacketError> {
    let seg = Segmenter::new(vnet, packet)?;
    for i in 0..seg.len() {
        let n = seg.write_segment(i, mode, with_vnet, buf)?;
        out(&buf[..n]);
    }
    Ok(seg.len())
}

// ---------------------------------------------------------------------------------
// Coalescing (user-space GRO)
// ---------------------------------------------------------------------------------

/// Most segments merged into one super-packet.
pub const MAX_COALESCE_SEGMENTS: usize = 64;

/// Merges consecutive TCP segments of one flow back into a GSO super-packet, as the
/// kernel's GRO would, so that a receiving kernel pays per super-packet rather than
/// per segment. This is what makes per-packet emulation fast: segment for the link
/// model, then coalesce the segments that leave it together.
///
/// Only segments that carry `NEEDS_CSUM` or `DATA_VALID` in their virtio header are
/// merged (the result is `NEEDS_CSUM`, which the receiver trusts); a segment with a
/// complete checksum and no flag, e.g. one corrupted on purpose, is refused so the
/// receiver still verifies it. A segment joins the pending super-packet when it
/// continues it exactly: same IP header but for length, id (IPv4: the next id) and
/// checksum; same ports, ack, window and options; the next sequence number; only ACK
/// and PSH set (CWR allowed on the first); a payload no larger than the first's. A
/// shorter payload or PSH closes the super-packet. Pure ACKs, SYN/FIN/RST/URG, UDP
/// and anything else are refused.
///
/// The buffer is allocated once, in `new`. A [`Coalescer::holding`] one keeps the
/// headers only: the caller keeps the segments it pushed and writes each one's payload
/// (from [`Coalescer::payload_offset`]) after the headers `finish` returns, with one
/// gathering write — a copy of every byte saved.
#[derive(Debug, Clone)]
pub struct Coalescer {
    buf: Vec<u8>,
    /// Payloads are left to the caller (`holding`).
    holds: bool,
    /// Payload bytes of the pending super-packet, copied or held.
    payload_len: usize,
    /// Segments in `buf`; 0 when empty.
    count: usize,
    /// Set by `finish`: the next push starts over.
    finished: bool,
    closed: bool,
    version: IpVersion,
    l3: usize,
    /// Offset of the payload in the IP packet.
    headers: usize,
    gso_size: usize,
    next_seq: u32,
    next_id: u16,
    psh: bool,
    cwr: bool,
}

impl Default for Coalescer {
    fn default() -> Self {
        Self::new()
    }
}

impl Coalescer {
    pub fn new() -> Coalescer {
        Coalescer {
            buf: Vec::with_capacity(VirtioNetHdr::LEN + IPV6_HEADER + 65535),
            holds: false,
            payload_len: 0,
            count: 0,
            finished: false,
            closed: false,
            version: IpVersion::V4,
            l3: 0,
            headers: 0,
            gso_size: 0,
            next_seq: 0,
            next_id: 0,
            psh: false,
            cwr: false,
        }
    }

    /// A coalescer that keeps the headers only (see [`Coalescer`]).
    pub fn holding() -> Coalescer {
        Coalescer {
            holds: true,
            ..Coalescer::new()
        }
    }

    /// Where the payload of each packet pushed into the pending super-packet begins
    /// (virtio header included): all of them have the same headers.
    pub fn payload_offset(&self) -> usize {
        VirtioNetHdr::LEN + self.headers
    }

    /// Segments in the pending super-packet.
    pub fn len(&self) -> usize {
        if self.finished {
            0
        } else {
            self.count
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offers one packet (virtio header + IP packet, contiguous). Returns false when
    /// it cannot join the pending super-packet: then [`Coalescer::finish`] the pending
    /// one and push it again; if that fails too, it cannot be coalesced at all and is
    /// to be sent on its own.
    pub fn push(&mut self, pkt: &[u8]) -> bool {
        let Ok((vnet, ip)) = VirtioNetHdr::split(pkt) else {
            return false;
        };
        // One parse of the whole packet: its headers and its length at once.
        let Ok(info) = PacketInfo::parse(ip) else {
            return false;
        };
        let headers = info.ip_header_len + info.l4_header_len();
        if info.ip_len != ip.len() || headers > ip.len() {
            return false;
        }
        let split = VirtioNetHdr::LEN + headers;
        self.join(&vnet, &pkt[..split], &pkt[split..], &info)
    }

    /// [`Coalescer::push`] for a packet in two parts, as [`Segmenter::head`] and
    /// [`Segmenter::payload`] give it: `head` holds the virtio header and all of the
    /// IP and TCP headers, `payload` the rest.
    pub fn push_split(&mut self, head: &[u8], payload: &[u8]) -> bool {
        let Ok((vnet, ip)) = VirtioNetHdr::split(head) else {
            return false;
        };
        // Parse the headers only: the IP length covers the payload that follows.
        let mut hdrs = [0u8; MAX_IPV4_HEADER + MAX_TCP_HEADER];
        if ip.len() > hdrs.len() {
            return false;
        }
        hdrs[..ip.len()].copy_from_slice(ip);
        let info = match ip.first().map(|b| b >> 4) {
            Some(4) if ip.len() >= 20 => {
                // Pretend the total length is just the headers to parse them.
                let total = be16(ip, 2) as usize;
                if total != ip.len() + payload.len() {
                    return false;
                }
                put16(&mut hdrs, 2, ip.len() as u16);
                PacketInfo::parse(&hdrs[..ip.len()])
            }
            Some(6) if ip.len() >= IPV6_HEADER => {
                let plen = be16(ip, 4) as usize;
                if IPV6_HEADER + plen != ip.len() + payload.len() {
                    return false;
                }
                put16(&mut hdrs, 4, (ip.len() - IPV6_HEADER) as u16);
                PacketInfo::parse(&hdrs[..ip.len()])
            }
            _ => return false,
        };
        let Ok(info) = info else {
            return false;
        };
        self.join(&vnet, head, payload, &info)
    }

    /// Joins a packet whose headers (`head`, virtio header first) were parsed into
    /// `info` to the pending super-packet, or refuses it.
    fn join(
        &mut self,
        vnet: &VirtioNetHdr,
        head: &[u8],
        payload: &[u8],
        info: &PacketInfo,
    ) -> bool {
        if self.finished {
            self.count = 0;
            self.finished = false;
        }
        if vnet.is_gso()
            || vnet.flags & (VirtioNetHdr::F_NEEDS_CSUM | VirtioNetHdr::F_DATA_VALID) == 0
            || payload.is_empty()
        {
            return false;
        }
        let ip = &head[VirtioNetHdr::LEN..];
        let Transport::Tcp {
            seq,
            flags,
            header_len,
            ..
        } = info.transport
        else {
            return false;
        };
        if info.fragment
            || info.ip_header_len + header_len != ip.len()
            || flags & !(TCP_ACK | TCP_PSH | TCP_CWR | TCP_ECE) != 0
            || flags & TCP_ACK == 0
            || (vnet.needs_csum()
                && (usize::from(vnet.csum_start) != info.ip_header_len || vnet.csum_offset != 16))
        {
            return false;
        }
        let l3 = info.ip_header_len;
        if self.count == 0 {
            self.buf.clear();
            self.buf.extend_from_slice(head);
            if !self.holds {
                self.buf.extend_from_slice(payload);
            }
            self.payload_len = payload.len();
            self.count = 1;
            self.closed = flags & TCP_PSH != 0;
            self.version = info.version;
            self.l3 = l3;
            self.headers = ip.len();
            self.gso_size = payload.len();
            self.next_seq = seq.wrapping_add(payload.len() as u32);
            self.next_id = if info.version == IpVersion::V4 {
                be16(ip, 4).wrapping_add(1)
            } else {
                0
            };
            self.psh = flags & TCP_PSH != 0;
            self.cwr = flags & TCP_CWR != 0;
            return true;
        }
        let first = &self.buf[VirtioNetHdr::LEN..VirtioNetHdr::LEN + self.headers];
        let same = |a: usize, b: usize| ip[a..b] == first[a..b];
        let ip_same = match info.version {
            IpVersion::V4 => {
                same(0, 2) && same(6, 10) && same(12, l3) && be16(ip, 4) == self.next_id
            }
            IpVersion::V6 => same(0, 4) && same(6, IPV6_HEADER),
        };
        let t = l3;
        let tcp_same = same(t, t + 4) // ports
            && same(t + 8, t + 13) // ack, data offset
            && (ip[t + 13] & !TCP_PSH) == (first[t + 13] & !(TCP_PSH | TCP_CWR)) // no CWR here
            && same(t + 14, t + 16) // window
            && same(t + 18, self.headers); // urgent pointer, options
        let total = self.headers + self.payload_len + payload.len();
        if self.closed
            || info.version != self.version
            || l3 != self.l3
            || ip.len() != self.headers
            || !ip_same
            || !tcp_same
            || seq != self.next_seq
            || payload.len() > self.gso_size
            || self.count >= MAX_COALESCE_SEGMENTS
            || total
                - if self.version == IpVersion::V6 {
                    IPV6_HEADER
                } else {
                    0
                }
                > 65535
        {
            return false;
        }
        if !self.holds {
            self.buf.extend_from_slice(payload);
        }
        self.payload_len += payload.len();
        self.count += 1;
        self.next_seq = seq.wrapping_add(payload.len() as u32);
        self.next_id = self.next_id.wrapping_add(1);
        self.psh = flags & TCP_PSH != 0;
        self.closed = self.psh || payload.len() < self.gso_size;
        true
    }

    /// Completes the pending packet and returns it (virtio header first), or `None`
    /// when empty. A single segment comes back unchanged; more become a GSO
    /// super-packet with a `NEEDS_CSUM` header. The next push starts a new one. A
    /// holding coalescer returns the headers, to be followed by the held payloads.
    pub fn finish(&mut self) -> Option<&[u8]> {
        if self.is_empty() {
            return None;
        }
        self.finished = true;
        if self.count == 1 {
            return Some(&self.buf);
        }
        let l3 = self.l3;
        let ip_len = self.headers + self.payload_len;
        let (vnet, ip) = self.buf.split_at_mut(VirtioNetHdr::LEN);
        let l4_len = ip_len - l3;
        let gso_type = match self.version {
            IpVersion::V4 => {
                put16(ip, 2, ip_len as u16);
                put16(ip, 10, 0);
                let c = internet_checksum(&ip[..l3]);
                put16(ip, 10, c);
                VirtioNetHdr::GSO_TCPV4
            }
            IpVersion::V6 => {
                put16(ip, 4, l4_len as u16);
                VirtioNetHdr::GSO_TCPV6
            }
        };
        if self.psh {
            ip[l3 + 13] |= TCP_PSH;
        }
        let (src, dst) = match self.version {
            IpVersion::V4 => (12..16, 16..20),
            IpVersion::V6 => (8..24, 24..40),
        };
        let seed = pseudo_header_sum(&ip[src], &ip[dst], PROTO_TCP, l4_len as u32);
        put16(ip, l3 + 16, seed);
        let hdr = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            gso_type: gso_type | if self.cwr { VirtioNetHdr::GSO_ECN } else { 0 },
            hdr_len: self.headers as u16,
            gso_size: self.gso_size as u16,
            csum_start: l3 as u16,
            csum_offset: 16,
        };
        hdr.write_to(vnet.try_into().expect("10 bytes"));
        Some(&self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward RFC 1071 checksum, 16 bits at a time, as an independent
    /// reference for the fast one.
    fn ref_checksum(chunks: &[&[u8]]) -> u16 {
        let mut bytes = Vec::new();
        for c in chunks {
            bytes.extend_from_slice(c);
        }
        if bytes.len() % 2 == 1 {
            bytes.push(0);
        }
        let mut sum: u32 = 0;
        for w in bytes.chunks(2) {
            sum += u32::from(w[0]) << 8 | u32::from(w[1]);
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// Verifies the L4 checksum of a complete IP packet with the reference code.
    fn l4_checksum_ok(pkt: &[u8]) -> bool {
        let info = PacketInfo::parse(pkt).unwrap();
        let l4 = &pkt[info.ip_header_len..info.ip_len];
        let len = (l4.len() as u32).to_be_bytes();
        let pseudo: Vec<u8> = match (info.src, info.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                [&s.octets()[..], &d.octets(), &[0, info.protocol], &len[2..]].concat()
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => [
                &s.octets()[..],
                &d.octets(),
                &len,
                &[0, 0, 0, info.protocol],
            ]
            .concat(),
            _ => unreachable!(),
        };
        ref_checksum(&[&pseudo, l4]) == 0
    }

    fn payload_bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    const SRC4: [u8; 4] = [10, 1, 2, 1];
    const DST4: [u8; 4] = [10, 1, 2, 2];
    const SRC6: [u8; 16] = [0xfd, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST6: [u8; 16] = [0xfd, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    fn tcp_header(seq: u32, flags: u8, options: usize) -> Vec<u8> {
        let mut t = vec![0u8; 20 + options];
        put16(&mut t, 0, 40000);
        put16(&mut t, 2, 5201);
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&77u32.to_be_bytes());
        t[12] = (((20 + options) / 4) as u8) << 4;
        t[13] = flags;
        put16(&mut t, 14, 512);
        for (k, b) in t[20..].iter_mut().enumerate() {
            *b = if k % 4 == 0 { 1 } else { 8 }; // NOPs and junk, just bytes
        }
        t
    }

    /// A super-packet as the kernel hands it over: `NEEDS_CSUM`, checksum field
    /// holding the pseudo-header sum over the whole length.
    fn v4_super(
        l4: &[u8],
        payload: &[u8],
        protocol: u8,
        gso: u8,
        mss: u16,
    ) -> (VirtioNetHdr, Vec<u8>) {
        let total = 20 + l4.len() + payload.len();
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[1] = 0x02; // ECT(0)
        put16(&mut p, 2, total as u16);
        put16(&mut p, 4, 0xfffe); // id wraps during segmentation
        put16(&mut p, 6, 0x4000); // DF
        p[8] = 64;
        p[9] = protocol;
        p[12..16].copy_from_slice(&SRC4);
        p[16..20].copy_from_slice(&DST4);
        let c = internet_checksum(&p);
        put16(&mut p, 10, c);
        p.extend_from_slice(l4);
        p.extend_from_slice(payload);
        let csum_offset = if protocol == PROTO_TCP { 16 } else { 6 };
        let seed = pseudo_header_sum(&SRC4, &DST4, protocol, (total - 20) as u32);
        put16(&mut p, 20 + csum_offset, seed);
        let hdr = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            gso_type: gso,
            hdr_len: (20 + l4.len()) as u16,
            gso_size: mss,
            csum_start: 20,
            csum_offset: csum_offset as u16,
        };
        (hdr, p)
    }

    fn v6_super(
        l4: &[u8],
        payload: &[u8],
        protocol: u8,
        gso: u8,
        mss: u16,
    ) -> (VirtioNetHdr, Vec<u8>) {
        let plen = l4.len() + payload.len();
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        put16(&mut p, 4, plen as u16);
        p[6] = protocol;
        p[7] = 64;
        p[8..24].copy_from_slice(&SRC6);
        p[24..40].copy_from_slice(&DST6);
        p.extend_from_slice(l4);
        p.extend_from_slice(payload);
        let csum_offset = if protocol == PROTO_TCP { 16 } else { 6 };
        let seed = pseudo_header_sum(&SRC6, &DST6, protocol, plen as u32);
        put16(&mut p, 40 + csum_offset, seed);
        let hdr = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            gso_type: gso,
            hdr_len: (40 + l4.len()) as u16,
            gso_size: mss,
            csum_start: 40,
            csum_offset: csum_offset as u16,
        };
        (hdr, p)
    }

    /// Runs the segmenter both ways (writev-style head + payload, and contiguous) and
    /// both checksum modes; returns the `Full` segments after checking they agree.
    fn segments(hdr: &VirtioNetHdr, pkt: &[u8]) -> Vec<Vec<u8>> {
        let seg = Segmenter::new(hdr, pkt).unwrap();
        let mut full = Vec::new();
        let mut buf = vec![0u8; 70000];
        let n = segment(hdr, pkt, CsumMode::Full, false, &mut buf, |s| {
            full.push(s.to_vec())
        })
        .unwrap();
        assert_eq!(n, seg.len());
        assert_eq!(full.len(), seg.len());
        let mut total = 0;
        for (i, s) in full.iter().enumerate() {
            assert_eq!(s.len(), seg.wire_len(i));
            total += s.len();
            let mut head = [0u8; MAX_SEGMENT_HEAD];
            let h = seg.head(i, CsumMode::Full, false, &mut head);
            assert_eq!([&head[..h], seg.payload(i)].concat(), *s);

            // Partial with virtio header: same bytes except the checksum field, and
            // completing it gives the Full segment.
            let n = seg
                .write_segment(i, CsumMode::Partial, true, &mut buf)
                .unwrap();
            let (mut vh, _) = VirtioNetHdr::split(&buf[..n]).unwrap();
            assert!(vh.needs_csum() && !vh.is_gso());
            let mut p = buf[VirtioNetHdr::LEN..n].to_vec();
            finish_checksum(&mut vh, &mut p).unwrap();
            assert_eq!(vh.flags, 0);
            assert_eq!(p, *s, "segment {i}: Partial + finish_checksum == Full");
        }
        assert_eq!(total, seg.total_wire_len());
        full
    }

    #[test]
    fn virtio_header_round_trips_little_endian() {
        let hdr = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            gso_type: VirtioNetHdr::GSO_TCPV4 | VirtioNetHdr::GSO_ECN,
            hdr_len: 0x0142,
            gso_size: 1448,
            csum_start: 20,
            csum_offset: 16,
        };
        let b = hdr.to_bytes();
        assert_eq!(b, [1, 0x81, 0x42, 0x01, 0xa8, 0x05, 20, 0, 16, 0]);
        assert_eq!(VirtioNetHdr::parse(&b).unwrap(), hdr);
        assert!(hdr.ecn() && hdr.is_gso() && hdr.needs_csum());
        assert_eq!(hdr.gso_kind(), VirtioNetHdr::GSO_TCPV4);
        assert!(VirtioNetHdr::parse(&b[..9]).is_err());
    }

    #[test]
    fn checksum_helpers_match_the_reference() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        for len in (0..200).chain([1447, 1448, 1500, 9000, 65535]) {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng as u8
                })
                .collect();
            assert_eq!(
                internet_checksum(&data),
                ref_checksum(&[&data]),
                "len {len}"
            );
        }
        // RFC 1071's example: 0001 f203 f4f5 f6f7 sums to ddf2.
        assert_eq!(
            csum_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(csum_sum(&[0xff; 64]), 0xffff);
    }

    #[test]
    fn packet_segments_tcp_v4_super_packet() {
        let payload = payload_bytes(3 * 1448 + 500);
        let flags = TCP_ACK | TCP_PSH | TCP_FIN | TCP_CWR;
        let (hdr, pkt) = v4_super(
            &tcp_header(0xffff_f000, flags, 12),
            &payload,
            PROTO_TCP,
            VirtioNetHdr::GSO_TCPV4 | VirtioNetHdr::GSO_ECN,
            1448,
        );
        let segs = segments(&hdr, &pkt);
        assert_eq!(segs.len(), 4);
        let mut got = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let info = PacketInfo::parse(s).unwrap();
            let plen = if i < 3 { 1448 } else { 500 };
            assert_eq!(s.len(), 20 + 32 + plen);
            assert_eq!(info.ip_len, s.len());
            assert_eq!(be16(s, 2) as usize, s.len());
            assert_eq!(be16(s, 4), 0xfffeu16.wrapping_add(i as u16), "IPv4 id");
            assert_eq!(s[1], 0x02, "TOS/ECN kept");
            assert_eq!(ref_checksum(&[&s[..20]]), 0, "IPv4 header checksum");
            assert!(l4_checksum_ok(s), "TCP checksum of segment {i}");
            let Transport::Tcp {
                seq,
                flags,
                header_len,
                ..
            } = info.transport
            else {
                panic!("not TCP");
            };
            assert_eq!(header_len, 32);
            assert_eq!(seq, 0xffff_f000u32.wrapping_add(1448 * i as u32));
            let want = match i {
                0 => TCP_ACK | TCP_CWR,
                3 => TCP_ACK | TCP_PSH | TCP_FIN,
                _ => TCP_ACK,
            };
            assert_eq!(flags, want, "flags of segment {i}");
            assert_eq!(s[20 + 20..20 + 32], pkt[20 + 20..20 + 32], "options copied");
            got.extend_from_slice(&s[52..]);
        }
        assert_eq!(got, payload);
    }

    #[test]
    fn packet_segments_tcp_v6_and_udp() {
        let payload = payload_bytes(2 * 1428 + 1);
        let (hdr, pkt) = v6_super(
            &tcp_header(1, TCP_ACK | TCP_PSH, 0),
            &payload,
            PROTO_TCP,
            VirtioNetHdr::GSO_TCPV6,
            1428,
        );
        let segs = segments(&hdr, &pkt);
        assert_eq!(
            segs.iter().map(Vec::len).collect::<Vec<_>>(),
            [1488, 1488, 61]
        );
        for (i, s) in segs.iter().enumerate() {
            assert_eq!(be16(s, 4) as usize, s.len() - 40, "IPv6 payload length");
            assert!(l4_checksum_ok(s));
            let info = PacketInfo::parse(s).unwrap();
            assert_eq!(info.tcp_flags() & TCP_PSH != 0, i == 2);
        }

        // USO over IPv6 and IPv4: every datagram gets its own length and checksum.
        let mut udp = vec![0u8; 8];
        put16(&mut udp, 0, 9000);
        put16(&mut udp, 2, 9001);
        let payload = payload_bytes(3 * 1200 + 7);
        for (hdr, pkt, ip) in [
            {
                let (h, p) = v6_super(&udp, &payload, PROTO_UDP, VirtioNetHdr::GSO_UDP_L4, 1200);
                (h, p, 40)
            },
            {
                let (h, p) = v4_super(&udp, &payload, PROTO_UDP, VirtioNetHdr::GSO_UDP_L4, 1200);
                (h, p, 20)
            },
        ] {
            let segs = segments(&hdr, &pkt);
            assert_eq!(segs.len(), 4);
            for (i, s) in segs.iter().enumerate() {
                let plen = if i < 3 { 1200 } else { 7 };
                assert_eq!(s.len(), ip + 8 + plen);
                assert_eq!(be16(s, ip + 4) as usize, 8 + plen, "UDP length");
                assert!(l4_checksum_ok(s));
                assert_eq!(s[ip + 8..], payload[i * 1200..i * 1200 + plen]);
                let key = PacketInfo::parse(s).unwrap().flow_key();
                assert_eq!(
                    (key.protocol, key.src_port, key.dst_port),
                    (PROTO_UDP, 9000, 9001)
                );
            }
        }
    }

    #[test]
    fn packet_non_gso_passes_through_as_one_segment() {
        let payload = payload_bytes(1000);
        let (mut hdr, pkt) = v4_super(&tcp_header(5, TCP_ACK, 0), &payload, PROTO_TCP, 0, 0);
        let seg = Segmenter::new(&hdr, &pkt).unwrap();
        assert_eq!(
            (seg.len(), seg.wire_len(0), seg.is_gso()),
            (1, pkt.len(), false)
        );
        let mut buf = vec![0u8; 2000];
        // Partial: bytes and virtio header unchanged.
        let n = seg
            .write_segment(0, CsumMode::Partial, true, &mut buf)
            .unwrap();
        assert_eq!(buf[..10], hdr.to_bytes());
        assert_eq!(buf[10..n], pkt[..]);
        // Full: the checksum is completed, nothing else changes.
        let n = seg
            .write_segment(0, CsumMode::Full, true, &mut buf)
            .unwrap();
        let (vh, p) = VirtioNetHdr::split(&buf[..n]).unwrap();
        assert_eq!(vh.flags, 0);
        assert!(l4_checksum_ok(p));
        let mut fixed = pkt.clone();
        finish_checksum(&mut hdr, &mut fixed).unwrap();
        assert_eq!(p, &fixed[..]);
        // The head/payload split covers the whole packet.
        let mut head = [0u8; MAX_SEGMENT_HEAD];
        let h = seg.head(0, CsumMode::Full, false, &mut head);
        assert_eq!([&head[..h], seg.payload(0)].concat(), fixed);

        // Anything at all, even not IP, passes through when not GSO.
        let junk = [0xffu8; 7];
        let seg = Segmenter::new(&VirtioNetHdr::default(), &junk).unwrap();
        assert_eq!(seg.payload(0), &junk);
        // A GSO packet whose payload fits one segment gives one segment.
        let (hdr, pkt) = v4_super(
            &tcp_header(5, TCP_ACK, 0),
            &payload,
            PROTO_TCP,
            VirtioNetHdr::GSO_TCPV4,
            1448,
        );
        assert_eq!(segments(&hdr, &pkt), [fixed]);
    }

    #[test]
    fn packet_info_reads_flows() {
        let (_, pkt) = v4_super(&tcp_header(9, TCP_SYN, 0), &[], PROTO_TCP, 0, 0);
        let info = PacketInfo::parse(&pkt).unwrap();
        assert_eq!(
            info.flow_key().to_string(),
            "tcp 10.1.2.1:40000 > 10.1.2.2:5201"
        );
        assert_eq!(info.tcp_flags(), TCP_SYN);
        assert_eq!((info.ip_header_len, info.l4_header_len()), (20, 20));
        let (_, pkt) = v6_super(&tcp_header(9, TCP_ACK, 0), &[1, 2, 3], PROTO_TCP, 0, 0);
        let info = PacketInfo::parse(&pkt).unwrap();
        assert_eq!(
            info.flow_key().to_string(),
            "tcp [fd00:1:2::1]:40000 > [fd00:1:2::2]:5201"
        );
        assert_eq!(info.ip_len, pkt.len());
    }

    #[test]
    fn packet_malformed_input_is_an_error() {
        let payload = payload_bytes(3000);
        let (hdr, pkt) = v4_super(
            &tcp_header(1, TCP_ACK, 0),
            &payload,
            PROTO_TCP,
            VirtioNetHdr::GSO_TCPV4,
            1448,
        );
        let bad = |h: VirtioNetHdr, p: &[u8]| Segmenter::new(&h, p).unwrap_err();
        assert_eq!(
            bad(VirtioNetHdr { gso_size: 0, ..hdr }, &pkt),
            PacketError::ZeroGsoSize
        );
        assert!(matches!(
            bad(
                VirtioNetHdr {
                    hdr_len: 4000,
                    ..hdr
                },
                &pkt
            ),
            PacketError::HdrLenBeyondPacket { .. }
        ));
        assert!(matches!(
            bad(
                VirtioNetHdr {
                    csum_start: 3030,
                    ..hdr
                },
                &pkt
            ),
            PacketError::CsumBeyondPacket { .. }
        ));
        assert!(matches!(
            bad(hdr, &pkt[..30]),
            PacketError::HdrLenBeyondPacket { .. }
        ));
        let h0 = VirtioNetHdr {
            hdr_len: 0,
            flags: 0,
            ..hdr
        };
        assert!(matches!(bad(h0, &pkt[..30]), PacketError::BadLength { .. }));
        assert!(matches!(bad(h0, &pkt[..10]), PacketError::Truncated { .. }));
        assert!(matches!(
            bad(
                VirtioNetHdr {
                    gso_type: VirtioNetHdr::GSO_TCPV6,
                    ..hdr
                },
                &pkt
            ),
            PacketError::GsoMismatch { .. }
        ));
        assert!(matches!(
            bad(
                VirtioNetHdr {
                    gso_type: VirtioNetHdr::GSO_UDP,
                    ..hdr
                },
                &pkt
            ),
            PacketError::UnsupportedGso(3)
        ));
        let mut frag = pkt.clone();
        frag[6] |= 0x20; // MF
        assert_eq!(bad(hdr, &frag), PacketError::Fragment);
        let mut short = pkt.clone();
        short[32] = 0x40; // TCP data offset 16 bytes
        assert!(matches!(bad(hdr, &short), PacketError::BadLength { .. }));
        let mut buf = [0u8; 100];
        let seg = Segmenter::new(&hdr, &pkt).unwrap();
        assert!(matches!(
            seg.write_segment(0, CsumMode::Full, true, &mut buf),
            Err(PacketError::BufferTooSmall { .. })
        ));
    }

    #[test]
    fn packet_random_bytes_never_panic() {
        // No proptest in the workspace: a seeded xorshift over random and mutated
        // packets. Whatever `new` accepts must segment without panicking, and the
        // segments must tile the payload.
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let payload = payload_bytes(5000);
        let (h4, p4) = v4_super(
            &tcp_header(1, TCP_ACK, 8),
            &payload,
            PROTO_TCP,
            VirtioNetHdr::GSO_TCPV4,
            1000,
        );
        let (h6, p6) = v6_super(&[0; 8], &payload, PROTO_UDP, VirtioNetHdr::GSO_UDP_L4, 700);
        let mut buf = vec![0u8; 70000];
        let mut accepted = 0;
        for round in 0..20000 {
            let (mut hdr, mut pkt) = match round % 3 {
                0 => (h4, p4.clone()),
                1 => (h6, p6.clone()),
                _ => {
                    let len = (next() % 200) as usize;
                    let bytes = (0..len + 10).map(|_| next() as u8).collect::<Vec<_>>();
                    let (h, p) = VirtioNetHdr::split(&bytes).unwrap();
                    (h, p.to_vec())
                }
            };
            for _ in 0..(next() % 4) {
                match next() % 6 {
                    0 if !pkt.is_empty() => {
                        let at = next() as usize % pkt.len();
                        pkt[at] = next() as u8;
                    }
                    1 => pkt.truncate(next() as usize % (pkt.len() + 1)),
                    2 => hdr.gso_size = next() as u16 % 3000,
                    3 => hdr.hdr_len = next() as u16 % 6000,
                    4 => hdr.gso_type = [0, 1, 3, 4, 5, 0x81, 0x7f][next() as usize % 7],
                    _ => {
                        hdr.flags = next() as u8;
                        hdr.csum_start = next() as u16 % 128;
                        hdr.csum_offset = next() as u16 % 64;
                    }
                }
            }
            let _ = PacketInfo::parse(&pkt);
            let _ = finish_checksum(&mut hdr.clone(), &mut pkt.clone());
            let Ok(seg) = Segmenter::new(&hdr, &pkt) else {
                continue;
            };
            accepted += 1;
            let mut covered = 0;
            for i in 0..seg.len() {
                for mode in [CsumMode::Full, CsumMode::Partial] {
                    let n = seg.head_len(i, true);
                    assert!(n <= MAX_SEGMENT_HEAD || !seg.is_gso());
                    assert_eq!(seg.head(i, mode, true, &mut buf), n);
                    seg.write_segment(i, mode, true, &mut buf).unwrap();
                }
                covered += seg.payload(i).len();
            }
            if seg.is_gso() {
                let info = PacketInfo::parse(&pkt).unwrap();
                assert_eq!(
                    covered,
                    info.ip_len - info.ip_header_len - info.l4_header_len()
                );
            }
        }
        assert!(
            accepted > 1000,
            "the mutations left too few valid packets: {accepted}"
        );
    }

    #[test]
    fn packet_coalescer_rebuilds_super_packets() {
        let mut buf = vec![0u8; 70000];
        let mut head = [0u8; MAX_SEGMENT_HEAD];
        let mut c = Coalescer::new();
        let flags = TCP_ACK | TCP_PSH | TCP_CWR;
        let payload = payload_bytes(5 * 1448 + 100);
        let tcp = tcp_header(0xffff_ff00, flags, 12);
        let ecn = VirtioNetHdr::GSO_ECN;
        for (hdr, pkt) in [
            v4_super(
                &tcp,
                &payload,
                PROTO_TCP,
                VirtioNetHdr::GSO_TCPV4 | ecn,
                1448,
            ),
            v6_super(
                &tcp,
                &payload,
                PROTO_TCP,
                VirtioNetHdr::GSO_TCPV6 | ecn,
                1448,
            ),
        ] {
            let seg = Segmenter::new(&hdr, &pkt).unwrap();
            for i in 0..seg.len() {
                // Both entry points: contiguous and split.
                if i % 2 == 0 {
                    let n = seg
                        .write_segment(i, CsumMode::Partial, true, &mut buf)
                        .unwrap();
                    assert!(c.push(&buf[..n]), "segment {i}");
                } else {
                    let h = seg.head(i, CsumMode::Partial, true, &mut head);
                    assert!(c.push_split(&head[..h], seg.payload(i)), "segment {i}");
                }
            }
            assert_eq!(c.len(), 6);
            let out = c.finish().unwrap();
            let (vh, ip) = VirtioNetHdr::split(out).unwrap();
            assert_eq!(ip, &pkt[..], "the original super-packet comes back");
            assert_eq!(vh, hdr);
            assert!(c.is_empty() && c.finish().is_none());
        }
    }

    /// A segment's head followed by its payload, where it lies in the super-packet, is
    /// the segment `write_segment` writes.
    #[test]
    fn a_segments_head_and_payload_range_make_the_segment() {
        let mut whole = vec![0u8; 65536];
        let mut head = [0u8; MAX_SEGMENT_HEAD];
        let payload = payload_bytes(5 * 1448 + 100);
        let tcp = tcp_header(0x1000, TCP_ACK | TCP_PSH, 12);
        for (hdr, pkt) in [
            v4_super(&tcp, &payload, PROTO_TCP, VirtioNetHdr::GSO_TCPV4, 1448),
            v6_super(&tcp, &payload, PROTO_TCP, VirtioNetHdr::GSO_TCPV6, 1448),
        ] {
            let seg = Segmenter::new(&hdr, &pkt).unwrap();
            for i in 0..seg.len() {
                let n = seg
                    .write_segment(i, CsumMode::Partial, true, &mut whole)
                    .unwrap();
                let h = seg.head(i, CsumMode::Partial, true, &mut head);
                let joined = [&head[..h], &pkt[seg.payload_range(i)]].concat();
                assert_eq!(joined, &whole[..n], "segment {i}");
            }
        }
    }

    /// A holding coalescer's headers followed by the payloads it held are the bytes a
    /// copying one writes, for one segment, three, and all of a super-packet's.
    #[test]
    fn a_holding_coalescer_writes_what_a_copying_one_does() {
        let mut buf = vec![0u8; 65536];
        let payload = payload_bytes(5 * 1448 + 100);
        let tcp = tcp_header(0x1000, TCP_ACK, 12);
        for (hdr, pkt) in [
            v4_super(&tcp, &payload, PROTO_TCP, VirtioNetHdr::GSO_TCPV4, 1448),
            v6_super(&tcp, &payload, PROTO_TCP, VirtioNetHdr::GSO_TCPV6, 1448),
        ] {
            let seg = Segmenter::new(&hdr, &pkt).unwrap();
            let segments: Vec<Vec<u8>> = (0..seg.len())
                .map(|i| {
                    let n = seg
                        .write_segment(i, CsumMode::Partial, true, &mut buf)
                        .unwrap();
                    buf[..n].to_vec()
                })
                .collect();
            for take in [1, 3, segments.len()] {
                let (mut copying, mut holding) = (Coalescer::new(), Coalescer::holding());
                for s in &segments[..take] {
                    assert!(copying.push(s) && holding.push(s));
                }
                let offset = holding.payload_offset();
                let mut written = holding.finish().unwrap().to_vec();
                for s in &segments[..take] {
                    written.extend_from_slice(&s[offset..]);
                }
                assert_eq!(written, copying.finish().unwrap(), "{take} segments");
            }
        }
    }

    #[test]
    fn packet_coalescer_refuses_what_does_not_continue() {
        let payload = payload_bytes(4 * 1000);
        let (hdr, pkt) = v4_super(
            &tcp_header(1, TCP_ACK, 0),
            &payload,
            PROTO_TCP,
            VirtioNetHdr::GSO_TCPV4,
            1000,
        );
        let seg = Segmenter::new(&hdr, &pkt).unwrap();
        let mut segs = Vec::new();
        let mut full = Vec::new();
        let mut buf = vec![0u8; 2000];
        for i in 0..seg.len() {
            let n = seg
                .write_segment(i, CsumMode::Partial, true, &mut buf)
                .unwrap();
            segs.push(buf[..n].to_vec());
            let n = seg
                .write_segment(i, CsumMode::Full, true, &mut buf)
                .unwrap();
            full.push(buf[..n].to_vec());
        }
        let mut c = Coalescer::new();
        // A complete checksum without a virtio flag must stay verifiable: refused.
        assert!(!c.push(&full[0]));
        assert!(c.push(&segs[0]));
        assert!(!c.push(&segs[2]), "sequence gap");
        assert!(!c.push(&segs[0]), "same segment again");
        let mut other = segs[1].clone();
        other[10 + 20] ^= 1; // source port
        assert!(!c.push(&other), "other flow");
        let mut tos = segs[1].clone();
        tos[11] = 0x03; // CE mark
        assert!(!c.push(&tos), "different TOS");
        assert!(c.push(&segs[1]));
        assert_eq!(c.finish().map(<[u8]>::len), Some(10 + 40 + 2 * 1000));
        // A short segment closes the super-packet.
        let (hdr, pkt) = v4_super(
            &tcp_header(1, TCP_ACK, 0),
            &payload[..1500],
            PROTO_TCP,
            VirtioNetHdr::GSO_TCPV4,
            1000,
        );
        let seg = Segmenter::new(&hdr, &pkt).unwrap();
        let mut head = [0u8; MAX_SEGMENT_HEAD];
        for i in 0..2 {
            let h = seg.head(i, CsumMode::Partial, true, &mut head);
            assert!(c.push_split(&head[..h], seg.payload(i)));
        }
        // Right after, in every field: refused all the same, the super-packet is closed.
        let mut after = segs[1].clone();
        after[10 + 24..10 + 28].copy_from_slice(&1501u32.to_be_bytes());
        put16(&mut after, 10 + 4, 0); // IPv4 id after 0xfffe, 0xffff
        assert!(!c.push(&after));
        // A lone segment comes back unchanged; pure ACKs and UDP are refused.
        c.finish();
        assert!(c.push(&segs[3]));
        assert_eq!(c.finish().unwrap(), &segs[3][..]);
        let (_, ack) = v4_super(&tcp_header(1, TCP_ACK, 0), &[], PROTO_TCP, 0, 0);
        let ack_pkt = [
            &VirtioNetHdr {
                flags: 1,
                csum_start: 20,
                csum_offset: 16,
                ..VirtioNetHdr::default()
            }
            .to_bytes()[..],
            &ack,
        ]
        .concat();
        assert!(!c.push(&ack_pkt));
        let (uh, udp) = v4_super(&[0; 8], &payload[..100], PROTO_UDP, 0, 0);
        assert!(!c.push(&[&uh.to_bytes()[..], &udp].concat()));
        // Random bytes never panic.
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut p = segs[(rng % 4) as usize].clone();
            let at = (rng >> 8) as usize % p.len();
            p[at] = (rng >> 32) as u8;
            p.truncate(p.len() - (rng >> 40) as usize % 8);
            if !c.push(&p) {
                c.finish();
                c.push(&p);
            }
        }
    }

    #[test]
    fn ce_marks_only_ecn_capable_packets_and_keeps_the_ipv4_checksum() {
        // An IPv4 header (20 bytes) with ECT(0), its checksum right.
        let mut v4 = vec![
            0x45, 0x02, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 77, 1, 1, 10, 77, 0, 1,
        ];
        v4.resize(40, 0);
        let sum = internet_checksum(&v4[..20]);
        v4[10..12].copy_from_slice(&sum.to_be_bytes());
        assert!(is_ect(&v4));
        assert!(set_ce(&mut v4));
        assert_eq!(ecn_field(&v4), Some(3));
        assert_eq!(
            internet_checksum(&v4[..20]),
            0,
            "the header checksum still holds"
        );
        // Marked already, or never capable: left alone.
        assert!(!set_ce(&mut v4));
        let mut plain = v4.clone();
        plain[1] = 0;
        assert!(!set_ce(&mut plain));
        assert_eq!(plain[1], 0);
        // IPv6: the traffic class straddles bytes 0 and 1; ECT(1) becomes CE.
        let mut v6 = vec![0x60, 0x10, 0, 0];
        v6.resize(40, 0);
        assert_eq!(ecn_field(&v6), Some(1));
        assert!(set_ce(&mut v6));
        assert_eq!((v6[0], v6[1]), (0x60, 0x30));
    }
}
