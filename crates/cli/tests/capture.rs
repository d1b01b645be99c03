//! `--capture`: the packets at the bottleneck's entry in a pcapng file, read by tshark
//! and held against the link's own counters and the kernel's retransmissions.

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// The bar: each direction's packets per fate, as tshark reads the file's comments,
/// equal the link's counters; the retransmissions tshark finds in the up direction
/// equal the kernel's count.
#[test]
fn tshark_counts_each_fate_as_the_link_did_and_the_retransmissions_as_the_kernel() {
    if !privileged_or_skip("capture") || !tshark_or_skip("capture") {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.pcapng");
    let out = tcplab()
        .args([
            "run",
            "--path",
            "rtt 20ms rate 100mbit queue 1bdp up.loss 1%",
        ])
        .args(["-t", "2s", "--json", "--capture"])
        .arg(&file)
        .arg("--db")
        .arg(dir.path().join("runs.db"))
        .output()
        .unwrap();
    let run = parse_success(&out);
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
                u64_at(link, counter),
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
    let _serial = serial();
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
                "--capture",
                "/nonexistent/dir/x.pcapng",
            ],
            "/nonexistent/dir/x.pcapng",
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
