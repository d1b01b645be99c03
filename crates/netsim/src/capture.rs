//! What a capture records of each packet: when it passed the capture's point, which
//! direction, what became of it in the bottleneck (the fate no capture tool can see)
//! and how long it queued, with the first bytes of its IP packet as the bottleneck let
//! it go (a CE mark its AQM set is in the header). The capture point is the
//! bottleneck's entry, or one end's interface (both directions where that host sends
//! and receives them, as tcpdump there would: what standard RTT analysis expects). The
//! emulator fills a record in as the packet's fate becomes known; a writer thread turns
//! records into pcapng blocks. Pure: the text and the tally are tested here.

use crate::link::DropReason;
use crate::path::Direction;

/// Bytes of each packet kept by default: IPv4/IPv6 and TCP headers with options.
pub const DEFAULT_SNAPLEN: u32 = 128;

impl Fate {
    /// Whether the packet got through the link (marked, corrupted or not).
    pub fn delivered(self) -> bool {
        !matches!(self, Fate::Dropped(_))
    }
}

/// What became of a packet that entered the bottleneck.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Left the link in order.
    Delivered,
    /// Left the link after a packet that entered after it.
    Reordered,
    /// Left the link with a bit flipped.
    Corrupted,
    /// The link's copy of a packet it duplicated, delivered.
    Duplicate,
    /// Left the link marked Congestion Experienced by its AQM (ECN).
    MarkedCe,
    Dropped(DropReason),
}

impl Fate {
    pub const ALL: [Fate; 10] = [
        Fate::Delivered,
        Fate::Reordered,
        Fate::Corrupted,
        Fate::Duplicate,
        Fate::MarkedCe,
        Fate::Dropped(DropReason::Loss),
        Fate::Dropped(DropReason::Queue),
        Fate::Dropped(DropReason::Aqm),
        Fate::Dropped(DropReason::Oversize),
        Fate::Dropped(DropReason::Police),
    ];

    /// The fate a capture's comment names.
    pub fn from_label(label: &str) -> Option<Fate> {
        Fate::ALL.into_iter().find(|f| f.label() == label)
    }

    /// The fate as the capture's comment names it.
    pub fn label(self) -> &'static str {
        match self {
            Fate::Delivered => "delivered",
            Fate::Reordered => "reordered",
            Fate::Corrupted => "corrupted",
            Fate::Duplicate => "duplicate",
            Fate::MarkedCe => "marked ce",
            Fate::Dropped(DropReason::Loss) => "dropped loss",
            Fate::Dropped(DropReason::Queue) => "dropped queue",
            Fate::Dropped(DropReason::Aqm) => "dropped aqm",
            Fate::Dropped(DropReason::Oversize) => "dropped oversize",
            Fate::Dropped(DropReason::Police) => "dropped police",
        }
    }
}

/// One packet at the capture's point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedPacket {
    /// When it passed the capture's point, ns on the emulator's time base.
    pub at_ns: u64,
    /// Its place in its direction's order of entry: packets of one read enter at one
    /// time.
    pub entry: u64,
    pub direction: Direction,
    pub fate: Fate,
    /// Time it waited in the queue, ns; none for a packet dropped at the door.
    pub queue_delay_ns: Option<u64>,
    /// The IP packet's length.
    pub len: u32,
    /// Its first bytes, up to the snap length, as the bottleneck let it go.
    pub head: Vec<u8>,
}

impl CapturedPacket {
    /// The packet's record comment: "up delivered, queued 1.234 ms".
    pub fn comment(&self) -> String {
        let dir = match self.direction {
            Direction::Up => "up",
            Direction::Down => "down",
        };
        match self.queue_delay_ns {
            Some(ns) => format!(
                "{dir} {}, queued {:.3} ms",
                self.fate.label(),
                ns as f64 / 1e6
            ),
            None => format!("{dir} {}", self.fate.label()),
        }
    }
}

/// Why a capture file could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum CaptureReadError {
    #[error("not a pcapng file: {0}")]
    Format(#[from] pcap_file::PcapError),
    #[error("packet {index} has no tcplab comment (a capture tcplab did not write?)")]
    NoComment { index: usize },
}

/// Reads back a capture tcplab wrote: each packet with its direction, fate and queueing
/// delay from its comment; `at_ns` is the file's timestamp (ns since the Unix epoch) and
/// `entry` the packet's place in the file.
pub fn read_pcapng(reader: impl std::io::Read) -> Result<Vec<CapturedPacket>, CaptureReadError> {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
    use pcap_file::pcapng::{Block, PcapNgReader};
    let mut file = PcapNgReader::new(reader)?;
    let mut packets = Vec::new();
    while let Some(block) = file.next_block() {
        let Block::EnhancedPacket(epb) = block? else {
            continue;
        };
        let index = packets.len();
        let (direction, fate, queue_delay_ns) = epb
            .options
            .iter()
            .find_map(|o| match o {
                EnhancedPacketOption::Comment(c) => parse_comment(c),
                _ => None,
            })
            .ok_or(CaptureReadError::NoComment { index })?;
        packets.push(CapturedPacket {
            at_ns: epb.timestamp.as_nanos() as u64,
            entry: index as u64,
            direction,
            fate,
            queue_delay_ns,
            len: epb.original_len,
            head: epb.data.into_owned(),
        });
    }
    Ok(packets)
}

/// The inverse of [`CapturedPacket::comment`].
fn parse_comment(comment: &str) -> Option<(Direction, Fate, Option<u64>)> {
    let (what, queued) = match comment.split_once(", queued ") {
        Some((what, queued)) => {
            let ms: f64 = queued.strip_suffix(" ms")?.parse().ok()?;
            (what, Some((ms * 1e6).round() as u64))
        }
        None => (comment, None),
    };
    let (direction, fate) = what.split_once(' ')?;
    let direction = match direction {
        "up" => Direction::Up,
        "down" => Direction::Down,
        _ => return None,
    };
    Some((direction, Fate::from_label(fate)?, queued))
}

/// The first `snaplen` bytes of `packet`.
pub fn head(packet: &[u8], snaplen: u32) -> Vec<u8> {
    packet[..packet.len().min(snaplen as usize)].to_vec()
}

/// Puts the records of both directions back in time order (the order the packets
/// passed the capture's point).
///
/// A record is complete only when its packet leaves the link, and the two directions
/// complete theirs on threads of their own, while a reader (tshark's TCP analysis)
/// needs a file in time order. Each direction reports with its records a watermark: no
/// record it sends later is timed before it. Records before both directions'
/// watermarks are final.
#[derive(Debug, Default)]
pub struct TimeOrder {
    held: std::collections::BinaryHeap<std::cmp::Reverse<Held>>,
    watermarks: [u64; 2],
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    at_ns: u64,
    /// Equal times keep their order of entry.
    direction: u8,
    entry: u64,
    packet: HeldPacket,
}

/// A packet in the heap, ordered by nothing of its own.
#[derive(Debug)]
struct HeldPacket(CapturedPacket);

impl PartialEq for HeldPacket {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for HeldPacket {}
impl PartialOrd for HeldPacket {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeldPacket {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl TimeOrder {
    /// Records of `direction`, and its watermark.
    pub fn add(&mut self, direction: Direction, packets: Vec<CapturedPacket>, watermark: u64) {
        for packet in packets {
            self.held.push(std::cmp::Reverse(Held {
                at_ns: packet.at_ns,
                direction: direction as u8,
                entry: packet.entry,
                packet: HeldPacket(packet),
            }));
        }
        let mark = &mut self.watermarks[direction as usize];
        *mark = (*mark).max(watermark);
    }

    /// The records no later one can precede, oldest first.
    pub fn ready(&mut self) -> Vec<CapturedPacket> {
        let before = self.watermarks[0].min(self.watermarks[1]);
        let mut out = Vec::new();
        while self.held.peek().is_some_and(|h| h.0.at_ns < before) {
            out.push(self.held.pop().expect("peeked").0.packet.0);
        }
        out
    }

    /// Every record left, oldest first: at the end.
    pub fn rest(mut self) -> Vec<CapturedPacket> {
        let mut out = Vec::with_capacity(self.held.len());
        while let Some(h) = self.held.pop() {
            out.push(h.0.packet.0);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(fate: Fate, queue_delay_ns: Option<u64>) -> CapturedPacket {
        CapturedPacket {
            at_ns: 0,
            entry: 0,
            direction: Direction::Up,
            fate,
            queue_delay_ns,
            len: 1500,
            head: Vec::new(),
        }
    }

    #[test]
    fn a_written_capture_reads_back_with_each_fate() {
        use pcap_file::pcapng::blocks::enhanced_packet::{
            EnhancedPacketBlock, EnhancedPacketOption,
        };
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        use pcap_file::pcapng::PcapNgWriter;
        use std::borrow::Cow;
        let mut out = PcapNgWriter::new(Vec::new()).unwrap();
        out.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: pcap_file::DataLink::IPV4,
            snaplen: 128,
            options: Vec::new(),
        })
        .unwrap();
        let written: Vec<CapturedPacket> = Fate::ALL
            .into_iter()
            .enumerate()
            .map(|(i, fate)| CapturedPacket {
                at_ns: 1_795_000_000_123_456_789 + i as u64,
                entry: i as u64,
                direction: if i % 2 == 0 {
                    Direction::Up
                } else {
                    Direction::Down
                },
                fate,
                queue_delay_ns: matches!(fate, Fate::Delivered).then_some(1_234_000),
                len: 1500,
                head: vec![0x45, i as u8],
            })
            .collect();
        for p in &written {
            out.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: std::time::Duration::from_nanos(p.at_ns),
                original_len: p.len,
                data: Cow::Borrowed(&p.head),
                options: vec![EnhancedPacketOption::Comment(p.comment().into())],
            })
            .unwrap();
        }
        let bytes = out.into_inner();
        assert_eq!(read_pcapng(&bytes[..]).unwrap(), written);
        assert!(matches!(
            read_pcapng(&b"not a capture"[..]),
            Err(CaptureReadError::Format(_))
        ));
    }

    #[test]
    fn each_fate_is_named_with_its_direction_and_queueing_delay() {
        assert_eq!(
            packet(Fate::Delivered, Some(1_234_567)).comment(),
            "up delivered, queued 1.235 ms"
        );
        assert_eq!(
            packet(Fate::Dropped(DropReason::Queue), None).comment(),
            "up dropped queue"
        );
        let mut down = packet(Fate::Dropped(DropReason::Aqm), Some(5_000_000));
        down.direction = Direction::Down;
        assert_eq!(down.comment(), "down dropped aqm, queued 5.000 ms");
        let labels: Vec<&str> = [
            Fate::Delivered,
            Fate::Reordered,
            Fate::Corrupted,
            Fate::Duplicate,
            Fate::Dropped(DropReason::Loss),
            Fate::Dropped(DropReason::Oversize),
        ]
        .map(Fate::label)
        .to_vec();
        assert_eq!(
            labels,
            [
                "delivered",
                "reordered",
                "corrupted",
                "duplicate",
                "dropped loss",
                "dropped oversize"
            ]
        );
    }

    #[test]
    fn records_come_out_in_entry_order_once_both_directions_are_past_them() {
        let at = |direction, at_ns| CapturedPacket {
            at_ns,
            entry: at_ns,
            direction,
            ..packet(Fate::Delivered, None)
        };
        let mut order = TimeOrder::default();
        // A drop at 30 is known before the packets queued from 10 and 20 leave.
        order.add(Direction::Up, vec![at(Direction::Up, 30)], 10);
        assert!(order.ready().is_empty(), "down has said nothing yet");
        order.add(Direction::Down, vec![at(Direction::Down, 15)], 40);
        assert!(
            order.ready().is_empty(),
            "up may still have a packet from 10"
        );
        order.add(
            Direction::Up,
            vec![at(Direction::Up, 10), at(Direction::Up, 20)],
            35,
        );
        let times: Vec<u64> = order.ready().iter().map(|p| p.at_ns).collect();
        assert_eq!(times, [10, 15, 20, 30]);
        // A watermark never goes back; what is left comes out at the end, in order.
        order.add(
            Direction::Down,
            vec![at(Direction::Down, 50), at(Direction::Down, 45)],
            0,
        );
        assert!(order.ready().is_empty());
        let rest: Vec<u64> = order.rest().iter().map(|p| p.at_ns).collect();
        assert_eq!(rest, [45, 50]);

        // Packets of one read enter at one time: a drop known first still comes after
        // the packets that entered before it.
        let mut order = TimeOrder::default();
        let entered = |entry| CapturedPacket {
            at_ns: 7,
            entry,
            ..packet(Fate::Delivered, None)
        };
        order.add(Direction::Up, vec![entered(3)], 0);
        order.add(Direction::Up, vec![entered(1), entered(2)], 0);
        let entries: Vec<u64> = order.rest().iter().map(|p| p.entry).collect();
        assert_eq!(entries, [1, 2, 3]);
    }

    #[test]
    fn a_fate_is_delivered_unless_dropped() {
        assert!(Fate::MarkedCe.delivered() && !Fate::Dropped(DropReason::Aqm).delivered());
    }

    #[test]
    fn the_head_is_cut_at_the_snap_length() {
        let bytes: Vec<u8> = (0..200).collect();
        assert_eq!(head(&bytes, 128).len(), 128);
        assert_eq!(head(&bytes[..40], 128), bytes[..40].to_vec());
    }
}
