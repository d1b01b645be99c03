//! Packet buffers reused across packets: the pool grows to the high-water mark of
//! packets inside the links and then allocates nothing. Two size classes, so a 66-byte
//! ACK does not hold a 64 KiB buffer for the whole delay line.
//!
//! A segment of a GSO super-packet has no buffer of its own: its id names the large
//! buffer the super-packet was read into and the segment's index, and holds that
//! buffer until it leaves. Its headers are written when it is written out, from the
//! super-packet's, which are in the cache then for all its segments. Segmenting then
//! touches no memory per segment: at 10 Gbit/s and 20 ms, a small buffer per segment
//! came back out of memory cold and its misses were a quarter of the emulator's time.
//! A segment the links change (ECN mark, corruption) or duplicate is first copied into
//! a small buffer of its own.

use tcplab_netsim::packet::{CsumMode, Segmenter, VirtioNetHdr};

/// A packet of a [`Pool`]; what the link model carries as its packet handle: a small or
/// large buffer, or a segment of a large one.
pub type BufId = u32;

const LARGE: BufId = 1 << 31;
const SEGMENT: BufId = 1 << 30;
const SEGMENT_INDEX_BITS: u32 = 10;
/// Segments of one super-packet that get an id (64 KiB of 88-byte segments, the
/// smallest MSS, are 745); the rest are copied into small buffers.
pub const MAX_SEGMENT_IDS: usize = 1 << SEGMENT_INDEX_BITS;
/// Large buffers a segment id can name.
const MAX_SEGMENTED_BUFFERS: usize = 1 << (30 - SEGMENT_INDEX_BITS);

pub struct Pool {
    small: Class,
    large: Class,
}

struct Class {
    bufs: Vec<Buf>,
    /// Holders of each buffer: 1 from `alloc`, one more for each segment id naming it.
    refs: Vec<u32>,
    free: Vec<BufId>,
    capacity: usize,
}

pub struct Buf {
    pub data: Box<[u8]>,
    pub len: usize,
    /// When the packet was read, ns on the emulator's clock.
    pub arrived: u64,
}

impl Buf {
    pub fn bytes(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

/// A packet's bytes, virtio header first.
pub enum Bytes<'a> {
    /// In its own buffer.
    Whole(&'a [u8]),
    /// Segment `index` of the GSO super-packet `packet`.
    Segment { packet: &'a [u8], index: usize },
}

impl<'a> Bytes<'a> {
    /// The packet whose headers give this one's flow: a segment's super-packet.
    pub fn headers_from(&self) -> &'a [u8] {
        match *self {
            Bytes::Whole(bytes) | Bytes::Segment { packet: bytes, .. } => bytes,
        }
    }
}

/// The segmentation of a super-packet in a buffer (virtio header first).
pub fn segmenter(packet: &[u8]) -> Option<Segmenter<'_>> {
    let (hdr, ip) = VirtioNetHdr::split(packet).ok()?;
    Segmenter::new(&hdr, ip).ok()
}

/// Segment `index` of the super-packet `packet` written whole into `out` (virtio header
/// first, its checksum left to the receiver); its length.
pub fn write_segment(packet: &[u8], index: usize, out: &mut [u8]) -> Option<usize> {
    segmenter(packet)?
        .write_segment(index, CsumMode::Partial, true, out)
        .ok()
}

impl Class {
    fn alloc(&mut self) -> BufId {
        if let Some(index) = self.free.pop() {
            self.bufs[index as usize].len = 0;
            self.refs[index as usize] = 1;
            return index;
        }
        self.bufs.push(Buf {
            data: vec![0u8; self.capacity].into_boxed_slice(),
            len: 0,
            arrived: 0,
        });
        self.refs.push(1);
        (self.bufs.len() - 1) as BufId
    }
}

impl Pool {
    /// Buffers of `small` bytes for wire-size packets, of `large` for GSO super-packets.
    pub fn new(small: usize, large: usize) -> Pool {
        let class = |capacity| Class {
            bufs: Vec::new(),
            refs: Vec::new(),
            free: Vec::new(),
            capacity,
        };
        Pool {
            small: class(small),
            large: class(large),
        }
    }

    pub fn alloc_small(&mut self) -> BufId {
        self.small.alloc()
    }

    pub fn alloc_large(&mut self) -> BufId {
        self.large.alloc() | LARGE
    }

    /// The id of segment `index` of the super-packet in large buffer `packet`, which it
    /// holds until released; `None` where ids run out (then copy the segment).
    pub fn segment(&mut self, packet: BufId, index: usize) -> Option<BufId> {
        debug_assert!(packet & LARGE != 0 && packet & SEGMENT == 0);
        let buffer = (packet & !LARGE) as usize;
        if index >= MAX_SEGMENT_IDS || buffer >= MAX_SEGMENTED_BUFFERS {
            return None;
        }
        self.large.refs[buffer] += 1;
        Some(SEGMENT | (buffer << SEGMENT_INDEX_BITS) as BufId | index as BufId)
    }

    /// The large buffer a segment id names, and the segment's index.
    fn segment_of(id: BufId) -> Option<(BufId, usize)> {
        (id & SEGMENT != 0).then(|| {
            let buffer = (id & !SEGMENT) >> SEGMENT_INDEX_BITS;
            (
                buffer | LARGE,
                (id & (MAX_SEGMENT_IDS as BufId - 1)) as usize,
            )
        })
    }

    /// Where packet `id`'s bytes are.
    pub fn bytes(&self, id: BufId) -> Bytes<'_> {
        match Self::segment_of(id) {
            Some((packet, index)) => Bytes::Segment {
                packet: self.get(packet).bytes(),
                index,
            },
            None => Bytes::Whole(self.get(id).bytes()),
        }
    }

    /// The buffer behind packet `id`: its own, or a segment's super-packet's.
    pub fn holder(id: BufId) -> BufId {
        Self::segment_of(id).map_or(id, |(packet, _)| packet)
    }

    /// When packet `id` was read (a segment: its super-packet).
    pub fn arrived(&self, id: BufId) -> u64 {
        self.get(Self::holder(id)).arrived
    }

    /// The bytes of the buffer behind `id`: a segment's are its super-packet's.
    pub fn buffer(&self, id: BufId) -> &[u8] {
        self.get(Self::holder(id)).bytes()
    }

    /// Packet `id` in a buffer of its own, to be changed in place: a segment is copied
    /// into a small buffer and its id released; others are returned as they are.
    /// `None` (and `id` released) if the segment no longer parses.
    pub fn own(&mut self, id: BufId) -> Option<BufId> {
        if id & SEGMENT == 0 {
            return Some(id);
        }
        let own = self.copy_segment(id);
        self.release(id);
        own
    }

    /// A new buffer holding a copy of packet `id` (a segment: in a small buffer).
    pub fn duplicate(&mut self, id: BufId) -> Option<BufId> {
        if id & SEGMENT != 0 {
            return self.copy_segment(id);
        }
        let copy = if id & LARGE != 0 {
            self.alloc_large()
        } else {
            self.alloc_small()
        };
        let len = self.get(id).len;
        let class = self.class_mut(id);
        let (from, to) = ((id & !LARGE) as usize, (copy & !LARGE) as usize);
        let (a, b) = if to > from {
            let (lo, hi) = class.bufs.split_at_mut(to);
            (&lo[from], &mut hi[0])
        } else {
            let (lo, hi) = class.bufs.split_at_mut(from);
            (&hi[0], &mut lo[to])
        };
        b.data[..len].copy_from_slice(&a.data[..len]);
        b.len = len;
        b.arrived = a.arrived;
        Some(copy)
    }

    /// Segment `id` written whole into a new small buffer.
    fn copy_segment(&mut self, id: BufId) -> Option<BufId> {
        let (packet, index) = Self::segment_of(id)?;
        let small = self.small.alloc();
        let (large, smalls) = (&self.large, &mut self.small);
        let from = &large.bufs[(packet & !LARGE) as usize];
        let to = &mut smalls.bufs[small as usize];
        to.arrived = from.arrived;
        match write_segment(from.bytes(), index, &mut to.data) {
            Some(len) => {
                to.len = len;
                Some(small)
            }
            None => {
                self.release(small);
                None
            }
        }
    }

    fn class(&self, id: BufId) -> &Class {
        if id & LARGE != 0 {
            &self.large
        } else {
            &self.small
        }
    }

    fn class_mut(&mut self, id: BufId) -> &mut Class {
        if id & LARGE != 0 {
            &mut self.large
        } else {
            &mut self.small
        }
    }

    /// A buffer for `len` bytes: a small one where they fit.
    pub fn alloc_fitting(&mut self, len: usize) -> BufId {
        if len <= self.small.capacity {
            self.alloc_small()
        } else {
            self.alloc_large()
        }
    }

    /// Moves a large buffer's bytes into a small buffer if they fit, releasing the large
    /// one; returns the buffer now holding them.
    pub fn shrink(&mut self, id: BufId) -> BufId {
        let len = self.get(id).len;
        if id & LARGE == 0 || len > self.small.capacity {
            return id;
        }
        let small = self.small.alloc();
        let from = &self.large.bufs[(id & !LARGE) as usize];
        let to = &mut self.small.bufs[small as usize];
        to.data[..len].copy_from_slice(&from.data[..len]);
        to.len = len;
        to.arrived = from.arrived;
        self.release(id);
        small
    }

    /// Lets go of `id`; a buffer is free again when its last holder lets go.
    pub fn release(&mut self, id: BufId) {
        let id = Self::holder(id);
        let class = self.class_mut(id);
        let index = (id & !LARGE) as usize;
        debug_assert!(class.refs[index] > 0, "buffer {id} released twice");
        class.refs[index] -= 1;
        if class.refs[index] == 0 {
            class.free.push(id & !LARGE);
        }
    }

    /// Buffer `id` (not a segment).
    pub fn get(&self, id: BufId) -> &Buf {
        debug_assert!(id & SEGMENT == 0, "segment {id} has no buffer");
        &self.class(id).bufs[(id & !LARGE) as usize]
    }

    pub fn get_mut(&mut self, id: BufId) -> &mut Buf {
        debug_assert!(id & SEGMENT == 0, "segment {id} has no buffer");
        &mut self.class_mut(id).bufs[(id & !LARGE) as usize]
    }

    /// Buffers allocated so far (in use or free), both classes.
    pub fn allocated(&self) -> usize {
        self.small.bufs.len() + self.large.bufs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_duplicates_copy() {
        let mut pool = Pool::new(16, 64);
        let a = pool.alloc_small();
        pool.get_mut(a).data[..3].copy_from_slice(b"abc");
        pool.get_mut(a).len = 3;
        let b = pool.duplicate(a).unwrap();
        assert_ne!(a, b);
        assert_eq!(pool.get(b).bytes(), b"abc");
        pool.release(a);
        let c = pool.alloc_small();
        assert_eq!(c, a, "a released buffer is handed out again");
        assert_eq!(pool.get(c).len, 0);
        // Duplicating into a lower index works too.
        pool.release(c);
        let d = pool.duplicate(b).unwrap();
        assert_eq!(d, a);
        assert_eq!(pool.get(d).bytes(), b"abc");
        assert_eq!(pool.allocated(), 2);
    }

    #[test]
    fn classes_are_separate() {
        let mut pool = Pool::new(16, 64);
        let small = pool.alloc_small();
        let large = pool.alloc_large();
        assert_eq!(pool.get(small).data.len(), 16);
        assert_eq!(pool.get(large).data.len(), 64);
        pool.get_mut(large).len = 2;
        let copy = pool.duplicate(large).unwrap();
        assert_eq!(pool.get(copy).data.len(), 64);
        pool.release(large);
        assert_eq!(pool.alloc_large(), large);
        assert_eq!(pool.allocated(), 3);
        // A short packet moves to a small buffer; the large one is free again.
        pool.get_mut(large).data[..2].copy_from_slice(b"hi");
        pool.get_mut(large).len = 2;
        let moved = pool.shrink(large);
        assert_eq!(moved & LARGE, 0);
        assert_eq!(pool.get(moved).bytes(), b"hi");
        assert_eq!(pool.alloc_large(), large);
    }

    /// A TCP/IPv4 GSO super-packet (virtio header first) of `payload` in segments of
    /// `mss` bytes, as a kernel with TSO writes it.
    fn super_packet(payload: &[u8], mss: u16) -> Vec<u8> {
        use tcplab_netsim::packet::{internet_checksum, pseudo_header_sum};
        let total = 20 + 20 + payload.len();
        let mut ip = vec![0u8; 40];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let c = internet_checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip[20..24].copy_from_slice(&[0x30, 0x39, 0x14, 0x51]); // ports
        ip[32] = 5 << 4;
        ip[33] = 0x18; // ACK | PSH
        let seed = pseudo_header_sum(&ip[12..16], &ip[16..20], 6, (total - 20) as u32);
        ip[36..38].copy_from_slice(&seed.to_be_bytes());
        ip.extend_from_slice(payload);
        let hdr = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            gso_type: VirtioNetHdr::GSO_TCPV4,
            hdr_len: 40,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        };
        [&hdr.to_bytes()[..], &ip].concat()
    }

    /// Segment ids hold their super-packet's buffer until the last lets go, give its
    /// bytes and their index, and a segment that is owned or duplicated gets a small
    /// buffer of its own with exactly the segment's bytes, holding nothing else.
    #[test]
    fn segments_hold_their_super_packet_until_the_last_lets_go() {
        let bytes = super_packet(b"AAAABBBBCC", 4);
        let mut pool = Pool::new(128, 256);
        let packet = pool.alloc_large();
        pool.get_mut(packet).data[..bytes.len()].copy_from_slice(&bytes);
        pool.get_mut(packet).len = bytes.len();
        let segments = segmenter(&bytes).unwrap();
        assert_eq!(segments.len(), 3);
        let ids: Vec<BufId> = (0..3).map(|i| pool.segment(packet, i).unwrap()).collect();
        pool.release(packet);
        let expected = |i: usize| {
            let mut out = vec![0u8; 128];
            let n = segments
                .write_segment(i, CsumMode::Partial, true, &mut out)
                .unwrap();
            out.truncate(n);
            out
        };
        for (i, &id) in ids.iter().enumerate() {
            match pool.bytes(id) {
                Bytes::Segment { packet: p, index } => {
                    assert_eq!((p, index), (&bytes[..], i));
                }
                Bytes::Whole(_) => panic!("segment {i} has a buffer"),
            }
            assert_eq!(pool.buffer(id), &bytes[..]);
        }
        let copy = pool.duplicate(ids[1]).unwrap();
        assert_eq!(pool.get(copy).bytes(), &expected(1)[..]);
        let owned = pool.own(ids[0]).unwrap();
        assert_eq!(pool.get(owned).bytes(), &expected(0)[..]);
        assert_eq!(pool.own(owned), Some(owned), "a buffer is its own already");
        pool.release(ids[1]);
        assert_ne!(pool.alloc_large(), packet, "segment 2 still holds it");
        pool.release(ids[2]);
        assert_eq!(pool.alloc_large(), packet, "free with the last segment");
        pool.release(copy);
        pool.release(owned);
        assert_eq!(
            pool.segment(packet, MAX_SEGMENT_IDS),
            None,
            "out of ids: copy"
        );
    }
}
