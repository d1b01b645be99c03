//! How a quantity changed between two sets of runs (`tcplab compare`): the difference of
//! their means with Welch's confidence interval and t-test, and the thresholds that make
//! a change a regression (`--fail-on throughput:-5%`).

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::stats::Metric;

/// One metric of one point, from a base set of runs to a new one.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Change {
    pub base_n: usize,
    pub new_n: usize,
    pub base_mean: f64,
    pub new_mean: f64,
    /// new − base.
    pub delta: f64,
    /// delta over the base mean; `None` when that is 0.
    pub relative: Option<f64>,
    /// Welch's interval of `delta` at `confidence`; `None` with fewer than two runs on
    /// a side.
    pub ci: Option<(f64, f64)>,
    /// Welch's two-sided p-value for "the means are equal"; `None` as `ci`.
    pub p_value: Option<f64>,
    pub confidence: f64,
}

impl Change {
    /// Whether the means differ at the confidence level: p below 1 − confidence.
    pub fn significant(&self) -> bool {
        self.p_value.is_some_and(|p| p < 1.0 - self.confidence)
    }
}

/// The change from `base` to `new` at `confidence` (in (0, 1)); `None` when a side has
/// no value. With no spread on either side a difference is certain (p 0) and none is
/// certain not to be (p 1).
pub fn welch(base: &[f64], new: &[f64], confidence: f64) -> Option<Change> {
    let (m1, v1, n1) = mean_and_variance(base)?;
    let (m2, v2, n2) = mean_and_variance(new)?;
    let delta = m2 - m1;
    let (ci, p_value) = match (v1, v2) {
        (Some(v1), Some(v2)) => {
            let (s1, s2) = (v1 / n1 as f64, v2 / n2 as f64);
            let se = (s1 + s2).sqrt();
            if se == 0.0 {
                let p = if delta == 0.0 { 1.0 } else { 0.0 };
                (Some((delta, delta)), Some(p))
            } else {
                // Welch–Satterthwaite degrees of freedom.
                let df = (s1 + s2).powi(2)
                    / (s1.powi(2) / (n1 - 1) as f64 + s2.powi(2) / (n2 - 1) as f64);
                let t = StudentsT::new(0.0, 1.0, df).expect("df > 0");
                let p = 2.0 * (1.0 - t.cdf((delta / se).abs()));
                let half = t.inverse_cdf(1.0 - (1.0 - confidence) / 2.0) * se;
                (Some((delta - half, delta + half)), Some(p.clamp(0.0, 1.0)))
            }
        }
        _ => (None, None),
    };
    Some(Change {
        base_n: n1,
        new_n: n2,
        base_mean: m1,
        new_mean: m2,
        delta,
        relative: (m1 != 0.0).then(|| delta / m1),
        ci,
        p_value,
        confidence,
    })
}

/// Mean, sample variance (`None` for one value) and count; `None` for no values.
fn mean_and_variance(values: &[f64]) -> Option<(f64, Option<f64>, usize)> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let variance =
        (n > 1).then(|| values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64);
    Some((mean, variance, n))
}

/// A regression threshold: `metric` changed significantly by `relative` or further in
/// its direction (`throughput:-5%`: a significant drop of 5 % or more).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailOn {
    pub metric: Metric,
    pub relative: f64,
}

impl FailOn {
    /// Whether `change` of this threshold's metric crosses it.
    pub fn crossed_by(&self, change: &Change) -> bool {
        change.significant()
            && change.relative.is_some_and(|r| {
                if self.relative < 0.0 {
                    r <= self.relative
                } else {
                    r >= self.relative
                }
            })
    }
}

impl std::str::FromStr for FailOn {
    type Err = String;
    fn from_str(text: &str) -> Result<FailOn, String> {
        let (metric, change) = text
            .split_once(':')
            .ok_or_else(|| format!("'{text}' is not METRIC:CHANGE% (e.g. throughput:-5%)"))?;
        let percent = change
            .strip_suffix('%')
            .and_then(|p| p.parse::<f64>().ok())
            .filter(|p| p.is_finite() && *p != 0.0)
            .ok_or_else(|| {
                format!("'{change}' is not a signed percentage other than 0 (e.g. -5%, +10%)")
            })?;
        Ok(FailOn {
            metric: metric.parse()?,
            relative: percent / 100.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wikipedia's example of Welch's test: t = −2.46, ν = 24.99, p = 0.021.
    #[test]
    fn welchs_test_gives_the_textbook_p_value() {
        let a = [
            27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7,
            21.4,
        ];
        let b = [
            27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5,
            24.4,
        ];
        let c = welch(&a, &b, 0.95).unwrap();
        assert!((c.delta - 2.1667).abs() < 1e-3, "{c:?}");
        let p = c.p_value.unwrap();
        assert!((0.020..0.023).contains(&p), "p {p}");
        assert!(c.significant());
        let (low, high) = c.ci.unwrap();
        // The 95 % interval excludes 0 exactly when p < 0.05, symmetric about delta.
        assert!(low > 0.0 && ((high - c.delta) - (c.delta - low)).abs() < 1e-9);
        // Swapped, the change is the opposite with the same p.
        let back = welch(&b, &a, 0.95).unwrap();
        assert!((back.delta + c.delta).abs() < 1e-12 && (back.p_value.unwrap() - p).abs() < 1e-12);
    }

    #[test]
    fn identical_runs_do_not_differ_and_single_runs_cannot_be_tested() {
        let same = welch(&[10.0, 11.0, 12.0], &[10.0, 11.0, 12.0], 0.95).unwrap();
        assert_eq!((same.delta, same.p_value), (0.0, Some(1.0)));
        assert!(!same.significant());
        let flat = welch(&[5.0, 5.0], &[4.0, 4.0], 0.95).unwrap();
        assert_eq!((flat.p_value, flat.relative), (Some(0.0), Some(-0.2)));
        let one = welch(&[5.0], &[4.0, 4.5], 0.95).unwrap();
        assert_eq!((one.ci, one.p_value), (None, None));
        assert!(!one.significant());
        assert_eq!(welch(&[], &[1.0], 0.95), None);
    }

    #[test]
    fn a_threshold_is_crossed_by_a_significant_change_that_far_in_its_direction() {
        let drop: FailOn = "throughput:-5%".parse().unwrap();
        assert_eq!((drop.metric, drop.relative), (Metric::Throughput, -0.05));
        let change = |base: &[f64], new: &[f64]| welch(base, new, 0.95).unwrap();
        let halved = change(&[100.0, 101.0, 99.0], &[50.0, 51.0, 49.0]);
        assert!(drop.crossed_by(&halved));
        // Significant but smaller than the threshold, or in the other direction.
        assert!(!drop.crossed_by(&change(&[100.0, 100.1, 99.9], &[98.0, 98.1, 97.9])));
        assert!(!drop.crossed_by(&change(&[100.0, 101.0, 99.0], &[150.0, 151.0, 149.0])));
        // As far, but within the noise.
        assert!(!drop.crossed_by(&change(&[100.0, 60.0, 140.0], &[90.0, 50.0, 130.0])));
        let rise: FailOn = "latency:+10%".parse().unwrap();
        assert!(rise.crossed_by(&change(&[20.0, 20.1, 19.9], &[40.0, 40.1, 39.9])));
        for bad in [
            "throughput",
            "throughput:-5",
            "throughput:0%",
            "speed:-5%",
            "rtt:x%",
        ] {
            assert!(bad.parse::<FailOn>().is_err(), "{bad}");
        }
    }
}
