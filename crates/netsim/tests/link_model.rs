//! The link model in virtual time: each stage against what it promises.

mod common;

use common::*;
use tcplab_netsim::dumbbell::{Dumbbell, LinkRole};
use tcplab_netsim::link::{DropReason, Link, LinkTraces, PushOutcome, Trace};
use tcplab_netsim::path::Direction::{Down, Up};
use tcplab_netsim::path::PathSpec;

/// One link of a lab of `path` and `access` links, seeded as a lab with `seed` seeds it.
fn lab_link(
    path: &PathSpec,
    access: &[PathSpec],
    role: LinkRole,
    dir: tcplab_netsim::path::Direction,
    seed: u64,
) -> Link<u64> {
    Link::in_lab(
        &Dumbbell::new(path, access),
        role,
        dir,
        seed,
        path.mtu,
        LinkTraces::default(),
    )
    .unwrap()
}

#[test]
fn serialization_is_exact_in_nanoseconds() {
    let mut l = link("rate 10gbit");
    let sim = simulate(&mut l, [(0, 1500), (0, 1500), (5_000, 1500)], u64::MAX);
    let due: Vec<u64> = sim.delivered.iter().map(|d| d.due).collect();
    assert_eq!(due, [1_200, 2_400, 6_200]);
    assert_eq!(sim.delivered[1].queue_delay, 1_200);
}

/// A saturated link delivers at its rate within 0.1 % over 10 s of virtual time.
#[test]
fn saturated_link_delivers_at_rate() {
    for (spec, len, seconds) in [
        ("rate 100mbit", 1500, 10),
        ("rate 7mbit", 1500, 10),
        ("rate 12345kbit", 576, 10),
        ("rate 1gbit overhead 24", 1000, 1),
    ] {
        let mut l = link(spec);
        let path: PathSpec = spec.parse().unwrap();
        let tcplab_netsim::path::Bottleneck::Rate { bps, overhead } = path.up.bottleneck else {
            unreachable!()
        };
        // Arrivals at 1.5× the rate keep the queue from ever emptying.
        let gap = (f64::from(len + overhead) * 8.0 / bps as f64 * 1e9 / 1.5) as u64;
        let end = (seconds + 1) * S;
        let sim = simulate(&mut l, evenly(end / gap, gap, len), end);
        let bytes: u64 = sim
            .delivered
            .iter()
            .filter(|d| d.due > S && d.due <= end)
            .map(|d| u64::from(d.wire_len))
            .sum();
        let want = bps as f64 / 8.0 * seconds as f64 * f64::from(len) / f64::from(len + overhead);
        let error = (bytes as f64 - want).abs() / want;
        assert!(
            error < 0.001,
            "{spec}: {bytes} bytes, want {want:.0} ({error:.5})"
        );
    }
}

#[test]
fn random_loss_is_binomial() {
    for p in ["0.1%", "1%", "10%", "50%"] {
        let mut l = link(&format!("loss {p}"));
        let n = 100_000;
        let sim = simulate(&mut l, evenly(n, 1_000, 100), u64::MAX);
        let lost = sim
            .dropped
            .iter()
            .filter(|d| d.reason == DropReason::Loss)
            .count() as u64;
        assert_eq!(lost, l.counters().dropped_loss);
        let fraction: f64 = p.trim_end_matches('%').parse::<f64>().unwrap() / 100.0;
        assert_binomial(lost, n, fraction, &format!("loss {p}"));
    }
}

/// Runs of consecutive losses and the loss rate of a Gilbert–Elliott link.
fn loss_runs(spec: &str, n: u64) -> (f64, f64) {
    let mut l = link(spec);
    let sim = simulate(&mut l, evenly(n, 1_000, 100), u64::MAX);
    let mut lost = vec![false; n as usize];
    for d in &sim.dropped {
        lost[d.packet as usize] = true;
    }
    let losses = lost.iter().filter(|&&x| x).count();
    let bursts = lost.windows(2).filter(|w| w[1] && !w[0]).count() + usize::from(lost[0]);
    (losses as f64 / n as f64, losses as f64 / bursts as f64)
}

#[test]
fn gilbert_elliott_bursts_and_rate() {
    // p = 1 %, r = 10 %: loss rate p/(p+r) = 1/11, mean burst 1/r = 10.
    let (rate, burst) = loss_runs("loss gemodel 1% 10%", 1_000_000);
    assert!((rate / (1.0 / 11.0) - 1.0).abs() < 0.05, "loss rate {rate}");
    assert!((burst / 10.0 - 1.0).abs() < 0.05, "mean burst {burst}");
    // netem's default r = 1 − p is plain random loss: bursts of 1/(1−p).
    let (rate, burst) = loss_runs("loss gemodel 5%", 200_000);
    assert!((rate / 0.05 - 1.0).abs() < 0.05, "loss rate {rate}");
    assert!(
        (burst / (1.0 / 0.95) - 1.0).abs() < 0.02,
        "mean burst {burst}"
    );
    // 1-h = 50 %: half the bad-state packets get through.
    let (rate, _) = loss_runs("loss gemodel 1% 10% 50%", 1_000_000);
    assert!((rate / (0.5 / 11.0) - 1.0).abs() < 0.05, "loss rate {rate}");
}

#[test]
fn queue_limit_in_packets_holds_and_bounds_delay() {
    // 1500 B at 10 Mbit/s is 1.2 ms; arrivals at twice that.
    let mut l = link("rate 10mbit queue 50p");
    let mut max_packets = 0;
    let sim = simulate_with(&mut l, evenly(10_000, 600_000, 1500), u64::MAX, |l, _| {
        max_packets = max_packets.max(l.counters().queue_packets);
    });
    let c = l.counters();
    assert_eq!(max_packets, 50);
    assert_eq!(c.max_queue_bytes, 50 * 1500);
    assert!(c.dropped_queue > 4_000, "{c:?}");
    assert_eq!(c.dropped_queue, sim.dropped.len() as u64);
    let max_delay = sim.delivered.iter().map(|d| d.queue_delay).max().unwrap();
    // A full queue ahead plus the packet on the wire: limit / rate.
    assert!(max_delay <= 50 * 1_200_000, "{max_delay}");
    assert!(max_delay >= 49 * 1_200_000, "{max_delay}");
}

#[test]
fn queue_limit_in_bdp_is_bytes() {
    let path: PathSpec = "rtt 40ms rate 12mbit queue 0.5bdp".parse().unwrap();
    let l = lab_link(&path, &[], LinkRole::Bottleneck, Up, 1);
    // 12 Mbit/s × 40 ms = 60 000 B; half of it.
    assert_eq!(l.limit(), tcplab_netsim::path::Limit::Bytes(30_000));
}

/// A trace of examples/traces.
fn trace_text(name: &str) -> String {
    let path = format!(
        "{}/../../examples/traces/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Saturated over one period, a trace link carries one 1500-byte packet per line.
#[test]
fn trace_capacity_over_one_period() {
    for name in [
        "Verizon-LTE-short.up",
        "Verizon-LTE-short.down",
        "TMobile-LTE-short.up",
        "TMobile-LTE-short.down",
        "ATT-LTE-driving-2016.up",
        "ATT-LTE-driving-2016.down",
    ] {
        let text = trace_text(name);
        let trace = Trace::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let lines = text.lines().filter(|l| !l.trim().is_empty()).count() as u64;
        assert_eq!(trace.opportunities() as u64, lines);
        let period = trace.period_ms() * MS;
        let spec: PathSpec = format!("trace {name} queue 1000000p").parse().unwrap();
        for len in [1500, 1000] {
            let mut l: Link<u64> =
                Link::new(&spec.timeline(Up), 0, 1500, 1, rate_trace(trace.clone()))
                    .expect("trace link");
            // Everything at 0: the queue never empties within the period.
            let n = lines * 1500 / len as u64 + 10;
            let sim = simulate(&mut l, (0..n).map(|_| (0, len)), period);
            let bytes: u64 = sim
                .delivered
                .iter()
                .filter(|d| d.due <= period)
                .map(|d| u64::from(d.wire_len))
                .sum();
            let capacity = lines * 1500;
            // Opportunities are used in full, across packet boundaries, as mahimahi does.
            assert!(
                bytes <= capacity && capacity - bytes < u64::from(len),
                "{name} ({len} B): {bytes} bytes, capacity {capacity}"
            );
            assert!(sim.delivered.windows(2).all(|w| w[0].packet < w[1].packet));
        }
        println!(
            "{name}: {lines} opportunities in {} ms, {:.2} Mbit/s",
            trace.period_ms(),
            trace.mean_rate_bps() / 1e6
        );
    }
}

#[test]
fn trace_wastes_opportunities_while_idle() {
    // One opportunity per ms; the packet pushed at 2.5 ms leaves at 3 ms, the one pushed
    // exactly at 4 ms misses that opportunity as in mahimahi and leaves at 5 ms.
    let spec: PathSpec = "trace t".parse().unwrap();
    let trace = Trace::parse("1\n").unwrap();
    let mut l: Link<u64> = Link::new(&spec.timeline(Up), 0, 1500, 1, rate_trace(trace)).unwrap();
    let sim = simulate(&mut l, [(2_500_000, 1500), (4 * MS, 1500)], u64::MAX);
    let due: Vec<u64> = sim.delivered.iter().map(|d| d.due).collect();
    assert_eq!(due, [3 * MS, 5 * MS]);
}

/// Sojourn times of packets dequeued at or after `from`.
fn sojourns(sim: &Sim, from: u64) -> Vec<u64> {
    let mut s: Vec<u64> = sim
        .delivered
        .iter()
        .filter(|d| d.pushed_at + d.queue_delay >= from)
        .map(|d| d.queue_delay)
        .collect();
    s.sort_unstable();
    s
}

/// What [`aimd`] saw: the sojourn of each packet dequeued after half the run (sorted),
/// and the link's counters.
struct Aimd {
    sojourns: Vec<u64>,
    counters: tcplab_record::link::LinkCounters,
}

fn aimd_sojourns(spec: &str, seconds: u64) -> Vec<u64> {
    aimd(spec, seconds, false).sojourns
}

/// A Reno-like window sender through `spec` for `seconds`: +1/cwnd per ack, halved at
/// most once per 40 ms on a drop or a CE mark (learned at once), acks back after 10
/// ms; its packets ECN-capable if `ect`.
fn aimd(spec: &str, seconds: u64, ect: bool) -> Aimd {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use tcplab_netsim::link::{PacketMeta, PushOutcome};
    let meta = PacketMeta {
        wire_len: 1500,
        flow: 7,
        ect,
        traffic: tcplab_record::traffic::Traffic::Test,
    };
    let mut l = link(spec);
    let (mut cwnd, mut inflight, mut next_id) = (10.0f64, 0u64, 0u64);
    let mut acks: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut calm_until = 0;
    let mut out = Vec::new();
    let mut now = 0;
    let end = seconds * S;
    while now <= end {
        let (mut lost, mut marked) = (0, false);
        while let Some(d) = l.pop(now) {
            acks.push(Reverse(d.due + 10 * MS));
            marked |= d.ce;
            if d.pushed_at + d.queue_delay >= end / 2 {
                out.push(d.queue_delay);
            }
        }
        while l.pop_dropped().is_some() {
            lost += 1;
        }
        while acks.peek().is_some_and(|a| a.0 <= now) {
            acks.pop();
            inflight -= 1;
            cwnd += 1.0 / cwnd;
        }
        while (inflight as f64) < cwnd {
            inflight += 1;
            next_id += 1;
            if let PushOutcome::Dropped(_) = l.push(now, next_id, meta) {
                lost += 1;
            }
            while l.pop_dropped().is_some() {
                lost += 1;
            }
        }
        if lost > 0 || marked {
            inflight -= lost;
            if now >= calm_until {
                cwnd = (cwnd / 2.0).max(2.0);
                calm_until = now + 40 * MS;
            }
        }
        let ack = acks.peek().map(|a| a.0);
        now = match (ack, l.next_deadline()) {
            (Some(a), Some(d)) => a.min(d),
            (a, d) => a.or(d).expect("traffic keeps flowing"),
        };
    }
    out.sort_unstable();
    Aimd {
        sojourns: out,
        counters: l.counters(),
    }
}

#[test]
fn codel_holds_sojourn_near_target_under_persistent_load() {
    // A buffer of 1000 packets would hold 1.2 s at 10 Mbit/s.
    let x = aimd_sojourns("delay 10ms rate 10mbit queue 1000p aqm codel", 60);
    let (median, p90) = (x[x.len() / 2], x[x.len() * 9 / 10]);
    println!(
        "codel: {} samples, median {median} ns, p90 {p90} ns",
        x.len()
    );
    assert!(
        (2 * MS..=8 * MS).contains(&median) && p90 < 20 * MS,
        "median {} ms, p90 {} ms",
        median as f64 / 1e6,
        p90 as f64 / 1e6
    );
    // The same sender fills a drop-tail buffer.
    let x = aimd_sojourns("delay 10ms rate 10mbit queue 1000p", 60);
    assert!(x[x.len() / 2] > 200 * MS, "{}", x[x.len() / 2]);
}

#[test]
fn codel_drops_the_excess_of_unresponsive_overload() {
    // 20 % more than the link carries, for 60 s; the buffer never fills. CoDel (RFC 8289)
    // restarts its drop rate after each episode, so against a source that never backs
    // off the queue saws well above target, yet stays bounded where drop-tail grows.
    let mut l = link("rate 10mbit queue 100000p aqm codel");
    let gap = 1_000_000; // 1500 B per ms = 12 Mbit/s
    let sim = simulate(&mut l, evenly(60_000, gap, 1500), u64::MAX);
    let late = sojourns(&sim, 30 * S);
    assert!(
        late[late.len() - 1] < 300 * MS,
        "max {}",
        late[late.len() - 1]
    );
    let c = l.counters();
    assert_eq!(c.dropped_queue, 0);
    // The excess is 1/6 of arrivals.
    let share = c.dropped_aqm as f64 / c.packets_in as f64;
    assert!((0.15..0.18).contains(&share), "{share} {c:?}");
    let mut tail = link("rate 10mbit queue 100000p");
    let sim = simulate(&mut tail, evenly(60_000, gap, 1500), u64::MAX);
    assert!(sojourns(&sim, 30 * S)[0] > S);
}

#[test]
fn codel_drops_only_after_an_interval_above_target() {
    // Twice the rate: the sojourn grows by 0.6 ms per packet.
    let mut l = link("rate 10mbit queue 100000p aqm codel");
    let sim = simulate(&mut l, evenly(2_000, 600_000, 1500), u64::MAX);
    let first_above = sim
        .delivered
        .iter()
        .filter(|d| d.queue_delay >= 5 * MS)
        .map(|d| d.pushed_at + d.queue_delay)
        .min()
        .unwrap();
    let first_drop = sim.dropped.iter().map(|d| d.at).min().unwrap();
    assert!(sim.dropped.iter().all(|d| d.reason == DropReason::Aqm));
    assert!(
        first_drop >= first_above + 100 * MS,
        "above target at {first_above}, first drop at {first_drop}"
    );
    // The first dequeue at or after the interval ends drops (one packet time later).
    assert!(first_drop <= first_above + 100 * MS + 1_200_000);
}

#[test]
fn codel_does_not_drop_below_target_or_for_short_bursts() {
    // Bursts of 3 every 10 ms: at most 2.4 ms of queue.
    let arrivals = (0..3_000u64).map(|i| ((i / 3) * 10 * MS, 1500));
    let mut l = link("rate 10mbit aqm codel");
    simulate(&mut l, arrivals, u64::MAX);
    assert_eq!(l.counters().dropped_aqm, 0);
    // One burst of 60 packets: above 5 ms for about 66 ms, less than the interval.
    let mut l = link("rate 10mbit aqm codel");
    simulate(&mut l, (0..60).map(|_| (0, 1500)), u64::MAX);
    assert_eq!(l.counters().dropped_aqm, 0);
    // 100 packets stay above target longer than the interval: CoDel drops.
    let mut l = link("rate 10mbit aqm codel");
    simulate(&mut l, (0..100).map(|_| (0, 1500)), u64::MAX);
    assert!(l.counters().dropped_aqm > 0);
}

fn in_order(sim: &Sim) -> bool {
    sim.delivered.windows(2).all(|w| w[0].packet < w[1].packet)
}

#[test]
fn jitter_keeps_order_unless_told() {
    let arrivals = || evenly(20_000, 100_000, 1000);
    let mut l = link("delay 50ms jitter 10ms");
    let sim = simulate(&mut l, arrivals(), u64::MAX);
    assert!(in_order(&sim));
    assert_eq!(l.counters().reordered, 0);
    assert_eq!(sim.delivered.len(), 20_000);

    let mut l = link("delay 50ms jitter 10ms reorder");
    let sim = simulate(&mut l, arrivals(), u64::MAX);
    assert!(!in_order(&sim));
    assert!(l.counters().reordered > 1_000, "{:?}", l.counters());
}

fn latencies(spec: &str, n: u64) -> Vec<f64> {
    let mut l = link(spec);
    let sim = simulate(&mut l, evenly(n, 100_000, 100), u64::MAX);
    sim.delivered
        .iter()
        .map(|d| (d.due - d.pushed_at) as f64 / 1e6)
        .collect()
}

fn mean_sd(x: &[f64]) -> (f64, f64) {
    let mean = x.iter().sum::<f64>() / x.len() as f64;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / x.len() as f64;
    (mean, var.sqrt())
}

#[test]
fn jitter_distributions_match_netem() {
    let n = 50_000;
    let x = latencies("delay 50ms jitter 10ms dist uniform reorder", n);
    assert!(x.iter().all(|&v| (40.0..=60.0).contains(&v)));
    let (mean, sd) = mean_sd(&x);
    assert!(
        (mean - 50.0).abs() < 0.2 && (sd - 10.0 / 3f64.sqrt()).abs() < 0.2,
        "{mean} {sd}"
    );

    let (mean, sd) = mean_sd(&latencies("delay 50ms jitter 10ms reorder", n));
    assert!(
        (mean - 50.0).abs() < 0.2 && (sd - 10.0).abs() < 0.2,
        "{mean} {sd}"
    );

    // netem's pareto: mean about 0 (−0.033 jitters after the table's clamp), min −2/3.
    let x = latencies("delay 50ms jitter 10ms dist pareto reorder", n);
    let (mean, _) = mean_sd(&x);
    assert!((mean - 49.67).abs() < 0.3, "{mean}");
    let min = x.iter().cloned().fold(f64::MAX, f64::min);
    assert!(min >= 50.0 - 20.0 / 3.0 - 1e-6, "{min}");

    let (mean, _) = mean_sd(&latencies(
        "delay 50ms jitter 10ms dist paretonormal reorder",
        n,
    ));
    assert!((mean - 49.75).abs() < 0.3, "{mean}");

    // Never negative: a jitter larger than the delay is truncated at zero.
    let x = latencies("delay 1ms jitter 10ms reorder", 10_000);
    assert!(x.iter().all(|&v| v >= 0.0));
    assert!(x.iter().filter(|&&v| v == 0.0).count() > 4_000);
}

#[test]
fn netem_reorder_sends_a_share_early() {
    let n = 10_000;
    let mut l = link("delay 10ms reorder 25%");
    let sim = simulate(&mut l, evenly(n, MS, 100), u64::MAX);
    let early: Vec<u64> = sim
        .delivered
        .iter()
        .filter(|d| d.due == d.pushed_at)
        .map(|d| d.packet)
        .collect();
    assert_binomial(early.len() as u64, n, 0.25, "reorder 25%");
    assert!(sim
        .delivered
        .iter()
        .all(|d| d.due - d.pushed_at == 10 * MS || d.due == d.pushed_at));
    assert!(l.counters().reordered > 2_000);

    // With a gap every 5th packet goes early.
    let mut l = link("delay 10ms reorder 100% gap 5");
    let sim = simulate(&mut l, evenly(100, MS, 100), u64::MAX);
    let mut early: Vec<u64> = sim
        .delivered
        .iter()
        .filter(|d| d.due == d.pushed_at)
        .map(|d| d.packet)
        .collect();
    early.sort_unstable();
    assert_eq!(early, (0..20).map(|i| 5 * i + 4).collect::<Vec<_>>());
}

#[test]
fn duplicate_and_corrupt_fractions() {
    let n = 100_000;
    let mut l = link("duplicate 10% corrupt 5%");
    let sim = simulate(&mut l, evenly(n, 1_000, 100), u64::MAX);
    let copies = sim.delivered.iter().filter(|d| d.packet & DUP != 0).count() as u64;
    assert_binomial(copies, n, 0.10, "duplicate");
    assert_eq!(copies, l.counters().duplicated);
    let corrupt = sim.delivered.iter().filter(|d| d.corrupt).count() as u64;
    assert_binomial(corrupt, n + copies, 0.05, "corrupt");
    assert_eq!(corrupt, l.counters().corrupted);
}

#[test]
fn duplicate_with_loss_follows_netem() {
    // netem decides duplication first; a loss then cancels one of the two copies, so
    // with both at 100 % each packet arrives exactly once.
    let mut l = link("duplicate 100% loss 100%");
    let sim = simulate(&mut l, evenly(10, MS, 100), u64::MAX);
    assert_eq!(sim.delivered.len(), 10);
    let c = l.counters();
    assert_eq!((c.packets_in, c.duplicated, c.dropped_loss), (20, 10, 10));
}

const BUSY: &str = "delay 20ms jitter 5ms dist paretonormal reorder loss gemodel 2% 20% \
                    duplicate 3% corrupt 2% reorder 10% 25% rate 20mbit queue 40p aqm codel";

fn schedule(seed: u64) -> Vec<(u64, u64, bool)> {
    let path: PathSpec = BUSY.parse().unwrap();
    let mut l = lab_link(&path, &[], LinkRole::Bottleneck, Up, seed);
    let arrivals =
        (0..20_000u64).map(|i| (i * 400_000 + (i * 7919) % 300_000, 200 + (i % 1300) as u32));
    let sim = simulate(&mut l, arrivals, u64::MAX);
    let mut out: Vec<_> = sim
        .delivered
        .iter()
        .map(|d| (d.packet, d.due, d.corrupt))
        .collect();
    out.extend(sim.dropped.iter().map(|d| (d.packet, d.at, false)));
    out
}

#[test]
fn same_seed_same_schedule() {
    assert_eq!(schedule(7), schedule(7));
    assert_ne!(schedule(7), schedule(8));
}

/// Every link and direction of a lab draws its own stream: two streams at `loss 50%`
/// agree on a packet's fate half the time, each of the 15 pairs within 3.89 σ of
/// Binomial(20 000, ½) (99.99 % each, 99.9 % for all of them together); one stream
/// reused would agree on every packet.
#[test]
fn the_links_of_a_lab_draw_independent_streams() {
    const N: u64 = 20_000;
    let path: PathSpec = "loss 50%".parse().unwrap();
    let access: Vec<PathSpec> = vec!["loss 50%".parse().unwrap(); 2];
    let fates = |role, dir, seed| -> Vec<bool> {
        let mut l = lab_link(&path, &access, role, dir, seed);
        (0..N)
            .map(|i| matches!(l.push(i, i, 100.into()), PushOutcome::Dropped(_)))
            .collect()
    };
    let streams = [
        fates(LinkRole::Bottleneck, Up, 1),
        fates(LinkRole::Bottleneck, Down, 1),
        fates(LinkRole::Access(0), Up, 1),
        fates(LinkRole::Access(0), Down, 1),
        fates(LinkRole::Access(1), Up, 1),
        // The same link in the next lab seed.
        fates(LinkRole::Bottleneck, Up, 2),
    ];
    let half_width = 3.89 * (N as f64 * 0.25).sqrt();
    for (i, a) in streams.iter().enumerate() {
        for b in &streams[i + 1..] {
            let agree = a.iter().zip(b).filter(|(x, y)| x == y).count() as f64;
            assert!(
                (agree - N as f64 / 2.0).abs() <= half_width,
                "streams {i} and another agree on {agree} of {N}"
            );
        }
    }
}

#[test]
fn oversize_packets_are_dropped_and_counted() {
    let mut l = link("rate 10mbit");
    let sim = simulate(&mut l, [(0, 1500), (0, 1501), (0, 64_000)], u64::MAX);
    assert_eq!(sim.delivered.len(), 1);
    assert_eq!(l.counters().dropped_oversize, 2);
    assert!(sim.dropped.iter().all(|d| d.reason == DropReason::Oversize));
}

#[test]
fn an_idle_link_always_takes_a_packet() {
    // A zero buffer still lets a packet through when nothing is queued or on the wire.
    let mut l = link("rate 10mbit queue 0");
    let sim = simulate(&mut l, [(0, 1500), (0, 1500), (2 * MS, 1500)], u64::MAX);
    let ids: Vec<u64> = sim.delivered.iter().map(|d| d.packet).collect();
    assert_eq!(ids, [0, 2]);
    assert_eq!(l.counters().dropped_queue, 1);
}

/// Packets of `flows` flows: flow `f` sends `len`-byte packets every `gap` ns from 0 for
/// `seconds`, merged in time order.
fn flows_of(
    specs: &[(u32, u64, u32)],
    seconds: u64,
) -> Vec<(u64, tcplab_netsim::link::PacketMeta)> {
    let mut all: Vec<(u64, tcplab_netsim::link::PacketMeta)> = specs
        .iter()
        .flat_map(|&(flow, gap, len)| {
            (0..seconds * S / gap).map(move |k| {
                (
                    k * gap,
                    tcplab_netsim::link::PacketMeta {
                        wire_len: len,
                        flow,
                        ect: false,
                        traffic: tcplab_record::traffic::Traffic::Test,
                    },
                )
            })
        })
        .collect();
    all.sort_by_key(|&(t, m)| (t, m.flow));
    all
}

/// RFC 8290's flow isolation: an unresponsive flow at twice the link's rate beside a
/// sparse one (a 200-byte packet every 20 ms). The sparse flow's packets wait at most
/// about one packet's transmission and one quantum, where a shared FIFO makes them wait
/// behind the whole standing queue.
#[test]
fn fq_codel_keeps_a_sparse_flow_out_of_a_bulk_flows_queue() {
    let arrivals = flows_of(&[(1, 600_000, 1500), (2, 20 * MS, 200)], 20);
    let sparse_worst = |spec: &str| {
        let mut l = link(spec);
        let sim = simulate(&mut l, arrivals.iter().copied(), u64::MAX);
        let waits: Vec<u64> = sim
            .delivered
            .iter()
            .filter(|d| d.wire_len == 200 && d.pushed_at > 5 * S)
            .map(|d| d.queue_delay)
            .collect();
        assert!(!waits.is_empty());
        (waits.into_iter().max().unwrap(), l.counters())
    };
    let (fq, c) = sparse_worst("rate 10mbit queue 1000p aqm fq_codel");
    // 1500 B at 10 Mbit/s is 1.2 ms: one packet in service, one quantum ahead.
    assert!(
        fq <= 2 * 1_200_000 + 200_000,
        "fq_codel: sparse flow waited {fq} ns"
    );
    assert!(c.dropped_aqm > 0, "the bulk flow's CoDel drops: {c:?}");
    let (fifo, _) = sparse_worst("rate 10mbit queue 1000p aqm codel");
    assert!(fifo > 5 * MS, "a shared CoDel queue: {fifo} ns");
}

/// Two backlogged flows of different packet sizes get equal bytes (deficit round robin
/// by bytes, not packets).
#[test]
fn fq_codel_shares_the_link_by_bytes() {
    let arrivals = flows_of(&[(1, 400_000, 1500), (2, 200_000, 300)], 10);
    let mut l = link("rate 10mbit queue 10000p aqm fq_codel");
    let sim = simulate(&mut l, arrivals, 10 * S);
    let bytes = |len: u32| -> u64 {
        sim.delivered
            .iter()
            .filter(|d| d.wire_len == len && d.due > 2 * S)
            .map(|d| u64::from(d.wire_len))
            .sum()
    };
    let (big, small) = (bytes(1500), bytes(300));
    let share = big as f64 / (big + small) as f64;
    assert!((0.48..=0.52).contains(&share), "{big} vs {small}");
}

/// fq_codel's CoDel holds a responsive flow near its 5 ms target, as CoDel does.
#[test]
fn fq_codel_holds_a_responsive_flow_near_target() {
    let x = aimd_sojourns("delay 10ms rate 10mbit queue 1000p aqm fq_codel", 60);
    let median = x[x.len() / 2];
    assert!((2 * MS..=8 * MS).contains(&median), "median {median} ns");
}

/// PIE (RFC 8033) holds a responsive flow's queue delay near its 15 ms target where
/// drop-tail lets it fill the buffer.
#[test]
fn pie_holds_the_queue_delay_near_its_target() {
    let x = aimd_sojourns("delay 10ms rate 10mbit queue 1000p aqm pie", 60);
    let (median, p90) = (x[x.len() / 2], x[x.len() * 9 / 10]);
    println!("pie: median {median} ns, p90 {p90} ns");
    assert!(
        (5 * MS..=30 * MS).contains(&median) && p90 < 60 * MS,
        "median {} ms, p90 {} ms",
        median as f64 / 1e6,
        p90 as f64 / 1e6
    );
}

/// With ECN an AQM marks the responsive flow's ECN-capable packets instead of dropping
/// them: the same control of the queue, with (almost) no loss.
#[test]
fn with_ecn_the_aqms_mark_instead_of_dropping() {
    for aqm in ["codel ecn", "fq_codel", "pie ecn"] {
        let spec = format!("delay 10ms rate 10mbit queue 1000p aqm {aqm}");
        let marked = aimd(&spec, 60, true);
        let plain = aimd(&spec, 60, false);
        let (m, p) = (marked.counters, plain.counters);
        println!(
            "{aqm}: ECT marked {} dropped {}; not ECT dropped {}",
            m.marked_ce, m.dropped_aqm, p.dropped_aqm
        );
        assert!(m.marked_ce > 0, "{aqm}: {m:?}");
        assert_eq!(p.marked_ce, 0, "{aqm}: {p:?}");
        assert!(
            m.dropped() * 10 < p.dropped(),
            "{aqm}: {} drops with ECN, {} without",
            m.dropped(),
            p.dropped()
        );
        let median = marked.sojourns[marked.sojourns.len() / 2];
        assert!(
            median < 30 * MS,
            "{aqm}: median sojourn {median} ns with ECN"
        );
    }
}

/// Each kind of traffic is counted apart, and the kinds add up to the link's whole: a
/// test flow at twice the link's rate for a second, beside tcplab's own traffic — a
/// control connection's trickle during the test and its samples sent in one burst after
/// it, probes throughout — through a drop-tail queue, CoDel with ECN, fq_codel and PIE.
/// Every drop, mark and delivery the harness sees of each kind is in that kind's
/// counters; the queue's figures are each kind's own bytes in it.
#[test]
fn each_kind_of_traffic_is_counted_apart() {
    use std::collections::HashMap;
    use tcplab_netsim::link::{PacketMeta, PushOutcome};
    use tcplab_record::link::LinkCounters;
    use tcplab_record::traffic::Traffic;
    for spec in [
        "delay 5ms rate 10mbit queue 20p loss 1%",
        "delay 5ms rate 10mbit queue 200p aqm codel ecn",
        "delay 5ms rate 10mbit queue 50p aqm fq_codel",
        "delay 5ms rate 10mbit queue 50p aqm pie",
    ] {
        let mut l = link(spec);
        // (time, kind, flow hash, length, ECN-capable)
        let mut arrivals: Vec<(u64, Traffic, u32, u32, bool)> = Vec::new();
        // The test: 1500 B every 600 µs (20 Mbit/s) for 1 s.
        arrivals.extend((0..S / (600_000)).map(|k| (k * 600_000, Traffic::Test, 1, 1500, true)));
        // The control connection: an interval every 100 ms, then 300 packets of samples at once.
        arrivals.extend((0..10).map(|k| (k * 100 * MS + 7, Traffic::Control, 2, 400, false)));
        arrivals.extend((0..300).map(|_| (1_200 * MS, Traffic::Control, 2, 1500, false)));
        // Probes every 10 ms for 1.5 s.
        arrivals.extend((0..150).map(|k| (k * 10 * MS + 3, Traffic::Probe, 3, 72, false)));
        arrivals.sort_by_key(|a| a.0);

        let mut seen: HashMap<Traffic, LinkCounters> = HashMap::new();
        let mut kind_of: HashMap<u64, Traffic> = HashMap::new();
        let mut queue_peak: HashMap<Traffic, u64> = HashMap::new();
        let count_drops = |l: &mut tcplab_netsim::link::Link<u64>,
                           seen: &mut HashMap<Traffic, LinkCounters>,
                           kind_of: &HashMap<u64, Traffic>| {
            while let Some(d) = l.pop_dropped() {
                let c = seen.entry(kind_of[&d.packet]).or_default();
                match d.reason {
                    tcplab_netsim::link::DropReason::Queue => c.dropped_queue += 1,
                    tcplab_netsim::link::DropReason::Aqm => c.dropped_aqm += 1,
                    other => panic!("{spec}: {other:?} inside"),
                }
            }
        };
        let deliver = |l: &mut tcplab_netsim::link::Link<u64>,
                       now: u64,
                       seen: &mut HashMap<Traffic, LinkCounters>,
                       kind_of: &HashMap<u64, Traffic>| {
            while let Some(d) = l.pop(now) {
                assert_eq!(d.traffic, kind_of[&d.packet], "{spec}: delivered as pushed");
                let c = seen.entry(d.traffic).or_default();
                c.delivered_packets += 1;
                c.marked_ce += u64::from(d.ce);
            }
            count_drops(l, seen, kind_of);
        };
        for (id, &(at, traffic, flow, len, ect)) in arrivals.iter().enumerate() {
            let id = id as u64;
            while let Some(due) = l.next_deadline().filter(|&d| d < at) {
                deliver(&mut l, due, &mut seen, &kind_of);
            }
            kind_of.insert(id, traffic);
            let meta = PacketMeta {
                wire_len: len,
                flow,
                ect,
                traffic,
            };
            seen.entry(traffic).or_default().packets_in += 1;
            let mut outcome = l.push(at, id, meta);
            if outcome == PushOutcome::Duplicate {
                let copy = id | 1 << 40;
                kind_of.insert(copy, traffic);
                seen.entry(traffic).or_default().packets_in += 1;
                outcome = l.push_duplicate(at, copy, meta);
            }
            if let PushOutcome::Dropped(d) = outcome {
                let c = seen.entry(traffic).or_default();
                match d.reason {
                    tcplab_netsim::link::DropReason::Loss => c.dropped_loss += 1,
                    tcplab_netsim::link::DropReason::Queue => c.dropped_queue += 1,
                    tcplab_netsim::link::DropReason::Aqm => c.dropped_aqm += 1,
                    other => panic!("{spec}: {other:?}"),
                }
            }
            count_drops(&mut l, &mut seen, &kind_of);
            for t in Traffic::ALL {
                let peak = queue_peak.entry(t).or_default();
                *peak = (*peak).max(l.counters_of(t).queue_bytes);
            }
        }
        while let Some(due) = l.next_deadline() {
            deliver(&mut l, due, &mut seen, &kind_of);
        }

        let mut total = LinkCounters::default();
        for t in Traffic::ALL {
            let c = l.counters_of(t);
            let s = seen.get(&t).copied().unwrap_or_default();
            let dropped_at_the_door = s.dropped_loss;
            assert_eq!(
                (c.packets_in, c.delivered_packets, c.marked_ce),
                (s.packets_in, s.delivered_packets, s.marked_ce),
                "{spec} {t:?}: {c:?}"
            );
            assert_eq!(
                (c.dropped_loss, c.dropped_queue, c.dropped_aqm),
                (dropped_at_the_door, s.dropped_queue, s.dropped_aqm),
                "{spec} {t:?}: {c:?}"
            );
            assert_eq!(
                c.packets_in,
                c.delivered_packets + c.dropped(),
                "{spec} {t:?}"
            );
            assert_eq!(
                (c.queue_packets, c.queue_bytes),
                (0, 0),
                "{spec} {t:?}: empty at the end"
            );
            assert!(c.max_queue_bytes >= queue_peak[&t], "{spec} {t:?}");
            total.packets_in += c.packets_in;
            total.dropped_queue += c.dropped_queue;
            total.dropped_aqm += c.dropped_aqm;
            total.delivered_packets += c.delivered_packets;
        }
        let all = l.counters();
        assert_eq!(
            (
                all.packets_in,
                all.dropped_queue,
                all.dropped_aqm,
                all.delivered_packets
            ),
            (
                total.packets_in,
                total.dropped_queue,
                total.dropped_aqm,
                total.delivered_packets
            ),
            "{spec}"
        );
        // The samples' burst overflows the queue after the test: its drops are the
        // control connection's, and the queue's peak then is not the test's.
        let (test, control) = (
            l.counters_of(Traffic::Test),
            l.counters_of(Traffic::Control),
        );
        assert!(control.dropped() > 0, "{spec}: {control:?}");
        assert!(test.dropped() + test.marked_ce > 0, "{spec}: {test:?}");
        assert!(all.max_queue_bytes >= test.max_queue_bytes.max(control.max_queue_bytes));
        println!("{spec}: test {test:?}\n  control {control:?}");
    }
}

fn rate_trace(trace: Trace) -> LinkTraces {
    LinkTraces {
        rate: Some(trace),
        ..LinkTraces::default()
    }
}
