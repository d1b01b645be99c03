//! Experiment files that name real hosts instead of a lab path. Each "real host" is a
//! `tcplab serve` agent with its own key and hostname (a UTS namespace), or a stock
//! iperf3 server, in the server namespace of a lab whose emulated 20 ms path stands for
//! the network between machines; the sweep runs in the lab's client namespace.

use crate::support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;
use support::{
    alone, among_others, await_listening, export_jsonl, iperf3_or_skip, key_file, lab_name,
    report_html, sweep_by, tcplab, LabGuard, IPERF3,
};
use tcplab_sys::netns::privileged_or_skip;

const RTT_US: f64 = 20_000.0;

/// The lab and the agents listening in its server namespace.
struct Network {
    lab: LabGuard,
    agents: Vec<Child>,
}

impl Network {
    fn up(n: u32) -> Network {
        Network::across(n, "rtt 20ms rate 100mbit queue 1bdp")
    }

    fn across(n: u32, path: &str) -> Network {
        let lab = LabGuard::up(&lab_name("mh", n), &["--path", path]);
        // The far machine's own buffer defaults, so its metadata is its own.
        sysctl_in(&lab.server_ns(), "net.ipv4.tcp_rmem=4096 65536 3000000");
        Network {
            lab,
            agents: Vec::new(),
        }
    }

    /// `tcplab serve` on 10.77.0.1:`port` as host `hostname`, with `key`.
    fn agent(&mut self, hostname: &str, port: u16, key: &Path) {
        self.agent_with_clock(hostname, port, key, 0);
    }

    /// An agent whose CLOCK_MONOTONIC reads `ahead_s` seconds ahead of ours (a time
    /// namespace), as another machine's would: same boot, different clock.
    fn agent_with_clock(&mut self, hostname: &str, port: u16, key: &Path, ahead_s: u32) {
        let serve = format!(
            "hostname {hostname} && exec {} serve --listen 10.77.0.1:{port} --key-file {}",
            env!("CARGO_BIN_EXE_tcplab"),
            key.display()
        );
        let ahead = ahead_s.to_string();
        self.start(
            port,
            Command::new("ip").args([
                "netns",
                "exec",
                &self.lab.server_ns(),
                "unshare",
                "--uts",
                "--time",
                "--monotonic",
                &ahead,
                "--fork",
                "--kill-child",
                "sh",
                "-c",
                &serve,
            ]),
        );
    }

    /// A stock `iperf3 -s` on 10.77.0.1:`port`.
    fn iperf3(&mut self, port: u16) {
        self.start(
            port,
            Command::new("ip").args([
                "netns",
                "exec",
                &self.lab.server_ns(),
                IPERF3,
                "-s",
                "-B",
                "10.77.0.1",
                "-p",
                &port.to_string(),
            ]),
        );
    }

    /// Starts a server and waits until it listens on 10.77.0.1:`port`.
    fn start(&mut self, port: u16, command: &mut Command) {
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting a server");
        self.agents.push(child);
        let server = self.agents.last().expect("just pushed");
        await_listening(server, SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1), port));
    }

    /// `tcplab sweep FILE --db DB` from the client namespace.
    fn sweep(&self, file: &Path, db: &Path, extra: &[&str]) -> Output {
        let mut tcplab = tcplab();
        tcplab.args(["--netns", &self.lab.client_ns()]);
        sweep_by(tcplab, file, db, extra)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for agent in &mut self.agents {
            let _ = agent.kill();
            let _ = agent.wait();
        }
    }
}

fn sysctl_in(ns: &str, setting: &str) {
    let status = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw", setting])
        .status()
        .unwrap();
    assert!(status.success(), "sysctl {setting} in {ns}");
}

fn meta(run: &Value, end: &str) -> Value {
    serde_json::from_str(run[format!("{end}_meta_json")].as_str().unwrap()).unwrap()
}

fn words(text: &Value) -> Vec<&str> {
    text.as_str()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

const HOSTS: &str = r#"
[host.near]
address = "10.77.0.1:5301"
key_file = "near.key"

[host.far]
address = "10.77.0.1:5302"
key_file = "keys/far.key"

[host.old]
address = "10.77.0.1:5303"
iperf3 = true

[host.gone]
address = "10.77.0.1:5309"
"#;

#[test]
fn a_sweep_runs_against_real_agents_and_an_iperf3_server() {
    if !privileged_or_skip("a_sweep_runs_against_real_agents_and_an_iperf3_server")
        || !iperf3_or_skip("a_sweep_runs_against_real_agents_and_an_iperf3_server")
    {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    let near_key = key_file(dir.path(), "near.key", b"near agent's key, 32 bytes long\n");
    let far_key = key_file(
        &dir.path().join("keys"),
        "far.key",
        b"far agent's key, also long enough\n",
    );
    let mut net = Network::up(1);
    net.agent("near-agent", 5301, &near_key);
    net.agent("far-agent", 5302, &far_key);
    net.iperf3(5303);
    let file = dir.path().join("hosts.toml");
    std::fs::write(
        &file,
        format!(
            r#"
name = "hosts"
duration = "1s"
server = "near"

[[flow]]
cc = "cubic"

[[axis]]
key = "server"
values = ["near", "far", "old"]

[[axis]]
key = "flow.window"
values = ["64K", "1M"]
{HOSTS}"#
        ),
    )
    .unwrap();
    let db = dir.path().join("hosts.db");
    let out = net.sweep(&file, &db, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let runs = export_jsonl(&db, "runs");
    assert_eq!(runs.len(), 6);
    let mut throughput = std::collections::BTreeMap::new();
    for run in &runs {
        assert_eq!(run["status"], "done", "{run}");
        assert!(run["path_json"].is_null(), "no lab path is recorded");
        let tags: Vec<String> = serde_json::from_str(run["tags"].as_str().unwrap()).unwrap();
        let server = tags
            .iter()
            .find_map(|t| t.strip_prefix("server="))
            .expect("the run names its host")
            .to_owned();
        let port = match server.as_str() {
            "near" => 5301,
            "far" => 5302,
            _ => 5303,
        };
        assert_eq!(run["target"], format!("10.77.0.1:{port}"));
        // Our end's tcp_info saw the network's 20 ms (the emulator's configured delay,
        // which it holds every packet, and its own time on top).
        let min_rtt = run["rtt_min_us"].as_f64().unwrap();
        assert!(
            (RTT_US..RTT_US * 1.25).contains(&min_rtt),
            "{server}: min RTT {min_rtt} µs"
        );
        let client = meta(run, "client");
        assert_eq!(words(&client["sysctls"]["net.ipv4.tcp_rmem"]).len(), 3);
        if server != "old" {
            // Both machines' facts: the agent reports its own hostname and buffers.
            let agent = meta(run, "server");
            assert_eq!(agent["hostname"], format!("{server}-agent"));
            assert_ne!(client["hostname"], agent["hostname"]);
            assert_eq!(
                words(&agent["sysctls"]["net.ipv4.tcp_rmem"]),
                ["4096", "65536", "3000000"]
            );
        }
        let window = run["label"]
            .as_str()
            .unwrap()
            .split('=')
            .next_back()
            .unwrap();
        throughput.insert(
            (server, window.to_owned()),
            run["received_bps"].as_f64().unwrap(),
        );
    }
    for server in ["near", "far", "old"] {
        // 64 KiB asked is 128 KiB effective: at most that per round trip (52 Mbit/s).
        let small = throughput[&(server.to_owned(), "64K".to_owned())];
        let large = throughput[&(server.to_owned(), "1M".to_owned())];
        let window_bound = 2.0 * 65536.0 * 8.0 / (RTT_US / 1e6);
        assert!(small < window_bound, "{server} 64K: {small}");
        assert!(
            large > 70e6 && large > 1.5 * small,
            "{server}: {small} → {large}"
        );
    }
    // The results table groups by host like any other axis.
    for server in ["near ", "far ", "old "] {
        assert!(
            stdout.lines().any(|l| l.starts_with(server)),
            "{server}: {stdout}"
        );
    }
    assert!(report_html(&db, dir.path()).contains("<svg"));
    // explain knows the path only as TCP measured it: the emulator's 20 ms, no BDP.
    let explain = |json: bool| {
        let mut command = tcplab();
        command.arg("explain").arg("--db").arg(&db).arg("--last");
        if json {
            command.arg("--json");
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let explained: Value = serde_json::from_str(&explain(true)).unwrap();
    assert!(explained["path"].is_null(), "{explained}");
    let real = &explained["real_path"];
    let last = runs.iter().max_by_key(|r| r["id"].as_i64()).unwrap();
    assert_eq!(real["target"], last["target"], "{explained}");
    let min_rtt = real["min_rtt_us"].as_f64().unwrap();
    assert!((RTT_US..RTT_US * 1.25).contains(&min_rtt), "{explained}");
    assert!(
        real["mean_rtt_us"].as_f64().unwrap() >= min_rtt,
        "{explained}"
    );
    let text = explain(false);
    assert!(
        text.contains(", not emulated\n") && text.contains("bottleneck and BDP unknown"),
        "{text}"
    );
}

#[test]
fn bad_keys_and_dead_hosts_fail_their_runs_only() {
    if !privileged_or_skip("bad_keys_and_dead_hosts_fail_their_runs_only") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        format!(
            r#"
duration = "0.5s"
server = "near"
[[axis]]
key = "server"
values = ["near", "far", "gone"]
{HOSTS}"#
        ),
    )
    .unwrap();
    let db = dir.path().join("bad.db");
    // A key file that is not there: one line before anything runs, no database.
    let near_key = key_file(dir.path(), "near.key", b"near agent's key, 32 bytes long\n");
    let out = tcplab()
        .arg("sweep")
        .arg(&file)
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml: host 'far'") && err.contains("keys/far.key"),
        "{err}"
    );
    assert!(!db.exists());

    // A wrong key fails that host's run, a dead host its own; the others are done.
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    let far_key = dir.path().join("far-agent.key");
    std::fs::write(&far_key, b"far agent's key, also long enough\n").unwrap();
    key_file(
        &dir.path().join("keys"),
        "far.key",
        b"not the far agent's key at all\n",
    );
    let mut net = Network::up(2);
    net.agent("near-agent", 5301, &near_key);
    net.agent("far-agent", 5302, &far_key);
    let out = net.sweep(&file, &db, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("server=near rep 1: "), "{stdout}");
    assert!(
        stdout.contains("server=far rep 1: FAILED: client1: server refused the test: wrong key"),
        "{stdout}"
    );
    assert!(
        stdout.contains("server=gone rep 1: FAILED: client1: cannot connect"),
        "{stdout}"
    );
    assert!(stdout.contains("2 runs failed; --retry-failed"), "{stdout}");

    // The key mended, --retry-failed runs what failed: far now passes.
    key_file(
        &dir.path().join("keys"),
        "far.key",
        b"far agent's key, also long enough\n",
    );
    let out = net.sweep(&file, &db, &["--retry-failed"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("server=far rep 1: "), "{stdout}");
    assert!(!stdout.contains("server=far rep 1: FAILED"), "{stdout}");
    let runs = export_jsonl(&db, "runs");
    let done = runs.iter().filter(|r| r["status"] == "done").count();
    assert_eq!(done, 2, "near once, far after the retry");
}

/// What `tcplab run --udp --json` to an agent whose clock is an hour ahead reports:
/// (offset, uncertainty, median one-way delay up, exact?), all µs.
fn udp_across_clocks(net: &mut Network, port: u16, key: &Path) -> (f64, f64, f64, bool) {
    net.agent_with_clock("ahead", port, key, 3600);
    let out = tcplab()
        .args(["--netns", &net.lab.client_ns(), "run"])
        .arg(format!("10.77.0.1:{port}"))
        .arg("--key-file")
        .arg(key)
        .args(["-u", "-b", "10mbit", "-t", "2", "--json"])
        .output()
        .unwrap();
    let v = support::parse_success(&out);
    let udp = &v["summary"]["udp"];
    assert_eq!(udp["lost"], 0, "{udp}");
    (
        v["clock"]["offset_us"].as_f64().unwrap(),
        v["clock"]["uncertainty_us"].as_f64().unwrap(),
        udp["owd_us"]["p50"].as_f64().unwrap(),
        udp["owd_exact"].as_bool().unwrap(),
    )
}

#[test]
fn a_far_clock_is_estimated_and_one_way_delay_measured_through_it() {
    if !privileged_or_skip("a_far_clock_is_estimated_and_one_way_delay_measured_through_it") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "k", b"a key for the clock test, long\n");
    const HOUR_US: f64 = 3600e6;
    // A symmetric 10 ms each way: NTP's estimate is exact, and so is the delay.
    let mut net = Network::across(3, "rtt 20ms rate 100mbit");
    let (offset, uncertainty, owd, exact) = udp_across_clocks(&mut net, 5311, &key);
    assert!(!exact, "same boot, but not one clock");
    assert!(
        (offset - HOUR_US).abs() <= uncertainty,
        "offset {offset} ± {uncertainty}"
    );
    assert!((9_500.0..11_500.0).contains(&owd), "one-way delay {owd} µs");
    drop(net);
    // 15 ms up, 5 ms down: the estimate is off by half the asymmetry (5 ms), which its
    // stated uncertainty (half the round trip) covers — and so does the delay's error.
    let mut net = Network::across(4, "up.delay 15ms down.delay 5ms rate 100mbit");
    let (offset, uncertainty, owd, _) = udp_across_clocks(&mut net, 5312, &key);
    assert!(
        (offset - HOUR_US).abs() <= uncertainty,
        "offset {offset} ± {uncertainty}"
    );
    assert!(
        (offset - HOUR_US - 5_000.0).abs() < 1_000.0,
        "offset {offset}"
    );
    assert!(
        (owd - 15_000.0).abs() <= uncertainty + 500.0,
        "owd {owd} ± {uncertainty}"
    );
}
