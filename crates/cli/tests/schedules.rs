//! Paths that change during a test, through a real lab: a rate step as a capture read by
//! tshark sees it, a delay step and a delay trace as ping sees them, and a schedule
//! beyond the test or a trace with a bad line refused before any lab is built.

use crate::support;

use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// When the path's schedule started, µs since the Unix epoch: the test's start on the
/// emulator's clock, moved to the wall clock.
fn schedule_start_unix_us(path: &Value) -> f64 {
    f64_at(path, "/epoch_unix_us") + f64_at(path, "/test_start_us")
}

/// UDP from the server at 100 Mbit/s into a bottleneck of 50 Mbit/s that falls to 20 at
/// 2 s: what reaches the client per 100 ms, from the capture at its interface, is each
/// rate within 1 % from the first whole 100 ms after the change on (the one packet being
/// serialized at the change finishes at the old rate), and before it.
#[test]
fn a_rate_step_is_the_new_rate_from_the_first_whole_100ms_after_it() {
    if !privileged_or_skip("rate_step") || !tshark_or_skip("rate_step") {
        return;
    }
    let _machine = alone();
    // The capture at the client stamps each packet with the time the link model gave it;
    // only a sender kept off the CPU long enough to let the queue run dry can spoil it.
    one_of_three_tries("a rate step through a lab", step_once);
}

fn step_once() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let (db, file) = (dir.path().join("s.db"), dir.path().join("s.pcapng"));
    let run = run_captured(
        &[
            "--path",
            "rtt 20ms rate 50mbit queue 100p at 2s rate 20mbit",
            "-u",
            "-b",
            "100mbit",
            "-R",
            "-t",
            "4",
            "--capture-at",
            "client",
        ],
        &file,
        &db,
    );
    let path = &run["path"];
    assert!(
        str_at(path, "/spec").contains("at 2s rate 20mbit"),
        "{path}"
    );
    // Arrivals at the client: the change leaves the bottleneck at 2 s and arrives one
    // way (10 ms) later.
    let change = schedule_start_unix_us(path) / 1e6 + 2.0 + 0.010;
    let arrivals: Vec<(f64, f64)> = tshark(
        &file,
        "udp && ip.src == 10.77.0.1",
        &["frame.time_epoch", "frame.len"],
    )
    .iter()
    .map(|line| {
        let (t, len) = line.split_once('\t').unwrap();
        (t.parse().unwrap(), len.parse().unwrap())
    })
    .collect();
    let bytes_in = |from: f64| -> f64 {
        arrivals
            .iter()
            .filter(|(t, _)| (from..from + 0.1).contains(t))
            .map(|(_, len)| len)
            .sum()
    };
    let end = arrivals.last().expect("packets reached the client").0;
    let mut checked = 0;
    for (from, until, rate) in [
        // The queue fills within the first half second.
        (change - 1.5, change - 0.1, 50e6),
        (change + 0.1, end - 0.1, 20e6),
    ] {
        let mut t = from;
        while t + 0.1 <= until {
            let bps = bytes_in(t) * 8.0 / 0.1;
            if (bps / rate - 1.0).abs() > 0.01 {
                return Err(format!(
                    "{:.3} s after the change: {bps:.0} bit/s, not {rate}",
                    t - change
                ));
            }
            t += 0.1;
            checked += 1;
        }
    }
    assert!(checked >= 25, "{checked} bins");
    Ok(())
}

/// ping across `rtt 20ms` that becomes `rtt 80ms` at 1 s (asked for every 2 ms, it
/// sends about every 10 ms here): a request sent before 1 s − 10 ms takes 20 ms, one
/// whose reply leaves after the change 50, one sent after it 80, each to within 1 ms of
/// the schedule's time. (Below 100 ms ping prints its round trips to 0.1 ms.)
#[test]
fn ping_sees_a_delay_step_within_a_millisecond_of_its_time() {
    if !privileged_or_skip("delay_step") {
        return;
    }
    let _machine = alone();
    // A request stamped just before the step but kept from the lab by load past it, or
    // a round trip the load lengthened: three tries. None is ever shorter than its path.
    one_of_three_tries("a delay step seen by ping", delay_step_once);
}

fn delay_step_once() -> Result<(), String> {
    let (sent_and_rtt, start_us) = pings(&["--path", "rtt 20ms at 1s rtt 80ms"], "800");
    let step = start_us / 1e6 + 1.0;
    let sent_and_rtt: Vec<(f64, f64)> = sent_and_rtt
        .iter()
        .map(|&(sent, ms)| (sent / 1e6, ms))
        .collect();
    assert!(sent_and_rtt.len() > 700, "{} replies", sent_and_rtt.len());
    let mut by_class: [Vec<f64>; 3] = Default::default();
    for &(sent, ms) in &sent_and_rtt {
        let class = if sent < step - 0.011 {
            0
        } else if sent > step - 0.009 && sent < step - 0.001 {
            1
        } else if sent > step + 0.001 {
            2
        } else {
            continue;
        };
        by_class[class].push(ms);
    }
    for (expected, mut rtts) in [20.0, 50.0, 80.0].into_iter().zip(by_class) {
        if rtts.is_empty() {
            continue;
        }
        rtts.sort_by(f64::total_cmp);
        // The lab adds its own time to the configured round trip and never takes any
        // off (ping prints 0.1 ms); load can add more to some, not to the median.
        assert!(rtts[0] >= expected - 0.05, "{rtts:?} below {expected} ms");
        let median = rtts[rtts.len() / 2];
        if median >= expected + 1.0 {
            return Err(format!("median {median} ms, not {expected}"));
        }
    }
    let last_before = sent_and_rtt
        .iter()
        .filter(|(_, ms)| *ms < 65.0)
        .map(|s| s.0)
        .fold(f64::MIN, f64::max);
    let first_after = sent_and_rtt
        .iter()
        .filter(|(_, ms)| *ms >= 65.0)
        .map(|s| s.0)
        .fold(f64::MAX, f64::min);
    if last_before >= step + 0.001 || first_after <= step - 0.001 {
        return Err(format!(
            "the step between {:.4} and {:.4} s from its time",
            last_before - step,
            first_after - step
        ));
    }
    Ok(())
}

/// The pings a `shell` command printed with `-D`, each as (when it was sent, µs since the
/// Unix epoch; its round trip, ms), and when the path's schedule started (µs since the
/// Unix epoch).
fn pings(args: &[&str], count: &str) -> (Vec<(f64, f64)>, f64) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let out = tcplab()
        .args(["shell"])
        .args(args)
        .arg("--record")
        .arg(&db)
        .args([
            "--",
            "ping",
            "-D",
            "-n",
            "-i",
            "0.002",
            "-c",
            count,
            "10.77.0.1",
        ])
        .output()
        .unwrap();
    assert_success(&out);
    let runs = export_jsonl(&db, "runs");
    let path: Value = json_column(&runs[0], "path_json");
    // "[1795000000.123456] 64 bytes from …: icmp_seq=1 ttl=64 time=20.1 ms": sent at
    // the reply's time less its round trip.
    let sent_and_rtt = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let at: f64 = line.strip_prefix('[')?.split_once(']')?.0.parse().ok()?;
            let ms: f64 = line
                .split_once("time=")?
                .1
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(((at - ms / 1e3) * 1e6, ms))
        })
        .collect();
    (sent_and_rtt, schedule_start_unix_us(&path))
}

/// ping across `rtt 10ms` with a delay trace on the way up, 5 ms for half a second and 30
/// the next, repeating: each request's round trip is 15 or 40 ms by the trace's value
/// when it crossed, to within 1 ms at the median of each half second (requests sent
/// within 1 ms of a step left out).
#[test]
fn ping_sees_a_delay_trace_repeat_step_by_step() {
    if !privileged_or_skip("delay_trace") {
        return;
    }
    let _machine = alone();
    one_of_three_tries("a delay trace seen by ping", delay_trace_once);
}

fn delay_trace_once() -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("up.delays");
    std::fs::write(&trace, "# ms\n0 5ms\n500ms 30ms\n1s\n").unwrap();
    let spec = format!("rtt 10ms up.delay-trace {}", trace.display());
    let (sent_and_rtt, start_us) = pings(&["--path", &spec], "300");
    assert!(sent_and_rtt.len() > 250, "{} replies", sent_and_rtt.len());
    // By half second of the test: its trace value, its round trips.
    let mut halves: std::collections::BTreeMap<i64, Vec<f64>> = Default::default();
    for &(sent, ms) in &sent_and_rtt {
        let since_ms = (sent - start_us) / 1e3;
        if since_ms < 0.0 || (since_ms % 500.0) < 1.0 || (since_ms % 500.0) > 499.0 {
            continue;
        }
        halves
            .entry((since_ms / 500.0) as i64)
            .or_default()
            .push(ms);
    }
    assert!(halves.len() >= 4, "{halves:?}");
    for (half, mut rtts) in halves {
        let expected = if half % 2 == 0 { 15.0 } else { 40.0 };
        rtts.sort_by(f64::total_cmp);
        // Never shorter than the path (ping prints 0.1 ms); load can add to some.
        assert!(
            rtts[0] >= expected - 0.05,
            "half second {half}: {rtts:?} below {expected} ms"
        );
        let median = rtts[rtts.len() / 2];
        if median >= expected + 1.0 {
            return Err(format!(
                "half second {half}: median {median} ms, not {expected}"
            ));
        }
    }
    Ok(())
}

/// A trace with a bad line is one line naming the file and the line, before any lab.
#[test]
fn a_trace_with_a_bad_line_is_refused_before_any_lab() {
    if !privileged_or_skip("bad_trace") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("loss.txt");
    std::fs::write(&trace, "0 1%\n1s 2ms\n2s\n").unwrap();
    let out = tcplab()
        .args(["run", "--path"])
        .arg(format!("rtt 20ms down.loss-trace {}", trace.display()))
        .args(["-t", "1"])
        .output()
        .unwrap();
    assert_eq!(
        failure(&out),
        format!(
            "tcplab: cannot build the lab: trace {}: trace line 2: '2ms': invalid percentage '2ms': unknown unit 'ms' (expected %)",
            trace.display()
        )
    );
    assert!(!stderr(&out).contains("lab run"), "{}", stderr(&out));
}

#[test]
fn a_schedule_beyond_the_test_is_refused_before_any_lab() {
    if !privileged_or_skip("schedule_beyond") {
        return;
    }
    let _machine = among_others();
    let out = tcplab()
        .args([
            "run",
            "--path",
            "rtt 20ms rate 10mbit at 5s rate 5mbit",
            "-t",
            "3",
        ])
        .output()
        .unwrap();
    assert_eq!(
        failure(&out),
        "tcplab: path spec: at 5s is beyond the test's 3s: a change comes before the test ends"
    );
    assert!(!stderr(&out).contains("lab "), "{}", stderr(&out));
}
