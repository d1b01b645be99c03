//! `struct tcp_info` (include/uapi/linux/tcp.h, Linux 6.7+) decoded into plain numbers.
//!
//! The kernel copies `min(optlen, sizeof(struct tcp_info))` bytes, so an older kernel
//! returns a shorter struct. `valid_len` records how many bytes were real; fields past it
//! stay 0 and [`TcpInfo::has`] tells whether a field was provided.
//!
//! Units follow the kernel: times in µs unless noted (`last_*` in ms), `snd_cwnd` in
//! segments, `pacing_rate`/`delivery_rate` in bytes/s. `busy_time`, `rwnd_limited` and
//! `sndbuf_limited` are µs with jiffy resolution.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpInfo {
    /// Bytes of the kernel struct that were filled in.
    pub valid_len: u32,
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    pub delivery_rate_app_limited: bool,
    pub fastopen_client_fail: u8,
    pub rto: u32,
    pub ato: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,
    pub last_data_sent: u32,
    pub last_ack_sent: u32,
    pub last_data_recv: u32,
    pub last_ack_recv: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt: u32,
    pub rttvar: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
    pub busy_time: u64,
    pub rwnd_limited: u64,
    pub sndbuf_limited: u64,
    pub delivered: u32,
    pub delivered_ce: u32,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub dsack_dups: u32,
    pub reord_seen: u32,
    pub rcv_ooopack: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    pub rehash: u32,
    pub total_rto: u16,
    pub total_rto_recoveries: u16,
    pub total_rto_time: u32,
}

/// BBR's view from TCP_CC_INFO (`struct tcp_bbr_info`), when the flow runs BBR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BbrInfo {
    /// Estimated bottleneck bandwidth, bytes/s.
    pub bw: u64,
    /// Minimum RTT seen by BBR, µs.
    pub min_rtt: u32,
    /// Pacing gain, shifted left 8 bits (256 = 1.0).
    pub pacing_gain: u32,
    /// cwnd gain, shifted left 8 bits.
    pub cwnd_gain: u32,
}
