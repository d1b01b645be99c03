//! Waiting for one descriptor to become ready, and a descriptor that wakes a waiter.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Waits up to `timeout_ms` (-1: forever) for `events` (`libc::POLLIN`, `POLLOUT`) on
/// `fd`. Returns whether it became ready; an interrupted wait counts as not ready.
pub fn wait_for(fd: impl AsFd, events: libc::c_short, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_fd().as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    match unsafe { libc::poll(&mut pfd, 1, timeout_ms) } {
        r if r > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// An eventfd a thread polls beside what it waits for: [`Waker::wake`] makes it readable
/// until [`Waker::take`]n (for good if never taken), so the waiter returns at once, now
/// and at every later wait.
#[derive(Debug)]
pub struct Waker(OwnedFd);

impl Waker {
    pub fn new() -> io::Result<Waker> {
        // SAFETY: eventfd takes plain integers; the descriptor is owned right away.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Waker(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a valid buffer. It cannot fail short of the
        // counter's overflow, which a few wakes never reach.
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

impl Waker {
    /// Makes it unreadable again until the next [`Waker::wake`]; whether it was woken.
    pub fn take(&self) -> bool {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a valid buffer; a non-blocking eventfd
        // with nothing to read fails with EAGAIN, which means not woken.
        let n = unsafe { libc::read(self.0.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
        n == 8
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waker_is_readable_once_woken_and_stays_so() {
        let waker = Waker::new().unwrap();
        assert!(!wait_for(&waker, libc::POLLIN, 0).unwrap());
        waker.wake();
        assert!(wait_for(&waker, libc::POLLIN, 1000).unwrap());
        assert!(wait_for(&waker, libc::POLLIN, 0).unwrap());
    }

    #[test]
    fn a_taken_waker_waits_for_the_next_wake() {
        let waker = Waker::new().unwrap();
        assert!(!waker.take());
        waker.wake();
        waker.wake();
        assert!(waker.take());
        assert!(!wait_for(&waker, libc::POLLIN, 0).unwrap());
        waker.wake();
        assert!(wait_for(&waker, libc::POLLIN, 0).unwrap());
    }

    #[test]
    fn a_pipe_becomes_readable_when_written() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        assert!(!wait_for(&reader, libc::POLLIN, 0).unwrap());
        std::io::Write::write_all(&mut writer, b"x").unwrap();
        assert!(wait_for(&reader, libc::POLLIN, 1000).unwrap());
        assert!(wait_for(&writer, libc::POLLOUT, 0).unwrap());
    }
}
