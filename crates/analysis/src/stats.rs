//! Statistics over a point's repetitions, and the per-run metrics they summarise.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::throughput::{self, Counted};
use tcplab_record::{Direction, DirectionStats, Quantiles, RunRecord};

/// Above this coefficient of variation (stddev / mean) a point's runs disagree enough
/// that its mean deserves doubt: `results` warns.
pub const HIGH_CV: f64 = 0.10;

/// Summary of repeated measurements of one quantity.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    /// Sample standard deviation (n − 1 in the denominator); `None` for one value, which
    /// says nothing of the spread.
    pub stddev: Option<f64>,
    pub min: f64,
    pub max: f64,
    /// The confidence level of `ci`, e.g. 0.95.
    pub confidence: f64,
    /// Student-t confidence interval of the mean, clamped to the values the quantity can
    /// take; `None` with fewer than two values.
    pub ci: Option<(f64, f64)>,
    /// stddev / mean; `None` with one value or when the mean is 0.
    pub cv: Option<f64>,
}

impl Stats {
    /// `None` for no values. `confidence` is in (0, 1); `range` holds every value the
    /// quantity can take (as [`Metric::range`]). The Student-t interval is symmetric
    /// about the mean, and with few values widely spread it reaches beyond what the
    /// quantity can be (a throughput below 0): it is clamped to `range`, where the true
    /// mean lies, so it covers it at least as often.
    pub fn of(values: &[f64], confidence: f64, range: (f64, f64)) -> Option<Stats> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let stddev = (n > 1).then(|| {
            (values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        });
        let ci = stddev.map(|stddev| {
            let half = t_quantile(confidence, n - 1) * stddev / (n as f64).sqrt();
            let (low, high) = range;
            ((mean - half).max(low), (mean + half).min(high))
        });
        Some(Stats {
            n,
            mean,
            median,
            stddev,
            min: sorted[0],
            max: sorted[n - 1],
            confidence,
            ci,
            cv: stddev
                .filter(|_| mean != 0.0)
                .map(|stddev| stddev / mean.abs()),
        })
    }

    /// Whether the runs disagree by more than [`HIGH_CV`].
    pub fn high_variation(&self) -> bool {
        self.cv.is_some_and(|cv| cv > HIGH_CV)
    }
}

/// The two-sided Student-t quantile for a confidence level: t such that
/// P(|T| ≤ t) = confidence with `df` degrees of freedom.
pub fn t_quantile(confidence: f64, df: usize) -> f64 {
    let t = StudentsT::new(0.0, 1.0, df as f64).expect("df ≥ 1 is a valid distribution");
    t.inverse_cdf(1.0 - (1.0 - confidence) / 2.0)
}

/// Jain's fairness index (Σx)² / (n·Σx²): 1 when all shares are equal, 1/n when one
/// takes everything. `None` for fewer than two values (one share is trivially "fair")
/// or all zero.
pub fn jain(values: &[f64]) -> Option<f64> {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    (values.len() >= 2 && squares > 0.0).then(|| sum * sum / (values.len() as f64 * squares))
}

/// What `results` summarises per point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// The run's throughput after the warm-up (bit/s): the bytes all flows' receivers read
    /// from the warm-up's end to the run's end, over that time ([`goodput_bps`]).
    Throughput,
    /// Segments retransmitted over the whole run, all flows.
    Retransmits,
    /// Mean smoothed RTT over the flows (µs).
    Rtt,
    /// Jain's index of the TCP flows' throughputs after the warm-up; none with fewer
    /// than two TCP flows (UDP flows send at the rate they are given).
    Fairness,
    /// The UDP flows' lost share of the datagrams sent (0–1).
    UdpLoss,
    /// The UDP flows' RFC 3550 jitter at the end (µs; the worst flow's).
    Jitter,
    /// The round-trip probes' median under load (µs), the whole load's.
    Latency,
    /// Round trips per minute under load, from the probes.
    Rpm,
    /// Request/response transactions per second, all flows (over the whole run).
    Transactions,
    /// The transactions' median time, request to whole response (µs).
    TransactionTime,
    /// The 95th percentile of the one-way delay of the data packets across the lab's
    /// emulator (µs), in the direction that carried more of them; the whole run's.
    Delay,
    /// Packets the sending hosts' interface queues dropped (their qdiscs and devices),
    /// in the direction of the first TCP flow; the whole run's.
    HostDrops,
    /// How bursty the senders were where their packets entered the bottleneck: the
    /// train length (packets back to back) within which 99 % of the burstiest TCP
    /// flow's packets arrived, in the direction of the first TCP flow.
    Burst,
}

impl Metric {
    pub const ALL: [Metric; 13] = [
        Metric::Throughput,
        Metric::Retransmits,
        Metric::Rtt,
        Metric::Fairness,
        Metric::UdpLoss,
        Metric::Jitter,
        Metric::Latency,
        Metric::Rpm,
        Metric::Transactions,
        Metric::TransactionTime,
        Metric::Delay,
        Metric::HostDrops,
        Metric::Burst,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Throughput => "throughput",
            Metric::Retransmits => "retransmits",
            Metric::Rtt => "rtt",
            Metric::Fairness => "fairness",
            Metric::UdpLoss => "udp_loss",
            Metric::Jitter => "jitter",
            Metric::Latency => "latency",
            Metric::Rpm => "rpm",
            Metric::Transactions => "transactions",
            Metric::TransactionTime => "transaction_time",
            Metric::Delay => "delay",
            Metric::HostDrops => "host_drops",
            Metric::Burst => "burst",
        }
    }

    /// Every value [`Metric::of`] can take: none is negative, and a share is at most 1.
    pub fn range(self) -> (f64, f64) {
        match self {
            Metric::Throughput
            | Metric::Retransmits
            | Metric::Rtt
            | Metric::Jitter
            | Metric::Latency
            | Metric::Rpm
            | Metric::Transactions
            | Metric::TransactionTime
            | Metric::Delay
            | Metric::HostDrops
            | Metric::Burst => (0.0, f64::INFINITY),
            Metric::Fairness | Metric::UdpLoss => (0.0, 1.0),
        }
    }

    /// The unit of [`Metric::of`].
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Throughput => "bit/s",
            Metric::Retransmits => "segments",
            Metric::Rtt
            | Metric::Jitter
            | Metric::Latency
            | Metric::TransactionTime
            | Metric::Delay => "µs",
            Metric::Rpm => "round trips/min",
            Metric::Transactions => "transactions/s",
            Metric::HostDrops | Metric::Burst => "packets",
            Metric::Fairness | Metric::UdpLoss => "",
        }
    }

    /// This metric of one run, excluding the first `warmup_us` where it can; `None`
    /// when the run has nothing to measure it from.
    pub fn of(self, run: &RunRecord, warmup_us: u64) -> Option<f64> {
        match self {
            Metric::Throughput => goodput_bps(run, warmup_us),
            Metric::Retransmits => Some(run.summary.retransmits as f64),
            Metric::Rtt => (run.summary.rtt.max_us > 0).then_some(run.summary.rtt.mean_us),
            Metric::Fairness => {
                let rates = flow_goodputs_bps(run, warmup_us);
                let tcp: Vec<f64> = run
                    .flows
                    .iter()
                    .zip(rates)
                    .filter(|(f, _)| f.udp.is_none())
                    .map(|(_, r)| r)
                    .collect();
                jain(&tcp)
            }
            Metric::UdpLoss => run
                .summary
                .udp
                .filter(|u| u.sent > 0)
                .map(|u| u.lost as f64 / u.sent as f64),
            Metric::Jitter => run.summary.udp.map(|u| u.jitter_us),
            Metric::Latency => run
                .summary
                .latency
                .as_ref()
                .and_then(|l| l.loaded_rtt_us)
                .map(|q| q.p50),
            Metric::Rpm => run.summary.latency.as_ref().and_then(|l| l.rpm),
            Metric::Transactions => run.summary.transactions.map(|t| t.per_second),
            Metric::TransactionTime => run.summary.transactions.map(|t| t.latency_us.p50),
            Metric::Delay => run.path.as_ref()?.data_direction().delay.map(|d| d.p95_us),
            Metric::HostDrops => {
                let queues = &senders_direction(run)?.host_queues;
                (!queues.is_empty()).then(|| queues.iter().map(|q| q.drops()).sum::<u64>() as f64)
            }
            Metric::Burst => senders_direction(run)?
                .bursts
                .iter()
                .filter(|b| b.flow.starts_with("tcp"))
                .map(|b| b.burst_p99)
                .reduce(f64::max),
        }
    }
}

impl std::str::FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Metric, String> {
        Metric::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Metric::ALL.iter().map(|m| m.name()).collect();
                format!("unknown metric '{s}' (expected {})", names.join(", "))
            })
    }
}

/// The direction the run's first TCP flow sends in (as `explain` takes it), else the
/// one that carried more data packets: where its senders' queues and trains are. (A
/// sender that collapsed can carry fewer data packets than the control connection's
/// reports the other way.)
fn senders_direction(run: &RunRecord) -> Option<&DirectionStats> {
    let path = run.path.as_ref()?;
    Some(match run.flows.iter().find(|f| f.udp.is_none()) {
        Some(f) if f.direction == Direction::Down => &path.down,
        Some(_) => &path.up,
        None => path.data_direction(),
    })
}

/// The run's throughput after `from_us`, bit/s: [`throughput::bps`] over all its
/// flows, the one definition every figure of a run's throughput uses.
pub fn goodput_bps(run: &RunRecord, from_us: u64) -> Option<f64> {
    throughput::bps(&run.intervals, Counted::Received, from_us, |_| true)
}

/// Each flow's throughput after `from_us` over its own window, in flow order (0 for a
/// flow with nothing after it).
pub fn flow_goodputs_bps(run: &RunRecord, from_us: u64) -> Vec<f64> {
    run.flows
        .iter()
        .map(|f| {
            throughput::bps(&run.intervals, Counted::Received, from_us, |flow| {
                flow == f.id
            })
            .unwrap_or(0.0)
        })
        .collect()
}

/// min, p50, p90, p99, max of `values` (sorted in place), as f64; zeros for none.
pub fn quantiles<T: Copy + Ord + Into<i64>>(values: &mut [T]) -> Quantiles {
    if values.is_empty() {
        return Quantiles::default();
    }
    values.sort_unstable();
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize].into() as f64;
    Quantiles {
        min: at(0.0),
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        max: at(1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: (f64, f64) = (f64::NEG_INFINITY, f64::INFINITY);

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn stats_match_hand_computed_values() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample variance 32/7.
        let s = Stats::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], 0.95, ANY).unwrap();
        assert_eq!(
            (s.n, s.mean, s.median, s.min, s.max),
            (8, 5.0, 4.5, 2.0, 9.0)
        );
        assert!(close(s.stddev.unwrap(), (32.0f64 / 7.0).sqrt(), 1e-12));
        // t(0.975, 7) = 2.364624 (tables): half-width 2.364624 · 2.13809 / √8 = 1.78749.
        let (lo, hi) = s.ci.unwrap();
        assert!(close(lo, 5.0 - 1.78749, 1e-4), "{lo}");
        assert!(close(hi, 5.0 + 1.78749, 1e-4), "{hi}");
        assert!(close(s.cv.unwrap(), 2.13809 / 5.0, 1e-5));
        assert!(s.high_variation());
    }

    #[test]
    fn t_quantiles_match_tables() {
        for (confidence, df, t) in [
            (0.95, 1, 12.7062),
            (0.95, 2, 4.3027),
            (0.95, 9, 2.2622),
            (0.99, 4, 4.6041),
            (0.90, 30, 1.6973),
        ] {
            assert!(
                close(t_quantile(confidence, df), t, 1e-3),
                "{confidence} {df}"
            );
        }
    }

    #[test]
    fn one_value_has_no_spread_no_interval_and_odd_counts_take_the_middle() {
        let s = Stats::of(&[3.0], 0.95, ANY).unwrap();
        assert_eq!((s.stddev, s.ci, s.cv, s.median), (None, None, None, 3.0));
        assert!(!s.high_variation());
        assert_eq!(Stats::of(&[9.0, 1.0, 5.0], 0.95, ANY).unwrap().median, 5.0);
        assert!(Stats::of(&[], 0.95, ANY).is_none());
        assert!(!Stats::of(&[100.0, 101.0], 0.95, ANY)
            .unwrap()
            .high_variation());
    }

    #[test]
    fn an_interval_stays_within_what_the_quantity_can_be() {
        // 1 and 100: mean 50.5, s = 70.0036, t(0.975, 1) = 12.7062: ± 628.9.
        let throughput = Metric::Throughput.range();
        let s = Stats::of(&[1.0, 100.0], 0.95, throughput).unwrap();
        let (lo, hi) = s.ci.unwrap();
        assert_eq!(lo, 0.0);
        assert!(
            close(hi, 50.5 + 12.7062 * 70.0036 / 2f64.sqrt(), 0.1),
            "{hi}"
        );
        // A share: within 0 and 1 on both sides.
        let s = Stats::of(&[0.5, 0.99], 0.95, Metric::Fairness.range()).unwrap();
        assert_eq!(s.ci, Some((0.0, 1.0)));
        // Where the interval fits, it is the Student-t one.
        let s = Stats::of(&[10.0, 11.0, 12.0], 0.95, throughput).unwrap();
        assert_eq!(s.ci, Stats::of(&[10.0, 11.0, 12.0], 0.95, ANY).unwrap().ci);
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain(&[5.0, 5.0, 5.0, 5.0]), Some(1.0));
        assert!(close(jain(&[1.0, 0.0, 0.0, 0.0]).unwrap(), 0.25, 1e-12));
        // (1+2+3)² / (3·14) = 36/42.
        assert!(close(jain(&[1.0, 2.0, 3.0]).unwrap(), 36.0 / 42.0, 1e-12));
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[7.0]), None, "one share has no fairness");
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn goodput_excludes_the_warmup_and_prorates_the_straddling_interval() {
        use tcplab_record::IntervalRecord;
        let interval = |flow, index, start_us, end_us, received_bytes| IntervalRecord {
            flow,
            index,
            start_us,
            end_us,
            acked_bytes: received_bytes,
            received_bytes,
            retransmits: 0,
            cwnd: 10,
            srtt_us: 1000,
            limits: Default::default(),
            udp: None,
            drain: false,
        };
        let mut run: RunRecord =
            serde_json::from_str(include_str!("../../record/tests/run.json")).unwrap();
        run.intervals = vec![
            interval(0, 0, 0, 1_000_000, 1_000_000),
            interval(0, 1, 1_000_000, 2_000_000, 3_000_000),
            interval(1, 0, 0, 1_000_000, 1_000_000),
            interval(1, 1, 1_000_000, 2_000_000, 1_000_000),
        ];
        run.flows.truncate(1);
        run.flows.push(run.flows[0].clone());
        run.flows[1].id = 1;
        // No warm-up: 6 MB in 2 s.
        assert!(close(goodput_bps(&run, 0).unwrap(), 24e6, 1e-6));
        // Warm-up 0.5 s: half of the first intervals, 5 MB in 1.5 s.
        assert!(close(
            goodput_bps(&run, 500_000).unwrap(),
            5e6 * 8.0 / 1.5,
            1e-6
        ));
        // After 1 s: flow 0 at 24 Mbit/s, flow 1 at 8.
        let flows = flow_goodputs_bps(&run, 1_000_000);
        assert!(close(flows[0], 24e6, 1e-6) && close(flows[1], 8e6, 1e-6));
        let fairness = Metric::Fairness.of(&run, 1_000_000).unwrap();
        assert!(close(fairness, 32.0 * 32.0 / (2.0 * (576.0 + 64.0)), 1e-12));
        assert_eq!(goodput_bps(&run, 2_000_000), None);
        // A UDP flow beside one TCP flow: one TCP share, no fairness (Jain's index of
        // the TCP and the UDP rate would be 0.8 here, a figure of nothing).
        run.flows[1].udp = Some(Default::default());
        assert_eq!(Metric::Fairness.of(&run, 1_000_000), None);
        // One TCP flow alone: none either, not 1.
        run.flows.truncate(1);
        assert_eq!(Metric::Fairness.of(&run, 1_000_000), None);
    }

    #[test]
    fn host_drops_and_burst_are_the_data_directions() {
        use tcplab_record::{BurstStats, HostQueue, PathRecord};
        let mut run: RunRecord =
            serde_json::from_str(include_str!("../../record/tests/run.json")).unwrap();
        run.path = None;
        assert_eq!(Metric::HostDrops.of(&run, 0), None);
        let mut path = PathRecord::default();
        path.up.host_queues = vec![
            HostQueue {
                host: "client1".into(),
                device_drops: 5,
                qdisc_drops: 2,
                ..HostQueue::default()
            },
            HostQueue {
                host: "client2".into(),
                device_drops: 1,
                ..HostQueue::default()
            },
        ];
        path.down.host_queues = vec![HostQueue {
            host: "server".into(),
            device_drops: 100,
            ..HostQueue::default()
        }];
        let train = |flow: &str, p99| BurstStats {
            flow: flow.into(),
            burst_p99: p99,
            ..BurstStats::default()
        };
        path.up.bursts = vec![
            train("tcp a", 3.0),
            train("udp b", 40.0),
            train("tcp c", 7.5),
        ];
        run.path = Some(path);
        // The first TCP flow sends up: the clients' queues and trains.
        run.flows[0].direction = Direction::Up;
        assert_eq!(Metric::HostDrops.of(&run, 0), Some(8.0));
        assert_eq!(Metric::Burst.of(&run, 0), Some(7.5));
        // Sending down (-R): the server's queue; no trains were recorded down.
        run.flows[0].direction = Direction::Down;
        assert_eq!(Metric::HostDrops.of(&run, 0), Some(100.0));
        assert_eq!(Metric::Burst.of(&run, 0), None);
    }

    #[test]
    fn metric_names_round_trip() {
        for m in Metric::ALL {
            assert_eq!(m.name().parse::<Metric>(), Ok(m));
        }
        assert!("speed"
            .parse::<Metric>()
            .unwrap_err()
            .contains("throughput"));
    }
}
