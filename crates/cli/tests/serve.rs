//! `tcplab serve` facing the world: its key, whom it serves without one, its limits, and
//! peers that never finish their handshake. On loopback (no privileges needed) except the
//! peer off this host, which needs namespaces.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{f64_at, failure, flows, key_file, parse_success, str_at, Bed, LoopbackServer};
use tcplab_traffic::protocol::client_hello;

/// A control connection that has said its hello, with a generous read timeout.
fn hello_to(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&client_hello()).unwrap();
    s
}

/// The server's hello and its first message.
fn first_message(s: &mut TcpStream) -> Value {
    let mut hello = [0u8; 8];
    s.read_exact(&mut hello).unwrap();
    assert_eq!(hello, client_hello()[..8]);
    read_message(s)
}

fn read_message(s: &mut TcpStream) -> Value {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    serde_json::from_slice(&body).unwrap()
}

fn refusal(message: &Value) -> &str {
    assert_eq!(str_at(message, "/type"), "refused", "{message}");
    str_at(message, "/reason")
}

/// How long until the server closes a connection on which we say nothing more.
fn closed_after(mut s: TcpStream, since: Instant) -> Duration {
    let mut buf = [0u8; 256];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    since.elapsed()
}

#[test]
fn the_right_key_runs_and_a_wrong_or_missing_key_is_refused_before_anything_starts() {
    let _machine = support::among_others();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "server.key", b"correct horse battery staple\n");
    let wrong = key_file(dir.path(), "wrong.key", b"incorrect horse battery staple\n");
    let (key, wrong) = (key.to_str().unwrap(), wrong.to_str().unwrap());
    let server = LoopbackServer::start_in(dir, &["--key-file", key]);
    assert!(server.log().contains("clients must prove the key"));

    let v = parse_success(&server.run(&["-t", "0.3s", "--key-file", key, "--json"]));
    assert_eq!(str_at(&v, "/status"), "done");

    let err = failure(&server.run(&["-t", "0.3s", "--key-file", wrong]));
    assert!(err.contains("server refused the test: wrong key"), "{err}");
    let err = failure(&server.run(&["-t", "0.3s"]));
    assert!(
        err.contains("requires its pre-shared key") && err.contains("--key-file"),
        "{err}"
    );
    server.await_log("refused", 2);
    let log = server.log();
    assert!(log.contains("refused: wrong key"), "{log}");
    assert!(
        log.contains("refused: this server requires its pre-shared key"),
        "{log}"
    );
    // Only the test with the right key started.
    assert_eq!(log.matches("test of").count(), 1, "{log}");
}

#[test]
fn a_client_with_a_key_does_not_run_against_a_server_without_one() {
    let server = LoopbackServer::start(&[]);
    let key = key_file(server.dir.path(), "k", b"0123456789abcdef0123");
    let err = failure(&server.run(&["-t", "0.3s", "--key-file", key.to_str().unwrap()]));
    assert!(
        err.contains("cannot trust the server") && err.contains("no key"),
        "{err}"
    );
    assert!(!server.log().contains("test of"));
}

#[test]
fn unusable_key_files_get_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let short = key_file(dir.path(), "short.key", b"secret\n");
    let empty = key_file(dir.path(), "empty.key", b"");
    let one_line = |args: &[&str], words: &[&str]| {
        let out = support::tcplab().args(args).output().unwrap();
        let err = failure(&out);
        for word in words {
            assert!(err.contains(word), "{err} lacks {word}");
        }
    };
    let short = short.to_str().unwrap();
    one_line(
        &["serve", "--key-file", short],
        &["key file", short, "fewer than 16"],
    );
    one_line(
        &["run", "127.0.0.1:1", "--key-file", empty.to_str().unwrap()],
        &["empty.key", "the key is empty"],
    );
    one_line(
        &["serve", "--key-file", "/nonexistent/tcplab.key"],
        &["/nonexistent/tcplab.key"],
    );

    // A key others may read still serves, with a warning.
    let loose = key_file(dir.path(), "loose.key", b"0123456789abcdef");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let server = LoopbackServer::start(&["--key-file", loose.to_str().unwrap()]);
    assert!(
        server.log().contains("readable by other users"),
        "{}",
        server.log()
    );
}

#[test]
fn requests_beyond_the_limits_are_refused_naming_the_limit() {
    let _machine = support::alone();
    let server = LoopbackServer::start(&[
        "--max-streams",
        "2",
        "--max-duration",
        "2s",
        "--max-rate",
        "10mbit",
    ]);
    for (args, expected) in [
        (&["-P", "3"][..], "3 streams exceed --max-streams 2"),
        (
            &["-t", "3s"][..],
            "duration 3.00 s exceeds --max-duration 2.00 s",
        ),
        (
            &["-u", "-b", "20mbit"][..],
            "UDP rate (-b) of 20.0 Mbit/s exceeds --max-rate 10.0 Mbit/s",
        ),
        (&["-u", "-b", "0"][..], "as fast as possible"),
        (
            &["--fq-rate", "8mbit", "-P", "2"][..],
            "--fq-rate of 16.0 Mbit/s (2 streams × 8.00 Mbit/s) exceeds --max-rate",
        ),
    ] {
        let mut args = args.to_vec();
        if !args.contains(&"-t") {
            args.extend(["-t", "1s"]);
        }
        let err = failure(&server.run(&args));
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    server.await_log("refused", 5);
    assert!(!server.log().contains("test of"), "{}", server.log());

    // Within the limits a test runs, and what the server sends is paced to --max-rate
    // (at an Ethernet-sized MSS: loopback's 64 KiB one makes the unpaced initial window
    // alone 640 KiB).
    let v = parse_success(&server.run(&["-t", "1s", "-R", "-M", "1448", "--json"]));
    let mbit_s = f64_at(&flows(&v)[0], "/received_bps") / 1e6;
    eprintln!("paced to --max-rate 10mbit: {mbit_s:.2} Mbit/s");
    assert!((8.0..=11.0).contains(&mbit_s), "{mbit_s} Mbit/s");
}

/// Starts a 3-second test, then asserts that a second one is refused with `expected`
/// while it runs, and that the first still ends well.
fn second_test_refused(server: &LoopbackServer, expected: &str) {
    let first = server
        .client(&["-t", "3s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    server.await_log("test of", 1);
    let err = failure(&server.run(&["-t", "0.3s"]));
    assert!(err.contains(expected), "{err}");
    let v = parse_success(&first.wait_with_output().unwrap());
    assert_eq!(str_at(&v, "/status"), "done");
}

#[test]
fn the_serving_line_is_read_only_once_whole() {
    // The server writes it in pieces: every cut before the newline is "not yet".
    let line = "tcplab: serving on 127.0.0.1:40123, local peers only\n";
    for cut in 0..line.len() {
        assert_eq!(
            support::serving_addr(&line[..cut]),
            None,
            "{:?}",
            &line[..cut]
        );
    }
    assert_eq!(
        support::serving_addr(line),
        Some("127.0.0.1:40123".parse().unwrap())
    );
}

#[test]
fn tests_beyond_the_caps_on_tests_at_once_are_refused() {
    // Heavy, yet among others: exact checks, and no test alone runs beside it.
    let _machine = support::among_others();
    let server = LoopbackServer::start(&["--max-tests-per-client", "1"]);
    second_test_refused(
        &server,
        "1 test from 127.0.0.1 already running (--max-tests-per-client 1)",
    );
    let server = LoopbackServer::start(&["--max-tests", "1"]);
    second_test_refused(&server, "server busy: 1 test running (--max-tests 1)");
    // The places are given back: the next test runs.
    let v = parse_success(&server.run(&["-t", "0.3s", "--json"]));
    assert_eq!(str_at(&v, "/status"), "done");
}

#[test]
fn connections_beyond_the_connection_rate_are_refused() {
    let server = LoopbackServer::start(&["--max-connect-rate", "3"]);
    for _ in 0..3 {
        drop(hello_to(server.addr));
    }
    let err = failure(&server.run(&["-t", "0.3s"]));
    assert!(
        err.contains(
            "too many connections from 127.0.0.1: more than --max-connect-rate 3 per minute"
        ),
        "{err}"
    );
    assert!(server.log().contains("refused: too many connections"));
}

#[test]
fn an_oversized_control_message_is_refused_naming_the_limit() {
    let server = LoopbackServer::start(&["--max-message", "4K"]);
    let mut s = hello_to(server.addr);
    assert_eq!(str_at(&first_message(&mut s), "/type"), "challenge");
    s.write_all(&5000u32.to_be_bytes()).unwrap();
    s.write_all(&[b' '; 100]).unwrap();
    assert_eq!(
        refusal(&read_message(&mut s)),
        "control message of 5000 bytes exceeds --max-message 4 KiB"
    );
    server.await_log("refused: control message", 1);
}

#[test]
fn silent_and_trickling_peers_time_out_while_a_test_runs() {
    // The handshake's 2 s against a window of 1.9–4 s: seconds load cannot push out.
    let _machine = support::among_others();
    let server = LoopbackServer::start(&["--handshake-timeout", "2s"]);
    let started = Instant::now();
    let silent = TcpStream::connect(server.addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // A slow-loris: every byte well within any per-read timeout, the hello never whole
    // within the handshake's.
    let mut trickler = TcpStream::connect(server.addr).unwrap();
    trickler
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let reader = trickler.try_clone().unwrap();
    let trickle = thread::spawn(move || {
        for byte in &client_hello()[..8] {
            if trickler.write_all(&[*byte]).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(400));
        }
    });
    let silent = thread::spawn(move || closed_after(silent, started));
    let trickled = thread::spawn(move || closed_after(reader, started));

    let v = parse_success(&server.run(&["-t", "1s", "--json"]));
    assert_eq!(str_at(&v, "/status"), "done");

    for (what, closed) in [("silent", silent), ("trickling", trickled)] {
        let after = closed.join().unwrap();
        assert!(
            after >= Duration::from_millis(1900) && after < Duration::from_secs(4),
            "{what} peer closed after {after:?}"
        );
    }
    trickle.join().unwrap();
    server.await_log("--handshake-timeout", 2);
}

#[test]
fn a_connection_beyond_the_handshake_cap_takes_the_place_of_a_silent_one() {
    let _machine = support::among_others();
    let server = LoopbackServer::start(&["--max-handshakes", "2"]);
    let mut silent: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    // Both are accepted before the third arrives.
    thread::sleep(Duration::from_millis(300));
    let mut third = hello_to(server.addr);
    assert_eq!(str_at(&first_message(&mut third), "/type"), "challenge");
    // The oldest silent one made room, and hears why after the challenge that came
    // with the server's hello.
    silent[0]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(str_at(&first_message(&mut silent[0]), "/type"), "challenge");
    assert_eq!(
        refusal(&read_message(&mut silent[0])),
        "server busy: 2 connections in their handshake (--max-handshakes 2), \
         and this one made room for a newer one"
    );
    server.await_log("refused: server busy", 1);
    drop((silent, third));
    let v = parse_success(&server.run(&["-t", "0.3s", "--json"]));
    assert_eq!(str_at(&v, "/status"), "done");
}

/// What a crowd of idle peers saw: connections it opened, and those the server closed
/// on it with a reason naming `--max-handshakes`.
#[derive(Debug, Default)]
struct CrowdSaw {
    opened: u64,
    evicted_by_name: u64,
}

/// Keeps one idle control connection (it never says its hello) open from each of
/// `sources` to `server`, opening a new one whenever the server closes one, until `stop`.
fn idle_crowd(
    server: SocketAddr,
    sources: Vec<std::net::Ipv4Addr>,
    stop: Arc<AtomicBool>,
    open_now: Arc<AtomicUsize>,
) -> thread::JoinHandle<CrowdSaw> {
    thread::spawn(move || {
        let mut saw = CrowdSaw::default();
        let mut conns: Vec<Option<TcpStream>> = sources.iter().map(|_| None).collect();
        while !stop.load(Ordering::Relaxed) {
            for (conn, source) in conns.iter_mut().zip(&sources) {
                if let Some(s) = conn {
                    if !closed_on_us(s) {
                        continue;
                    }
                    let mut said = Vec::new();
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(200)))
                        .unwrap();
                    let _ = s.read_to_end(&mut said);
                    if String::from_utf8_lossy(&said).contains("(--max-handshakes 64)") {
                        saw.evicted_by_name += 1;
                    }
                }
                *conn = connect_from(*source, server);
                saw.opened += u64::from(conn.is_some());
            }
            open_now.store(conns.iter().flatten().count(), Ordering::Relaxed);
            thread::sleep(Duration::from_millis(100));
        }
        saw
    })
}

/// A connection to `server` from `source`, non-blocking once made.
fn connect_from(source: std::net::Ipv4Addr, server: SocketAddr) -> Option<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    s.bind(&SocketAddr::new(source.into(), 0).into()).ok()?;
    s.connect_timeout(&server.into(), Duration::from_secs(1))
        .ok()?;
    let s = TcpStream::from(s);
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// Whether the server wrote to `s` or closed it.
fn closed_on_us(s: &TcpStream) -> bool {
    !matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[test]
fn a_crowd_of_idle_handshakes_does_not_lock_a_real_client_out() {
    // Alone: 5 s at full speed on loopback would load the others, and a crowd kept off
    // the CPU would not stand.
    let _machine = support::alone();
    // The defaults: --max-handshakes 64, --max-connect-rate 30 per source.
    let server = LoopbackServer::start(&[]);
    let sources: Vec<std::net::Ipv4Addr> = (2..=201).map(|i| [127, 0, 0, i as u8].into()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let open_now = Arc::new(AtomicUsize::new(0));
    let crowd = idle_crowd(
        server.addr,
        sources,
        Arc::clone(&stop),
        Arc::clone(&open_now),
    );
    let crowded = Instant::now() + Duration::from_secs(10);
    while open_now.load(Ordering::Relaxed) < 200 {
        assert!(Instant::now() < crowded, "the crowd did not gather");
        thread::sleep(Duration::from_millis(20));
    }
    let out = server.run(&["-t", "5s", "--json"]);
    let crowd_at_the_end = open_now.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let saw = crowd.join().unwrap();
    println!("the crowd: {saw:?}, {crowd_at_the_end} open at the end of the test");
    let v = parse_success(&out);
    assert_eq!(str_at(&v, "/status"), "done");
    let f = &flows(&v)[0];
    assert_eq!(
        support::u64_at(f, "/sent_bytes"),
        support::u64_at(f, "/received_bytes")
    );
    // The crowd stood throughout, and those the server let go heard why.
    assert!(
        crowd_at_the_end >= 190,
        "{crowd_at_the_end} open at the end"
    );
    assert!(saw.evicted_by_name > 0, "{saw:?}");
}

#[test]
fn a_byte_count_test_is_cut_at_the_longest_duration() {
    let _machine = support::among_others();
    let server = LoopbackServer::start(&["--max-duration", "1s", "--handshake-timeout", "1s"]);
    let started = Instant::now();
    // 1 GB at 100 Mbit/s would take 80 s.
    let out = server.run(&["-n", "1G", "--fq-rate", "100mbit", "--json"]);
    let took = started.elapsed();
    assert!(!out.status.success());
    assert!(took < Duration::from_secs(8), "{took:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(str_at(&v, "/status"), "incomplete");
    assert!(
        v.to_string()
            .contains("cut by the server at --max-duration 1.00 s"),
        "{v:#}"
    );
    server.await_log("cut by the server", 1);
}

/// `ip -n NS ARGS…`, asserting success.
fn ip_in(ns: &str, args: &[&str]) {
    let status = Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .status()
        .expect("running ip");
    assert!(status.success(), "ip -n {ns} {args:?}");
}

#[test]
fn a_peer_off_this_host_needs_a_key_or_an_open_server() {
    let Some(mut bed) = Bed::among_others("peer_off_host") else {
        return;
    };
    // The server's link becomes its way out to the world: the client, its neighbour on
    // that link, is then a LAN host, not another namespace of this one.
    let gateway = bed.lab.addr_a_v4().to_string();
    ip_in(
        bed.lab.b().name(),
        &["route", "add", "default", "via", &gateway],
    );
    let err = failure(&bed.run(&["-t", "0.3s"]));
    assert!(
        err.contains("is not on this host and this server has no key"),
        "{err}"
    );
    bed.await_server_log("refused:", 1);
    assert!(!bed.server_log().contains("test of"));

    bed.kill_server();
    bed.start_server_with(&["--insecure-open"]);
    assert_eq!(str_at(&bed.run_json(&["-t", "0.3s"]), "/status"), "done");

    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "k", b"0123456789abcdef0123");
    let key = key.to_str().unwrap();
    bed.kill_server();
    bed.start_server_with(&["--key-file", key]);
    assert_eq!(
        str_at(&bed.run_json(&["-t", "0.3s", "--key-file", key]), "/status"),
        "done"
    );
}
