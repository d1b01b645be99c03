//! A server under a flood (issue 7): while a real test runs through a lab, other
//! connections from the client's host send garbage, run tests with a wrong key, and
//! open connections that never speak or trickle their hello. The real test's results
//! are intact, its throughput within 10 % of the same test undisturbed, and the server
//! still serves afterwards.

use crate::support;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use support::*;
use tcplab_sys::netns::{privileged_or_skip, NetNs};

const SERVER: &str = "10.77.0.1";

/// `tcplab --netns CLIENT run 10.77.0.1 --key-file KEY -t 4 --json`, asserting success.
fn real_test(client_ns: &str, key: &std::path::Path) -> Value {
    let out = tcplab()
        .args([
            "--netns",
            client_ns,
            "run",
            SERVER,
            "-t",
            "4",
            "--json",
            "--key-file",
        ])
        .arg(key)
        .output()
        .expect("running tcplab run");
    parse_success(&out)
}

/// Whether the server closed `s` (or wrote to it: its refusal, before closing).
fn dropped_by_peer(s: &TcpStream) -> bool {
    !matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[test]
fn a_flood_leaves_a_running_test_intact_and_the_server_serving() {
    if !privileged_or_skip("flood") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let (key, wrong_key) = (dir.path().join("key"), dir.path().join("wrong"));
    std::fs::write(&key, "a key of thirty-two bytes, ok!!!").unwrap();
    std::fs::write(&wrong_key, "another key, also long enough...").unwrap();
    // A 100 Mbit/s bottleneck: the test's throughput is the link's, not the CPU's, so a
    // flood that costs the server CPU shows only if it disturbs the test itself.
    let lab = LabGuard::up(&lab_name("fl", 1), &["--path", "rtt 10ms rate 100mbit"]);
    let key_arg = key.to_str().unwrap();
    // No connection-rate limit: the flood must reach the handshake, not bounce off the
    // limiter (which has its own test), and it comes from the real client's address.
    let mut server = serve_in_with(
        &lab.server_ns(),
        &lab.client_ns(),
        &[
            "--key-file",
            key_arg,
            "--max-connect-rate",
            "0",
            "--handshake-timeout",
            "2s",
        ],
    );

    let undisturbed = f64_at(&real_test(&lab.client_ns(), &key), "/summary/received_bps");

    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let ns = NetNs::open(&lab.client_ns()).unwrap();
    let addr: SocketAddr = format!("{SERVER}:5201").parse().unwrap();
    let mut flooders = Vec::new();
    // Garbage: connect, send bytes that are no hello, close; as fast as it goes.
    flooders.push({
        let (stop, counts) = (Arc::clone(&stop), Arc::clone(&counts));
        ns.spawn(move || {
            let mut junk = [0u8; 1024];
            let mut x = 0x2545_f491_4f6c_dd1d_u64;
            while !stop.load(Ordering::Relaxed) {
                for b in junk.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                    let _ = s.write_all(&junk);
                    counts[0].fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .unwrap()
    });
    // Half-open and slow-loris: 40 connections that never speak and 10 that trickle
    // a hello byte every 300 ms, each replaced when the server drops it.
    flooders.push({
        let (stop, counts) = (Arc::clone(&stop), Arc::clone(&counts));
        ns.spawn(move || {
            let mut open: Vec<TcpStream> = Vec::new();
            let mut tick = 0;
            while !stop.load(Ordering::Relaxed) {
                open.retain(|s| !dropped_by_peer(s));
                while open.len() < 50 {
                    let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
                        break;
                    };
                    s.set_nonblocking(true).unwrap();
                    open.push(s);
                    counts[1].fetch_add(1, Ordering::Relaxed);
                }
                for mut s in open.iter().take(10) {
                    let _ = s.write_all(&b"TCPLAB"[tick % 6..][..1]);
                }
                tick += 1;
                std::thread::sleep(Duration::from_millis(300));
            }
        })
        .unwrap()
    });
    // Tests with the wrong key, each refused.
    let refuse_loop = {
        let (stop, counts) = (Arc::clone(&stop), Arc::clone(&counts));
        let (client_ns, wrong) = (lab.client_ns(), wrong_key.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = tcplab()
                    .args([
                        "--netns",
                        &client_ns,
                        "run",
                        SERVER,
                        "-t",
                        "1",
                        "--key-file",
                    ])
                    .arg(&wrong)
                    .output()
                    .unwrap();
                assert!(!out.status.success(), "a wrong key ran a test");
                counts[2].fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // The flooded test's figures are whole: both ends agree on the bytes and every
    // interval is there. Its throughput and sampling are the machine's too (2 cores
    // shared with the flood): one of three tries, the flood going on.
    one_of_three_tries("flooded test", || {
        let flooded = real_test(&lab.client_ns(), &key);
        let f = &flows(&flooded)[0];
        assert_eq!(str_at(&flooded, "/status"), "done");
        assert_eq!(u64_at(f, "/sent_bytes"), u64_at(f, "/received_bytes"));
        assert!(flooded["intervals"].as_array().unwrap().len() >= 4);
        let during = f64_at(&flooded, "/summary/received_bps");
        let samples = u64_at(f, "/receiver_samples");
        let seen = format!(
            "{during:.4e} bit/s during the flood, {undisturbed:.4e} without; \
             {samples} receiver samples"
        );
        println!("{seen}");
        if (during / undisturbed - 1.0).abs() >= 0.10 || samples <= 300 {
            return Err(seen);
        }
        Ok(())
    });
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    refuse_loop.join().unwrap();
    let [garbage, idle, wrong] = counts.each_ref().map(|c| c.load(Ordering::Relaxed));
    println!(
        "during the flood: {garbage} garbage connections, {idle} silent or trickling, {wrong} wrong-key tests"
    );
    assert!(
        garbage > 100 && idle >= 50 && wrong >= 3,
        "the flood was too thin"
    );
    // And the server still serves.
    let after = real_test(&lab.client_ns(), &key);
    assert_eq!(str_at(&after, "/status"), "done");
    assert!(server.try_wait().unwrap().is_none(), "the server died");
    let _ = server.kill();
    let _ = server.wait();
}
