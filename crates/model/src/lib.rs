//! What a tcplab test is, without I/O: experiment files (axes, plans, shards), the
//! ranges a test's settings may take, the UDP, probe and transaction traffic (their
//! datagrams, schedules and figures), and the kernel's sock_diag messages and socket
//! filters. Nothing here reads a clock or makes a syscall.

#![forbid(unsafe_code)]

pub mod experiment;
pub mod probe;
pub mod ranges;
pub mod sockdiag;
pub mod sockfilter;
pub mod test_builder;
pub mod transaction;
pub mod udp;
