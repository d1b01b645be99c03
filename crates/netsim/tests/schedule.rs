//! Paths that change during a test, in virtual time: each change of a schedule applies
//! to the first packet at or after its time, counted from the test's start.

mod common;

use common::*;
use tcplab_netsim::link::{DropReason, Link, LinkTraces};

/// The serialization time of `len` bytes at `bps`, ns (whole ns; exact for the rates
/// below).
fn tx_ns(len: u32, bps: u64) -> u64 {
    u64::from(len) * 8 * 1_000_000_000 / bps
}

/// A reference FIFO server whose rate follows `rate_at(start)`: each packet starts at its
/// arrival or when the one before it is out, whichever is later, at the rate in force
/// then; one at rate 0 waits for the rate to come back.
fn reference(arrivals: &[(u64, u32)], rate_at: impl Fn(u64) -> (u64, u64)) -> Vec<u64> {
    let mut free_at = 0;
    arrivals
        .iter()
        .map(|&(at, len)| {
            let mut start = at.max(free_at);
            loop {
                let (bps, until) = rate_at(start);
                if bps > 0 {
                    break;
                }
                start = until;
            }
            free_at = start + tx_ns(len, rate_at(start).0);
            free_at
        })
        .collect()
}

fn dues(sim: &Sim) -> Vec<u64> {
    let mut out: Vec<(u64, u64)> = sim.delivered.iter().map(|d| (d.packet, d.due)).collect();
    out.sort_unstable();
    out.into_iter().map(|(_, due)| due).collect()
}

#[test]
fn a_rate_step_applies_to_the_first_packet_that_starts_at_or_after_it() {
    // 1250 B: 1 ms at 10 Mbit/s, 2 ms at 5. Arrivals at 1.3 ms spacing with bursts,
    // so that packets start both on arrival and back to back across each change.
    for origin in [0, 250 * MS + 17] {
        let mut arrivals: Vec<(u64, u32)> = (0..3000u64)
            .map(|i| (origin + i * 1_300_000 + (i % 5) * 400_000, 1250))
            .collect();
        arrivals.sort_unstable();
        let mut l = link("rate 10mbit queue 100000p at 1s rate 5mbit at 2s rate 10mbit");
        l.start_schedule(origin);
        let sim = simulate(&mut l, arrivals.iter().copied(), u64::MAX);
        let expected = reference(&arrivals, |t| match t.checked_sub(origin) {
            Some(x) if (S..2 * S).contains(&x) => (5_000_000, origin + 2 * S),
            Some(x) if x < S => (10_000_000, origin + S),
            None => (10_000_000, origin + S),
            Some(_) => (10_000_000, u64::MAX),
        });
        assert_eq!(dues(&sim), expected, "schedule from {origin} ns");
    }
}

#[test]
fn before_the_test_starts_the_path_is_its_own_clauses() {
    let mut l = link("rate 10mbit at 0s rate 5mbit");
    let sim = simulate(&mut l, evenly(10, 0, 1250), u64::MAX);
    assert_eq!(dues(&sim), (1..=10).map(|i| i * MS).collect::<Vec<_>>());
}

#[test]
fn an_outage_holds_the_queue_and_drops_what_does_not_fit() {
    // One 1250 B packet every 0.5 ms into 10 Mbit/s (1 ms each): a queue of 100 packets
    // builds; nothing leaves from 1 s to 1.2 s but the packet being sent at 1 s.
    let mut l = link("rate 10mbit queue 100p at 1s-1200ms rate 0");
    l.start_schedule(0);
    let arrivals: Vec<(u64, u32)> = evenly(4000, MS / 2, 1250).collect();
    let sim = simulate(&mut l, arrivals.iter().copied(), u64::MAX);
    let dues = dues(&sim);
    let in_outage = dues.iter().filter(|&&d| d > S && d < S + 200 * MS).count();
    assert_eq!(in_outage, 0, "delivered during the outage");
    assert!(dues.contains(&S), "the packet in service at 1 s finishes");
    let first_after = dues.iter().find(|&&d| d > S).copied();
    assert_eq!(
        first_after,
        Some(S + 200 * MS + MS),
        "service resumes at 1.2 s"
    );
    // The queue was full before the outage (arrivals at twice the rate); whatever came
    // into a full queue was dropped there.
    assert!(sim.dropped.iter().all(|d| d.reason == DropReason::Queue));
    let dropped_in_outage = sim
        .dropped
        .iter()
        .filter(|d| (S..S + 200 * MS).contains(&d.at))
        .count();
    assert_eq!(
        dropped_in_outage, 400,
        "every arrival of the outage finds the queue full"
    );
}

#[test]
fn a_delay_step_delays_packets_sent_after_it_and_keeps_their_order() {
    let mut l = link("delay 100ms at 1s delay 10ms at 2s delay 50ms");
    l.start_schedule(0);
    let arrivals: Vec<(u64, u32)> = evenly(3000, MS, 100).collect();
    let sim = simulate(&mut l, arrivals.iter().copied(), u64::MAX);
    let ids: Vec<u64> = sim.delivered.iter().map(|d| d.packet).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "delivered in order");
    for d in &sim.delivered {
        let sent = d.pushed_at;
        let delay = match sent {
            t if t < S => 100 * MS,
            t if t < 2 * S => 10 * MS,
            _ => 50 * MS,
        };
        // A shorter delay waits behind the packets sent before it: no reordering.
        let earliest = sent + delay;
        assert!(
            d.due >= earliest,
            "packet {} due {} before {earliest}",
            d.packet,
            d.due
        );
        if sent >= S + 100 * MS {
            assert_eq!(d.due, earliest, "packet {} sent at {sent}", d.packet);
        }
    }
    // The packet sent at 1 s waited for the one sent just before it.
    let at_change = sim.delivered.iter().find(|d| d.pushed_at == S).unwrap();
    assert_eq!(at_change.due, S - MS + 100 * MS);
}

#[test]
fn loss_on_a_schedule_drops_only_in_its_span() {
    let mut l = link("rate 100mbit seed 3 at 1s-2s loss 100%");
    l.start_schedule(0);
    let arrivals: Vec<(u64, u32)> = evenly(3000, MS, 1000).collect();
    let sim = simulate(&mut l, arrivals.iter().copied(), u64::MAX);
    assert_eq!(sim.dropped.len(), 1000);
    assert!(sim
        .dropped
        .iter()
        .all(|d| d.reason == DropReason::Loss && (S..2 * S).contains(&d.at)));
}

#[test]
fn every_repeats_the_changes_from_the_path_s_own_settings() {
    // An outage of 100 ms every second, from 0.5 s into each.
    let mut l = link("rate 10mbit queue 100000p every 1s at 500ms-600ms rate 0");
    l.start_schedule(0);
    let arrivals: Vec<(u64, u32)> = evenly(5000, MS, 1250).collect();
    let sim = simulate(&mut l, arrivals.iter().copied(), u64::MAX);
    let expected = reference(&arrivals, |t| {
        let within = t % S;
        if (500 * MS..600 * MS).contains(&within) {
            (0, t - within + 600 * MS)
        } else {
            (10_000_000, u64::MAX)
        }
    });
    assert_eq!(dues(&sim), expected);
}

#[test]
fn a_scheduled_rate_offers_its_capacity_piece_by_piece() {
    let mut l = link("rate 10mbit at 1s-1500ms rate 0 at 2s rate 40mbit");
    assert_eq!(
        l.offered_bytes(0, S),
        Some(1_250_000),
        "before the test: its own rate"
    );
    l.start_schedule(S / 2);
    // Its own 10 Mbit/s to the start at 0.5 s and on to 1.5 s, nothing to 2 s, 10 to
    // 2.5 s, then 40.
    assert_eq!(
        l.offered_bytes(0, 3 * S),
        Some(625_000 + 1_250_000 + 625_000 + 2_500_000)
    );
    assert_eq!(l.offered_bytes(S + 700 * MS, 2 * S), Some(0));
    let fixed = link("rate 10mbit at 1s loss 1%");
    assert_eq!(fixed.offered_bytes(0, S), None, "a rate that never changes");
}

#[test]
fn a_queue_keeps_its_size_through_a_rate_step_unless_a_step_sets_it() {
    let spec = "rtt 20ms rate 100mbit queue 1bdp at 1s rate 10mbit at 2s queue 10p";
    let path: tcplab_netsim::path::PathSpec = spec.parse().unwrap();
    let mut l: Link<u64> = Link::new(
        &path.timeline(tcplab_netsim::path::Direction::Up),
        path.rtt_us(),
        1500,
        1,
        LinkTraces::default(),
    )
    .unwrap();
    l.start_schedule(0);
    let limit = l.limit();
    let _ = simulate(&mut l, [(1500 * MS, 100)], u64::MAX);
    assert_eq!(l.limit(), limit, "the BDP buffer of 100 Mbit/s stays at 10");
    let _ = simulate(&mut l, [(2500 * MS, 100)], u64::MAX);
    assert_eq!(l.limit(), tcplab_netsim::path::Limit::Packets(10));
}
