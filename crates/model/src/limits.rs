//! What bounded a sender, from tcp_info's chrono counters (Web100's SndLimTime*).
//!
//! While a socket has data to send, Linux keeps it in one of three exclusive "chrono"
//! states and reports their running totals in µs (`tcp_get_info_chrono_stats` in
//! net/ipv4/tcp.c):
//! - `busy_time` = BUSY + RWND_LIMITED + SNDBUF_LIMITED,
//! - `rwnd_limited`, `sndbuf_limited`.
//!
//! Over a span of one sender socket this gives
//! - rwnd = Δrwnd_limited, sndbuf = Δsndbuf_limited,
//! - cwnd = Δbusy_time − Δrwnd − Δsndbuf: data in flight and neither window nor buffer
//!   short, so the network bounded the sender (cwnd, or pacing, which the kernel also
//!   counts as BUSY),
//! - app = the rest of the span: nothing queued to send.
//!
//! The counters tick in jiffies, so over a short span they can exceed the wall time.
//! The span is therefore taken as the longer of the wall time and the counted time:
//! an overshoot is scaled down to exactly fill the span and leaves app = 0.

use crate::record::{Limit, LimitShares};
use crate::tcpinfo::TcpInfo;

/// Every [`Limit`], in the order [`LimitShares::dominant`] breaks ties.
pub const ALL_LIMITS: [Limit; 4] = [Limit::Rwnd, Limit::Sndbuf, Limit::Cwnd, Limit::App];

/// End of `tcpi_sndbuf_limited` in the kernel struct: kernels before 4.10 return a
/// shorter `tcp_info` without the chrono counters.
const CHRONO_END: u32 = 192;

/// Whether `info` came from a kernel that reports the chrono counters.
pub fn has_chrono(info: &TcpInfo) -> bool {
    info.valid_len >= CHRONO_END
}

/// Shares of the `elapsed_us` between two samples of one sender socket.
///
/// A counter that went backwards (a reused socket) counts as no time. With nothing
/// counted and no time elapsed the span is all `app`, so the shares still sum to 1.
pub fn shares(prev: &TcpInfo, cur: &TcpInfo, elapsed_us: u64) -> LimitShares {
    let d = Chrono::of(cur).since(&Chrono::of(prev));
    attribute(
        d.busy as f64,
        d.rwnd as f64,
        d.sndbuf as f64,
        elapsed_us as f64,
    )
}

/// The one attribution rule, for [`shares`] and [`LimitClock`] alike. Takes counter
/// deltas and the wall time of the span, all µs.
fn attribute(busy: f64, rwnd: f64, sndbuf: f64, elapsed: f64) -> LimitShares {
    let rwnd = rwnd.max(0.0);
    let sndbuf = sndbuf.max(0.0);
    let cwnd = (busy - rwnd - sndbuf).max(0.0);
    let limited = rwnd + sndbuf + cwnd;
    let span = elapsed.max(limited);
    if span <= 0.0 {
        return all_app();
    }
    LimitShares {
        rwnd: rwnd / span,
        sndbuf: sndbuf / span,
        cwnd: cwnd / span,
        app: (span - limited) / span,
    }
}

fn all_app() -> LimitShares {
    LimitShares {
        app: 1.0,
        ..LimitShares::default()
    }
}

impl LimitShares {
    /// The share of `limit`.
    pub fn get(&self, limit: Limit) -> f64 {
        match limit {
            Limit::Rwnd => self.rwnd,
            Limit::Sndbuf => self.sndbuf,
            Limit::Cwnd => self.cwnd,
            Limit::App => self.app,
        }
    }

    /// The limit with the largest share; ties go to the first in [`ALL_LIMITS`].
    pub fn dominant(&self) -> Limit {
        let mut best = Limit::App;
        let mut best_share = f64::NEG_INFINITY;
        for limit in ALL_LIMITS {
            // `>` keeps the earlier limit on ties and skips NaN.
            if self.get(limit) > best_share {
                best = limit;
                best_share = self.get(limit);
            }
        }
        best
    }

    /// Mean of shares weighted by `f64` (typically the span's length). Weights that are
    /// not positive and finite are left out; with no weight left the result is all `app`.
    pub fn weighted_mean(items: &[(LimitShares, f64)]) -> LimitShares {
        let mut sum = LimitShares::default();
        let mut total = 0.0;
        for &(s, w) in items {
            if !(w.is_finite() && w > 0.0) {
                continue;
            }
            sum.rwnd += s.rwnd * w;
            sum.sndbuf += s.sndbuf * w;
            sum.cwnd += s.cwnd * w;
            sum.app += s.app * w;
            total += w;
        }
        if total == 0.0 {
            return all_app();
        }
        LimitShares {
            rwnd: sum.rwnd / total,
            sndbuf: sum.sndbuf / total,
            cwnd: sum.cwnd / total,
            app: sum.app / total,
        }
    }
}

/// The three chrono counters of one sample, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Chrono {
    busy: u64,
    rwnd: u64,
    sndbuf: u64,
}

impl Chrono {
    fn of(info: &TcpInfo) -> Self {
        Chrono {
            busy: info.busy_time,
            rwnd: info.rwnd_limited,
            sndbuf: info.sndbuf_limited,
        }
    }

    /// Growth since `prev`; a counter that went backwards (socket reuse) grew by 0.
    fn since(&self, prev: &Chrono) -> Chrono {
        Chrono {
            busy: self.busy.saturating_sub(prev.busy),
            rwnd: self.rwnd.saturating_sub(prev.rwnd),
            sndbuf: self.sndbuf.saturating_sub(prev.sndbuf),
        }
    }

    fn plus(&self, d: &Chrono) -> Chrono {
        Chrono {
            busy: self.busy.saturating_add(d.busy),
            rwnd: self.rwnd.saturating_add(d.rwnd),
            sndbuf: self.sndbuf.saturating_add(d.sndbuf),
        }
    }
}

/// One accepted sample: the raw counters (to take the next delta from) and their
/// clean running total since the first sample (never decreasing).
#[derive(Clone, Copy, Debug)]
struct Point {
    t_us: i64,
    raw: Chrono,
    total: Chrono,
}

/// Successive samples of one sender socket, from which the shares of any span follow,
/// so per-interval shares and the whole test's come from the same arithmetic.
///
/// Between samples the counters are interpolated linearly; time outside the sampled
/// range is unknown and left out of a span.
#[derive(Clone, Debug, Default)]
pub struct LimitClock {
    points: Vec<Point>,
}

impl LimitClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the sample taken at `t_us` (any fixed origin, e.g. µs since t0). Call in
    /// time order. Returns false, ignoring the sample, when it is older than the last
    /// one or its kernel lacks the chrono counters (see [`has_chrono`]).
    pub fn push(&mut self, t_us: i64, info: &TcpInfo) -> bool {
        if !has_chrono(info) {
            return false;
        }
        let raw = Chrono::of(info);
        let total = match self.points.last() {
            Some(last) if t_us < last.t_us => return false,
            Some(last) => last.total.plus(&raw.since(&last.raw)),
            None => Chrono::default(),
        };
        self.points.push(Point { t_us, raw, total });
        true
    }

    /// Shares over `start_us..end_us` clipped to the sampled range; `None` when fewer
    /// than two samples or no overlap.
    pub fn span(&self, start_us: i64, end_us: i64) -> Option<LimitShares> {
        let (first, last) = (self.points.first()?, self.points.last()?);
        let start = start_us.max(first.t_us);
        let end = end_us.min(last.t_us);
        if end <= start {
            return None;
        }
        let (a, b) = (self.total_at(start), self.total_at(end));
        Some(attribute(
            b[0] - a[0],
            b[1] - a[1],
            b[2] - a[2],
            (end - start) as f64,
        ))
    }

    /// Shares from the first sample to the last.
    pub fn total(&self) -> Option<LimitShares> {
        self.span(i64::MIN, i64::MAX)
    }

    /// Length of the sampled range, µs: the weight of [`Self::total`] when averaging
    /// flows with [`LimitShares::weighted_mean`].
    pub fn duration_us(&self) -> u64 {
        match (self.points.first(), self.points.last()) {
            (Some(first), Some(last)) => last.t_us.abs_diff(first.t_us),
            _ => 0,
        }
    }

    /// Running totals (busy, rwnd, sndbuf) at `t`, which lies within the sampled range.
    fn total_at(&self, t: i64) -> [f64; 3] {
        let as_f64 = |c: &Chrono| [c.busy as f64, c.rwnd as f64, c.sndbuf as f64];
        // First point after t; t is inside the range, so 1 <= next <= len.
        let next = self.points.partition_point(|p| p.t_us <= t);
        let Some(b) = self.points.get(next) else {
            return as_f64(&self.points[next - 1].total);
        };
        let a = &self.points[next - 1];
        // a.t_us <= t < b.t_us, so the width is positive.
        let f = (t - a.t_us) as f64 / (b.t_us - a.t_us) as f64;
        let (ta, tb) = (as_f64(&a.total), as_f64(&b.total));
        [0, 1, 2].map(|i| ta[i] + (tb[i] - ta[i]) * f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPS: f64 = 1e-12;

    /// A sample with the chrono counters (µs) as the kernel reports them: `busy` is
    /// the BUSY chrono alone, added to rwnd and sndbuf as tcp_get_info does.
    fn info(busy: u64, rwnd: u64, sndbuf: u64) -> TcpInfo {
        TcpInfo {
            valid_len: CHRONO_END,
            busy_time: busy + rwnd + sndbuf,
            rwnd_limited: rwnd,
            sndbuf_limited: sndbuf,
            ..TcpInfo::default()
        }
    }

    fn assert_shares(got: LimitShares, rwnd: f64, sndbuf: f64, cwnd: f64, app: f64) {
        let want = LimitShares {
            rwnd,
            sndbuf,
            cwnd,
            app,
        };
        for l in ALL_LIMITS {
            assert!(
                (got.get(l) - want.get(l)).abs() < EPS,
                "{l:?}: got {got:?}, want {want:?}"
            );
        }
        let sum = got.rwnd + got.sndbuf + got.cwnd + got.app;
        assert!((sum - 1.0).abs() < EPS, "sum {sum}");
    }

    #[test]
    fn sndbuf_limited_span() {
        // 1 s: 800 ms sndbuf-limited, 200 ms busy.
        let s = shares(&info(0, 0, 0), &info(200_000, 0, 800_000), 1_000_000);
        assert_shares(s, 0.0, 0.8, 0.2, 0.0);
        assert_eq!(s.dominant(), Limit::Sndbuf);
    }

    #[test]
    fn rwnd_limited_span() {
        let prev = info(1_000, 2_000, 0);
        let cur = info(1_000 + 40_000, 2_000 + 960_000, 0);
        let s = shares(&prev, &cur, 1_000_000);
        assert_shares(s, 0.96, 0.0, 0.04, 0.0);
        assert_eq!(s.dominant(), Limit::Rwnd);
    }

    #[test]
    fn mixed_span_leaves_the_rest_to_app() {
        // 500 ms: 100 rwnd, 50 sndbuf, 250 busy, so 100 ms with nothing to send.
        let s = shares(&info(0, 0, 0), &info(250_000, 100_000, 50_000), 500_000);
        assert_shares(s, 0.2, 0.1, 0.5, 0.2);
        assert_eq!(s.dominant(), Limit::Cwnd);
    }

    #[test]
    fn idle_socket_is_app_limited() {
        let same = info(5_000, 1_000, 0);
        let s = shares(&same, &same, 1_000_000);
        assert_shares(s, 0.0, 0.0, 0.0, 1.0);
        assert_eq!(s.dominant(), Limit::App);
    }

    #[test]
    fn jiffy_overshoot_is_scaled_to_fill_the_span() {
        // 100 ms of wall time but 104 ms counted (one 4 ms jiffy at HZ=250).
        let s = shares(&info(0, 0, 0), &info(78_000, 26_000, 0), 100_000);
        assert_shares(s, 0.25, 0.0, 0.75, 0.0);
    }

    #[test]
    fn zero_elapsed() {
        assert_shares(
            shares(&info(0, 0, 0), &info(0, 0, 0), 0),
            0.0,
            0.0,
            0.0,
            1.0,
        );
        // The kernel counted time our clock did not see: its split still stands.
        assert_shares(
            shares(&info(0, 0, 0), &info(3_000, 1_000, 0), 0),
            0.25,
            0.0,
            0.75,
            0.0,
        );
    }

    #[test]
    fn counters_going_backwards_count_as_nothing() {
        // A reused socket restarts its counters.
        let s = shares(
            &info(900_000, 50_000, 50_000),
            &info(10_000, 0, 0),
            1_000_000,
        );
        assert_shares(s, 0.0, 0.0, 0.0, 1.0);
        // Only busy went back: cwnd cannot go negative.
        let prev = info(100_000, 0, 0);
        let cur = TcpInfo {
            busy_time: 0,
            rwnd_limited: 20_000,
            ..prev
        };
        assert_shares(shares(&prev, &cur, 100_000), 0.2, 0.0, 0.0, 0.8);
    }

    #[test]
    fn get_dominant_and_ties() {
        let s = LimitShares {
            rwnd: 0.1,
            sndbuf: 0.2,
            cwnd: 0.3,
            app: 0.4,
        };
        assert_eq!(s.get(Limit::Rwnd), 0.1);
        assert_eq!(s.get(Limit::App), 0.4);
        assert_eq!(s.dominant(), Limit::App);
        let tie = LimitShares {
            rwnd: 0.0,
            sndbuf: 0.5,
            cwnd: 0.5,
            app: 0.0,
        };
        assert_eq!(tie.dominant(), Limit::Sndbuf);
    }

    #[test]
    fn weighted_mean_weighs_by_time() {
        let rwnd = shares(&info(0, 0, 0), &info(0, 1_000, 0), 1_000);
        let cwnd = shares(&info(0, 0, 0), &info(1_000, 0, 0), 1_000);
        let m = LimitShares::weighted_mean(&[(rwnd, 3.0), (cwnd, 1.0), (rwnd, f64::NAN)]);
        assert_shares(m, 0.75, 0.0, 0.25, 0.0);
        assert_shares(LimitShares::weighted_mean(&[]), 0.0, 0.0, 0.0, 1.0);
        assert_shares(
            LimitShares::weighted_mean(&[(rwnd, 0.0), (cwnd, -1.0)]),
            0.0,
            0.0,
            0.0,
            1.0,
        );
    }

    /// Samples every 100 ms for 1 s: 0–400 ms rwnd-limited, 400–600 ms busy,
    /// 600–1000 ms idle.
    fn clock() -> LimitClock {
        let mut c = LimitClock::new();
        let at = |ms: u64| {
            let rwnd = ms.min(400) * 1000;
            let busy = ms.clamp(400, 600).saturating_sub(400) * 1000;
            info(busy, rwnd, 0)
        };
        for ms in (0..=1000).step_by(100) {
            assert!(c.push(ms as i64 * 1000, &at(ms)));
        }
        c
    }

    #[test]
    fn clock_spans_and_total_agree_with_pairwise_shares() {
        let c = clock();
        assert_shares(c.total().unwrap(), 0.4, 0.0, 0.2, 0.4);
        assert_eq!(c.duration_us(), 1_000_000);
        assert_shares(c.span(0, 400_000).unwrap(), 1.0, 0.0, 0.0, 0.0);
        assert_shares(c.span(400_000, 600_000).unwrap(), 0.0, 0.0, 1.0, 0.0);
        assert_shares(c.span(600_000, 1_000_000).unwrap(), 0.0, 0.0, 0.0, 1.0);
        // Between samples the counters are interpolated.
        assert_shares(c.span(350_000, 450_000).unwrap(), 0.5, 0.0, 0.5, 0.0);
        assert_shares(c.span(250_000, 325_000).unwrap(), 1.0, 0.0, 0.0, 0.0);
        // Time outside the samples is left out, not called app.
        assert_shares(c.span(500_000, 2_000_000).unwrap(), 0.0, 0.0, 0.2, 0.8);
        assert_eq!(c.span(1_000_000, 2_000_000), None);
        assert_eq!(c.span(-500, 0), None);
        assert_eq!(c.span(300_000, 300_000), None);
        // Intervals weighted by length give the total back.
        let parts: Vec<_> = (0..4)
            .map(|i| (c.span(i * 250_000, (i + 1) * 250_000).unwrap(), 250_000.0))
            .collect();
        let whole = c.total().unwrap();
        let mean = LimitShares::weighted_mean(&parts);
        for l in ALL_LIMITS {
            assert!((mean.get(l) - whole.get(l)).abs() < EPS, "{l:?}");
        }
    }

    #[test]
    fn clock_rejects_what_it_cannot_use() {
        let mut c = LimitClock::new();
        assert_eq!(c.total(), None);
        assert_eq!(c.duration_us(), 0);
        assert!(c.push(1_000, &info(0, 0, 0)));
        assert_eq!(c.total(), None);
        // Out of order.
        assert!(!c.push(500, &info(10, 0, 0)));
        // Pre-4.10 kernel: no chrono counters.
        let old = TcpInfo {
            valid_len: 104,
            ..TcpInfo::default()
        };
        assert!(!c.push(2_000, &old));
        assert!(!has_chrono(&old));
        // A sample at the same instant is fine.
        assert!(c.push(1_000, &info(0, 0, 0)));
        assert!(c.push(2_000, &info(1_000, 0, 0)));
        assert_shares(c.total().unwrap(), 0.0, 0.0, 1.0, 0.0);
    }

    #[test]
    fn clock_survives_counter_reset() {
        let mut c = LimitClock::new();
        c.push(0, &info(0, 0, 0));
        c.push(100_000, &info(0, 0, 100_000));
        // Reset: this segment counts as nothing, later growth counts again.
        c.push(200_000, &info(0, 0, 10_000));
        c.push(300_000, &info(0, 0, 110_000));
        assert_shares(c.total().unwrap(), 0.0, 2.0 / 3.0, 0.0, 1.0 / 3.0);
        assert_shares(c.span(100_000, 200_000).unwrap(), 0.0, 0.0, 0.0, 1.0);
    }
}
