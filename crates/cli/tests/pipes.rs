//! A closed pipe loses nothing: every command stops printing quietly when its reader is
//! gone (`| head -1`) and still does its work — a test still runs and is stored, a lab
//! still comes up. Commands whose stdout is a pipe with its reading end already closed
//! meet EPIPE on their first write, whatever they print; the lab run goes through a
//! real shell pipeline into `head -1`.

use crate::support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::{stderr, tcplab, LoopbackServer};

/// Runs `cmd` with its standard output a pipe nobody reads any more.
fn with_closed_stdout(cmd: &mut Command) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    cmd.stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("running tcplab")
}

/// The runs `tcplab runs DB` lists, as (id, status).
fn stored_runs(db: &Path) -> Vec<(String, String)> {
    let out = tcplab().arg("runs").arg(db).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields[0].to_owned(), fields[2].to_owned())
        })
        .collect()
}

#[test]
fn every_command_stops_printing_quietly_on_a_closed_pipe_and_does_its_work() {
    // Heavy, yet among others: exact checks, and no test alone runs beside it.
    let _machine = support::among_others();
    let server = LoopbackServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pipe.db");
    let db_arg = db.to_str().unwrap();

    // A test whose live lines, summary and explanation meet a closed pipe: it runs to
    // its end and is stored, as text and as JSON.
    for json in [false, true] {
        let mut client = server.client(&["-t", "1.2s", "-i", "0.2s", "--db", db_arg]);
        if json {
            client.arg("--json");
        }
        let out = with_closed_stdout(&mut client);
        assert!(out.status.success(), "json {json}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "json {json}: nothing to say");
    }
    assert_eq!(
        stored_runs(&db),
        [("1".into(), "done".into()), ("2".into(), "done".into())]
    );

    // A sweep stores every run of its plan.
    let experiment = server.experiment(dir.path(), 2);
    let sweep_db = dir.path().join("lo.db");
    let out = with_closed_stdout(tcplab().args([
        "sweep",
        experiment.to_str().unwrap(),
        "--db",
        sweep_db.to_str().unwrap(),
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    assert_eq!(stored_runs(&sweep_db).len(), 2);

    // Commands that only print.
    let report = dir.path().join("report");
    let chart = dir.path().join("cwnd.svg");
    for args in [
        vec!["runs", db_arg],
        vec!["export", db_arg, "--table", "samples"],
        vec!["export", db_arg, "--table", "samples", "--format", "jsonl"],
        vec!["explain", "--db", db_arg],
        vec!["explain", "--db", db_arg, "--json"],
        vec!["results", sweep_db.to_str().unwrap()],
        vec!["results", sweep_db.to_str().unwrap(), "--json"],
        vec![
            "compare",
            sweep_db.to_str().unwrap(),
            sweep_db.to_str().unwrap(),
        ],
        vec!["report", db_arg, "-o", report.to_str().unwrap()],
        vec![
            "plot",
            db_arg,
            "--run",
            "1",
            "--chart",
            "cwnd",
            "-o",
            chart.to_str().unwrap(),
        ],
        vec!["sweep", experiment.to_str().unwrap(), "--dry-run"],
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["man"],
        vec!["path-spec"],
        vec!["lab", "list"],
        vec!["--help"],
    ] {
        let out = with_closed_stdout(tcplab().args(&args));
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
    // Their files were written all the same.
    assert!(report.join("index.html").exists() && chart.exists());
}

#[test]
fn a_failure_to_write_stdout_is_said_once_and_fails_the_command() {
    let _machine = support::among_others();
    let server = LoopbackServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full.db");
    let out = server
        .client(&["-t", "0.3s", "--db", db.to_str().unwrap()])
        .stdout(
            std::fs::File::options()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        "tcplab: cannot write to standard output: No space left on device (os error 28); \
         what followed was not printed\n"
    );
    // What was measured was stored all the same.
    assert_eq!(stored_runs(&db), [("1".into(), "done".into())]);
}

/// The bar: a lab run piped into `head -1` exits without a panic and is stored.
#[test]
fn a_lab_run_piped_into_head_is_stored() {
    if !tcplab_sys::netns::privileged_or_skip("a lab run piped into head") {
        return;
    }
    // Heavy, yet among others: exact checks, and no test alone runs beside it.
    let _machine = support::among_others();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .args([
            "-c",
            "\"$TCPLAB\" run --path 'rtt 10ms' -t 2s --db p.db | head -1; \
             exit ${PIPESTATUS[0]}",
        ])
        .env("TCPLAB", env!("CARGO_BIN_EXE_tcplab"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.starts_with("lab run"), "{stdout}");
    assert_eq!(
        stored_runs(&dir.path().join("p.db")),
        [("1".into(), "done".into())]
    );
}

/// `lab up` piped into `head -1`: the lab is up all the same, and goes down.
#[test]
fn a_lab_brought_up_into_a_closed_pipe_is_up() {
    if !tcplab_sys::netns::privileged_or_skip("lab up into a closed pipe") {
        return;
    }
    let _machine = support::among_others();
    let name = format!("tlpipe{}", std::process::id() % 100_000);
    let up = with_closed_stdout(tcplab().args(["lab", "up", &name, "--path", "rtt 1ms"]));
    let show = with_closed_stdout(tcplab().args(["lab", "show", &name]));
    let down = tcplab().args(["lab", "down", &name]).output().unwrap();
    assert!(up.status.success(), "{}", stderr(&up));
    assert_eq!(stderr(&up), "");
    assert!(show.status.success(), "{}", stderr(&show));
    assert!(down.status.success(), "{}", stderr(&down));
}

/// Whether SIGPIPE is ignored in the process `pid`, from its SigIgn mask.
fn sigpipe_ignored(status: &str) -> bool {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .expect("a SigIgn line");
    mask & (1 << (libc::SIGPIPE - 1)) != 0
}

/// The lab daemon ignores SIGPIPE (a client that hangs up is an EPIPE it survives),
/// while the commands tcplab starts get the default back, as from any shell.
#[test]
fn the_daemon_ignores_sigpipe_and_the_commands_it_runs_do_not() {
    if !tcplab_sys::netns::privileged_or_skip("SIGPIPE's disposition") {
        return;
    }
    let _machine = support::among_others();
    let name = format!("tlsig{}", std::process::id() % 100_000);
    let up = tcplab()
        .args(["lab", "up", &name, "--path", "rtt 1ms"])
        .output()
        .unwrap();
    let list = tcplab().args(["lab", "list", "--json"]).output().unwrap();
    let exec = tcplab()
        .args([
            "lab",
            "exec",
            &name,
            "client",
            "--",
            "cat",
            "/proc/self/status",
        ])
        .output()
        .unwrap();
    let labs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap_or_default();
    let daemon = labs
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["lab"]["name"] == name.as_str())
        .and_then(|l| l["lab"]["pid"].as_u64());
    let daemon_status = daemon.map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")));
    let down = tcplab().args(["lab", "down", &name]).output().unwrap();
    assert!(up.status.success(), "{}", stderr(&up));
    assert!(down.status.success(), "{}", stderr(&down));
    assert!(sigpipe_ignored(
        &daemon_status.expect("the lab's daemon").unwrap()
    ));
    assert!(exec.status.success(), "{}", stderr(&exec));
    assert!(!sigpipe_ignored(&String::from_utf8_lossy(&exec.stdout)));

    let shell = tcplab()
        .args([
            "shell",
            "--path",
            "rtt 1ms",
            "--",
            "cat",
            "/proc/self/status",
        ])
        .output()
        .unwrap();
    assert!(shell.status.success(), "{}", stderr(&shell));
    assert!(!sigpipe_ignored(&String::from_utf8_lossy(&shell.stdout)));
}
