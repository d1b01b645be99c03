//! Properties of the link over random specs and arrivals.

mod common;

use common::*;
use proptest::prelude::*;
use tcplab_netsim::link::{Link, LinkTraces, StepTrace, Trace};
use tcplab_netsim::path::{Bottleneck, Direction, Limit, PathSpec};

fn spec() -> impl Strategy<Value = String> {
    let delay = prop_oneof![
        Just(""),
        Just("delay 5ms"),
        Just("delay 1ms jitter 3ms reorder"),
        Just("delay 20ms jitter 5ms dist pareto"),
        Just("delay 10ms reorder 30% gap 2"),
        Just("delay 1ms delay-trace d"),
        Just("delay-trace d reorder")
    ];
    let loss = prop_oneof![
        Just(""),
        Just("loss 5%"),
        Just("loss gemodel 5% 30%"),
        Just("loss-trace l")
    ];
    let extra = prop_oneof![
        Just(""),
        Just("duplicate 10%"),
        Just("corrupt 10%"),
        Just("duplicate 20% corrupt 5%")
    ];
    let neck = prop_oneof![
        Just(""),
        Just("rate 10mbit"),
        Just("rate 3mbit overhead 38"),
        Just("rate 50mbit"),
        Just("trace t")
    ];
    let queue = prop_oneof![
        Just(""),
        Just("queue 0"),
        Just("queue 5p"),
        Just("queue 20p"),
        Just("queue 4000B"),
        Just("queue 64K")
    ];
    let aqm = prop_oneof![
        Just(""),
        Just("aqm codel"),
        Just("aqm codel target 1ms interval 10ms")
    ];
    (delay, loss, extra, neck, queue, aqm).prop_map(|(a, b, c, d, e, f)| {
        [a, b, c, d, e, f]
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    })
}

fn arrivals() -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec((0..3 * MS, 40..=1500u32), 1..400).prop_map(|v| {
        let mut t = 0;
        v.into_iter()
            .map(|(gap, len)| {
                // Bursts: most gaps small, some long.
                t += if gap < MS { gap / 20 } else { gap };
                (t, len)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn conservation_bounds_and_order(spec in spec(), arrivals in arrivals(), seed in any::<u64>()) {
        let path: PathSpec = spec.parse().unwrap();
        let trace = matches!(path.up.bottleneck, Bottleneck::Trace { .. })
            .then(|| Trace::parse("1\n1\n3\n4\n").unwrap());
        // Delays that fall by more than packets' spacing; losses of none and all.
        let delays = path.up.delay_trace.is_some()
            .then(|| StepTrace::parse_delays("0 5ms\n1ms 0\n2ms 9ms\n2500us 1ms\n4ms\n").unwrap());
        let losses = path.up.loss_trace.is_some()
            .then(|| StepTrace::parse_losses("0 0%\n3ms 100%\n5ms 10%\n8ms\n").unwrap());
        let traces = LinkTraces { rate: trace, delay: delays, loss: losses };
        let mut link: Link<u64> = Link::new(&path.timeline(Direction::Up), path.rtt_us(), path.mtu, seed, traces).unwrap();
        link.start_schedule(0);
        let limit = link.limit();
        let mut violation = None;
        let sim = simulate_with(&mut link, arrivals.clone(), u64::MAX, |l, now| {
            let c = l.counters();
            let inside = l.inside() as u64;
            if c.packets_in != c.delivered_packets + c.dropped() + inside {
                violation = Some(format!("conservation at {now}: {c:?}, inside {inside}"));
            }
            // A packet that found the link idle is always taken, even beyond the limit.
            let within = match limit {
                Limit::Packets(n) => c.queue_packets <= n.max(1),
                Limit::Bytes(n) => c.queue_bytes <= n || c.queue_packets == 1,
            };
            if !within {
                violation = Some(format!("queue over {limit:?} at {now}: {c:?}"));
            }
        });
        prop_assert!(violation.is_none(), "{}: {}", spec, violation.unwrap());
        let c = link.counters();
        prop_assert_eq!(link.inside(), 0);
        prop_assert_eq!(c.queue_packets, 0);
        // Every handle comes back exactly once.
        let mut ids: Vec<u64> = sim.delivered.iter().map(|d| d.packet)
            .chain(sim.dropped.iter().map(|d| d.packet)).collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        prop_assert_eq!(before, ids.len(), "a handle came back twice");
        let originals = ids.iter().filter(|&&id| id & DUP == 0).count() as u64;
        prop_assert_eq!(originals, arrivals.len() as u64);
        prop_assert_eq!(c.delivered_packets, sim.delivered.len() as u64);
        // Without jitter that may reorder or netem reorder, delivery keeps arrival order.
        if !spec.contains("reorder") {
            prop_assert!(sim.delivered.windows(2).all(|w| (w[0].packet & !DUP) <= (w[1].packet & !DUP)),
                "{}: out of order", spec);
            prop_assert_eq!(c.reordered, 0);
        }
        // Drop-tail on a fixed rate: no wait beyond a full buffer plus the packet on the wire.
        if let (Bottleneck::Rate { bps, overhead }, false) = (&path.up.bottleneck, spec.contains("codel")) {
            let per = u64::from(path.mtu + overhead);
            // A byte limit counts wire bytes; each packet (40 B at least) adds the overhead.
            let buffer = match limit {
                Limit::Packets(n) => n.max(1) * per,
                Limit::Bytes(n) => n + (n / 40 + 1) * u64::from(*overhead) + per,
            };
            let bound = ((buffer + per) * 8 * 1_000_000_000).div_ceil(*bps);
            for d in &sim.delivered {
                prop_assert!(d.queue_delay <= bound, "{}: waited {} > {}", spec, d.queue_delay, bound);
            }
        }
    }
}
