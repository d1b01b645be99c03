//! Packet buffers reused across packets: the pool grows to the high-water mark of
//! packets inside the links and then allocates nothing. Two size classes, so a 66-byte
//! ACK does not hold a 64 KiB buffer for the whole delay line.
//!
//! A segment of a GSO super-packet is a small buffer holding its headers and a
//! [`Tail`]: its payload where it lies in the super-packet's large buffer, which
//! counts the segments that refer to it and is freed with the last one. Segmenting
//! then copies headers, not payloads.

/// A buffer of a [`Pool`]; what the link model carries as its packet handle. The top
/// bit says which class it belongs to.
pub type BufId = u32;

const LARGE: BufId = 1 << 31;

pub struct Pool {
    small: Class,
    large: Class,
}

struct Class {
    bufs: Vec<Buf>,
    /// Holders of each buffer: 1 from `alloc`, one more for each tail that refers to it.
    refs: Vec<u32>,
    free: Vec<BufId>,
    capacity: usize,
}

pub struct Buf {
    pub data: Box<[u8]>,
    pub len: usize,
    /// The packet's payload in another (large) buffer: the packet is `bytes()` then
    /// this.
    pub tail: Option<Tail>,
}

/// Bytes `start..end` of buffer `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tail {
    pub buf: BufId,
    pub start: usize,
    pub end: usize,
}

impl Buf {
    pub fn bytes(&self) -> &[u8] {
        &self.data[..self.len]
    }
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
            tail: None,
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
        self.release(id);
        small
    }

    /// A new buffer of the same class holding a copy of `id`'s bytes.
    pub fn duplicate(&mut self, id: BufId) -> BufId {
        let copy = if id & LARGE != 0 {
            self.alloc_large()
        } else {
            self.alloc_small()
        };
        let len = self.get(id).len;
        let tail = self.get(id).tail;
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
        if let Some(t) = tail {
            self.set_tail(copy, t);
        }
        copy
    }

    /// Makes `tail` the payload of small buffer `id`: one more holder of its buffer.
    pub fn set_tail(&mut self, id: BufId, tail: Tail) {
        debug_assert!(id & LARGE == 0 && tail.buf & LARGE != 0);
        self.large.refs[(tail.buf & !LARGE) as usize] += 1;
        self.get_mut(id).tail = Some(tail);
    }

    /// The packet's bytes after its first `offset`: its tail where it has one (its
    /// buffer then holds exactly its first `offset` bytes), else the rest of its buffer.
    pub fn payload(&self, id: BufId, offset: usize) -> &[u8] {
        let buf = self.get(id);
        match buf.tail {
            Some(_) => {
                debug_assert_eq!(buf.len, offset);
                self.tail(id)
            }
            None => &buf.bytes()[offset..],
        }
    }

    /// The packet's tail, if any (empty otherwise).
    pub fn tail(&self, id: BufId) -> &[u8] {
        match self.get(id).tail {
            Some(t) => &self.get(t.buf).data[t.start..t.end],
            None => &[],
        }
    }

    /// The whole packet in its own buffer: the tail copied after the head and let go.
    /// The small class holds a segment whole.
    pub fn flatten(&mut self, id: BufId) {
        let Some(t) = self.get_mut(id).tail.take() else {
            return;
        };
        let len = self.get(id).len;
        let n = t.end - t.start;
        let (small, large) = (&mut self.small, &self.large);
        let from = &large.bufs[(t.buf & !LARGE) as usize].data[t.start..t.end];
        let to = &mut small.bufs[id as usize];
        to.data[len..len + n].copy_from_slice(from);
        to.len = len + n;
        self.release(t.buf);
    }

    /// Lets go of `id`; a buffer is free again when its last holder lets go.
    pub fn release(&mut self, id: BufId) {
        let tail = self.get_mut(id).tail.take();
        let class = self.class_mut(id);
        let index = (id & !LARGE) as usize;
        debug_assert!(class.refs[index] > 0, "buffer {id} released twice");
        class.refs[index] -= 1;
        if class.refs[index] == 0 {
            class.free.push(id & !LARGE);
        }
        if let Some(t) = tail {
            self.release(t.buf);
        }
    }

    pub fn get(&self, id: BufId) -> &Buf {
        &self.class(id).bufs[(id & !LARGE) as usize]
    }

    pub fn get_mut(&mut self, id: BufId) -> &mut Buf {
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
        let b = pool.duplicate(a);
        assert_ne!(a, b);
        assert_eq!(pool.get(b).bytes(), b"abc");
        pool.release(a);
        let c = pool.alloc_small();
        assert_eq!(c, a, "a released buffer is handed out again");
        assert_eq!(pool.get(c).len, 0);
        // Duplicating into a lower index works too.
        pool.release(c);
        let d = pool.duplicate(b);
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
        let copy = pool.duplicate(large);
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

    /// Segments that keep their payloads in their super-packet's buffer: it is freed
    /// with the last of them, a duplicate holds it too, and a flattened segment holds
    /// its own bytes.
    #[test]
    fn tails_hold_their_buffer_until_the_last_lets_go() {
        let mut pool = Pool::new(32, 64);
        let packet = pool.alloc_large();
        pool.get_mut(packet).data[..12].copy_from_slice(b"hhAAAABBBBCC");
        pool.get_mut(packet).len = 12;
        let segment = |pool: &mut Pool, start, end| {
            let id = pool.alloc_small();
            pool.get_mut(id).data[..2].copy_from_slice(b"hd");
            pool.get_mut(id).len = 2;
            pool.set_tail(
                id,
                Tail {
                    buf: packet,
                    start,
                    end,
                },
            );
            id
        };
        let a = segment(&mut pool, 2, 6);
        let b = segment(&mut pool, 6, 10);
        pool.release(packet);
        assert_eq!(
            (pool.get(a).bytes(), pool.tail(a)),
            (&b"hd"[..], &b"AAAA"[..])
        );
        assert_eq!(pool.payload(b, 2), b"BBBB");
        let copy = pool.duplicate(b);
        assert_eq!(pool.tail(copy), b"BBBB");
        pool.flatten(a);
        assert_eq!(
            (pool.get(a).bytes(), pool.tail(a)),
            (&b"hdAAAA"[..], &b""[..])
        );
        pool.release(b);
        assert_ne!(pool.alloc_large(), packet, "the duplicate still holds it");
        pool.release(copy);
        assert_eq!(pool.alloc_large(), packet, "free with the last holder");
        pool.release(a);
    }
}
