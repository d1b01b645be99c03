//! ICMP echo through the kernel's ping sockets (SOCK_DGRAM, IPPROTO_ICMP), as `ping`
//! sends it: the kernel fills in the identifier and checksum, and the peer's kernel
//! answers. Needs the caller's group in `net.ipv4.ping_group_range` of the namespace.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::clock::realtime_ns;
use crate::sockopt;
use crate::stamp::recv_stamped;

const ECHO_REQUEST: u8 = 8;
const ECHO_REPLY: u8 = 0;
/// Type, code, checksum, identifier, sequence.
const HEADER: usize = 8;

/// A ping socket connected to one peer.
pub struct Pinger {
    socket: Socket,
}

/// One echo that came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Echo {
    pub seq: u16,
    /// From just before the request was sent to the reply's arrival in the kernel, ns:
    /// what `ping` prints.
    pub rtt_ns: i64,
}

impl Pinger {
    /// A socket in the calling thread's namespace, echoing with `peer`; a read waits at
    /// most `timeout`.
    pub fn new(peer: Ipv4Addr, timeout: Duration) -> io::Result<Pinger> {
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::ICMPV4))?;
        sockopt::set_timestamp_ns(&socket)?;
        socket.set_read_timeout(Some(timeout))?;
        socket.connect(&SockAddr::from(SocketAddrV4::new(peer, 0)))?;
        Ok(Pinger { socket })
    }

    /// Sends echo request `seq`, stamped with the wall clock in its payload.
    pub fn send(&self, seq: u16) -> io::Result<()> {
        let mut packet = [0u8; HEADER + 8];
        packet[0] = ECHO_REQUEST;
        packet[6..8].copy_from_slice(&seq.to_be_bytes());
        packet[HEADER..].copy_from_slice(&realtime_ns().to_be_bytes());
        self.socket.send(&packet).map(|_| ())
    }

    /// The next echo reply, or `None` when the read timed out or what came was not a
    /// reply of ours.
    pub fn receive(&self) -> io::Result<Option<Echo>> {
        let mut packet = [0u8; HEADER + 16];
        let (n, arrived) = match recv_stamped(&self.socket, &mut packet) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        if n != HEADER + 8 || packet[0] != ECHO_REPLY {
            return Ok(None);
        }
        let sent = i64::from_be_bytes(packet[HEADER..HEADER + 8].try_into().expect("8 bytes"));
        Ok(arrived.map(|arrived| Echo {
            seq: u16::from_be_bytes([packet[6], packet[7]]),
            rtt_ns: arrived - sent,
        }))
    }
}
