//! A pcapng capture at each bottleneck's entry, packets with their fates.
//!
//! The emulator's threads must not wait for a disk: each direction's [`Tap`] keeps a
//! packet's first bytes while it is inside the link, completes its record when the link
//! delivers or drops it, and hands full batches to a writer thread over a bounded
//! channel without blocking. A batch that finds the channel full is counted as
//! overflow and dropped; the link carried its packets, the file lacks them.
//!
//! The file: one interface, raw IP (link type 101), nanosecond timestamps on the wall
//! clock (the emulator's time base moved by the lab's `epoch_unix_us`, the time base of
//! the run's queue series), and on each packet an `opt_comment` with its direction,
//! fate and queueing delay ("up delivered, queued 1.234 ms") and `epb_flags` with its
//! direction (up outbound, down inbound), which tshark shows as `frame.comment` and
//! `frame.packet_flags_direction`.

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
use tcplab_model::capture::{head, CaptureCounts, CapturedPacket, Fate, TimeOrder};
use tcplab_model::path::Direction;

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
}

/// The writer thread of one capture file.
pub struct Capture {
    sender: Option<SyncSender<Batch>>,
    writer: Option<JoinHandle<io::Result<()>>>,
    snaplen: u32,
}

impl Capture {
    /// Creates the file (a failure is the caller's, before any link runs) and starts its
    /// writer; `epoch_unix_ns` is the wall-clock time of the emulator's time 0.
    pub fn start(spec: &CaptureSpec, epoch_unix_ns: u64, lab: &str) -> io::Result<Capture> {
        let file = File::create(&spec.file)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", spec.file.display())))?;
        let (sender, batches) = sync_channel(QUEUED_BATCHES);
        let header = format!(
            "tcplab lab {lab}: each direction's packets at the bottleneck's entry, with their fate and queueing delay; times are the emulator's (the lab's epoch plus its clock)"
        );
        let snaplen = spec.snaplen;
        let writer = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || write(file, &header, snaplen, epoch_unix_ns, batches))?;
        Ok(Capture {
            sender: Some(sender),
            writer: Some(writer),
            snaplen,
        })
    }

    /// A tap for one direction's bottleneck.
    pub fn tap(&self, direction: Direction) -> Tap {
        Tap {
            direction,
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

/// A packet inside the link, as it entered.
struct Inside {
    at: u64,
    entry: u64,
    copy: bool,
    len: u32,
    head: Vec<u8>,
}

/// One direction's view of its bottleneck, kept by the emulator thread.
pub struct Tap {
    direction: Direction,
    snaplen: u32,
    sender: Option<SyncSender<Batch>>,
    /// Packets inside the link: when they entered, their place in the order of entry,
    /// whether a copy, their length and head.
    inside: HashMap<BufId, Inside>,
    /// Packets entered so far.
    entries: u64,
    batch: Vec<CapturedPacket>,
    counts: CaptureCounts,
    /// The latest time the link was seen at: no packet enters before it any more.
    clock: u64,
}

impl Tap {
    /// A packet (`ip`, its IP bytes) the link accepted at `at`; `copy` for the link's
    /// duplicate.
    pub fn entered(&mut self, id: BufId, at: u64, ip: &[u8], copy: bool) {
        self.clock = self.clock.max(at);
        self.entries += 1;
        let packet = Inside {
            at,
            entry: self.entries,
            copy,
            len: ip.len() as u32,
            head: head(ip, self.snaplen),
        };
        self.inside.insert(id, packet);
    }

    /// A packet the link refused at its door.
    pub fn refused(&mut self, at: u64, ip: &[u8], fate: Fate) {
        self.clock = self.clock.max(at);
        self.entries += 1;
        self.record(CapturedPacket {
            at_ns: at,
            entry: self.entries,
            direction: self.direction,
            fate,
            queue_delay_ns: None,
            len: ip.len() as u32,
            head: head(ip, self.snaplen),
        });
    }

    /// A packet that was inside left the link: `fate` (a delivered copy is a duplicate
    /// whatever else happened to it) after `queue_delay` ns in the queue.
    pub fn left(&mut self, id: BufId, fate: Fate, queue_delay: u64) {
        let Some(p) = self.inside.remove(&id) else {
            return;
        };
        let fate = match fate {
            Fate::Dropped(_) => fate,
            _ if p.copy => Fate::Duplicate,
            _ => fate,
        };
        self.record(CapturedPacket {
            at_ns: p.at,
            entry: p.entry,
            direction: self.direction,
            fate,
            queue_delay_ns: Some(queue_delay),
            len: p.len,
            head: p.head,
        });
    }

    /// A packet that was inside, dropped at `dropped_at` (an AQM at the queue's head):
    /// its queueing delay is the time since it entered.
    pub fn dropped_inside(&mut self, id: BufId, fate: Fate, dropped_at: u64) {
        let entered = self.inside.get(&id).map_or(dropped_at, |p| p.at);
        self.left(id, fate, dropped_at.saturating_sub(entered));
    }

    fn record(&mut self, packet: CapturedPacket) {
        self.batch.push(packet);
        if self.batch.len() >= BATCH {
            self.flush(self.clock);
        }
    }

    /// Hands the batch to the writer, or counts it as overflow if the writer is behind;
    /// `now` is the link's time (no packet enters before it any more). Called with
    /// nothing recorded too, to move the watermark.
    pub fn flush(&mut self, now: u64) {
        self.clock = self.clock.max(now);
        let watermark = self
            .inside
            .values()
            .map(|p| p.at)
            .min()
            .unwrap_or(self.clock)
            .min(self.clock);
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
    snaplen: u32,
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
            InterfaceDescriptionOption::IfName(Cow::Borrowed("bottleneck")),
            InterfaceDescriptionOption::IfTsResol(9),
        ],
    })
    .map_err(pcap_err)?;
    let mut order = TimeOrder::default();
    for batch in batches {
        order.add(batch.direction, batch.packets, batch.watermark);
        for packet in order.ready() {
            block(&mut out, &packet, epoch_unix_ns).map_err(pcap_err)?;
        }
    }
    for packet in order.rest() {
        block(&mut out, &packet, epoch_unix_ns).map_err(pcap_err)?;
    }
    use std::io::Write;
    out.get_mut().flush()
}

/// One packet's Enhanced Packet Block.
fn block(
    out: &mut PcapNgWriter<BufWriter<File>>,
    packet: &CapturedPacket,
    epoch_unix_ns: u64,
) -> Result<usize, pcap_file::PcapError> {
    let flags = match packet.direction {
        Direction::Up => OUTBOUND,
        Direction::Down => INBOUND,
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

    /// A tap whose writer has room for `room` batches and never reads them.
    fn stalled_tap(room: usize) -> (Tap, Receiver<Batch>) {
        let (sender, batches) = sync_channel(room);
        let tap = Tap {
            direction: Direction::Up,
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
        let (mut tap, batches) = stalled_tap(1);
        let ip = [0x45u8; 100];
        for at in 0..3 {
            tap.refused(at, &ip, Fate::Dropped(tcplab_model::link::DropReason::Loss));
            // The second and third find the channel full: counted, not waited for.
            tap.flush(at);
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
        let (mut tap, batches) = stalled_tap(4);
        let ip = [0x45u8; 40];
        tap.entered(7, 100, &ip, false);
        tap.entered(8, 150, &ip, false);
        tap.left(7, Fate::Delivered, 30);
        tap.flush(400);
        let batch = batches.try_recv().unwrap();
        assert_eq!(
            batch.watermark, 150,
            "packet 8 entered at 150 and is inside"
        );
        assert_eq!(batch.packets[0].queue_delay_ns, Some(30));
        tap.left(8, Fate::Delivered, 0);
        tap.flush(500);
        assert_eq!(batches.try_recv().unwrap().watermark, 500);
    }
}
