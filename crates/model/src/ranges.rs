//! The ranges a test's parameters must keep, checked by one function each wherever a
//! test is asked for: the CLI's flags, an experiment file's flows, a server's request
//! check. Each front end names the parameter in its own terms (`-M/--set-mss 10`,
//! `flow 'bulk': mss 10`) before the same message, so a bad value is refused before a
//! lab is built and reads the same from either end.

use tcplab_record::TestEnd;

/// The MSS Linux's TCP_MAXSEG accepts (`TCP_MIN_MSS` and `MAX_TCP_WINDOW` in
/// include/net/tcp.h); anything else is EINVAL.
pub const MSS_RANGE: std::ops::RangeInclusive<u32> = 88..=32767;

/// An MSS (TCP_MAXSEG) as given, as the kernel takes it.
pub fn check_mss(mss: u64) -> Result<u32, String> {
    u32::try_from(mss)
        .ok()
        .filter(|m| MSS_RANGE.contains(m))
        .ok_or_else(|| {
            format!(
                "an MSS must be {}..={} bytes (what Linux's TCP_MAXSEG takes)",
                MSS_RANGE.start(),
                MSS_RANGE.end()
            )
        })
}

/// A test's end: some time, or some bytes.
pub fn check_end(end: &TestEnd) -> Result<(), String> {
    match end {
        TestEnd::Duration { us: 0 } => Err("a test must last longer than 0 s".into()),
        TestEnd::Bytes { bytes: 0 } => Err("a test must send more than 0 bytes".into()),
        TestEnd::Duration { .. } | TestEnd::Bytes { .. } => Ok(()),
    }
}

/// The sample interval `watch -i` takes, ms.
pub const SAMPLE_INTERVAL_MS: std::ops::RangeInclusive<u64> = 1..=100;

/// A sample interval as given, µs, or why not.
pub fn check_watch_interval(us: u64) -> Result<u64, String> {
    let (low, high) = (SAMPLE_INTERVAL_MS.start(), SAMPLE_INTERVAL_MS.end());
    if us.is_multiple_of(1000) && SAMPLE_INTERVAL_MS.contains(&(us / 1000)) {
        Ok(us)
    } else {
        Err(format!(
            "a watch's sample interval must be {low}..={high} ms in whole milliseconds"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mss_range_is_the_kernels() {
        for ok in [88, 536, 1448, 9000, 32767] {
            assert_eq!(check_mss(ok), Ok(ok as u32));
        }
        for bad in [0, 10, 87, 32768, 100_000, u64::from(u32::MAX) + 88] {
            assert_eq!(
                check_mss(bad).unwrap_err(),
                "an MSS must be 88..=32767 bytes (what Linux's TCP_MAXSEG takes)"
            );
        }
    }

    #[test]
    fn a_test_moves_something() {
        assert!(check_end(&TestEnd::Duration { us: 1 }).is_ok());
        assert!(check_end(&TestEnd::Bytes { bytes: 1 }).is_ok());
        assert!(check_end(&TestEnd::Duration { us: 0 }).is_err());
        assert!(check_end(&TestEnd::Bytes { bytes: 0 }).is_err());
    }

    #[test]
    fn a_watch_samples_every_1_to_100_whole_milliseconds() {
        assert_eq!(check_watch_interval(1_000), Ok(1_000));
        assert_eq!(check_watch_interval(100_000), Ok(100_000));
        for bad in [0, 500, 1_500, 101_000] {
            assert_eq!(
                check_watch_interval(bad).unwrap_err(),
                "a watch's sample interval must be 1..=100 ms in whole milliseconds"
            );
        }
    }
}
