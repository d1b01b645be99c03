//! tcplab's network simulation, without I/O: the path-spec grammar and its units, the
//! packets a lab carries (virtio-net headers, GSO segmentation, GRO coalescing), whose
//! each packet is, the sans-IO link of one direction with its queues and AQMs, a lab's
//! links together (the dumbbell), and what a capture records of each packet. The
//! emulator drives the link in real time, the tests in virtual time.

#![forbid(unsafe_code)]

pub mod capture;
pub mod dumbbell;
pub mod fabric;
pub mod link;
pub mod packet;
pub mod path;
pub mod probe_datagram;
pub mod topology;
pub mod traffic;
