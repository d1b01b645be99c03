//! Drives a link in virtual time, jumping to the next arrival or deadline, as
//! quinn-proto's tests do.
#![allow(dead_code)]

use tcplab_netsim::link::{Delivered, Dropped, Link, LinkTraces, PacketMeta, PushOutcome};
use tcplab_netsim::path::{Direction, PathSpec};

/// Marks the id of a duplicate copy.
pub const DUP: u64 = 1 << 63;

pub const MS: u64 = 1_000_000;
pub const S: u64 = 1_000_000_000;

#[derive(Debug, Default)]
pub struct Sim {
    /// Packet ids are arrival indices (`| DUP` for copies).
    pub delivered: Vec<Delivered<u64>>,
    pub dropped: Vec<Dropped<u64>>,
    pub pushed: u64,
}

/// Pushes `arrivals` (time ns, wire bytes or a whole [`PacketMeta`]; sorted) and runs
/// until `until` or until the link is empty; `check` sees the link after every step.
pub fn simulate_with<M: Into<PacketMeta> + Copy>(
    link: &mut Link<u64>,
    arrivals: impl IntoIterator<Item = (u64, M)>,
    until: u64,
    mut check: impl FnMut(&Link<u64>, u64),
) -> Sim {
    let mut sim = Sim::default();
    let mut arrivals = arrivals.into_iter().peekable();
    loop {
        let now = match (arrivals.peek().map(|a| a.0), link.next_deadline()) {
            (None, None) => break,
            (Some(a), Some(d)) => a.min(d),
            (a, d) => a.or(d).expect("one is some"),
        };
        if now > until {
            break;
        }
        while let Some(d) = link.pop(now) {
            sim.delivered.push(d);
        }
        while let Some(d) = link.pop_dropped() {
            sim.dropped.push(d);
        }
        while let Some(&(t, meta)) = arrivals.peek() {
            if t > now {
                break;
            }
            arrivals.next();
            let id = sim.pushed;
            sim.pushed += 1;
            let meta = meta.into();
            match link.push(now, id, meta) {
                PushOutcome::Accepted => {}
                PushOutcome::Duplicate => {
                    if let PushOutcome::Dropped(d) = link.push_duplicate(now, id | DUP, meta) {
                        sim.dropped.push(d);
                    }
                }
                PushOutcome::Dropped(d) => sim.dropped.push(d),
            }
            while let Some(d) = link.pop_dropped() {
                sim.dropped.push(d);
            }
        }
        check(link, now);
    }
    sim
}

pub fn simulate<M: Into<PacketMeta> + Copy>(
    link: &mut Link<u64>,
    arrivals: impl IntoIterator<Item = (u64, M)>,
    until: u64,
) -> Sim {
    simulate_with(link, arrivals, until, |_, _| {})
}

/// The up link of a spec, seeded by the spec's `seed` (1 when it pins none, so that
/// every statistical test sees fixed draws).
pub fn link(spec: &str) -> Link<u64> {
    let path: PathSpec = spec.parse().unwrap_or_else(|e| panic!("{e}"));
    let seed = path.seed.unwrap_or(1);
    Link::new(
        &path.timeline(Direction::Up),
        path.rtt_us(),
        path.mtu,
        seed,
        LinkTraces::default(),
    )
    .expect("link")
}

/// `n` packets of `len` bytes, one every `gap` ns from 0.
pub fn evenly(n: u64, gap: u64, len: u32) -> impl Iterator<Item = (u64, u32)> {
    (0..n).map(move |i| (i * gap, len))
}

/// The 99.9 % two-sided interval of a binomial count, by the normal approximation.
pub fn binomial_interval(n: u64, p: f64) -> (f64, f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (mean - 3.29 * sd, mean + 3.29 * sd)
}

pub fn assert_binomial(count: u64, n: u64, p: f64, what: &str) {
    let (lo, hi) = binomial_interval(n, p);
    assert!(
        (lo..=hi).contains(&(count as f64)),
        "{what}: {count} of {n}, expected {lo:.0}..={hi:.0} (p = {p})"
    );
}
