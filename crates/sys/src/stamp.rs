//! Datagrams with the kernel's arrival time (SO_TIMESTAMPNS, CLOCK_REALTIME).

use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

/// Room for the control data of one received datagram's timestamp.
pub type ControlBuf = [u64; 8];

/// Reads one datagram into `buf` (waiting as the socket's timeout allows) with the
/// kernel's arrival time, ns since the Unix epoch; the socket needs
/// [`crate::sockopt::set_timestamp_ns`].
pub fn recv_stamped(fd: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<i64>)> {
    recv_stamped_from(fd, buf).map(|(n, stamp, _)| (n, stamp))
}

/// [`recv_stamped`], with the address the datagram came from.
pub fn recv_stamped_from(
    fd: impl AsFd,
    buf: &mut [u8],
) -> io::Result<(usize, Option<i64>, Option<SocketAddr>)> {
    let mut control: ControlBuf = [0; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain C data; all-zero is valid.
    let mut hdr: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    hdr.msg_controllen = std::mem::size_of::<ControlBuf>();
    // SAFETY: try_init hands over room for any socket address and its length, which
    // recvmsg fills; hdr points at `iov`, `buf` and `control`, which outlive the call.
    let (n, from) = unsafe {
        socket2::SockAddr::try_init(|name, len| {
            hdr.msg_name = name.cast();
            hdr.msg_namelen = *len;
            let n = libc::recvmsg(fd.as_fd().as_raw_fd(), &mut hdr, 0);
            *len = hdr.msg_namelen;
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        })?
    };
    // SAFETY: the kernel filled hdr's control data just now.
    Ok((n, unsafe { arrival_ns(&hdr) }, from.as_socket()))
}

/// The SCM_TIMESTAMPNS arrival time in a received message's control data, ns since
/// the Unix epoch.
///
/// # Safety
/// `hdr` must be a message the kernel filled (recvmsg, recvmmsg), its control pointer
/// and length still describing that data.
pub unsafe fn arrival_ns(hdr: &libc::msghdr) -> Option<i64> {
    let mut stamp = None;
    // SAFETY: the CMSG macros walk the control data within msg_controllen, which the
    // caller guarantees the kernel filled.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                stamp = Some(ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64);
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    stamp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_loopback_datagram_arrives_with_a_wall_clock_stamp() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        crate::sockopt::set_timestamp_ns(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = crate::clock::realtime_us() * 1000;
        tx.send_to(b"hello", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 16];
        let (n, stamp) = recv_stamped(&rx, &mut buf).unwrap();
        let after = crate::clock::realtime_us() * 1000 + 1000;
        assert_eq!(&buf[..n], b"hello");
        let stamp = stamp.expect("a timestamp");
        assert!(
            before <= stamp && stamp <= after,
            "{before} ≤ {stamp} ≤ {after}"
        );
    }
}
