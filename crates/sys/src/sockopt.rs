//! Linux TCP socket options, thin over socket2 and libc. Decoding of the kernel's
//! structs lives in [`tcplab_record::tcpinfo`].
//!
//! Every function takes anything that lends a socket's fd: `&TcpStream`,
//! `&TcpListener`, a `BorrowedFd`, a `socket2::Socket`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use socket2::SockRef;
use tcplab_record::tcpinfo::{
    BbrInfo, SkMemInfo, TcpInfo, BBR_INFO_LEN, SK_MEMINFO_WORDS, TCP_INFO_LEN,
};
use tcplab_record::BufferSize;

use crate::sysctl;

/// TCP_INFO of the socket. On a kernel older than 6.7 the struct is shorter and the
/// missing fields read 0 (see [`TcpInfo::has`]).
pub fn tcp_info(fd: impl AsFd) -> io::Result<TcpInfo> {
    let mut buf = [0u8; TCP_INFO_LEN];
    let len = getsockopt_bytes(fd.as_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)?;
    Ok(TcpInfo::decode(&buf[..len]))
}

/// BBR's state from TCP_CC_INFO, or `None` when the socket does not run BBR.
pub fn bbr_info(fd: impl AsFd) -> io::Result<Option<BbrInfo>> {
    let fd = fd.as_fd();
    // TCP_CC_INFO returns whichever struct the current algorithm fills (vegas and
    // dctcp have their own), without saying which: only trust it under BBR.
    if !runs_bbr(fd)? {
        return Ok(None);
    }
    bbr_info_of_bbr_socket(fd)
}

/// Whether the socket's congestion control is a BBR variant.
pub fn runs_bbr(fd: impl AsFd) -> io::Result<bool> {
    Ok(congestion(fd)?.starts_with("bbr"))
}

/// [`bbr_info`] for a socket the caller knows runs BBR ([`runs_bbr`]): one syscall
/// instead of two, for samplers that ask every millisecond.
pub fn bbr_info_of_bbr_socket(fd: impl AsFd) -> io::Result<Option<BbrInfo>> {
    let mut buf = [0u8; BBR_INFO_LEN];
    let len = getsockopt_bytes(fd.as_fd(), libc::IPPROTO_TCP, libc::TCP_CC_INFO, &mut buf)?;
    Ok(BbrInfo::decode(&buf[..len]))
}

/// The socket's memory (SO_MEMINFO): its buffers and how full they are.
pub fn meminfo(fd: impl AsFd) -> io::Result<SkMemInfo> {
    let mut buf = [0u8; 4 * SK_MEMINFO_WORDS];
    let len = getsockopt_bytes(fd.as_fd(), libc::SOL_SOCKET, libc::SO_MEMINFO, &mut buf)?;
    SkMemInfo::decode(&buf[..len])
        .ok_or_else(|| io::Error::other(format!("SO_MEMINFO returned {len} bytes")))
}

/// Sets SO_SNDBUF and reports what the kernel made of it: Linux doubles the request
/// (for its bookkeeping overhead) after capping it at net.core.wmem_max.
pub fn set_sndbuf(fd: impl AsFd, requested: u64) -> io::Result<BufferSize> {
    set_buffer(fd.as_fd(), Buffer::Send, requested)
}

/// Sets SO_RCVBUF; like [`set_sndbuf`], capped at net.core.rmem_max.
pub fn set_rcvbuf(fd: impl AsFd, requested: u64) -> io::Result<BufferSize> {
    set_buffer(fd.as_fd(), Buffer::Recv, requested)
}

/// The current SO_SNDBUF (already doubled), bytes.
pub fn sndbuf(fd: impl AsFd) -> io::Result<u64> {
    Buffer::Send.get(fd.as_fd())
}

/// The current SO_RCVBUF (already doubled), bytes.
pub fn rcvbuf(fd: impl AsFd) -> io::Result<u64> {
    Buffer::Recv.get(fd.as_fd())
}

#[derive(Clone, Copy)]
enum Buffer {
    Send,
    Recv,
}

impl Buffer {
    fn max_sysctl(self) -> &'static str {
        match self {
            Buffer::Send => "net.core.wmem_max",
            Buffer::Recv => "net.core.rmem_max",
        }
    }

    fn get(self, fd: BorrowedFd<'_>) -> io::Result<u64> {
        let sock = SockRef::from(&fd);
        let size = match self {
            Buffer::Send => sock.send_buffer_size()?,
            Buffer::Recv => sock.recv_buffer_size()?,
        };
        Ok(size as u64)
    }

    fn set(self, fd: BorrowedFd<'_>, size: usize) -> io::Result<()> {
        let sock = SockRef::from(&fd);
        match self {
            Buffer::Send => sock.set_send_buffer_size(size),
            Buffer::Recv => sock.set_recv_buffer_size(size),
        }
    }
}

fn set_buffer(fd: BorrowedFd<'_>, buffer: Buffer, requested: u64) -> io::Result<BufferSize> {
    // Read in this thread, hence in the socket's network namespace.
    let key = buffer.max_sysctl();
    let max: u64 = sysctl::read(key)?
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{key}: {e}")))?;
    // The option is a C int; anything larger is capped by the kernel anyway.
    let size = requested.min(i32::MAX as u64) as usize;
    buffer.set(fd, size)?;
    let effective = buffer.get(fd)?;
    Ok(BufferSize {
        requested: Some(requested),
        effective,
        capped_at: (requested > max).then_some(max),
        at_end: effective,
    })
}

/// Why a congestion control could not be chosen.
#[derive(Debug, thiserror::Error)]
pub enum CongestionError {
    /// Not loaded in this kernel (`modprobe tcp_NAME` makes it available).
    #[error("unknown congestion control '{name}' (available: {})", available.join(" "))]
    Unknown {
        name: String,
        available: Vec<String>,
    },
    /// The cause is part of the message, not a `source`: chains would print it twice.
    #[error("setting congestion control '{name}': {error}")]
    Io { name: String, error: io::Error },
}

/// The congestion controls the kernel has loaded
/// (net.ipv4.tcp_available_congestion_control).
pub fn available_congestion() -> io::Result<Vec<String>> {
    let list = sysctl::read("net.ipv4.tcp_available_congestion_control")?;
    Ok(list.split_whitespace().map(str::to_owned).collect())
}

/// The congestion controls a network namespace other than the first may take as its
/// default (`net.ipv4.tcp_allowed_congestion_control`, which only the first namespace
/// has): a socket of root's may still choose any available one.
pub fn allowed_congestion() -> io::Result<Vec<String>> {
    let list = sysctl::read("net.ipv4.tcp_allowed_congestion_control")?;
    Ok(list.split_whitespace().map(str::to_owned).collect())
}

/// Sets TCP_CONGESTION. Only algorithms already loaded are accepted: for a root
/// process the kernel would otherwise load a module on the fly, and a typo would
/// surface as a module-loading attempt rather than as a clear error.
pub fn set_congestion(fd: impl AsFd, name: &str) -> Result<(), CongestionError> {
    let io_error = |error| CongestionError::Io {
        name: name.to_owned(),
        error,
    };
    let available = available_congestion().map_err(io_error)?;
    let unknown = |available| CongestionError::Unknown {
        name: name.to_owned(),
        available,
    };
    if !available.iter().any(|a| a == name) {
        return Err(unknown(available));
    }
    match SockRef::from(&fd).set_tcp_congestion(name.as_bytes()) {
        Ok(()) => Ok(()),
        // Unloaded between the check and the call.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Err(unknown(available)),
        Err(e) => Err(io_error(e)),
    }
}

/// The socket's congestion control (TCP_CONGESTION).
pub fn congestion(fd: impl AsFd) -> io::Result<String> {
    let raw = SockRef::from(&fd).tcp_congestion()?;
    // The kernel pads the name with NULs to TCP_CA_NAME_MAX.
    let name = raw.split(|&b| b == 0).next().unwrap_or_default();
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// Ends a TCP connection at once with a reset, keeping the descriptor open: connect(2)
/// to AF_UNSPEC disconnects the socket (tcp_disconnect), which sends a RST when data is
/// still outstanding and zeroes the socket's counters (read tcp_info before).
pub fn reset_connection(fd: impl AsFd) -> io::Result<()> {
    // SAFETY: a zeroed sockaddr is a valid AF_UNSPEC address; the length matches it.
    let addr: libc::sockaddr = unsafe { std::mem::zeroed() };
    let len = std::mem::size_of::<libc::sockaddr>() as libc::socklen_t;
    // SAFETY: the descriptor is open for the call; `addr` outlives it.
    if unsafe { libc::connect(fd.as_fd().as_raw_fd(), &addr, len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Ends a TCP connection at once the way `ss -K` does: SOCK_DESTROY through sock_diag
/// (tcp_abort) sends the peer a reset and closes the socket with its counters kept, so
/// tcp_info read after it is the connection's last word: nothing can be sent after it.
/// Fails where the kernel lacks CONFIG_INET_DIAG_DESTROY (EOPNOTSUPP), without
/// CAP_NET_ADMIN over the socket's namespace (EPERM), or once the connection has gone
/// (ENOENT); [`reset_connection`] is the fallback. The calling thread must be in the
/// socket's network namespace.
pub fn abort_connection(stream: &std::net::TcpStream) -> io::Result<()> {
    const SOCK_DESTROY: u16 = 21;
    const SEQ: u32 = 1;
    let (local, peer) = (stream.local_addr()?, stream.peer_addr()?);
    let mut cookie = [0u8; 8];
    getsockopt_bytes(
        stream.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_COOKIE,
        &mut cookie,
    )?;
    let cookie = u64::from_ne_bytes(cookie);
    // struct inet_diag_sockid: ports and addresses in network order, the cookie as two
    // host-order halves.
    let address = |addr: std::net::SocketAddr| -> [u8; 16] {
        let mut out = [0u8; 16];
        match addr.ip() {
            std::net::IpAddr::V4(ip) => out[..4].copy_from_slice(&ip.octets()),
            std::net::IpAddr::V6(ip) => out = ip.octets(),
        }
        out
    };
    let family = match local {
        std::net::SocketAddr::V4(_) => libc::AF_INET,
        std::net::SocketAddr::V6(_) => libc::AF_INET6,
    };
    let mut request = Vec::with_capacity(72);
    // struct nlmsghdr; its length is set below.
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&SOCK_DESTROY.to_ne_bytes());
    request.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
    request.extend_from_slice(&SEQ.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    // struct inet_diag_req_v2: family, protocol, no extensions, pad, every state.
    request.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    request.extend_from_slice(&u32::MAX.to_ne_bytes());
    request.extend_from_slice(&local.port().to_be_bytes());
    request.extend_from_slice(&peer.port().to_be_bytes());
    request.extend_from_slice(&address(local));
    request.extend_from_slice(&address(peer));
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&(cookie as u32).to_ne_bytes());
    request.extend_from_slice(&((cookie >> 32) as u32).to_ne_bytes());
    let len = request.len() as u32;
    request[..4].copy_from_slice(&len.to_ne_bytes());

    let mut socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&netlink_sys::SocketAddr::new(0, 0))?;
    socket.send(&request, 0)?;
    loop {
        let (reply, _) = socket.recv_from_full()?;
        // The ACK: a struct nlmsghdr of type NLMSG_ERROR, then the error (0 or -errno).
        let field = |at: usize, n: usize| reply.get(at..at + n);
        let (Some(kind), Some(seq), Some(error)) = (field(4, 2), field(8, 4), field(16, 4)) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "sock_diag: a short reply",
            ));
        };
        let kind = u16::from_ne_bytes(kind.try_into().expect("2 bytes"));
        if kind != libc::NLMSG_ERROR as u16
            || u32::from_ne_bytes(seq.try_into().expect("4 bytes")) != SEQ
        {
            continue;
        }
        return match i32::from_ne_bytes(error.try_into().expect("4 bytes")) {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(-errno)),
        };
    }
}

/// TCP_NODELAY: `true` turns Nagle's algorithm off.
pub fn set_nodelay(fd: impl AsFd, nodelay: bool) -> io::Result<()> {
    SockRef::from(&fd).set_tcp_nodelay(nodelay)
}

/// TCP_NOTSENT_LOWAT: writes wait while more than `bytes` are queued but not yet sent.
pub fn set_notsent_lowat(fd: impl AsFd, bytes: u32) -> io::Result<()> {
    let bytes = bytes as libc::c_int;
    setsockopt(
        fd.as_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        &bytes,
    )
}

/// TCP_MAXSEG. Set it before connect/listen: on an established connection the
/// kernel stores it but keeps the MSS it negotiated.
pub fn set_mss(fd: impl AsFd, mss: u32) -> io::Result<()> {
    SockRef::from(&fd).set_tcp_mss(mss)
}

/// TCP_MAXSEG: the current MSS once connected, the requested one before.
pub fn mss(fd: impl AsFd) -> io::Result<u32> {
    SockRef::from(&fd).tcp_mss()
}

/// SO_MAX_PACING_RATE in bytes/s (not bit/s); `u64::MAX` means unlimited.
pub fn set_max_pacing_rate(fd: impl AsFd, bytes_per_sec: u64) -> io::Result<()> {
    let fd = fd.as_fd();
    let (level, name) = (libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE);
    match setsockopt(fd, level, name, &bytes_per_sec) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // A kernel that takes only a u32, where u32::MAX means unlimited: keep
            // unlimited as it is and clamp a finite rate just below it.
            let rate = match bytes_per_sec {
                u64::MAX => u32::MAX,
                finite => u32::try_from(finite).unwrap_or(u32::MAX - 1),
            };
            setsockopt(fd, level, name, &rate)
        }
        result => result,
    }
}

/// Packets the socket dropped (a full receive buffer): SK_MEMINFO_DROPS of SO_MEMINFO,
/// the counter SO_RXQ_OVFL reports.
pub fn socket_drops(fd: impl AsFd) -> io::Result<u64> {
    const SK_MEMINFO_VARS: usize = 9;
    const SK_MEMINFO_DROPS: usize = 8;
    let mut buf = [0u8; SK_MEMINFO_VARS * 4];
    let n = getsockopt_bytes(fd.as_fd(), libc::SOL_SOCKET, libc::SO_MEMINFO, &mut buf)?;
    let at = SK_MEMINFO_DROPS * 4;
    if n < at + 4 {
        return Err(io::Error::other("SO_MEMINFO too short"));
    }
    Ok(u64::from(u32::from_ne_bytes(
        buf[at..at + 4].try_into().expect("4 bytes"),
    )))
}

/// IP_RECVERR (or IPV6_RECVERR): a UDP send that the local queue drops fails with
/// ENOBUFS instead of vanishing.
pub fn set_recverr(fd: impl AsFd, ipv6: bool) -> io::Result<()> {
    let on: libc::c_int = 1;
    match ipv6 {
        false => setsockopt(fd.as_fd(), libc::IPPROTO_IP, libc::IP_RECVERR, &on),
        true => setsockopt(fd.as_fd(), libc::IPPROTO_IPV6, libc::IPV6_RECVERR, &on),
    }
}

/// SO_TIMESTAMPNS: received datagrams carry the kernel's arrival time (CLOCK_REALTIME).
pub fn set_timestamp_ns(fd: impl AsFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &on)
}

/// getsockopt into `buf`; returns how many bytes the kernel filled.
fn getsockopt_bytes(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: buf is writable for len bytes and len is a valid socklen_t.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // The kernel never reports more than it was given room for.
    Ok((len as usize).min(buf.len()))
}

/// setsockopt with an integer value of `size_of::<T>()` bytes.
fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: value is readable for size_of::<T>() bytes during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::thread;
    use std::time::{Duration, Instant};

    use socket2::{Domain, Protocol, Socket, Type};

    /// An established loopback connection: (client, server).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn a_reset_connection_ends_the_peers_reads_and_keeps_the_descriptor() {
        let (client, mut server) = pair();
        // Fill both ends' buffers: bytes (and the FIN behind them) left unacknowledged.
        client.set_nonblocking(true).unwrap();
        let chunk = [7u8; 65536];
        let mut written = 0;
        loop {
            match (&client).write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        client.shutdown(std::net::Shutdown::Write).unwrap();
        reset_connection(&client).unwrap();
        // The peer reads what had arrived, then the reset instead of the end of stream.
        let mut read = 0;
        let mut buf = vec![0u8; 65536];
        let e = loop {
            match server.read(&mut buf) {
                Ok(0) => panic!("end of stream after {read} of {written} bytes, not a reset"),
                Ok(n) => read += n,
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
        assert!(read < written, "{read} of {written}");
        // The descriptor stays open for getsockopt.
        assert!(tcp_info(&client).is_ok());
    }

    #[test]
    fn an_aborted_connection_resets_the_peer_and_keeps_its_counters() {
        if !crate::netns::privileged_or_skip("abort_connection") {
            return;
        }
        for local in ["127.0.0.1:0", "[::1]:0"] {
            let listener = TcpListener::bind(local).unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            // As at a drain limit: the write side shut, bytes left unacknowledged.
            client.set_nonblocking(true).unwrap();
            while (&client).write(&[7u8; 65536]).is_ok() {}
            client.shutdown(std::net::Shutdown::Write).unwrap();
            let before = tcp_info(&client).unwrap();
            abort_connection(&client).unwrap();
            let after = tcp_info(&client).unwrap();
            // TCP_CLOSE in the kernel's enum of states.
            assert_eq!(after.state, 7, "{local}");
            assert!(after.segs_out >= before.segs_out && before.segs_out > 0);
            assert!(after.bytes_acked >= before.bytes_acked && before.bytes_acked > 0);
            let mut buf = vec![0u8; 65536];
            let e = loop {
                match server.read(&mut buf) {
                    Ok(0) => panic!("{local}: end of stream, not a reset"),
                    Ok(_) => {}
                    Err(e) => break e,
                }
            };
            assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{local}: {e}");
        }
    }

    fn sysctl_u64(key: &str) -> u64 {
        sysctl::read(key).unwrap().parse().unwrap()
    }

    #[test]
    fn buffer_request_is_doubled() {
        let (client, _server) = pair();
        let snd = set_sndbuf(&client, 64 * 1024).unwrap();
        assert_eq!(
            snd,
            BufferSize {
                requested: Some(65536),
                effective: 131072,
                capped_at: None,
                at_end: 131072,
            }
        );
        assert_eq!(sndbuf(&client).unwrap(), 131072);
        let rcv = set_rcvbuf(&client, 64 * 1024).unwrap();
        assert_eq!((rcv.effective, rcv.capped_at), (131072, None));
        assert_eq!(rcvbuf(&client).unwrap(), 131072);
    }

    #[test]
    fn buffer_request_above_max_is_capped() {
        let (client, _server) = pair();
        let wmem_max = sysctl_u64("net.core.wmem_max");
        let snd = set_sndbuf(&client, wmem_max + 1).unwrap();
        assert_eq!(snd.capped_at, Some(wmem_max));
        assert_eq!(snd.effective, 2 * wmem_max);
        // Beyond a C int: clamped before the call, still capped by the kernel.
        let snd = set_sndbuf(&client, u64::MAX).unwrap();
        assert_eq!(
            (snd.capped_at, snd.effective),
            (Some(wmem_max), 2 * wmem_max)
        );

        let rmem_max = sysctl_u64("net.core.rmem_max");
        let rcv = set_rcvbuf(&client, rmem_max * 4).unwrap();
        assert_eq!(
            (rcv.capped_at, rcv.effective),
            (Some(rmem_max), 2 * rmem_max)
        );
    }

    #[test]
    fn congestion_round_trip() {
        let (client, _server) = pair();
        assert!(available_congestion().unwrap().contains(&"reno".to_owned()));
        set_congestion(&client, "reno").unwrap();
        assert_eq!(congestion(&client).unwrap(), "reno");
    }

    #[test]
    fn unknown_congestion_lists_the_available_ones() {
        let (client, _server) = pair();
        let available = available_congestion().unwrap();
        let err = set_congestion(&client, "no_such_cc").unwrap_err();
        assert!(matches!(&err, CongestionError::Unknown { name, .. } if name == "no_such_cc"));
        assert_eq!(
            err.to_string(),
            format!(
                "unknown congestion control 'no_such_cc' (available: {})",
                available.join(" ")
            )
        );
        // The socket kept its algorithm.
        assert!(available.contains(&congestion(&client).unwrap()));
    }

    #[test]
    fn tcp_info_of_an_established_socket() {
        let (client, server) = pair();
        for sock in [&client, &server] {
            let info = tcp_info(sock).unwrap();
            assert_eq!(info.state, 1, "TCP_ESTABLISHED");
            assert_eq!(info.valid_len as usize, TCP_INFO_LEN);
            assert!(info.has(TcpInfo::TOTAL_RTO_TIME));
            assert!(info.snd_cwnd > 0);
        }
    }

    #[test]
    fn bytes_acked_counts_a_megabyte() {
        const LEN: usize = 1 << 20;
        let (mut client, mut server) = pair();
        let reader = thread::spawn(move || {
            let mut got = Vec::new();
            server.read_to_end(&mut got).unwrap();
            (got.len(), server)
        });
        client.write_all(&vec![7u8; LEN]).unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let (received, server) = reader.join().unwrap();
        assert_eq!(received, LEN);
        assert!(tcp_info(&server).unwrap().bytes_received >= LEN as u64);
        // The last ACK may still be on its way back to the sender.
        let deadline = Instant::now() + Duration::from_secs(5);
        let info = loop {
            let info = tcp_info(&client).unwrap();
            if info.bytes_acked >= LEN as u64 || Instant::now() > deadline {
                break info;
            }
            thread::sleep(Duration::from_millis(5));
        };
        assert!(info.bytes_acked >= LEN as u64, "{info:?}");
        assert!(info.bytes_sent >= LEN as u64);
    }

    #[test]
    fn mss_set_before_connect_bounds_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        set_mss(&sock, 1000).unwrap();
        assert_eq!(mss(&sock).unwrap(), 1000);
        let addr: SocketAddr = listener.local_addr().unwrap();
        sock.connect(&addr.into()).unwrap();
        let _server = listener.accept().unwrap();
        // Loopback's MTU would allow ~65k; options (timestamps) may take a few bytes.
        let connected = mss(&sock).unwrap();
        assert!((900..=1000).contains(&connected), "{connected}");
        assert!(tcp_info(&sock).unwrap().snd_mss <= 1000);
    }

    /// The range the CLI and experiment files check an MSS against is this kernel's.
    #[test]
    fn the_checked_mss_range_is_what_the_kernel_takes() {
        let range = tcplab_model::ranges::MSS_RANGE;
        let fresh = || Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        for ok in [*range.start(), *range.end()] {
            set_mss(fresh(), ok).unwrap();
        }
        for bad in [range.start() - 1, range.end() + 1] {
            let e = set_mss(fresh(), bad).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{bad}");
        }
    }

    #[test]
    fn bbr_info_only_under_bbr() {
        let (mut client, mut server) = pair();
        set_congestion(&client, "reno").unwrap();
        assert_eq!(bbr_info(&client).unwrap(), None);
        if !available_congestion().unwrap().contains(&"bbr".to_owned()) {
            eprintln!("bbr not loaded: skipping the BBR half");
            return;
        }
        set_congestion(&client, "bbr").unwrap();
        // BBR sets its gains on the first ACK it processes: move some data.
        let mut buf = vec![0u8; 64 * 1024];
        client.write_all(&buf).unwrap();
        server.read_exact(&mut buf).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let bbr = loop {
            let bbr = bbr_info(&client).unwrap().expect("BBR fills tcp_bbr_info");
            if bbr.pacing_gain > 0 || Instant::now() > deadline {
                break bbr;
            }
            thread::sleep(Duration::from_millis(5));
        };
        // Startup gain 2/ln 2 ≈ 2.89, or a later phase's; both shifted left by 8.
        assert!((64..=1024).contains(&bbr.pacing_gain), "{bbr:?}");
        assert!((256..=1024).contains(&bbr.cwnd_gain), "{bbr:?}");
        assert!(bbr.min_rtt > 0 && bbr.min_rtt < 1_000_000, "{bbr:?}");
        assert!(bbr.bw > 0, "{bbr:?}");
    }

    #[test]
    fn max_pacing_rate_reads_back_in_tcp_info() {
        let (client, _server) = pair();
        set_max_pacing_rate(&client, 12_500_000).unwrap();
        assert_eq!(tcp_info(&client).unwrap().max_pacing_rate, 12_500_000);
        // Above u32::MAX, which needs the 64-bit option.
        set_max_pacing_rate(&client, 10_000_000_000).unwrap();
        assert_eq!(tcp_info(&client).unwrap().max_pacing_rate, 10_000_000_000);
        set_max_pacing_rate(&client, u64::MAX).unwrap();
        assert_eq!(tcp_info(&client).unwrap().max_pacing_rate, u64::MAX);
    }

    #[test]
    fn nodelay_reads_back() {
        let (client, _server) = pair();
        set_nodelay(&client, true).unwrap();
        assert!(SockRef::from(&client).tcp_nodelay().unwrap());
        set_nodelay(&client, false).unwrap();
        assert!(!SockRef::from(&client).tcp_nodelay().unwrap());
    }
}
