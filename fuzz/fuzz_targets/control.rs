//! What a peer sends a server or a client: the hello, control messages, a data
//! connection's intro, a UDP flow's hello, a datagram's header, a round-trip probe, the
//! hex of a cookie or a nonce, a server's deflated samples. Any bytes are read or refused, never a panic, and no message claims more
//! than the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_model::udp::Header;
use tcplab_traffic::protocol::{
    self, read_client_hello, read_data_intro, read_hello, read_udp_hello, recv, COOKIE_LEN,
    MAX_MESSAGE,
};
use tcplab_traffic::auth::NONCE_LEN;

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
    // A server's deflated samples, as hex of any bytes.
    let _ = protocol::inflate_samples(&protocol::to_hex(data));
});
