//! Labs of any shape: hosts (each a network namespace running real TCP), routers (points
//! in the emulator where a packet takes its next link) and links between any two nodes,
//! each with a path spec whose `up` runs from the link's first node to its second. A
//! packet from one host to another crosses the links of its route: the shortest (least
//! one-way base delay, then fewest links) unless the file gives one, per direction, so
//! the way back may differ. Pure: a file's text in, the checked graph and every route
//! out; errors are one line naming the element, before anything is built.
//!
//! ```toml
//! seed = 42            # optional: every link's draws (else the lab draws one)
//! [[host]]
//! name = "a"
//! [[host]]
//! name = "b"
//! [[router]]
//! name = "r1"
//! [[link]]
//! between = ["a", "r1"]
//! path = "rtt 2ms rate 1gbit"
//! [[link]]
//! between = ["r1", "b"]
//! path = "rtt 20ms rate 100mbit queue 1bdp"
//! [[route]]            # optional: one direction's way, through routers
//! from = "b"
//! to = "a"
//! via = ["r1"]
//! ```

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::dumbbell::derive_seed;
use crate::link::{Link, LinkError, LinkTraces};
use crate::path::{Direction, Pace, PaceRtt, PathSpec};

/// A node of the graph: its index in [`Topology::nodes`].
pub type NodeId = usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// Runs real TCP in its own network namespace; never forwards.
    Host,
    /// Forwards packets from link to link inside the emulator.
    Router,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
}

/// A link between two nodes: `path.up` carries packets from `ends[0]` to `ends[1]`,
/// `path.down` back.
#[derive(Clone, Debug, PartialEq)]
pub struct TopoLink {
    /// As the file names it, or `a–b` from its ends.
    pub name: String,
    pub ends: [NodeId; 2],
    pub path: PathSpec,
}

/// One link crossed one way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hop {
    pub link: usize,
    /// `Up`: from the link's first end to its second.
    pub dir: Direction,
}

/// The checked graph and the route of every ordered pair of hosts.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub links: Vec<TopoLink>,
    /// The seed every link's randomness derives from, where the file pins it.
    pub seed: Option<u64>,
    /// From each host to each other, the links crossed in order.
    routes: BTreeMap<(NodeId, NodeId), Vec<Hop>>,
}

/// What makes a topology unusable; each names the element at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("topology: {0}")]
    Syntax(String),
    #[error("a topology needs at least two hosts")]
    TooFewHosts,
    #[error("invalid name '{name}': a host or router is 1 to 16 letters, digits, '-' or '_' (a host's namespace is LAB-NAME)")]
    BadName { name: String },
    #[error("'{name}' is named twice; hosts and routers share one set of names")]
    DuplicateName { name: String },
    #[error("link {link}: no host or router named '{name}'")]
    UnknownNode { link: String, name: String },
    #[error("link {link}: it joins '{node}' to itself")]
    SelfLink { link: String, node: String },
    #[error("link {link}: {message}")]
    Path { link: String, message: String },
    #[error("{kind} '{node}' has no link")]
    Unlinked { kind: &'static str, node: String },
    #[error("host '{from}' cannot reach host '{to}': no links join them through routers")]
    Unreachable { from: String, to: String },
    #[error("route {from} → {to}: {message}")]
    Route {
        from: String,
        to: String,
        message: String,
    },
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    host: Vec<NamedNode>,
    #[serde(default)]
    router: Vec<NamedNode>,
    #[serde(default)]
    link: Vec<LinkEntry>,
    #[serde(default)]
    route: Vec<RouteEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedNode {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkEntry {
    #[serde(default)]
    name: Option<String>,
    between: [String; 2],
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteEntry {
    from: String,
    to: String,
    via: Vec<String>,
}

impl FromStr for Topology {
    type Err = TopologyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let file: File = toml::from_str(text).map_err(|e| {
            TopologyError::Syntax(e.to_string().lines().collect::<Vec<_>>().join(" "))
        })?;
        Topology::build(file)
    }
}

impl Topology {
    fn build(file: File) -> Result<Topology, TopologyError> {
        let File {
            seed,
            host,
            router,
            link,
            route,
        } = file;
        let nodes: Vec<Node> = host
            .into_iter()
            .map(|n| (n.name, NodeKind::Host))
            .chain(router.into_iter().map(|n| (n.name, NodeKind::Router)))
            .map(|(name, kind)| Node { name, kind })
            .collect();
        if let Some(node) = nodes.iter().find(|n| {
            n.name.is_empty()
                || n.name.len() > 16
                || !n
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        }) {
            return Err(TopologyError::BadName {
                name: node.name.clone(),
            });
        }
        let mut ids = HashMap::new();
        for (id, node) in nodes.iter().enumerate() {
            if ids.insert(node.name.clone(), id).is_some() {
                return Err(TopologyError::DuplicateName {
                    name: node.name.clone(),
                });
            }
        }
        if nodes.iter().filter(|n| n.kind == NodeKind::Host).count() < 2 {
            return Err(TopologyError::TooFewHosts);
        }
        let mut links = Vec::new();
        for entry in link {
            let name = entry
                .name
                .unwrap_or_else(|| format!("{}–{}", entry.between[0], entry.between[1]));
            let mut ends = [0; 2];
            for (end, node) in ends.iter_mut().zip(&entry.between) {
                *end = *ids.get(node).ok_or_else(|| TopologyError::UnknownNode {
                    link: name.clone(),
                    name: node.clone(),
                })?;
            }
            if ends[0] == ends[1] {
                return Err(TopologyError::SelfLink {
                    link: name,
                    node: entry.between[0].clone(),
                });
            }
            let path = entry.path.parse().map_err(|e| TopologyError::Path {
                link: name.clone(),
                message: format!("{e}"),
            })?;
            links.push(TopoLink { name, ends, path });
        }
        if let Some(node) = nodes
            .iter()
            .enumerate()
            .find(|(id, _)| !links.iter().any(|l| l.ends.contains(id)))
        {
            return Err(TopologyError::Unlinked {
                kind: node.1.kind.name(),
                node: node.1.name.clone(),
            });
        }
        let mut topology = Topology {
            nodes,
            links,
            seed,
            routes: BTreeMap::new(),
        };
        let hosts: Vec<NodeId> = topology.hosts().collect();
        for &from in &hosts {
            let shortest = topology.shortest_from(from);
            for &to in hosts.iter().filter(|&&to| to != from) {
                let hops = shortest(to).ok_or_else(|| TopologyError::Unreachable {
                    from: topology.nodes[from].name.clone(),
                    to: topology.nodes[to].name.clone(),
                })?;
                topology.routes.insert((from, to), hops);
            }
        }
        for entry in route {
            let (key, hops) = topology.given_route(&ids, &entry)?;
            topology.routes.insert(key, hops);
        }
        topology.check_window_pacers()?;
        Ok(topology)
    }

    /// The hosts, in the file's order.
    pub fn hosts(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len()).filter(|&id| self.nodes[id].kind == NodeKind::Host)
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The links a packet from host `from` to host `to` crosses, in order.
    pub fn route(&self, from: NodeId, to: NodeId) -> &[Hop] {
        &self.routes[&(from, to)]
    }

    /// A gap pacer (`pace`) on host `from`'s egress toward host `to` (PSPacer on the
    /// sending host, as a flow's `pacing = "gap"` asks): `pace` on the first link of
    /// their route, that way. One pacer per link way: another pace there already is an
    /// error naming the link.
    pub fn pace_first_link(&mut self, from: NodeId, to: NodeId, pace: Pace) -> Result<(), String> {
        let hop = *self
            .route(from, to)
            .first()
            .expect("a route between two hosts crosses a link");
        let link = &mut self.links[hop.link];
        let spec = match hop.dir {
            Direction::Up => &mut link.path.up,
            Direction::Down => &mut link.path.down,
        };
        match spec.pace {
            Some(other) if other == pace => Ok(()),
            Some(_) => Err(format!(
                "link {} (\"{}\") is paced already where {} sends: one gap pacer per link way",
                link.name, link.path, self.nodes[from].name
            )),
            None => {
                spec.pace = Some(pace);
                Ok(())
            }
        }
    }

    /// The dynamic gap pacers (`pace cwnd`) on the route from host `from` to host
    /// `to`, in order, and the round trip each spreads a window over.
    pub fn window_pacers(&self, from: NodeId, to: NodeId) -> Vec<(Hop, PaceRtt)> {
        self.route(from, to)
            .iter()
            .filter_map(|&hop| match self.links[hop.link].path.link(hop.dir).pace {
                Some(Pace::Window(rtt)) => Some((hop, rtt)),
                Some(Pace::Rate(_)) | None => None,
            })
            .collect()
    }

    /// A route through dynamic gap pacers that spread the window over different round
    /// trips (`pace cwnd` and `pace cwnd/minrtt`): its senders publish one window rate.
    pub fn check_window_pacers(&self) -> Result<(), TopologyError> {
        let hosts: Vec<NodeId> = self.hosts().collect();
        for &from in &hosts {
            for &to in hosts.iter().filter(|&&to| to != from) {
                let pacers = self.window_pacers(from, to);
                let Some(((first, a), (second, b))) = pacers
                    .iter()
                    .zip(pacers.iter().skip(1))
                    .find(|((_, a), (_, b))| a != b)
                else {
                    continue;
                };
                let link = |hop: &Hop| self.links[hop.link].name.clone();
                return Err(TopologyError::Route {
                    from: self.nodes[from].name.clone(),
                    to: self.nodes[to].name.clone(),
                    message: format!(
                        "link {} paces by {} and link {} by {}: the senders on a route publish one window rate, so give its dynamic pacers one round trip",
                        link(first),
                        a.name(),
                        link(second),
                        b.name()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Every hop: each link up, then down, in the file's order ([`Hop::index`]).
    pub fn hops(&self) -> impl Iterator<Item = Hop> {
        (0..self.links.len())
            .flat_map(|link| [Direction::Up, Direction::Down].map(|dir| Hop { link, dir }))
    }

    /// The least MTU of the links: every host's, so that no link meets a packet larger
    /// than its own.
    pub fn mtu(&self) -> u32 {
        self.links
            .iter()
            .map(|l| l.path.mtu)
            .min()
            .expect("a topology has links")
    }

    /// The emulator's model of one hop: its direction's settings over the test, a
    /// queue in BDP sized over [`Self::bdp_rtt_us`], its own stream of its link's
    /// `seed`, or else of `seed`.
    pub fn hop_link<P>(
        &self,
        hop: Hop,
        seed: u64,
        mtu: u32,
        traces: LinkTraces,
    ) -> Result<Link<P>, LinkError> {
        Link::new(
            &self.links[hop.link].path.timeline(hop.dir),
            self.bdp_rtt_us(hop.link),
            mtu,
            derive_seed(
                self.links[hop.link].path.seed.unwrap_or(seed),
                hop.index() as u64,
            ),
            traces,
        )
    }

    /// Where a hop leaves from and arrives at.
    pub fn hop_ends(&self, hop: Hop) -> (NodeId, NodeId) {
        let [a, b] = self.links[hop.link].ends;
        match hop.dir {
            Direction::Up => (a, b),
            Direction::Down => (b, a),
        }
    }

    /// The emulator thread that carries a link way, as a dumbbell's two directions:
    /// `Up` where some host's route to the first host (a dumbbell's server) crosses it,
    /// `Down` otherwise. A route to or from the first host stays on one thread; one
    /// between two others turns where their ways toward it meet.
    pub fn side(&self, hop: Hop) -> Direction {
        let first = self
            .hosts()
            .next()
            .expect("a topology has two hosts or more");
        let toward_first = self
            .hosts()
            .filter(|&h| h != first)
            .any(|h| self.route(h, first).contains(&hop));
        if toward_first {
            Direction::Up
        } else {
            Direction::Down
        }
    }

    /// A hop's one-way base delay, µs.
    pub fn hop_delay_us(&self, hop: Hop) -> u64 {
        self.links[hop.link].path.link(hop.dir).delay_us
    }

    /// The base round trip between two hosts, µs: the delays of the route there and
    /// the route back, without queueing.
    pub fn rtt_us(&self, a: NodeId, b: NodeId) -> u64 {
        let way = |from, to| {
            self.route(from, to)
                .iter()
                .map(|&h| self.hop_delay_us(h))
                .sum::<u64>()
        };
        way(a, b) + way(b, a)
    }

    /// The round trip a queue in BDP on `link` is sized over: the longest base round
    /// trip of the host pairs whose route crosses it either way (the classic rule for a
    /// router's buffer, as the dumbbell's), µs; 0 for a link no route crosses.
    pub fn bdp_rtt_us(&self, link: usize) -> u64 {
        self.routes
            .iter()
            .filter(|(_, hops)| hops.iter().any(|h| h.link == link))
            .map(|(&(a, b), _)| self.rtt_us(a, b))
            .max()
            .unwrap_or(0)
    }

    /// The least-delay way from `from` to every node through routers (hosts end a
    /// route, never carry one): Dijkstra on (delay, links), ties to the lower link
    /// index, so the same file always gives the same routes.
    fn shortest_from(&self, from: NodeId) -> impl Fn(NodeId) -> Option<Vec<Hop>> {
        // To each node: its (delay µs, links), and the hop that reached it.
        let mut best: Vec<Option<(Cost, Option<Hop>)>> = vec![None; self.nodes.len()];
        let mut frontier = BinaryHeap::new();
        best[from] = Some(((0, 0), None));
        frontier.push(std::cmp::Reverse(((0u64, 0usize), from)));
        while let Some(std::cmp::Reverse((cost, node))) = frontier.pop() {
            if best[node].is_some_and(|(c, _)| c < cost) {
                continue;
            }
            // A host other than the source ends the way.
            if node != from && self.nodes[node].kind == NodeKind::Host {
                continue;
            }
            for (link, l) in self.links.iter().enumerate() {
                for dir in [Direction::Up, Direction::Down] {
                    let hop = Hop { link, dir };
                    let (a, b) = self.hop_ends(hop);
                    if a != node {
                        continue;
                    }
                    let next = (cost.0 + l.path.link(dir).delay_us, cost.1 + 1);
                    if best[b].is_none_or(|(c, _)| next < c) {
                        best[b] = Some((next, Some(hop)));
                        frontier.push(std::cmp::Reverse((next, b)));
                    }
                }
            }
        }
        let ends: Vec<_> = self.links.iter().map(|l| l.ends).collect();
        move |to| {
            let mut hops = Vec::new();
            let mut at = to;
            while at != from {
                let (_, hop) = best[at]?;
                let hop = hop.expect("only the source has no hop");
                hops.push(hop);
                let [a, b] = ends[hop.link];
                at = match hop.dir {
                    Direction::Up => a,
                    Direction::Down => b,
                };
            }
            hops.reverse();
            Some(hops)
        }
    }

    /// A route the file gives: from a host through routers to a host, each step a link.
    fn given_route(
        &self,
        ids: &HashMap<String, NodeId>,
        entry: &RouteEntry,
    ) -> Result<((NodeId, NodeId), Vec<Hop>), TopologyError> {
        let fail = |message: String| TopologyError::Route {
            from: entry.from.clone(),
            to: entry.to.clone(),
            message,
        };
        let id = |name: &String| {
            ids.get(name)
                .copied()
                .ok_or_else(|| fail(format!("no host or router named '{name}'")))
        };
        let (from, to) = (id(&entry.from)?, id(&entry.to)?);
        for (end, which) in [(from, "from"), (to, "to")] {
            if self.nodes[end].kind != NodeKind::Host {
                return Err(fail(format!(
                    "{which} '{}' is a router; a route runs from a host to a host",
                    self.nodes[end].name
                )));
            }
        }
        if from == to {
            return Err(fail("a route joins two hosts".into()));
        }
        let mut way = vec![from];
        for name in &entry.via {
            let node = id(name)?;
            if self.nodes[node].kind != NodeKind::Router {
                return Err(fail(format!(
                    "'{name}' is a host; hosts do not forward, a route goes via routers"
                )));
            }
            if way.contains(&node) {
                return Err(fail(format!("it passes '{name}' twice: a loop")));
            }
            way.push(node);
        }
        way.push(to);
        let mut hops = Vec::new();
        for pair in way.windows(2) {
            // The first link that joins the two, that way.
            let hop = (0..self.links.len())
                .flat_map(|link| [Direction::Up, Direction::Down].map(|dir| Hop { link, dir }))
                .find(|&h| self.hop_ends(h) == (pair[0], pair[1]))
                .ok_or_else(|| {
                    fail(format!(
                        "no link joins '{}' and '{}'",
                        self.nodes[pair[0]].name, self.nodes[pair[1]].name
                    ))
                })?;
            hops.push(hop);
        }
        Ok(((from, to), hops))
    }
}

/// A way's one-way base delay (µs) and its links, compared in that order.
type Cost = (u64, usize);

impl NodeKind {
    fn name(self) -> &'static str {
        match self {
            NodeKind::Host => "host",
            NodeKind::Router => "router",
        }
    }
}

impl Hop {
    /// Its place in [`Topology::hops`]: link `l` up at `2 l`, down at `2 l + 1`.
    pub fn index(self) -> usize {
        2 * self.link + self.dir.index()
    }
}

impl fmt::Display for Hop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "link {} {}", self.link, self.dir.name())
    }
}

#[cfg(test)]
mod tests;
