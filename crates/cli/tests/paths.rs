//! The emulated path's accuracy (issue 3), each number checked against an independent
//! reference: ping, the kernel's TCP, the configured spec, binomial statistics and
//! textbook formulas.

use crate::support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// IPv4 + TCP with timestamps: what a full segment adds to the MSS on the wire.
const HEADERS: f64 = 20.0 + 20.0 + 12.0;

fn traces() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces")
}

/// `tcplab run --path SPEC ARGS… --json`, asserting success.
fn run_path(spec: &str, args: &[&str]) -> Value {
    let out = tcplab()
        .args(["run", "--path", spec])
        .args(args)
        .arg("--json")
        .output()
        .expect("running tcplab run --path");
    parse_success(&out)
}

fn bottleneck<'a>(stats: &'a Value, dir: &str) -> &'a Value {
    let links = stats[dir]["links"].as_array().expect("links");
    links
        .iter()
        .find(|l| l["name"] == "bottleneck")
        .unwrap_or_else(|| panic!("no bottleneck in {links:?}"))
}

/// What `lab show` prints of a lab.
fn shown(lab: &str) -> String {
    let out = tcplab().args(["lab", "show", lab]).output().unwrap();
    assert_success(&out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The least round trip a lab says it gives, ms: from the line `lab show` prints,
/// "every round trip takes at least the path's 200 µs: …".
fn said_floor_ms(text: &str) -> f64 {
    let floor = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("every round trip takes at least the path's ")
        })
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no floor in {text}"));
    tcplab_record::units::parse_duration(&floor.replace(' ', ""))
        .unwrap_or_else(|e| panic!("{floor}: {e}")) as f64
        / 1e3
}

/// The lab holds every packet for its delays and takes nothing off, so no echo through
/// an idle lab comes back sooner than the round trip the lab says is its least — the
/// configured one — at 0.2 ms (the bar), 0.5, 2, 20 and 100 ms, on every try (load only
/// slows packets down). The lab's own time comes on top: an idle echo's on average
/// within 0.5 ms of the configured round trip, in one of three tries (idle CPUs held
/// awake: 0.2–0.3 ms here; asleep, it was 0.3–0.55).
#[test]
fn no_echo_crosses_an_idle_lab_faster_than_the_floor_it_says() {
    if !privileged_or_skip("ping_floor") {
        return;
    }
    let _machine = alone();
    for (n, rtt_ms) in [0.2, 0.5, 2.0, 20.0, 100.0].into_iter().enumerate() {
        let mut attempt = 0;
        one_of_three_tries(&format!("rtt {rtt_ms} ms"), || {
            attempt += 1;
            let lab = LabGuard::up(
                &lab_name("pr", 10 * n as u32 + attempt),
                &["--path", &format!("rtt {rtt_ms}ms")],
            );
            let text = shown(&lab.name);
            let floor = said_floor_ms(&text);
            assert_eq!(floor, rtt_ms, "the floor said is the configured round trip");
            assert!(
                text.contains("lateness") && !text.contains("CPUs may sleep"),
                "as root, the emulator holds idle CPUs awake: {text}"
            );
            let echoes = ping(&lab.client_ns(), &["-c", "60", "-i", "0.02"], "10.77.0.1");
            let (sent, received, rtt) = ping_summary(&echoes);
            assert_eq!((sent, received), (60, 60), "{echoes}");
            let [min, avg, _, _] = rtt.unwrap();
            println!("rtt {rtt_ms} ms: ping min {min:.3} avg {avg:.3} ms, floor {floor} ms");
            assert!(
                min >= floor,
                "ping min {min} ms below the floor of {floor} ms"
            );
            if avg > rtt_ms + 0.5 {
                return Err(format!("ping avg {avg:.3} ms against {rtt_ms} ms"));
            }
            Ok(())
        });
    }
}

/// What TCP measures of the round trip (tcpi_min_rtt, from the sender's samples) is
/// never below the base RTT explain gives (the configured one), and within 3 % of it
/// at 0.5, 2 and 20 ms, or explain names the difference with TCP's own figure.
#[test]
fn tcp_min_rtt_is_the_base_rtt_or_explain_names_the_difference() {
    if !privileged_or_skip("tcp_min_rtt") {
        return;
    }
    // Heavy, yet among others: exact checks, and no test alone runs beside it.
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    for (k, rtt) in ["500us", "2ms", "20ms"].into_iter().enumerate() {
        let db = dir.path().join(format!("min{k}.db"));
        let spec = format!("rtt {rtt}");
        let v = run_path(
            &spec,
            &["-t", "1s", "--json-samples", "--db", db.to_str().unwrap()],
        );
        let kernel_min_us = v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["host"] == "client")
            .map(|s| u64_at(s, "/info/min_rtt"))
            .filter(|&r| r > 0)
            .min()
            .expect("the sender's samples");
        let out = tcplab()
            .args(["explain", "--db", db.to_str().unwrap(), "--json"])
            .output()
            .unwrap();
        let e = parse_success(&out);
        let base_us = u64_at(&e, "/path/base_rtt_us");
        let configured_us = tcplab_record::units::parse_duration(rtt).unwrap();
        assert_eq!(base_us, configured_us, "{e}");
        let named: Vec<&str> = e["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == FindingKind::MinRtt.name())
            .map(|f| f["message"].as_str().unwrap())
            .collect();
        println!("{spec}: tcpi_min_rtt {kernel_min_us} µs, base {base_us} µs: {named:?}");
        assert!(
            kernel_min_us >= base_us,
            "{spec}: TCP's {kernel_min_us} µs below the floor"
        );
        let off = (kernel_min_us - base_us) as f64 / base_us as f64;
        if off > 0.03 {
            let said = format!(
                "TCP's shortest round trip (tcpi_min_rtt) was {}, ",
                tcplab_record::units::format_duration_us(kernel_min_us)
            );
            assert!(
                named.len() == 1
                    && named[0].starts_with(&said)
                    && named[0].contains("above the path's base RTT"),
                "{spec}: {off:.3} off, findings {named:?}"
            );
        } else {
            assert!(named.is_empty(), "{spec}: {off:.3} off, findings {named:?}");
        }
    }
}

/// TCP through a `rate` link delivers the rate, less headers. The link counts IP bytes,
/// so a full segment of MSS payload costs MSS + 52 bytes (IP 20, TCP 20, timestamps
/// 12) and the goodput of a busy link is rate × MSS / (MSS + 52). Drops at the queue
/// entry cost no link time, so retransmissions do not lower that figure.
///
/// The reference is the sender's acknowledged bytes in the whole report intervals
/// after the first second (slow start and its losses are over; the last, partial
/// interval is the drain): acknowledged bytes have crossed the link, and the sender's
/// intervals are cut on one clock. Measured in debug builds: within ±0.2 % at 20 and
/// 100 Mbit/s over 3 s (per-second figures within ±0.5 %).
fn tcp_reaches_rate(mbit: u64) {
    // A stall of this shared 2-core machine (a build, a slow timer) can only take link
    // time away, never add it: every attempt must stay under rate + 1 %, and the best
    // of three must come within 1 % of it.
    let mut errors = Vec::new();
    for _ in 0..3 {
        let error = tcp_rate_error(mbit);
        assert!(
            error <= 0.01,
            "goodput above the rate by {:+.2} %",
            error * 100.0
        );
        if error >= -0.01 {
            return;
        }
        errors.push(format!("{:+.2} %", error * 100.0));
    }
    panic!("goodput short of the rate in every attempt: {errors:?}");
}

/// One run through `rate {mbit}mbit`: goodput's relative error against the link rate.
fn tcp_rate_error(mbit: u64) -> f64 {
    let spec = format!("rate {mbit}mbit queue 1bdp rtt 4ms");
    let v = run_path(&spec, &["-t", "4s"]);
    let flow = &flows(&v)[0];
    let mss = f64_at(flow, "/mss");
    let expected = mbit as f64 * 1e6 * mss / (mss + HEADERS);
    let intervals = v["intervals"].as_array().unwrap();
    let last_start = intervals
        .iter()
        .map(|i| u64_at(i, "/start_us"))
        .max()
        .unwrap();
    let steady: Vec<&Value> = intervals
        .iter()
        .filter(|i| u64_at(i, "/start_us") >= 900_000 && u64_at(i, "/start_us") < last_start)
        .collect();
    assert!(steady.len() >= 2, "{intervals:#?}");
    let bytes: u64 = steady.iter().map(|i| u64_at(i, "/acked_bytes")).sum();
    let span_us = u64_at(steady.last().unwrap(), "/end_us") - u64_at(steady[0], "/start_us");
    let goodput = bytes as f64 * 8.0 / (span_us as f64 / 1e6);
    let error = goodput / expected - 1.0;
    println!(
        "rate {mbit}mbit: goodput {:.3} Mbit/s over {:.2} s, expected {:.3} (MSS {mss}): {:+.3} %",
        goodput / 1e6,
        span_us as f64 / 1e6,
        expected / 1e6,
        error * 100.0
    );
    // The link's own counters agree that it carried IP packets of MSS + 52 bytes.
    let link = bottleneck(&v["path"], "up");
    assert!(u64_at(link, "/delivered_bytes") > bytes);
    assert_eq!(u64_at(link, "/dropped_loss"), 0);
    error
}

#[test]
fn tcp_reaches_a_20mbit_rate_within_one_percent() {
    if !privileged_or_skip("tcp_reaches_20mbit") {
        return;
    }
    let _machine = alone();
    tcp_reaches_rate(20);
}

#[test]
fn tcp_reaches_a_100mbit_rate_within_one_percent() {
    if !privileged_or_skip("tcp_reaches_100mbit") {
        return;
    }
    let _machine = alone();
    tcp_reaches_rate(100);
}

/// `tcplab shell --path SPEC -- ping` 500 times at 2 ms: the seed the lab printed on
/// stderr and the icmp_seq numbers that got no reply.
fn lost_pings(spec: &str) -> (u64, std::collections::BTreeSet<u64>) {
    const N: u64 = 500;
    let out = tcplab()
        .args(["shell", "--path", spec, "--", "sh", "-c"])
        .arg(format!("ping -c {N} -i 0.002 -W 1 $TCPLAB_SERVER"))
        .output()
        .expect("running tcplab shell");
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // lab sh123: path "rtt 1ms loss 10% seed 4242"
    let seed = err
        .lines()
        .find_map(|l| l.split(" seed ").nth(1))
        .and_then(|rest| rest.trim_end_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("no seed printed: {err}"));
    assert_eq!(ping_summary(&text).0, N, "{text}");
    let replied: std::collections::BTreeSet<u64> = text
        .lines()
        .filter_map(|l| l.split("icmp_seq=").nth(1)?.split(' ').next()?.parse().ok())
        .collect();
    (seed, (1..=N).filter(|k| !replied.contains(k)).collect())
}

/// Randomness is independent unless pinned: two labs without `seed` draw their own
/// seeds and lose different pings; `seed N` with the seed a lab printed loses exactly
/// the pings that lab lost. Loss both ways loses a ping with 1 − 0.9² = 19 %: the 1000
/// unpinned pings lose a count inside the 99 % binomial interval.
#[test]
fn labs_draw_their_own_seed_and_a_printed_seed_repeats_the_draws() {
    if !privileged_or_skip("seeds") {
        return;
    }
    let _machine = alone();
    let (seed_a, lost_a) = lost_pings("rtt 1ms loss 10%");
    let (seed_b, lost_b) = lost_pings("rtt 1ms loss 10%");
    let (seed_c, lost_c) = lost_pings(&format!("rtt 1ms loss 10% seed {seed_a}"));
    println!(
        "seed {seed_a}: {} lost, seed {seed_b}: {} lost, pinned {seed_c}: {} lost, {} in common between the first two",
        lost_a.len(),
        lost_b.len(),
        lost_c.len(),
        lost_a.intersection(&lost_b).count()
    );
    assert_ne!(seed_a, seed_b);
    assert_ne!(lost_a, lost_b, "two unpinned labs lost the same pings");
    assert_eq!(seed_c, seed_a);
    assert_eq!(lost_c, lost_a, "the same seed lost other pings");
    let lost = (lost_a.len() + lost_b.len()) as f64;
    let (lo, hi) = binomial99(1000, 0.19);
    assert!(
        (lo..=hi).contains(&lost),
        "{lost} of 1000 pings lost, 99 % interval {lo:.0}–{hi:.0}"
    );
}

/// Bernoulli loss on the up link only: a lost echo request is a lost ping, and the
/// replies travel a lossless down link. The path pins its seed, so the draw is
/// reproducible; a correct model falls inside the 99 % interval for 99 % of seeds.
#[test]
fn random_loss_falls_inside_a_99_percent_binomial_interval() {
    if !privileged_or_skip("random_loss") {
        return;
    }
    let _machine = alone();
    let lab = LabGuard::up(&lab_name("pl", 1), &["--path", "up.loss 5% seed 1"]);
    let n = 4000;
    let text = ping(
        &lab.client_ns(),
        &[
            "-q",
            "-c",
            &n.to_string(),
            "-i",
            "0.0002",
            "-l",
            "10",
            "-W",
            "1",
        ],
        "10.77.0.1",
    );
    let (sent, received, _) = ping_summary(&text);
    assert_eq!(sent, n);
    let lost = n - received;
    let (lo, hi) = binomial99(n, 0.05);
    println!("loss 5%: ping lost {lost} of {n} (99 % interval {lo:.0}–{hi:.0})");
    assert!((lo..=hi).contains(&(lost as f64)), "{lost} lost of {n}");

    // The emulator publishes its counters every 20 ms: wait until they cover the pings.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let show = loop {
        let show = lab.show();
        if u64_at(bottleneck(&show, "up"), "/packets_in") >= n
            || std::time::Instant::now() > deadline
        {
            break show;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let up = bottleneck(&show, "up");
    let (pin, dropped) = (u64_at(up, "/packets_in"), u64_at(up, "/dropped_loss"));
    assert!(pin >= n, "the link saw {pin} packets for {n} pings");
    let (lo, hi) = binomial99(pin, 0.05);
    println!("loss 5%: link dropped {dropped} of {pin} (99 % interval {lo:.0}–{hi:.0})");
    assert!((lo..=hi).contains(&(dropped as f64)), "{dropped} of {pin}");
    // Every echo the link dropped is a lost ping (the link also carried a few of the
    // host's own packets, pin − n). A ping may also die outside the link — the TUN
    // queue overflowing while a debug build falls behind — but only rarely.
    assert!(
        lost + (pin - n) >= dropped,
        "{dropped} dropped vs {lost} lost"
    );
    assert!(
        lost <= dropped + n / 100,
        "{lost} lost vs {dropped} dropped"
    );
    assert_eq!(u64_at(bottleneck(&show, "down"), "/dropped_loss"), 0);
}

/// Gilbert–Elliott with 1-h = 100 %: a loss burst is a stay in the bad state, geometric
/// with mean 1/r; the stationary loss is p/(p+r). 20 000 echoes give ~190 bursts (ping
/// with `-l 10` keeps sending past a lost reply, ~0.7 s in all). The seed is pinned, so
/// the draw is reproducible.
#[test]
fn gilbert_elliott_bursts_have_the_textbook_length_and_rate() {
    if !privileged_or_skip("gilbert_elliott") {
        return;
    }
    let _machine = alone();
    let (p, r): (f64, f64) = (0.01, 0.30);
    let lab = LabGuard::up(
        &lab_name("pg", 1),
        &["--path", "up.loss gemodel 1% 30% seed 1"],
    );
    let n: u64 = 20_000;
    let text = ping(
        &lab.client_ns(),
        &["-c", &n.to_string(), "-i", "0.0001", "-l", "10", "-W", "1"],
        "10.77.0.1",
    );
    let replies = ping_replies(&text);
    let mut bursts = Vec::new();
    let mut run = 0u64;
    for seq in 1..=n {
        if replies.contains(&seq) {
            if run > 0 {
                bursts.push(run);
            }
            run = 0;
        } else {
            run += 1;
        }
    }
    if run > 0 {
        bursts.push(run);
    }
    let lost: u64 = bursts.iter().sum();
    let k = bursts.len() as f64;
    assert!(k >= 100.0, "only {k} bursts");
    let mean = lost as f64 / k;
    // Geometric: σ = √(1−r)/r; the mean of k bursts has σ/√k.
    let half = Z99 * (1.0 - r).sqrt() / r / k.sqrt();
    let loss = lost as f64 / n as f64;
    let pi = p / (p + r);
    // Correlated draws: the variance of the loss fraction grows by (1+λ)/(1−λ), λ = 1−p−r.
    let lambda = 1.0 - p - r;
    let loss_half = Z99 * (pi * (1.0 - pi) / n as f64 * (1.0 + lambda) / (1.0 - lambda)).sqrt();
    println!(
        "gemodel 1% 30%: {k} bursts, mean {mean:.3} (1/r = {:.3} ± {half:.3}), loss {:.3} % (p/(p+r) = {:.3} ± {:.3} %)",
        1.0 / r,
        loss * 100.0,
        pi * 100.0,
        loss_half * 100.0
    );
    assert!((mean - 1.0 / r).abs() <= half, "mean burst {mean}");
    assert!((loss - pi).abs() <= loss_half, "loss {loss}");
    // The link counted the same losses (plus at most its few non-echo packets).
    let show = lab.show();
    let up = bottleneck(&show, "up");
    let (pin, dropped) = (u64_at(up, "/packets_in"), u64_at(up, "/dropped_loss"));
    assert!(
        dropped >= lost && dropped - lost <= pin - n,
        "{dropped} vs {lost}"
    );
}

/// A drop-tail queue of N packets bounds queueing delay at N × MTU / rate, so ping under
/// a bulk transfer sees at most base RTT + that (plus the packet in service, the echo's
/// own serialization, 1 ms for ping and the emulator's recorded lateness), and, the queue filling, more than
/// base + half of it. The flow uses cubic: the labs' default (bbr here) keeps the queue
/// nearly empty (measured max 21.7 ms), cubic's sawtooth fills it.
#[test]
fn the_queue_limit_bounds_rtt_inflation() {
    if !privileged_or_skip("queue_bounds_rtt") {
        return;
    }
    let _machine = alone();
    let lab = LabGuard::up(
        &lab_name("pq", 1),
        &["--path", "rtt 10ms rate 20mbit queue 50p"],
    );
    let mut server = serve_in(&lab.server_ns(), &lab.client_ns());
    let mut client = tcplab()
        .args([
            "--netns",
            &lab.client_ns(),
            "run",
            "10.77.0.1",
            "-t",
            "3s",
            "-C",
            "cubic",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let text = ping(&lab.client_ns(), &["-c", "40", "-i", "0.05"], "10.77.0.1");
    let status = client.wait().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(status.success(), "tcplab run failed");
    let (_, received, rtt) = ping_summary(&text);
    assert!(received >= 30, "{text}");
    let [min, _, max, _] = rtt.unwrap();
    let queue_ms = 50.0 * 1500.0 * 8.0 / 20e6 * 1e3;
    let in_service_ms = 1500.0 * 8.0 / 20e6 * 1e3;
    let echo_ms = 84.0 * 8.0 / 20e6 * 1e3;
    // The emulator's own lateness (a busy CI machine deschedules it) delays an echo
    // beyond the queue: its recorded worst, each way, widens the bound. A queue limit
    // that failed would leave cubic's sawtooth hundreds of milliseconds, not a few.
    let late_ms = lab.lateness_ms("max_us");
    let bound = 10.0 + queue_ms + in_service_ms + echo_ms + 1.0 + late_ms;
    println!(
        "queue 50p at 20mbit: ping min {min:.2} / max {max:.2} ms, bound {bound:.2} ms (base 10 + queue {queue_ms:.1} + emulator lateness {late_ms:.2})"
    );
    assert!(max <= bound, "ping max {max} ms above the bound {bound} ms");
    assert!(
        max > 10.0 + queue_ms / 2.0,
        "queue never filled: max {max} ms"
    );
    assert!(min >= 10.0, "{min}");
    let show = lab.show();
    let up = bottleneck(&show, "up");
    let max_queue = u64_at(up, "/max_queue_bytes");
    println!("max_queue_bytes {max_queue}");
    assert!(max_queue <= 50 * 1500, "max queue {max_queue} B");
    assert!(max_queue > 25 * 1500, "max queue {max_queue} B");
    assert!(u64_at(up, "/dropped_queue") > 0, "{up}");
}

/// A trace link delivers what the trace offers. The reference is the trace file itself:
/// its opportunities (1500 bytes each, i.e. one MSS of payload) in the test's window.
/// The trace's clock starts when the lab's emulator starts, which is after the lab's
/// registered creation time and before `lab up` returns: the window's offset is known
/// to within the `lab up` time (~50 ms), so the capacity is bracketed by its min and max
/// over every offset in that range. TMobile-LTE-short.down offers 22–27 Mbit/s in its
/// first seconds, steady enough for the bracket to be tight (measured: −1.0 %).
/// The queue (100 packets) keeps the link busy after slow start.
#[test]
fn a_trace_link_delivers_the_traces_capacity() {
    if !privileged_or_skip("trace_capacity") {
        return;
    }
    let _machine = alone();
    let trace = traces().join("TMobile-LTE-short.down");
    let text = std::fs::read_to_string(&trace).expect("reading the trace");
    let ops: Vec<u64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    let spec = format!("down.trace {} queue 100p", trace.display());
    let t = Instant::now();
    let lab = LabGuard::up(&lab_name("pt", 1), &["--path", &spec]);
    let up_ms = t.elapsed().as_millis() as u64;
    let created = u64_at(&lab.show(), "/lab/created_unix_us");
    let mut server = serve_in(&lab.server_ns(), &lab.client_ns());
    let out = tcplab()
        .args([
            "--netns",
            &lab.client_ns(),
            "run",
            "10.77.0.1",
            "-R",
            "-t",
            "3s",
            "--json",
        ])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let v = parse_success(&out);
    let mss = u64_at(&flows(&v)[0], "/mss");
    let started = u64_at(&v, "/started_unix_us");
    let intervals = v["intervals"].as_array().unwrap();
    let received: u64 = intervals.iter().map(|i| u64_at(i, "/received_bytes")).sum();
    let end_us = intervals
        .iter()
        .map(|i| u64_at(i, "/end_us"))
        .max()
        .unwrap();
    // Window in trace ms if the emulator started `delta` ms after `created`.
    let from = (started - created) as f64 / 1000.0;
    let to = from + end_us as f64 / 1000.0;
    assert!(
        (to as u64) < *ops.last().unwrap(),
        "the window must not wrap"
    );
    let count = |a: f64, b: f64| {
        ops.iter()
            .filter(|&&ms| ms as f64 > a && ms as f64 <= b)
            .count() as u64
    };
    let caps: Vec<u64> = (0..=up_ms)
        .map(|delta| count(from - delta as f64, to - delta as f64) * mss)
        .collect();
    let (lo, hi) = (*caps.iter().min().unwrap(), *caps.iter().max().unwrap());
    println!(
        "trace: received {received} B over {:.2} s, capacity {lo}–{hi} B (offset uncertainty {up_ms} ms): {:+.2} %",
        end_us as f64 / 1e6,
        (received as f64 / ((lo + hi) as f64 / 2.0) - 1.0) * 100.0
    );
    // Never more than the trace offers (one opportunity of slack at each end)...
    assert!(received <= hi + 2 * mss, "{received} > {hi}");
    // ...and nearly all of it: slow start over a ~ms RTT costs well under 5 %.
    assert!(
        received as f64 >= 0.95 * lo as f64,
        "{received} < 95 % of {lo}"
    );
}

/// A trace bottleneck's recorded capacity (`path.down.capacity`, what the trace offered
/// per 100 ms, drawn over the run's throughput) against the trace file itself: the
/// emulator's clock starts the trace, so each sample's opportunities can be counted in
/// the file, to within one at each end of a sample (the sample's time is kept in µs).
/// Among others: the record and the file count the same opportunities, whenever the
/// emulator samples them.
#[test]
fn a_trace_links_recorded_capacity_is_the_traces() {
    if !privileged_or_skip("trace_capacity_record") {
        return;
    }
    let _machine = among_others();
    let trace = traces().join("Verizon-LTE-short.down");
    let text = std::fs::read_to_string(&trace).expect("reading the trace");
    let ops: Vec<f64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    let spec = format!("rtt 40ms down.trace {} queue 100p", trace.display());
    let v = run_path(&spec, &["-R", "-t", "2s"]);
    let samples = v["path"]["down"]["capacity"]
        .as_array()
        .expect("capacity samples");
    assert!(samples.len() >= 15, "{} samples", samples.len());
    let mut from_ms = 0.0;
    for s in samples {
        let to_ms = f64_at(s, "/t_us") / 1000.0;
        let offered = ops
            .iter()
            .filter(|&&ms| ms > from_ms && ms <= to_ms)
            .count() as f64;
        let recorded = f64_at(s, "/bps") * (to_ms - from_ms) / 1000.0 / 8.0 / 1500.0;
        assert!(
            (recorded - offered).abs() <= 2.0,
            "{from_ms}–{to_ms} ms: the trace offers {offered} packets, recorded {recorded:.2}"
        );
        from_ms = to_ms;
    }
    assert!(v["path"]["up"].get("capacity").is_none(), "no trace up");
}

/// A small send buffer over 20 ms, and what this kernel (6.18) really does with it.
///
/// The textbook: a 16 KiB SO_SNDBUF (32 KiB effective) bounds the flow to ~32 KiB per
/// RTT and the kernel counts the time as sndbuf-limited. Measured here instead, also
/// with an independent Python sender: writes smaller than a TSO skb append to the
/// partly sent tail skb without the send-buffer check, so 8 KiB writes run at 350–480
/// Mbit/s through a 32 KiB buffer; 128 KiB writes allocate a new skb each time and are
/// held to about one write in flight per RTT (~50 Mbit/s). The samples see the buffer
/// full with nothing unsent and book the time to `sndbuf`; the kernel's
/// `tcpi_sndbuf_limited` counts almost none of it. This test pins both facts, so a
/// kernel that changes them makes it fail and docs/run.md's account gets revisited.
#[test]
fn a_small_send_buffer_bounds_large_writes_and_the_samples_see_it_where_the_kernel_does_not() {
    if !privileged_or_skip("small_sndbuf") {
        return;
    }
    let _machine = alone();
    let free = run_path("rtt 20ms", &["-t", "1s", "-C", "cubic"]);
    let v = run_path(
        "rtt 20ms",
        &["-t", "1s", "--sndbuf", "16K", "-l", "128K", "-C", "cubic"],
    );
    let flow = &flows(&v)[0];
    assert_eq!(u64_at(flow, "/sndbuf/effective"), 32768);
    let bps = f64_at(flow, "/received_bps");
    let unbounded = f64_at(&flows(&free)[0], "/received_bps");
    // Bounded by one write plus the buffer per RTT.
    let bound = (131072.0 + 32768.0) * 8.0 / 0.020;
    println!(
        "sndbuf 16K, 128K writes over 20 ms: {:.1} Mbit/s (bound {:.1}, unbounded {:.1}), sndbuf share {:.3}",
        bps / 1e6,
        bound / 1e6,
        unbounded / 1e6,
        f64_at(&v, "/summary/limits/sndbuf")
    );
    assert!(bps <= bound, "{bps} above the bound {bound}");
    assert!(bps < unbounded / 5.0, "{bps} vs unbounded {unbounded}");
    assert_dominant(&v, "sndbuf");
    assert!(
        f64_at(flow, "/kernel_limits/sndbuf") < 0.05,
        "{:#}",
        flow["kernel_limits"]
    );
}

/// A 16 KiB receive buffer (32 KiB effective) over 20 ms: the advertised window (at most
/// the effective buffer) bounds the flow to rcvbuf / RTT, and the kernel flags the time
/// as rwnd-limited. Measured: rwnd 95 %, 7.3 Mbit/s against a 13.1 Mbit/s bound (Linux
/// advertises about half of the buffer, tcp_adv_win_scale).
#[test]
fn a_tiny_receive_buffer_makes_the_flow_rwnd_limited() {
    if !privileged_or_skip("tiny_rcvbuf") {
        return;
    }
    let _machine = alone();
    let v = run_path("rtt 20ms", &["-t", "1s", "--rcvbuf", "16K", "-C", "cubic"]);
    let flow = &flows(&v)[0];
    assert_dominant(&v, "rwnd");
    let rwnd = f64_at(&v, "/summary/limits/rwnd");
    let effective = f64_at(flow, "/rcvbuf/effective");
    assert_eq!(effective, 32768.0);
    let bound = effective * 8.0 / 0.020;
    let bps = f64_at(flow, "/received_bps");
    println!(
        "rcvbuf 16K over 20 ms: rwnd {:.0} %, {:.2} Mbit/s, bound {:.2} Mbit/s",
        rwnd * 100.0,
        bps / 1e6,
        bound / 1e6
    );
    assert!(rwnd > 0.5, "rwnd share {rwnd}");
    assert!(
        bps <= bound && bps > 0.2 * bound,
        "{bps} vs window bound {bound}"
    );
}

/// Jitter spreads ping's RTT; `noreorder` (the default) never lets a packet overtake an
/// earlier one, `reorder` does, which the link counts as `reordered` under a TCP flow.
#[test]
fn jitter_spreads_rtt_and_only_reorder_reorders() {
    if !privileged_or_skip("jitter_reorder") {
        return;
    }
    let _machine = alone();
    let lab = LabGuard::up(&lab_name("pj", 1), &["--path", "delay 10ms jitter 5ms"]);
    let text = ping(&lab.client_ns(), &["-c", "50", "-i", "0.02"], "10.77.0.1");
    let (_, received, rtt) = ping_summary(&text);
    assert_eq!(received, 50, "{text}");
    let [min, avg, max, mdev] = rtt.unwrap();
    println!(
        "delay 10ms jitter 5ms: ping min {min:.2} avg {avg:.2} max {max:.2} mdev {mdev:.2} ms"
    );
    assert!(mdev > 1.0, "mdev {mdev} ms");
    // Two 10 ms ± 5 ms (σ) legs: the mean is 20 ms give or take the jitter.
    assert!((15.0..=25.0).contains(&avg), "avg {avg}");
    drop(lab);

    for (flag, reorders) in [("noreorder", false), ("reorder", true)] {
        let v = run_path(&format!("delay 10ms jitter 5ms {flag}"), &["-t", "1s"]);
        let reordered = u64_at(bottleneck(&v["path"], "up"), "/reordered");
        println!("jitter 5ms {flag}: reordered {reordered}");
        if reorders {
            assert!(reordered > 0, "{:#}", v["path"]);
        } else {
            assert_eq!(reordered, 0, "{:#}", v["path"]);
        }
    }
}

/// `-t 2s` through a lossy long path whose autotuned send buffer holds seconds of
/// backlog at the deadline (it once took 6 s to drain, 7.2 s of wall time). The rates
/// count up to the deadline: the bytes acknowledged then, bracketed by the sender's
/// tcp_info samples around it; the drain after it is bounded by the stated limit, so the
/// wall time is the duration, that limit and the setup's round trips. Every byte is
/// accounted for: sent = received, or the drain's cut left at most the reported bytes
/// unacknowledged.
#[test]
fn a_timed_run_measures_to_its_deadline_and_its_drain_is_bounded() {
    if !privileged_or_skip("timed_run_drain") {
        return;
    }
    let _machine = alone();
    let spec = "rtt 50ms loss 0.5% rate 1gbit queue 1bdp";
    // Load can stretch the wall time, the drain past its limit (a late wake-up of the
    // sender) and the count past the deadline (of the monitor): one of three tries.
    let v = one_of_three_tries("a -t 2s run's times", || {
        let started = Instant::now();
        let v = run_path(spec, &["-t", "2s", "-C", "cubic", "--json-samples"]);
        let wall = started.elapsed().as_secs_f64();
        let flow = &flows(&v)[0];
        let srtt_max_us = u64_at(flow, "/rtt/max_us");
        let limit_s = tcplab_analysis::throughput::drain_limit_us(srtt_max_us as u32) as f64 / 1e6;
        // Issue 24's bar: 3.5 s. The 2 s and the drain limit (0.5 s), the control
        // protocol's 8 round trips (estimate::CONTROL_RTTS and one connection: 0.4 s;
        // no clock probes on one clock), the process, the lab up and down and storing
        // (0.1 s): 3.0 s, half a second to spare for a loaded machine.
        let most = 3.5;
        assert!(
            2.0 + limit_s + 8.0 * 0.050 + 0.1 <= most,
            "limit {limit_s} s"
        );
        let drain = f64_at(&flow["timed"], "/drain_seconds");
        let counted_at = f64_at(&flow["timed"], "/seconds");
        println!(
            "{spec}, -t 2s: wall {wall:.2} s (at most {most:.2}), drain {drain:.3} s (limit {limit_s:.2}), counted at {counted_at} s: {}",
            flow["timed"]
        );
        if wall > most {
            Err(format!("wall {wall:.2} s > {most:.2} s"))
        } else if drain > limit_s + 0.05 {
            Err(format!("drained {drain} s, limit {limit_s} s"))
        } else if !(2.0..2.01).contains(&counted_at) {
            Err(format!("counted at {counted_at} s"))
        } else {
            Ok(v)
        }
    });
    let flow = &flows(&v)[0];
    let timed = &flow["timed"];
    let acked = u64_at(timed, "/acked_bytes");
    let seconds = f64_at(timed, "/seconds");
    let want = acked as f64 * 8.0 / seconds;
    assert!(
        (f64_at(flow, "/sent_bps") - want).abs() <= 1e-9 * want,
        "{flow:#}"
    );

    // The sender's samples bracket the bytes acknowledged at the deadline. Its first
    // sample (10 ms) precedes any acknowledgement of data (one 50 ms round trip), so its
    // tcpi_bytes_acked is the count's base (the handshake and the data intro).
    let acked_at = |t: &Value| u64_at(t, "/info/bytes_acked");
    let sender: Vec<&Value> = v["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["host"] == "client" && s["flow"] == 0)
        .collect();
    let base = acked_at(sender[0]);
    assert!(u64_at(sender[0], "/t_us") < 50_000);
    let deadline_us = (seconds * 1e6).round() as u64;
    let before = sender
        .iter()
        .rfind(|s| u64_at(s, "/t_us") <= deadline_us)
        .unwrap();
    let after = sender
        .iter()
        .find(|s| u64_at(s, "/t_us") >= deadline_us)
        .unwrap();
    assert!(
        acked_at(before) - base <= acked && acked <= acked_at(after) - base,
        "{} ≤ {acked} ≤ {}",
        acked_at(before) - base,
        acked_at(after) - base
    );
    // The intervals up to the deadline add up to the timed counts; the drain's follow.
    let intervals = v["intervals"].as_array().unwrap();
    let timed_part: Vec<&Value> = intervals.iter().filter(|i| i["drain"] != true).collect();
    let sum = |is: &[&Value], key: &str| is.iter().map(|i| u64_at(i, key)).sum::<u64>();
    assert_eq!(sum(&timed_part, "/acked_bytes"), acked);
    assert_eq!(
        sum(&timed_part, "/received_bytes"),
        u64_at(timed, "/received_bytes")
    );
    assert!(timed_part
        .iter()
        .all(|i| u64_at(i, "/end_us") <= deadline_us));
    // The same bytes over the same window, computed apart: equal but for rounding (a
    // CI run differed in the last bit).
    let want = u64_at(timed, "/received_bytes") as f64 * 8.0 / seconds;
    assert!(
        (f64_at(&v, "/summary/received_bps") - want).abs() <= 1e-9 * want,
        "{} vs {want}",
        v["summary"]["received_bps"]
    );

    // Byte agreement: every byte read, or the cut's remainder reported.
    let (sent, received) = (u64_at(flow, "/sent_bytes"), u64_at(flow, "/received_bytes"));
    let unacked = u64_at(timed, "/unacked_bytes");
    let all: Vec<&Value> = intervals.iter().collect();
    assert_eq!(sum(&all, "/received_bytes"), received);
    if unacked == 0 {
        assert_eq!(sent, received);
    } else {
        assert!(
            sent - unacked <= received && received <= sent,
            "{sent} − {unacked} vs {received}"
        );
    }
    assert_eq!(str_at(&v, "/status"), "done");
}

/// Both directions at once, both drains stopped at their limit: each end's receivers
/// wait for the other end's reset, so the reset comes as soon as each stopped flow's
/// last interval is counted, not when the end is done (which would wait on the other
/// end: a deadlock, cut here after 30 s).
#[test]
fn a_bidirectional_run_whose_drains_both_stop_ends() {
    if !privileged_or_skip("bidir_drains") {
        return;
    }
    let _machine = alone();
    // A starved sender may leave no backlog one way, and then there is nothing to
    // stop there: one of three tries. The deadlock would show on every try.
    one_of_three_tries("both drains stopped", || {
        let child = tcplab()
            .args(["run", "--path", "rtt 100ms loss 1% rate 1gbit queue 1bdp"])
            .args(["-t", "1s", "--bidir", "-C", "cubic", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Read its output while it runs (a full pipe would stall it too).
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let out = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                // SAFETY: signalling the child this test started.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                panic!("a bidirectional run with stopped drains still ran after 30 s")
            })
            .unwrap();
        let v = parse_success(&out);
        assert_eq!(str_at(&v, "/status"), "done");
        let mut stopped = 0;
        for f in flows(&v) {
            let unacked = u64_at(f, "/timed/unacked_bytes");
            stopped += usize::from(unacked > 0);
            let (sent, received) = (u64_at(f, "/sent_bytes"), u64_at(f, "/received_bytes"));
            assert!(sent - unacked <= received && received <= sent, "{f:#}");
        }
        (stopped == 2)
            .then_some(())
            .ok_or(format!("{stopped} of 2 drains had a backlog to stop"))
    });
}

/// Corrupted and duplicated TCP segments, cut from the kernel's super-packets, reach
/// the receiver as such: the receiver's checksum catches every corrupted one, so the
/// sender sends each again (a delay-only path drops nothing else, so nothing else is
/// retransmitted), and duplicates lose no byte.
#[test]
fn corrupted_segments_fail_the_receivers_checksum_and_duplicates_lose_nothing() {
    if !privileged_or_skip("corrupt_duplicate") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let out = tcplab()
        .args([
            "run",
            "--path",
            "rtt 10ms up.corrupt 1% up.duplicate 1% seed 7",
        ])
        .args(["-t", "1s", "--json", "--db"])
        .arg(dir.path().join("runs.db"))
        .output()
        .unwrap();
    let run = parse_success(&out);
    let up = &run["path"]["up"];
    let link = &up["links"][0];
    let (corrupted, duplicated) = (u64_at(link, "/corrupted"), u64_at(link, "/duplicated"));
    assert_eq!(up["per_packet"], true, "{up}");
    assert!(corrupted > 20 && duplicated > 20, "{link}");
    assert_eq!(
        u64_at(link, "/dropped_queue") + u64_at(up, "/malformed"),
        0,
        "{up}"
    );
    let flow = &flows(&run)[0];
    let retransmits = u64_at(flow, "/retransmits");
    // A retransmission can carry more than one corrupted segment, rarely.
    assert!(
        retransmits * 2 >= corrupted,
        "{retransmits} retransmits for {corrupted} corrupted segments"
    );
    assert_eq!(u64_at(flow, "/sent_bytes"), u64_at(flow, "/received_bytes"));
}
