//! mahimahi link traces: each line is one delivery opportunity of 1500 bytes at that
//! millisecond; the trace repeats with the last timestamp as its period.

use std::fmt;

/// Bytes one opportunity can carry, as mahimahi's `PACKET_SIZE`.
pub const OPPORTUNITY_BYTES: u32 = 1500;

const NS_PER_MS: u64 = 1_000_000;

/// A parsed trace. Parsing is the model's job; reading the file is the caller's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Non-decreasing ms offsets within one period.
    opportunities_ms: Vec<u64>,
    /// The last timestamp (> 0): mahimahi shifts the schedule by it at each wraparound.
    period_ms: u64,
}

/// A malformed trace, naming the 1-based line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TraceError {}

impl Trace {
    /// Parses mahimahi's format, with its rules: whole ms, non-decreasing, at least one
    /// line, lasting more than 0 ms. Blank lines are rejected except at the end.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let lines: Vec<&str> = text.lines().collect();
        let used = lines.len()
            - lines
                .iter()
                .rev()
                .take_while(|l| l.trim().is_empty())
                .count();
        let mut opportunities_ms = Vec::with_capacity(used);
        for (i, line) in lines[..used].iter().enumerate() {
            let fail = |message: String| TraceError {
                line: i + 1,
                message,
            };
            let word = line.trim();
            if word.is_empty() {
                return Err(fail("empty line".into()));
            }
            if !word.bytes().all(|b| b.is_ascii_digit()) {
                return Err(fail(format!(
                    "'{}' is not a whole number of milliseconds",
                    word.escape_debug()
                )));
            }
            let ms: u64 = word
                .parse()
                .map_err(|_| fail(format!("'{word}' is too large")))?;
            if let Some(&previous) = opportunities_ms.last() {
                if ms < previous {
                    return Err(fail(format!(
                        "{ms} is before the previous line's {previous}; timestamps must not decrease"
                    )));
                }
            }
            opportunities_ms.push(ms);
        }
        let Some(&period_ms) = opportunities_ms.last() else {
            return Err(TraceError {
                line: 1,
                message: "no timestamps".into(),
            });
        };
        if period_ms == 0 {
            return Err(TraceError {
                line: used,
                message: "the trace must last more than 0 ms".into(),
            });
        }
        if period_ms.checked_mul(NS_PER_MS).is_none() {
            return Err(TraceError {
                line: used,
                message: "too long".into(),
            });
        }
        Ok(Trace {
            opportunities_ms,
            period_ms,
        })
    }

    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }

    /// Opportunities in one period.
    pub fn opportunities(&self) -> usize {
        self.opportunities_ms.len()
    }

    /// The average capacity, bit/s.
    pub fn mean_rate_bps(&self) -> f64 {
        let bits = self.opportunities() as f64 * f64::from(OPPORTUNITY_BYTES) * 8.0;
        bits / (self.period_ms as f64 / 1000.0)
    }

    /// The bytes the trace offers after `from_ns` up to and including `to_ns`: its
    /// opportunities then, used or not.
    pub fn offered_bytes(&self, from_ns: u64, to_ns: u64) -> u64 {
        let ordinal = |c: TraceCursor| c.cycle * self.opportunities() as u64 + c.index as u64;
        let (a, b) = (
            self.first_after(from_ns),
            self.first_after(to_ns.max(from_ns)),
        );
        (ordinal(b) - ordinal(a)) * u64::from(OPPORTUNITY_BYTES)
    }

    /// The time (ns) of an opportunity.
    pub(crate) fn time_ns(&self, at: TraceCursor) -> u64 {
        at.cycle
            .saturating_mul(self.period_ms)
            .saturating_add(self.opportunities_ms[at.index])
            .saturating_mul(NS_PER_MS)
    }

    /// The opportunity after `at`.
    pub(crate) fn next(&self, at: TraceCursor) -> TraceCursor {
        if at.index + 1 < self.opportunities_ms.len() {
            TraceCursor {
                index: at.index + 1,
                ..at
            }
        } else {
            TraceCursor {
                cycle: at.cycle + 1,
                index: 0,
            }
        }
    }

    /// The first opportunity strictly after `now_ns`: mahimahi uses up every
    /// opportunity up to now before it queues an arriving packet.
    pub(crate) fn first_after(&self, now_ns: u64) -> TraceCursor {
        let period_ns = self.period_ms * NS_PER_MS;
        // Opportunities of earlier cycles end by cycle × period ≤ now.
        let cycle = now_ns / period_ns;
        let base_ns = cycle * period_ns;
        let index = self
            .opportunities_ms
            .partition_point(|&ms| base_ns + ms * NS_PER_MS <= now_ns);
        if index < self.opportunities_ms.len() {
            TraceCursor { cycle, index }
        } else {
            TraceCursor {
                cycle: cycle + 1,
                index: 0,
            }
        }
    }
}

/// A position in the looping schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TraceCursor {
    cycle: u64,
    index: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_loops() {
        let t = Trace::parse("0\n5\n5\n10\n").unwrap();
        assert_eq!(t.period_ms(), 10);
        assert_eq!(t.opportunities(), 4);
        let mut c = t.first_after(0);
        let mut times = Vec::new();
        for _ in 0..6 {
            times.push(t.time_ns(c) / NS_PER_MS);
            c = t.next(c);
        }
        // The next cycle's 0 ms coincides with this cycle's last line, as in mahimahi.
        assert_eq!(times, [5, 5, 10, 10, 15, 15]);
        assert_eq!(t.time_ns(t.first_after(10 * NS_PER_MS)), 15 * NS_PER_MS);
        assert_eq!(t.time_ns(t.first_after(10 * NS_PER_MS - 1)), 10 * NS_PER_MS);
        assert_eq!(
            t.time_ns(t.first_after(1_000 * NS_PER_MS + 7)),
            1_005 * NS_PER_MS
        );
    }

    /// Opportunities counted over any window, across the trace's loops: those strictly
    /// after its start up to and including its end.
    #[test]
    fn offered_bytes_count_the_opportunities_in_a_window() {
        let t = Trace::parse("0\n5\n5\n10\n").unwrap();
        let ms = |m: u64| m * NS_PER_MS;
        let opportunities = |a, b| t.offered_bytes(ms(a), ms(b)) / u64::from(OPPORTUNITY_BYTES);
        // Opportunities at 5, 5, 10, 10 (the next loop's 0), 15, 15, 20, 20, …
        assert_eq!(opportunities(0, 5), 2);
        assert_eq!(opportunities(0, 10), 4);
        assert_eq!(opportunities(5, 10), 2);
        assert_eq!(opportunities(0, 1000), 400, "4 per 10 ms period");
        assert_eq!(opportunities(7, 7), 0);
        assert_eq!(opportunities(9, 3), 0, "an empty window");
    }

    #[test]
    fn errors_name_the_line() {
        let e = |s: &str| Trace::parse(s).unwrap_err().to_string();
        assert_eq!(e(""), "trace line 1: no timestamps");
        assert_eq!(
            e("0\n0\n"),
            "trace line 2: the trace must last more than 0 ms"
        );
        assert_eq!(
            e("1\n3\n2\n"),
            "trace line 3: 2 is before the previous line's 3; timestamps must not decrease"
        );
        assert_eq!(e("1\n\n2\n"), "trace line 2: empty line");
        assert_eq!(
            e("1\n2ms\n"),
            "trace line 2: '2ms' is not a whole number of milliseconds"
        );
        assert!(Trace::parse("1\n2\n\n\n").is_ok());
    }

    #[test]
    fn a_one_line_trace_is_12_mbit() {
        let t = Trace::parse("1\n").unwrap();
        assert_eq!(t.mean_rate_bps(), 12_000_000.0);
    }
}
