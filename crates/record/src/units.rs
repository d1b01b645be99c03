//! Units as tc and iperf3 users type them, parsed to integers and printed back.
//!
//! | parser | result | accepts |
//! |---|---|---|
//! | [`parse_rate`] | bit/s | `100mbit`, `1.5gbit`, `12kbit`, `bit`, `kbit/s`; iperf3's `100M`, `1G`, `10m` (bits, ×1000); tc's `Bps`, `kBps`, `MBps`, `GBps`, `TBps` (**bytes**/s, a capital B); bare number = bit/s |
//! | [`parse_size`] | bytes | bare number = bytes; `K`/`k`/`KiB` = 1024, `M`/`m`/`MiB`, `G`/`g`/`GiB`, `T`/`t`/`TiB` (binary); `kB` = 1000, `MB`, `GB`, `TB` (decimal) |
//! | [`parse_duration`] | µs | `100ns` (whole µs only), `250us`/`250µs`, `10ms`, `1.5s`, `2m` (minutes), `1h`; bare number = seconds, as iperf3's `-t` |
//! | [`parse_percent`] | fraction 0..=1 | `1%`, `0.1%`; a bare number is a percentage too, as in netem's `loss 1` |
//!
//! Rate units are case-insensitive but for the B of `Bps`, which as in tc means *bytes*
//! per second: `100MBps` is 800 Mbit/s. `100mbps` (a lowercase b) is refused with both
//! readings, since tc reads it as bytes and most people as bits. The normalized value
//! is always printed back. Size units are case-sensitive because `kB` (1000) and `K`
//! (1024) differ; `KB` and `kb` are rejected as ambiguous.
//!
//! Values are parsed as exact decimals, so `1.5M` is exactly 1572864 bytes; a value that
//! is not a whole number of the result unit (`0.5B`, `100ns`) is rejected, never rounded.
//! Surrounding whitespace is ignored, whitespace inside (`10 mbit`) is an error.

use std::fmt;

/// What a parser was reading; names the quantity in error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    Rate,
    Size,
    Duration,
    Percent,
}

impl Quantity {
    fn name(self) -> &'static str {
        match self {
            Quantity::Rate => "rate",
            Quantity::Size => "size",
            Quantity::Duration => "duration",
            Quantity::Percent => "percentage",
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Quantity::Rate => "expected a number with a unit such as 100mbit, 1gbit, 500kbit",
            Quantity::Size => {
                "expected a number of bytes, optionally with a unit such as 64K, 1MiB, 64kB"
            }
            Quantity::Duration => "expected a number with a unit such as 250us, 10ms, 1.5s",
            Quantity::Percent => "expected a percentage such as 1% or 0.1%",
        }
    }

    fn units(self) -> &'static str {
        match self {
            Quantity::Rate => {
                "bit, kbit, mbit, gbit, tbit, K, M, G, T, or Bps, KBps, MBps, GBps, TBps for bytes/s"
            }
            Quantity::Size => "B, K, KiB, M, MiB, G, GiB, T, TiB, kB, MB, GB, TB",
            Quantity::Duration => "ns, us, ms, s, m, h",
            Quantity::Percent => "%",
        }
    }
}

/// Why a value was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    Empty,
    /// Whitespace inside the value.
    Space,
    Negative,
    /// No digits where the number should be (also `nan`, `inf`).
    NotANumber,
    /// The text after the number.
    UnknownUnit(String),
    /// Beyond u64 in the result unit (above 100% for percentages).
    TooLarge,
    /// More digits than an exact decimal can hold.
    TooManyDigits,
    /// Not a whole number of the result unit (bit/s, bytes, µs).
    NotWhole,
    /// A rate spelled `bps` with a lowercase b: bytes/s to tc, bits/s to most people.
    /// `rate` is tc's reading (bit/s); `number` and `prefix` as typed spell both.
    AmbiguousBps {
        rate: u64,
        number: String,
        prefix: String,
    },
}

/// A value the user typed that is not a valid rate, size, duration or percentage.
/// Displays as one line naming the offending text and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    pub quantity: Quantity,
    /// The text as given.
    pub input: String,
    pub problem: Problem,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = self.quantity;
        write!(f, "invalid {} '{}': ", q.name(), OneLine(&self.input))?;
        match &self.problem {
            Problem::Empty => write!(f, "empty; {}", q.expected()),
            Problem::Space => write!(f, "unexpected space; {}", q.expected()),
            Problem::Negative => f.write_str("negative"),
            Problem::NotANumber => write!(f, "not a number; {}", q.expected()),
            Problem::UnknownUnit(unit) => {
                write!(
                    f,
                    "unknown unit '{}' (expected {})",
                    OneLine(unit),
                    q.units()
                )
            }
            Problem::TooLarge => match q {
                Quantity::Rate => f.write_str("too large (at most 2^64-1 bit/s)"),
                Quantity::Size => f.write_str("too large (at most 2^64-1 bytes)"),
                Quantity::Duration => f.write_str("too large (at most 2^64-1 µs)"),
                Quantity::Percent => f.write_str("above 100%"),
            },
            Problem::TooManyDigits => f.write_str("too many digits"),
            Problem::AmbiguousBps {
                rate,
                number,
                prefix,
            } => write!(
                f,
                "ambiguous: tc reads bps as bytes/s ({}), iperf3 users as bits/s ({}); \
                 write {number}{}bit for bits or {number}{}Bps for bytes",
                format_rate(*rate as f64),
                format_rate(*rate as f64 / 8.0),
                prefix.to_ascii_lowercase(),
                prefix.to_ascii_uppercase(),
            ),
            Problem::NotWhole => match q {
                Quantity::Rate => f.write_str("not a whole number of bit/s"),
                Quantity::Size => f.write_str("not a whole number of bytes"),
                // Percentages are fractions and never hit this.
                Quantity::Duration | Quantity::Percent => {
                    f.write_str("finer than 1 µs; durations have microsecond resolution")
                }
            },
        }
    }
}

impl std::error::Error for UnitError {}

/// Keeps an error message on one line whatever the user pasted: control characters
/// are escaped and long input is cut.
struct OneLine<'a>(&'a str);

impl fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX_CHARS: usize = 40;
        for (i, c) in self.0.chars().enumerate() {
            if i == MAX_CHARS {
                return f.write_str("…");
            }
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// Bit rate in bit/s; see the [module docs](self) for the spellings.
pub fn parse_rate(input: &str) -> Result<u64, UnitError> {
    let rate = parse_whole(Quantity::Rate, input, |unit| {
        let unit = unit.to_ascii_lowercase();
        // Accept our own printed form ("941Mbit/s") but not "Bps/s".
        let unit = match unit.strip_suffix("/s") {
            Some(bits) if bits.ends_with("bit") => bits,
            _ => &unit,
        };
        let bits_per_unit: u128 = match unit {
            "" | "bit" => 1,
            "k" | "kbit" => 1_000,
            "m" | "mbit" => 1_000_000,
            "g" | "gbit" => 1_000_000_000,
            "t" | "tbit" => 1_000_000_000_000,
            // tc: "Bps" is bytes per second, with SI prefixes.
            "bps" => 8,
            "kbps" => 8_000,
            "mbps" => 8_000_000,
            "gbps" => 8_000_000_000,
            "tbps" => 8_000_000_000_000,
            _ => return None,
        };
        Some((bits_per_unit, 1))
    })?;
    match ambiguous_bps(input, rate) {
        Some(problem) => Err(UnitError::new(Quantity::Rate, input, problem)),
        None => Ok(rate),
    }
}

/// `100mbps` (a lowercase b) means bytes/s to tc and bits/s to iperf3 users and most
/// people: refused with both readings and a spelling of each. `100MBps` is bytes.
fn ambiguous_bps(input: &str, bytes_reading: u64) -> Option<Problem> {
    let text = input.trim();
    // Only a rate that parsed gets here: its unit is ASCII.
    let bps = text.len().checked_sub(3)?;
    let unit = text.get(bps..)?;
    if !(unit.starts_with('b') && unit.eq_ignore_ascii_case("bps")) {
        return None;
    }
    let prefix = &text[..bps];
    let unit_start = prefix
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .len();
    let (number, si) = prefix.split_at(unit_start);
    Some(Problem::AmbiguousBps {
        rate: bytes_reading,
        number: number.to_owned(),
        prefix: si.to_owned(),
    })
}

/// Size in bytes; see the [module docs](self) for the spellings.
pub fn parse_size(input: &str) -> Result<u64, UnitError> {
    parse_whole(Quantity::Size, input, |unit| {
        let bytes_per_unit: u128 = match unit {
            "" | "B" => 1,
            "K" | "k" | "KiB" => 1 << 10,
            "M" | "m" | "MiB" => 1 << 20,
            "G" | "g" | "GiB" => 1 << 30,
            "T" | "t" | "TiB" => 1 << 40,
            "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "TB" => 1_000_000_000_000,
            _ => return None,
        };
        Some((bytes_per_unit, 1))
    })
}

/// Duration in µs; see the [module docs](self) for the spellings.
pub fn parse_duration(input: &str) -> Result<u64, UnitError> {
    parse_whole(Quantity::Duration, input, |unit| {
        // (numerator, denominator) of µs per unit.
        Some(match unit.to_ascii_lowercase().as_str() {
            "ns" | "nsec" | "nsecs" => (1, 1_000),
            "us" | "usec" | "usecs" | "µs" | "μs" => (1, 1),
            "ms" | "msec" | "msecs" => (1_000, 1),
            "" | "s" | "sec" | "secs" => (1_000_000, 1),
            "m" | "min" | "mins" => (60_000_000, 1),
            "h" => (3_600_000_000, 1),
            _ => return None,
        })
    })
}

/// Percentage as a fraction in 0..=1: `1%` and `1` are both 0.01.
pub fn parse_percent(input: &str) -> Result<f64, UnitError> {
    let q = Quantity::Percent;
    let (number, unit) = split(q, input)?;
    if !matches!(unit, "" | "%") {
        return Err(UnitError::new(q, input, Problem::UnknownUnit(unit.into())));
    }
    // scale <= MAX_SCALE, so 10^scale and 100·10^scale fit in u128.
    let one = 10u128.pow(number.scale);
    if number.mantissa > 100 * one {
        return Err(UnitError::new(q, input, Problem::TooLarge));
    }
    Ok(number.mantissa as f64 / one as f64 / 100.0)
}

impl UnitError {
    fn new(quantity: Quantity, input: &str, problem: Problem) -> Self {
        UnitError {
            quantity,
            input: input.to_owned(),
            problem,
        }
    }
}

/// A non-negative decimal read exactly: `mantissa / 10^scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decimal {
    mantissa: u128,
    scale: u32,
}

/// The largest scale whose power of ten, times 100, still fits in u128.
const MAX_SCALE: u32 = 36;

/// The one tokenizer behind every parser: splits `input` into an exact decimal and
/// the unit text after it.
fn split(q: Quantity, input: &str) -> Result<(Decimal, &str), UnitError> {
    let fail = |problem| Err(UnitError::new(q, input, problem));
    let s = input.trim();
    if s.is_empty() {
        return fail(Problem::Empty);
    }
    if s.contains(char::is_whitespace) {
        return fail(Problem::Space);
    }
    if s.starts_with('-') {
        return fail(Problem::Negative);
    }
    let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
    let (int, rest) = s.split_at(int_len);
    let (frac, unit) = match rest.strip_prefix('.') {
        Some(after) => after.split_at(after.bytes().take_while(u8::is_ascii_digit).count()),
        None => ("", rest),
    };
    if int.is_empty() && frac.is_empty() {
        return fail(Problem::NotANumber);
    }
    // Trailing zeros carry no value; dropping them keeps `1.500000s` within reach.
    let frac = frac.trim_end_matches('0');
    if frac.len() > MAX_SCALE as usize {
        return fail(Problem::TooManyDigits);
    }
    let mut mantissa: u128 = 0;
    for d in int.bytes().chain(frac.bytes()) {
        mantissa = match mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(d - b'0')))
        {
            Some(m) => m,
            None => return fail(Problem::TooManyDigits),
        };
    }
    let number = Decimal {
        mantissa,
        scale: frac.len() as u32,
    };
    Ok((number, unit))
}

/// Parses into a whole number of the result unit; `factor` maps the unit text to the
/// exact ratio (numerator, denominator) of result units per unit, or `None`.
fn parse_whole(
    q: Quantity,
    input: &str,
    factor: impl Fn(&str) -> Option<(u128, u128)>,
) -> Result<u64, UnitError> {
    let (number, unit) = split(q, input)?;
    let Some((num, den)) = factor(unit) else {
        return Err(UnitError::new(q, input, Problem::UnknownUnit(unit.into())));
    };
    scale_exact(number, num, den).map_err(|problem| UnitError::new(q, input, problem))
}

/// `number · num / den` if it is a whole number that fits in u64.
fn scale_exact(number: Decimal, num: u128, den: u128) -> Result<u64, Problem> {
    let den = 10u128
        .checked_pow(number.scale)
        .and_then(|p| p.checked_mul(den))
        .ok_or(Problem::TooManyDigits)?;
    // Cancel first so `1.5M` (15 · 2^20 / 10) never overflows on the way.
    let g = gcd(num, den);
    let product = number
        .mantissa
        .checked_mul(num / g)
        .ok_or(Problem::TooLarge)?;
    let den = den / g;
    if product % den != 0 {
        return Err(Problem::NotWhole);
    }
    u64::try_from(product / den).map_err(|_| Problem::TooLarge)
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Rate for people: 3 significant figures in SI units ("941 Mbit/s", "12.0 kbit/s",
/// "1.20 Gbit/s").
pub fn format_rate(bps: f64) -> String {
    if !bps.is_finite() {
        return format!("{bps} bit/s");
    }
    if bps < 0.0 {
        return format!("-{}", format_rate(-bps));
    }
    if bps == 0.0 {
        return "0 bit/s".to_owned();
    }
    with_unit(
        bps,
        1000.0,
        &["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"],
    )
}

/// Size for people in binary units: exact multiples stay exact ("64 KiB", "512 B"),
/// anything else gets 3 significant figures ("2.50 MiB").
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    // The largest unit not above the value (u64 tops out below 16 EiB).
    let exp = (u64::BITS - 1).saturating_sub(bytes.leading_zeros()) / 10;
    // Exact when the low bits below the unit are all zero (0 has 64 trailing zeros).
    if bytes.trailing_zeros() >= 10 * exp {
        return format!("{} {}", bytes >> (10 * exp), UNITS[exp as usize]);
    }
    with_unit(bytes as f64, 1024.0, &UNITS)
}

/// Duration for people: whole µs below 1 ms ("250 µs"), then 3 significant figures in
/// ms or s ("10.0 ms", "1.50 s").
pub fn format_duration_us(us: u64) -> String {
    if us < 1000 {
        return format!("{us} µs");
    }
    with_unit(us as f64, 1000.0, &["µs", "ms", "s"])
}

/// `value` (> 0) in the largest unit it reaches, with 3 significant figures; a value
/// that rounds up to the next unit ("1000 kbit/s") is printed in that unit instead.
fn with_unit(value: f64, base: f64, units: &[&str]) -> String {
    let top = units.len() - 1;
    let mut exp = 0;
    while exp < top && value >= base.powi(exp as i32 + 1) {
        exp += 1;
    }
    let mut digits = three_significant(value / base.powi(exp as i32));
    if exp < top && digits.parse::<f64>().is_ok_and(|r| r >= base) {
        exp += 1;
        digits = three_significant(value / base.powi(exp as i32));
    }
    format!("{digits} {}", units[exp])
}

/// Three significant figures for 0 < x, as "1.23", "12.3" or "123" (more digits above
/// 999, never exponents).
fn three_significant(x: f64) -> String {
    let mut decimals: usize = if x < 10.0 {
        2
    } else if x < 100.0 {
        1
    } else {
        0
    };
    let mut text = format!("{x:.decimals$}");
    // 9.996 prints as "10.00": one decimal too many after rounding up.
    let rounded: f64 = text.parse().unwrap_or(x);
    if decimals > 0 && rounded >= 10f64.powi(3 - decimals as i32) {
        decimals -= 1;
        text = format!("{x:.decimals$}");
    }
    text
}

/// A count and its noun, as printed: "1 run", "0 runs", "2 recovery episodes". `noun` is
/// the singular; the plural adds an "s". Singular exactly where the count prints as 1.
pub fn count(n: impl std::fmt::Display, noun: &str) -> String {
    let n = n.to_string();
    let s = if n == "1" { "" } else { "s" };
    format!("{n} {noun}{s}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowercase_bps_is_refused_with_both_readings() {
        for (text, bytes, bits, spell_bits, spell_bytes) in [
            ("100mbps", "800 Mbit/s", "100 Mbit/s", "100mbit", "100MBps"),
            ("100Mbps", "800 Mbit/s", "100 Mbit/s", "100mbit", "100MBps"),
            (
                "1.5kbps",
                "12.0 kbit/s",
                "1.50 kbit/s",
                "1.5kbit",
                "1.5KBps",
            ),
            ("64bps", "512 bit/s", "64.0 bit/s", "64bit", "64Bps"),
        ] {
            let e = parse_rate(text).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "invalid rate '{text}': ambiguous: tc reads bps as bytes/s ({bytes}), \
                     iperf3 users as bits/s ({bits}); write {spell_bits} for bits or \
                     {spell_bytes} for bytes"
                )
            );
            // Each suggested spelling says what it reads as.
            assert_eq!(format_rate(parse_rate(spell_bytes).unwrap() as f64), bytes);
            assert_eq!(format_rate(parse_rate(spell_bits).unwrap() as f64), bits);
        }
    }

    #[test]
    fn counts_are_singular_for_one_only() {
        assert_eq!(count(1, "run"), "1 run");
        assert_eq!(count(0u64, "run"), "0 runs");
        assert_eq!(count(2usize, "recovery episode"), "2 recovery episodes");
        assert_eq!(count(11, "slow-start exit"), "11 slow-start exits");
    }

    fn rate_err(s: &str) -> String {
        parse_rate(s).unwrap_err().to_string()
    }

    #[test]
    fn rates_in_tc_and_iperf3_spellings() {
        let cases: &[(&str, u64)] = &[
            ("100mbit", 100_000_000),
            ("1gbit", 1_000_000_000),
            ("12kbit", 12_000),
            ("1.5gbit", 1_500_000_000),
            ("100Mbit", 100_000_000),
            ("100MBIT", 100_000_000),
            ("941Mbit/s", 941_000_000),
            ("7bit", 7),
            ("1234", 1234),
            ("0", 0),
            ("100M", 100_000_000),
            ("1G", 1_000_000_000),
            ("10m", 10_000_000),
            ("10k", 10_000),
            ("2T", 2_000_000_000_000),
            // tc: Bps spellings are bytes/s.
            ("500kBps", 4_000_000),
            ("1Bps", 8),
            ("1KBps", 8_000),
            ("1MBps", 8_000_000),
            ("1mBps", 8_000_000),
            ("1GBps", 8_000_000_000),
            ("1MBPS", 8_000_000),
            ("1.5Bps", 12),
            (" 10mbit\n", 10_000_000),
            (".5kbit", 500),
            ("1.kbit", 1_000),
            ("1.500000000000000000000000000000000gbit", 1_500_000_000),
            ("18446744073709551615", u64::MAX),
        ];
        for &(text, want) in cases {
            assert_eq!(parse_rate(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn sizes_binary_without_b_decimal_with_b() {
        let cases: &[(&str, u64)] = &[
            ("1500", 1500),
            ("1500B", 1500),
            ("64K", 65_536),
            ("64k", 65_536),
            ("64KiB", 65_536),
            ("1M", 1 << 20),
            ("1m", 1 << 20),
            ("1MiB", 1 << 20),
            ("1G", 1 << 30),
            ("1GiB", 1 << 30),
            ("2T", 2 << 40),
            ("64kB", 64_000),
            ("1MB", 1_000_000),
            ("1GB", 1_000_000_000),
            ("1.5M", 1_572_864),
            ("0.5K", 512),
            ("2.50MiB", 2_621_440),
            ("1.5kB", 1_500),
        ];
        for &(text, want) in cases {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn durations_in_microseconds() {
        let cases: &[(&str, u64)] = &[
            ("250us", 250),
            ("250µs", 250),
            ("250μs", 250),
            ("250usec", 250),
            ("10ms", 10_000),
            ("10msec", 10_000),
            ("1.5s", 1_500_000),
            ("1.5sec", 1_500_000),
            ("10", 10_000_000),
            ("0.25", 250_000),
            ("2m", 120_000_000),
            ("2min", 120_000_000),
            ("1h", 3_600_000_000),
            ("1000ns", 1),
            ("1.5ms", 1_500),
            ("10MS", 10_000),
        ];
        for &(text, want) in cases {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn percent_bare_number_is_percent_like_netem() {
        let close = |text: &str, want: f64| {
            let got = parse_percent(text).unwrap();
            assert!((got - want).abs() < 1e-15, "{text}: {got} != {want}");
        };
        close("1%", 0.01);
        close("1", 0.01);
        close("0.1%", 0.001);
        close("0.01", 0.0001);
        close("100%", 1.0);
        close("0%", 0.0);
        close("12.5%", 0.125);
    }

    #[test]
    fn errors_name_the_token_and_what_is_expected() {
        assert_eq!(
            rate_err("10 mbit"),
            "invalid rate '10 mbit': unexpected space; expected a number with a unit such \
             as 100mbit, 1gbit, 500kbit"
        );
        assert_eq!(
            parse_duration("-5s").unwrap_err().to_string(),
            "invalid duration '-5s': negative"
        );
        assert_eq!(
            parse_size("64Q").unwrap_err().to_string(),
            "invalid size '64Q': unknown unit 'Q' (expected B, K, KiB, M, MiB, G, GiB, T, \
             TiB, kB, MB, GB, TB)"
        );
        assert_eq!(
            rate_err(""),
            "invalid rate '': empty; expected a number with a unit such as 100mbit, 1gbit, \
             500kbit"
        );
        assert_eq!(
            rate_err("nan"),
            "invalid rate 'nan': not a number; expected a number with a unit such as \
             100mbit, 1gbit, 500kbit"
        );
        assert_eq!(
            rate_err("18446744073709551616"),
            "invalid rate '18446744073709551616': too large (at most 2^64-1 bit/s)"
        );
        assert_eq!(
            parse_duration("100ns").unwrap_err().to_string(),
            "invalid duration '100ns': finer than 1 µs; durations have microsecond resolution"
        );
        assert_eq!(
            parse_size("0.3K").unwrap_err().to_string(),
            "invalid size '0.3K': not a whole number of bytes"
        );
        assert_eq!(
            parse_percent("101%").unwrap_err().to_string(),
            "invalid percentage '101%': above 100%"
        );
        assert_eq!(
            parse_percent("5x").unwrap_err().to_string(),
            "invalid percentage '5x': unknown unit 'x' (expected %)"
        );
    }

    #[test]
    fn every_bad_input_is_rejected_with_its_problem() {
        let too_many_digits = "1".repeat(40);
        let cases: &[(&str, Problem)] = &[
            ("", Problem::Empty),
            ("   ", Problem::Empty),
            ("10 mbit", Problem::Space),
            ("10\tmbit", Problem::Space),
            ("-1mbit", Problem::Negative),
            ("-0", Problem::Negative),
            ("nan", Problem::NotANumber),
            ("inf", Problem::NotANumber),
            ("-inf", Problem::Negative),
            ("mbit", Problem::NotANumber),
            (".", Problem::NotANumber),
            ("+5mbit", Problem::NotANumber),
            ("1e9", Problem::UnknownUnit("e9".into())),
            ("1.2.3", Problem::UnknownUnit(".3".into())),
            ("100mbit/s/s", Problem::UnknownUnit("mbit/s/s".into())),
            ("1Bps/s", Problem::UnknownUnit("Bps/s".into())),
            ("1kibit", Problem::UnknownUnit("kibit".into())),
            ("20000000tbit", Problem::TooLarge),
            ("0.5bit", Problem::NotWhole),
            (&too_many_digits, Problem::TooManyDigits),
        ];
        for (text, want) in cases {
            let err = parse_rate(text).unwrap_err();
            assert_eq!(&err.problem, want, "{text}");
            assert_eq!(err.quantity, Quantity::Rate);
            assert_eq!(err.input, *text);
        }
        // Ambiguous size spellings are refused rather than guessed.
        for text in ["1KB", "1kb", "1Kb", "1mb", "1KIB", "1b"] {
            assert!(
                matches!(
                    parse_size(text).unwrap_err().problem,
                    Problem::UnknownUnit(_)
                ),
                "{text}"
            );
        }
        assert_eq!(
            parse_size("16EiB").unwrap_err().problem,
            Problem::UnknownUnit("EiB".into())
        );
        assert_eq!(
            parse_size("16777216T").unwrap_err().problem,
            Problem::TooLarge
        );
        assert_eq!(
            parse_duration("0.0000000000000000000000000000000000001s")
                .unwrap_err()
                .problem,
            Problem::TooManyDigits
        );
        assert_eq!(
            parse_duration("1.5us").unwrap_err().problem,
            Problem::NotWhole
        );
        assert_eq!(parse_percent("-1%").unwrap_err().problem, Problem::Negative);
        assert_eq!(
            parse_percent("100.0001").unwrap_err().problem,
            Problem::TooLarge
        );
    }

    #[test]
    fn messages_stay_on_one_line() {
        let err = parse_rate("10\nmbit").unwrap_err().to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains("'10\\nmbit'"), "{err}");
        let long = format!("{}x", "9".repeat(100));
        let err = parse_size(&long).unwrap_err().to_string();
        assert!(err.len() < 200, "{err}");
        assert!(err.contains('…'), "{err}");
    }

    #[test]
    fn format_rate_three_significant_figures() {
        let cases: &[(f64, &str)] = &[
            (941.23e6, "941 Mbit/s"),
            (12_000.0, "12.0 kbit/s"),
            (1.2e9, "1.20 Gbit/s"),
            (500.0, "500 bit/s"),
            (0.0, "0 bit/s"),
            (999.6e6, "1.00 Gbit/s"),
            (9.996e6, "10.0 Mbit/s"),
            (99.96e3, "100 kbit/s"),
            (2.5e15, "2500 Tbit/s"),
            (-1.5e6, "-1.50 Mbit/s"),
        ];
        for &(bps, want) in cases {
            assert_eq!(format_rate(bps), want, "{bps}");
        }
    }

    #[test]
    fn format_size_binary() {
        let cases: &[(u64, &str)] = &[
            (0, "0 B"),
            (512, "512 B"),
            (1023, "1023 B"),
            (1024, "1 KiB"),
            (65_536, "64 KiB"),
            (1500, "1.46 KiB"),
            (2_621_440 + 1, "2.50 MiB"),
            (2_621_440, "2.50 MiB"),
            ((1 << 20) - 1, "1.00 MiB"),
            (64_000, "62.5 KiB"),
            (u64::MAX, "16.0 EiB"),
        ];
        for &(bytes, want) in cases {
            assert_eq!(format_size(bytes), want, "{bytes}");
        }
    }

    #[test]
    fn format_duration() {
        let cases: &[(u64, &str)] = &[
            (0, "0 µs"),
            (250, "250 µs"),
            (999, "999 µs"),
            (1000, "1.00 ms"),
            (10_000, "10.0 ms"),
            (999_999, "1.00 s"),
            (1_500_000, "1.50 s"),
            (3_600_000_000, "3600 s"),
        ];
        for &(us, want) in cases {
            assert_eq!(format_duration_us(us), want, "{us}");
        }
    }

    /// What we print parses back (without the space) to a value within the rounding.
    #[test]
    fn printed_values_parse_back() {
        for bps in [1.0, 999.0, 12_345.0, 941_234_567.0, 1.2e9, 39.9e12] {
            let text = format_rate(bps).replace(' ', "");
            let back = parse_rate(&text).unwrap() as f64;
            assert!((back - bps).abs() <= bps * 0.005, "{text}: {back} vs {bps}");
        }
        // A rounded size such as "1.43 MiB" is not a whole number of bytes, which
        // parse_size refuses by design; only whole-byte printouts are checked here.
        for bytes in [1000, 1_500_000, 2_621_441, 5 << 29] {
            let text = format_size(bytes).replace(' ', "");
            if let Ok(back) = parse_size(&text) {
                let (back, want) = (back as f64, bytes as f64);
                assert!(
                    (back - want).abs() <= want * 0.005,
                    "{text}: {back} vs {want}"
                );
            } else {
                assert_eq!(parse_size(&text).unwrap_err().problem, Problem::NotWhole);
            }
        }
        for us in [0, 250, 1_000, 10_000, 1_500_000, 3_600_000_000] {
            let text = format_duration_us(us).replace(' ', "");
            assert_eq!(parse_duration(&text), Ok(us), "{text}");
        }
        // Exact sizes round-trip exactly.
        for bytes in [0, 1, 512, 1024, 65_536, 3 << 20, 7 << 30, 3 << 40] {
            assert_eq!(parse_size(&format_size(bytes).replace(' ', "")), Ok(bytes));
        }
    }

    /// clap's `value_parser = parse_rate` needs exactly this shape.
    #[test]
    fn parsers_fit_clap_value_parser() {
        fn fits<T, E, F>(_: F)
        where
            F: Fn(&str) -> Result<T, E> + Clone + Send + Sync + 'static,
            E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
        {
        }
        fits(parse_rate);
        fits(parse_size);
        fits(parse_duration);
        fits(parse_percent);
    }
}
