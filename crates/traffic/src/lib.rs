//! tcplab's traffic: the control protocol, the TCP engine that runs on both ends of a
//! test, `serve` and `run`.
//!
//! Data flow of one test: [`client::run`] connects and negotiates over the control
//! protocol ([`protocol`]), both ends run their flows with [`engine::run_side`], the
//! server's report and samples travel back, and [`merge`] turns both ends' views into one
//! [`tcplab_record::RunRecord`] on the client's time base.

pub mod auth;
pub mod client;
pub mod engine;
pub mod events;
pub mod flow;
pub mod iperf3;
pub mod limits;
pub mod merge;
pub mod probe;
pub mod protocol;
pub mod server;
pub mod setup;
pub mod transact;
pub mod udp;

use tcplab_record::{Direction, Mode, TestParams};

#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    #[error("cannot connect to {target}")]
    Connect {
        target: String,
        source: std::io::Error,
    },
    #[error("cannot resolve '{target}': {reason}")]
    Resolve { target: String, reason: String },
    #[error("server refused the test: {0}")]
    Refused(String),
    #[error("cannot trust the server: {0}")]
    ServerNotProven(String),
    #[error("{target} is an iperf3 server, not a tcplab one: test it with --iperf3")]
    Iperf3Server { target: String },
    #[error("no answer from {target} within {waited_s} s (is a tcplab server listening there?)")]
    NoAnswer { target: String, waited_s: u64 },
    #[error("the server fell silent in the handshake: no answer for {waited_s} s")]
    Silent { waited_s: u64 },
    #[error(transparent)]
    Protocol(#[from] protocol::ProtocolError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

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
