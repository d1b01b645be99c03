//! Applying a test's tunings to data sockets, on the side of each socket's role.
//!
//! Buffers must be set before the handshake (the window scale is chosen at SYN time),
//! so the client sets them before `connect` and the server on its per-test listener,
//! whose accepted sockets inherit them.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};

use socket2::{Domain, Protocol, Socket, Type};
use tcplab_record::units::{format_rate, format_size};
use tcplab_record::{BufferSize, Tuning};
use tcplab_sys::sockopt;

use crate::protocol::Role;

/// Sets what matters for `role` on a socket not yet connected (or just accepted) and
/// returns the role's buffer as requested and as the kernel took it. An option the
/// kernel refuses is named in the error, with the value asked for.
pub fn apply(socket: &impl AsFd, tuning: &Tuning, role: Role) -> io::Result<BufferSize> {
    let fd = socket.as_fd();
    sockopt::set_nodelay(fd, tuning.nodelay).map_err(|e| {
        refused(
            e,
            format!("Nagle's algorithm (TCP_NODELAY {})", tuning.nodelay),
        )
    })?;
    if let Some(mss) = tuning.mss {
        set_mss(fd, mss)?;
    }
    match role {
        Role::Send => {
            if let Some(cc) = &tuning.cc {
                sockopt::set_congestion(fd, cc)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            }
            if let Some(bits) = tuning.pacing_rate {
                sockopt::set_max_pacing_rate(fd, bits / 8).map_err(|e| {
                    refused(
                        e,
                        format!(
                            "the pacing rate {} (SO_MAX_PACING_RATE)",
                            format_rate(bits as f64)
                        ),
                    )
                })?;
            }
            match tuning.sndbuf {
                Some(bytes) => sockopt::set_sndbuf(fd, bytes).map_err(|e| {
                    refused(
                        e,
                        format!("the send buffer {} (SO_SNDBUF)", format_size(bytes)),
                    )
                }),
                None => untouched(sockopt::sndbuf(fd)?),
            }
        }
        Role::Receive => match tuning.rcvbuf {
            Some(bytes) => sockopt::set_rcvbuf(fd, bytes).map_err(|e| {
                refused(
                    e,
                    format!("the receive buffer {} (SO_RCVBUF)", format_size(bytes)),
                )
            }),
            None => untouched(sockopt::rcvbuf(fd)?),
        },
    }
}

fn set_mss(fd: BorrowedFd<'_>, mss: u32) -> io::Result<()> {
    sockopt::set_mss(fd, mss).map_err(|e| refused(e, format!("the MSS {mss} (TCP_MAXSEG)")))
}

/// The kernel's error on setting `what`, naming it.
fn refused(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("the kernel refused {what}: {e}"))
}

/// A buffer left to the kernel: nothing requested, `effective` as it is.
pub(crate) fn untouched(effective: u64) -> io::Result<BufferSize> {
    Ok(BufferSize {
        requested: None,
        effective,
        capped_at: None,
        at_end: effective,
    })
}

pub fn tcp_socket(addr: &SocketAddr) -> io::Result<Socket> {
    Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )
}

/// The server's listener for one test's data connections: receive buffer and MSS set
/// here reach the accepted sockets before their handshake completes.
pub fn data_listener(local: SocketAddr, tuning: &Tuning, receives: bool) -> io::Result<Socket> {
    let socket = tcp_socket(&local)?;
    socket.set_reuse_address(true)?;
    if receives {
        apply(&socket, tuning, Role::Receive)?;
    } else if let Some(mss) = tuning.mss {
        set_mss(socket.as_fd(), mss)?;
    }
    socket.bind(&SocketAddr::new(local.ip(), 0).into())?;
    socket.listen(128)?;
    Ok(socket)
}
