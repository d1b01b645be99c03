//! `--capture`: the packets at the bottleneck's entry in a pcapng file, read by tshark
//! and held against the link's own counters and the kernel's retransmissions.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;

use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// The bar: each direction's packets per fate, as tshark reads the file's comments,
/// equal the link's counters (the test's and tcplab's own together); the retransmissions tshark finds in the up direction
/// equal the kernel's count. Among others: two records of the same packets, and a flow
/// its loss limits, not the CPU.
#[test]
fn tshark_counts_each_fate_as_the_link_did_and_the_retransmissions_as_the_kernel() {
    if !privileged_or_skip("capture") || !tshark_or_skip("capture") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.pcapng");
    let run = run_captured(
        &[
            "--path",
            "rtt 20ms rate 100mbit queue 1bdp up.loss 1%",
            "-t",
            "2s",
        ],
        &file,
        &dir.path().join("runs.db"),
    );
    let path = &run["path"];
    assert_eq!(
        str_at(path, "/capture_file"),
        file.to_str().unwrap(),
        "the run records where its capture is"
    );

    // "up dropped queue, queued 1.234 ms" → ("up", "dropped queue")
    let mut fates: BTreeMap<(String, String), u64> = BTreeMap::new();
    for line in tshark(&file, "", &["frame.comment"]) {
        let what = line.split(',').next().unwrap();
        let (dir, fate) = what.split_once(' ').unwrap();
        *fates.entry((dir.into(), fate.into())).or_default() += 1;
    }
    let tally = |dir: &str, fate: &str| fates.get(&(dir.into(), fate.into())).copied().unwrap_or(0);
    for dir in ["up", "down"] {
        let link = &path[dir]["links"][0];
        let delivered: u64 = ["delivered", "reordered", "corrupted", "duplicate"]
            .iter()
            .map(|f| tally(dir, f))
            .sum();
        let counted = [
            (delivered, "/delivered_packets"),
            (tally(dir, "dropped loss"), "/dropped_loss"),
            (tally(dir, "dropped queue"), "/dropped_queue"),
            (tally(dir, "dropped aqm"), "/dropped_aqm"),
        ];
        for (captured, counter) in counted {
            assert_eq!(
                captured,
                all_traffic(link, counter),
                "{dir} {counter}: {fates:?}"
            );
        }
        let in_file: u64 = fates
            .iter()
            .filter(|((d, _), _)| d == dir)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(u64_at(&path[dir], "/capture/packets"), in_file, "{dir}");
        assert_eq!(u64_at(&path[dir], "/capture/overflow"), 0, "{dir}");
    }
    assert!(tally("up", "dropped loss") > 50, "{fates:?}");

    // tshark names a segment below the highest sequence number it saw a retransmission,
    // or, sent soon after the one before it, out-of-order: every retransmission the
    // kernel counts, since the capture holds the lost originals too (after
    // segmentation, as the kernel counts: per segment).
    let found = tshark(
        &file,
        "frame.packet_flags_direction == 0x2 && tcp.len > 0 && (tcp.analysis.retransmission || tcp.analysis.out_of_order)",
        &["frame.number"],
    )
    .len() as f64;
    let kernel = u64_at(&run, "/summary/retransmits") as f64;
    println!("retransmissions: tshark {found}, the kernel {kernel}; fates {fates:?}");
    assert!(
        (found - kernel).abs() <= 0.02 * kernel + 2.0,
        "tshark found {found} retransmissions, the kernel counted {kernel}"
    );

    // Its time-sequence graph marks the drops, in an SVG of tens of KB, and every
    // retransmission of the data connection the capture holds as a mark of its own a
    // few pixels long, in the SVG and in the PNG alike.
    let plot = |file: &std::path::Path| {
        let said = tcplab()
            .args(["plot"])
            .arg(dir.path().join("runs.db"))
            .args(["--chart", "tseq", "-o"])
            .arg(file)
            .output()
            .unwrap();
        assert!(said.status.success(), "{said:?}");
    };
    let (svg, png) = (dir.path().join("tseq.svg"), dir.path().join("tseq.png"));
    plot(&svg);
    plot(&png);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("dropped loss") && drawn.contains("flow 0 ACK"));
    assert!(drawn.len() < 1_000_000, "{} bytes", drawn.len());
    let port = str_at(&run, "/flows/0/client_addr")
        .rsplit_once(':')
        .unwrap()
        .1
        .to_owned();
    let retransmitted = tshark(
        &file,
        &format!("tcp.srcport == {port} && tcp.len > 0 && (tcp.analysis.retransmission || tcp.analysis.out_of_order)"),
        &["frame.number"],
    )
    .len();
    let marks = retransmission_marks(&drawn);
    println!(
        "retransmissions of the data connection: capture {retransmitted}, marks {}",
        marks.len()
    );
    assert!(retransmitted > 0);
    assert_eq!(marks.len(), retransmitted, "{marks:?}");
    let (width, pixels) = png_pixels(&png);
    let c = tcplab_report::RETRANSMITTED;
    for &(x, top, bottom) in &marks {
        assert!(bottom - top >= 4, "a mark of {} px at x {x}", bottom - top);
        let middle = pixels[((top + bottom) / 2) as usize * width + x as usize];
        assert_eq!(
            middle,
            [c.0, c.1, c.2],
            "the PNG at {x},{}",
            (top + bottom) / 2
        );
    }

    // The file is in time order, on the run's clock.
    let info = Command::new("capinfos")
        .arg("-o")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("True"),
        "{}",
        String::from_utf8_lossy(&info.stdout)
    );
}

/// A PNG file's width and its pixels as RGB.
fn png_pixels(file: &std::path::Path) -> (usize, Vec<[u8; 3]>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(file).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let pixels = buf[..info.buffer_size()]
        .chunks(info.color_type.samples())
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    (info.width as usize, pixels)
}

/// Bad capture requests are refused in one line, and no lab is left.
#[test]
fn a_capture_that_cannot_be_made_is_refused_in_one_line() {
    if !privileged_or_skip("capture_refusals") {
        return;
    }
    let _machine = among_others();
    // A file where a directory should be: no one can create the capture below it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    let below_a_file = format!("{}/file/x.pcapng", dir.path().display());
    for (args, needle) in [
        (
            &["run", "127.0.0.1", "--capture", "x.pcapng"][..],
            "need --path",
        ),
        (
            &[
                "run",
                "--path",
                "rtt 1ms",
                "--client-path",
                "rtt 5ms",
                "--capture",
                "x.pcapng",
                "--capture-at",
                "client",
            ],
            "--capture-at client needs clients without an access link",
        ),
        (
            &["run", "--path", "rtt 1ms", "--capture-at", "server"],
            "--capture",
        ),
        (
            &["run", "--path", "rtt 1ms", "--capture", &below_a_file],
            below_a_file.as_str(),
        ),
        (
            &[
                "run",
                "--path",
                "rtt 1ms",
                "--capture",
                "x.pcapng",
                "--capture-snaplen",
                "0",
            ],
            "--capture-snaplen",
        ),
    ] {
        let out = tcplab().args(args).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(said.contains(needle), "{args:?}: {said}");
        assert_eq!(said.trim().lines().count(), 1, "{args:?}: {said}");
    }
}

/// A run's text names where its capture sees the packets.
#[test]
fn a_run_says_where_its_capture_sees_the_packets() {
    if !privileged_or_skip("capture_place") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    for (at, place) in [
        ("bottleneck", "at the bottleneck's entry"),
        ("server", "at the server's interface"),
    ] {
        let file = dir.path().join(format!("{at}.pcapng"));
        let out = tcplab()
            .args(["run", "--path", "rtt 1ms", "-t", "0.3", "--capture"])
            .arg(&file)
            .args(["--capture-at", at])
            .output()
            .unwrap();
        assert_success(&out);
        let said = String::from_utf8_lossy(&out.stdout);
        let line = format!("  capturing both directions {place}, with each packet's fate, into ");
        assert!(said.contains(&line), "{at}: {said}");
    }
}

/// Packets in a capture per (direction, fate, port), a port being a TCP or UDP source
/// port: tshark's reading of each packet's comment and transport header.
fn fates_by_port(file: &std::path::Path) -> BTreeMap<(String, String, u16), u64> {
    let mut fates = BTreeMap::new();
    for line in tshark(file, "", &["frame.comment", "tcp.srcport", "udp.srcport"]) {
        let mut fields = line.split('\t');
        let comment = fields.next().unwrap();
        let port = fields.find_map(|p| p.parse().ok()).unwrap_or(0);
        let what = comment.split(',').next().unwrap();
        let (dir, fate) = what.split_once(' ').unwrap();
        *fates
            .entry((dir.to_string(), fate.to_string(), port))
            .or_default() += 1;
    }
    fates
}

/// Issue 24's bar: after a reverse test through a lossy queue the server sends its
/// samples over the control connection, through the same path, in one burst that
/// overflows the queue. The drops the run attributes to the test (the JSON's link
/// counters, explain's overflow count) are the capture's drops of the test's data
/// connection, and tcplab's own — the control connection's, the probes' — are counted
/// apart and equal the capture's of theirs. Among others: the counters against the
/// capture, and probes on a fixed schedule that a late sender still sends.
#[test]
fn the_tests_drops_are_its_own_and_tcplabs_traffic_is_counted_apart() {
    if !privileged_or_skip("capture_accounting") || !tshark_or_skip("capture_accounting") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let (file, db) = (dir.path().join("r.pcapng"), dir.path().join("a.db"));
    let run = run_captured(
        &[
            "--path",
            "rtt 20ms rate 50mbit queue 1bdp loss 0.5%",
            "-C",
            "cubic",
            "-R",
            "-t",
            "6s",
            // Samples every 5 ms: the server's upload after the test is about 1 MB.
            "--sample-interval",
            "5ms",
            "--probe",
            "20ms",
            "--probe-idle",
            "0s",
        ],
        &file,
        &db,
    );
    let port_of = |addr: &str| -> u16 { addr.rsplit(':').next().unwrap().parse().unwrap() };
    let flow = &flows(&run)[0];
    let (client_port, data_port) = (
        port_of(str_at(flow, "/client_addr")),
        port_of(str_at(flow, "/server_addr")),
    );
    let fates = fates_by_port(&file);
    let tally = |dir: &str, fate: &str, ports: &[u16]| -> u64 {
        fates
            .iter()
            .filter(|((d, f, p), _)| d == dir && f == fate && ports.contains(p))
            .map(|(_, n)| n)
            .sum()
    };
    // The test's packets are its data connection's and the hosts' own ICMP (port 0:
    // the kernel's router solicitations); tcplab's own, every other port's.
    let own_ports: Vec<u16> = fates
        .keys()
        .map(|k| k.2)
        .filter(|p| ![data_port, client_port, 0].contains(p))
        .collect();
    println!("data port {data_port}, client port {client_port}: {fates:?}");
    for (dir, test_port) in [("down", data_port), ("up", client_port)] {
        let test_ports = [test_port, 0];
        let link = &run["path"][dir]["links"][0];
        for (fate, counter) in [
            ("dropped queue", "/dropped_queue"),
            ("dropped loss", "/dropped_loss"),
        ] {
            assert_eq!(
                u64_at(link, counter),
                tally(dir, fate, &test_ports),
                "{dir} {fate}: the test's, as its data connection's in the capture"
            );
            let own = ["/control", "/probe"]
                .iter()
                .filter_map(|kind| link.pointer(&format!("{kind}{counter}"))?.as_u64())
                .sum::<u64>();
            assert_eq!(
                own,
                tally(dir, fate, &own_ports),
                "{dir} {fate}: tcplab's own, as the rest of the capture"
            );
        }
        // The probes: requests up from the client's probe socket, echoes down.
        let probes = tshark(
            &file,
            &format!("udp.length == 52 && frame.comment matches \"^{dir} \""),
            &["frame.number"],
        )
        .len() as u64;
        assert_eq!(u64_at(link, "/probe/packets_in"), probes, "{dir} probes");
        assert!(probes >= 250, "{dir}: {probes} probes in 6 s every 20 ms");
    }
    // The control connection crossed the link both ways, its packets counted apart: the
    // server's samples after the test among them.
    for dir in ["up", "down"] {
        let link = &run["path"][dir]["links"][0];
        let control = tshark(
            &file,
            &format!("tcp.port == 5201 && frame.comment matches \"^{dir} \""),
            &["frame.number"],
        )
        .len() as u64;
        assert!(control > 0, "{dir}: no control packet in the capture");
        // The last few may still be inside the link when the lab stops: counted in, not
        // written.
        let counted = u64_at(link, "/control/packets_in");
        assert!(
            (control..=control + 8).contains(&counted),
            "{dir}: {counted} control packets counted, {control} in the capture"
        );
    }

    // explain counts the test's overflow drops only.
    let overflow = finding_message(&explained(&db), FindingKind::QueueOverflow);
    let test_drops = tally("down", "dropped queue", &[data_port]);
    match (test_drops, overflow) {
        (0, None) => {}
        (n, Some(message)) => assert!(
            message.contains(&format!("overflowed: {n} packet")),
            "{n} drops of the test: {message}"
        ),
        (n, None) => panic!("{n} drops of the test, and no overflow explained"),
    }
}

/// A packet the AQM marked is in the capture as it left the link: Congestion
/// Experienced in its IP header (tshark's `ip.dsfield.ecn == 3`), one for each mark
/// the link counted and none besides. Among others: the link's count against the
/// capture's.
#[test]
fn a_ce_mark_is_in_the_captured_header() {
    if !privileged_or_skip("capture_ce") || !tshark_or_skip("capture_ce") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ce.pcapng");
    let out = tcplab()
        .args([
            "run",
            "--path",
            "rtt 20ms rate 20mbit queue 300 aqm codel ecn",
        ])
        .args([
            "-P",
            "2",
            "-C",
            "cubic",
            "-t",
            "3s",
            "--ecn",
            "--json",
            "--capture",
        ])
        .arg(&file)
        .arg("--db")
        .arg(dir.path().join("ce.db"))
        .output()
        .unwrap();
    let run = parse_success(&out);
    for dir in ["up", "down"] {
        let link = &run["path"][dir]["links"][0];
        let marked = all_traffic(link, "/marked_ce");
        let in_header = tshark(
            &file,
            &format!("ip.dsfield.ecn == 3 && frame.comment matches \"^{dir} \""),
            &["frame.comment"],
        );
        assert!(
            in_header.iter().all(|c| c.contains("marked ce")),
            "{dir}: {in_header:?}"
        );
        assert_eq!(in_header.len() as u64, marked, "{dir}");
        if dir == "up" {
            assert!(marked > 5, "the AQM marked the senders' packets: {link}");
        }
    }
}

/// tcptrace's round trips from a capture at the sending host are the run's: within 5 %
/// of the sender's mean smoothed RTT, a forward run captured at the client and a
/// reverse one at the server. At the bottleneck each direction is captured where it
/// enters its own bottleneck, so a segment and its ACK are seen half a path apart:
/// tcptrace reads the RTT short there.
#[test]
fn tcptrace_reads_the_runs_round_trip_from_a_capture_at_the_sender() {
    if !privileged_or_skip("capture_rtt")
        || !tshark_or_skip("capture_rtt")
        || !tcptrace_or_skip("capture_rtt")
    {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    // (where, -R, whose RTT: tcptrace's a→b (client → server) or b→a)
    let run = |at: &str, reverse: bool| -> (f64, f64) {
        let file = dir.path().join(format!("{at}.pcapng"));
        let mut args = vec!["--path", "rtt 20ms rate 50mbit queue 1bdp", "-C", "cubic"];
        args.extend(["-t", "4s", "--capture-at", at]);
        args.extend(reverse.then_some("-R"));
        let run = run_captured(&args, &file, &dir.path().join("rtt.db"));
        assert_eq!(
            run["path"]["capture_at"].as_str().unwrap_or("bottleneck"),
            at
        );
        let srtt = f64_at(&flows(&run)[0], "/rtt/mean_us") / 1000.0;
        let (a2b, b2a) = tcptrace_rtt_avg(&file);
        let traced = if reverse { b2a } else { a2b };
        println!(
            "{at}{}: srtt mean {srtt:.2} ms, tcptrace {traced:.2} ms",
            if reverse { " -R" } else { "" }
        );
        (traced, srtt)
    };
    for (at, reverse) in [("client", false), ("server", true)] {
        one_of_three_tries(&format!("tcptrace at the {at}"), || {
            let (traced, srtt) = run(at, reverse);
            let off = (traced / srtt - 1.0).abs();
            (off <= 0.05).then_some(()).ok_or(format!(
                "tcptrace {traced:.2} ms, srtt {srtt:.2} ms: {:.1} % off",
                off * 100.0
            ))
        });
    }
    let (traced, srtt) = run("bottleneck", false);
    assert!(
        traced < 0.8 * srtt,
        "at the bottleneck tcptrace sees the way up only: {traced:.2} of {srtt:.2} ms"
    );
}
