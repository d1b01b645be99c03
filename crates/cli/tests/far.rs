//! `tcplab shell --far host` as root: a program behind the path reaches the namespace
//! tcplab was started in, with the path's round trip and rate, and that namespace is
//! left as it was. The caller is a namespace of the test's own, so the machine's own
//! routes are never touched.

use crate::support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// The goodput of a 10 Mbit/s link carrying 1500-byte packets of 1448 bytes of data.
const GOODPUT_10MBIT: f64 = 10e6 * 1448.0 / 1500.0;

/// A namespace `ip netns` made, deleted when dropped. One name per process: the tests
/// that make one take the machine [`alone`], never at once.
struct Caller(String);

impl Caller {
    fn new() -> Caller {
        let name = format!("tlfar{}-caller", std::process::id());
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Caller(name)
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .status();
    }
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `--far host` could change in a namespace: its links and addresses, routes and
/// rules of every table, and every IPv4 and IPv6 sysctl.
fn state_of(ns: &str) -> String {
    let mut state = String::new();
    for args in [
        &["-d", "link", "show"][..],
        &["addr", "show"],
        &["-4", "route", "show", "table", "all"],
        &["-6", "route", "show", "table", "all"],
        &["-4", "rule", "show"],
        &["-6", "rule", "show"],
    ] {
        state += &ip(&[&["-n", ns][..], args].concat());
    }
    let sysctls = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c"])
        .arg("grep -r . /proc/sys/net/ipv4 /proc/sys/net/ipv6 2>/dev/null")
        .output()
        .unwrap();
    state + &String::from_utf8_lossy(&sysctls.stdout)
}

/// `tcplab shell --far host` from `caller` with `lab` (the lab's flags) running `script`:
/// its output, once it succeeded, said where the far side is, and left the caller's
/// namespace as it was (`before`): load cannot explain a change, asserted every time.
fn far_shell(caller: &Caller, before: &str, lab: &[&str], script: &str) -> String {
    let out = tcplab()
        .args(["--netns", &caller.0, "shell", "--far", "host"])
        .args(lab)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("far side: this namespace, at 10.78."),
        "{said}"
    );
    assert_eq!(
        state_of(&caller.0),
        before,
        "the caller's namespace changed"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The bar: a server in the caller's namespace reached from behind `rtt 50ms rate
/// 10mbit` at the path's round trip and rate; the caller's namespace unchanged after.
#[test]
fn a_program_behind_the_path_reaches_the_callers_namespace_and_leaves_it_as_it_was() {
    if !privileged_or_skip("far_host") {
        return;
    }
    let _machine = alone();
    let caller = Caller::new();
    let mut server = tcplab()
        .args(["--netns", &caller.0, "serve", "--listen", "0.0.0.0:5201"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    await_listening(&server, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 5201));
    let before = state_of(&caller.0);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let script = format!(
        "ping -c 5 -i 0.2 $TCPLAB_HOST && {} run $TCPLAB_HOST -t 3s --json --db {} > {}",
        env!("CARGO_BIN_EXE_tcplab"),
        dir.path().join("runs.db").display(),
        json.display()
    );
    one_of_three_tries("a run behind the path to the caller's namespace", || {
        let text = far_shell(
            &caller,
            &before,
            &["--path", "rtt 50ms rate 10mbit"],
            &script,
        );
        let [min_ms, ..] = ping_summary(&text).2.expect("ping replies");
        let run: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let rate = f64_at(&run, "/summary/received_bps");
        let tcp_min_ms = f64_at(&run, "/summary/rtt/min_us") / 1e3;
        println!(
            "behind rtt 50ms rate 10mbit: ping min {min_ms} ms, tcp min rtt {tcp_min_ms} ms, {:.2} Mbit/s",
            rate / 1e6
        );
        // The configured round trip is a floor; the lab's own time comes on top.
        if !(50.0..51.0).contains(&min_ms) || !(50.0..52.0).contains(&tcp_min_ms) {
            return Err(format!("ping min {min_ms} ms, tcp min {tcp_min_ms} ms"));
        }
        if !(0.9 * GOODPUT_10MBIT..=1.01 * GOODPUT_10MBIT).contains(&rate) {
            return Err(format!("{rate} bit/s through 10 Mbit/s"));
        }
        Ok(())
    });
    server.kill().unwrap();
    server.wait().unwrap();
}

/// A topology's far side is reached through its first host, along the route there:
/// from the chain's b, over l3, l2 and l1 to a (16 ms round trip), then the caller.
#[test]
fn a_topology_s_hosts_reach_the_callers_namespace_through_its_first_host() {
    if !privileged_or_skip("far_host_topology") {
        return;
    }
    let _machine = alone();
    let caller = Caller::new();
    let before = state_of(&caller.0);
    let chain = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/topologies/chain.toml"
    );
    one_of_three_tries(
        "pings from a topology's host to the caller's namespace",
        || {
            let script = "ping -c 5 -i 0.2 $TCPLAB_HOST";
            let text = far_shell(&caller, &before, &["--topology", chain], script);
            let (sent, received, summary) = ping_summary(&text);
            assert_eq!((sent, received), (5, 5), "{text}");
            let [min_ms, ..] = summary.expect("ping replies");
            // The links' 16 ms is a floor, asserted every time; the lab's own time on top.
            assert!(min_ms >= 16.0, "{text}");
            match min_ms < 17.0 {
                true => Ok(()),
                false => Err(format!("ping min {min_ms} ms through 16 ms")),
            }
        },
    );
}

/// The far side needs the emulator; a caller's namespace whose every /30 of 10.78/16 is
/// taken cannot get one. Each is said in one line, and the lab is removed.
#[test]
fn what_cannot_reach_the_callers_namespace_says_why_in_one_line() {
    if !privileged_or_skip("far_host_refusals") {
        return;
    }
    // Alone: it looks for any shell's lab in `ip netns list`.
    let _machine = alone();
    let out = tcplab()
        .args(["shell", "--far", "host", "--backend", "netem"])
        .args(["--path", "rtt 1ms", "--", "true"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("--far host needs the emulator"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");

    let caller = Caller::new();
    ip(&[
        "-n", &caller.0, "link", "add", "taken", "type", "veth", "peer", "taken2",
    ]);
    ip(&[
        "-n",
        &caller.0,
        "addr",
        "add",
        "10.78.0.1/16",
        "dev",
        "taken",
    ]);
    let out = tcplab()
        .args(["--netns", &caller.0, "shell", "--far", "host"])
        .args(["--path", "rtt 1ms", "--", "true"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("every /30 of 10.78.0.0/16 overlaps"),
        "{said}"
    );
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    let left: Vec<String> = ip(&["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|ns| ns.starts_with("sh") && (ns.ends_with("-server") || ns.ends_with("-client")))
        .map(str::to_owned)
        .collect();
    assert!(left.is_empty(), "the lab was left: {left:?}");
}

/// kill -9 of `shell --far host`: its command ends, and the caller's namespace is as it
/// was (the far link `tlfar…` gone with the lab) within 5 s, without `lab gc`.
#[test]
fn a_killed_far_shell_leaves_the_callers_namespace_as_it_was() {
    if !privileged_or_skip("far_host_killed") {
        return;
    }
    // Alone: the caller's state holds sysctls every namespace shows alike (the congestion
    // controls loaded), which another test can change.
    let _machine = alone();
    let caller = Caller::new();
    let before = state_of(&caller.0);
    let mut shell = tcplab()
        .args(["--netns", &caller.0, "shell", "--far", "host"])
        .args(["--path", "rtt 10ms", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let below = await_descendant(shell.id(), "sleep 60");
    assert!(state_of(&caller.0).contains("tlfar"), "no far link");
    shell.kill().unwrap(); // SIGKILL
    shell.wait().unwrap();
    assert!(still_running(&below, Duration::from_secs(5)).is_empty());
    let deadline = Instant::now() + Duration::from_secs(5);
    while state_of(&caller.0) != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        state_of(&caller.0),
        before,
        "the caller's namespace changed"
    );
}
