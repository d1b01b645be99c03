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

/// Sends `count` echo requests from `client` to `server`, `spacing` apart on average,
/// and waits up to `wait` after the last for the replies; returns the round trips of
/// those that came back, ns. The spacing varies from half to one and a half times its
/// mean, so echoes never fall into step with the round trip (an echo sent just as the
/// previous one is delivered finds the emulator awake).
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
    let deadline = Instant::now() + spacing.mul_f64(1.5) * u32::from(count) + wait;
    thread::scope(|scope| {
        let sender = scope.spawn(|| {
            // A fixed sequence of gaps: the same calibration every time.
            let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(count));
            for seq in 0..count {
                pinger.send(seq)?;
                thread::sleep(spacing.mul_f64(rng.random_range(0.5..1.5)));
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
