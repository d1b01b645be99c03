//! Every lab the emulator carries is built here from a [`Topology`]: a topology file's
//! (`tcplab lab up --topology FILE`), or a dumbbell's (`--path`, `access`) as `tcplab
//! lab topology` prints it ([`Shape`]). A network namespace with a TUN device per host,
//! and two emulator threads carrying the links, split as a dumbbell's directions
//! ([`Topology::side`]). A packet follows its route by its source and destination
//! ([`Target::Path`]; a stage whose every route goes on the same way skips the look),
//! leaving each link onto the next at its due time, so its time across a chain is the
//! sum of its times on each link; routers are points in those threads, not namespaces.
//!
//! Addresses of a topology file's lab: host k (from 1, in the file's order) is
//! 10.77.0.k/16 and fd00:77::k/64. For the commands that take a dumbbell's roles, the
//! first host is the lab's server and the others its clients; every host answers to its
//! name too.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tcplab_netsim::dumbbell::LinkRole;
use tcplab_netsim::link::{Link, LinkError, LinkTraces};
use tcplab_netsim::path::{Direction, LinkSpec, Pace, PacingTarget};
use tcplab_netsim::topology::{Hop as TopoHop, Topology};
use tcplab_netsim::traffic::Classifier;
use tcplab_record::capture::CapturePoint;
use tcplab_record::topology::{self as record, TopologyLink, TopologyRecord, TopologyRoute};
use tcplab_sys::netns::NetNs;
use tcplab_sys::tun::MAX_PACKET;

use crate::capture::{Capture, CaptureSpec};
use crate::lab::{
    burst_meter, io_err, is_ideal, load_traces, make_host, pacer_hop, Emulator, HostPlan,
};
use crate::pipeline::{any_of, DirectionPlan, Hop, Inbox, Target};
use crate::pool::BufId;
use crate::registry::LabEntry;
use crate::{Lab, LabConfig, LabError};
use tcplab_analysis::hop::HopMeter;

/// How often each link's queue is kept: 1000 samples a link for 10 s.
const HOP_QUEUE_SAMPLE_NS: u64 = 10_000_000;

/// What to build.
#[derive(Clone, Debug)]
pub struct TopologyConfig {
    pub name: String,
    pub topology: Topology,
    /// The file it was read from, as the lab's entry names it.
    pub file: String,
    /// Set on every host after the lab's own defaults.
    pub sysctls: BTreeMap<String, String>,
    /// The seed of every link's randomness; unpinned, the lab draws one.
    pub seed: Option<u64>,
    /// The TCP port of a tcplab server's control listener in the lab, counted apart.
    pub control_port: Option<u16>,
    /// A pcapng file per link (`--capture DIR`): DIR/LINK.pcapng.
    pub capture: Option<LinkCaptures>,
}

/// Where each link's capture goes, how much of each packet it keeps, and which links
/// (by name; none: every link).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkCaptures {
    pub dir: PathBuf,
    pub snaplen: u32,
    pub links: Vec<String>,
}

impl LinkCaptures {
    /// Whether link `name` is captured.
    fn takes(&self, name: &str) -> bool {
        self.links.is_empty() || self.links.iter().any(|l| l == name)
    }

    /// A link to capture that `topology` lacks, in one line.
    pub(crate) fn check(&self, topology: &Topology) -> Result<(), LabError> {
        match self
            .links
            .iter()
            .find(|l| !topology.links.iter().any(|t| &t.name == *l))
        {
            Some(l) => Err(LabError::Name(format!(
                "--capture-link {l}: the topology has no such link (links: {})",
                topology
                    .links
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
            None => Ok(()),
        }
    }

    /// Link `name`'s capture.
    fn spec(&self, name: &str) -> CaptureSpec {
        CaptureSpec {
            file: self.dir.join(format!("{name}.pcapng")),
            snaplen: self.snaplen,
            at: CapturePoint::Bottleneck,
        }
    }
}

/// Host `k`'s addresses (from 1).
pub(crate) fn host_addrs(k: u16) -> (IpAddr, IpAddr) {
    (
        IpAddr::V4(Ipv4Addr::new(10, 77, (k >> 8) as u8, k as u8)),
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, k)),
    )
}

/// A hop's name in the counters: its link's, and which way.
fn hop_name(topology: &Topology, hop: TopoHop) -> String {
    let (from, to) = topology.hop_ends(hop);
    record::hop_name(
        &topology.links[hop.link].name,
        &topology.nodes[from].name,
        &topology.nodes[to].name,
    )
}

/// What the lab's entry and its runs' records hold of `topology`: hosts, links and the
/// route between every two hosts.
pub fn topology_record(topology: &Topology, file: &str, seed: u64) -> TopologyRecord {
    let hosts: Vec<usize> = topology.hosts().collect();
    let name = |node: usize| topology.nodes[node].name.clone();
    TopologyRecord {
        file: file.to_owned(),
        seed,
        hosts: hosts.iter().map(|&n| name(n)).collect(),
        links: topology
            .links
            .iter()
            .map(|l| TopologyLink {
                name: l.name.clone(),
                between: l.ends.map(name),
                path: l.path.to_string(),
            })
            .collect(),
        routes: hosts
            .iter()
            .flat_map(|&from| hosts.iter().map(move |&to| (from, to)))
            .filter(|(from, to)| from != to)
            .map(|(from, to)| TopologyRoute {
                from: name(from),
                to: name(to),
                hops: topology
                    .route(from, to)
                    .iter()
                    .map(|&hop| hop_name(topology, hop))
                    .collect(),
            })
            .collect(),
    }
}

/// Every link way's traces, read and parsed (by [`TopoHop::index`]): a bad line is one
/// error naming its file and line, before anything is built.
pub(crate) fn load_all_traces(topology: &Topology) -> Result<Vec<LinkTraces>, LabError> {
    topology
        .hops()
        .map(|hop| load_traces(topology.links[hop.link].path.link(hop.dir)))
        .collect()
}

/// What a lab built from a topology is besides its graph. A topology file's: each link
/// way named by its link and ends ("l2 r1→r2"), metered flow by flow, captured link by
/// link. Or a dumbbell's (`--path`, `access`), built from the topology `lab topology`
/// prints for it (link 0 its bottleneck, link k client k's access link), whose record
/// keeps what it has always had: links named `bottleneck`, `access clientK` (where a
/// client's is more than ideal) and `pacer`, the bottleneck's trains and queue its
/// direction's, and the lab's one capture at the bottleneck or at a host.
pub(crate) enum Shape<'a> {
    File(&'a TopologyConfig),
    Dumbbell(&'a LabConfig),
}

impl Shape<'_> {
    fn name(&self) -> &str {
        match self {
            Shape::File(c) => &c.name,
            Shape::Dumbbell(c) => &c.name,
        }
    }

    fn sysctls(&self) -> &BTreeMap<String, String> {
        match self {
            Shape::File(c) => &c.sysctls,
            Shape::Dumbbell(c) => &c.sysctls,
        }
    }

    fn control_port(&self) -> Option<u16> {
        match self {
            Shape::File(c) => c.control_port,
            Shape::Dumbbell(c) => c.control_port,
        }
    }

    /// Whether a link way is a stage of the emulator: a dumbbell's ideal access link
    /// is none (its client's packets go straight to the bottleneck).
    fn carries(&self, hop: TopoHop) -> bool {
        match self {
            Shape::File(_) => true,
            Shape::Dumbbell(c) => self.is_bottleneck(hop) || !is_ideal(&c.clients[hop.link - 1]),
        }
    }

    /// Whether the emulator routes between two hosts, by whether each is the first: a
    /// dumbbell's only to and from its server (a client's packet to another client
    /// goes to the server, as the kernel would send it through a plain path).
    fn routes(&self, from_first: bool, to_first: bool) -> bool {
        match self {
            Shape::File(_) => true,
            Shape::Dumbbell(_) => from_first || to_first,
        }
    }

    /// Whether a host's packets that no route names (IPv6 neighbour discovery from
    /// `::`, a link-local source) go where its every route goes: a dumbbell's, as a
    /// plain path carries them to the server; a topology file's are dropped, counted
    /// unroutable, so that each link counts only what its routes carry.
    fn carries_unrouted(&self) -> bool {
        matches!(self, Shape::Dumbbell(_))
    }

    /// Whether a link way is a dumbbell's bottleneck (link 0 of its file): metered for
    /// trains, its queue and capacity the direction's. A topology file has none.
    fn is_bottleneck(&self, hop: TopoHop) -> bool {
        matches!(self, Shape::Dumbbell(_)) && hop.link == 0
    }

    /// A link way's name in the counters.
    fn way_name(&self, topology: &Topology, hop: TopoHop) -> String {
        match self {
            Shape::File(_) => hop_name(topology, hop),
            Shape::Dumbbell(_) if self.is_bottleneck(hop) => "bottleneck".into(),
            Shape::Dumbbell(_) => format!("access client{}", hop.link),
        }
    }

    /// The name of the gap pacer before a link way named `way`.
    fn pacer_name(&self, way: &str) -> String {
        match self {
            Shape::File(_) => record::pacer_name(way),
            Shape::Dumbbell(_) => "pacer".into(),
        }
    }

    /// Whether every stage meters each flow's packets and queue (a topology file's),
    /// or only the bottleneck its trains (a dumbbell's).
    fn meters_flows(&self) -> bool {
        matches!(self, Shape::File(_))
    }

    /// A link way's model: a dumbbell's seeded and sized as it always was
    /// ([`Link::in_lab`], the same draws as the topology's own).
    fn link(
        &self,
        topology: &Topology,
        hop: TopoHop,
        seed: u64,
        mtu: u32,
        traces: LinkTraces,
    ) -> Result<Link<BufId>, LinkError> {
        match self {
            Shape::File(_) => topology.hop_link(hop, seed, mtu, traces),
            Shape::Dumbbell(c) => {
                let role = match hop.link {
                    0 => LinkRole::Bottleneck,
                    k => LinkRole::Access(k - 1),
                };
                Link::in_lab(&c.dumbbell(), role, hop.dir, seed, mtu, traces)
            }
        }
    }
}

/// Builds the lab of `topology` as `shape` says, its hosts `entry`'s with the
/// addresses `addrs` (v4, v6) in order, and starts its emulator's two threads.
pub(crate) fn build(
    topology: &Topology,
    shape: Shape,
    seed: u64,
    traces: Vec<LinkTraces>,
    (entry, addrs): (LabEntry, &[(IpAddr, IpAddr)]),
    made: &mut Vec<NetNs>,
) -> Result<Lab, LabError> {
    let mtu = topology.mtu();
    let nodes: Vec<usize> = topology.hosts().collect();
    let unlimited = LinkSpec::default();
    let mut hosts = Vec::new();
    let mut devices = Vec::new();
    for ((&node, host), &addrs) in nodes.iter().zip(entry.hosts()).zip(addrs) {
        // Its interface queue is the first link out of it's to set.
        let sends = topology
            .hops()
            .find(|&hop| topology.hop_ends(hop).0 == node)
            .map_or(&unlimited, |hop| {
                topology.links[hop.link].path.link(hop.dir)
            });
        let plan = HostPlan {
            ns: &host.ns,
            addrs,
            mtu,
            sends,
            sysctls: shape.sysctls(),
        };
        let (host, device) = make_host(&plan, made)?;
        hosts.push(host);
        devices.push(device);
    }
    let emulator_capture = match &shape {
        Shape::Dumbbell(c) => c.capture.as_ref(),
        Shape::File(_) => None,
    };
    let mut emulator = Emulator::new(emulator_capture, shape.name())?;
    // Each link's place in the emulator's captures, where it is captured.
    let mut capture_of: Vec<Option<usize>> = vec![None; topology.links.len()];
    match &shape {
        Shape::Dumbbell(c) => capture_of[0] = c.capture.as_ref().map(|_| 0),
        Shape::File(config) => {
            if let Some(capture) = &config.capture {
                let epoch_unix_ns = emulator.epoch_unix_us as u64 * 1000;
                for (k, link) in topology.links.iter().enumerate() {
                    if !capture.takes(&link.name) {
                        continue;
                    }
                    let spec = capture.spec(&link.name);
                    capture_of[k] = Some(emulator.captures.len());
                    emulator.captures.push(
                        Capture::start_link(&spec, epoch_unix_ns, &config.name, &link.name)
                            .map_err(io_err("starting the capture"))?,
                    );
                }
                emulator.capture_file = Some(capture.dir.display().to_string());
            }
        }
    }
    // The emulator's stages: each link way it carries, then the gap pacers (`pace
    // RATE`) before the link ways that have one, as a dumbbell's before its
    // bottleneck, each with the link way it paces; and each stage's number.
    let ways: Vec<TopoHop> = topology.hops().filter(|&hop| shape.carries(hop)).collect();
    let paced: Vec<TopoHop> = ways
        .iter()
        .copied()
        .filter(|&hop| topology.links[hop.link].path.link(hop.dir).pace.is_some())
        .collect();
    let stage_of_way: HashMap<TopoHop, usize> =
        ways.iter().enumerate().map(|(k, &hop)| (hop, k)).collect();
    let stage_of_pacer: HashMap<TopoHop, usize> = paced
        .iter()
        .enumerate()
        .map(|(k, &hop)| (hop, ways.len() + k))
        .collect();
    // Each stage's thread: a link way's side, a pacer with the way it paces.
    let sides: Vec<usize> = ways
        .iter()
        .chain(&paced)
        .map(|&hop| topology.side(hop).index())
        .collect();
    // Every route's stages, by its ends' addresses, and for beyond the lab (`--far
    // host`, through the first host): a host's way to the first host, and the first
    // host's way to it.
    let egress_of: HashMap<usize, usize> = nodes.iter().enumerate().map(|(k, &n)| (n, k)).collect();
    let route_stages = |from: usize, to: usize| -> Vec<Target> {
        topology
            .route(from, to)
            .iter()
            .filter(|hop| shape.carries(**hop))
            .flat_map(|hop| {
                let pacer = stage_of_pacer.get(hop).map(|&p| Target::Hop(p));
                pacer.into_iter().chain([Target::Hop(stage_of_way[hop])])
            })
            .chain([Target::Egress(egress_of[&to])])
            .collect()
    };
    let mut paths = HashMap::new();
    for (&from, &(a4, a6)) in nodes.iter().zip(addrs) {
        for (&to, &(b4, b6)) in nodes.iter().zip(addrs) {
            if from == to || !shape.routes(from == nodes[0], to == nodes[0]) {
                continue;
            }
            let stages = route_stages(from, to);
            paths.insert((a4, b4), stages.clone());
            paths.insert((a6, b6), stages.clone());
            let beyond = match (from == nodes[0], to == nodes[0]) {
                (false, true) => [(a4, any_of(a4)), (a6, any_of(a6))],
                (true, false) => [(any_of(b4), b4), (any_of(b6), b6)],
                _ => continue,
            };
            for ends in beyond {
                paths.insert(ends, stages.clone());
            }
        }
    }
    // Each thread segments super-packets where any of its stages applies a per-packet
    // effect; both do where any does and a route turns from one thread to the other (a
    // handed packet is taken whole).
    let effect = |side: usize| {
        ways.iter().zip(&sides).any(|(hop, &s)| {
            s == side && !topology.links[hop.link].path.link(hop.dir).delays_only()
        })
    };
    let turns = paths.values().any(|stages| {
        let mut on = stages.iter().filter_map(|t| match *t {
            Target::Hop(g) => Some(sides[g]),
            _ => None,
        });
        let first = on.next();
        on.any(|side| Some(side) != first)
    });
    let per_packet = match turns {
        true => [effect(0) || effect(1); 2],
        false => [effect(0), effect(1)],
    };
    // A dynamic pacer's (`pace cwnd`) rate, by the link way it paces.
    let mut window_rates = HashMap::new();
    let mut traces: Vec<Option<LinkTraces>> = traces.into_iter().map(Some).collect();
    let mut stages = Vec::new();
    for &hop in &ways {
        let spec = topology.links[hop.link].path.link(hop.dir);
        let traces = traces[hop.index()].take().expect("one link way each");
        stages.push(Hop {
            name: shape.way_name(topology, hop),
            link: shape
                .link(
                    topology,
                    hop,
                    seed,
                    link_mtu(per_packet[sides[stage_of_way[&hop]]], mtu),
                    traces,
                )
                .map_err(LabError::Link)?,
            then: Target::Path {
                after: Some(stage_of_way[&hop]),
            },
            meter: match shape.meters_flows() || shape.is_bottleneck(hop) {
                true => burst_meter(spec.fixed_rate(), per_packet[sides[stage_of_way[&hop]]]),
                false => None,
            },
            hop_meter: shape
                .meters_flows()
                .then(|| HopMeter::new(HOP_QUEUE_SAMPLE_NS)),
            rate_control: None,
            capture: capture_of[hop.link].map(|c| emulator.captures[c].tap(hop.dir)),
        });
    }
    for &hop in &paced {
        let path = &topology.links[hop.link].path;
        let pace = path.link(hop.dir).pace;
        let target = matches!(pace, Some(Pace::Window(_))).then(|| {
            let rate = Arc::new(AtomicU64::new(0));
            window_rates.insert(hop, Arc::clone(&rate));
            rate
        });
        let then = Target::Hop(stage_of_way[&hop]);
        let mut pacer = pacer_hop(
            &path.timeline(hop.dir),
            link_mtu(per_packet[sides[stage_of_way[&hop]]], mtu),
            target,
            then,
        )?;
        pacer.name = shape.pacer_name(&stages[stage_of_way[&hop]].name);
        if shape.meters_flows() {
            pacer.hop_meter = Some(HopMeter::new(HOP_QUEUE_SAMPLE_NS));
            pacer.meter = match pace {
                Some(Pace::Rate(bps)) => {
                    burst_meter(Some((bps, 0)), per_packet[sides[stage_of_pacer[&hop]]])
                }
                Some(Pace::Window(_)) | None => None,
            };
        }
        stages.push(pacer);
    }
    // A stage whose every path goes on to the same next one goes there without a look
    // at the packet's addresses (a chain's links, a dumbbell's but its bottleneck down).
    for (g, stage) in stages.iter_mut().enumerate() {
        if let Target::Path { .. } = stage.then {
            if let Some(next) = only_next(paths.values(), Some(g)) {
                stage.then = next;
            }
        }
    }
    // A host's device is read by the thread of its way toward the first host (the
    // first host's: toward the second); a route starting on the other hands over. Its
    // packets go to their path's first stage, without a look where every path from it
    // starts alike and unrouted packets go along.
    let ingress: Vec<(usize, Target)> = nodes
        .iter()
        .zip(addrs)
        .map(|(&node, &(v4, v6))| {
            let to = if node == nodes[0] { nodes[1] } else { nodes[0] };
            let side = topology.side(topology.route(node, to)[0]).index();
            let from_here = paths
                .iter()
                .filter(|((src, _), _)| *src == v4 || *src == v6)
                .map(|(_, stages)| stages);
            let first = only_next(from_here, None)
                .filter(|_| shape.carries_unrouted())
                .unwrap_or(Target::Path { after: None });
            (side, first)
        })
        .collect();
    // Each thread lists its stages in the order packets cross them (the earliest any
    // route meets each), then the file's.
    let met_at = |g: usize| {
        paths
            .values()
            .filter_map(|stages| stages.iter().position(|&t| t == Target::Hop(g)))
            .min()
            .unwrap_or(usize::MAX)
    };
    let mut order: Vec<usize> = (0..sides.len()).collect();
    order.sort_by_key(|&g| (met_at(g), g));
    let split = Split::new(sides, &order);
    let inbox = || {
        Inbox::new()
            .map(Arc::new)
            .map_err(io_err("starting the emulator"))
    };
    // Where routes turn, each thread takes what the other hands it from its inbox.
    let inboxes = match turns {
        true => vec![inbox()?, inbox()?],
        false => Vec::new(),
    };
    let classifier = Classifier {
        control_port: shape.control_port(),
    };
    let mut plans = [Direction::Up, Direction::Down].map(|dir| {
        let side = dir.index();
        DirectionPlan {
            ingress: devices
                .iter()
                .zip(&ingress)
                .filter(|&(_, &(s, _))| s == side)
                .map(|(d, &(_, first))| (Arc::clone(d), split.localize(first, side)))
                .collect(),
            hops: Vec::new(),
            // A dumbbell's bottleneck that way; a topology charts no one link's capacity.
            bottleneck: stage_of_way
                .iter()
                .find(|&(&hop, &g)| shape.is_bottleneck(hop) && split.sides[g] == side)
                .map_or(0, |(_, &g)| split.local[g]),
            egress: devices.clone(),
            paths: paths
                .iter()
                .map(|(&ends, stages)| {
                    let stages = stages.iter().map(|&t| split.localize(t, side)).collect();
                    (ends, stages)
                })
                .collect(),
            per_packet: per_packet[side],
            mtu,
            classifier,
            wake: Arc::clone(emulator.wake.as_ref().expect("made by new")),
            test_start: emulator.test_start.clone(),
            inbox: inboxes.get(side).cloned(),
            outboxes: inboxes.clone(),
        }
    });
    let mut stages: Vec<Option<Hop>> = stages.into_iter().map(Some).collect();
    for &g in &order {
        let mut stage = stages[g].take().expect("each stage once");
        let side = split.sides[g];
        stage.then = split.localize(stage.then, side);
        plans[side].hops.push(stage);
    }
    let [up, down] = plans;
    let (up_stats, down_stats) = (Arc::clone(&emulator.up), Arc::clone(&emulator.down));
    emulator.spawn("emulator-up", up, up_stats)?;
    emulator.spawn("emulator-down", down, down_stats)?;
    let mut pacing_targets = HashMap::new();
    for (a, &from) in nodes.iter().enumerate() {
        for (b, &to) in nodes.iter().enumerate() {
            if from == to {
                continue;
            }
            let pacers = topology.window_pacers(from, to);
            // One round trip for all ([`Topology::check_window_pacers`]).
            if let Some(&(_, rtt)) = pacers.first() {
                let rates = pacers
                    .iter()
                    .map(|(hop, _)| Arc::clone(&window_rates[hop]))
                    .collect();
                pacing_targets.insert((a, b), PacingTarget { rates, rtt });
            }
        }
    }
    let mut hosts = hosts.into_iter();
    let server = hosts.next().expect("a topology has two hosts or more");
    Ok(Lab {
        entry,
        server,
        clients: hosts.collect(),
        emulator,
        pacing_targets,
        alive: true,
    })
}

/// The largest packet a link takes: whole super-packets are larger than the MTU, and
/// only segmented traffic is held to it.
fn link_mtu(per_packet: bool, mtu: u32) -> u32 {
    if per_packet {
        mtu
    } else {
        MAX_PACKET as u32
    }
}

/// The one stage every path in `paths` that crosses stage `after` (`None`: every
/// path, from its start) goes to next, if they all go to the same.
fn only_next<'a>(
    paths: impl Iterator<Item = &'a Vec<Target>>,
    after: Option<usize>,
) -> Option<Target> {
    let mut next = paths.filter_map(|stages| match after {
        None => stages.first().copied(),
        Some(g) => {
            let at = stages.iter().position(|&t| t == Target::Hop(g))?;
            stages.get(at + 1).copied()
        }
    });
    let first = next.next()?;
    next.all(|t| t == first).then_some(first)
}

/// The stages of a topology's emulator (its link ways, then its pacers) split between
/// its two threads: each stage's thread ([`Topology::side`]'s index), and its index
/// among that thread's hops.
struct Split {
    sides: Vec<usize>,
    local: Vec<usize>,
}

impl Split {
    /// Stage g on thread `sides[g]`, each thread's numbered in `order`.
    fn new(sides: Vec<usize>, order: &[usize]) -> Split {
        let mut count = [0; 2];
        let mut local = vec![0; sides.len()];
        for &g in order {
            local[g] = count[sides[g]];
            count[sides[g]] += 1;
        }
        Split { sides, local }
    }

    /// A stage's target as thread `side` sees it: its own hops by their index there,
    /// the other thread's handed over.
    fn localize(&self, target: Target, side: usize) -> Target {
        match target {
            Target::Hop(g) if self.sides[g] == side => Target::Hop(self.local[g]),
            Target::Hop(g) => Target::Handoff {
                thread: self.sides[g],
                hop: self.local[g],
            },
            Target::Path { after: Some(g) } => Target::Path {
                after: Some(self.local[g]),
            },
            Target::Path { after: None } | Target::Egress(_) | Target::Handoff { .. } => target,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each thread numbers its own stages from 0 in the order given; a stage of the
    /// other thread is handed over, and a hop's own path position stays its own.
    #[test]
    fn a_split_numbers_each_thread_s_stages_and_hands_over_the_others() {
        let split = Split::new(vec![0, 1, 1, 0, 1], &[0, 1, 2, 3, 4]);
        assert_eq!(split.local, [0, 0, 1, 1, 2]);
        // In another order, each thread's stages numbered in it.
        let reordered = Split::new(vec![0, 1, 1, 0, 1], &[3, 4, 0, 1, 2]);
        assert_eq!(reordered.local, [1, 1, 2, 0, 0]);
        assert_eq!(split.localize(Target::Hop(3), 0), Target::Hop(1));
        assert_eq!(
            split.localize(Target::Hop(4), 0),
            Target::Handoff { thread: 1, hop: 2 }
        );
        assert_eq!(
            split.localize(Target::Path { after: Some(2) }, 1),
            Target::Path { after: Some(1) }
        );
        assert_eq!(split.localize(Target::Egress(3), 1), Target::Egress(3));
    }

    #[test]
    fn hosts_are_numbered_from_one_in_both_families() {
        assert_eq!(host_addrs(1).0.to_string(), "10.77.0.1");
        assert_eq!(host_addrs(2).1.to_string(), "fd00:77::2");
        assert_eq!(host_addrs(251).0.to_string(), "10.77.0.251");
    }
}
