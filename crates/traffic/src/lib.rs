//! tcplab's traffic: the sockets of `serve` and `run` and the TCP engine that runs on
//! both ends of a test.
//!
//! Data flow of one test: [`client::run`] connects and feeds the control handshake's
//! state machine (`tcplab_proto::handshake`) what the server sends, both ends run their
//! flows with [`engine::run_side`], the server's report and samples travel back, and
//! [`merge`] turns both ends' views into one [`tcplab_record::RunRecord`] on the
//! client's time base. The protocols themselves, without I/O, are `tcplab-proto`'s;
//! [`protocol`], [`limits`] and [`merge`] are its modules, re-exported.

pub mod auth;
pub mod client;
pub mod engine;
pub mod events;
pub mod flow;
pub mod iperf3;
pub mod probe;
pub mod server;
pub mod setup;
mod shell;
pub mod transact;
pub mod udp;

pub use tcplab_proto::{flow_roles, limits, merge, protocol};

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

impl TrafficError {
    /// A failed client handshake, naming the server where it matters.
    pub fn from_handshake(e: tcplab_proto::handshake::tcplab::ClientError, target: &str) -> Self {
        use tcplab_proto::handshake::tcplab::ClientError;
        match e {
            ClientError::Refused(reason) => TrafficError::Refused(reason),
            ClientError::ServerNotProven(why) => TrafficError::ServerNotProven(why),
            ClientError::Iperf3Server => TrafficError::Iperf3Server {
                target: target.to_string(),
            },
            ClientError::NoAnswer { waited_s } => TrafficError::NoAnswer {
                target: target.to_string(),
                waited_s,
            },
            ClientError::Silent { waited_s } => TrafficError::Silent { waited_s },
            ClientError::Protocol(e) => TrafficError::Protocol(e),
        }
    }
}
