//! Bad input gets one line naming the bad token and a non-zero exit; no privileges needed.

use std::process::{Command, Output};

use crate::support;

fn tcplab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tcplab"))
        .args(args)
        .output()
        .unwrap()
}

/// Asserts exit `code` and a single stderr line containing every `needle`.
fn assert_one_line_error(args: &[&str], code: i32, needles: &[&str]) {
    let out = tcplab(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("tcplab: "), "{err}");
    support::assert_each_cause_once(&err);
    for needle in needles {
        assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    }
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn bad_units_name_the_token_and_exit_2() {
    assert_one_line_error(&["run", "h", "-t", "10 mbit"], 2, &["'10 mbit'", "--time"]);
    assert_one_line_error(&["run", "h", "-t", "-5s"], 2, &["'-5s'", "negative"]);
    assert_one_line_error(
        &["run", "h", "-l", "64Q"],
        2,
        &["'64Q'", "unknown unit 'Q'"],
    );
    assert_one_line_error(
        &["run", "h", "--fq-rate", "fast"],
        2,
        &["'fast'", "--fq-rate"],
    );
    assert_one_line_error(&["run", "h", "-w", "1.5.5M"], 2, &["'1.5.5M'"]);
    assert_one_line_error(&["run", "h", "-P", "129"], 2, &["'129'", "--parallel"]);
}

#[test]
fn unknown_flags_and_missing_arguments_exit_2() {
    assert_one_line_error(&["run", "h", "--bogus"], 2, &["'--bogus'"]);
    assert_one_line_error(&["run"], 2, &["<TARGET>"]);
    assert_one_line_error(&["frobnicate"], 2, &["'frobnicate'"]);
    assert_one_line_error(&["run", "h", "-R", "--bidir"], 2, &["--bidir"]);
}

/// The rules of a test's values, and that flags and files word them alike, are tested
/// once where they are kept (tcplab_model::test_builder, and args.rs's
/// `flags_and_files_refuse_a_mistake_in_the_same_words`); here, what reaches the user.
#[test]
fn values_the_parser_accepts_but_the_test_cannot_use_are_refused() {
    assert_one_line_error(&["run", "h", "--probe-idle", "1s"], 2, &["--probe"]);
    assert_one_line_error(
        &["run", "h", "--iperf3", "--probe", "10ms"],
        1,
        &["--probe", "tcplab server"],
    );
    assert_one_line_error(&["run", "h", "--ecn"], 1, &["--ecn", "--path", "sysctl -w"]);
    assert_one_line_error(&["run", "h", "--rr", "1x"], 2, &["--rr"]);
    assert_one_line_error(&["run", "h", "--rr-writes", "2"], 2, &["--rr"]);
    assert_one_line_error(&["run", "h", "--crr"], 2, &["--rr"]);
    assert_one_line_error(
        &["run", "h", "--rr", "100", "-R"],
        2,
        &["--rr", "--reverse"],
    );
    assert_one_line_error(
        &["run", "h", "--iperf3", "--rr", "100"],
        1,
        &["--rr", "tcplab server"],
    );
    assert_one_line_error(
        &["run", "h", "-C", "no-such-cc"],
        1,
        &["'no-such-cc'", "available"],
    );
    // Refused before any namespace is made: a BDP needs a round trip, and one seed
    // draws every link of a lab.
    assert_one_line_error(
        &["run", "--path", "rate 50mbit queue 1bdp"],
        1,
        &["up.queue 1bdp", "no link on the way has a delay"],
    );
    assert_one_line_error(
        &[
            "run",
            "--path",
            "rtt 5ms",
            "--client-path",
            "loss 1% seed 3",
        ],
        1,
        &["client1's access link sets seed"],
    );
}

/// A value out of its range is refused before a lab is built (nothing on stdout, where
/// the lab's first line would be), with the range, and the experiment file's front end
/// gives the same message as the flags'.
#[test]
fn ranges_are_checked_before_the_lab_and_read_alike_from_flags_and_files() {
    const MSS: &str = ": an MSS must be 88..=32767 bytes (what Linux's TCP_MAXSEG takes)";
    const DURATION: &str = ": a test must last longer than 0 s";
    for mss in ["10", "87", "32768", "100000"] {
        let flag = format!("-M/--set-mss {mss}{MSS}");
        assert_one_line_error(&["run", "--path", "rtt 1ms", "-M", mss], 1, &[&flag]);
        assert_one_line_error(&["run", "h", "--set-mss", mss], 1, &[&flag]);
    }
    let flag = format!("-t/--time{DURATION}");
    assert_one_line_error(&["run", "--path", "rtt 1ms", "-t", "0"], 1, &[&flag]);
    assert_one_line_error(
        &["run", "--path", "rtt 1ms", "-n", "0"],
        1,
        &["-n/--bytes: a test must send more than 0 bytes"],
    );
    // The lab's server's own limits, checked before its lab exists.
    assert_one_line_error(
        &["run", "--path", "rtt 1ms", "-l", "32M"],
        1,
        &["write size must be 1 B..=16 MiB"],
    );

    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let mss = file("mss.toml", "path = \"rtt 1ms\"\n[[flow]]\nmss = 10\n");
    assert_one_line_error(
        &["sweep", &mss, "--dry-run"],
        1,
        &[&format!("mss.toml: flow 'flow1': mss 10{MSS}")],
    );
    let axis = file(
        "axis.toml",
        "path = \"rtt 1ms\"\n[[flow]]\n[[axis]]\nkey = \"flow.mss\"\nvalues = [\"1448\", \"32768\"]\n",
    );
    assert_one_line_error(
        &["sweep", &axis, "--dry-run"],
        1,
        &[&format!(
            "at point flow.mss=32768: flow 'flow1': mss 32768{MSS}"
        )],
    );
    let run = file("run.toml", "duration = \"0s\"\n[[flow]]\n");
    assert_one_line_error(
        &["sweep", &run, "--dry-run"],
        1,
        &[&format!("run.toml: duration{DURATION}")],
    );
    let flow = file("flow.toml", "[[flow]]\nduration = \"0s\"\n");
    assert_one_line_error(
        &["sweep", &flow, "--dry-run"],
        1,
        &[&format!("flow.toml: flow 'flow1': duration{DURATION}")],
    );
}

/// iperf3's flags that tcplab spells otherwise get tcplab's spelling.
#[test]
fn iperf3_habits_get_tcplabs_spelling() {
    assert_one_line_error(
        &["run", "-c", "server.example"],
        2,
        &["'-c'", "tcplab run HOST, or HOST:PORT"],
    );
    assert_one_line_error(
        &["--netns", "run", "run", "-c", "h"],
        2,
        &["'-c'", "tcplab run HOST"],
    );
    assert_one_line_error(
        &["run", "h", "-p", "5202"],
        2,
        &["'-p'", "tcplab run HOST:PORT; -P is parallel streams"],
    );
    assert_one_line_error(
        &["serve", "-p", "5202"],
        2,
        &["'-p'", "--listen ADDR:PORT, e.g. --listen [::]:5202"],
    );
    assert_one_line_error(&["serve", "-s"], 2, &["'-s'", "leave out -s"]);
    assert_one_line_error(&["run", "-s"], 2, &["'-s'", "tcplab serve"]);
    // Other unknown flags get clap's line alone.
    let out = tcplab(&["runs", "-c"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tcplab: unexpected argument '-c' found\n"
    );
}

/// Every command that reads a database takes it as `--db FILE`, as `run`, `sweep` and
/// `explain` do, and those that took it as an argument still do; a database where a
/// run id goes gets the flag.
#[test]
fn a_database_is_named_the_same_way_everywhere() {
    let _machine = support::among_others();
    let server = support::LoopbackServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let experiment = server.experiment(dir.path(), 1);
    let db = dir.path().join("lo.db");
    let db = db.to_str().unwrap();
    let sweep = tcplab(&["sweep", experiment.to_str().unwrap(), "--db", db]);
    assert!(sweep.status.success());
    let report = dir.path().join("report");
    let chart = dir.path().join("cwnd.svg");
    for (command, rest) in [
        ("runs", vec![]),
        ("results", vec![]),
        ("export", vec!["--table", "flows"]),
        ("report", vec!["-o", report.to_str().unwrap()]),
        (
            "plot",
            vec![
                "--run",
                "1",
                "--chart",
                "cwnd",
                "-o",
                chart.to_str().unwrap(),
            ],
        ),
    ] {
        for named in [vec![db], vec!["--db", db]] {
            let args: Vec<&str> = [command]
                .into_iter()
                .chain(named)
                .chain(rest.iter().copied())
                .collect();
            let out = tcplab(&args);
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_one_line_error(
            &[command, db, "--db", db],
            2,
            &["'[DB]' cannot be used with '--db <FILE>'"],
        );
    }
    let explained = tcplab(&["explain", "--db", db]);
    assert!(explained.status.success());
    assert_one_line_error(
        &["explain", db],
        2,
        &[&format!(
            "invalid value '{db}' for '[RUN]': a run id is a number; to name a database, write --db {db}"
        )],
    );
    assert_one_line_error(
        &["plot", db, "--run", db, "--chart", "cwnd", "-o", "x.svg"],
        2,
        &[&format!(
            "for '--run <ID>': a run id is a number; to name a database, write --db {db}"
        )],
    );
    assert_one_line_error(
        &["sweep", db],
        1,
        &[&format!(
            "{db} is a database; sweep takes an experiment file (TOML) and names its database with --db: tcplab sweep FILE.toml --db {db}"
        )],
    );
}

#[test]
fn unreachable_peers_and_bad_files_get_a_clear_error() {
    assert_one_line_error(
        &["run", "no-such-host.invalid", "-t", "1s"],
        1,
        &["no-such-host.invalid"],
    );
    // Port 1 on loopback: nothing listens there.
    assert_one_line_error(
        &["run", "127.0.0.1:1", "-t", "1s"],
        1,
        &["127.0.0.1:1", "refused"],
    );
    assert_one_line_error(&["run", "127.0.0.1:99999"], 1, &["99999"]);
    let dir = tempfile::tempdir().unwrap();
    let not_db = dir.path().join("notes.txt");
    std::fs::write(&not_db, "hello, not a database\n").unwrap();
    let not_db = not_db.to_str().unwrap();
    assert_one_line_error(&["runs", not_db], 1, &[not_db, "not an SQLite database"]);
    assert_one_line_error(&["export", "/nonexistent/x.db"], 1, &["/nonexistent/x.db"]);
    let db = dir.path().join("empty.db");
    let db = db.to_str().unwrap();
    assert!(tcplab(&["export", db, "--table", "runs"]).status.code() == Some(1));
    std::fs::File::create(db).unwrap();
    assert_one_line_error(
        &["export", db, "--table", "bogus"],
        1,
        &["'bogus'", "runs, flows, intervals, samples"],
    );
    assert_one_line_error(&["export", db, "--format", "xml"], 1, &["'xml'", "csv"]);
    // A store that cannot be created is reported before any test is spent on it (a
    // missing directory would be made, even /nonexistent as root: below a file).
    let below_a_file = format!("{not_db}/r.db");
    assert_one_line_error(
        &["run", "127.0.0.1:1", "--db", &below_a_file],
        1,
        &[&below_a_file, "is not a directory"],
    );
}

#[test]
fn help_and_version_exit_0() {
    assert!(tcplab(&["--help"]).status.success());
    assert!(tcplab(&["run", "--help"]).status.success());
    let v = tcplab(&["--version"]);
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("tcplab "));
}

/// One registry of a run's charts (`tcplab_report::RunChart`): `plot --help` and the
/// guide's table of charts (docs/reports.md) name exactly its charts.
#[test]
fn plot_help_and_the_guide_name_every_run_chart() {
    let names: Vec<&str> = tcplab_report::RunChart::ALL
        .iter()
        .map(|c| c.name())
        .collect();
    let help = String::from_utf8_lossy(&tcplab(&["plot", "--help"]).stdout).into_owned();
    // clap wraps long help: compare the words.
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains(&names.join(", ")), "{help}");
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/reports.md"
    ))
    .unwrap();
    let mut in_readme: Vec<&str> = readme
        .lines()
        .filter(|l| l.contains("| run |"))
        .flat_map(|l| {
            l.split('|')
                .nth(1)
                .unwrap_or("")
                .split('`')
                .skip(1)
                .step_by(2)
        })
        .collect();
    in_readme.sort_unstable();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(in_readme, sorted, "docs/reports.md's run charts");
}

#[test]
fn a_peer_that_accepts_but_never_answers_is_named_after_the_handshake_timeout() {
    // A listener on loopback that never says a word: not a tcplab server.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let started = std::time::Instant::now();
    assert_one_line_error(&["run", &target, "-t", "1s"], 1, &[&target, "no answer"]);
    let waited = started.elapsed();
    assert!(
        (9..20).contains(&waited.as_secs()),
        "gave up after {waited:?}"
    );
    drop(listener);
}

#[test]
fn bad_experiment_files_and_databases_get_one_line_with_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let bad_unit = file("unit.toml", "name = \"x\"\n[[flow]]\nwindow = \"64Q\"\n");
    assert_one_line_error(
        &["sweep", &bad_unit],
        1,
        &["unit.toml: line 3, column 10", "'64Q'", "unknown unit"],
    );
    let bad_axis = file(
        "axis.toml",
        "[[axis]]\nkey = \"path.rtt\"\nvalues = [\"10ms\", \"fast\"]\n",
    );
    assert_one_line_error(
        &["sweep", &bad_axis, "--dry-run"],
        1,
        &["line 3, column 19", "axis 'path.rtt' value \"fast\""],
    );
    // A relative trace file is the experiment file's, not the working directory's.
    let trace = file(
        "trace.toml",
        "path = \"rtt 40ms up.trace lte.up down.trace lte.down\"\n[[flow]]\n",
    );
    let in_dir = dir.path().join("lte.up").display().to_string();
    assert_one_line_error(
        &["sweep", &trace],
        1,
        &[
            "trace.toml: trace file 'lte.up' as ",
            &in_dir,
            ": No such file",
        ],
    );
    // So is one with a bad line, named before any lab is built.
    std::fs::write(dir.path().join("delays.txt"), "0 20ms\n1s 30\n2s\n").unwrap();
    let bad_line = file(
        "delays.toml",
        "path = \"rtt 40ms delay-trace delays.txt\"\n[[flow]]\n",
    );
    assert_one_line_error(
        &["sweep", &bad_line],
        1,
        &[
            "delays.toml: trace file 'delays.txt' as ",
            "trace line 2: '30': a duration needs a unit",
        ],
    );
    let syntax = file("syntax.toml", "duration = \n");
    assert_one_line_error(&["sweep", &syntax], 1, &["syntax.toml: line 1"]);
    assert_one_line_error(
        &["sweep", "/nonexistent/e.toml"],
        1,
        &["cannot read experiment file /nonexistent/e.toml"],
    );
    let empty_db = dir.path().join("none.db");
    assert_one_line_error(
        &["results", &empty_db.to_string_lossy()],
        1,
        &["no database at"],
    );
    assert_one_line_error(
        &["results", "x.db", "--metric", "speed"],
        2,
        &["unknown metric 'speed'", "throughput"],
    );
    assert_one_line_error(
        &["results", "x.db", "--confidence", "1.5"],
        2,
        &["'1.5' is not between 0 and 1"],
    );
    let empty = empty_db.to_string_lossy();
    assert_one_line_error(
        &["compare", &empty, "x.db"],
        1,
        &["no database at", "none.db"],
    );
    assert_one_line_error(
        &["compare", "a.db", "b.db", "--base-label", "x"],
        2,
        &["--new-label"],
    );
    for (bad, needle) in [
        ("speed:-5%", "unknown metric 'speed'"),
        ("throughput-5%", "is not METRIC:CHANGE%"),
        ("throughput:0%", "a signed percentage other than 0"),
    ] {
        assert_one_line_error(&["compare", "a.db", "b.db", "--fail-on", bad], 2, &[needle]);
    }
}

#[test]
fn report_and_plot_name_what_is_wrong_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let missing = missing.to_string_lossy();
    let out = dir.path().join("out");
    let out = out.to_string_lossy();
    assert_one_line_error(
        &["report", &missing, "-o", &out],
        1,
        &["no database at", "missing.db"],
    );
    assert_one_line_error(
        &["plot", &missing, "--chart", "cwnd", "-o", "x.svg"],
        1,
        &["no database at", "missing.db"],
    );
    assert_one_line_error(
        &["plot", &missing, "--chart", "cwnd", "-o", "x.jpg"],
        1,
        &["cannot tell the format of x.jpg", "FILE.svg or FILE.png"],
    );
    assert_one_line_error(
        &[
            "plot",
            &missing,
            "--run",
            "1",
            "--experiment",
            "2",
            "--chart",
            "cwnd",
            "-o",
            "x.svg",
        ],
        2,
        &["--run", "--experiment"],
    );
    // A database without runs.
    let empty = dir.path().join("empty.db");
    tcplab_store::Store::open(&empty).unwrap();
    let empty = empty.to_string_lossy();
    assert_one_line_error(
        &["report", &empty, "-o", &out],
        1,
        &["empty.db holds no runs"],
    );
    assert_one_line_error(
        &["plot", &empty, "--chart", "cwnd", "-o", "x.png"],
        1,
        &["empty.db holds no runs"],
    );
    assert_one_line_error(
        &[
            "plot",
            &empty,
            "--experiment",
            "3",
            "--chart",
            "rtt",
            "-o",
            "x.png",
        ],
        1,
        &["empty.db has no experiment 3 (it has: none)"],
    );
}

#[test]
fn a_dry_run_lists_every_run_of_the_plan() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    for (name, runs) in [
        ("buffer", 78),
        ("message", 168),
        ("rtt-loss", 240),
        ("pacing", 192),
        ("parallel", 12),
        ("cross-traffic", 12),
        ("rrul", 2),
        ("rrul_be", 2),
        ("tcp_nup", 4),
        ("tcp_ndown", 4),
        ("rtt_fair", 2),
        ("voip", 2),
        ("bufferbloat", 96),
        ("arena", 594),
        ("arena-3flows", 594),
        ("arena-uplink", 198),
        ("txqueue", 54),
    ] {
        let out = tcplab(&["sweep", &format!("{examples}/{name}.toml"), "--dry-run"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(&format!("= {runs} runs")), "{name}: {text}");
        // One line per run after the header of the order.
        let listed = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("run "))
            .skip(1)
            .count();
        assert_eq!(listed, runs, "{name}");
    }
    // The real-hosts example plans without its key files, naming each one missing; the
    // sweep itself stops at the first.
    let hosts = format!("{examples}/hosts.toml");
    let out = tcplab(&["sweep", &hosts, "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("= 72 runs"), "{text}");
    for host in ["near", "far"] {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("real host {host}:")))
            .unwrap_or_else(|| panic!("no line for {host}: {text}"));
        assert!(
            line.contains(&format!("keys/{host}.key: No such file"))
                && line.ends_with("the sweep needs it"),
            "{line}"
        );
    }
    assert_one_line_error(
        &["sweep", &hosts, "--db", "/nonexistent/h.db"],
        1,
        &["hosts.toml: host 'near': key file ", "keys/near.key"],
    );
}

/// A sharded dry run lists its part of the plan, each run at its place in the whole
/// plan, ordered by the seed every shard derives alike (the file gives none): the parts
/// are disjoint and together the plan.
#[test]
fn a_sharded_dry_run_lists_its_part_of_the_plan() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/quick/buffer.toml"
    );
    let mut places = Vec::new();
    let mut runs = Vec::new();
    let mut orders = std::collections::BTreeSet::new();
    for k in 1..=4 {
        let out = tcplab(&["sweep", file, "--dry-run", "--shard", &format!("{k}/4")]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let rows = support::dry_run_rows(&text);
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains(&format!("= 6 runs; shard {k}/4: {} run", rows.len())),
            "{text}"
        );
        let order = text
            .lines()
            .find(|l| l.trim_start().starts_with("order ("))
            .unwrap();
        assert!(order.contains("from the plan's hash"), "{text}");
        orders.insert(order.to_owned());
        for row in rows {
            assert_eq!((row.place - 1) % 4, k - 1, "{text}");
            places.push(row.place);
            runs.push((row.point, row.repetition));
        }
    }
    assert_eq!(orders.len(), 1, "one seed for every shard: {orders:?}");
    places.sort();
    assert_eq!(places, (1..=6).collect::<Vec<_>>());
    runs.sort();
    assert_eq!(runs, (0..6).map(|p| (p, 1)).collect::<Vec<_>>());
}

/// Completions, the manual page and the grammar come from the binary itself.
#[test]
fn completions_the_manual_and_the_grammar_print() {
    for (args, expected) in [
        (&["completions", "bash"][..], "_tcplab()"),
        (&["completions", "zsh"][..], "#compdef tcplab"),
        (&["completions", "fish"][..], "complete -c tcplab"),
        (&["man"][..], ".TH tcplab 1"),
        (&["path-spec"][..], "pace cwnd"),
    ] {
        let out = tcplab(args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(expected), "{args:?}: {text}");
    }
    let out = tcplab(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

/// The commands below `path` as `--help` lists them (clap's own view, not the manual's).
fn commands_in_help(path: &[String]) -> Vec<String> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let help = String::from_utf8(tcplab(&args).stdout).unwrap();
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The options `--help` lists for a command: `--long` names, and `-s` where there is
/// no long one.
fn options_in_help(path: &[String]) -> Vec<String> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let help = String::from_utf8(tcplab(&args).stdout).unwrap();
    help.lines()
        .filter_map(|l| {
            let first = l.trim_start().split([' ', ',']).next()?;
            let long = l.split_whitespace().find(|w| w.starts_with("--"));
            first.starts_with('-').then(|| {
                long.unwrap_or(first)
                    .trim_end_matches(',')
                    .split(['=', '<'])
                    .next()
                    .unwrap()
                    .to_owned()
            })
        })
        .collect()
}

/// `tcplab man --dir` writes a page for tcplab and every command at every depth that
/// `--help` lists, no other; each renders (with `man` where installed: no warnings)
/// and documents every option its `--help` shows; `tcplab man lab up` prints one page;
/// no `--help` line is wider than 100 columns.
#[test]
fn every_command_has_a_manual_page_that_renders() {
    let dir = tempfile::tempdir().unwrap();
    let out = tcplab(&["man", "--dir", &dir.path().to_string_lossy()]);
    assert!(out.status.success(), "{out:?}");
    let mut expected = vec![vec![]];
    let mut pending = vec![vec![]];
    while let Some(path) = pending.pop() {
        for name in commands_in_help(&path) {
            let mut sub = path.clone();
            sub.push(name);
            expected.push(sub.clone());
            pending.push(sub);
        }
    }
    assert!(expected.len() > 20, "{expected:?}");
    let page_name = |path: &[String]| {
        std::iter::once("tcplab")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("-")
    };
    let mut written: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let mut wanted: Vec<String> = expected
        .iter()
        .map(|p| format!("{}.1", page_name(p)))
        .collect();
    wanted.sort();
    assert_eq!(written, wanted);
    let man = Command::new("man").arg("--version").output().is_ok();
    for path in &expected {
        let name = page_name(path);
        let file = dir.path().join(format!("{name}.1"));
        let roff = std::fs::read_to_string(&file).unwrap();
        assert!(
            roff.contains(&format!(".TH {name} 1"))
                && roff.contains(".SH NAME")
                && roff.contains(".SH SYNOPSIS"),
            "{name}: {roff}"
        );
        let text = if man {
            let rendered = Command::new("man")
                .args(["--warnings", "-l"])
                .arg(&file)
                .env("MANWIDTH", "80")
                .output()
                .unwrap();
            let warnings = String::from_utf8_lossy(&rendered.stderr);
            assert!(
                rendered.status.success() && warnings.trim().is_empty(),
                "{name}: {warnings}"
            );
            String::from_utf8(rendered.stdout).unwrap()
        } else {
            roff.replace("\\-", "-")
                .replace("\\fB", "")
                .replace("\\fR", "")
        };
        for option in options_in_help(path) {
            assert!(text.contains(&option), "{name} lacks {option}: {text}");
        }
        // The page of the command above names this one.
        if let Some((_, parent)) = path.split_last() {
            let above =
                std::fs::read_to_string(dir.path().join(format!("{}.1", page_name(parent))))
                    .unwrap();
            assert!(above.contains(&name.replace('-', "\\-")), "{name}");
        }
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = String::from_utf8(tcplab(&args).stdout).unwrap();
        for line in help.lines() {
            assert!(line.chars().count() <= 100, "{name} --help: {line}");
        }
    }
    let one = tcplab(&["man", "lab", "up"]);
    assert!(one.status.success());
    assert_eq!(
        String::from_utf8(one.stdout).unwrap(),
        std::fs::read_to_string(dir.path().join("tcplab-lab-up.1")).unwrap()
    );
    assert_one_line_error(
        &["man", "lab", "upp"],
        1,
        &["'tcplab lab' has no command 'upp'"],
    );
}

#[test]
fn counts_of_one_are_singular() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one.toml");
    std::fs::write(
        &file,
        "name = \"one\"\nrepetitions = 1\nduration = \"1s\"\npath = \"rtt 10ms\"\n\
         [[flow]]\n[[axis]]\nkey = \"path.rtt\"\nvalues = [\"20ms\"]\n",
    )
    .unwrap();
    let db = dir.path().join("none.db");
    let out = tcplab(&[
        "sweep",
        file.to_str().unwrap(),
        "--dry-run",
        "--db",
        db.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(": 1 point × 1 repetition = 1 run, about "),
        "{text}"
    );
    assert!(text.contains("  axis path.rtt: 1 value: 20ms"), "{text}");
    assert_one_line_error(
        &[
            "run",
            "--path",
            "rtt 1ms",
            "--clients",
            "1",
            "--client-path",
            "rtt 1ms",
            "--client-path",
            "rtt 2ms",
        ],
        1,
        &["--client-path given 2 times for 1 client:"],
    );
}
