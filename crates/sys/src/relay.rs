//! Two TCP connections joined into one, both ways, with the bytes moved inside the
//! kernel (splice through a pipe, never copied to user space): a connection that a lab
//! host took for a far side (`nft::redirect_tcp`), carried on by a connection of
//! another namespace. Each end is kernel TCP, so what crosses the lab's path is TCP as
//! the kernel does it: window scaling, its congestion control, its timers.

use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::thread;

use crate::ffi::cvt;

/// How much one splice moves at most.
const CHUNK: usize = 1 << 16;

/// What the relay holds of the far side's bytes at most beyond its pipe: the receive
/// buffer of its far socket and the unsent bytes of its lab socket. The far peer counts
/// what the relay acknowledged as delivered, so its count leads what crossed the path
/// by this much (a tenth of a second at 10 Mbit/s); the far socket's loopback round
/// trip of microseconds needs no more.
pub const HELD_BYTES: u32 = 64 * 1024;

/// The address a redirected connection was for (SO_ORIGINAL_DST, from conntrack).
pub fn original_destination(stream: &TcpStream) -> io::Result<SocketAddrV4> {
    // SAFETY: sockaddr_in is plain data; zeroes are a valid value.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `addr` has room for `len` bytes, which the kernel fills.
    cvt(unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_IP,
            libc::SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    })?;
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)),
        u16::from_be(addr.sin_port),
    ))
}

/// Closes `stream` with a reset, as a peer that refused it would have.
pub fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO));
}

/// A connection to `target` from the calling thread's namespace, whose receive buffer
/// holds [`HELD_BYTES`].
pub fn connect(target: SocketAddrV4) -> io::Result<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    // Before connecting: the window scale is chosen from it.
    socket.set_recv_buffer_size(HELD_BYTES as usize)?;
    socket.connect(&target.into())?;
    socket.set_tcp_nodelay(true)?;
    Ok(socket.into())
}

/// Moves bytes both ways between the lab's connection `near` and the far one (from
/// [`connect`]) until both directions have ended: an end of stream is passed on as a
/// shutdown of the other side's writing; an error (a reset) shuts both connections
/// down.
pub fn relay(near: TcpStream, far: TcpStream) -> io::Result<()> {
    near.set_nodelay(true)?;
    crate::sockopt::set_notsent_lowat(&near, HELD_BYTES)?;
    let (a, b) = (near, far);
    let (a2, b2) = (a.try_clone()?, b.try_clone()?);
    let forward = thread::Builder::new()
        .name("far relay".into())
        .spawn(move || one_way(&a2, &b2))?;
    let backward = one_way(&b, &a);
    let forward = forward
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    forward.and(backward)
}

/// Moves bytes from `from` to `to` until `from` ends.
fn one_way(from: &TcpStream, to: &TcpStream) -> io::Result<()> {
    let moved = splice_all(from, to);
    match &moved {
        Ok(()) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        // Wakes the other direction too.
        Err(_) => {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        }
    }
    moved
}

fn splice_all(from: &TcpStream, to: &TcpStream) -> io::Result<()> {
    let (pipe_out, pipe_in) = io::pipe()?;
    loop {
        let n = splice(from, pipe_in.as_fd(), CHUNK)?;
        if n == 0 {
            return Ok(());
        }
        let mut left = n;
        while left > 0 {
            left -= splice(pipe_out.as_fd(), to.as_fd(), left)?;
        }
    }
}

fn splice(from: impl AsFd, to: impl AsFd, len: usize) -> io::Result<usize> {
    loop {
        // SAFETY: plain syscall on two open descriptors, no offsets.
        let n = unsafe {
            libc::splice(
                from.as_fd().as_raw_fd(),
                std::ptr::null_mut(),
                to.as_fd().as_raw_fd(),
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A pair of connected streams on loopback.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (a, listener.accept().unwrap().0)
    }

    #[test]
    fn bytes_cross_both_ways_and_an_end_of_stream_is_passed_on() {
        let (mut client, near) = pair();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(at) = listener.local_addr().unwrap() else {
            unreachable!("bound to IPv4")
        };
        let far = connect(at).unwrap();
        let mut server = listener.accept().unwrap().0;
        let relay = thread::spawn(move || relay(near, far));
        let sent: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let writer = {
            let sent = sent.clone();
            let mut client = client.try_clone().unwrap();
            thread::spawn(move || {
                client.write_all(&sent).unwrap();
                client.shutdown(Shutdown::Write).unwrap();
            })
        };
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        assert!(
            got == sent,
            "{} of {} bytes, or altered",
            got.len(),
            sent.len()
        );
        writer.join().unwrap();
        server.write_all(b"answer").unwrap();
        server.shutdown(Shutdown::Write).unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, b"answer");
        relay.join().unwrap().unwrap();
    }
}
