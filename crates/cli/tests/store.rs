//! Nothing measured is lost to a database: a read-only file is read without a write, a
//! database that cannot be written is refused before the test, and a run it refuses
//! after the test is printed and kept as JSON beside it. Tests on loopback, without
//! privileges; as root, the commands that meet a read-only file run as user nobody
//! (root may write any file).

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use support::{failure, parse_success, stderr, LoopbackServer};

/// `tcplab ARGS…` as a user who may not write what is not theirs: nobody, when the
/// tests run as root.
fn tcplab_unprivileged(args: &[&str]) -> Output {
    let bin = env!("CARGO_BIN_EXE_tcplab");
    // SAFETY: geteuid cannot fail.
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
        c
    } else {
        Command::new(bin)
    };
    cmd.args(args).output().expect("running tcplab")
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A database whose every insert into `runs` fails, as one on a full disk would, after
/// it has been opened and checked writable.
fn refusing_runs(db: &Path) {
    drop(tcplab_store::Store::open(db).unwrap());
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER refuse BEFORE INSERT ON runs \
         BEGIN SELECT RAISE(ABORT, 'no room (test)'); END;",
    )
    .unwrap();
}

/// The JSON file a line names after "it is kept in ".
fn kept_file(line: &str) -> PathBuf {
    let (_, rest) = line
        .split_once("it is kept in ")
        .unwrap_or_else(|| panic!("no kept file in {line}"));
    PathBuf::from(rest.split(';').next().unwrap().trim())
}

#[test]
fn a_read_only_database_is_read_and_never_written() {
    let _machine = support::among_others();
    let server = LoopbackServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ro.db");
    let db_arg = db.to_str().unwrap();
    let experiment = server.experiment(dir.path(), 2);
    let sweep = support::tcplab()
        .args(["sweep", experiment.to_str().unwrap(), "--db", db_arg])
        .output()
        .unwrap();
    assert!(sweep.status.success(), "{}", stderr(&sweep));
    parse_success(&server.run(&["-t", "0.3s", "--json", "--db", db_arg]));
    std::fs::remove_file(dir.path().join("ro.db.lock")).unwrap();
    // What the commands write goes elsewhere.
    let out = tempfile::tempdir().unwrap();
    chmod(out.path(), 0o777);
    let report = out.path().join("report");
    let chart = out.path().join("cwnd.svg");
    chmod(&db, 0o444);
    let before = std::fs::read(&db).unwrap();
    // The file read-only in a directory that is too (SQLite cannot even make its -shm
    // there), then in one it may write.
    for (dir_mode, why) in [
        (0o555, "its directory is not writable"),
        (0o777, "the file is read-only"),
    ] {
        chmod(dir.path(), dir_mode);
        for args in [
            vec!["runs", db_arg],
            vec!["results", db_arg],
            vec!["export", db_arg, "--table", "samples"],
            vec!["report", db_arg, "-o", report.to_str().unwrap()],
            vec!["explain", "--db", db_arg],
            vec![
                "plot",
                db_arg,
                "--run",
                "3",
                "--chart",
                "cwnd",
                "-o",
                chart.to_str().unwrap(),
            ],
            vec![
                "sweep",
                experiment.to_str().unwrap(),
                "--db",
                db_arg,
                "--dry-run",
            ],
        ] {
            let o = tcplab_unprivileged(&args);
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        }
        assert!(report.join("index.html").exists() && chart.exists());
        std::fs::remove_dir_all(&report).unwrap();
        std::fs::remove_file(&chart).unwrap();
        assert!(
            std::fs::read(&db).unwrap() == before,
            "a read wrote the file"
        );

        // A test is not spent on a database it could not be stored in: refused at once.
        let tests_before = server.log().matches("test done").count();
        let refused = tcplab_unprivileged(&[
            "run",
            &server.addr.to_string(),
            "-t",
            "0.3s",
            "--db",
            db_arg,
        ]);
        let line = failure(&refused);
        assert!(
            line.contains(&format!("{db_arg}: cannot be written: {why}")),
            "{line}"
        );
        assert!(refused.stdout.is_empty());
        assert_eq!(server.log().matches("test done").count(), tests_before);
    }

    // A report that cannot be written says why once.
    chmod(out.path(), 0o555);
    let line = failure(&tcplab_unprivileged(&[
        "report",
        db_arg,
        "-o",
        report.to_str().unwrap(),
    ]));
    assert!(
        line.ends_with(&format!(
            "cannot write {}: Permission denied (os error 13)",
            report.display()
        )),
        "{line}"
    );
    chmod(out.path(), 0o777);

    // A database from an older tcplab cannot be migrated here: one line says what to do.
    chmod(dir.path(), 0o755);
    chmod(&db, 0o644);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    conn.pragma_update(None, "user_version", version - 1)
        .unwrap();
    drop(conn);
    chmod(&db, 0o444);
    chmod(dir.path(), 0o555);
    let line = failure(&tcplab_unprivileged(&["runs", db_arg]));
    assert!(
        line.contains(&format!(
            "schema version {} is older than this tcplab's ({version})",
            version - 1
        )) && line.contains("open it once where it can"),
        "{line}"
    );
    chmod(dir.path(), 0o755);
}

#[test]
fn a_run_the_database_refuses_is_printed_and_kept_beside_it() {
    let _machine = support::among_others();
    let server = LoopbackServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full.db");
    refusing_runs(&db);
    let db_arg = db.to_str().unwrap();
    for json in [false, true] {
        let mut args = vec!["-t", "0.5s", "--db", db_arg];
        if json {
            args.push("--json");
        }
        let out = server.run(&args);
        let line = failure(&out);
        assert!(
            line.contains("the run was not stored (")
                && line.contains("no room (test)")
                && line.matches("no room (test)").count() == 1,
            "{line}"
        );
        let kept = kept_file(&line);
        assert_eq!(kept.parent(), Some(dir.path()), "beside the database");
        let name = kept.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("full.db.run-") && name.ends_with(".json"),
            "{name}"
        );
        let record: Value = serde_json::from_str(&std::fs::read_to_string(&kept).unwrap()).unwrap();
        assert_eq!(record["status"], "done");
        assert!(
            !record["samples"].as_array().unwrap().is_empty(),
            "samples kept"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        if json {
            // What was printed is what was kept, less the samples.
            let mut printed: Value = serde_json::from_str(&stdout).unwrap();
            let mut kept_record = record.clone();
            kept_record["samples"] = Value::Array(Vec::new());
            printed["samples"] = Value::Array(Vec::new());
            assert_eq!(printed, kept_record);
        } else {
            // The summary is printed all the same.
            let sent = record["summary"]["sent_bytes"].as_u64().unwrap();
            assert!(sent > 0 && stdout.contains("sender"), "{stdout}");
        }
        std::fs::remove_file(kept).unwrap();
    }
}

#[test]
fn a_sweep_whose_database_refuses_a_run_keeps_it_stops_and_resumes() {
    let _machine = support::among_others();
    let server = LoopbackServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sweep.db");
    refusing_runs(&db);
    let experiment = server.experiment(dir.path(), 2);
    let sweep = || {
        support::tcplab()
            .args([
                "sweep",
                experiment.to_str().unwrap(),
                "--db",
                db.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    let out = sweep();
    let line = failure(&out);
    assert!(
        line.contains("run 1 of 2: the run was not stored (")
            && line.contains("no room (test)")
            && line.ends_with("the sweep stopped (the same command resumes it)"),
        "{line}"
    );
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(kept_file(&line)).unwrap()).unwrap();
    assert_eq!(record["status"], "done");
    // Room again: the same command runs both, none lost, none twice.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("DROP TRIGGER refuse").unwrap();
    drop(conn);
    let out = sweep();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains("resuming: 0 done, 0 failed, 2 to run"),
        "{text}"
    );
    let store = tcplab_store::Store::open_to_read(&db).unwrap();
    assert_eq!(store.list_runs().unwrap().len(), 2);
}

#[test]
fn quickstart_keeps_a_refused_run_and_its_report_stays_out_of_git() {
    if !tcplab_sys::netns::privileged_or_skip("quickstart") {
        return;
    }
    // Heavy, yet among others: exact checks, and no test alone runs beside it.
    let _machine = support::among_others();
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("running git");
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q"]);
    let quickstart = |args: &[&str]| {
        support::tcplab()
            .arg("quickstart")
            .args(["-t", "1"])
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = quickstart(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir
        .path()
        .join("tcplab-quickstart-report/index.html")
        .exists());
    // git's own view: the data is there to keep, the regenerated report is not.
    assert_eq!(
        git(&["status", "--porcelain", "--untracked-files=all"]),
        "?? tcplab-quickstart.db\n"
    );

    let full = dir.path().join("full.db");
    refusing_runs(&full);
    let out = quickstart(&["--db", "full.db"]);
    let line = failure(&out);
    let kept = dir.path().join(kept_file(&line));
    assert!(line.contains("no room (test)"), "{line}");
    let record: Value = serde_json::from_str(&std::fs::read_to_string(&kept).unwrap()).unwrap();
    assert_eq!(record["status"], "done");
    assert!(String::from_utf8_lossy(&out.stdout).contains("why (tcplab explain)"));
}

/// What stands in the way of a database is named, before SQLite's own words ("unable to
/// open database file", "disk I/O error") and before a test is spent: a directory, a
/// file that may not be read, a missing directory, a directory that may not be written.
#[test]
fn a_database_that_cannot_be_used_is_refused_naming_the_cause() {
    let _machine = support::among_others();
    let server = LoopbackServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let target = server.addr.to_string();
    let experiment = server.experiment(dir.path(), 1);
    let experiment = experiment.to_str().unwrap();
    let tests_before = server.log().matches("test done").count();

    let folder = dir.path().join("folder.db");
    std::fs::create_dir(&folder).unwrap();
    // A file where the database's directory would go: nothing can make that directory.
    let file = dir.path().join("results");
    std::fs::write(&file, "").unwrap();
    let missing = dir.path().join("results/x.db");
    for (db, why) in [
        (&folder, "is a directory, not a database file".to_string()),
        (
            &missing,
            format!("cannot be created: {} is not a directory", file.display()),
        ),
    ] {
        let db = db.to_str().unwrap();
        let expected = format!("tcplab: {db}: {why}");
        let mut commands = vec![
            vec!["run", &target, "-t", "0.3s", "--db", db],
            vec!["sweep", experiment, "--db", db],
            vec!["import", experiment, "--db", db],
        ];
        if db == folder.to_str().unwrap() {
            commands.extend([
                vec!["runs", db],
                vec!["results", db],
                vec!["explain", "--db", db],
                vec!["export", db],
            ]);
        }
        for args in commands {
            let out = support::tcplab().args(&args).output().unwrap();
            assert_eq!(failure(&out), expected, "{args:?}");
        }
    }
    assert!(dir.path().join("results").is_file(), "nothing made");

    // Another user's file: its permission, not SQLite's internal URI.
    let unreadable = dir.path().join("unreadable.db");
    drop(tcplab_store::Store::open(&unreadable).unwrap());
    chmod(&unreadable, 0o600);
    if unsafe { libc::geteuid() } == 0 {
        let db = unreadable.to_str().unwrap();
        for args in [
            vec!["runs", db],
            vec!["explain", "--db", db],
            vec!["run", &target, "-t", "0.3s", "--db", db],
        ] {
            let line = failure(&tcplab_unprivileged(&args));
            assert_eq!(
                line,
                format!("tcplab: {db}: cannot be read: Permission denied (os error 13)"),
                "{args:?}"
            );
        }

        // A directory that may not be written: quickstart, whose database goes into the
        // working directory unless told, says so.
        let locked = tempfile::tempdir().unwrap();
        chmod(locked.path(), 0o555);
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_tcplab"))
            .args(["quickstart", "-t", "1"])
            .current_dir(locked.path())
            .output()
            .unwrap();
        assert_eq!(
            failure(&out),
            "tcplab: tcplab-quickstart.db: cannot be created in the current directory: \
             Permission denied (os error 13); quickstart stores its run in the current \
             directory unless given --db FILE somewhere you may write"
        );
    }
    assert_eq!(server.log().matches("test done").count(), tests_before);

    // A directory that is missing is made, as sweep makes a shard's.
    let deeper = dir.path().join("new/deeper/x.db");
    let out = support::tcplab()
        .args([
            "run",
            &target,
            "-t",
            "0.3s",
            "--db",
            deeper.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(deeper.is_file());
}

/// A new database on a full file system fails naming the cause, and leaves no stub that
/// would pass for a database, nor its journal files: a small tmpfs in a mount namespace
/// of the command's own, full or nearly (room for the file, not for its journal).
#[test]
fn a_new_database_on_a_full_disk_leaves_nothing() {
    if !tcplab_sys::netns::privileged_or_skip("a database on a full tmpfs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for pages in [16, 15, 14, 12, 8] {
        let script = format!(
            "mount -t tmpfs -o size=64k none \"$DIR\" && \
             dd if=/dev/zero of=\"$DIR/fill\" bs=4k count={pages} 2>/dev/null; \
             \"$TCPLAB\" run 127.0.0.1:1 -t 1 --db \"$DIR/new.db\"; rc=$?; \
             ls -A \"$DIR\" >&2; exit $rc"
        );
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .env("DIR", dir.path())
            .env("TCPLAB", env!("CARGO_BIN_EXE_tcplab"))
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{pages} pages: {err}");
        let (line, left) = err.split_once('\n').unwrap();
        assert!(
            line.starts_with(&format!("tcplab: {}/new.db: ", dir.path().display()))
                && (line.contains("No space left on device (os error 28)")
                    || line.ends_with("database or disk is full")),
            "{pages} pages: {line}"
        );
        assert_eq!(left, "fill\n", "{pages} pages: what is left");
    }
}

/// A run the database refused is kept as JSON, and the command the message names stores
/// it, once, equal to what was measured.
#[test]
fn a_kept_run_is_stored_by_the_command_its_message_names() {
    let _machine = support::among_others();
    let server = LoopbackServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full.db");
    refusing_runs(&db);
    let line = failure(&server.run(&["-t", "0.5s", "--db", db.to_str().unwrap()]));
    let kept = kept_file(&line);
    let command = format!(
        "`tcplab import {} --db {}` stores it",
        kept.display(),
        db.display()
    );
    assert!(line.ends_with(&command), "{line}");

    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("DROP TRIGGER refuse").unwrap();
    drop(conn);
    let import = || {
        support::tcplab()
            .args([
                "import",
                kept.to_str().unwrap(),
                "--db",
                db.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    let out = import();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("stored {} as run 1 in {}\n", kept.display(), db.display())
    );
    let again = import();
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        format!(
            "{}: {} holds this run already (run 1); not stored again\n",
            kept.display(),
            db.display()
        )
    );
    let store = tcplab_store::Store::open_to_read(&db).unwrap();
    assert_eq!(store.list_runs().unwrap().len(), 1);
    let measured: tcplab_record::RunRecord =
        serde_json::from_str(&std::fs::read_to_string(&kept).unwrap()).unwrap();
    assert_eq!(store.load_run(1).unwrap(), measured);

    // Anything else is refused whole, naming the file.
    let other = dir.path().join("other.json");
    std::fs::write(&other, "{\"schema\": \"x\"}").unwrap();
    let line = failure(
        &support::tcplab()
            .args([
                "import",
                other.to_str().unwrap(),
                "--db",
                db.to_str().unwrap(),
            ])
            .output()
            .unwrap(),
    );
    assert!(
        line.starts_with(&format!(
            "tcplab: {}: not a tcplab run (tcplab.run/1 JSON): missing field",
            other.display()
        )),
        "{line}"
    );
}
