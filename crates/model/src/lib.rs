//! Pure logic of tcplab: units, records, tcp_info decoding, limit attribution and
//! statistics. Nothing here reads a clock or makes a syscall, so all of it is testable
//! without privileges and in virtual time.

pub mod bounds;
pub mod burst;
pub mod capture;
pub mod clock;
pub mod compare;
pub mod delay;
pub mod dumbbell;
pub mod events;
pub mod experiment;
pub mod explain;
pub mod limits;
pub mod link;
pub mod packet;
pub mod path;
pub mod probe;
pub mod ranges;
pub mod record;
pub mod sockdiag;
pub mod sockfilter;
pub mod stats;
pub mod tcpinfo;
pub mod test_builder;
pub mod throughput;
pub mod traffic;
pub mod transaction;
pub mod tseq;
pub mod udp;
pub mod units;
