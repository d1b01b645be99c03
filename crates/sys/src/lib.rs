//! Linux I/O for tcplab: tcp_info and socket options, network namespaces and veth
//! through netlink (as root or in a user namespace of tcplab's own), a masquerading NAT
//! through nf_tables, per-thread CPU time, sysctls. A thin shell: decoding and
//! arithmetic live in the crates without I/O (`tcplab-record`, `tcplab-model` …).

pub mod clock;
pub mod cpu;
pub mod ffi;
pub mod ifqueue;
pub mod localnet;
pub mod netem;
pub mod netns;
pub mod nft;
pub mod poll;
pub mod reaper;
pub mod relay;
pub mod snmp;
pub mod sockdiag;
pub mod sockopt;
pub mod stamp;
pub mod sysctl;
pub mod trace;
pub mod tun;
pub mod userns;
