//! What each flow met on one link of a topology: its packets through, those the link
//! dropped, the time they queued there and the time they spent on it (entering to
//! leaving: queueing, serialization and the link's delay); and the link's queue over
//! time. From these
//! explain names the link that bound each flow (the one whose queue held it longest, or
//! that dropped most of it). Pure: the emulator feeds it packets and times.

use foldhash::{HashMap, HashMapExt};

use tcplab_netsim::packet::FlowKey;
use tcplab_record::{HopFlow, QueueSample};

use crate::queue::QueueSeries;

/// Flows kept apart at most (the first seen), so a flood of one-packet flows cannot
/// grow the emulator's memory.
const MAX_FLOWS: usize = 1024;

/// One link's meter.
pub struct HopMeter {
    flows: HashMap<FlowKey, Tally>,
    queue: QueueSeries,
}

#[derive(Default)]
struct Tally {
    packets: u64,
    dropped: u64,
    queued_ns: u64,
    max_queued_ns: u64,
    spent_ns: u64,
    max_spent_ns: u64,
}

impl HopMeter {
    /// A meter that keeps the queue once per `queue_period_ns`.
    pub fn new(queue_period_ns: u64) -> HopMeter {
        HopMeter {
            flows: HashMap::new(),
            queue: QueueSeries::new(queue_period_ns),
        }
    }

    fn tally(&mut self, flow: FlowKey) -> Option<&mut Tally> {
        // The cap is looked up only once reached: one hash a packet until then.
        if self.flows.len() >= MAX_FLOWS && !self.flows.contains_key(&flow) {
            return None;
        }
        Some(self.flows.entry(flow).or_default())
    }

    /// A packet of `flow` left the link `spent_ns` after it entered, `queued_ns` of it
    /// in the queue.
    pub fn delivered(&mut self, flow: FlowKey, queued_ns: u64, spent_ns: u64) {
        if let Some(t) = self.tally(flow) {
            t.packets += 1;
            t.queued_ns += queued_ns;
            t.max_queued_ns = t.max_queued_ns.max(queued_ns);
            t.spent_ns += spent_ns;
            t.max_spent_ns = t.max_spent_ns.max(spent_ns);
        }
    }

    /// The link dropped a packet of `flow` (at its door or inside).
    pub fn dropped(&mut self, flow: FlowKey) {
        if let Some(t) = self.tally(flow) {
            t.dropped += 1;
        }
    }

    /// The link's queue holds `bytes` (the test's) at `now_ns`; kept once per period.
    pub fn queue(&mut self, now_ns: u64, bytes: u64) {
        self.queue.sample(now_ns, bytes);
    }

    /// Each flow's tally (busiest first), and the queue's samples so far.
    pub fn report(&self) -> (Vec<HopFlow>, Vec<QueueSample>) {
        let mut flows: Vec<HopFlow> = self
            .flows
            .iter()
            .map(|(key, t)| {
                let mean_us = |ns: u64| match t.packets {
                    0 => 0.0,
                    n => ns as f64 / n as f64 / 1000.0,
                };
                HopFlow {
                    flow: key.to_string(),
                    packets: t.packets,
                    dropped: t.dropped,
                    queue_delay_mean_us: mean_us(t.queued_ns),
                    queue_delay_max_us: t.max_queued_ns as f64 / 1000.0,
                    delay_mean_us: mean_us(t.spent_ns),
                    delay_max_us: t.max_spent_ns as f64 / 1000.0,
                }
            })
            .collect();
        flows.sort_by(|a, b| {
            (b.packets + b.dropped)
                .cmp(&(a.packets + a.dropped))
                .then_with(|| a.flow.cmp(&b.flow))
        });
        (flows, self.queue.samples().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> FlowKey {
        FlowKey {
            src: "10.77.0.1".parse().unwrap(),
            dst: "10.77.0.2".parse().unwrap(),
            protocol: 6,
            src_port: port,
            dst_port: 5201,
        }
    }

    #[test]
    fn each_flow_has_its_packets_drops_and_queueing() {
        let mut m = HopMeter::new(10_000_000);
        m.delivered(key(1), 1_000_000, 6_000_000);
        m.delivered(key(1), 3_000_000, 8_000_000);
        m.dropped(key(1));
        m.delivered(key(2), 0, 5_000_000);
        let (flows, _) = m.report();
        assert_eq!(flows.len(), 2);
        let one = &flows[0];
        assert_eq!(one.flow, "tcp 10.77.0.1:1 > 10.77.0.2:5201");
        assert_eq!((one.packets, one.dropped), (2, 1));
        assert_eq!(one.queue_delay_mean_us, 2000.0);
        assert_eq!(one.queue_delay_max_us, 3000.0);
        assert_eq!((one.delay_mean_us, one.delay_max_us), (7000.0, 8000.0));
        assert_eq!(flows[1].queue_delay_mean_us, 0.0);
    }

    #[test]
    fn flows_beyond_the_cap_are_not_kept() {
        let mut m = HopMeter::new(1);
        for port in 0..(MAX_FLOWS as u16 + 10) {
            m.delivered(key(port), 1, 1);
        }
        assert_eq!(m.report().0.len(), MAX_FLOWS);
    }
}
