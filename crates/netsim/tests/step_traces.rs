//! Delay and loss traces in virtual time: each packet takes the delay the trace gives at
//! the time it leaves the bottleneck (counted from the test's start, repeating), order
//! kept unless the trace says `reorder`; a loss trace drops with its probability then.

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tcplab_netsim::link::{DropReason, Link, LinkTraces, StepTrace};
use tcplab_netsim::path::{Direction, PathSpec};

/// A delay that falls by 9 ms within 1 ms, faster than packets are spaced, and rises back.
const DELAYS: &str = "0 10ms\n300ms 1ms\n301ms 30ms\n600ms 5ms\n1s\n";

/// The up link of `spec`, its delay and loss traces given as text.
fn traced_link(spec: &str, delays: Option<&str>, losses: Option<&str>) -> Link<u64> {
    let path: PathSpec = spec.parse().unwrap_or_else(|e| panic!("{e}"));
    let traces = LinkTraces {
        delay: delays.map(|t| StepTrace::parse_delays(t).unwrap()),
        loss: losses.map(|t| StepTrace::parse_losses(t).unwrap()),
        ..LinkTraces::default()
    };
    Link::new(&path.timeline(Direction::Up), 0, 1500, 7, traces).expect("link")
}

/// Random arrivals over `span` ns from `from`, sorted.
fn arrivals(n: usize, from: u64, span: u64, seed: u64) -> Vec<(u64, u32)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut a: Vec<(u64, u32)> = (0..n)
        .map(|_| {
            (
                from + rng.random_range(0..span),
                rng.random_range(40..=1500),
            )
        })
        .collect();
    a.sort_unstable();
    a
}

/// The trace's delay at `t` ns on a clock whose test started at `origin`, ns.
fn trace_delay_ns(trace: &StepTrace<u64>, origin: u64, t: u64) -> u64 {
    trace.at(t.saturating_sub(origin) / 1000) * 1000
}

#[test]
fn each_packet_arrives_at_its_time_plus_the_trace_s_delay_then_order_kept() {
    let trace = StepTrace::parse_delays(DELAYS).unwrap();
    for origin in [0, 123 * MS + 45] {
        // Over three passes of the trace.
        let a = arrivals(20_000, origin, 3 * S, origin);
        let mut l = traced_link("delay 2ms delay-trace d", Some(DELAYS), None);
        l.start_schedule(origin);
        let sim = simulate(&mut l, a.iter().copied(), u64::MAX);
        assert_eq!(sim.delivered.len(), a.len());
        let mut last = 0;
        for (i, (d, &(at, _))) in sim.delivered.iter().zip(&a).enumerate() {
            // Delivered in arrival order, each at its own time plus the delays then, or
            // right behind the one before it when the delay fell faster.
            let expected = (at + 2 * MS + trace_delay_ns(&trace, origin, at)).max(last);
            assert_eq!(
                (d.packet, d.due),
                (i as u64, expected),
                "origin {origin}, arrival {at}"
            );
            assert!(!d.reordered);
            last = expected;
        }
        // The fall at 300 ms did hold packets behind earlier ones.
        let held = sim
            .delivered
            .iter()
            .zip(&a)
            .filter(|(d, &(at, _))| d.due > at + 2 * MS + trace_delay_ns(&trace, origin, at))
            .count();
        assert!(held > 0, "no packet waited behind a slower one");
    }
}

#[test]
fn with_reorder_each_packet_takes_its_own_delay_and_may_pass_others() {
    let trace = StepTrace::parse_delays(DELAYS).unwrap();
    let a = arrivals(20_000, 0, 3 * S, 3);
    let mut l = traced_link("delay-trace d reorder", Some(DELAYS), None);
    l.start_schedule(0);
    let sim = simulate(&mut l, a.iter().copied(), u64::MAX);
    assert_eq!(sim.delivered.len(), a.len());
    for d in &sim.delivered {
        let at = a[d.packet as usize].0;
        assert_eq!(
            d.due,
            at + trace_delay_ns(&trace, 0, at),
            "packet {}",
            d.packet
        );
    }
    let passed = sim.delivered.iter().filter(|d| d.reordered).count();
    assert!(passed > 0, "the fall of 29 ms in 1 ms let no packet pass");
    // Delivered in due order.
    assert!(sim.delivered.windows(2).all(|w| w[0].due <= w[1].due));
}

#[test]
fn behind_a_rate_the_delay_is_the_trace_s_when_the_packet_leaves_the_bottleneck() {
    let trace = StepTrace::parse_delays(DELAYS).unwrap();
    // 1250 B at 10 Mbit/s: 1 ms each, back to back from 0.
    let a: Vec<(u64, u32)> = evenly(2000, 500_000, 1250).collect();
    let mut l = traced_link(
        "rate 10mbit queue 100000p delay-trace d",
        Some(DELAYS),
        None,
    );
    l.start_schedule(0);
    let sim = simulate(&mut l, a.iter().copied(), u64::MAX);
    let mut last = 0;
    for (i, d) in sim.delivered.iter().enumerate() {
        let left = (i as u64 + 1) * MS;
        let expected = (left + trace_delay_ns(&trace, 0, left)).max(last);
        assert_eq!((d.packet, d.due), (i as u64, expected));
        last = expected;
    }
}

#[test]
fn a_loss_trace_drops_with_its_probability_then() {
    // None for 1 s, all the next, 20 % the third, repeating every 3 s.
    let losses = "0 0%\n1s 100%\n2s 20%\n3s\n";
    let a: Vec<(u64, u32)> = evenly(60_000, 100_000, 100).collect();
    let mut l = traced_link("loss-trace l", None, Some(losses));
    l.start_schedule(0);
    let sim = simulate(&mut l, a.iter().copied(), u64::MAX);
    assert!(sim.dropped.iter().all(|d| d.reason == DropReason::Loss));
    let second = |t: u64| (t / S) % 3;
    for (which, expected) in [(0, 0.0), (1, 1.0), (2, 0.2)] {
        let sent = a.iter().filter(|(t, _)| second(*t) == which).count() as u64;
        let lost = sim.dropped.iter().filter(|d| second(d.at) == which).count() as u64;
        match expected {
            0.0 => assert_eq!(lost, 0, "second {which}"),
            1.0 => assert_eq!(lost, sent, "second {which}"),
            p => assert_binomial(lost, sent, p, "the 20 % seconds"),
        }
    }
    // Before the test starts, the trace's first value: none lost.
    let mut early = traced_link("loss-trace l", None, Some(losses));
    let before = simulate(&mut early, evenly(100, 15 * MS, 100), u64::MAX);
    assert!(before.dropped.is_empty());
}

#[test]
fn a_loss_trace_adds_to_the_path_s_loss() {
    let a: Vec<(u64, u32)> = evenly(100_000, 10_000, 100).collect();
    let mut l = traced_link("loss 10% loss-trace l", None, Some("0 10%\n1s\n"));
    l.start_schedule(0);
    let sim = simulate(&mut l, a.iter().copied(), u64::MAX);
    // Two independent draws: 1 − 0.9².
    assert_binomial(
        sim.dropped.len() as u64,
        a.len() as u64,
        0.19,
        "loss and trace",
    );
}

#[test]
fn a_link_refuses_traces_its_spec_does_not_name_and_needs_those_it_does() {
    let path: PathSpec = "delay-trace d".parse().unwrap();
    let timeline = path.timeline(Direction::Up);
    let missing = Link::<u64>::new(&timeline, 0, 1500, 1, LinkTraces::default());
    assert!(matches!(
        missing,
        Err(tcplab_netsim::link::LinkError::MissingTrace { ref path }) if path == "d"
    ));
    let plain: PathSpec = "rtt 10ms".parse().unwrap();
    let extra = LinkTraces {
        loss: Some(StepTrace::parse_losses("0 1%\n1s\n").unwrap()),
        ..LinkTraces::default()
    };
    assert!(Link::<u64>::new(&plain.timeline(Direction::Up), 0, 1500, 1, extra).is_err());
}
