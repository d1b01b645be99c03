//! tcplab against the real iperf3 (Debian's package) both ways: `tcplab run --iperf3`
//! and `tcplab serve --iperf3`, on loopback (no privileges needed) and, for loss, across
//! a lab. Without iperf3 installed the tests print `SKIP …` and pass; with `CI=true` a
//! missing iperf3 fails them.

use crate::support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::process::{Child, Command, Stdio};
use std::thread;

use serde_json::Value;
use support::{
    alone, await_listening, binomial99, free_port, iperf3_or_skip, lab_name, one_of_three_tries,
    serve_in_with, tcplab, KilledOnDrop, LabGuard, IPERF3,
};
use tcplab_sys::netns::privileged_or_skip;

/// `iperf3 -s -1 -J` on 127.0.0.1:`port`, once it listens.
fn iperf3_server(port: u16) -> Child {
    let child = Command::new(IPERF3)
        .args(["-s", "-1", "-J", "-B", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting iperf3 -s");
    await_listening(&child, SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    child
}

/// Runs `tcplab run --iperf3` with `args` against a fresh `iperf3 -s`; returns
/// tcplab's JSON and the iperf3 server's own `-J` report.
fn run_against_iperf3(args: &[&str]) -> (Value, Value) {
    let port = free_port();
    let server = iperf3_server(port);
    let out = tcplab()
        .args(["run", "--iperf3", &format!("127.0.0.1:{port}"), "--json"])
        .args(args)
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "tcplab failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
    let theirs: Value = serde_json::from_slice(&server.stdout).expect("iperf3's -J is JSON");
    assert!(
        theirs.get("error").is_none(),
        "iperf3 -s: {}",
        theirs["error"]
    );
    (ours, theirs)
}

/// What `run` returns, and the UDP datagrams the kernel dropped at full receiving
/// sockets in this namespace meanwhile (`RcvbufErrors`).
fn with_socket_drops<T>(run: impl FnOnce() -> T) -> (T, u64) {
    let drops = || {
        tcplab_sys::snmp::counter("Udp", "RcvbufErrors")
            .unwrap()
            .unwrap()
    };
    let before = drops();
    let value = run();
    (value, drops() - before)
}

/// On loopback nothing but a full socket loses a datagram (an end descheduled on a
/// busy machine): the loss a receiver counted must be the kernel's drops.
fn assert_lost_only_at_sockets(what: &str, lost: u64, socket_drops: u64) {
    assert!(
        lost <= socket_drops,
        "{what}: {lost} counted lost; the kernel dropped {socket_drops} at full UDP sockets"
    );
}

/// A rate within `tolerance` of its reference (usually the other end's). The two ends
/// time different windows, and a loaded machine stretches one of them by tens of ms:
/// the tests compare them in `one_of_three_tries`.
fn within(what: &str, rate: f64, reference: f64, tolerance: f64) -> Result<(), String> {
    let gap = (rate - reference).abs() / reference;
    if gap <= tolerance {
        return Ok(());
    }
    Err(format!(
        "{what}: {:.3} vs {:.3} Gbit/s ({:.2} % apart)",
        rate / 1e9,
        reference / 1e9,
        gap * 100.0
    ))
}

#[test]
fn sending_to_iperf3_agrees_with_its_receiver_report() {
    if !iperf3_or_skip("sending_to_iperf3_agrees_with_its_receiver_report") {
        return;
    }
    let _machine = alone();
    one_of_three_tries("up", || {
        let (ours, theirs) =
            run_against_iperf3(&["-t", "2", "-P", "2", "-w", "1M", "-l", "64K", "-C", "cubic"]);
        assert_eq!(ours["status"], "done");
        assert_eq!(ours["flows"].as_array().unwrap().len(), 2);
        assert_eq!(ours["flows"][0]["cc"], "cubic");
        assert!(
            ours["flows"][0]["samples"].as_u64().unwrap() > 100,
            "our side is sampled"
        );
        // Every byte we sent was acknowledged before TEST_END, so iperf3 read them all.
        let received = &theirs["end"]["sum_received"];
        assert_eq!(ours["summary"]["sent_bytes"], received["bytes"]);
        // iperf3 divides every byte it read by one window, TEST_START to TEST_END, which
        // follows our drain; tcplab's rates count to the deadline. Like for like: all our
        // bytes over our longest flow window, to its last byte acknowledged (iperf3's
        // single-threaded receiver drains one stream ~50 ms after the other).
        let longest = ours["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["sender_seconds"].as_f64().unwrap())
            .fold(0.0, f64::max);
        // iperf3's -w, as its server reports what it asked for.
        assert_eq!(theirs["start"]["sock_bufsize"], 1 << 20);
        within(
            "up, tcplab's sender vs iperf3's receiver",
            ours["summary"]["sent_bytes"].as_f64().unwrap() * 8.0 / longest,
            received["bits_per_second"].as_f64().unwrap(),
            0.02,
        )
    });
}

#[test]
fn receiving_from_iperf3_agrees_with_its_sender_report() {
    if !iperf3_or_skip("receiving_from_iperf3_agrees_with_its_sender_report") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let db = db.to_str().unwrap();
    one_of_three_tries("down", || {
        let (ours, theirs) = run_against_iperf3(&["-t", "2", "-R", "-P", "2", "-N", "--db", db]);
        assert_eq!(ours["status"], "done");
        // Nobody sampled iperf3's senders: explain does not guess their windows.
        let out = tcplab()
            .args(["explain", "--db", db, "--last", "--json"])
            .output()
            .unwrap();
        let explained: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(explained["verdict"]["limit"], "unknown", "{explained}");
        assert_eq!(ours["flows"][1]["direction"], "down");
        assert!(ours["flows"][0]["receiver_samples"].as_u64().unwrap() > 100);
        assert_eq!(theirs["start"]["test_start"]["reverse"], 1);
        within(
            "down, tcplab's receiver vs iperf3's sender",
            ours["summary"]["received_bps"].as_f64().unwrap(),
            theirs["end"]["sum_sent"]["bits_per_second"]
                .as_f64()
                .unwrap(),
            0.02,
        )
    });
}

#[test]
fn udp_to_iperf3_is_counted_by_its_receiver() {
    if !iperf3_or_skip("udp_to_iperf3_is_counted_by_its_receiver") {
        return;
    }
    let _machine = alone();
    // The rate against the target is the sender's own accuracy, which a stalled CI
    // machine can spoil (the sender then counts itself `late` or `unsent`). What iperf3
    // counted must equal what we sent on every try.
    one_of_three_tries("udp up to iperf3", || {
        let ((ours, theirs), socket_drops) = with_socket_drops(|| {
            run_against_iperf3(&["-t", "2", "-u", "-b", "100mbit", "-l", "1400"])
        });
        assert_eq!(ours["status"], "done");
        assert_eq!(theirs["start"]["test_start"]["protocol"], "UDP");
        // iperf3 read our headers: its count of datagrams is ours, none reordered.
        let received = &theirs["end"]["sum"];
        let sent = ours["summary"]["udp"]["sent"].as_u64().unwrap();
        assert_eq!(received["packets"].as_u64().unwrap(), sent);
        let lost = received["lost_packets"].as_u64().unwrap();
        assert_lost_only_at_sockets("iperf3 -s", lost, socket_drops);
        assert_eq!(theirs["end"]["streams"][0]["udp"]["out_of_order"], 0);
        // iperf3 3.12's UDP receiver reports 0 bytes; its datagrams over its window:
        let theirs_bps = received["packets"].as_f64().unwrap() * 1400.0 * 8.0
            / received["seconds"].as_f64().unwrap();
        within(
            "udp up, tcplab's sender vs iperf3's receiver",
            ours["summary"]["sent_bps"].as_f64().unwrap(),
            theirs_bps,
            0.02,
        )?;
        if (theirs_bps - 100e6).abs() / 100e6 <= 0.02 {
            return Ok(());
        }
        Err(format!(
            "iperf3 counted {:.2} Mbit/s for a target of 100 ({} late, {} unsent)",
            theirs_bps / 1e6,
            ours["summary"]["udp"]["late"],
            ours["summary"]["udp"]["unsent"]
        ))
    });
}

#[test]
fn udp_from_iperf3_agrees_with_its_sender_report() {
    if !iperf3_or_skip("udp_from_iperf3_agrees_with_its_sender_report") {
        return;
    }
    let _machine = alone();
    one_of_three_tries("udp down", || {
        let (ours, theirs) =
            run_against_iperf3(&["-t", "2", "-u", "-b", "100mbit", "-l", "1400", "-R"]);
        assert_eq!(ours["status"], "done");
        let udp = &ours["summary"]["udp"];
        assert_eq!(udp["sent"], theirs["end"]["sum"]["packets"]);
        assert_eq!(udp["duplicates"], 0);
        assert_eq!(udp["out_of_order"], 0);
        // Our receiver read iperf3's timestamps: one machine, so one-way delays are µs.
        if udp["owd_us"]["p50"].as_f64().unwrap() >= 1000.0 {
            return Err(format!("one-way delay over 1 ms on loopback: {udp}"));
        }
        within(
            "udp down, tcplab's receiver vs iperf3's sender",
            ours["summary"]["received_bps"].as_f64().unwrap(),
            theirs["end"]["sum"]["bits_per_second"].as_f64().unwrap(),
            0.02,
        )
    });
}

/// A server the test started, killed when the test ends, passed or not.
/// `tcplab serve --iperf3` on 127.0.0.1:`port`, once it listens.
fn tcplab_iperf3_server(port: u16) -> KilledOnDrop {
    let child = tcplab()
        .args([
            "serve",
            "--iperf3",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tcplab serve --iperf3");
    await_listening(&child, SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    KilledOnDrop(child)
}

#[test]
fn stock_iperf3_clients_get_valid_json_from_tcplab_serve() {
    if !iperf3_or_skip("stock_iperf3_clients_get_valid_json_from_tcplab_serve") {
        return;
    }
    let _machine = alone();
    let port = free_port();
    let _server = tcplab_iperf3_server(port);
    for args in [
        &["-t", "2", "-P", "2", "-w", "1M", "-C", "cubic"][..],
        &["-t", "2", "-R", "-N"][..],
    ] {
        one_of_three_tries(&format!("{args:?}"), || {
            let report = iperf3_client(None, "127.0.0.1", port, args);
            let end = &report["end"];
            let streams = end["streams"].as_array().unwrap();
            assert_eq!(streams.len(), if args.contains(&"-P") { 2 } else { 1 });
            // One side of each sum is tcplab's measurement, the other iperf3's.
            within(
                &format!("{args:?}, received vs sent"),
                end["sum_received"]["bits_per_second"].as_f64().unwrap(),
                end["sum_sent"]["bits_per_second"].as_f64().unwrap(),
                0.02,
            )
        });
    }
}

/// A fake server on loopback that reads the cookie, answers `reply` and closes.
fn fake_server(reply: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut cookie = [0u8; 37];
        let _ = conn.read_exact(&mut cookie);
        let _ = conn.write_all(reply);
    });
    port
}

fn run_error(port: u16) -> String {
    let out = tcplab()
        .args(["run", "--iperf3", &format!("127.0.0.1:{port}"), "-t", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn a_busy_iperf3_server_is_named_in_one_line() {
    let err = run_error(fake_server(&[0xff]));
    assert!(err.contains("is busy running another test"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_server_that_is_not_iperf3_is_named_in_one_line() {
    let err = run_error(fake_server(b"SSH-2.0-OpenSSH_9.6\r\n"));
    assert!(err.contains("does not speak iperf3's protocol"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// `tcplab ARGS…`: its one line on stderr, asserting a failure within 3 s (the handshake's
/// timeouts are 10 s: a server named at once is not one timed out on).
fn quick_one_line_failure(args: &[&str]) -> String {
    let started = std::time::Instant::now();
    let out = tcplab().args(args).output().unwrap();
    let took = started.elapsed();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(took < std::time::Duration::from_secs(3), "{took:?}: {err}");
    err
}

#[test]
fn a_tcplab_client_names_an_iperf3_server_and_the_flag_at_once() {
    if !iperf3_or_skip("iperf3_server_named") {
        return;
    }
    let _machine = alone();
    let port = free_port();
    let mut server = iperf3_server(port);
    let target = format!("127.0.0.1:{port}");
    let err = quick_one_line_failure(&["run", &target, "-t", "1"]);
    assert_eq!(
        err.trim(),
        format!("tcplab: {target} is an iperf3 server, not a tcplab one: test it with --iperf3")
    );
    let _ = server.kill();
    let _ = server.wait();
    // tcplab's own iperf3 server answers as iperf3 does.
    let port = free_port();
    let _ours = tcplab_iperf3_server(port);
    let target = format!("127.0.0.1:{port}");
    let err = quick_one_line_failure(&["run", &target, "-t", "1"]);
    assert!(err.contains("is an iperf3 server"), "{err}");
}

#[test]
fn an_iperf3_client_names_a_tcplab_server_and_the_flag_at_once() {
    let server = support::LoopbackServer::start(&[]);
    let target = server.addr.to_string();
    let err = quick_one_line_failure(&["run", "--iperf3", &target, "-t", "1"]);
    assert_eq!(
        err.trim(),
        format!("tcplab: {target} is a tcplab server, not an iperf3 one: test it without --iperf3")
    );
}

#[test]
fn an_iperf3_server_error_is_reported_with_its_code() {
    // SERVER_ERROR, then i_errno 17 and errno 0 as iperf3 writes them.
    let err = run_error(fake_server(&[0xfe, 0, 0, 0, 17, 0, 0, 0, 0]));
    assert!(err.contains("reported an error: i_errno 17"), "{err}");
}

/// `iperf3 -c HOST -p PORT -J ARGS…` (in `netns` if given): its report, checked free of
/// errors.
fn iperf3_client(netns: Option<&str>, host: &str, port: u16, args: &[&str]) -> Value {
    let mut command = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, IPERF3]);
            c
        }
        None => Command::new(IPERF3),
    };
    let out = command
        .args(["-c", host, "-p", &port.to_string(), "-J"])
        .args(args)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).expect("iperf3 -J stays JSON");
    assert!(
        report.get("error").is_none(),
        "{args:?}: {}",
        report["error"]
    );
    report
}

#[test]
fn stock_iperf3_udp_clients_are_served_both_ways() {
    if !iperf3_or_skip("stock_iperf3_udp_clients_are_served_both_ways") {
        return;
    }
    let _machine = alone();
    let port = free_port();
    let _server = tcplab_iperf3_server(port);
    // Up, two streams: tcplab's receivers count and time iperf3's datagrams. iperf3's
    // sender, starved of CPU, falls short of its rate, and jitter grows: those two
    // figures are the machine's, one of three tries.
    one_of_three_tries("up", || {
        let (up, socket_drops) = with_socket_drops(|| {
            iperf3_client(
                None,
                "127.0.0.1",
                port,
                &["-u", "-b", "50M", "-l", "1400", "-t", "2", "-P", "2"],
            )
        });
        let (sent, received) = (&up["end"]["sum_sent"], &up["end"]["sum_received"]);
        assert_eq!(up["end"]["streams"].as_array().unwrap().len(), 2);
        assert_eq!(received["packets"], sent["packets"], "{received}");
        let lost = received["lost_packets"].as_u64().unwrap();
        assert_lost_only_at_sockets("tcplab's receivers", lost, socket_drops);
        assert_eq!(
            received["bytes"].as_u64().unwrap(),
            (received["packets"].as_u64().unwrap() - lost) * 1400
        );
        if sent["packets"].as_u64().unwrap() <= 15_000
            || received["jitter_ms"].as_f64().unwrap() >= 1.0
        {
            return Err(format!("iperf3 sent {sent}, we received {received}"));
        }
        Ok(())
    });
    // Down (-R): tcplab sends at the rate iperf3 asked; iperf3 counts what we sent but
    // the few datagrams still on their way when it ended the test (measured: 0–1).
    one_of_three_tries("down", || {
        let (down, socket_drops) = with_socket_drops(|| {
            iperf3_client(
                None,
                "127.0.0.1",
                port,
                &["-u", "-b", "50M", "-l", "1400", "-t", "2", "-R"],
            )
        });
        let (sent, received) = (&down["end"]["sum_sent"], &down["end"]["sum_received"]);
        let lost = received["lost_packets"].as_u64().unwrap();
        assert_lost_only_at_sockets("iperf3 -c -R", lost, socket_drops);
        let ours = sent["packets"].as_u64().unwrap();
        let counted = received["packets"].as_u64().unwrap();
        assert!(counted <= ours, "sent {ours}, iperf3 counted {counted}");
        if ours - counted > 5 {
            return Err(format!("sent {ours}, iperf3 counted {counted}"));
        }
        within(
            "udp -R, iperf3's count vs the 50 Mbit/s it asked for",
            received["bits_per_second"].as_f64().unwrap(),
            50e6,
            0.02,
        )
    });
}

#[test]
fn an_iperf3_client_hears_the_loss_tcplab_counted() {
    if !privileged_or_skip("an_iperf3_client_hears_the_loss_tcplab_counted")
        || !iperf3_or_skip("an_iperf3_client_hears_the_loss_tcplab_counted")
    {
        return;
    }
    let _machine = alone();
    let lab = LabGuard::up(
        &lab_name("i3", 1),
        &["--path", "rate 100mbit up.loss 2% seed 1"],
    );
    let _server = serve_in_with(&lab.server_ns(), &lab.client_ns(), &["--iperf3"]);
    let report = iperf3_client(
        Some(&lab.client_ns()),
        "10.77.0.1",
        5201,
        &["-u", "-b", "20M", "-l", "1400", "-t", "2"],
    );
    let received = &report["end"]["sum_received"];
    let packets = received["packets"].as_u64().unwrap();
    let lost = received["lost_packets"].as_u64().unwrap() as f64;
    // The emulator drops 2 % of what the client sent; what iperf3 prints is our count.
    let (low, high) = binomial99(packets, 0.02);
    assert!((low..=high).contains(&lost), "{lost} of {packets} lost");
    assert_eq!(report["end"]["sum_sent"]["packets"], received["packets"]);
}
