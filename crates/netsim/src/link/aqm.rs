//! The bottleneck's queue discipline: drop-tail, CoDel (RFC 8289), fq_codel (RFC 8290)
//! or PIE (RFC 8033), each with its limit, the AQMs marking ECN-capable packets instead
//! of dropping them where asked. Times are the link's virtual ns.

use std::collections::VecDeque;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::queue::{Codel, Fifo, Queued};
use super::DropReason;
use crate::path::{Aqm, Limit};

const NS_PER_US: u64 = 1_000;

/// A packet the discipline dropped, and why.
pub(crate) type Drop<P> = (Queued<P>, DropReason);

/// The bottleneck's queue and what manages it.
#[derive(Debug)]
pub(crate) enum Scheduler<P> {
    /// Drop-tail, or CoDel at the head.
    Fifo {
        fifo: Fifo<P>,
        codel: Option<Codel>,
    },
    FqCodel(FqCodel<P>),
    Pie {
        fifo: Fifo<P>,
        pie: Pie,
    },
}

impl<P> Scheduler<P> {
    pub fn new(aqm: &Aqm, mtu: u32) -> Self {
        match *aqm {
            Aqm::DropTail => Scheduler::Fifo {
                fifo: Fifo::new(),
                codel: None,
            },
            Aqm::Codel {
                target_us,
                interval_us,
                ecn,
            } => Scheduler::Fifo {
                fifo: Fifo::new(),
                codel: Some(Codel::new(
                    target_us * NS_PER_US,
                    interval_us * NS_PER_US,
                    ecn,
                    mtu,
                )),
            },
            Aqm::FqCodel {
                target_us,
                interval_us,
                quantum,
                flows,
                ecn,
            } => Scheduler::FqCodel(FqCodel::new(
                target_us * NS_PER_US,
                interval_us * NS_PER_US,
                quantum,
                flows,
                ecn,
                mtu,
            )),
            Aqm::Pie {
                target_us,
                tupdate_us,
                alpha,
                beta,
                ecn,
            } => Scheduler::Pie {
                fifo: Fifo::new(),
                pie: Pie::new(
                    target_us * NS_PER_US,
                    tupdate_us * NS_PER_US,
                    alpha,
                    beta,
                    ecn,
                    mtu,
                ),
            },
        }
    }

    /// New parameters for the same discipline (a step of the path's schedule), kept
    /// with the packets it holds and its state; another kind is refused by the parser.
    pub fn retune(&mut self, aqm: &Aqm) {
        match (self, *aqm) {
            (Scheduler::Fifo { codel: None, .. }, Aqm::DropTail) => {}
            (
                Scheduler::Fifo {
                    codel: Some(codel), ..
                },
                Aqm::Codel {
                    target_us,
                    interval_us,
                    ecn,
                },
            ) => codel.retune(target_us * NS_PER_US, interval_us * NS_PER_US, ecn),
            (
                Scheduler::FqCodel(fq),
                Aqm::FqCodel {
                    target_us,
                    interval_us,
                    quantum,
                    flows: _, // fixed: the parser refuses a change
                    ecn,
                },
            ) => {
                fq.quantum = i64::from(quantum);
                for q in &mut fq.queues {
                    q.codel
                        .retune(target_us * NS_PER_US, interval_us * NS_PER_US, ecn);
                }
            }
            (
                Scheduler::Pie { pie, .. },
                Aqm::Pie {
                    target_us,
                    tupdate_us,
                    alpha,
                    beta,
                    ecn,
                },
            ) => {
                pie.target = target_us * NS_PER_US;
                pie.tupdate = (tupdate_us * NS_PER_US).max(1);
                pie.alpha = alpha;
                pie.beta = beta;
                pie.ecn = ecn;
            }
            (_, aqm) => unreachable!("an aqm keeps its kind during a test, not {}", aqm.name()),
        }
    }

    /// Whether the discipline needs each packet's flow hash and ECN field.
    pub fn needs_packet_meta(&self) -> bool {
        match self {
            Scheduler::Fifo { codel, .. } => codel.as_ref().is_some_and(Codel::marks),
            Scheduler::FqCodel(_) => true,
            Scheduler::Pie { pie, .. } => pie.ecn,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Scheduler::Fifo { fifo, .. } | Scheduler::Pie { fifo, .. } => fifo.len(),
            Scheduler::FqCodel(fq) => fq.packets,
        }
    }

    pub fn bytes(&self) -> u64 {
        match self {
            Scheduler::Fifo { fifo, .. } | Scheduler::Pie { fifo, .. } => fifo.bytes(),
            Scheduler::FqCodel(fq) => fq.bytes,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes `q` in at `now` within `limit`, or refuses it. fq_codel never refuses: over
    /// its limit it drops from the head of the fattest flow instead, into `dropped`.
    pub fn enqueue(
        &mut self,
        now: u64,
        q: Queued<P>,
        limit: Limit,
        rng: &mut ChaCha8Rng,
        dropped: &mut impl FnMut(Drop<P>),
    ) -> Result<(), Drop<P>> {
        match self {
            Scheduler::Fifo { fifo, .. } => {
                if !fifo.fits(limit, q.wire_len) {
                    return Err((q, DropReason::Queue));
                }
                fifo.push(q);
                Ok(())
            }
            Scheduler::FqCodel(fq) => {
                fq.enqueue(q, limit, dropped);
                Ok(())
            }
            Scheduler::Pie { fifo, pie } => {
                if !fifo.fits(limit, q.wire_len) {
                    return Err((q, DropReason::Queue));
                }
                pie.update_until(now, fifo);
                let q = pie.admit(q, fifo.bytes(), rng)?;
                fifo.push(q);
                Ok(())
            }
        }
    }

    /// The next packet to send at `now`; packets the AQM drops on the way go to
    /// `dropped`.
    pub fn dequeue(&mut self, now: u64, dropped: &mut impl FnMut(Drop<P>)) -> Option<Queued<P>> {
        match self {
            Scheduler::Fifo { fifo, codel: None } => fifo.pop(),
            Scheduler::Fifo {
                fifo,
                codel: Some(codel),
            } => codel.dequeue(now, fifo, |q| dropped((q, DropReason::Aqm))),
            Scheduler::FqCodel(fq) => fq.dequeue(now, dropped),
            Scheduler::Pie { fifo, pie } => {
                pie.update_until(now, fifo);
                let q = fifo.pop();
                pie.dequeued(now, q.as_ref(), fifo.is_empty());
                q
            }
        }
    }
}

/// One of fq_codel's queues.
#[derive(Debug)]
struct FlowQueue<P> {
    fifo: Fifo<P>,
    codel: Codel,
    deficit: i64,
    /// In the new or old list.
    listed: bool,
}

/// fq_codel as RFC 8290 describes it and Linux implements it: packets hashed by their
/// 5-tuple into `flows` queues, each with its own CoDel, served by deficit round robin
/// with a `quantum` of bytes; a queue that becomes active joins the new flows, served
/// before the old ones, so a sparse flow's packets go out almost at once.
#[derive(Debug)]
pub(crate) struct FqCodel<P> {
    queues: Vec<FlowQueue<P>>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    quantum: i64,
    packets: usize,
    bytes: u64,
}

/// Packets fq_codel drops at most at once from the fattest queue when over its limit.
const DROP_BATCH: usize = 64;

impl<P> FqCodel<P> {
    fn new(target: u64, interval: u64, quantum: u32, flows: u32, ecn: bool, mtu: u32) -> Self {
        FqCodel {
            queues: (0..flows.max(1))
                .map(|_| FlowQueue {
                    fifo: Fifo::new(),
                    codel: Codel::new(target, interval, ecn, mtu),
                    deficit: 0,
                    listed: false,
                })
                .collect(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            quantum: i64::from(quantum),
            packets: 0,
            bytes: 0,
        }
    }

    fn enqueue(&mut self, q: Queued<P>, limit: Limit, dropped: &mut impl FnMut(Drop<P>)) {
        let idx = q.flow as usize % self.queues.len();
        self.packets += 1;
        self.bytes += u64::from(q.wire_len);
        let queue = &mut self.queues[idx];
        queue.fifo.push(q);
        if !queue.listed {
            queue.listed = true;
            queue.deficit = self.quantum;
            self.new_flows.push_back(idx);
        }
        let over = match limit {
            Limit::Packets(n) => self.packets as u64 > n,
            Limit::Bytes(n) => self.bytes > n,
        };
        if over {
            self.drop_from_fattest(dropped);
        }
    }

    /// Over the limit: up to half the fattest queue's bytes from its head (at most
    /// [`DROP_BATCH`] packets), as Linux's fq_codel_drop.
    fn drop_from_fattest(&mut self, dropped: &mut impl FnMut(Drop<P>)) {
        let Some(fattest) = (0..self.queues.len()).max_by_key(|&i| self.queues[i].fifo.bytes())
        else {
            return;
        };
        let queue = &mut self.queues[fattest];
        let threshold = queue.fifo.bytes() / 2;
        let mut freed = 0;
        for _ in 0..DROP_BATCH {
            let Some(q) = queue.fifo.pop() else { break };
            freed += u64::from(q.wire_len);
            self.packets -= 1;
            self.bytes -= u64::from(q.wire_len);
            dropped((q, DropReason::Queue));
            if freed >= threshold {
                break;
            }
        }
    }

    fn dequeue(&mut self, now: u64, dropped: &mut impl FnMut(Drop<P>)) -> Option<Queued<P>> {
        loop {
            let (idx, from_new) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(&i), _) => (i, true),
                (None, Some(&i)) => (i, false),
                (None, None) => return None,
            };
            let queue = &mut self.queues[idx];
            if queue.deficit <= 0 {
                queue.deficit += self.quantum;
                self.pop_list(from_new);
                self.old_flows.push_back(idx);
                continue;
            }
            let (packets, bytes) = (&mut self.packets, &mut self.bytes);
            let before = queue.fifo.len();
            let mut count_drop = |q: Queued<P>| {
                *bytes -= u64::from(q.wire_len);
                dropped((q, DropReason::Aqm));
            };
            let next = queue.codel.dequeue(now, &mut queue.fifo, &mut count_drop);
            *packets -= before - queue.fifo.len();
            let Some(q) = next else {
                // Empty: a new flow goes to the old ones' tail (so it cannot starve them
                // by coming back new), an old one leaves the lists.
                self.pop_list(from_new);
                if from_new && !self.old_flows.is_empty() {
                    self.old_flows.push_back(idx);
                } else {
                    self.queues[idx].listed = false;
                }
                continue;
            };
            self.bytes -= u64::from(q.wire_len);
            self.queues[idx].deficit -= i64::from(q.wire_len);
            return Some(q);
        }
    }

    fn pop_list(&mut self, from_new: bool) {
        if from_new {
            self.new_flows.pop_front();
        } else {
            self.old_flows.pop_front();
        }
    }
}

/// PIE as RFC 8033 describes it and Linux implements it (timestamp queue delay, the
/// drop probability's auto-tuning and derandomization): a packet arriving at the queue
/// is dropped, or marked, with a probability updated every `tupdate` from the queue
/// delay against `target`.
#[derive(Debug)]
pub(crate) struct Pie {
    target: u64,
    tupdate: u64,
    /// Per second, ×16 (tc's units: alpha 2 is 0.125 Hz).
    alpha: u32,
    beta: u32,
    ecn: bool,
    max_packet: u64,
    /// Drop probability, 0–1.
    pub(crate) prob: f64,
    /// The queue delay at the last update and the last dequeued packet's.
    qdelay_old: u64,
    qdelay: u64,
    burst_allowance: u64,
    accu_prob: f64,
    next_update: u64,
}

/// RFC 8033's MAX_BURST: the queue may hold a burst this long before PIE drops.
const PIE_MAX_BURST_NS: u64 = 150_000_000;
/// Above this drop probability PIE drops ECN-capable packets too (RFC 8033 §5.1).
const PIE_MARK_LIMIT: f64 = 0.1;

impl Pie {
    fn new(target: u64, tupdate: u64, alpha: u32, beta: u32, ecn: bool, mtu: u32) -> Self {
        Pie {
            target,
            tupdate: tupdate.max(1),
            alpha,
            beta,
            ecn,
            max_packet: u64::from(mtu),
            prob: 0.0,
            qdelay_old: 0,
            qdelay: 0,
            burst_allowance: PIE_MAX_BURST_NS,
            accu_prob: 0.0,
            next_update: tupdate.max(1),
        }
    }

    /// Runs the probability updates due by `now`.
    fn update_until<P>(&mut self, now: u64, fifo: &Fifo<P>) {
        if fifo.is_empty() {
            self.qdelay = 0;
        }
        while self.next_update <= now {
            self.update();
            self.next_update += self.tupdate;
        }
    }

    /// RFC 8033 §4.2 with Linux's scaling of small probabilities.
    fn update(&mut self) {
        let secs = |ns: u64| ns as f64 / 1e9;
        let (qdelay, old) = (secs(self.qdelay), secs(self.qdelay_old));
        let alpha = f64::from(self.alpha) / 16.0;
        let beta = f64::from(self.beta) / 16.0;
        let mut delta = alpha * (qdelay - secs(self.target)) + beta * (qdelay - old);
        // The smaller the probability, the smaller its steps (auto-tuning).
        delta /= match self.prob {
            p if p < 1e-6 => 2048.0,
            p if p < 1e-5 => 512.0,
            p if p < 1e-4 => 128.0,
            p if p < 1e-3 => 32.0,
            p if p < 1e-2 => 8.0,
            p if p < 1e-1 => 2.0,
            _ => 1.0,
        };
        if self.prob >= 0.1 && delta > 0.02 {
            delta = 0.02;
        }
        // A queue delay over 250 ms: grow faster.
        if self.qdelay > 250_000_000 {
            delta += 0.02;
        }
        self.prob = (self.prob + delta).clamp(0.0, 1.0);
        if self.qdelay == 0 && self.qdelay_old == 0 {
            self.prob *= 0.98;
        }
        self.qdelay_old = self.qdelay;
        self.burst_allowance = self.burst_allowance.saturating_sub(self.tupdate);
        if self.prob == 0.0 && self.qdelay < self.target / 2 && self.qdelay_old < self.target / 2 {
            self.burst_allowance = PIE_MAX_BURST_NS;
        }
    }

    /// Whether an arriving packet is to go (RFC 8033 §4.1, derandomized as §5.1).
    fn drop_early(&mut self, backlog: u64, rng: &mut ChaCha8Rng) -> bool {
        if self.burst_allowance > 0 {
            return false;
        }
        if self.qdelay_old < self.target / 2 && self.prob < 0.2 {
            return false;
        }
        if backlog < 2 * self.max_packet {
            return false;
        }
        if self.prob == 0.0 {
            self.accu_prob = 0.0;
        }
        self.accu_prob += self.prob;
        if self.accu_prob < 0.85 {
            return false;
        }
        if self.accu_prob >= 8.5 || rng.random::<f64>() < self.prob {
            self.accu_prob = 0.0;
            return true;
        }
        false
    }

    /// The arriving packet in, marked, or dropped.
    fn admit<P>(
        &mut self,
        mut q: Queued<P>,
        backlog: u64,
        rng: &mut ChaCha8Rng,
    ) -> Result<Queued<P>, Drop<P>> {
        if !self.drop_early(backlog, rng) {
            return Ok(q);
        }
        if self.ecn && q.ect && self.prob <= PIE_MARK_LIMIT {
            q.ce = true;
            return Ok(q);
        }
        Err((q, DropReason::Aqm))
    }

    /// The queue delay is the last dequeued packet's sojourn; none once empty.
    fn dequeued<P>(&mut self, now: u64, q: Option<&Queued<P>>, empty: bool) {
        self.qdelay = match q {
            Some(q) if !empty => now.saturating_sub(q.pushed_at),
            _ => 0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn packet(flow: u32, at: u64, ect: bool) -> Queued<u64> {
        Queued {
            packet: u64::from(flow),
            wire_len: 1500,
            corrupt: false,
            pushed_at: at,
            flow,
            ect,
            ce: false,
            traffic: tcplab_record::traffic::Traffic::Test,
        }
    }

    fn fq(quantum: u32) -> Scheduler<u64> {
        Scheduler::new(
            &Aqm::FqCodel {
                target_us: 5_000,
                interval_us: 100_000,
                quantum,
                flows: 1024,
                ecn: false,
            },
            1500,
        )
    }

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(1)
    }

    #[test]
    fn fq_codel_serves_a_new_sparse_flow_before_a_backlogged_one() {
        let mut s = fq(1514);
        let mut drops = Vec::new();
        for _ in 0..100 {
            s.enqueue(
                0,
                packet(1, 0, false),
                Limit::Packets(1000),
                &mut rng(),
                &mut |d| drops.push(d),
            )
            .unwrap();
        }
        // The bulk flow has been served a while: it is an old flow now.
        for k in 0..10 {
            assert_eq!(s.dequeue(k, &mut |d| drops.push(d)).unwrap().flow, 1);
        }
        s.enqueue(
            10,
            packet(2, 10, false),
            Limit::Packets(1000),
            &mut rng(),
            &mut |d| drops.push(d),
        )
        .unwrap();
        assert_eq!(s.dequeue(11, &mut |d| drops.push(d)).unwrap().flow, 2);
        assert!(drops.is_empty());
        assert_eq!(s.len(), 90);
    }

    #[test]
    fn fq_codel_shares_by_bytes_between_backlogged_flows() {
        let mut s = fq(1514);
        let mut none = |_: Drop<u64>| panic!("no drop expected");
        for k in 0..200 {
            let mut q = packet(k % 2, 0, false);
            // Flow 1 sends packets a third the size: it gets three for flow 0's one.
            if q.flow == 1 {
                q.wire_len = 500;
            }
            s.enqueue(0, q, Limit::Packets(1000), &mut rng(), &mut none)
                .unwrap();
        }
        let served: Vec<u32> = (0..40)
            .map(|k| s.dequeue(k, &mut none).unwrap().flow)
            .collect();
        let bytes = |f: u32| {
            served.iter().filter(|&&x| x == f).count() as u64 * if f == 0 { 1500 } else { 500 }
        };
        let (a, b) = (bytes(0), bytes(1));
        assert!(a.abs_diff(b) <= 1514 + 1500, "{a} vs {b}: {served:?}");
    }

    #[test]
    fn fq_codel_over_its_limit_drops_from_the_fattest_flow() {
        let mut s = fq(1514);
        let mut drops = Vec::new();
        for k in 0..10 {
            s.enqueue(
                0,
                packet(if k < 8 { 1 } else { 2 }, 0, false),
                Limit::Packets(10),
                &mut rng(),
                &mut |d| drops.push(d),
            )
            .unwrap();
        }
        assert!(drops.is_empty());
        s.enqueue(
            0,
            packet(2, 0, false),
            Limit::Packets(10),
            &mut rng(),
            &mut |d| drops.push(d),
        )
        .unwrap();
        // Half the fattest flow's 8 packets, from its head.
        assert_eq!(drops.len(), 4);
        assert!(drops
            .iter()
            .all(|(q, why)| q.flow == 1 && *why == DropReason::Queue));
        assert_eq!(s.len(), 7);
    }

    fn pie(ecn: bool) -> Pie {
        Pie::new(15_000_000, 15_000_000, 2, 20, ecn, 1500)
    }

    #[test]
    fn pie_probability_grows_with_a_standing_queue_and_decays_without() {
        let mut p = pie(false);
        // 100 ms of queue, held: the probability rises every update.
        let mut last = 0.0;
        p.qdelay = 100_000_000;
        for _ in 0..50 {
            p.update();
            assert!(p.prob >= last, "{} < {last}", p.prob);
            last = p.prob;
        }
        assert!(last > 0.1, "{last}");
        // Below target the probability falls; an empty queue decays it by 2 % a step.
        p.qdelay = 0;
        p.update();
        assert!(p.prob < last);
        let before = p.prob;
        p.update();
        assert!(p.prob <= before * 0.98 + 1e-12, "{} {before}", p.prob);
    }

    #[test]
    fn pie_first_update_step_is_the_rfcs() {
        // From p = 0 at 30 ms of delay (target 15 ms, old 0): (0.125 × 0.015 + 1.25 ×
        // 0.03) / 2048.
        let mut p = pie(false);
        p.qdelay = 30_000_000;
        p.update();
        let want = (0.125 * 0.015 + 1.25 * 0.03) / 2048.0;
        assert!((p.prob - want).abs() < 1e-12, "{} vs {want}", p.prob);
    }

    #[test]
    fn pie_lets_a_burst_through_then_drops_or_marks() {
        let mut p = pie(true);
        let mut r = rng();
        p.prob = 0.05;
        p.qdelay_old = 100_000_000;
        // The initial burst allowance: nothing dropped.
        assert!(!p.drop_early(100_000, &mut r));
        p.burst_allowance = 0;
        let drops: Vec<usize> = (0..10_000)
            .filter(|_| p.drop_early(100_000, &mut r))
            .collect();
        // Derandomized (RFC 8033 §5.1): after a drop, none until the probabilities
        // accumulate to 0.85 (17 packets at 5 %), then each at 5 %: one drop per 37
        // packets, about 270.
        assert!((220..=330).contains(&drops.len()), "{}", drops.len());
        assert!(drops.windows(2).all(|w| w[1] - w[0] >= 17), "{drops:?}");
        // Below 10 % an ECN-capable packet is marked, not dropped; a plain one dropped.
        p.accu_prob = 8.5;
        let q = p.admit(packet(1, 0, true), 100_000, &mut r).unwrap();
        assert!(q.ce);
        p.accu_prob = 8.5;
        assert!(p.admit(packet(1, 0, false), 100_000, &mut r).is_err());
        // Above the mark limit the ECN-capable one is dropped too.
        p.prob = 0.2;
        p.accu_prob = 8.5;
        assert!(p.admit(packet(1, 0, true), 100_000, &mut r).is_err());
    }
}
