//! Which link of a topology bound each TCP flow: of the links its data crossed, the one
//! whose queue held its packets longest (then the one that dropped most of them), with
//! what the other links added, and the flow's bound: the goodput of the slowest fixed
//! rate on its way. From the links' per-flow tallies ([`tcplab_record::HopFlow`]),
//! which name a flow by its 5-tuple as the flow's record does. Pure.

use serde::Serialize;

use tcplab_netsim::path::{Bottleneck, Direction, PathSpec};
use tcplab_record::topology::{hop_name, TopologyRecord};
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
    /// The one whose queue held it longest; `None` where no link queued or dropped it.
    pub binding: Option<String>,
    /// Its packets' mean time in that queue, µs, and the packets that link dropped.
    pub binding_queue_us: f64,
    pub binding_drops: u64,
    /// The mean time its packets queued on the other links, added, µs.
    pub others_queue_us: f64,
    /// The goodput of the slowest fixed rate on its way, bit/s (`None` without one).
    pub bound_bps: Option<f64>,
}

/// Each TCP flow's way through the run's topology, in flow order; `None` for a run
/// that did not cross a topology.
pub fn flow_links(run: &RunRecord) -> Option<Vec<FlowLinks>> {
    let path = run.path.as_ref()?;
    let topology = path.topology.as_ref()?;
    let links = &path.up.links;
    Some(
        run.flows
            .iter()
            .filter(|f| f.udp.is_none())
            .filter_map(|f| one_flow(topology, links, f))
            .collect(),
    )
}

/// What `flows` can carry together at most, bit/s: the goodputs of a set of links each
/// flow crosses one of, added (chosen greedily, the link on most flows' ways first: a
/// bound, if not always the least one). `None` where a flow crosses no fixed rate.
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
        let (hop, (bps, overhead)) = uncovered
            .iter()
            .flat_map(|l| &l.hops)
            .filter_map(|h| Some((h, hop_rate(topology, h)?)))
            .max_by_key(|(h, _)| uncovered.iter().filter(|l| l.hops.contains(h)).count())?;
        bound += bounds::link_goodput_bps(bps, mss, overhead);
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
    links: &[NamedCounters],
    flow: &FlowRecord,
) -> Option<FlowLinks> {
    let key = data_key(flow);
    let met: Vec<(&NamedCounters, &HopFlow)> = links
        .iter()
        .filter_map(|l| Some((l, l.flows.iter().find(|h| h.flow == key)?)))
        .collect();
    // Its route: the longest whose every link saw its data.
    let route = topology
        .routes
        .iter()
        .filter(|r| r.hops.iter().all(|h| met.iter().any(|(l, _)| &l.name == h)))
        .max_by_key(|r| r.hops.len())?;
    let on_route: Vec<&HopFlow> = route
        .hops
        .iter()
        .filter_map(|h| met.iter().find(|(l, _)| &l.name == h).map(|(_, t)| *t))
        .collect();
    let binding = route
        .hops
        .iter()
        .zip(&on_route)
        .filter(|(_, t)| t.queue_delay_mean_us > 0.0 || t.dropped > 0)
        .max_by(|(_, a), (_, b)| {
            a.queue_delay_mean_us
                .total_cmp(&b.queue_delay_mean_us)
                .then(a.dropped.cmp(&b.dropped))
        });
    let queued: f64 = on_route.iter().map(|t| t.queue_delay_mean_us).sum();
    let bound_bps = route
        .hops
        .iter()
        .filter_map(|h| hop_rate(topology, h))
        .map(|(bps, overhead)| bounds::link_goodput_bps(bps, flow.mss, overhead))
        .reduce(f64::min);
    Some(FlowLinks {
        flow: flow.id,
        from: route.from.clone(),
        to: route.to.clone(),
        hops: route.hops.clone(),
        binding: binding.map(|(h, _)| h.clone()),
        binding_queue_us: binding.map_or(0.0, |(_, t)| t.queue_delay_mean_us),
        binding_drops: binding.map_or(0, |(_, t)| t.dropped),
        others_queue_us: queued - binding.map_or(0.0, |(_, t)| t.queue_delay_mean_us),
        bound_bps,
    })
}

/// The fixed rate (bit/s) and per-packet overhead of the link a hop crosses, that way;
/// `None` for an unlimited link or one whose rate changes (a trace, a schedule).
fn hop_rate(topology: &TopologyRecord, hop: &str) -> Option<(u64, u32)> {
    topology.links.iter().find_map(|link| {
        let [a, b] = &link.between;
        let dir = if hop_name(&link.name, a, b) == hop {
            Direction::Up
        } else if hop_name(&link.name, b, a) == hop {
            Direction::Down
        } else {
            return None;
        };
        let spec: PathSpec = link.path.parse().ok()?;
        if !spec.schedule.is_empty() {
            return None;
        }
        match spec.link(dir).bottleneck {
            Bottleneck::Rate { bps, overhead } => Some((bps, overhead)),
            Bottleneck::Unlimited | Bottleneck::Trace { .. } => None,
        }
    })
}
