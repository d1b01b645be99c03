//! Experiments (issue 4) with real runs: the quick scenarios end to end with their
//! expected shapes, a sweep killed with SIGKILL and resumed, failed runs kept and
//! retried, a changed file refused.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// `tcplab results DB --json [--metric M]`.
fn results(db: &Path, metric: &str) -> Value {
    let out = tcplab()
        .arg("results")
        .arg(db)
        .args(["--json", "--metric", metric])
        .output()
        .unwrap();
    parse_success(&out)
}

/// The mean of the point whose axis values include every `(axis, value)`.
fn mean(results: &Value, values: &[(&str, &str)]) -> f64 {
    point(results, values)["mean"]
        .as_f64()
        .unwrap_or_else(|| panic!("no mean at {values:?}"))
}

fn point<'a>(results: &'a Value, values: &[(&str, &str)]) -> &'a Value {
    results["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| values.iter().all(|(k, v)| p["values"][*k] == *v))
        .unwrap_or_else(|| panic!("no point {values:?}"))
}

/// Sweeps the quick study `name` into a database in `dir`: every run done and none
/// beyond its bound, asserted; its charts against their references ([`chart_errors`],
/// a stall of [`STALL_US`] allowed) once in three tries, each sweeping again: a
/// receiver starved of the CPU for longer reads that much less by the deadline than
/// its sender saw acknowledged (a 1 Gbit/s run beside the fuzzers and benches read
/// 32 and 38 MB less, twice in one day's clean-clone CI).
fn run_quick(name: &str, dir: &Path) -> PathBuf {
    let mut tries = 0;
    one_of_three_tries(&format!("{name}: its charts hold"), || {
        tries += 1;
        let db = dir.join(format!("{name}-{tries}.db"));
        assert_success(&sweep(&quick_example(&format!("{name}.toml")), &db, &[]));
        let r = results(&db, "throughput");
        let e = &r["experiment"];
        assert_eq!(e["done"], e["runs"], "{name}: every run done: {e}");
        assert_no_run_exceeds_its_bound(&db);
        let errors = chart_errors(&db, STALL_US);
        if errors.is_empty() {
            Ok(db)
        } else {
            Err(errors.join("\n"))
        }
    })
}

/// Each point's mean of `metric`, by the value of `axis`.
fn means_by(db: &Path, metric: &str, axis: &str) -> Vec<(String, f64)> {
    results(db, metric)["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let value = &p["values"][axis];
            let name = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            (name, f64_at(p, "/mean"))
        })
        .collect()
}

/// The quick RRUL and VoIP scenarios: RRUL's eight flows bloat the 300-packet queue
/// (loaded latency far above the idle 20 ms, RPM down with it), and the call beside an
/// upload waits in the queue the upload keeps full.
#[test]
fn quick_rrul_and_voip_show_latency_under_load() {
    if !privileged_or_skip("quick_rrul") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let rrul = run_quick("rrul", dir.path());
    let latency_ms = f64_at(&results(&rrul, "latency"), "/points/0/mean") / 1e3;
    let rpm = f64_at(&results(&rrul, "rpm"), "/points/0/mean");
    println!("rrul: loaded p50 {latency_ms:.1} ms, RPM {rpm:.0}");
    assert!(latency_ms > 60.0, "rrul loaded p50 {latency_ms:.1} ms");
    // 60 s over a trimmed mean of round trips at least the base 20 ms.
    assert!(rpm < 60e3 / 20.0, "rrul RPM {rpm:.0}");
    let voip = run_quick("voip", dir.path());
    let latency_ms = f64_at(&results(&voip, "latency"), "/points/0/mean") / 1e3;
    let jitter = f64_at(&results(&voip, "jitter"), "/points/0/mean");
    println!("voip: call jitter {jitter:.0} µs; loaded p50 {latency_ms:.1} ms");
    assert!(latency_ms > 40.0, "voip loaded p50 {latency_ms:.1} ms");
}

/// The dumbbell at scale (examples/quick/dumbbell.toml): 16 clients of 4 flows each,
/// behind access links of 1 to 16 ms, into one 100 Mbit/s bottleneck. Every flow is
/// stored with its client, the flows add up to the run, no run exceeds its bound, the
/// charts hold, and the report and explain summarise 64 flows instead of listing them.
#[test]
fn a_dumbbell_of_16_clients_and_64_flows_runs_and_is_reported() {
    if !privileged_or_skip("dumbbell_16x64") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = run_quick("dumbbell", dir);
    let flows = export_jsonl(&db, "flows");
    assert_eq!(flows.len(), 64);
    for client in 1..=16 {
        let host = format!("client{client}");
        let of_host: Vec<&Value> = flows.iter().filter(|f| f["host"] == host).collect();
        assert_eq!(of_host.len(), 4, "{host}'s flows");
        for f in of_host {
            assert!(u64_at(f, "/received_bytes") > 0, "{host}: {f}");
        }
    }
    let run = &export_jsonl(&db, "runs")[0];
    let received: u64 = flows.iter().map(|f| u64_at(f, "/received_bytes")).sum();
    assert_eq!(received, u64_at(run, "/received_bytes"));
    let goodput = 100e6 * 1448.0 / 1500.0;
    let summary = f64_at(run, "/received_bps");
    assert!(
        (0.5 * goodput..=1.01 * goodput).contains(&summary),
        "{summary} bit/s against a goodput of {goodput}"
    );
    let fairness = f64_at(&results(&db, "fairness"), "/points/0/mean");
    assert!(fairness > 0.0 && fairness <= 1.0, "Jain's index {fairness}");
    let explain = tcplab()
        .args(["explain", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert_success(&explain);
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(text.contains("received by 64 TCP flows"), "{text}");
    // At 100 Mbit/s the emulator keeps up with 64 flows (at 1 Gbit/s on two CPUs it
    // fell 24 ms behind, and explain says so: `an_emulator_that_fell_behind_is_named`).
    assert!(!text.contains("emulator fell behind"), "{text}");
    if let Some(line) = text.lines().find(|l| l.contains("shared unevenly")) {
        assert!(line.contains("median"), "64 rates summarised: {line}");
    }
    let html = report_html(&db, dir);
    assert!(
        html.contains("flows as run: 64 × cubic mss"),
        "one phrase for 64 flows"
    );
    // "… 51 more", wrapped where the legend is narrow.
    let left_out = html
        .split("… ")
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u32>()
                .ok()
        })
        .count();
    assert!(left_out >= 3, "legends say how many flows they leave out");
}

/// The quick Nagle study: beside a bulk upload, transactions whose requests go in two
/// writes with Nagle on wait a delayed ACK (≥ 35 ms) more than any other pattern; one
/// write, or -N, removes the stall. Load only adds queueing to every pattern alike.
#[test]
fn the_quick_nagle_study_shows_the_stall_and_its_cures() {
    if !privileged_or_skip("nagle") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let db = run_quick("nagle", dir.path());
    let times = results(&db, "transaction_time");
    let time_ms = |nodelay: bool, writes: u64| {
        let label = format!("nodelay={nodelay} writes={writes}");
        times["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["label"] == label.as_str())
            .map(|p| f64_at(p, "/mean") / 1e3)
            .unwrap_or_else(|| panic!("no point nodelay {nodelay} writes {writes}: {times}"))
    };
    let stalled = time_ms(false, 2);
    println!(
        "median transaction beside the upload: Nagle, 2 writes {stalled:.1} ms; 1 write {:.2} ms; -N {:.2} / {:.2} ms",
        time_ms(false, 1),
        time_ms(true, 1),
        time_ms(true, 2)
    );
    for (nodelay, writes) in [(false, 1), (true, 1), (true, 2)] {
        let quick = time_ms(nodelay, writes);
        assert!(
            stalled >= quick + 35.0,
            "Nagle with 2 writes {stalled:.1} ms against {quick:.1} ms (nodelay {nodelay}, {writes} writes)"
        );
    }
}
/// The quick interface-queue study (seed 003's send stalls and bursty sender): at 1
/// Gbit/s the client's 1-packet TUN ring drops what the sender puts in it faster than
/// the emulator reads, where the kernel's 500 packets drop nothing; the device never
/// pushes back, so no qdisc drops (no send stall) at either, asserted every time. The
/// long queue lets longer trains reach the bottleneck, and the sender through the short
/// one gets less through: a loaded machine could blur each, so one try in three.
#[test]
fn the_quick_txqueue_study_shows_host_drops_not_send_stalls() {
    if !privileged_or_skip("txqueue") {
        return;
    }
    let _machine = alone();
    one_of_three_tries("the quick txqueue study's shape", || {
        let dir = tempfile::tempdir().unwrap();
        let db = run_quick("txqueue", dir.path());
        for run in export_jsonl(&db, "runs") {
            let path: Value = json_column(&run, "path_json");
            for queue in path["up"]["host_queues"].as_array().unwrap() {
                assert_eq!(u64_at(queue, "/qdisc_drops"), 0, "{queue}");
                assert_eq!(u64_at(queue, "/requeues"), 0, "{queue}");
            }
        }
        let at = |metric: &str| {
            let by = means_by(&db, metric, "txqueuelen");
            let of = |q: &str| by.iter().find(|(v, _)| v == q).unwrap().1;
            (of("1"), of("500"))
        };
        let (drops, bursts, rates) = (at("host_drops"), at("burst"), at("throughput"));
        println!(
            "txqueuelen 1 / 500: host drops {drops:?}, trains p99 {bursts:?}, throughput {rates:?}"
        );
        if drops.0 > 0.0 && drops.1 == 0.0 && bursts.1 > bursts.0 && rates.1 > rates.0 {
            Ok(())
        } else {
            Err(format!(
                "host drops {drops:?}, trains {bursts:?}, throughput {rates:?} at txqueuelen 1 / 500"
            ))
        }
    });
}

/// The quick bufferbloat study: RRUL through a 4-BDP queue (80 ms each way when full) at
/// 20 Mbit/s. Drop-tail lets the probes wait behind both queues; fq_codel keeps them
/// near the base 20 ms (a sparse flow, served first) at the same throughput; PIE holds
/// each queue near its 15 ms target. (The bar's 300-packet queue, 180 ms each way, is
/// latency.rs's `loaded_probes_see_the_bottleneck_queue`.)
#[test]
fn the_quick_bufferbloat_study_shows_each_aqms_latency() {
    if !privileged_or_skip("bufferbloat") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let mut tries = 0;
    one_of_three_tries("the bufferbloat study's shapes", || {
        tries += 1;
        let try_dir = dir.path().join(tries.to_string());
        std::fs::create_dir(&try_dir).unwrap();
        let db = run_quick("bufferbloat", &try_dir);
        let latency = means_by(&db, "latency", "aqm");
        let throughput = means_by(&db, "throughput", "aqm");
        let of = |v: &[(String, f64)], aqm: &str| {
            v.iter()
                .find(|(a, _)| a == aqm)
                .unwrap_or_else(|| panic!("no {aqm} in {v:?}"))
                .1
        };
        let ms = |aqm| of(&latency, aqm) / 1e3;
        println!(
            "loaded p50: droptail {:.1} ms, fq_codel {:.1} ms, pie {:.1} ms; throughput fq_codel / droptail {:.3}",
            ms("droptail"),
            ms("fq_codel"),
            ms("pie ecn"),
            of(&throughput, "fq_codel") / of(&throughput, "droptail")
        );
        // Both queues at least a quarter full on the median (80 ms each when full).
        if ms("droptail") < 60.0 {
            return Err(format!("drop-tail's loaded p50 {:.1} ms", ms("droptail")));
        }
        if ms("fq_codel") > 30.0 {
            return Err(format!("fq_codel's loaded p50 {:.1} ms", ms("fq_codel")));
        }
        // Each way near 15 ms of queue: 20 + 2 × 15 ms, with room for PIE's swings.
        if ms("pie ecn") > 70.0 {
            return Err(format!("PIE's loaded p50 {:.1} ms", ms("pie ecn")));
        }
        if of(&throughput, "fq_codel") < 0.9 * of(&throughput, "droptail") {
            return Err(format!("fq_codel's throughput {throughput:?}"));
        }
        assert_cdf_medians_are_the_points(&db, &latency);
        Ok(())
    });
}

/// The latency CDF chart: per point a line rising from 0 to 100 % of the probes, its
/// 50 % step at the point's loaded median (one run per point: the same probes).
fn assert_cdf_medians_are_the_points(db: &Path, medians: &[(String, f64)]) {
    let store = tcplab_store::Store::open(db).unwrap();
    let chart = tcplab_report::find_chart(&store, None, "latency_cdf", Default::default())
        .expect("the latency CDF chart");
    let tcplab_report::Body::Lines { series, .. } = &chart.body else {
        panic!("the CDF is lines: {chart:?}");
    };
    assert_eq!(series.len(), medians.len(), "one line per point");
    for s in series {
        let (first, last) = (s.points.first().unwrap(), s.points.last().unwrap());
        assert_eq!((first.y, last.y), (0.0, 1.0), "{}", s.name);
        assert!(
            s.points
                .windows(2)
                .all(|w| w[0].x <= w[1].x && w[0].y < w[1].y),
            "{}",
            s.name
        );
        let half = s.points.iter().find(|p| p.y == 0.5).unwrap();
        let aqm = s.name.trim_start_matches("aqm=");
        let median = medians.iter().find(|(a, _)| a == aqm).unwrap().1;
        assert_eq!(
            half.x, median,
            "{}: the CDF's 50 % against the point's median",
            s.name
        );
    }
}

/// The quick buffer, rtt-loss and parallel studies show the classic shapes: the window
/// bound, loss on the data against loss on the ACKs, more streams on a lossy path.
#[test]
fn quick_scenarios_show_the_classic_shapes() {
    if !privileged_or_skip("quick_scenarios") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();

    // buffer: the window bound below the BDP, the link rate above it; Linux doubles.
    let r = results(&run_quick("buffer", dir.path()), "throughput");
    for p in r["points"].as_array().unwrap() {
        let requested = match p["values"]["buffer"].as_str().unwrap() {
            "8K" => 8 << 10,
            "64K" => 64 << 10,
            "4M" => 4 << 20,
            other => panic!("{other}"),
        };
        assert_eq!(p["sndbuf_effective"], 2 * requested, "{p}");
        assert_eq!(p["rcvbuf_effective"], 2 * requested, "{p}");
    }
    let wan = |b| mean(&r, &[("rtt", "20ms"), ("buffer", b)]);
    // 64 KiB requested, 128 KiB effective: between the request and the effective size
    // per 20 ms round trip (the kernel advertises part of the buffer as window).
    let bound = |bytes: f64| bytes * 8.0 / 0.020;
    assert!(wan("64K") > 0.8 * bound(65536.0), "{}", wan("64K"));
    assert!(wan("64K") < 1.05 * bound(131072.0), "{}", wan("64K"));
    assert!(
        wan("8K") < wan("64K") && wan("64K") * 4.0 < wan("4M"),
        "{r}"
    );
    let lan = |b| mean(&r, &[("rtt", "0.2ms"), ("buffer", b)]);
    assert!(
        lan("64K") > 2.0 * wan("64K"),
        "a shorter RTT lifts the window bound"
    );

    // rtt-loss: loss on data hurts, on ACKs barely; no window scaling caps at 64 KiB.
    let r = results(&run_quick("rtt-loss", dir.path()), "throughput");
    let at = |rtt, loss, place, wscale| {
        mean(
            &r,
            &[
                ("rtt", rtt),
                ("loss", loss),
                ("where", place),
                ("wscale", wscale),
            ],
        )
    };
    let clean = at("10ms", "0%", "", "1");
    assert!(at("10ms", "5%", "up.", "1") < 0.3 * clean, "{r}");
    assert!(at("10ms", "5%", "down.", "1") > 0.7 * clean, "{r}");
    let unscaled = at("100ms", "0%", "", "0");
    assert!(unscaled < 1.05 * bound(65535.0) / 5.0, "{unscaled}");
    assert!(at("100ms", "0%", "", "1") > 3.0 * unscaled, "{r}");

    // parallel: more streams, more throughput on a lossy long path; Jain's index.
    let db = run_quick("parallel", dir.path());
    let r = results(&db, "throughput");
    let (one, four) = (mean(&r, &[("streams", "1")]), mean(&r, &[("streams", "4")]));
    assert!(four > 1.5 * one, "1 stream {one}, 4 streams {four}");
    let fairness = mean(&results(&db, "fairness"), &[("streams", "4")]);
    assert!((0.25..=1.0).contains(&fairness), "{fairness}");
    // One stream has no fairness: Jain's index of one share is 1 whatever it got.
    let one_stream = point(&results(&db, "fairness"), &[("streams", "1")]).clone();
    assert!(one_stream.get("mean").is_none(), "{one_stream}");
    assert_eq!(one_stream["run_ids"].as_array().map(Vec::len), Some(1));
}

/// The quick message, pacing and cross-traffic studies run to completion (their effects
/// are asserted by the diagnosis and pacing tests) with the tunings they ask for; the
/// UDP flow beside a TCP one has its loss and jitter. Among others: nothing here is a
/// rate held to a tolerance.
#[test]
fn quick_message_pacing_and_cross_traffic_studies_run_as_set() {
    if !privileged_or_skip("quick_scenarios_as_set") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let r = results(&run_quick("message", dir.path()), "throughput");
    for p in r["points"].as_array().unwrap() {
        assert_eq!(p["sndbuf_effective"], 8192, "{p}");
    }
    run_quick("pacing", dir.path());

    // cross-traffic: a UDP flow beside a TCP flow, with its loss and jitter.
    let db = run_quick("cross-traffic", dir.path());
    let loss = mean(&results(&db, "udp_loss"), &[]);
    assert!((0.0..0.5).contains(&loss), "{loss}");
    assert!(mean(&results(&db, "jitter"), &[]) > 0.0);
    let tcp_and_udp = mean(&results(&db, "throughput"), &[]);
    assert!(tcp_and_udp > 20e6, "{tcp_and_udp}");
    // One TCP flow beside the UDP one: no fairness either.
    let fairness = point(&results(&db, "fairness"), &[]).clone();
    assert!(fairness.get("mean").is_none(), "{fairness}");
}

/// A file of `points` × `repetitions` runs of `seconds` each.
fn small_experiment(dir: &Path, repetitions: u32, seconds: &str, extra: &str) -> PathBuf {
    let file = dir.join("small.toml");
    std::fs::write(
        &file,
        format!(
            "repetitions = {repetitions}\nduration = \"{seconds}\"\npath = \"rtt 2ms rate 200mbit\"\n\
             {extra}\n[[axis]]\nkey = \"flow.streams\"\nvalues = [1, 2]\n"
        ),
    )
    .unwrap();
    file
}

fn plan(db: &Path) -> Vec<Value> {
    export_jsonl(db, "plan")
}

fn done(plan: &[Value]) -> usize {
    plan.iter().filter(|r| r["status"] == "done").count()
}

fn kill9(child: &mut Child) {
    // SAFETY: signalling a child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

#[test]
fn a_sweep_killed_at_a_random_moment_resumes_without_loss_or_duplicates() {
    if !privileged_or_skip("killed_sweep_resumes") {
        return;
    }
    // Among others: it counts runs and plan rows, and looks for its own lab's name
    // among the namespaces; load only slows the runs it kills one of.
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = small_experiment(dir.path(), 3, "1s", "");
    let db = dir.path().join("small.db");
    let mut child = tcplab()
        .arg("sweep")
        .arg(&file)
        .arg("--db")
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for a first finished run, then kill at a random moment of a later one.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !db.exists() || done(&plan(&db)) == 0 {
        assert!(Instant::now() < deadline, "no run finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let wait_ms = u64::from(std::process::id() % 1200)
        + (Instant::now().elapsed().subsec_nanos() as u64 % 300);
    std::thread::sleep(Duration::from_millis(wait_ms));
    // A second sweep on the same database is refused while the first runs.
    let second = sweep(&file, &db, &[]);
    assert_eq!(second.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&second.stderr).contains("another sweep is running"));
    kill9(&mut child);
    let before = plan(&db);
    let done_before: Vec<&Value> = before.iter().filter(|r| r["status"] == "done").collect();
    assert!(
        !done_before.is_empty() && done_before.len() < 6,
        "{before:?}"
    );

    let out = sweep(&file, &db, &[]);
    assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("resuming"), "{stdout}");
    let after = plan(&db);
    assert_eq!(after.len(), 6);
    assert_eq!(done(&after), 6, "{after:?}");
    // Runs finished before the kill keep their run ids.
    for row in &done_before {
        let same = after.iter().find(|r| r["seq"] == row["seq"]).unwrap();
        assert_eq!(same["run_id"], row["run_id"]);
    }
    // One stored run per plan row: nothing lost, nothing counted twice.
    let runs = export_jsonl(&db, "runs");
    let linked: std::collections::BTreeSet<(i64, i64)> = runs
        .iter()
        .filter(|r| r["status"] == "done")
        .map(|r| {
            (
                r["point"].as_i64().unwrap(),
                r["repetition"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(linked.len(), 6);
    assert_eq!(runs.iter().filter(|r| r["status"] == "done").count(), 6);
    // The killed run's lab was removed by the resumed sweep.
    let namespaces = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let leftover = format!("sw{}-", child.id());
    assert!(
        !String::from_utf8_lossy(&namespaces.stdout).contains(&leftover),
        "{}",
        String::from_utf8_lossy(&namespaces.stdout)
    );
    let r = results(&db, "throughput");
    for p in r["points"].as_array().unwrap() {
        assert_eq!(p["n"], 3, "{p}");
        assert!(p["ci"].is_array(), "{p}");
    }
}

#[test]
fn failed_runs_are_kept_and_retried_and_a_changed_file_is_refused() {
    if !privileged_or_skip("failed_runs_kept") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    // One point sets a sysctl the kernel does not have: its lab cannot be built.
    let file = small_experiment(
        dir.path(),
        1,
        "0.5s",
        "[sysctl]\n\"net.ipv4.{knob}\" = 1\n[[axis]]\nname = \"knob\"\nvalues = [\"tcp_sack\", \"tcp_no_such_knob\"]",
    );
    let db = dir.path().join("small.db");
    let out = sweep(&file, &db, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("2 runs failed; --retry-failed"), "{stdout}");
    let rows = plan(&db);
    assert_eq!(done(&rows), 2);
    let failed: Vec<&Value> = rows.iter().filter(|r| r["status"] == "failed").collect();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|r| r["error"]
        .as_str()
        .unwrap()
        .contains("unknown sysctl 'net.ipv4.tcp_no_such_knob'")));
    // Resuming runs nothing; --retry-failed runs the failed ones again (and they fail).
    let again = sweep(&file, &db, &[]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("0 to run"));
    let retried = sweep(&file, &db, &["--retry-failed"]);
    assert_eq!(retried.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&retried.stdout).contains("retrying 2 failed runs"));
    let rows = plan(&db);
    assert!(rows
        .iter()
        .filter(|r| r["status"] == "failed")
        .all(|r| r["attempts"] == 2));
    assert_eq!(done(&rows), 2);

    // The file changes: refused in one line, unless planned as a new experiment.
    std::fs::write(
        &file,
        std::fs::read_to_string(&file)
            .unwrap()
            .replace("values = [1, 2]", "values = [1]"),
    )
    .unwrap();
    let refused = sweep(&file, &db, &[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("the file changed") && err.contains("--new-experiment"),
        "{err}"
    );
    let beside = sweep(&file, &db, &["--new-experiment"]);
    assert_eq!(
        beside.status.code(),
        Some(1),
        "its failing point fails again"
    );
    let r = results(&db, "throughput");
    assert_eq!(r["experiment"]["id"], 2);
    assert_eq!(r["experiment"]["runs"], 2);
}

/// Each run's seed, from its path spec, by (point, repetition).
fn lab_seeds(db: &Path) -> std::collections::BTreeMap<(u64, u64), u64> {
    let runs = export_jsonl(db, "runs");
    plan(db)
        .iter()
        .map(|row| {
            let run = runs
                .iter()
                .find(|r| r["id"] == row["run_id"])
                .unwrap_or_else(|| panic!("no run for {row}"));
            let seed = str_at(run, "/path_spec")
                .split(" seed ")
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no seed in {}", run["path_spec"]));
            ((u64_at(row, "/point"), u64_at(row, "/repetition")), seed)
        })
        .collect()
}

/// Every run's lab draws from a seed derived from the experiment's recorded one and
/// records it: repetitions differ, every point's repetition k draws alike, and the file
/// with the recorded seed written in gives every run its seed again.
#[test]
fn each_repetition_draws_from_a_seed_the_experiments_seed_reproduces() {
    if !privileged_or_skip("sweep_seeds") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let first_db = dir.path().join("first.db");
    assert_success(&sweep(
        &small_experiment(dir.path(), 2, "0.3s", ""),
        &first_db,
        &[],
    ));
    let recorded = u64_at(&export_jsonl(&first_db, "experiments")[0], "/seed");
    let seeds = lab_seeds(&first_db);
    println!("experiment seed {recorded}: lab seeds {seeds:?}");
    assert_eq!(seeds.len(), 4);
    for point in 0..2 {
        assert_ne!(seeds[&(point, 0)], seeds[&(point, 1)]);
    }
    for repetition in 0..2 {
        assert_eq!(seeds[&(0, repetition)], seeds[&(1, repetition)]);
    }
    let again_db = dir.path().join("again.db");
    let pinned = small_experiment(dir.path(), 2, "0.3s", &format!("seed = {recorded}"));
    assert_success(&sweep(&pinned, &again_db, &[]));
    assert_eq!(lab_seeds(&again_db), seeds);
}

/// The cross-traffic quick scenario, where a 2 Mbit/s UDP flow was drawn at 100 Mbit/s
/// and "all flows" at 190 Mbit/s on a 100 Mbit/s link (a 158 µs last interval): its
/// throughput over time holds in every bin (`chart_errors` with no stall allowed). Per
/// bin, load can spoil it (a host kept off the CPU moves bytes into a later bin): one
/// of three tries, as is the UDP flow drawn over its two 1 s intervals at its rate. What
/// load cannot change is asserted outright: two UDP intervals, the TCP flow drawn from
/// its sender's samples.
#[test]
fn throughput_over_time_holds_per_bin() {
    if !privileged_or_skip("throughput_over_time") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let mut tries = 0;
    one_of_three_tries("cross-traffic's throughput over time, per bin", || {
        tries += 1;
        let db = dir.path().join(format!("cross-traffic-{tries}.db"));
        assert_success(&sweep(&quick_example("cross-traffic.toml"), &db, &[]));
        let store = tcplab_store::Store::open(&db).unwrap();
        let run = store.load_run(1).unwrap();
        let r = tcplab_report::rates::rates(&run).expect("throughput over time");
        let [tcp, udp] = &r.flows[..] else {
            panic!("a TCP and a UDP flow: {r:?}");
        };
        assert_eq!(tcp.source, tcplab_report::rates::Source::Sender);
        assert_eq!(udp.cells.len(), 2, "{udp:?}");
        // Counted where the datagrams arrive: a sender or an emulator kept off the CPU
        // for a quarter of a second (seen once beside three builds on two vCPUs: 182 000
        // of 250 000 B) misses its schedule, so this is load's to spoil too.
        if let Some(c) = udp
            .cells
            .iter()
            .find(|c| (c.bps() / 2e6 - 1.0).abs() >= 0.02)
        {
            return Err(format!(
                "UDP at 2 Mbit/s drawn at {:.3} Mbit/s: {c:?}",
                c.bps() / 1e6
            ));
        }
        let errors = chart_errors(&db, 0);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    });
}

/// Two clients' flows through one 50 Mbit/s bottleneck, the second started 0.5 s after
/// the first, each for 3 s or 12 MB: the run's throughput, in the summary, `explain`
/// and `results`, is at most the link's goodput (50 Mbit/s × 1448 / 1500: MSS over the
/// IP packet with timestamps), where adding the flows' rates over their own windows
/// exceeds it (55.5 Mbit/s was reported once). Tolerance 1 %: the window ends at the
/// last sender's deadline, and the receivers count at theirs, which fall later by the
/// control path's one-way delay (10 ms: 0.3 % of the 3.5 s window) and the monitors'
/// wake-up (under 1 ms). For the byte counts (no drain), the bytes are checked against
/// the payload the emulator's bottleneck delivered.
#[test]
fn staggered_flows_through_one_link_total_at_most_its_goodput() {
    if !privileged_or_skip("staggered_flows") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let goodput = 50e6 * 1448.0 / 1500.0;
    let most = goodput * 1.01;
    for (name, end) in [("timed", "duration = \"3s\""), ("bytes", "bytes = \"12M\"")] {
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &file,
            format!(
                "name = \"{name}\"\nduration = \"3s\"\nwarmup = \"1s\"\ninterval = \"0.5s\"\n\
                 path = \"rate 50mbit rtt 20ms queue 100\"\naccess = [\"\", \"\"]\n\
                 [[flow]]\nname = \"a\"\ncc = \"cubic\"\n{end}\n\
                 [[flow]]\nname = \"b\"\nclient = 2\ncc = \"cubic\"\nstart = \"0.5s\"\n{end}\n"
            ),
        )
        .unwrap();
        let db = dir.path().join(format!("{name}.db"));
        assert_success(&sweep(&file, &db, &[]));
        let run = &export_jsonl(&db, "runs")[0];
        let flows = export_jsonl(&db, "flows");
        let summary = f64_at(run, "/received_bps");
        let window = f64_at(run, "/window_seconds");
        let measured = f64_at(&explained(&db), "/measured_bps");
        // The 1 s warm-up ends on the first flow's interval bounds; the second flow's
        // interval across it is prorated (its rate then is steady, its share small).
        let after_warmup = mean(&results(&db, "throughput"), &[]);
        println!(
            "{name}: summary {summary:.0}, explain {measured:.0}, results {after_warmup:.0} bit/s over {window} s; goodput {goodput:.0}"
        );
        assert_eq!(summary, measured, "{name}: explain's rate is the summary's");
        for (what, bps) in [("summary", summary), ("results", after_warmup)] {
            assert!(bps <= most, "{name}: {what} {bps} > {most}");
            // Not vacuous: the flows kept the link busy.
            assert!(bps >= 0.7 * goodput, "{name}: {what} {bps}");
        }
        // Each flow's own window is shorter than the run's: their rates add up to more.
        let own: f64 = flows.iter().map(|f| f64_at(f, "/received_bps")).sum();
        assert!(own > summary, "{name}: {own} vs {summary}");
        // The window runs from the first start past the second's 0.5 s offset: to its
        // deadline, or (bytes) at least as long as the link needs for them.
        let shortest = if name == "timed" {
            3.4
        } else {
            2.0 * 12.0 * 8.0 * 1_048_576.0 / goodput
        };
        assert!(
            (shortest..shortest + 3.0).contains(&window),
            "{name}: the window {window} s, at least {shortest} s"
        );
        if name == "bytes" {
            // Every byte in the window: the rate is the totals over it...
            let received: u64 = flows.iter().map(|f| u64_at(f, "/received_bytes")).sum();
            assert_eq!(received, 2 * (12 << 20));
            assert!((summary * window / 8.0 / received as f64 - 1.0).abs() < 1e-6);
            // ...and the totals are what the bottleneck delivered of the test: its bytes
            // less 52 header bytes a packet, the data connections' handshakes aside (the
            // control connections' are counted apart).
            let path: Value = json_column(run, "path_json");
            let up = &path["up"]["links"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["name"] == "bottleneck")
                .expect("a bottleneck link");
            let payload = u64_at(up, "/delivered_bytes") - 52 * u64_at(up, "/delivered_packets");
            assert!(
                payload >= received && payload - received < 20_000,
                "the bottleneck delivered {payload} payload bytes for {received} received"
            );
        }
    }
}

/// `sweep --dry-run`'s estimate against the wall time of the sweep it describes, on
/// examples/quick/parallel.toml (a lossy 50 ms path, 1 and 4 streams). Load stretches a
/// sweep: one of three tries.
#[test]
fn the_dry_run_estimates_a_sweeps_wall_time_within_20_percent() {
    if !privileged_or_skip("dry_run_estimate") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let file = quick_example("parallel.toml");
    let dry = sweep(&file, &dir.path().join("dry.db"), &["--dry-run"]);
    assert_success(&dry);
    let text = String::from_utf8_lossy(&dry.stdout);
    let estimate: f64 = text
        .lines()
        .next()
        .and_then(|l| l.split("about ").nth(1))
        .and_then(|s| s.strip_suffix(" s"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no estimate in seconds in {text}"));
    let mut tries = 0;
    one_of_three_tries("the dry run's estimate", || {
        tries += 1;
        let db = dir.path().join(format!("try{tries}.db"));
        let started = Instant::now();
        assert_success(&sweep(&file, &db, &[]));
        let wall = started.elapsed().as_secs_f64();
        let ratio = estimate / wall;
        println!("estimate {estimate} s, sweep {wall:.2} s: {ratio:.2}");
        if (0.8..=1.2).contains(&ratio) {
            Ok(())
        } else {
            Err(format!("estimate {estimate} s for a {wall:.2} s sweep"))
        }
    });
}

/// `capture = true`: each run of a sweep writes its pcapng file beside the database and
/// records where; each file holds that run's packets, read back by tshark where it is.
/// `trace_events = true`: each run stores its kernel events.
#[test]
fn a_sweep_with_capture_and_events_writes_one_file_per_run_and_stores_the_events() {
    if !privileged_or_skip("sweep_capture") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = small_experiment(dir.path(), 1, "0.5s", "capture = true\ntrace_events = true");
    let db = dir.path().join("study.db");
    let out = sweep(&file, &db, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let captures = dir.path().join("study-captures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&captures)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let runs = export_jsonl(&db, "runs");
    assert_eq!(runs.len(), 2);
    for capture in &files {
        let named = runs
            .iter()
            .filter(|r| r.to_string().contains(capture.to_str().unwrap()))
            .count();
        assert_eq!(named, 1, "one run records {}", capture.display());
        let Ok(out) = Command::new("tshark").arg("-r").arg(capture).output() else {
            continue;
        };
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).lines().count() > 100);
    }
    let events = export_jsonl(&db, "events");
    for run in &runs {
        let trace: serde_json::Value = json_column(run, "trace_json");
        assert_eq!(trace["taken"], true, "{trace}");
        let stored = events.iter().filter(|e| e["run_id"] == run["id"]).count() as u64;
        assert_eq!(stored, trace["events"].as_u64().unwrap());
        assert!(stored > 100, "{stored} events");
    }
}

/// `compare` on two real sweeps each against a base: the same settings again show no
/// regression (exit 0 with `--fail-on throughput:-5%`), half the socket buffer on a
/// window-limited path halves the throughput, a significant drop that exits 3 and names
/// the point.
#[test]
fn compare_gates_a_halved_buffer_and_passes_a_rerun() {
    if !privileged_or_skip("compare") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let study = |name: &str, window: &str| {
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &file,
            format!(
                "name = \"window\"\nrepetitions = 3\nduration = \"1s\"\nwarmup = \"0.25s\"\n\
                 path = \"rtt 20ms rate 100mbit queue 1bdp\"\n[[flow]]\ncc = \"cubic\"\nwindow = \"{window}\"\n"
            ),
        )
        .unwrap();
        let db = dir.path().join(format!("{name}.db"));
        assert_success(&sweep(&file, &db, &[]));
        db
    };
    let base = study("base", "64K");
    let rerun = study("rerun", "64K");
    let halved = study("halved", "32K");
    let compare = |new: &Path| {
        tcplab()
            .arg("compare")
            .arg(&base)
            .arg(new)
            .args(["--fail-on", "throughput:-5%"])
            .output()
            .unwrap()
    };
    let same = compare(&rerun);
    println!("{}", String::from_utf8_lossy(&same.stdout));
    assert_success(&same);
    let dropped = compare(&halved);
    let stdout = String::from_utf8_lossy(&dropped.stdout);
    let stderr = String::from_utf8_lossy(&dropped.stderr);
    println!("{stdout}{stderr}");
    assert_eq!(dropped.status.code(), Some(3), "{stdout}{stderr}");
    assert!(
        stderr.starts_with("tcplab: regressed: ") && stderr.contains("throughput"),
        "{stderr}"
    );
    let json = tcplab()
        .arg("compare")
        .arg(&base)
        .arg(&halved)
        .args(["--metric", "throughput", "--json"])
        .output()
        .unwrap();
    let json = parse_success(&json);
    let change = &json["changes"][0];
    assert_eq!(change["significant"], true, "{json}");
    let relative = f64_at(change, "/relative");
    assert!(
        (-0.6..=-0.4).contains(&relative),
        "halved buffer: {relative}"
    );
}

/// A study as 3 shards — the first alone, the other two at once, into a directory the
/// first makes — merged: exactly the plan's runs, each once, and the same `results`
/// table as the study swept whole. Each shard's dry run lists the runs it then runs.
#[test]
fn three_shards_merged_are_the_study_swept_whole() {
    if !privileged_or_skip("shards") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("study.toml");
    std::fs::write(
        &file,
        "name = \"sharded\"\nrepetitions = 2\nduration = \"1s\"\npath = \"rtt 5ms rate 50mbit queue 1bdp\"\n\
         [[flow]]\ncc = \"cubic\"\n[[axis]]\nkey = \"flow.window\"\nvalues = [\"16K\", \"64K\", \"256K\"]\n",
    )
    .unwrap();
    // In a directory the first sweep makes.
    let shard_db = |k: u32| dir.path().join(format!("parts/shard{k}.db"));
    let shard = |k: u32| {
        tcplab()
            .arg("sweep")
            .arg(&file)
            .arg("--db")
            .arg(shard_db(k))
            .args(["--shard", &format!("{k}/3")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // What a shard's dry run lists, before and after it ran: the runs it then runs.
    let listed = |k: u32| {
        let out = tcplab()
            .arg("sweep")
            .arg(&file)
            .arg("--db")
            .arg(shard_db(k))
            .args(["--dry-run", "--shard", &format!("{k}/3")])
            .output()
            .unwrap();
        assert_success(&out);
        dry_run_rows(&String::from_utf8_lossy(&out.stdout))
    };
    let planned: Vec<Vec<DryRunRow>> = (1..=3).map(listed).collect();
    assert_success(&shard(1).wait_with_output().unwrap());
    let (two, three) = (shard(2), shard(3));
    for out in [
        two.wait_with_output().unwrap(),
        three.wait_with_output().unwrap(),
    ] {
        assert_success(&out);
    }
    for (k, before) in (1..=3).zip(planned) {
        let done: Vec<DryRunRow> = before
            .into_iter()
            .map(|row| DryRunRow {
                status: "done".into(),
                ..row
            })
            .collect();
        assert_eq!(listed(k), done, "shard {k}/3");
    }
    let merged = dir.path().join("merged.db");
    let out = tcplab()
        .arg("merge")
        .args((1..=3).map(shard_db))
        .arg("-o")
        .arg(&merged)
        .output()
        .unwrap();
    assert_success(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("6 done, 0 failed, 0 to run"), "{said}");
    assert!(!said.contains("twice"), "{said}");
    let whole = dir.path().join("whole.db");
    assert_success(&sweep(&file, &whole, &[]));
    let layout = |db: &Path| {
        let r = results(db, "throughput");
        let points: Vec<(String, u64)> = r["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["label"].as_str().unwrap().to_owned(), u64_at(p, "/n")))
            .collect();
        (
            r["experiment"]["axes"].clone(),
            r["experiment"]["runs"].clone(),
            points,
        )
    };
    assert_eq!(layout(&merged), layout(&whole));
    let (_, runs, points) = layout(&merged);
    assert_eq!(runs, 6);
    assert!(points.iter().all(|(_, n)| *n == 2), "{points:?}");
    // Each planned run's record once: 6 stored runs, 6 distinct plan rows done.
    let store = tcplab_store::Store::open(&merged).unwrap();
    assert_eq!(store.list_runs().unwrap().len(), 6);
    // Merging a shard with another study's database is refused, nothing written.
    let other = dir.path().join("other.db");
    let refused = tcplab()
        .arg("merge")
        .arg(shard_db(1))
        .arg(&whole)
        .arg("-o")
        .arg(&other)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("different plans"), "{err}");
    assert!(!other.exists());
}

/// The quick rate-step and policer studies: explain answers each change of the schedule
/// in every run, and every packet the policer dropped was a loss the senders
/// retransmitted, where the shaper of the same rate dropped none. Counts and names only:
/// among others.
#[test]
fn the_quick_rate_step_and_policer_studies_explain_their_changes_and_drops() {
    if !privileged_or_skip("rate_step_policer") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let explain = |db: &Path, id: &str| {
        parse_success(
            &tcplab()
                .args(["explain", id, "--json", "--db"])
                .arg(db)
                .output()
                .unwrap(),
        )
    };
    let db = run_quick("rate-step", dir.path());
    for run in export_jsonl(&db, "runs") {
        let e = explain(&db, &run["id"].to_string());
        let changes: Vec<&str> = e["changes"]
            .as_array()
            .unwrap_or_else(|| panic!("no changes: {e}"))
            .iter()
            .map(|c| c["change"].as_str().unwrap())
            .collect();
        assert_eq!(
            changes,
            [
                "at 2s rate 25mbit",
                "at 4s rate 50mbit",
                "at 5s rate 0",
                "at 5500ms rate 50mbit"
            ],
            "{e}"
        );
        assert_eq!(e["changes"][2]["bound_bps"], 0.0, "the outage: {e}");
        assert_eq!(e["path"]["capacity"]["by"], "schedule", "{e}");
    }
    let db = run_quick("policer", dir.path());
    for run in export_jsonl(&db, "runs") {
        let path: Value = json_column(&run, "path_json");
        let bottleneck = path["up"]["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "bottleneck")
            .unwrap();
        let policed = u64_at(bottleneck, "/dropped_police");
        let retransmits = run["retransmits"].as_u64().unwrap();
        let e = explain(&db, &run["id"].to_string());
        if str_at(&path, "/spec").contains("police") {
            assert!(policed > 0, "{path}");
            // Each drop is a segment the senders resend; the run counts its senders'
            // retransmissions to the deadline (273 for 281 drops in one run).
            assert!(
                retransmits as f64 >= 0.9 * policed as f64,
                "{retransmits} retransmits for {policed} policed"
            );
            assert!(e["path"]["police"]["bps"] == 10_000_000, "{e}");
            let kinds: Vec<&str> = e["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["kind"].as_str().unwrap())
                .collect();
            assert!(kinds.contains(&"policer"), "{kinds:?}");
        } else {
            assert_eq!(policed, 0, "{path}");
        }
    }
}
