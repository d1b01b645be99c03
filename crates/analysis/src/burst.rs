//! Bursts at a link's entry, as trains: per flow, runs of packets arriving back to
//! back — each within [`TRAIN_GAP_NS`] of the flow's previous arrival and at least twice
//! as fast as the link sends that arrival. A GSO packet's segments arrive together and
//! are one train by construction; a paced flow arrives in trains of one; packets clocked
//! out by ACKs at the link's own rate never chain, however long the flow keeps the link
//! busy. Also the link's queue occupancy over time. Pure: the emulator feeds it times,
//! sizes and how late each time may be.

use foldhash::{HashMap, HashMapExt};

use crate::queue::QueueSeries;
use crate::stats::quantiles;
use tcplab_netsim::packet::FlowKey;
use tcplab_record::traffic::Traffic;
use tcplab_record::{BurstStats, QueueSample};

/// The longest gap inside a train. Well below the spacing of paced sends (BBR at
/// 1 Gbit/s spaces its 64 KB GSO packets 430–550 µs apart), and above what the
/// emulator's reads need to resolve a sender's back-to-back GSO packets: it reads one
/// waiting behind another up to 45 µs after it (it segments the first before reading
/// the next), and its read times may lag the arrivals by 25 µs more.
pub const TRAIN_GAP_NS: u64 = 100_000;

/// Per-flow counts kept for at most this many flows (the first seen): a flood of
/// one-packet flows must not grow the emulator's memory.
const MAX_FLOWS: usize = 1024;
/// Gaps kept per flow for quantiles (beyond it, the last value is overwritten in turn).
const MAX_GAPS: usize = 1 << 20;

#[derive(Default)]
struct FlowMeter {
    traffic: Traffic,
    packets: u64,
    /// Time of the flow's last arrival, how much earlier it may have arrived, and the
    /// wire bytes that arrived then (all the segments of a GSO packet arrive at once).
    last_ns: u64,
    last_lag_ns: u64,
    last_bytes: u64,
    /// Length of the train in progress.
    run: u64,
    trains: Vec<u32>,
    gaps_us: Vec<u32>,
    /// Arrivals close enough to continue a train whose times were not known well
    /// enough to tell.
    unresolved: u64,
}

impl FlowMeter {
    /// Whether an arrival `gap_ns` after the last one continues its train: within
    /// [`TRAIN_GAP_NS`] and within half the time the link takes to send the last
    /// arrival (`ns_per_byte`). The last arrival may have come its lag earlier, so the
    /// gap must be below the threshold with that lag to spare. `None`: close enough,
    /// but the times cannot tell.
    fn continues(&self, gap_ns: u64, ns_per_byte: f64) -> Option<bool> {
        let half_send_ns = (self.last_bytes as f64 * ns_per_byte / 2.0) as u64;
        let threshold = TRAIN_GAP_NS.min(half_send_ns);
        if gap_ns >= threshold {
            Some(false)
        } else {
            (gap_ns + self.last_lag_ns < threshold).then_some(true)
        }
    }
}

fn ns_per_byte(rate_bps: u64) -> f64 {
    8e9 / rate_bps.max(1) as f64
}

/// Trains of the packets entering one link.
pub struct BurstMeter {
    /// The link's rate, bit/s, and ns per byte at it.
    rate_bps: u64,
    ns_per_byte: f64,
    flows: Vec<(FlowKey, FlowMeter)>,
    /// Each flow's place in `flows`.
    index: HashMap<FlowKey, usize>,
    /// The last flow that arrived and its place: a GSO packet's segments arrive one
    /// after another, and a lookup each was a tenth of the emulator's time at 10 Gbit/s.
    last: Option<(FlowKey, usize)>,
    queue: QueueSeries,
}

impl BurstMeter {
    /// For a link of `rate_bps`, sampling its queue every `queue_period_ns`.
    pub fn new(rate_bps: u64, queue_period_ns: u64) -> BurstMeter {
        BurstMeter {
            rate_bps,
            ns_per_byte: ns_per_byte(rate_bps),
            flows: Vec::new(),
            index: HashMap::new(),
            last: None,
            queue: QueueSeries::new(queue_period_ns),
        }
    }

    /// The link's rate from the next arrival on, bit/s (a schedule changed it; 0 in an
    /// outage, when any arrival within [`TRAIN_GAP_NS`] continues a train).
    pub fn follow_rate(&mut self, rate_bps: u64) {
        if rate_bps != self.rate_bps {
            self.rate_bps = rate_bps;
            self.ns_per_byte = ns_per_byte(rate_bps);
        }
    }

    /// A packet of `wire_len` bytes of `flow` (whose is `traffic`) arrived at `now_ns`,
    /// or up to `lag_ns` before it: 0 for a time known exactly (a link upstream
    /// delivered it then), more for the time the emulator read it from a device. A
    /// flow's times never go backwards.
    pub fn arrival(
        &mut self,
        flow: FlowKey,
        traffic: Traffic,
        now_ns: u64,
        wire_len: u32,
        lag_ns: u64,
    ) {
        let at = match self.last {
            Some((key, at)) if key == flow => at,
            _ => match self.index.get(&flow) {
                Some(&at) => at,
                None if self.flows.len() >= MAX_FLOWS => return,
                None => {
                    let meter = FlowMeter {
                        traffic,
                        ..FlowMeter::default()
                    };
                    self.flows.push((flow, meter));
                    self.index.insert(flow, self.flows.len() - 1);
                    self.flows.len() - 1
                }
            },
        };
        self.last = Some((flow, at));
        let ns_per_byte = self.ns_per_byte;
        let m = &mut self.flows[at].1;
        if m.packets == 0 {
            m.run = 1;
            m.last_bytes = u64::from(wire_len);
        } else if now_ns == m.last_ns {
            // Another segment of the same GSO packet.
            m.run += 1;
            m.last_bytes += u64::from(wire_len);
        } else {
            let gap_ns = now_ns.saturating_sub(m.last_ns);
            match m.continues(gap_ns, ns_per_byte) {
                Some(true) => m.run += 1,
                unknown_or_not => {
                    m.unresolved += u64::from(unknown_or_not.is_none());
                    m.trains.push(m.run.min(u64::from(u32::MAX)) as u32);
                    m.run = 1;
                }
            }
            m.last_bytes = u64::from(wire_len);
        }
        if m.packets > 0 {
            let gap_us = (now_ns.saturating_sub(m.last_ns) / 1000).min(u64::from(u32::MAX)) as u32;
            if m.gaps_us.len() < MAX_GAPS {
                m.gaps_us.push(gap_us);
            } else {
                let at = (m.packets as usize) % MAX_GAPS;
                m.gaps_us[at] = gap_us;
            }
        }
        m.packets += 1;
        m.last_ns = now_ns;
        m.last_lag_ns = lag_ns;
    }

    /// The link's queue holds `bytes` (the test's) at `now_ns`; kept once per period.
    pub fn queue(&mut self, now_ns: u64, bytes: u64) {
        self.queue.sample(now_ns, bytes);
    }

    /// Per-flow statistics (flows with at least one packet, busiest first) and the
    /// queue's samples so far.
    pub fn report(&self) -> (Vec<BurstStats>, Vec<QueueSample>) {
        let mut flows: Vec<BurstStats> = self
            .flows
            .iter()
            .map(|(key, m)| {
                let mut trains = m.trains.clone();
                trains.push(m.run.min(u64::from(u32::MAX)) as u32);
                trains.sort_unstable();
                let count = trains.len() as u64;
                BurstStats {
                    flow: key.to_string(),
                    traffic: m.traffic,
                    packets: m.packets,
                    bursts: count,
                    burst_mean: m.packets as f64 / count as f64,
                    burst_p99: f64::from(packet_quantile(&trains, 0.99)),
                    burst_max: u64::from(trains[trains.len() - 1]),
                    unresolved: m.unresolved,
                    gap_us: quantiles(&mut m.gaps_us.clone()),
                }
            })
            .collect();
        flows.sort_by(|a, b| b.packets.cmp(&a.packets).then(a.flow.cmp(&b.flow)));
        (flows, self.queue.samples().to_vec())
    }
}

/// The length of train within which `share` of the packets of `trains` (sorted)
/// arrived. A quantile over packets, not over trains: splitting a train never raises
/// it, so a meter that splits what it cannot resolve never overstates it.
fn packet_quantile(trains: &[u32], share: f64) -> u32 {
    let total: u64 = trains.iter().map(|&t| u64::from(t)).sum();
    let mut within = 0;
    for &t in trains {
        within += u64::from(t);
        if within as f64 >= share * total as f64 {
            return t;
        }
    }
    trains.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const GBIT: u64 = 1_000_000_000;
    /// A read by the emulator: up to one wake-up late.
    const READ: u64 = 25_000;

    fn flow(port: u16) -> FlowKey {
        FlowKey {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            protocol: 6,
            src_port: port,
            dst_port: 5201,
        }
    }

    /// `units` GSO packets of `segments` 1500-byte segments each, the k-th at `at(k)`.
    fn feed(m: &mut BurstMeter, units: u64, segments: u32, lag: u64, at: impl Fn(u64) -> u64) {
        for k in 0..units {
            for _ in 0..segments {
                m.arrival(flow(1), Traffic::Test, at(k), 1500, lag);
            }
        }
    }

    fn only(m: &BurstMeter) -> BurstStats {
        let (flows, _) = m.report();
        assert_eq!(flows.len(), 1);
        flows[0].clone()
    }

    #[test]
    fn a_gso_packet_is_one_train_and_paced_ones_are_trains_of_their_own() {
        // 45-segment GSO packets every 500 µs (BBR at ~1 Gbit/s): 20 trains of 45.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 20, 45, READ, |k| k * 500_000);
        let s = only(&m);
        assert_eq!(
            (s.packets, s.bursts, s.burst_mean, s.burst_p99, s.burst_max),
            (900, 20, 45.0, 45.0, 45)
        );
        assert_eq!((s.gap_us.p50, s.gap_us.max, s.unresolved), (0.0, 500.0, 0));
    }

    #[test]
    fn gso_packets_sent_back_to_back_are_one_train() {
        // Three trains of four 45-segment packets read 45 µs apart (each waiting behind
        // the previous one's segmentation), the trains 2 ms apart: 3 trains of 180.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 12, 45, READ, |k| {
            (k / 4) * 2_000_000 + (k % 4) * 45_000
        });
        let s = only(&m);
        assert_eq!(
            (s.bursts, s.burst_mean, s.burst_max, s.unresolved),
            (3, 180.0, 180, 0)
        );
        // 100 µs apart is no longer back to back.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 4, 45, 0, |k| k * TRAIN_GAP_NS);
        assert_eq!(only(&m).bursts, 4);
    }

    #[test]
    fn packets_clocked_out_at_the_links_rate_never_chain() {
        // One packet of 1500 B per 12 µs is 1 Gbit/s: the link's own rate, for 10 000
        // packets, timed exactly (behind an access link): each packet is a train.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 10_000, 1, 0, |k| k * 12_000);
        let s = only(&m);
        assert_eq!((s.bursts, s.burst_max, s.unresolved), (10_000, 1, 0));
        // Two-segment GSO packets every 24 µs, the ACK clock of a 1 Gbit/s link.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 1000, 2, READ, |k| k * 24_000);
        let s = only(&m);
        assert_eq!((s.bursts, s.burst_max, s.unresolved), (1000, 2, 0));
    }

    #[test]
    fn exact_times_join_what_arrives_at_twice_the_links_rate() {
        // At 100 Mbit/s a 1500-byte packet takes 120 µs to send. Groups of 10 packets
        // (behind a faster access link) up to 59 µs apart are trains of 10; from 60
        // µs (half of 120) they are not.
        let mbit100 = 100_000_000;
        for (gap, trains) in [(40_000, 5), (59_000, 5), (60_000, 50)] {
            let mut m = BurstMeter::new(mbit100, 1_000_000);
            feed(&mut m, 50, 1, 0, |k| (k / 10) * 10_000_000 + (k % 10) * gap);
            assert_eq!(only(&m).bursts, trains, "gap {gap}");
        }
        // At 1 Gbit/s, single packets 5 µs apart come faster than twice the rate (6 µs).
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 10, 1, 0, |k| k * 5_000);
        assert_eq!(only(&m).bursts, 1);
    }

    #[test]
    fn a_rate_the_schedule_changes_moves_the_threshold_from_the_next_arrival() {
        // 1500-byte packets 40 µs apart: trains at 100 Mbit/s (half a send is 60 µs),
        // not at 1 Gbit/s (6 µs). The link slows after the fifth packet.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        for k in 0..10 {
            if k == 5 {
                m.follow_rate(100_000_000);
            }
            m.arrival(flow(1), Traffic::Test, k * 40_000, 1500, 0);
        }
        // Four of one packet, then the fifth with the five after it: from the change,
        // the link sends what arrived before at its new rate.
        let s = only(&m);
        assert_eq!((s.bursts, s.burst_max), (5, 6));
    }

    #[test]
    fn a_gap_that_a_late_time_cannot_resolve_starts_a_new_train() {
        // The same 10 packets 5 µs apart, read by the emulator: one may have arrived
        // 25 µs before it was read, so a 5 µs gap cannot be told from one over the 6 µs
        // threshold: 10 trains, 9 gaps unresolved. At 100 Mbit/s the threshold (60 µs)
        // leaves room for the lag.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 10, 1, READ, |k| k * 5_000);
        let s = only(&m);
        assert_eq!((s.bursts, s.unresolved), (10, 9));
        let mut m = BurstMeter::new(100_000_000, 1_000_000);
        feed(&mut m, 10, 1, READ, |k| k * 5_000);
        assert_eq!(only(&m).bursts, 1);
        // GSO packets read 80 µs apart: within 100 µs, not with 25 to spare.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 3, 45, READ, |k| k * 80_000);
        let s = only(&m);
        assert_eq!((s.bursts, s.unresolved), (3, 2));
        // What the emulator read after not watching its device for 1 ms may have come
        // at any point of it: each packet its own train.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 4, 45, 1_000_000, |k| k * 35_000);
        let s = only(&m);
        assert_eq!((s.bursts, s.burst_max, s.unresolved), (4, 45, 3));
    }

    #[test]
    fn the_99th_percentile_is_over_packets() {
        // 990 trains of one packet and one of 10 000: nearly all trains are single
        // packets, 91 % of the packets came in the long one.
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        feed(&mut m, 990, 1, 0, |k| k * 1_000_000);
        feed(&mut m, 1, 10_000, 0, |_| 2_000_000_000);
        let s = only(&m);
        assert_eq!(
            (s.bursts, s.burst_p99, s.burst_max),
            (991, 10_000.0, 10_000)
        );
        // Split in two, that train makes the percentile half as long, never longer.
        let split: Vec<u32> = [1; 990].into_iter().chain([5000, 5000]).collect();
        assert_eq!(packet_quantile(&split, 0.99), 5000);
        // A train of 100 holds 9 % of 1100 packets; one of 50 holds 0.5 % of 10 050.
        let trains: Vec<u32> = [10; 100].into_iter().chain([100]).collect();
        assert_eq!(packet_quantile(&trains, 0.99), 100);
        let trains: Vec<u32> = [10; 1000].into_iter().chain([50]).collect();
        assert_eq!(packet_quantile(&trains, 0.99), 10);
    }

    #[test]
    fn each_flow_keeps_whose_it_is() {
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        m.arrival(flow(1), Traffic::Test, 0, 1500, 0);
        m.arrival(flow(1), Traffic::Test, 1_000_000, 1500, 0);
        m.arrival(flow(2), Traffic::Control, 2_000_000, 600, 0);
        let (flows, _) = m.report();
        let whose: Vec<(u64, Traffic)> = flows.iter().map(|f| (f.packets, f.traffic)).collect();
        assert_eq!(whose, [(2, Traffic::Test), (1, Traffic::Control)]);
    }

    #[test]
    fn the_queue_is_sampled_once_per_period() {
        let mut m = BurstMeter::new(GBIT, 1_000_000);
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
        let mut m = BurstMeter::new(GBIT, 1_000_000);
        for port in 0..2000u16 {
            m.arrival(flow(port), Traffic::Test, u64::from(port), 100, 0);
        }
        assert_eq!(m.report().0.len(), MAX_FLOWS);
    }
}
