//! Round-trip probes (`--probe`): the datagram, each probe's round trip and one-way
//! delays from its four timestamps, and the latency figures of a run. Pure: the
//! traffic crate reads the clocks and moves the datagrams.
//!
//! A probe carries four times: t1 the client's send, t2 the server's receive, t3 the
//! server's send (server clock), t4 the client's receive. With the server's clock
//! `server = client + offset`, the round trip is (t4 − t1) − (t3 − t2), the way up
//! t2 − offset − t1 and the way down t4 − (t3 − offset): the two add up to the round
//! trip whatever the offset, and each is exact when both ends read one clock.

use tcplab_analysis::stats::quantiles;
use tcplab_netsim::probe_datagram::Probe;
use tcplab_record::units::format_duration_us;
use tcplab_record::{LatencySummary, ProbeParams, ProbeRecord, TestEnd, TestParams};

/// The shortest interval between probes: 1000 a second, 44 bytes each.
pub const MIN_INTERVAL_US: u64 = 1_000;
/// The longest interval, and the longest idle phase (the server waits for Go that long).
pub const MAX_INTERVAL_US: u64 = 10_000_000;
pub const MAX_IDLE_US: u64 = 30_000_000;
/// The idle phase when none is given.
pub const DEFAULT_IDLE_US: u64 = 2_000_000;

/// What a client may ask of probes, checked by the client and again by the server.
pub fn check(params: &ProbeParams) -> Result<(), String> {
    if !(MIN_INTERVAL_US..=MAX_INTERVAL_US).contains(&params.interval_us) {
        return Err(format!(
            "probe interval {} is outside {}..={}",
            format_duration_us(params.interval_us),
            format_duration_us(MIN_INTERVAL_US),
            format_duration_us(MAX_INTERVAL_US)
        ));
    }
    if params.idle_us > MAX_IDLE_US {
        return Err(format!(
            "idle probing of {} exceeds {}",
            format_duration_us(params.idle_us),
            format_duration_us(MAX_IDLE_US)
        ));
    }
    Ok(())
}

/// A test of no streams is probes alone (`protocol = "probe"`, `-P 0`): it needs probes
/// and a duration, and carries nothing else. Checked by the client and the server.
pub fn check_alone(params: &TestParams) -> Result<(), String> {
    if params.streams > 0 {
        return Ok(());
    }
    let timed = matches!(params.end, TestEnd::Duration { .. });
    if params.probe.is_none() || !timed || params.udp.is_some() || params.transactions.is_some() {
        return Err(
            "a test of 0 streams is probes alone: it needs probes and a duration, and no UDP or transactions"
                .into(),
        );
    }
    Ok(())
}

/// A probe as the client saw it leave: its schedule and send time, monotonic µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    pub seq: u64,
    pub scheduled_us: i64,
    pub sent_us: i64,
}

/// An answer as the client read it: the server's times and the client's receive time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub probe: Probe,
    pub client_recv_us: i64,
}

/// Each sent probe with its answer, if one came: times relative to `t0_us`, delays with
/// the server's clock `offset_us` ahead of the client's. A duplicate answer counts once;
/// an answer to nothing sent is ignored.
pub fn records(sent: &[Sent], answers: &[Answer], t0_us: i64, offset_us: i64) -> Vec<ProbeRecord> {
    let mut records: Vec<ProbeRecord> = sent
        .iter()
        .map(|s| ProbeRecord {
            seq: s.seq,
            scheduled_us: s.scheduled_us - t0_us,
            sent_us: s.sent_us - t0_us,
            ..ProbeRecord::default()
        })
        .collect();
    records.sort_by_key(|r| r.seq);
    for a in answers {
        let Ok(k) = records.binary_search_by_key(&a.probe.seq, |r| r.seq) else {
            continue;
        };
        let r = &mut records[k];
        if r.rtt_us.is_some() {
            continue;
        }
        let p = &a.probe;
        let held = p.server_send_us - p.server_recv_us;
        r.rtt_us = Some(a.client_recv_us - p.client_send_us - held);
        r.up_owd_us = Some(p.server_recv_us - offset_us - p.client_send_us);
        r.down_owd_us = Some(a.client_recv_us - (p.server_send_us - offset_us));
    }
    records
}

/// The latency figures of a run's probes. Probes sent before t0 are the idle phase,
/// those from t0 to `load_end_us` (relative to t0) the loaded one. `echoed`: the
/// probes the server answered, by its count; the answers that arrived bound it from
/// below (an answer the server sent after it counted).
pub fn latency(
    probes: &[ProbeRecord],
    interval_us: u64,
    load_end_us: i64,
    echoed: u64,
    owd_exact: bool,
) -> LatencySummary {
    let answered = probes.iter().filter(|p| p.rtt_us.is_some()).count() as u64;
    let sent = probes.len() as u64;
    let echoed = echoed.max(answered).min(sent);
    let phase = |idle: bool| {
        probes
            .iter()
            .filter(move |p| (p.sent_us < 0) == idle && p.sent_us <= load_end_us)
    };
    let some_quantiles = |mut v: Vec<i64>| (!v.is_empty()).then(|| quantiles(&mut v));
    let loaded_rtts: Vec<i64> = phase(false).filter_map(|p| p.rtt_us).collect();
    LatencySummary {
        interval_us,
        sent,
        idle_rtt_us: some_quantiles(phase(true).filter_map(|p| p.rtt_us).collect()),
        rpm: rpm(&loaded_rtts),
        loaded_rtt_us: some_quantiles(loaded_rtts),
        up_owd_us: some_quantiles(phase(false).filter_map(|p| p.up_owd_us).collect()),
        down_owd_us: some_quantiles(phase(false).filter_map(|p| p.down_owd_us).collect()),
        owd_exact,
        lost_up: sent - echoed,
        lost_down: echoed - answered,
        send_error_us: quantiles(
            &mut probes
                .iter()
                .map(|p| p.sent_us - p.scheduled_us)
                .collect::<Vec<_>>(),
        ),
    }
}

/// Round trips per minute: 60 s over the trimmed mean of the round trips (µs), the
/// slowest tenth left out, as the responsiveness draft trims its samples.
pub fn rpm(rtts_us: &[i64]) -> Option<f64> {
    let mut v = rtts_us.to_vec();
    v.sort_unstable();
    let kept = &v[..(v.len() as f64 * 0.9).ceil() as usize];
    if kept.is_empty() {
        return None;
    }
    let mean = kept.iter().map(|&x| x as f64).sum::<f64>() / kept.len() as f64;
    (mean > 0.0).then(|| 60e6 / mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(seq: u64, t1: i64, t2: i64, t3: i64) -> Probe {
        Probe {
            token: 7,
            seq,
            client_send_us: t1,
            server_recv_us: t2,
            server_send_us: t3,
        }
    }

    #[test]
    fn probes_alone_need_probes_and_a_duration() {
        let alone = TestParams {
            streams: 0,
            probe: Some(ProbeParams {
                interval_us: 10_000,
                idle_us: 0,
            }),
            ..TestParams::default()
        };
        assert_eq!(check_alone(&alone), Ok(()));
        assert_eq!(check_alone(&TestParams::default()), Ok(()));
        let refused = |change: fn(&mut TestParams)| {
            let mut p = alone.clone();
            change(&mut p);
            assert!(check_alone(&p).unwrap_err().contains("probes alone"));
        };
        refused(|p| p.probe = None);
        refused(|p| p.end = TestEnd::Bytes { bytes: 1 });
    }

    #[test]
    fn delays_come_from_the_four_times_and_the_offset() {
        // The server's clock is 1 s ahead; 3 ms up, 0.1 ms in the server, 5 ms down.
        let offset = 1_000_000;
        let sent = [Sent {
            seq: 0,
            scheduled_us: 990,
            sent_us: 1_000,
        }];
        let answers = [Answer {
            probe: probe(0, 1_000, 1_000 + 3_000 + offset, 1_000 + 3_100 + offset),
            client_recv_us: 1_000 + 3_100 + 5_000,
        }];
        let r = records(&sent, &answers, 500, offset)[0];
        assert_eq!((r.scheduled_us, r.sent_us), (490, 500));
        assert_eq!(r.rtt_us, Some(8_000));
        assert_eq!((r.up_owd_us, r.down_owd_us), (Some(3_000), Some(5_000)));
        // A wrong offset moves delay from one way to the other; the sum stays.
        let r = records(&sent, &answers, 500, offset + 400)[0];
        assert_eq!((r.up_owd_us, r.down_owd_us), (Some(2_600), Some(5_400)));
        assert_eq!(r.rtt_us, Some(8_000));
    }

    #[test]
    fn duplicates_and_strangers_do_not_count() {
        let sent: Vec<Sent> = (0..3)
            .map(|seq| Sent {
                seq,
                scheduled_us: seq as i64 * 10,
                sent_us: seq as i64 * 10,
            })
            .collect();
        let answer = |seq, recv| Answer {
            probe: probe(
                seq,
                seq as i64 * 10,
                seq as i64 * 10 + 1,
                seq as i64 * 10 + 1,
            ),
            client_recv_us: recv,
        };
        let answers = [answer(1, 12), answer(1, 50), answer(9, 99)];
        let r = records(&sent, &answers, 0, 0);
        assert_eq!(
            r.iter().map(|r| r.rtt_us).collect::<Vec<_>>(),
            [None, Some(2), None]
        );
    }

    fn timed(sent_us: i64, rtt_us: Option<i64>) -> ProbeRecord {
        ProbeRecord {
            seq: 0,
            scheduled_us: sent_us - 3,
            sent_us,
            rtt_us,
            up_owd_us: rtt_us.map(|r| r / 4),
            down_owd_us: rtt_us.map(|r| r - r / 4),
        }
    }

    #[test]
    fn idle_and_loaded_phases_split_at_t0_and_end_with_the_load() {
        let mut probes = vec![
            timed(-20, Some(100)),
            timed(-10, Some(100)),
            timed(-5, None),
        ];
        probes.extend((0..10).map(|k| timed(k * 10, Some(1_000 + k * 100))));
        // After the load's end: neither phase.
        probes.push(timed(200, Some(9_999_999)));
        probes.push(timed(50, None));
        let s = latency(&probes, 10, 150, 14, true);
        assert_eq!(s.sent, 15);
        assert_eq!(s.idle_rtt_us.unwrap().p50, 100.0);
        let loaded = s.loaded_rtt_us.unwrap();
        assert_eq!((loaded.min, loaded.max), (1_000.0, 1_900.0));
        assert_eq!(loaded.p90, 1_800.0);
        // Up a quarter, down the rest.
        assert_eq!(s.up_owd_us.unwrap().min, 250.0);
        assert_eq!(s.down_owd_us.unwrap().min, 750.0);
        // 15 sent, 14 reached the server, 13 answers came back.
        assert_eq!((s.lost_up, s.lost_down), (1, 1));
        assert_eq!(s.send_error_us.p50, 3.0);
        // 90 % of 10 round trips kept: 1000..1800, mean 1400 µs.
        assert_eq!(s.rpm, Some(60e6 / 1_400.0));
    }

    #[test]
    fn a_server_count_below_the_answers_is_raised_to_them() {
        let probes = [timed(0, Some(10)), timed(10, Some(10)), timed(20, None)];
        let s = latency(&probes, 10, 100, 1, false);
        assert_eq!((s.lost_up, s.lost_down), (1, 0));
        assert!(!s.owd_exact);
    }

    #[test]
    fn no_answers_no_figures() {
        let s = latency(&[timed(-1, None), timed(1, None)], 10, 100, 0, true);
        assert_eq!((s.idle_rtt_us, s.loaded_rtt_us, s.rpm), (None, None, None));
        assert_eq!((s.lost_up, s.lost_down), (2, 0));
        assert_eq!(rpm(&[]), None);
    }

    #[test]
    fn probe_intervals_and_idle_phases_have_bounds() {
        let ok = ProbeParams {
            interval_us: MIN_INTERVAL_US,
            idle_us: MAX_IDLE_US,
        };
        assert_eq!(check(&ok), Ok(()));
        let fast = ProbeParams {
            interval_us: 999,
            ..ok
        };
        assert_eq!(
            check(&fast).unwrap_err(),
            "probe interval 999 µs is outside 1.00 ms..=10.0 s"
        );
        let long = ProbeParams {
            idle_us: MAX_IDLE_US + 1,
            ..ok
        };
        assert!(check(&long).unwrap_err().starts_with("idle probing of"));
    }

    #[test]
    fn rpm_of_one_round_trip_time() {
        // 100 ms every time: 600 round trips a minute.
        assert_eq!(rpm(&[100_000; 20]), Some(600.0));
        // The slowest tenth does not count.
        let mut v = vec![100_000; 9];
        v.push(10_000_000);
        assert_eq!(rpm(&v), Some(600.0));
    }
}
