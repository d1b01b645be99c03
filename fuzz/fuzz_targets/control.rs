//! What a peer sends a server or a client: the hello, control messages, a data
//! connection's intro, a UDP flow's hello, a datagram's header, a round-trip probe, the
//! hex of a cookie or a nonce, a server's deflated samples; and the same bytes fed to
//! both ends' handshake machines, whole and in two parts. Any bytes are read or refused,
//! never a panic, and no message claims more than the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_model::udp::Header;
use tcplab_proto::protocol::{
    self, read_client_hello, read_data_intro, read_hello, read_udp_hello, recv, COOKIE_LEN,
    MAX_MESSAGE,
};
use tcplab_proto::handshake::tcplab::{Client, ClientConfig, Server, ServerConfig, TIME_PROBES};
use tcplab_proto::auth::NONCE_LEN;

/// Both handshake machines fed `parts` as they arrive, then the peer's close.
fn handshakes(parts: &[&[u8]]) {
    let config = ServerConfig {
        key: None,
        refusal: None,
        limits: Default::default(),
        boot_id: String::new(),
        congestion: None,
        nonce: [0; NONCE_LEN],
    };
    let mut server = Server::new(config, 0);
    let config = ClientConfig {
        params: Default::default(),
        key: None,
        nonce: [0; NONCE_LEN],
        boot_id: String::new(),
        time_probes: TIME_PROBES,
        deflated_samples: true,
    };
    let mut client = Client::new(config, 0);
    for (now, part) in parts.iter().enumerate() {
        server.handle_input(now as i64, part);
        client.handle_input(now as i64, part);
        while server.poll_action().is_some() {}
        while client.poll_action().is_some() {}
    }
    server.handle_eof(parts.len() as i64);
    client.handle_eof(parts.len() as i64);
}

fuzz_target!(|data: &[u8]| {
    let mut stream = data;
    if read_client_hello(&mut stream).is_ok() {
        while recv(&mut stream, MAX_MESSAGE).is_ok() {}
    }
    let _ = read_hello(&mut &data[..]);
    let _ = read_data_intro(&mut &data[..]);
    let _ = read_udp_hello(data);
    let _ = Header::read(data);
    let _ = tcplab_netsim::probe_datagram::Probe::read(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = protocol::parse_hex::<COOKIE_LEN>(text);
        let _ = protocol::parse_hex::<NONCE_LEN>(text);
    }
    handshakes(&[data]);
    let (a, b) = data.split_at(data.len() / 2);
    handshakes(&[a, b]);
    // A server's deflated samples, as hex of any bytes.
    let _ = protocol::inflate_samples(&protocol::to_hex(data));
});
