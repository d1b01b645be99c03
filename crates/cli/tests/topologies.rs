//! Labs of any shape (`tcplab lab up --topology FILE`): routes taken as the file says,
//! checked by each link's counters; a chain's round trip against its links' delays, by
//! ping; bad files refused in one line before any namespace.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;
use tcplab_record::units;
use tcplab_sys::netns::privileged_or_skip;

/// `hosts` and `routers` by name, then `[[link]]`s (name, ends, path) and any extra TOML.
fn topology_file(
    dir: &Path,
    hosts: &[&str],
    routers: &[&str],
    links: &[(&str, [&str; 2], &str)],
    extra: &str,
) -> std::path::PathBuf {
    let mut text = String::new();
    for (kind, names) in [("host", hosts), ("router", routers)] {
        for name in names {
            text += &format!("[[{kind}]]\nname = \"{name}\"\n");
        }
    }
    for (name, [a, b], path) in links {
        text += &format!(
            "[[link]]\nname = \"{name}\"\nbetween = [\"{a}\", \"{b}\"]\npath = \"{path}\"\n"
        );
    }
    text += extra;
    // A file of its own: a test may write several before using them.
    let file = dir.join(format!("t{}.toml", std::fs::read_dir(dir).unwrap().count()));
    std::fs::write(&file, text).unwrap();
    file
}

/// a — r1 — r2 — b: 2, 10 and 4 ms of round trip, the middle link at 100 Mbit/s.
fn chain_file(dir: &Path) -> std::path::PathBuf {
    chain_with(dir, "rtt 10ms rate 100mbit")
}

/// The chain of [`chain_file`] with `l2` for its middle link's path.
fn chain_with(dir: &Path, l2: &str) -> std::path::PathBuf {
    topology_file(
        dir,
        &["a", "b"],
        &["r1", "r2"],
        &[
            ("l1", ["a", "r1"], "rtt 2ms"),
            ("l2", ["r1", "r2"], l2),
            ("l3", ["r2", "b"], "rtt 4ms"),
        ],
        "",
    )
}

/// Every hop's counters in `lab show --json`, or in a run's `path`: both emulator
/// threads' (the ways toward the first host are `up`'s).
fn hops(show: &Value) -> impl Iterator<Item = &Value> {
    ["/up/links", "/down/links"]
        .into_iter()
        .filter_map(|at| show.pointer(at)?.as_array())
        .flatten()
}

/// The counters of the hop named `name` ("LINK FROM→TO") in `lab show --json`, or in a
/// run's `path`.
fn hop<'a>(show: &'a Value, name: &str) -> &'a Value {
    hops(show)
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no hop {name} in {show}"))
}

/// A flow's data as a link's tallies name it: "tcp CLIENT > SERVER".
fn data_key(flow: &Value) -> String {
    format!(
        "tcp {} > {}",
        str_at(flow, "/client_addr"),
        str_at(flow, "/server_addr")
    )
}

/// The entry of flow `key` in a hop's per-flow list `list` (`flows`, `bursts`).
fn of_flow<'a>(hop: &'a Value, list: &str, key: &str) -> &'a Value {
    hop[list]
        .as_array()
        .unwrap_or_else(|| panic!("{} has no {list}", hop["name"]))
        .iter()
        .find(|f| f["flow"] == key)
        .unwrap_or_else(|| panic!("{}'s {list} have no {key}: {hop}", hop["name"]))
}

/// `lab show` once every hop in `expected` has delivered its count (the daemon
/// publishes its counters every 20 ms).
fn show_when_delivered(lab: &LabGuard, expected: &[(&str, u64)]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let show = lab.show();
        let done = expected
            .iter()
            .all(|&(name, n)| u64_at(hop(&show, name), "/delivered_packets") >= n);
        if done || Instant::now() > deadline {
            return show;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tcplab lab exec LAB HOST -- ping ARGS… DEST`: its output.
fn ping_from(lab: &str, host: &str, args: &[&str], dest: &str) -> String {
    let out = tcplab()
        .args(["lab", "exec", lab, host, "--", "ping"])
        .args(args)
        .arg(dest)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// 20 pings from host `from` to each of `dests` across `lab`: each of the hops `way`
/// delivers every one (asserted), and no round trip is under the links' delays,
/// `floor_ms` (asserted: load only adds); a median more than 1 ms above is an error.
fn pings_cross(
    lab: &LabGuard,
    from: &str,
    dests: &[&str],
    way: &[&str],
    floor_ms: f64,
) -> Result<(), String> {
    let pings = 20;
    let before = lab.show();
    let expected: Vec<(&str, u64)> = way
        .iter()
        .map(|&name| {
            let sent = u64_at(hop(&before, name), "/delivered_packets");
            (name, sent + pings * dests.len() as u64)
        })
        .collect();
    let mut all = Vec::new();
    for dest in dests {
        let args = ["-c", &pings.to_string(), "-i", "0.05"];
        let text = ping_from(&lab.name, from, &args, dest);
        let rtts = ping_times_ms(&text);
        assert_eq!(rtts.len(), pings as usize, "{text}");
        all.extend(rtts);
    }
    let show = show_when_delivered(lab, &expected);
    for (name, n) in expected {
        let delivered = u64_at(hop(&show, name), "/delivered_packets");
        assert_eq!(delivered, n, "{name}: {show}");
    }
    all.sort_by(f64::total_cmp);
    // ping prints 0.001 ms at this size; the links' delays are a floor.
    assert!(
        all[0] >= floor_ms - 0.01,
        "a round trip under {floor_ms} ms: {all:?}"
    );
    let median = all[all.len() / 2];
    if median > floor_ms + 1.0 {
        return Err(format!(
            "median {median} ms, not within 1 ms of {floor_ms}: {all:?}"
        ));
    }
    Ok(())
}

/// `tcplab run --topology FILE` of one cubic flow from host a to host b for 2 s, with
/// `args`: its JSON, asserting success.
fn run_a_to_b(file: &Path, args: &[&str]) -> Value {
    let out = tcplab()
        .args(["run", "--topology"])
        .arg(file)
        .args(["--client-host", "a", "--server-host", "b"])
        .args(["-C", "cubic", "-t", "2s", "--json"])
        .args(args)
        .output()
        .unwrap();
    parse_success(&out)
}

/// Three links in a chain through two routers: every ping crosses each link both ways
/// (its counters), and takes at least the links' delays added (16 ms: load can only
/// add), within 1 ms at the median, in both address families.
#[test]
fn a_chain_s_round_trip_is_the_sum_of_its_links_delays() {
    if !privileged_or_skip("topology_chain") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let file = chain_file(dir.path());
    let lab = LabGuard::up(&lab_name("tc", 1), &["--topology", file.to_str().unwrap()]);
    let show = lab.show();
    assert_eq!(str_at(&show, "/lab/topology/hosts/1"), "b");
    assert_eq!(str_at(&show, "/clients/0/addr"), "10.77.0.2");
    assert_eq!(str_at(&show, "/clients/0/ns"), format!("{}-b", lab.name));
    let way = [
        "l1 a→r1",
        "l2 r1→r2",
        "l3 r2→b",
        "l3 b→r2",
        "l2 r2→r1",
        "l1 r1→a",
    ];
    one_of_three_tries("a chain's round trip", || {
        pings_cross(&lab, "a", &["10.77.0.2", "fd00:77::2"], &way, 16.0)
    });
    let out = tcplab()
        .args(["lab", "exec", &lab.name, "c", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        failure(&out),
        format!(
            "tcplab: lab {} has no host 'c': its hosts are a, b",
            lab.name
        )
    );
}

/// The emulator's two threads split a topology as a dumbbell's directions: the ways
/// toward the first host (s) on `up`, the others on `down`. A route between two other
/// hosts (a and b, through r) turns there and is handed from one thread to the other,
/// each way: every ping crosses each of its links once, takes at least their delays
/// (10 ms) and, in one of three tries, at most 1 ms more at the median; a TCP flow
/// across it (segmented: lb has a rate) spends exactly each delay-only link's delay on
/// it, and fills lb's 100 Mbit/s (one of three tries: load only slows it).
#[test]
fn a_route_that_turns_is_handed_between_the_emulator_threads() {
    if !privileged_or_skip("topology_handoff") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let file = topology_file(
        dir.path(),
        &["s", "a", "b"],
        &["r"],
        &[
            ("ls", ["s", "r"], "rtt 2ms"),
            ("la", ["a", "r"], "rtt 4ms"),
            ("lb", ["r", "b"], "rtt 6ms rate 100mbit queue 1bdp"),
        ],
        "",
    );
    let lab = LabGuard::up(&lab_name("th", 1), &["--topology", file.to_str().unwrap()]);
    let show = lab.show();
    let names = |thread: &str| -> Vec<String> {
        show[thread]["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_owned())
            .collect()
    };
    // Each thread's links in the order packets cross them: toward s, a's and b's first.
    assert_eq!(names("up"), ["la a→r", "lb b→r", "ls r→s"], "{show}");
    assert_eq!(names("down"), ["ls s→r", "la r→a", "lb r→b"], "{show}");
    let way = ["la a→r", "lb r→b", "lb b→r", "la r→a"];
    one_of_three_tries("a turning route's round trip", || {
        pings_cross(&lab, "a", &["10.77.0.3"], &way, 10.0)
    });
    drop(lab);
    one_of_three_tries("a TCP flow through a turning route", || {
        let run = run_a_to_b(&file, &[]);
        let path = &run["path"];
        let flow = &run["flows"][0];
        let key = data_key(flow);
        let acks = format!(
            "tcp {} > {}",
            str_at(flow, "/server_addr"),
            str_at(flow, "/client_addr")
        );
        // Each delay-only link holds every packet exactly its one-way delay, whichever
        // thread carries it.
        for (name, key) in [("la a→r", &key), ("la r→a", &acks)] {
            let one_way_us = 2000.0;
            let f = of_flow(hop(path, name), "flows", key);
            assert_eq!(
                (f64_at(f, "/delay_mean_us"), f64_at(f, "/delay_max_us")),
                (one_way_us, one_way_us),
                "{name}: {f}"
            );
        }
        // Every data packet that crossed la was handed to lb and left it or was dropped.
        let data = u64_at(of_flow(hop(path, "la a→r"), "flows", &key), "/packets");
        let lb = of_flow(hop(path, "lb r→b"), "flows", &key);
        let handed = u64_at(lb, "/packets") + u64_at(lb, "/dropped");
        assert!(
            data > 1000 && handed.abs_diff(data) <= 10,
            "{data} packets across la, {handed} into lb: {lb}"
        );
        // Every packet the down thread took from up counts in its lateness, as every
        // one it wrote: each data packet twice.
        let late = u64_at(path, "/down/lateness/packets");
        assert!(late >= 2 * data, "{late} late packets for {data}: {path}");
        let received = f64_at(&run, "/summary/received_bps");
        if received < 85e6 {
            return Err(format!("{:.1} Mbit/s through 100 Mbit/s", received / 1e6));
        }
        Ok(())
    });
}

/// Two ways between a and b, a short one through r1 and a long one through r2; the
/// file sends b's packets to a the long way. Each link's counters show every packet of
/// both directions where the routes put it, and nowhere else.
#[test]
fn an_asymmetric_route_is_taken_as_declared_both_ways() {
    if !privileged_or_skip("topology_asymmetric") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = topology_file(
        dir.path(),
        &["a", "b"],
        &["r1", "r2"],
        &[
            ("s1", ["a", "r1"], "rtt 2ms"),
            ("s2", ["r1", "b"], "rtt 2ms"),
            ("l1", ["a", "r2"], "rtt 10ms"),
            ("l2", ["r2", "b"], "rtt 10ms"),
        ],
        "[[route]]\nfrom = \"b\"\nto = \"a\"\nvia = [\"r2\"]\n",
    );
    let lab = LabGuard::up(&lab_name("ta", 1), &["--topology", file.to_str().unwrap()]);
    let text = ping_from(&lab.name, "a", &["-c", "5", "-i", "0.02"], "10.77.0.2");
    assert_eq!(ping_times_ms(&text).len(), 5, "{text}");
    let taken = [
        ("s1 a→r1", 5),
        ("s2 r1→b", 5),
        ("l2 b→r2", 5),
        ("l1 r2→a", 5),
    ];
    let show = show_when_delivered(&lab, &taken);
    for (name, n) in taken.into_iter().chain([
        ("s2 b→r1", 0),
        ("s1 r1→a", 0),
        ("l1 a→r2", 0),
        ("l2 r2→b", 0),
    ]) {
        assert_eq!(u64_at(hop(&show, name), "/packets_in"), n, "{name}: {show}");
    }
}

/// A file that cannot make a lab: one line naming the file and the element at fault,
/// a failure, and no namespace made.
#[test]
fn a_bad_topology_is_refused_in_one_line_before_any_namespace() {
    if !privileged_or_skip("topology_refused") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let name = lab_name("tb", 1);
    let ab = [("l1", ["a", "b"], "rtt 2ms")];
    let cases: Vec<(std::path::PathBuf, String)> = vec![
        (
            topology_file(dir.path(), &["a", "b"], &[], &[("l1", ["a", "x"], "")], ""),
            "link l1: no host or router named 'x'".into(),
        ),
        (
            topology_file(dir.path(), &["a", "b", "c"], &[], &ab, ""),
            "host 'c' has no link".into(),
        ),
        (
            topology_file(
                dir.path(),
                &["a", "b", "c", "d"],
                &[],
                &[("l1", ["a", "b"], ""), ("l2", ["c", "d"], "")],
                "",
            ),
            "host 'a' cannot reach host 'c': no links join them through routers".into(),
        ),
        (
            topology_file(
                dir.path(),
                &["a", "b"],
                &["r"],
                &[("l1", ["a", "r"], ""), ("l2", ["r", "b"], "")],
                "[[route]]\nfrom = \"a\"\nto = \"b\"\nvia = [\"r\", \"r\"]\n",
            ),
            "route a → b: it passes 'r' twice: a loop".into(),
        ),
        (
            topology_file(
                dir.path(),
                &["a", "b"],
                &[],
                &[("l1", ["a", "b"], "rtt 2 ms")],
                "",
            ),
            "link l1: ".into(),
        ),
        (
            topology_file(
                dir.path(),
                &["a", "b"],
                &[],
                &[("l1", ["a", "b"], "rate 10mbit down.pace cwnd")],
                "",
            ),
            "link l1: pace cwnd follows the senders' tcp_info, which a standing lab cannot see"
                .into(),
        ),
        (
            topology_file(
                dir.path(),
                &["a", "b"],
                &["r"],
                &[
                    ("l1", ["a", "r"], "rate 10mbit pace cwnd"),
                    ("l2", ["r", "b"], "rate 10mbit up.pace cwnd/minrtt"),
                ],
                "",
            ),
            "route a → b: link l1 paces by cwnd and link l2 by cwnd/minrtt".into(),
        ),
    ];
    for (file, expected) in cases {
        let text = std::fs::read_to_string(&file).unwrap();
        let out = lab_up_refused(&name, &["--topology".as_ref(), file.as_os_str()]);
        let line = failure(&out);
        let file_named = format!("tcplab: topology {}: {expected}", file.display());
        let in_daemon = format!("tcplab: {expected}");
        assert!(
            line.starts_with(&file_named) || line.starts_with(&in_daemon),
            "{line}\nexpected {expected}\nfor {text}"
        );
        for host in ["a", "b", "c"] {
            assert!(!Path::new("/run/netns")
                .join(format!("{name}-{host}"))
                .exists());
        }
    }
    let missing = dir.path().join("none.toml");
    let out = lab_up_refused(&name, &["--topology".as_ref(), missing.as_os_str()]);
    assert_eq!(
        failure(&out),
        format!(
            "tcplab: topology {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    let out = lab_up_refused(
        &name,
        &[
            "--topology".as_ref(),
            missing.as_os_str(),
            "--path".as_ref(),
            "rtt 2ms".as_ref(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
}

/// `--capture DIR` through a three-link chain: a pcapng per link, read by tshark. Each
/// echo request and reply enters each link of its way, and enters the next one its
/// link's one-way delay (and serialization at 100 Mbit/s) after the last, on the
/// emulator's clock: within 0.1 ms per link, every time (load can delay a packet's read,
/// not its time from link to link). Each record's comment is its fate on that link.
#[test]
fn a_capture_per_link_times_each_packet_link_by_link() {
    if !privileged_or_skip("topology_capture") || !tshark_or_skip("topology_capture") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = chain_file(dir.path());
    let captures = dir.path().join("captures");
    let lab = LabGuard::up(
        &lab_name("tk", 1),
        &[
            "--topology",
            file.to_str().unwrap(),
            "--capture",
            captures.to_str().unwrap(),
        ],
    );
    let pings = 5;
    let text = ping_from(
        &lab.name,
        "a",
        &["-c", &pings.to_string(), "-i", "0.05"],
        "10.77.0.2",
    );
    assert_eq!(ping_times_ms(&text).len(), pings, "{text}");
    drop(lab);
    // When each echo (type, sequence) entered each link, s, and its comment there.
    let entered = |link: &str| -> Vec<(String, f64, String)> {
        tshark(
            &captures.join(format!("{link}.pcapng")),
            "icmp",
            &["icmp.type", "icmp.seq", "frame.time_epoch", "frame.comment"],
        )
        .into_iter()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            (
                format!("{} {}", f[0], f[1]),
                f[2].parse().unwrap(),
                f[3].to_owned(),
            )
        })
        .collect()
    };
    let links: Vec<_> = ["l1", "l2", "l3"].into_iter().map(entered).collect();
    for records in &links {
        assert_eq!(records.len(), 2 * pings, "{records:?}");
        for (_, _, comment) in records {
            assert!(comment.contains(" delivered, queued "), "{comment}");
        }
    }
    let at = |link: usize, echo: &str| {
        links[link]
            .iter()
            .find(|(e, _, _)| e == echo)
            .unwrap_or_else(|| panic!("no {echo} on link {}", link + 1))
            .1
    };
    // One way's time on l2 at 100 Mbit/s: 84 IP bytes serialized.
    let serialization = 84.0 * 8.0 / 100e6;
    for seq in 1..=pings {
        let (request, reply) = (format!("8 {seq}"), format!("0 {seq}"));
        let steps = [
            (at(1, &request) - at(0, &request), 0.001, "l1 a→r1"),
            (
                at(2, &request) - at(1, &request),
                0.005 + serialization,
                "l2 r1→r2",
            ),
            (at(1, &reply) - at(2, &reply), 0.002, "l3 b→r2"),
            (
                at(0, &reply) - at(1, &reply),
                0.005 + serialization,
                "l2 r2→r1",
            ),
        ];
        for (took, expected, link) in steps {
            assert!(
                (took - expected).abs() < 1e-4,
                "echo {seq} on {link}: {:.6} ms, not {:.6}",
                took * 1e3,
                expected * 1e3
            );
        }
    }

    // `--capture-link` chooses the links: l2 alone; a link the file lacks, or a
    // dumbbell's, is one line.
    let chosen = dir.path().join("chosen");
    let lab = LabGuard::up(
        &lab_name("tk", 2),
        &[
            "--topology",
            file.to_str().unwrap(),
            "--capture",
            chosen.to_str().unwrap(),
            "--capture-link",
            "l2",
        ],
    );
    let text = ping_from(&lab.name, "a", &["-c", "2", "-i", "0.05"], "10.77.0.2");
    assert_eq!(ping_times_ms(&text).len(), 2, "{text}");
    drop(lab);
    let mut written: Vec<String> = std::fs::read_dir(&chosen)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, ["l2.pcapng"]);
    assert_eq!(
        tshark(&chosen.join("l2.pcapng"), "icmp", &["icmp.seq"]).len(),
        4
    );
    let wrong = lab_up_refused(
        &lab_name("tk", 3),
        &[
            "--topology".as_ref(),
            file.as_os_str(),
            "--capture".as_ref(),
            chosen.as_os_str(),
            "--capture-link".as_ref(),
            "l9".as_ref(),
        ],
    );
    assert_eq!(
        failure(&wrong),
        "tcplab: --capture-link l9: the topology has no such link (links: l1, l2, l3)"
    );
    let dumbbell = tcplab()
        .args(["run", "--path", "rtt 2ms", "--capture"])
        .arg(dir.path().join("d.pcapng"))
        .args(["--capture-link", "l2"])
        .output()
        .unwrap();
    assert!(
        failure(&dumbbell).starts_with("tcplab: --capture-link l2: a dumbbell's capture"),
        "{dumbbell:?}"
    );
}

/// A sweep across a topology with `capture = true`: a directory per run beside the
/// database, a pcapng file per link in it, each holding the flow's packets (tshark
/// reads them). Among others: counts, not times.
#[test]
fn a_sweep_across_a_topology_captures_each_link_per_run() {
    if !privileged_or_skip("topology_sweep_capture") || !tshark_or_skip("topology_sweep_capture") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pair.toml");
    std::fs::write(
        &file,
        "name = \"pair\"\nduration = \"1s\"\ncapture = true\n\
         [[topology.host]]\nname = \"a\"\n[[topology.host]]\nname = \"b\"\n\
         [[topology.router]]\nname = \"r\"\n\
         [[topology.link]]\nname = \"ar\"\nbetween = [\"a\", \"r\"]\npath = \"rtt 2ms\"\n\
         [[topology.link]]\nname = \"rb\"\nbetween = [\"r\", \"b\"]\npath = \"rtt 4ms rate 50mbit\"\n\
         [[flow]]\nclient = \"a\"\nserver = \"b\"\n",
    )
    .unwrap();
    let db = dir.path().join("pair.db");
    assert_success(&sweep(&file, &db, &[]));
    let run_dir = dir.path().join("pair-captures").join("pair-run0");
    for link in ["ar", "rb"] {
        let packets = tshark(
            &run_dir.join(format!("{link}.pcapng")),
            "tcp",
            &["frame.number"],
        );
        assert!(packets.len() > 1000, "{link}: {} packets", packets.len());
    }
}

/// `shell --topology`: an ephemeral lab of the file's shape, the command in its second
/// host (a client's place) reaching the first (the server's), its exit status passed
/// on, and nothing left; `--client-host`/`--server-host` choose other hosts, and
/// `--record` stores what their connections did, explained link by link.
#[test]
fn a_shell_runs_its_command_across_a_topology() {
    if !privileged_or_skip("topology_shell") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = chain_file(dir.path());
    let shell = |command: &[&str], extra: &[&str]| {
        tcplab()
            .args(["shell", "--topology", file.to_str().unwrap()])
            .args(extra)
            .arg("--")
            .args(command)
            .output()
            .unwrap()
    };
    let out = shell(&["ping", "-c", "3", "-i", "0.2", "10.77.0.1"], &[]);
    assert_success(&out);
    let rtts = ping_times_ms(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rtts.len(), 3, "{out:?}");
    assert!(rtts.iter().all(|&ms| ms >= 16.0 - 0.01), "{rtts:?}");
    let said = stderr(&out);
    assert!(
        said.contains("topology ") && said.contains("host b "),
        "{said}"
    );
    let out = shell(&["sh", "-c", "exit 3"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(
        failure(&shell(&["true"], &["--client-host", "r1"])),
        format!(
            "tcplab: --client-host r1: no such host in topology {} (hosts: a, b)",
            file.display()
        )
    );
    // From a to b, the other way: b serves, a's connections are watched and stored.
    let db = dir.path().join("shell.db");
    let out = shell(
        &[
            "sh",
            "-c",
            "echo $TCPLAB_SERVER; iperf3 -c $TCPLAB_SERVER -t 1 > /dev/null",
        ],
        &[
            "--client-host",
            "a",
            "--server-host",
            "b",
            "--server-cmd",
            "iperf3 -s -1 -B $TCPLAB_SERVER > /dev/null",
            "--record",
            db.to_str().unwrap(),
        ],
    );
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "10.77.0.2\n");
    // iperf3's control connection carries too little to be explained; its data
    // connection crosses l2 from r1 to r2, the one link with a queue.
    let bound = binding_links(&db);
    assert!(
        bound.iter().any(
            |(_, from, to, link)| (from.as_str(), to.as_str(), link.as_str())
                == ("a", "b", "l2 r1→r2")
        ),
        "{bound:?}"
    );
}

/// A command flow (`protocol = "command"`) runs between the two hosts it names, its
/// connections watched and explained through the topology: here iperf3 from a to b,
/// the way a chain's flows do not go by default. l2 at 20 Mbit/s, which an iperf3 on a
/// loaded machine still fills: at 100 Mbit/s, among the other topology tests, one
/// queued nowhere once and was bound at no link.
#[test]
fn a_command_flow_runs_between_the_hosts_it_names() {
    if !privileged_or_skip("topology_command") || !iperf3_or_skip("topology_command") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let chain = chain_with(dir.path(), "rtt 10ms rate 20mbit");
    let file = dir.path().join("command.toml");
    std::fs::write(
        &file,
        format!(
            r#"name = "command-across"
duration = "2s"
topology = "{}"

[[flow]]
protocol = "command"
client = "a"
server = "b"
server_command = "iperf3 -s -1 -B $TCPLAB_SERVER"
command = "iperf3 -c $TCPLAB_SERVER -t 1"
"#,
            chain.display()
        ),
    )
    .unwrap();
    let db = dir.path().join("command.db");
    assert_success(&sweep(&file, &db, &[]));
    let (run, flows) = runs_and_flows(&db).remove(0);
    assert_eq!(run["status"], "done", "{run}");
    assert!(
        flows
            .iter()
            .all(|f| str_at(f, "/client_addr").starts_with("10.77.0.1:")
                && str_at(f, "/server_addr").starts_with("10.77.0.2:")),
        "{flows:?}"
    );
    let bound = binding_links(&db);
    assert!(
        bound.iter().any(
            |(_, from, to, link)| (from.as_str(), to.as_str(), link.as_str())
                == ("a", "b", "l2 r1→r2")
        ),
        "{bound:?}"
    );
}

/// Sweeps the quick example `name` into a database in `dir` (made if need be).
fn sweep_quick(name: &str, dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let db = dir.join(format!("{name}.db"));
    assert_success(&sweep(&quick_example(&format!("{name}.toml")), &db, &[]));
    db
}

/// Each run's report charts of its links: `full` links (each way named) drew their
/// queues; every link each way that dropped packets says how many, as its counters do;
/// the drawing of the topology has every node and link; each flow's trains at each
/// link are the ones its record holds — asserted. What load can spoil is an error:
/// a full link that carried less than 90 % of `bps` on average over the run (a flow
/// started late on a loaded machine leaves it idle at first), or more than 105 %, or
/// drawn loaded under 90 %.
fn assert_links_drawn(db: &Path, full: &[&str], bps: f64) -> Result<(), String> {
    use tcplab_report::{find_chart, Body, Target};
    let store = tcplab_store::Store::open(db).unwrap();
    for row in store.list_runs().unwrap() {
        let run = store.load_run(row.id).unwrap();
        let links: Vec<_> = run.path.as_ref().unwrap().links().collect();
        let chart = |name: &str| {
            find_chart(&store, Some(Target::Run(row.id)), name, Default::default()).unwrap()
        };
        let bars = |name: &str| match chart(name).body {
            Body::Bars {
                categories, series, ..
            } => (categories, series),
            _ => panic!("run {}: {name} are bars", row.id),
        };
        let (categories, series) = bars("links");
        for (category, carried) in categories.iter().zip(&series[0].points) {
            let name = category.split(" (").next().unwrap();
            let counters = &links.iter().find(|l| l.name == name).unwrap().counters;
            match counters.dropped() {
                0 => assert_eq!(category, name),
                n => assert_eq!(category, &format!("{name} ({n} dropped)")),
            }
            if full.contains(&name) && !(0.9 * bps..=1.05 * bps).contains(&carried.y) {
                return Err(format!(
                    "run {}: {name} carried {} bit/s of {bps}",
                    row.id, carried.y
                ));
            }
        }
        // The drawing: every host and router, every link labelled with its name and
        // coloured by its load (a full link's 90 % or more), in the SVG too.
        let t = run.path.as_ref().unwrap().topology.as_ref().unwrap();
        let drawing = chart("topology");
        let Body::Graph { nodes, edges } = &drawing.body else {
            panic!("run {}: a topology is a graph", row.id);
        };
        for host in &t.hosts {
            assert!(nodes.iter().any(|n| &n.name == host && n.host), "{host}");
        }
        assert_eq!(edges.len(), t.links.len());
        for link in &t.links {
            let edge = edges
                .iter()
                .find(|e| e.label.starts_with(&format!("{} ", link.name)))
                .unwrap_or_else(|| panic!("no edge for {}", link.name));
            if full
                .iter()
                .any(|f| f.starts_with(&format!("{} ", link.name)))
                && !edge.load.is_some_and(|l| l >= 0.9)
            {
                return Err(format!("run {}: {edge:?}", row.id));
            }
        }
        let svg = tcplab_report::svg(&drawing, true).unwrap();
        for n in nodes {
            assert!(
                svg.contains(&format!("\n{}\n</text>", n.name)),
                "{} not in the SVG",
                n.name
            );
        }
        let queue = chart("queue");
        let drawn = queue.series_names();
        for name in full {
            assert!(drawn.contains(name), "run {}: queues {drawn:?}", row.id);
        }
        // Each flow's trains at each link that meters them, as the link's record has
        // them: its mean a bar, its p99 the level across it; the full links among them.
        let (categories, series) = bars("trains");
        for name in full {
            assert!(categories.iter().any(|c| c == name), "{categories:?}");
        }
        for s in series {
            let flow = run
                .flows
                .iter()
                .find(|f| s.name.trim_end_matches(" p99") == format!("flow {}", f.id))
                .unwrap_or_else(|| panic!("no flow for {}", s.name));
            let key = data_key(&serde_json::to_value(flow).unwrap());
            for p in &s.points {
                let link = &categories[p.x as usize];
                let met = links
                    .iter()
                    .find(|l| &l.name == link)
                    .and_then(|l| l.bursts.iter().find(|b| b.flow == key))
                    .unwrap_or_else(|| panic!("{link} metered no trains of {key}"));
                let recorded = match s.dashed {
                    true => met.burst_p99,
                    false => met.burst_mean,
                };
                assert_eq!(p.y, recorded, "{} at {link}", s.name);
            }
        }
    }
    Ok(())
}

/// `tcplab explain --json --db DB [RUN…]`: the explanation (of the last run without one).
fn explained(db: &Path, runs: &[String]) -> Value {
    let out = tcplab()
        .args(["explain", "--json", "--db"])
        .arg(db)
        .args(runs)
        .output()
        .unwrap();
    parse_success(&out)
}

/// Each run's flows as explain sees them through the topology: (run, from, to,
/// binding link), with a `binding_link` finding for each.
fn binding_links(db: &Path) -> Vec<(i64, String, String, String)> {
    let mut all = Vec::new();
    for run in export_jsonl(db, "runs") {
        let id = run["id"].as_i64().unwrap();
        let e = explained(db, &[id.to_string()]);
        let flows = e["flow_links"].as_array().expect("a topology's flows");
        let findings = e["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "binding_link")
            .count();
        assert_eq!(findings, flows.len(), "{e:#}");
        for f in flows {
            let text = |key: &str| f[key].as_str().unwrap_or("none").to_owned();
            all.push((id, text("from"), text("to"), text("binding")));
        }
    }
    all
}

/// The quick parking lot (examples/quick/parking-lot.toml) gives the textbook result
/// under reno and cubic: the long flow across three bottlenecks gets less than each
/// one-hop flow, while each link's two flows fill it (95 % of its goodput or more, and
/// no more than it but for the 5 % that measuring each flow over its own window allows:
/// a BBR long flow drains its three queues after the one-hop flow stopped). explain
/// names each one-hop flow's own link as its binding link, and one of the three
/// bottlenecks for the long flow, every time. Among others, once in three tries: a
/// flow started late on a loaded machine leaves its links idle at first.
#[test]
fn the_parking_lots_long_flow_gets_less_than_each_one_hop_flow() {
    if !privileged_or_skip("parking_lot") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let mut tries = 0;
    let db = one_of_three_tries("the parking lot's shares", || {
        tries += 1;
        let db = sweep_quick("parking-lot", &dir.path().join(tries.to_string()));
        let long = point_means(&db, Some("long"));
        assert_eq!(long.len(), 3, "{long:?}");
        let goodput = 20e6 * 1448.0 / 1500.0;
        for hop in ["hop1", "hop2", "hop3"] {
            for ((cc, long_bps), (_, hop_bps)) in long.iter().zip(point_means(&db, Some(hop))) {
                let seen = format!("{cc}: long {long_bps:.0} bit/s, {hop} {hop_bps:.0} bit/s");
                println!("{seen}");
                let sum = long_bps + hop_bps;
                if !cc.contains("bbr") && long_bps >= &hop_bps {
                    return Err(seen);
                }
                if !(0.95 * goodput..=1.05 * goodput).contains(&sum) {
                    return Err(format!(
                        "{seen}: the link carried {sum} bit/s of its goodput {goodput}"
                    ));
                }
            }
        }
        assert_links_drawn(&db, &["b1 r1→r2", "b2 r2→r3", "b3 r3→r4"], 20e6)?;
        Ok(db)
    });
    let flows = binding_links(&db);
    assert_eq!(flows.len(), 12, "{flows:?}");
    for (run, from, to, binding) in flows {
        let expected: &[&str] = match (from.as_str(), to.as_str()) {
            ("long", "far") => &["b1 r1→r2", "b2 r2→r3", "b3 r3→r4"],
            ("a1", "z1") => &["b1 r1→r2"],
            ("a2", "z2") => &["b2 r2→r3"],
            ("a3", "z3") => &["b3 r3→r4"],
            other => panic!("a flow {other:?}"),
        };
        assert!(
            expected.contains(&binding.as_str()),
            "run {run}: {from} → {to} bound at {binding}"
        );
    }
}

/// flent's rtt_fair as flent runs it (examples/quick/rtt-fair-servers.toml): one
/// client, four servers at 6 to 101 ms behind one bottleneck. Cubic's RTT unfairness:
/// the nearest server's flow gets more than the farthest's; together they fill the
/// bottleneck (95-105 % of its goodput, each over its own window), and explain binds
/// every flow at it, every time. Among others, as the parking lot.
#[test]
fn rtt_fair_servers_favour_the_nearest_and_bind_at_the_shared_link() {
    if !privileged_or_skip("rtt_fair_servers") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let mut tries = 0;
    let db = one_of_three_tries("the servers' shares", || {
        tries += 1;
        let db = sweep_quick("rtt-fair-servers", &dir.path().join(tries.to_string()));
        let means: Vec<f64> = ["s6", "s21", "s51", "s101"]
            .iter()
            .map(|flow| point_means(&db, Some(flow))[0].1)
            .collect();
        let goodput = 50e6 * 1448.0 / 1500.0;
        let sum: f64 = means.iter().sum();
        let seen =
            format!("6, 21, 51, 101 ms: {means:?} bit/s, {sum} of the bottleneck's {goodput}");
        println!("{seen}");
        if means[0] <= means[3] || !(0.95 * goodput..=1.05 * goodput).contains(&sum) {
            return Err(seen);
        }
        assert_links_drawn(&db, &["bottleneck client→r"], 50e6)?;
        Ok(db)
    });
    let flows = binding_links(&db);
    assert_eq!(flows.len(), 4, "{flows:?}");
    for (_, from, to, binding) in flows {
        assert_eq!(
            (from.as_str(), binding.as_str()),
            ("client", "bottleneck client→r"),
            "{to}"
        );
    }
}

/// `tcplab run --topology FILE --client-host a --server-host b`: one test across the
/// chain, recorded link by link. Every data packet of the flow that left l1 entered l2,
/// and what l2 did not drop left l3 (each link's own tally of the flow, asserted every
/// time); TCP's shortest round trip is no shorter than the links' 16 ms; the route is
/// the one the file gives; explain binds the flow at the one rated link. A host the
/// file lacks is one line before anything is built. Among others: only the round trip's
/// floor is a time, and load only lengthens it.
#[test]
fn a_run_across_a_topology_is_recorded_link_by_link() {
    if !privileged_or_skip("run_topology") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = chain_file(dir.path());
    let db = dir.path().join("runs.db");
    let run = run_a_to_b(&file, &["--db", db.to_str().unwrap()]);
    let path = &run["path"];
    assert_eq!(path["topology"]["hosts"], serde_json::json!(["a", "b"]));
    let route = path["topology"]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["from"] == "a" && r["to"] == "b")
        .unwrap();
    assert_eq!(
        route["hops"],
        serde_json::json!(["l1 a→r1", "l2 r1→r2", "l3 r2→b"])
    );
    let key = data_key(&run["flows"][0]);
    let met = |name: &str| of_flow(hop(path, name), "flows", &key);
    let tally = |hop: &str| (u64_at(met(hop), "/packets"), u64_at(met(hop), "/dropped"));
    let (l1, l2, l3) = (tally("l1 a→r1"), tally("l2 r1→r2"), tally("l3 r2→b"));
    // Each packet's time on each link, on the emulator's clock: l1 and l3 only delay
    // (1 and 2 ms one way); l2 delays 5 ms and serializes at 100 Mbit/s (at most a
    // 1 500-byte packet's 120 µs) besides the queueing.
    for (hop, one_way_us) in [("l1 a→r1", 1000.0), ("l3 r2→b", 2000.0)] {
        let f = met(hop);
        assert_eq!(
            (f64_at(f, "/delay_mean_us"), f64_at(f, "/delay_max_us")),
            (one_way_us, one_way_us),
            "{hop}: {f}"
        );
    }
    let core = met("l2 r1→r2");
    let beyond_queueing = f64_at(core, "/delay_mean_us") - f64_at(core, "/queue_delay_mean_us");
    assert!(
        (5000.0..=5121.0).contains(&beyond_queueing),
        "l2: {beyond_queueing} µs beside queueing: {core}"
    );
    println!("{key}: l1 {l1:?}, l2 {l2:?}, l3 {l3:?}");
    assert_eq!(l1.1 + l3.1, 0, "only l2 has a queue");
    assert_eq!(l1.0, l2.0 + l2.1, "what left l1 entered l2");
    assert_eq!(l2.0, l3.0, "what left l2 left l3");
    assert!(l1.0 > 1000, "{l1:?}");
    let min_rtt_us = u64_at(&run, "/summary/rtt/min_us");
    assert!(min_rtt_us >= 16_000, "{min_rtt_us} µs");
    let e = explained(&db, &[]);
    assert_eq!(e["flow_links"][0]["binding"], "l2 r1→r2", "{e:#}");

    let out = tcplab()
        .args(["run", "--topology"])
        .arg(&file)
        .args(["--client-host", "zz"])
        .output()
        .unwrap();
    assert_eq!(
        failure(&out),
        format!(
            "tcplab: --client-host zz: no such host in topology {} (hosts: a, b)",
            file.display()
        )
    );
}

/// `pace RATE` on a topology's link: a gap pacer before that link each way it is set,
/// as a dumbbell's before its bottleneck. The pacer holds the queue the link would (the
/// link's own stays under one packet's serialization), passes every packet on to the
/// link, and explain binds the flow at the pacer, whose rate bounds it.
#[test]
fn a_gap_pacer_on_a_link_holds_the_queue_before_it() {
    if !privileged_or_skip("topology_pacer") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = chain_with(dir.path(), "rtt 10ms rate 100mbit pace 50mbit");
    let db = dir.path().join("paced.db");
    let run = run_a_to_b(&file, &["--db", db.to_str().unwrap()]);
    let link = |name: &str| hop(&run["path"], name);
    let (pacer, core) = (link("pacer l2 r1→r2"), link("l2 r1→r2"));
    assert_eq!(
        u64_at(pacer, "/delivered_packets"),
        u64_at(core, "/packets_in"),
        "every packet the pacer let go entered l2"
    );
    assert_eq!(
        u64_at(pacer, "/packets_in"),
        u64_at(link("l1 a→r1"), "/delivered_packets")
    );
    let key = data_key(&run["flows"][0]);
    let met = |l: &Value| f64_at(of_flow(l, "flows", &key), "/queue_delay_mean_us");
    let (paced_us, link_us) = (met(pacer), met(core));
    println!("{key}: queued {paced_us} µs at the pacer, {link_us} µs at l2");
    // Each link meters the trains each flow arrived in: into the pacer, the sender's
    // (its GSO packets' segments together); into l2, one packet at a time, spaced at
    // 50 Mbit/s. An emulator woken late on a loaded machine may hand l2 two of them at
    // once, now and then: 99 % of the packets come alone whatever the load.
    let trains = |l: &Value| -> (f64, f64, u64) {
        let b = of_flow(l, "bursts", &key);
        (
            f64_at(b, "/burst_mean"),
            f64_at(b, "/burst_p99"),
            u64_at(b, "/burst_max"),
        )
    };
    let (into_pacer, into_link) = (trains(pacer), trains(core));
    println!("trains into the pacer {into_pacer:?}, into l2 {into_link:?}");
    assert!(
        into_link.0 < 1.05 && into_link.1 == 1.0,
        "l2's trains behind the pacer: {into_link:?}"
    );
    assert!(into_pacer.2 > 1, "the sender's trains: {into_pacer:?}");
    // Spaced at 50 Mbit/s, a packet finds l2's 100 Mbit/s free but for what another
    // flow (the test's control connection) put there: one packet's 120 µs at most.
    assert!(link_us <= 121.0, "{link_us} µs at l2");
    assert!(paced_us > link_us, "{paced_us} µs at the pacer");
    let received = f64_at(&run, "/summary/received_bps");
    let e = explained(&db, &[]);
    let bound = &e["flow_links"][0];
    assert_eq!(bound["binding"], "pacer l2 r1→r2", "{e:#}");
    let bound_bps = f64_at(bound, "/bound_bps");
    assert!((45e6..50e6).contains(&bound_bps), "{bound_bps}");
    // Over the run's 2 s, but for what a receiver kept off the CPU moves into it.
    let allowed = bound_bps * (1.0 + STALL_US as f64 / 2e6);
    assert!(received <= allowed, "{received} bit/s over {bound_bps}");
}

/// A topology flow's `pacing = "gap"`: a gap pacer on its sending host's first link
/// toward the server (PSPacer on the sender's egress), which binds it at its rate; two
/// rates for one link way are refused in one line before any run.
#[test]
fn a_flows_gap_pacer_sits_on_its_senders_first_link() {
    if !privileged_or_skip("topology_flow_gap") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let chain = chain_file(dir.path());
    let flow = |name: &str, rate: &str| {
        format!(
            "[[flow]]\nname = \"{name}\"\nclient = \"a\"\nserver = \"b\"\ncc = \"cubic\"\npacing = \"gap\"\npacing_rate = \"{rate}\"\n"
        )
    };
    let head = format!(
        "name = \"gap-across\"\nduration = \"2s\"\ntopology = \"{}\"\n",
        chain.display()
    );
    let file = dir.path().join("gap.toml");
    std::fs::write(&file, format!("{head}{}", flow("paced", "20mbit"))).unwrap();
    let db = dir.path().join("gap.db");
    assert_success(&sweep(&file, &db, &[]));
    let (run, flows) = runs_and_flows(&db).remove(0);
    let path = json_column(&run, "path_json");
    let pacer = hop(&path, "pacer l1 a→r1");
    assert!(u64_at(pacer, "/delivered_packets") > 100, "{pacer}");
    let e = explained(&db, &[]);
    assert_eq!(e["flow_links"][0]["binding"], "pacer l1 a→r1", "{e:#}");
    let bound_bps = f64_at(&e["flow_links"][0], "/bound_bps");
    assert!((18e6..20e6).contains(&bound_bps), "{bound_bps}");
    let received = f64_at(&flows[0], "/received_bps");
    let allowed = bound_bps * (1.0 + STALL_US as f64 / 2e6);
    assert!(received <= allowed, "{received} bit/s over {bound_bps}");

    std::fs::write(
        &file,
        format!(
            "{head}{}{}",
            flow("paced", "20mbit"),
            flow("other", "30mbit")
        ),
    )
    .unwrap();
    assert_eq!(
        failure(&sweep(&file, &dir.path().join("two.db"), &[])),
        format!(
            "tcplab: {}: the run: flow 'other': link l1 (\"rtt 2ms up.pace 20mbit\") is paced already where a sends: one gap pacer per link way",
            file.display()
        )
    );
}

/// An AQM and a policer on a topology's link each say what they did in explain, from
/// that link's own counters, as a dumbbell's bottleneck does: CoDel on l2 (20 Mbit/s,
/// where the flow queues), then a policer on l2 instead (10 Mbit/s, a 20 kB bucket),
/// which drops, and bounds the flow at its rate with its bucket over the window.
#[test]
fn a_topology_link_s_aqm_and_policer_say_what_they_did() {
    if !privileged_or_skip("topology_aqm_policer") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let said = |name: &str, l2: &str| {
        let file = chain_with(dir.path(), l2);
        let db = dir.path().join(format!("{name}.db"));
        let run = run_a_to_b(&file, &["--db", db.to_str().unwrap()]);
        let e = explained(&db, &[]);
        let messages = |kind: &str| -> Vec<String> {
            e["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["kind"] == kind)
                .map(|f| f["message"].as_str().unwrap().to_owned())
                .collect()
        };
        let (aqm, policer) = (messages("aqm"), messages("policer"));
        (run, e, aqm, policer)
    };
    let (run, _, aqm, policer) = said("codel", "rtt 10ms rate 20mbit aqm codel");
    let l2 = hop(&run["path"], "l2 r1→r2");
    let early = u64_at(l2, "/dropped_aqm");
    let overflow = u64_at(l2, "/dropped_queue");
    assert!(early > 0, "CoDel on a 20 Mbit/s link under cubic: {l2}");
    assert_eq!(aqm.len(), 1, "{aqm:?}");
    assert!(
        aqm[0].starts_with(&format!(
            "link l2 r1→r2's codel dropped {} early and {} on overflow; its queue held a median ",
            units::count(early, "packet"),
            units::count(overflow, "packet")
        )),
        "{aqm:?}"
    );
    assert!(policer.is_empty(), "{policer:?}");

    let (run, e, aqm, policer) = said("policer", "rtt 10ms police 10mbit burst 20kB");
    let l2 = hop(&run["path"], "l2 r1→r2");
    let policed = u64_at(l2, "/dropped_police");
    assert!(policed > 0, "a 10 Mbit/s policer under cubic: {l2}");
    assert!(aqm.is_empty(), "{aqm:?}");
    assert_eq!(policer.len(), 1, "{policer:?}");
    assert!(
        policer[0].starts_with(&format!(
            "the policer of link l2 r1→r2 (10.0 Mbit/s, a bucket of 19.5 KiB) dropped {} of the {} that reached it",
            units::count(policed, "packet"),
            u64_at(l2, "/packets_in")
        )),
        "{policer:?}"
    );
    // The policer binds: its rate and its bucket over the run's window, as goodput; the
    // flow got no more.
    let window_us = f64_at(&run, "/summary/window_seconds") * 1e6;
    let allowed = (10e6 + 20_000.0 * 8.0 * 1e6 / window_us) * 1448.0 / 1500.0;
    let bound = f64_at(&e["flow_links"][0], "/bound_bps");
    assert!(
        (bound / allowed - 1.0).abs() < 0.01,
        "{bound} against {allowed}"
    );
    let received = f64_at(&run["flows"][0], "/received_bps");
    assert!(
        received <= bound,
        "{received} bit/s over the policer's {bound}"
    );
}

/// `lab topology` prints the topology file of a dumbbell (hosts server and client1 …,
/// router r, the bottleneck and each access link); the lab built from it gives each
/// client the dumbbell's round trip to the server (the links' delays a floor load
/// cannot lower), and its bottleneck the queue the dumbbell sizes (`lab show`). A
/// window-following pacer, which a topology's link cannot have, is refused in one line.
#[test]
fn a_dumbbell_printed_as_a_topology_builds_the_same_lab() {
    if !privileged_or_skip("dumbbell_topology") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let out = tcplab()
        .args([
            "lab",
            "topology",
            "--path",
            "rtt 20ms rate 50mbit queue 1bdp",
        ])
        .args(["--clients", "2", "--client-path", "rtt 10ms"])
        .args(["--client-path", "rtt 40ms"])
        .output()
        .unwrap();
    assert_success(&out);
    let file = dir.path().join("dumbbell.toml");
    std::fs::write(&file, &out.stdout).unwrap();
    let lab = LabGuard::up(&lab_name("td", 1), &["--topology", file.to_str().unwrap()]);
    for (client, floor_ms) in [("client1", 30.0), ("client2", 60.0)] {
        let text = ping_from(&lab.name, client, &["-c", "3", "-i", "0.2"], "10.77.0.1");
        let rtts = ping_times_ms(&text);
        assert_eq!(rtts.len(), 3, "{text}");
        assert!(
            rtts.iter().all(|&ms| ms >= floor_ms - 0.01),
            "{client}: {rtts:?}"
        );
    }
    // 50 Mbit/s × client2's 60 ms, as `lab up --path … --clients 2` sizes it.
    let show = lab.show();
    let queue = str_at(&show, "/lab/topology/links/0/path");
    assert_eq!(queue, "rtt 20ms rate 50mbit queue 375kB");
    let out = tcplab()
        .args(["lab", "topology", "--path", "rate 10mbit up.pace cwnd"])
        .output()
        .unwrap();
    assert_success(&out);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("path = \"rate 10mbit up.pace cwnd\""),
        "{printed}"
    );
}

/// A dynamic gap pacer (`pace cwnd`) follows the window rates of every sender whose way
/// crosses it, added up: two cubic senders from two hosts through one paced link, in a
/// topology and in a dumbbell with two clients, keep moving (46 % of the unpaced pair's
/// rate here), where a pacer following one end's senders alone held both to 1-2 % (1.2
/// and 2.1 of 94.6 Mbit/s, measured before ends added up). Among others, once in three
/// tries: a ratio of two runs on one loaded machine.
#[test]
fn a_window_pacer_follows_every_sender_that_crosses_it() {
    if !privileged_or_skip("window_pacer_shared") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let head = "name = \"shared-window-pacer\"\nduration = \"3s\"\n";
    let flow = |client: &str, server: &str| {
        format!(
            "[[flow]]\nname = \"from-{}\"\nclient = {client}\n{server}cc = \"cubic\"\n",
            client.trim_matches('"')
        )
    };
    let topology = format!(
        "{head}[topology]\n\
         host = [{{ name = \"a\" }}, {{ name = \"c\" }}, {{ name = \"b\" }}]\n\
         router = [{{ name = \"r\" }}]\n\
         link = [\n\
           {{ name = \"la\", between = [\"a\", \"r\"], path = \"rtt 2ms\" }},\n\
           {{ name = \"lc\", between = [\"c\", \"r\"], path = \"rtt 2ms\" }},\n\
           {{ name = \"core\", between = [\"r\", \"b\"], path = \"rtt 20ms rate 100mbit queue 1bdp {{pace}}\" }},\n\
         ]\n{}{}[[axis]]\nname = \"pace\"\nvalues = [\"\", \"pace cwnd\"]\n",
        flow("\"a\"", "server = \"b\"\n"),
        flow("\"c\"", "server = \"b\"\n"),
    );
    let dumbbell = format!(
        "{head}[path]\nrtt = \"20ms\"\nrate = \"100mbit\"\nqueue = \"1bdp\"\n\
         [[access]]\nrtt = \"2ms\"\n[[access]]\nrtt = \"2ms\"\n{}{}\
         [[axis]]\nkey = \"flow.pacing\"\nvalues = [\"none\", \"gap_cwnd\"]\n",
        flow("1", ""),
        flow("2", ""),
    );
    for (shape, text, pacer) in [
        ("topology", topology, "pacer core r→b"),
        ("dumbbell", dumbbell, "pacer"),
    ] {
        let file = dir.path().join(format!("{shape}.toml"));
        std::fs::write(&file, text).unwrap();
        let mut tries = 0;
        one_of_three_tries(shape, || {
            tries += 1;
            let db = dir.path().join(format!("{shape}-{tries}.db"));
            assert_success(&sweep(&file, &db, &[]));
            // The paced run, by its pacer; every flow of it crossed that pacer.
            let has_pacer = |path: &Value| hops(path).any(|h| h["name"] == pacer);
            let (run, flows) = runs_and_flows(&db)
                .into_iter()
                .find(|(run, _)| has_pacer(&json_column(run, "path_json")))
                .expect("a paced run");
            let paced = hop(&json_column(&run, "path_json"), pacer).clone();
            assert!(u64_at(&paced, "/delivered_packets") > 100, "{paced}");
            let means = point_means(&db, None);
            let mean = |paced: bool| {
                let point = means
                    .iter()
                    .find(|(label, _)| label.contains("cwnd") == paced);
                point.unwrap_or_else(|| panic!("{means:?}")).1
            };
            let (unpaced, paced) = (mean(false), mean(true));
            let received: Vec<f64> = flows.iter().map(|f| f64_at(f, "/received_bps")).collect();
            let seen = format!(
                "{shape}: {unpaced:.3e} bit/s unpaced, {paced:.3e} paced; paced flows {received:?}"
            );
            println!("{seen}");
            if paced < 0.25 * unpaced || received.iter().any(|&bps| bps < 2e6) {
                return Err(seen);
            }
            Ok(())
        });
    }
}
