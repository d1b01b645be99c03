//! The hosts' interface queues (`txqueuelen` in the path): set on each host's device
//! and counted, checked against iproute2's view of the same device (`ip -s link`,
//! `tc -s qdisc`) and the host's TCP counters (`nstat`'s source, /proc/net/netstat).

use crate::support;

use std::process::{Command, Stdio};

use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// `ip -n NS -s -j link show tcplab0` and `tc -n NS -s -j qdisc show dev tcplab0`.
fn iproute2(ns: &str) -> (Value, Value) {
    let json = |program: &str, args: &[&str]| -> Value {
        let out = Command::new(program).args(args).output().unwrap();
        assert!(out.status.success(), "{program} {args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let link = json("ip", &["-n", ns, "-s", "-j", "link", "show", "tcplab0"]);
    let qdisc = json(
        "tc",
        &["-n", ns, "-s", "-j", "qdisc", "show", "dev", "tcplab0"],
    );
    (link[0].clone(), qdisc[0].clone())
}

/// The bar: `up.txqueuelen 2` through 2 Gbit/s: the client's device holds 2 packets,
/// the server's the kernel's 500; what `lab show` counts of each host's queue is what
/// iproute2 reads from the same device and qdisc; a sender that outruns the emulator
/// loses packets in its own host's queue, and the run's summary and explain say so.
#[test]
fn the_hosts_interface_queues_are_set_and_counted_as_the_kernel_counts_them() {
    if !privileged_or_skip("host_queues") {
        return;
    }
    let _machine = alone();
    let name = lab_name("hq", 1);
    let lab = LabGuard::up(&name, &["--path", "rtt 2ms rate 2gbit up.txqueuelen 2"]);
    let mut server = serve_in(&lab.server_ns(), &lab.client_ns());
    let out = tcplab()
        .args(["--netns", &lab.client_ns(), "run", "10.77.0.1", "-t", "2"])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_success(&out);
    for (dir, ns, host, txqueuelen) in [
        ("up", lab.client_ns(), "client", 2),
        ("down", lab.server_ns(), "server", 500),
    ] {
        // iproute2 read before and after tcplab: a stray packet of the host's own
        // (IPv6 neighbour discovery) may pass in between.
        let (link, qdisc) = iproute2(&ns);
        let show = lab.show();
        let (link_after, qdisc_after) = iproute2(&ns);
        let queue = &show[dir]["host_queues"][0];
        let between = |ours: &str, before: &Value, after: &Value, theirs: &str| {
            let (ours_v, lo, hi) = (
                u64_at(queue, ours),
                u64_at(before, theirs),
                u64_at(after, theirs),
            );
            assert!(
                (lo..=hi).contains(&ours_v),
                "{dir} {ours} {ours_v}: iproute2 read {lo} before, {hi} after"
            );
        };
        assert_eq!(str_at(queue, "/host"), host);
        assert_eq!(u64_at(queue, "/txqueuelen"), txqueuelen);
        assert_eq!(u64_at(&link, "/txqlen"), txqueuelen);
        assert_eq!(str_at(queue, "/qdisc"), str_at(&qdisc, "/kind"));
        between("/device_drops", &link, &link_after, "/stats64/tx/dropped");
        for (ours, theirs) in [
            ("/qdisc_packets", "/packets"),
            ("/qdisc_drops", "/drops"),
            ("/requeues", "/requeues"),
            ("/overlimits", "/overlimits"),
        ] {
            between(ours, &qdisc, &qdisc_after, theirs);
        }
        let netstat = Command::new("ip")
            .args(["netns", "exec", &ns, "nstat", "-a", "-z", "-j"])
            .output()
            .unwrap();
        let netstat: Value = serde_json::from_slice(&netstat.stdout).unwrap();
        assert_eq!(
            u64_at(queue, "/held_retransmits"),
            u64_at(&netstat, "/kernel/TcpExtTCPSpuriousRtxHostQueues"),
            "{dir}"
        );
    }
    server.kill().unwrap();
    server.wait().unwrap();
    drop(lab);

    // A run through it: what its queue dropped is in the JSON, the summary and explain.
    one_of_three_tries("a sender outrunning a 2-packet host queue", || {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        let out = tcplab()
            .args([
                "run",
                "--path",
                "rtt 2ms rate 2gbit up.txqueuelen 2",
                "-t",
                "2",
            ])
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_success(&out);
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("up   client queue"))
            .unwrap_or_else(|| panic!("no client queue line in {text}"));
        assert!(line.contains("txqueuelen 2, pfifo_fast"), "{line}");
        match finding_message(&explained(&db), FindingKind::HostQueue) {
            Some(message) => {
                assert!(
                    message.starts_with("the client's interface queue (txqueuelen 2) overflowed: its device dropped"),
                    "{message}"
                );
                assert!(!line.contains("dropped: device 0,"), "{line}");
                Ok(())
            }
            None => {
                assert!(line.contains("dropped: device 0, qdisc 0"), "{line}");
                Err(format!("nothing dropped: {line}"))
            }
        }
    });
}

/// A txqueuelen out of range, or on an access link, is refused in one line before
/// anything is built.
#[test]
fn a_bad_txqueuelen_is_refused_in_one_line() {
    for (args, needle) in [
        (&["--path", "txqueuelen 0"][..], "within 1..=1000000"),
        (
            &["--path", "rtt 1ms", "--client-path", "up.txqueuelen 4"][..],
            "client1's access link sets txqueuelen",
        ),
    ] {
        let out = tcplab().arg("run").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
    }
}
