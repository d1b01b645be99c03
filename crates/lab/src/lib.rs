//! tcplab's labs: network namespaces joined through the userspace link emulator.
//!
//! A lab has hosts, each a network namespace with a TUN device: a dumbbell's server
//! and clients, or a topology file's. The emulator (two threads, [`pipeline`]) carries
//! packets between the devices through the link models of the lab's topology: a
//! dumbbell's bottleneck shared by all clients and each client's own access link, or
//! any graph of links and routers. Every lab is registered ([`registry`]) and every namespace marked with its
//! process, so that `tcplab lab gc` can remove what a crashed process left behind.
//! Without root, a lab lives in the process's own user namespace
//! ([`tcplab_sys::userns`]). A lab that outlives its command is held by a daemon,
//! which answers on the lab's socket ([`daemon`]).

pub mod capture;
pub mod daemon;
pub mod far;
mod graph;
mod lab;
pub mod pipeline;
pub mod pool;
pub mod registry;
mod up;

pub use graph::{topology_record, LinkCaptures, TopologyConfig};
pub use lab::{Backend, Host, Lab, LabConfig, LabError, LabPlan, LabStats};
pub use registry::HostPair;
