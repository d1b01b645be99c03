//! tcplab without privileges: the representative commands run as user nobody with a
//! private HOME, and afterwards the system is checked for what they could leave — a
//! process of nobody's, a network namespace owned by one of nobody's user namespaces
//! (found through every process; a TUN device lives and dies with its namespace), a
//! registry entry or namespace mark, a name in `ip netns list`. The tests need root
//! only to become nobody.

use crate::support;

use std::collections::BTreeSet;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;
use tcplab_sys::netns::in_ci;

const NOBODY: u32 = 65534;

/// The goodput of a 10 Mbit/s link carrying 1500-byte packets of 1448 bytes of data.
const GOODPUT_10MBIT: f64 = 10e6 * 1448.0 / 1500.0;

/// Whether this machine can run tcplab as nobody: root to switch users, setpriv, and
/// unprivileged user namespaces. Otherwise the test fails in CI and skips elsewhere.
fn nobody_or_skip(test: &str) -> bool {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    let probe = PROBE.get_or_init(|| {
        // SAFETY: plain getter.
        if unsafe { libc::geteuid() } != 0 {
            return Err("becoming user nobody needs root".into());
        }
        let out = as_nobody(Path::new("/"))
            .args(["unshare", "-Ur", "true"])
            .output()
            .map_err(|e| format!("cannot run setpriv (util-linux): {e}"))?;
        match out.status.success() {
            true => Ok(()),
            false => Err(format!(
                "nobody cannot create a user namespace: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    });
    match probe {
        Ok(()) => true,
        Err(reason) if in_ci() => panic!("{test}: CI must allow it: {reason}"),
        Err(reason) => {
            eprintln!("SKIP {test}: {reason}");
            false
        }
    }
}

/// `setpriv` to nobody with an empty environment but PATH, in `dir`.
fn as_nobody(dir: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .current_dir(dir);
    cmd
}

/// Where nobody's runtime directory is.
#[derive(Clone, Copy, PartialEq)]
enum Runtime {
    /// `XDG_RUNTIME_DIR` set to a directory of nobody's.
    Xdg,
    /// Unset: tcplab falls back to /tmp/tcplab-65534.
    Fallback,
}

/// User nobody with a private HOME (a directory of nobody's, mode 0700), and what was
/// on the system before it ran anything.
struct Nobody {
    home: tempfile::TempDir,
    bin: PathBuf,
    runtime: Runtime,
    before: Snapshot,
    _machine: Machine,
}

impl Nobody {
    fn new(runtime: Runtime) -> Nobody {
        // Alone: each checks that nothing new is in `ip netns list` or among nobody's
        // processes, which any other lab or test as nobody would add.
        let machine = alone();
        let home = tempfile::tempdir().unwrap();
        let own = |path: &Path| {
            std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
            fs::set_permissions(path, fs::Permissions::from_mode(0o700)).unwrap();
        };
        own(home.path());
        if runtime == Runtime::Xdg {
            fs::create_dir(home.path().join("run")).unwrap();
            own(&home.path().join("run"));
        }
        let mut nobody = Nobody {
            bin: PathBuf::from(env!("CARGO_BIN_EXE_tcplab")),
            home,
            runtime,
            before: Snapshot::take(),
            _machine: machine,
        };
        // Nobody must reach the binary: through a target directory it may traverse, or
        // a copy.
        let reachable = as_nobody(nobody.home())
            .arg("test")
            .arg("-x")
            .arg(&nobody.bin)
            .status()
            .unwrap()
            .success();
        if !reachable {
            let copy = nobody.home().join("tcplab");
            fs::copy(&nobody.bin, &copy).unwrap();
            fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
            nobody.bin = copy;
        }
        nobody
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    /// `tcplab ARGS…` as nobody, in HOME.
    fn tcplab(&self, args: &[&str]) -> Command {
        let mut cmd = as_nobody(self.home());
        cmd.arg(&self.bin).args(args).env("HOME", self.home());
        if self.runtime == Runtime::Xdg {
            cmd.env("XDG_RUNTIME_DIR", self.home().join("run"));
        }
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.tcplab(args)
            .output()
            .expect("running tcplab as nobody")
    }

    /// Runs and asserts success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_success(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A table of a database of nobody's, read as nobody (root would leave files of
    /// root's beside it).
    fn export(&self, db: &str, table: &str) -> Vec<Value> {
        self.ok(&["export", db, "--table", table, "--format", "jsonl"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Where tcplab keeps nobody's state.
    fn state_dir(&self) -> PathBuf {
        match self.runtime {
            Runtime::Xdg => self.home().join("run/tcplab"),
            Runtime::Fallback => std::env::temp_dir().join("tcplab-65534"),
        }
    }

    /// Asserts that nothing nobody ran is left, waiting briefly for processes that are
    /// still exiting.
    fn assert_nothing_left(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut now = Snapshot::take();
        while !now.new_since(&self.before).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            now = Snapshot::take();
        }
        let left = now.new_since(&self.before);
        assert!(left.is_empty(), "left behind: {left:?}");
        let state = self.state_dir();
        for sub in ["labs", "netns", "mnt"] {
            let entries: Vec<String> = match fs::read_dir(state.join(sub)) {
                Ok(dir) => dir
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect(),
                Err(_) => Vec::new(),
            };
            assert!(
                entries.is_empty(),
                "{} holds {entries:?}",
                state.join(sub).display()
            );
        }
    }
}

/// What nobody could leave on the system, as root sees it.
#[derive(Debug, PartialEq)]
struct Snapshot {
    /// Live (not zombie) processes of nobody's.
    processes: BTreeSet<u32>,
    /// Network namespaces (inodes) whose user namespace nobody owns, from every process.
    namespaces: BTreeSet<u64>,
    /// `ip netns list`.
    ip_netns: BTreeSet<String>,
}

impl Snapshot {
    fn take() -> Snapshot {
        let mut processes = BTreeSet::new();
        let mut namespaces = BTreeSet::new();
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Some(ns) = net_ns_owned_by(pid, NOBODY) {
                namespaces.insert(ns);
            }
            let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
                continue;
            };
            let field = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            };
            let uid = field("Uid:").split_whitespace().next().map(str::to_owned);
            if uid.as_deref() == Some("65534") && !field("State:").starts_with('Z') {
                processes.insert(pid);
            }
        }
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let ip_netns = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect();
        Snapshot {
            processes,
            namespaces,
            ip_netns,
        }
    }

    /// What this snapshot holds that `before` did not, by kind.
    fn new_since(&self, before: &Snapshot) -> Vec<String> {
        let mut new = Vec::new();
        for pid in self.processes.difference(&before.processes) {
            let cmd = fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            new.push(format!("process {pid} ({})", cmd.replace('\0', " ").trim()));
        }
        for ns in self.namespaces.difference(&before.namespaces) {
            new.push(format!("network namespace net:[{ns}] of nobody's"));
        }
        for name in self.ip_netns.difference(&before.ip_netns) {
            new.push(format!("ip netns {name}"));
        }
        new
    }
}

/// The inode of process `pid`'s network namespace if user `uid` owns the user namespace
/// that owns it (ioctl NS_GET_USERNS, NS_GET_OWNER_UID; see ioctl_ns(2)).
fn net_ns_owned_by(pid: u32, uid: u32) -> Option<u64> {
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    const NS_GET_OWNER_UID: libc::c_ulong = 0xb704;
    let net = fs::File::open(format!("/proc/{pid}/ns/net")).ok()?;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor.
    let user = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) };
    if user < 0 {
        return None;
    }
    let mut owner: libc::uid_t = 0;
    // SAFETY: NS_GET_OWNER_UID writes one uid_t; `user` is ours to close.
    let ok = unsafe { libc::ioctl(user, NS_GET_OWNER_UID, &mut owner) } == 0;
    // SAFETY: closing the descriptor NS_GET_USERNS gave us.
    unsafe { libc::close(user) };
    (ok && owner == uid).then(|| net.metadata().ok().map(|m| m.ino()))?
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The bar: as nobody, `quickstart -t 2` stores a run and writes its report, and a run
/// across a lossy path succeeds; nothing is left afterwards.
#[test]
fn quickstart_and_a_lossy_run_as_nobody_leave_nothing() {
    if !nobody_or_skip("rootless_quickstart") {
        return;
    }
    let nobody = Nobody::new(Runtime::Xdg);
    let said = nobody.ok(&["quickstart", "-t", "2"]);
    assert!(
        said.contains("report: tcplab-quickstart-report/index.html"),
        "{said}"
    );
    let db = nobody.home().join("tcplab-quickstart.db");
    assert_eq!(
        fs::metadata(&db).unwrap().uid(),
        NOBODY,
        "the user's own file"
    );
    let runs = nobody.export("tcplab-quickstart.db", "runs");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "done");
    let page = nobody.home().join("tcplab-quickstart-report/index.html");
    assert!(
        fs::metadata(&page).unwrap().len() > 10_000,
        "a report with charts"
    );
    // Without root the emulator cannot have real-time priority, and says so.
    assert!(
        said.contains("note: the emulator runs at normal priority"),
        "{said}"
    );

    let out = nobody.run(&[
        "run",
        "--path",
        "rtt 10ms loss 1%",
        "-t",
        "2s",
        "--json",
        "--trace-events",
    ]);
    let run = parse_success(&out);
    assert_eq!(str_at(&run, "/status"), "done");
    // Kernel events are root's (tracefs): the run goes on and says why it has none.
    assert_eq!(run["trace"]["taken"], false);
    assert_eq!(
        str_at(&run, "/trace/note"),
        "kernel events need root (tracefs); not taken"
    );
    let link = &run["path"]["up"]["links"][0];
    let (sent, lost) = (u64_at(link, "/packets_in"), u64_at(link, "/dropped_loss"));
    // Within five standard deviations of 1 % (the loss model's own 99 % tests are in
    // paths.rs; here a test must not fail one run in a hundred).
    let (mean, sd) = (sent as f64 * 0.01, (sent as f64 * 0.01 * 0.99).sqrt());
    assert!(
        (lost as f64 - mean).abs() <= 5.0 * sd,
        "{lost} of {sent} packets lost, 1 % expected ({mean:.0} ± {:.0})",
        5.0 * sd
    );
    // Every data segment the path dropped, the kernel retransmitted (its own count),
    // but for a few drops of the control connection (its messages, and its ACKs of the
    // server's reports and samples, cross the lossy path too) and those of the last
    // flight when the drain limit reset the connection: 10 and 1 % of the drops are
    // allowed (a CI run: 1354 retransmits for 1365 drops).
    let retransmits = u64_at(&run, "/flows/0/retransmits");
    let mss = u64_at(&run, "/flows/0/mss").max(1);
    let cut = run["flows"][0]["timed"]["unacked_bytes"]
        .as_u64()
        .unwrap_or(0)
        .div_ceil(mss);
    assert!(
        retransmits + 10 + lost / 100 + cut >= lost,
        "{retransmits} retransmits for {lost} drops ({cut} segments cut at the drain limit)"
    );
    assert_eq!(run["path"]["up"]["realtime"], false);
    assert_eq!(run["path"]["up"]["cpus_awake"], false);
    nobody.assert_nothing_left();
}

/// `lab up/list/show/exec/down/gc` and `--netns` as nobody (runtime directory unset):
/// the hosts are reached through tcplab, ping sees the path's RTT, root's registry
/// does not show the lab, and a killed daemon's leftover goes with `lab gc`.
#[test]
fn labs_up_exec_down_and_gc_as_nobody() {
    if !nobody_or_skip("rootless_labs") {
        return;
    }
    let nobody = Nobody::new(Runtime::Fallback);
    let name = lab_name("nb", 1);
    let said = nobody.ok(&["lab", "up", &name, "--path", "rtt 20ms rate 100mbit"]);
    assert!(said.contains(&format!("lab {name} up")), "{said}");
    let listed = parse_success(&nobody.run(&["lab", "list", "--json"]));
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["lab"]["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{name} not in {listed}"));
    assert_eq!(entry["alive"], true);
    // Another user's labs are invisible: root's registry does not have it.
    let roots = parse_success(&tcplab().args(["lab", "list", "--json"]).output().unwrap());
    assert!(roots
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["lab"]["name"] != name.as_str()));

    let text = nobody.ok(&[
        "lab",
        "exec",
        &name,
        "client",
        "--",
        "ping",
        "-c",
        "5",
        "-i",
        "0.2",
        "10.77.0.1",
    ]);
    let [min_ms, ..] = ping_summary(&text).2.expect("ping replies");
    // No shorter than the delay lines: the lab takes nothing off, and its own time at
    // normal priority under load can be most of a millisecond.
    assert!((20.0..21.0).contains(&min_ms), "min RTT {min_ms} ms");

    // A server and a client in the lab's hosts through --netns.
    let server_ns = format!("{name}-server");
    let client_ns = format!("{name}-client");
    let mut server = nobody
        .tcplab(&["--netns", &server_ns, "serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !nobody
        .ok(&["lab", "exec", &name, "server", "--", "ss", "-ltnH"])
        .contains(":5201")
    {
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = nobody.run(&[
        "--netns",
        &client_ns,
        "run",
        "10.77.0.1",
        "-t",
        "1",
        "--json",
    ]);
    server.kill().unwrap();
    server.wait().unwrap();
    let run = parse_success(&out);
    let rate = f64_at(&run, "/summary/received_bps");
    assert!(rate <= 100e6, "{rate} bit/s through 100 Mbit/s");
    assert!(rate > 0.0, "{run}");

    let show = nobody.ok(&["lab", "show", &name]);
    assert!(show.contains("(normal priority, CPUs may sleep)"), "{show}");
    println!("{show}");
    nobody.ok(&["lab", "down", &name]);
    let listed = parse_success(&nobody.run(&["lab", "list", "--json"]));
    assert_eq!(listed, serde_json::json!([]));

    // A daemon killed with SIGKILL, with a command left running in a host (it keeps the
    // namespaces alive): `lab gc` ends the command and removes the rest.
    nobody.ok(&["lab", "up", &name, "--path", "rtt 2ms"]);
    let listed = parse_success(&nobody.run(&["lab", "list", "--json"]));
    let pid = u64_at(&listed[0], "/lab/pid");
    let mut left = nobody
        .tcplab(&["lab", "exec", &name, "client", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    await_descendant(std::process::id(), "sleep 60");
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(8);
    while parse_success(&nobody.run(&["lab", "list", "--json"]))[0]["alive"] != false {
        assert!(
            Instant::now() < deadline,
            "the killed daemon still counts as alive"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = nobody.run(&["lab", "exec", &name, "client", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
    let said = nobody.ok(&["lab", "gc"]);
    assert!(
        said.contains(&format!(
            "removed leftover lab {name} (its process {pid} died)"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "ended process {} (sleep) left in leftover lab {name}",
            left.id()
        )),
        "{said}"
    );
    left.wait().unwrap();
    nobody.assert_nothing_left();
}

/// The bar, as nobody: kill -9 of `tcplab shell` ends its command and what the command
/// detached from itself within 5 s, and leaves nothing (no lab, no namespace).
#[test]
fn a_killed_shell_as_nobody_leaves_nothing() {
    if !nobody_or_skip("rootless_shell_killed") {
        return;
    }
    let nobody = Nobody::new(Runtime::Xdg);
    let shell = nobody
        .tcplab(&["shell", "--path", "rtt 10ms", "--", "sh", "-c"])
        .arg("setsid sleep 60 & exec sleep 61")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // setpriv becomes tcplab: the same process.
    let left = kill_once_running(shell, "sleep 60");
    assert!(left.is_empty(), "left running {left:?}");
    nobody.assert_nothing_left();
}

/// `shell` and a sweep with its report and explain, as nobody.
#[test]
fn shell_and_a_sweep_as_nobody() {
    if !nobody_or_skip("rootless_shell_sweep") {
        return;
    }
    let nobody = Nobody::new(Runtime::Xdg);
    let out = nobody
        .tcplab(&["shell", "--path", "rtt 10ms", "--", "sh", "-c"])
        .arg("ping -c 3 -i 0.2 $TCPLAB_SERVER && exit 3")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let [min_ms, ..] = ping_summary(&stdout(&out)).2.expect("ping replies");
    assert!((9.5..11.0).contains(&min_ms), "min RTT {min_ms} ms");

    let file = nobody.home().join("tiny.toml");
    fs::write(
        &file,
        "name = \"tiny\"\nduration = \"1s\"\npath = \"rtt {rtt} rate 20mbit\"\n\n[[axis]]\nname = \"rtt\"\nvalues = [\"5ms\", \"10ms\"]\n",
    )
    .unwrap();
    nobody.ok(&["sweep", "tiny.toml"]);
    let runs = nobody.export("tiny.db", "runs");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.iter().all(|r| r["status"] == "done"), "{runs:?}");
    nobody.ok(&["report", "tiny.db", "-o", "report"]);
    assert!(nobody.home().join("report/index.html").exists());
    let explained = parse_success(&nobody.run(&["explain", "--db", "tiny.db", "--json"]));
    assert!(f64_at(&explained, "/measured_bps") > 0.0);
    nobody.assert_nothing_left();
}

/// A lab's sysctls work without root: with window scaling off, the receive window is at
/// most 64 KiB and throughput at most 64 KiB per round trip (the window bound). The
/// host's sysctls are refused in one line.
#[test]
fn per_namespace_sysctls_work_as_nobody() {
    if !nobody_or_skip("rootless_sysctls") {
        return;
    }
    let nobody = Nobody::new(Runtime::Xdg);
    let sysctl = "net.ipv4.tcp_window_scaling=0";
    let args = [
        "run", "--path", "rtt 10ms", "--sysctl", sysctl, "-t", "2s", "--json",
    ];
    let run = parse_success(&nobody.run(&args));
    for end in ["client", "server"] {
        assert_eq!(run[end]["sysctls"]["net.ipv4.tcp_window_scaling"], "0");
    }
    let bound = 65535.0 * 8.0 / 0.010;
    let rate = f64_at(&run, "/summary/received_bps");
    assert!(
        rate <= bound * 1.02,
        "{rate} bit/s above the 64 KiB window's {bound}"
    );

    let out = nobody.run(&[
        "run",
        "--path",
        "rtt 1ms",
        "--sysctl",
        "net.core.rmem_max=67108864",
    ]);
    let line = failure(&out);
    assert!(
        line.ends_with("sysctl 'net.core.rmem_max' is the host's, read-only in a lab's namespace (root sets it on the host: sysctl -w net.core.rmem_max=67108864)"),
        "{line}"
    );
    nobody.assert_nothing_left();
}

/// `shell --far host` as nobody: the clients' TCP connections are taken in the lab's
/// server host and carried on into the caller's namespace, where a server listens on
/// loopback only, reached at TCPLAB_HOST with the path's round trip and, both ways,
/// its rate (where slirp4netns's own TCP held a download to 0.69 of it); without
/// slirp4netns on PATH, one line names it. Nothing is left, slirp4netns included.
#[test]
fn shell_far_host_reaches_the_callers_loopback_as_nobody() {
    if !nobody_or_skip("rootless_far_host") {
        return;
    }
    // Killed when dropped, even by a failing assertion.
    let server = LoopbackServer::start(&[]);
    let port = server.addr.port();
    let nobody = Nobody::new(Runtime::Xdg);
    for reverse in [false, true] {
        let run = format!(
            "exec {} run $TCPLAB_HOST:{port} -t 3s --json{}",
            nobody.bin.display(),
            if reverse { " -R" } else { "" }
        );
        let args = [
            "shell",
            "--far",
            "host",
            "--path",
            "rtt 50ms rate 10mbit",
            "--",
            "sh",
            "-c",
            &run,
        ];
        one_of_three_tries("a run as nobody to the caller's loopback", || {
            let run = parse_success(&nobody.run(&args));
            let (min_ms, rate) = (
                f64_at(&run, "/summary/rtt/min_us") / 1e3,
                f64_at(&run, "/summary/received_bps"),
            );
            println!(
                "as nobody behind rtt 50ms rate 10mbit{}: tcp min rtt {min_ms} ms, {rate} bit/s",
                if reverse { ", -R" } else { "" }
            );
            // At most the link's goodput, asserted every time.
            assert!(rate <= GOODPUT_10MBIT * 1.01, "{rate} bit/s");
            // The sender's round trip: behind the path uploading; on the caller's
            // loopback, to the relay, downloading.
            let rtt_ok = match reverse {
                false => (49.0..52.0).contains(&min_ms),
                true => min_ms < 5.0,
            };
            match rtt_ok && rate > 0.9 * GOODPUT_10MBIT {
                true => Ok(()),
                false => Err(format!("tcp min rtt {min_ms} ms, {rate} bit/s")),
            }
        });
    }
    // Nothing listens there: the connection is reset, as the far side refused it.
    let out = nobody
        .tcplab(&[
            "shell", "--far", "host", "--path", "rtt 1ms", "--", "sh", "-c",
        ])
        .arg(format!(
            "exec {} run $TCPLAB_HOST:1 -t 1",
            nobody.bin.display()
        ))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("reset"), "{said}");
    // The relay keeps nothing of a connection that ended: tcplab holds as many
    // descriptors after five more runs (ten connections) as after one.
    let (bin, marks) = (nobody.bin.display(), nobody.home().display());
    let run = format!("{bin} run $TCPLAB_HOST:{port} -t 0.3s >/dev/null");
    let mut shell = nobody
        .tcplab(&[
            "shell", "--far", "host", "--path", "rtt 1ms", "--", "sh", "-c",
        ])
        .arg(format!(
            "{run} && touch {marks}/one && sleep 2 && for i in 1 2 3 4 5; do {run}; done && \
             touch {marks}/six && sleep 2"
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let descriptors_at = |mark: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nobody.home().join(mark).exists() {
            assert!(Instant::now() < deadline, "no {mark} from the shell");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The relay's threads end a moment after their connections do.
        std::thread::sleep(Duration::from_millis(500));
        fs::read_dir(format!("/proc/{}/fd", shell.id()))
            .unwrap()
            .count()
    };
    let (one, six) = (descriptors_at("one"), descriptors_at("six"));
    assert!(shell.wait().unwrap().success());
    assert!(
        six <= one + 2,
        "{one} descriptors after one run, {six} after six"
    );
    // A PATH with setpriv alone.
    let bin = nobody.home().join("bin");
    fs::create_dir(&bin).unwrap();
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    std::os::unix::fs::symlink(setpriv, bin.join("setpriv")).unwrap();
    let out = nobody
        .tcplab(&["shell", "--far", "host", "--path", "rtt 1ms", "--", "true"])
        .env("PATH", &bin)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("needs slirp4netns"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    drop(server);
    nobody.assert_nothing_left();
}

/// Where user namespaces are forbidden (here `user.max_user_namespaces = 0` inside a
/// user namespace of nobody's: the limit is per namespace), a lab fails in one line
/// naming the sysctl and root, and a sweep stops before planning anything.
#[test]
fn without_user_namespaces_labs_stop_in_one_line() {
    if !nobody_or_skip("rootless_disabled") {
        return;
    }
    let nobody = Nobody::new(Runtime::Xdg);
    let forbidden = |args: &[&str]| {
        let mut cmd = as_nobody(nobody.home());
        cmd.args(["unshare", "-Ur", "sh", "-c"])
            .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"")
            .arg("sh")
            .arg(&nobody.bin)
            .args(args)
            .env("HOME", nobody.home())
            .env("XDG_RUNTIME_DIR", nobody.home().join("run"));
        cmd.output().unwrap()
    };
    let expected = "user.max_user_namespaces = 0 forbids them: `sysctl -w user.max_user_namespaces=10000` as root allows them; or run tcplab as root";
    let out = forbidden(&["run", "--path", "rtt 1ms", "-t", "1"]);
    assert!(failure(&out).ends_with(expected), "{}", failure(&out));
    let out = forbidden(&["lab", "up", "nope", "--path", "rtt 1ms"]);
    assert!(failure(&out).ends_with(expected), "{}", failure(&out));
    fs::write(
        nobody.home().join("tiny.toml"),
        "name = \"tiny\"\nduration = \"1s\"\npath = \"rtt 1ms\"\n",
    )
    .unwrap();
    let out = forbidden(&["sweep", "tiny.toml"]);
    assert!(failure(&out).ends_with(expected), "{}", failure(&out));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(!nobody.home().join("tiny.db").exists(), "nothing planned");
    nobody.assert_nothing_left();
}

/// A topology's lab as nobody: up from a file, a ping through its three links by a
/// host's name (never under their 16 ms, within 1 ms at the minimum at normal
/// priority), down, and nothing left.
#[test]
fn a_topology_lab_as_nobody() {
    if !nobody_or_skip("rootless_topology") {
        return;
    }
    let nobody = Nobody::new(Runtime::Xdg);
    let file = nobody.home().join("chain.toml");
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/topologies/chain.toml"),
        &file,
    )
    .unwrap();
    let name = lab_name("nt", 1);
    let said = nobody.ok(&["lab", "up", &name, "--topology", "chain.toml"]);
    assert!(said.contains(&format!("lab {name} up")), "{said}");
    let text = nobody.ok(&[
        "lab",
        "exec",
        &name,
        "a",
        "--",
        "ping",
        "-c",
        "5",
        "-i",
        "0.2",
        "10.77.0.2",
    ]);
    let [min_ms, ..] = ping_summary(&text).2.expect("ping replies");
    assert!((16.0..17.0).contains(&min_ms), "min RTT {min_ms} ms");
    nobody.ok(&["lab", "down", &name]);
    nobody.assert_nothing_left();
}

/// `tcplab watch` in the machine's own namespace, as nobody and as root, of two loopback
/// connections: one held by root (this test), one by nobody (a python3 of its own).
/// Nobody sees all four sockets with their tcp_info, only its own with their process,
/// and says so in its one line at the start; root sees every process.
#[test]
fn watch_as_nobody_sees_every_socket_and_only_its_own_processes() {
    if !nobody_or_skip("rootless_watch") {
        return;
    }
    let nobody = Nobody::new(Runtime::Xdg);
    let root_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let root_port = root_listener.local_addr().unwrap().port();
    let _root_client = std::net::TcpStream::connect(("127.0.0.1", root_port)).unwrap();
    let _root_server = root_listener.accept().unwrap();
    // The port is said once the connection is accepted: a socket still in the accept
    // queue has no inode, so no process to show.
    let held = "import socket, time\n\
                l = socket.create_server(('127.0.0.1', 0))\n\
                c = socket.create_connection(l.getsockname())\n\
                s, _ = l.accept()\n\
                print(l.getsockname()[1], flush=True)\n\
                time.sleep(30)\n";
    let mut python = as_nobody(nobody.home())
        .args(["python3", "-c", held])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(python.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let user_port: u16 = line.trim().parse().unwrap();
    let ports = [root_port.to_string(), user_port.to_string()];
    let watch = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["watch", "--port", &ports[0], "--port", &ports[1]];
        args.extend(["-t", "500ms", "--json"]);
        args.extend(extra);
        args.into_iter().map(String::from).collect()
    };
    // Each socket opened as its local port and its process's pid.
    let opened = |out: &Output| -> BTreeSet<(u16, Option<u64>)> {
        assert_success(out);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["event"] == "opened")
            .map(|v| {
                let local: std::net::SocketAddr = v["local"].as_str().unwrap().parse().unwrap();
                (local.port(), v["pid"].as_u64())
            })
            .collect()
    };
    let python_pid = u64::from(python.id());
    let root_pid = u64::from(std::process::id());

    let args = watch(&[]);
    let out = nobody.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let seen = opened(&out);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("polling only")
            && err.contains("as a user, the sockets of other users' processes show no process"),
        "{err}"
    );
    assert_eq!(seen.len(), 4, "{seen:?}");
    let with_pid = |pid: Option<u64>| seen.iter().filter(|(_, p)| *p == pid).count();
    assert_eq!(with_pid(Some(python_pid)), 2, "nobody's own: {seen:?}");
    assert_eq!(with_pid(None), 2, "root's, without process: {seen:?}");

    let args = watch(&["--comm", "python3"]);
    let seen = opened(&nobody.run(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|(_, p)| *p == Some(python_pid)), "{seen:?}");

    // Root's process is not nobody's to read: one line, a non-zero exit.
    let pid = root_pid.to_string();
    let out = nobody.run(&["watch", "--pid", &pid, "-t", "100ms"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("--pid {pid}: cannot read its sockets")),
        "{err}"
    );

    // Root sees every socket's process.
    let args = watch(&[]);
    let out = tcplab().args(&args).output().unwrap();
    let seen = opened(&out);
    assert!(!stderr(&out).contains("as a user"), "{}", stderr(&out));
    assert_eq!(seen.len(), 4, "{seen:?}");
    let with_pid = |pid: Option<u64>| seen.iter().filter(|(_, p)| *p == pid).count();
    assert_eq!(with_pid(Some(python_pid)), 2, "{seen:?}");
    assert_eq!(with_pid(Some(root_pid)), 2, "{seen:?}");

    python.kill().unwrap();
    python.wait().unwrap();
    nobody.assert_nothing_left();
}
