//! A topology's links at work, in virtual time: a packet's time across a chain is the sum
//! of its links' delays, serializations and queueing, each link behaving exactly as it
//! does alone; routes are taken as declared, the way back on its own.

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tcplab_netsim::dumbbell::derive_seed;
use tcplab_netsim::fabric::{Arrived, Crossed, Fabric};
use tcplab_netsim::link::{Link, LinkTraces, PacketMeta};
use tcplab_netsim::path::{Direction, PathSpec};
use tcplab_netsim::topology::{Hop, Topology};

/// h1 — r1 — r2 — r3 — h2: four links of their own rates, delays and queues.
const CHAIN: &str = r#"
host = [{ name = "h1" }, { name = "h2" }]
router = [{ name = "r1" }, { name = "r2" }, { name = "r3" }]
link = [
    { between = ["h1", "r1"], path = "delay 1ms rate 1gbit" },
    { between = ["r1", "r2"], path = "delay 5ms rate 100mbit queue 200p" },
    { between = ["r2", "r3"], path = "delay 3ms rate 50mbit queue 64K" },
    { between = ["r3", "h2"], path = "delay 500us rate 200mbit" },
]
"#;

fn no_copy(_: &u64) -> Option<u64> {
    None
}

/// Random packets from `from` over `span` ns, sorted.
fn traffic(n: usize, span: u64, seed: u64) -> Vec<(u64, u32)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut a: Vec<(u64, u32)> = (0..n)
        .map(|_| (rng.random_range(0..span), rng.random_range(40..=1500)))
        .collect();
    a.sort_unstable();
    a
}

/// What a run of the fabric gave: the packets that arrived, every crossing of a link,
/// and how many were lost.
struct Outcome {
    arrived: Vec<Arrived<u64>>,
    crossings: Vec<Crossed<u64>>,
    lost: usize,
}

/// Drives `fabric` with `sends` (time, from, to, bytes), sorted by time; each packet's
/// id is its index.
fn run(fabric: &mut Fabric<u64>, sends: &[(u64, usize, usize, u32)]) -> Outcome {
    let mut out = Outcome {
        arrived: Vec::new(),
        crossings: Vec::new(),
        lost: 0,
    };
    let mut next = 0;
    loop {
        let now = match (sends.get(next).map(|s| s.0), fabric.next_deadline()) {
            (None, None) => break,
            (Some(a), Some(d)) => a.min(d),
            (a, d) => a.or(d).unwrap(),
        };
        fabric.advance(now, &mut no_copy, &mut |c| out.crossings.push(c));
        while let Some(&(t, from, to, len)) = sends.get(next).filter(|s| s.0 <= now) {
            fabric.push(t, from, to, next as u64, PacketMeta::len(len), &mut no_copy);
            next += 1;
        }
        while let Some(a) = fabric.pop_arrived() {
            out.arrived.push(a);
        }
        while fabric.pop_lost().is_some() {
            out.lost += 1;
        }
    }
    out
}

#[test]
fn a_packet_s_time_across_a_chain_is_each_link_s_as_it_would_be_alone() {
    let topology: Topology = CHAIN.parse().unwrap();
    let (h1, h2) = (topology.node("h1").unwrap(), topology.node("h2").unwrap());
    let seed = 11;
    let packets = traffic(20_000, 2 * S, 5);
    // Both ways at once: the way back's links are others.
    let mut tagged: Vec<(u64, usize, usize, u32, Option<usize>)> = packets
        .iter()
        .enumerate()
        .map(|(k, &(t, len))| (t, h1, h2, len, Some(k)))
        .chain(
            traffic(5_000, 2 * S, 6)
                .into_iter()
                .map(|(t, len)| (t, h2, h1, len, None)),
        )
        .collect();
    tagged.sort_by_key(|s| s.0);
    // The fabric's ids are the sends' places in time order.
    let mut id_of = vec![0; packets.len()];
    for (id, s) in tagged.iter().enumerate() {
        if let Some(k) = s.4 {
            id_of[k] = id as u64;
        }
    }
    let sends: Vec<(u64, usize, usize, u32)> = tagged
        .iter()
        .map(|&(t, from, to, len, _)| (t, from, to, len))
        .collect();
    let mut fabric = Fabric::new(topology.clone(), seed, 1500, |_| LinkTraces::default()).unwrap();
    let Outcome {
        arrived,
        crossings,
        lost,
    } = run(&mut fabric, &sends);

    // The reference: each link of the way there alone, fed what the one before it let
    // out, when it did.
    let route = topology.route(h1, h2).to_vec();
    let mut times: Vec<(u64, u32)> = packets.clone();
    let mut kept: Vec<usize> = (0..packets.len()).collect();
    for &hop in &route {
        let path: &PathSpec = &topology.links[hop.link].path;
        let mut link: Link<u64> = Link::new(
            &path.timeline(hop.dir),
            topology.bdp_rtt_us(hop.link),
            1500,
            derive_seed(
                seed,
                2 * hop.link as u64 + u64::from(hop.dir == Direction::Down),
            ),
            LinkTraces::default(),
        )
        .unwrap();
        let sim = simulate(&mut link, times.iter().copied(), u64::MAX);
        let mut out: Vec<(u64, u64)> = sim.delivered.iter().map(|d| (d.packet, d.due)).collect();
        out.sort_unstable();
        kept = out.iter().map(|&(i, _)| kept[i as usize]).collect();
        times = out
            .iter()
            .map(|&(i, due)| (due, times[i as usize].1))
            .collect();
        // In order: a FIFO with no reordering.
        assert!(times.windows(2).all(|w| w[0].0 <= w[1].0));
    }
    let there: Vec<(u64, u64)> = arrived
        .iter()
        .filter(|a| a.from == h1)
        .map(|a| (a.packet, a.arrived_at))
        .collect();
    let expected: Vec<(u64, u64)> = kept
        .iter()
        .zip(&times)
        .map(|(&k, &(due, _))| (id_of[k], due))
        .collect();
    assert_eq!(there.len(), expected.len());
    let mut there = there;
    there.sort_unstable();
    let mut expected = expected;
    expected.sort_unstable();
    assert_eq!(there, expected);
    assert!(
        lost > 0,
        "the 64 KB queue at 50 Mbit/s dropped nothing: no queueing tested"
    );

    // Each arrival's time across is the sum of its times in each link of its route.
    let mut by_packet: std::collections::HashMap<u64, Vec<&Crossed<u64>>> = Default::default();
    for c in &crossings {
        by_packet.entry(c.packet).or_default().push(c);
    }
    for a in &arrived {
        let mine = &by_packet[&a.packet];
        assert_eq!(
            mine.iter().map(|c| c.hop).collect::<Vec<_>>(),
            topology.route(a.from, a.to),
            "{a:?}"
        );
        let sum: u64 = mine.iter().map(|c| c.left_at - c.entered_at).sum();
        assert_eq!(a.arrived_at - a.sent_at, sum, "{a:?}");
        assert!(mine.windows(2).all(|w| w[0].left_at == w[1].entered_at));
    }
}

#[test]
fn every_crossing_follows_the_route_and_the_way_back_its_own() {
    let text = r#"
host = [{ name = "a" }, { name = "b" }]
router = [{ name = "r1" }, { name = "r2" }, { name = "r3" }]
link = [
    { between = ["a", "r1"], path = "delay 1ms" },
    { between = ["r1", "r2"], path = "delay 5ms rate 100mbit" },
    { between = ["r2", "b"], path = "delay 1ms" },
    { between = ["r1", "r3"], path = "delay 20ms rate 10mbit" },
    { between = ["r3", "b"], path = "delay 1ms" },
]
route = [{ from = "b", to = "a", via = ["r3", "r1"] }]
"#;
    let topology: Topology = text.parse().unwrap();
    let (a, b) = (topology.node("a").unwrap(), topology.node("b").unwrap());
    let mut sends: Vec<(u64, usize, usize, u32)> = (0..200)
        .map(|i| {
            (
                i * MS,
                if i % 2 == 0 { a } else { b },
                if i % 2 == 0 { b } else { a },
                1000,
            )
        })
        .collect();
    sends.sort_by_key(|s| s.0);
    let mut fabric = Fabric::new(topology.clone(), 1, 1500, |_| LinkTraces::default()).unwrap();
    let Outcome {
        arrived,
        crossings,
        lost,
    } = run(&mut fabric, &sends);
    assert_eq!((arrived.len(), lost), (200, 0));
    let ways = |from| -> Vec<Hop> {
        let mut hops: Vec<Hop> = crossings
            .iter()
            .filter(|c| c.from == from)
            .map(|c| c.hop)
            .collect();
        hops.sort();
        hops.dedup();
        hops
    };
    let mut there = topology.route(a, b).to_vec();
    there.sort();
    let mut back = topology.route(b, a).to_vec();
    back.sort();
    assert_eq!(ways(a), there);
    assert_eq!(ways(b), back);
    assert!(back.iter().any(|h| h.link == 3), "back through r3");
    assert!(!there.iter().any(|h| h.link == 3), "there through r2");
    // 7 ms there; back 22 ms plus 0.8 ms at 10 Mbit/s for 1000 bytes, and 1 ms first.
    for x in &arrived {
        let took = x.arrived_at - x.sent_at;
        if x.from == a {
            assert_eq!(took, 7 * MS + 80_000, "{x:?}");
        } else {
            assert_eq!(took, 22 * MS + 800_000, "{x:?}");
        }
    }
}
