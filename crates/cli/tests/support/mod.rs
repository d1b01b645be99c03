//! A test bed: two fresh network namespaces joined by a veth pair, `tcplab serve`
//! running in the server's, and helpers to run the real binary in the client's.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
pub use tcplab_analysis::explain::FindingKind;
use tcplab_netsim::packet::MAX_COALESCE_SEGMENTS;
use tcplab_sys::netns::{privileged_or_skip, VethLab};

pub const PORT: u16 = 5201;

pub fn tcplab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcplab"))
}

pub struct Bed {
    pub lab: VethLab,
    server: Option<Child>,
    pub server_log: PathBuf,
    _dir: tempfile::TempDir,
    /// The machine, [`alone`] or [`among_others`] as the test's figures need.
    _machine: Machine,
}

/// A namespace prefix unique to this process and bed: names must not clash across test
/// binaries running at once; addresses may, since every bed has its own namespaces.
fn unique() -> (String, u16) {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (format!("tlt{}-{n}", std::process::id()), n)
}

impl Bed {
    /// A bed with a running server, or `None` (after printing why) when this machine
    /// cannot create namespaces outside CI; the machine [`alone`], for a test that
    /// measures rates or timing.
    pub fn new(test: &str) -> Option<Bed> {
        if !privileged_or_skip(test) {
            return None;
        }
        Some(Bed::on(alone()))
    }

    /// [`Bed::new`] with the machine [`among_others`], for a test whose figures load
    /// cannot change.
    pub fn among_others(test: &str) -> Option<Bed> {
        if !privileged_or_skip(test) {
            return None;
        }
        Some(Bed::on(among_others()))
    }

    fn on(machine: Machine) -> Bed {
        let (prefix, n) = unique();
        let lab = VethLab::new(&prefix, n + 1).expect("creating the veth lab");
        let dir = tempfile::tempdir().unwrap();
        let mut bed = Bed {
            lab,
            server: None,
            server_log: dir.path().join("server.log"),
            _dir: dir,
            _machine: machine,
        };
        bed.start_server();
        bed
    }

    pub fn start_server(&mut self) {
        self.start_server_with(&[]);
    }

    /// Starts `tcplab serve` with these flags besides its address.
    pub fn start_server_with(&mut self, args: &[&str]) {
        let log = std::fs::File::create(&self.server_log).unwrap();
        let child = tcplab()
            .args([
                "--netns",
                self.lab.b().name(),
                "serve",
                "--listen",
                "[::]:5201",
            ])
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting tcplab serve");
        self.server = Some(child);
        self.wait_listening();
    }

    pub fn server_addr(&self) -> SocketAddr {
        SocketAddr::new(self.lab.addr_b_v4(), PORT)
    }

    pub fn server_addr_v6(&self) -> SocketAddr {
        SocketAddr::new(self.lab.addr_b_v6(), PORT)
    }

    fn wait_listening(&self) {
        let addr = self.server_addr();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let up = self
                .lab
                .a()
                .run(move || TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok())
                .unwrap();
            if up {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("server did not listen on {addr}");
    }

    /// `tcplab --netns CLIENT run SERVER ARGS…`, unwaited.
    pub fn client(&self, args: &[&str]) -> Command {
        self.client_to(self.server_addr(), args)
    }

    pub fn client_to(&self, target: SocketAddr, args: &[&str]) -> Command {
        let mut cmd = tcplab();
        cmd.args(["--netns", self.lab.a().name(), "run"])
            .arg(target.to_string())
            .args(args);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.client(args).output().expect("running tcplab run")
    }

    /// Runs with `--json`, asserts success and returns the document.
    pub fn run_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.run(&all);
        parse_success(&out)
    }

    /// Runs a closure on a thread inside the client's namespace.
    pub fn in_client<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.lab.a().run(f).unwrap()
    }

    pub fn kill_server(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn server_is_alive(&mut self) -> bool {
        matches!(self.server.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    pub fn server_log(&self) -> String {
        std::fs::read_to_string(&self.server_log).unwrap_or_default()
    }

    /// Waits until the server's log has `count` lines containing `text`.
    pub fn await_server_log(&self, text: &str, count: usize) {
        await_log(&|| self.server_log(), text, count);
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.kill_server();
    }
}

/// A command's standard error, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "tcplab failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Asserts a run's dominant limit, showing its summary when it is another.
pub fn assert_dominant(run: &Value, limit: &str) {
    assert_eq!(
        str_at(run, "/summary/dominant_limit"),
        limit,
        "{:#}",
        run["summary"]
    );
}

pub fn parse_success(out: &Output) -> Value {
    assert_success(out);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document: {e}\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

pub fn f64_at(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {pointer} in {v:#}"))
}

pub fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no integer at {pointer} in {v:#}"))
}

/// A link's counter (`"/dropped_queue"`) over all its traffic: the test's and
/// tcplab's own (control connection, probes), which a capture holds alike.
pub fn all_traffic(link: &Value, pointer: &str) -> u64 {
    ["", "/control", "/probe"]
        .iter()
        .filter_map(|kind| link.pointer(&format!("{kind}{pointer}"))?.as_u64())
        .sum()
}

pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {v:#}"))
}

pub fn flows(v: &Value) -> &Vec<Value> {
    v["flows"].as_array().expect("flows array")
}

/// `tcplab run ARGS… --json --capture FILE --db DB`, which must succeed: its JSON.
pub fn run_captured(args: &[&str], capture: &Path, db: &Path) -> Value {
    let out = tcplab()
        .arg("run")
        .args(args)
        .arg("--json")
        .arg("--capture")
        .arg(capture)
        .arg("--db")
        .arg(db)
        .output()
        .expect("running tcplab run");
    parse_success(&out)
}

/// `tcplab explain --json --db DB` of the latest run, which must succeed.
pub fn explained(db: &Path) -> Value {
    let out = tcplab()
        .args(["explain", "--json", "--db"])
        .arg(db)
        .output()
        .expect("running tcplab explain");
    parse_success(&out)
}

/// The kinds of the findings in explain's JSON, in its order.
pub fn finding_kinds(explained: &Value) -> Vec<FindingKind> {
    explained["findings"]
        .as_array()
        .expect("a findings array")
        .iter()
        .map(|f| serde_json::from_value(f["kind"].clone()).expect("a finding kind"))
        .collect()
}

/// The finding of `kind` in explain's JSON, if it has one.
pub fn finding(explained: &Value, kind: FindingKind) -> Option<&Value> {
    explained["findings"]
        .as_array()
        .expect("a findings array")
        .iter()
        .find(|f| f["kind"] == kind.name())
}

/// The message of the finding of `kind` in explain's JSON, if it has one.
pub fn finding_message(explained: &Value, kind: FindingKind) -> Option<String> {
    let f = finding(explained, kind)?;
    Some(f["message"].as_str().expect("a message").to_owned())
}

/// Received bytes counted by the kernel on an interface of a namespace
/// (/proc/thread-self/net/dev seen from inside it): an independent byte counter.
pub fn rx_bytes(bed: &Bed, in_server: bool, ifname: &str) -> u64 {
    let ns = if in_server { bed.lab.b() } else { bed.lab.a() };
    let ifname = ifname.to_string();
    ns.run(move || {
        let dev = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap();
        dev.lines()
            .find_map(|l| {
                let (name, rest) = l.split_once(':')?;
                (name.trim() == ifname)
                    .then(|| rest.split_whitespace().next().unwrap().parse().unwrap())
            })
            .unwrap_or_else(|| panic!("no {ifname} in {dev}"))
    })
    .unwrap()
}

/// A lab name unique to this process and call site number `n` (≤ 24 characters).
pub fn lab_name(prefix: &str, n: u32) -> String {
    format!("{prefix}{}x{n}", std::process::id() % 100000)
}

/// A persistent lab made by `tcplab lab up`; dropping it runs `tcplab lab down`.
pub struct LabGuard {
    pub name: String,
}

impl LabGuard {
    /// `tcplab lab up NAME ARGS…`, asserting success.
    pub fn up(name: &str, args: &[&str]) -> LabGuard {
        let out = tcplab()
            .args(["lab", "up", name])
            .args(args)
            .output()
            .expect("running tcplab lab up");
        let guard = LabGuard {
            name: name.to_string(),
        };
        assert!(
            out.status.success(),
            "lab up {name} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        guard
    }

    pub fn show(&self) -> Value {
        let out = tcplab()
            .args(["lab", "show", &self.name, "--json"])
            .output()
            .unwrap();
        parse_success(&out)
    }

    /// The emulator's lateness (write time − due time) at `stat` ("p50_us", "p99_us",
    /// "max_us"), up and down added, in ms: what a busy machine added to a round trip
    /// beyond the configured path.
    pub fn lateness_ms(&self, stat: &str) -> f64 {
        let show = self.show();
        ["up", "down"]
            .iter()
            .map(|dir| {
                show.pointer(&format!("/{dir}/lateness/{stat}"))
                    .and_then(Value::as_f64)
                    .unwrap_or_else(|| panic!("no {dir} lateness {stat} in {show}"))
            })
            .sum::<f64>()
            / 1e3
    }

    pub fn client_ns(&self) -> String {
        format!("{}-client", self.name)
    }

    pub fn server_ns(&self) -> String {
        format!("{}-server", self.name)
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        let _ = tcplab()
            .args(["lab", "down", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `tcplab lab up NAME ARGS…` where it must be refused: its output. Should it build the
/// lab after all, the lab is taken down before the caller's assertion fails.
pub fn lab_up_refused(name: &str, args: &[&std::ffi::OsStr]) -> Output {
    let out = tcplab()
        .args(["lab", "up", name])
        .args(args)
        .output()
        .expect("running tcplab lab up");
    if out.status.success() {
        drop(LabGuard {
            name: name.to_owned(),
        });
    }
    out
}

/// `ip netns exec NS ping ARGS… DEST`: the output, whatever ping's exit status.
pub fn ping(ns: &str, args: &[&str], dest: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ping"])
        .args(args)
        .arg(dest)
        .output()
        .expect("running ping");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Each reply's "time=" of ping's output, ms.
pub fn ping_times_ms(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| {
            l.split("time=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// ping's summary: (transmitted, received, [min, avg, max, mdev] in ms if any reply).
pub fn ping_summary(text: &str) -> (u64, u64, Option<[f64; 4]>) {
    let line = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no ping summary in {text}"));
    let num = |key: &str| -> u64 {
        let before = line.split(key).next().unwrap();
        before
            .split(|c: char| c == ',' || c.is_whitespace())
            .rfind(|w| !w.is_empty())
            .unwrap()
            .parse()
            .unwrap()
    };
    let rtt = text.lines().find(|l| l.contains("min/avg/max")).map(|l| {
        let values = l
            .split('=')
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap();
        let v: Vec<f64> = values.split('/').map(|x| x.parse().unwrap()).collect();
        [v[0], v[1], v[2], v[3]]
    });
    (num(" packets transmitted"), num(" received"), rtt)
}

/// The sequence numbers ping got replies for.
pub fn ping_replies(text: &str) -> std::collections::BTreeSet<u64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.split("icmp_seq=").nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

/// Starts `tcplab --netns NS serve` and waits until it accepts on 10.77.0.1:5201 as
/// seen from `client_ns`; kill the child when done.
pub fn serve_in(server_ns: &str, client_ns: &str) -> KilledOnDrop {
    serve_in_with(server_ns, client_ns, &[])
}

/// A child process killed and reaped when dropped: a test that fails (a panic in
/// [`one_of_three_tries`] too) leaves no server behind.
pub struct KilledOnDrop(pub Child);

impl std::ops::Deref for KilledOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KilledOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        // Killed already where the test ended it: nothing to say then.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// [`serve_in`] with more `serve` flags.
pub fn serve_in_with(server_ns: &str, client_ns: &str, args: &[&str]) -> KilledOnDrop {
    let child = tcplab()
        .args(["--netns", server_ns, "serve"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tcplab serve");
    let ns = tcplab_sys::netns::NetNs::open(client_ns).expect("opening the client netns");
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr: SocketAddr = "10.77.0.1:5201".parse().unwrap();
    while Instant::now() < deadline {
        let up = ns
            .run(move || TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok())
            .unwrap();
        if up {
            return KilledOnDrop(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(KilledOnDrop(child));
    panic!("server in {server_ns} did not listen");
}

/// z of a two-sided 99 % normal interval.
pub const Z99: f64 = 2.576;

/// z of a two-sided 99.9 % normal interval.
pub const Z999: f64 = 3.291;

/// The 99 % normal-approximation interval of a binomial count (n trials, p).
pub fn binomial99(n: u64, p: f64) -> (f64, f64) {
    binomial(n, p, Z99)
}

/// The normal-approximation interval of a binomial count (n trials, p) at `z`.
pub fn binomial(n: u64, p: f64, z: f64) -> (f64, f64) {
    let mean = n as f64 * p;
    let half = z * (n as f64 * p * (1.0 - p)).sqrt();
    (mean - half, mean + half)
}

/// The machine, shared by the tests of this binary. Timing is what many tests measure,
/// on as few as 2 cores and with the emulator in a debug build: measured beside other
/// tests, 100 Mbit/s fell 6 % short and ping gained 6 ms. A test whose figures the load
/// of others could spoil takes the machine [`alone`]; one that builds labs or moves
/// traffic but asserts only what load cannot change takes it [`among_others`], so that
/// the many tests that mostly wait (on labs, timers and real tools) wait side by side.
/// A test that takes neither only parses or reads.
///
/// Those among others go first, [`AT_ONCE`] at a time, then those alone one by one:
/// every test starts at once (`RUST_TEST_THREADS` in .cargo/config.toml) and waits
/// here, so that the two kinds do not alternate, each test alone waiting for the ones
/// among others before it to end while the machine idles.
struct Schedule {
    alone: bool,
    among_others: usize,
    waiting_among_others: usize,
}

/// How many tests share the machine at once: most use a fifth of two cores.
const AT_ONCE: usize = 3;

static SCHEDULE: std::sync::Mutex<Schedule> = std::sync::Mutex::new(Schedule {
    alone: false,
    among_others: 0,
    waiting_among_others: 0,
});
static SCHEDULE_CHANGED: std::sync::Condvar = std::sync::Condvar::new();

/// The machine as a test holds it, until dropped.
pub struct Machine {
    alone: bool,
    since: Instant,
}

impl Drop for Machine {
    fn drop(&mut self) {
        let mut schedule = SCHEDULE.lock().unwrap_or_else(|e| e.into_inner());
        if self.alone {
            schedule.alone = false;
        } else {
            schedule.among_others -= 1;
        }
        // To stderr itself (libtest captures eprintln!): what each test costs CI, in
        // its log: those alone one after another, those among others AT_ONCE at a time.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "{} {:.1} s: {}",
            if self.alone { "alone" } else { "among" },
            self.since.elapsed().as_secs_f64(),
            std::thread::current().name().unwrap_or("?")
        );
        SCHEDULE_CHANGED.notify_all();
    }
}

fn wait_until(ready: impl Fn(&Schedule) -> bool) -> std::sync::MutexGuard<'static, Schedule> {
    let schedule = SCHEDULE.lock().unwrap_or_else(|e| e.into_inner());
    SCHEDULE_CHANGED
        .wait_while(schedule, |s| !ready(s))
        .unwrap_or_else(|e| e.into_inner())
}

/// The machine to this test alone: no other test that builds a lab or moves traffic runs
/// meanwhile, and none among others is left waiting; nor the machine's other work.
pub fn alone() -> Machine {
    wait_for_the_machines_other_work();
    let mut schedule =
        wait_until(|s| !s.alone && s.among_others == 0 && s.waiting_among_others == 0);
    schedule.alone = true;
    Machine {
        alone: true,
        since: Instant::now(),
    }
}

/// Work beside the tests that asserts no figure (CI's fuzzing and the benches' short
/// modes, .ci/run) may share the machine with the tests among others, not with those
/// alone: it holds an exclusive lock on the file `TCPLAB_TESTS_ALONE_AFTER` names until
/// it ends, and the first test alone waits for that.
fn wait_for_the_machines_other_work() {
    static ENDED: std::sync::Once = std::sync::Once::new();
    ENDED.call_once(|| {
        let Some(path) = std::env::var_os("TCPLAB_TESTS_ALONE_AFTER") else {
            return;
        };
        let started = Instant::now();
        let what = format!("TCPLAB_TESTS_ALONE_AFTER {}", Path::new(&path).display());
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{what}: {e}"));
        file.lock_shared().unwrap_or_else(|e| panic!("{what}: {e}"));
        // To stderr itself: libtest captures what eprintln! prints in a test.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "the tests alone waited {:.0} s for the machine's other work to end",
            started.elapsed().as_secs_f64()
        );
    });
}

/// The machine shared with up to [`AT_ONCE`] tests that take it so, never with one
/// [`alone`].
pub fn among_others() -> Machine {
    SCHEDULE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .waiting_among_others += 1;
    let mut schedule = wait_until(|s| !s.alone && s.among_others < AT_ONCE);
    schedule.waiting_among_others -= 1;
    schedule.among_others += 1;
    Machine {
        alone: false,
        since: Instant::now(),
    }
}

/// For a figure that only the machine's load can spoil (a sender or the emulator kept
/// off the CPU on a busy 2-core CI machine): `attempt` runs up to three times and
/// returns `Err(what it saw)` when its timing missed; the first `Ok` passes (its value
/// returned), and three misses fail with all three. What load cannot explain
/// `attempt` asserts outright.
pub fn one_of_three_tries<T>(what: &str, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let mut misses = Vec::new();
    for _ in 0..3 {
        match attempt() {
            Ok(value) => return value,
            Err(miss) => {
                println!("{what}: try {} missed: {miss}", misses.len() + 1);
                misses.push(miss);
            }
        }
    }
    panic!("{what}, three times: {}", misses.join("; "));
}

/// The address in a server log's "serving on ADDR, …" line once the whole line is
/// written: stderr is unbuffered, so a reader may see the line cut after any write.
pub fn serving_addr(log: &str) -> Option<SocketAddr> {
    let (line, _) = log.split("serving on ").nth(1)?.split_once('\n')?;
    let addr = line.split(',').next()?.trim();
    Some(
        addr.parse()
            .unwrap_or_else(|e| panic!("a whole serving line {line:?}: {e}")),
    )
}

/// `tcplab serve --listen 127.0.0.1:0 FLAGS…` on loopback, which needs no privileges
/// (loopback peers are local, so no key is needed either unless given).
pub struct LoopbackServer {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
    pub dir: tempfile::TempDir,
}

impl LoopbackServer {
    /// Starts the server and waits for the address it prints.
    pub fn start(flags: &[&str]) -> LoopbackServer {
        let dir = tempfile::tempdir().unwrap();
        LoopbackServer::start_in(dir, flags)
    }

    /// Starts it with `dir` as its directory (for key files made before).
    pub fn start_in(dir: tempfile::TempDir, flags: &[&str]) -> LoopbackServer {
        let log = dir.path().join("server.log");
        let mut child = tcplab()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting tcplab serve");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(addr) = serving_addr(&text) {
                return LoopbackServer {
                    child,
                    addr,
                    log,
                    dir,
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "server did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// `tcplab run ADDR ARGS…`, unwaited.
    pub fn client(&self, args: &[&str]) -> Command {
        let mut cmd = tcplab();
        cmd.arg("run").arg(self.addr.to_string()).args(args);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.client(args).output().expect("running tcplab run")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An experiment file `DIR/lo.toml` of `runs` runs of 0.3 s against this server,
    /// one point.
    pub fn experiment(&self, dir: &Path, runs: u32) -> PathBuf {
        let file = dir.join("lo.toml");
        std::fs::write(
            &file,
            format!(
                "name = \"lo\"\nrepetitions = {runs}\nduration = \"0.3s\"\nserver = \"lo\"\n\
                 [host.lo]\naddress = \"{}\"\n[[flow]]\n",
                self.addr
            ),
        )
        .unwrap();
        file
    }

    /// Waits until the log has `count` lines containing `text`.
    pub fn await_log(&self, text: &str, count: usize) {
        await_log(&|| self.log(), text, count);
    }
}

/// Waits until a server's log holds `text` `count` times: it writes its line after
/// answering, so a client may finish first.
fn await_log(log: &dyn Fn() -> String, text: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while log().matches(text).count() < count {
        assert!(
            Instant::now() < deadline,
            "no {text:?} ×{count} in {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A key file readable by its owner only.
pub fn key_file(dir: &std::path::Path, name: &str, key: &[u8]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, key).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// `tcplab export DB --table TABLE --format FORMAT`'s output, asserting success.
pub fn export(db: &std::path::Path, table: &str, format: &str) -> String {
    let out = tcplab()
        .arg("export")
        .arg(db)
        .args(["--table", table, "--format", format])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A table of a database as JSON lines, one value per row.
/// examples/quick/`name`: the quick studies the tests run.
pub fn quick_example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/quick")
        .join(name)
}

/// A JSON column of an exported row (`path_json`, `watch_json` …), parsed.
pub fn json_column(row: &Value, column: &str) -> Value {
    serde_json::from_str(
        row[column]
            .as_str()
            .unwrap_or_else(|| panic!("{column}: {row}")),
    )
    .unwrap()
}

/// The runs' rows, and each run's flows, as `tcplab export` writes them.
pub fn runs_and_flows(db: &Path) -> Vec<(Value, Vec<Value>)> {
    let flows = export_jsonl(db, "flows");
    export_jsonl(db, "runs")
        .into_iter()
        .map(|run| {
            let of_run = flows
                .iter()
                .filter(|f| f["run_id"] == run["id"])
                .cloned()
                .collect();
            (run, of_run)
        })
        .collect()
}

/// `tcplab results DB --json [--flow NAME]`: the mean throughput at each point (of
/// that flow's connections alone, with a name), with the point's label.
pub fn point_means(db: &Path, flow: Option<&str>) -> Vec<(String, f64)> {
    let mut results = tcplab();
    results.arg("results").arg(db).arg("--json");
    if let Some(flow) = flow {
        results.args(["--flow", flow]);
    }
    parse_success(&results.output().unwrap())["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["label"].as_str().unwrap().to_owned(), f64_at(p, "/mean")))
        .collect()
}

/// `tcplab sweep FILE --db DB EXTRA…`.
pub fn sweep(file: &std::path::Path, db: &std::path::Path, extra: &[&str]) -> Output {
    sweep_by(tcplab(), file, db, extra)
}

/// [`sweep`] by `tcplab`, a command with its global flags set (`--netns NS`).
pub fn sweep_by(
    mut tcplab: Command,
    file: &std::path::Path,
    db: &std::path::Path,
    extra: &[&str],
) -> Output {
    tcplab
        .arg("sweep")
        .arg(file)
        .arg("--db")
        .arg(db)
        .args(extra)
        .output()
        .expect("running tcplab sweep")
}

pub fn export_jsonl(db: &std::path::Path, table: &str) -> Vec<Value> {
    export(db, table, "jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The one-line reason (`tcplab: …`) on a failed command's stderr, asserting exit
/// status 1.
pub fn failure(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("tcplab: "), "{err}");
    assert_each_cause_once(&err);
    err
}

/// Asserts that no part of an error line's chain ("a: b: c") repeats the one before it,
/// as it does when an error both prints its cause and exposes it as its source.
pub fn assert_each_cause_once(err: &str) {
    let parts: Vec<&str> = err.trim_end().split(": ").collect();
    assert!(
        parts.windows(2).all(|w| w[0] != w[1]),
        "a cause repeats in {err:?}"
    );
}

/// Waits until `server` listens on TCP `addr`, read from /proc/PID/net/tcp, which shows
/// the server's own namespace: a probe connection would count against its limits, or
/// be the one test an `iperf3 -s -1` serves.
pub fn await_listening(server: &Child, addr: std::net::SocketAddrV4) {
    let listening = format!(
        "{:08X}:{:04X} 00000000:0000 0A",
        u32::from_le_bytes(addr.ip().octets()),
        addr.port()
    );
    let table = format!("/proc/{}/net/tcp", server.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&table)
        .unwrap_or_default()
        .contains(&listening)
    {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free loopback port, free when asked: whoever binds it must do so soon. Tests that
/// ask at once get different ones, as the kernel starts each search at a random port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Debian's iperf3, the reference the comparison tests drive.
pub const IPERF3: &str = "/usr/bin/iperf3";

/// Whether iperf3 is installed; without it a test prints `SKIP …` and passes, except
/// with `CI=true`, where it fails.
pub fn iperf3_or_skip(test: &str) -> bool {
    if std::path::Path::new(IPERF3).exists() {
        return true;
    }
    assert!(
        !tcplab_sys::netns::in_ci(),
        "{test}: CI must install iperf3 (apt-get install iperf3)"
    );
    eprintln!("SKIP {test}: {IPERF3} is not installed");
    false
}

/// Explains every done run of `db` and asserts that none measured more than 105 % of
/// its binding bound: a bound bounds.
pub fn assert_no_run_exceeds_its_bound(db: &std::path::Path) {
    for run in export_jsonl(db, "runs") {
        if run["status"] != "done" {
            continue;
        }
        let id = run["id"].as_i64().expect("a run id");
        let out = tcplab()
            .args(["explain", &id.to_string(), "--json", "--db"])
            .arg(db)
            .output()
            .expect("running tcplab explain");
        let e = parse_success(&out);
        let measured = f64_at(&e, "/measured_bps");
        let bounds = e["bounds"].as_object().expect("bounds");
        for (name, bound) in bounds {
            if let Some(bound) = bound.as_f64() {
                assert!(
                    measured <= 1.05 * bound,
                    "run {id} of {}: {measured} bit/s is {:.0} % of its {name} bound {bound}",
                    db.display(),
                    100.0 * measured / bound
                );
            }
        }
    }
}

/// The most bytes `cells` (contiguous, in time order) hold over any span of them beyond
/// what `bps` carries in it: 0 when no bin exceeds the rate.
fn excess_bytes(cells: &[tcplab_report::rates::Cell], bps: f64) -> f64 {
    let below = |bytes: f64, us: u64| bytes - bps * us as f64 / 8e6;
    // Bytes less the rate's, from the first cell's start to each edge; the worst span
    // ends at an edge and starts at the lowest edge before it.
    let (mut level, mut lowest, mut worst) = (0.0, 0.0, 0.0f64);
    for c in cells {
        level += below(c.bytes, c.end_us - c.start_us);
        worst = worst.max(level - lowest);
        lowest = f64::min(lowest, level);
    }
    worst
}

/// What is wrong with the throughput over time of every done run in `db`, as the
/// report draws it, against references: each flow's bins add up to the bytes its
/// receiver read by the deadline (within one bin's worth and what a stall of
/// `stall_us` holds back; plus what arrived behind a hole still open then); no flow and no sum exceeds the bottleneck's goodput (the
/// textbook bound) by more than 3 %, nor the chart's dashed bound the TCP flows' rates
/// by more than 5 %, over any span of bins, but for the bytes a stall of `stall_us`
/// holds back (0: in every bin). The experiments'
/// throughput charts: each dashed bound at 95 % of its series' means or above, but for
/// what such a stall at the start of a run's window moves into it.
pub fn chart_errors(db: &std::path::Path, stall_us: u64) -> Vec<String> {
    use tcplab_report::{find_chart, rates, Body, Target};
    let mut errors = Vec::new();
    let store = tcplab_store::Store::open(db).expect("opening the database");
    for row in store.list_runs().unwrap() {
        if row.status != "done" {
            continue;
        }
        let id = row.id;
        let run = store.load_run(id).unwrap();
        let what = format!("run {id} of {}", db.display());
        // Both ways, a sender's ACKs wait behind the other direction's data: its bytes
        // move between bins by as much as that queue holds them.
        let stall_us = if run.params.mode == tcplab_record::Mode::Bidir {
            stall_us.max(longest_queue_us(&run))
        } else {
            stall_us
        };
        let Some(r) = rates::rates(&run) else {
            errors.push(format!("{what}: no throughput over time"));
            continue;
        };
        for f in &r.flows {
            let cells: f64 = f.cells.iter().map(|c| c.bytes).sum();
            let received: u64 = run
                .intervals
                .iter()
                .filter(|i| i.flow == f.flow && !i.drain)
                .map(|i| i.received_bytes)
                .sum();
            let fastest = f.cells.iter().map(|c| c.bps()).fold(0.0, f64::max);
            let bin_bytes = fastest * r.bin_us as f64 / 8e6;
            // A receiver's sampler kept off the CPU at the deadline misses what it read
            // in the stall. And the emulator hands a flow's consecutive segments to its
            // receiver in one write of up to 64 of them: a slow flow (one of 64 sharing
            // 100 Mbit/s) can read such a write just before the deadline, whose
            // acknowledgement its sender's samples see only after it (once seen: 45
            // segments, 65 160 bytes, against a bin of 29 KB and a stall of 32 KB).
            let stalled_bytes = fastest * stall_us as f64 / 8e6;
            let mss = run
                .flows
                .iter()
                .find(|r| r.id == f.flow)
                .map_or(1448, |r| r.mss);
            let one_write = (MAX_COALESCE_SEGMENTS as u32 * mss) as f64;
            if (cells - f.out_of_order_bytes - received as f64).abs()
                > bin_bytes + stalled_bytes.max(one_write)
            {
                errors.push(format!(
                    "{what}: flow {} ({:?})'s bins hold {cells} bytes ({} behind a hole), its receiver read {received} by the deadline; one bin holds {bin_bytes}, a stall {stalled_bytes}",
                    f.flow, f.source, f.out_of_order_bytes
                ));
            }
        }
        let udp: Vec<u32> = run
            .flows
            .iter()
            .filter(|f| f.udp.is_some())
            .map(|f| f.id)
            .collect();
        // Both ways, each direction's total against its own (equal) bottleneck.
        let totals: Vec<&[rates::Cell]> = if r.by_direction.is_empty() {
            vec![r.total.as_slice()]
        } else {
            r.by_direction.iter().map(|(_, c)| c.as_slice()).collect()
        };
        let tcp_cells: Vec<&[rates::Cell]> = r
            .flows
            .iter()
            .filter(|f| !udp.contains(&f.flow))
            .map(|f| f.cells.as_slice())
            .chain(totals.iter().copied().filter(|_| udp.is_empty()))
            .collect();
        // Bytes beyond `bps` over any span, less what a stall of `stall_us` holds back.
        let beyond = |cells: &[&[rates::Cell]], bps: f64| {
            let held = bps * stall_us as f64 / 8e6;
            cells
                .iter()
                .map(|c| excess_bytes(c, bps) - held)
                .fold(0.0, f64::max)
        };
        let explained = tcplab_analysis::explain::explain(&run);
        let all: Vec<&[rates::Cell]> = r
            .flows
            .iter()
            .map(|f| f.cells.as_slice())
            .chain(totals)
            .collect();
        match (&explained.path, explained.bounds.link_bps) {
            (Some(path), Some(goodput)) if path.capacity.is_some() => {
                // A trace's or a schedule's rate varies: each bin against what it
                // offered then, from a round trip and a stall before (a sender's
                // samples count bytes an RTT after they crossed it).
                let trace_bps = path.capacity.unwrap().bps;
                let lead_us = path.base_rtt_us + stall_us;
                let over = trace_bin_errors(&run, &all, goodput / trace_bps, lead_us);
                errors.extend(over.into_iter().map(|e| format!("{what}: {e}")));
            }
            (_, Some(goodput)) => {
                let over = beyond(&all, 1.03 * goodput);
                if over > 0.0 {
                    errors.push(format!(
                        "{what}: {over} bytes beyond 103 % of the link's goodput {goodput}: {all:?}"
                    ));
                }
            }
            _ => {}
        }
        let chart = find_chart(
            &store,
            Some(Target::Run(id)),
            "throughput",
            Default::default(),
        )
        .unwrap();
        let Body::Lines { series, .. } = &chart.body else {
            panic!("{what}: throughput over time is lines");
        };
        if let Some(bound) = series.iter().find(|s| s.name.starts_with("bound: ")) {
            let over = beyond(&tcp_cells, bound.points[0].y / 0.95);
            if over > 0.0 {
                errors.push(format!(
                    "{what}: the dashed {} at {} bit/s lies below the TCP flows by more than 5 % ({over} bytes beyond): {tcp_cells:?}",
                    bound.name, bound.points[0].y
                ));
            }
        }
    }
    for e in store.experiments().unwrap() {
        // A mean is over a run's window after its warm-up: a stall of `stall_us` at the
        // window's start moves bytes into it that the bound did not carry then.
        let window_us = store
            .points(e.id)
            .unwrap()
            .iter()
            .map(|p| p.config.duration_us - p.config.warmup_us)
            .min()
            .unwrap_or(1)
            .max(1);
        let stalled = stall_us as f64 / window_us as f64;
        let charts =
            tcplab_report::charts(&store, Target::Experiment(e.id), Default::default()).unwrap();
        for chart in charts.iter().filter(|c| c.id.starts_with("throughput")) {
            let (Body::Lines { series, .. } | Body::Bars { series, .. }) = &chart.body else {
                continue;
            };
            // Each series is followed by its bound, dashed.
            for pair in series.windows(2).filter(|w| !w[0].dashed && w[1].dashed) {
                for p in &pair[0].points {
                    let Some(b) = pair[1].points.iter().find(|b| b.x == p.x) else {
                        continue;
                    };
                    if p.y > b.y / 0.95 + b.y * stalled {
                        errors.push(format!(
                            "{} of {}: {} at x {}: bound {} below the mean {}",
                            chart.id,
                            db.display(),
                            pair[0].name,
                            p.x,
                            b.y,
                            p.y
                        ));
                    }
                }
            }
        }
    }
    errors
}

/// The longest a packet waited in either bottleneck queue of the run, µs: its largest
/// queue over the direction's rate.
fn longest_queue_us(run: &tcplab_record::RunRecord) -> u64 {
    use tcplab_netsim::path::{Bottleneck, Direction, PathSpec};
    let Some(path) = &run.path else { return 0 };
    let Ok(spec) = path.spec.parse::<PathSpec>() else {
        return 0;
    };
    [(Direction::Up, &path.up), (Direction::Down, &path.down)]
        .into_iter()
        .filter_map(|(dir, stats)| {
            let Bottleneck::Rate { bps, .. } = spec.link(dir).bottleneck else {
                return None;
            };
            let bytes = stats.queue.iter().map(|q| q.bytes).max()?;
            Some(bytes * 8_000_000 / bps.max(1))
        })
        .max()
        .unwrap_or(0)
}

/// The bins of `cells` that hold more than `goodput_share` of what the run's trace
/// bottleneck offered from `lead_us` before them to their end.
fn trace_bin_errors(
    run: &tcplab_record::RunRecord,
    cells: &[&[tcplab_report::rates::Cell]],
    goodput_share: f64,
    lead_us: u64,
) -> Vec<String> {
    let path = run.path.as_ref().expect("a trace path");
    let shift = (run.started_unix_us - path.epoch_unix_us) as u64;
    let stats = path.data_direction();
    let mut errors = Vec::new();
    for c in cells.iter().flat_map(|c| c.iter()) {
        let from = (c.start_us + shift).saturating_sub(lead_us);
        let offered = stats.offered_bytes(from, c.end_us + shift).unwrap_or(0.0);
        if c.bytes > goodput_share * offered {
            errors.push(format!(
                "{} bytes in {}–{} µs of the run, beyond the trace's {offered} offered from {lead_us} µs before",
                c.bytes, c.start_us, c.end_us
            ));
        }
    }
    errors
}

/// A host kept off the CPU on a loaded machine (a receiver descheduled, its
/// acknowledgements then sent at once) moves bytes from one bin into a later one: at
/// 1 Gbit/s, 754 then 1184 Mbit/s were seen in bins of 100 ms, and a CI run moved 66 ms
/// of 1 Gbit/s into the next bin. This much of a stall the checks of
/// [`assert_charts_hold`] allow; they hold per bin in
/// `throughput_over_time_holds_per_bin`. A receiver starved longer (32 and 38 MB
/// unread at 1 Gbit/s, on one loaded day) is load's doing: the quick studies retry it.
pub const STALL_US: u64 = 100_000;

/// [`chart_errors`] with a [`STALL_US`] stall allowed: none.
pub fn assert_charts_hold(db: &std::path::Path) {
    let errors = chart_errors(db, STALL_US);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// Whether tshark is here: in CI it must be, elsewhere the test skips.
pub fn tshark_or_skip(test: &str) -> bool {
    program_or_skip(test, "tshark")
}

/// Whether tcptrace is here; CI must have it.
pub fn tcptrace_or_skip(test: &str) -> bool {
    program_or_skip(test, "tcptrace")
}

/// Whether `program -v` runs: in CI it must, elsewhere the test skips.
pub fn program_or_skip(test: &str, program: &str) -> bool {
    let found = Command::new(program).arg("-v").output().is_ok();
    match (found, tcplab_sys::netns::in_ci()) {
        (true, _) => true,
        (false, true) => panic!("{test}: CI must have {program}"),
        (false, false) => {
            eprintln!("SKIP {test}: no {program}");
            false
        }
    }
}

/// tcptrace's average RTT of the busiest TCP connection in a capture, ms, in each of
/// its directions (a→b, b→a; a is the end that opened it).
pub fn tcptrace_rtt_avg(file: &std::path::Path) -> (f64, f64) {
    let out = Command::new("tcptrace")
        .arg("-l")
        .arg("-r")
        .arg(file)
        .output()
        .expect("running tcptrace");
    assert!(out.status.success(), "tcptrace: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |conn: &str, name: &str| -> Vec<f64> {
        conn.lines()
            .filter(|l| l.contains(name))
            .flat_map(|l| {
                l.split(name)
                    .skip(1)
                    .filter_map(|v| v.split_whitespace().next()?.parse().ok())
                    .collect::<Vec<f64>>()
            })
            .collect()
    };
    text.split("================================")
        .skip(1)
        .filter_map(|conn| {
            let packets = field(conn, "total packets:");
            let avg = field(conn, "RTT avg:");
            Some((packets.iter().sum::<f64>(), *avg.first()?, *avg.get(1)?))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, a2b, b2a)| (a2b, b2a))
        .unwrap_or_else(|| panic!("no RTT in tcptrace's output: {text}"))
}

/// tshark's fields of every packet that `filter` selects, tab-separated.
pub fn tshark(file: &std::path::Path, filter: &str, fields: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(file).args(["-Y", filter, "-T", "fields"]);
    for field in fields {
        cmd.args(["-e", field]);
    }
    let out = cmd.output().expect("running tshark");
    assert!(out.status.success(), "tshark: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// One direction of a TCP connection in a capture, as tshark reads its packets.
#[derive(Default, Debug)]
pub struct CapturedDirection {
    /// tshark's index of the connection (`tcp.stream`).
    stream: u64,
    /// The payload: the highest relative sequence number reached, less the SYN's.
    pub payload: u64,
    /// The relative sequence number after the last one sent so far: a SYN and a FIN
    /// take one each, as in the kernel's count.
    sent_end: u64,
    /// Segments starting below what the direction had already sent: the
    /// retransmissions of data, SYN and FIN alike, as the kernel's `total_retrans`
    /// counts them (the capture is at the bottleneck's entry, so it holds the
    /// originals that were lost too).
    pub retransmitted: u64,
}

/// Each direction of each TCP connection in a capture, by ("src:port", "dst:port"):
/// the connections of one address pair in the order they opened, as a client's port
/// may be taken again once its last connection closed (the server's end in TIME_WAIT
/// takes a new SYN).
#[derive(Default, Debug)]
pub struct CapturedConnections(
    std::collections::BTreeMap<(String, String), std::collections::VecDeque<CapturedDirection>>,
);

impl CapturedConnections {
    /// The first connection left from `from` to `to`, taken out (an empty one if none).
    pub fn take(&mut self, from: &str, to: &str) -> CapturedDirection {
        let key = (from.to_owned(), to.to_owned());
        let Some(directions) = self.0.get_mut(&key) else {
            return CapturedDirection::default();
        };
        let first = directions.pop_front().unwrap_or_default();
        if directions.is_empty() {
            self.0.remove(&key);
        }
        first
    }

    /// The first connection from `from` to `to`.
    pub fn get(&self, from: &str, to: &str) -> Option<&CapturedDirection> {
        self.0.get(&(from.to_owned(), to.to_owned()))?.front()
    }

    /// One direction not taken yet: ("src:port", "dst:port").
    pub fn left(&self) -> Option<&(String, String)> {
        self.0.keys().next()
    }
}

/// Each direction of each TCP connection in `file`.
pub fn capture_directions(file: &Path) -> CapturedConnections {
    let mut seen = CapturedConnections::default();
    let lines = tshark(
        file,
        "tcp.len > 0 or tcp.flags.syn == 1 or tcp.flags.fin == 1",
        &[
            "ip.src",
            "tcp.srcport",
            "ip.dst",
            "tcp.dstport",
            "tcp.seq",
            "tcp.len",
            "tcp.flags.syn",
            "tcp.flags.fin",
            "tcp.stream",
        ],
    );
    // tshark prints a flag as 1 or 0, newer releases as True or False.
    let flag = |field: &str| matches!(field, "1" | "True");
    for line in lines {
        let f: Vec<&str> = line.split('\t').collect();
        let key = (format!("{}:{}", f[0], f[1]), format!("{}:{}", f[2], f[3]));
        let (seq, len): (u64, u64) = (f[4].parse().unwrap(), f[5].parse().unwrap());
        let stream: u64 = f[8].parse().unwrap();
        let span = len + u64::from(flag(f[6])) + u64::from(flag(f[7]));
        let directions = seen.0.entry(key).or_default();
        let d = match directions.iter().position(|d| d.stream == stream) {
            Some(k) => &mut directions[k],
            None => {
                directions.push_back(CapturedDirection {
                    stream,
                    ..CapturedDirection::default()
                });
                directions.back_mut().expect("just pushed")
            }
        };
        // Relative sequence numbers: the SYN is 0, the first byte of data 1.
        if seq < d.sent_end {
            d.retransmitted += 1;
        }
        d.sent_end = d.sent_end.max(seq + span);
        if len > 0 {
            d.payload = d.payload.max(seq + len - 1);
        }
    }
    seen
}

/// `tcplab report DB -o DIR/report`, which must succeed; the page's HTML.
pub fn report_html(db: &std::path::Path, dir: &std::path::Path) -> String {
    let report = dir.join("report");
    let out = tcplab()
        .arg("report")
        .arg(db)
        .arg("-o")
        .arg(&report)
        .output()
        .expect("running tcplab report");
    assert_success(&out);
    std::fs::read_to_string(report.join("index.html")).expect("the report's page")
}

/// A capture of one direction's traffic where it enters the emulator: dumpcap on a
/// namespace's TUN device sees each packet as the kernel hands it over, GSO packets
/// whole, stamped by the kernel (the packet socket's clock) before the emulator reads it.
pub struct Capture {
    dumpcap: Child,
    pcap: PathBuf,
    log: PathBuf,
}

impl Capture {
    /// Starts dumpcap in namespace `ns` on `tcplab0` into `pcap` (the first 128 bytes
    /// of each packet, a 64 MiB buffer so a 1 Gbit/s flow loses none) and waits until
    /// it runs.
    pub fn start(ns: &str, pcap: &Path) -> Capture {
        let (pcap, log) = (pcap.to_path_buf(), pcap.with_extension("log"));
        let dumpcap = Command::new("ip")
            .args(["netns", "exec", ns, "dumpcap", "-i", "tcplab0", "-s", "128"])
            .args(["-B", "64", "-q", "-w"])
            .arg(&pcap)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting dumpcap (from tshark's package)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log).unwrap().contains("File:") {
            assert!(Instant::now() < deadline, "dumpcap did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Capture { dumpcap, pcap, log }
    }

    /// Stops the capture once dumpcap has written what it was sent (its file stopped
    /// growing: a busy dumpcap lags, and what it has not read when signalled is lost
    /// uncounted); the packets the kernel dropped before dumpcap read them.
    pub fn stop(mut self) -> (PathBuf, u64) {
        let size = || std::fs::metadata(&self.pcap).map_or(0, |m| m.len());
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = size();
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = size();
            if now == last || Instant::now() > deadline {
                break;
            }
            last = now;
        }
        // SAFETY: signalling our own child (`ip netns exec` execs dumpcap in place).
        unsafe { libc::kill(self.dumpcap.id() as libc::pid_t, libc::SIGINT) };
        self.dumpcap.wait().unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap();
        // "Packets received/dropped on interface 'tcplab0': 65222/0 (…)"
        let dropped = log
            .lines()
            .find_map(|l| {
                l.split_once("received/dropped on interface")?
                    .1
                    .split_once(": ")
            })
            .and_then(|(_, counts)| counts.split_once('/')?.1.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no drop count in dumpcap's log: {log}"));
        (self.pcap, dropped)
    }
}

/// A lab of `path` with one client and the emulator, built in this process (so its
/// final counters come back from `Lab::down`), counting the control connection of a
/// tcplab server on port 5201 apart.
pub fn emulator_lab(name: &str, path: &str) -> tcplab_lab::Lab {
    tcplab_lab::Lab::up(&tcplab_lab::LabConfig {
        name: name.into(),
        path: path.parse().expect("a path spec"),
        clients: vec![tcplab_netsim::path::PathSpec::default()],
        backend: tcplab_lab::Backend::Emulator,
        sysctls: Default::default(),
        capture: None,
        // As `run --path` has it: the tests' server listens on the default port.
        control_port: Some(5201),
    })
    .expect("building the lab")
}

/// The run `tcplab run --json` printed in `out`, through `lab`: the lab taken down and
/// its final counters (the run's `path`) put in the record, as `run --path` would.
pub fn run_through(lab: tcplab_lab::Lab, out: &Output) -> tcplab_record::RunRecord {
    let entry = lab.entry.clone();
    let stats = lab.down().expect("taking the lab down");
    assert_success(out);
    let mut run: tcplab_record::RunRecord =
        serde_json::from_slice(&out.stdout).expect("the run's JSON");
    run.path = Some(stats.record(&entry));
    run
}

/// One run of a `sweep --dry-run` listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRunRow {
    /// Its place in the whole plan, from 1.
    pub place: u32,
    pub point: u32,
    /// From 1.
    pub repetition: u32,
    /// `done`, `failed`, `pending`, or empty where no database holds the plan.
    pub status: String,
}

/// The runs a `sweep --dry-run` lists, from the line after its table's header.
pub fn dry_run_rows(text: &str) -> Vec<DryRunRow> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("run "))
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let number = |i: usize| w[i].parse().unwrap_or_else(|_| panic!("{l}"));
            DryRunRow {
                place: number(0),
                point: number(1),
                repetition: number(2),
                status: ["done", "failed", "pending"]
                    .into_iter()
                    .find(|s| w.get(3) == Some(s))
                    .unwrap_or_default()
                    .to_owned(),
            }
        })
        .collect()
}

/// Whether process `pid` runs (a zombie does not: it has ended, only its parent has not
/// reaped it yet).
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, r)| !r.starts_with('Z'))
    })
}

/// The running processes below `pid` in the process tree, with their command lines.
pub fn descendants(pid: u32) -> Vec<(u32, String)> {
    let parent_of = |p: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
    };
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    let below = |mut p: u32| {
        while let Some(parent) = parent_of(p).filter(|&q| q > 1) {
            if parent == pid {
                return true;
            }
            p = parent;
        }
        false
    };
    all.into_iter()
        .filter(|&p| process_alive(p) && below(p))
        .map(|p| {
            let cmd = std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default();
            (p, cmd.replace('\0', " ").trim().to_owned())
        })
        .collect()
}

/// The retransmissions' marks in a time-sequence graph's SVG: each vertical line of
/// their colour at the plot's stroke width (the legend's is wider) as (x, top, bottom).
pub fn retransmission_marks(svg: &str) -> Vec<(i32, i32, i32)> {
    let c = tcplab_report::RETRANSMITTED;
    let stroke = format!(
        "stroke=\"#{:02X}{:02X}{:02X}\" stroke-width=\"2\"",
        c.0, c.1, c.2
    );
    svg.split('<')
        .filter(|e| e.starts_with("polyline ") && e.to_uppercase().contains(&stroke.to_uppercase()))
        .map(|e| {
            let from = e.find("points=\"").unwrap() + 8;
            let points: Vec<(i32, i32)> = e[from..e[from..].find('"').unwrap() + from]
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            assert_eq!(points.len(), 2, "{e}");
            assert_eq!(points[0].0, points[1].0, "upright: {e}");
            let (a, b) = (points[0].1, points[1].1);
            (points[0].0, a.min(b), a.max(b))
        })
        .collect()
}

/// Waits up to `limit` for every process in `pids` to end; returns those still running.
pub fn still_running(pids: &[(u32, String)], limit: Duration) -> Vec<(u32, String)> {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<_> = pids
            .iter()
            .filter(|(p, _)| process_alive(*p))
            .cloned()
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILLs `child` once `command` runs below it, and returns what of its descendants
/// then is still running 5 s later.
pub fn kill_once_running(mut child: Child, command: &str) -> Vec<(u32, String)> {
    let below = await_descendant(child.id(), command);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    still_running(&below, Duration::from_secs(5))
}

/// Waits up to 10 s for `command` to appear among the descendants of `pid`, and
/// returns them all.
pub fn await_descendant(pid: u32, command: &str) -> Vec<(u32, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let below = descendants(pid);
        if below.iter().any(|(_, c)| c == command) {
            return below;
        }
        assert!(
            Instant::now() < deadline,
            "no `{command}` below process {pid}: {below:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
