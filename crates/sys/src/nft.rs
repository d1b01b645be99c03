//! Source NAT out of one interface, and TCP redirected to a local port, through
//! nf_tables' netlink interface: what `nft add table ip T; nft add chain ip T C { type
//! nat hook postrouting priority 100; }; nft add rule ip T C oif IF masquerade` sends,
//! as one batch, and its prerouting counterpart. A lab host that routes its clients to a
//! far side hides their addresses behind its own this way, so the far side needs no
//! route back into the lab; without root it takes their TCP connections itself. No crate speaks nf_tables without libnftnl or a
//! C toolchain's bindgen, and the three messages are small.
//!
//! Numbers from include/uapi/linux/netfilter/nfnetlink.h and nf_tables.h.

use std::io;
use std::net::Ipv4Addr;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use crate::ffi::context;
use crate::netns::if_index;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;

const NFPROTO_UNSPEC: u8 = 0;
const NFPROTO_IPV4: u8 = 2;
const NF_INET_PRE_ROUTING: u32 = 0;
const NF_INET_POST_ROUTING: u32 = 4;
/// NF_IP_PRI_NAT_SRC: where `nft`'s `srcnat` priority puts the chain.
const PRIORITY_SRCNAT: i32 = 100;
/// NF_IP_PRI_NAT_DST: `nft`'s `dstnat`.
const PRIORITY_DSTNAT: i32 = -100;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFT_META_IIF: u32 = 4;
const NFT_META_OIF: u32 = 5;
const NFT_META_L4PROTO: u32 = 16;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
/// Where the destination address is in an IPv4 header.
const IPV4_DADDR_OFFSET: u32 = 16;
const NFTA_BITWISE_SREG: u16 = 1;
const NFTA_BITWISE_DREG: u16 = 2;
const NFTA_BITWISE_LEN: u16 = 3;
const NFTA_BITWISE_MASK: u16 = 4;
const NFTA_BITWISE_XOR: u16 = 5;
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_REDIR_REG_PROTO_MIN: u16 = 1;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;
const NFTA_DATA_VALUE: u16 = 1;
const NFT_REG_1: u32 = 1;

const NLA_F_NESTED: u16 = 0x8000;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HEADER: usize = 16;

/// Masquerades every IPv4 packet leaving through link `oif`, in the calling thread's
/// namespace: table `table`, chain `chain` at postrouting.
pub fn masquerade(table: &str, chain: &str, oif: &str) -> io::Result<()> {
    let what = format!("masquerading what leaves through {oif} (nf_tables)");
    let oif = if_index(oif).map_err(|e| context(e, &what))?;
    send(&what, &masquerade_batch(table, chain, oif))
}

/// Redirects every IPv4 TCP connection that arrives through link `iif` for an address
/// outside `inside` (a network and its prefix length) to `port` of this host, where
/// `SO_ORIGINAL_DST` tells a listener the address it was for, in the calling thread's
/// namespace: table `table`, chain `chain` at prerouting. As `nft add rule ip T C iif
/// IF meta l4proto tcp ip daddr != NET/LEN redirect to :PORT`.
pub fn redirect_tcp(
    table: &str,
    chain: &str,
    iif: &str,
    inside: (Ipv4Addr, u8),
    port: u16,
) -> io::Result<()> {
    let what = format!("redirecting TCP arriving through {iif} (nf_tables)");
    let iif = if_index(iif).map_err(|e| context(e, &what))?;
    send(&what, &redirect_batch(table, chain, iif, inside, port))
}

/// Sends a batch and waits for its acknowledgements.
fn send(what: &str, (batch, acks): &(Vec<u8>, usize)) -> io::Result<()> {
    let mut socket = Socket::new(NETLINK_NETFILTER).map_err(|e| context(e, what))?;
    socket.bind_auto().map_err(|e| context(e, what))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(|e| context(e, what))?;
    socket.send(batch, 0).map_err(|e| context(e, what))?;
    let mut acked = 0;
    while acked < *acks {
        let (data, _) = socket.recv_from_full().map_err(|e| context(e, what))?;
        for result in replies(&data) {
            result.map_err(|e| context(e, what))?;
            acked += 1;
        }
    }
    Ok(())
}

/// The batch that makes the table, its chain and the masquerading rule, and how many
/// acknowledgements it asks for.
fn masquerade_batch(table: &str, chain: &str, oif: u32) -> (Vec<u8>, usize) {
    rule_batch(
        table,
        chain,
        NF_INET_POST_ROUTING,
        PRIORITY_SRCNAT,
        |list| {
            meta_is(list, NFT_META_OIF, &oif.to_ne_bytes());
            expression(list, "masq", |_| {});
        },
    )
}

/// The batch that makes the table, its chain and the redirecting rule.
fn redirect_batch(
    table: &str,
    chain: &str,
    iif: u32,
    (net, prefix): (Ipv4Addr, u8),
    port: u16,
) -> (Vec<u8>, usize) {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0);
    rule_batch(table, chain, NF_INET_PRE_ROUTING, PRIORITY_DSTNAT, |list| {
        meta_is(list, NFT_META_IIF, &iif.to_ne_bytes());
        meta_is(list, NFT_META_L4PROTO, &[libc::IPPROTO_TCP as u8]);
        // The destination address, masked to the network, is not `net`.
        expression(list, "payload", |payload| {
            payload
                .be32(NFTA_PAYLOAD_DREG, NFT_REG_1)
                .be32(NFTA_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER)
                .be32(NFTA_PAYLOAD_OFFSET, IPV4_DADDR_OFFSET)
                .be32(NFTA_PAYLOAD_LEN, 4);
        });
        expression(list, "bitwise", |bitwise| {
            bitwise
                .be32(NFTA_BITWISE_SREG, NFT_REG_1)
                .be32(NFTA_BITWISE_DREG, NFT_REG_1)
                .be32(NFTA_BITWISE_LEN, 4)
                .nested(NFTA_BITWISE_MASK, |data| {
                    data.put(NFTA_DATA_VALUE, &mask.to_be_bytes());
                })
                .nested(NFTA_BITWISE_XOR, |data| {
                    data.put(NFTA_DATA_VALUE, &[0; 4]);
                });
        });
        expression(list, "cmp", |cmp| {
            cmp.be32(NFTA_CMP_SREG, NFT_REG_1)
                .be32(NFTA_CMP_OP, NFT_CMP_NEQ)
                .nested(NFTA_CMP_DATA, |data| {
                    data.put(NFTA_DATA_VALUE, &(u32::from(net) & mask).to_be_bytes());
                });
        });
        expression(list, "immediate", |immediate| {
            immediate
                .be32(NFTA_IMMEDIATE_DREG, NFT_REG_1)
                .nested(NFTA_IMMEDIATE_DATA, |data| {
                    data.put(NFTA_DATA_VALUE, &port.to_be_bytes());
                });
        });
        expression(list, "redir", |redir| {
            redir.be32(NFTA_REDIR_REG_PROTO_MIN, NFT_REG_1);
        });
    })
}

/// A `meta KEY == value` match: meta stores the key in register 1 in host order.
fn meta_is(list: &mut Attrs, key: u32, value: &[u8]) {
    expression(list, "meta", |meta| {
        meta.be32(NFTA_META_KEY, key)
            .be32(NFTA_META_DREG, NFT_REG_1);
    });
    expression(list, "cmp", |cmp| {
        cmp.be32(NFTA_CMP_SREG, NFT_REG_1)
            .be32(NFTA_CMP_OP, NFT_CMP_EQ)
            .nested(NFTA_CMP_DATA, |data| {
                data.put(NFTA_DATA_VALUE, value);
            });
    });
}

/// A batch that makes table `table` (if missing), its nat chain `chain` at `hook` and
/// `priority`, and one rule of the expressions `rule` adds; and how many
/// acknowledgements it asks for.
fn rule_batch(
    table: &str,
    chain: &str,
    hook: u32,
    priority: i32,
    rule: impl FnOnce(&mut Attrs),
) -> (Vec<u8>, usize) {
    let nft = |kind| NFNL_SUBSYS_NFTABLES << 8 | kind;
    let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
    let mut table_attrs = Attrs::default();
    table_attrs.string(NFTA_TABLE_NAME, table);
    let mut chain_attrs = Attrs::default();
    chain_attrs
        .string(NFTA_CHAIN_TABLE, table)
        .string(NFTA_CHAIN_NAME, chain)
        .nested(NFTA_CHAIN_HOOK, |h| {
            h.be32(NFTA_HOOK_HOOKNUM, hook)
                .be32(NFTA_HOOK_PRIORITY, priority as u32);
        })
        .string(NFTA_CHAIN_TYPE, "nat");
    let mut rule_attrs = Attrs::default();
    rule_attrs
        .string(NFTA_RULE_TABLE, table)
        .string(NFTA_RULE_CHAIN, chain)
        .nested(NFTA_RULE_EXPRESSIONS, rule);
    let batch_id = NFNL_SUBSYS_NFTABLES;
    let messages = [
        message(
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            0,
            NFPROTO_UNSPEC,
            batch_id,
            &Attrs::default(),
        ),
        message(
            nft(NFT_MSG_NEWTABLE),
            create,
            1,
            NFPROTO_IPV4,
            0,
            &table_attrs,
        ),
        message(
            nft(NFT_MSG_NEWCHAIN),
            create,
            2,
            NFPROTO_IPV4,
            0,
            &chain_attrs,
        ),
        message(
            nft(NFT_MSG_NEWRULE),
            create | NLM_F_APPEND,
            3,
            NFPROTO_IPV4,
            0,
            &rule_attrs,
        ),
        message(
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            4,
            NFPROTO_UNSPEC,
            batch_id,
            &Attrs::default(),
        ),
    ];
    (messages.concat(), 3)
}

fn expression(list: &mut Attrs, name: &str, data: impl FnOnce(&mut Attrs)) {
    list.nested(NFTA_LIST_ELEM, |elem| {
        elem.string(NFTA_EXPR_NAME, name);
        let mut inner = Attrs::default();
        data(&mut inner);
        if !inner.0.is_empty() {
            elem.put(NFTA_EXPR_DATA | NLA_F_NESTED, &inner.0);
        }
    });
}

/// Netlink attributes: length and type in host order, the payload padded to 4 bytes.
#[derive(Default)]
struct Attrs(Vec<u8>);

impl Attrs {
    fn put(&mut self, kind: u16, payload: &[u8]) -> &mut Self {
        self.0
            .extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.0.resize(self.0.len().next_multiple_of(4), 0);
        self
    }

    fn string(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut payload = s.as_bytes().to_vec();
        payload.push(0);
        self.put(kind, &payload)
    }

    /// nf_tables' numbers are big-endian.
    fn be32(&mut self, kind: u16, value: u32) -> &mut Self {
        self.put(kind, &value.to_be_bytes())
    }

    fn nested(&mut self, kind: u16, fill: impl FnOnce(&mut Attrs)) -> &mut Self {
        let mut inner = Attrs::default();
        fill(&mut inner);
        self.put(kind | NLA_F_NESTED, &inner.0)
    }
}

/// One netlink message with its nfgenmsg header.
fn message(kind: u16, flags: u16, seq: u32, family: u8, res_id: u16, attrs: &Attrs) -> Vec<u8> {
    let len = NLMSG_HEADER + 4 + attrs.0.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.push(family);
    m.push(0); // NFNETLINK_V0
    m.extend_from_slice(&res_id.to_be_bytes());
    m.extend_from_slice(&attrs.0);
    m
}

/// The acknowledgements in one datagram of replies: each NLMSG_ERROR, as its errno.
fn replies(data: &[u8]) -> Vec<io::Result<()>> {
    let mut results = Vec::new();
    let mut rest = data;
    while rest.len() >= NLMSG_HEADER {
        let len = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().expect("2 bytes"));
        if len < NLMSG_HEADER || len > rest.len() {
            results.push(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a truncated netlink reply",
            )));
            break;
        }
        if kind == NLMSG_ERROR && len >= NLMSG_HEADER + 4 {
            let code = i32::from_ne_bytes(
                rest[NLMSG_HEADER..NLMSG_HEADER + 4]
                    .try_into()
                    .expect("4 bytes"),
            );
            results.push(match code {
                0 => Ok(()),
                errno => Err(io::Error::from_raw_os_error(-errno)),
            });
        }
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks netlink attributes: (type without flags, nested?, payload).
    fn attrs(mut data: &[u8]) -> Vec<(u16, bool, &[u8])> {
        let mut out = Vec::new();
        while data.len() >= 4 {
            let len = u16::from_ne_bytes([data[0], data[1]]) as usize;
            let kind = u16::from_ne_bytes([data[2], data[3]]);
            out.push((
                kind & !NLA_F_NESTED,
                kind & NLA_F_NESTED != 0,
                &data[4..len],
            ));
            data = &data[len.next_multiple_of(4).min(data.len())..];
        }
        out
    }

    /// The messages of a batch: (type, flags, seq, family, attributes' bytes).
    fn messages(mut data: &[u8]) -> Vec<(u16, u16, u32, u8, &[u8])> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let len = u32::from_ne_bytes(data[0..4].try_into().unwrap()) as usize;
            assert_eq!(len % 4, 0, "messages stay aligned");
            out.push((
                u16::from_ne_bytes([data[4], data[5]]),
                u16::from_ne_bytes([data[6], data[7]]),
                u32::from_ne_bytes(data[8..12].try_into().unwrap()),
                data[16],
                &data[20..len],
            ));
            data = &data[len..];
        }
        out
    }

    #[test]
    fn the_batch_is_a_table_a_nat_chain_at_postrouting_and_one_rule_between_begin_and_end() {
        let (batch, acks) = masquerade_batch("tcplab", "far", 7);
        assert_eq!(acks, 3);
        let m = messages(&batch);
        let kinds: Vec<u16> = m.iter().map(|m| m.0).collect();
        assert_eq!(kinds, [0x10, 0xa00, 0xa03, 0xa06, 0x11]);
        assert!(m[1..4]
            .iter()
            .all(|m| m.1 & NLM_F_ACK != 0 && m.3 == NFPROTO_IPV4));
        let seqs: Vec<u32> = m.iter().map(|m| m.2).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4]);

        assert_eq!(attrs(m[1].4), [(NFTA_TABLE_NAME, false, &b"tcplab\0"[..])]);
        let chain = attrs(m[2].4);
        assert_eq!(chain[1], (NFTA_CHAIN_NAME, false, &b"far\0"[..]));
        assert_eq!(chain[2].0, NFTA_CHAIN_HOOK);
        assert!(chain[2].1);
        assert_eq!(
            attrs(chain[2].2),
            [
                (NFTA_HOOK_HOOKNUM, false, &4u32.to_be_bytes()[..]),
                (NFTA_HOOK_PRIORITY, false, &100u32.to_be_bytes()[..]),
            ]
        );
        assert_eq!(chain[3], (NFTA_CHAIN_TYPE, false, &b"nat\0"[..]));

        let rule = attrs(m[3].4);
        assert_eq!(rule[2].0, NFTA_RULE_EXPRESSIONS);
        let names: Vec<&[u8]> = attrs(rule[2].2)
            .iter()
            .map(|elem| attrs(elem.2)[0].2)
            .collect();
        assert_eq!(names, [&b"meta\0"[..], b"cmp\0", b"masq\0"]);
        // cmp compares register 1 with the interface index, as meta stored it.
        let cmp = attrs(attrs(rule[2].2)[1].2)[1].2;
        let data = attrs(cmp)[2].2;
        assert_eq!(
            attrs(data),
            [(NFTA_DATA_VALUE, false, &7u32.to_ne_bytes()[..])]
        );
    }

    #[test]
    fn the_redirect_is_a_nat_chain_at_prerouting_matching_tcp_from_one_link_outside_a_network() {
        let (batch, acks) = redirect_batch(
            "tcplab",
            "farin",
            3,
            (Ipv4Addr::new(10, 77, 9, 9), 16),
            40000,
        );
        assert_eq!(acks, 3);
        let m = messages(&batch);
        let chain = attrs(m[2].4);
        assert_eq!(
            attrs(chain[2].2),
            [
                (NFTA_HOOK_HOOKNUM, false, &0u32.to_be_bytes()[..]),
                (NFTA_HOOK_PRIORITY, false, &(-100i32).to_be_bytes()[..]),
            ]
        );
        let rule = attrs(m[3].4);
        let exprs = attrs(rule[2].2);
        let names: Vec<&[u8]> = exprs.iter().map(|elem| attrs(elem.2)[0].2).collect();
        assert_eq!(
            names,
            [
                &b"meta\0"[..],
                b"cmp\0",
                b"meta\0",
                b"cmp\0",
                b"payload\0",
                b"bitwise\0",
                b"cmp\0",
                b"immediate\0",
                b"redir\0"
            ]
        );
        // The value an expression compares or loads, by its position.
        let value = |at: usize, attr: usize| {
            let data = attrs(attrs(exprs[at].2)[1].2)[attr].2;
            attrs(data)[0].2.to_vec()
        };
        assert_eq!(value(1, 2), 3u32.to_ne_bytes());
        assert_eq!(value(3, 2), [6]);
        // The mask, then the network it must not be, both network order.
        assert_eq!(value(5, 3), [255, 255, 0, 0]);
        assert_eq!(value(6, 2), [10, 77, 0, 0]);
        assert_eq!(value(7, 1), 40000u16.to_be_bytes());
    }

    #[test]
    fn acknowledgements_are_read_with_their_errors() {
        let ack = |code: i32| {
            let mut m = vec![0u8; 36];
            m[0..4].copy_from_slice(&36u32.to_ne_bytes());
            m[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
            m[16..20].copy_from_slice(&code.to_ne_bytes());
            m
        };
        let data = [ack(0), ack(-libc::EPERM)].concat();
        let results = replies(&data);
        assert_eq!(results.len(), 2);
        assert!(results[0].is_ok());
        assert_eq!(
            results[1].as_ref().unwrap_err().raw_os_error(),
            Some(libc::EPERM)
        );
        // A reply cut short is an error, not an acknowledgement.
        assert!(replies(&data[..20])[0].is_err());
    }
}
