//! Which link of a topology bound each TCP flow: of the links its data crossed, the one
//! whose queue held its packets longest (then the one that dropped most of them), with
//! what the other links added, and the flow's bound: the goodput of the slowest fixed
//! rate on its way. From the links' per-flow tallies ([`tcplab_record::HopFlow`]),
//! which name a flow by its 5-tuple as the flow's record does. Pure.

use serde::Serialize;

use tcplab_netsim::path::{Direction, Pace, PathSpec};
use tcplab_record::topology::{hop_name, pacer_name, TopologyRecord};
use tcplab_record::{Direction as FlowDirection, FlowRecord, HopFlow, NamedCounters, RunRecord};

use crate::bounds;

/// One TCP flow's way through a topology.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowLinks {
    pub flow: u32,
    /// Its data's sending and receiving hosts.
    pub from: String,
    pub to: String,
    /// The links its data crossed, in order, as the counters name them.
    pub hops: Vec<String>,
    /// The one whose queue held it longest (a link's gap pacer, `pacer LINK A→B`, is
    /// one); `None` where none queued or dropped it.
    pub binding: Option<String>,
    /// Its packets' mean time in that queue, µs, and the packets that link dropped.
    pub binding_queue_us: f64,
    pub binding_drops: u64,
    /// The mean time its packets queued on the other links, added, µs.
    pub others_queue_us: f64,
    /// The mean time its packets took across every link of its way (each link's
    /// queueing, serialization and delay, added), µs: its one-way delay in the emulator.
    pub one_way_us: f64,
    /// The goodput of the slowest fixed rate on its way, bit/s (`None` without one).
    pub bound_bps: Option<f64>,
    /// The trains it arrived in at each stage of its way that meters them, in order:
    /// the stage's name (a link way, or its pacer) and its trains.
    pub trains: Vec<(String, Trains)>,
}

/// A flow's trains at a link: runs of packets arriving back to back
/// ([`crate::burst`]), their mean length and the length within which 99 % of its
/// packets arrived, packets.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Trains {
    pub mean: f64,
    pub p99: f64,
}

/// Each TCP flow's way through the run's topology, in flow order; `None` for a run
/// that did not cross a topology.
pub fn flow_links(run: &RunRecord) -> Option<Vec<FlowLinks>> {
    let path = run.path.as_ref()?;
    let topology = path.topology.as_ref()?;
    let links: Vec<&NamedCounters> = path.links().collect();
    Some(
        run.flows
            .iter()
            .filter(|f| f.udp.is_none())
            .filter_map(|f| one_flow(topology, &links, f, span_us(run)))
            .collect(),
    )
}

impl FlowLinks {
    /// The trains its packets arrived at the binding link in, where that link meters
    /// them (a fixed rate, packets one by one).
    pub fn binding_trains(&self) -> Option<Trains> {
        let binding = self.binding.as_ref()?;
        self.trains
            .iter()
            .find(|(stage, _)| stage == binding)
            .map(|&(_, trains)| trains)
    }
}

/// What `flows` can carry together at most, bit/s: the goodputs of a set of links each
/// flow crosses one of, added (chosen greedily, the link on most flows' ways first, the
/// slowest of those: a bound, if not always the least one). `None` where a flow crosses no fixed rate.
pub fn together_bound_bps(run: &RunRecord, flows: &[FlowLinks]) -> Option<f64> {
    let topology = run.path.as_ref()?.topology.as_ref()?;
    let mss = run
        .flows
        .iter()
        .filter(|f| flows.iter().any(|l| l.flow == f.id))
        .map(|f| f.mss)
        .max()?;
    let mut uncovered: Vec<&FlowLinks> = flows.iter().collect();
    let mut bound = 0.0;
    while !uncovered.is_empty() {
        // The link on most flows' ways, the least goodput of those.
        let (hop, goodput) = uncovered
            .iter()
            .flat_map(|l| &l.hops)
            .filter_map(|h| Some((h, hop_goodput_bps(topology, h, mss, span_us(run))?)))
            .max_by(|(a, a_bps), (b, b_bps)| {
                let on = |h: &String| uncovered.iter().filter(|l| l.hops.contains(h)).count();
                on(a).cmp(&on(b)).then(b_bps.total_cmp(a_bps))
            })?;
        bound += goodput;
        uncovered.retain(|l| !l.hops.contains(hop));
    }
    Some(bound)
}

/// The 5-tuple its data packets carry, as a link's tally names it.
fn data_key(flow: &FlowRecord) -> String {
    let (sender, receiver) = match flow.direction {
        FlowDirection::Down => (&flow.server_addr, &flow.client_addr),
        FlowDirection::Up => (&flow.client_addr, &flow.server_addr),
    };
    format!("tcp {sender} > {receiver}")
}

fn one_flow(
    topology: &TopologyRecord,
    links: &[&NamedCounters],
    flow: &FlowRecord,
    span_us: u64,
) -> Option<FlowLinks> {
    let key = data_key(flow);
    let met: Vec<(&NamedCounters, &HopFlow)> = links
        .iter()
        .copied()
        .filter_map(|l| Some((l, l.flows.iter().find(|h| h.flow == key)?)))
        .collect();
    // Its route: the longest whose every link saw its data.
    let route = topology
        .routes
        .iter()
        .filter(|r| r.hops.iter().all(|h| met.iter().any(|(l, _)| &l.name == h)))
        .max_by_key(|r| r.hops.len())?;
    // Each stage of its way: a link's gap pacer where it has one, then the link.
    let stages: Vec<(String, &HopFlow)> = route
        .hops
        .iter()
        .flat_map(|h| [pacer_name(h), h.clone()])
        .filter_map(|name| {
            let met = met.iter().find(|(l, _)| l.name == name)?.1;
            Some((name, met))
        })
        .collect();
    let binding = stages
        .iter()
        .filter(|(_, t)| t.queue_delay_mean_us > 0.0 || t.dropped > 0)
        .max_by(|(_, a), (_, b)| {
            a.queue_delay_mean_us
                .total_cmp(&b.queue_delay_mean_us)
                .then(a.dropped.cmp(&b.dropped))
        });
    let queued: f64 = stages.iter().map(|(_, t)| t.queue_delay_mean_us).sum();
    let one_way_us = stages.iter().map(|(_, t)| t.delay_mean_us).sum();
    let bound_bps = route
        .hops
        .iter()
        .filter_map(|h| hop_goodput_bps(topology, h, flow.mss, span_us))
        .reduce(f64::min);
    let trains: Vec<(String, Trains)> = stages
        .iter()
        .filter_map(|(name, _)| {
            let link = links.iter().find(|l| &l.name == name)?;
            let met = link.bursts.iter().find(|b| b.flow == key)?;
            let trains = Trains {
                mean: met.burst_mean,
                p99: met.burst_p99,
            };
            Some((name.clone(), trains))
        })
        .collect();
    Some(FlowLinks {
        flow: flow.id,
        from: route.from.clone(),
        to: route.to.clone(),
        hops: route.hops.clone(),
        binding: binding.map(|(name, _)| name.clone()),
        binding_queue_us: binding.map_or(0.0, |(_, t)| t.queue_delay_mean_us),
        binding_drops: binding.map_or(0, |(_, t)| t.dropped),
        others_queue_us: queued - binding.map_or(0.0, |(_, t)| t.queue_delay_mean_us),
        one_way_us,
        bound_bps,
        trains,
    })
}

/// The fixed rate (bit/s) and per-packet overhead of the link a hop crosses, that way;
/// `None` for an unlimited link or one whose rate changes (a trace, a schedule).
pub fn hop_rate(topology: &TopologyRecord, hop: &str) -> Option<(u64, u32)> {
    let (spec, dir) = hop_spec(topology, hop)?;
    spec.link(dir).fixed_rate()
}

/// The most TCP goodput (bit/s, segments of `mss` bytes) a hop lets through over
/// `span_us`: the least of its link's fixed rate, its gap pacer's and its policer's
/// (with its full bucket at the start); `None` with none of them.
fn hop_goodput_bps(topology: &TopologyRecord, hop: &str, mss: u32, span_us: u64) -> Option<f64> {
    let (spec, dir) = hop_spec(topology, hop)?;
    let link = spec.link(dir);
    let rate = link
        .fixed_rate()
        .map(|(bps, overhead)| bounds::link_goodput_bps(bps, mss, overhead));
    let pacer = match link.pace {
        Some(Pace::Rate(bps)) => Some(bounds::link_goodput_bps(bps, mss, 0)),
        Some(Pace::Window(_)) | None => None,
    };
    let policer = link
        .police
        .map(|p| bounds::link_goodput_bps(p.bound_bps(span_us), mss, 0));
    rate.into_iter()
        .chain(pacer)
        .chain(policer)
        .reduce(f64::min)
}

/// The run's measured window, µs: what a policer's bucket is spread over.
fn span_us(run: &RunRecord) -> u64 {
    (run.summary.window_seconds * 1e6) as u64
}

/// The path spec of the link a hop crosses and which way, where it has no schedule.
fn hop_spec(topology: &TopologyRecord, hop: &str) -> Option<(PathSpec, Direction)> {
    hop_link(topology, hop).filter(|(spec, _)| spec.schedule.is_empty())
}

/// The path spec of the link a hop crosses, and which way.
pub fn hop_link(topology: &TopologyRecord, hop: &str) -> Option<(PathSpec, Direction)> {
    topology.links.iter().find_map(|link| {
        let [a, b] = &link.between;
        let dir = if hop_name(&link.name, a, b) == hop {
            Direction::Up
        } else if hop_name(&link.name, b, a) == hop {
            Direction::Down
        } else {
            return None;
        };
        Some((link.path.parse().ok()?, dir))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tcplab_record::link::LinkCounters;
    use tcplab_record::topology::{TopologyLink, TopologyRoute};
    use tcplab_record::PathRecord;

    /// a → r → b and c → r → b: two flows meeting on r → b (10 Mbit/s), a's also on
    /// its own a → r (100 Mbit/s).
    pub(crate) fn run() -> RunRecord {
        let link = |name: &str, between: [&str; 2], path: &str| TopologyLink {
            name: name.into(),
            between: between.map(String::from),
            path: path.into(),
        };
        let route = |from: &str, to: &str, hops: &[&str]| TopologyRoute {
            from: from.into(),
            to: to.into(),
            hops: hops.iter().map(|h| h.to_string()).collect(),
        };
        let met = |flow: &str, packets, dropped, queue: f64, delay: f64| HopFlow {
            flow: flow.into(),
            packets,
            dropped,
            queue_delay_mean_us: queue,
            queue_delay_max_us: queue * 2.0,
            delay_mean_us: delay,
            delay_max_us: delay * 2.0,
        };
        let (a, c) = (
            "tcp 10.77.0.1:40000 > 10.77.0.3:5201",
            "tcp 10.77.0.2:40001 > 10.77.0.3:5201",
        );
        let hop = |name: &str, flows: Vec<HopFlow>| NamedCounters {
            name: name.into(),
            counters: LinkCounters::default(),
            flows,
            ..NamedCounters::default()
        };
        let flows = [
            ("10.77.0.1:40000", "10.77.0.3:5201"),
            ("10.77.0.2:40001", "10.77.0.3:5201"),
        ]
        .into_iter()
        .enumerate()
        .map(|(id, (client, server))| FlowRecord {
            client_addr: client.into(),
            server_addr: server.into(),
            mss: 1448,
            ..crate::explain::tests::flow(id as u32, 5e6)
        })
        .collect();
        let mut run = crate::explain::tests::run("", flows, Vec::new());
        let mut path = PathRecord {
            topology: Some(TopologyRecord {
                file: "t.toml".into(),
                seed: 1,
                hosts: ["a", "c", "b"].map(String::from).to_vec(),
                links: vec![
                    link("ar", ["a", "r"], "rtt 2ms rate 100mbit"),
                    link("cr", ["c", "r"], "rtt 2ms"),
                    link("rb", ["r", "b"], "rtt 10ms rate 10mbit"),
                ],
                routes: vec![
                    route("a", "b", &["ar a→r", "rb r→b"]),
                    route("c", "b", &["cr c→r", "rb r→b"]),
                    route("a", "c", &["ar a→r", "cr r→c"]),
                ],
            }),
            ..PathRecord::default()
        };
        path.up.links = vec![
            hop("ar a→r", vec![met(a, 100, 1, 300.0, 1400.0)]),
            hop("cr c→r", vec![met(c, 80, 0, 0.0, 1000.0)]),
            hop(
                "rb r→b",
                vec![met(a, 99, 4, 2000.0, 8200.0), met(c, 80, 6, 2100.0, 8300.0)],
            ),
        ];
        run.path = Some(path);
        run
    }

    #[test]
    fn each_flow_is_bound_where_it_queued_longest_with_what_the_others_added() {
        let run = run();
        let flows = flow_links(&run).unwrap();
        assert_eq!(flows.len(), 2);
        let a = &flows[0];
        assert_eq!((a.from.as_str(), a.to.as_str()), ("a", "b"));
        assert_eq!(a.hops, ["ar a→r", "rb r→b"]);
        assert_eq!(a.binding.as_deref(), Some("rb r→b"));
        assert_eq!((a.binding_queue_us, a.binding_drops), (2000.0, 4));
        assert_eq!((a.others_queue_us, a.one_way_us), (300.0, 9600.0));
        // The slowest fixed rate on its way: 10 Mbit/s of 1448-byte segments.
        let goodput = 10e6 * 1448.0 / 1500.0;
        assert_eq!(a.bound_bps, Some(goodput));
        let c = &flows[1];
        assert_eq!(
            (c.from.as_str(), c.binding.as_deref()),
            ("c", Some("rb r→b"))
        );
        assert_eq!(c.others_queue_us, 0.0);
        // One link both flows cross binds them together.
        assert_eq!(together_bound_bps(&run, &flows), Some(goodput));
    }

    #[test]
    fn a_flow_on_no_fixed_rate_has_no_bound_and_none_binds_it_unqueued() {
        let mut run = run();
        let path = run.path.as_mut().unwrap();
        path.topology.as_mut().unwrap().links[2].path = "rtt 10ms".into();
        for link in &mut path.up.links {
            for f in &mut link.flows {
                (f.queue_delay_mean_us, f.dropped) = (0.0, 0);
            }
        }
        let flows = flow_links(&run).unwrap();
        assert_eq!(
            (flows[1].binding.as_deref(), flows[1].bound_bps),
            (None, None)
        );
        assert_eq!(flows[0].bound_bps, Some(100e6 * 1448.0 / 1500.0));
        assert_eq!(together_bound_bps(&run, &flows), None);
        let mut dumbbell = run.clone();
        dumbbell.path.as_mut().unwrap().topology = None;
        assert_eq!(flow_links(&dumbbell), None);
    }

    #[test]
    fn a_gap_pacer_that_holds_a_flow_longest_binds_it_at_its_rate() {
        let mut run = run();
        let path = run.path.as_mut().unwrap();
        path.topology.as_mut().unwrap().links[0].path = "rtt 2ms rate 100mbit up.pace 5mbit".into();
        let a = path.up.links[0].flows[0].flow.clone();
        path.up.links.push(NamedCounters {
            name: pacer_name("ar a→r"),
            counters: LinkCounters::default(),
            bursts: vec![tcplab_record::BurstStats {
                flow: a.clone(),
                burst_mean: 12.5,
                burst_p99: 44.0,
                ..Default::default()
            }],
            flows: vec![HopFlow {
                flow: a,
                packets: 100,
                dropped: 0,
                queue_delay_mean_us: 40_000.0,
                queue_delay_max_us: 80_000.0,
                delay_mean_us: 42_000.0,
                delay_max_us: 84_000.0,
            }],
            ..NamedCounters::default()
        });
        let flows = flow_links(&run).unwrap();
        let a = &flows[0];
        assert_eq!(a.hops, ["ar a→r", "rb r→b"], "the links, the pacer apart");
        assert_eq!(a.binding.as_deref(), Some("pacer ar a→r"));
        assert_eq!(a.binding_queue_us, 40_000.0);
        // The trains it reached the pacer in (the sender's own), which the pacer meters.
        let sender_s = Trains {
            mean: 12.5,
            p99: 44.0,
        };
        assert_eq!(a.binding_trains(), Some(sender_s));
        assert_eq!(a.trains, [("pacer ar a→r".to_owned(), sender_s)]);
        // The link's 300 µs and rb's 2 000 µs; the pacer's time is part of the way.
        assert_eq!((a.others_queue_us, a.one_way_us), (2300.0, 51_600.0));
        // 5 Mbit/s paced, no per-packet overhead counted: below rb's 10 Mbit/s.
        assert_eq!(
            a.bound_bps,
            Some(bounds::link_goodput_bps(5_000_000, 1448, 0))
        );
        // The other flow's way has no pacer: as before. Together: rb, which both cross.
        assert_eq!(flows[1].binding.as_deref(), Some("rb r→b"));
        assert_eq!(
            together_bound_bps(&run, &flows),
            Some(10e6 * 1448.0 / 1500.0)
        );
        // Paced below its rate, rb binds them together at its pacer's.
        let path = run.path.as_mut().unwrap();
        path.topology.as_mut().unwrap().links[2].path = "rtt 10ms rate 10mbit pace 2mbit".into();
        let flows = flow_links(&run).unwrap();
        assert_eq!(
            together_bound_bps(&run, &flows),
            Some(bounds::link_goodput_bps(2_000_000, 1448, 0))
        );
    }
}
