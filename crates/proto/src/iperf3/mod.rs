//! iperf3's control protocol: its bytes ([`wire`]); its client's and server's
//! handshakes are in [`crate::handshake::iperf3`].

pub mod wire;
