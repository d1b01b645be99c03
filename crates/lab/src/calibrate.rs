//! Echo round trips from a client host to the server host of a lab, as `ping` measures
//! them: what a lab measures of its own latency when it starts ([`crate::Lab::up`]).

use std::io;
use std::net::IpAddr;
use std::thread;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tcplab_sys::ping::Pinger;

use crate::Host;

/// How often a waiting read looks at the clock.
const POLL: Duration = Duration::from_millis(5);

/// Sends `count` echo requests from `client` to `server`, one at a time: each after the
/// previous one's reply (or `wait` without one) and a pause of `spacing` on average,
/// so that every echo finds the emulator asleep, as a user's ping does. Returns the
/// round trips of those that came back, ns. The pauses vary from half to one and a half
/// times their mean, in a fixed sequence.
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
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(count));
    let mut rtts = Vec::with_capacity(usize::from(count));
    for seq in 0..count {
        pinger.send(seq)?;
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            match pinger.receive()? {
                Some(echo) if echo.seq == seq => {
                    rtts.push(echo.rtt_ns);
                    break;
                }
                _ => {}
            }
        }
        thread::sleep(spacing.mul_f64(rng.random_range(0.5..1.5)));
    }
    Ok(rtts)
}
