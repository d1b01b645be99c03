//! The clocks a test's time base is built on.

/// CLOCK_MONOTONIC in µs: the one time base of a test. Inside a lab every host shares it.
pub fn monotonic_us() -> i64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC in ns: the emulator's clock, fine enough for 1 µs serialization steps.
pub fn monotonic_ns() -> u64 {
    read_ns(libc::CLOCK_MONOTONIC) as u64
}

/// CLOCK_REALTIME in µs since the Unix epoch: the wall-clock anchor of t0.
pub fn realtime_us() -> i64 {
    read(libc::CLOCK_REALTIME)
}

/// CLOCK_REALTIME in ns since the Unix epoch: the clock of the kernel's packet stamps
/// (SO_TIMESTAMPNS).
pub fn realtime_ns() -> i64 {
    read_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, ns: what turns the kernel's wall-clock packet
/// stamps into our time base. The wall-clock read is bracketed by two monotonic reads and
/// retried when the thread was preempted in between, so the value is good to a few µs.
pub fn realtime_minus_monotonic_ns() -> i64 {
    const BRACKET_NS: i64 = 20_000;
    let mut best = (i64::MAX, 0);
    for _ in 0..4 {
        let before = read_ns(libc::CLOCK_MONOTONIC);
        let real = read_ns(libc::CLOCK_REALTIME);
        let after = read_ns(libc::CLOCK_MONOTONIC);
        let offset = real - before / 2 - after / 2;
        best = best.min((after - before, offset));
        if after - before < BRACKET_NS {
            break;
        }
    }
    best.1
}

/// Sleeps until CLOCK_MONOTONIC reads `deadline_ns` (at once when it has passed).
pub fn sleep_until_ns(deadline_ns: i64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec; an interrupted sleep just returns early.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

fn read(clock: libc::clockid_t) -> i64 {
    read_ns(clock) / 1_000
}

fn read_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
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

    #[test]
    fn the_wall_clock_offset_is_stable_between_reads() {
        let (a, b) = (realtime_minus_monotonic_ns(), realtime_minus_monotonic_ns());
        assert!((a - b).abs() < 50_000, "{a} then {b}");
        assert!((a / 1000 - (realtime_us() - monotonic_us())).abs() < 1_000);
    }
}
