//! A policer in virtual time: its drops are a token bucket's, packet for packet.

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tcplab_netsim::link::DropReason;

/// tc police's token bucket, full at the start: whether each arrival (time ns, bytes)
/// conforms.
fn reference(arrivals: &[(u64, u32)], bps: u64, burst_bytes: u64) -> Vec<bool> {
    const BIT_NS: u128 = 8 * 1_000_000_000;
    let capacity = u128::from(burst_bytes) * BIT_NS;
    let (mut tokens, mut last) = (capacity, 0);
    arrivals
        .iter()
        .map(|&(t, len)| {
            tokens = (tokens + u128::from(t - last) * u128::from(bps)).min(capacity);
            last = t;
            let cost = u128::from(len) * BIT_NS;
            let conforms = cost <= tokens;
            if conforms {
                tokens -= cost;
            }
            conforms
        })
        .collect()
}

/// Bursts of up to 40 packets of 64 to 1500 bytes with pauses: some 20 Mbit/s.
fn arrivals(seed: u64) -> Vec<(u64, u32)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut t = 0;
    (0..20_000)
        .map(|_| {
            t += if rng.random_range(0..40) == 0 {
                rng.random_range(0..20_000_000)
            } else {
                rng.random_range(0..100_000)
            };
            (t, rng.random_range(64..=1500))
        })
        .collect()
}

#[test]
fn a_policers_drops_are_a_token_buckets_packet_for_packet() {
    for (spec, bps, burst, seed) in [
        ("police 10mbit burst 30K", 10_000_000, 30 * 1024, 1),
        ("police 10mbit burst 1500", 10_000_000, 1500, 2),
        // Before a queue that never overflows: only the policer drops.
        (
            "rate 50mbit queue 1000p police 10mbit burst 64K",
            10_000_000,
            64 * 1024,
            3,
        ),
        ("rtt 20ms police 4mbit burst 10K", 4_000_000, 10 * 1024, 4),
    ] {
        let arrivals = arrivals(seed);
        let conforms = reference(&arrivals, bps, burst);
        let mut l = link(spec);
        let sim = simulate(&mut l, arrivals.iter().copied(), u64::MAX);
        let mut dropped: Vec<u64> = sim.dropped.iter().map(|d| d.packet).collect();
        dropped.sort_unstable();
        let expected: Vec<u64> = (0..arrivals.len() as u64)
            .filter(|&i| !conforms[i as usize])
            .collect();
        assert!(
            sim.dropped.iter().all(|d| d.reason == DropReason::Police),
            "{spec}"
        );
        assert!(expected.len() > 1000, "{spec}: {} policed", expected.len());
        assert_eq!(dropped, expected, "{spec}");
        assert_eq!(l.counters().dropped_police, expected.len() as u64, "{spec}");
        assert_eq!(
            sim.delivered.len() + expected.len(),
            arrivals.len(),
            "{spec}"
        );
    }
}

#[test]
fn a_policer_on_a_schedule_changes_its_rate_at_its_time() {
    // 1 Mbit/s with a bucket of one packet: one 1250-byte packet each 10 ms passes;
    // from 1 s, 2 Mbit/s lets one each 5 ms through.
    let mut l = link("police 1mbit burst 1250 at 1s police 2mbit burst 1250");
    l.start_schedule(0);
    let arrivals: Vec<(u64, u32)> = evenly(2000, MS, 1250).collect();
    let sim = simulate(&mut l, arrivals.iter().copied(), u64::MAX);
    let passed = |from: u64, to: u64| {
        sim.delivered
            .iter()
            .filter(|d| (from..to).contains(&d.pushed_at))
            .count()
    };
    assert_eq!(passed(0, S), 100);
    assert_eq!(passed(S, 2 * S), 200);
}
