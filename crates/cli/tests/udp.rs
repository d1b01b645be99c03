//! UDP flows (issue 5) across lab paths, each figure against the path's configuration:
//! loss inside a binomial interval, one-way delay equal to the configured delay on one
//! clock, RFC 3550 jitter equal to its expectation for uniform delay variation,
//! duplicates, reordering, and the sender's rate.

use crate::support;

use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// `tcplab run --path SPEC --udp ARGS… --json`, asserting success.
fn udp_run(spec: &str, args: &[&str]) -> Value {
    let out = tcplab()
        .args(["run", "--path", spec, "--udp", "--json"])
        .args(args)
        .output()
        .expect("running tcplab run --udp");
    parse_success(&out)
}

fn udp(v: &Value) -> &Value {
    &v["summary"]["udp"]
}

/// Whether the one-way delays can be checked: both ends share a clock in a lab, so the
/// delays are exact unless the wall clock the kernel stamps arrivals with stepped during
/// the flow, which the receiver must then report (and the test says so).
fn owd_exact_or_clock_stepped(u: &Value) -> bool {
    let step = f64_at(u, "/clock_step_us");
    if u["owd_exact"] == true {
        assert!(step <= 50.0, "{u}");
        return true;
    }
    assert!(
        step > 50.0,
        "delays not exact in a lab, and no clock step: {u}"
    );
    println!("the wall clock stepped {step} µs during the flow: delays not checked");
    false
}

/// The RFC 3550 estimate averaged over the report intervals after the first two: each
/// interval's value is the estimator's state at its end, about 16 datagrams deep, so
/// one value alone varies by ±13 %; their mean settles.
fn mean_interval_jitter(v: &Value) -> f64 {
    let values: Vec<f64> = v["intervals"].as_array().unwrap()[2..]
        .iter()
        .map(|i| f64_at(i, "/udp/jitter_us"))
        .collect();
    values.iter().sum::<f64>() / values.len() as f64
}

#[test]
fn loss_and_one_way_delay_equal_the_path() {
    if !privileged_or_skip("udp_loss_owd") {
        return;
    }
    let _machine = alone();
    // 2 % loss on the data direction, 30 ms one way; 20 Mbit/s of 1000-byte datagrams.
    let v = udp_run(
        "up.delay 30ms down.delay 5ms up.loss 2% seed 1",
        &["-b", "20mbit", "-l", "1000", "-t", "3"],
    );
    let u = udp(&v);
    let (sent, lost) = (u64_at(u, "/sent"), u64_at(u, "/lost"));
    let (lo, hi) = binomial99(sent, 0.02);
    assert!(
        (lo..=hi).contains(&(lost as f64)),
        "lost {lost} of {sent}, 99 % interval {lo:.0}..{hi:.0}"
    );
    assert_eq!(u64_at(u, "/received") + lost, sent);
    if owd_exact_or_clock_stepped(u) {
        // The configured one-way delay plus the emulator's lateness (p99 under 1 ms
        // here): the lab holds every datagram for the delay and takes nothing off.
        let p50 = f64_at(u, "/owd_us/p50");
        assert!((30_000.0..31_000.0).contains(&p50), "owd p50 {p50} µs");
        assert!(f64_at(u, "/owd_us/min") >= 30_000.0, "{u}");
    }
    // The emulator saw the same loss: its loss drops are the flow's lost datagrams.
    let dropped = u64_at(&v, "/path/up/links/0/dropped_loss");
    assert!(
        dropped.abs_diff(lost) <= 2,
        "emulator dropped {dropped}, flow lost {lost}"
    );
    assert_eq!(u64_at(u, "/socket_drops"), 0);
}

#[test]
fn rfc3550_jitter_matches_uniform_delay_variation() {
    if !privileged_or_skip("udp_jitter") {
        return;
    }
    let _machine = alone();
    // Delay uniform in 10 ms ± 400 µs, datagrams 1 ms apart (rarely reordered): the
    // transit difference of two datagrams has E|D| = 2 · 400 / 3 = 267 µs, the value
    // RFC 3550's estimator converges to. The emulator's and the sender's own timing
    // noise N add to D: E|D| ≤ E|D + N| ≤ E|D| + E|N|, and E|N| is what the same
    // datagrams see on the path without jitter, just before and after (30–50 µs on a
    // quiet machine, 180 µs on a busy one).
    // Sender and emulator timing is what a loaded machine spoils (one CI run saw the
    // emulator 8.5 ms late and 41 datagrams swapped): one of three tries must hold.
    let args = ["-b", "8mbit", "-l", "1000", "-t", "3", "-i", "0.2"];
    let expected = 2.0 * 400.0 / 3.0;
    one_of_three_tries("jitter", || {
        let noise_before = mean_interval_jitter(&udp_run("delay 10ms", &args));
        let v = udp_run("delay 10ms jitter 400us dist uniform reorder", &args);
        let noise = noise_before.max(mean_interval_jitter(&udp_run("delay 10ms", &args)));
        let jitter = mean_interval_jitter(&v);
        let u = udp(&v);
        assert_eq!(u64_at(u, "/lost"), 0, "{u}");
        if jitter <= expected * 0.9 || jitter >= expected + noise + 30.0 {
            return Err(format!(
                "jitter {jitter:.0} µs, expected {expected:.0} plus up to {noise:.0} of noise"
            ));
        }
        // Delays span the configured 9.6–10.4 ms with the emulator's lateness on top:
        // never below the range, centred on 10 ms. Its upper tail is the emulator's
        // lateness tail on this VM (p99 0.7–1.7 ms above the range in CI runs; issue
        // 3's delay bar), not something the UDP receiver measures wrong.
        if owd_exact_or_clock_stepped(u) {
            assert!(f64_at(u, "/owd_us/min") >= 9_600.0, "{u}");
            let p50 = f64_at(u, "/owd_us/p50");
            if !(9_900.0..10_300.0).contains(&p50) {
                return Err(format!("owd p50 {p50} µs"));
            }
        }
        // Only two datagrams sent closer than 800 µs (a late sender's wake-up) can swap.
        if u64_at(u, "/out_of_order") * 100 >= u64_at(u, "/sent") {
            return Err(format!("over 1 % out of order: {u}"));
        }
        // The summary's figure is the estimator's final state: one value of the same kind.
        let last = f64_at(u, "/jitter_us");
        if last <= expected * 0.6 || last >= (expected + noise) * 1.4 {
            return Err(format!("final jitter {last:.0} µs"));
        }
        Ok(())
    });
}

/// Duplicates and reordering are counted, and nothing is lost. Among others: counts, not
/// times, of 10 Mbit/s that a receiver waiting for 200 ms of quiet after the end gets
/// whole.
#[test]
fn duplicates_and_reordering_are_counted_not_lost() {
    if !privileged_or_skip("udp_dup_reorder") {
        return;
    }
    let _machine = among_others();
    let v = udp_run(
        "delay 5ms up.duplicate 5% up.reorder 20% seed 1",
        &["-b", "10mbit", "-l", "1000", "-t", "2"],
    );
    let u = udp(&v);
    let sent = u64_at(u, "/sent");
    let (lo, hi) = binomial99(sent, 0.05);
    let dups = u64_at(u, "/duplicates") as f64;
    assert!(
        (lo..=hi).contains(&dups),
        "{dups} duplicates of {sent}, interval {lo:.0}..{hi:.0}"
    );
    assert!(u64_at(u, "/out_of_order") > 0, "{u}");
    assert_eq!(u64_at(u, "/lost"), 0, "{u}");
    assert_eq!(u64_at(u, "/received"), sent);
}

#[test]
fn the_sender_keeps_its_rate_in_both_directions() {
    if !privileged_or_skip("udp_rate") {
        return;
    }
    let _machine = alone();
    for reverse in [false, true] {
        let mut args = vec!["-b", "40mbit", "-t", "3"];
        if reverse {
            args.push("-R");
        }
        // A sender kept off the CPU falls short, and says so in `unsent`.
        one_of_three_tries(&format!("reverse {reverse}"), || {
            let v = udp_run("rtt 2ms", &args);
            let f = &flows(&v)[0];
            assert_eq!(u64_at(udp(&v), "/lost"), 0, "{v}");
            assert_eq!(str_at(f, "/direction"), if reverse { "down" } else { "up" });
            // Intervals account for every datagram the sender sent.
            let sent: u64 = v["intervals"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| u64_at(i, "/udp/sent"))
                .sum();
            assert_eq!(sent, u64_at(udp(&v), "/sent"));
            let rate = f64_at(f, "/sent_bps");
            if (rate / 40e6 - 1.0).abs() < 0.01 {
                Ok(())
            } else {
                Err(format!("{rate} bit/s, {}", udp(&v)))
            }
        });
    }
}

#[test]
fn configured_bursts_arrive_whole_at_the_bottleneck() {
    if !privileged_or_skip("udp_bursts") {
        return;
    }
    let _machine = alone();
    // 20 Mbit/s of 1000-byte datagrams into a 50 Mbit/s link: evenly spaced, each
    // finds the link idle; in bursts of 10 sent together (1–5 µs apart, a capture of
    // the sender shows), they arrive in trains of 10 (the sender catches up at twice
    // its rate, never merging bursts). The emulator joins two datagrams when it reads
    // them within half a datagram's time at the link (82 µs) less its reads' 25 µs lag;
    // at 100 Mbit/s that leaves 16 µs, less than its own wake-ups stretch a burst's
    // gaps (20–40 µs), and it splits them.
    //
    // Each try: the longest trains are the bursts, whole (p99 = the burst: the sender
    // sent them together, and never merged two), and the mean is well above a lone
    // datagram's. Not the whole burst on average: a run whose real-time emulator
    // thread shares the sender's CPU preempts the sender after each datagram of its
    // sendmmsg, and in a debug build its cycle spaces them 42 µs apart at the median
    // (measured on a day this VM woke late: runs bimodal, trains of 9–10 or of 3.6–5.6
    // with p99 10 either way); a preempted sending thread does the same (mean 7.3
    // beside a sweep).
    for (burst, size) in [("1", 1.0), ("10", 10.0)] {
        one_of_three_tries(&format!("--burst {burst}"), || {
            let v = udp_run(
                "rtt 4ms rate 50mbit",
                &["-b", "20mbit", "-l", "1000", "-t", "2", "--burst", burst],
            );
            assert_eq!(u64_at(udp(&v), "/lost"), 0);
            let bursts = &v["path"]["up"]["bursts"];
            let udp_flow = bursts
                .as_array()
                .unwrap()
                .iter()
                .find(|b| str_at(b, "/flow").starts_with("udp"))
                .unwrap_or_else(|| panic!("{bursts}"));
            let (mean, p99) = (
                f64_at(udp_flow, "/burst_mean"),
                f64_at(udp_flow, "/burst_p99"),
            );
            let rate = f64_at(&flows(&v)[0], "/sent_bps");
            if (rate / 20e6 - 1.0).abs() >= 0.01 {
                Err(format!("sent {rate} bit/s"))
            } else if p99 != size || mean < size.min(2.5) || mean > size * 1.2 {
                Err(format!("bursts at the bottleneck mean {mean}, p99 {p99}"))
            } else {
                Ok(())
            }
        });
    }
}

/// A sender stopped for 300 ms (SIGSTOP, as a machine starved of CPU would) cannot keep
/// its rate, and must say so. The reference is the configured rate × duration: 8 Mbit/s
/// of 1000-byte datagrams is one per ms, 3000 in 3 s; `sent` + `unsent` must add up to
/// it (less the few ms before the sender's first datagram), and the stop must show as
/// `late` and as at least its 300 datagrams less the one batch sent on waking.
#[test]
fn a_stopped_sender_counts_what_it_never_sent() {
    let _machine = alone();
    let server = LoopbackServer::start(&[]);
    let child = server
        .client(&["--udp", "-b", "8mbit", "-l", "1000", "-t", "3", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    std::thread::sleep(std::time::Duration::from_millis(1000));
    // SAFETY: signals to the child this test started and still owns.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(std::time::Duration::from_millis(300));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let v = parse_success(&child.wait_with_output().unwrap());
    let u = udp(&v);
    let (sent, unsent, late) = (u64_at(u, "/sent"), u64_at(u, "/unsent"), u64_at(u, "/late"));
    assert!(
        (2970..=3001).contains(&(sent + unsent)),
        "sent {sent} + unsent {unsent}: {u}"
    );
    assert!(late >= 1, "{u}");
    assert!((299..600).contains(&unsent), "{u}");
    // What was sent arrived (loopback): the shortfall is the sender's, not the path's.
    assert_eq!(u64_at(u, "/lost"), 0, "{u}");
}

/// A UDP run's text shows what applies to UDP only: no MSS, congestion control,
/// retransmits or tcp_info samples, no window, RTT or limit columns, and no interval of
/// no length (the one after the deadline, when nothing arrived then). Alone: beside
/// others, a late sender made a third interval.
#[test]
fn a_udp_summary_prints_only_what_applies_to_udp() {
    let _machine = alone();
    let server = LoopbackServer::start(&[]);
    let out = server.run(&["--udp", "-b", "10mbit", "-t", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "[flow]         interval    throughput   datagrams, jitter"
    );
    let (drains, intervals): (Vec<&str>, Vec<&str>) = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("[   0]") && l.contains(" s  "))
        .partition(|l| l.contains("drain (after the deadline"));
    assert_eq!(intervals.len(), 2, "{text}");
    for line in &intervals {
        let (start, end) = line[7..].split_once('-').unwrap();
        let end = end.split_once(" s").unwrap().0;
        assert_ne!(start.trim(), end.trim(), "{line}");
    }
    // After the deadline, an interval only for datagrams that were still on their way
    // then (loopback delivers them within a millisecond).
    for line in &drains {
        let received: u64 = line
            .split(" sent, ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(received > 0, "an empty drain interval: {line}");
    }
    let setup = lines
        .iter()
        .find(|l| l.starts_with("[   0]  up"))
        .expect("the flow's setup line");
    assert!(
        setup.starts_with("[   0]  up    udp          -  "),
        "{setup}"
    );
    let summary = lines
        .iter()
        .find(|l| l.starts_with("[   0]  sent "))
        .expect("the flow's summary");
    assert!(
        !summary.contains("retr") && !summary.contains("samples"),
        "{summary}"
    );
    let total = lines.iter().find(|l| l.starts_with("total:")).unwrap();
    assert!(!total.contains("retransmits"), "{total}");
}
