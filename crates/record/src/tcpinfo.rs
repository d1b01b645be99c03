//! `struct tcp_info` (include/uapi/linux/tcp.h, Linux 6.7+) decoded into plain numbers.
//!
//! The kernel copies `min(optlen, sizeof(struct tcp_info))` bytes, so an older kernel
//! returns a shorter struct. `valid_len` records how many bytes were real; fields past it
//! stay 0 and [`TcpInfo::has`] tells whether a field was provided.
//!
//! Units follow the kernel: times in µs unless noted (`last_*` in ms), `snd_cwnd` in
//! segments, `pacing_rate`/`delivery_rate` in bytes/s. `busy_time`, `rwnd_limited` and
//! `sndbuf_limited` are µs with jiffy resolution.

use std::mem::size_of;

use serde::{Deserialize, Serialize};

/// `sizeof(struct tcp_info)` as of Linux 6.7 (ends with `tcpi_total_rto_time`).
/// Newer kernels append fields; asking for this many bytes gets exactly these.
pub const TCP_INFO_LEN: usize = TcpInfo::TOTAL_RTO_TIME.end();

/// Where one field sits in `struct tcp_info`, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
}

impl Field {
    /// First byte past the field: a kernel that returned at least this many bytes
    /// filled it in.
    pub const fn end(self) -> usize {
        self.offset + self.size
    }
}

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

/// The plain (non-bitfield) fields, written once: each line gives the `Field` constant,
/// the struct member, its type and its offset from include/uapi/linux/tcp.h.
macro_rules! tcp_info_layout {
    ($($konst:ident $name:ident: $ty:ty = $offset:literal;)*) => {
        impl TcpInfo {
            $(pub const $konst: Field = Field { offset: $offset, size: size_of::<$ty>() };)*

            /// Every plain field by name, in kernel order (the bitfield bytes 6 and 7
            /// are left out).
            pub const FIELDS: &'static [(&'static str, Field)] =
                &[$((stringify!($name), Self::$konst)),*];

            fn decode_plain(&mut self, bytes: &[u8]) {
                $(if let Some(v) = <$ty as NativeInt>::read(bytes, $offset) {
                    self.$name = v;
                })*
            }
        }
    };
}

tcp_info_layout! {
    STATE state: u8 = 0;
    CA_STATE ca_state: u8 = 1;
    RETRANSMITS retransmits: u8 = 2;
    PROBES probes: u8 = 3;
    BACKOFF backoff: u8 = 4;
    OPTIONS options: u8 = 5;
    RTO rto: u32 = 8;
    ATO ato: u32 = 12;
    SND_MSS snd_mss: u32 = 16;
    RCV_MSS rcv_mss: u32 = 20;
    UNACKED unacked: u32 = 24;
    SACKED sacked: u32 = 28;
    LOST lost: u32 = 32;
    RETRANS retrans: u32 = 36;
    FACKETS fackets: u32 = 40;
    LAST_DATA_SENT last_data_sent: u32 = 44;
    LAST_ACK_SENT last_ack_sent: u32 = 48;
    LAST_DATA_RECV last_data_recv: u32 = 52;
    LAST_ACK_RECV last_ack_recv: u32 = 56;
    PMTU pmtu: u32 = 60;
    RCV_SSTHRESH rcv_ssthresh: u32 = 64;
    RTT rtt: u32 = 68;
    RTTVAR rttvar: u32 = 72;
    SND_SSTHRESH snd_ssthresh: u32 = 76;
    SND_CWND snd_cwnd: u32 = 80;
    ADVMSS advmss: u32 = 84;
    REORDERING reordering: u32 = 88;
    RCV_RTT rcv_rtt: u32 = 92;
    RCV_SPACE rcv_space: u32 = 96;
    TOTAL_RETRANS total_retrans: u32 = 100;
    PACING_RATE pacing_rate: u64 = 104;
    MAX_PACING_RATE max_pacing_rate: u64 = 112;
    BYTES_ACKED bytes_acked: u64 = 120;
    BYTES_RECEIVED bytes_received: u64 = 128;
    SEGS_OUT segs_out: u32 = 136;
    SEGS_IN segs_in: u32 = 140;
    NOTSENT_BYTES notsent_bytes: u32 = 144;
    MIN_RTT min_rtt: u32 = 148;
    DATA_SEGS_IN data_segs_in: u32 = 152;
    DATA_SEGS_OUT data_segs_out: u32 = 156;
    DELIVERY_RATE delivery_rate: u64 = 160;
    BUSY_TIME busy_time: u64 = 168;
    RWND_LIMITED rwnd_limited: u64 = 176;
    SNDBUF_LIMITED sndbuf_limited: u64 = 184;
    DELIVERED delivered: u32 = 192;
    DELIVERED_CE delivered_ce: u32 = 196;
    BYTES_SENT bytes_sent: u64 = 200;
    BYTES_RETRANS bytes_retrans: u64 = 208;
    DSACK_DUPS dsack_dups: u32 = 216;
    REORD_SEEN reord_seen: u32 = 220;
    RCV_OOOPACK rcv_ooopack: u32 = 224;
    SND_WND snd_wnd: u32 = 228;
    RCV_WND rcv_wnd: u32 = 232;
    REHASH rehash: u32 = 236;
    TOTAL_RTO total_rto: u16 = 240;
    TOTAL_RTO_RECOVERIES total_rto_recoveries: u16 = 242;
    TOTAL_RTO_TIME total_rto_time: u32 = 244;
}

/// Byte 6 holds `snd_wscale:4, rcv_wscale:4`; byte 7 holds
/// `delivery_rate_app_limited:1, fastopen_client_fail:2`. GCC fills bitfields from the
/// least significant bit on little-endian targets (x86_64, aarch64).
const WSCALE_BYTE: usize = 6;
const FLAGS_BYTE: usize = 7;

impl TcpInfo {
    pub const SND_WSCALE: Field = Field {
        offset: WSCALE_BYTE,
        size: 1,
    };
    pub const RCV_WSCALE: Field = Field {
        offset: WSCALE_BYTE,
        size: 1,
    };
    pub const DELIVERY_RATE_APP_LIMITED: Field = Field {
        offset: FLAGS_BYTE,
        size: 1,
    };
    /// Linux 5.5+; older kernels leave the bits 0.
    pub const FASTOPEN_CLIENT_FAIL: Field = Field {
        offset: FLAGS_BYTE,
        size: 1,
    };

    /// Decodes `struct tcp_info` from native-endian bytes as getsockopt returned them.
    ///
    /// A shorter slice (older kernel) leaves the missing fields 0, also one the slice
    /// cuts in two; bytes past [`TCP_INFO_LEN`] (newer kernel) are ignored.
    /// `valid_len` is the number of bytes used, at most [`TCP_INFO_LEN`].
    pub fn decode(bytes: &[u8]) -> TcpInfo {
        let bytes = &bytes[..bytes.len().min(TCP_INFO_LEN)];
        let mut info = TcpInfo {
            // At most TCP_INFO_LEN, so it fits.
            valid_len: bytes.len() as u32,
            ..TcpInfo::default()
        };
        info.decode_plain(bytes);
        if let Some(&b) = bytes.get(WSCALE_BYTE) {
            info.snd_wscale = b & 0x0f;
            info.rcv_wscale = b >> 4;
        }
        if let Some(&b) = bytes.get(FLAGS_BYTE) {
            info.delivery_rate_app_limited = b & 0x01 != 0;
            info.fastopen_client_fail = (b >> 1) & 0x03;
        }
        info
    }

    /// Whether the kernel filled in `field`, e.g. `info.has(TcpInfo::BUSY_TIME)`.
    pub fn has(&self, field: Field) -> bool {
        self.valid_len as usize >= field.end()
    }

    /// Packets in flight as the kernel counts them (`tcp_packets_in_flight`):
    /// unacked − (sacked + lost) + retrans, never below 0. Meaningless on a listening
    /// socket, where `unacked` and `sacked` describe the accept queue.
    pub fn in_flight(&self) -> u32 {
        let out = u64::from(self.unacked) + u64::from(self.retrans);
        let left = u64::from(self.sacked) + u64::from(self.lost);
        u32::try_from(out.saturating_sub(left)).unwrap_or(u32::MAX)
    }
}

/// Reads one native-endian integer at a byte offset, `None` if the slice ends first.
trait NativeInt: Sized {
    fn read(bytes: &[u8], at: usize) -> Option<Self>;
}

macro_rules! native_int {
    ($($ty:ty),*) => {$(
        impl NativeInt for $ty {
            fn read(bytes: &[u8], at: usize) -> Option<Self> {
                let chunk = bytes.get(at..)?.first_chunk::<{ size_of::<$ty>() }>()?;
                Some(<$ty>::from_ne_bytes(*chunk))
            }
        }
    )*};
}

native_int!(u8, u16, u32, u64);

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

/// `sizeof(struct tcp_bbr_info)` (include/uapi/linux/inet_diag.h).
pub const BBR_INFO_LEN: usize = 20;

impl BbrInfo {
    /// Decodes TCP_CC_INFO's `struct tcp_bbr_info` (native-endian); `None` when fewer
    /// than [`BBR_INFO_LEN`] bytes are given, as for a flow not running BBR.
    pub fn decode(bytes: &[u8]) -> Option<BbrInfo> {
        let word = |at| u32::read(bytes, at);
        let (lo, hi) = (word(0)?, word(4)?);
        Some(BbrInfo {
            bw: u64::from(lo) | (u64::from(hi) << 32),
            min_rtt: word(8)?,
            pacing_gain: word(12)?,
            cwnd_gain: word(16)?,
        })
    }
}

/// A socket's memory as SO_MEMINFO reports it (`SK_MEMINFO_*` in
/// include/uapi/linux/sock_diag.h; what `ss -m` prints as `skmem`), bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkMemInfo {
    /// Received data not yet read (`r`).
    pub rmem_alloc: u32,
    /// The receive buffer, SO_RCVBUF (`rb`).
    pub rcvbuf: u32,
    /// Sent data still in the host's queues (`t`).
    pub wmem_alloc: u32,
    /// The send buffer, SO_SNDBUF (`tb`).
    pub sndbuf: u32,
    /// Memory reserved for the socket but not used (`f`).
    pub fwd_alloc: u32,
    /// Written data not yet acknowledged, unsent or in flight, with its overhead
    /// (`w`): the send buffer is full when this reaches `sndbuf`.
    pub wmem_queued: u32,
    pub optmem: u32,
    pub backlog: u32,
    pub drops: u32,
}

/// `SK_MEMINFO_VARS`: the 32-bit words SO_MEMINFO returns.
pub const SK_MEMINFO_WORDS: usize = 9;

impl SkMemInfo {
    /// Decodes SO_MEMINFO's words (native-endian); `None` for fewer than
    /// [`SK_MEMINFO_WORDS`].
    pub fn decode(bytes: &[u8]) -> Option<SkMemInfo> {
        let mut words = [0u32; SK_MEMINFO_WORDS];
        for (k, word) in words.iter_mut().enumerate() {
            *word = u32::read(bytes, 4 * k)?;
        }
        Some(SkMemInfo::from_words(words))
    }

    /// From the words in the kernel's order (`SK_MEMINFO_RMEM_ALLOC` first).
    pub fn from_words(words: [u32; SK_MEMINFO_WORDS]) -> SkMemInfo {
        let [rmem_alloc, rcvbuf, wmem_alloc, sndbuf, fwd_alloc, wmem_queued, optmem, backlog, drops] =
            words;
        SkMemInfo {
            rmem_alloc,
            rcvbuf,
            wmem_alloc,
            sndbuf,
            fwd_alloc,
            wmem_queued,
            optmem,
            backlog,
            drops,
        }
    }

    /// The words in the kernel's order: what [`SkMemInfo::from_words`] takes.
    pub fn words(&self) -> [u32; SK_MEMINFO_WORDS] {
        let SkMemInfo {
            rmem_alloc,
            rcvbuf,
            wmem_alloc,
            sndbuf,
            fwd_alloc,
            wmem_queued,
            optmem,
            backlog,
            drops,
        } = *self;
        [
            rmem_alloc,
            rcvbuf,
            wmem_alloc,
            sndbuf,
            fwd_alloc,
            wmem_queued,
            optmem,
            backlog,
            drops,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_memory_is_nine_words_in_the_kernels_order() {
        let words: Vec<u8> = (1u32..=9).flat_map(u32::to_ne_bytes).collect();
        let m = SkMemInfo::decode(&words).unwrap();
        assert_eq!(
            [
                m.rmem_alloc,
                m.rcvbuf,
                m.wmem_alloc,
                m.sndbuf,
                m.fwd_alloc,
                m.wmem_queued,
                m.optmem,
                m.backlog,
                m.drops
            ],
            [1, 2, 3, 4, 5, 6, 7, 8, 9]
        );
        assert_eq!(SkMemInfo::decode(&words[..32]), None);
        assert_eq!(SkMemInfo::from_words(m.words()), m);
    }

    /// A `struct tcp_info` image written at offsets copied from the header by hand
    /// (checked against GCC's `offsetof`), independent of the decoder's table.
    fn full_image() -> Vec<u8> {
        let mut b = vec![0u8; 248];
        let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
        put(0, &[1, 4, 2, 3, 5, 7]);
        put(6, &[0x93]); // snd_wscale 3, rcv_wscale 9
        put(7, &[0x05]); // app_limited 1, fastopen_client_fail 2
        for (i, at) in (8..=100).step_by(4).enumerate() {
            // rto (8) … total_retrans (100): 1000, 1001, …
            put(at, &(1000 + i as u32).to_ne_bytes());
        }
        put(104, &0x1_0000_0001u64.to_ne_bytes()); // pacing_rate
        put(112, &0x2_0000_0002u64.to_ne_bytes()); // max_pacing_rate
        put(120, &0x3_0000_0003u64.to_ne_bytes()); // bytes_acked
        put(128, &0x4_0000_0004u64.to_ne_bytes()); // bytes_received
        put(136, &2001u32.to_ne_bytes()); // segs_out
        put(140, &2002u32.to_ne_bytes()); // segs_in
        put(144, &2003u32.to_ne_bytes()); // notsent_bytes
        put(148, &2004u32.to_ne_bytes()); // min_rtt
        put(152, &2005u32.to_ne_bytes()); // data_segs_in
        put(156, &2006u32.to_ne_bytes()); // data_segs_out
        put(160, &0x5_0000_0005u64.to_ne_bytes()); // delivery_rate
        put(168, &0x6_0000_0006u64.to_ne_bytes()); // busy_time
        put(176, &0x7_0000_0007u64.to_ne_bytes()); // rwnd_limited
        put(184, &0x8_0000_0008u64.to_ne_bytes()); // sndbuf_limited
        put(192, &3001u32.to_ne_bytes()); // delivered
        put(196, &3002u32.to_ne_bytes()); // delivered_ce
        put(200, &0x9_0000_0009u64.to_ne_bytes()); // bytes_sent
        put(208, &0xa_0000_000au64.to_ne_bytes()); // bytes_retrans
        put(216, &4001u32.to_ne_bytes()); // dsack_dups
        put(220, &4002u32.to_ne_bytes()); // reord_seen
        put(224, &4003u32.to_ne_bytes()); // rcv_ooopack
        put(228, &4004u32.to_ne_bytes()); // snd_wnd
        put(232, &4005u32.to_ne_bytes()); // rcv_wnd
        put(236, &4006u32.to_ne_bytes()); // rehash
        put(240, &5001u16.to_ne_bytes()); // total_rto
        put(242, &5002u16.to_ne_bytes()); // total_rto_recoveries
        put(244, &6001u32.to_ne_bytes()); // total_rto_time
        b
    }

    fn full_expected() -> TcpInfo {
        TcpInfo {
            valid_len: 248,
            state: 1,
            ca_state: 4,
            retransmits: 2,
            probes: 3,
            backoff: 5,
            options: 7,
            snd_wscale: 3,
            rcv_wscale: 9,
            delivery_rate_app_limited: true,
            fastopen_client_fail: 2,
            rto: 1000,
            ato: 1001,
            snd_mss: 1002,
            rcv_mss: 1003,
            unacked: 1004,
            sacked: 1005,
            lost: 1006,
            retrans: 1007,
            fackets: 1008,
            last_data_sent: 1009,
            last_ack_sent: 1010,
            last_data_recv: 1011,
            last_ack_recv: 1012,
            pmtu: 1013,
            rcv_ssthresh: 1014,
            rtt: 1015,
            rttvar: 1016,
            snd_ssthresh: 1017,
            snd_cwnd: 1018,
            advmss: 1019,
            reordering: 1020,
            rcv_rtt: 1021,
            rcv_space: 1022,
            total_retrans: 1023,
            pacing_rate: 0x1_0000_0001,
            max_pacing_rate: 0x2_0000_0002,
            bytes_acked: 0x3_0000_0003,
            bytes_received: 0x4_0000_0004,
            segs_out: 2001,
            segs_in: 2002,
            notsent_bytes: 2003,
            min_rtt: 2004,
            data_segs_in: 2005,
            data_segs_out: 2006,
            delivery_rate: 0x5_0000_0005,
            busy_time: 0x6_0000_0006,
            rwnd_limited: 0x7_0000_0007,
            sndbuf_limited: 0x8_0000_0008,
            delivered: 3001,
            delivered_ce: 3002,
            bytes_sent: 0x9_0000_0009,
            bytes_retrans: 0xa_0000_000a,
            dsack_dups: 4001,
            reord_seen: 4002,
            rcv_ooopack: 4003,
            snd_wnd: 4004,
            rcv_wnd: 4005,
            rehash: 4006,
            total_rto: 5001,
            total_rto_recoveries: 5002,
            total_rto_time: 6001,
        }
    }

    #[test]
    fn struct_length_is_linux_6_7() {
        assert_eq!(TCP_INFO_LEN, 248);
    }

    #[test]
    fn decodes_every_field_at_the_kernel_offsets() {
        let info = TcpInfo::decode(&full_image());
        assert_eq!(info, full_expected());
        assert!(info.has(TcpInfo::TOTAL_RTO_TIME));
        assert!(info.has(TcpInfo::FASTOPEN_CLIENT_FAIL));
    }

    #[test]
    fn ignores_bytes_past_the_known_struct() {
        // Linux 6.18 appends AccECN counters after total_rto_time.
        let mut bytes = full_image();
        bytes.extend_from_slice(&[0xff; 32]);
        assert_eq!(TcpInfo::decode(&bytes), full_expected());
    }

    #[test]
    fn linux_4_x_length_stops_after_total_retrans() {
        let info = TcpInfo::decode(&full_image()[..104]);
        assert_eq!(info.valid_len, 104);
        assert_eq!(info.total_retrans, 1023);
        assert_eq!(info.snd_cwnd, 1018);
        assert_eq!(
            (info.pacing_rate, info.bytes_acked, info.busy_time),
            (0, 0, 0)
        );
        assert!(info.has(TcpInfo::TOTAL_RETRANS));
        assert!(!info.has(TcpInfo::PACING_RATE));
        assert!(!info.has(TcpInfo::BUSY_TIME));
        // Same as the full image with everything from byte 104 on zeroed.
        let mut zero_tail = full_image();
        zero_tail[104..].fill(0);
        let expected = TcpInfo {
            valid_len: 104,
            ..TcpInfo::decode(&zero_tail)
        };
        assert_eq!(info, expected);
    }

    #[test]
    fn old_92_byte_struct_leaves_later_fields_zero() {
        let info = TcpInfo::decode(&full_image()[..92]);
        assert_eq!(info.valid_len, 92);
        assert_eq!(info.reordering, 1020);
        assert_eq!(
            (info.rcv_rtt, info.rcv_space, info.total_retrans),
            (0, 0, 0)
        );
        assert!(info.has(TcpInfo::REORDERING));
        assert!(!info.has(TcpInfo::RCV_RTT));
        assert_eq!(info.state, 1);
        assert_eq!(info.rcv_wscale, 9);
    }

    #[test]
    fn field_cut_in_the_middle_stays_zero_and_absent() {
        let info = TcpInfo::decode(&full_image()[..246]);
        assert_eq!(info.total_rto_recoveries, 5002);
        assert_eq!(info.total_rto_time, 0);
        assert!(!info.has(TcpInfo::TOTAL_RTO_TIME));
    }

    #[test]
    fn empty_slice_decodes_to_nothing() {
        assert_eq!(TcpInfo::decode(&[]), TcpInfo::default());
    }

    #[test]
    fn bitfields_use_low_bits_first() {
        let mut bytes = [0u8; 8];
        bytes[6] = 0xe7; // snd 7, rcv 14
        bytes[7] = 0x06; // app_limited 0, fastopen_client_fail 3
        let info = TcpInfo::decode(&bytes);
        assert_eq!((info.snd_wscale, info.rcv_wscale), (7, 14));
        assert!(!info.delivery_rate_app_limited);
        assert_eq!(info.fastopen_client_fail, 3);
        // Bits above fastopen_client_fail are padding.
        bytes[7] = 0xf9;
        let info = TcpInfo::decode(&bytes);
        assert!(info.delivery_rate_app_limited);
        assert_eq!(info.fastopen_client_fail, 0);
    }

    #[test]
    fn table_is_contiguous_and_naturally_aligned() {
        // The bitfield bytes 6 and 7 fall in the gap before rto's alignment.
        let mut end = 0usize;
        for &(name, field) in TcpInfo::FIELDS {
            let aligned = end.next_multiple_of(field.size);
            assert_eq!(field.offset, aligned, "{name}");
            end = field.end();
        }
        assert_eq!(end, TCP_INFO_LEN);
        assert_eq!(TcpInfo::FIELDS.len(), 57);
    }

    #[test]
    fn in_flight_follows_the_kernel() {
        let info = TcpInfo {
            unacked: 100,
            sacked: 20,
            lost: 10,
            retrans: 4,
            ..TcpInfo::default()
        };
        assert_eq!(info.in_flight(), 74);
        let odd = TcpInfo {
            unacked: 5,
            sacked: 10,
            lost: 3,
            retrans: 1,
            ..TcpInfo::default()
        };
        assert_eq!(odd.in_flight(), 0);
        let huge = TcpInfo {
            unacked: u32::MAX,
            retrans: u32::MAX,
            ..TcpInfo::default()
        };
        assert_eq!(huge.in_flight(), u32::MAX);
    }

    #[test]
    fn bbr_info_joins_the_bandwidth_halves() {
        let mut b = Vec::new();
        for word in [0x8000_0001u32, 0x2, 1500, 739, 512] {
            b.extend_from_slice(&word.to_ne_bytes());
        }
        let bbr = BbrInfo::decode(&b).expect("20 bytes");
        assert_eq!(
            bbr,
            BbrInfo {
                bw: 0x2_8000_0001,
                min_rtt: 1500,
                pacing_gain: 739,
                cwnd_gain: 512,
            }
        );
        assert_eq!(BbrInfo::decode(&b[..19]), None);
        assert_eq!(BbrInfo::decode(&[]), None);
    }
}
