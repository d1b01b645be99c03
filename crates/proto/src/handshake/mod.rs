//! The four handshakes as state machines, driven as quinn-proto drives a connection:
//! the socket code feeds a machine what arrived (`handle_input(now, bytes)`, or
//! `handle_eof(now)` when the peer closed), wakes it when its deadline passes
//! (`poll_timeout()`, `handle_timeout(now)`), and does what it says, in order
//! (`poll_action()`): send these bytes, open or accept the data connections, start, give
//! up. Time is monotonic µs, given, never read: the tests run both ends of a handshake
//! in memory, in virtual time.
//!
//! - [`tcplab::Client`] and [`tcplab::Server`]: tcplab's own control handshake, from the
//!   hellos to `Go` (see [`crate::protocol`] and [`crate::auth`]);
//! - [`iperf3::Client`] and [`iperf3::Server`]: iperf3's, from the cookie to
//!   `IPERF_DONE`.

pub mod iperf3;
pub mod tcplab;

#[cfg(test)]
mod tests;

/// What the four machines do with what arrived: a step at a time until one waits for
/// more bytes or the machine has ended; a step's error ends it, as the machine says.
trait Steps {
    type Failure;

    fn ended(&self) -> bool;

    /// One step on what arrived: `Ok(false)` when it needs more.
    fn advance(&mut self, now: Micros) -> Result<bool, Self::Failure>;

    fn end(&mut self, failure: Self::Failure);

    fn run(&mut self, now: Micros) {
        while !self.ended() {
            match self.advance(now) {
                Ok(true) => {}
                Ok(false) => return,
                Err(failure) => self.end(failure),
            }
        }
    }
}

/// Monotonic time, µs, on the clock of the end that runs the machine.
pub type Micros = i64;

/// µs of a `Duration`, saturating.
pub(crate) fn micros(d: std::time::Duration) -> Micros {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
