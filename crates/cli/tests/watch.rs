//! `tcplab watch` on real sockets: connections in a lab's server host, opened and
//! closed by this test, each recorded with the bytes the test's own server counted;
//! iperf3 watched against tcplab's own run over the same path; bad input.

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    alone, among_others, export_jsonl, f64_at, lab_name, one_of_three_tries, parse_success, stderr,
    tcplab, LabGuard,
};
use tcplab_sys::netns::{privileged_or_skip, NetNs};

const SERVER: &str = "10.77.0.1";

/// `tcplab --netns NS watch ARGS…` running, its stdout and stderr into files of `dir`.
/// A running `tcplab watch`, killed if the test ends before [`interrupt`] (a failed
/// assertion included), so that none outlives its test.
struct Watching(Child);

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_watch(ns: &str, args: &[&str], dir: &Path) -> Watching {
    let child = tcplab()
        .args(["--netns", ns, "watch"])
        .args(args)
        .stdout(std::fs::File::create(dir.join("watch.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("watch.err")).unwrap())
        .spawn()
        .expect("starting tcplab watch");
    let watching = Watching(child);
    // Watching starts with its first dump; its opening line says it began.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(dir.join("watch.err"))
        .unwrap_or_default()
        .contains("watching")
    {
        assert!(Instant::now() < deadline, "watch did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    watching
}

/// Ctrl-C, then the exit status and what it printed.
fn interrupt(mut watching: Watching, dir: &Path) -> (bool, String, String) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(watching.0.id() as i32, libc::SIGINT) };
    let status = watching.0.wait().unwrap();
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    (status.success(), read("watch.out"), read("watch.err"))
}

/// A server in `ns` on `port` that reads each connection to its end on a thread of its
/// own, then closes it, counting the bytes of each without keeping them (a bulk sender
/// at several Gbit/s fills gigabytes in seconds); stops when `stop` is set.
fn counting_server(ns: &NetNs, port: u16, stop: Arc<AtomicBool>) -> Arc<Mutex<Vec<u64>>> {
    let listener = ns
        .run(move || TcpListener::bind((SERVER, port)).unwrap())
        .unwrap();
    listener.set_nonblocking(true).unwrap();
    let counts = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&counts);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    let kept = Arc::clone(&kept);
                    std::thread::spawn(move || {
                        stream.set_nonblocking(false).unwrap();
                        let read = std::io::copy(&mut stream, &mut std::io::sink()).unwrap();
                        kept.lock().unwrap().push(read);
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    });
    counts
}

/// `n` connections from the lab's client host, one opened every `every` (each on its
/// own thread, so that they overlap as a round trip outlasts `every`), each writing
/// `size` bytes and closing.
fn short_connections(ns: &NetNs, port: u16, n: usize, size: usize, every: Duration) {
    let to: SocketAddr = (SERVER.parse::<std::net::IpAddr>().unwrap(), port).into();
    ns.run(move || {
        let payload = vec![7u8; size];
        let start = Instant::now();
        // Threads begin in the namespace of the one that spawns them.
        std::thread::scope(|scope| {
            for i in 0..n {
                let next = start + every * i as u32;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                let payload = &payload;
                scope.spawn(move || {
                    let mut s = TcpStream::connect(to).unwrap();
                    s.write_all(payload).unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                    // The server closes after reading all: wait for it, so none is cut
                    // short.
                    let mut rest = Vec::new();
                    s.read_to_end(&mut rest).unwrap();
                });
            }
        });
    })
    .unwrap();
}

fn watched_flows(db: &Path) -> Vec<Value> {
    export_jsonl(db, "flows")
        .into_iter()
        .map(|f| serde_json::from_str(f["watched_json"].as_str().unwrap()).unwrap())
        .collect()
}

/// Short connections through a 20 ms path, sampled only every 100 ms: most open and
/// close between two samples, so the tracepoint's lookups and the closing ones' carry
/// them. Each server-side socket is recorded, with the 10 KiB the server read (plus the
/// client's FIN, which the kernel counts as a byte). One connection every 10 ms, 1 000
/// of them over 10 s, as the issue asks (`WATCH_CONNECTIONS=N` runs N).
#[test]
fn short_connections_are_each_recorded_with_their_bytes() {
    if !privileged_or_skip("short_connections_are_each_recorded_with_their_bytes") {
        return;
    }
    let _machine = alone();
    let n: usize = std::env::var("WATCH_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let every = Duration::from_millis(10);
    let size = 10 * 1024;
    let lab = LabGuard::up(&lab_name("wa", 1), &["--path", "rtt 20ms rate 100mbit"]);
    let server_ns = NetNs::open(&lab.server_ns()).unwrap();
    let client_ns = NetNs::open(&lab.client_ns()).unwrap();
    let port = 7301;
    let stop = Arc::new(AtomicBool::new(false));
    let counts = counting_server(&server_ns, port, Arc::clone(&stop));
    let recorded = one_of_three_tries("every short connection recorded", || {
        counts.lock().unwrap().clear();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("watch.db");
        let watch = start_watch(
            &lab.server_ns(),
            &[
                "--port",
                &port.to_string(),
                "-i",
                "100ms",
                "--db",
                db.to_str().unwrap(),
            ],
            dir.path(),
        );
        short_connections(&client_ns, port, n, size, every);
        std::thread::sleep(Duration::from_millis(300));
        let (ok, out, err) = interrupt(watch, dir.path());
        assert!(ok, "watch failed: {err}");
        assert!(!err.contains("polling only"), "{err}");
        // What the server read, each connection.
        assert_eq!(counts.lock().unwrap().len(), n);
        assert!(counts.lock().unwrap().iter().all(|&c| c == size as u64));
        let watched = watched_flows(&db);
        let server_side: Vec<&Value> = watched.iter().filter(|w| w["closed"] == true).collect();
        // A socket sampled after the client's FIN (CLOSE_WAIT, LAST_ACK) had received
        // everything: load cannot change that count, only whether such a sample was
        // taken before the socket went.
        let after_fin =
            |w: &Value| matches!(w["last_state"].as_str(), Some("CloseWait" | "LastAck"));
        for w in &server_side {
            let received = w["counters"]["bytes_received"].as_u64().unwrap();
            if after_fin(w) {
                assert_eq!(received, size as u64 + 1, "{w}\n{out}");
            } else {
                assert!(received <= size as u64, "{w}");
            }
            assert!(
                w["counters"]["min_rtt_us"].as_u64().unwrap() >= 20_000,
                "{w}"
            );
        }
        let complete = server_side.iter().filter(|w| after_fin(w)).count();
        // As flows, the complete ones carried the 10 KiB of payload, FIN left out.
        let payloads = export_jsonl(&db, "flows")
            .iter()
            .filter(|f| f["received_bytes"] == size as u64)
            .count();
        assert_eq!(payloads, complete);
        let lived_less_than_a_sample = server_side
            .iter()
            .filter(|w| w["end_us"].as_i64().unwrap() - w["start_us"].as_i64().unwrap() < 100_000)
            .count();
        assert!(
            lived_less_than_a_sample > 0,
            "no connection shorter than a sample: {out}"
        );
        println!(
            "{} recorded, {complete} with their final counters, {lived_less_than_a_sample} shorter than a sample; {}",
            server_side.len(),
            err.lines().last().unwrap_or_default()
        );
        // Recording all of them, and each after the FIN, depends on reading the
        // tracepoint within a round trip.
        match (n - server_side.len(), n - complete) {
            (0, 0) => Ok(watched.len()),
            (missed, partial) => Err(format!(
                "{missed} of {n} not recorded, {partial} without their final counters; {}",
                err.lines().last().unwrap_or_default()
            )),
        }
    });
    assert_eq!(recorded, n);
    stop.store(true, Ordering::Relaxed);
}

/// `streams` connections from the lab's client host, each writing as fast as it can
/// until `db` holds a run with a batch of samples (at most 60 s), then closing.
fn busy_until_spooled(ns: &NetNs, port: u16, streams: usize, db: &Path) -> Vec<(Value, usize)> {
    let to: SocketAddr = (SERVER.parse::<std::net::IpAddr>().unwrap(), port).into();
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..streams)
        .map(|_| {
            let (ns, stop) = (ns.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                ns.run(move || {
                    let payload = vec![7u8; 64 * 1024];
                    let mut s = TcpStream::connect(to).unwrap();
                    while !stop.load(Ordering::Relaxed) {
                        s.write_all(&payload).unwrap();
                    }
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut rest = Vec::new();
                    s.read_to_end(&mut rest).unwrap();
                })
                .unwrap()
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let spooled = loop {
        std::thread::sleep(Duration::from_millis(500));
        let runs = runs_and_samples(db);
        if runs.iter().any(|(_, n)| *n > 0) {
            break runs;
        }
        assert!(
            Instant::now() < deadline,
            "no samples stored in 60 s: {runs:?}"
        );
    };
    // Samples beyond the batch stored, for the end to store.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    spooled
}

/// The stored runs and how many samples each holds, by `tcplab export`.
fn runs_and_samples(db: &Path) -> Vec<(Value, usize)> {
    if !db.exists() {
        return Vec::new();
    }
    let samples = export_jsonl(db, "samples");
    export_jsonl(db, "runs")
        .into_iter()
        .map(|run| {
            let n = samples.iter().filter(|s| s["run_id"] == run["id"]).count();
            (run, n)
        })
        .collect()
}

/// `watch --db` stores samples in batches as it goes: while it runs the database holds
/// a provisional run with those taken so far; once it ends, one run with every sample
/// its flows counted and no provisional run. Killed, it leaves the provisional run,
/// incomplete and saying why, with every batch stored before.
#[test]
fn a_watch_stores_its_samples_as_it_goes_and_a_killed_one_keeps_them() {
    if !privileged_or_skip("watch_spool") {
        return;
    }
    let _machine = among_others();
    // At a rate, the four writers leave the CPUs to the watch (and to other tests):
    // flat out, the emulator took them and a batch took 20 s to fill.
    let lab = LabGuard::up(&lab_name("ws", 1), &["--path", "rtt 2ms rate 50mbit"]);
    let server_ns = NetNs::open(&lab.server_ns()).unwrap();
    let client_ns = NetNs::open(&lab.client_ns()).unwrap();
    let port = 7302;
    let stop = Arc::new(AtomicBool::new(false));
    let counts = counting_server(&server_ns, port, Arc::clone(&stop));
    // Four connections, both ends, sampled every millisecond until a batch
    // (tcplab_experiment::watch::SPOOL_SAMPLES, 8 192) is stored.
    let streams = 4;
    let start = |dir: &Path| {
        let db = dir.join("watch.db");
        let port = port.to_string();
        let args = ["--port", &port, "-i", "1ms", "--db", db.to_str().unwrap()];
        (start_watch(&lab.client_ns(), &args, dir), db)
    };
    let dir = tempfile::tempdir().unwrap();
    let (watch, db) = start(dir.path());
    let during = busy_until_spooled(&client_ns, port, streams, &db);
    let (ok, _, err) = interrupt(watch, dir.path());
    assert!(ok, "watch failed: {err}");
    assert_eq!(counts.lock().unwrap().len(), streams);
    assert_eq!(during.len(), 1, "{during:?}");
    let (provisional, spooled) = &during[0];
    assert_eq!(provisional["status"], "incomplete", "{provisional}");
    assert!(*spooled >= 8_192, "{spooled} samples stored while watching");
    let after = runs_and_samples(&db);
    assert_eq!(after.len(), 1, "{after:?}");
    let (run, stored) = &after[0];
    assert!(run["id"] != provisional["id"], "{run}");
    assert!(run["error"].is_null(), "{run}");
    let flows = export_jsonl(&db, "flows");
    assert_eq!(flows.len(), streams, "{flows:?}");
    let counted: u64 = flows
        .iter()
        .map(|f| f["samples"].as_u64().unwrap() + f["receiver_samples"].as_u64().unwrap())
        .sum();
    assert_eq!(*stored as u64, counted);
    assert!(
        *stored > *spooled,
        "{stored} stored, {spooled} before the end"
    );
    println!("{spooled} samples stored while watching, {stored} in the run");

    // Killed: the batches stored so far stay, under a run that says what happened.
    let killed_dir = tempfile::tempdir().unwrap();
    let (mut watch, db) = start(killed_dir.path());
    busy_until_spooled(&client_ns, port, streams, &db);
    watch.0.kill().unwrap();
    watch.0.wait().unwrap();
    let left = runs_and_samples(&db);
    assert_eq!(left.len(), 1, "{left:?}");
    let (run, kept) = &left[0];
    assert_eq!(run["status"], "incomplete", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(error.contains("did not store its connections"), "{run}");
    assert!(*kept >= 8_192, "{kept} samples kept");
    let explained = tcplab()
        .args(["explain", "--db", db.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(explained.status.success(), "{}", stderr(&explained));
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("error:") && l.contains("did not store")),
        "{text}"
    );
    stop.store(true, Ordering::Relaxed);
}

/// iperf3 through a lab, watched in its client host, against tcplab's own run over the
/// same path: the same dominant limit, throughput within 2 % and each limit's share
/// within 5 points.
#[test]
fn iperf3_watched_agrees_with_tcplab_s_own_run() {
    if !privileged_or_skip("iperf3_watched_agrees_with_tcplab_s_own_run")
        || !support::iperf3_or_skip("iperf3_watched_agrees_with_tcplab_s_own_run")
    {
        return;
    }
    let _machine = alone();
    let lab = LabGuard::up(&lab_name("wi", 1), &["--path", "rtt 20ms rate 50mbit"]);
    let mut iperf3 = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.server_ns(),
            support::IPERF3,
            "-s",
            "-p",
            "5299",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    one_of_three_tries(
        "iperf3 watched within 2 % and 5 points of tcplab's run",
        || {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("watch.db");
            let watch = start_watch(
                &lab.client_ns(),
                &["--port", "5299", "--db", db.to_str().unwrap()],
                dir.path(),
            );
            let out = Command::new("ip")
                .args(["netns", "exec", &lab.client_ns(), support::IPERF3])
                .args(["-c", SERVER, "-p", "5299", "-t", "4", "-J"])
                .output()
                .unwrap();
            let (ok, _, err) = interrupt(watch, dir.path());
            assert!(ok, "{err}");
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            let iperf3_bps = report["end"]["sum_received"]["bits_per_second"]
                .as_f64()
                .unwrap();
            // The data connection: the watched socket that sent the most.
            let flows = export_jsonl(&db, "flows");
            let data = flows
                .iter()
                .max_by_key(|f| f["sent_bytes"].as_u64().unwrap())
                .unwrap();
            let watched_bps = data["sent_bps"].as_f64().unwrap();
            assert!(data["direction"] == "up", "{data}");
            let ours = parse_success(
                &tcplab()
                    .args([
                        "run",
                        "--path",
                        "rtt 20ms rate 50mbit",
                        "-t",
                        "4s",
                        "--json",
                    ])
                    .output()
                    .unwrap(),
            );
            let ours_bps = ours["summary"]["received_bps"].as_f64().unwrap();
            let dominant = ours["summary"]["dominant_limit"].as_str().unwrap();
            let limit = |f: &Value, l: &str| f[format!("limit_{l}")].as_f64().unwrap_or(0.0);
            let watched_dominant = ["rwnd", "sndbuf", "cwnd", "pacing", "app"]
                .into_iter()
                .max_by(|a, b| limit(data, a).total_cmp(&limit(data, b)))
                .unwrap();
            assert_eq!(watched_dominant, dominant, "{data}\n{ours}");
            let shares: Vec<(f64, f64)> = ["rwnd", "sndbuf", "cwnd", "pacing", "app"]
                .into_iter()
                .map(|l| {
                    (
                        limit(data, l),
                        f64_at(&ours, &format!("/summary/limits/{l}")),
                    )
                })
                .collect();
            println!("limit shares, watched against tcplab's: {shares:?}");
            // The watched rate covers the connection's whole life, slow start included,
            // as iperf3's own figure does.
            let off = |a: f64, b: f64| (a - b).abs() / b;
            let points = shares
                .iter()
                .map(|(w, o)| (w - o).abs() * 100.0)
                .fold(0.0, f64::max);
            if off(watched_bps, iperf3_bps) > 0.02
                || off(watched_bps, ours_bps) > 0.02
                || points > 5.0
            {
                return Err(format!(
                "watched {watched_bps:.0}, iperf3 {iperf3_bps:.0}, tcplab {ours_bps:.0} bit/s; shares {points:.1} points apart"
            ));
            }
            println!(
            "watched {watched_bps:.0}, iperf3 {iperf3_bps:.0}, tcplab {ours_bps:.0} bit/s; {dominant}"
        );
            Ok(())
        },
    );
    let _ = iperf3.kill();
    let _ = iperf3.wait();
}

#[test]
fn bad_input_is_one_line_before_anything_starts() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--cgroup", "no/such/unit.service"],
            "--cgroup no/such/unit.service: ",
        ),
        (
            &["--pid", "4000000000"],
            "--pid 4000000000: no such process",
        ),
        (
            &["-i", "500us"],
            "a watch's sample interval must be 1..=100 ms",
        ),
        (
            &["-i", "1s"],
            "a watch's sample interval must be 1..=100 ms",
        ),
        (
            &["--addr", "10.0.0.0/40"],
            "prefix length 40 is longer than the address's 32 bits",
        ),
    ];
    for (args, expected) in cases {
        let out = tcplab().arg("watch").args(args).output().unwrap();
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let out = tcplab()
        .args(["--netns", "no-such-netns-tcplab", "watch"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot enter netns 'no-such-netns-tcplab'"),
        "{err}"
    );
}

/// A filter that matches nothing says so once and keeps watching to its end.
#[test]
fn a_filter_matching_nothing_says_so_once_and_keeps_watching() {
    let out = tcplab()
        .args([
            "watch",
            "--port",
            "9",
            "--addr",
            "192.0.2.0/24",
            "-t",
            "300ms",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("no connection matches").count(), 1, "{err}");
    assert!(err.contains("0 connections over"), "{err}");
}

/// `--json` streams one JSON document a line as things happen: a loopback connection of
/// 1 MiB opens, reports and closes, its counters the bytes this test's server read.
#[test]
fn json_lines_follow_a_loopback_connection_to_its_final_counters() {
    let _machine = alone();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let watch = tcplab()
        .args(["watch", "--json", "--port", &port.to_string(), "-t", "3s"])
        .args(["--report-interval", "200ms"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("watch.err")).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).unwrap();
        buf.len()
    });
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let client_port = client.local_addr().unwrap().port();
    for _ in 0..16 {
        client.write_all(&[1u8; 65536]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    // Everything acknowledged and sampled before the close.
    std::thread::sleep(Duration::from_millis(200));
    drop(client);
    let read = server.join().unwrap();
    assert_eq!(read, 1 << 20);
    let out = watch.wait_with_output().unwrap();
    let err = std::fs::read_to_string(dir.path().join("watch.err")).unwrap();
    assert!(out.status.success(), "{err}");
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let opened = |local_port: u16| {
        lines
            .iter()
            .find(|l| {
                l["event"] == "opened"
                    && l["local"]
                        .as_str()
                        .unwrap()
                        .ends_with(&format!(":{local_port}"))
            })
            .unwrap_or_else(|| panic!("no socket on port {local_port}: {lines:?}"))["flow"]
            .as_u64()
            .unwrap()
    };
    let (client_flow, server_flow) = (opened(client_port), opened(port));
    let closed = |flow: u64| {
        lines
            .iter()
            .find(|l| l["event"] == "closed" && l["flow"] == flow)
            .unwrap_or_else(|| panic!("flow {flow} not closed: {lines:?}"))["watched"]["counters"]
            .clone()
    };
    // The kernel counts the SYN among the bytes acknowledged.
    assert_eq!(closed(client_flow)["bytes_acked"], (1 << 20) + 1);
    let received = closed(server_flow)["bytes_received"].as_u64().unwrap();
    assert!(
        received == 1 << 20 || received == (1 << 20) + 1,
        "{received}"
    );
    let intervals: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "interval" && l["flow"] == client_flow)
        .collect();
    assert!(intervals.len() >= 3, "{intervals:?}");
    let acked: u64 = intervals
        .iter()
        .map(|i| i["acked_bytes"].as_u64().unwrap())
        .sum();
    // From its first sample (after the handshake, maybe after some data) to its last.
    assert!(
        ((1 << 20) - 2 * 65536..=1 << 20).contains(&acked),
        "{acked}"
    );
}

/// `--pid`, `--comm` and `--cgroup` take this test's own loopback connection (both its
/// sockets are this process's) and leave it out for another process or cgroup.
#[test]
fn pid_comm_and_cgroup_select_the_test_s_own_connection() {
    if !privileged_or_skip("pid_comm_and_cgroup_select_the_test_s_own_connection") {
        return;
    }
    let _machine = alone();
    let own = std::process::id().to_string();
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    let comm = comm.trim_end();
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let other = sleeper.id().to_string();
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    // Relative to the cgroup v2 root, wherever it is mounted ("." for the root itself).
    let cgroup = cgroup.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let cgroup = match cgroup.trim_start_matches('/') {
        "" => ".".to_string(),
        path => path.to_string(),
    };
    // A cgroup of its own, empty: no socket is made in it.
    let empty = format!("tcplab-watch-test-{own}");
    let _empty = RemovedAtEnd::made(tcplab_sys::sockdiag::cgroup2_root().unwrap().join(&empty));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    // Each filter and the connections it takes: this test's own pid, name and cgroup
    // take both ends; another process's, a name no process has and an empty cgroup
    // none. Every watch at once, over the same connection.
    let filters = [
        (["--pid", own.as_str()], 2),
        (["--comm", comm], 2),
        (["--cgroup", &cgroup], 2),
        (["--pid", other.as_str()], 0),
        (["--comm", "no-such-comm"], 0),
        (["--cgroup", &empty], 0),
    ];
    let watches: Vec<_> = filters
        .iter()
        .map(|(filter, _)| {
            let dir = tempfile::tempdir().unwrap();
            let watch = tcplab()
                .args(["watch", "--json", "--port", &port, "-t", "2500ms"])
                .args(filter)
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(dir.path().join("err")).unwrap())
                .spawn()
                .unwrap();
            (watch, dir)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1000));
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop((client, server));
    for ((filter, expected), (watch, dir)) in filters.iter().zip(watches) {
        let out = watch.wait_with_output().unwrap();
        let err = std::fs::read_to_string(dir.path().join("err")).unwrap();
        assert!(out.status.success(), "{filter:?}: {err}");
        let opened = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| l.contains(r#""event":"opened""#))
            .inspect(|l| assert!(l.contains(&format!(r#""pid":{own}"#)), "{filter:?}: {l}"))
            .count();
        assert_eq!(opened, *expected, "{filter:?}: {err}");
        if *expected == 0 {
            assert_eq!(err.matches("no connection matches").count(), 1, "{err}");
        }
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// A directory made for a test and removed when it ends, however it ends.
struct RemovedAtEnd(std::path::PathBuf);

impl RemovedAtEnd {
    fn made(path: std::path::PathBuf) -> RemovedAtEnd {
        std::fs::create_dir(&path).unwrap();
        RemovedAtEnd(path)
    }
}

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}
