//! The `netem` backend: one direction of a [`PathSpec`]
//! applied with the kernel's netem qdisc instead of the tcplab emulator, through
//! rtnetlink (no `tc` process).
//!
//! Two steps, so the first can be tested without privileges:
//! - [`netem_options`] translates a [`LinkSpec`] into [`NetemOptions`], a mirror of what
//!   netem takes (`include/uapi/linux/pkt_sched.h`), and refuses what netem cannot do:
//!   traces, CoDel, jitter that would silently reorder, reorder without a delay.
//! - [`apply_netem`] installs it as the root qdisc of a link in the calling thread's
//!   namespace; [`netem_available`] probes whether the kernel has `sch_netem` at all.
//!
//! What netem does differently from the emulator, even where a spec translates:
//! - netem's `limit` counts every packet it holds, the delay line included; see
//!   [`netem_options`] for how the router buffer is translated.
//! - netem applies loss, duplication and rate to what the qdisc sees: with GSO/TSO on the
//!   link, a 64 KiB super-packet is lost as one packet. Turn segmentation offloads off on
//!   the link that carries netem to keep losses per wire packet.
//! - netem's rate counts the L2 frame (the 14-byte Ethernet header on a veth) plus
//!   `overhead`; the emulator counts IP packets plus `overhead`.
//! - On the sender's own link netem interacts with TCP Small Queues; put it on a link
//!   the sender does not own (the far veth end, or a router namespace).

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::thread;

use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use tcplab_netsim::path::{Aqm, Bottleneck, JitterDist, Limit, LinkSpec, Loss, PathSpec, Prob};

/// The one line a user sees when the kernel has no netem.
pub const NETEM_UNAVAILABLE: &str = "this kernel has no sch_netem (netem backend unavailable): use the default tcplab emulator backend";

/// netem's own default `limit`, in packets.
pub const NETEM_DEFAULT_LIMIT: u32 = 1000;

/// The most values a delay distribution table may hold (`NETEM_DIST_MAX`).
pub const NETEM_DIST_MAX: usize = 16_384;

// rtnetlink and tc constants (linux/netlink.h, linux/rtnetlink.h, linux/pkt_sched.h).
const RTM_NEWQDISC: u16 = 36;
#[cfg(test)]
const RTM_GETQDISC: u16 = 38;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDRLEN: usize = 16;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
#[cfg(test)]
const NLM_F_DUMP: u16 = 0x300;
/// In an error reply: the request was not echoed, only its header.
const NLM_F_CAPPED: u16 = 0x100;
/// In an error reply: extended-ack attributes follow.
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;
const TCMSG_LEN: usize = 20;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
/// `1:0`.
const NETEM_HANDLE: u32 = 0x0001_0000;

const TCA_NETEM_DELAY_DIST: u16 = 2;
const TCA_NETEM_REORDER: u16 = 3;
const TCA_NETEM_CORRUPT: u16 = 4;
const TCA_NETEM_LOSS: u16 = 5;
const TCA_NETEM_RATE: u16 = 6;
const TCA_NETEM_RATE64: u16 = 8;
const TCA_NETEM_LATENCY64: u16 = 10;
const TCA_NETEM_JITTER64: u16 = 11;
const TCA_NETEM_PRNG_SEED: u16 = 14;
const NETEM_LOSS_GE: u16 = 2;
/// psched ticks are 2^6 ns (`PSCHED_SHIFT`).
const PSCHED_SHIFT: u32 = 6;

/// Why a spec cannot go to netem, or netem to the kernel.
#[derive(Debug, thiserror::Error)]
pub enum NetemError {
    #[error("{}", NETEM_UNAVAILABLE)]
    Unavailable,
    /// Settings of the path netem has no counterpart for, as the spec spells them
    /// ([`unsupported`]), all of them at once.
    #[error("netem backend cannot emulate {}: use the tcplab emulator", .0.join(", "))]
    Unsupported(Vec<String>),
    #[error("netem backend: reorder needs a delay on this direction (netem reorders by sending some packets without it)")]
    ReorderWithoutDelay,
    #[error("netem backend: jittered packets overtake each other in netem unless the direction has a rate; write `jitter D reorder` to accept that, add a rate, or use the tcplab emulator")]
    JitterReorders,
    #[error("netem backend: jitter dist {dist} needs netem's table {}: {reason}", file.display())]
    DistTable {
        dist: &'static str,
        file: PathBuf,
        reason: String,
    },
    /// A value netem cannot represent.
    #[error("netem backend: {0}")]
    Unrepresentable(String),
    /// The cause is part of the message, not a `source`: chains would print it twice.
    #[error("{what}: {error}")]
    Netlink { what: String, error: io::Error },
}

/// What netem takes, field for field: `struct tc_netem_qopt` and the attributes after it.
/// Probabilities are netem's: `p × u32::MAX` ([`netem_prob`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetemOptions {
    /// Packets netem holds at most: its whole tfifo, delay line included.
    pub limit: u32,
    /// Sent as `TCA_NETEM_LATENCY64` (ns); the struct's tick field gets the same value in
    /// psched ticks, saturated, which the kernel overrides with the 64-bit attribute.
    pub latency_ns: u64,
    /// Sent as `TCA_NETEM_JITTER64` (ns), like `latency_ns`.
    pub jitter_ns: u64,
    /// Random loss; 0 with a Gilbert–Elliott model.
    pub loss: u32,
    /// Reorder gap: 0 without reorder.
    pub gap: u32,
    pub duplicate: u32,
    /// `TCA_NETEM_REORDER`.
    pub reorder: Option<NetemReorder>,
    /// `TCA_NETEM_CORRUPT`.
    pub corrupt: Option<NetemCorrupt>,
    /// `TCA_NETEM_LOSS` / `NETEM_LOSS_GE`.
    pub gemodel: Option<NetemGeModel>,
    /// `TCA_NETEM_RATE`, plus `TCA_NETEM_RATE64` from 2^32 bytes/s up.
    pub rate: Option<NetemRate>,
    /// `TCA_NETEM_DELAY_DIST`; `None` draws jitter uniformly.
    pub delay_dist: Option<DistTable>,
    /// `TCA_NETEM_PRNG_SEED` (Linux ≥ 6.3; older kernels ignore it). [`netem_options`]
    /// leaves it `None`: set it from `PathSpec::link_seed` for repeatable runs.
    pub seed: Option<u64>,
}

impl Default for NetemOptions {
    /// What `tc qdisc add … netem` with no arguments sets.
    fn default() -> Self {
        NetemOptions {
            limit: NETEM_DEFAULT_LIMIT,
            latency_ns: 0,
            jitter_ns: 0,
            loss: 0,
            gap: 0,
            duplicate: 0,
            reorder: None,
            corrupt: None,
            gemodel: None,
            rate: None,
            delay_dist: None,
            seed: None,
        }
    }
}

/// `struct tc_netem_reorder`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetemReorder {
    pub probability: u32,
    pub correlation: u32,
}

/// `struct tc_netem_corrupt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetemCorrupt {
    pub probability: u32,
    pub correlation: u32,
}

/// `struct tc_netem_gemodel`, in the kernel's terms: `h` is the probability of *no* loss
/// in the bad state (tc's `1-h` argument is stored as `u32::MAX - h`), `k1` the loss
/// probability in the good state (tc's `1-k` argument, stored as is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetemGeModel {
    /// good → bad.
    pub p: u32,
    /// bad → good.
    pub r: u32,
    pub h: u32,
    pub k1: u32,
}

/// `struct tc_netem_rate` with the rate widened to 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetemRate {
    /// Bytes/s.
    pub bytes_per_s: u64,
    pub packet_overhead: i32,
    pub cell_size: u32,
    pub cell_overhead: i32,
}

/// A netem delay distribution table: iproute2's `NAME.dist`, values in units of
/// σ / 8192 (`NETEM_DIST_SCALE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistTable {
    name: String,
    path: PathBuf,
    values: Vec<i16>,
}

impl DistTable {
    /// Parses iproute2's format: `#` comment lines, then whitespace-separated integers
    /// (decimal, or `0x` hex as strtol reads them), 1 to [`NETEM_DIST_MAX`] of them.
    pub fn parse(name: &str, path: &Path, text: &str) -> Result<DistTable, String> {
        let mut values = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            for word in line.split_whitespace() {
                let value = parse_c_int(word)
                    .and_then(|v| i16::try_from(v).ok())
                    .ok_or_else(|| format!("{word:?} is not a 16-bit integer"))?;
                if values.len() == NETEM_DIST_MAX {
                    return Err(format!("more than {NETEM_DIST_MAX} values"));
                }
                values.push(value);
            }
        }
        if values.is_empty() {
            return Err("no values".into());
        }
        Ok(DistTable {
            name: name.to_owned(),
            path: path.to_owned(),
            values,
        })
    }

    /// Reads and parses `path`.
    pub fn load(name: &str, path: &Path) -> io::Result<DistTable> {
        let text = fs::read_to_string(path)?;
        DistTable::parse(name, path, &text)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn values(&self) -> &[i16] {
        &self.values
    }
}

/// strtol with base 0, as iproute2 reads tables: decimal, `0x` hex, leading-0 octal.
fn parse_c_int(word: &str) -> Option<i64> {
    let (negative, digits) = match word.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, word.strip_prefix('+').unwrap_or(word)),
    };
    let magnitude = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(hex, 16).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse::<i64>().ok()?
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// netem's probability scale: `p × u32::MAX`, rounded to nearest (half up), computed
/// exactly from parts per billion. (tc rounds the same product in f64 with `rint`, so it
/// may differ by one unit on an exact tie, e.g. 70%.)
pub fn netem_prob(p: Prob) -> u32 {
    let scale = u64::from(Prob::SCALE);
    let scaled = (u64::from(p.ppb()) * u64::from(u32::MAX) + scale / 2) / scale;
    // ppb ≤ SCALE, so scaled ≤ u32::MAX.
    u32::try_from(scaled).unwrap_or(u32::MAX)
}

/// Where iproute2 may keep its `.dist` tables: `$TC_LIB_DIR` when set (tc itself then
/// looks nowhere else), otherwise the usual library directories.
pub fn tc_lib_dirs() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os("TC_LIB_DIR").filter(|d| !d.is_empty()) {
        return vec![PathBuf::from(dir)];
    }
    vec![
        PathBuf::from("/usr/lib/tc"),
        PathBuf::from(format!("/usr/lib/{}-linux-gnu/tc", std::env::consts::ARCH)),
        PathBuf::from("/usr/lib64/tc"),
        PathBuf::from("/usr/local/lib/tc"),
    ]
}

/// Translates one direction of a path into netem's options; `path_rtt_us` is the
/// path's base RTT (for a queue in BDP), `mtu` the path MTU. Distribution tables are
/// looked up in [`tc_lib_dirs`].
///
/// The router buffer: netem's `limit` counts every packet in netem's queue, and that
/// queue holds the delay line too (the pitfall DESIGN.md names), while the spec's
/// `queue` is the bottleneck buffer alone. We therefore add the packets the delay line
/// holds at line rate, so that the bottleneck buffer keeps its meaning as far as netem
/// allows:
///
/// `limit = queue packets + 1 (the packet being serialized) + ⌈rate × (delay + jitter) / (8 × (mtu + overhead))⌉`
///
/// A queue in bytes (or BDP) becomes ⌊bytes / mtu⌋ packets. This is exact only for
/// MTU-sized packets arriving at line rate: smaller packets pack the delay line more
/// densely, so netem then drops earlier than the emulator would. Without a rate there
/// is no bottleneck and nothing may be dropped for space: `limit` is `u32::MAX`.
///
/// Refused, with an error that says so: what [`unsupported`] names, reorder without a
/// delay, and jitter without the `reorder` flag on a direction without a rate (netem's
/// tfifo sorts by due time, so jittered packets overtake each other; behind a rate
/// each packet is timed after the previous one and order is kept). A non-uniform jitter
/// distribution needs iproute2's `.dist` table, which is read and sent along.
pub fn netem_options(
    link: &LinkSpec,
    path_rtt_us: u64,
    mtu: u32,
) -> Result<NetemOptions, NetemError> {
    netem_options_in(link, path_rtt_us, mtu, &tc_lib_dirs())
}

/// The settings of one direction netem cannot emulate, spelled as the spec's keys (a
/// gap pacer, a rate, delay or loss trace, an AQM behind a rate: CoDel, fq_codel and PIE as netem's child
/// qdiscs are not built, this kernel has none of them to test against). Every
/// setting is named here: a new one does not compile until netem decides.
pub fn unsupported(link: &LinkSpec) -> Vec<String> {
    let LinkSpec {
        delay_us: _,
        jitter: _,
        loss: _,
        duplicate: _,
        corrupt: _,
        reorder: _,
        bottleneck,
        queue: _,
        aqm,
        police,
        pace,
        delay_trace,
        loss_trace,
        // The sending hosts' device queue, which the lab sets on the veth pair.
        txqueuelen: _,
    } = link;
    let mut refused = Vec::new();
    // netem's delay and loss are set once; nothing here changes them over time.
    if delay_trace.is_some() {
        refused.push("delay-trace".to_owned());
    }
    if loss_trace.is_some() {
        refused.push("loss-trace".to_owned());
    }
    // tc's own policer is an ingress filter, which the lab does not build.
    if police.is_some() {
        refused.push("police".to_owned());
    }
    if pace.is_some() {
        refused.push("pace".to_owned());
    }
    match bottleneck {
        Bottleneck::Trace { .. } => refused.push("trace".to_owned()),
        // The queue and its AQM only exist behind a rate, as in the spec.
        Bottleneck::Rate { .. } if *aqm != Aqm::DropTail => {
            refused.push(format!("aqm {}", aqm.name()))
        }
        Bottleneck::Rate { .. } | Bottleneck::Unlimited => {}
    }
    refused
}

/// The settings of a whole path netem cannot emulate, refused in one error before
/// anything is built: unprefixed where both directions have them, else `up.`/`down.`.
pub fn check_path(path: &PathSpec) -> Result<(), NetemError> {
    let PathSpec {
        up,
        down,
        // netem takes both: the MTU sizes its limit, the seed its draws.
        mtu: _,
        seed: _,
        schedule,
    } = path;
    let (up, down) = (unsupported(up), unsupported(down));
    let mut both: Vec<String> = up.iter().filter(|k| down.contains(k)).cloned().collect();
    // Its qdiscs are set once, when the lab is built.
    if !schedule.is_empty() {
        both.push("at".to_owned());
    }
    let one_way = |dir: &str, keys: &[String]| -> Vec<String> {
        keys.iter()
            .filter(|k| !both.contains(k))
            .map(|k| format!("{dir}.{k}"))
            .collect()
    };
    let refused = [both.clone(), one_way("up", &up), one_way("down", &down)].concat();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(NetemError::Unsupported(refused))
    }
}

/// [`netem_options`] with the directories to look for `.dist` tables in.
pub fn netem_options_in(
    link: &LinkSpec,
    path_rtt_us: u64,
    mtu: u32,
    tc_lib_dirs: &[PathBuf],
) -> Result<NetemOptions, NetemError> {
    if mtu == 0 {
        return Err(NetemError::Unrepresentable("an MTU of 0".into()));
    }
    let refused = unsupported(link);
    if !refused.is_empty() {
        return Err(NetemError::Unsupported(refused));
    }
    let rate = match link.bottleneck {
        Bottleneck::Trace { .. } => unreachable!("refused above"),
        Bottleneck::Unlimited => None,
        Bottleneck::Rate { bps, overhead } => {
            let packet_overhead = i32::try_from(overhead).map_err(|_| {
                NetemError::Unrepresentable(format!("a packet overhead of {overhead} bytes"))
            })?;
            Some(NetemRate {
                // netem counts bytes/s: round, but never down to 0 (no rate at all).
                bytes_per_s: (bps.saturating_add(4) / 8).max(1),
                packet_overhead,
                cell_size: 0,
                cell_overhead: 0,
            })
        }
    };
    if link.reorder.is_some() && link.delay_us == 0 {
        return Err(NetemError::ReorderWithoutDelay);
    }

    let latency_ns = us_to_ns(link.delay_us, "delay")?;
    let (jitter_ns, delay_dist) = match link.jitter {
        None => (0, None),
        Some(jitter) => {
            // With a rate netem times each packet after the one before it, so jitter
            // cannot reorder; without one its tfifo sorts by due time.
            if !jitter.reorder && rate.is_none() {
                return Err(NetemError::JitterReorders);
            }
            let jitter_ns = us_to_ns(jitter.jitter_us, "jitter")?;
            // The kernel clamps jitter to INT_MAX ns.
            if jitter_ns > i32::MAX as u64 {
                return Err(NetemError::Unrepresentable(format!(
                    "a jitter of {} µs (netem's limit is {} µs)",
                    jitter.jitter_us,
                    i32::MAX as u64 / 1000
                )));
            }
            let table = match jitter.dist {
                JitterDist::Uniform => None,
                dist => Some(find_dist_table(dist.name(), tc_lib_dirs)?),
            };
            (jitter_ns, table)
        }
    };

    let (loss, gemodel) = match link.loss {
        Loss::None => (0, None),
        Loss::Random(p) => (netem_prob(p), None),
        Loss::GilbertElliott {
            p,
            r,
            loss_bad,
            loss_good,
        } => (
            0,
            Some(NetemGeModel {
                p: netem_prob(p),
                r: netem_prob(r),
                h: u32::MAX - netem_prob(loss_bad),
                k1: netem_prob(loss_good),
            }),
        ),
    };

    let (gap, reorder) = match link.reorder {
        None => (0, None),
        Some(r) => (
            r.gap.max(1),
            Some(NetemReorder {
                probability: netem_prob(r.prob),
                correlation: netem_prob(r.correlation),
            }),
        ),
    };

    let corrupt = (!link.corrupt.is_zero()).then(|| NetemCorrupt {
        probability: netem_prob(link.corrupt),
        correlation: 0,
    });

    let limit = match rate {
        None => u32::MAX,
        Some(rate) => {
            let queue_packets = match link.queue_limit(path_rtt_us) {
                Some(Limit::Packets(n)) => n,
                Some(Limit::Bytes(bytes)) => bytes / u64::from(mtu),
                None => {
                    return Err(NetemError::Unrepresentable(
                        "a queue in bdp without a fixed rate".into(),
                    ))
                }
            };
            let line_us =
                u128::from(link.delay_us) + u128::from(link.jitter.map_or(0, |j| j.jitter_us));
            let wire_bytes = u128::from(mtu) + u128::from(rate.packet_overhead.unsigned_abs());
            let on_line = (u128::from(rate.bytes_per_s) * line_us).div_ceil(wire_bytes * 1_000_000);
            let total = u128::from(queue_packets) + 1 + on_line;
            u32::try_from(total).unwrap_or(u32::MAX)
        }
    };

    Ok(NetemOptions {
        limit,
        latency_ns,
        jitter_ns,
        loss,
        gap,
        duplicate: netem_prob(link.duplicate),
        reorder,
        corrupt,
        gemodel,
        rate,
        delay_dist,
        seed: None,
    })
}

fn us_to_ns(us: u64, what: &str) -> Result<u64, NetemError> {
    us.checked_mul(1000)
        .filter(|&ns| ns <= i64::MAX as u64)
        .ok_or_else(|| NetemError::Unrepresentable(format!("a {what} of {us} µs")))
}

fn find_dist_table(dist: &'static str, dirs: &[PathBuf]) -> Result<DistTable, NetemError> {
    let file = format!("{dist}.dist");
    let mut failures = Vec::new();
    for dir in dirs {
        let path = dir.join(&file);
        match DistTable::load(dist, &path) {
            Ok(table) => return Ok(table),
            // A table that exists but is broken is an error at once, not a reason to
            // look further.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(NetemError::DistTable {
                    dist,
                    file: path,
                    reason: e.to_string(),
                })
            }
            Err(e) => failures.push((path, e)),
        }
    }
    let Some((first, first_error)) = failures.first() else {
        return Err(NetemError::DistTable {
            dist,
            file: PathBuf::from(file),
            reason: "no directory to look in".into(),
        });
    };
    let mut reason = format!("not readable ({first_error})");
    if failures.len() > 1 {
        let others: Vec<String> = failures[1..]
            .iter()
            .map(|(path, _)| path.display().to_string())
            .collect();
        reason.push_str(&format!("; not in {} either", others.join(", ")));
    }
    reason.push_str("; install iproute2's tc tables, set TC_LIB_DIR, or use `dist uniform`");
    Err(NetemError::DistTable {
        dist,
        file: first.clone(),
        reason,
    })
}

impl NetemOptions {
    /// The `TCA_OPTIONS` payload. netem is special: its options are `struct
    /// tc_netem_qopt` followed by netlink attributes, not a nested attribute list.
    /// Attributes are emitted only when they say something (no `TCA_NETEM_CORR`: every
    /// correlation is 0, which is the kernel's default).
    pub fn to_tca_options(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        for field in [
            ns_to_ticks(self.latency_ns),
            self.limit,
            self.loss,
            self.gap,
            self.duplicate,
            ns_to_ticks(self.jitter_ns),
        ] {
            out.extend_from_slice(&field.to_ne_bytes());
        }
        if let Some(r) = self.reorder {
            push_attr(
                &mut out,
                TCA_NETEM_REORDER,
                &u32s(&[r.probability, r.correlation]),
            );
        }
        if let Some(c) = self.corrupt {
            push_attr(
                &mut out,
                TCA_NETEM_CORRUPT,
                &u32s(&[c.probability, c.correlation]),
            );
        }
        if let Some(ge) = self.gemodel {
            let mut nested = Vec::new();
            push_attr(
                &mut nested,
                NETEM_LOSS_GE,
                &u32s(&[ge.p, ge.r, ge.h, ge.k1]),
            );
            push_attr(&mut out, TCA_NETEM_LOSS | NLA_F_NESTED, &nested);
        }
        if let Some(rate) = self.rate {
            // As tc: the 32-bit field saturates and RATE64 carries the rate beyond it.
            let rate32 = match u32::try_from(rate.bytes_per_s) {
                Ok(r) => r,
                Err(_) => {
                    push_attr(&mut out, TCA_NETEM_RATE64, &rate.bytes_per_s.to_ne_bytes());
                    u32::MAX
                }
            };
            let mut value = Vec::with_capacity(16);
            value.extend_from_slice(&rate32.to_ne_bytes());
            value.extend_from_slice(&rate.packet_overhead.to_ne_bytes());
            value.extend_from_slice(&rate.cell_size.to_ne_bytes());
            value.extend_from_slice(&rate.cell_overhead.to_ne_bytes());
            push_attr(&mut out, TCA_NETEM_RATE, &value);
        }
        if self.latency_ns != 0 {
            push_attr(
                &mut out,
                TCA_NETEM_LATENCY64,
                &self.latency_ns.to_ne_bytes(),
            );
        }
        if self.jitter_ns != 0 {
            push_attr(&mut out, TCA_NETEM_JITTER64, &self.jitter_ns.to_ne_bytes());
        }
        if let Some(seed) = self.seed {
            push_attr(&mut out, TCA_NETEM_PRNG_SEED, &seed.to_ne_bytes());
        }
        if let Some(table) = &self.delay_dist {
            let bytes: Vec<u8> = table.values.iter().flat_map(|v| v.to_ne_bytes()).collect();
            push_attr(&mut out, TCA_NETEM_DELAY_DIST, &bytes);
        }
        out
    }
}

/// psched ticks (ns >> 6), saturated to the 32-bit field.
fn ns_to_ticks(ns: u64) -> u32 {
    u32::try_from(ns >> PSCHED_SHIFT).unwrap_or(u32::MAX)
}

fn u32s(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

/// Appends one netlink attribute (`struct nlattr` + value), padded to 4 bytes.
fn push_attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = u16::try_from(4 + value.len()).expect("netlink attribute longer than 64 KiB");
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Installs `opts` as the root qdisc (handle `1:`) of link `ifname`, in the calling
/// thread's namespace, replacing whatever root qdisc it had (a netem already there is
/// changed in place). A kernel without netem gives [`NetemError::Unavailable`], and
/// leaves the link as it was.
pub fn apply_netem(ifname: &str, opts: &NetemOptions) -> Result<(), NetemError> {
    let what = format!("installing netem on {ifname}");
    let fail = |e: NlError| match e {
        NlError::Nack { errno, .. } if errno == libc::ENOENT || errno == libc::EOPNOTSUPP => {
            NetemError::Unavailable
        }
        e => NetemError::Netlink {
            what: what.clone(),
            error: e.into_io(),
        },
    };
    let index = if_index(ifname).map_err(|e| fail(NlError::Io(e)))?;
    let options = opts.to_tca_options();
    match new_root_qdisc(index, NETEM_HANDLE, "netem", &options) {
        Ok(()) => Ok(()),
        // The kernel changes a root qdisc that has our handle in place, and refuses
        // when it is of another kind (EINVAL, "must match existing qdisc"), before it
        // even looks for netem. Graft netem under an automatic handle first: that
        // replaces any kind (or fails, changing nothing), and then the root with
        // handle `1:` is gone and the first request goes through.
        Err(NlError::Nack {
            errno: libc::EINVAL,
            ..
        }) => {
            new_root_qdisc(index, 0, "netem", &options).map_err(fail)?;
            new_root_qdisc(index, NETEM_HANDLE, "netem", &options).map_err(fail)
        }
        Err(e) => Err(fail(e)),
    }
}

/// RTM_NEWQDISC with NLM_F_CREATE | NLM_F_REPLACE under the root of link `ifindex`;
/// `handle` 0 lets the kernel pick one.
fn new_root_qdisc(ifindex: u32, handle: u32, kind: &str, options: &[u8]) -> Result<(), NlError> {
    let mut kind_z = kind.as_bytes().to_vec();
    kind_z.push(0);
    TcRequest {
        msg_type: RTM_NEWQDISC,
        flags: NLM_F_CREATE | NLM_F_REPLACE,
        ifindex,
        handle,
        parent: TC_H_ROOT,
        attrs: vec![(TCA_KIND, kind_z), (TCA_OPTIONS, options.to_vec())],
    }
    .send()
    .map(drop)
}

/// Whether this kernel can run netem: installs one on `lo` in a throwaway network
/// namespace and reads the kernel's answer (which also loads `sch_netem` if it is a
/// module). Needs the privilege to create a namespace; without it the answer is
/// `false`, and [`probe_netem`] says why.
pub fn netem_available() -> bool {
    probe_netem().is_ok()
}

/// [`netem_available`] with the reason when netem is not usable.
pub fn probe_netem() -> Result<(), NetemError> {
    thread::Builder::new()
        .name("netem-probe".into())
        .spawn(|| {
            // SAFETY: plain syscall, moving only this thread; its namespace dies with it.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } == -1 {
                return Err(NetemError::Netlink {
                    what: "creating a throwaway netns to probe for netem".into(),
                    error: io::Error::last_os_error(),
                });
            }
            apply_netem("lo", &NetemOptions::default())
        })
        .map_err(|error| NetemError::Netlink {
            what: "spawning the netem probe thread".into(),
            error,
        })?
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

fn if_index(ifname: &str) -> io::Result<u32> {
    let c_name = std::ffi::CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "link name contains NUL"))?;
    // SAFETY: `c_name` is a valid NUL-terminated string; the lookup uses a socket of the
    // calling thread's namespace.
    match unsafe { libc::if_nametoindex(c_name.as_ptr()) } {
        0 => {
            let e = io::Error::last_os_error();
            Err(io::Error::new(e.kind(), format!("no link {ifname}: {e}")))
        }
        index => Ok(index),
    }
}

/// One tc request: `struct tcmsg` and raw attributes, since netem's `TCA_OPTIONS` is not
/// the nested list netlink-packet-route's `TcAttribute::Options` writes.
struct TcRequest {
    msg_type: u16,
    /// Beyond NLM_F_REQUEST | NLM_F_ACK.
    flags: u16,
    ifindex: u32,
    handle: u32,
    parent: u32,
    attrs: Vec<(u16, Vec<u8>)>,
}

#[derive(Debug)]
enum NlError {
    Io(io::Error),
    /// The kernel refused: its errno and extended-ack message.
    Nack {
        errno: i32,
        message: Option<String>,
    },
}

impl NlError {
    fn into_io(self) -> io::Error {
        match self {
            NlError::Io(e) => e,
            NlError::Nack { errno, message } => {
                let os = io::Error::from_raw_os_error(errno);
                match message {
                    Some(m) => io::Error::new(os.kind(), format!("{os}: {m}")),
                    None => os,
                }
            }
        }
    }
}

impl fmt::Display for NlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NlError::Io(e) => write!(f, "{e}"),
            NlError::Nack { errno, message } => {
                write!(f, "{}", io::Error::from_raw_os_error(*errno))?;
                match message {
                    Some(m) => write!(f, ": {m}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl From<io::Error> for NlError {
    fn from(e: io::Error) -> Self {
        NlError::Io(e)
    }
}

/// A reply message: its type and the bytes after `struct nlmsghdr`.
#[cfg_attr(not(test), allow(dead_code))]
struct Reply {
    msg_type: u16,
    body: Vec<u8>,
}

impl TcRequest {
    fn encode(&self, seq: u32) -> Vec<u8> {
        let mut msg = vec![0; NLMSG_HDRLEN];
        // struct tcmsg: family, pad, pad, ifindex, handle, parent, info.
        msg.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
        msg.extend_from_slice(&self.ifindex.to_ne_bytes());
        msg.extend_from_slice(&self.handle.to_ne_bytes());
        msg.extend_from_slice(&self.parent.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        debug_assert_eq!(msg.len(), NLMSG_HDRLEN + TCMSG_LEN);
        for (kind, value) in &self.attrs {
            push_attr(&mut msg, *kind, value);
        }
        let len = u32::try_from(msg.len()).expect("netlink message longer than 4 GiB");
        msg[0..4].copy_from_slice(&len.to_ne_bytes());
        msg[4..6].copy_from_slice(&self.msg_type.to_ne_bytes());
        msg[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | self.flags).to_ne_bytes());
        msg[8..12].copy_from_slice(&seq.to_ne_bytes());
        // nlmsg_pid 0: the kernel fills in our port.
        msg
    }

    /// Sends the request with NLM_F_ACK on a socket of the calling thread's namespace and
    /// returns the replies before the ACK (or the end of a dump).
    fn send(&self) -> Result<Vec<Reply>, NlError> {
        const SEQ: u32 = 1;
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        // Best effort: the kernel's reason in text, and errors without our echoed request.
        let _ = socket.set_ext_ack(true);
        let _ = socket.set_cap_ack(true);
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        socket.send(&self.encode(SEQ), 0)?;

        let mut replies = Vec::new();
        loop {
            let (data, _) = socket.recv_from_full()?;
            let mut rest = &data[..];
            while rest.len() >= NLMSG_HDRLEN {
                let len = u32_at(rest, 0) as usize;
                if len < NLMSG_HDRLEN || len > rest.len() {
                    return Err(NlError::Io(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("netlink message of length {len} in {} bytes", rest.len()),
                    )));
                }
                let msg_type = u16::from_ne_bytes([rest[4], rest[5]]);
                let flags = u16::from_ne_bytes([rest[6], rest[7]]);
                let seq = u32_at(rest, 8);
                let body = &rest[NLMSG_HDRLEN..len];
                rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
                if seq != SEQ {
                    continue;
                }
                match msg_type {
                    NLMSG_ERROR => {
                        let errno = body.get(0..4).map_or(0, |_| -(u32_at(body, 0) as i32));
                        if errno == 0 {
                            return Ok(replies);
                        }
                        let message = ext_ack_message(body, flags);
                        return Err(NlError::Nack { errno, message });
                    }
                    NLMSG_DONE => return Ok(replies),
                    _ => replies.push(Reply {
                        msg_type,
                        body: body.to_vec(),
                    }),
                }
            }
        }
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The NLMSGERR_ATTR_MSG string of an error reply's body (`struct nlmsgerr` + TLVs).
fn ext_ack_message(body: &[u8], flags: u16) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 || body.len() < 4 + NLMSG_HDRLEN {
        return None;
    }
    // struct nlmsgerr: the error, then the request's header, and the rest of the
    // request unless the reply is capped.
    let echoed = if flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        (u32_at(body, 4) as usize).next_multiple_of(4)
    };
    let mut tlvs = body.get(4 + echoed..)?;
    while tlvs.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([tlvs[0], tlvs[1]]));
        let kind = u16::from_ne_bytes([tlvs[2], tlvs[3]]);
        if len < 4 || len > tlvs.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &tlvs[4..len];
            let text = text.split(|&b| b == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(text).trim().to_owned());
        }
        tlvs = tlvs.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{privileged_or_skip, NetNs};
    use tcplab_netsim::path::{Jitter, QueueLimit, Reorder};

    fn pct(text: &str) -> Prob {
        let value: f64 = text.trim_end_matches('%').parse().unwrap();
        Prob::from_ppb((value * 1e7).round() as u32).unwrap()
    }

    fn ne32(v: u32) -> [u8; 4] {
        v.to_ne_bytes()
    }

    /// `struct tc_netem_qopt` as bytes.
    fn qopt(latency: u32, limit: u32, loss: u32, gap: u32, dup: u32, jitter: u32) -> Vec<u8> {
        u32s(&[latency, limit, loss, gap, dup, jitter])
    }

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    fn no_dirs() -> Vec<PathBuf> {
        vec![PathBuf::from("/nonexistent/tcplab-tc")]
    }

    #[test]
    fn netem_prob_scales_to_u32_max() {
        assert_eq!(netem_prob(Prob::ZERO), 0);
        assert_eq!(netem_prob(Prob::ONE), u32::MAX);
        // round(0.01 × 0xFFFFFFFF) = round(42949672.95)
        assert_eq!(netem_prob(pct("1%")), 42_949_673);
        // round(0.1 × 0xFFFFFFFF) = round(429496729.5), half up
        assert_eq!(netem_prob(pct("10%")), 429_496_730);
        assert_eq!(netem_prob(pct("50%")), 2_147_483_648);
    }

    #[test]
    fn netem_delay_10ms_loss_1pct_bytes() {
        let link = LinkSpec {
            delay_us: 10_000,
            loss: Loss::Random(pct("1%")),
            ..LinkSpec::default()
        };
        let opts = netem_options_in(&link, 20_000, 1500, &no_dirs()).unwrap();
        assert_eq!(opts.latency_ns, 10_000_000);
        assert_eq!(opts.loss, 42_949_673);
        assert_eq!(
            opts.limit,
            u32::MAX,
            "no rate, no bottleneck: nothing dropped for space"
        );
        let mut expected = qopt(10_000_000 / 64, u32::MAX, 42_949_673, 0, 0, 0);
        expected.extend(attr(TCA_NETEM_LATENCY64, &10_000_000u64.to_ne_bytes()));
        assert_eq!(opts.to_tca_options(), expected);
        // 24-byte struct + 12-byte attribute.
        assert_eq!(opts.to_tca_options().len(), 36);
    }

    #[test]
    fn netem_gemodel_bytes() {
        // tc: loss gemodel 1% 10% 70% 0.1%
        let link = LinkSpec {
            loss: Loss::GilbertElliott {
                p: pct("1%"),
                r: pct("10%"),
                loss_bad: pct("70%"),
                loss_good: pct("0.1%"),
            },
            ..LinkSpec::default()
        };
        let opts = netem_options_in(&link, 0, 1500, &no_dirs()).unwrap();
        let ge = opts.gemodel.unwrap();
        assert_eq!(ge.p, 42_949_673);
        assert_eq!(ge.r, 429_496_730);
        // 1-h = 70%: h = 0xFFFFFFFF − round(0.7 × 0xFFFFFFFF) = 4294967295 − 3006477107
        assert_eq!(ge.h, 1_288_490_188);
        // 1-k = 0.1%: round(4294967.295)
        assert_eq!(ge.k1, 4_294_967);
        assert_eq!(opts.loss, 0);

        let inner = attr(
            NETEM_LOSS_GE,
            &u32s(&[42_949_673, 429_496_730, 1_288_490_188, 4_294_967]),
        );
        let mut expected = qopt(0, u32::MAX, 0, 0, 0, 0);
        expected.extend(attr(TCA_NETEM_LOSS | NLA_F_NESTED, &inner));
        assert_eq!(opts.to_tca_options(), expected);
        // Nested header 4 + inner header 4 + 16.
        assert_eq!(expected.len(), 24 + 24);
    }

    #[test]
    fn netem_gemodel_defaults_lose_everything_when_bad() {
        // tc's defaults: 1-h = 100% → h = 0; 1-k = 0% → k1 = 0.
        let link = LinkSpec {
            loss: Loss::GilbertElliott {
                p: pct("1%"),
                r: pct("99%"),
                loss_bad: Prob::ONE,
                loss_good: Prob::ZERO,
            },
            ..LinkSpec::default()
        };
        let ge = netem_options_in(&link, 0, 1500, &no_dirs())
            .unwrap()
            .gemodel
            .unwrap();
        assert_eq!((ge.h, ge.k1), (0, 0));
    }

    #[test]
    fn netem_rate_100mbit_overhead_14_and_limit() {
        // rate 100mbit overhead 14, delay 10ms, queue 100p, mtu 1500.
        let link = LinkSpec {
            delay_us: 10_000,
            bottleneck: Bottleneck::Rate {
                bps: 100_000_000,
                overhead: 14,
            },
            queue: QueueLimit::Packets(100),
            ..LinkSpec::default()
        };
        let opts = netem_options_in(&link, 20_000, 1500, &no_dirs()).unwrap();
        assert_eq!(
            opts.rate,
            Some(NetemRate {
                bytes_per_s: 12_500_000,
                packet_overhead: 14,
                cell_size: 0,
                cell_overhead: 0
            })
        );
        // Delay line: 12.5e6 B/s × 10 ms / 1514 B = 82.56 → 83; + 1 in service + 100.
        assert_eq!(opts.limit, 184);

        let mut rate = Vec::new();
        rate.extend(ne32(12_500_000));
        rate.extend(14i32.to_ne_bytes());
        rate.extend(ne32(0));
        rate.extend(0i32.to_ne_bytes());
        let mut expected = qopt(156_250, 184, 0, 0, 0, 0);
        expected.extend(attr(TCA_NETEM_RATE, &rate));
        expected.extend(attr(TCA_NETEM_LATENCY64, &10_000_000u64.to_ne_bytes()));
        assert_eq!(opts.to_tca_options(), expected);
    }

    #[test]
    fn netem_rate_beyond_32_bits_uses_rate64() {
        let link = LinkSpec {
            bottleneck: Bottleneck::Rate {
                bps: 40_000_000_000,
                overhead: 0,
            },
            ..LinkSpec::default()
        };
        let opts = netem_options_in(&link, 0, 1500, &no_dirs()).unwrap();
        let bytes = opts.to_tca_options();
        let mut expected_tail = attr(TCA_NETEM_RATE64, &5_000_000_000u64.to_ne_bytes());
        expected_tail.extend(attr(TCA_NETEM_RATE, &u32s(&[u32::MAX, 0, 0, 0])));
        assert_eq!(&bytes[24..], &expected_tail[..]);
    }

    #[test]
    fn netem_limit_from_bytes_and_bdp() {
        let base = LinkSpec {
            delay_us: 10_000,
            bottleneck: Bottleneck::Rate {
                bps: 100_000_000,
                overhead: 0,
            },
            ..LinkSpec::default()
        };
        // Delay line at 1500 B: 12.5e6 × 0.01 / 1500 = 83.33 → 84, + 1 in service.
        let line = 85;
        let with = |queue| LinkSpec {
            queue,
            ..base.clone()
        };
        let limit = |link: LinkSpec| {
            netem_options_in(&link, 20_000, 1500, &no_dirs())
                .unwrap()
                .limit
        };
        assert_eq!(limit(with(QueueLimit::Packets(1000))), 1000 + line);
        // 64 KiB / 1500 = 43 full packets.
        assert_eq!(limit(with(QueueLimit::Bytes(65_536))), 43 + line);
        // 1 BDP at a 20 ms path RTT: 250 000 B / 1500 = 166.
        assert_eq!(limit(with(QueueLimit::Bdp(1.0))), 166 + line);
        assert_eq!(limit(with(QueueLimit::Packets(0))), line);
        // Jitter lengthens the delay line: 12 ms → 100 + 1.
        let mut jittered = with(QueueLimit::Packets(10));
        jittered.jitter = Some(Jitter {
            jitter_us: 2_000,
            dist: JitterDist::Uniform,
            reorder: false,
        });
        assert_eq!(limit(jittered), 10 + 101);
    }

    #[test]
    fn netem_reorder_duplicate_corrupt_bytes() {
        // tc: delay 10ms reorder 25% 50% duplicate 1% corrupt 0.1%
        let link = LinkSpec {
            delay_us: 10_000,
            reorder: Some(Reorder {
                prob: pct("25%"),
                correlation: pct("50%"),
                gap: 1,
            }),
            duplicate: pct("1%"),
            corrupt: pct("0.1%"),
            ..LinkSpec::default()
        };
        let opts = netem_options_in(&link, 20_000, 1500, &no_dirs()).unwrap();
        let quarter = 1_073_741_824; // round(0.25 × 0xFFFFFFFF) = round(1073741823.75)
        let half = 2_147_483_648;
        let mut expected = qopt(156_250, u32::MAX, 0, 1, 42_949_673, 0);
        expected.extend(attr(TCA_NETEM_REORDER, &u32s(&[quarter, half])));
        expected.extend(attr(TCA_NETEM_CORRUPT, &u32s(&[4_294_967, 0])));
        expected.extend(attr(TCA_NETEM_LATENCY64, &10_000_000u64.to_ne_bytes()));
        assert_eq!(opts.to_tca_options(), expected);

        let gapped = LinkSpec {
            reorder: Some(Reorder {
                gap: 5,
                ..link.reorder.unwrap()
            }),
            ..link.clone()
        };
        assert_eq!(
            netem_options_in(&gapped, 0, 1500, &no_dirs()).unwrap().gap,
            5
        );
    }

    #[test]
    fn a_path_s_settings_netem_cannot_emulate_are_named_at_once() {
        let refused = |spec: &str| {
            check_path(&spec.parse().unwrap())
                .map_err(|e| e.to_string())
                .err()
        };
        assert_eq!(
            refused("rtt 20ms rate 10mbit loss 1% txqueuelen 100 seed 7"),
            None
        );
        assert_eq!(
            refused("up.rate 10mbit aqm codel up.pace 9mbit down.trace x.trace"),
            Some(
                "netem backend cannot emulate up.pace, up.aqm codel, down.trace: use the tcplab emulator"
                    .into()
            )
        );
        assert_eq!(
            refused("rate 10mbit aqm pie pace cwnd"),
            Some("netem backend cannot emulate pace, aqm pie: use the tcplab emulator".into())
        );
        // Without a rate there is no queue, and its AQM is ignored by the spec too.
        assert_eq!(refused("rtt 20ms aqm codel"), None);
    }

    #[test]
    fn netem_refuses_what_it_cannot_do() {
        let trace = LinkSpec {
            bottleneck: Bottleneck::Trace {
                path: "x.trace".into(),
            },
            ..LinkSpec::default()
        };
        let err = netem_options_in(&trace, 0, 1500, &no_dirs()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "netem backend cannot emulate trace: use the tcplab emulator"
        );

        let rate = Bottleneck::Rate {
            bps: 10_000_000,
            overhead: 0,
        };
        let codel = LinkSpec {
            bottleneck: rate.clone(),
            aqm: Aqm::Codel {
                target_us: 5_000,
                interval_us: 100_000,
                ecn: false,
            },
            ..LinkSpec::default()
        };
        assert_eq!(
            netem_options_in(&codel, 0, 1500, &no_dirs())
                .unwrap_err()
                .to_string(),
            "netem backend cannot emulate aqm codel: use the tcplab emulator"
        );
        // Without a rate the spec ignores the AQM, and so do we.
        let idle_codel = LinkSpec {
            bottleneck: Bottleneck::Unlimited,
            ..codel
        };
        assert!(netem_options_in(&idle_codel, 0, 1500, &no_dirs()).is_ok());

        let reorder = LinkSpec {
            reorder: Some(Reorder {
                prob: pct("25%"),
                correlation: Prob::ZERO,
                gap: 1,
            }),
            ..LinkSpec::default()
        };
        assert!(matches!(
            netem_options_in(&reorder, 0, 1500, &no_dirs()),
            Err(NetemError::ReorderWithoutDelay)
        ));

        // Jitter that must not reorder: netem can only keep order behind a rate.
        let jitter = |reorder, bottleneck| LinkSpec {
            delay_us: 10_000,
            jitter: Some(Jitter {
                jitter_us: 1_000,
                dist: JitterDist::Uniform,
                reorder,
            }),
            bottleneck,
            ..LinkSpec::default()
        };
        assert!(matches!(
            netem_options_in(&jitter(false, Bottleneck::Unlimited), 0, 1500, &no_dirs()),
            Err(NetemError::JitterReorders)
        ));
        let ok =
            netem_options_in(&jitter(true, Bottleneck::Unlimited), 0, 1500, &no_dirs()).unwrap();
        assert_eq!((ok.jitter_ns, ok.delay_dist.is_none()), (1_000_000, true));
        let mut expected = qopt(156_250, u32::MAX, 0, 0, 0, 15_625);
        expected.extend(attr(TCA_NETEM_LATENCY64, &10_000_000u64.to_ne_bytes()));
        expected.extend(attr(TCA_NETEM_JITTER64, &1_000_000u64.to_ne_bytes()));
        assert_eq!(ok.to_tca_options(), expected);
        assert!(netem_options_in(&jitter(false, rate), 0, 1500, &no_dirs()).is_ok());
    }

    #[test]
    fn netem_dist_table_missing_names_the_file() {
        let link = LinkSpec {
            delay_us: 10_000,
            jitter: Some(Jitter {
                jitter_us: 1_000,
                dist: JitterDist::Normal,
                reorder: true,
            }),
            ..LinkSpec::default()
        };
        let err = netem_options_in(&link, 0, 1500, &no_dirs()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(
                "netem backend: jitter dist normal needs netem's table /nonexistent/tcplab-tc/normal.dist: not readable ("
            ),
            "{msg}"
        );
        assert!(msg.contains("TC_LIB_DIR"), "{msg}");
    }

    #[test]
    fn netem_dist_table_is_parsed_and_sent() {
        let dir = std::env::temp_dir().join(format!("tcplab-netem-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("pareto.dist"),
            "# a comment\n -32768 -2 0x10\n\n 7 32767\n",
        )
        .unwrap();
        fs::write(dir.join("normal.dist"), "1 2 70000\n").unwrap();
        let link = |dist| LinkSpec {
            delay_us: 10_000,
            jitter: Some(Jitter {
                jitter_us: 1_000,
                dist,
                reorder: true,
            }),
            ..LinkSpec::default()
        };
        let dirs = vec![PathBuf::from("/nonexistent/tcplab-tc"), dir.clone()];
        let pareto = netem_options_in(&link(JitterDist::Pareto), 0, 1500, &dirs);
        let normal = netem_options_in(&link(JitterDist::Normal), 0, 1500, &dirs);
        fs::remove_dir_all(&dir).unwrap();

        let opts = pareto.unwrap();
        let table = opts.delay_dist.as_ref().unwrap();
        assert_eq!(table.values(), [-32768, -2, 16, 7, 32767]);
        assert_eq!(table.path(), dir.join("pareto.dist"));
        let values: Vec<u8> = [-32768i16, -2, 16, 7, 32767]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let bytes = opts.to_tca_options();
        // Last attribute: 4 + 10 bytes, padded to 16.
        assert_eq!(
            &bytes[bytes.len() - 16..],
            &attr(TCA_NETEM_DELAY_DIST, &values)[..]
        );

        let msg = normal.unwrap_err().to_string();
        assert!(
            msg.contains("normal.dist: \"70000\" is not a 16-bit integer"),
            "{msg}"
        );
    }

    #[test]
    fn netem_dist_tables_of_iproute2_parse_if_installed() {
        for dir in tc_lib_dirs() {
            for name in ["normal", "pareto", "paretonormal"] {
                let path = dir.join(format!("{name}.dist"));
                if path.exists() {
                    let table = DistTable::load(name, &path).unwrap();
                    assert_eq!(table.values().len(), 4096, "{}", path.display());
                }
            }
        }
    }

    #[test]
    fn netem_seed_is_sent() {
        let opts = NetemOptions {
            seed: Some(0x0102_0304_0506_0708),
            ..NetemOptions::default()
        };
        let mut expected = qopt(0, 1000, 0, 0, 0, 0);
        expected.extend(attr(
            TCA_NETEM_PRNG_SEED,
            &0x0102_0304_0506_0708u64.to_ne_bytes(),
        ));
        assert_eq!(opts.to_tca_options(), expected);
    }

    #[test]
    fn netem_request_encoding() {
        let request = TcRequest {
            msg_type: RTM_NEWQDISC,
            flags: NLM_F_CREATE | NLM_F_REPLACE,
            ifindex: 7,
            handle: NETEM_HANDLE,
            parent: TC_H_ROOT,
            attrs: vec![(TCA_KIND, b"netem\0".to_vec())],
        };
        let bytes = request.encode(9);
        let mut expected = Vec::new();
        expected.extend(ne32(16 + 20 + 12));
        expected.extend(RTM_NEWQDISC.to_ne_bytes());
        expected.extend(0x0505u16.to_ne_bytes()); // REQUEST | ACK | REPLACE | CREATE
        expected.extend(ne32(9));
        expected.extend(ne32(0));
        expected.extend([0, 0, 0, 0]);
        expected.extend(ne32(7));
        expected.extend(ne32(0x0001_0000));
        expected.extend(ne32(0xFFFF_FFFF));
        expected.extend(ne32(0));
        expected.extend(attr(TCA_KIND, b"netem\0"));
        assert_eq!(bytes, expected);
    }

    #[test]
    fn netem_ext_ack_message_is_found() {
        // nlmsgerr: error, capped request header, then NLMSGERR_ATTR_MSG.
        let mut body = Vec::new();
        body.extend((-22i32).to_ne_bytes());
        body.extend([0u8; 16]);
        body.extend(attr(
            NLMSGERR_ATTR_MSG,
            b"Specified qdisc kind is unknown\0",
        ));
        assert_eq!(
            ext_ack_message(&body, NLM_F_CAPPED | NLM_F_ACK_TLVS).as_deref(),
            Some("Specified qdisc kind is unknown")
        );
        assert_eq!(ext_ack_message(&body, NLM_F_CAPPED), None);
    }

    /// Root qdiscs of link `ifindex` in the calling thread's namespace: (handle, kind).
    fn root_qdiscs(ifindex: u32) -> Vec<(u32, String)> {
        let replies = TcRequest {
            msg_type: RTM_GETQDISC,
            flags: NLM_F_DUMP,
            ifindex: 0,
            handle: 0,
            parent: 0,
            attrs: Vec::new(),
        }
        .send()
        .unwrap();
        let mut found = Vec::new();
        for reply in replies {
            let body = &reply.body;
            assert_eq!(reply.msg_type, RTM_NEWQDISC, "a dump of qdiscs");
            if body.len() < TCMSG_LEN || u32_at(body, 4) != ifindex || u32_at(body, 12) != TC_H_ROOT
            {
                continue;
            }
            let mut attrs = &body[TCMSG_LEN..];
            while attrs.len() >= 4 {
                let len = usize::from(u16::from_ne_bytes([attrs[0], attrs[1]]));
                let kind = u16::from_ne_bytes([attrs[2], attrs[3]]);
                if kind == TCA_KIND {
                    let name = attrs[4..len].split(|&b| b == 0).next().unwrap();
                    found.push((u32_at(body, 8), String::from_utf8_lossy(name).into_owned()));
                }
                attrs = attrs.get(len.next_multiple_of(4)..).unwrap_or_default();
            }
        }
        found
    }

    /// `tc qdisc replace dev IF root handle 1: tbf rate 1mbit burst 10000 limit 10000`,
    /// through the same request path as netem.
    fn apply_tbf(ifname: &str) -> Result<(), NlError> {
        const TCA_TBF_PARMS: u16 = 1;
        const TCA_TBF_BURST: u16 = 6;
        const TC_LINKLAYER_ETHERNET: u8 = 1;
        // struct tc_ratespec: cell_log, linklayer, overhead, cell_align, mpu, rate.
        let ratespec = |rate: u32, linklayer: u8| {
            let mut r = vec![0, linklayer, 0, 0, 0, 0, 0, 0];
            r.extend(rate.to_ne_bytes());
            r
        };
        let rate = 125_000; // 1 mbit in bytes/s
                            // struct tc_tbf_qopt: rate, peakrate, limit, buffer (ticks), mtu (ticks).
        let mut parms = ratespec(rate, TC_LINKLAYER_ETHERNET);
        parms.extend(ratespec(0, 0));
        parms.extend(10_000u32.to_ne_bytes());
        // 10 000 B at 125 000 B/s = 80 ms, in 64 ns ticks.
        parms.extend((80_000_000u32 >> PSCHED_SHIFT).to_ne_bytes());
        parms.extend(0u32.to_ne_bytes());
        let mut options = attr(TCA_TBF_PARMS, &parms);
        options.extend(attr(TCA_TBF_BURST, &10_000u32.to_ne_bytes()));
        new_root_qdisc(if_index(ifname)?, NETEM_HANDLE, "tbf", &options)
    }

    #[test]
    fn netem_missing_is_reported() {
        if !privileged_or_skip("netem_missing_is_reported") {
            return;
        }
        // The probe installs netem on the default root qdisc of a fresh lo.
        let probe = probe_netem();
        let available = netem_available();
        assert_eq!(available, probe.is_ok(), "{probe:?}");
        if let Err(err) = &probe {
            assert!(matches!(err, NetemError::Unavailable), "{err:?}");
        }
        let ns = NetNs::create(&format!("tl{}-netem", std::process::id())).unwrap();
        let result = ns.run(|| {
            let lo = if_index("lo").unwrap();
            // The request path itself works: tbf exists on every kernel we target.
            apply_tbf("lo").unwrap_or_else(|e| panic!("installing tbf on lo: {e}"));
            assert_eq!(root_qdiscs(lo), [(NETEM_HANDLE, "tbf".to_owned())]);

            let link = LinkSpec {
                delay_us: 10_000,
                loss: Loss::Random(pct("1%")),
                ..LinkSpec::default()
            };
            let opts = netem_options_in(&link, 20_000, 1500, &no_dirs()).unwrap();
            let applied = apply_netem("lo", &opts);
            (applied, root_qdiscs(lo))
        });
        ns.delete().unwrap();
        let (applied, qdiscs) = result.unwrap();

        assert_eq!(
            available,
            applied.is_ok(),
            "probe and apply disagree: {applied:?}"
        );
        if available {
            // A kernel with netem: it replaced tbf, keeping handle 1:.
            assert_eq!(qdiscs, [(NETEM_HANDLE, "netem".to_owned())]);
        } else {
            let err = applied.unwrap_err();
            assert!(matches!(err, NetemError::Unavailable), "{err:?}");
            assert_eq!(err.to_string(), NETEM_UNAVAILABLE);
            assert!(!err.to_string().contains('\n'));
            // Nothing changed.
            assert_eq!(qdiscs, [(NETEM_HANDLE, "tbf".to_owned())]);
        }
    }

    #[test]
    fn netem_apply_to_missing_link_names_it() {
        if !privileged_or_skip("netem_apply_to_missing_link_names_it") {
            return;
        }
        let err = apply_netem("nope0", &NetemOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("installing netem on nope0: no link nope0"),
            "{msg}"
        );
    }
}
