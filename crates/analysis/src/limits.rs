//! What bounded a sender (Web100's SndLimTime*): from what each tcp_info sample of
//! the sending socket shows, with the kernel's own chrono counters as a cross-check.
//!
//! **From the samples** ([`classify`], [`LimitTally`]). Each sample, with the socket's
//! memory (SO_MEMINFO), says what kept the sender from having more in flight at that
//! moment, and the span since the previous sample is booked to it:
//! - `rwnd`: the bytes outstanding fill the receiver's advertised window;
//! - `cwnd`: the packets in flight fill the congestion window, or data waits in the
//!   socket with room in both windows (the congestion control's own pacing, TSO
//!   deferral, TCP small queues: the network side, which the kernel books as busy);
//! - `pacing`: data waits while the socket is paced at its SO_MAX_PACING_RATE cap, or
//!   the application paces its writes (`--app-rate`) and has nothing more written;
//! - `sndbuf`: nothing waits and the send buffer is full, or it is empty while the
//!   writer is inside a write call: blocked on the buffer, which drained before the
//!   writer's thread ran again;
//! - `app`: nothing waits, the buffer has room and the application is not writing.
//!
//! **The kernel's chrono counters** ([`chrono_shares`]). While a socket has data to
//! send, Linux keeps it in one of three exclusive states and reports their running
//! totals in µs (`tcp_get_info_chrono_stats` in net/ipv4/tcp.c):
//! - `busy_time` = BUSY + RWND_LIMITED + SNDBUF_LIMITED,
//! - `rwnd_limited`, `sndbuf_limited`.
//!
//! Over a span this gives rwnd = Δrwnd_limited, sndbuf = Δsndbuf_limited, cwnd =
//! Δbusy_time − Δrwnd − Δsndbuf and app = the rest. They tick in jiffies, so over a short
//! span they can exceed the wall time; the span is then taken as the counted time.
//! They cannot see a sender held by its send buffer: with 128 KiB of buffer over
//! 40 ms, every sample showed the buffer full and nothing unsent while `sndbuf_limited`
//! counted 4 % of the time and `busy` the rest. They serve where nothing was sampled
//! (`--sample-interval 0`) and as a cross-check where they do fire (the receive window).

use tcplab_record::tcpinfo::{SkMemInfo, TcpInfo};
use tcplab_record::{Limit, LimitShares};

/// End of `tcpi_sndbuf_limited` in the kernel struct: kernels before 4.10 return a
/// shorter `tcp_info` without the chrono counters.
const CHRONO_END: u32 = 192;

/// Packets short of the congestion window that still count as filling it: the last
/// ACK may have opened it by a packet or two the sender has not used yet.
const CWND_SLACK_PACKETS: u32 = 2;

/// A blocked writer is woken once a third of the send buffer is free
/// (`sk_stream_min_wspace`: free ≥ half of what is queued), so while a sender is held
/// by its buffer what is queued stays above two thirds of it.
const SNDBUF_FULL: f64 = 2.0 / 3.0;

/// Whether `info` came from a kernel that reports the chrono counters.
pub fn has_chrono(info: &TcpInfo) -> bool {
    info.valid_len >= CHRONO_END
}

/// The sending application at the moment of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Writer {
    /// It writes at a set rate (`--app-rate`).
    pub paced: bool,
    /// It was inside a write call. With nothing outstanding it is blocked on the send
    /// buffer until its thread runs again (on a fast path a small buffer drains within
    /// the writer's wake-up latency); with data outstanding and room in the buffer it
    /// is busy copying: the application's own pace.
    pub writing: bool,
}

/// What held a sender back at the moment of one sample of its socket: `mem` is the
/// socket's memory read with it (without it a full buffer cannot be told from an idle
/// application), `writer` what the application was doing.
pub fn classify(info: &TcpInfo, mem: Option<&SkMemInfo>, writer: Writer) -> Limit {
    let mss = u64::from(info.snd_mss.max(1));
    let outstanding = u64::from(info.unacked) * mss;
    if info.has(TcpInfo::SND_WND) && outstanding + mss > u64::from(info.snd_wnd) {
        return Limit::Rwnd;
    }
    if info.in_flight() + CWND_SLACK_PACKETS >= info.snd_cwnd {
        return Limit::Cwnd;
    }
    if u64::from(info.notsent_bytes) >= mss {
        // Data waits with room in both windows: the socket's pacing holds it.
        let capped = info.max_pacing_rate != u64::MAX && info.pacing_rate >= info.max_pacing_rate;
        return if capped { Limit::Pacing } else { Limit::Cwnd };
    }
    let buffer_full = mem.is_some_and(|m| {
        m.sndbuf > 0 && f64::from(m.wmem_queued) >= SNDBUF_FULL * f64::from(m.sndbuf)
    });
    let drained_under_writer = writer.writing && info.unacked == 0;
    if buffer_full || drained_under_writer {
        Limit::Sndbuf
    } else if writer.paced {
        Limit::Pacing
    } else {
        Limit::App
    }
}

/// Time booked to each limit over a span of one sender, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LimitTally {
    us: [u64; Limit::ALL.len()],
}

impl LimitTally {
    /// Books `span_us` to `limit`.
    pub fn book(&mut self, limit: Limit, span_us: u64) {
        self.us[limit.index()] += span_us;
    }

    pub fn total_us(&self) -> u64 {
        self.us.iter().sum()
    }

    /// The shares of the booked time; `None` when nothing was booked.
    pub fn shares(&self) -> Option<LimitShares> {
        let total = self.total_us();
        (total > 0).then(|| {
            let share = |l: Limit| self.us[l.index()] as f64 / total as f64;
            LimitShares {
                rwnd: share(Limit::Rwnd),
                sndbuf: share(Limit::Sndbuf),
                cwnd: share(Limit::Cwnd),
                pacing: share(Limit::Pacing),
                app: share(Limit::App),
            }
        })
    }
}

/// The kernel's chrono shares of the `elapsed_us` between two samples of one sender
/// socket.
///
/// A counter that went backwards (a reused socket) counts as no time. With nothing
/// counted and no time elapsed the span is all `app`, so the shares still sum to 1.
pub fn chrono_shares(prev: &TcpInfo, cur: &TcpInfo, elapsed_us: u64) -> LimitShares {
    let d = Chrono::of(cur).since(&Chrono::of(prev));
    let (busy, rwnd, sndbuf, elapsed) = (
        d.busy as f64,
        d.rwnd as f64,
        d.sndbuf as f64,
        elapsed_us as f64,
    );
    let cwnd = (busy - rwnd - sndbuf).max(0.0);
    let limited = rwnd + sndbuf + cwnd;
    let span = elapsed.max(limited);
    if span <= 0.0 {
        return LimitShares::all_app();
    }
    LimitShares {
        rwnd: rwnd / span,
        sndbuf: sndbuf / span,
        cwnd: cwnd / span,
        pacing: 0.0,
        app: (span - limited) / span,
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
            pacing: 0.0,
            app,
        };
        for l in Limit::ALL {
            assert!(
                (got.get(l) - want.get(l)).abs() < EPS,
                "{l:?}: got {got:?}, want {want:?}"
            );
        }
        let sum: f64 = Limit::ALL.iter().map(|&l| got.get(l)).sum();
        assert!((sum - 1.0).abs() < EPS, "sum {sum}");
    }

    #[test]
    fn sndbuf_limited_span() {
        // 1 s: 800 ms sndbuf-limited, 200 ms busy.
        let s = chrono_shares(&info(0, 0, 0), &info(200_000, 0, 800_000), 1_000_000);
        assert_shares(s, 0.0, 0.8, 0.2, 0.0);
        assert_eq!(s.dominant(), Limit::Sndbuf);
    }

    #[test]
    fn rwnd_limited_span() {
        let prev = info(1_000, 2_000, 0);
        let cur = info(1_000 + 40_000, 2_000 + 960_000, 0);
        let s = chrono_shares(&prev, &cur, 1_000_000);
        assert_shares(s, 0.96, 0.0, 0.04, 0.0);
        assert_eq!(s.dominant(), Limit::Rwnd);
    }

    #[test]
    fn mixed_span_leaves_the_rest_to_app() {
        // 500 ms: 100 rwnd, 50 sndbuf, 250 busy, so 100 ms with nothing to send.
        let s = chrono_shares(&info(0, 0, 0), &info(250_000, 100_000, 50_000), 500_000);
        assert_shares(s, 0.2, 0.1, 0.5, 0.2);
        assert_eq!(s.dominant(), Limit::Cwnd);
    }

    #[test]
    fn idle_socket_is_app_limited() {
        let same = info(5_000, 1_000, 0);
        let s = chrono_shares(&same, &same, 1_000_000);
        assert_shares(s, 0.0, 0.0, 0.0, 1.0);
        assert_eq!(s.dominant(), Limit::App);
    }

    #[test]
    fn jiffy_overshoot_is_scaled_to_fill_the_span() {
        // 100 ms of wall time but 104 ms counted (one 4 ms jiffy at HZ=250).
        let s = chrono_shares(&info(0, 0, 0), &info(78_000, 26_000, 0), 100_000);
        assert_shares(s, 0.25, 0.0, 0.75, 0.0);
    }

    #[test]
    fn zero_elapsed() {
        assert_shares(
            chrono_shares(&info(0, 0, 0), &info(0, 0, 0), 0),
            0.0,
            0.0,
            0.0,
            1.0,
        );
        // The kernel counted time our clock did not see: its split still stands.
        assert_shares(
            chrono_shares(&info(0, 0, 0), &info(3_000, 1_000, 0), 0),
            0.25,
            0.0,
            0.75,
            0.0,
        );
    }

    #[test]
    fn counters_going_backwards_count_as_nothing() {
        // A reused socket restarts its counters.
        let s = chrono_shares(
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
        assert_shares(chrono_shares(&prev, &cur, 100_000), 0.2, 0.0, 0.0, 0.8);
    }

    #[test]
    fn get_dominant_and_ties() {
        let s = LimitShares {
            rwnd: 0.1,
            sndbuf: 0.2,
            cwnd: 0.3,
            pacing: 0.0,
            app: 0.4,
        };
        assert_eq!(s.get(Limit::Rwnd), 0.1);
        assert_eq!(s.get(Limit::App), 0.4);
        assert_eq!(s.dominant(), Limit::App);
        let tie = LimitShares {
            rwnd: 0.0,
            sndbuf: 0.5,
            cwnd: 0.5,
            pacing: 0.0,
            app: 0.0,
        };
        assert_eq!(tie.dominant(), Limit::Sndbuf);
    }

    #[test]
    fn weighted_mean_weighs_by_time() {
        let rwnd = chrono_shares(&info(0, 0, 0), &info(0, 1_000, 0), 1_000);
        let cwnd = chrono_shares(&info(0, 0, 0), &info(1_000, 0, 0), 1_000);
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

    const MSS: u32 = 1448;
    const IDLE: Writer = Writer {
        paced: false,
        writing: false,
    };
    const PACED: Writer = Writer {
        paced: true,
        writing: false,
    };

    /// A sender's sample: `unacked` packets outstanding of a `cwnd`, the receiver's
    /// window `rwnd` and `notsent` bytes written but not sent, in a kernel with every
    /// field; nothing paced.
    fn sender(unacked: u32, cwnd: u32, rwnd: u32, notsent: u32) -> TcpInfo {
        TcpInfo {
            valid_len: tcplab_record::tcpinfo::TCP_INFO_LEN as u32,
            snd_mss: MSS,
            unacked,
            snd_cwnd: cwnd,
            snd_wnd: rwnd,
            notsent_bytes: notsent,
            pacing_rate: 50_000_000,
            max_pacing_rate: u64::MAX,
            ..TcpInfo::default()
        }
    }

    fn memory(wmem_queued: u32, sndbuf: u32) -> SkMemInfo {
        SkMemInfo {
            wmem_queued,
            sndbuf,
            ..SkMemInfo::default()
        }
    }

    #[test]
    fn a_full_send_buffer_with_nothing_unsent_is_sndbuf() {
        // --sndbuf 64K over 40 ms (as measured): 90 packets out of a 944-packet window,
        // 131 984 B queued in a 131 072 B buffer, nothing unsent.
        let held = sender(90, 944, 3_629_056, 0);
        let full = memory(131_984, 131_072);
        assert_eq!(classify(&held, Some(&full), IDLE), Limit::Sndbuf);
        // Just woken by ACKs, the writer has two thirds of the buffer queued at least.
        assert_eq!(
            classify(&held, Some(&memory(88_000, 131_072)), IDLE),
            Limit::Sndbuf
        );
        // The same socket with room in its buffer: the application wrote no more.
        assert_eq!(
            classify(&held, Some(&memory(40_000, 131_072)), IDLE),
            Limit::App
        );
        assert_eq!(classify(&held, None, IDLE), Limit::App);
        // … unless it is inside a write: blocked on the buffer, which drained before its
        // thread ran again (8 KiB over a veth pair: 64 KiB sent and acknowledged within
        // the writer's wake-up).
        let drained = sender(0, 171, 9_559_040, 0);
        let writing = Writer {
            paced: false,
            writing: true,
        };
        assert_eq!(
            classify(&drained, Some(&memory(0, 8_192)), writing),
            Limit::Sndbuf
        );
        assert_eq!(
            classify(&drained, Some(&memory(0, 8_192)), IDLE),
            Limit::App
        );
        // A writer busy copying into a buffer with room, data in flight: its own pace.
        let copying = sender(40, 171, 9_559_040, 0);
        assert_eq!(
            classify(&copying, Some(&memory(60_000, 4 << 20)), writing),
            Limit::App
        );
        // … or it paces its writes.
        assert_eq!(
            classify(&held, Some(&memory(40_000, 131_072)), PACED),
            Limit::Pacing
        );
    }

    #[test]
    fn full_windows_come_before_the_buffer() {
        let full = memory(131_984, 131_072);
        // 45 packets = 65 160 B outstanding against a 65 536 B window: under an MSS left.
        assert_eq!(
            classify(&sender(45, 944, 65_536, 0), Some(&full), IDLE),
            Limit::Rwnd
        );
        assert_eq!(
            classify(&sender(44, 944, 65_536, 0), Some(&full), IDLE),
            Limit::Sndbuf
        );
        // A zero window.
        assert_eq!(
            classify(&sender(0, 10, 0, 1 << 20), None, IDLE),
            Limit::Rwnd
        );
        // In flight at the congestion window, within two packets.
        assert_eq!(
            classify(&sender(98, 100, 1 << 22, 0), Some(&full), IDLE),
            Limit::Cwnd
        );
        assert_eq!(
            classify(&sender(97, 100, 1 << 22, 0), Some(&full), IDLE),
            Limit::Sndbuf
        );
        // Lost and SACKed packets are not in flight; retransmitted ones are.
        let mut recovering = sender(100, 60, 1 << 22, 0);
        recovering.sacked = 30;
        recovering.lost = 20;
        recovering.retrans = 5;
        assert_eq!(recovering.in_flight(), 55);
        assert_eq!(classify(&recovering, Some(&full), IDLE), Limit::Sndbuf);
        recovering.retrans = 8;
        assert_eq!(classify(&recovering, Some(&full), IDLE), Limit::Cwnd);
    }

    #[test]
    fn data_waiting_with_room_is_the_network_unless_a_cap_paces_it() {
        let waiting = sender(50, 944, 1 << 22, 1 << 20);
        assert_eq!(classify(&waiting, None, IDLE), Limit::Cwnd);
        // SO_MAX_PACING_RATE at 100 Mbit/s binds: the socket paces at the cap.
        let mut capped = waiting;
        capped.max_pacing_rate = 12_500_000;
        capped.pacing_rate = 12_500_000;
        assert_eq!(classify(&capped, None, IDLE), Limit::Pacing);
        // A cap above what the congestion control asks does not bind.
        capped.pacing_rate = 5_000_000;
        assert_eq!(classify(&capped, None, IDLE), Limit::Cwnd);
        // Less than a segment unsent (Nagle holding a tail) is nothing waiting.
        let tail = sender(1, 944, 1 << 22, 500);
        assert_eq!(
            classify(&tail, Some(&memory(4_000, 131_072)), IDLE),
            Limit::App
        );
    }

    #[test]
    fn a_tally_shares_the_booked_time() {
        let mut t = LimitTally::default();
        assert_eq!(t.shares(), None);
        t.book(Limit::Sndbuf, 30_000);
        t.book(Limit::Cwnd, 10_000);
        t.book(Limit::Sndbuf, 50_000);
        t.book(Limit::Pacing, 10_000);
        assert_eq!(t.total_us(), 100_000);
        let s = t.shares().unwrap();
        assert_eq!(
            (s.sndbuf, s.cwnd, s.pacing, s.rwnd, s.app),
            (0.8, 0.1, 0.1, 0.0, 0.0)
        );
        assert_eq!(s.dominant(), Limit::Sndbuf);
    }
}
