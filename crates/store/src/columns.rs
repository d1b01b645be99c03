//! The one definition of the `samples` columns that mirror [`TcpInfo`] (stored in
//! `sample_blocks`, exported as `samples`), and how Rust numbers map onto SQLite
//! integers.
//!
//! Below the migrations (`schema`) and the readers and writers of samples, which all
//! name these columns.

use tcplab_record::tcpinfo::{TcpInfo, SK_MEMINFO_WORDS};

/// A Rust integer stored in an SQLite INTEGER (i64).
///
/// `u64` is stored as its two's-complement `i64` bit pattern, so every value round-trips
/// exactly; values above `i64::MAX` read as negative numbers in SQL and in exports. The
/// only such value seen in practice is `u64::MAX` (the kernel's `~0`, "no limit", e.g.
/// `max_pacing_rate` when SO_MAX_PACING_RATE is unset), which reads as `-1`.
pub(crate) trait SqlInt: Sized {
    fn to_sql(self) -> i64;
    /// `None` when the stored value does not fit the Rust type.
    fn from_sql(v: i64) -> Option<Self>;
}

macro_rules! narrow_sql_int {
    ($($t:ty),*) => {$(
        impl SqlInt for $t {
            fn to_sql(self) -> i64 {
                i64::from(self)
            }
            fn from_sql(v: i64) -> Option<Self> {
                Self::try_from(v).ok()
            }
        }
    )*};
}
narrow_sql_int!(u8, u16, u32, i64);

impl SqlInt for u64 {
    fn to_sql(self) -> i64 {
        self as i64
    }
    fn from_sql(v: i64) -> Option<Self> {
        Some(v as u64)
    }
}

impl SqlInt for bool {
    fn to_sql(self) -> i64 {
        i64::from(self)
    }
    fn from_sql(v: i64) -> Option<Self> {
        match v {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

/// One `samples` column holding one [`TcpInfo`] field (same name), INTEGER NOT NULL.
pub(crate) struct InfoColumn {
    pub name: &'static str,
    pub get: fn(&TcpInfo) -> i64,
    /// Stores `v` into the field; `false` when `v` does not fit the field's type.
    pub set: fn(&mut TcpInfo, i64) -> bool,
}

/// Defines [`TCP_INFO_COLUMNS`] from the field names, in table order. The destructuring
/// below lists the fields without `..`, so a field added to `TcpInfo` fails to compile
/// until it is listed here (and a migration adds its column, see `migration_1`).
macro_rules! tcp_info_columns {
    ($($field:ident),* $(,)?) => {
        /// The `samples` columns after `run_id, flow, host, t_us`, one per [`TcpInfo`] field.
        pub(crate) static TCP_INFO_COLUMNS: &[InfoColumn] = &[$(
            InfoColumn {
                name: stringify!($field),
                get: |i| SqlInt::to_sql(i.$field),
                set: |i, v| match SqlInt::from_sql(v) {
                    Some(x) => {
                        i.$field = x;
                        true
                    }
                    None => false,
                },
            },
        )*];

        #[allow(dead_code)]
        fn every_tcp_info_field_has_a_column(info: TcpInfo) {
            let TcpInfo { $($field: _),* } = info;
        }
    };
}

tcp_info_columns!(
    valid_len,
    state,
    ca_state,
    retransmits,
    probes,
    backoff,
    options,
    snd_wscale,
    rcv_wscale,
    delivery_rate_app_limited,
    fastopen_client_fail,
    rto,
    ato,
    snd_mss,
    rcv_mss,
    unacked,
    sacked,
    lost,
    retrans,
    fackets,
    last_data_sent,
    last_ack_sent,
    last_data_recv,
    last_ack_recv,
    pmtu,
    rcv_ssthresh,
    rtt,
    rttvar,
    snd_ssthresh,
    snd_cwnd,
    advmss,
    reordering,
    rcv_rtt,
    rcv_space,
    total_retrans,
    pacing_rate,
    max_pacing_rate,
    bytes_acked,
    bytes_received,
    segs_out,
    segs_in,
    notsent_bytes,
    min_rtt,
    data_segs_in,
    data_segs_out,
    delivery_rate,
    busy_time,
    rwnd_limited,
    sndbuf_limited,
    delivered,
    delivered_ce,
    bytes_sent,
    bytes_retrans,
    dsack_dups,
    reord_seen,
    rcv_ooopack,
    snd_wnd,
    rcv_wnd,
    rehash,
    total_rto,
    total_rto_recoveries,
    total_rto_time,
);

/// The `samples` columns before the `TcpInfo` ones.
pub(crate) const SAMPLE_KEY_COLUMNS: [&str; 4] = ["run_id", "flow", "host", "t_us"];
/// The nullable `samples` columns after the `TcpInfo` ones ([`tcplab_record::tcpinfo::BbrInfo`]).
pub(crate) const SAMPLE_BBR_COLUMNS: [&str; 4] =
    ["bbr_bw", "bbr_min_rtt", "bbr_pacing_gain", "bbr_cwnd_gain"];

/// The nullable `samples` columns of the socket's memory
/// ([`tcplab_record::tcpinfo::SkMemInfo`], migration 5), in its field order.
pub(crate) const SAMPLE_SKMEM_COLUMNS: [&str; SK_MEMINFO_WORDS] = [
    "skmem_rmem_alloc",
    "skmem_rcvbuf",
    "skmem_wmem_alloc",
    "skmem_sndbuf",
    "skmem_fwd_alloc",
    "skmem_wmem_queued",
    "skmem_optmem",
    "skmem_backlog",
    "skmem_drops",
];

/// Every `samples` column in table order.
pub(crate) fn sample_columns() -> impl Iterator<Item = &'static str> {
    SAMPLE_KEY_COLUMNS
        .into_iter()
        .chain(TCP_INFO_COLUMNS.iter().map(|c| c.name))
        .chain(SAMPLE_BBR_COLUMNS)
        .chain(SAMPLE_SKMEM_COLUMNS)
}
