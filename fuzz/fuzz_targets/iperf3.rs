//! What an iperf3 peer sends: its state bytes, its parameters and results as
//! length-prefixed JSON, and its UDP connect datagram and reply. Any bytes are read or
//! refused; fed to both ends' handshake machines, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_proto::handshake::iperf3::{Client, Server};
use tcplab_proto::iperf3::wire::{self, Params, Results, State};

fuzz_target!(|data: &[u8]| {
    let mut stream = data;
    while let Ok(byte) = wire::read_state(&mut stream) {
        if State::from_byte(byte).is_none() {
            break;
        }
    }
    let _ = wire::read_json::<Params>(&mut &data[..]);
    let _ = wire::read_json::<Results>(&mut &data[..]);
    let _ = wire::is_udp_connect(data);
    let _ = wire::is_udp_connect_reply(data);
    let mut client = Client::new(&[b'a'; wire::COOKIE_LEN], Params::default(), 0);
    let mut server = Server::new(0);
    client.handle_input(1, data);
    server.handle_input(1, data);
    // Past each step that waits on this end, whatever came.
    client.test_done(2, Results::default());
    server.streams_ready(2);
    server.streams_open(2);
    server.results(2, Results::default());
    client.handle_input(3, data);
    server.handle_input(3, data);
    client.handle_eof(4);
    server.handle_eof(4);
    while client.poll_action().is_some() {}
    while server.poll_action().is_some() {}
});
