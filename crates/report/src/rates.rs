//! Throughput over time, what a run's `throughput` chart draws: each flow's bytes as a
//! curve of time, read over the bins of one grid.
//!
//! - A TCP flow whose sender was sampled counts what reached its receiver as the sender
//!   learnt it: the bytes acknowledged (tcpi_bytes_acked) plus the segments held SACKed
//!   beyond a hole (tcpi_sacked × tcpi_snd_mss). A repaired loss then releases no burst
//!   of acknowledgements above the link's rate (bytes_acked alone put 245 Mbit/s in a
//!   100 ms bin of a 100 Mbit/s link, after a loss at a 100 ms RTT). A flow sampled
//!   only at its receiver counts tcpi_bytes_received. The counter is offset to the
//!   report intervals' count of the same bytes, so a flow's bins add up to its
//!   intervals' bytes up to the deadline, and to what arrived behind a hole still open
//!   then (in no interval: the drain delivers it in order).
//! - Any other flow (UDP; TCP without samples: an iperf3 peer, `--sample-interval 0`)
//!   has its report intervals only, its bytes spread evenly over each.
//! - Bins: the whole number of the TCP flows' shortest round trip (the largest of their
//!   minimum RTTs) nearest 100 ms or the sample interval, the larger, at least one
//!   round trip; at most [`MAX_BINS`] a run.
//!   Slow start shows, and a window-limited sender's bursts, one a round trip, count
//!   once in each bin as in the window bound (a bin of 1.1 round trips held two of
//!   them: 1.7 times the bound). Without samples, the bins are the report interval. The
//!   bins end at the run's end, its last flow's deadline.
//! - A flow's piece of a bin, or an interval, shorter than half of one joins its
//!   neighbour, its rate taken over both: a deadline or a start inside a bin shows no
//!   spike and no drop.
//! - Nothing after a flow's deadline counts (the drain).
//! - All flows: the flows' bytes in each bin over the bin's length, on the one grid, so
//!   the sum is what the path carried in it.

use tcplab_analysis::explain::{min_rtt_us, sender_samples};
use tcplab_analysis::throughput::{counter, Counted};
use tcplab_record::tcpinfo::{Field, TcpInfo};
use tcplab_record::{Direction, FlowRecord, Host, IntervalRecord, RunRecord};

/// The shortest bin: slow start's doublings stay apart on a path of tens of ms.
pub const MIN_BIN_US: u64 = 100_000;
/// More bins than this would be narrower than a pixel on a chart some 600 pixels wide.
pub const MAX_BINS: u64 = 600;

/// Bytes over a span of the run's time (µs since t0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub start_us: u64,
    pub end_us: u64,
    pub bytes: f64,
}

impl Cell {
    /// The bytes over the span, bit/s.
    pub fn bps(&self) -> f64 {
        if self.end_us > self.start_us {
            self.bytes * 8e6 / (self.end_us - self.start_us) as f64
        } else {
            0.0
        }
    }
}

/// Where a flow's bytes over time come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The sender's tcp_info: bytes_acked + sacked × snd_mss.
    Sender,
    /// The receiver's tcp_info: bytes_received.
    Receiver,
    /// The report intervals, each one's bytes spread evenly over it.
    Intervals,
}

/// One flow's throughput over time: its cells tile its span, first start to deadline.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowRates {
    pub flow: u32,
    pub source: Source,
    pub cells: Vec<Cell>,
    /// Bytes that reached the receiver by the deadline behind a hole still open then:
    /// in the cells, in no report interval (nor the run's throughput).
    pub out_of_order_bytes: f64,
}

/// A run's throughput over time.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates {
    /// The bins' length, µs.
    pub bin_us: u64,
    /// The round trip the bins are a whole number of, µs, where they are.
    pub rtt_us: Option<u64>,
    pub flows: Vec<FlowRates>,
    /// Every flow's bytes per bin of the run's grid.
    pub total: Vec<Cell>,
    /// A run with flows both ways: each direction's flows' bytes per bin (each
    /// direction crosses a bottleneck of its own); empty otherwise.
    pub by_direction: Vec<(Direction, Vec<Cell>)>,
}

impl Rates {
    /// From the first flow's start to the last flow's end, µs.
    pub fn span(&self) -> (u64, u64) {
        let start = self.total.first().map_or(0, |c| c.start_us);
        (start, self.total.last().map_or(start, |c| c.end_us))
    }
}

/// The run's flows' throughput over time; `None` for a run without intervals.
pub fn rates(run: &RunRecord) -> Option<Rates> {
    let acked = counter(&run.intervals, Counted::Sent);
    let received = counter(&run.intervals, Counted::Received);
    let flows: Vec<Flow> = run
        .flows
        .iter()
        .filter_map(|f| flow(run, f, &acked, &received))
        .collect();
    let start = flows.iter().map(|f| f.span().0).min()?;
    let end = flows.iter().map(|f| f.span().1).max()?;
    let (bin_us, rtt_us) = bin(run, &flows, end - start);
    let grid = merge_short(grid(start, end, bin_us), bin_us / 2);
    let per_flow = flows
        .iter()
        .map(|f| {
            let (from, to) = f.span();
            let spans = match f.source {
                Source::Intervals => {
                    merge_short(f.intervals.clone(), run.params.report_interval_us / 2)
                }
                Source::Sender | Source::Receiver => {
                    let clipped = grid
                        .iter()
                        .map(|&(a, b)| (a.max(from), b.min(to)))
                        .filter(|(a, b)| b > a)
                        .collect();
                    merge_short(clipped, bin_us / 2)
                }
            };
            FlowRates {
                flow: f.id,
                source: f.source,
                cells: spans.into_iter().map(|(a, b)| f.cell(a, b)).collect(),
                out_of_order_bytes: f.curve.at(to) - f.counted,
            }
        })
        .collect();
    let sum_of = |counts: &dyn Fn(u32) -> bool| -> Vec<Cell> {
        grid.iter()
            .map(|&(a, b)| Cell {
                start_us: a,
                end_us: b,
                bytes: flows
                    .iter()
                    .filter(|f| counts(f.id))
                    .map(|f| f.cell(a, b).bytes)
                    .sum(),
            })
            .collect()
    };
    let direction_of = |id: u32| run.flows.iter().find(|f| f.id == id).map(|f| f.direction);
    let directions: Vec<Direction> = [Direction::Up, Direction::Down]
        .into_iter()
        .filter(|&d| flows.iter().any(|f| direction_of(f.id) == Some(d)))
        .collect();
    let by_direction = if directions.len() == 2 {
        directions
            .into_iter()
            .map(|d| (d, sum_of(&|id| direction_of(id) == Some(d))))
            .collect()
    } else {
        Vec::new()
    };
    Some(Rates {
        bin_us,
        rtt_us,
        flows: per_flow,
        total: sum_of(&|_| true),
        by_direction,
    })
}

/// Flow `f`'s curve: from its sender's samples, else its receiver's (TCP), else its
/// intervals; `None` without intervals before its deadline.
fn flow(
    run: &RunRecord,
    f: &FlowRecord,
    acked: &impl Fn(&IntervalRecord) -> u64,
    received: &impl Fn(&IntervalRecord) -> u64,
) -> Option<Flow> {
    let mut intervals: Vec<&IntervalRecord> = run
        .intervals
        .iter()
        .filter(|i| i.flow == f.id && !i.drain)
        .collect();
    intervals.sort_by_key(|i| (i.start_us, i.index));
    let spans = intervals.iter().map(|i| (i.start_us, i.end_us)).collect();
    let by_interval = cumulative(&intervals, received)?;
    let samples = [
        (
            Source::Sender,
            f.direction.sender(),
            cumulative(&intervals, acked)?,
        ),
        (
            Source::Receiver,
            f.direction.receiver(),
            by_interval.clone(),
        ),
    ];
    let sampled =
        samples
            .into_iter()
            .filter(|_| f.udp.is_none())
            .find_map(|(source, host, anchors)| {
                let curve = sampled(run, f.id, host, source, &anchors)?;
                Some((source, curve, anchors))
            });
    let (source, curve, anchors) = sampled.unwrap_or_else(|| {
        let curve = Curve {
            points: by_interval.clone(),
        };
        (Source::Intervals, curve, by_interval)
    });
    Some(Flow {
        id: f.id,
        counted: anchors.last().map_or(0.0, |a| a.1),
        source,
        intervals: spans,
        curve,
    })
}

/// A flow's bytes since its start, non-decreasing, linear between its points.
#[derive(Clone, Debug, PartialEq)]
struct Curve {
    /// (µs since t0, bytes), in time order; at equal times the last point holds.
    points: Vec<(u64, f64)>,
}

impl Curve {
    fn at(&self, t: u64) -> f64 {
        let i = self.points.partition_point(|p| p.0 <= t);
        match (i.checked_sub(1).map(|k| self.points[k]), self.points.get(i)) {
            (None, _) => self.points.first().map_or(0.0, |p| p.1),
            (Some(a), None) => a.1,
            (Some(a), Some(b)) => a.1 + (b.1 - a.1) * (t - a.0) as f64 / (b.0 - a.0) as f64,
        }
    }
}

#[derive(Clone)]
struct Flow {
    id: u32,
    /// Its intervals' bytes up to the deadline.
    counted: f64,
    source: Source,
    /// Its report intervals up to the deadline, (start, end) µs.
    intervals: Vec<(u64, u64)>,
    curve: Curve,
}

impl Flow {
    fn span(&self) -> (u64, u64) {
        let points = &self.curve.points;
        (points[0].0, points[points.len() - 1].0)
    }

    /// The flow's bytes within `a`..`b` (only the part in its span counts).
    fn cell(&self, a: u64, b: u64) -> Cell {
        let (from, to) = self.span();
        let (lo, hi) = (a.max(from), b.min(to));
        Cell {
            start_us: a,
            end_us: b,
            bytes: if hi > lo {
                self.curve.at(hi) - self.curve.at(lo)
            } else {
                0.0
            },
        }
    }
}

/// The intervals' bytes as `count` reads them, added up: 0 at the first one's start,
/// then the total at each one's end. `None` without intervals.
fn cumulative(
    intervals: &[&IntervalRecord],
    count: &impl Fn(&IntervalRecord) -> u64,
) -> Option<Vec<(u64, f64)>> {
    let mut total = 0.0;
    let mut points = vec![(intervals.first()?.start_us, 0.0)];
    for i in intervals {
        total += count(i) as f64;
        points.push((i.end_us, total));
    }
    Some(points)
}

/// The flow's tcp_info counter at `host` (its `source`) as a curve: offset so that it
/// meets `anchors` (the intervals' count of the same bytes), non-decreasing from 0, from
/// their first point to their last, where it is at least their total. `None` without
/// two samples inside that span or one around an interval's end.
fn sampled(
    run: &RunRecord,
    flow: u32,
    host: Host,
    source: Source,
    anchors: &[(u64, f64)],
) -> Option<Curve> {
    type Read = fn(&TcpInfo) -> f64;
    let (field, counter, delivered): (Field, Read, Read) = match source {
        Source::Sender => (
            TcpInfo::BYTES_ACKED,
            |i| i.bytes_acked as f64,
            |i| i.bytes_acked as f64 + f64::from(i.sacked) * f64::from(i.snd_mss),
        ),
        Source::Receiver => (
            TcpInfo::BYTES_RECEIVED,
            |i| i.bytes_received as f64,
            |i| i.bytes_received as f64,
        ),
        Source::Intervals => return None,
    };
    let mut samples: Vec<(u64, &TcpInfo)> = run
        .samples
        .iter()
        .filter(|s| s.flow == flow && s.host == host && s.t_us >= 0 && s.info.has(field))
        .map(|s| (s.t_us as u64, &s.info))
        .collect();
    samples.sort_by_key(|s| s.0);
    let (start, end, total) = (anchors.first()?.0, anchors.last()?.0, anchors.last()?.1);
    let inside = samples.iter().filter(|s| start < s.0 && s.0 < end).count();
    if inside < 2 {
        return None;
    }
    // The counter at the flow's start (the handshake and the data connection's
    // greeting are in it): where an interval ends among the samples, the counter there
    // less the intervals' count. A sample is taken with the interval's cut, so they
    // agree to the bytes; the median rides over a tick the sampler missed.
    let plain = Curve {
        points: samples.iter().map(|&(t, i)| (t, counter(i))).collect(),
    };
    let (first, last) = (samples[0].0, samples[samples.len() - 1].0);
    let mut offsets: Vec<f64> = anchors[1..]
        .iter()
        .filter(|(t, _)| (first..=last).contains(t))
        .map(|&(t, count)| plain.at(t) - count)
        .collect();
    offsets.sort_by(f64::total_cmp);
    let offset = *offsets.get(offsets.len() / 2)?;
    let mut points = vec![(start, 0.0)];
    let mut level: f64 = 0.0;
    for &(t, info) in samples.iter().filter(|s| start < s.0 && s.0 < end) {
        level = level.max(delivered(info) - offset);
        points.push((t, level));
    }
    // At the deadline: the intervals' count, or more where segments were held SACKed
    // behind a hole still open then.
    let delivered = Curve {
        points: samples.iter().map(|&(t, i)| (t, delivered(i))).collect(),
    };
    points.push((end, level.max(total).max(delivered.at(end) - offset)));
    Some(Curve { points })
}

/// The bin: see the module's notes. With the round trip it is a whole number of.
fn bin(run: &RunRecord, flows: &[Flow], span_us: u64) -> (u64, Option<u64>) {
    if flows.iter().all(|f| f.source == Source::Intervals) {
        return (run.params.report_interval_us.max(1), None);
    }
    let floor = MIN_BIN_US
        .max(run.params.sample_interval_us)
        .max(span_us.div_ceil(MAX_BINS));
    let rtt = run
        .flows
        .iter()
        .filter(|f| f.udp.is_none())
        .filter_map(|f| min_rtt_us(f, &sender_samples(run, f)))
        .max()
        .filter(|r| *r > 0);
    match rtt {
        Some(r) => (r * ((floor + r / 2) / r).max(1), Some(r)),
        None => (floor, None),
    }
}

/// Bins of `bin_us` ending at `end`, the first from `start` (shorter, unless the span
/// is a whole number of bins).
fn grid(start: u64, end: u64, bin_us: u64) -> Vec<(u64, u64)> {
    let mut edges = vec![end];
    while let Some(edge) = edges
        .last()
        .and_then(|e| e.checked_sub(bin_us))
        .filter(|e| *e > start)
    {
        edges.push(edge);
    }
    edges.push(start);
    edges.reverse();
    edges.windows(2).map(|w| (w[0], w[1])).collect()
}

/// Spans in time order, each shorter than `min_us` joined to the one before it (the
/// first to the ones after it until they are long enough together).
fn merge_short(spans: Vec<(u64, u64)>, min_us: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            // Only the first can be short: it takes in the ones after it.
            Some(last) if last.1 - last.0 < min_us || b - a < min_us => last.1 = b,
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_analysis::bounds::link_goodput_bps;
    use tcplab_record::tcpinfo::TCP_INFO_LEN;
    use tcplab_record::{Direction, SampleRecord, UdpInterval};

    const MSS: u32 = 1448;
    /// What the data connection's handshake and greeting put in tcpi_bytes_acked.
    const GREETING: u64 = 29;

    /// A run of no flows, sampled every 10 ms, reported every second.
    fn empty_run() -> RunRecord {
        let mut run: RunRecord =
            serde_json::from_str(include_str!("../../record/tests/run.json")).unwrap();
        run.flows.clear();
        run.intervals.clear();
        run
    }

    fn add_flow(run: &mut RunRecord, id: u32, udp: bool) {
        let mut f: RunRecord =
            serde_json::from_str(include_str!("../../record/tests/run.json")).unwrap();
        let mut flow = f.flows.remove(0);
        flow.id = id;
        flow.direction = Direction::Up;
        flow.rtt.min_us = 20_000;
        flow.udp = udp.then(Default::default);
        run.flows.push(flow);
    }

    /// An interval whose ends count `bytes`.
    fn interval(
        flow: u32,
        index: u32,
        (start_us, end_us): (u64, u64),
        bytes: u64,
        drain: bool,
    ) -> IntervalRecord {
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
            drain,
        }
    }

    /// A sender's sample: `in_order` bytes acknowledged past the greeting, `sacked`
    /// segments held beyond a hole.
    fn sample(flow: u32, t_us: u64, in_order: f64, sacked: u32) -> SampleRecord {
        SampleRecord {
            flow,
            host: Host::Client,
            t_us: t_us as i64,
            info: TcpInfo {
                valid_len: TCP_INFO_LEN as u32,
                bytes_acked: GREETING + in_order as u64,
                sacked,
                snd_mss: MSS,
                min_rtt: 20_000,
                ..TcpInfo::default()
            },
            bbr: None,
            skmem: None,
        }
    }

    /// Bytes at `bps` over `us`.
    fn bytes(bps: f64, us: u64) -> f64 {
        bps * us as f64 / 8e6
    }

    /// The bytes of the flow's intervals up to its deadline.
    fn counted(run: &RunRecord, flow: u32) -> f64 {
        run.intervals
            .iter()
            .filter(|i| i.flow == flow && !i.drain)
            .map(|i| i.received_bytes as f64)
            .sum()
    }

    /// A flow's cells tile its span and add up to `bytes`.
    fn assert_tiles(flow: &FlowRates, span: (u64, u64), bytes: f64) {
        let cells = &flow.cells;
        assert_eq!((cells[0].start_us, cells[cells.len() - 1].end_us), span);
        assert!(cells.windows(2).all(|w| w[0].end_us == w[1].start_us));
        let sum: f64 = cells.iter().map(|c| c.bytes).sum();
        assert!(
            (sum - bytes).abs() < 1.0,
            "flow {}: {sum} vs {bytes}",
            flow.flow
        );
    }

    /// The cross-traffic quick scenario as it ran: a TCP flow at a 100 Mbit/s link's
    /// goodput, less a 2 Mbit/s UDP flow's while that runs (0.62 s to its deadline at
    /// 2.62 s); deadlines cut 55 µs (TCP) and 158 µs (UDP) after a report tick, then the
    /// drain. Per interval, the UDP flow's 2000 bytes in its last 158 µs were drawn as
    /// 101 Mbit/s and "all flows" at 190 Mbit/s; per bin, no flow and no sum exceeds the
    /// link's goodput, every short piece joined its neighbour, the drain counts nowhere,
    /// and each flow's bins add up to its intervals' bytes.
    #[test]
    fn partial_intervals_and_the_drain_draw_no_spike_and_no_drop() {
        let goodput = link_goodput_bps(100_000_000, MSS, 0);
        let (udp_bps, udp_on, udp_off) = (2e6, 619_360u64, 2_619_360u64);
        let deadline = 3_000_055u64;
        // TCP bytes delivered by t: the link's goodput, less the UDP rate while it runs.
        let tcp = |t: u64| {
            let udp_time = t.clamp(udp_on, udp_off) - udp_on;
            bytes(goodput, t) - bytes(udp_bps, udp_time)
        };
        let mut run = empty_run();
        add_flow(&mut run, 0, false);
        add_flow(&mut run, 1, true);
        let ends = [0, 1_000_630, 2_000_146, deadline];
        for k in 0..3 {
            let bytes = (tcp(ends[k + 1]) - tcp(ends[k])) as u64;
            run.intervals
                .push(interval(0, k as u32, (ends[k], ends[k + 1]), bytes, false));
        }
        run.intervals
            .push(interval(0, 3, (deadline, 3_130_145), 1_487_096, true));
        let udp_ends = [udp_on, udp_on + 1_000_000, udp_off - 158, udp_off];
        for k in 0..3 {
            let mut i = interval(1, k as u32, (udp_ends[k], udp_ends[k + 1]), 0, false);
            i.received_bytes = bytes(udp_bps, udp_ends[k + 1] - udp_ends[k]).round() as u64;
            i.acked_bytes = i.received_bytes;
            i.udp = Some(UdpInterval::default());
            run.intervals.push(i);
        }
        run.intervals
            .push(interval(1, 3, (udp_off, udp_off + 5_109), 2000, true));
        // Samples every ~10 ms, a little late each, on through the drain.
        run.samples = (1..313)
            .map(|k| k * 10_000 + 37 * (k % 7))
            .map(|t| {
                sample(
                    0,
                    t,
                    tcp(t.min(deadline)) + bytes(goodput, t.saturating_sub(deadline)),
                    0,
                )
            })
            .collect();

        let r = rates(&run).unwrap();
        // 5 round trips of 20 ms.
        assert_eq!((r.bin_us, r.rtt_us), (100_000, Some(20_000)));
        assert_eq!(r.span(), (0, deadline));
        let [tcp_rates, udp_rates] = &r.flows[..] else {
            panic!("two flows: {r:?}");
        };
        assert_eq!(
            (tcp_rates.source, udp_rates.source),
            (Source::Sender, Source::Intervals)
        );
        let counted = |flow| counted(&run, flow);
        assert_tiles(tcp_rates, (0, deadline), counted(0));
        assert_tiles(udp_rates, (udp_on, udp_off), counted(1));
        assert_eq!(
            udp_rates.cells.len(),
            2,
            "the 158 µs interval joined the one before"
        );
        let most = goodput * 1.01;
        for c in tcp_rates.cells.iter().chain(&r.total) {
            assert!(c.end_us - c.start_us >= 50_000, "a short cell: {c:?}");
            assert!(c.bps() <= most, "{c:?}: {} > the link's {goodput}", c.bps());
        }
        for c in &udp_rates.cells {
            assert!((c.bps() / udp_bps - 1.0).abs() < 0.01, "{c:?}");
        }
        // No drop at the deadline either: the last bin is the link's goodput.
        let last = r.total.last().unwrap();
        assert!((last.bps() / goodput - 1.0).abs() < 0.01, "{last:?}");
        let total: f64 = r.total.iter().map(|c| c.bytes).sum();
        assert!((total - counted(0) - counted(1)).abs() < 1.0);
    }

    /// A loss at 1.0 s on a 100 ms round trip: the receiver gets the link's goodput on,
    /// but the cumulative ACK stays at the hole until its retransmission arrives a round
    /// trip later, then jumps. tcpi_bytes_acked alone puts 0 in one bin and twice the
    /// link in the next; with the SACKed segments every bin holds the link's goodput.
    #[test]
    fn a_repaired_loss_shows_no_burst() {
        let goodput = link_goodput_bps(100_000_000, MSS, 0);
        let (hole, repaired, deadline) = (1_000_000u64, 1_105_000u64, 2_000_000u64);
        let delivered = |t: u64| bytes(goodput, t);
        let in_order = |t: u64| {
            if (hole..repaired).contains(&t) {
                delivered(hole)
            } else {
                delivered(t)
            }
        };
        let mut run = empty_run();
        add_flow(&mut run, 0, false);
        run.flows[0].rtt.min_us = 100_000;
        run.intervals = vec![
            interval(0, 0, (0, 1_000_000), in_order(1_000_000) as u64, false),
            interval(
                0,
                1,
                (1_000_000, deadline),
                (in_order(deadline) - in_order(1_000_000)) as u64,
                false,
            ),
        ];
        run.samples = (1..=200)
            .map(|k| k * 10_000)
            .map(|t| {
                let sacked = ((delivered(t) - in_order(t)) / f64::from(MSS)) as u32;
                let mut s = sample(0, t, in_order(t), sacked);
                s.info.min_rtt = 100_000;
                s
            })
            .collect();
        let r = rates(&run).unwrap();
        assert_eq!((r.bin_us, r.rtt_us), (100_000, Some(100_000)));
        for c in &r.flows[0].cells {
            assert!((c.bps() / goodput - 1.0).abs() < 0.02, "{c:?}");
        }
        // The reference: the same bins of tcpi_bytes_acked alone.
        let acked_only = |a: u64, b: u64| (in_order(b) - in_order(a)) * 8e6 / (b - a) as f64;
        assert_eq!(acked_only(1_000_000, 1_100_000), 0.0);
        assert!(acked_only(1_100_000, 1_200_000) > 1.9 * goodput);
        assert_tiles(&r.flows[0], (0, deadline), counted(&run, 0));
    }

    /// A window-limited sender on a 100 ms round trip sends its 64 KiB at once, the
    /// link (100 Mbit/s) carries it in 5 ms, then nothing until the next round trip. In
    /// bins of whole round trips each holds one window: the window bound (64 KiB per
    /// 100 ms); bins of 110 ms would hold two now and then, 1.8 times the bound.
    #[test]
    fn bins_of_whole_round_trips_hold_one_window_each() {
        let (window, rtt) = (65_536.0, 100_000u64);
        let bound = window * 8e6 / rtt as f64;
        let burst = 5_000u64;
        // A burst from each round trip's start, at the link's rate.
        let delivered = |t: u64| {
            let (k, into) = (t / rtt, t % rtt);
            window * (k as f64 + (into.min(burst) as f64 / burst as f64))
        };
        let mut run = empty_run();
        add_flow(&mut run, 0, false);
        run.flows[0].rtt.min_us = rtt as u32;
        let deadline = 3_000_000;
        run.intervals = (0..3u64)
            .map(|k| {
                let (a, b) = (k * 1_000_000, (k + 1) * 1_000_000);
                interval(
                    0,
                    k as u32,
                    (a, b),
                    (delivered(b) - delivered(a)) as u64,
                    false,
                )
            })
            .collect();
        run.samples = (1..=600)
            .map(|k| k * 5_000)
            .map(|t| {
                let mut s = sample(0, t, delivered(t), 0);
                s.info.min_rtt = rtt as u32;
                s
            })
            .collect();
        let r = rates(&run).unwrap();
        assert_eq!(r.bin_us, rtt);
        for c in &r.flows[0].cells {
            assert!(c.bps() <= bound * 1.001, "{c:?}: {} > {bound}", c.bps());
        }
        // The reference: a bin from a burst's start to just past the next one's end.
        let (a, b) = (rtt, 2 * rtt + burst);
        assert!((delivered(b) - delivered(a)) * 8e6 / (b - a) as f64 > 1.8 * bound);
        assert_tiles(&r.flows[0], (0, deadline), counted(&run, 0));
    }

    /// A flow whose sender was not sampled (a stock iperf3 server sending to us) but
    /// whose receiver was: its bins come from tcpi_bytes_received, tied to the
    /// intervals' count; without any samples, from its intervals.
    #[test]
    fn a_flow_sampled_at_its_receiver_counts_what_it_received() {
        // The rate grows with time: `rate` × t / 1 s.
        let rate = 40e6;
        let received = |t: u64| bytes(rate, t) * (t as f64 / 2e6);
        let mut run = empty_run();
        add_flow(&mut run, 0, false);
        run.intervals = (0..2u64)
            .map(|k| {
                let (a, b) = (k * 1_000_000, (k + 1) * 1_000_000);
                let got = (received(b) - received(a)) as u64;
                interval(0, k as u32, (a, b), got, false)
            })
            .collect();
        run.samples = (1..200)
            .map(|k| {
                let t = k * 10_000;
                let mut s = sample(0, t, 0.0, 0);
                s.host = Host::Server;
                s.info.bytes_acked = 0;
                s.info.bytes_received = 1_000 + received(t) as u64;
                s
            })
            .collect();
        let r = rates(&run).unwrap();
        assert_eq!(r.flows[0].source, Source::Receiver);
        assert_tiles(&r.flows[0], (0, 2_000_000), counted(&run, 0));
        // 5 % of `rate` over the first bin, 195 % over the last.
        let (first, last) = (r.flows[0].cells[0], *r.flows[0].cells.last().unwrap());
        assert!((first.bps() / rate - 0.05).abs() < 0.01, "{first:?}");
        assert!((last.bps() / rate - 1.95).abs() < 0.01, "{last:?}");
        run.samples.clear();
        let r = rates(&run).unwrap();
        assert_eq!(r.flows[0].source, Source::Intervals);
        assert_eq!((r.bin_us, r.flows[0].cells.len()), (1_000_000, 2));
    }

    #[test]
    fn bins_are_whole_round_trips_near_100_ms_ending_at_the_deadline() {
        let mut run = empty_run();
        add_flow(&mut run, 0, false);
        let sampled = [Flow {
            id: 0,
            counted: 0.0,
            source: Source::Sender,
            intervals: Vec::new(),
            curve: Curve {
                points: vec![(0, 0.0)],
            },
        }];
        for (rtt, bin_us) in [
            (19_900, 99_500),
            (20_000, 100_000),
            (60_000, 120_000),
            (70_000, 70_000),
            (100_060, 100_060),
            (300_000, 300_000),
            (200, 100_000),
        ] {
            run.flows[0].rtt.min_us = rtt;
            let want = (bin_us, Some(u64::from(rtt)));
            assert_eq!(bin(&run, &sampled, 3_000_000), want, "rtt {rtt}");
        }
        // At least the sample interval; at most 600 bins.
        run.flows[0].rtt.min_us = 20_000;
        assert_eq!(bin(&run, &sampled, 600_000_000).0, 1_000_000);
        run.params.sample_interval_us = 1_000_000;
        assert_eq!(bin(&run, &sampled, 3_000_000).0, 1_000_000);
        // Without samples: the report interval.
        let unsampled = [Flow {
            source: Source::Intervals,
            ..sampled[0].clone()
        }];
        assert_eq!(bin(&run, &unsampled, 3_000_000), (1_000_000, None));

        assert_eq!(grid(0, 250, 100), [(0, 50), (50, 150), (150, 250)]);
        assert_eq!(grid(0, 200, 100), [(0, 100), (100, 200)]);
        let short_first = merge_short(grid(0, 210, 100), 50);
        assert_eq!(short_first, [(0, 110), (110, 210)]);
        let many_short = vec![(0, 10), (10, 20), (20, 100), (100, 101)];
        assert_eq!(merge_short(many_short, 50), [(0, 101)]);
        assert_eq!(merge_short(vec![(0, 60), (60, 61)], 50), [(0, 61)]);
        assert_eq!(
            merge_short(vec![(0, 60), (60, 120)], 50),
            [(0, 60), (60, 120)]
        );
    }
}
