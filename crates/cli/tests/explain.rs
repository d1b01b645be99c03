//! `tcplab explain` on real lab runs: each run built to be held back by one thing (its
//! send buffer, the receiver's window, loss, the link, a cap on the application's or
//! the socket's rate) gets that verdict, never exceeds a bound, and runs on randomly
//! drawn paths get the verdict their configuration implies.

use crate::support;

use std::path::Path;

use rand::{Rng, SeedableRng};
use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

/// Runs one 2 s test across `path` into `db`, then explains it, and checks that the
/// run and its explanation tell one story: the verdict is the run's dominant limit,
/// named by the element (link, gap pacer) where the network's limit reached one.
fn run_and_explain(db: &Path, path: &str, args: &[&str]) -> Value {
    let out = tcplab()
        .args(["run", "--path", path, "-t", "2", "--json", "--db"])
        .arg(db)
        .args(args)
        .output()
        .expect("running tcplab run");
    let run = parse_success(&out);
    let out = tcplab()
        .args(["explain", "--last", "--json", "--db"])
        .arg(db)
        .output()
        .expect("running tcplab explain");
    let e = parse_success(&out);
    let dominant = str_at(&run, "/summary/dominant_limit");
    let verdict = str_at(&e, "/verdict/limit");
    let network_element = matches!(verdict, "link" | "pacing") && dominant == "cwnd";
    assert!(
        verdict == dominant || network_element,
        "the run says {dominant}, explain {verdict}: {e:#}"
    );
    for interval in run["intervals"].as_array().unwrap() {
        let sum: f64 = ["rwnd", "sndbuf", "cwnd", "pacing", "app"]
            .iter()
            .map(|k| interval["limits"][k].as_f64().unwrap())
            .sum();
        assert!((sum - 1.0).abs() < 1e-9, "{interval}");
    }
    e
}

/// `run_and_explain` until the verdict is `limit`, one of three tries: the verdict
/// compares the run's rate with its bounds (a link is full at 85 % of it), and a run
/// starved of CPU on a loaded machine falls below them.
fn explained_as(db: &Path, limit: &str, path: &str, args: &[&str]) -> Value {
    one_of_three_tries(&format!("{path} {args:?}"), || {
        let e = run_and_explain(db, path, args);
        match str_at(&e, "/verdict/limit") {
            verdict if verdict == limit => Ok(e),
            verdict => Err(format!("verdict {verdict}, not {limit}: {e:#}")),
        }
    })
}

/// The kinds of limit, each built on a path of `rate_mbit` and `rtt_ms`: buffers an
/// eighth of the BDP, 2 % loss, an application rate a quarter of the link's (a cap:
/// `pacing`), a pacing rate half of it.
fn cases(rate_mbit: u64, rtt_ms: u64) -> Vec<(&'static str, String, Vec<String>)> {
    let path = format!("rtt {rtt_ms}ms rate {rate_mbit}mbit");
    let eighth_bdp = (rate_mbit * 1_000_000 * rtt_ms / 1000 / 8 / 8).max(8 << 10);
    let args = |a: &[String]| a.to_vec();
    vec![
        (
            "sndbuf",
            path.clone(),
            args(&["--sndbuf".into(), eighth_bdp.to_string()]),
        ),
        (
            "rwnd",
            path.clone(),
            args(&["--rcvbuf".into(), eighth_bdp.to_string()]),
        ),
        (
            "cwnd",
            format!("{path} up.loss 2%"),
            args(&["-C".into(), "cubic".into()]),
        ),
        ("link", path.clone(), args(&["-C".into(), "cubic".into()])),
        (
            "pacing",
            path.clone(),
            args(&["--app-rate".into(), format!("{}mbit", rate_mbit / 4)]),
        ),
        (
            "pacing",
            path,
            args(&["--fq-rate".into(), format!("{}mbit", rate_mbit / 2)]),
        ),
    ]
}

#[test]
fn runs_built_for_one_limit_get_that_verdict() {
    if !privileged_or_skip("explain_constructed") {
        return;
    }
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("explain.db");
    for (limit, path, args) in cases(100, 20) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let e = explained_as(&db, limit, &path, &args);
        let measured = f64_at(&e, "/measured_bps");
        let bound = |name: &str| e["bounds"][name].as_f64();
        match limit {
            // A window-limited flow moves about its window per round trip (measured
            // 93 % for rwnd); the bound takes the most seen in flight over the shortest
            // round trip, so it bounds.
            "sndbuf" | "rwnd" => {
                let window = bound("window_bps").unwrap();
                assert!(
                    (0.6 * window..=1.05 * window).contains(&measured),
                    "{limit}: {measured} against a window bound of {window}"
                );
            }
            // Periodic loss: Mathis' model with the measured loss-event rate (measured
            // 6.0 against 6.2 Mbit/s), an estimate.
            "cwnd" => {
                let mathis = e["estimates"]["mathis_bps"].as_f64().expect("a loss model");
                assert!(
                    (0.5 * mathis..=2.0 * mathis).contains(&measured),
                    "{measured} against Mathis' {mathis}"
                );
            }
            "link" => {
                let link = bound("link_bps").unwrap();
                assert!(
                    measured <= 1.01 * link,
                    "{measured} above the link's {link}"
                );
                // 100 Mbit/s, of every 1500 bytes 1448 payload.
                assert!((link - 96_533_333.3).abs() < 1.0, "{link}");
            }
            _ => {}
        }
    }
    assert_no_run_exceeds_its_bound(&db);
    // The text form says the same.
    let out = tcplab()
        .args(["explain", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verdict:   pacing"), "{text}");
    assert!(text.contains("bounds:    link 96.5 Mbit/s"), "{text}");
}

#[test]
fn runs_on_drawn_paths_get_the_verdict_their_configuration_implies() {
    if !privileged_or_skip("explain_drawn") {
        return;
    }
    let _machine = alone();
    let seed: u64 = rand::rng().random();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("drawn.db");
    let (rate, rtt) = (rng.random_range(50..=150), rng.random_range(10..=30));
    for (limit, path, args) in cases(rate, rtt) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        explained_as(&db, limit, &path, &args);
    }
    assert_no_run_exceeds_its_bound(&db);
}

/// 8 KiB buffers (16 KiB effective) at 20 ms: the receiver offers 7212 B — the 7240 B
/// (5 segments) of its handshake less the 28 B the data connection begins with, a
/// window Linux keeps rather than rounds again — room for 4 whole segments, 2.32
/// Mbit/s; or, once its rcv_ssthresh grows past 7212 B + a segment, 8688 B, 6
/// segments, 3.48 Mbit/s. Which one a run gets is chance; explain names the window(s)
/// the capture shows the receiver advertising, and the run's rate is their whole
/// segments per round trip.
#[test]
fn a_small_receive_buffer_is_named_in_the_whole_segments_its_window_holds() {
    if !privileged_or_skip("window_segments") || !tshark_or_skip("window_segments") {
        return;
    }
    let _machine = alone();
    const MSS: u64 = 1448;
    one_of_three_tries("8 KiB buffers at 20 ms", || {
        let dir = tempfile::tempdir().unwrap();
        let (db, file) = (dir.path().join("w.db"), dir.path().join("w.pcapng"));
        let run = run_captured(&["--path", "rtt 20ms", "-w", "8K", "-t", "3"], &file, &db);
        let port = str_at(&run, "/flows/0/client_addr")
            .rsplit_once(':')
            .unwrap()
            .1
            .to_owned();
        // The windows the server advertised on the data connection once data flowed
        // (no scaling with a 16 KiB buffer), and how many ACKs carried each.
        let windows: Vec<(f64, u64)> = tshark(
            &file,
            &format!("tcp.dstport == {port} && tcp.flags.syn == 0 && tcp.ack > 1000"),
            &["frame.time_epoch", "tcp.window_size_value"],
        )
        .iter()
        .map(|line| {
            let (t, w) = line.split_once('\t').unwrap();
            (t.parse().unwrap(), w.parse().unwrap())
        })
        .collect();
        let t0 = f64_at(&run, "/started_unix_us") / 1e6;
        let mut advertised: std::collections::BTreeMap<u64, usize> = Default::default();
        for &(_, w) in &windows {
            *advertised.entry(w).or_default() += 1;
        }
        let acks: usize = advertised.values().sum();
        let held: Vec<u64> = advertised
            .iter()
            .filter(|&(_, &n)| n * 20 >= acks)
            .map(|(&w, _)| w)
            .collect();
        let finding = finding_message(&explained(&db), FindingKind::WindowSegments);
        // "receive window of 7212 B, room for 4 whole segments of 1448 B …"
        let named: Vec<u64> = finding
            .iter()
            .flat_map(|m| m.split(" B, room for ").collect::<Vec<_>>())
            .filter_map(|part| part.rsplit(' ').next()?.parse().ok())
            .collect();
        eprintln!("advertised {advertised:?}; explain: {finding:?}");
        // Every time: explain names what the capture shows, and names it whenever a
        // window held is not whole segments.
        for w in &named {
            assert!(
                held.contains(w),
                "explain names {w} B; the capture held {held:?}"
            );
        }
        for w in &held {
            if w % MSS != 0 {
                assert!(named.contains(w), "the capture held {w} B: {finding:?}");
            }
        }
        assert!(
            held.iter().all(|w| [7212, 7240, 8688].contains(w)),
            "{advertised:?}"
        );
        // What load can spoil: the rate is the whole segments of each window per round
        // trip, over the time it was advertised within the test's 3 s.
        let (mut bits, mut seconds) = (0.0, 0.0);
        for pair in windows.windows(2) {
            let ((t, w), (next, _)) = (pair[0], pair[1]);
            let (t, next) = ((t - t0).clamp(0.0, 3.0), (next - t0).clamp(0.0, 3.0));
            bits += (w / MSS * MSS) as f64 * 8.0 / 0.020 * (next - t);
            seconds += next - t;
        }
        let whole_bps = bits / seconds;
        let measured = f64_at(&run, "/summary/received_bps");
        if (measured / whole_bps - 1.0).abs() > 0.04 {
            return Err(format!(
                "{measured} bit/s measured, {whole_bps} from the windows in whole segments"
            ));
        }
        Ok(())
    });
}
