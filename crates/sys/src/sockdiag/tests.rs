//! sock_diag against the kernel, in a namespace of the test's own: what a dump and a
//! lookup return, checked against what the sockets themselves say (getsockopt, /proc)
//! and against rust-netlink's decoder of the same bytes.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::MetadataExt;

use tcplab_model::sockdiag::{
    encode_dump, Extensions, Families, Family, SocketKey, SocketSample, StateSet,
};
use tcplab_model::sockfilter::{Filter, PortOp, Prefix, Side};
use tcplab_record::tcp_state::TcpState;

use super::*;
use crate::netns::{privileged_or_skip, NetNs};
use crate::sockopt;

/// Sockets of one test: listeners on v4, v6 and dual-stack loopback and a few
/// connections to each, both ends held.
struct Sockets {
    _listeners: Vec<TcpListener>,
    clients: Vec<TcpStream>,
    servers: Vec<TcpStream>,
}

impl Sockets {
    fn open() -> Sockets {
        let specs: [(&str, &str, usize); 3] = [
            ("127.0.0.1:5201", "127.0.0.1:5201", 3),
            ("[::1]:5202", "[::1]:5202", 2),
            // A dual-stack listener: its IPv4 peers are on IPv6 sockets.
            ("[::]:5203", "127.0.0.1:5203", 2),
        ];
        let mut sockets = Sockets {
            _listeners: Vec::new(),
            clients: Vec::new(),
            servers: Vec::new(),
        };
        for (listen, connect, n) in specs {
            let listener = TcpListener::bind(listen).unwrap();
            for _ in 0..n {
                let mut client = TcpStream::connect(connect).unwrap();
                client.write_all(b"hello").unwrap();
                sockets.clients.push(client);
                sockets.servers.push(listener.accept().unwrap().0);
            }
            sockets._listeners.push(listener);
        }
        sockets
    }

    fn all(&self) -> impl Iterator<Item = &TcpStream> {
        self.clients.iter().chain(&self.servers)
    }

    /// Each connected socket's (local, remote), as the socket itself says.
    fn tuples(&self) -> BTreeSet<(SocketAddr, SocketAddr)> {
        self.all()
            .map(|s| (s.local_addr().unwrap(), s.peer_addr().unwrap()))
            .collect()
    }
}

fn tuples(samples: &[SocketSample]) -> BTreeSet<(SocketAddr, SocketAddr)> {
    samples
        .iter()
        .map(|s| (s.key.local, s.key.remote))
        .collect()
}

fn in_namespace(tag: &str) -> Option<(NetNs, Sockets, SockDiag)> {
    if !privileged_or_skip(tag) {
        return None;
    }
    let ns = NetNs::create(&format!("tl{}-{tag}", std::process::id())).unwrap();
    let sockets = ns
        .try_run(|| {
            crate::netns::link_up("lo")?;
            Ok(Sockets::open())
        })
        .unwrap();
    let diag = SockDiag::open_in(&ns).unwrap();
    Some((ns, sockets, diag))
}

fn dump(diag: &mut SockDiag, filter: Option<&Filter>) -> Vec<SocketSample> {
    let mut out = Vec::new();
    let query = Query::new(filter.map(|f| f.compile().unwrap()));
    let n = diag.dump(&query, &mut out).unwrap();
    assert_eq!(n, out.len());
    out
}

#[test]
fn a_dump_returns_exactly_the_sockets_each_filter_matches() {
    let Some((ns, sockets, mut diag)) = in_namespace("sd-filter") else {
        return;
    };
    let all = dump(&mut diag, None);
    // Every connection's two ends, and nothing else: the namespace is the test's.
    assert_eq!(tuples(&all), sockets.tuples());
    assert_eq!(all.len(), 14);
    let prefix = |p: &str| p.parse::<Prefix>().unwrap();
    let filters = [
        Filter::port(Side::Local, 5201),
        Filter::port(Side::Remote, 5202),
        Filter::port_range(Side::Remote, 5202, 5203),
        Filter::Port {
            side: Side::Local,
            op: PortOp::Le,
            port: 5203,
        },
        Filter::addr(Side::Local, prefix("127.0.0.0/8")),
        Filter::addr(Side::Remote, prefix("::1/128")),
        Filter::port(Side::Local, 5201).negate(),
        Filter::any_of([
            Filter::port(Side::Local, 5202),
            Filter::port(Side::Remote, 5203),
        ])
        .unwrap(),
        Filter::Host {
            side: Side::Local,
            prefix: None,
            port: Some(5203),
        },
        Filter::port(Side::Local, 9),
    ];
    for filter in filters {
        let got = dump(&mut diag, Some(&filter));
        let want: BTreeSet<_> = all
            .iter()
            .filter(|s| filter.matches(&s.key, s.cgroup_id.unwrap_or(0)))
            .map(|s| (s.key.local, s.key.remote))
            .collect();
        assert_eq!(tuples(&got), want, "{filter:?}");
    }
    // The dual-stack listener's IPv4 peers: IPv6 sockets an IPv4 prefix matches.
    let mapped = dump(
        &mut diag,
        Some(&Filter::port(Side::Local, 5203).and(Filter::addr(Side::Remote, prefix("127.0.0.1")))),
    );
    assert_eq!(mapped.len(), 2);
    assert!(mapped.iter().all(|s| s.key.family() == Family::V6));
    // A v4-only dump leaves them out.
    let mut v4 = Vec::new();
    let query = Query {
        families: Families::Only(Family::V4),
        ..Query::new(Some(Filter::port(Side::Local, 5203).compile().unwrap()))
    };
    assert_eq!(diag.dump(&query, &mut v4).unwrap(), 0);
    drop(sockets);
    ns.delete().unwrap();
}

const SO_COOKIE: libc::c_int = 57;

fn cookie(s: &TcpStream) -> u64 {
    let mut cookie = 0u64;
    let mut len = 8 as libc::socklen_t;
    // SAFETY: `cookie` is writable for `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_COOKIE,
            (&raw mut cookie).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "{}", io::Error::last_os_error());
    cookie
}

#[test]
fn each_sample_says_what_the_socket_itself_says() {
    let Some((ns, sockets, mut diag)) = in_namespace("sd-fields") else {
        return;
    };
    let bbr_socket = &sockets.clients[0];
    sockopt::set_congestion(bbr_socket, "bbr").unwrap();
    let all = dump(&mut diag, None);
    let before = crate::clock::monotonic_us();
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    for socket in sockets.all() {
        let (local, remote) = (socket.local_addr().unwrap(), socket.peer_addr().unwrap());
        let sample = all
            .iter()
            .find(|s| (s.key.local, s.key.remote) == (local, remote))
            .unwrap();
        assert_eq!(sample.key.cookie, cookie(socket), "SO_COOKIE");
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", socket.as_raw_fd()))
            .unwrap()
            .ino();
        assert_eq!(u64::from(sample.inode), inode, "/proc/self/fd");
        assert_eq!((sample.uid, sample.state), (uid, TcpState::Established));
        assert!(sample.t_us <= before && sample.t_us > before - 10_000_000);
        // The same counters as getsockopt(TCP_INFO) of the idle socket.
        let info = sample.tcp_info.unwrap();
        let own = sockopt::tcp_info(socket.as_fd()).unwrap();
        assert_eq!(info.valid_len, own.valid_len);
        assert_eq!(
            (
                info.bytes_acked,
                info.bytes_received,
                info.segs_out,
                info.snd_cwnd
            ),
            (
                own.bytes_acked,
                own.bytes_received,
                own.segs_out,
                own.snd_cwnd
            )
        );
        let cc = sockopt::congestion(socket).unwrap();
        assert_eq!(sample.congestion.unwrap().as_str(), cc, "TCP_CONGESTION");
        assert_eq!(sample.bbr.is_some(), cc == "bbr", "BBR info under BBR only");
        let mem = sockopt::meminfo(socket).unwrap();
        assert_eq!(sample.skmem.unwrap().sndbuf, mem.sndbuf, "SO_MEMINFO");
        assert_eq!(sample.skmem.unwrap().rcvbuf, mem.rcvbuf, "SO_MEMINFO");
    }
    // The data the clients wrote waits unread on the server side.
    let server = &sockets.servers[0];
    let on_server = all
        .iter()
        .find(|s| s.key.remote == server.peer_addr().unwrap())
        .unwrap();
    assert_eq!(on_server.recv_queue, 5);
    assert_eq!(on_server.tcp_info.unwrap().bytes_received, 5);
    drop(sockets);
    ns.delete().unwrap();
}

#[test]
fn a_lookup_samples_the_sockets_named_and_says_which_are_gone() {
    let Some((ns, sockets, mut diag)) = in_namespace("sd-lookup") else {
        return;
    };
    let all = dump(&mut diag, None);
    let keys: Vec<SocketKey> = all.iter().map(|s| s.key).collect();
    let (mut out, mut gone) = (Vec::new(), Vec::new());
    diag.lookup(&keys, Extensions::ALL, &mut out, &mut gone)
        .unwrap();
    assert!(gone.is_empty(), "{gone:?}");
    assert_eq!(out.iter().map(|s| s.key).collect::<Vec<_>>(), keys);
    assert!(out
        .iter()
        .all(|s| s.tcp_info.is_some() && s.congestion.is_some()));

    // Reset one connection: both of its sockets leave the kernel's tables at once. A
    // stale cookie names a socket that no longer exists; no cookie takes any socket.
    let client = &sockets.clients[1];
    let (local, remote) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
    socket2::SockRef::from(client)
        .set_linger(Some(std::time::Duration::ZERO))
        .unwrap();
    sockopt::reset_connection(client).unwrap();
    let at = |l, r| {
        keys.iter()
            .position(|k| (k.local, k.remote) == (l, r))
            .unwrap()
    };
    let reset = [at(local, remote), at(remote, local)];
    let kept = (0..keys.len()).find(|i| !reset.contains(i)).unwrap();
    let mut stale = keys[kept];
    stale.cookie ^= 1;
    let mut any = keys[kept];
    any.cookie = SocketKey::NO_COOKIE;
    let asked = [keys[reset[0]], keys[reset[1]], stale, any];
    let (mut out, mut gone) = (Vec::new(), Vec::new());
    diag.lookup(&asked, Extensions::NONE, &mut out, &mut gone)
        .unwrap();
    assert_eq!(gone, [0, 1, 2]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].key, keys[kept]);
    assert_eq!(out[0].tcp_info, None, "no attribute asked");

    // More sockets than one batch: each answered once, in order.
    let many: Vec<SocketKey> = keys
        .iter()
        .cycle()
        .take(3 * LOOKUP_BATCH + 5)
        .copied()
        .collect();
    let (mut out, mut gone) = (Vec::new(), Vec::new());
    diag.lookup(&many, Extensions::ALL, &mut out, &mut gone)
        .unwrap();
    assert_eq!(out.len() + gone.len(), many.len());
    assert!(
        gone.iter().all(|&i| reset.contains(&(i % keys.len()))),
        "{gone:?}"
    );
    drop(sockets);
    ns.delete().unwrap();
}

#[test]
fn a_cgroup_filter_takes_the_sockets_made_in_that_cgroup() {
    let Some((ns, sockets, mut diag)) = in_namespace("sd-cgroup") else {
        return;
    };
    let Ok(own) = cgroup_of(std::process::id()) else {
        eprintln!("SKIP sd-cgroup: no cgroup v2");
        return;
    };
    let id = cgroup_id(&own).unwrap();
    let ours = dump(&mut diag, Some(&Filter::Cgroup(id)));
    assert_eq!(tuples(&ours), sockets.tuples());
    assert!(ours.iter().all(|s| s.cgroup_id == Some(id)));
    assert!(dump(&mut diag, Some(&Filter::Cgroup(id + 1))).is_empty());
    drop(sockets);
    ns.delete().unwrap();
}

#[test]
fn a_filter_the_kernel_refuses_is_an_error_and_the_next_dump_works() {
    let Some((ns, sockets, mut diag)) = in_namespace("sd-refused") else {
        return;
    };
    // A port comparison without its operand: the kernel's audit says EINVAL.
    let bad = Filter::port(Side::Local, 5201).compile().unwrap();
    let mut request = Vec::new();
    encode_dump(
        &mut request,
        1,
        Families::Only(Family::V4),
        StateSet::CONNECTED,
        Extensions::ALL,
        bad.as_bytes(),
    );
    let truncated = &request[..request.len() - 4];
    let mut header = truncated.to_vec();
    header[0..4].copy_from_slice(&(truncated.len() as u32).to_ne_bytes());
    let nla = 16 + 56;
    header[nla..nla + 2].copy_from_slice(&8u16.to_ne_bytes());
    diag.request = header;
    diag.send().unwrap();
    let mut out = Vec::new();
    let err = diag.read_dump(1, &mut out).unwrap_err();
    assert!(
        matches!(&err, SockDiagError::Refused(e) if e.raw_os_error() == Some(libc::EINVAL)),
        "{err}"
    );
    assert_eq!(dump(&mut diag, None).len(), 14);
    drop(sockets);
    ns.delete().unwrap();
}

/// rust-netlink's netlink-packet-sock-diag decodes the kernel's own bytes as we do:
/// the 5-tuple, state, uid, inode, cookie, and the attributes' raw values.
#[test]
fn rust_netlink_reads_the_kernel_s_replies_as_we_do() {
    use netlink_packet_core_09::{NetlinkMessage, NetlinkPayload};
    use netlink_packet_sock_diag::inet::nlas::Nla;
    use netlink_packet_sock_diag::SockDiagMessage;

    let Some((ns, sockets, mut diag)) = in_namespace("sd-reference") else {
        return;
    };
    let ours = dump(&mut diag, None);
    let mut theirs = 0;
    for family in Family::BOTH {
        diag.request.clear();
        encode_dump(
            &mut diag.request,
            99,
            Families::Only(family),
            StateSet::CONNECTED,
            Extensions::ALL,
            &[],
        );
        diag.send().unwrap();
        'dump: loop {
            let len = diag.recv(0).unwrap();
            let mut rest = &diag.buffer[..len];
            while !rest.is_empty() {
                let msg = NetlinkMessage::<SockDiagMessage>::deserialize(rest).unwrap();
                rest = &rest[(msg.header.length as usize)
                    .next_multiple_of(4)
                    .min(rest.len())..];
                let response = match msg.payload {
                    NetlinkPayload::Done(_) => break 'dump,
                    NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => r,
                    other => panic!("{other:?}"),
                };
                let h = &response.header;
                let id = &h.socket_id;
                let local = SocketAddr::new(id.source_address, id.source_port);
                let remote = SocketAddr::new(id.destination_address, id.destination_port);
                let s = ours
                    .iter()
                    .find(|s| s.key.cookie.to_ne_bytes() == id.cookie)
                    .unwrap();
                assert_eq!((s.key.local, s.key.remote), (local, remote));
                assert_eq!((s.state as u8, s.uid, s.inode), (h.state, h.uid, h.inode));
                for nla in &response.nlas {
                    match nla {
                        Nla::TcpInfo(bytes) => {
                            let info = tcplab_record::tcpinfo::TcpInfo::decode(bytes);
                            assert_eq!(info.valid_len, s.tcp_info.unwrap().valid_len);
                        }
                        Nla::Congestion(name) => {
                            assert_eq!(name, s.congestion.unwrap().as_str())
                        }
                        Nla::MemInfo(m) => {
                            let k = s.skmem.unwrap();
                            assert_eq!(
                                (m.receive_queue_max, m.send_queue_max),
                                (k.rcvbuf, k.sndbuf)
                            );
                        }
                        _ => {}
                    }
                }
                theirs += 1;
            }
        }
    }
    assert_eq!(theirs, ours.len());
    drop(sockets);
    ns.delete().unwrap();
}

/// A user without privileges sees every socket of the namespace — root's here — with
/// all its attributes, as root does: sock_diag checks no owner. The sampling thread
/// alone becomes user nobody (a raw setresuid changes only the calling thread), which
/// drops its capabilities, and opens its own socket.
#[test]
fn a_user_without_privileges_sees_every_socket_with_tcp_info() {
    let Some((ns, sockets, mut diag)) = in_namespace("sd-nobody") else {
        return;
    };
    sockopt::set_congestion(&sockets.clients[0], "bbr").unwrap();
    sockopt::set_congestion(&sockets.clients[1], "cubic").unwrap();
    let as_root = dump(&mut diag, None);
    let as_nobody = ns
        .try_run(|| {
            const NOBODY: libc::c_long = 65534;
            // SAFETY: the raw system call changes this thread's credentials only; the
            // thread ends with this closure.
            if unsafe { libc::syscall(libc::SYS_setresuid, NOBODY, NOBODY, NOBODY) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let status = std::fs::read_to_string("/proc/thread-self/status")?;
            assert!(
                status.lines().any(|l| l == "CapEff:\t0000000000000000"),
                "the thread kept capabilities:\n{status}"
            );
            let mut diag = SockDiag::open().map_err(io::Error::other)?;
            Ok(dump(&mut diag, None))
        })
        .unwrap();
    assert_eq!(tuples(&as_nobody), tuples(&as_root));
    assert_eq!(tuples(&as_nobody), sockets.tuples());
    for sample in &as_nobody {
        assert_eq!(sample.uid, 0, "root's socket");
        assert!(sample.tcp_info.is_some() && sample.skmem.is_some());
        assert!(sample.cgroup_id.is_some());
        let cc = sample.congestion.unwrap();
        assert_eq!(sample.bbr.is_some(), cc.as_str() == "bbr", "{cc:?}");
    }
    let cc_of = |s: &TcpStream| {
        let key = (s.local_addr().unwrap(), s.peer_addr().unwrap());
        let sample = as_nobody
            .iter()
            .find(|x| (x.key.local, x.key.remote) == key);
        sample.unwrap().congestion.unwrap()
    };
    assert_eq!(cc_of(&sockets.clients[0]).as_str(), "bbr");
    assert_eq!(cc_of(&sockets.clients[1]).as_str(), "cubic");
    drop(sockets);
    ns.delete().unwrap();
}
