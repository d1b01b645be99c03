//! A lab's specs together: one or more clients, each behind its own access link, sharing
//! one bottleneck to the server (a lab of one client without an access link is the
//! plain path). What needs more than one spec lives here: a client's end-to-end base
//! RTT, the round trip a queue given in BDP is sized from, the checks of the specs
//! together, and the seed of each link's randomness.

use crate::path::{Bottleneck, Direction, Limit, Pace, PathSpec, QueueLimit};
use tcplab_record::units::{format_duration_us, format_rate, format_size, parse_duration};
use tcplab_record::BdpSizing;

/// One link of a lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRole {
    /// The bottleneck every client shares.
    Bottleneck,
    /// Client k's access link, k from 0.
    Access(usize),
}

/// What makes a lab's specs unusable together; one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DumbbellError {
    #[error("client{client}'s access link sets seed: the lab's one seed, given in the path, draws every link")]
    SeedOnAccess { client: usize },
    #[error("client{client}'s access link sets txqueuelen: it is the hosts' interface queue, set in the path (up: the clients', down: the server's)")]
    TxQueueLenOnAccess { client: usize },
    #[error("{link}: a queue in bdp is rate × round trip, and no link on the way has a delay (rtt 0): give the path an rtt, or the queue in packets (100p) or bytes (256KiB)")]
    BdpWithoutRtt { link: String },
}

/// A lab's bottleneck and its clients' access links.
#[derive(Clone, Copy, Debug)]
pub struct Dumbbell<'a> {
    /// The bottleneck, shared by every client.
    pub path: &'a PathSpec,
    /// One per client, an ideal spec for a client without one; none at all reads as one
    /// client without an access link.
    pub access: &'a [PathSpec],
}

impl<'a> Dumbbell<'a> {
    pub fn new(path: &'a PathSpec, access: &'a [PathSpec]) -> Self {
        Dumbbell { path, access }
    }

    fn clients(&self) -> usize {
        self.access.len().max(1)
    }

    pub fn spec(&self, link: LinkRole) -> &'a PathSpec {
        match link {
            LinkRole::Bottleneck => self.path,
            LinkRole::Access(k) => &self.access[k],
        }
    }

    /// Client k's base round trip to the server: its access link's delays and the
    /// bottleneck's, without jitter or queueing.
    pub fn client_rtt_us(&self, client: usize) -> u64 {
        let access = self.access.get(client).map_or(0, PathSpec::rtt_us);
        self.path.rtt_us().saturating_add(access)
    }

    /// The client (from 0) with the largest end-to-end base RTT, the first of equals. A
    /// bottleneck queue of one BDP sized for it keeps the link busy for every client's
    /// flows (a loss-based flow that halves its window needs rate × its own RTT queued),
    /// the classic rule for a router's buffer, which takes the longest round trip.
    pub fn sizing_client(&self) -> usize {
        (0..self.clients())
            .rev()
            .max_by_key(|&k| self.client_rtt_us(k))
            .unwrap_or(0)
    }

    /// The time a packet of `bytes` takes to be serialized on client k's way in
    /// direction `dir`, µs: at each fixed rate on it (a gap pacer's, the bottleneck's,
    /// the access link's), with each link's per-packet overhead. A trace's or a
    /// window-following pacer's time is not known beforehand and counts as none.
    pub fn serialization_us(&self, client: usize, dir: Direction, bytes: u64) -> f64 {
        let links = std::iter::once(self.path).chain(self.access.get(client));
        links
            .map(|spec| {
                let link = spec.link(dir);
                let at = |bps: u64, overhead: u32| {
                    (bytes + u64::from(overhead)) as f64 * 8e6 / bps as f64
                };
                let pacer = match link.pace {
                    Some(Pace::Rate(bps)) => at(bps, 0),
                    _ => 0.0,
                };
                let line = match link.bottleneck {
                    Bottleneck::Rate { bps, overhead } => at(bps, overhead),
                    Bottleneck::Unlimited | Bottleneck::Trace { .. } => 0.0,
                };
                pacer + line
            })
            .sum()
    }

    /// What the lab promises of its round trips, in one line: the emulator holds each
    /// packet for the delays of its links and takes nothing off, so no round trip is
    /// shorter than its client's base RTT (less what jitter draws below the delays);
    /// the lab's own time per packet comes on top.
    pub fn floor_line(&self) -> String {
        let rtts: Vec<u64> = (0..self.clients()).map(|k| self.client_rtt_us(k)).collect();
        if rtts.iter().all(|&r| r == 0) {
            return "no delay: a round trip takes the lab's own time (the kernels', the emulator's)".into();
        }
        let jitter = std::iter::once(self.path)
            .chain(self.access)
            .any(|s| s.up.jitter.is_some() || s.down.jitter.is_some());
        let less_jitter = if jitter {
            " less what the jitter draws below the delays"
        } else {
            ""
        };
        let least = if rtts.iter().all(|&r| r == rtts[0]) {
            format!("the path's {}", at_most(rtts[0]))
        } else {
            let each: Vec<String> = rtts
                .iter()
                .enumerate()
                .map(|(k, &r)| format!("client{} {}", k + 1, at_most(r)))
                .collect();
            format!("its client's base RTT ({})", each.join(", "))
        };
        format!("every round trip takes at least {least}{less_jitter}: the lab holds each packet for its delays and adds its own time (the kernels', the emulator's), taking nothing off")
    }

    /// The round trip a queue in BDP on `link` is reckoned over: the bottleneck's, the
    /// sizing client's end-to-end RTT; an access link's, its own client's.
    pub fn bdp_rtt_us(&self, link: LinkRole) -> u64 {
        match link {
            LinkRole::Bottleneck => self.client_rtt_us(self.sizing_client()),
            LinkRole::Access(k) => self.client_rtt_us(k),
        }
    }

    /// The queue limit of one link in one direction, a BDP multiple resolved over
    /// [`Self::bdp_rtt_us`]; `None` for a BDP multiple without a fixed rate.
    pub fn queue_limit(&self, link: LinkRole, dir: Direction) -> Option<Limit> {
        self.spec(link).link(dir).queue_limit(self.bdp_rtt_us(link))
    }

    /// Its links: the bottleneck, then each client's access link.
    pub fn links(&self) -> impl Iterator<Item = LinkRole> {
        std::iter::once(LinkRole::Bottleneck).chain((0..self.access.len()).map(LinkRole::Access))
    }

    /// Checks what only the specs together decide: that no access link sets its own
    /// seed, and that a queue in BDP has a round trip to be sized from.
    pub fn check(&self) -> Result<(), DumbbellError> {
        if let Some(k) = self.access.iter().position(|a| a.seed.is_some()) {
            return Err(DumbbellError::SeedOnAccess { client: k + 1 });
        }
        if let Some(k) = self
            .access
            .iter()
            .position(|a| a.up.txqueuelen.is_some() || a.down.txqueuelen.is_some())
        {
            return Err(DumbbellError::TxQueueLenOnAccess { client: k + 1 });
        }
        for link in self.links() {
            for dir in [Direction::Up, Direction::Down] {
                let queue = self.spec(link).link(dir).queue;
                if matches!(queue, QueueLimit::Bdp(_)) && self.bdp_rtt_us(link) == 0 {
                    let key = format!("{}.queue {queue}", dir.name());
                    return Err(DumbbellError::BdpWithoutRtt {
                        link: match link {
                            LinkRole::Bottleneck => key,
                            LinkRole::Access(k) => format!("client{}'s access link, {key}", k + 1),
                        },
                    });
                }
            }
        }
        Ok(())
    }

    /// How the bottleneck's queues in BDP are sized, to record with a run; `None` when
    /// neither direction's is in BDP.
    pub fn bdp_sizing(&self) -> Option<BdpSizing> {
        let bytes = |dir: Direction| match (
            self.path.link(dir).queue,
            self.queue_limit(LinkRole::Bottleneck, dir),
        ) {
            (QueueLimit::Bdp(_), Some(Limit::Bytes(b))) => Some(b),
            _ => None,
        };
        let (up_bytes, down_bytes) = (bytes(Direction::Up), bytes(Direction::Down));
        (up_bytes.is_some() || down_bytes.is_some()).then(|| BdpSizing {
            rtt_us: self.bdp_rtt_us(LinkRole::Bottleneck),
            client: self.sizing_client() as u32 + 1,
            up_bytes,
            down_bytes,
        })
    }

    /// The bottleneck's queues in BDP as sized, one line per distinct one:
    /// `queue 1bdp = 244 KiB (50.0 Mbit/s × 40.0 ms, client2's end-to-end RTT)`.
    pub fn bdp_lines(&self) -> Vec<String> {
        let Some(sizing) = self.bdp_sizing() else {
            return Vec::new();
        };
        let whose = if self.access.iter().all(|a| a.rtt_us() == 0) {
            "the path's RTT".to_string()
        } else {
            format!("client{}'s end-to-end RTT", sizing.client)
        };
        // (queue, rate, text) of a direction whose queue is in BDP, hence has a rate.
        let line = |dir: Direction, bytes: Option<u64>| {
            let link = self.path.link(dir);
            let Bottleneck::Rate { bps, .. } = link.bottleneck else {
                return None;
            };
            let text = format!(
                "queue {} = {} ({} × {}, {whose})",
                link.queue,
                format_size(bytes?),
                format_rate(bps as f64),
                format_duration_us(sizing.rtt_us)
            );
            Some((link.queue, bps, text))
        };
        match (
            line(Direction::Up, sizing.up_bytes),
            line(Direction::Down, sizing.down_bytes),
        ) {
            (Some(u), Some(d)) if (u.0, u.1) == (d.0, d.1) => vec![u.2],
            (u, d) => [("up.", u), ("down.", d)]
                .into_iter()
                .filter_map(|(prefix, l)| l.map(|l| format!("{prefix}{}", l.2)))
                .collect(),
        }
    }
}

impl Dumbbell<'_> {
    /// The same lab as a topology file (docs/topologies.md): hosts `server` and
    /// `client` (`client1` … with several), a router `r`, the link `bottleneck` from r to
    /// the server (its up way toward the server, as the path's) and each client's
    /// access link (`access`, `access1` …) from the client to r, its spec or an ideal
    /// one. So the topology's lab carries every packet as this one's does: a queue given
    /// in BDP is the bytes this lab sizes it to, the clients' interface queue
    /// (`up.txqueuelen`) is set on their access links, where a topology takes a host's,
    /// every link has the path's MTU, and the seed is the file's, whose link k draws
    /// as [`link_seed`] draws the dumbbell's. A checked dumbbell ([`Dumbbell::check`]).
    /// The emulator builds every dumbbell's lab from it.
    pub fn topology_file(&self) -> Result<String, DumbbellError> {
        let several = self.access.len() > 1;
        let numbered = |name: &str, k: usize| match several {
            true => format!("{name}{}", k + 1),
            false => name.to_owned(),
        };
        let mut text = String::from(
            "# A dumbbell as a topology (`tcplab lab topology`): its clients reach the server\n\
             # through router r, each over its access link, all over the bottleneck.\n",
        );
        if let Some(seed) = self.path.seed {
            text += &format!("seed = {seed}\n");
        }
        text += "\n[[host]]\nname = \"server\"\n";
        for k in 0..self.clients() {
            text += &format!("[[host]]\nname = \"{}\"\n", numbered("client", k));
        }
        text += "[[router]]\nname = \"r\"\n";
        let ideal = PathSpec::default();
        let links = self.links().map(|role| match role {
            LinkRole::Bottleneck => (
                "bottleneck".to_owned(),
                ["r".to_owned(), "server".into()],
                role,
            ),
            LinkRole::Access(k) => (
                numbered("access", k),
                [numbered("client", k), "r".into()],
                role,
            ),
        });
        let clients_links: Vec<_> = match self.access.is_empty() {
            // One client without an access link: an ideal one.
            true => vec![("access".to_owned(), ["client".to_owned(), "r".into()], None)],
            false => Vec::new(),
        };
        for (name, [a, b], role) in links.map(|(n, e, r)| (n, e, Some(r))).chain(clients_links) {
            let mut spec = match role {
                Some(role) => self.spec(role).clone(),
                None => ideal.clone(),
            };
            for dir in [Direction::Up, Direction::Down] {
                let link = match dir {
                    Direction::Up => &mut spec.up,
                    Direction::Down => &mut spec.down,
                };
                if let (QueueLimit::Bdp(_), Some(role)) = (link.queue, role) {
                    link.queue = match self.queue_limit(role, dir) {
                        Some(Limit::Bytes(b)) => QueueLimit::Bytes(b),
                        Some(Limit::Packets(n)) => QueueLimit::Packets(n),
                        None => link.queue,
                    };
                }
            }
            spec.seed = None;
            spec.mtu = self.path.mtu;
            (spec.up.txqueuelen, spec.down.txqueuelen) = match role {
                Some(LinkRole::Bottleneck) => (None, self.path.down.txqueuelen),
                _ => (self.path.up.txqueuelen, None),
            };
            text += &format!(
                "\n[[link]]\nname = \"{name}\"\nbetween = [\"{a}\", \"{b}\"]\npath = \"{spec}\"\n"
            );
        }
        Ok(text)
    }
}

/// `us` as printed, never more than it: three significant figures where they round down
/// (a floor rounded up would promise too much), whole µs otherwise.
fn at_most(us: u64) -> String {
    let text = format_duration_us(us);
    match parse_duration(&text.replace(' ', "")) {
        Ok(printed) if printed <= us => text,
        _ => format!("{us} µs"),
    }
}

/// Splits one seed into independent ones: the k-th seed derived from `seed`. Distinct
/// k give distinct seeds (splitmix64 is a bijection), each a well-mixed start for the
/// links' ChaCha8 generators.
pub fn derive_seed(seed: u64, k: u64) -> u64 {
    splitmix64(splitmix64(seed).wrapping_add(k))
}

/// The seed of one link's randomness in one direction, from the lab's seed: every link
/// and direction of a lab draws its own stream.
pub fn link_seed(lab_seed: u64, link: LinkRole, dir: Direction) -> u64 {
    let index = match link {
        LinkRole::Bottleneck => 0,
        LinkRole::Access(k) => 1 + k as u64,
    };
    derive_seed(lab_seed, 2 * index + dir.index() as u64)
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> PathSpec {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_dumbbell_is_a_topology_that_carries_each_client_as_it_does() {
        let path = spec("rtt 20ms rate 50mbit queue 1bdp up.txqueuelen 50 pace 40mbit seed 7");
        let access = [spec("rtt 10ms rate 20mbit queue 2bdp"), spec("rtt 40ms")];
        let d = Dumbbell::new(&path, &access);
        let text = d.topology_file().unwrap();
        let t: crate::topology::Topology = text.parse().unwrap_or_else(|e| panic!("{text}\n{e}"));
        assert_eq!(t.seed, Some(7));
        let names: Vec<&str> = t.hosts().map(|h| t.nodes[h].name.as_str()).collect();
        assert_eq!(names, ["server", "client1", "client2"]);
        let server = t.node("server").unwrap();
        for k in 0..2 {
            let client = t.node(&format!("client{}", k + 1)).unwrap();
            // Each client's base round trip to the server is the dumbbell's, over its
            // access link then the bottleneck, up toward the server.
            assert_eq!(t.rtt_us(client, server), d.client_rtt_us(k));
            let way: Vec<(&str, Direction)> = t
                .route(client, server)
                .iter()
                .map(|h| (t.links[h.link].name.as_str(), h.dir))
                .collect();
            let access = format!("access{}", k + 1);
            assert_eq!(
                way,
                [
                    (access.as_str(), Direction::Up),
                    ("bottleneck", Direction::Up)
                ]
            );
        }
        let link = |name: &str| &t.links.iter().find(|l| l.name == name).unwrap().path;
        // Queues in BDP are the bytes the dumbbell sizes: the bottleneck over client2's
        // 60 ms (50 Mbit/s × 60 ms), client1's access link over its own 30 ms, twice.
        let bytes = |role, dir| match d.queue_limit(role, dir) {
            Some(Limit::Bytes(b)) => QueueLimit::Bytes(b),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            bytes(LinkRole::Bottleneck, Direction::Up),
            QueueLimit::Bytes(375_000)
        );
        assert_eq!(link("bottleneck").up.queue, QueueLimit::Bytes(375_000));
        assert_eq!(link("bottleneck").down.queue, QueueLimit::Bytes(375_000));
        assert_eq!(
            link("access1").up.queue,
            bytes(LinkRole::Access(0), Direction::Up)
        );
        assert_eq!(link("access1").up.queue, QueueLimit::Bytes(150_000));
        // The gap pacer before the bottleneck, both ways; the clients' interface queue
        // on their access links (a topology's host takes its first link's).
        assert_eq!(link("bottleneck").up.pace, Some(Pace::Rate(40_000_000)));
        assert_eq!(link("bottleneck").up.txqueuelen, None);
        assert_eq!(
            (link("access1").up.txqueuelen, link("access2").up.txqueuelen),
            (Some(50), Some(50))
        );
        assert_eq!(link("access2").to_string(), "rtt 40ms up.txqueuelen 50");
    }

    #[test]
    fn one_client_reaches_r_over_an_ideal_link_and_a_window_pacer_stays() {
        let path = spec("rtt 20ms rate 10mbit");
        let d = Dumbbell::new(&path, &[]);
        let t: crate::topology::Topology = d.topology_file().unwrap().parse().unwrap();
        let names: Vec<&str> = t.links.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["bottleneck", "access"]);
        assert_eq!(t.links[1].path, PathSpec::default());
        let (client, server) = (t.node("client").unwrap(), t.node("server").unwrap());
        assert_eq!(t.rtt_us(client, server), 20_000);
        // Every client's senders up cross the bottleneck's pacer, as a dumbbell's.
        let paced = spec("rtt 20ms rate 10mbit up.pace cwnd");
        let t: crate::topology::Topology = Dumbbell::new(&paced, &[])
            .topology_file()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            t.links[0].path.up.pace,
            Some(Pace::Window(crate::path::PaceRtt::Smoothed))
        );
    }

    #[test]
    fn the_readme_dumbbell_sizes_its_queue_for_the_longest_client() {
        let path = spec("rate 50mbit queue 1bdp");
        let access = [spec("rtt 10ms"), spec("rtt 40ms")];
        let d = Dumbbell::new(&path, &access);
        assert_eq!((d.client_rtt_us(0), d.client_rtt_us(1)), (10_000, 40_000));
        assert_eq!(d.sizing_client(), 1);
        // 50 Mbit/s × 40 ms / 8 = 250 000 bytes, both directions.
        let bdp = Some(Limit::Bytes(250_000));
        assert_eq!(d.queue_limit(LinkRole::Bottleneck, Direction::Up), bdp);
        assert_eq!(d.queue_limit(LinkRole::Bottleneck, Direction::Down), bdp);
        assert_eq!(
            d.bdp_sizing(),
            Some(BdpSizing {
                rtt_us: 40_000,
                client: 2,
                up_bytes: Some(250_000),
                down_bytes: Some(250_000),
            })
        );
        assert_eq!(
            d.bdp_lines(),
            ["queue 1bdp = 244 KiB (50.0 Mbit/s × 40.0 ms, client2's end-to-end RTT)"]
        );
        assert_eq!(d.check(), Ok(()));
    }

    #[test]
    fn the_end_to_end_rtt_adds_the_bottleneck_and_each_direction() {
        let path = spec("rtt 20ms down.rate 10mbit down.queue 0.5bdp up.queue 30p");
        let access = [spec("up.delay 3ms down.delay 2ms"), PathSpec::default()];
        let d = Dumbbell::new(&path, &access);
        assert_eq!(d.client_rtt_us(0), 25_000);
        assert_eq!(d.client_rtt_us(1), 20_000);
        // 0.5 × 10 Mbit/s × 25 ms / 8 = 15 625 bytes; up stays in packets.
        assert_eq!(
            d.queue_limit(LinkRole::Bottleneck, Direction::Down),
            Some(Limit::Bytes(15_625))
        );
        assert_eq!(
            d.queue_limit(LinkRole::Bottleneck, Direction::Up),
            Some(Limit::Packets(30))
        );
        assert_eq!(
            d.bdp_lines(),
            ["down.queue 0.5bdp = 15.3 KiB (10.0 Mbit/s × 25.0 ms, client1's end-to-end RTT)"]
        );
    }

    #[test]
    fn equal_clients_size_for_the_first_and_a_plain_path_says_so() {
        let path = spec("rtt 20ms rate 100mbit queue 1bdp");
        let d = Dumbbell::new(&path, &[]);
        assert_eq!(
            (d.sizing_client(), d.bdp_rtt_us(LinkRole::Bottleneck)),
            (0, 20_000)
        );
        assert_eq!(
            d.bdp_lines(),
            ["queue 1bdp = 244 KiB (100 Mbit/s × 20.0 ms, the path's RTT)"]
        );
        let same = [spec("rtt 5ms"), spec("rtt 5ms")];
        assert_eq!(Dumbbell::new(&path, &same).sizing_client(), 0);
        assert_eq!(Dumbbell::new(&spec("rtt 20ms"), &same).bdp_sizing(), None);
    }

    #[test]
    fn the_floor_is_each_clients_base_rtt_and_jitter_is_named() {
        let own = ": the lab holds each packet for its delays and adds its own time (the kernels', the emulator's), taking nothing off";
        let path = spec("rtt 200us rate 1gbit queue 1bdp");
        assert_eq!(
            Dumbbell::new(&path, &[]).floor_line(),
            format!("every round trip takes at least the path's 200 µs{own}")
        );
        let access = [spec("rtt 10ms"), spec("rtt 40ms jitter 1ms")];
        assert_eq!(
            Dumbbell::new(&spec("rtt 5ms"), &access).floor_line(),
            format!("every round trip takes at least its client's base RTT (client1 15.0 ms, client2 45.0 ms) less what the jitter draws below the delays{own}")
        );
        // 12.355 ms would print as 12.4 ms, more than the floor.
        assert_eq!(
            Dumbbell::new(&spec("up.delay 6ms down.delay 6355us"), &[]).floor_line(),
            format!("every round trip takes at least the path's 12355 µs{own}")
        );
        assert_eq!(
            Dumbbell::new(&spec("up.delay 6ms down.delay 6345us"), &[]).floor_line(),
            format!("every round trip takes at least the path's 12.3 ms{own}")
        );
        assert_eq!(
            Dumbbell::new(&spec("rate 1gbit"), &[]).floor_line(),
            "no delay: a round trip takes the lab's own time (the kernels', the emulator's)"
        );
    }

    #[test]
    fn a_packet_is_serialized_at_every_fixed_rate_on_its_way() {
        // 1500 B and 24 B of overhead at 1 Gbit/s: 12.192 µs; plus the access link's
        // 100 Mbit/s, 120 µs, and a gap pacer's 500 Mbit/s, 24 µs.
        let path = spec("rate 1gbit overhead 24 up.pace 500mbit down.rate 10mbit");
        let access = [spec("up.rate 100mbit"), spec("")];
        let d = Dumbbell::new(&path, &access);
        assert!(
            (d.serialization_us(0, Direction::Up, 1500) - (12.192 + 120.0 + 24.0)).abs() < 1e-9
        );
        assert!((d.serialization_us(1, Direction::Up, 1500) - (12.192 + 24.0)).abs() < 1e-9);
        // 52 B at down's own 10 Mbit/s (no overhead): 41.6 µs; nothing on a trace.
        assert!((d.serialization_us(1, Direction::Down, 52) - 41.6).abs() < 1e-9);
        let trace = spec("up.trace t.trace");
        assert_eq!(
            Dumbbell::new(&trace, &[]).serialization_us(0, Direction::Up, 1500),
            0.0
        );
    }

    #[test]
    fn an_access_link_in_bdp_uses_its_own_clients_round_trip() {
        let path = spec("rtt 10ms");
        let access = [spec("rtt 30ms rate 20mbit queue 1bdp"), spec("rtt 90ms")];
        let d = Dumbbell::new(&path, &access);
        // 20 Mbit/s × (10 + 30) ms / 8 = 100 000 bytes, not the other client's 100 ms.
        assert_eq!(
            d.queue_limit(LinkRole::Access(0), Direction::Up),
            Some(Limit::Bytes(100_000))
        );
    }

    #[test]
    fn a_bdp_queue_without_any_delay_is_refused_in_one_line() {
        let path = spec("rate 50mbit queue 1bdp");
        let err = Dumbbell::new(&path, &[PathSpec::default()])
            .check()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("up.queue 1bdp: a queue in bdp"), "{err}");
        assert!(!err.contains('\n'));
        // A delay on any client's access link gives it a round trip.
        let access = [PathSpec::default(), spec("delay 1ms")];
        assert_eq!(Dumbbell::new(&path, &access).check(), Ok(()));
        let access = [spec("rate 1mbit down.queue 2bdp")];
        let err = Dumbbell::new(&spec(""), &access).check().unwrap_err();
        assert_eq!(
            err,
            DumbbellError::BdpWithoutRtt {
                link: "client1's access link, down.queue 2bdp".into()
            }
        );
    }

    #[test]
    fn only_the_path_sets_the_seed() {
        let path = spec("rtt 10ms seed 3");
        let access = [PathSpec::default(), spec("loss 1% seed 4")];
        assert_eq!(
            Dumbbell::new(&path, &access).check(),
            Err(DumbbellError::SeedOnAccess { client: 2 })
        );
    }

    #[test]
    fn only_the_path_sets_the_hosts_interface_queues() {
        let path = spec("rtt 10ms txqueuelen 10");
        assert_eq!(Dumbbell::new(&path, &[PathSpec::default()]).check(), Ok(()));
        let access = [PathSpec::default(), spec("rtt 2ms up.txqueuelen 4")];
        let err = Dumbbell::new(&path, &access).check().unwrap_err();
        assert_eq!(err, DumbbellError::TxQueueLenOnAccess { client: 2 });
        assert!(err
            .to_string()
            .starts_with("client2's access link sets txqueuelen"));
    }

    #[test]
    fn every_link_and_direction_of_a_lab_gets_its_own_seed() {
        let mut seen = std::collections::HashSet::new();
        for lab_seed in [0, 1, 2, u64::MAX] {
            for link in std::iter::once(LinkRole::Bottleneck).chain((0..250).map(LinkRole::Access))
            {
                for dir in [Direction::Up, Direction::Down] {
                    assert!(seen.insert(link_seed(lab_seed, link, dir)));
                }
            }
        }
        // Fixed by the lab's seed.
        assert_eq!(
            link_seed(7, LinkRole::Access(3), Direction::Down),
            link_seed(7, LinkRole::Access(3), Direction::Down)
        );
    }

    #[test]
    fn derived_seeds_are_reproducible_and_distinct() {
        let reps: Vec<u64> = (0..100).map(|r| derive_seed(42, r)).collect();
        assert_eq!(
            reps,
            (0..100).map(|r| derive_seed(42, r)).collect::<Vec<_>>()
        );
        let distinct: std::collections::HashSet<_> = reps.iter().collect();
        assert_eq!(distinct.len(), 100);
        assert_ne!(derive_seed(42, 0), derive_seed(43, 0));
    }
}
