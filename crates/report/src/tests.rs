//! The report end to end on a database built here: an experiment of made-up runs and a
//! single run, without privileges.

use std::path::Path;

use tcplab_model::experiment;
use tcplab_record::{Host, RunRecord};
use tcplab_store::{Outcome, Store};

use crate::chart::Body;
use crate::fixtures::{run, watched_run};
use crate::{find_chart, png, svg, write_report, ReportError, SequenceView, Target};

const EXPERIMENT: &str = r#"
name = "made-up"
repetitions = 2
duration = "2s"
warmup = "0.5s"
path = "rtt 20ms rate 100mbit queue 1bdp"

[[flow]]
cc = "cubic"

[[axis]]
name = "buffer"
key = "flow.window"
values = ["8K", "64K", "1M"]

[[axis]]
name = "nodelay"
key = "flow.nodelay"
values = [false, true]
"#;

/// An experiment with every planned run done, and one single run of two flows plus UDP.
fn database(dir: &Path) -> Store {
    let mut store = Store::open(dir.join("made-up.db")).unwrap();
    let exp = experiment::parse(EXPERIMENT, "made-up").unwrap();
    let schedule = exp.schedule(7);
    let id = store
        .create_experiment(&exp, "made-up.toml", EXPERIMENT, 7, &schedule)
        .unwrap();
    for (seq, planned) in schedule.iter().enumerate() {
        let point = &exp.points[planned.point as usize];
        // Throughput grows with the buffer; repetitions differ a little.
        let mbit = 10.0 * f64::from(planned.point + 1) + f64::from(planned.repetition);
        let mut record = run(mbit, 1, false);
        record.params = point.config.flows[0].params.clone();
        record.summary.retransmits = u64::from(planned.point);
        store
            .finish_planned_run(id, seq as u32, Outcome::Done(&record))
            .unwrap();
    }
    store.insert_run(&run(20.0, 2, true)).unwrap();
    store
}

#[test]
fn the_report_holds_every_chart_with_its_series() {
    let dir = tempfile::tempdir().unwrap();
    let store = database(dir.path());
    let written = write_report(&store, &[], &dir.path().join("out")).unwrap();
    assert_eq!((written.experiments, written.runs), (1, 3));
    let html = std::fs::read_to_string(&written.path).unwrap();
    // Self-contained: no reference to anything outside the page.
    for outside in ["src=", "href=\"http", "<link", "url("] {
        assert!(
            !html.contains(outside),
            "the page refers outside: {outside}"
        );
    }
    assert_eq!(html.matches("<svg").count(), written.charts);
    assert_eq!(
        html.matches("<figure class=\"chart\"").count(),
        written.charts
    );
    for title in [
        "Throughput vs buffer",
        "Retransmitted segments vs buffer",
        "Smoothed RTT vs buffer",
        "Run 13: throughput over time",
        "Run 13: congestion window",
        "Run 13: bytes in flight",
        "Run 13: what limited the senders",
        "Run 13: UDP loss",
        "Run 13: UDP jitter",
        "Run 13: bottleneck queue",
        "Contents",
    ] {
        assert!(html.contains(title), "no {title}");
    }
    // One line per Nagle setting, a legend entry each; the sum over the flows of run 13.
    for series in [
        "nodelay=false",
        "nodelay=true",
        "all flows",
        "flow 1 ssthresh",
    ] {
        assert!(html.contains(series), "no series {series}");
    }
    // Sizes on the x axis in their unit; the axis' key explained.
    for label in ["8 KiB", "64 KiB", "1 MiB", "buffer (sets flow.window)"] {
        assert!(html.contains(label), "no label {label}");
    }
    // A single run's charts come once; an experiment's representative runs are runs 1–12.
    assert_eq!(html.matches("<h3>Run 13</h3>").count(), 1);
}

#[test]
fn plot_finds_charts_by_name_and_names_the_ones_there_are() {
    let dir = tempfile::tempdir().unwrap();
    let store = database(dir.path());
    let chart = find_chart(
        &store,
        Some(Target::Experiment(1)),
        "throughput",
        SequenceView::default(),
    )
    .unwrap();
    let Body::Lines { x, series, .. } = &chart.body else {
        panic!("throughput against a numeric axis is lines: {chart:?}");
    };
    assert!(x.log, "8K … 1M spans factors");
    // Each Nagle setting, its bound (dashed, in its colour), and the legend entry
    // that names the dashes.
    let names: Vec<(&str, bool)> = series.iter().map(|s| (s.name.as_str(), s.dashed)).collect();
    assert_eq!(
        names,
        [
            ("nodelay=false", false),
            ("", true),
            ("nodelay=true", false),
            ("", true),
            ("bound (dashed)", true)
        ]
    );
    assert_eq!(series[1].color, series[0].color);
    assert_eq!(
        series[1].points[0].note,
        Some("link"),
        "named at its first point"
    );
    assert!(
        series[1].points[1..].iter().all(|p| p.note.is_none()),
        "and where it changes only"
    );
    // Two repetitions a point: a mean with an interval.
    let first = series[0].points[0];
    assert!(first
        .interval
        .is_some_and(|(lo, hi)| lo < first.y && first.y < hi));

    let text = svg(&chart, true).unwrap();
    assert!(text.starts_with("<svg"));
    for needle in [
        "Throughput vs buffer",
        "nodelay=true",
        "throughput (Mbit/s)",
        "Path",
    ] {
        assert!(text.contains(needle), "svg has no {needle}");
    }
    let image = png(&chart).unwrap();
    assert_eq!(&image[..8], b"\x89PNG\r\n\x1a\n");

    let cwnd = find_chart(
        &store,
        Some(Target::Run(13)),
        "cwnd",
        SequenceView::default(),
    )
    .unwrap();
    let Body::Lines { series, .. } = &cwnd.body else {
        panic!("cwnd is lines");
    };
    let ssthresh = series.iter().find(|s| s.name == "flow 0 ssthresh").unwrap();
    assert_eq!(ssthresh.points.len(), 100, "no infinite ssthresh plotted");
    assert!(ssthresh.dashed);

    // The latest experiment by default.
    assert_eq!(
        find_chart(&store, None, "rtt", SequenceView::default())
            .unwrap()
            .title,
        "Smoothed RTT vs buffer"
    );
    let err = find_chart(
        &store,
        Some(Target::Run(13)),
        "speed",
        SequenceView::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ReportError::NoChart { .. }));
    let message = err.to_string();
    assert!(
        message.contains("run 13") && message.contains("has no chart 'speed'"),
        "{message}"
    );
    assert!(
        message.contains("throughput, cwnd, rtt, inflight, limits, udp_loss, udp_jitter, queue")
    );
    let err = find_chart(
        &store,
        Some(Target::Run(99)),
        "cwnd",
        SequenceView::default(),
    )
    .unwrap_err();
    assert!(err.to_string().ends_with("has no run 99"), "{err}");
    let err = find_chart(
        &store,
        Some(Target::Experiment(5)),
        "rtt",
        SequenceView::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().ends_with("has no experiment 5 (it has: 1)"),
        "{err}"
    );
}

#[test]
fn a_tcp_run_has_no_udp_charts_and_empty_charts_are_left_out() {
    let mut record = run(50.0, 1, false);
    record.samples.clear();
    record.path = None;
    let charts = crate::runs::charts(
        1,
        &record,
        &Default::default(),
        &mut crate::palette::Palette::new(),
    );
    let ids: Vec<&str> = charts.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["throughput", "limits"]);
}

/// With kernel events the cwnd chart steps at every change the probes show, at the
/// probe before the one that shows it; without, it follows the samples.
#[test]
fn the_cwnd_chart_follows_the_events_where_there_are_any() {
    use tcplab_record::events::{EventRecord, KernelEvent};
    let mut record = run(50.0, 1, false);
    let probe = |t_us, snd_cwnd| EventRecord {
        flow: 0,
        host: Host::Client,
        t_us,
        event: KernelEvent::window_probe(snd_cwnd, 0x7fff_ffff, 0),
    };
    record.events = [(0, 10), (1000, 10), (2000, 12), (3000, 12), (4000, 6)]
        .map(|(t, c)| probe(t, c))
        .to_vec();
    let cwnd_points = |record: &RunRecord| {
        let charts = crate::runs::charts(
            1,
            record,
            &Default::default(),
            &mut crate::palette::Palette::new(),
        );
        let chart = charts.into_iter().find(|c| c.id == "cwnd").unwrap();
        let Body::Lines { series, .. } = chart.body else {
            panic!("cwnd is lines")
        };
        assert_eq!(series[1].name, "flow 0 ssthresh");
        (
            series[0]
                .points
                .iter()
                .map(|p| (p.x, p.y))
                .collect::<Vec<_>>(),
            chart.caption,
            series[1].points.len(),
        )
    };
    let (points, caption, ssthresh) = cwnd_points(&record);
    assert_eq!(
        points,
        [
            (0.0, 10.0),
            (0.001, 10.0),
            (0.001, 12.0),
            (0.003, 12.0),
            (0.003, 6.0),
            (0.004, 6.0)
        ]
    );
    assert!(caption.contains("tcp_probe"), "{caption}");
    assert_eq!(ssthresh, 0, "no threshold set");
    record.events.clear();
    let (points, caption, _) = cwnd_points(&record);
    assert!(
        points.len() > 100 && caption.contains("from tcp_info"),
        "{caption}"
    );
}

/// Every experiment file in `examples/` with made-up runs: its charts, each with at most
/// [`MAX_SERIES`] lines plus their bounds, a handful of charts, not hundreds.
#[test]
fn every_example_lays_out_into_few_readable_charts() {
    use crate::chart::Chart;
    use crate::layout::MAX_SERIES;
    use crate::results::ExperimentRuns;
    use tcplab_store::{ExperimentRow, PlanRow, PlanStatus};

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let exp = experiment::parse(&text, "example").unwrap();
        let schedule = exp.schedule(1);
        let mut runs = std::collections::HashMap::new();
        let plan = schedule
            .iter()
            .enumerate()
            .map(|(seq, planned)| {
                let id = seq as i64 + 1;
                runs.insert(id, run(f64::from(planned.point + 1), 1, false));
                PlanRow {
                    seq: seq as u32,
                    run: *planned,
                    status: PlanStatus::Done,
                    run_id: Some(id),
                    error: None,
                    attempts: 1,
                }
            })
            .collect();
        let data = ExperimentRuns {
            experiment: ExperimentRow {
                id: 1,
                name: exp.name.clone(),
                file: file.display().to_string(),
                spec_text: text.clone(),
                plan_hash: exp.plan_hash(),
                seed: 1,
                repetitions: exp.repetitions,
                confidence: exp.confidence,
                axes: exp.axes.clone(),
                created_unix_us: 0,
            },
            points: exp.points.clone(),
            plan,
            runs,
        };
        let bounds = crate::experiments::RunBounds::new();
        let (_, charts) =
            crate::experiments::charts(&data, &bounds, &mut crate::palette::Palette::new());
        let name = file.display();
        assert!(!charts.is_empty(), "{name}: no chart");
        assert!(charts.len() <= 40, "{name}: {} charts", charts.len());
        for chart in &charts {
            let lines = chart
                .series_names()
                .iter()
                .filter(|n| !n.is_empty())
                .count();
            assert!(
                lines <= MAX_SERIES,
                "{name}: {} has {lines} series",
                chart.id
            );
            // Every chart is drawable.
            svg(chart, false).unwrap();
        }
        let ids: Vec<&str> = charts.iter().map(|c: &Chart| c.id.as_str()).collect();
        eprintln!("{name}: {ids:?}");
    }
}

/// The throughput chart draws what `rates` computes: each flow's cells and the sum as
/// steps, nothing after the deadline (a drain interval added here), and the bound over
/// the run's span, named a bound.
#[test]
fn the_throughput_chart_draws_the_rates_and_the_bound() {
    let mut record = run(20.0, 2, true);
    let mut drain = record.intervals[0].clone();
    (drain.index, drain.start_us, drain.end_us, drain.drain) = (12, 12_000_000, 12_400_000, true);
    drain.received_bytes = 100_000_000;
    record.intervals.push(drain);
    let rates = crate::rates::rates(&record).unwrap();
    assert_eq!(rates.span(), (0, 12_000_000));
    let charts = crate::runs::charts(
        1,
        &record,
        &Default::default(),
        &mut crate::palette::Palette::new(),
    );
    let chart = charts.iter().find(|c| c.id == "throughput").unwrap();
    let Body::Lines { series, .. } = &chart.body else {
        panic!("lines");
    };
    let steps = |cells: &[crate::rates::Cell]| -> Vec<(f64, f64)> {
        cells
            .iter()
            .flat_map(|c| {
                [
                    (c.start_us as f64 / 1e6, c.bps()),
                    (c.end_us as f64 / 1e6, c.bps()),
                ]
            })
            .collect()
    };
    let drawn = |name: &str| -> Vec<(f64, f64)> {
        let s = series.iter().find(|s| s.name == name).unwrap();
        s.points.iter().map(|p| (p.x, p.y)).collect()
    };
    for f in &rates.flows {
        assert_eq!(drawn(&format!("flow {}", f.flow)), steps(&f.cells));
    }
    assert_eq!(drawn("all flows"), steps(&rates.total));
    // Three flows at 20 Mbit/s each: the sum is 60, in every bin, to the deadline.
    assert!(rates
        .total
        .iter()
        .all(|c| (c.bps() / 60e6 - 1.0).abs() < 1e-9));
    let bound = series.iter().find(|s| s.dashed).expect("a bound");
    assert!(bound.name.starts_with("bound: "), "{}", bound.name);
    assert_eq!((bound.points[0].x, bound.points[1].x), (0.0, 12.0));
    assert!(
        chart.caption.contains("per report interval of 1.00 s"),
        "{}",
        chart.caption
    );
}

/// `results`' table of an experiment with one point whose runs read `mbits` Mbit/s.
fn results_of(mbits: &[f64]) -> crate::results::ResultTable {
    crate::results::summarize(
        &experiment_of(mbits),
        tcplab_analysis::stats::Metric::Throughput,
        None,
    )
}

/// An experiment with one point whose runs read `mbits` Mbit/s, loaded.
fn experiment_of(mbits: &[f64]) -> crate::results::ExperimentRuns {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("spread.db")).unwrap();
    let text = format!(
        "name = \"spread\"\nrepetitions = {}\nduration = \"2s\"\npath = \"rtt 20ms\"\n[[flow]]\n",
        mbits.len()
    );
    let exp = experiment::parse(&text, "spread").unwrap();
    let schedule = exp.schedule(7);
    let id = store
        .create_experiment(&exp, "spread.toml", &text, 7, &schedule)
        .unwrap();
    for (seq, planned) in schedule.iter().enumerate() {
        let record = run(mbits[planned.repetition as usize], 1, false);
        store
            .finish_planned_run(id, seq as u32, Outcome::Done(&record))
            .unwrap();
    }
    crate::results::ExperimentRuns::load(&store, id)
        .unwrap()
        .unwrap()
}

/// `compare` on constructed experiments whose answer is known: a halved throughput is a
/// significant drop of 50 % that crosses `throughput:-5%`; the same runs again change
/// nothing; a shift inside the runs' spread is not significant.
#[test]
fn compare_flags_a_halved_throughput_and_not_the_same_runs() {
    use tcplab_analysis::compare::FailOn;
    use tcplab_analysis::stats::Metric;
    let base = experiment_of(&[50.0, 51.0, 49.0, 50.0]);
    let fail_on: FailOn = "throughput:-5%".parse().unwrap();
    let change = |new: &[f64]| {
        let c = crate::results::compare(&base, &experiment_of(new), &[Metric::Throughput], None);
        assert_eq!((c.only_base.len(), c.only_new.len()), (0, 0));
        assert_eq!(c.changes.len(), 1);
        c.changes[0].clone()
    };
    let halved = change(&[25.0, 26.0, 24.0, 25.0]);
    assert!(halved.significant && fail_on.crossed_by(&halved.change));
    assert!(
        (halved.change.relative.unwrap() + 0.5).abs() < 1e-9,
        "{halved:?}"
    );
    let again = change(&[50.0, 51.0, 49.0, 50.0]);
    assert!(!again.significant && !fail_on.crossed_by(&again.change));
    assert_eq!(again.change.p_value, Some(1.0));
    let noisy = change(&[40.0, 60.0, 45.0, 52.0]);
    assert!(!noisy.significant, "{noisy:?}");
    let text = crate::results::compare(
        &base,
        &experiment_of(&[25.0, 26.0, 24.0, 25.0]),
        &[Metric::Throughput],
        None,
    )
    .text();
    assert!(
        text.contains("-50.0 %") && text.contains("significant"),
        "{text}"
    );
}

#[test]
fn one_run_has_no_spread_and_no_interval_reaches_below_zero() {
    let table = results_of(&[10.0]);
    let header = &table.cells()[0];
    let row = &table.cells()[1];
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(row[column("n")], "1");
    assert_eq!(row[column("stddev")], "-");
    assert_eq!(row[column("CI")], "-");
    let json = serde_json::to_value(&table.points[0]).unwrap();
    assert!(json["stddev"].is_null() && json["ci"].is_null(), "{json}");
    // 1 and 100 Mbit/s: the Student-t interval, ± 629 Mbit/s, is clamped at 0.
    let table = results_of(&[1.0, 100.0]);
    let (lo, hi) = table.points[0].stats.unwrap().ci.unwrap();
    assert_eq!(lo, 0.0);
    assert!(hi > 600e6, "{hi}");
    let row = &table.cells()[1];
    assert!(row[column("CI")].starts_with("0 bit/s – "), "{row:?}");
}

/// Single runs by label: their whole runs' throughput, a side each.
#[test]
fn compare_runs_sets_two_labels_runs_against_each_other() {
    use crate::results::{compare_runs, Side};
    use tcplab_analysis::stats::Metric;
    let side = |name: &str, runs: usize| Side {
        name: name.into(),
        source: "runs.db".into(),
        runs,
    };
    let base: Vec<RunRecord> = [20.0, 21.0, 19.0]
        .iter()
        .map(|&m| run(m, 1, false))
        .collect();
    let new: Vec<RunRecord> = [10.0, 10.5, 9.5]
        .iter()
        .map(|&m| run(m, 1, false))
        .collect();
    let c = compare_runs(
        (side("before", 3), &base),
        (side("after", 3), &new),
        &[Metric::Throughput],
        0.95,
    );
    assert_eq!(c.changes.len(), 1);
    let x = &c.changes[0];
    assert_eq!(x.label, "before → after");
    assert!(
        x.significant && (x.change.relative.unwrap() + 0.5).abs() < 1e-6,
        "{x:?}"
    );
    assert!(
        c.heading().contains("base before (runs.db, 3 done)"),
        "{}",
        c.heading()
    );
}

#[test]
fn watched_runs_of_no_short_and_mixed_connections_each_render() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path().join("watched.db")).unwrap();
    let none = store.insert_run(&watched_run(0, 0)).unwrap();
    let short = store.insert_run(&watched_run(0, 30)).unwrap();
    let mixed = store.insert_run(&watched_run(2, 1000)).unwrap();
    let written = write_report(&store, &[], &dir.path().join("out")).unwrap();
    assert_eq!(written.runs, 3);
    let html = std::fs::read_to_string(&written.path).unwrap();
    let section = |id: i64| {
        let start = html.find(&format!("<section id=\"run-{id}\">")).unwrap();
        let len = html[start..].find("</section>").unwrap();
        &html[start..start + len]
    };
    // No connection: said, no table, no chart.
    let s = section(none);
    assert!(s.contains("No connection was recorded."), "{s}");
    assert!(!s.contains("<table>") && !s.contains("<svg"), "{s}");
    // Only short ones: their row and the total, no chart.
    let s = section(short);
    assert!(s.contains("Connections: 0 drawn below, 30 short ones in one row"));
    assert!(s.contains("<td>short</td><td>30 connections, each under 500 ms</td>"));
    assert!(!s.contains("<svg"), "a chart of short connections");
    // Mixed: the 2 long ones drawn, named by number, program and ends; the 1 000
    // short ones in one row and in no chart.
    let s = section(mixed);
    assert!(s.contains(&format!("<h3>Run {mixed}: tcplab watch --port 80</h3>")));
    assert_eq!(s.matches("<tr>").count(), 1 + 2 + 1 + 1);
    assert!(s.contains("<td>short</td><td>1000 connections, each under 500 ms</td>"));
    for chart in ["throughput", "cwnd", "rtt", "inflight", "limits"] {
        assert!(s.contains(&format!("data-chart=\"{chart}\"")), "no {chart}");
    }
    assert!(s.contains("no emulated path"), "{s}");
    assert!(
        !s.contains("128 KiB writes"),
        "a test's parameters in a watch's caption"
    );
    let chart = find_chart(
        &store,
        Some(Target::Run(mixed)),
        "throughput",
        SequenceView::default(),
    )
    .unwrap();
    assert_eq!(
        chart.series_names(),
        [
            "#0 nginx 10.0.0.1:40000 → 10.0.0.2:80",
            "#1 nginx 10.0.0.1:40001 → 10.0.0.2:80",
            "all flows",
            "bound: window",
        ]
    );
}

/// A run's capture that is gone or not tcplab's is an error naming the file and why, not
/// a run without a capture: the page and `plot tseq` say it, the other charts stay.
#[test]
fn an_unreadable_capture_is_said_not_swallowed() {
    use crate::{run_capture, CaptureError};
    let dir = tempfile::tempdir().unwrap();
    let mut record = run(20.0, 1, false);
    assert!(record.path.is_some(), "the made-up run has a path");
    assert!(matches!(run_capture(&record), Ok(None)));
    let gone = dir.path().join("gone.pcapng");
    record.path.as_mut().unwrap().capture_file = Some(gone.display().to_string());
    let error = run_capture(&record).unwrap_err();
    assert!(matches!(&error, CaptureError::Open { path, .. } if *path == gone));
    let said = error.to_string();
    assert!(
        said.starts_with(&format!(
            "cannot open the run's capture {}: ",
            gone.display()
        )),
        "{said}"
    );
    let garbage = dir.path().join("garbage.pcapng");
    std::fs::write(&garbage, b"not a capture").unwrap();
    record.path.as_mut().unwrap().capture_file = Some(garbage.display().to_string());
    let error = run_capture(&record).unwrap_err();
    assert!(matches!(&error, CaptureError::Read { path, .. } if *path == garbage));
    assert!(
        error.to_string().starts_with(&format!(
            "cannot read the run's capture {}: not a pcapng file",
            garbage.display()
        )),
        "{error}"
    );

    // In a report: the page says it, and so does what it returns for stderr.
    record.path.as_mut().unwrap().capture_file = Some(gone.display().to_string());
    let mut store = Store::open(dir.path().join("gone.db")).unwrap();
    let id = store.insert_run(&record).unwrap();
    let written = write_report(&store, &[], &dir.path().join("out")).unwrap();
    assert_eq!(written.unread_captures.len(), 1);
    let html = std::fs::read_to_string(&written.path).unwrap();
    assert!(
        html.contains(&format!(
            "No time-sequence graph: cannot open the run&#39;s capture {}: ",
            gone.display()
        )),
        "the page does not say the capture is missing"
    );
    // `plot`: the time-sequence graph is the capture's error; the others are drawn.
    let target = Some(Target::Run(id));
    let tseq = find_chart(&store, target, "tseq", SequenceView::default());
    assert!(
        matches!(tseq, Err(ReportError::Capture(CaptureError::Open { .. }))),
        "{tseq:?}"
    );
    assert!(find_chart(&store, target, "throughput", SequenceView::default()).is_ok());
    assert!(matches!(
        crate::charts(&store, Target::Run(id), SequenceView::default()),
        Err(ReportError::Capture(_))
    ));
}
