//! `tcplab report` as a person sees it: a small sweep and single runs (TCP and UDP)
//! into one database, the report, the page opened in headless Chromium, and every chart
//! checked to be drawn — its box on the screenshot holds the series' colours.

use crate::support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;
use tcplab_report::COLORS;
use tcplab_sys::netns::{in_ci, privileged_or_skip};

const CHROMIUM: &str = "/usr/bin/chromium";
/// Wide enough for two charts side by side, as on a desktop.
const WINDOW_WIDTH: u32 = 1400;

/// Chromium's path, or `None` (after printing why) outside CI when it is missing; in
/// CI a missing browser fails the test, as a missing privilege does.
fn chromium_or_skip(test: &str) -> Option<&'static str> {
    if Path::new(CHROMIUM).exists() {
        return Some(CHROMIUM);
    }
    let reason = format!("no {CHROMIUM} (apt-get install chromium)");
    assert!(!in_ci(), "{test}: CI must have a browser: {reason}");
    eprintln!("SKIP {test}: {reason}");
    None
}

/// Headless Chromium with `args` on `page`: its stdout. Flags as this machine needs
/// them: no sandbox as root, no GPU, and nothing that calls out to the network (the
/// browser waits on it otherwise). Its own process group, so a hung browser goes with
/// all its helper processes.
fn chromium(browser: &str, page: &Path, args: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    // A file, not a pipe: a pipe nobody reads while waiting fills with the DOM and
    // blocks the browser.
    let stdout_file = profile.path().join("stdout");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(std::fs::File::create(&stdout_file).unwrap())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("starting chromium");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            // SAFETY: a signal to the process group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::read_to_string(stdout_file).unwrap()
}

/// One chart on the page: its id and its box (x, y, width, height) in CSS pixels.
struct ChartBox {
    id: String,
    rect: [u32; 4],
}

/// The charts' boxes and the page height, as the page's script wrote them into the DOM.
fn boxes(dom: &str) -> (Vec<ChartBox>, u32) {
    let attr = |tag: &str, name: &str| -> Option<String> {
        let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
        let len = tag[start..].find('"')?;
        Some(tag[start..start + len].to_owned())
    };
    let charts = dom
        .split("<figure")
        .skip(1)
        .map(|tag| {
            let tag = &tag[..tag.find('>').unwrap()];
            let rect: Vec<u32> = attr(tag, "data-box")
                .unwrap_or_else(|| panic!("a chart without data-box: {tag}"))
                .split(',')
                .map(|v| v.parse().unwrap())
                .collect();
            ChartBox {
                id: attr(tag, "id").unwrap(),
                rect: [rect[0], rect[1], rect[2], rect[3]],
            }
        })
        .collect();
    let height = dom
        .split("data-height=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|h| h.parse().ok())
        .expect("the page wrote its height");
    (charts, height)
}

/// An RGB(A) PNG as (width, height, RGB triples).
fn decode(png_file: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_file).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let pixels = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    (info.width, info.height, pixels)
}

/// Whether a pixel has a palette colour (antialiased edges aside): never the black,
/// greys and white of frames, grids and labels. Every chart here draws at least one
/// palette series (the sum over flows is dark grey, but flow 0 is beside it).
fn series_colour(p: [u8; 3]) -> bool {
    COLORS.iter().any(|c| {
        let d = |a: u8, b: u8| (i32::from(a) - i32::from(b)).abs();
        d(p[0], c.0) + d(p[1], c.1) + d(p[2], c.2) <= 12
    })
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("running tcplab");
    assert_success(&out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_chart_of_the_report_is_drawn_in_a_browser() {
    let test = "report_in_a_browser";
    if !privileged_or_skip(test) {
        return;
    }
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("report.db");
    run_ok(
        tcplab()
            .arg("sweep")
            .arg(quick_example("report.toml"))
            .arg("--db")
            .arg(&db),
    );
    // Report intervals of 250 ms: a 1.5 s run's jitter and loss lines then cross their
    // chart (with 1 s intervals, one steep anti-aliased segment held as few as 214
    // pixels of the series colour).
    // The two flows' packets captured: their run has a time-sequence graph.
    let capture = dir.path().join("two-flows.pcapng");
    let capture = capture.to_str().unwrap();
    for args in [
        &[
            "-t",
            "1.5",
            "-P",
            "2",
            "--label",
            "two flows",
            "--capture",
            capture,
        ][..],
        &[
            "-t", "1.5", "-i", "0.25", "-u", "-b", "5mbit", "--label", "udp",
        ][..],
    ] {
        run_ok(
            tcplab()
                .args(["run", "--path", "rtt 10ms rate 50mbit queue 1bdp loss 0.5%"])
                .args(args)
                .arg("--db")
                .arg(&db),
        );
    }
    // A run across a topology: its drawing and each link's load.
    run_ok(
        tcplab()
            .args(["run", "--topology"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/topologies/chain.toml"))
            .args(["-t", "1", "--label", "chain", "--db"])
            .arg(&db),
    );
    let out = dir.path().join("report");
    let said = run_ok(tcplab().arg("report").arg(&db).arg("-o").arg(&out));
    assert!(said.starts_with("wrote "), "{said}");
    let page = out.join("index.html");
    // The graph marks what the path's 0.5 % loss dropped, under its reason.
    let html = std::fs::read_to_string(&page).unwrap();
    let graph = &html[html
        .find("time-sequence graph")
        .expect("a time-sequence graph")..];
    assert!(
        graph.contains("dropped loss"),
        "no drops marked in the time-sequence graph"
    );

    let (charts, height) = boxes(&chromium(
        browser,
        &page,
        &[
            format!("--window-size={WINDOW_WIDTH},1000"),
            "--dump-dom".into(),
        ],
    ));
    let ids: Vec<&str> = charts.iter().map(|c| c.id.as_str()).collect();
    for expected in [
        "experiment-1-throughput",
        "experiment-1-retransmits",
        "experiment-1-rtt",
        // Representative runs, then the single runs: two TCP flows, one UDP flow.
        "cwnd",
        "limits",
        "queue",
        "udp-loss",
        "udp-jitter",
        "delay",
        "tseq",
        "topology",
        "links",
    ] {
        assert!(
            ids.iter().any(|id| id.ends_with(expected)),
            "no chart {expected} in {ids:?}"
        );
    }

    let shot = screenshot(browser, &page, height, dir.path());
    for (id, drawn, coloured) in pixels_per_chart(&shot, &charts) {
        // A frame with labels alone has no series colour; a line of a series has
        // hundreds of pixels of it (the fewest seen: 286, the UDP run's nearly flat
        // throughput line, which held 457–533 in other runs).
        assert!(
            coloured >= 200 && drawn >= 2000,
            "{id}: {drawn} pixels drawn, {coloured} in series colours: empty?"
        );
    }

    // The browser draws every retransmission of the time-sequence graph (a zero-length
    // line, which a single segment's bar would be, it does not draw at all): its colour
    // under each mark, scaled as the page scales the chart.
    let tseq = charts.iter().find(|c| c.id.ends_with("tseq")).unwrap();
    let figure = &html[html.find(&format!("id=\"{}\"", tseq.id)).unwrap()..];
    let svg = &figure[figure.find("<svg").unwrap()..figure.find("</svg>").unwrap()];
    let marks = retransmission_marks(svg);
    let svg_width: f64 = svg
        .split("width=\"")
        .nth(1)
        .and_then(|w| w.split('"').next()?.parse().ok())
        .unwrap();
    let scale = f64::from(tseq.rect[2]) / svg_width;
    let (width, _, pixels) = &shot;
    let c = tcplab_report::RETRANSMITTED;
    let unseen: Vec<_> = marks
        .iter()
        .filter(|&&(x, top, bottom)| {
            let col = f64::from(tseq.rect[0]) + f64::from(x) * scale;
            let rows = (
                f64::from(tseq.rect[1]) + f64::from(top) * scale,
                f64::from(tseq.rect[1]) + f64::from(bottom) * scale,
            );
            let near = |p: [u8; 3]| {
                let d = |a: u8, b: u8| (i32::from(a) - i32::from(b)).abs();
                d(p[0], c.0) + d(p[1], c.1) + d(p[2], c.2) <= 60
            };
            !(rows.0.floor() as u32..=rows.1.ceil() as u32).any(|row| {
                (col.floor() as u32 - 1..=col.ceil() as u32 + 1)
                    .any(|col| near(pixels[(row * width + col) as usize]))
            })
        })
        .collect();
    eprintln!(
        "tseq: {} retransmissions drawn, {} unseen in Chromium",
        marks.len(),
        unseen.len()
    );
    assert!(!marks.is_empty());
    assert!(
        unseen.is_empty(),
        "retransmissions Chromium did not draw: {unseen:?}"
    );
}

/// A screenshot of the whole page `height` pixels high: its width, height and pixels.
fn screenshot(browser: &str, page: &Path, height: u32, dir: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let shot = dir.join("page.png");
    chromium(
        browser,
        page,
        &[
            format!("--window-size={WINDOW_WIDTH},{height}"),
            format!("--screenshot={}", shot.display()),
        ],
    );
    let decoded = decode(&shot);
    assert_eq!((decoded.0, decoded.1), (WINDOW_WIDTH, height));
    decoded
}

/// Per chart of a screenshot: its id, the pixels drawn in its box (not white) and those
/// in series colours.
fn pixels_per_chart(
    (width, shot_height, pixels): &(u32, u32, Vec<[u8; 3]>),
    charts: &[ChartBox],
) -> Vec<(String, usize, usize)> {
    let (width, shot_height) = (*width, *shot_height);
    let mut out = Vec::new();
    for chart in charts {
        let [x, y, w, h] = chart.rect;
        assert!(w > 300 && h > 150, "{}: a box of {w}×{h}", chart.id);
        let (mut drawn, mut coloured) = (0, 0);
        for row in y..(y + h).min(shot_height) {
            for col in x..(x + w).min(width) {
                let p = pixels[(row * width + col) as usize];
                drawn += usize::from(p != [255, 255, 255]);
                coloured += usize::from(series_colour(p));
            }
        }
        eprintln!("{}: {drawn} drawn, {coloured} in series colours", chart.id);
        out.push((chart.id.clone(), drawn, coloured));
    }
    out
}

/// The quick arena (examples/quick/arena.toml, run from elsewhere: its trace files are
/// taken from its directory). On the Verizon LTE uplink behind a deep drop-tail queue, BBR's
/// 95th-percentile one-way delay (its own packets, `--metric delay`) is below cubic's,
/// the known result (measured: 221–245 against 398–405 ms, 6.6 Mbit/s each), and so on
/// the 100 Mbit/s link (17.8–26.4 against 29.3–29.4 ms); no run beats its bound. Load can delay
/// the emulator: one of three tries. Its report has one chart of throughput against
/// delay per link, both schemes on it, drawn in headless Chromium.
#[test]
fn the_quick_arena_puts_bbr_below_cubic_in_delay_and_draws_each_link() {
    let test = "arena";
    if !privileged_or_skip(test) {
        return;
    }
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("arena.db");
    let mut tries = 0;
    one_of_three_tries(test, || {
        tries += 1;
        let db = dir.path().join(format!("arena{tries}.db"));
        run_ok(
            tcplab()
                .current_dir(dir.path())
                .arg("sweep")
                .arg(quick_example("arena.toml"))
                .arg("--db")
                .arg(&db),
        );
        assert_no_run_exceeds_its_bound(&db);
        assert_charts_hold(&db);
        // Each run has a link bound: a trace's is what it offered over the run.
        for run in export_jsonl(&db, "runs") {
            let id = run["id"].to_string();
            let e = parse_success(
                &tcplab()
                    .args(["explain", &id, "--json", "--db"])
                    .arg(&db)
                    .output()
                    .unwrap(),
            );
            let traced = e["path"]["spec"].as_str().unwrap().contains(".trace");
            assert_eq!(e["path"]["capacity"]["bps"].is_f64(), traced, "{e}");
            assert!(e["bounds"]["link_bps"].is_f64(), "{e}");
        }
        let delay: serde_json::Value = serde_json::from_str(&run_ok(
            tcplab()
                .arg("results")
                .arg(&db)
                .args(["--json", "--metric", "delay"]),
        ))
        .unwrap();
        let at = |verizon: bool, cc: &str| {
            delay["points"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| {
                    p["values"]["cc"] == cc
                        && p["values"]["link"].as_str().unwrap().contains("Verizon") == verizon
                })
                .and_then(|p| p["mean"].as_f64())
                .unwrap_or_else(|| panic!("no delay for {cc}: {delay}"))
        };
        let seen = format!(
            "p95 delay: LTE cubic {:.0} bbr {:.0} µs; 100 Mbit/s cubic {:.0} bbr {:.0} µs",
            at(true, "cubic"),
            at(true, "bbr"),
            at(false, "cubic"),
            at(false, "bbr")
        );
        println!("{seen}");
        // What load cannot explain: a delay below the path's own one way (less the
        // lab's latency), or a drop-tail queue of 500 packets holding more than a
        // second at the trace's rate.
        for cc in ["cubic", "bbr"] {
            assert!((19_000.0..1_500_000.0).contains(&at(true, cc)), "{seen}");
            assert!((9_000.0..40_000.0).contains(&at(false, cc)), "{seen}");
        }
        if at(true, "bbr") >= at(true, "cubic") || at(false, "bbr") >= at(false, "cubic") {
            return Err(seen);
        }
        std::fs::rename(&db, dir.path().join("arena.db")).unwrap();
        Ok(())
    });

    let store = tcplab_store::Store::open(&db).unwrap();
    let charts = tcplab_report::charts(
        &store,
        tcplab_report::Target::Experiment(1),
        Default::default(),
    )
    .unwrap();
    let arena: Vec<_> = charts
        .iter()
        .filter(|c| c.id.starts_with("arena"))
        .collect();
    assert_eq!(
        arena.len(),
        2,
        "one chart per link: {:?}",
        charts.iter().map(|c| &c.id).collect::<Vec<_>>()
    );
    for chart in &arena {
        assert_eq!(chart.series_names(), ["cc=cubic", "cc=bbr"], "{}", chart.id);
    }
    // Without -o, the report goes beside the database: NAME-report for NAME.db.
    let said = run_ok(tcplab().arg("report").arg(&db));
    let out = db.with_file_name(format!(
        "{}-report",
        db.file_stem().unwrap().to_string_lossy()
    ));
    assert!(
        said.starts_with(&format!("wrote {}", out.join("index.html").display())),
        "{said}"
    );
    let page = out.join("index.html");
    // A leaderboard per link: each scheme's throughput, delay, drops and fairness.
    let html = std::fs::read_to_string(&page).unwrap();
    let boards: Vec<&str> = html.split("<summary>Leaderboard — ").skip(1).collect();
    assert_eq!(boards.len(), 2, "one leaderboard per link");
    for board in boards {
        let board = &board[..board.find("</table>").unwrap()];
        assert!(
            board.contains("<th>p95 one-way delay</th>")
                && board.contains("<td>cc=cubic</td>")
                && board.contains("<td>cc=bbr</td>"),
            "{board}"
        );
    }
    let (boxes, height) = boxes(&chromium(
        browser,
        &page,
        &[
            format!("--window-size={WINDOW_WIDTH},1000"),
            "--dump-dom".into(),
        ],
    ));
    let shot = screenshot(browser, &page, height, dir.path());
    let drawn: Vec<_> = pixels_per_chart(&shot, &boxes)
        .into_iter()
        .filter(|(id, _, _)| id.contains("-arena-"))
        .collect();
    assert_eq!(drawn.len(), 2, "{drawn:?}");
    for (id, drawn, coloured) in drawn {
        // Two dots of 8 px and their names in the series' colours; the legend alone
        // has some 120 such pixels.
        assert!(
            coloured >= 250 && drawn >= 2000,
            "{id}: {drawn} pixels drawn, {coloured} in series colours: empty?"
        );
    }
}

/// A watched run as `tcplab shell --record` stores it: curl fetching one large file
/// (one long connection, some 2 s at 20 Mbit/s) and then five small ones (short: a few
/// round trips of 10 ms each) from python's http.server behind a path. Its report draws
/// the long connection's charts, named by its program and ends, in Chromium, and its
/// table's rows hold the stored connections: the long one alone, the five short ones
/// in one row, the totals those of the database's flows.
#[test]
fn a_watched_run_draws_its_long_connection_and_tables_every_connection() {
    let test = "watched_report";
    if !privileged_or_skip(test) {
        return;
    }
    let Some(browser) = chromium_or_skip(test) else {
        return;
    };
    // Alone: under load the watch saw a short connection's two ends once each, apart,
    // and stored them as two flows (7 for 6 in one CI run beside the fuzzing).
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("large"), vec![b'x'; 5_000_000]).unwrap();
    std::fs::write(dir.path().join("small"), vec![b'x'; 20_000]).unwrap();
    let db = dir.path().join("shell.db");
    let server = format!(
        "exec python3 -m http.server 8000 --bind $TCPLAB_SERVER --directory {}",
        dir.path().display()
    );
    let client = "curl -sf -o /dev/null http://$TCPLAB_SERVER:8000/large && for i in 1 2 3 4 5; do curl -sf -o /dev/null http://$TCPLAB_SERVER:8000/small || exit 1; done";
    run_ok(
        tcplab()
            .args(["shell", "--path", "rtt 10ms rate 20mbit", "--record"])
            .arg(&db)
            .args(["--server-cmd", &server, "--", "sh", "-c", client]),
    );
    let flows = export_jsonl(&db, "flows");
    assert_eq!(flows.len(), 6, "{flows:?}");
    let long = flows
        .iter()
        .find(|f| f["received_bytes"].as_u64().unwrap() >= 5_000_000)
        .expect("the large file's connection");
    let long_id = long["flow"].as_u64().unwrap();

    let out = dir.path().join("report");
    run_ok(tcplab().arg("report").arg(&db).arg("-o").arg(&out));
    let page = out.join("index.html");
    let html = std::fs::read_to_string(&page).unwrap();
    let table = &html[html.find("<summary>Connections: ").expect("a table")..];
    let table = &table[..table.find("</table>").unwrap()];
    let rows: Vec<Vec<&str>> = table
        .split("<tr>")
        .skip(1)
        .map(|r| {
            r.split("<td>")
                .skip(1)
                .map(|c| c.split("</td>").next().unwrap())
                .collect()
        })
        .collect();
    // The header (th), the long connection, the short ones' row and the total.
    let cells: Vec<&Vec<&str>> = rows.iter().filter(|r| !r.is_empty()).collect();
    let first: Vec<&str> = cells.iter().map(|r| r[0]).collect();
    assert_eq!(
        first,
        [long_id.to_string().as_str(), "short", "all"],
        "{table}"
    );
    assert_eq!(cells[1][1], "5 connections, each under 500 ms", "{table}");
    let number = |cell: &str| -> u64 { cell.replace(' ', "").parse().unwrap() };
    let sum = |key: &str| flows.iter().map(|f| f[key].as_u64().unwrap()).sum::<u64>();
    // Columns 5, 6, 7: acked, received, retransmits.
    for (column, key) in [(5, "sent_bytes"), (6, "received_bytes"), (7, "retransmits")] {
        assert_eq!(number(cells[2][column]), sum(key), "{key}: {table}");
        assert_eq!(
            number(cells[0][column]),
            long[key].as_u64().unwrap(),
            "{key}: {table}"
        );
        assert_eq!(
            number(cells[0][column]) + number(cells[1][column]),
            sum(key),
            "{key}: {table}"
        );
    }
    // The charts name the long connection only: by its number, program and ends.
    let name = format!(
        "#{long_id} python3 {} → {}",
        long["client_addr"].as_str().unwrap(),
        long["server_addr"].as_str().unwrap()
    );
    let store = tcplab_store::Store::open(&db).unwrap();
    let drawn =
        tcplab_report::charts(&store, tcplab_report::Target::Run(1), Default::default()).unwrap();
    let throughput = drawn.iter().find(|c| c.id == "throughput").unwrap();
    assert_eq!(throughput.series_names()[0], name);
    for chart in &drawn {
        let flows: Vec<&str> = chart
            .series_names()
            .into_iter()
            .filter(|s| s.starts_with('#'))
            .collect();
        assert!(
            flows.iter().all(|s| s.starts_with(&name)),
            "{}: {flows:?}",
            chart.id
        );
    }

    let (charts, height) = boxes(&chromium(
        browser,
        &page,
        &[
            format!("--window-size={WINDOW_WIDTH},1000"),
            "--dump-dom".into(),
        ],
    ));
    let ids: Vec<&str> = charts.iter().map(|c| c.id.as_str()).collect();
    for expected in ["throughput", "cwnd", "rtt", "inflight", "limits"] {
        assert!(
            ids.contains(&format!("run-1-{expected}").as_str()),
            "no chart {expected} in {ids:?}"
        );
    }
    let shot = screenshot(browser, &page, height, dir.path());
    for (id, drawn, coloured) in pixels_per_chart(&shot, &charts) {
        assert!(
            coloured >= 200 && drawn >= 2000,
            "{id}: {drawn} pixels drawn, {coloured} in series colours: empty?"
        );
    }
}
