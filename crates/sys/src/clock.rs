//! The clocks a test's time base is built on.

/// CLOCK_MONOTONIC in µs: the one time base of a test. Inside a lab every host shares it.
pub fn monotonic_us() -> i64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC in ns: the emulator's clock, fine enough for 1 µs serialization steps.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_REALTIME in µs since the Unix epoch: the wall-clock anchor of t0.
pub fn realtime_us() -> i64 {
    read(libc::CLOCK_REALTIME)
}

fn read(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_advances_with_sleep() {
        let a = monotonic_us();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = monotonic_us();
        assert!(b - a >= 5_000, "{a} → {b}");
        assert!(b - a < 1_000_000);
    }
}
