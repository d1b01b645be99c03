//! A link's queue occupancy over time, kept once per period: what the burst meter keeps
//! of a dumbbell's bottleneck and the hop meter of each link of a topology. Pure.

use tcplab_record::QueueSample;

/// Samples of one queue, at most one per period.
pub struct QueueSeries {
    samples: Vec<QueueSample>,
    period_ns: u64,
    next_ns: u64,
}

impl QueueSeries {
    /// A series that keeps the queue once per `period_ns`.
    pub fn new(period_ns: u64) -> QueueSeries {
        QueueSeries {
            samples: Vec::new(),
            period_ns: period_ns.max(1),
            next_ns: 0,
        }
    }

    /// The queue holds `bytes` at `now_ns`: kept when a period began since the last.
    pub fn sample(&mut self, now_ns: u64, bytes: u64) {
        if now_ns >= self.next_ns {
            self.samples.push(QueueSample {
                t_us: now_ns / 1000,
                bytes,
            });
            self.next_ns = now_ns - now_ns % self.period_ns + self.period_ns;
        }
    }

    /// The samples so far.
    pub fn samples(&self) -> &[QueueSample] {
        &self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_kept_once_per_period() {
        let mut q = QueueSeries::new(10_000_000);
        for (t, bytes) in [(0, 1), (5_000_000, 2), (10_000_000, 3), (29_000_000, 4)] {
            q.sample(t, bytes);
        }
        let kept: Vec<(u64, u64)> = q.samples().iter().map(|s| (s.t_us, s.bytes)).collect();
        assert_eq!(kept, [(0, 1), (10_000, 3), (29_000, 4)]);
    }
}
