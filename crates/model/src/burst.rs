//! Burstiness at a link's entry, in the link's own terms: per flow, the gaps between
//! its packets, and its bursts — runs of packets each arriving before the link could
//! have sent the one before it (a gap shorter than that packet's serialization time at
//! the link's rate). A paced flow arrives in runs of one; a TSO burst or a window's
//! worth of packets released by one ACK arrives as a long run. Also the link's queue
//! occupancy over time. Pure: the emulator feeds it times and sizes.

use std::collections::HashMap;

use crate::packet::FlowKey;
use crate::record::{BurstStats, QueueSample};
use crate::udp::quantiles;

/// Per-flow counts kept for at most this many flows (the first seen): a flood of
/// one-packet flows must not grow the emulator's memory.
const MAX_FLOWS: usize = 1024;
/// Gaps kept per flow for quantiles (beyond it, the last value is overwritten in turn).
const MAX_GAPS: usize = 1 << 20;

#[derive(Default)]
struct FlowMeter {
    packets: u64,
    /// Arrival and serialization end (at the link's rate) of the flow's last packet, ns.
    last_arrival_ns: u64,
    last_done_ns: u64,
    /// Length of the burst in progress.
    run: u64,
    bursts: Vec<u32>,
    gaps_us: Vec<u32>,
}

/// Burstiness of the packets entering one link.
pub struct BurstMeter {
    /// ns per byte at the link's rate.
    ns_per_byte: f64,
    flows: HashMap<FlowKey, FlowMeter>,
    queue: Vec<QueueSample>,
    queue_period_ns: u64,
    next_queue_sample_ns: u64,
}

impl BurstMeter {
    /// For a link of `rate_bps`, sampling its queue every `queue_period_ns`.
    pub fn new(rate_bps: u64, queue_period_ns: u64) -> BurstMeter {
        BurstMeter {
            ns_per_byte: 8e9 / rate_bps.max(1) as f64,
            flows: HashMap::new(),
            queue: Vec::new(),
            queue_period_ns: queue_period_ns.max(1),
            next_queue_sample_ns: 0,
        }
    }

    /// A packet of `wire_len` bytes of `flow` arrives at `now_ns`.
    pub fn arrival(&mut self, flow: FlowKey, now_ns: u64, wire_len: u32) {
        if !self.flows.contains_key(&flow) && self.flows.len() >= MAX_FLOWS {
            return;
        }
        let serialize_ns = (f64::from(wire_len) * self.ns_per_byte) as u64;
        let m = self.flows.entry(flow).or_default();
        if m.packets > 0 {
            // Back to back: it arrived while the link was still sending the last one.
            if now_ns < m.last_done_ns {
                m.run += 1;
            } else {
                m.bursts.push(m.run.min(u64::from(u32::MAX)) as u32);
                m.run = 1;
            }
            let gap = ((now_ns - m.last_arrival_ns.min(now_ns)) / 1000).min(u64::from(u32::MAX));
            if m.gaps_us.len() < MAX_GAPS {
                m.gaps_us.push(gap as u32);
            } else {
                let at = (m.packets as usize) % MAX_GAPS;
                m.gaps_us[at] = gap as u32;
            }
        } else {
            m.run = 1;
        }
        m.packets += 1;
        m.last_arrival_ns = now_ns;
        // The link sends back-to-back packets one after another.
        m.last_done_ns = m.last_done_ns.max(now_ns) + serialize_ns;
    }

    /// The link's queue holds `bytes` at `now_ns`; kept once per period.
    pub fn queue(&mut self, now_ns: u64, bytes: u64) {
        if now_ns >= self.next_queue_sample_ns {
            self.queue.push(QueueSample {
                t_us: now_ns / 1000,
                bytes,
            });
            self.next_queue_sample_ns =
                now_ns - now_ns % self.queue_period_ns + self.queue_period_ns;
        }
    }

    /// Per-flow statistics (flows with at least one packet, busiest first) and the
    /// queue's samples so far.
    pub fn report(&self) -> (Vec<BurstStats>, Vec<QueueSample>) {
        let mut flows: Vec<BurstStats> = self
            .flows
            .iter()
            .map(|(key, m)| {
                let mut bursts = m.bursts.clone();
                bursts.push(m.run as u32);
                let count = bursts.len() as u64;
                let mean = bursts.iter().map(|&b| f64::from(b)).sum::<f64>() / count as f64;
                let q = quantiles(&mut bursts);
                BurstStats {
                    flow: key.to_string(),
                    packets: m.packets,
                    bursts: count,
                    burst_mean: mean,
                    burst_p99: q.p99,
                    burst_max: q.max as u64,
                    gap_us: quantiles(&mut m.gaps_us.clone()),
                }
            })
            .collect();
        flows.sort_by(|a, b| b.packets.cmp(&a.packets).then(a.flow.cmp(&b.flow)));
        (flows, self.queue.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn flow(port: u16) -> FlowKey {
        FlowKey {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            protocol: 6,
            src_port: port,
            dst_port: 5201,
        }
    }

    #[test]
    fn spaced_packets_are_runs_of_one_and_back_to_back_ones_a_burst() {
        // 1 Gbit/s: a 1500-byte packet takes 12 µs.
        let mut m = BurstMeter::new(1_000_000_000, 1_000_000);
        // Paced: one packet every 15 µs.
        for k in 0..100u64 {
            m.arrival(flow(1), k * 15_000, 1500);
        }
        // Bursty: 10 at once, every 1 ms.
        for b in 0..10u64 {
            for _ in 0..10 {
                m.arrival(flow(2), b * 1_000_000, 1500);
            }
        }
        let (flows, _) = m.report();
        let paced = flows.iter().find(|f| f.flow.contains(":1 >")).unwrap();
        assert_eq!(
            (paced.packets, paced.bursts, paced.burst_max),
            (100, 100, 1)
        );
        assert_eq!(paced.gap_us.p50, 15.0);
        let bursty = flows.iter().find(|f| f.flow.contains(":2 >")).unwrap();
        assert_eq!((bursty.bursts, bursty.burst_max), (10, 10));
        assert_eq!(bursty.burst_mean, 10.0);
        assert_eq!((bursty.gap_us.p50, bursty.gap_us.max), (0.0, 1000.0));
    }

    #[test]
    fn a_packet_arriving_just_after_the_link_finished_starts_a_new_burst() {
        let mut m = BurstMeter::new(1_000_000_000, 1_000_000);
        m.arrival(flow(1), 0, 1500);
        m.arrival(flow(1), 11_999, 1500); // still serializing: same burst
        m.arrival(flow(1), 24_000, 1500); // the link finished at 24 µs: new burst
        let (flows, _) = m.report();
        assert_eq!((flows[0].bursts, flows[0].burst_max), (2, 2));
    }

    #[test]
    fn the_queue_is_sampled_once_per_period() {
        let mut m = BurstMeter::new(1_000_000_000, 1_000_000);
        for t in (0..10_000_000u64).step_by(100_000) {
            m.queue(t, t / 1000);
        }
        let (_, queue) = m.report();
        assert_eq!(queue.len(), 10);
        assert_eq!(
            (queue[0].t_us, queue[9].t_us, queue[9].bytes),
            (0, 9000, 9000)
        );
    }

    #[test]
    fn flows_beyond_the_cap_are_not_tracked() {
        let mut m = BurstMeter::new(1_000_000_000, 1_000_000);
        for port in 0..2000u16 {
            m.arrival(flow(port), u64::from(port), 100);
        }
        assert_eq!(m.report().0.len(), MAX_FLOWS);
    }
}
