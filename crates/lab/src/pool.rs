//! Packet buffers reused across packets: the pool grows to the high-water mark of
//! packets inside the links and then allocates nothing. Two size classes, so a 66-byte
//! ACK does not hold a 64 KiB buffer for the whole delay line.

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
    free: Vec<BufId>,
    capacity: usize,
}

pub struct Buf {
    pub data: Box<[u8]>,
    pub len: usize,
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
            return index;
        }
        self.bufs.push(Buf {
            data: vec![0u8; self.capacity].into_boxed_slice(),
            len: 0,
        });
        (self.bufs.len() - 1) as BufId
    }
}

impl Pool {
    /// Buffers of `small` bytes for wire-size packets, of `large` for GSO super-packets.
    pub fn new(small: usize, large: usize) -> Pool {
        let class = |capacity| Class {
            bufs: Vec::new(),
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
        copy
    }

    pub fn release(&mut self, id: BufId) {
        let class = self.class_mut(id);
        debug_assert!(
            !class.free.contains(&(id & !LARGE)),
            "buffer {id} released twice"
        );
        class.free.push(id & !LARGE);
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
}
