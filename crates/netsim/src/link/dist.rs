//! netem's delay distributions as functions of one uniform draw u ∈ [0, 1), in units of
//! the jitter. netem draws from tables that iproute2 generates (`netem/normal.c`,
//! `pareto.c`, `paretonormal.c`) and stores as i16 / 8192, so every value is within
//! ±4 jitters; we compute the same inverse CDFs directly and clamp the same way.
//!
//! - uniform: 2u − 1, i.e. delay ± jitter (netem without a table).
//! - normal: Φ⁻¹(u).
//! - pareto: ((1 − u)^(−1/3) − 1.5) · 4/3, a Pareto of shape 3 shifted to mean 0
//!   (min −2/3, long right tail).
//! - paretonormal: (normal + 3 · pareto) / 4 of the *same* u, as iproute2 builds the
//!   table from one index.

use crate::path::JitterDist;

/// netem's table range: i16 values over NETEM_DIST_SCALE = 8192.
const TABLE_MAX: f64 = 32_767.0 / 8_192.0;

/// The delay offset, in jitters, for a uniform draw `u` ∈ [0, 1).
pub(crate) fn offset(dist: JitterDist, u: f64) -> f64 {
    match dist {
        JitterDist::Uniform => 2.0 * u - 1.0,
        JitterDist::Normal => normal(u),
        JitterDist::Pareto => pareto(u),
        JitterDist::ParetoNormal => {
            ((normal(u) + 3.0 * pareto(u)) / 4.0).clamp(-TABLE_MAX, TABLE_MAX)
        }
    }
}

fn normal(u: f64) -> f64 {
    inverse_normal_cdf(u).clamp(-TABLE_MAX, TABLE_MAX)
}

fn pareto(u: f64) -> f64 {
    // 1 − u ∈ (0, 1], so the power is finite.
    (((1.0 - u).powf(-1.0 / 3.0) - 1.5) * 4.0 / 3.0).min(TABLE_MAX)
}

/// Φ⁻¹ by Acklam's rational approximation (relative error < 1.2e-9), ±∞ at 0 and 1.
pub(crate) fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_normal_known_points() {
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959_963_985),
            (0.025, -1.959_963_985),
            (0.841_344_746, 1.0),
            (0.001, -3.090_232_306),
            (0.999_9, 3.719_016_485),
        ] {
            let got = inverse_normal_cdf(p);
            assert!((got - z).abs() < 1e-6, "Φ⁻¹({p}) = {got}, want {z}");
        }
    }

    /// Means by numeric integration over u: uniform, normal and pareto are centred.
    #[test]
    fn distributions_are_centred_as_netem_tables() {
        let n = 1_000_000;
        for dist in [JitterDist::Uniform, JitterDist::Normal, JitterDist::Pareto] {
            let mean: f64 = (0..n)
                .map(|i| offset(dist, (i as f64 + 0.5) / n as f64))
                .sum::<f64>()
                / n as f64;
            // The clamp at 4 trims pareto's tail: its mean is −0.033, as netem's table.
            assert!(mean.abs() < 0.04, "{dist:?}: mean {mean}");
        }
        assert_eq!(offset(JitterDist::Pareto, 0.0), -2.0 / 3.0);
        assert_eq!(offset(JitterDist::Pareto, 0.999_999_9), TABLE_MAX);
    }
}
