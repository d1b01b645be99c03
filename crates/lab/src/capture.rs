//! A pcapng capture of both directions, packets with their fates in the bottleneck, at
//! the bottlenecks' entry or at one end's interface ([`CapturePoint`]).
//!
//! The emulator's threads must not wait for a disk: each direction's [`Tap`] notes a
//! packet while it is inside the bottleneck, completes its record when the link
//! delivers or drops it (with the packet's first bytes as the link let it go), and
//! hands full batches to a writer thread over a bounded channel without blocking. A
//! batch that finds the channel full is counted as overflow and dropped; the link
//! carried its packets, the file lacks them.
//!
//! The file: one interface, raw IP (link type 101), nanosecond timestamps on the wall
//! clock (the emulator's time base moved by the lab's `epoch_unix_us`, the time base of
//! the run's queue series), and on each packet an `opt_comment` with its direction,
//! fate and queueing delay ("up delivered, queued 1.234 ms") and `epb_flags` with its
//! direction (outbound or inbound at the capture's host; at the bottleneck, up is
//! outbound), which tshark shows as `frame.comment` and `frame.packet_flags_direction`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use tcplab_netsim::capture::{head, CapturedPacket, Fate, TimeOrder};
use tcplab_netsim::path::Direction;
use tcplab_record::capture::{CaptureCounts, CapturePoint, Vantage};

use crate::pool::BufId;

/// Records handed to the writer at once.
const BATCH: usize = 512;
/// Batches the writer may have waiting: about 10 MB of 128-byte heads, a second of a
/// 1 Gbit/s link's packets in both directions.
const QUEUED_BATCHES: usize = 128;
/// pcapng's `epb_flags` direction bits.
const INBOUND: u32 = 1;
const OUTBOUND: u32 = 2;

/// What to capture, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureSpec {
    pub file: PathBuf,
    /// Bytes kept of each IP packet.
    pub snaplen: u32,
    pub at: CapturePoint,
}

/// The writer thread of one capture file.
pub struct Capture {
    sender: Option<SyncSender<Batch>>,
    writer: Option<JoinHandle<io::Result<()>>>,
    snaplen: u32,
    at: CapturePoint,
}

impl Capture {
    /// Creates the file (a failure is the caller's, before any link runs) and starts its
    /// writer; `epoch_unix_ns` is the wall-clock time of the emulator's time 0.
    pub fn start(spec: &CaptureSpec, epoch_unix_ns: u64, lab: &str) -> io::Result<Capture> {
        let seen = match spec.at {
            CapturePoint::Bottleneck => "each direction's packets where they enter its bottleneck",
            CapturePoint::Client => "the client's packets as it sent them and the packets that reached it as they arrived",
            CapturePoint::Server => "the server's packets as it sent them and the packets that reached it as they arrived",
        };
        let header = format!(
            "tcplab lab {lab}: {seen}, each with its fate in the bottleneck and its queueing delay there, its headers as the bottleneck let it go; times are the emulator's (the lab's epoch plus its clock)"
        );
        Capture::writing(spec, spec.at.name(), header, epoch_unix_ns)
    }

    /// One link of a topology's lab (`spec.at` its entry): both ways' packets where
    /// they enter it, up from its first node to its second.
    pub fn start_link(
        spec: &CaptureSpec,
        epoch_unix_ns: u64,
        lab: &str,
        link: &str,
    ) -> io::Result<Capture> {
        let header = format!(
            "tcplab lab {lab}, link {link}: each way's packets where they enter the link (up: from its first node to its second), each with its fate on the link and its queueing delay there, its headers as the link let it go; times are the emulator's (the lab's epoch plus its clock)"
        );
        Capture::writing(spec, link, header, epoch_unix_ns)
    }

    /// The file made, its interface named `interface`, and the writer started.
    fn writing(
        spec: &CaptureSpec,
        interface: &str,
        header: String,
        epoch_unix_ns: u64,
    ) -> io::Result<Capture> {
        let file = File::create(&spec.file)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", spec.file.display())))?;
        let (sender, batches) = sync_channel(QUEUED_BATCHES);
        let (snaplen, at, interface) = (spec.snaplen, spec.at, interface.to_owned());
        let writer = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || {
                write(
                    file,
                    &header,
                    (snaplen, &interface),
                    at,
                    epoch_unix_ns,
                    batches,
                )
            })?;
        Ok(Capture {
            sender: Some(sender),
            writer: Some(writer),
            snaplen,
            at,
        })
    }

    /// A tap for one direction's bottleneck.
    pub fn tap(&self, direction: Direction) -> Tap {
        Tap {
            direction,
            vantage: self.at.vantage(direction),
            snaplen: self.snaplen,
            sender: self.sender.clone(),
            inside: HashMap::new(),
            batch: Vec::with_capacity(BATCH),
            counts: CaptureCounts::default(),
            clock: 0,
            entries: 0,
        }
    }

    /// Waits for the writer to write what the taps sent (they must be dropped first).
    pub fn finish(mut self) -> io::Result<()> {
        self.sender = None;
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the capture's writer panicked")),
            None => Ok(()),
        }
    }
}

/// Records of one direction, and its watermark ([`TimeOrder`]).
struct Batch {
    direction: Direction,
    packets: Vec<CapturedPacket>,
    watermark: u64,
}

/// A packet inside the link.
struct Inside {
    /// When it entered the link.
    entered: u64,
    /// Its record's time, where known on entry (at the bottleneck, or when sent).
    at: u64,
    entry: u64,
    copy: bool,
    len: u32,
}

/// One direction's view of its bottleneck, kept by the emulator thread.
pub struct Tap {
    direction: Direction,
    vantage: Vantage,
    snaplen: u32,
    sender: Option<SyncSender<Batch>>,
    /// Packets inside the link: when they entered, their record's time, their place in
    /// the order of entry, whether a copy, their length.
    inside: HashMap<BufId, Inside>,
    /// Packets entered so far.
    entries: u64,
    batch: Vec<CapturedPacket>,
    counts: CaptureCounts,
    /// The latest time recorded or seen: no record is timed before it any more.
    clock: u64,
}

impl Tap {
    /// A packet of `len` IP bytes the link accepted at `at`, sent (read from its
    /// sender's device) at `sent`; `copy` for the link's duplicate.
    pub fn entered(&mut self, id: BufId, at: u64, sent: u64, len: u32, copy: bool) {
        let stamp = match self.vantage {
            Vantage::Bottleneck => at,
            Vantage::Sender => sent,
            // Timed when it arrives.
            Vantage::Receiver => at,
        };
        if self.vantage != Vantage::Receiver {
            self.clock = self.clock.max(stamp);
        }
        self.entries += 1;
        let packet = Inside {
            entered: at,
            at: stamp,
            entry: self.entries,
            copy,
            len,
        };
        self.inside.insert(id, packet);
    }

    /// A packet (`ip`, its IP bytes) the link refused at its door at `at`, sent at
    /// `sent`: it never reaches its receiver.
    pub fn refused(&mut self, at: u64, sent: u64, ip: &[u8], fate: Fate) {
        let stamp = match self.vantage {
            Vantage::Bottleneck => at,
            Vantage::Sender => sent,
            Vantage::Receiver => return,
        };
        self.clock = self.clock.max(stamp);
        self.entries += 1;
        self.record(CapturedPacket {
            at_ns: stamp,
            entry: self.entries,
            direction: self.direction,
            fate,
            queue_delay_ns: None,
            len: ip.len() as u32,
            head: head(ip, self.snaplen),
        });
    }

    /// A packet that was inside left the link, due at the far end at `due`, its bytes
    /// then `ip`: `fate` (a delivered copy is a duplicate whatever else happened to it)
    /// after `queue_delay` ns in the queue.
    pub fn left(&mut self, id: BufId, fate: Fate, queue_delay: u64, due: u64, ip: &[u8]) {
        let Some(p) = self.inside.remove(&id) else {
            return;
        };
        let fate = match fate {
            Fate::Dropped(_) => fate,
            _ if p.copy => Fate::Duplicate,
            _ => fate,
        };
        let at_ns = match self.vantage {
            Vantage::Receiver if !fate.delivered() => return,
            Vantage::Receiver => {
                self.clock = self.clock.max(due);
                due
            }
            Vantage::Bottleneck | Vantage::Sender => p.at,
        };
        self.record(CapturedPacket {
            at_ns,
            entry: p.entry,
            direction: self.direction,
            fate,
            queue_delay_ns: Some(queue_delay),
            len: p.len,
            head: head(ip, self.snaplen),
        });
    }

    /// A packet that was inside, dropped at `dropped_at` (an AQM at the queue's head),
    /// its bytes `ip`: its queueing delay is the time since it entered.
    pub fn dropped_inside(&mut self, id: BufId, fate: Fate, dropped_at: u64, ip: &[u8]) {
        let entered = self.inside.get(&id).map_or(dropped_at, |p| p.entered);
        self.left(id, fate, dropped_at.saturating_sub(entered), dropped_at, ip);
    }

    /// A packet that was inside and is gone without a fate (the emulator could not
    /// take it on): no record.
    pub fn forget(&mut self, id: BufId) {
        self.inside.remove(&id);
    }

    fn record(&mut self, packet: CapturedPacket) {
        self.batch.push(packet);
        if self.batch.len() >= BATCH {
            self.send();
        }
    }

    /// Hands the batch to the writer, or counts it as overflow if the writer is behind;
    /// `now` is the link's time (no packet enters it before then any more, and it
    /// delivered what was due), `upstream` whether packets sent before `now` wait in a
    /// link before it. Called with nothing recorded too, to move the watermark.
    pub fn flush(&mut self, now: u64, upstream: bool) {
        if !(upstream && self.vantage == Vantage::Sender) {
            self.clock = self.clock.max(now);
        }
        self.send();
    }

    /// The batch to the writer with the watermark: no record sent later is timed
    /// before it.
    fn send(&mut self) {
        // A packet inside is timed on entry, or when it arrives (not before `clock`).
        let oldest_inside = match self.vantage {
            Vantage::Receiver => None,
            Vantage::Bottleneck | Vantage::Sender => self.inside.values().map(|p| p.at).min(),
        };
        let watermark = oldest_inside.unwrap_or(self.clock).min(self.clock);
        let packets = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        let n = packets.len() as u64;
        let batch = Batch {
            direction: self.direction,
            packets,
            watermark,
        };
        let sent = self
            .sender
            .as_ref()
            .is_some_and(|sender| match sender.try_send(batch) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            });
        if sent {
            self.counts.packets += n;
        } else {
            self.counts.overflow += n;
        }
    }

    /// What this tap has recorded and lost so far.
    pub fn counts(&self) -> CaptureCounts {
        self.counts.clone()
    }
}

fn write(
    file: File,
    header: &str,
    (snaplen, interface): (u32, &str),
    at: CapturePoint,
    epoch_unix_ns: u64,
    batches: Receiver<Batch>,
) -> io::Result<()> {
    let pcap_err = |e: pcap_file::PcapError| io::Error::other(e.to_string());
    let section = SectionHeaderBlock {
        options: vec![
            SectionHeaderOption::Comment(Cow::Borrowed(header)),
            SectionHeaderOption::UserApplication(Cow::Borrowed("tcplab")),
        ],
        ..SectionHeaderBlock::default()
    };
    let mut out = PcapNgWriter::with_section_header(BufWriter::new(file), section.into_owned())
        .map_err(pcap_err)?;
    out.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::RAW,
        snaplen,
        options: vec![
            InterfaceDescriptionOption::IfName(Cow::Borrowed(interface)),
            InterfaceDescriptionOption::IfTsResol(9),
        ],
    })
    .map_err(pcap_err)?;
    let mut order = TimeOrder::default();
    for batch in batches {
        order.add(batch.direction, batch.packets, batch.watermark);
        for packet in order.ready() {
            block(&mut out, &packet, at, epoch_unix_ns).map_err(pcap_err)?;
        }
    }
    for packet in order.rest() {
        block(&mut out, &packet, at, epoch_unix_ns).map_err(pcap_err)?;
    }
    use std::io::Write;
    out.get_mut().flush()
}

/// One packet's Enhanced Packet Block.
fn block(
    out: &mut PcapNgWriter<BufWriter<File>>,
    packet: &CapturedPacket,
    at: CapturePoint,
    epoch_unix_ns: u64,
) -> Result<usize, pcap_file::PcapError> {
    let flags = if at.outbound(packet.direction) {
        OUTBOUND
    } else {
        INBOUND
    };
    out.write_pcapng_block(EnhancedPacketBlock {
        interface_id: 0,
        timestamp: Duration::from_nanos(epoch_unix_ns + packet.at_ns),
        original_len: packet.len,
        data: Cow::Borrowed(&packet.head),
        options: vec![
            EnhancedPacketOption::Comment(Cow::Owned(packet.comment())),
            EnhancedPacketOption::Flags(flags),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_netsim::link::DropReason;

    /// A tap seeing from `vantage`, whose writer has room for `room` batches and never
    /// reads them.
    fn stalled_tap(room: usize, vantage: Vantage) -> (Tap, Receiver<Batch>) {
        let (sender, batches) = sync_channel(room);
        let tap = Tap {
            direction: Direction::Up,
            vantage,
            snaplen: 64,
            sender: Some(sender),
            inside: HashMap::new(),
            batch: Vec::new(),
            counts: CaptureCounts::default(),
            clock: 0,
            entries: 0,
        };
        (tap, batches)
    }

    #[test]
    fn a_writer_that_falls_behind_costs_records_not_time() {
        let (mut tap, batches) = stalled_tap(1, Vantage::Bottleneck);
        let ip = [0x45u8; 100];
        for at in 0..3 {
            tap.refused(at, at, &ip, Fate::Dropped(DropReason::Loss));
            // The second and third find the channel full: counted, not waited for.
            tap.flush(at, false);
        }
        assert_eq!(
            tap.counts(),
            CaptureCounts {
                packets: 1,
                overflow: 2
            }
        );
        let first = batches.try_recv().unwrap();
        assert_eq!(first.packets.len(), 1);
        assert_eq!(first.packets[0].head.len(), 64, "cut at the snap length");
    }

    #[test]
    fn the_watermark_is_the_oldest_packet_still_inside() {
        let (mut tap, batches) = stalled_tap(4, Vantage::Bottleneck);
        let ip = [0x45u8; 40];
        tap.entered(7, 100, 90, 40, false);
        tap.entered(8, 150, 140, 40, false);
        tap.left(7, Fate::Delivered, 30, 10_100, &ip);
        tap.flush(400, false);
        let batch = batches.try_recv().unwrap();
        assert_eq!(
            batch.watermark, 150,
            "packet 8 entered at 150 and is inside"
        );
        assert_eq!(batch.packets[0].queue_delay_ns, Some(30));
        assert_eq!(
            batch.packets[0].at_ns, 100,
            "timed at the bottleneck's entry"
        );
        tap.left(8, Fate::Delivered, 0, 10_150, &ip);
        tap.flush(500, false);
        assert_eq!(batches.try_recv().unwrap().watermark, 500);
    }

    /// At the sending host: every packet, timed when it was sent; the watermark waits
    /// for packets sent before a flush that an upstream link still holds.
    #[test]
    fn a_sender_sees_every_packet_when_it_was_sent() {
        let (mut tap, batches) = stalled_tap(4, Vantage::Sender);
        let ip = [0x45u8; 40];
        tap.entered(7, 100, 90, 40, false);
        tap.refused(120, 110, &ip, Fate::Dropped(DropReason::Loss));
        tap.left(7, Fate::Delivered, 5, 10_100, &ip);
        tap.flush(400, true);
        let batch = batches.try_recv().unwrap();
        let times: Vec<(u64, Fate)> = batch.packets.iter().map(|p| (p.at_ns, p.fate)).collect();
        assert_eq!(
            times,
            [
                (110, Fate::Dropped(DropReason::Loss)),
                (90, Fate::Delivered)
            ]
        );
        assert_eq!(
            batch.watermark, 110,
            "a pacer upstream may hold packets sent since"
        );
        tap.flush(400, false);
        assert_eq!(batches.try_recv().unwrap().watermark, 400);
    }

    /// At the receiving host: what got through, timed when it arrived, with its bytes
    /// as it left the link; what the link dropped never arrived.
    #[test]
    fn a_receiver_sees_what_reached_it_when_it_arrived() {
        let (mut tap, batches) = stalled_tap(4, Vantage::Receiver);
        let (sent, marked) = ([0x45u8, 0x02, 0, 40], [0x45u8, 0x03, 0, 40]);
        tap.entered(7, 100, 90, 40, false);
        tap.entered(8, 101, 90, 40, false);
        tap.entered(9, 102, 90, 40, false);
        tap.refused(103, 90, &sent, Fate::Dropped(DropReason::Queue));
        tap.left(7, Fate::MarkedCe, 5, 10_100, &marked);
        tap.dropped_inside(8, Fate::Dropped(DropReason::Aqm), 300, &sent);
        tap.flush(10_200, false);
        let batch = batches.try_recv().unwrap();
        assert_eq!(batch.packets.len(), 1, "{:?}", batch.packets);
        let p = &batch.packets[0];
        assert_eq!(
            (p.at_ns, p.fate, &p.head[..]),
            (10_100, Fate::MarkedCe, &marked[..])
        );
        assert_eq!(
            batch.watermark, 10_200,
            "packet 9 arrives after the flush's time"
        );
        tap.left(9, Fate::Delivered, 0, 10_300, &sent);
        tap.flush(10_400, false);
        assert_eq!(batches.try_recv().unwrap().packets[0].at_ns, 10_300);
    }
}
