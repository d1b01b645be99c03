//! Delay and loss traces: a value that steps at given times and repeats. Each line is
//! `TIME VALUE`, the value from that time on (the first line at 0, times rising); the
//! last line is `TIME` alone, the trace's length, after which it starts again. Times
//! and delays carry a unit (`0 20ms`, `1.5s 35ms`, `4s`), losses are percentages;
//! blank lines and lines starting with `#` are skipped.

use super::trace::TraceError;
use crate::path::{duration_text, parse_prob, Prob, MAX_HOURS};

/// The longest trace: a day, far beyond any recording and far from overflowing the
/// link's nanoseconds.
const MAX_LENGTH_HOURS: u64 = 24;

/// A parsed trace. Parsing is the model's job; reading the file is the caller's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepTrace<V> {
    /// Rising µs offsets within one pass, the first 0.
    times_us: Vec<u64>,
    values: Vec<V>,
    /// One pass, µs: above the last time.
    length_us: u64,
}

impl StepTrace<u64> {
    /// A delay trace: one-way delays in µs, each at most an hour as a path's `delay`.
    pub fn parse_delays(text: &str) -> Result<Self, TraceError> {
        StepTrace::parse(text, "a delay such as 20ms", |v| {
            duration_text(v, MAX_HOURS)
        })
    }
}

impl StepTrace<Prob> {
    /// A loss trace: probabilities as a path's `loss` writes them.
    pub fn parse_losses(text: &str) -> Result<Self, TraceError> {
        StepTrace::parse(text, "a percentage such as 1%", parse_prob)
    }
}

impl<V: Copy> StepTrace<V> {
    fn parse(
        text: &str,
        value_is: &str,
        value: impl Fn(&str) -> Result<V, String>,
    ) -> Result<Self, TraceError> {
        let (mut times_us, mut values) = (Vec::new(), Vec::new());
        let mut length: Option<(usize, u64)> = None;
        let mut last_line = 0;
        for (i, line) in text.lines().enumerate() {
            let number = i + 1;
            let fail = |message: String| TraceError {
                line: number,
                message,
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.is_empty() || words[0].starts_with('#') {
                continue;
            }
            last_line = number;
            if let Some((end, _)) = length {
                return Err(fail(format!(
                    "after line {end}, which gave the trace's length (a time alone); the length comes last"
                )));
            }
            let time = duration_text(words[0], MAX_LENGTH_HOURS)
                .map_err(|e| fail(format!("time '{}': {e}", words[0])))?;
            match (times_us.last(), time) {
                (None, t) if t != 0 => {
                    return Err(fail(format!(
                        "the first line is at {}, not 0; a trace starts at 0",
                        words[0]
                    )))
                }
                (Some(&previous), t) if t <= previous => {
                    return Err(fail(format!(
                        "{} is not after the previous line's time; times must rise",
                        words[0]
                    )))
                }
                _ => {}
            }
            match words[1..] {
                [] if times_us.is_empty() => {
                    return Err(fail(format!(
                        "a time alone ends the trace; a line before it gives TIME and {value_is}"
                    )))
                }
                [] => length = Some((number, time)),
                [v] => {
                    values.push(value(v).map_err(|e| fail(format!("'{v}': {e}")))?);
                    times_us.push(time);
                }
                _ => {
                    return Err(fail(format!(
                        "expected TIME and {value_is}, or TIME alone (the trace's length) on the last line"
                    )))
                }
            }
        }
        let Some((_, length_us)) = length else {
            return Err(TraceError {
                line: last_line.max(1),
                message: "the trace needs its length: a last line with a time alone, as `10s`, after which it repeats".into(),
            });
        };
        Ok(StepTrace {
            times_us,
            values,
            length_us,
        })
    }

    /// The value at `t_us` from the trace's start, repeating.
    pub fn at(&self, t_us: u64) -> V {
        let within = t_us % self.length_us;
        // The first time is 0, so at least one is at or before `within`.
        self.values[self.times_us.partition_point(|&t| t <= within) - 1]
    }

    /// One pass, µs.
    pub fn length_us(&self) -> u64 {
        self.length_us
    }

    /// Each step as (its start, its value), µs, over one pass.
    pub fn steps(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        self.times_us
            .iter()
            .copied()
            .zip(self.values.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_hold_from_their_time_and_the_trace_repeats() {
        let t = StepTrace::parse_delays("# a comment\n0 20ms\n\n500ms 35ms\n1s\n").unwrap();
        assert_eq!(t.length_us(), 1_000_000);
        let at = |ms: u64| t.at(ms * 1000) / 1000;
        assert_eq!([at(0), at(499), at(500), at(999)], [20, 20, 35, 35]);
        assert_eq!([at(1000), at(1500), at(2_000_250)], [20, 35, 20]);
        let losses = StepTrace::parse_losses("0 1%\n2s 0%\n4s\n").unwrap();
        assert_eq!(losses.at(1_000_000), Prob::from_ppb(10_000_000).unwrap());
        assert_eq!(losses.at(3_000_000), Prob::ZERO);
    }

    #[test]
    fn errors_name_the_line() {
        let e = |s: &str| StepTrace::parse_delays(s).unwrap_err().to_string();
        assert_eq!(
            e(""),
            "trace line 1: the trace needs its length: a last line with a time alone, as `10s`, after which it repeats"
        );
        assert_eq!(
            e("0 20ms\n1s 30ms\n"),
            "trace line 2: the trace needs its length: a last line with a time alone, as `10s`, after which it repeats"
        );
        assert_eq!(
            e("10ms 20ms\n1s\n"),
            "trace line 1: the first line is at 10ms, not 0; a trace starts at 0"
        );
        assert_eq!(
            e("0 20ms\n1s 30ms\n1s 40ms\n2s\n"),
            "trace line 3: 1s is not after the previous line's time; times must rise"
        );
        assert_eq!(
            e("0 20ms\n# x\n500 30ms\n1s\n"),
            "trace line 3: time '500': a duration needs a unit, as in 500ms, 500us or 500s"
        );
        assert_eq!(
            e("0 20\n1s\n"),
            "trace line 1: '20': a duration needs a unit, as in 20ms, 20us or 20s"
        );
        assert_eq!(e("0 2h\n1s\n"), "trace line 1: '2h': too long; at most 1h");
        assert_eq!(
            e("0 20ms\n1s\n2s 30ms\n"),
            "trace line 3: after line 2, which gave the trace's length (a time alone); the length comes last"
        );
        assert_eq!(
            e("0\n"),
            "trace line 1: a time alone ends the trace; a line before it gives TIME and a delay such as 20ms"
        );
        assert_eq!(
            e("0 20ms 30ms\n1s\n"),
            "trace line 1: expected TIME and a delay such as 20ms, or TIME alone (the trace's length) on the last line"
        );
        let l = StepTrace::parse_losses("0 120%\n1s\n")
            .unwrap_err()
            .to_string();
        assert!(l.starts_with("trace line 1: '120%': "), "{l}");
    }
}
