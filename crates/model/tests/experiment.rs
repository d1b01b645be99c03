//! Experiment files: parsing, expansion into points, errors with positions, planning.

use std::collections::HashSet;

use tcplab_model::experiment::{parse, Combine, Experiment, FlowEnds, SpecError};
use tcplab_netsim::path::{Pace, PaceRtt};
use tcplab_record::{Mode, ProbeParams, TestEnd, TransactionParams};

fn ok(text: &str) -> Experiment {
    parse(text, "test").unwrap_or_else(|e| panic!("{e}"))
}

fn err(text: &str) -> SpecError {
    match parse(text, "test") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn a_file_without_axes_is_one_point_with_defaults() {
    let e = ok("");
    assert_eq!((e.name.as_str(), e.repetitions, e.seed), ("test", 1, None));
    assert_eq!((e.confidence, e.combine), (0.95, Combine::Cross));
    assert_eq!(e.points.len(), 1);
    let c = &e.points[0].config;
    assert_eq!(
        (c.duration_us, c.warmup_us, c.access.len()),
        (10_000_000, 0, 1)
    );
    assert_eq!(c.flows.len(), 1);
    let f = &c.flows[0];
    assert_eq!(
        (f.name.as_str(), &f.ends, f.start_us),
        ("flow1", &FlowEnds::Dumbbell { client: 1 }, 0)
    );
    assert_eq!(f.params.end, TestEnd::Duration { us: 10_000_000 });
    assert_eq!(f.params.mode, Mode::Up);
}

#[test]
fn a_cross_product_varies_the_first_axis_slowest() {
    let e = ok(r#"
        name = "buffer"
        repetitions = 3
        duration = "5s"
        warmup = 1
        path = "rtt 20ms rate 1gbit"
        [[flow]]
        cc = "cubic"
        [[axis]]
        key = "path.rtt"
        values = ["0.2ms", "20ms", "100ms"]
        [[axis]]
        key = "flow.window"
        name = "buffer"
        values = ["64K", 1048576]
    "#);
    assert_eq!(e.name, "buffer");
    assert_eq!(e.points.len(), 6);
    let labels: Vec<String> = e.points.iter().map(|p| e.label(p)).collect();
    assert_eq!(labels[0], "path.rtt=0.2ms buffer=64K");
    assert_eq!(labels[1], "path.rtt=0.2ms buffer=1048576");
    assert_eq!(labels[5], "path.rtt=100ms buffer=1048576");
    let last = &e.points[5].config;
    assert_eq!(last.path.to_string(), "rtt 100ms rate 1gbit");
    assert_eq!(last.warmup_us, 1_000_000);
    let tuning = &last.flows[0].params.tuning;
    assert_eq!(
        (tuning.sndbuf, tuning.rcvbuf),
        (Some(1 << 20), Some(1 << 20))
    );
    assert_eq!(tuning.cc.as_deref(), Some("cubic"));
    assert_eq!(
        e.points[0].config.flows[0].params.tuning.sndbuf,
        Some(64 << 10)
    );
}

#[test]
fn zipped_axes_pair_their_values() {
    let e = ok(r#"
        combine = "zip"
        [[axis]]
        key = "flow.write_size"
        values = ["1K", "2K"]
        [[axis]]
        key = "flow.nodelay"
        values = [true, false]
    "#);
    assert_eq!(e.points.len(), 2);
    let t = &e.points[1].config.flows[0].params.tuning;
    assert_eq!((t.write_size, t.nodelay), (2048, false));
    let bad = err(r#"
combine = "zip"
[[axis]]
key = "flow.write_size"
values = ["1K", "2K"]
[[axis]]
key = "flow.nodelay"
values = [true]
"#);
    assert_eq!(bad.at.map(|a| a.0), Some(6), "{bad}");
    assert!(bad.message.contains("one length"), "{bad}");
}

#[test]
fn ranges_expand_linearly_and_geometrically() {
    let e = ok(r#"
        [[axis]]
        key = "flow.sndbuf"
        range = { from = 2, to = 8192, factor = 2, unit = "K" }
        [[axis]]
        key = "flow.streams"
        range = { from = 1, to = 4, step = 1 }
        [[axis]]
        key = "path.loss"
        range = { from = 0.1, to = 0.3, step = 0.1, unit = "%" }
    "#);
    let buffers = &e.axes[0].values;
    assert_eq!(buffers.len(), 13);
    assert_eq!((buffers[0].as_str(), buffers[12].as_str()), ("2K", "8192K"));
    assert_eq!(e.axes[1].values, ["1", "2", "3", "4"]);
    assert_eq!(e.axes[2].values, ["0.1%", "0.2%", "0.3%"]);
    assert_eq!(e.points.len(), 13 * 4 * 3);
    let e2 = err("[[axis]]\nkey = \"flow.sndbuf\"\nrange = { from = 2, to = 1, factor = 2 }\n");
    assert_eq!(e2.at.map(|a| a.0), Some(3), "{e2}");
}

#[test]
fn named_axes_fill_placeholders_in_text() {
    let e = ok(r#"
        path = "rtt {rtt} rate 10mbit {where}loss {loss}"
        [[axis]]
        name = "rtt"
        values = ["10ms", "100ms"]
        [[axis]]
        name = "where"
        values = ["", "up."]
        [[axis]]
        name = "loss"
        values = ["1%", "5%"]
    "#);
    assert_eq!(e.points.len(), 8);
    let one_way = &e.points[3].config.path;
    assert_eq!(e.label(&e.points[3]), "rtt=10ms where=up. loss=5%");
    assert_eq!(one_way.to_string(), "rtt 10ms up.loss 5% rate 10mbit");
    assert_eq!(e.label(&e.points[0]), "rtt=10ms where=\"\" loss=1%");
    assert_eq!(
        e.points[0].config.path.to_string(),
        "rtt 10ms loss 1% rate 10mbit"
    );
}

#[test]
fn keys_reach_one_flow_a_path_direction_and_dotted_sysctls() {
    let e = ok(r#"
        path = "rate 1gbit"
        access = ["rtt 10ms", "rtt 40ms"]
        [[flow]]
        name = "bulk"
        [[flow]]
        name = "late"
        client = 2
        start = "2s"
        [[axis]]
        key = "flow.late.cc"
        values = ["reno"]
        [[axis]]
        key = "flow.1.streams"
        values = [4]
        [[axis]]
        key = "path.up.loss"
        values = ["1%"]
        [[axis]]
        key = "sysctl.net.ipv4.tcp_window_scaling"
        values = [0]
    "#);
    let c = &e.points[0].config;
    assert_eq!(c.flows[0].params.streams, 4);
    assert_eq!(c.flows[0].params.tuning.cc, None);
    assert_eq!(c.flows[1].params.tuning.cc.as_deref(), Some("reno"));
    assert_eq!(c.flows[1].params.end, TestEnd::Duration { us: 8_000_000 });
    assert_eq!(c.path.to_string(), "up.loss 1% rate 1gbit");
    assert_eq!(c.sysctl["net.ipv4.tcp_window_scaling"], "0");
    assert_eq!(c.access[1].to_string(), "rtt 40ms");
}

#[test]
fn errors_point_at_the_value() {
    let cases: &[(&str, usize, &str)] = &[
        ("duration = \"10q\"\n", 1, "unknown unit 'q'"),
        ("[[flow]]\nsndbuf = \"4Q\"\n", 2, "invalid size"),
        ("[[flow]]\nwindw = \"4K\"\n", 2, "unknown field `windw`"),
        ("path = \"rtt 20ms rat 1gbit\"\n", 1, "rat"),
        ("repetitions = 3\nrepetitions = 4\n", 2, "duplicate"),
        (
            "[[axis]]\nkey = \"flow.sndbuf\"\nvalues = [\"1K\", \"2X\"]\n",
            3,
            "value \"2X\"",
        ),
        ("[[axis]]\nkey = \"flow.windw\"\nvalues = [1]\n", 3, "windw"),
        ("[[axis]]\nvalues = [1]\n", 1, "needs a key"),
        (
            "[[axis]]\nname = \"x\"\nvalues = [1]\n",
            1,
            "{x} appears in no value",
        ),
        (
            "[[axis]]\nkey = \"repetitions\"\nvalues = [1]\n",
            2,
            "cannot vary",
        ),
        (
            "[[axis]]\nkey = \"flow.cc\"\n",
            1,
            "values = [...] or range",
        ),
        ("combine = \"all\"\n", 1, "unknown variant"),
    ];
    for (text, line, needle) in cases {
        let e = err(text);
        assert_eq!(e.at.map(|a| a.0), Some(*line), "{text:?}: {e}");
        assert!(e.message.contains(needle), "{text:?}: {e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
    let column = err("[[flow]]\nsndbuf =   \"4Q\"\n");
    assert_eq!(column.at, Some((2, 12)));
}

#[test]
fn udp_flows_take_a_rate_a_size_and_a_burst() {
    let e = ok(r#"
        [[flow]]
        name = "bulk"
        [[flow]]
        name = "cbr"
        protocol = "udp"
        datagram_size = 1000
        [[axis]]
        key = "flow.cbr.rate"
        values = ["1mbit", "2mbit"]
    "#);
    let flows = &e.points[1].config.flows;
    assert_eq!(flows[0].params.udp, None);
    let udp = flows[1].params.udp.unwrap();
    assert_eq!(
        (udp.rate_bps, udp.datagram_size, udp.burst),
        (2_000_000, 1000, 1)
    );
    for (text, needle) in [
        ("[[flow]]\nprotocol = \"udp\"\n", "needs a rate"),
        ("[[flow]]\nrate = \"1mbit\"\n", "for protocol = \"udp\""),
    ] {
        let e = err(text);
        assert!(e.message.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn request_response_flows_take_sizes_and_writes() {
    let e = ok(r#"
        [[flow]]
        name = "rr"
        protocol = "rr"
        request = "1K"
        [[axis]]
        key = "flow.rr.request_writes"
        values = [1, 2]
    "#);
    let rr = |i: usize| e.points[i].config.flows[0].params.transactions.unwrap();
    assert_eq!(
        rr(1),
        TransactionParams {
            request_size: 1024,
            response_size: 1024,
            request_writes: 2,
            new_connection: false
        }
    );
    assert_eq!(rr(0).request_writes, 1);
    let netperfs = ok("[[flow]]\nprotocol = \"rr\"\n");
    assert_eq!(
        netperfs.points[0].config.flows[0].params.transactions,
        Some(TransactionParams {
            request_size: 1,
            response_size: 1,
            request_writes: 1,
            new_connection: false
        })
    );
    let crr = ok("[[flow]]\nprotocol = \"crr\"\nrequest = 200\nresponse = 10\n");
    let crr = crr.points[0].config.flows[0].params.transactions.unwrap();
    assert!(crr.new_connection);
    assert_eq!((crr.request_size, crr.response_size), (200, 10));
    for (text, needle) in [
        (
            "[[flow]]\nrequest = 100\n",
            "for protocol = \"rr\" or \"crr\"",
        ),
        (
            "[[flow]]\nprotocol = \"rr\"\ndirection = \"down\"\n",
            "-R and --bidir",
        ),
    ] {
        let e = err(text);
        assert!(e.message.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn a_probe_flow_is_probes_alone() {
    let e = ok(r#"
        [[flow]]
        name = "load"
        start = "2s"
        [[flow]]
        name = "ping"
        protocol = "probe"
        probe_idle = "1s"
    "#);
    let ping = &e.points[0].config.flows[1].params;
    assert_eq!(ping.streams, 0);
    assert_eq!(
        ping.probe,
        Some(ProbeParams {
            interval_us: 10_000,
            idle_us: 1_000_000
        })
    );
    for (text, needle) in [
        (
            "[[flow]]\nprotocol = \"probe\"\nstreams = 2\n",
            "no streams",
        ),
        (
            "[[flow]]\nprotocol = \"probe\"\nrate = \"1mbit\"\n",
            "for protocol = \"udp\"",
        ),
    ] {
        let e = err(text);
        assert!(e.message.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn a_command_flow_runs_programs_with_a_time_limit_and_the_hosts_settings() {
    let e = ok(r#"
        duration = "20s"
        [[flow]]
        name = "scp"
        protocol = "command"
        command = " scp root@$TCPLAB_SERVER:/f /tmp/f "
        server_command = "exec /usr/sbin/sshd -D"
        cc = "reno"
        ecn = true
        start = "1s"
        [[axis]]
        key = "sysctl.net.ipv4.tcp_window_scaling"
        values = [0, 1]
    "#);
    assert_eq!(e.points.len(), 2);
    let flow = &e.points[1].config.flows[0];
    let command = flow.command.as_ref().unwrap();
    assert_eq!(command.client, "scp root@$TCPLAB_SERVER:/f /tmp/f");
    assert_eq!(command.server.as_deref(), Some("exec /usr/sbin/sshd -D"));
    // The run's duration less the start: its time limit.
    assert_eq!(command.limit_us, 19_000_000);
    assert_eq!(flow.params.end, TestEnd::Duration { us: 19_000_000 });
    assert_eq!(flow.params.tuning.cc.as_deref(), Some("reno"));
    assert!(flow.params.tuning.ecn);
    assert_eq!(
        e.points[1].config.sysctl["net.ipv4.tcp_window_scaling"],
        "1"
    );
    let limited = ok("[[flow]]\nprotocol = \"command\"\ncommand = \"true\"\nduration = \"90s\"\n");
    let flow = &limited.points[0].config.flows[0];
    assert_eq!(flow.command.as_ref().unwrap().limit_us, 90_000_000);
    assert_eq!(flow.command.as_ref().unwrap().server, None);
    // tcplab's own flows have none, and plan as before (their hash unchanged).
    assert_eq!(ok("[[flow]]\n").points[0].config.flows[0].command, None);
}

#[test]
fn command_keys_and_engine_keys_stay_with_their_protocol() {
    let command = "[[flow]]\nprotocol = \"command\"\ncommand = \"true\"\n";
    for (text, needle) in [
        (
            "[[flow]]\nprotocol = \"command\"\n".to_owned(),
            "flow 'flow1': protocol = \"command\" needs command = \"…\"",
        ),
        (
            "[[flow]]\nprotocol = \"command\"\ncommand = \"  \"\n".to_owned(),
            "flow 'flow1': command is empty",
        ),
        (
            format!("{command}server_command = \"\"\n"),
            "flow 'flow1': server_command is empty",
        ),
        (
            "[[flow]]\ncommand = \"scp a b\"\n".to_owned(),
            "flow 'flow1': command and server_command are for protocol = \"command\"",
        ),
        (
            "[[flow]]\nprotocol = \"udp\"\nrate = 1\nserver_command = \"sshd\"\n".to_owned(),
            "command and server_command are for protocol = \"command\"",
        ),
        (
            format!("{command}window = \"64K\"\n"),
            "flow 'flow1': window tunes tcplab's own flows, but protocol = \"command\" runs a program",
        ),
        (format!("{command}streams = 2\n"), "streams tunes tcplab's own flows"),
        (format!("{command}bytes = \"1M\"\n"), "bytes tunes tcplab's own flows"),
        (format!("{command}probe = \"10ms\"\n"), "probe tunes tcplab's own flows"),
        (
            format!("{command}start = \"10s\"\n"),
            "start 10.0 s is not before the end of the run",
        ),
        (
            format!("{command}[[flow]]\nname = \"bulk\"\n"),
            "flow 'flow1': protocol = \"command\" takes every TCP connection of the lab's hosts as its own, so it runs alone, but flow 'bulk' runs beside it",
        ),
        (
            format!("trace_events = true\n{command}"),
            "trace_events is not taken for protocol = \"command\"",
        ),
        (
            format!("server = \"near\"\n{command}{HOSTS}"),
            "flow 'flow1': protocol = \"command\" runs its programs in a lab's hosts, but server = 'near' is a real host",
        ),
    ] {
        let e = err(&text);
        assert!(e.message.contains(needle), "{text:?}: {e}");
    }
    // An unknown key is named where it is.
    let e = err("[[flow]]\nprotocol = \"command\"\nclient_command = \"x\"\n");
    assert_eq!(e.at, Some((3, 1)), "{e}");
}

#[test]
fn ecn_is_asked_per_flow_and_held_per_client_host() {
    let e = ok(r#"
        access = ["", ""]
        [[flow]]
        name = "marked"
        ecn = true
        [[flow]]
        name = "plain"
        client = 2
    "#);
    let ecn = |i: usize| e.points[0].config.flows[i].params.tuning.ecn;
    assert!(ecn(0) && !ecn(1));
    let e = err("[[flow]]\nname = \"a\"\necn = true\n[[flow]]\nname = \"b\"\n");
    assert!(
        e.message
            .contains("flows 'a' and 'b' run from client 1 but only one asks for ecn"),
        "{e}"
    );
}

#[test]
fn a_flow_takes_probes_beside_it() {
    let e = ok(r#"
        [[flow]]
        name = "load"
        streams = 4
        direction = "bidir"
        probe = "10ms"
        [[flow]]
        name = "quiet"
        [[axis]]
        key = "flow.load.probe_idle"
        values = ["0s", "1s"]
    "#);
    let probe = |i: usize| e.points[i].config.flows[0].params.probe;
    assert_eq!(
        probe(1),
        Some(ProbeParams {
            interval_us: 10_000,
            idle_us: 1_000_000
        })
    );
    assert_eq!(probe(0).unwrap().idle_us, 0);
    assert_eq!(e.points[0].config.flows[1].params.probe, None);
    let default_idle = ok("[[flow]]\nprobe = \"5ms\"\n");
    assert_eq!(
        default_idle.points[0].config.flows[0].params.probe,
        Some(ProbeParams {
            interval_us: 5_000,
            idle_us: 2_000_000
        })
    );
    let e = err("[[flow]]\nprobe_idle = \"1s\"\n");
    assert!(e.message.contains("probe_idle needs probe"), "{e}");
}

#[test]
fn pacing_none_kernel_app_or_a_gap_pacer_at_a_rate() {
    let e = ok(r#"
        path = "rtt 10ms rate 100mbit"
        [[flow]]
        pacing_rate = "90mbit"
        [[axis]]
        key = "flow.pacing"
        values = ["none", "kernel", "app", "gap", "gap_cwnd", "gap_cwnd_minrtt"]
    "#);
    let tuning = |i: usize| e.points[i].config.flows[0].params.tuning.clone();
    let pace = |i: usize| e.points[i].config.path.up.pace;
    assert_eq!(
        (tuning(0).pacing_rate, tuning(0).app_rate, pace(0)),
        (None, None, None)
    );
    assert_eq!(tuning(1).pacing_rate, Some(90_000_000));
    assert_eq!(
        (tuning(2).pacing_rate, tuning(2).app_rate),
        (None, Some(90_000_000))
    );
    assert_eq!(
        (tuning(3).pacing_rate, pace(3)),
        (None, Some(Pace::Rate(90_000_000)))
    );
    assert_eq!(e.points[3].config.path.down.pace, None);
    assert_eq!(pace(4), Some(Pace::Window(PaceRtt::Smoothed)));
    assert_eq!(pace(5), Some(Pace::Window(PaceRtt::Min)));
    assert_eq!(tuning(5).pacing_rate, None, "the gap pacer alone paces");
    for mode in ["kernel", "app", "gap"] {
        let e = err(&format!("[[flow]]\npacing = \"{mode}\"\n"));
        assert!(e.message.contains("needs a pacing_rate"), "{mode}: {e}");
    }
    assert_eq!(err("[[flow]]\npacing = \"fast\"\n").at, Some((2, 10)));
}

#[test]
fn run_level_mistakes_are_named() {
    for (text, needle) in [
        (
            "duration = \"2s\"\nwarmup = \"2s\"\n",
            "warmup 2.00 s is not shorter",
        ),
        ("[[flow]]\nclient = 2\n", "client 2 does not exist"),
        (
            "duration = \"2s\"\n[[flow]]\nstart = \"3s\"\n",
            "start 3.00 s is not before",
        ),
        ("repetitions = 0\n", "at least 1"),
        ("confidence = 95\n", "between 0 and 1"),
        (
            "[[flow]]\nname = \"a\"\n[[flow]]\nname = \"a\"\n",
            "two flows",
        ),
    ] {
        let e = err(text);
        assert!(e.message.contains(needle), "{text:?}: {e}");
    }
    // A combination only some points reach names the point.
    let e = err(r#"
        path = "{a} 10ms {b}"
        [[axis]]
        name = "a"
        values = ["up.delay", "rtt"]
        [[axis]]
        name = "b"
        values = ["", "down.delay 5ms"]
    "#);
    assert_eq!(e.at, None);
    assert!(
        e.message.starts_with("at point a=rtt b=down.delay 5ms: "),
        "{e}"
    );
}

#[test]
fn the_schedule_runs_each_point_and_repetition_once_in_a_seeded_order() {
    let e = ok(r#"
        repetitions = 3
        [[axis]]
        key = "flow.streams"
        values = [1, 2, 4, 8]
    "#);
    let plan = e.schedule(7);
    assert_eq!(plan.len(), 12);
    let unique: HashSet<_> = plan.iter().map(|r| (r.point, r.repetition)).collect();
    assert_eq!(unique.len(), 12);
    assert_eq!(plan, e.schedule(7));
    assert_ne!(plan, e.schedule(8));
    let in_order: Vec<_> = (0..4).flat_map(|p| (0..3).map(move |r| (p, r))).collect();
    assert_ne!(
        plan.iter()
            .map(|r| (r.point, r.repetition))
            .collect::<Vec<_>>(),
        in_order
    );
}

#[test]
fn the_plan_hash_ignores_presentation_and_follows_the_runs() {
    let base = r#"
        name = "a"
        [[axis]]
        key = "flow.streams"
        values = [1, 2]
    "#;
    let same = "# a comment\nname = \"b\"\ndescription = \"x\"\n[[axis]]\nkey = \"flow.streams\"\nvalues = [1, 2]\n";
    assert_eq!(ok(base).plan_hash(), ok(same).plan_hash());
    assert_eq!(ok(base).plan_hash().len(), 64);
    let changed = base.replace("[1, 2]", "[1, 3]");
    assert_ne!(ok(base).plan_hash(), ok(&changed).plan_hash());
    let more = format!("repetitions = 2\n{base}");
    assert_ne!(ok(base).plan_hash(), ok(&more).plan_hash());
}

const HOSTS: &str = r#"
[host.near]
address = "10.77.0.1:5201"
key_file = "near.key"

[host.far]
address = "far.example.net"
key_file = "/etc/tcplab/far.key"

[host.old]
address = "10.77.0.1:5202"
iperf3 = true
"#;

#[test]
fn a_file_can_run_against_real_hosts_and_vary_which() {
    let e = ok(&format!(
        "server = \"near\"\n[[flow]]\ncc = \"cubic\"\n[[axis]]\nkey = \"server\"\nvalues = [\"near\", \"far\", \"old\"]\n{HOSTS}"
    ));
    let servers: Vec<_> = e
        .points
        .iter()
        .map(|p| p.config.server.clone().unwrap())
        .collect();
    assert_eq!(servers[0].address, "10.77.0.1:5201");
    assert_eq!(servers[0].key_file.as_deref(), Some("near.key"));
    assert_eq!(servers[1].name, "far");
    assert!(servers[2].iperf3 && servers[2].key_file.is_none());
    // No lab: the path stays empty and the flows run from this machine.
    assert!(e.points.iter().all(|p| p.config.path == Default::default()));
    assert_eq!(
        e.points[0].config.flows[0].ends,
        FlowEnds::Dumbbell { client: 1 }
    );
    // A lab file's plan (and so its stored hash) does not change with the feature.
    assert!(ok("path = \"rtt 5ms\"\n").points[0].config.server.is_none());
    // Nor with a capture unless asked for: `capture` is left out of a plan without it.
    let plain = ok("path = \"rtt 5ms\"\n").points[0].config.clone();
    assert!(!serde_json::to_string(&plain).unwrap().contains("capture"));
    assert!(
        ok("path = \"rtt 5ms\"\ncapture = true\n").points[0]
            .config
            .capture
    );
}

#[test]
fn what_needs_a_lab_is_refused_against_a_real_host() {
    for (extra, needle) in [
        (
            "server = \"nowhere\"\n",
            "server 'nowhere' is not a host of this file (hosts: far, near, old)",
        ),
        (
            "server = \"near\"\npath = \"rtt 10ms\"\n",
            "path is for a lab, but server = 'near'",
        ),
        (
            "server = \"near\"\n[sysctl]\n\"net.ipv4.tcp_sack\" = 0\n",
            "sysctl is for a lab",
        ),
        (
            "server = \"near\"\ncapture = true\n",
            "capture is for a lab",
        ),
        (
            "server = \"near\"\n[[flow]]\nclient = 2\n",
            "flow 'flow1': client 2, but against a real host",
        ),
        (
            "server = \"near\"\n[[flow]]\npacing = \"gap\"\npacing_rate = \"10mbit\"\n",
            "the gap pacer is an element of the lab's emulator",
        ),
        (
            "server = \"near\"\n[[flow]]\necn = true\n",
            "ecn sets a lab client's net.ipv4.tcp_ecn",
        ),
        (
            "server = \"old\"\n[[flow]]\n[[flow]]\n",
            "runs one test at a time",
        ),
        (
            "server = \"old\"\n[[flow]]\nstart = \"1s\"\n",
            "a flow's start must be 0",
        ),
    ] {
        // Top-level keys first: TOML puts them before the [host.*] tables.
        let text = match extra.split_once("\n[") {
            Some((top, tables)) => format!("{top}\n{HOSTS}\n[{tables}"),
            None => format!("{extra}{HOSTS}"),
        };
        let e = err(&text);
        assert!(e.message.contains(needle), "{text}\n→ {e}");
    }
    assert!(err("server = \"x\"\n")
        .message
        .contains("describe it in a [host.x] table"));
    let e = err("[host.a]\naddress = \"h\"\nkey = \"k\"\n");
    assert_eq!(e.at, Some((3, 1)), "{e}");
    // An axis giving a point a lab key names the point.
    let e = err(&format!(
        "server = \"near\"\n[[axis]]\nkey = \"path.rtt\"\nvalues = [\"10ms\"]\n{HOSTS}"
    ));
    assert!(
        e.message
            .starts_with("at point path.rtt=10ms: path is for a lab"),
        "{e}"
    );
}

#[test]
fn each_repetition_draws_its_own_lab_seed_from_the_experiments() {
    let e = ok(r#"
        repetitions = 3
        path = "rtt 10ms loss 1%"
        [[axis]]
        key = "flow.streams"
        values = [1, 2]
    "#);
    let seeds = |seed: u64| -> Vec<Vec<u64>> {
        e.points
            .iter()
            .map(|p| (0..3).map(|r| p.config.lab_seed(seed, r)).collect())
            .collect()
    };
    let first = seeds(42);
    // Repetitions differ; the same repetition of every point draws alike.
    assert_eq!(first[0].iter().collect::<HashSet<_>>().len(), 3);
    assert_eq!(first[0], first[1]);
    // The recorded seed gives every run its seed again; another seed other ones.
    assert_eq!(seeds(42), first);
    assert!(seeds(43)[0].iter().all(|s| !first[0].contains(s)));
    // A seed in the path replaces the experiment's, repetitions still apart.
    let pinned = ok("repetitions = 2\npath = \"loss 1% seed 7\"\n");
    let c = &pinned.points[0].config;
    assert_eq!(c.lab_seed(1, 0), c.lab_seed(99, 0));
    assert_ne!(c.lab_seed(1, 0), c.lab_seed(1, 1));
}

#[test]
fn a_bdp_queue_needs_a_delay_somewhere_in_the_lab() {
    let e = err("path = \"rate 50mbit queue 1bdp\"\n");
    assert!(
        e.message
            .contains("up.queue 1bdp: a queue in bdp is rate × round trip"),
        "{e}"
    );
    // The access links' delays count: the dumbbell of docs/paths.md.
    ok("path = \"rate 50mbit queue 1bdp\"\naccess = [\"rtt 10ms\", \"rtt 40ms\"]\n");
    let e = err("path = \"rtt 5ms\"\naccess = [\"loss 1% seed 3\"]\n");
    assert!(e.message.contains("client1's access link sets seed"), "{e}");
}

#[test]
fn shards_split_the_plan_into_disjoint_parts_that_make_it_whole() {
    use tcplab_model::experiment::Shard;
    let e = ok(r#"
        repetitions = 3
        [[flow]]
        [[axis]]
        key = "flow.window"
        values = ["8K", "16K", "32K", "64K"]
    "#);
    let seed = e.shard_seed();
    assert_eq!(seed, e.shard_seed(), "one seed for every shard");
    let plan = e.schedule(seed);
    let shards: Vec<Shard> = (1..=5).map(|k| format!("{k}/5").parse().unwrap()).collect();
    let mut seen = vec![0; plan.len()];
    for shard in &shards {
        let mine: Vec<usize> = (0..plan.len()).filter(|&s| shard.holds(s as u32)).collect();
        // 12 runs in 5 parts: 3, 3, 2, 2, 2.
        assert!((2..=3).contains(&mine.len()), "{shard}: {mine:?}");
        for s in mine {
            seen[s] += 1;
        }
    }
    assert!(
        seen.iter().all(|&n| n == 1),
        "each run in exactly one shard: {seen:?}"
    );
    for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
        assert!(bad.parse::<Shard>().unwrap_err().contains("K/N"), "{bad}");
    }
    let seeded = ok("seed = 42\n[[flow]]\n");
    assert_eq!(seeded.shard_seed(), 42);
}

/// A topology inline: two hosts through a router, `{rate}` an axis.
const INLINE_TOPOLOGY: &str = r#"
[[topology.host]]
name = "a"
[[topology.host]]
name = "b"
[[topology.router]]
name = "r"
[[topology.link]]
between = ["a", "r"]
path = "rtt 2ms"
[[topology.link]]
name = "core"
between = ["r", "b"]
path = "rtt 10ms rate {rate}"
"#;

#[test]
fn a_topologys_flows_name_their_hosts_and_axes_reach_its_links() {
    use tcplab_model::experiment::{FlowHosts, TopologySource};
    let e = ok(&format!(
        "{INLINE_TOPOLOGY}\n[[flow]]\nclient = \"a\"\nserver = \"b\"\n[[axis]]\nname = \"rate\"\nvalues = [\"10mbit\", \"50mbit\"]\n"
    ));
    assert_eq!(e.points.len(), 2);
    let c = &e.points[1].config;
    let flow = &c.flows[0];
    assert_eq!(
        flow.hosts(),
        Some(&FlowHosts {
            client: "a".into(),
            server: "b".into()
        })
    );
    assert_eq!(flow.client_host(), "a");
    let Some(source @ TopologySource::Inline(_)) = &c.topology else {
        panic!("{:?}", c.topology);
    };
    let topology = source.load(|_| unreachable!()).unwrap();
    let core = topology.links.iter().find(|l| l.name == "core").unwrap();
    assert_eq!(core.path.to_string(), "rtt 10ms rate 50mbit");
}

#[test]
fn a_topologys_gap_paced_flow_keeps_its_pacer_for_its_senders_first_link() {
    use tcplab_netsim::path::{Pace, PaceRtt};
    let paced = |pacing: &str| {
        let e = ok(&format!(
            "{INLINE_TOPOLOGY}\n[[flow]]\nclient = \"a\"\nserver = \"b\"\n{pacing}\n[[axis]]\nname = \"rate\"\nvalues = [\"10mbit\"]\n"
        ));
        let c = &e.points[0].config;
        assert_eq!(
            c.path.up.pace, None,
            "a topology's flow paces no dumbbell path"
        );
        c.flows[0].clone()
    };
    let rate = paced("pacing = \"gap\"\npacing_rate = \"5mbit\"");
    assert_eq!(rate.gap_pace, Some(Pace::Rate(5_000_000)));
    let window = paced("pacing = \"gap_cwnd_minrtt\"");
    assert_eq!(window.gap_pace, Some(Pace::Window(PaceRtt::Min)));
    // Stored and read back; a plan stored with the rate alone reads as that rate.
    let stored = serde_json::to_value(&window).unwrap();
    assert_eq!(stored["gap_pace"], serde_json::json!({"window": "min"}));
    let mut before = serde_json::to_value(&rate).unwrap();
    let object = before.as_object_mut().unwrap();
    let bps = object.remove("gap_pace").unwrap()["rate"].clone();
    object.insert("gap_pace_bps".into(), bps);
    let read: tcplab_model::experiment::FlowConfig = serde_json::from_value(before).unwrap();
    assert_eq!(read, rate);
}

#[test]
fn a_topologys_command_flow_names_the_hosts_its_programs_run_in() {
    use tcplab_model::experiment::FlowHosts;
    let e = ok(&format!(
        "{INLINE_TOPOLOGY}\n[[flow]]\nprotocol = \"command\"\nclient = \"b\"\nserver = \"a\"\ncommand = \"true\"\n[[axis]]\nname = \"rate\"\nvalues = [\"10mbit\"]\n"
    ));
    let flow = &e.points[0].config.flows[0];
    assert_eq!(
        flow.command.as_ref().map(|c| c.client.as_str()),
        Some("true")
    );
    assert_eq!(
        flow.hosts(),
        Some(&FlowHosts {
            client: "b".into(),
            server: "a".into()
        })
    );
}

#[test]
fn a_topology_file_is_named_and_read_later_with_its_flows_checked() {
    use tcplab_model::experiment::{check_flow_hosts, TopologySource};
    let e = ok("topology = \"lot.toml\"\n[[flow]]\nclient = \"a\"\nserver = \"c\"\n");
    let c = &e.points[0].config;
    assert_eq!(c.topology, Some(TopologySource::File("lot.toml".into())));
    let graph =
        "[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\nbetween = [\"a\", \"b\"]\n";
    let topology = c
        .topology
        .as_ref()
        .unwrap()
        .load(|file| {
            assert_eq!(file, "lot.toml");
            Ok(graph.into())
        })
        .unwrap();
    assert_eq!(
        check_flow_hosts(&topology, &c.flows).unwrap_err(),
        "flow 'flow1': server 'c' is not a host of the topology (hosts: a, b)"
    );
    let missing = TopologySource::File("gone.toml".into())
        .load(|_| Err(std::io::Error::from(std::io::ErrorKind::NotFound)))
        .unwrap_err();
    assert!(
        missing.starts_with("topology file 'gone.toml': "),
        "{missing}"
    );
}

#[test]
fn a_topologys_flows_and_keys_are_checked_in_one_line() {
    let flow = "[[flow]]\nclient = \"a\"\nserver = \"b\"\n";
    let cases = [
        (
            format!("path = \"rtt 2ms\"\n{INLINE_TOPOLOGY}{flow}"),
            "path is a dumbbell's, but topology gives the lab its links",
        ),
        (
            format!("{INLINE_TOPOLOGY}[[flow]]\nclient = 2\n"),
            "flow 'flow1': client 2; in a topology a flow names its hosts",
        ),
        (
            format!("{INLINE_TOPOLOGY}[[flow]]\nclient = \"a\"\n"),
            "flow 'flow1': in a topology a flow names its server host too",
        ),
        (
            format!("{INLINE_TOPOLOGY}[[flow]]\nclient = \"a\"\nserver = \"r\"\n"),
            "flow 'flow1': server 'r' is a router; a flow runs between hosts",
        ),
        (
            format!("{INLINE_TOPOLOGY}[[flow]]\nclient = \"x\"\nserver = \"b\"\n"),
            "flow 'flow1': client 'x' is not a host of the topology (hosts: a, b)",
        ),
        (
            format!("{INLINE_TOPOLOGY}[[flow]]\nclient = \"a\"\nserver = \"a\"\n"),
            "flow 'flow1': client and server are both 'a'",
        ),
        (
            "[[flow]]\nclient = \"a\"\n".to_owned(),
            "flow 'flow1': client 'a' names a host, which only a topology's flows do",
        ),
        (
            "[[flow]]\nserver = \"b\"\n".to_owned(),
            "flow 'flow1': server names a topology's host",
        ),
        (
            format!(
                "{}{flow}",
                INLINE_TOPOLOGY.replace("[\"r\", \"b\"]", "[\"r\", \"q\"]")
            ),
            "link core: no host or router named 'q'",
        ),
        (
            format!("topology = \" \"\n{flow}"),
            "topology: the file name is empty",
        ),
    ];
    for (text, expected) in cases {
        let text = text.replace("{rate}", "10mbit");
        let message = err(&text).message;
        assert!(message.starts_with(expected), "{message}\nfor:\n{text}");
    }
}

/// A flow's ends as a plan stores them (`config_json`), read back; and as a plan stored
/// before `FlowEnds` holds them: a topology's flow with both `client` (unused) and
/// `hosts`, a dumbbell's with `client` alone.
#[test]
fn a_flows_ends_read_back_from_plans_stored_now_and_before() {
    use tcplab_model::experiment::FlowConfig;
    let e = ok(&format!(
        "{INLINE_TOPOLOGY}\n[[flow]]\nclient = \"a\"\nserver = \"b\"\n[[axis]]\nname = \"rate\"\nvalues = [\"10mbit\"]\n"
    ));
    let flow = &e.points[0].config.flows[0];
    let mut stored = serde_json::to_value(flow).unwrap();
    assert_eq!(stored["hosts"]["client"], "a");
    assert!(stored.get("client").is_none(), "{stored}");
    let read = |v: &serde_json::Value| serde_json::from_value::<FlowConfig>(v.clone()).unwrap();
    assert_eq!(&read(&stored), flow);
    stored["client"] = 1.into();
    assert_eq!(&read(&stored), flow);
    stored.as_object_mut().unwrap().remove("hosts");
    stored["client"] = 2.into();
    assert_eq!(read(&stored).ends, FlowEnds::Dumbbell { client: 2 });
}
