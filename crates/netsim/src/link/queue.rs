//! The bottleneck buffer: a FIFO with a packet or byte limit, and CoDel (RFC 8289) at its
//! head, which may mark ECN-capable packets instead of dropping them.

use std::collections::VecDeque;

use crate::path::Limit;

/// A packet inside the link; small, so moving it between stages costs nothing.
#[derive(Debug)]
pub(crate) struct Queued<P> {
    pub packet: P,
    pub wire_len: u32,
    pub corrupt: bool,
    pub pushed_at: u64,
    /// The flow's hash (fq_codel's queue) and whether the packet is ECN-capable.
    pub flow: u32,
    pub ect: bool,
    /// An AQM marked it Congestion Experienced instead of dropping it.
    pub ce: bool,
    /// Whose it is: counted apart.
    pub traffic: tcplab_record::traffic::Traffic,
}

#[derive(Debug)]
pub(crate) struct Fifo<P> {
    items: VecDeque<Queued<P>>,
    bytes: u64,
}

impl<P> Fifo<P> {
    pub fn new() -> Self {
        Fifo {
            items: VecDeque::with_capacity(64),
            bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether `wire_len` more bytes stay within `limit`.
    pub fn fits(&self, limit: Limit, wire_len: u32) -> bool {
        match limit {
            Limit::Packets(n) => (self.items.len() as u64) < n,
            Limit::Bytes(n) => self.bytes + u64::from(wire_len) <= n,
        }
    }

    pub fn push(&mut self, q: Queued<P>) {
        self.bytes += u64::from(q.wire_len);
        self.items.push_back(q);
    }

    pub fn pop(&mut self) -> Option<Queued<P>> {
        let q = self.items.pop_front()?;
        self.bytes -= u64::from(q.wire_len);
        Some(q)
    }
}

/// What an AQM does with a packet it would drop.
pub(crate) enum Verdict<P> {
    /// ECN-capable and the AQM marks: it goes on, Congestion Experienced.
    Marked(Queued<P>),
    Dropped,
}

/// CoDel's state, as RFC 8289's pseudocode; times in ns.
#[derive(Debug)]
pub(crate) struct Codel {
    target: u64,
    interval: u64,
    /// Mark ECN-capable packets instead of dropping them.
    ecn: bool,
    /// Below this backlog (one MTU) CoDel never drops: the link is not congested.
    max_packet: u64,
    first_above_time: Option<u64>,
    drop_next: u64,
    count: u32,
    last_count: u32,
    dropping: bool,
}

impl Codel {
    /// New parameters, the control law's state kept.
    pub fn retune(&mut self, target_ns: u64, interval_ns: u64, ecn: bool) {
        self.target = target_ns;
        self.interval = interval_ns;
        self.ecn = ecn;
    }

    pub fn new(target_ns: u64, interval_ns: u64, ecn: bool, mtu: u32) -> Self {
        Codel {
            target: target_ns,
            interval: interval_ns,
            ecn,
            max_packet: u64::from(mtu),
            first_above_time: None,
            drop_next: 0,
            count: 0,
            last_count: 0,
            dropping: false,
        }
    }

    /// Whether it marks ECN-capable packets instead of dropping them.
    pub fn marks(&self) -> bool {
        self.ecn
    }

    fn control_law(&self, t: u64) -> u64 {
        t + (self.interval as f64 / f64::from(self.count.max(1)).sqrt()) as u64
    }

    /// The head packet and whether CoDel may drop it: its sojourn has been at or above
    /// target for a whole interval.
    fn do_dequeue<P>(&mut self, now: u64, fifo: &mut Fifo<P>) -> Option<(Queued<P>, bool)> {
        let Some(q) = fifo.pop() else {
            self.first_above_time = None;
            return None;
        };
        let sojourn = now.saturating_sub(q.pushed_at);
        let ok_to_drop = if sojourn < self.target || fifo.bytes() <= self.max_packet {
            self.first_above_time = None;
            false
        } else {
            match self.first_above_time {
                None => {
                    self.first_above_time = Some(now + self.interval);
                    false
                }
                Some(t) => now >= t,
            }
        };
        Some((q, ok_to_drop))
    }

    /// Marks `q` if it may (ECN on, the packet ECN-capable), else hands it to `drop`.
    fn drop_or_mark<P>(&self, mut q: Queued<P>, drop: &mut impl FnMut(Queued<P>)) -> Verdict<P> {
        if self.ecn && q.ect {
            q.ce = true;
            Verdict::Marked(q)
        } else {
            drop(q);
            Verdict::Dropped
        }
    }

    /// The next packet to send at `now`; each packet CoDel drops goes to `drop`. With
    /// ECN, a packet CoDel would drop and may mark goes out marked, counted as a drop
    /// in CoDel's schedule (Linux's codel_dequeue).
    pub fn dequeue<P>(
        &mut self,
        now: u64,
        fifo: &mut Fifo<P>,
        mut drop: impl FnMut(Queued<P>),
    ) -> Option<Queued<P>> {
        let Some((first, ok_to_drop)) = self.do_dequeue(now, fifo) else {
            self.dropping = false;
            return None;
        };
        let mut packet = Some(first);
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next {
                self.count += 1;
                let head = packet.take().expect("a packet while dropping");
                if let Verdict::Marked(marked) = self.drop_or_mark(head, &mut drop) {
                    self.drop_next = self.control_law(self.drop_next);
                    return Some(marked);
                }
                match self.do_dequeue(now, fifo) {
                    Some((next, true)) => {
                        packet = Some(next);
                        self.drop_next = self.control_law(self.drop_next);
                    }
                    Some((next, false)) => {
                        packet = Some(next);
                        self.dropping = false;
                    }
                    None => self.dropping = false,
                }
            }
        } else if ok_to_drop {
            let head = packet.take().expect("just dequeued");
            packet = match self.drop_or_mark(head, &mut drop) {
                Verdict::Marked(marked) => Some(marked),
                Verdict::Dropped => self.do_dequeue(now, fifo).map(|(p, _)| p),
            };
            self.dropping = true;
            // Resume near the old drop rate if we were dropping recently.
            let delta = self.count.wrapping_sub(self.last_count);
            self.count = if delta > 1 && now.saturating_sub(self.drop_next) < 16 * self.interval {
                delta
            } else {
                1
            };
            self.drop_next = self.control_law(now);
            self.last_count = self.count;
        }
        packet
    }
}
