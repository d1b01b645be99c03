//! What a lab of any shape is (`lab up --topology`, a run's `topology`): its hosts, its
//! links and the route between every two hosts, as the lab's registry entry and a run's
//! record hold it. Each link's counters are the run's path's, one per way it was
//! crossed, named as [`hop_name`] names them.

use serde::{Deserialize, Serialize};

/// A lab built from a topology.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyRecord {
    /// The file it was built from ("inline" for tables in an experiment file).
    pub file: String,
    /// The seed each link's randomness derives from (`--seed` draws the same again).
    pub seed: u64,
    /// Its hosts' names, in the file's order: the lab's server first, then its clients.
    pub hosts: Vec<String>,
    pub links: Vec<TopologyLink>,
    /// From each host to each other, the hops crossed in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<TopologyRoute>,
}

/// One link of a topology.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyLink {
    pub name: String,
    /// Its ends: `up` runs from the first to the second.
    pub between: [String; 2],
    /// Its path spec, normalized.
    pub path: String,
}

/// The way from one host to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyRoute {
    pub from: String,
    pub to: String,
    /// The hops crossed, in order, as [`hop_name`] names them.
    pub hops: Vec<String>,
}

/// A link crossed one way, as its counters are named: "l1 a→b".
pub fn hop_name(link: &str, from: &str, to: &str) -> String {
    format!("{link} {from}→{to}")
}

/// The gap pacer (`pace RATE`) before the link way `hop` ([`hop_name`]), as its
/// counters are named: "pacer l1 a→b".
pub fn pacer_name(hop: &str) -> String {
    format!("pacer {hop}")
}

impl TopologyRecord {
    /// The hops from host `from` to host `to`; empty for a pair it does not know.
    pub fn route(&self, from: &str, to: &str) -> &[String] {
        self.routes
            .iter()
            .find(|r| r.from == from && r.to == to)
            .map_or(&[], |r| &r.hops)
    }
}
