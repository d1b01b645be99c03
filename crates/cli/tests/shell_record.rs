//! `tcplab shell --record`: real programs on both ends of a lab's path, every connection
//! of both hosts stored as one run, checked against the programs' own counts (iperf3's
//! report, the file curl fetched, a capture read by tshark); explain's verdict on it;
//! the server's program dying with tcplab; bad input.

use crate::support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    alone, among_others, capture_directions, export_jsonl, failure, json_column, kill_once_running,
    one_of_three_tries, stderr, str_at, tcplab, tshark_or_skip,
};
use tcplab_sys::netns::privileged_or_skip;

/// The run's rows as `tcplab export` writes them.
fn runs(db: &Path) -> Vec<Value> {
    export_jsonl(db, "runs")
}

/// The namespaces a `shell` named on its first stderr line ("lab shNNN: …") are gone.
fn assert_lab_removed(out: &Output) {
    let err = stderr(out);
    let name = err
        .lines()
        .find_map(|l| l.strip_prefix("lab ")?.split(':').next())
        .unwrap_or_else(|| panic!("no lab line in {err}"));
    for host in ["client", "server"] {
        let ns = Path::new("/run/netns").join(format!("{name}-{host}"));
        assert!(!ns.exists(), "{} left behind", ns.display());
    }
}

fn explain_json(db: &Path) -> Value {
    let out = tcplab()
        .args(["explain", "--db", db.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// iperf3 on both ends through 20 ms and 50 Mbit/s: one run, both command lines, the
/// data connection's two ends one flow carrying what iperf3's receiver counted (within
/// 2 %), and explain's verdict the link.
#[test]
fn iperf3_behind_a_path_is_one_run_with_its_bytes_and_a_link_verdict() {
    if !privileged_or_skip("shell_record_iperf3") || !support::iperf3_or_skip("shell_record_iperf3")
    {
        return;
    }
    let _machine = alone();
    one_of_three_tries("iperf3's bytes within 2 % and a link verdict", || {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("shell.db");
        let report = dir.path().join("iperf3.json");
        let client = format!("iperf3 -c $TCPLAB_SERVER -t 2 -J > {}", report.display());
        let out = tcplab()
            .args(["shell", "--path", "rtt 20ms rate 50mbit", "--record"])
            .arg(&db)
            .args(["--server-cmd", "iperf3 -s -1", "--", "sh", "-c", &client])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert_lab_removed(&out);
        let runs = runs(&db);
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0]["kind"], "watch");
        let watch: Value = json_column(&runs[0], "watch_json");
        assert_eq!(
            watch["shell"]["client"],
            serde_json::json!(["sh", "-c", client])
        );
        assert_eq!(watch["shell"]["server"], "iperf3 -s -1");
        let path: Value = json_column(&runs[0], "path_json");
        assert!(path["spec"]
            .as_str()
            .unwrap()
            .starts_with("rtt 20ms rate 50mbit"));
        // The control and the data connection, each with both ends watched.
        let flows = export_jsonl(&db, "flows");
        assert_eq!(flows.len(), 2, "{flows:?}");
        for f in &flows {
            let w: Value = json_column(f, "watched_json");
            assert!(w["peer"].is_object(), "one end only: {w}");
            // Both ends seen closing: the watch outlasts the FINs crossing the path.
            assert!(w["closed"].as_bool().unwrap(), "{w}");
            assert!(w["peer"]["closed"].as_bool().unwrap(), "{w}");
        }
        let data = flows
            .iter()
            .max_by_key(|f| f["received_bytes"].as_u64().unwrap())
            .unwrap();
        let ours = data["received_bytes"].as_f64().unwrap();
        let iperf3: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let theirs = iperf3["end"]["sum_received"]["bytes"].as_f64().unwrap();
        let e = explain_json(&db);
        let verdict = e["verdict"]["limit"].as_str().unwrap().to_owned();
        println!("received {ours} B, iperf3 {theirs} B; verdict {verdict}");
        if (ours - theirs).abs() / theirs > 0.02 {
            return Err(format!("received {ours} B, iperf3 counted {theirs} B"));
        }
        if verdict != "link" {
            return Err(format!("verdict {verdict}: {}", e["verdict"]["reason"]));
        }
        Ok(())
    });
}

/// curl fetching a file five times from python's http.server: five short connections,
/// each recorded with the file and the response's header, sent by the server.
#[test]
fn short_http_connections_are_each_recorded_with_their_bytes() {
    if !privileged_or_skip("shell_record_http") {
        return;
    }
    // Alone: a connection's bytes are its last sample's, which a watcher kept off the
    // CPU while the socket closes takes too early.
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let size = 200_000usize;
    std::fs::write(dir.path().join("file"), vec![b'x'; size]).unwrap();
    let db = dir.path().join("shell.db");
    let server = format!(
        "exec python3 -m http.server 8000 --bind $TCPLAB_SERVER --directory {}",
        dir.path().display()
    );
    let client = "for i in 1 2 3 4 5; do curl -sf -o /dev/null http://$TCPLAB_SERVER:8000/file || exit 1; done";
    let out = tcplab()
        .args(["shell", "--path", "rtt 10ms rate 100mbit", "--record"])
        .arg(&db)
        .args(["--server-cmd", &server, "--", "sh", "-c", client])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_lab_removed(&out);
    assert_eq!(runs(&db).len(), 1);
    let flows = export_jsonl(&db, "flows");
    assert_eq!(flows.len(), 5, "{flows:?}");
    for f in &flows {
        let w: Value = json_column(f, "watched_json");
        assert!(w["closed"].as_bool().unwrap(), "{w}");
        assert!(w["peer"].is_object(), "one end only: {w}");
        // The server's end sends: the file and a header of some 200 bytes.
        let sent = f["received_bytes"].as_u64().unwrap() as usize;
        assert!((size..size + 400).contains(&sent), "{sent} B: {f}");
    }
}

/// curl fetching a file twice from python's http.server through a path that loses 2 %
/// of what the server sends, with `--capture`: each connection's bytes (the client's
/// count, header and file) and retransmissions (the server's) are what tshark reads in
/// the capture — the highest sequence number the server sent, and the segments that
/// start below what it had sent, SYN-ACK and FIN included as the kernel counts them
/// (the capture holds the lost originals too).
#[test]
fn curl_watched_has_a_captures_bytes_and_retransmits() {
    if !privileged_or_skip("shell_record_capture") || !tshark_or_skip("shell_record_capture") {
        return;
    }
    let _machine = alone();
    one_of_three_tries(
        "each connection's bytes and retransmits as tshark reads them",
        || {
            let dir = tempfile::tempdir().unwrap();
            let size = 2_000_000usize;
            std::fs::write(dir.path().join("file"), vec![b'x'; size]).unwrap();
            let (db, capture) = (dir.path().join("shell.db"), dir.path().join("cap.pcapng"));
            let server = format!(
                "exec python3 -m http.server 8000 --bind $TCPLAB_SERVER --directory {}",
                dir.path().display()
            );
            let client = "for i in 1 2; do curl -sf -o /dev/null http://$TCPLAB_SERVER:8000/file || exit 1; done";
            let out = tcplab()
                .args([
                    "shell",
                    "--path",
                    "rtt 10ms rate 50mbit down.loss 2%",
                    "--record",
                ])
                .arg(&db)
                .arg("--capture")
                .arg(&capture)
                .args(["--server-cmd", &server, "--", "sh", "-c", client])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", stderr(&out));
            let flows = export_jsonl(&db, "flows");
            assert_eq!(flows.len(), 2, "{flows:?}");
            let captured = capture_directions(&capture);
            for f in &flows {
                // The flow's client is the sender: the HTTP server.
                let (sender, receiver) = (str_at(f, "/client_addr"), str_at(f, "/server_addr"));
                let from_server = captured
                    .get(sender, receiver)
                    .unwrap_or_else(|| panic!("{sender} → {receiver} is not in the capture"));
                let (highest, retransmitted) = (from_server.payload, from_server.retransmitted);
                let received = f["received_bytes"].as_u64().unwrap();
                let retransmits = f["retransmits"].as_u64().unwrap();
                println!("{receiver}: received {received} B, capture {highest} B; retransmits {retransmits}, capture {retransmitted}");
                // The file and a response header of some 200 bytes.
                assert!(
                    (size..size + 400).contains(&(highest as usize)),
                    "{highest} B"
                );
                assert!(retransmitted > 0, "no segment lost of {highest} B");
                if received != highest || retransmits != retransmitted {
                    return Err(format!(
                        "{receiver}: received {received} B, retransmits {retransmits}; the capture's {highest} B, {retransmitted}"
                    ));
                }
            }
            Ok(())
        },
    );
}

/// `--trace-events`: the kernel's events of a curl fetch through 2 % loss, stored with
/// the run and attributed to its one flow: segments received at both ends (tcp_probe),
/// and at the sender (python3, the flow's client) as many retransmission events as the
/// kernel's counter says or fewer (one event per skb, which may carry several), and a
/// recovery for each cwnd cut.
#[test]
fn trace_events_are_stored_with_the_watched_flow() {
    if !privileged_or_skip("shell_record_trace") {
        return;
    }
    // Alone: the flow's retransmits are the watch's last sample's, which a watcher kept
    // off the CPU takes too early, below the events traced.
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), vec![b'x'; 2_000_000]).unwrap();
    let db = dir.path().join("shell.db");
    let server = format!(
        "exec python3 -m http.server 8000 --bind $TCPLAB_SERVER --directory {}",
        dir.path().display()
    );
    let out = tcplab()
        .args([
            "shell",
            "--path",
            "rtt 10ms rate 50mbit down.loss 2%",
            "--record",
        ])
        .arg(&db)
        .args(["--trace-events", "--server-cmd", &server, "--", "sh", "-c"])
        .arg("curl -sf -o /dev/null http://$TCPLAB_SERVER:8000/file")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let runs = runs(&db);
    let trace: Value = json_column(&runs[0], "trace_json");
    assert_eq!(trace["taken"], true, "{trace}");
    let flows = export_jsonl(&db, "flows");
    assert_eq!(flows.len(), 1, "{flows:?}");
    let events = export_jsonl(&db, "events");
    assert_eq!(trace["events"].as_u64().unwrap() as usize, events.len());
    let count = |host: &str, kind: &str| {
        events
            .iter()
            .filter(|e| e["host"] == host && e["kind"] == kind)
            .count() as u64
    };
    assert!(count("client", "probe") > 0 && count("server", "probe") > 0);
    let retransmits = flows[0]["retransmits"].as_u64().unwrap();
    let traced = count("client", "retransmit");
    println!("retransmits {retransmits}, retransmission events {traced}");
    assert!(
        traced > 0 && traced <= retransmits,
        "{traced} events, {retransmits} retransmits"
    );
    assert!(count("client", "cong_state") > 0);
}

/// Bad input: one line naming it, a non-zero exit, and no lab left behind.
#[test]
fn bad_input_is_one_line_and_leaves_no_lab() {
    let out = tcplab()
        .args(["shell", "--record", "/tmp/x.db", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("shell needs --path"),
        "{}",
        stderr(&out)
    );

    // A dynamic gap pacer follows tcplab's own senders, which a shell has none of.
    let out = tcplab()
        .args(["shell", "--path", "rate 10mbit up.pace cwnd", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        failure(&out),
        "tcplab: --path: pace cwnd follows the senders' tcp_info, which a shell's programs do not publish: use it with `tcplab run` or a sweep, or give pace a rate"
    );

    let out = tcplab()
        .args(["shell", "--path", "rtt 1ms", "--record", "/dev/null/x.db"])
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("/dev/null/x.db"), "{}", stderr(&out));

    if !privileged_or_skip("shell_record_bad_server") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shell.db");
    let out = tcplab()
        .args(["shell", "--path", "rtt 1ms", "--record"])
        .arg(&db)
        .args(["--server-cmd", "exit 3", "--", "touch"])
        .arg(dir.path().join("ran"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    let last = err.lines().last().unwrap();
    assert!(
        last.contains("--server-cmd 'exit 3' ended (exit status: 3) before the command started"),
        "{err}"
    );
    assert!(!dir.path().join("ran").exists(), "the command ran");
    assert_lab_removed(&out);
}

/// kill -9 of `tcplab shell --server-cmd …`: the server's program goes with it, and the
/// lab, without `lab gc` — killed while waiting for the server to listen (only the
/// server's init is there to clean up), or while the command runs (the command's and
/// the server's inits both remove the lab, one at a time).
#[test]
fn a_killed_shell_takes_its_server_command_with_it() {
    if !privileged_or_skip("shell_killed_server") {
        return;
    }
    // Waits and deadlines of seconds: among others.
    let _machine = among_others();
    // `sleep` listens on nothing: the command starts after the 5 s of waiting for it.
    for running in ["sleep 1000", "sleep 1001"] {
        let shell = tcplab()
            .args(["shell", "--path", "rtt 1ms", "--server-cmd", "sleep 1000"])
            .args(["--", "sleep", "1001"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let name = format!("sh{}", shell.id());
        let left = kill_once_running(shell, running);
        assert!(
            left.is_empty(),
            "killed once `{running}` ran: {left:?} left"
        );
        let namespaces =
            ["client", "server"].map(|h| Path::new("/run/netns").join(format!("{name}-{h}")));
        let deadline = Instant::now() + Duration::from_secs(5);
        while namespaces.iter().any(|ns| ns.exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for ns in &namespaces {
            assert!(
                !ns.exists(),
                "killed once `{running}` ran: {} left",
                ns.display()
            );
        }
        let entry = Path::new("/run/tcplab/labs").join(format!("{name}.json"));
        assert!(!entry.exists(), "{} left", entry.display());
    }
}
