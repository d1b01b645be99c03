//! The small helpers every libc call site shares: a return value read as an
//! `io::Result`, a path as a C string, an error prefixed with what was being done.
//!
//! They sit below the modules that make system calls, so that `netns` and `userns`,
//! which call each other's higher functions, need neither for these.

use std::ffi::CString;
use std::fmt::Display;
use std::io;

/// A libc return value: -1 is the thread's errno.
pub fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `bytes` as a C string, refused when it holds a NUL byte.
pub(crate) fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| invalid("path contains a NUL byte".to_owned()))
}

/// An error of invalid input saying `msg`.
pub(crate) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Prefixes `e` with what was being done, keeping its kind.
pub(crate) fn context(e: io::Error, what: impl Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cvt_reads_minus_one_as_errno() {
        assert_eq!(cvt(3).unwrap(), 3);
        // SAFETY: closing an fd that cannot be open sets EBADF and touches nothing.
        let e = cvt(unsafe { libc::close(-1) }).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }

    #[test]
    fn cstring_refuses_a_nul_byte() {
        assert_eq!(cstring(b"/run/netns").unwrap().as_bytes(), b"/run/netns");
        let e = cstring(b"a\0b").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn context_keeps_the_kind() {
        let e = context(io::Error::from(io::ErrorKind::NotFound), "opening netns x");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().starts_with("opening netns x: "), "{e}");
    }
}
