//! The monitor in virtual time: sockets are made-up tcp_info, the clock is a number.

use super::*;
use tcplab_record::Limit;

const MS: i64 = 1_000;
const MSS: u32 = 1_000;

fn config(sample_ms: i64, report_ms: i64, deadline_ms: Option<i64>) -> Config {
    Config {
        host: Host::Client,
        sample_interval_us: (sample_ms * MS) as u64,
        report_interval_us: (report_ms * MS) as u64,
        deadline_us: deadline_ms.map(|d| d * MS),
        app_paced: false,
        pacing: None,
        reserved_samples: 0,
        keep_samples: true,
    }
}

/// A socket's tcp_info with every field the kernel fills in.
fn info() -> TcpInfo {
    TcpInfo {
        valid_len: 1_000,
        snd_mss: MSS,
        snd_cwnd: 10,
        snd_wnd: 1 << 30,
        rtt: 20_000,
        ..TcpInfo::default()
    }
}

/// A sender whose packets in flight fill its congestion window.
fn cwnd_limited() -> TcpInfo {
    TcpInfo {
        unacked: 10,
        ..info()
    }
}

/// A sender whose bytes outstanding fill the receiver's window.
fn rwnd_limited() -> TcpInfo {
    TcpInfo {
        unacked: 5,
        snd_wnd: 5 * MSS,
        ..info()
    }
}

/// A sender with nothing outstanding or waiting.
fn idle() -> TcpInfo {
    info()
}

fn sender(id: u32, first: TcpInfo) -> FlowStart {
    FlowStart {
        id,
        role: Role::Send,
        first: Some(first),
        bbr: false,
    }
}

fn receiver(id: u32, first: TcpInfo) -> FlowStart {
    FlowStart {
        id,
        role: Role::Receive,
        first: Some(first),
        bbr: false,
    }
}

fn ours(info: TcpInfo, moved: u64) -> Snapshot {
    Snapshot {
        info,
        app: Some(App {
            moved,
            writing: true,
            in_write: false,
        }),
        ..Snapshot::default()
    }
}

fn theirs(info: TcpInfo) -> Snapshot {
    Snapshot {
        info,
        ..Snapshot::default()
    }
}

const RUNNING: Status = Status {
    ended: false,
    cut_drain: false,
};
const ENDED: Status = Status {
    ended: true,
    cut_drain: false,
};

/// One wake-up at `now`: the monitor reads what it asks for from `read` (flow index →
/// snapshot), as a shell does.
fn wake(
    monitor: &mut Monitor,
    now: i64,
    status: &[Status],
    read: impl Fn(usize) -> Snapshot,
) -> Tick {
    let due = monitor.due(now, status);
    let mut snapshots = vec![None; status.len()];
    for r in due.reads() {
        snapshots[r.flow] = Some(read(r.flow));
    }
    monitor.tick(due, status, &snapshots)
}

/// Runs one flow that `read_at(now)` describes, waking exactly at each
/// [`Monitor::next_wakeup`] until `end_ms` (the flow ends there); returns every tick.
fn run_until(
    monitor: &mut Monitor,
    end_ms: i64,
    read_at: impl Fn(i64) -> Snapshot,
) -> Vec<(i64, Tick)> {
    let mut ticks = Vec::new();
    loop {
        let now = monitor.next_wakeup().min(end_ms * MS);
        let status = if now >= end_ms * MS { ENDED } else { RUNNING };
        let tick = wake(monitor, now, &[status], |_| read_at(now));
        let finished = tick.finished;
        ticks.push((now, tick));
        if finished {
            return ticks;
        }
    }
}

fn intervals(ticks: &[(i64, Tick)]) -> Vec<Interval> {
    ticks
        .iter()
        .flat_map(|(_, t)| t.intervals.iter().copied())
        .collect()
}

fn bounds_ms(intervals: &[Interval]) -> Vec<(i64, i64)> {
    intervals
        .iter()
        .map(|i| (i.start_us / MS, i.end_us / MS))
        .collect()
}

#[test]
fn samples_and_reports_fall_on_their_ticks() {
    let mut monitor = Monitor::new(config(1, 100, None), vec![sender(1, idle())], 0);
    assert_eq!(monitor.next_wakeup(), MS);
    let ticks = run_until(&mut monitor, 300, |_| ours(cwnd_limited(), 0));
    // Every millisecond a wake-up, the last one the flow's end at 300 ms.
    let times: Vec<i64> = ticks.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, (1..=300).map(|t| t * MS).collect::<Vec<_>>());
    let cut = intervals(&ticks);
    assert_eq!(bounds_ms(&cut), [(0, 100), (100, 200), (200, 300)]);
    assert_eq!(cut.iter().map(|i| i.index).collect::<Vec<_>>(), [0, 1, 2]);
    // The end is not sampled: it only cuts the last interval.
    let (watched, samples) = monitor.finish();
    assert_eq!(samples.len(), 299);
    assert_eq!(watched[0].samples, 299);
    assert!(samples
        .iter()
        .all(|s| s.host == Host::Client && s.flow == 1));
}

#[test]
fn an_overslept_tick_is_skipped_not_made_up_in_a_burst() {
    let mut monitor = Monitor::new(config(1, 10, None), vec![sender(1, idle())], 0);
    // Woken 25.5 ms late: one sample, one interval, and the next due on the grid.
    let tick = wake(&mut monitor, 26_500, &[RUNNING], |_| {
        ours(cwnd_limited(), 0)
    });
    assert_eq!(bounds_ms(&tick.intervals), [(0, 26)]);
    assert_eq!(monitor.next_wakeup(), 27 * MS);
    let tick = wake(&mut monitor, 27 * MS, &[RUNNING], |_| {
        ours(cwnd_limited(), 0)
    });
    assert!(tick.intervals.is_empty());
    // The report tick after 26.5 ms is 30 ms, not the 20 ms overslept.
    for t in 28..=30 {
        assert_eq!(monitor.next_wakeup(), t * MS);
        let tick = wake(&mut monitor, t * MS, &[RUNNING], |_| {
            ours(cwnd_limited(), 0)
        });
        assert_eq!(tick.intervals.is_empty(), t < 30, "{t}");
    }
    let (_, samples) = monitor.finish();
    assert_eq!(samples.len(), 5);
}

#[test]
fn a_wakeup_with_nothing_due_reads_nothing() {
    let mut monitor = Monitor::new(config(10, 100, None), vec![sender(1, idle())], 0);
    // A spurious wake-up (a park that returned early) between ticks.
    let due = monitor.due(5 * MS, &[RUNNING]);
    assert!(due.reads().is_empty() && !due.samples() && !due.cuts());
    let tick = monitor.tick(due, &[RUNNING], &[None]);
    assert_eq!(tick, Tick::default());
    assert_eq!(monitor.next_wakeup(), 10 * MS);
}

#[test]
fn the_deadline_cuts_an_interval_and_those_after_it_are_the_drain() {
    let mut monitor = Monitor::new(config(0, 100, Some(250)), vec![sender(1, idle())], 0);
    // A sender acknowledged at 1 MB per 100 ms, until it ends at 420 ms.
    let acked = |now: i64| TcpInfo {
        bytes_acked: (now / MS) as u64 * 10_000,
        ..cwnd_limited()
    };
    let mut wakeups = Vec::new();
    let ticks = run_until(&mut monitor, 420, |now| ours(acked(now), u64::MAX));
    for (t, _) in &ticks {
        wakeups.push(t / MS);
    }
    // Unsampled: it wakes for the reports, the deadline, and the end. A cut between
    // report ticks moves the next one to the tick after it.
    assert_eq!(wakeups, [100, 200, 250, 400, 420]);
    let cut = intervals(&ticks);
    assert_eq!(
        bounds_ms(&cut),
        [(0, 100), (100, 200), (200, 250), (250, 400), (400, 420)]
    );
    let drains: Vec<bool> = cut.iter().map(|i| i.drain).collect();
    assert_eq!(drains, [false, false, false, true, true]);
    let (watched, _) = monitor.finish();
    assert_eq!(
        watched[0].at_deadline,
        Some(DeadlineCount {
            bytes: 2_500_000,
            t_us: 250 * MS
        })
    );
}

#[test]
fn an_ended_flow_gets_its_last_interval_then_none() {
    let mut monitor = Monitor::new(
        config(10, 100, None),
        vec![sender(1, idle()), sender(2, idle())],
        0,
    );
    let read = |_| ours(cwnd_limited(), 0);
    for t in 1..=13 {
        wake(&mut monitor, t * 10 * MS, &[RUNNING, RUNNING], read);
    }
    // Flow 2 ends at 135 ms and the shell wakes the monitor: not read, nothing cut
    // while flow 1 runs on.
    let due = monitor.due(135 * MS, &[RUNNING, ENDED]);
    assert!(due.reads().is_empty() && !due.cuts());
    monitor.tick(due, &[RUNNING, ENDED], &[None, None]);
    // At the report tick its last interval is cut with the rest, from counters read
    // once it ended.
    let due = monitor.due(140 * MS, &[RUNNING, ENDED]);
    assert_eq!(due.reads().iter().map(|r| r.flow).collect::<Vec<_>>(), [0]);
    let tick = monitor.tick(due, &[RUNNING, ENDED], &[Some(read(0)), None]);
    assert!(tick.intervals.is_empty());
    let due = monitor.due(200 * MS, &[RUNNING, ENDED]);
    assert_eq!(
        due.reads().iter().map(|r| r.flow).collect::<Vec<_>>(),
        [0, 1]
    );
    let tick = monitor.tick(due, &[RUNNING, ENDED], &[Some(read(0)), Some(read(1))]);
    assert_eq!(bounds_ms(&tick.intervals), [(100, 200), (100, 200)]);
    // Flow 1 ends between report ticks: with all ended, its last interval is cut at
    // once; flow 2 is neither read nor cut again.
    let due = monitor.due(201 * MS, &[ENDED, ENDED]);
    assert_eq!(due.reads().iter().map(|r| r.flow).collect::<Vec<_>>(), [0]);
    let tick = monitor.tick(due, &[ENDED, ENDED], &[Some(read(0)), None]);
    assert!(tick.finished);
    assert_eq!(bounds_ms(&tick.intervals), [(200, 201)]);
    assert_eq!(tick.intervals[0].flow, 1);
    let (watched, _) = monitor.finish();
    // Flow 2 was sampled until it ended.
    assert_eq!(
        watched.iter().map(|w| w.samples).collect::<Vec<_>>(),
        [15, 13]
    );
}

#[test]
fn bytes_count_from_the_start_and_a_sender_never_past_what_it_wrote() {
    // The handshake and intro were acknowledged before t0: 600 bytes.
    let first = TcpInfo {
        bytes_acked: 600,
        ..idle()
    };
    let mut monitor = Monitor::new(config(0, 100, None), vec![sender(1, first)], 0);
    let tick = wake(&mut monitor, 100 * MS, &[RUNNING], |_| {
        ours(
            TcpInfo {
                bytes_acked: 600 + 50_000,
                ..cwnd_limited()
            },
            80_000,
        )
    });
    assert_eq!(tick.intervals[0].bytes, 50_000);
    // At the end, the FIN's sequence number is acknowledged too: the bytes written cap it.
    let tick = wake(&mut monitor, 150 * MS, &[ENDED], |_| {
        ours(
            TcpInfo {
                bytes_acked: 600 + 80_001,
                ..idle()
            },
            80_000,
        )
    });
    assert_eq!(tick.intervals[0].bytes, 30_000);
}

#[test]
fn retransmits_over_the_intervals_sum_to_the_final_count() {
    let first = TcpInfo {
        total_retrans: 3, // the setup's, before t0
        ..idle()
    };
    let mut monitor = Monitor::new(config(1, 50, Some(120)), vec![sender(1, first)], 0);
    let retrans_at = |now: i64| TcpInfo {
        total_retrans: 3 + (now / MS / 7) as u32,
        ..cwnd_limited()
    };
    let ticks = run_until(&mut monitor, 333, |now| ours(retrans_at(now), 0));
    let cut = intervals(&ticks);
    let summed: u64 = cut.iter().map(|i| i.retransmits).sum();
    assert_eq!(summed, 333 / 7);
    assert!(cut.iter().filter(|i| i.retransmits > 0).count() > 3);
    let (watched, _) = monitor.finish();
    assert_eq!(watched[0].retransmits, Some(333 / 7));
}

#[test]
fn a_senders_time_is_booked_to_what_each_sample_shows() {
    let mut cfg = config(1, 1_000, None);
    cfg.app_paced = false;
    let mut monitor = Monitor::new(cfg, vec![sender(1, idle())], 0);
    // 0–100 ms the receive window, 100–250 ms the congestion window, 250–300 ms an idle
    // application, 300–400 ms a writer blocked on its drained buffer. A sample books
    // the time since the previous one to what it shows.
    let ticks = run_until(&mut monitor, 400, |now| {
        let t = now / MS;
        let (info, in_write) = match t {
            ..=100 => (rwnd_limited(), false),
            101..=250 => (cwnd_limited(), false),
            251..=300 => (idle(), false),
            _ => (idle(), true),
        };
        Snapshot {
            info,
            mem: None,
            bbr: None,
            app: Some(App {
                moved: 0,
                writing: true,
                in_write,
            }),
        }
    });
    let cut = intervals(&ticks);
    assert_eq!(bounds_ms(&cut), [(0, 400)]);
    let shares = cut[0].limits;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(shares.rwnd, 0.25), "{shares:?}");
    assert!(close(shares.cwnd, 0.375), "{shares:?}");
    assert!(close(shares.app, 0.125), "{shares:?}");
    assert!(close(shares.sndbuf, 0.25), "{shares:?}");
    let sum = shares.rwnd + shares.cwnd + shares.app + shares.sndbuf + shares.pacing;
    assert!(close(sum, 1.0));
    let (watched, _) = monitor.finish();
    assert_eq!(watched[0].limits, Some(shares));
    assert_eq!(shares.dominant(), Limit::Cwnd);
}

#[test]
fn a_sender_that_stopped_writing_books_no_more_time() {
    let mut monitor = Monitor::new(config(10, 1_000, None), vec![sender(1, idle())], 0);
    let ticks = run_until(&mut monitor, 200, |now| {
        // After its last write at 100 ms it waits for the acknowledgements, with nothing
        // left to send: no limit describes that, least of all the application's.
        let writing = now <= 100 * MS;
        Snapshot {
            info: if writing { cwnd_limited() } else { idle() },
            app: Some(App {
                moved: 0,
                writing,
                in_write: false,
            }),
            ..Snapshot::default()
        }
    });
    assert_eq!(intervals(&ticks)[0].limits.cwnd, 1.0);
    let (watched, _) = monitor.finish();
    assert_eq!(watched[0].limits.unwrap().cwnd, 1.0);
}

#[test]
fn an_unsampled_flow_takes_the_kernels_chrono_shares() {
    let chrono = |busy: u64, rwnd: u64| TcpInfo {
        busy_time: busy,
        rwnd_limited: rwnd,
        ..idle()
    };
    let mut monitor = Monitor::new(config(0, 100, None), vec![sender(1, chrono(0, 0))], 0);
    // Of 100 ms, 80 busy of which 20 held by the receive window.
    let tick = wake(&mut monitor, 100 * MS, &[RUNNING], |_| {
        ours(chrono(80_000, 20_000), 0)
    });
    let shares = tick.intervals[0].limits;
    assert_eq!(
        shares,
        limits::chrono_shares(&chrono(0, 0), &chrono(80_000, 20_000), 100_000)
    );
    assert!((shares.rwnd - 0.2).abs() < 1e-9 && (shares.cwnd - 0.6).abs() < 1e-9);
    // Nothing booked: the flow's limits are left to the kernel's counters.
    let (watched, samples) = monitor.finish();
    assert_eq!(watched[0].limits, None);
    assert!(samples.is_empty());
}

#[test]
fn bbr_is_read_and_kept_every_10_ms() {
    let mut monitor = Monitor::new(
        config(1, 1_000, None),
        vec![FlowStart {
            bbr: true,
            ..sender(1, idle())
        }],
        0,
    );
    let mut asked = Vec::new();
    for t in 1..=50 {
        let due = monitor.due(t * MS, &[RUNNING]);
        if due.reads()[0].bbr {
            asked.push(t);
        }
        // A socket read that always carries BBR's model, as sock_diag does.
        let snapshot = Snapshot {
            bbr: Some(BbrInfo {
                bw: t as u64,
                ..BbrInfo::default()
            }),
            ..ours(cwnd_limited(), 0)
        };
        monitor.tick(due, &[RUNNING], &[Some(snapshot)]);
    }
    assert_eq!(asked, [10, 20, 30, 40, 50]);
    let (_, samples) = monitor.finish();
    let kept: Vec<i64> = samples
        .iter()
        .filter(|s| s.bbr.is_some())
        .map(|s| s.t_us / MS)
        .collect();
    assert_eq!(kept, [10, 20, 30, 40, 50]);
    assert_eq!(samples[9].bbr.unwrap().bw, 10);
}

#[test]
fn the_pacing_target_sums_the_senders_window_rates() {
    let mut cfg = config(1, 1_000, None);
    cfg.pacing = Some(PaceRtt::Smoothed);
    let flows = vec![sender(1, idle()), sender(2, idle()), receiver(3, idle())];
    let mut monitor = Monitor::new(cfg, flows, 0);
    // 10 × 1000 B per 20 ms = 4 Mbit/s; 20 × 1000 B per 10 ms = 16 Mbit/s.
    let windows = [(10, 20_000), (20, 10_000), (1_000, 1_000)];
    let tick = wake(&mut monitor, MS, &[RUNNING; 3], |i| {
        let (snd_cwnd, rtt) = windows[i];
        ours(
            TcpInfo {
                snd_cwnd,
                rtt,
                ..idle()
            },
            0,
        )
    });
    assert_eq!(tick.window_rate_bps, Some(20_000_000));
    // Without RTTs yet there is no target.
    let tick = wake(&mut monitor, 2 * MS, &[RUNNING; 3], |_| {
        ours(TcpInfo { rtt: 0, ..idle() }, 0)
    });
    assert_eq!(tick.window_rate_bps, None);
}

#[test]
fn a_watched_socket_without_our_flags_still_gets_bytes_and_limits() {
    let first_send = TcpInfo {
        bytes_acked: 1,
        ..idle()
    };
    let first_receive = TcpInfo {
        bytes_received: 1,
        ..idle()
    };
    let mut monitor = Monitor::new(
        config(10, 100, None),
        vec![sender(7, first_send), receiver(8, first_receive)],
        0,
    );
    let mut cut = Vec::new();
    for t in 1..=10 {
        let now = t * 10 * MS;
        let tick = wake(&mut monitor, now, &[RUNNING; 2], |i| {
            let n = (now / MS) as u64 * 1_000;
            theirs(match i {
                0 if t <= 5 => TcpInfo {
                    bytes_acked: 1 + n,
                    ..rwnd_limited()
                },
                0 => TcpInfo {
                    bytes_acked: 1 + n,
                    ..cwnd_limited()
                },
                _ => TcpInfo {
                    bytes_received: 1 + n,
                    ..idle()
                },
            })
        });
        cut.extend(tick.intervals);
    }
    assert_eq!(cut.len(), 2);
    assert_eq!((cut[0].flow, cut[0].bytes), (7, 100_000));
    assert_eq!((cut[1].flow, cut[1].bytes), (8, 100_000));
    assert_eq!(cut[0].limits.rwnd, 0.5);
    assert_eq!(cut[0].limits.cwnd, 0.5);
}

#[test]
fn a_drain_cut_aborts_first_and_resets_only_where_the_abort_failed() {
    let cut_drain = Status {
        ended: true,
        cut_drain: true,
    };
    for abort_works in [true, false] {
        let mut monitor = Monitor::new(
            config(1, 1_000, Some(100)),
            vec![sender(1, idle()), sender(2, idle())],
            0,
        );
        for t in 1..=150 {
            wake(&mut monitor, t * MS, &[RUNNING; 2], |_| {
                ours(cwnd_limited(), 0)
            });
        }
        // Flow 1's sender stopped at the drain limit: the cut comes at once, not at
        // the report tick, and asks for the connection's end before its last read.
        let status = [cut_drain, RUNNING];
        let due = monitor.due(150 * MS + 300, &status);
        assert!(due.cuts());
        assert_eq!(
            due.reads(),
            [
                Read {
                    flow: 0,
                    bbr: false,
                    abort: true
                },
                Read {
                    flow: 1,
                    bbr: false,
                    abort: false
                }
            ]
        );
        let after = [
            Status {
                cut_drain: !abort_works,
                ..cut_drain
            },
            RUNNING,
        ];
        let snapshots = [Some(ours(idle(), 0)), Some(ours(cwnd_limited(), 0))];
        let tick = monitor.tick(due, &after, &snapshots);
        assert_eq!(tick.intervals.len(), 2);
        assert!(tick.intervals.iter().all(|i| i.drain));
        let expected: &[usize] = if abort_works { &[] } else { &[0] };
        assert_eq!(tick.resets, expected);
    }
}

#[test]
fn the_preallocated_samples_fit_a_timed_test() {
    let params = TestParams {
        end: TestEnd::Duration { us: 1_000_000 },
        sample_interval_us: 1_000,
        report_interval_us: 100_000,
        ..TestParams::default()
    };
    let cfg = Config::of_test(&params, Host::Server, 5, 2, None);
    assert_eq!(cfg.reserved_samples, 2 * 1_100);
    assert_eq!(cfg.deadline_us, Some(1_000_005));
    let mut monitor = Monitor::new(cfg, vec![sender(1, idle()), sender(2, idle())], 5);
    let reserved = monitor.samples.capacity();
    assert!(reserved >= 2_200);
    for t in 1..=1_050 {
        wake(&mut monitor, 5 + t * MS, &[RUNNING; 2], |_| {
            ours(cwnd_limited(), 0)
        });
    }
    assert_eq!(monitor.samples.len(), 2_100);
    assert_eq!(monitor.samples.capacity(), reserved);
}

#[test]
fn stored_samples_replayed_give_the_same_intervals() {
    let sock = |now: i64| {
        let t = now / MS;
        theirs(TcpInfo {
            bytes_acked: t as u64 * 3_000,
            total_retrans: (t / 40) as u32,
            ..if t % 30 < 10 {
                rwnd_limited()
            } else {
                cwnd_limited()
            }
        })
    };
    let mut live = Monitor::new(config(5, 50, Some(180)), vec![sender(4, idle())], 0);
    let live_cut = intervals(&run_until(&mut live, 200, sock));
    let (live_watched, samples) = live.finish();
    assert_eq!(samples.len(), 39);
    // The same samples, read back from a store, at their own times; then the read at
    // the end, where the flow's final counters were taken.
    let mut replay = Monitor::new(config(5, 50, Some(180)), vec![sender(4, idle())], 0);
    let mut replay_cut = Vec::new();
    for sample in &samples {
        // Report ticks and the deadline fall on samples: each wake-up has one.
        assert_eq!(replay.next_wakeup(), sample.t_us);
        let snapshot = Snapshot::of_sample(sample);
        replay_cut.extend(wake(&mut replay, sample.t_us, &[RUNNING], |_| snapshot).intervals);
    }
    let tick = wake(&mut replay, 200 * MS, &[ENDED], |_| sock(200 * MS));
    replay_cut.extend(tick.intervals);
    assert_eq!(replay_cut, live_cut);
    let (replay_watched, replayed) = replay.finish();
    assert_eq!(replay_watched, live_watched);
    assert_eq!(replayed, samples);
}

/// A monitor of connections that come and go, sampled when their shell likes: none at
/// the start, its samples its shell's own.
fn watcher() -> Monitor {
    let config = Config {
        keep_samples: true,
        ..config(10, 100, None)
    };
    Monitor::new(config, Vec::new(), 0)
}

fn moved(acked: u64, received: u64, retransmits: u32) -> TcpInfo {
    TcpInfo {
        bytes_acked: acked,
        bytes_received: received,
        total_retrans: retransmits,
        ..cwnd_limited()
    }
}

#[test]
fn a_flow_added_while_running_starts_its_intervals_where_it_joins() {
    let mut monitor = watcher();
    let flow = monitor.add_flow(sender(7, moved(1_000, 0, 0)), 30 * MS);
    assert_eq!(flow, 0);
    monitor.sample_now(flow, 30 * MS, &theirs(moved(1_000, 0, 0)));
    monitor.sample_now(flow, 50 * MS, &theirs(moved(6_000, 0, 0)));
    assert!(!monitor.report_due(99 * MS));
    assert!(monitor.cut_sampled(99 * MS).is_empty());
    let cut = monitor.cut_sampled(100 * MS);
    // Cut at its latest sample, from where it joined; its bytes since then only.
    assert_eq!(bounds_ms(&cut), [(30, 50)]);
    assert_eq!((cut[0].flow, cut[0].acked_bytes), (7, 5_000));
    assert_eq!(monitor.next_report(), 200 * MS);
    // A second one joins later: the first's next interval starts at its last cut.
    let late = monitor.add_flow(sender(8, moved(0, 0, 0)), 150 * MS);
    monitor.sample_now(flow, 190 * MS, &theirs(moved(9_000, 0, 0)));
    monitor.sample_now(late, 160 * MS, &theirs(moved(2_000, 0, 0)));
    let cut = monitor.cut_sampled(200 * MS);
    assert_eq!(bounds_ms(&cut), [(50, 190), (150, 160)]);
    assert_eq!(
        cut.iter().map(|i| i.acked_bytes).collect::<Vec<_>>(),
        [3_000, 2_000]
    );
}

#[test]
fn samples_off_the_schedule_book_their_time_and_are_kept() {
    let mut monitor = watcher();
    let flow = monitor.add_flow(sender(1, idle()), 0);
    monitor.sample_now(flow, 3 * MS, &theirs(cwnd_limited()));
    monitor.sample_now(flow, 4_500, &theirs(rwnd_limited()));
    // A sample older than the latest (a lookup answered before a dump read later).
    monitor.sample_now(flow, 4 * MS, &theirs(cwnd_limited()));
    // The schedule does not move for them.
    assert_eq!(monitor.next_wakeup(), 10 * MS);
    let watched = monitor.watched(flow);
    assert_eq!((watched.samples, watched.limited_us), (2, 4_500));
    let limits = watched.limits.unwrap();
    assert!((limits.cwnd - 3.0 / 4.5).abs() < 1e-9, "{limits:?}");
    assert!((limits.rwnd - 1.5 / 4.5).abs() < 1e-9, "{limits:?}");
    let (_, samples) = monitor.finish();
    assert_eq!(
        samples.iter().map(|s| s.t_us).collect::<Vec<_>>(),
        [3 * MS, 4_500]
    );
}

#[test]
fn a_flow_ended_at_any_time_has_its_last_interval_from_its_final_sample() {
    let mut monitor = watcher();
    let flow = monitor.add_flow(sender(1, moved(0, 0, 0)), 0);
    monitor.sample_now(flow, 2 * MS, &theirs(moved(4_000, 100, 0)));
    monitor.sample_now(flow, 5 * MS, &theirs(moved(10_000, 300, 2)));
    let last = monitor.end_flow(flow).expect("time passed since the start");
    assert_eq!(bounds_ms(&[last]), [(0, 5)]);
    // Both directions' counts, whatever its role.
    assert_eq!(
        (last.acked_bytes, last.received_bytes, last.retransmits),
        (10_000, 300, 2)
    );
    assert_eq!(last.limits.dominant(), Limit::Cwnd);
    // Nothing after its end: no sample, no interval at the report tick.
    monitor.sample_now(flow, 7 * MS, &theirs(moved(20_000, 300, 2)));
    assert!(monitor.cut_sampled(100 * MS).is_empty());
    assert_eq!(monitor.watched(flow).samples, 2);
    assert_eq!(monitor.watched(flow).retransmits, Some(2));
    // One that ends where its last interval was cut has no interval more, and is over.
    let other = monitor.add_flow(sender(2, moved(0, 0, 0)), 110 * MS);
    monitor.sample_now(other, 120 * MS, &theirs(moved(1, 0, 0)));
    assert_eq!(monitor.cut_sampled(200 * MS).len(), 1);
    assert_eq!(monitor.end_flow(other), None);
    monitor.sample_now(other, 250 * MS, &theirs(moved(2, 0, 0)));
    assert!(monitor.cut_sampled(300 * MS).is_empty());
}

#[test]
fn a_report_tick_before_the_latest_sample_books_no_time_twice() {
    let mut monitor = watcher();
    let flow = monitor.add_flow(sender(1, idle()), 0);
    monitor.sample_now(flow, 90 * MS, &theirs(cwnd_limited()));
    monitor.sample_now(flow, 110 * MS, &theirs(cwnd_limited()));
    // The tick at 100 ms seen late: cut there, with the 110 ms sample's counters.
    let cut = monitor.cut_sampled(115 * MS);
    assert_eq!(bounds_ms(&cut), [(0, 100)]);
    monitor.sample_now(flow, 130 * MS, &theirs(cwnd_limited()));
    assert_eq!(monitor.watched(flow).limited_us, 130 * MS as u64);
    let last = monitor.end_flow(flow).unwrap();
    assert_eq!(bounds_ms(&[last]), [(100, 130)]);
}

#[test]
fn an_ended_flow_removed_gives_what_was_learned_and_the_others_keep_their_indices() {
    let mut monitor = watcher();
    let first = monitor.add_flow(sender(1, moved(0, 0, 0)), 0);
    let last = monitor.add_flow(sender(2, moved(0, 0, 0)), 0);
    monitor.sample_now(first, 5 * MS, &theirs(moved(2_000, 0, 0)));
    monitor.sample_now(last, 5 * MS, &theirs(moved(1_000, 0, 1)));
    monitor.end_flow(last).unwrap();
    let learned = monitor.remove_flow(last);
    assert_eq!((learned.samples, learned.limited_us), (1, 5_000));
    assert_eq!(learned.retransmits, Some(1));
    // A flow added after is not given the removed one's index.
    let third = monitor.add_flow(sender(3, moved(0, 0, 0)), 10 * MS);
    assert_eq!(third, 2);
    monitor.sample_now(first, 20 * MS, &theirs(moved(5_000, 0, 0)));
    monitor.sample_now(third, 20 * MS, &theirs(moved(1_000, 0, 0)));
    let cut = monitor.cut_sampled(100 * MS);
    assert_eq!(cut.iter().map(|i| i.flow).collect::<Vec<_>>(), [1, 3]);
    assert_eq!(cut[0].acked_bytes, 5_000);
    let (watched, _) = monitor.finish();
    assert_eq!(watched.len(), 2);
}

#[test]
#[should_panic(expected = "only an ended flow is removed")]
fn an_open_flow_is_not_removed() {
    let mut monitor = watcher();
    let flow = monitor.add_flow(sender(1, idle()), 0);
    monitor.remove_flow(flow);
}

/// The samples a flow's own thread takes stand in for the sample ticks' reads: a tick
/// reads only a flow whose last self-sample is an interval old or older, but still reads
/// every flow where a report interval is cut, and a BBR sender for its model; no sample
/// is kept twice.
#[test]
fn self_samples_leave_the_sample_ticks_nothing_to_read_while_they_come() {
    let mut monitor = Monitor::new(
        config(1, 10, None),
        vec![
            FlowStart {
                bbr: true,
                ..sender(0, idle())
            },
            sender(1, idle()),
        ],
        0,
    );
    let status = [RUNNING, RUNNING];
    let mut reads: Vec<(i64, usize, bool)> = Vec::new();
    for t in 1..=30 {
        let now = t * MS;
        // Flow 1's thread samples itself 0.4 ms before each tick up to 15 ms, then
        // blocks in a write; flow 0's every tick.
        if t <= 15 {
            monitor.self_sampled(1, now - 400, &ours(cwnd_limited(), 0));
        }
        monitor.self_sampled(0, now - 400, &ours(cwnd_limited(), 0));
        let due = monitor.due(now, &status);
        let mut snapshots = vec![None; 2];
        for r in due.reads() {
            reads.push((t, r.flow, r.bbr));
            snapshots[r.flow] = Some(Snapshot {
                bbr: r.bbr.then(BbrInfo::default),
                ..ours(cwnd_limited(), 0)
            });
        }
        monitor.tick(due, &status, &snapshots);
    }
    // Flow 0: at the report cuts (10, 20, 30 ms), with BBR's model due at each.
    let flow0: Vec<(i64, bool)> = reads
        .iter()
        .filter(|r| r.1 == 0)
        .map(|r| (r.0, r.2))
        .collect();
    assert_eq!(flow0, [(10, true), (20, true), (30, true)]);
    // Flow 1: at the cut of 10 ms, then at every tick once its samples stopped.
    let flow1: Vec<i64> = reads.iter().filter(|r| r.1 == 1).map(|r| r.0).collect();
    assert_eq!(flow1, [10].into_iter().chain(16..=30).collect::<Vec<_>>());
    let (watched, samples) = monitor.finish();
    // One sample a millisecond each: the self-samples, the reads that took none's place,
    // and the reads with BBR's model; a read at a cut just after a self-sample keeps
    // none.
    let of = |flow: u32| samples.iter().filter(|s| s.flow == flow).count();
    assert_eq!(of(0), 30 + 3);
    assert_eq!(of(1), 15 + 15);
    let times: Vec<i64> = samples
        .iter()
        .filter(|s| s.flow == 1)
        .map(|s| s.t_us)
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    // Every millisecond booked once, to the window that held the sender.
    assert_eq!(watched[1].limited_us, 30 * MS as u64);
    assert_eq!(watched[1].limits.unwrap().dominant(), Limit::Cwnd);
}

/// A self-sample older than a read the monitor took is nothing new, and one without
/// BBR's model leaves the model due at the next tick.
#[test]
fn a_late_self_sample_is_dropped_and_one_without_bbr_leaves_it_due() {
    let mut monitor = Monitor::new(
        config(1, 1_000, None),
        vec![FlowStart {
            bbr: true,
            ..sender(0, idle())
        }],
        0,
    );
    monitor.self_sampled(0, 10 * MS, &ours(cwnd_limited(), 0));
    let due = monitor.due(11 * MS, &[RUNNING]);
    assert!(due.reads()[0].bbr, "{due:?}");
    let snapshot = Snapshot {
        bbr: Some(BbrInfo::default()),
        ..ours(cwnd_limited(), 0)
    };
    monitor.tick(due, &[RUNNING], &[Some(snapshot)]);
    // Posted before the read, handed in after it.
    monitor.self_sampled(0, 10_900, &ours(cwnd_limited(), 0));
    let (_, samples) = monitor.finish();
    let times: Vec<(i64, bool)> = samples.iter().map(|s| (s.t_us, s.bbr.is_some())).collect();
    assert_eq!(times, [(10 * MS, false), (11 * MS, true)]);
}

/// Driven as a shell drives it, waking at each `next_wakeup`: while its thread samples a
/// sender every millisecond, the monitor wakes only to read it every
/// [`BOOK_EVERY_US`], and books the sender's time at those reads alone (here the
/// self-samples see an idle writer, the reads a full send buffer); once the thread's
/// samples stop, its next booking read finds the flow unsampled, and it wakes at every
/// tick from then on.
#[test]
fn self_sampled_flows_are_booked_at_the_monitor_s_reads_which_come_every_10_ms() {
    let mut monitor = Monitor::new(config(1, 1_000, None), vec![sender(0, idle())], 0);
    let full_buffer = Snapshot {
        mem: Some(SkMemInfo {
            sndbuf: 8_192,
            wmem_queued: 8_192,
            ..SkMemInfo::default()
        }),
        ..ours(
            TcpInfo {
                unacked: 2,
                ..info()
            },
            0,
        )
    };
    let (mut wakes, mut reads) = (Vec::new(), Vec::new());
    // The flow's thread samples itself at every half millisecond past a whole one, up
    // to 50 ms.
    let mut posted = 0;
    while monitor.next_wakeup() <= 70 * MS {
        let now = monitor.next_wakeup();
        while posted * MS + 500 < now.min(50 * MS) {
            monitor.self_sampled(0, posted * MS + 500, &ours(idle(), 0));
            posted += 1;
        }
        wakes.push(now / MS);
        let due = monitor.due(now, &[RUNNING]);
        let snapshots: Vec<Option<Snapshot>> =
            vec![(!due.reads().is_empty()).then_some(full_buffer)];
        if snapshots[0].is_some() {
            reads.push(now / MS);
        }
        monitor.tick(due, &[RUNNING], &snapshots);
    }
    let mut want: Vec<i64> = vec![1, 10, 20, 30, 40, 50];
    want.extend(60..=70);
    assert_eq!(wakes, want);
    assert_eq!(reads, want[1..]);
    let (watched, samples) = monitor.finish();
    // The reads just after a self-sample only book: one record a millisecond.
    assert_eq!(samples.len(), 50 + 11);
    // Every millisecond booked once, all to the send buffer the reads saw.
    assert_eq!(watched[0].limited_us, 70 * MS as u64);
    assert_eq!(watched[0].limits.unwrap().dominant(), Limit::Sndbuf);
    assert_eq!(watched[0].limits.unwrap().sndbuf, 1.0);
}
