//! Interoperability with stock iperf3 (3.x): `tcplab run --iperf3` drives an iperf3
//! server ([`client`]) and `tcplab serve --iperf3` serves iperf3 clients ([`server`])
//! through iperf3's control protocol ([`wire`]), while tcplab's own engine runs and
//! instruments this end's flows.

pub mod client;
pub mod server;
pub use tcplab_proto::iperf3::wire;

/// What went wrong talking to an iperf3 server; each names the server.
#[derive(Debug, thiserror::Error)]
pub enum Iperf3Error {
    #[error("cannot connect to iperf3 server {target}")]
    Connect {
        target: String,
        source: std::io::Error,
    },
    #[error("{target} is busy running another test (iperf3's ACCESS_DENIED); try again later")]
    Busy { target: String },
    #[error("iperf3 server {target} reported an error: i_errno {code}, errno {errno} (see iperf3's iperf_error.c)")]
    ServerError {
        target: String,
        code: i32,
        errno: i32,
    },
    #[error("iperf3 server {target} terminated the test")]
    Terminated { target: String },
    #[error("{target} is a tcplab server, not an iperf3 one: test it without --iperf3")]
    TcplabServer { target: String },
    #[error("{target} does not speak iperf3's protocol: {detail}")]
    NotIperf3 { target: String, detail: String },
    #[error("iperf3 server {target}: {what}")]
    Io {
        target: String,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("--iperf3: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Traffic(#[from] crate::TrafficError),
}
