//! Pacing (issue 5) made visible at the bottleneck: on one path, each pacing mode —
//! the kernel's (SO_MAX_PACING_RATE), the application's (rate-controlled writes) and
//! the gap pacer on the sender's egress (PSPacer) — arrives in trains of its own
//! making and fills the queue less than an unpaced flow, measured by the emulator's
//! burst meter; and that meter against a capture of the sender.

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::*;
use tcplab_analysis::burst::BurstMeter;
use tcplab_analysis::explain::{explain, Explanation};
use tcplab_netsim::packet::FlowKey;
use tcplab_netsim::path::{Bottleneck, Direction, PathSpec};
use tcplab_record::BurstStats;
use tcplab_sys::netns::privileged_or_skip;

/// The path: 100 Mbit/s, 10 ms, a 1-BDP queue (125 KB); cubic fills it in slow start.
const PATH: &str = "rtt 10ms rate 100mbit queue 1bdp";

/// What the bottleneck saw of the data flow: (mean train, longest train, the queue's
/// 99th percentile over its millisecond samples in bytes), and the goodput. The
/// percentile, not the maximum: an emulator thread kept off the CPU for milliseconds
/// (this VM's scheduler does that) reads its backlog at once, and one such moment is a
/// peak no sender caused.
fn bottleneck_view(extra_path: &str, args: &[&str]) -> (f64, u64, u64, f64) {
    let out = tcplab()
        .args([
            "run",
            "--path",
            &format!("{PATH} {extra_path}"),
            "-C",
            "cubic",
            "-t",
            "2",
            "--json",
        ])
        .args(args)
        .output()
        .expect("running tcplab run");
    let v: Value = parse_success(&out);
    let up = &v["path"]["up"];
    let data = &up["bursts"][0];
    let mut queue: Vec<u64> = up["queue"]
        .as_array()
        .expect("queue samples")
        .iter()
        .map(|s| u64_at(s, "/bytes"))
        .collect();
    queue.sort_unstable();
    let p99 = queue[(queue.len() - 1) * 99 / 100];
    (
        f64_at(data, "/burst_mean"),
        u64_at(data, "/burst_max"),
        p99,
        f64_at(&v, "/summary/received_bps"),
    )
}

/// Unpaced, cubic keeps the 125 KB queue nearly full, and arrives in trains of GSO
/// packets (TSO autosizing keeps one near a millisecond of data at the flow's rate,
/// ~8 packets here), several back to back in slow start. Each pacing mode at 90 Mbit/s
/// keeps the queue short, and makes its own trains: the kernel's, one GSO packet at a
/// time (a millisecond at 90 Mbit/s, 7–8 packets), spaced; the application's, one write
/// at a time (4 KiB, 3 packets); the gap pacer's, one packet at a time, each finding the
/// 100 Mbit/s link idle (only a short packet, the FIN, right behind a full one can catch
/// up). Measured here: unpaced trains of 8.1–8.5 on average, the longest 18–50, queue
/// p99 120 KB; kernel 7.0, longest 8, 9–20 KB; app 2.8, longest 15–17, 15–20 KB; gap
/// 1.0, longest 1, 0. The queue shrinks because the paced rate is below the link's, not
/// because the trains shorten: the kernel's are nearly the unpaced ones.
#[test]
fn each_pacing_mode_makes_its_trains_and_shortens_the_queue() {
    if !privileged_or_skip("pacing_modes") {
        return;
    }
    let _machine = alone();
    // An emulator kept off the CPU splits trains it cannot time (never joins them) and
    // a starved sender falls behind: one of three tries.
    let (none_max, none_queue) = one_of_three_tries("none", || {
        let (mean, max, queue, _) = bottleneck_view("", &[]);
        let seen = format!("mean train {mean:.1}, longest {max}, queue p99 {queue} B");
        println!("none: {seen}");
        // Longer than one GSO packet: back-to-back ones in slow start.
        if max <= 10 || queue <= 80_000 {
            return Err(seen);
        }
        Ok((max, queue))
    });
    for (mode, extra_path, args) in [
        ("kernel", "", &["--fq-rate", "90mbit"][..]),
        ("app", "", &["--app-rate", "90mbit", "-l", "4K"][..]),
        ("gap", "up.pace 90mbit", &[][..]),
    ] {
        one_of_three_tries(mode, || {
            let (mean, max, queue, goodput) = bottleneck_view(extra_path, args);
            let seen = format!(
                "mean train {mean:.2}, longest {max}, queue p99 {queue} B, {goodput:.3e} \
                 bit/s (unpaced: longest {none_max}, queue p99 {none_queue} B)"
            );
            println!("{mode}: {seen}");
            let trains_missed = match mode {
                "kernel" => max > 10,
                "app" => mean > 4.0,
                _ => max > 2 || mean >= 1.01 || queue > 1500,
            };
            if trains_missed || queue * 10 >= none_queue * 6 || goodput <= 0.5 * 90e6 {
                return Err(seen);
            }
            Ok(())
        });
    }
}

/// PSPacer's dynamic mode: the gap pacer's rate follows the sender's cwnd × MSS / RTT
/// from its live tcp_info. It spaces the packets (trains of one, as with a fixed rate).
/// Whether it lowers the queue depends on what limits the window:
/// - a window capped by the buffers (64 KiB requested, below the 125 KB BDP): unpaced,
///   each window leaves in GSO-sized trains that queue at the bottleneck; paced at
///   window / RTT, they arrive spread and find it idle (measured: trains of 5.0 on
///   average and queue p99 15 KB unpaced; 1.0 and 0 paced);
/// - cubic free to grow: its window, not its spacing, sets the standing queue, and it
///   grows until the queue overflows, paced or not (bottleneck queue 124.5 KB either
///   way; the pacer holds a backlog of its own), so only the bursts shrink.
#[test]
fn a_pacer_following_the_window_spaces_the_flow() {
    if !privileged_or_skip("pacing_cwnd") {
        return;
    }
    let _machine = alone();
    one_of_three_tries("pace cwnd, window-limited", || {
        let window = ["-w", "64K"];
        let (none_mean, _, none_queue, _) = bottleneck_view("", &window);
        let (mean, _, queue, goodput) = bottleneck_view("up.pace cwnd", &window);
        let seen = format!(
            "none mean train {none_mean:.1}, queue p99 {none_queue} B; \
             pace cwnd {mean:.2}, {queue} B, {goodput:.3e} bit/s"
        );
        println!("window-limited: {seen}");
        if mean * 3.0 >= none_mean
            || mean >= 2.0
            || none_queue <= 6_000
            || queue * 4 >= none_queue
            || goodput <= 20e6
        {
            return Err(seen);
        }
        Ok(())
    });
    one_of_three_tries("pace cwnd, cubic unbounded", || {
        let (none_mean, _, _, _) = bottleneck_view("", &[]);
        let (mean, _, _, goodput) = bottleneck_view("up.pace cwnd", &[]);
        let seen =
            format!("none mean train {none_mean:.1}; pace cwnd {mean:.2}, {goodput:.3e} bit/s");
        println!("cubic unbounded: {seen}");
        if mean * 3.0 >= none_mean || mean >= 3.0 || goodput <= 20e6 {
            return Err(seen);
        }
        Ok(())
    });
}

/// The two window-following pacers with cubic free to grow. Over the smoothed RTT, the
/// rate includes the queue the pacer itself holds: as that backlog grows the rate falls,
/// and the flow loses a third of its throughput (measured: 61 Mbit/s, the pacer holding
/// up to 870–920 KB, 70 ms at 100 Mbit/s). Over the minimum RTT it spaces each window
/// over the path's own round trip: 93 Mbit/s, a backlog of 30–100 KB, still trains of
/// one; cubic's window then fills the bottleneck queue as it does unpaced.
#[test]
fn a_pacer_over_the_min_rtt_keeps_the_throughput_the_smoothed_rtt_costs() {
    if !privileged_or_skip("pacing_cwnd_minrtt") {
        return;
    }
    let _machine = alone();
    let view = |pace: &str| {
        let out = tcplab()
            .args(["run", "--path", &format!("{PATH} up.pace {pace}")])
            .args(["-C", "cubic", "-t", "2", "--json"])
            .output()
            .expect("running tcplab run");
        let v: Value = parse_success(&out);
        let up = &v["path"]["up"];
        let pacer = up["links"]
            .as_array()
            .expect("links")
            .iter()
            .find(|l| l["name"] == "pacer")
            .expect("a pacer link")
            .clone();
        (
            f64_at(&v, "/summary/received_bps"),
            u64_at(&pacer, "/max_queue_bytes"),
            f64_at(&up["bursts"][0], "/burst_mean"),
        )
    };
    one_of_three_tries("pace cwnd against cwnd/minrtt", || {
        let (srtt_bps, srtt_backlog, srtt_train) = view("cwnd");
        let (min_bps, min_backlog, min_train) = view("cwnd/minrtt");
        let seen = format!(
            "cwnd: {srtt_bps:.3e} bit/s, pacer backlog {srtt_backlog} B, trains {srtt_train:.2}; \
             cwnd/minrtt: {min_bps:.3e} bit/s, {min_backlog} B, {min_train:.2}"
        );
        println!("{seen}");
        let goodput = 100e6 * 1448.0 / 1500.0;
        if min_bps < 0.85 * goodput
            || min_bps < 1.2 * srtt_bps
            || min_backlog * 3 > srtt_backlog
            || min_train > 1.5
            || srtt_train > 1.5
        {
            return Err(seen);
        }
        Ok(())
    });
}

/// The trains of `flow` ("tcp A:p > B:q") in a capture, by the meter's own rule at a
/// bottleneck of `rate_bps`, on the capture's times (exact: the kernel stamped each
/// packet as it was sent). tshark reads the packets; each GSO packet is cut into the
/// wire segments the emulator makes of it, at the flow's MSS.
fn captured_trains(pcap: &Path, flow: &str, mss: u32, rate_bps: u64) -> BurstStats {
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(pcap)
        .args(["-Y", "tcp", "-T", "fields", "-E", "separator=,"])
        .args([
            "-e",
            "frame.time_epoch",
            "-e",
            "ip.src",
            "-e",
            "tcp.srcport",
        ])
        .args(["-e", "ip.dst", "-e", "tcp.dstport"])
        .args(["-e", "ip.hdr_len", "-e", "tcp.hdr_len", "-e", "tcp.len"])
        .output()
        .expect("running tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut meter = BurstMeter::new(rate_bps, 1_000_000);
    let mut key = None;
    let mut first_ns = None;
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let f: Vec<&str> = line.split(',').collect();
        if format!("tcp {}:{} > {}:{}", f[1], f[2], f[3], f[4]) != flow {
            continue;
        }
        let key = *key.get_or_insert_with(|| FlowKey {
            src: f[1].parse().unwrap(),
            dst: f[3].parse().unwrap(),
            protocol: 6,
            src_port: f[2].parse().unwrap(),
            dst_port: f[4].parse().unwrap(),
        });
        // "1795464928.437381789": integer ns, which an f64 of epoch seconds is not.
        let (s, frac) = f[0].split_once('.').unwrap();
        let ns = s.parse::<u64>().unwrap() * 1_000_000_000
            + format!("{frac:0<9}")[..9].parse::<u64>().unwrap();
        let at = ns - *first_ns.get_or_insert(ns);
        let headers: u32 = f[5].parse::<u32>().unwrap() + f[6].parse::<u32>().unwrap();
        let payload: u32 = f[7].parse().unwrap();
        let segments = payload.div_ceil(mss).max(1);
        for k in 0..segments {
            let len = headers + (payload - k * mss).min(mss);
            meter.arrival(key, tcplab_record::traffic::Traffic::Test, at, len, 0);
        }
    }
    let (flows, _) = meter.report();
    flows
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no packets of {flow} in the capture"))
}

/// One run through a lab of `path` (built here, so its final counters come back),
/// captured where the client's kernel hands its packets to the emulator: the emulator's
/// trains of the data flow against the capture's, the run's explanation, and how many
/// packets the capture lost.
fn trains_and_capture(
    name: &str,
    path: &str,
    args: &[&str],
) -> (BurstStats, BurstStats, Explanation, u64) {
    let dir = tempfile::tempdir().unwrap();
    let spec: PathSpec = path.parse().unwrap();
    let lab = emulator_lab(name, path);
    let (server_ns, client_ns) = (format!("{name}-server"), format!("{name}-client"));
    let capture = Capture::start(&client_ns, &dir.path().join("entry.pcapng"));
    let mut server = serve_in(&server_ns, &client_ns);
    let out = tcplab()
        .args([
            "--netns",
            &client_ns,
            "run",
            "10.77.0.1",
            "-t",
            "2",
            "--json",
        ])
        .args(args)
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let (pcap, lost) = capture.stop();
    let run = run_through(lab, &out);
    let up = &run.path.as_ref().unwrap().up;
    let measured = up.bursts[0].clone();
    let rate = match spec.link(Direction::Up).bottleneck {
        Bottleneck::Rate { bps, .. } => bps,
        _ => panic!("{path} has no rate"),
    };
    let captured = captured_trains(&pcap, &measured.flow, run.flows[0].mss, rate);
    (measured, captured, explain(&run), lost)
}

/// The burst meter against its independent reference, a capture of the sender: dumpcap
/// on the client's TUN device records each packet as the kernel hands it to the
/// emulator, stamped by the kernel, and the meter's rule on those times gives the
/// trains the sender really sent (`captured_trains`). Both must count the same packets.
/// The emulator knows an arrival only to within its read's lag, so it joins packets
/// only where the gap is below the threshold with that lag to spare: its trains may
/// come out shorter than the capture's, each gap it could not resolve counted as
/// unresolved, and must never come out longer — at most 5 % above the capture on the
/// mean, the 99th percentile and the longest train (the capture's timing against the
/// reads, and a read lagging more than its allowance when the machine is loaded).
///
/// And `explain` on the same runs advises pacing exactly where the capture's trains
/// overflow the queue from half full: not for the quickstart's BBR flow or for cubic
/// on the same path (GSO-sized trains, slow-start trains of a few hundred packets,
/// against a 1-BDP queue of 2.38 MiB), both of which the window overflowed; for cubic
/// on a 100 Mbit/s path with a 10-packet queue, which its trains of 8–10 overflow. A
/// run the machine's load disturbs (a capture that lost packets, reads later than
/// their allowance) is one of three tries.
#[test]
fn trains_agree_with_a_capture_of_the_sender() {
    if !privileged_or_skip("trains_vs_capture") {
        return;
    }
    let _machine = alone();
    let mut n = 0;
    for (case, path, cc, pacing_advised) in [
        (
            "quickstart",
            "rtt 20ms rate 1gbit queue 1bdp",
            "bbr",
            Some(false),
        ),
        (
            "cubic, quickstart's path",
            "rtt 20ms rate 1gbit queue 1bdp",
            "cubic",
            None,
        ),
        (
            "cubic, 10-packet queue",
            "rtt 10ms rate 100mbit queue 10p",
            "cubic",
            Some(true),
        ),
    ] {
        one_of_three_tries(case, || {
            n += 1;
            let (m, c, e, lost) = trains_and_capture(&lab_name("tb", n), path, &["-C", cc]);
            let advised = e
                .recommendations
                .iter()
                .any(|r| r.starts_with("pace the senders"));
            let seen = format!(
                "emulator {} trains of {:.1} packets on average, 99 % at most {}, longest {} \
                 ({} unresolved); capture {} of {:.1}, {}, {}; {} packets against {} \
                 (capture lost {lost}); pacing advised: {advised}",
                m.bursts,
                m.burst_mean,
                m.burst_p99,
                m.burst_max,
                m.unresolved,
                c.bursts,
                c.burst_mean,
                c.burst_p99,
                c.burst_max,
                m.packets,
                c.packets,
            );
            println!("{case}: {seen}");
            if lost > 0 || m.packets != c.packets {
                return Err(format!("not the same packets: {seen}"));
            }
            let above = |measured: f64, captured: f64| measured > captured * 1.05;
            if above(m.burst_mean, c.burst_mean)
                || above(m.burst_p99, c.burst_p99)
                || above(m.burst_max as f64, c.burst_max as f64)
            {
                return Err(format!("longer trains than the sender's: {seen}"));
            }
            // Every train the emulator has beyond the capture's is a gap it could not
            // resolve (5 % for the capture's timing against the reads).
            if m.bursts as f64 > (c.bursts + m.unresolved) as f64 * 1.05 {
                return Err(format!("splits not counted as unresolved: {seen}"));
            }
            // The rule on the reference: the trains 99 % of the capture's packets came
            // in against half the queue (2.38 MiB, or 10 packets).
            if let Some(expected) = pacing_advised {
                let queue = e.path.as_ref().and_then(|p| p.queue_bytes).unwrap() as f64;
                let overflowing = c.burst_p99 * 1500.0 >= queue / 2.0;
                assert_eq!(
                    overflowing, expected,
                    "{case}: the capture's trains: {seen}"
                );
                if advised != expected {
                    return Err(format!("pacing advised: {advised}: {seen}"));
                }
            }
            Ok(())
        });
    }
}
