//! What the kernel sends on a sock_diag socket (model::sockdiag): each datagram decoded
//! into its messages — sockets with their attributes, the end of a dump, errors — or
//! refused with an error naming the byte, never a panic. And the address prefixes of
//! socket filters as a user types them: one that parses prints as itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_model::sockdiag::{messages, Message};
use tcplab_model::sockfilter::Prefix;

fuzz_target!(|data: &[u8]| {
    for message in messages(data, 0) {
        if let Ok((_, Message::Socket(sample))) = message {
            let _ = sample.congestion.map(|c| c.as_str().len());
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(prefix) = text.parse::<Prefix>() {
            assert_eq!(prefix.to_string().parse::<Prefix>(), Ok(prefix));
        }
    }
});
