//! A flow's time-sequence graph (Stevens, tcptrace) from a capture at the bottleneck's
//! entry: each data segment's sequence numbers against time, the ACK line, the edge of
//! the receive window (ACK + advertised window, scaled as the handshake agreed),
//! retransmissions, and each packet the emulator dropped with its reason. Sequence
//! numbers are relative to the sender's initial one and unwrapped past 4 GiB.

use tcplab_netsim::capture::{CapturedPacket, Fate};
use tcplab_netsim::link::DropReason;
use tcplab_netsim::packet::{PacketInfo, Transport};
use tcplab_record::{FlowRecord, Host, RunRecord};

/// One data segment of the flow as it entered the bottleneck.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// µs since t0.
    pub t_us: i64,
    /// Its first byte, relative to the first data byte of the connection.
    pub seq: u64,
    pub len: u32,
    /// It starts below the highest byte sent before it.
    pub retransmit: bool,
    pub fate: Fate,
}

/// An acknowledgement from the receiver as it entered the bottleneck.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckPoint {
    pub t_us: i64,
    /// The next byte the receiver expects, relative as the segments.
    pub ack: u64,
    /// ACK + the advertised window; `None` without both handshake segments (the
    /// window's scale is unknown).
    pub window_edge: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeSequence {
    pub segments: Vec<Segment>,
    pub acks: Vec<AckPoint>,
    /// The sender's sequence number of its first data byte (relative 0): what turns
    /// the kernel's own sequence numbers (tcp_probe's) into the graph's.
    pub first_byte: Option<u32>,
}

impl TimeSequence {
    /// A sequence number of the sender's kernel on the graph's scale (near the graph's
    /// bytes: within 2 GiB of `near`).
    pub fn relative(&self, seq: u32, near: u64) -> Option<u64> {
        let offset = seq.wrapping_sub(self.first_byte?);
        let mut unwrapped = Unwrapped { last: near };
        Some(unwrapped.unwrap(offset))
    }
}

/// One end of a TCP connection in a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends {
    pub sender_port: u16,
    pub receiver_port: u16,
}

/// The time-sequence graph of `flow` of `run` in `packets` read back from its capture
/// (on the wall clock: `at_ns` since the Unix epoch); `None` for a flow without ports.
pub fn flow_graph(
    packets: &[CapturedPacket],
    run: &RunRecord,
    flow: &FlowRecord,
) -> Option<TimeSequence> {
    let port = |addr: &str| addr.rsplit_once(':')?.1.parse::<u16>().ok();
    let (client, server) = (port(&flow.client_addr)?, port(&flow.server_addr)?);
    let ends = match flow.direction.sender() {
        Host::Client => Ends {
            sender_port: client,
            receiver_port: server,
        },
        Host::Server => Ends {
            sender_port: server,
            receiver_port: client,
        },
    };
    let started_ns = i128::from(run.started_unix_us) * 1000;
    Some(time_sequence(packets, ends, |ns| {
        ((i128::from(ns) - started_ns) / 1000) as i64
    }))
}

/// What the retransmissions of every TCP flow of `run` in its capture followed.
pub fn run_retransmit_causes(packets: &[CapturedPacket], run: &RunRecord) -> RetransmitCauses {
    let mut causes = RetransmitCauses::default();
    for flow in run.flows.iter().filter(|f| f.udp.is_none()) {
        if let Some(graph) = flow_graph(packets, run, flow) {
            causes.add(&retransmit_causes(&graph));
        }
    }
    causes
}

/// The time-sequence graph of the connection between `ends`, data flowing from the
/// sender. `t_us` turns a packet's `at_ns` into µs since t0.
pub fn time_sequence(
    packets: &[CapturedPacket],
    ends: Ends,
    t_us: impl Fn(u64) -> i64,
) -> TimeSequence {
    let mut graph = TimeSequence::default();
    let mut isn: Option<u32> = None;
    // The sender's and the receiver's SYN, once seen: the window-scale option offered.
    let mut scales: [Option<Option<u8>>; 2] = [None, None];
    let mut highest_sent = Unwrapped::default();
    let mut highest_end = 0u64;
    let mut acked = Unwrapped::default();
    for packet in packets {
        let Some(tcp) = TcpHead::parse(&packet.head, packet.len) else {
            continue;
        };
        let from_sender = (tcp.src_port, tcp.dst_port) == (ends.sender_port, ends.receiver_port);
        let from_receiver = (tcp.src_port, tcp.dst_port) == (ends.receiver_port, ends.sender_port);
        if !from_sender && !from_receiver {
            continue;
        }
        let at = t_us(packet.at_ns);
        if tcp.syn() {
            scales[usize::from(from_receiver)] = Some(tcp.window_scale);
            if from_sender {
                isn = Some(tcp.seq);
            }
            continue;
        }
        // Relative to the first data byte: the SYN's sequence number + 1, or, the
        // handshake not seen, the first segment's.
        if from_sender && isn.is_none() {
            isn = Some(tcp.seq.wrapping_sub(1));
        }
        let Some(base) = isn.map(|isn| isn.wrapping_add(1)) else {
            continue;
        };
        graph.first_byte = Some(base);
        if from_sender && tcp.payload > 0 {
            let seq = highest_sent.unwrap(tcp.seq.wrapping_sub(base));
            graph.segments.push(Segment {
                t_us: at,
                seq,
                len: tcp.payload,
                retransmit: seq < highest_end,
                fate: packet.fate,
            });
            highest_end = highest_end.max(seq + u64::from(tcp.payload));
        } else if from_receiver && tcp.ack_flag() {
            let ack = acked.unwrap(tcp.ack.wrapping_sub(base));
            // RFC 7323: windows are scaled only if both ends offered scaling.
            let shift = match scales {
                [Some(Some(_)), Some(Some(receiver))] => Some(receiver),
                [Some(_), Some(_)] => Some(0),
                _ => None,
            };
            graph.acks.push(AckPoint {
                t_us: at,
                ack,
                window_edge: shift.map(|shift| ack + (u64::from(tcp.window) << shift)),
            });
        }
    }
    graph
}

/// What the retransmissions a capture shows followed.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RetransmitCauses {
    pub retransmits: u64,
    /// Retransmissions of data the emulator had dropped, by why, in [`DropReason`]'s
    /// order of first appearance.
    pub after_drops: Vec<(DropReason, u64)>,
}

impl RetransmitCauses {
    /// Retransmissions of data no drop of the emulator's explains: spurious ones, or
    /// losses before the bottleneck.
    pub fn unexplained(&self) -> u64 {
        self.retransmits - self.after_drops.iter().map(|(_, n)| n).sum::<u64>()
    }

    pub fn add(&mut self, other: &RetransmitCauses) {
        self.retransmits += other.retransmits;
        for &(reason, n) in &other.after_drops {
            self.count(reason, n);
        }
    }

    fn count(&mut self, reason: DropReason, n: u64) {
        match self.after_drops.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, count)) => *count += n,
            None => self.after_drops.push((reason, n)),
        }
    }
}

/// Each retransmitted segment's cause: the last drop before it of a segment holding its
/// first byte, unless a retransmission got that segment through since.
pub fn retransmit_causes(graph: &TimeSequence) -> RetransmitCauses {
    let mut dropped: std::collections::BTreeMap<u64, (u64, DropReason)> = Default::default();
    let mut causes = RetransmitCauses::default();
    for s in &graph.segments {
        if s.retransmit {
            causes.retransmits += 1;
            let cause = dropped
                .range(..=s.seq)
                .next_back()
                .filter(|(_, (end, _))| *end > s.seq)
                .map(|(&start, &(_, reason))| (start, reason));
            if let Some((start, reason)) = cause {
                causes.count(reason, 1);
                dropped.remove(&start);
            }
        }
        if let Fate::Dropped(reason) = s.fate {
            dropped.insert(s.seq, (s.seq + u64::from(s.len), reason));
        }
    }
    causes
}

/// A 32-bit sequence offset made 64-bit: the value nearest the last one.
#[derive(Default)]
struct Unwrapped {
    last: u64,
}

impl Unwrapped {
    fn unwrap(&mut self, offset: u32) -> u64 {
        const WRAP: u64 = 1 << 32;
        let epoch = self.last & !(WRAP - 1);
        let candidate = epoch | u64::from(offset);
        let value = [candidate.wrapping_sub(WRAP), candidate, candidate + WRAP]
            .into_iter()
            .filter(|v| *v < u64::MAX / 2)
            .min_by_key(|v| v.abs_diff(self.last))
            .unwrap_or(candidate);
        self.last = self.last.max(value);
        value
    }
}

/// What the graph needs of a TCP header.
struct TcpHead {
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    window_scale: Option<u8>,
    payload: u32,
}

impl TcpHead {
    /// From a packet's first bytes and its full length.
    fn parse(head: &[u8], len: u32) -> Option<TcpHead> {
        let info = PacketInfo::parse_head(head).ok()?;
        let Transport::Tcp {
            src_port,
            dst_port,
            seq,
            ack,
            flags,
            header_len,
        } = info.transport
        else {
            return None;
        };
        let tcp = head.get(info.ip_header_len..info.ip_header_len + header_len)?;
        let payload = len.checked_sub((info.ip_header_len + header_len) as u32)?;
        Some(TcpHead {
            src_port,
            dst_port,
            seq,
            ack,
            flags,
            window: u16::from_be_bytes([tcp[14], tcp[15]]),
            window_scale: window_scale(&tcp[20..]),
            payload,
        })
    }

    fn syn(&self) -> bool {
        self.flags & 0x02 != 0
    }

    fn ack_flag(&self) -> bool {
        self.flags & 0x10 != 0
    }
}

/// The window-scale option (kind 3) among TCP options.
fn window_scale(mut options: &[u8]) -> Option<u8> {
    while let [kind, rest @ ..] = options {
        match kind {
            0 => return None,
            1 => options = rest,
            _ => {
                let len = usize::from(*rest.first()?);
                if *kind == 3 && len == 3 {
                    return rest.get(1).copied();
                }
                options = options.get(len.max(2)..)?;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_netsim::path::Direction;

    const SENDER: u16 = 40_000;
    const RECEIVER: u16 = 5_001;

    /// An IPv4 TCP packet of `payload` bytes (only its headers are kept).
    fn tcp(
        from_sender: bool,
        seq: u32,
        ack: u32,
        flags: u8,
        window: u16,
        scale: Option<u8>,
        payload: u32,
    ) -> (Vec<u8>, u32) {
        let options: Vec<u8> = scale.map_or(Vec::new(), |s| vec![1, 3, 3, s]);
        let tcp_len = 20 + options.len();
        let total = 20 + tcp_len as u32 + payload;
        let mut p = vec![0u8; 20 + tcp_len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 77, 1, 1]);
        p[16..20].copy_from_slice(&[10, 77, 0, 1]);
        let (src, dst) = if from_sender {
            (SENDER, RECEIVER)
        } else {
            (RECEIVER, SENDER)
        };
        let t = &mut p[20..];
        t[0..2].copy_from_slice(&src.to_be_bytes());
        t[2..4].copy_from_slice(&dst.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[12] = ((tcp_len / 4) as u8) << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&window.to_be_bytes());
        t[20..].copy_from_slice(&options);
        (p, total)
    }

    fn captured(at_us: u64, (head, len): (Vec<u8>, u32), fate: Fate) -> CapturedPacket {
        CapturedPacket {
            at_ns: at_us * 1000,
            entry: 0,
            direction: Direction::Up,
            fate,
            queue_delay_ns: None,
            len,
            head,
        }
    }

    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    const ENDS: Ends = Ends {
        sender_port: SENDER,
        receiver_port: RECEIVER,
    };

    #[test]
    fn segments_acks_and_the_scaled_window_edge_relative_to_the_first_byte() {
        let isn = u32::MAX - 1000; // the sequence space wraps during the transfer
        let d = Fate::Delivered;
        let packets = [
            captured(0, tcp(true, isn, 0, SYN, 64_240, Some(7), 0), d),
            captured(
                10,
                tcp(false, 777, isn + 1, SYN | ACK, 65_160, Some(9), 0),
                d,
            ),
            captured(
                20,
                tcp(true, isn.wrapping_add(1), 778, ACK, 502, None, 1448),
                d,
            ),
            captured(
                30,
                tcp(true, isn.wrapping_add(1449), 778, ACK, 502, None, 1448),
                Fate::Dropped(DropReason::Queue),
            ),
            captured(
                40,
                tcp(true, isn.wrapping_add(2897), 778, ACK, 502, None, 1448),
                d,
            ),
            captured(
                50,
                tcp(false, 778, isn.wrapping_add(1449), ACK, 100, None, 0),
                d,
            ),
            captured(
                60,
                tcp(true, isn.wrapping_add(1449), 778, ACK, 502, None, 1448),
                d,
            ),
            // Another connection on the same ports of another host is not this one.
            captured(70, tcp(true, 5, 0, ACK, 1, None, 0), d),
        ];
        let g = time_sequence(&packets, ENDS, |ns| (ns / 1000) as i64);
        let segs: Vec<(i64, u64, bool, Fate)> = g
            .segments
            .iter()
            .map(|s| (s.t_us, s.seq, s.retransmit, s.fate))
            .collect();
        assert_eq!(
            segs,
            [
                (20, 0, false, d),
                (30, 1448, false, Fate::Dropped(DropReason::Queue)),
                (40, 2896, false, d),
                (60, 1448, true, d),
            ]
        );
        assert_eq!(
            g.acks,
            [AckPoint {
                t_us: 50,
                ack: 1448,
                window_edge: Some(1448 + (100 << 9)),
            }]
        );
        // The kernel's sequence numbers on the graph's scale, across the wrap.
        assert_eq!(g.relative(isn.wrapping_add(2897), 2000), Some(2896));
    }

    #[test]
    fn without_the_handshake_the_window_edge_is_unknown_and_sequence_starts_at_the_first_segment() {
        let d = Fate::Delivered;
        let packets = [
            // An ACK before any data says nothing yet.
            captured(0, tcp(false, 1, 999_000, ACK, 100, None, 0), d),
            captured(1, tcp(true, 1_000_000, 1, ACK, 502, None, 100), d),
            captured(5, tcp(false, 1, 1_000_100, ACK, 100, None, 0), d),
        ];
        let g = time_sequence(&packets, ENDS, |ns| (ns / 1000) as i64);
        assert_eq!(g.segments[0].seq, 0);
        assert_eq!(g.acks[0].ack, 100);
        assert_eq!(g.acks[0].window_edge, None);
    }

    #[test]
    fn each_retransmission_is_put_down_to_the_drop_of_its_first_byte() {
        let segment = |t_us, seq, retransmit, fate| Segment {
            t_us,
            seq,
            len: 1000,
            retransmit,
            fate,
        };
        let (d, queue, loss) = (
            Fate::Delivered,
            Fate::Dropped(DropReason::Queue),
            Fate::Dropped(DropReason::Loss),
        );
        let graph = TimeSequence {
            segments: vec![
                segment(0, 0, false, queue),
                segment(1, 1000, false, loss),
                segment(2, 2000, false, d),
                segment(3, 0, true, d),
                // Re-segmented: starts inside the lost segment.
                segment(4, 1500, true, queue),
                // Dropped again, retransmitted again: the queue's.
                segment(5, 1500, true, d),
                // Spurious ones: never dropped, or repaired already.
                segment(6, 2600, true, d),
                segment(7, 0, true, d),
            ],
            ..TimeSequence::default()
        };
        let causes = retransmit_causes(&graph);
        assert_eq!(causes.retransmits, 5);
        assert_eq!(
            causes.after_drops,
            [(DropReason::Queue, 2), (DropReason::Loss, 1)]
        );
        assert_eq!(causes.unexplained(), 2);
    }

    #[test]
    fn unwrapping_follows_the_sequence_past_4_gib_and_back_a_little() {
        let mut u = Unwrapped::default();
        assert_eq!(u.unwrap(u32::MAX - 10), u64::from(u32::MAX - 10));
        assert_eq!(u.unwrap(5), (1 << 32) + 5);
        // A retransmission from just before the wrap.
        assert_eq!(u.unwrap(u32::MAX - 3), u64::from(u32::MAX - 3));
        assert_eq!(u.unwrap(100), (1 << 32) + 100);
    }
}
