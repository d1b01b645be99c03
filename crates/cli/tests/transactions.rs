//! Request/response transactions (`--rr`) and the message study's Nagle/delayed-ACK
//! stall, checked against the packets at the bottleneck as tshark reads them: the
//! request's second write leaves only after the server's delayed ACK, and each
//! transaction's time is what the capture shows plus the way back.

mod support;

use std::path::Path;

use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// The path: 2 ms round trip, 1 ms each way.
const PATH: &str = "rtt 2ms";
const ONE_WAY_MS: f64 = 1.0;
/// Linux delays an ACK at least TCP_DELACK_MIN (40 ms); a little less is allowed for the
/// capture's and the timer's granularity.
const DELAYED_ACK_MS: f64 = 35.0;

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "no values");
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The data connection's payload segments at the bottleneck: (time s, from the client,
/// payload bytes), the control connection (port 5201) left out.
fn data_segments(file: &Path) -> Vec<(f64, bool, u64)> {
    tshark(
        file,
        "tcp.len > 0 && tcp.srcport != 5201 && tcp.dstport != 5201",
        &["frame.time_relative", "ip.src", "tcp.len"],
    )
    .iter()
    .map(|line| {
        let f: Vec<&str> = line.split('\t').collect();
        (
            f[0].parse().unwrap(),
            f[1] == "10.77.1.1",
            f[2].parse().unwrap(),
        )
    })
    .collect()
}

/// Per request split in two halves of `half` bytes: the time between its halves and
/// from its first half to its response, ms, as the capture saw them.
fn request_timings(segments: &[(f64, bool, u64)], half: u64) -> (Vec<f64>, Vec<f64>) {
    let (mut between, mut answered) = (Vec::new(), Vec::new());
    let mut first: Option<f64> = None;
    let mut second = false;
    for &(t, from_client, len) in segments {
        match (from_client, first) {
            (true, None) if len == half => first = Some(t),
            (true, Some(t1)) if len == half && !second => {
                between.push((t - t1) * 1e3);
                second = true;
            }
            (false, Some(t1)) if second => {
                answered.push((t - t1) * 1e3);
                (first, second) = (None, false);
            }
            _ => {}
        }
    }
    (between, answered)
}

/// `tcplab run` of 100-byte transactions in two writes through a lab, captured and
/// stored: the run's JSON and the capture's data segments.
fn split_requests(dir: &Path, name: &str, extra: &[&str]) -> (Value, Vec<(f64, bool, u64)>) {
    let file = dir.join(format!("{name}.pcapng"));
    let out = tcplab()
        .args(["run", "--path", PATH, "--rr", "100", "--rr-writes", "2"])
        .args(["-t", "3s", "--json", "--capture"])
        .arg(&file)
        .arg("--db")
        .arg(dir.join("runs.db"))
        .args(extra)
        .output()
        .unwrap();
    (parse_success(&out), data_segments(&file))
}

fn explain_kinds(dir: &Path) -> Vec<String> {
    let out = tcplab()
        .args(["explain", "--json", "--db"])
        .arg(dir.join("runs.db"))
        .output()
        .unwrap();
    let e = parse_success(&out);
    e["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

/// The bar: split-write transactions with Nagle on take ≥ 10× longer at the
/// median than with -N. The capture shows why: the second half waits for the server's
/// delayed ACK. explain names the stall from it.
#[test]
fn split_requests_stall_on_nagle_and_the_delayed_ack_as_the_capture_shows() {
    if !privileged_or_skip("transactions") || !tshark_or_skip("transactions") {
        return;
    }
    let _serial = serial();
    one_of_three_tries("Nagle's stall against -N", || {
        let dir = tempfile::tempdir().unwrap();
        let (nagle, segments) = split_requests(dir.path(), "nagle", &[]);
        let stall_kinds = explain_kinds(dir.path());
        let (quick, quick_segments) = split_requests(dir.path(), "nodelay", &["-N"]);
        let quick_kinds = explain_kinds(dir.path());

        // What load cannot explain, every time.
        for run in [&nagle, &quick] {
            // Every request the server read came whole, and every one but one the
            // drain cut short was answered and counted.
            let count = u64_at(run, "/summary/transactions/count");
            let requests = u64_at(run, "/summary/received_bytes") / 100;
            assert!(
                requests == count || requests == count + 1,
                "{count} transactions, {requests} requests read"
            );
            assert_eq!(u64_at(run, "/summary/received_bytes") % 100, 0);
        }
        let (held, answered) = request_timings(&segments, 50);
        let (quick_held, _) = request_timings(&quick_segments, 50);
        // The first request goes in the kernel's quick-ACK mode; later ones wait.
        let held_ms = median(held.clone());
        assert!(
            held_ms >= DELAYED_ACK_MS,
            "with Nagle the second half followed the first after {held_ms:.2} ms (median)"
        );
        assert!(
            median(quick_held.clone()) < 1.0,
            "with -N the halves were {:.3} ms apart",
            median(quick_held)
        );
        assert!(
            stall_kinds.iter().any(|k| k == "nagle_stall"),
            "{stall_kinds:?}"
        );
        assert!(
            !quick_kinds.iter().any(|k| k == "nagle_stall"),
            "{quick_kinds:?}"
        );
        assert!(
            quick_kinds.iter().any(|k| k == "transactions"),
            "{quick_kinds:?}"
        );

        // What load can spoil: the ratio and tcplab's time against the capture's.
        let stalled_ms = f64_at(&nagle, "/summary/transactions/latency_us/p50") / 1e3;
        let quick_ms = f64_at(&quick, "/summary/transactions/latency_us/p50") / 1e3;
        let captured_ms = median(answered) + ONE_WAY_MS;
        eprintln!(
            "median transaction: Nagle {stalled_ms:.2} ms, -N {quick_ms:.3} ms ({:.1}×); \
             the capture: halves {held_ms:.2} ms apart, + answer + way back {captured_ms:.2} ms",
            stalled_ms / quick_ms
        );
        if stalled_ms < 10.0 * quick_ms {
            return Err(format!(
                "Nagle {stalled_ms:.2} ms is not 10× -N's {quick_ms:.3} ms"
            ));
        }
        if (stalled_ms - captured_ms).abs() > 1.0 {
            return Err(format!(
                "tcplab's median {stalled_ms:.2} ms, the capture's {captured_ms:.2} ms"
            ));
        }
        Ok(())
    });
}

/// TCP_CRR: each transaction opens its own connection, which the capture's SYNs count;
/// its time is the handshake's round trip plus the request's and the response's, which
/// the capture shows from each SYN to its response, plus the way back.
#[test]
fn a_connection_per_transaction_shows_in_the_capture_as_one_handshake_each() {
    if !privileged_or_skip("crr") || !tshark_or_skip("crr") {
        return;
    }
    let _serial = serial();
    one_of_three_tries("TCP_CRR against the capture", || {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("crr.pcapng");
        let out = tcplab()
            // Each request in two writes (-N sends both at once): the server reads the
            // introduction and the request as they come, in pieces.
            .args([
                "run",
                "--path",
                PATH,
                "--rr",
                "100",
                "--rr-writes",
                "2",
                "-N",
            ])
            .args(["--crr", "-t", "2s"])
            .args(["--json", "--capture"])
            .arg(&file)
            .output()
            .unwrap();
        let run = parse_success(&out);
        let count = u64_at(&run, "/summary/transactions/count");
        let requests = u64_at(&run, "/summary/received_bytes") / 100;
        // Each transaction's client port: its SYN, then the server's 100-byte answer.
        let mut opened: std::collections::BTreeMap<u64, (f64, Option<f64>)> = Default::default();
        for line in tshark(
            &file,
            "tcp.srcport != 5201 && tcp.dstport != 5201 && ((tcp.flags.syn == 1 && tcp.flags.ack == 0) || tcp.len == 100)",
            &["frame.time_relative", "tcp.srcport", "tcp.dstport", "tcp.len"],
        ) {
            let f: Vec<&str> = line.split('\t').collect();
            let t: f64 = f[0].parse().unwrap();
            match f[3] {
                "0" => {
                    opened.insert(f[1].parse().unwrap(), (t, None));
                }
                _ => {
                    if let Some(c) = opened.get_mut(&f[2].parse().unwrap()) {
                        c.1.get_or_insert(t);
                    }
                }
            }
        }
        // The anchor's connection has no answer; every other has one, but perhaps the
        // last the drain cut.
        let answered: Vec<f64> = opened
            .values()
            .filter_map(|&(syn, answer)| Some((answer? - syn) * 1e3 + ONE_WAY_MS))
            .collect();
        let connections = opened.len() as u64 - 1;
        assert!(
            (requests == connections || requests + 1 == connections)
                && (count == requests || count + 1 == requests),
            "{connections} connections in the capture, {requests} requests read, {count} transactions"
        );
        let tcplab_ms = f64_at(&run, "/summary/transactions/latency_us/p50") / 1e3;
        let captured_ms = median(answered);
        eprintln!("TCP_CRR: {count} transactions, median {tcplab_ms:.2} ms; the capture's {captured_ms:.2} ms");
        if (tcplab_ms - captured_ms).abs() > 0.5 {
            return Err(format!(
                "tcplab's median {tcplab_ms:.2} ms, the capture's {captured_ms:.2} ms"
            ));
        }
        Ok(())
    });
}
