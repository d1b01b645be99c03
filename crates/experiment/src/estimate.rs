//! How long a run of a point takes, before it runs: the figure of `sweep --dry-run`.
//!
//! A run costs its lab and its storing, then each test (flow group) takes, from its start
//! offset: the control protocol's round trips over the emulated path (handshake, one
//! connection per data flow, the reports at the end; a lab's ends read one clock, so no
//! clock probes), its sending time, and after a timed TCP test the drain of its senders'
//! backlog. A real host's path is not known beforehand: its round trips count as none. The constants are measured
//! (release build, 2 vCPUs); docs/studies.md lists real sweeps of examples/quick against the
//! estimate.

use std::time::Duration;

use tcplab_analysis::throughput::drain_limit_us;
use tcplab_model::experiment::{FlowConfig, FlowEnds, Point};
use tcplab_netsim::path::{Loss, PathSpec};
use tcplab_record::{Mode, TestEnd};
use tcplab_traffic::udp::QUIET_AFTER_END_US;

/// A run's cost besides its tests: the lab up and down, the server, storing the run.
/// The sweep prints the median of this (wall time minus the tests'): 10–21 ms in sweeps
/// of 1 s runs here.
pub const RUN_OVERHEAD: Duration = Duration::from_millis(20);

/// Round trips of a test's control protocol in a lab besides its data connections:
/// connecting, the hellos with the challenge, authentication (whose Welcome is the clock
/// exchange on one clock), Start and Accepted, the data connections' introductions and
/// Ready, and the reports and samples at the end (one or two round trips). Measured: `-t 2s` through `rtt 50ms`, Go at
/// 6 round trips with one data connection, the server's samples in 2 more.
pub const CONTROL_RTTS: u64 = 7;

/// About how long a sweep of these runs (each given by its point) takes.
pub fn plan_time<'a>(runs: impl IntoIterator<Item = &'a Point>) -> Duration {
    runs.into_iter().map(run_time).sum()
}

/// About how long one run of `point` takes.
pub fn run_time(point: &Point) -> Duration {
    let c = &point.config;
    let tests = c
        .flows
        .iter()
        .map(|f| {
            // A topology's flows: its links are not a dumbbell's path and access.
            let access = match f.ends {
                FlowEnds::Dumbbell { client } => c.access.get(usize::from(client) - 1),
                FlowEnds::Topology { .. } => None,
            };
            test_time_us(f, &c.path, access, c.duration_us)
        })
        .max()
        .unwrap_or(c.duration_us);
    RUN_OVERHEAD + Duration::from_micros(tests)
}

/// From the run's start to the end of one flow group's test, µs. A byte count is taken
/// to last the run's duration; a command, its time limit (the most it can take).
fn test_time_us(flow: &FlowConfig, path: &PathSpec, access: Option<&PathSpec>, run_us: u64) -> u64 {
    if let Some(command) = &flow.command {
        return flow.start_us + command.limit_us;
    }
    let rtt_us = path.rtt_us() + access.map_or(0, PathSpec::rtt_us);
    let p = &flow.params;
    let directions = if p.mode == Mode::Bidir { 2 } else { 1 };
    let connections = u64::from(p.streams) * directions;
    let control_us = (CONTROL_RTTS + connections) * rtt_us;
    let (sending_us, timed) = match p.end {
        TestEnd::Duration { us } => (us, true),
        TestEnd::Bytes { .. } => (run_us, false),
    };
    let after_us = match (p.udp.is_some(), timed) {
        // A UDP receiver stops once nothing arrived for a while after the end.
        (true, _) => QUIET_AFTER_END_US as u64 + rtt_us / 2,
        (false, false) => rtt_us,
        (false, true) => drain_us(rtt_us, lossy(path) || access.is_some_and(lossy)),
    };
    // Probes measure the idle path before the load starts.
    let idle_us = p.probe.map_or(0, |probe| probe.idle_us);
    flow.start_us + control_us + idle_us + sending_us + after_us
}

/// What a timed TCP test's senders take after the deadline, µs. Loss holds the window
/// below what an autotuned send buffer holds, so a lossy path's backlog runs to the
/// drain limit (measured: 0.5 s of every 0.5 % or 5 % loss run); elsewhere drains took
/// from nothing to the limit, so half of it.
fn drain_us(rtt_us: u64, lossy: bool) -> u64 {
    let limit = drain_limit_us(rtt_us.min(u64::from(u32::MAX)) as u32);
    if lossy {
        limit
    } else {
        limit / 2
    }
}

/// Whether either direction of `path` loses or corrupts packets.
fn lossy(path: &PathSpec) -> bool {
    [&path.up, &path.down]
        .iter()
        .any(|l| l.loss != Loss::None || !l.corrupt.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_model::experiment::parse;

    fn point(text: &str) -> Point {
        parse(text, "t").unwrap().points.remove(0)
    }

    #[test]
    fn a_run_costs_its_lab_its_round_trips_its_duration_and_its_drain() {
        let rtt_100 = point("duration = \"2s\"\npath = \"rtt 100ms\"\n[[flow]]\nstreams = 4\n");
        // 20 ms + (7 + 4) × 100 ms + 2 s + half of the 0.5 s drain limit: a lab's ends
        // read one clock.
        assert_eq!(
            run_time(&rtt_100),
            Duration::from_millis(20 + 1100 + 2000 + 250)
        );
        let lossy = point("duration = \"2s\"\npath = \"rtt 50ms loss 0.5%\"\n");
        assert_eq!(
            run_time(&lossy),
            Duration::from_millis(20 + 400 + 2000 + 500)
        );
    }

    #[test]
    fn the_latest_group_ends_the_run() {
        let p = point(
            "duration = \"3s\"\npath = \"rtt 10ms\"\n\
             [[flow]]\nname = \"bulk\"\n\
             [[flow]]\nname = \"late\"\nstart = \"1s\"\nduration = \"1s\"\nprotocol = \"udp\"\nrate = \"1mbit\"\n",
        );
        // The bulk flow: 8 round trips, 3 s, half the drain limit; the UDP flow ends at
        // 1 s + 8 round trips + 1 s + 0.2 s + half a round trip, sooner.
        assert_eq!(run_time(&p), Duration::from_millis(20 + 80 + 3000 + 250));
    }

    #[test]
    fn a_command_takes_at_most_its_time_limit() {
        let p = point(
            "duration = \"3s\"\npath = \"rtt 100ms\"\n\
             [[flow]]\nprotocol = \"command\"\ncommand = \"true\"\nstart = \"1s\"\nduration = \"30s\"\n",
        );
        assert_eq!(run_time(&p), Duration::from_millis(20 + 1000 + 30_000));
    }
}
