//! One-way delay of each data packet across the emulated path, per flow: from the
//! moment the emulator read it from the sender's side to the moment it wrote it to the
//! receiver's, so queueing, serialization, propagation and the emulator's own lateness
//! are all in it (the hosts' stacks are not). Pantheon's figure, from the flows' own
//! packets rather than a probe's: the direction's figures are the test's flows', and
//! tcplab's own flows (its control connection, its probes) are kept apart, named. Pure:
//! the emulator feeds it flows and times.

use foldhash::{HashMap, HashMapExt};

use hdrhistogram::Histogram;

use tcplab_netsim::packet::FlowKey;
use tcplab_record::traffic::Traffic;
use tcplab_record::{DelayQuantiles, DelaySample, FlowDelay};

/// Flows kept apart at most (the first seen); later ones count in the direction's
/// total only, so a flood of one-packet flows cannot grow the emulator's memory.
const MAX_FLOWS: usize = 1024;
/// The longest delay recorded exactly, ns; longer ones are clamped to it.
const MAX_DELAY_NS: u64 = 60_000_000_000;
/// The span of each point of the delay over time.
pub const DELAY_SAMPLE_NS: u64 = 100_000_000;

pub struct DelayMeter {
    /// The test's packets together.
    all: Histogram<u64>,
    flows: HashMap<FlowKey, (Traffic, Histogram<u64>)>,
    /// The test's delay over time: a point per span that saw its packets.
    series: Vec<DelaySample>,
    /// The span being summed: its end, and the delays' count, sum and largest.
    span: (u64, u64, u64, u64),
}

impl Default for DelayMeter {
    fn default() -> Self {
        DelayMeter {
            all: histogram(),
            flows: HashMap::new(),
            series: Vec::new(),
            span: (0, 0, 0, 0),
        }
    }
}

/// 3 significant digits: 1 µs at 1 ms, 10 µs at 10 ms.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_DELAY_NS, 3).expect("valid histogram bounds")
}

impl DelayMeter {
    /// A data packet of `flow` (whose is `traffic`) took `delay_ns` across the path,
    /// arriving at `at_ns` (the emulator's clock, never decreasing).
    pub fn record(&mut self, flow: FlowKey, traffic: Traffic, delay_ns: u64, at_ns: u64) {
        let delay_ns = delay_ns.clamp(1, MAX_DELAY_NS);
        if let Some((_, h)) = self.flows.get_mut(&flow) {
            h.saturating_record(delay_ns);
        } else if self.flows.len() < MAX_FLOWS {
            let mut h = histogram();
            h.saturating_record(delay_ns);
            self.flows.insert(flow, (traffic, h));
        }
        if !traffic.is_test() {
            return;
        }
        let (end, count, sum, max) = &mut self.span;
        if at_ns >= *end {
            if *count > 0 {
                self.series.push(DelaySample {
                    t_us: *end / 1000,
                    mean_us: *sum as f64 / *count as f64 / 1000.0,
                    max_us: *max as f64 / 1000.0,
                });
            }
            *end = (at_ns / DELAY_SAMPLE_NS + 1) * DELAY_SAMPLE_NS;
            (*count, *sum, *max) = (0, 0, 0);
        }
        *count += 1;
        *sum += delay_ns;
        *max = (*max).max(delay_ns);
        self.all.saturating_record(delay_ns);
    }

    /// The delay over time: per span of [`DELAY_SAMPLE_NS`] that saw data packets,
    /// their mean and largest delay, the span in progress included.
    pub fn series(&self) -> Vec<DelaySample> {
        let (end, count, sum, max) = self.span;
        let mut series = self.series.clone();
        if count > 0 {
            series.push(DelaySample {
                t_us: end / 1000,
                mean_us: sum as f64 / count as f64 / 1000.0,
                max_us: max as f64 / 1000.0,
            });
        }
        series
    }

    /// The test's data packets together (`None` before the first), and each flow kept
    /// apart, busiest first.
    pub fn report(&self) -> (Option<DelayQuantiles>, Vec<FlowDelay>) {
        let mut flows: Vec<FlowDelay> = self
            .flows
            .iter()
            .map(|(key, (traffic, h))| FlowDelay {
                flow: key.to_string(),
                traffic: *traffic,
                delay: quantiles(h),
            })
            .collect();
        flows.sort_by(|a, b| (b.delay.packets, &a.flow).cmp(&(a.delay.packets, &b.flow)));
        (self.overall(), flows)
    }

    /// The test's data packets together; `None` before the first.
    pub fn overall(&self) -> Option<DelayQuantiles> {
        (!self.all.is_empty()).then(|| quantiles(&self.all))
    }
}

fn quantiles(h: &Histogram<u64>) -> DelayQuantiles {
    let us = |ns: u64| ns as f64 / 1000.0;
    DelayQuantiles {
        packets: h.len(),
        mean_us: h.mean() / 1000.0,
        p50_us: us(h.value_at_quantile(0.5)),
        p95_us: us(h.value_at_quantile(0.95)),
        p99_us: us(h.value_at_quantile(0.99)),
        max_us: us(h.max()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn flow(port: u16) -> FlowKey {
        FlowKey {
            protocol: 6,
            src: IpAddr::V4(Ipv4Addr::new(10, 77, 1, 1)),
            src_port: port,
            dst: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)),
            dst_port: 5201,
        }
    }

    /// Quantiles within the histogram's 3 digits of the exact ones, per flow and
    /// together; the busier flow first; nothing before the first packet.
    #[test]
    fn quantiles_per_flow_and_together() {
        let mut meter = DelayMeter::default();
        assert_eq!(meter.report(), (None, vec![]));
        // Flow 1: 10.000 … 10.999 ms, 1000 packets; flow 2: 30 ms, 100 packets.
        for i in 0..1000 {
            meter.record(flow(1), Traffic::Test, 10_000_000 + i * 1000, i);
        }
        for _ in 0..100 {
            meter.record(flow(2), Traffic::Test, 30_000_000, 1000);
        }
        let (all, flows) = meter.report();
        let close = |got: f64, want: f64| (got - want).abs() <= want * 1e-3;
        let one = &flows[0].delay;
        assert_eq!(
            (flows.len(), one.packets, flows[1].delay.packets),
            (2, 1000, 100)
        );
        assert!(flows[0].flow.contains(":1 >"), "{}", flows[0].flow);
        assert!(
            close(one.p50_us, 10_499.0) && close(one.p95_us, 10_949.0),
            "{one:?}"
        );
        assert!(
            close(one.max_us, 10_999.0) && close(one.mean_us, 10_499.5),
            "{one:?}"
        );
        let all = all.unwrap();
        assert_eq!(all.packets, 1100);
        // 95 % of 1100 is 1045 packets: beyond the first flow's 1000.
        assert!(
            close(all.p95_us, 30_000.0) && close(all.p50_us, 10_549.0),
            "{all:?}"
        );
    }

    /// A point per 100 ms span that saw packets, at the span's end: their mean and
    /// largest delay; a span without packets has none.
    #[test]
    fn the_delay_over_time_has_a_point_per_busy_span() {
        let mut meter = DelayMeter::default();
        let ms = 1_000_000;
        meter.record(flow(1), Traffic::Test, 10 * ms, 5 * ms);
        meter.record(flow(1), Traffic::Test, 20 * ms, 99 * ms);
        meter.record(flow(1), Traffic::Test, 40 * ms, 100 * ms);
        meter.record(flow(2), Traffic::Test, 7 * ms, 350 * ms);
        let point = |t_us, mean_us, max_us| DelaySample {
            t_us,
            mean_us,
            max_us,
        };
        assert_eq!(
            meter.series(),
            [
                point(100_000, 15_000.0, 20_000.0),
                point(200_000, 40_000.0, 40_000.0),
                point(400_000, 7_000.0, 7_000.0),
            ]
        );
    }

    /// tcplab's own packets are named per flow and left out of the test's figures.
    #[test]
    fn tcplabs_own_flows_stay_out_of_the_tests_delay() {
        let mut meter = DelayMeter::default();
        let ms = 1_000_000;
        meter.record(flow(1), Traffic::Test, 10 * ms, 5 * ms);
        meter.record(flow(2), Traffic::Control, 90 * ms, 6 * ms);
        meter.record(flow(3), Traffic::Probe, 80 * ms, 150 * ms);
        let (all, flows) = meter.report();
        let all = all.unwrap();
        assert_eq!(all.packets, 1);
        assert!((all.max_us - 10_000.0).abs() <= 10.0, "{all:?}");
        let mut whose: Vec<Traffic> = flows.iter().map(|f| f.traffic).collect();
        whose.sort();
        assert_eq!(whose, [Traffic::Test, Traffic::Control, Traffic::Probe]);
        assert_eq!(meter.series().len(), 1, "{:?}", meter.series());
        assert_eq!(
            meter.series()[0].max_us,
            10_000.0,
            "exact: not a histogram's"
        );
    }

    #[test]
    fn flows_beyond_the_limit_count_together_only() {
        let mut meter = DelayMeter::default();
        for port in 0..(MAX_FLOWS as u16 + 10) {
            meter.record(flow(port), Traffic::Test, 1000, 0);
        }
        meter.record(flow(0), Traffic::Test, u64::MAX, 0);
        let (all, flows) = meter.report();
        assert_eq!(flows.len(), MAX_FLOWS);
        assert_eq!(all.unwrap().packets, MAX_FLOWS as u64 + 11);
        let longest = flows.iter().map(|f| f.delay.max_us).fold(0.0, f64::max);
        assert!(
            (60e6..=60e6 * 1.001).contains(&longest),
            "clamped: {longest}"
        );
    }
}
