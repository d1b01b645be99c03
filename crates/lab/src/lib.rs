//! tcplab's labs: network namespaces joined through the userspace link emulator.
//!
//! A lab has one server host and one or more client hosts, each a network namespace
//! with a TUN device. The emulator (one thread per direction, [`pipeline`]) carries
//! packets between the devices through the link models of the path spec: the
//! bottleneck shared by all clients and, in a dumbbell, each client's own access
//! link. Every lab is registered ([`registry`]) and every namespace marked with its
//! process, so that `tcplab lab gc` can remove what a crashed process left behind.
//! Without root, a lab lives in the process's own user namespace
//! ([`tcplab_sys::userns`]). A lab that outlives its command is held by a daemon,
//! which answers on the lab's socket ([`daemon`]).

pub mod capture;
pub mod daemon;
pub mod far;
mod graph;
pub mod pipeline;
pub mod pool;
pub mod registry;
mod topology;

pub use graph::{topology_record, LinkCaptures, TopologyConfig};
pub use registry::HostPair;
pub use topology::{Backend, Host, Lab, LabConfig, LabError, LabPlan, LabStats};
