//! tcplab's protocols without I/O, as quinn-proto is QUIC's: the control messages and
//! their framing ([`protocol`]), the pre-shared key's proofs ([`auth`]), what a request
//! may ask of a server ([`limits`]), both ends' views merged into one record
//! ([`merge`]), iperf3's wire format ([`iperf3::wire`]), and the four handshakes as
//! state machines ([`handshake`]: tcplab's client and server, iperf3's client and
//! server).
//!
//! Nothing here reads a socket or a clock: a machine is given the bytes that arrived and
//! the time (monotonic µs) and says what to send, what to open and when it next wants
//! to be woken. `tcplab-traffic`'s socket code moves the bytes and reads the clock.

#![forbid(unsafe_code)]

pub mod auth;
pub mod handshake;
pub mod iperf3;
pub mod limits;
pub mod merge;
pub mod protocol;

use tcplab_record::{Direction, Mode, TestParams};

/// The flows of a test, by id, with their directions: up flows first, then down flows.
pub fn flow_roles(params: &TestParams) -> Vec<(u32, Direction)> {
    let directions: &[Direction] = match params.mode {
        Mode::Up => &[Direction::Up],
        Mode::Down => &[Direction::Down],
        Mode::Bidir => &[Direction::Up, Direction::Down],
    };
    directions
        .iter()
        .flat_map(|&d| std::iter::repeat_n(d, params.streams as usize))
        .enumerate()
        .map(|(id, d)| (id as u32, d))
        .collect()
}
