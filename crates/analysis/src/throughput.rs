//! A run's throughput, one definition for the summary, `results`, `explain` and the
//! report: the bytes its flows delivered, added up, over the one window in which they
//! were delivered. The window runs from the first flow's start to the last flow's end:
//! the deadline of a timed flow, the last byte of a flow sending a byte count. Flows
//! started apart (a dumbbell's staggered clients) share it, and what a sender delivers
//! after its deadline (draining its socket's backlog) is left out, so the total cannot
//! exceed what the path carried in the window. Each flow's own rate
//! (`FlowRecord::received_bps`) keeps its own window.
//!
//! Also here: how long a timed flow's sender may drain its backlog after the deadline.

use std::collections::BTreeMap;

use tcplab_record::IntervalRecord;

/// Which end's count of a flow's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Acknowledged to the TCP sender (tcpi_bytes_acked); sent, for UDP.
    Sent,
    /// Read by the receiver.
    Received,
}

/// Bytes delivered within a window of a run, µs since its t0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub start_us: u64,
    pub end_us: u64,
    /// Fractional where an interval straddling the window's start is prorated.
    pub bytes: f64,
}

impl Window {
    pub fn seconds(&self) -> f64 {
        self.end_us.saturating_sub(self.start_us) as f64 / 1e6
    }

    /// The bytes over the window, bit/s; `None` for an empty window.
    pub fn bps(&self) -> Option<f64> {
        (self.end_us > self.start_us).then(|| self.bytes * 8.0 / self.seconds())
    }
}

/// The bytes one end counted in the intervals of the flows `keep` selects, from
/// `from_us` on (an interval straddling it prorated), and the window they fill: from the
/// first such interval's start (or `from_us`) to the last one's end. Drain intervals are
/// left out. Bytes as [`counter`] reads them. `None` when no interval is left.
pub fn window(
    intervals: &[IntervalRecord],
    counted: Counted,
    from_us: u64,
    keep: impl Fn(u32) -> bool,
) -> Option<Window> {
    let bytes_of = counter(intervals, counted);
    let mut found: Option<Window> = None;
    for i in intervals.iter().filter(|i| !i.drain && keep(i.flow)) {
        // An interval ending at `from_us` has nothing after it, unless it is a point
        // (a flow's last cut right after the one before) at `from_us` itself.
        if i.end_us < from_us || (i.end_us == from_us && i.start_us < i.end_us) {
            continue;
        }
        let kept_from = i.start_us.max(from_us);
        let share = if i.end_us > i.start_us {
            (i.end_us - kept_from) as f64 / (i.end_us - i.start_us) as f64
        } else {
            1.0
        };
        let w = found.get_or_insert(Window {
            start_us: kept_from,
            end_us: i.end_us,
            bytes: 0.0,
        });
        w.start_us = w.start_us.min(kept_from);
        w.end_us = w.end_us.max(i.end_us);
        w.bytes += bytes_of(i) as f64 * share;
    }
    found
}

/// An interval's bytes as `counted` reads them among these intervals: that end's count,
/// or the other end's for a flow whose intervals lack it (a stock iperf3 peer reports
/// only its totals).
pub fn counter(intervals: &[IntervalRecord], counted: Counted) -> impl Fn(&IntervalRecord) -> u64 {
    let mut totals: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for i in intervals {
        let t = totals.entry(i.flow).or_default();
        t.0 += i.acked_bytes;
        t.1 += i.received_bytes;
    }
    move |i: &IntervalRecord| {
        let (sent, received) = totals.get(&i.flow).copied().unwrap_or_default();
        match counted {
            Counted::Sent if sent > 0 || received == 0 => i.acked_bytes,
            Counted::Received if received > 0 || sent == 0 => i.received_bytes,
            Counted::Sent => i.received_bytes,
            Counted::Received => i.acked_bytes,
        }
    }
}

/// The throughput of the flows `keep` selects from `from_us` on, bit/s: [`window`]'s
/// bytes over its length. `None` when no interval is left or the window is empty.
pub fn bps(
    intervals: &[IntervalRecord],
    counted: Counted,
    from_us: u64,
    keep: impl Fn(u32) -> bool,
) -> Option<f64> {
    window(intervals, counted, from_us, keep)?.bps()
}

/// The shortest drain a timed flow's sender is allowed, µs: enough for a retransmission
/// timeout (Linux's is at least 200 ms plus the RTT) on a short path.
pub const DRAIN_FLOOR_US: u64 = 500_000;
/// A drain lasts up to this many smoothed RTTs, on paths where that exceeds the floor:
/// the last flight's acknowledgements and a retransmission or two.
pub const DRAIN_RTTS: u64 = 4;

/// How long a timed flow's sender may spend after its deadline getting the bytes its
/// socket still holds acknowledged, µs, for a smoothed RTT of `srtt_us`: then it ends
/// the connection and reports what was left. What a slow path's backlog (an autotuned
/// send buffer holds seconds of it) would otherwise add to a run's wall time is bounded
/// by this; the rates measure the time up to the deadline, so they do not depend on it.
pub fn drain_limit_us(srtt_us: u32) -> u64 {
    (DRAIN_RTTS * u64::from(srtt_us)).max(DRAIN_FLOOR_US)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::link_goodput_bps;

    fn interval(flow: u32, index: u32, start_us: u64, end_us: u64, bytes: u64) -> IntervalRecord {
        IntervalRecord {
            flow,
            index,
            start_us,
            end_us,
            acked_bytes: bytes,
            received_bytes: bytes,
            retransmits: 0,
            cwnd: 10,
            srtt_us: 20_000,
            limits: Default::default(),
            udp: None,
            drain: false,
        }
    }

    /// Bytes a link of `bps` carries in `us`.
    fn carried(bps: f64, us: u64) -> u64 {
        (bps * us as f64 / 8e6) as u64
    }

    /// Two flows through one 50 Mbit/s link, the second started 0.52 s after the first,
    /// each running 5 s: the first alone at the link's goodput, then both sharing it
    /// equally, then the second alone. Adding each flow's rate over its own window gives
    /// 110 % of the link; the common window gives exactly its goodput.
    #[test]
    fn staggered_flows_sharing_a_link_total_its_goodput_over_the_common_window() {
        let goodput = link_goodput_bps(50_000_000, 1448, 0);
        let (offset, run) = (520_000, 5_000_000);
        let intervals = vec![
            interval(0, 0, 0, offset, carried(goodput, offset)),
            interval(0, 1, offset, run, carried(goodput / 2.0, run - offset)),
            interval(1, 0, offset, run, carried(goodput / 2.0, run - offset)),
            interval(1, 1, run, offset + run, carried(goodput, offset)),
        ];
        let own: f64 = (0..2)
            .map(|f| bps(&intervals, Counted::Received, 0, |id| id == f).unwrap())
            .sum();
        assert!(own > 1.10 * goodput, "{own} vs {goodput}");
        let w = window(&intervals, Counted::Received, 0, |_| true).unwrap();
        assert_eq!((w.start_us, w.end_us), (0, offset + run));
        let total = w.bps().unwrap();
        assert!((total / goodput - 1.0).abs() < 1e-6, "{total} vs {goodput}");
    }

    #[test]
    fn drain_intervals_and_the_warmup_are_left_out() {
        let mut drained = interval(0, 2, 2_000_000, 3_000_000, 9_000_000);
        drained.drain = true;
        let intervals = vec![
            interval(0, 0, 0, 1_000_000, 1_000_000),
            interval(0, 1, 1_000_000, 2_000_000, 3_000_000),
            drained,
        ];
        // 4 MB in the 2 s up to the deadline; the drain's 9 MB and second are not in it.
        let w = window(&intervals, Counted::Received, 0, |_| true).unwrap();
        assert_eq!((w.start_us, w.end_us, w.bytes), (0, 2_000_000, 4e6));
        assert_eq!(w.bps(), Some(16e6));
        // After a 0.5 s warm-up: half the first interval, 3.5 MB in 1.5 s.
        let after = bps(&intervals, Counted::Received, 500_000, |_| true).unwrap();
        assert!((after - 3.5e6 * 8.0 / 1.5).abs() < 1e-6);
        assert_eq!(
            bps(&intervals, Counted::Received, 2_000_000, |_| true),
            None
        );
    }

    #[test]
    fn a_flow_without_one_ends_counts_counts_the_others() {
        // A stock iperf3 receiver reports no intervals: its flow counts the acked bytes.
        let mut intervals = vec![interval(0, 0, 0, 1_000_000, 1_000_000)];
        intervals[0].received_bytes = 0;
        assert_eq!(bps(&intervals, Counted::Received, 0, |_| true), Some(8e6));
        // A flow that delivered nothing counts nothing either way.
        intervals[0].acked_bytes = 0;
        assert_eq!(bps(&intervals, Counted::Sent, 0, |_| true), Some(0.0));
    }

    #[test]
    fn the_drain_limit_is_four_rtts_or_half_a_second() {
        assert_eq!(drain_limit_us(10_000), 500_000);
        assert_eq!(drain_limit_us(50_000), 500_000);
        assert_eq!(drain_limit_us(600_000), 2_400_000);
    }
}
