//! Every link of a [`Topology`] at work: each direction of each link a [`Link`], and
//! packets carried along their routes from the host that sent them to the one they are
//! for. A packet leaves one link onto the next at its due time exactly: the fabric runs
//! the links' events in time order across the whole graph, on one clock, so a packet's
//! time across a chain is the sum of its times on each link. Sans-IO as the link is:
//! the caller pushes what a host sent, advances time, and takes what arrived, what was
//! lost (and where), and each crossing of a link (for per-link delays).

use std::collections::VecDeque;

use crate::link::{Delivered, DropReason, Link, LinkError, LinkTraces, PacketMeta, PushOutcome};
use crate::topology::{Hop, NodeId, Topology};

/// A packet on its way: which route, how far along. `P` is a handle (the emulator's
/// buffer index): a duplicate is a new handle from the caller's `copy`.
#[derive(Clone, Copy, Debug)]
pub struct Carried<P> {
    packet: P,
    from: NodeId,
    to: NodeId,
    /// Its place in the route: the link it is in.
    hop: usize,
    /// When its host sent it, ns.
    sent_at: u64,
    meta: PacketMeta,
    /// Some link flipped a bit of it, or marked it Congestion Experienced.
    corrupt: bool,
    ce: bool,
}

/// A packet at the host it was for.
#[derive(Debug, PartialEq, Eq)]
pub struct Arrived<P> {
    pub packet: P,
    pub from: NodeId,
    pub to: NodeId,
    /// When its host sent it and when it arrived, ns.
    pub sent_at: u64,
    pub arrived_at: u64,
    pub wire_len: u32,
    /// The runtime should flip a bit of it, or mark it Congestion Experienced.
    pub corrupt: bool,
    pub ce: bool,
}

/// A packet a link dropped.
#[derive(Debug, PartialEq, Eq)]
pub struct Lost<P> {
    pub packet: P,
    pub hop: Hop,
    pub reason: DropReason,
    /// When, ns.
    pub at: u64,
}

/// A packet out of one link of its route: when it entered and left it and how long of
/// that it queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crossed<P> {
    /// Its handle, still the caller's to read (its headers: whose it is).
    pub packet: P,
    pub hop: Hop,
    pub from: NodeId,
    pub to: NodeId,
    pub entered_at: u64,
    pub left_at: u64,
    pub queue_delay: u64,
    pub wire_len: u32,
}

/// A topology's links and what is inside them; see the [module docs](self).
#[derive(Debug)]
pub struct Fabric<P> {
    topology: Topology,
    /// Link `l`'s direction `d` at `2 l + d` (up 0, down 1).
    links: Vec<Link<Carried<P>>>,
    arrived: VecDeque<Arrived<P>>,
    lost: VecDeque<Lost<P>>,
}

impl<P: Copy> Fabric<P> {
    /// The links of `topology`, each direction drawing its own stream of `seed`, its
    /// queue in BDP sized over the longest round trip of the host pairs whose routes
    /// cross it, its traces from `traces`.
    pub fn new(
        topology: Topology,
        seed: u64,
        mtu: u32,
        mut traces: impl FnMut(Hop) -> LinkTraces,
    ) -> Result<Self, LinkError> {
        let links = topology
            .hops()
            .map(|hop| topology.hop_link(hop, seed, mtu, traces(hop)))
            .collect::<Result<_, _>>()?;
        Ok(Fabric {
            topology,
            links,
            arrived: VecDeque::new(),
            lost: VecDeque::new(),
        })
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// One direction of one link, for its counters.
    pub fn link(&self, hop: Hop) -> &Link<Carried<P>> {
        &self.links[hop.index()]
    }

    /// The test started at `origin`: every link's schedule counts from it.
    pub fn start_schedule(&mut self, origin: u64) {
        for link in &mut self.links {
            link.start_schedule(origin);
        }
    }

    /// Host `from` sent `packet` to host `to` at `now`, once the fabric has advanced
    /// to `now` (a link's time never goes back). `copy` makes the copy a link's
    /// `duplicate` asks for, if the caller can.
    pub fn push(
        &mut self,
        now: u64,
        from: NodeId,
        to: NodeId,
        packet: P,
        meta: PacketMeta,
        copy: &mut impl FnMut(&P) -> Option<P>,
    ) {
        let carried = Carried {
            packet,
            from,
            to,
            hop: 0,
            sent_at: now,
            meta,
            corrupt: false,
            ce: false,
        };
        self.enter(now, carried, copy);
    }

    /// The earliest time something happens inside any link; `None` when all are empty.
    pub fn next_deadline(&self) -> Option<u64> {
        self.links.iter().filter_map(Link::next_deadline).min()
    }

    /// Runs every link's events up to `now` in time order: a packet due out of one link
    /// enters the next at that time, or arrives. `crossed` hears of each link crossed.
    pub fn advance(
        &mut self,
        now: u64,
        copy: &mut impl FnMut(&P) -> Option<P>,
        crossed: &mut impl FnMut(Crossed<P>),
    ) {
        while let Some(t) = self.next_deadline().filter(|&t| t <= now) {
            for s in 0..self.links.len() {
                if self.links[s].next_deadline() != Some(t) {
                    continue;
                }
                while let Some(d) = self.links[s].pop(t) {
                    self.leave(s, d, copy, crossed);
                }
                self.collect_lost(s);
            }
        }
    }

    pub fn pop_arrived(&mut self) -> Option<Arrived<P>> {
        self.arrived.pop_front()
    }

    pub fn pop_lost(&mut self) -> Option<Lost<P>> {
        self.lost.pop_front()
    }

    /// A packet out of link slot `s`: on to its next link, or arrived.
    fn leave(
        &mut self,
        s: usize,
        d: Delivered<Carried<P>>,
        copy: &mut impl FnMut(&P) -> Option<P>,
        crossed: &mut impl FnMut(Crossed<P>),
    ) {
        let mut c = d.packet;
        let route = self.topology.route(c.from, c.to);
        crossed(Crossed {
            packet: c.packet,
            hop: route[c.hop],
            from: c.from,
            to: c.to,
            entered_at: d.pushed_at,
            left_at: d.due,
            queue_delay: d.queue_delay,
            wire_len: d.wire_len,
        });
        debug_assert_eq!(route[c.hop].index(), s);
        c.corrupt |= d.corrupt;
        c.ce |= d.ce;
        c.hop += 1;
        if c.hop == route.len() {
            self.arrived.push_back(Arrived {
                packet: c.packet,
                from: c.from,
                to: c.to,
                sent_at: c.sent_at,
                arrived_at: d.due,
                wire_len: d.wire_len,
                corrupt: c.corrupt,
                ce: c.ce,
            });
        } else {
            self.enter(d.due, c, copy);
        }
    }

    /// `c` enters the link of its route it has reached, at `at`.
    fn enter(&mut self, at: u64, c: Carried<P>, copy: &mut impl FnMut(&P) -> Option<P>) {
        let hop = self.topology.route(c.from, c.to)[c.hop];
        let s = hop.index();
        let (meta, handle) = (c.meta, c.packet);
        match self.links[s].push(at, c, meta) {
            PushOutcome::Accepted => {}
            PushOutcome::Duplicate => {
                if let Some(packet) = copy(&handle) {
                    let copied = Carried { packet, ..c };
                    if let PushOutcome::Dropped(d) = self.links[s].push_duplicate(at, copied, meta)
                    {
                        self.lose(hop, d.packet.packet, d.reason, d.at);
                    }
                }
            }
            PushOutcome::Dropped(d) => self.lose(hop, d.packet.packet, d.reason, d.at),
        }
        self.collect_lost(s);
    }

    fn collect_lost(&mut self, s: usize) {
        while let Some(d) = self.links[s].pop_dropped() {
            let hop = self.topology.route(d.packet.from, d.packet.to)[d.packet.hop];
            self.lose(hop, d.packet.packet, d.reason, d.at);
        }
    }

    fn lose(&mut self, hop: Hop, packet: P, reason: DropReason, at: u64) {
        self.lost.push_back(Lost {
            packet,
            hop,
            reason,
            at,
        });
    }
}
