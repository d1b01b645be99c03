//! How the senders answered each change of a path's schedule (`at`): how long after it
//! they carried 90 % of the new link bound, the queue and its delay they built
//! meanwhile, and what they retransmitted. Pure: the run's record in, figures out.
//!
//! Times: a change is at `test_start_us + at` on the emulator's clock, moved to the
//! run's clock by the wall-clock anchors of both. The senders' delivery rate is what
//! their samples show acknowledged over the last [`WINDOW_US`]; the first window wholly
//! after the change that reaches 90 % of the bound says when they had converged.

use serde::Serialize;

use tcplab_netsim::path::{Bottleneck, Direction, PathSpec};
use tcplab_record::{PathRecord, QueueSample, RunRecord, SampleRecord};

use crate::bounds;

/// The span over which the senders' delivery rate is taken.
pub const WINDOW_US: u64 = 100_000;
/// The share of the new bound that counts as converged.
pub const CONVERGED: f64 = 0.9;

/// The senders' answer to one change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Response {
    /// When it came, µs after the run's t0.
    pub at_us: i64,
    /// What it set, as the spec prints it: "at 10s rate 10mbit".
    pub change: String,
    /// The link's goodput after it, bit/s (0 in an outage).
    pub bound_bps: f64,
    /// How long after it the senders' delivery rate over 100 ms first reached 90 % of
    /// the bound; `None` if it did not before the next change or the run's end, or
    /// in an outage.
    pub converged_us: Option<u64>,
    /// The most the bottleneck queue held from the change to then (or to the next
    /// change, or the run's end), bytes, and its delay at the new rate.
    pub queue_peak_bytes: u64,
    pub queue_delay_peak_us: Option<u64>,
    /// Segments the flows retransmitted in that span.
    pub retransmits: u64,
}

/// The responses of the flows whose sender samples are `senders` (one list per flow,
/// each in time order) to each change of the data direction's link; empty for a path
/// without a schedule or a run the record does not place on the emulator's clock.
pub fn responses(
    run: &RunRecord,
    direction: Direction,
    senders: &[Vec<&SampleRecord>],
    mss: u32,
) -> Vec<Response> {
    let Some(path) = &run.path else {
        return Vec::new();
    };
    let Ok(spec) = path.spec.parse::<PathSpec>() else {
        return Vec::new();
    };
    let Some(test_start_us) = path.test_start_us else {
        return Vec::new();
    };
    // The run's clock is the emulator's less this.
    let shift = run.started_unix_us - path.epoch_unix_us;
    let run_end_us = senders
        .iter()
        .filter_map(|s| s.last().map(|s| s.t_us))
        .max()
        .unwrap_or(0);
    let texts: Vec<(u64, String)> = spec
        .schedule
        .steps
        .iter()
        .map(|step| step.at_us)
        .zip(spec.schedule.changes(&spec))
        .collect();
    let timeline = spec.timeline(direction);
    // (when on the run's clock, what, the rate from then on)
    let mut changes: Vec<(i64, String, u64)> = Vec::new();
    let mut current = timeline.base().clone();
    let mut next = Some(0);
    while let Some(at) = next {
        let at_us = (test_start_us + at) as i64 - shift;
        if at_us > run_end_us {
            break;
        }
        let (now, after) = timeline.at(at);
        if *now != current {
            if let Bottleneck::Rate { bps, .. } = now.bottleneck {
                let within = spec.schedule.every_us.map_or(at, |p| at % p);
                let change = texts
                    .iter()
                    .find(|(step_at, _)| *step_at == within)
                    .map_or_else(
                        || "the path's own clauses again (every)".to_owned(),
                        |(_, text)| format!("at {text}"),
                    );
                changes.push((at_us, change, bps));
            }
            current = now.clone();
        }
        next = after;
    }
    let acked = Acked::new(senders);
    let queue = queue_samples(path, direction);
    (0..changes.len())
        .map(|i| {
            let (at_us, change, rate) = changes[i].clone();
            let until_us = changes.get(i + 1).map_or(run_end_us, |c| c.0);
            let bound_bps = if rate == 0 {
                0.0
            } else {
                bounds::link_goodput_bps(rate, mss, 0)
            };
            let converged_us = (rate > 0)
                .then(|| acked.converged(at_us, until_us, CONVERGED * bound_bps))
                .flatten();
            let end_us = converged_us.map_or(until_us, |c| at_us + c as i64);
            let queue_peak_bytes = queue
                .iter()
                .filter(|q| (at_us..=end_us).contains(&(q.t_us as i64 - shift)))
                .map(|q| q.bytes)
                .max()
                .unwrap_or(0);
            Response {
                at_us,
                change,
                bound_bps,
                converged_us,
                queue_peak_bytes,
                queue_delay_peak_us: (rate > 0).then(|| queue_peak_bytes * 8_000_000 / rate),
                retransmits: acked.retransmits(at_us, end_us),
            }
        })
        .collect()
}

/// The data direction's bottleneck queue over time.
fn queue_samples(path: &PathRecord, direction: Direction) -> &[QueueSample] {
    match direction {
        Direction::Up => &path.up.queue,
        Direction::Down => &path.down.queue,
    }
}

/// What the senders had acknowledged and retransmitted over time, all flows together.
struct Acked<'a> {
    senders: &'a [Vec<&'a SampleRecord>],
    /// Every sample's time, in order.
    times: Vec<i64>,
}

impl<'a> Acked<'a> {
    fn new(senders: &'a [Vec<&'a SampleRecord>]) -> Self {
        let mut times: Vec<i64> = senders.iter().flatten().map(|s| s.t_us).collect();
        times.sort_unstable();
        times.dedup();
        Acked { senders, times }
    }

    /// Each flow's latest sample at or before `t_us`, summed by `f`.
    fn sum_at(&self, t_us: i64, f: impl Fn(&SampleRecord) -> u64) -> u64 {
        self.senders
            .iter()
            .filter_map(|flow| {
                let i = flow.partition_point(|s| s.t_us <= t_us);
                i.checked_sub(1).map(|i| f(flow[i]))
            })
            .sum()
    }

    /// How long after `from_us` a window of [`WINDOW_US`] wholly after it, ending at a
    /// sample before `until_us`, first shows `bps` delivered.
    fn converged(&self, from_us: i64, until_us: i64, bps: f64) -> Option<u64> {
        let window = WINDOW_US as i64;
        self.times
            .iter()
            .copied()
            .filter(|&t| t - window >= from_us && t <= until_us)
            .find(|&t| {
                let bytes = self.sum_at(t, |s| s.info.bytes_acked)
                    - self.sum_at(t - window, |s| s.info.bytes_acked);
                bytes as f64 * 8e6 / window as f64 >= bps
            })
            .map(|t| (t - from_us) as u64)
    }

    /// Segments retransmitted after `from_us` up to `to_us`.
    fn retransmits(&self, from_us: i64, to_us: i64) -> u64 {
        let at = |t| self.sum_at(t, |s| u64::from(s.info.total_retrans));
        at(to_us).saturating_sub(at(from_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_record::tcpinfo::TcpInfo;
    use tcplab_record::Host;

    const MSS: u32 = 1448;

    /// A flow acknowledging at `rate(t)` bit/s, sampled every 10 ms for `secs`, with a
    /// retransmission every second from `retrans_from` µs.
    fn samples(secs: i64, rate: impl Fn(i64) -> f64, retrans_from: i64) -> Vec<SampleRecord> {
        let mut acked = 0.0;
        (0..=secs * 100)
            .map(|k| {
                let t_us = k * 10_000;
                acked += rate(t_us) * 0.01 / 8.0;
                SampleRecord {
                    flow: 0,
                    host: Host::Client,
                    t_us,
                    info: TcpInfo {
                        bytes_acked: acked as u64,
                        total_retrans: ((t_us - retrans_from).max(0) / 1_000_000) as u32,
                        snd_mss: MSS,
                        ..TcpInfo::default()
                    },
                    bbr: None,
                    skmem: None,
                }
            })
            .collect()
    }

    fn run(spec: &str, queue: Vec<QueueSample>) -> RunRecord {
        let mut r = crate::explain::tests::run(spec, Vec::new(), Vec::new());
        // t0 is the test's start: the emulator's 0.5 s.
        r.started_unix_us = 1_000_500_000;
        let path = r.path.as_mut().unwrap();
        path.epoch_unix_us = 1_000_000_000;
        path.test_start_us = Some(500_000);
        path.up.queue = queue;
        r
    }

    #[test]
    fn a_halved_rate_is_reached_when_the_senders_slow_and_its_queue_is_counted() {
        // 50 Mbit/s, 20 from 2 s: the senders take 0.4 s to slow to it; the queue
        // peaks at 2.2 s at 100 KB; two retransmissions after 2 s.
        let s = samples(4, |t| if t < 2_400_000 { 48e6 } else { 19e6 }, 1_500_000);
        let senders = vec![s.iter().collect()];
        let queue = (0..400)
            .map(|k| QueueSample {
                t_us: 500_000 + k * 10_000,
                bytes: if k == 220 { 100_000 } else { 1_000 },
            })
            .collect();
        let r = responses(
            &run("rtt 20ms rate 50mbit at 2s rate 20mbit", queue),
            Direction::Up,
            &senders,
            MSS,
        );
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!(
            (r.at_us, r.change.as_str()),
            (2_000_000, "at 2s rate 20mbit")
        );
        assert_eq!(r.bound_bps, bounds::link_goodput_bps(20_000_000, MSS, 0));
        // The first 100 ms window after 2 s at ≥ 90 % of 19.3 Mbit/s: the senders keep
        // 48 Mbit/s on to 2.4 s, so the first window from 2.0 s on already shows it.
        assert_eq!(r.converged_us, Some(100_000));
        assert_eq!(r.queue_peak_bytes, 1_000, "only the 100 ms to convergence");
        assert_eq!(r.retransmits, 0);
    }

    #[test]
    fn a_raised_rate_is_reached_when_the_senders_fill_it_and_an_outage_has_no_bound() {
        // 10 Mbit/s, nothing from 1 s to 1.5 s, then 40: the senders reach 39 Mbit/s
        // at 2.2 s.
        let s = samples(
            3,
            |t| match t {
                t if t < 1_000_000 => 9.5e6,
                t if t < 1_500_000 => 0.0,
                t if t < 2_200_000 => 20e6,
                _ => 39e6,
            },
            1_200_000,
        );
        let senders = vec![s.iter().collect()];
        let r = responses(
            &run(
                "rtt 20ms rate 10mbit queue 100p at 1s-1500ms rate 0 at 1500ms rate 40mbit",
                Vec::new(),
            ),
            Direction::Up,
            &senders,
            MSS,
        );
        let changes: Vec<&str> = r.iter().map(|r| r.change.as_str()).collect();
        assert_eq!(changes, ["at 1s rate 0", "at 1500ms rate 40mbit"]);
        assert_eq!((r[0].bound_bps, r[0].converged_us), (0.0, None));
        assert_eq!(r[0].queue_delay_peak_us, None);
        // The window 2.17–2.27 s is the first to reach 90 % of 38.6 Mbit/s: its 20 ms
        // at 20 Mbit/s and 80 at 39 are 35.2.
        assert_eq!(r[1].converged_us, Some(770_000));
        // One retransmission by 2.2 s (from 1.2 s, one a second).
        assert_eq!(r[1].retransmits, 1);
    }

    #[test]
    fn no_schedule_no_responses() {
        let s = samples(1, |_| 1e6, 0);
        let senders = vec![s.iter().collect()];
        assert!(responses(
            &run("rtt 20ms rate 50mbit", Vec::new()),
            Direction::Up,
            &senders,
            MSS
        )
        .is_empty());
    }
}
