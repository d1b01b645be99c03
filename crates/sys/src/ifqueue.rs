//! A host's interface queue, as the sending TCP meets it: the device's transmit queue
//! (`txqueuelen`) and its root qdisc, set and counted through rtnetlink in the calling
//! thread's namespace, with the host's TCP counter of retransmissions held back because
//! the original was still in a host queue.
//!
//! On a TUN device (a lab's hosts) the transmit queue is the ring the emulator reads:
//! a packet that finds it full is dropped by the device (its `tx_dropped`), which never
//! pushes back, so its pfifo_fast qdisc stays empty and counts no drop or requeue. On a
//! device that pushes back (a real NIC, a veth) the qdisc holds what the device cannot
//! take, and drops (`drops`) past `txqueuelen` packets; a drop there is what TCP sees
//! locally (a send stall: the congestion window cut without a loss on the path).

use std::io;

use netlink_packet_core::NLM_F_DUMP;
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcStats2};
use netlink_packet_route::RouteNetlinkMessage;
use tcplab_record::HostQueue;

use crate::ffi::context;
use crate::netns::{if_index, rtnl, set_link_attribute};
use crate::snmp;

/// Sets link `ifname`'s transmit queue to `packets`.
pub fn set_txqueuelen(ifname: &str, packets: u32) -> io::Result<()> {
    set_link_attribute(
        ifname,
        LinkAttribute::TxQueueLen(packets),
        &format!("setting txqueuelen {packets} on {ifname}"),
    )
}

/// What link `ifname`'s queue did since the device was made, as host `host` (a name
/// for the record: "client", "server").
pub fn read(host: &str, ifname: &str) -> io::Result<HostQueue> {
    let what = format!("reading the interface queue of {ifname}");
    let index = if_index(ifname).map_err(|e| context(e, &what))?;
    let mut queue = HostQueue {
        host: host.to_owned(),
        ..HostQueue::default()
    };
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    for reply in rtnl(RouteNetlinkMessage::GetLink(msg), 0).map_err(|e| context(e, &what))? {
        let RouteNetlinkMessage::NewLink(link) = reply else {
            continue;
        };
        for attribute in link.attributes {
            match attribute {
                LinkAttribute::TxQueueLen(n) => queue.txqueuelen = n,
                LinkAttribute::Stats64(stats) => queue.device_drops = stats.tx_dropped,
                _ => {}
            }
        }
    }
    let qdiscs = rtnl(
        RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
        NLM_F_DUMP,
    )
    .map_err(|e| context(e, &what))?;
    let root = qdiscs.into_iter().find_map(|reply| match reply {
        RouteNetlinkMessage::NewQueueDiscipline(qdisc)
            if qdisc.header.index == index as i32 && qdisc.header.parent == TcHandle::ROOT =>
        {
            Some(qdisc.attributes)
        }
        _ => None,
    });
    // No root qdisc: the device queues nothing itself (noqueue).
    queue.qdisc = "noqueue".into();
    for attribute in root.into_iter().flatten() {
        match attribute {
            TcAttribute::Kind(kind) => queue.qdisc = kind,
            TcAttribute::Stats2(stats) => {
                for stat in stats {
                    match stat {
                        TcStats2::Basic(basic) => queue.qdisc_packets = u64::from(basic.packets),
                        TcStats2::Queue(q) => {
                            queue.qdisc_drops = u64::from(q.drops);
                            queue.requeues = u64::from(q.requeues);
                            queue.overlimits = u64::from(q.overlimits);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    queue.held_retransmits = snmp::netstat_counter("TcpExt", "TCPSpuriousRtxHostQueues")
        .map_err(|e| context(e, &what))?
        .ok_or_else(|| {
            io::Error::other(format!(
                "{what}: no TcpExt TCPSpuriousRtxHostQueues in /proc/net/netstat"
            ))
        })?;
    Ok(queue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{privileged_or_skip, NetNs};
    use std::net::{IpAddr, Ipv4Addr};

    /// A TUN device nobody reads: each packet sent waits in its ring of txqueuelen
    /// packets, and the device drops what does not fit, while its qdisc counts none.
    #[test]
    fn a_tun_device_drops_what_its_ring_cannot_hold_and_its_qdisc_counts_none() {
        if !privileged_or_skip("ifqueue_tun") {
            return;
        }
        let name = format!("tl{}-ifq", std::process::id());
        let ns = NetNs::create(&name).unwrap();
        // No IPv6: its router solicitations would take places in the ring.
        crate::netns::write_sysctl_in(&ns, "net.ipv6.conf.default.disable_ipv6", "1").unwrap();
        let addr = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1));
        let _tun = crate::tun::create_in(
            &ns,
            "ifq0",
            crate::tun::TunOptions::default(),
            &[(addr, 24)],
        )
        .unwrap();
        let (before, after) = ns
            .try_run(|| {
                set_txqueuelen("ifq0", 4)?;
                let before = read("client", "ifq0")?;
                let socket = std::net::UdpSocket::bind((addr, 0))?;
                for _ in 0..10 {
                    socket.send_to(b"x", (Ipv4Addr::new(10, 99, 0, 2), 9))?;
                }
                Ok((before, read("client", "ifq0")?))
            })
            .unwrap();
        ns.delete().unwrap();
        assert_eq!((before.host.as_str(), before.txqueuelen), ("client", 4));
        assert_eq!(after.qdisc, "pfifo_fast");
        // Four wait in the ring, six are dropped by the device.
        assert_eq!(after.device_drops - before.device_drops, 6, "{after:?}");
        assert_eq!(after.qdisc_packets - before.qdisc_packets, 10, "{after:?}");
        assert_eq!((after.qdisc_drops, after.requeues), (0, 0), "{after:?}");
    }
}
