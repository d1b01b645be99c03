//! What an experiment axis measures, read from its values as written: sizes, rates,
//! durations, percentages or plain numbers (charted on a numeric scale, logarithmic when
//! the values grow geometrically), or categories (`cubic`, `true`, a zip of mixed texts).

use tcplab_model::experiment::Axis;
use tcplab_record::units::{parse_duration, parse_percent, parse_rate, parse_size};

/// A numeric kind of value and the base unit it is kept in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// Bytes.
    Size,
    /// Bit/s.
    Rate,
    /// µs.
    Duration,
    /// A fraction 0..=1, shown as a percentage.
    Percent,
    /// A plain number (a count, an index).
    Number,
}

impl Quantity {
    /// One value for people, short, in the unit that suits it ("64 KiB", "20 ms",
    /// "0.5 %", "1.5 Gbit/s").
    pub fn format(self, v: f64) -> String {
        let scale = self.scale(v);
        let number = short_number(v / scale.factor);
        if scale.unit.is_empty() {
            number
        } else {
            format!("{number} {}", scale.unit)
        }
    }

    /// The display unit for values up to `max`: the factor that divides a base value
    /// and the unit's name.
    pub fn scale(self, max: f64) -> Scale {
        let steps: &[(f64, &'static str)] = match self {
            Quantity::Size => &[
                (1.0, "B"),
                (1024.0, "KiB"),
                (1048576.0, "MiB"),
                (1073741824.0, "GiB"),
            ],
            Quantity::Rate => &[
                (1.0, "bit/s"),
                (1e3, "kbit/s"),
                (1e6, "Mbit/s"),
                (1e9, "Gbit/s"),
            ],
            Quantity::Duration => &[(1.0, "µs"), (1e3, "ms"), (1e6, "s")],
            Quantity::Percent => &[(0.01, "%")],
            Quantity::Number => &[(1.0, "")],
        };
        let (factor, unit) = steps
            .iter()
            .rev()
            .find(|(factor, _)| max.abs() >= *factor)
            .unwrap_or(&steps[0]);
        Scale {
            factor: *factor,
            unit,
        }
    }
}

/// Base values divided by `factor` read in `unit`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    pub factor: f64,
    pub unit: &'static str,
}

/// Up to 3 significant figures without trailing zeros: "0.1", "20", "1.25", "1500".
pub fn short_number(v: f64) -> String {
    let magnitude = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32
    };
    let decimals = (2 - magnitude).clamp(0, 6) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// An axis whose values are numbers of one quantity.
#[derive(Clone, Debug, PartialEq)]
pub struct NumericAxis {
    pub quantity: Quantity,
    /// Each written value in the quantity's base unit, in axis order.
    pub values: Vec<f64>,
}

impl NumericAxis {
    /// The distinct values, ascending.
    pub fn distinct(&self) -> Vec<f64> {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }

    /// Whether the values grow by factors rather than steps (buffers 4K … 8M, rtt
    /// 0.3/10/100 ms): at least three, all positive, spanning a factor of 10 or more,
    /// each at least 1.5 times the one before. Such axes read best on a log scale.
    pub fn geometric(&self) -> bool {
        let v = self.distinct();
        v.len() >= 3
            && v[0] > 0.0
            && v[v.len() - 1] / v[0] >= 10.0
            && v.windows(2).all(|w| w[1] / w[0] >= 1.5)
    }
}

/// The axis as numbers, or `None` when its values are categories. An axis of only 0/1
/// or true/false is a switch, hence a category; a size and a rate both read "100M", so
/// an axis whose key ends in `rate` is taken as rates.
pub fn numeric(axis: &Axis) -> Option<NumericAxis> {
    let switch = axis
        .values
        .iter()
        .all(|v| matches!(v.as_str(), "0" | "1" | "true" | "false"));
    if axis.values.is_empty() || switch {
        return None;
    }
    let is_rate_key = axis.key.as_deref().is_some_and(|k| k.ends_with("rate"));
    let has_unit = |units: &[&str]| {
        axis.values.iter().any(|v| {
            let v = v.to_ascii_lowercase();
            units.iter().any(|u| v.ends_with(u))
        })
    };
    // Most specific first: "%" and "bit" only mean one thing, "m" may be ms or MiB.
    let candidates = [
        (Quantity::Percent, has_unit(&["%"])),
        (
            Quantity::Rate,
            is_rate_key || has_unit(&["bit", "bit/s", "bps"]),
        ),
        (
            Quantity::Duration,
            has_unit(&["s", "ms", "us", "µs", "min", "h"]),
        ),
        (
            Quantity::Size,
            has_unit(&["b", "k", "m", "g", "t", "kib", "mib", "gib"]),
        ),
        (Quantity::Number, true),
    ];
    candidates
        .into_iter()
        .filter(|(_, applies)| *applies)
        .find_map(|(quantity, _)| {
            let values = axis
                .values
                .iter()
                .map(|v| parse_as(quantity, v))
                .collect::<Option<Vec<f64>>>()?;
            Some(NumericAxis { quantity, values })
        })
}

/// `text` in the quantity's base unit, if it reads as one.
fn parse_as(quantity: Quantity, text: &str) -> Option<f64> {
    match quantity {
        Quantity::Percent => parse_percent(text).ok(),
        Quantity::Rate => parse_rate(text).ok().map(|r| r as f64),
        Quantity::Duration => parse_duration(text).ok().map(|d| d as f64),
        Quantity::Size => parse_size(text).ok().map(|s| s as f64),
        Quantity::Number => text.parse::<f64>().ok().filter(|x| x.is_finite()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(key: Option<&str>, values: &[&str]) -> Axis {
        Axis {
            name: "a".into(),
            key: key.map(Into::into),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn axes_are_read_in_their_units() {
        let sizes = numeric(&axis(Some("flow.window"), &["2K", "64K", "8M"])).unwrap();
        assert_eq!(sizes.quantity, Quantity::Size);
        assert_eq!(sizes.values, [2048.0, 65536.0, 8388608.0]);
        let rtt = numeric(&axis(None, &["0.2ms", "20ms"])).unwrap();
        assert_eq!(
            (rtt.quantity, rtt.values),
            (Quantity::Duration, vec![200.0, 20000.0])
        );
        let loss = numeric(&axis(None, &["0%", "0.1%", "20%"])).unwrap();
        assert_eq!(loss.quantity, Quantity::Percent);
        assert!((loss.values[2] - 0.2).abs() < 1e-12);
        let rates = numeric(&axis(Some("flow.cbr.rate"), &["1mbit", "2mbit"])).unwrap();
        assert_eq!(
            (rates.quantity, rates.values),
            (Quantity::Rate, vec![1e6, 2e6])
        );
        // "100M" is a rate where the key says so, a size elsewhere.
        assert_eq!(
            numeric(&axis(Some("flow.fq_rate"), &["100M", "1G"]))
                .unwrap()
                .quantity,
            Quantity::Rate
        );
        assert_eq!(
            numeric(&axis(Some("flow.sndbuf"), &["100M", "1G"]))
                .unwrap()
                .quantity,
            Quantity::Size
        );
        let streams = numeric(&axis(Some("flow.streams"), &["1", "2", "4", "8"])).unwrap();
        assert_eq!(streams.quantity, Quantity::Number);
    }

    #[test]
    fn switches_words_and_mixtures_are_categories() {
        assert_eq!(numeric(&axis(None, &["true", "false"])), None);
        assert_eq!(numeric(&axis(None, &["1", "0"])), None);
        assert_eq!(numeric(&axis(None, &["none", "kernel", "app"])), None);
        assert_eq!(numeric(&axis(None, &["", "up."])), None);
        assert_eq!(numeric(&axis(None, &["10ms", "fast"])), None);
    }

    #[test]
    fn geometric_axes_span_factors() {
        let geo = |values: &[&str]| numeric(&axis(None, values)).unwrap().geometric();
        assert!(geo(&["4K", "8K", "16K", "32K", "8M"]));
        assert!(geo(&["0.3ms", "10ms", "100ms"]));
        assert!(!geo(&["5ms", "10ms", "15ms", "20ms"]), "steps, not factors");
        assert!(!geo(&["0%", "1%", "20%"]), "zero has no logarithm");
        assert!(!geo(&["1K", "64K"]), "two values are a line either way");
        assert!(!geo(&["1", "2", "4", "8"]), "spans less than 10");
    }

    #[test]
    fn values_print_in_their_units_and_scales_fit_the_maximum() {
        assert_eq!(Quantity::Size.format(65536.0), "64 KiB");
        assert_eq!(Quantity::Size.format(1.5 * 1048576.0), "1.5 MiB");
        assert_eq!(Quantity::Duration.format(20_000.0), "20 ms");
        assert_eq!(Quantity::Duration.format(200.0), "200 µs");
        assert_eq!(Quantity::Percent.format(0.001), "0.1 %");
        assert_eq!(Quantity::Percent.format(0.0), "0 %");
        assert_eq!(Quantity::Rate.format(9.5e8), "950 Mbit/s");
        assert_eq!(Quantity::Number.format(4.0), "4");
        assert_eq!(Quantity::Rate.scale(9.5e8).unit, "Mbit/s");
        assert_eq!(Quantity::Rate.scale(80_000.0).unit, "kbit/s");
        assert_eq!(Quantity::Duration.scale(999.0).unit, "µs");
        assert_eq!(Quantity::Size.scale(3e6).unit, "MiB");
        assert_eq!(Quantity::Percent.scale(0.2).factor, 0.01);
        assert_eq!(short_number(1.250), "1.25");
        assert_eq!(short_number(20.0), "20");
        assert_eq!(short_number(0.1), "0.1");
        assert_eq!(short_number(1500.0), "1500");
    }
}
