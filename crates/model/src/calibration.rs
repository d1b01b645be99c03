//! A lab's own latency: what the emulator's wake-ups and the kernels on both sides of
//! its TUN devices add to the delays the link model applies. A lab measures it with
//! echo requests when it starts, through links that only delay, and takes it off its
//! delay lines, so the round trip a user measures is the one configured.

use serde::{Deserialize, Serialize};

use crate::units::format_duration_us;

/// Echoes whose excess lies above this quantile count as the slowest echo below it
/// (a winsorized mean): a descheduled echo (milliseconds, on a loaded 2-vCPU VM) would
/// otherwise move the mean of 25 by tens of µs, and a stall of the machine can catch a
/// few in a row. Leaving them out instead made the mean 30 µs short of what ping then
/// measured, whose mean counts the ordinary tail too.
const WINSOR_QUANTILE: f64 = 0.9;

/// What the lab adds to the configured round trip, from echoes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Intrinsic {
    /// Echoes that came back.
    pub probes: u32,
    pub min_us: f64,
    /// Mean of the echoes, those above the 90th percentile counted at it.
    pub mean_us: f64,
}

impl Intrinsic {
    /// From each echo's round trip less the configured one, ns; `None` without echoes.
    pub fn from_excess(excess_ns: &[i64]) -> Option<Intrinsic> {
        if excess_ns.is_empty() {
            return None;
        }
        let mut sorted = excess_ns.to_vec();
        sorted.sort_unstable();
        let kept = ((sorted.len() as f64 * WINSOR_QUANTILE).ceil() as usize).clamp(1, sorted.len());
        let ceiling = sorted[kept - 1];
        let mean_ns =
            sorted.iter().map(|&x| x.min(ceiling) as f64).sum::<f64>() / sorted.len() as f64;
        Some(Intrinsic {
            probes: excess_ns.len() as u32,
            min_us: sorted[0] as f64 / 1000.0,
            mean_us: mean_ns / 1000.0,
        })
    }
}

/// What a lab measured of its own latency when it started and took off its delay
/// lines (for the first client's path to the server).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The configured one-way delays, up and down, µs.
    pub up_delay_us: u64,
    pub down_delay_us: u64,
    pub intrinsic: Intrinsic,
    /// Taken off each direction's delay line, µs.
    pub up_credit_us: u64,
    pub down_credit_us: u64,
    /// Measured by an earlier lab of the same process on the same delays (a sweep
    /// measures each shape of path once).
    #[serde(default)]
    pub reused: bool,
}

impl Calibration {
    /// The credit for a path configured to delay `up_delay_us` and `down_delay_us`:
    /// the intrinsic mean, so the mean round trip is the configured one. A round trip
    /// below that mean cannot be met on average; the credit is then the intrinsic
    /// minimum (at most the round trip), so the fastest packets take the configured
    /// time. Half comes off each direction, what one cannot take off the other.
    pub fn new(up_delay_us: u64, down_delay_us: u64, intrinsic: Intrinsic) -> Calibration {
        let rtt = up_delay_us + down_delay_us;
        let mean = intrinsic.mean_us.max(0.0).round() as u64;
        let min = intrinsic.min_us.max(0.0).round() as u64;
        let credit = if mean <= rtt { mean } else { min.min(rtt) };
        let up = (credit / 2).min(up_delay_us);
        let down = (credit - up).min(down_delay_us);
        Calibration {
            up_delay_us,
            down_delay_us,
            intrinsic,
            up_credit_us: credit - down,
            down_credit_us: down,
            reused: false,
        }
    }

    pub fn configured_rtt_us(&self) -> u64 {
        self.up_delay_us + self.down_delay_us
    }

    fn credit_us(&self) -> u64 {
        self.up_credit_us + self.down_credit_us
    }

    /// Whether the configured round trip lies below what the lab gives on average.
    pub fn below_floor(&self) -> bool {
        self.intrinsic.mean_us > self.configured_rtt_us() as f64
    }

    /// The round trip packets really take on average, µs: the configured one, unless
    /// it is below the floor.
    pub fn mean_rtt_us(&self) -> f64 {
        self.configured_rtt_us() as f64 - self.credit_us() as f64 + self.intrinsic.mean_us
    }

    /// How far the mean round trip lies above the configured one, µs: 0 (within the
    /// rounding of the credit) unless the path is below the floor.
    pub fn above_configured_us(&self) -> f64 {
        (self.mean_rtt_us() - self.configured_rtt_us() as f64).max(0.0)
    }

    /// The shortest round trip a packet takes, µs.
    pub fn min_rtt_us(&self) -> f64 {
        self.configured_rtt_us() as f64 - self.credit_us() as f64 + self.intrinsic.min_us
    }

    /// One line on what was measured and done about it.
    pub fn describe(&self) -> String {
        let us = |x: f64| format_duration_us(x.max(0.0).round() as u64);
        if self.below_floor() {
            format!(
                "the configured round trip of {} is below this lab's own latency of {}: packets take at least {}, {} on average",
                us(self.configured_rtt_us() as f64),
                us(self.intrinsic.mean_us),
                us(self.min_rtt_us()),
                us(self.mean_rtt_us())
            )
        } else {
            format!(
                "the lab's own latency, {} round trip (measured over {} echoes {}), is taken off its delay line",
                us(self.intrinsic.mean_us),
                self.intrinsic.probes,
                if self.reused {
                    "by this process's first lab on these delays"
                } else {
                    "at start"
                }
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intrinsic_mean_counts_the_slowest_tenth_at_the_90th_percentile() {
        // 36 echoes 100 µs late, then 4 of 5 ms: a stalled machine, not the lab.
        let mut excess = vec![100_000i64; 36];
        excess.extend([5_000_000; 4]);
        let i = Intrinsic::from_excess(&excess).unwrap();
        assert_eq!((i.probes, i.min_us, i.mean_us), (40, 100.0, 100.0));
        // 20 echoes from 10 to 200 µs: the two slowest count as 180 µs.
        let ramp: Vec<i64> = (1..=20).map(|k| k * 10_000).collect();
        let i = Intrinsic::from_excess(&ramp).unwrap();
        assert_eq!((i.min_us, i.mean_us), (10.0, (1710.0 + 2.0 * 180.0) / 20.0));
        assert_eq!(Intrinsic::from_excess(&[]), None);
    }

    const LAB: Intrinsic = Intrinsic {
        probes: 100,
        min_us: 120.0,
        mean_us: 240.4,
    };

    #[test]
    fn the_mean_comes_off_half_each_way() {
        let c = Calibration::new(10_000, 10_000, LAB);
        assert_eq!((c.up_credit_us, c.down_credit_us), (120, 120));
        assert!(!c.below_floor());
        assert_eq!(
            c.describe(),
            "the lab's own latency, 240 µs round trip (measured over 100 echoes at start), is taken off its delay line"
        );
        assert!((c.mean_rtt_us() - 20_000.4).abs() < 1e-9);
        assert!((c.min_rtt_us() - 19_880.0).abs() < 1e-9);
        // A direction without delay: the other takes it all.
        let c = Calibration::new(0, 5_000, LAB);
        assert_eq!((c.up_credit_us, c.down_credit_us), (0, 240));
        let c = Calibration::new(5_000, 0, LAB);
        assert_eq!((c.up_credit_us, c.down_credit_us), (240, 0));
    }

    #[test]
    fn a_round_trip_below_the_floor_keeps_its_minimum() {
        // 200 µs: below the 240 µs mean. The minimum comes off, so the fastest echo
        // takes 200 µs and the mean is 320.4.
        let c = Calibration::new(100, 100, LAB);
        assert!(c.below_floor());
        assert_eq!(
            c.describe(),
            "the configured round trip of 200 µs is below this lab's own latency of 240 µs: packets take at least 200 µs, 320 µs on average"
        );
        assert_eq!((c.up_credit_us, c.down_credit_us), (60, 60));
        assert!((c.min_rtt_us() - 200.0).abs() < 1e-9);
        assert!((c.mean_rtt_us() - 320.4).abs() < 1e-9);
        // 80 µs: even the minimum is more; nothing is left on the lines.
        let c = Calibration::new(40, 40, LAB);
        assert_eq!((c.up_credit_us, c.down_credit_us), (40, 40));
        assert!((c.min_rtt_us() - 120.0).abs() < 1e-9);
    }
}
