//! Packet buffers reused across packets: the pool grows to the high-water mark of
//! packets inside the links and then allocates nothing.

/// Index of a buffer in a [`Pool`]; what the link model carries as its packet handle.
pub type BufId = u32;

pub struct Pool {
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

impl Pool {
    /// A pool whose buffers each hold `capacity` bytes.
    pub fn new(capacity: usize) -> Pool {
        Pool {
            bufs: Vec::new(),
            free: Vec::new(),
            capacity,
        }
    }

    pub fn alloc(&mut self) -> BufId {
        if let Some(id) = self.free.pop() {
            self.bufs[id as usize].len = 0;
            return id;
        }
        self.bufs.push(Buf {
            data: vec![0u8; self.capacity].into_boxed_slice(),
            len: 0,
        });
        (self.bufs.len() - 1) as BufId
    }

    /// A new buffer holding a copy of `id`'s bytes.
    pub fn duplicate(&mut self, id: BufId) -> BufId {
        let copy = self.alloc();
        let len = self.bufs[id as usize].len;
        let (a, b) = if copy > id {
            let (lo, hi) = self.bufs.split_at_mut(copy as usize);
            (&lo[id as usize], &mut hi[0])
        } else {
            let (lo, hi) = self.bufs.split_at_mut(id as usize);
            (&hi[0], &mut lo[copy as usize])
        };
        b.data[..len].copy_from_slice(&a.data[..len]);
        b.len = len;
        copy
    }

    pub fn release(&mut self, id: BufId) {
        debug_assert!(!self.free.contains(&id), "buffer {id} released twice");
        self.free.push(id);
    }

    pub fn get(&self, id: BufId) -> &Buf {
        &self.bufs[id as usize]
    }

    pub fn get_mut(&mut self, id: BufId) -> &mut Buf {
        &mut self.bufs[id as usize]
    }

    /// Buffers allocated so far (in use or free).
    pub fn allocated(&self) -> usize {
        self.bufs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_duplicates_copy() {
        let mut pool = Pool::new(16);
        let a = pool.alloc();
        pool.get_mut(a).data[..3].copy_from_slice(b"abc");
        pool.get_mut(a).len = 3;
        let b = pool.duplicate(a);
        assert_ne!(a, b);
        assert_eq!(pool.get(b).bytes(), b"abc");
        pool.release(a);
        let c = pool.alloc();
        assert_eq!(c, a, "a released buffer is handed out again");
        assert_eq!(pool.get(c).len, 0);
        // Duplicating into a lower index works too.
        pool.release(c);
        let d = pool.duplicate(b);
        assert_eq!(d, a);
        assert_eq!(pool.get(d).bytes(), b"abc");
        assert_eq!(pool.allocated(), 2);
    }
}
