//! Which peers are on this host: what `tcplab serve` without a key accepts.
//!
//! A peer is local when it is loopback, one of this namespace's own addresses, or an
//! on-link neighbour behind an interface that leads nowhere else: one that carries no
//! default route and no route through a gateway. Those are the veth, TUN and bridge links
//! that join namespaces and containers on one kernel (a lab's client at 10.77.1.1 sits on
//! the server's 10.77.0.0/16), while an interface with the default route faces a network
//! of other machines. Anything reached through a gateway is not on-link at all.
//!
//! The rule errs towards refusing: a LAN neighbour on the default-route interface needs
//! a key. Its blind spot is a second interface on a private network with no gateway
//! route, whose neighbours count as local; give such a server a key.

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, SocketAddr};

use netlink_packet_core::NLM_F_DUMP;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::route::{RouteAttribute, RouteMessage, RouteType};
use netlink_packet_route::RouteNetlinkMessage;

use crate::netns::rtnl;

/// One address of one interface, with the network it puts on-link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceAddress {
    pub ifindex: u32,
    /// The interface's own address.
    pub local: IpAddr,
    /// The on-link network's address: `local` itself, or the far end of a
    /// point-to-point link.
    pub network: IpAddr,
    pub prefix: u8,
}

/// What the rule looks at in one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Neighbourhood {
    pub addresses: Vec<InterfaceAddress>,
    /// Interfaces that carry a default route or a route through a gateway.
    pub outward: BTreeSet<u32>,
}

impl Neighbourhood {
    /// The calling thread's namespace, read through netlink.
    pub fn read() -> io::Result<Neighbourhood> {
        let addresses = rtnl(
            RouteNetlinkMessage::GetAddress(AddressMessage::default()),
            NLM_F_DUMP,
        )?
        .into_iter()
        .filter_map(|reply| match reply {
            RouteNetlinkMessage::NewAddress(a) => interface_address(a),
            _ => None,
        })
        .collect();
        let outward = rtnl(
            RouteNetlinkMessage::GetRoute(RouteMessage::default()),
            NLM_F_DUMP,
        )?
        .into_iter()
        .flat_map(|reply| match reply {
            RouteNetlinkMessage::NewRoute(r) => outward_interfaces(&r),
            _ => Vec::new(),
        })
        .collect();
        Ok(Neighbourhood { addresses, outward })
    }

    /// Whether `peer` is on this host by the rule above.
    pub fn is_local(&self, peer: SocketAddr) -> bool {
        let ip = peer.ip().to_canonical();
        if ip.is_loopback() || self.addresses.iter().any(|a| a.local == ip) {
            return true;
        }
        // A link-local peer is on the link its scope names, whatever the prefix says.
        let link = match peer {
            SocketAddr::V6(v6) if is_link_local(&ip) => Some(v6.scope_id()),
            _ => None,
        };
        self.addresses.iter().any(|a| {
            !self.outward.contains(&a.ifindex)
                && link.is_none_or(|index| index == a.ifindex)
                && same_network(a.network, ip, a.prefix)
        })
    }
}

fn interface_address(msg: AddressMessage) -> Option<InterfaceAddress> {
    // IFA_LOCAL is our end; IFA_ADDRESS the on-link network's (the peer's on a
    // point-to-point link). IPv6 sends only IFA_ADDRESS.
    let (mut local, mut network) = (None, None);
    for attr in msg.attributes {
        match attr {
            AddressAttribute::Local(ip) => local = Some(ip),
            AddressAttribute::Address(ip) => network = Some(ip),
            _ => {}
        }
    }
    let network = network.or(local)?;
    Some(InterfaceAddress {
        ifindex: msg.header.index,
        local: local.unwrap_or(network),
        network,
        prefix: msg.header.prefix_len,
    })
}

/// The interfaces a route leads out of this host through: a unicast default route's, or
/// any route's with a gateway (each of its next hops).
fn outward_interfaces(route: &RouteMessage) -> Vec<u32> {
    if route.header.kind != RouteType::Unicast {
        return Vec::new();
    }
    let gateway = |attrs: &[RouteAttribute]| {
        attrs
            .iter()
            .any(|a| matches!(a, RouteAttribute::Gateway(_) | RouteAttribute::Via(_)))
    };
    let default = route.header.destination_prefix_length == 0;
    let mut outward = Vec::new();
    for attr in &route.attributes {
        match attr {
            RouteAttribute::Oif(index) if default || gateway(&route.attributes) => {
                outward.push(*index)
            }
            RouteAttribute::MultiPath(hops) => outward.extend(
                hops.iter()
                    .filter(|hop| default || gateway(&hop.attributes))
                    .map(|hop| hop.interface_index),
            ),
            _ => {}
        }
    }
    outward
}

fn is_link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// Whether `a` and `b` share their first `prefix` bits (and their family).
fn same_network(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    fn high_bits(bits: u128, width: u32, prefix: u8) -> u128 {
        let keep = u32::from(prefix).min(width);
        if keep == 0 {
            0
        } else {
            bits >> (width - keep)
        }
    }
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            high_bits(u32::from(a).into(), 32, prefix) == high_bits(u32::from(b).into(), 32, prefix)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            high_bits(a.into(), 128, prefix) == high_bits(b.into(), 128, prefix)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::route::{RouteAddress, RouteNextHop};

    fn addr(ifindex: u32, local: &str, prefix: u8) -> InterfaceAddress {
        InterfaceAddress {
            ifindex,
            local: local.parse().unwrap(),
            network: local.parse().unwrap(),
            prefix,
        }
    }

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40000)
    }

    /// A host with its Internet-facing eth0 (2, default route) and a veth to a
    /// namespace (3), and a lab's server namespace behind its TUN (4).
    fn host() -> Neighbourhood {
        Neighbourhood {
            addresses: vec![
                addr(1, "127.0.0.1", 8),
                addr(1, "::1", 128),
                addr(2, "192.0.2.10", 24),
                addr(2, "2001:db8::10", 64),
                addr(2, "fe80::1", 64),
                addr(3, "10.1.2.1", 24),
                addr(3, "fe80::2", 64),
                addr(4, "10.77.0.1", 16),
            ],
            outward: BTreeSet::from([2]),
        }
    }

    #[test]
    fn loopback_own_addresses_and_internal_neighbours_are_local() {
        let h = host();
        for ip in [
            "127.0.0.1",
            "127.5.5.5",
            "::1",
            "::ffff:127.0.0.1",
            "192.0.2.10",
            "10.1.2.2",
            "10.77.1.1",
            "::ffff:10.77.1.200",
        ] {
            assert!(h.is_local(peer(ip)), "{ip}");
        }
    }

    #[test]
    fn neighbours_behind_the_default_route_and_routed_peers_are_not() {
        let h = host();
        for ip in [
            "192.0.2.11",
            "2001:db8::11",
            "10.1.3.2",
            "203.0.113.7",
            "::ffff:8.8.8.8",
        ] {
            assert!(!h.is_local(peer(ip)), "{ip}");
        }
    }

    #[test]
    fn a_link_local_peer_counts_on_the_link_it_came_from() {
        let h = host();
        let on = |ifindex| {
            SocketAddr::V6(std::net::SocketAddrV6::new(
                "fe80::9".parse().unwrap(),
                1,
                0,
                ifindex,
            ))
        };
        assert!(h.is_local(on(3)));
        assert!(!h.is_local(on(2)));
    }

    #[test]
    fn networks_compare_their_prefix_bits_only() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_network(ip("10.77.0.1"), ip("10.77.255.9"), 16));
        assert!(!same_network(ip("10.77.0.1"), ip("10.78.0.1"), 16));
        assert!(same_network(ip("10.0.0.1"), ip("200.0.0.1"), 0));
        assert!(same_network(ip("10.0.0.1"), ip("10.0.0.1"), 32));
        assert!(!same_network(ip("10.0.0.1"), ip("10.0.0.2"), 32));
        assert!(same_network(ip("fd00:77::1"), ip("fd00:77::1:5"), 64));
        assert!(!same_network(ip("10.0.0.1"), ip("::ffff:10.0.0.1"), 0));
    }

    fn route(prefix: u8, attributes: Vec<RouteAttribute>) -> RouteMessage {
        let mut r = RouteMessage::default();
        r.header.kind = RouteType::Unicast;
        r.header.destination_prefix_length = prefix;
        r.attributes = attributes;
        r
    }

    #[test]
    fn default_and_gateway_routes_mark_their_interfaces_outward() {
        let gw = RouteAttribute::Gateway(RouteAddress::Inet("192.0.2.1".parse().unwrap()));
        assert_eq!(
            outward_interfaces(&route(0, vec![RouteAttribute::Oif(2)])),
            [2]
        );
        assert_eq!(
            outward_interfaces(&route(16, vec![gw.clone(), RouteAttribute::Oif(5)])),
            [5]
        );
        // A connected route (no gateway) leads to the link only.
        assert!(outward_interfaces(&route(24, vec![RouteAttribute::Oif(3)])).is_empty());
        // An unreachable default leads nowhere.
        let mut unreachable = route(0, vec![RouteAttribute::Oif(1)]);
        unreachable.header.kind = RouteType::Unreachable;
        assert!(outward_interfaces(&unreachable).is_empty());
        let hop = |index, attributes| {
            let mut hop = RouteNextHop::default();
            hop.interface_index = index;
            hop.attributes = attributes;
            hop
        };
        let multipath = route(
            8,
            vec![RouteAttribute::MultiPath(vec![
                hop(6, vec![gw]),
                hop(7, vec![]),
            ])],
        );
        assert_eq!(outward_interfaces(&multipath), [6]);
    }

    #[test]
    fn this_namespace_reads_with_its_loopback_local() {
        let here = Neighbourhood::read().unwrap();
        assert!(
            here.addresses.iter().any(|a| a.local.is_loopback()),
            "{here:?}"
        );
        assert!(here.is_local(peer("127.0.0.1")));
        // TEST-NET-3 (RFC 5737) is on no one's link.
        assert!(!here.is_local(peer("203.0.113.7")));
    }

    #[test]
    fn point_to_point_addresses_put_the_far_end_on_link() {
        let mut msg = AddressMessage::default();
        msg.header.index = 9;
        msg.header.prefix_len = 32;
        msg.attributes = vec![
            AddressAttribute::Local("10.8.0.1".parse().unwrap()),
            AddressAttribute::Address("10.8.0.2".parse().unwrap()),
        ];
        let a = interface_address(msg).unwrap();
        assert_eq!(a.local.to_string(), "10.8.0.1");
        assert_eq!(a.network.to_string(), "10.8.0.2");
    }
}
