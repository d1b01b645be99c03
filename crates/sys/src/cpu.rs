//! CPU time of a thread or of the whole process, from getrusage(2).

use std::io;
use std::ops::{Add, Sub};

use tcplab_record::CpuUse;

/// CPU time spent in user space and in the kernel, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user_us: u64,
    pub system_us: u64,
}

impl CpuTime {
    pub fn total_us(self) -> u64 {
        self.user_us + self.system_us
    }
}

/// CPU time of the calling thread so far (RUSAGE_THREAD).
pub fn thread_cpu_time() -> io::Result<CpuTime> {
    rusage(libc::RUSAGE_THREAD)
}

/// CPU time of all threads of this process so far, exited ones included.
pub fn process_cpu_time() -> io::Result<CpuTime> {
    rusage(libc::RUSAGE_SELF)
}

fn rusage(who: libc::c_int) -> io::Result<CpuTime> {
    // SAFETY: rusage is plain C data; all-zero is a valid value to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a valid, writable rusage.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(CpuTime {
        user_us: timeval_us(ru.ru_utime),
        system_us: timeval_us(ru.ru_stime),
    })
}

fn timeval_us(tv: libc::timeval) -> u64 {
    // The kernel never reports negative CPU time.
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u64::try_from(tv.tv_usec).unwrap_or(0);
    secs * 1_000_000 + micros
}

impl Add for CpuTime {
    type Output = CpuTime;
    fn add(self, rhs: CpuTime) -> CpuTime {
        CpuTime {
            user_us: self.user_us + rhs.user_us,
            system_us: self.system_us + rhs.system_us,
        }
    }
}

/// `later - earlier`; saturates at 0 so that mixing up two readings cannot panic.
impl Sub for CpuTime {
    type Output = CpuTime;
    fn sub(self, rhs: CpuTime) -> CpuTime {
        CpuTime {
            user_us: self.user_us.saturating_sub(rhs.user_us),
            system_us: self.system_us.saturating_sub(rhs.system_us),
        }
    }
}

/// `spent` as a percentage of one core over `wall_us` (100 = one core busy; several
/// busy threads exceed 100). A zero wall time gives 0.
pub fn usage(spent: CpuTime, wall_us: u64) -> CpuUse {
    if wall_us == 0 {
        return CpuUse::default();
    }
    let pct = |us: u64| us as f64 * 100.0 / wall_us as f64;
    CpuUse {
        user_pct: pct(spent.user_us),
        system_pct: pct(spent.system_us),
        total_pct: pct(spent.total_us()),
    }
}

/// A request that idle CPUs stay in their shallowest idle state (polling) while it is
/// held: the PM QoS CPU latency limit at 0 µs through `/dev/cpu_dma_latency`, as
/// cyclictest holds it. A thread woken on an idle CPU then runs at once, not after the
/// CPU's exit from a deeper state (in a VM, a halted vCPU's: 100 µs and more here). The
/// kernel drops the request when the file is closed: on drop, or however the process ends.
#[derive(Debug)]
pub struct CpusAwake {
    /// Held open, never read: the request lasts as long as the file is open.
    _request: std::fs::File,
}

/// Holds idle CPUs awake until the result is dropped; fails without the privilege to
/// write the limit (root, as the device's mode is 0600).
pub fn hold_cpus_awake() -> io::Result<CpusAwake> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")?;
    file.write_all(&0i32.to_ne_bytes())?;
    Ok(CpusAwake { _request: file })
}

/// Gives the calling thread real-time priority (SCHED_FIFO at `priority`, 1–99); false
/// without the privilege (CAP_SYS_NICE, or an RLIMIT_RTPRIO).
pub fn set_realtime(priority: i32) -> bool {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; `param` is valid for the call.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hint::black_box;
    use std::time::{Duration, Instant};

    #[test]
    fn busy_loop_raises_user_time() {
        // Spins until the thread has run 50 ms, however long a loaded machine keeps it
        // waiting: the clock must count the spinning, most of it in user space
        // (tick-based accounting blurs the split).
        let before = thread_cpu_time().unwrap();
        let start = Instant::now();
        let mut x = 0u64;
        let mut spent = CpuTime::default();
        while spent.total_us() < 50_000 && start.elapsed() < Duration::from_secs(10) {
            for _ in 0..10_000 {
                x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            spent = thread_cpu_time().unwrap() - before;
        }
        assert!(
            spent.total_us() >= 50_000,
            "{spent:?} in {:?}",
            start.elapsed()
        );
        assert!(spent.user_us >= 25_000, "{spent:?}");
        assert!(process_cpu_time().unwrap().total_us() >= spent.total_us());
    }

    #[test]
    fn arithmetic() {
        let a = CpuTime {
            user_us: 300,
            system_us: 50,
        };
        let b = CpuTime {
            user_us: 100,
            system_us: 80,
        };
        assert_eq!(
            a + b,
            CpuTime {
                user_us: 400,
                system_us: 130
            }
        );
        assert_eq!(
            a - b,
            CpuTime {
                user_us: 200,
                system_us: 0
            }
        );
    }

    #[test]
    fn usage_is_percent_of_one_core() {
        let spent = CpuTime {
            user_us: 1_500_000,
            system_us: 500_000,
        };
        let cpu = usage(spent, 1_000_000);
        assert_eq!(cpu.user_pct, 150.0);
        assert_eq!(cpu.system_pct, 50.0);
        assert_eq!(cpu.total_pct, 200.0);
        assert_eq!(usage(spent, 0), CpuUse::default());
    }
}
