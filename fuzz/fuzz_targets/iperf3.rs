//! What an iperf3 peer sends: its state bytes, its parameters and results as
//! length-prefixed JSON, and its UDP connect datagram and reply. Any bytes are read or
//! refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_traffic::iperf3::wire::{self, Params, Results, State};

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
});
