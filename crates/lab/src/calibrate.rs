//! Echo round trips from a client host to the server host of a lab, as `ping` measures
//! them: what a lab measures of its own latency when it starts ([`crate::Lab::up`]).

use std::io;
use std::net::IpAddr;
use std::thread;
use std::time::{Duration, Instant};

use tcplab_sys::ping::Pinger;

use crate::Host;

/// How often a waiting read looks at the clock.
const POLL: Duration = Duration::from_millis(5);

/// Sends `count` echo requests from `client` to `server`, `spacing` apart, and waits
/// up to `wait` after the last for the replies; returns the round trips of those that
/// came back, ns.
pub fn echo_rtts(
    client: &Host,
    server: &Host,
    count: u16,
    spacing: Duration,
    wait: Duration,
) -> io::Result<Vec<i64>> {
    let IpAddr::V4(peer) = server.addr else {
        return Err(io::Error::other("the server has no IPv4 address"));
    };
    // A socket stays in the namespace it was made in, whichever thread uses it.
    let pinger = client.ns.try_run(move || Pinger::new(peer, POLL))?;
    let deadline = Instant::now() + spacing * u32::from(count) + wait;
    thread::scope(|scope| {
        let sender = scope.spawn(|| {
            let start = Instant::now();
            for seq in 0..count {
                if let Some(rest) =
                    (start + spacing * u32::from(seq)).checked_duration_since(Instant::now())
                {
                    thread::sleep(rest);
                }
                pinger.send(seq)?;
            }
            Ok::<(), io::Error>(())
        });
        let mut rtts = Vec::with_capacity(usize::from(count));
        while rtts.len() < usize::from(count) && Instant::now() < deadline {
            if let Some(echo) = pinger.receive()? {
                rtts.push(echo.rtt_ns);
            }
        }
        sender.join().expect("echo sender panicked")?;
        Ok(rtts)
    })
}
