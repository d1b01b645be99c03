//! Waiting for one descriptor to become ready.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_becomes_readable_when_written() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        assert!(!wait_for(&reader, libc::POLLIN, 0).unwrap());
        std::io::Write::write_all(&mut writer, b"x").unwrap();
        assert!(wait_for(&reader, libc::POLLIN, 1000).unwrap());
        assert!(wait_for(&writer, libc::POLLOUT, 0).unwrap());
    }
}
