//! tcplab's analysis of a run, without I/O: the textbook bounds, what limited each
//! sender, the run's throughput, statistics over runs and their comparison, explain's
//! verdict, bursts and queue occupancy at a link, time-sequence graphs and one-way
//! delays from a capture, the kernel's events, the clock offset between two ends, and the
//! senders' answer to each change of a path's schedule.

#![forbid(unsafe_code)]

pub mod bounds;
pub mod burst;
pub mod changes;
pub mod clock;
pub mod compare;
pub mod delay;
pub mod events;
pub mod explain;
pub mod hop;
pub mod limits;
pub mod links;
pub mod queue;
pub mod stats;
pub mod throughput;
pub mod tseq;
