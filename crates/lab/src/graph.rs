//! A lab of any shape, from a topology file (`tcplab lab up --topology FILE`): a
//! network namespace with a TUN device per host of a [`Topology`], and one emulator
//! thread carrying every link of the graph both ways on one clock. A packet follows
//! its route by its source and destination ([`Target::Path`]), leaving each link onto
//! the next at its due time, so its time across a chain is the sum of its times on
//! each link; routers are points in that thread, not namespaces.
//!
//! Addresses: host k (from 1, in the file's order) is 10.77.0.k/16 and fd00:77::k/64.
//! For the commands that take a dumbbell's roles, the first host is the lab's server
//! and the others its clients; every host answers to its name too.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tcplab_netsim::link::LinkTraces;
use tcplab_netsim::path::{Direction, LinkSpec, Pace, PacingTarget};
use tcplab_netsim::topology::{Hop as TopoHop, Topology};
use tcplab_netsim::traffic::Classifier;
use tcplab_record::capture::CapturePoint;
use tcplab_record::topology::{self as record, TopologyLink, TopologyRecord, TopologyRoute};
use tcplab_sys::clock::realtime_us;
use tcplab_sys::netns::{self, NetNs};
use tcplab_sys::tun::MAX_PACKET;

use crate::capture::{Capture, CaptureSpec};
use crate::pipeline::{DirectionPlan, Hop, Inbox, Target};
use crate::registry::{self, HostEntry, LabEntry};
use crate::topology::{burst_meter, io_err, load_traces, make_host, pacer_hop, Emulator, HostPlan};
use crate::{Lab, LabError};
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
    fn check(&self, topology: &Topology) -> Result<(), LabError> {
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
fn host_addrs(k: u16) -> (IpAddr, IpAddr) {
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

impl Lab {
    /// Builds a topology's lab and starts its emulator. Every link's traces are read
    /// before anything is built; on any error, what was made is removed.
    pub fn up_topology(config: &TopologyConfig) -> Result<Lab, LabError> {
        registry::check_name(&config.name).map_err(LabError::Name)?;
        let topology = &config.topology;
        if let Some(capture) = &config.capture {
            capture.check(topology)?;
        }
        let traces = topology
            .hops()
            .map(|hop| load_traces(topology.links[hop.link].path.link(hop.dir)))
            .collect::<Result<Vec<LinkTraces>, _>>()?;
        netns::ready().map_err(LabError::Privilege)?;
        if let Some(capture) = &config.capture {
            std::fs::create_dir_all(&capture.dir).map_err(io_err(format!(
                "the captures' directory {}",
                capture.dir.display()
            )))?;
        }
        let hosts: Vec<usize> = topology.hosts().collect();
        if hosts.len() > 250 {
            return Err(LabError::Name(format!(
                "a lab has at most 250 hosts, not {}",
                hosts.len()
            )));
        }
        let seed = config.seed.unwrap_or_else(rand::random);
        let host_entries: Vec<HostEntry> = hosts
            .iter()
            .enumerate()
            .map(|(k, &node)| {
                let (v4, v6) = host_addrs(k as u16 + 1);
                HostEntry {
                    ns: format!("{}-{}", config.name, topology.nodes[node].name),
                    addr: v4.to_string(),
                    addr6: v6.to_string(),
                    access: None,
                }
            })
            .collect();
        let entry = LabEntry {
            name: config.name.clone(),
            pid: netns::own_pid(),
            path: String::new(),
            server: host_entries[0].clone(),
            clients: host_entries[1..].to_vec(),
            created_unix_us: realtime_us(),
            topology: Some(topology_record(topology, &config.file, seed)),
        };
        registry::register(&entry).map_err(io_err(format!("registering lab '{}'", config.name)))?;
        // From here on, a failure must undo what was made.
        let mut made = Vec::new();
        let built = build(config, seed, traces, entry, &mut made);
        if built.is_err() {
            for ns in made {
                let _ = NetNs::delete(&ns);
            }
            registry::unregister(&config.name);
        }
        built
    }
}

fn build(
    config: &TopologyConfig,
    seed: u64,
    traces: Vec<LinkTraces>,
    entry: LabEntry,
    made: &mut Vec<NetNs>,
) -> Result<Lab, LabError> {
    let topology = &config.topology;
    let mtu = topology.mtu();
    let nodes: Vec<usize> = topology.hosts().collect();
    let unlimited = LinkSpec::default();
    let mut hosts = Vec::new();
    let mut devices = Vec::new();
    for (k, (&node, host)) in nodes.iter().zip(entry.hosts()).enumerate() {
        // Its interface queue is the first link out of it's to set.
        let sends = topology
            .hops()
            .find(|&hop| topology.hop_ends(hop).0 == node)
            .map_or(&unlimited, |hop| {
                topology.links[hop.link].path.link(hop.dir)
            });
        let plan = HostPlan {
            ns: &host.ns,
            addrs: host_addrs(k as u16 + 1),
            mtu,
            sends,
            sysctls: &config.sysctls,
        };
        let (host, device) = make_host(&plan, made)?;
        hosts.push(host);
        devices.push(device);
    }
    // Segmented where any link applies a per-packet effect, as a dumbbell's direction.
    let per_packet = topology.links.iter().any(|l| {
        [Direction::Up, Direction::Down]
            .into_iter()
            .any(|dir| !l.path.link(dir).delays_only())
    });
    let link_mtu = if per_packet { mtu } else { MAX_PACKET as u32 };
    let mut emulator = Emulator::new(None, &config.name)?;
    // Each link's place in the emulator's captures, where it is captured.
    let mut capture_of: Vec<Option<usize>> = vec![None; topology.links.len()];
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
    // Each link way's hop at its index ([`TopoHop::index`]), then the gap pacers
    // (`pace RATE`) before the link ways that have one, as a dumbbell's before its
    // bottleneck: each with the link way it paces.
    let mut hops = Vec::new();
    let mut pacers = Vec::new();
    // A dynamic pacer's (`pace cwnd`) rate, by its link way's index.
    let mut window_rates = HashMap::new();
    for hop in topology.hops() {
        let path = &topology.links[hop.link].path;
        if path.link(hop.dir).pace.is_some() {
            let target = matches!(path.link(hop.dir).pace, Some(Pace::Window(_))).then(|| {
                let rate = Arc::new(AtomicU64::new(0));
                window_rates.insert(hop.index(), Arc::clone(&rate));
                rate
            });
            let mut pacer = pacer_hop(&path.timeline(hop.dir), link_mtu, target)?;
            pacer.name = record::pacer_name(&hop_name(topology, hop));
            pacer.then = Target::Hop(hop.index());
            pacer.hop_meter = Some(HopMeter::new(HOP_QUEUE_SAMPLE_NS));
            pacer.meter = match path.link(hop.dir).pace {
                Some(Pace::Rate(bps)) => burst_meter(Some((bps, 0)), per_packet),
                Some(Pace::Window(_)) | None => None,
            };
            pacers.push((hop, pacer));
        }
    }
    let first_pacer = topology.hops().count();
    let pacer_of: HashMap<usize, usize> = pacers
        .iter()
        .enumerate()
        .map(|(k, (link_way, _))| (link_way.index(), first_pacer + k))
        .collect();
    for (hop, traces) in topology.hops().zip(traces) {
        hops.push(Hop {
            name: hop_name(topology, hop),
            link: topology
                .hop_link(hop, seed, link_mtu, traces)
                .map_err(LabError::Link)?,
            then: Target::Path {
                after: Some(hop.index()),
            },
            meter: burst_meter(
                topology.links[hop.link].path.link(hop.dir).fixed_rate(),
                per_packet,
            ),
            hop_meter: Some(HopMeter::new(HOP_QUEUE_SAMPLE_NS)),
            rate_control: None,
            capture: capture_of[hop.link].map(|c| emulator.captures[c].tap(hop.dir)),
        });
    }
    // Each stage's thread: a link way's side, a pacer with the way it paces.
    let sides: Vec<usize> = topology
        .hops()
        .map(|hop| topology.side(hop))
        .chain(pacers.iter().map(|&(way, _)| topology.side(way)))
        .map(Direction::index)
        .collect();
    hops.extend(pacers.into_iter().map(|(_, pacer)| pacer));
    let egress_of: HashMap<usize, usize> = nodes.iter().enumerate().map(|(k, &n)| (n, k)).collect();
    let mut paths = HashMap::new();
    for (&from, a) in nodes.iter().zip(&hosts) {
        for (&to, b) in nodes.iter().zip(&hosts) {
            if from == to {
                continue;
            }
            let stages: Vec<Target> = topology
                .route(from, to)
                .iter()
                .flat_map(|hop| {
                    let pacer = pacer_of.get(&hop.index()).map(|&p| Target::Hop(p));
                    pacer.into_iter().chain([Target::Hop(hop.index())])
                })
                .chain([Target::Egress(egress_of[&to])])
                .collect();
            paths.insert((a.addr, b.addr), stages.clone());
            paths.insert((a.addr6, b.addr6), stages);
        }
    }
    // A host's device is read by the thread of its way toward the first host (the
    // first host's: toward the second); a route starting on the other hands over.
    let ingress_side: Vec<usize> = nodes
        .iter()
        .map(|&node| {
            let to = if node == nodes[0] { nodes[1] } else { nodes[0] };
            topology.side(topology.route(node, to)[0]).index()
        })
        .collect();
    let split = Split::new(sides);
    let inbox = || {
        Inbox::new()
            .map(Arc::new)
            .map_err(io_err("starting the emulator"))
    };
    let inboxes = [inbox()?, inbox()?];
    let mut plans = [Direction::Up, Direction::Down].map(|dir| {
        let side = dir.index();
        DirectionPlan {
            ingress: devices
                .iter()
                .zip(&ingress_side)
                .filter(|&(_, &s)| s == side)
                .map(|(d, _)| (Arc::clone(d), Target::Path { after: None }))
                .collect(),
            hops: Vec::new(),
            bottleneck: 0,
            egress: devices.clone(),
            routes: Vec::new(),
            paths: paths
                .iter()
                .map(|(&ends, stages)| {
                    let stages = stages.iter().map(|&t| split.localize(t, side)).collect();
                    (ends, stages)
                })
                .collect(),
            per_packet,
            mtu,
            classifier: Classifier {
                control_port: config.control_port,
            },
            wake: Arc::clone(emulator.wake.as_ref().expect("made by new")),
            test_start: emulator.test_start.clone(),
            inbox: Some(Arc::clone(&inboxes[side])),
            outboxes: inboxes.to_vec(),
        }
    });
    for (stage, mut hop) in hops.into_iter().enumerate() {
        let side = split.sides[stage];
        hop.then = split.localize(hop.then, side);
        plans[side].hops.push(hop);
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
                    .map(|(hop, _)| Arc::clone(&window_rates[&hop.index()]))
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

/// The stages of a topology's emulator (its link ways, then its pacers) split between
/// its two threads: each stage's thread ([`Topology::side`]'s index), and its index
/// among that thread's hops.
struct Split {
    sides: Vec<usize>,
    local: Vec<usize>,
}

impl Split {
    fn new(sides: Vec<usize>) -> Split {
        let mut count = [0; 2];
        let local = sides
            .iter()
            .map(|&side| {
                count[side] += 1;
                count[side] - 1
            })
            .collect();
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
            Target::Path { after: None }
            | Target::Egress(_)
            | Target::Route
            | Target::Handoff { .. } => target,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each thread numbers its own stages from 0 in order; a stage of the other thread
    /// is handed over, and a hop's own path position stays its own.
    #[test]
    fn a_split_numbers_each_thread_s_stages_and_hands_over_the_others() {
        let split = Split::new(vec![0, 1, 1, 0, 1]);
        assert_eq!(split.local, [0, 0, 1, 1, 2]);
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
