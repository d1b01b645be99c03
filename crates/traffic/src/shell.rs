//! What the socket code around `tcplab_proto::handshake`'s machines shares: reading
//! what arrived by the machine's deadline, on the monotonic clock.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

use tcplab_sys::clock::monotonic_us;

/// What one read brought.
pub(crate) enum Input {
    /// This many bytes, read at this time.
    Bytes(usize, i64),
    /// The peer closed.
    Eof(i64),
    /// The deadline came first (or there was none left).
    Timeout(i64),
}

/// Reads what arrives on `stream` into `buf`, waiting until `deadline_us` at most
/// (forever without one). What has arrived is read even when the deadline has passed
/// (the shell was busy elsewhere): the machine then judges it before its deadline.
pub(crate) fn read_by(
    stream: &TcpStream,
    buf: &mut [u8],
    deadline_us: Option<i64>,
) -> io::Result<Input> {
    let mut reader = stream;
    loop {
        let now = monotonic_us();
        // A passed deadline still looks once (1 µs: a zero timeout would block).
        let wait =
            deadline_us.map(|deadline| Duration::from_micros((deadline - now).max(1) as u64));
        stream.set_read_timeout(wait)?;
        match reader.read(buf) {
            Ok(0) => return Ok(Input::Eof(monotonic_us())),
            Ok(n) => return Ok(Input::Bytes(n, monotonic_us())),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                let now = monotonic_us();
                if deadline_us.is_some_and(|deadline| now >= deadline) {
                    return Ok(Input::Timeout(now));
                }
            }
            Err(e) => return Err(e),
        }
    }
}
