//! The command line. Flag names follow iperf3 where iperf3 has one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tcplab_analysis::compare::FailOn;
use tcplab_analysis::stats::Metric;
use tcplab_lab::capture::CaptureSpec;
use tcplab_model::experiment::Shard;
use tcplab_model::ranges;
use tcplab_model::sockfilter::Prefix;
use tcplab_model::test_builder::{
    self, ProbeInput, Source, Streams, TestError, TestInput, TransactionInput, UdpInput,
};
use tcplab_netsim::capture::DEFAULT_SNAPLEN;
use tcplab_netsim::path::PathSpec;
use tcplab_record::capture::CapturePoint;
use tcplab_record::units::{parse_duration, parse_rate, parse_size};
use tcplab_record::{Mode, SendMethod, TestEnd, TestParams};
use tcplab_traffic::limits::ServerLimits;

#[derive(Parser, Debug)]
#[command(
    name = "tcplab",
    version,
    about = "A TCP performance lab in one binary",
    long_about = "A TCP performance lab in one binary. tcplab emulates a network path (delay, \
        jitter, loss, reordering, a bottleneck rate or a cellular trace, its queue and AQM) \
        between network namespaces, drives real kernel TCP and UDP transfers across it, \
        samples tcp_info on both ends, stores every run in SQLite and explains its \
        throughput against what the path allows. Each command has its own manual page \
        (tcplab-run(1), tcplab-lab-up(1), …; `tcplab man --dir DIR` writes them all); the \
        guide is README.md and docs/ in tcplab's source.",
    max_term_width = 100
)]
pub struct Cli {
    /// Run inside this network namespace (as `ip netns exec NAME` would).
    #[arg(long, global = true, value_name = "NAME")]
    pub netns: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve tests to tcplab clients, several at once.
    Serve(ServeArgs),
    /// Run one test against a tcplab server, or across an emulated path (--path).
    Run(RunArgs),
    /// Run a test across an emulated 20 ms, 1 Gbit/s path and store it.
    Quickstart(QuickstartArgs),
    /// Labs: namespaces joined through the link emulator, kept until `lab down`.
    #[command(subcommand)]
    Lab(LabCommand),
    /// Run a command behind an emulated path (as mahimahi's shells do), then remove the lab.
    Shell(ShellArgs),
    /// Follow every TCP connection a filter matches, any program's (Web100-style): live
    /// lines per connection, JSON lines (--json), or a run of kind `watch` stored (--db).
    Watch(WatchArgs),
    /// List the runs stored in a database.
    Runs {
        #[command(flatten)]
        db: DbArg,
    },
    /// Export one table of a database as CSV or JSON lines.
    Export(ExportArgs),
    /// Store runs kept as JSON in a database: the DB.run-….json a database that refused
    /// a run leaves beside it, or what `run --json` printed.
    Import(ImportArgs),
    /// Run an experiment file: every point × repetition, shuffled, stored, resumable.
    Sweep(SweepArgs),
    /// Per-point statistics of an experiment's runs.
    Results(ResultsArgs),
    /// Put the databases of a study's shards (`sweep --shard K/N`) into one.
    Merge(MergeArgs),
    /// Each point's metrics from one experiment to another (two databases, or two
    /// experiments in one), with Welch's interval and t-test; a regression past
    /// --fail-on exits 3.
    Compare(CompareArgs),
    /// Why a stored run got its throughput: the bounds, what limited it, what to change.
    Explain(ExplainArgs),
    /// An HTML report of a database's experiments and runs (DIR/index.html, self-contained).
    Report(ReportArgs),
    /// One chart of an experiment or a run, as SVG or PNG.
    Plot(PlotArgs),
    /// The path-spec grammar that --path, --client-path and experiment files take.
    PathSpec,
    /// A shell completion script on stdout (e.g. `tcplab completions bash > /etc/bash_completion.d/tcplab`).
    Completions { shell: clap_complete::Shell },
    /// The manual (roff): tcplab(1) or one command's page on stdout (`tcplab man | man -l
    /// -`, `tcplab man lab up`), or every page into a directory (`--dir`).
    Man(ManArgs),
}

/// `tcplab watch`. The namespace is the global --netns (`tcplab watch --netns NAME`).
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Connections with this port at either end (repeatable: any of them).
    #[arg(long, value_name = "PORT")]
    pub port: Vec<u16>,
    /// Connections with an address in this prefix at either end, e.g. 10.0.0.0/8, ::1
    /// (repeatable: any of them).
    #[arg(long, value_name = "CIDR")]
    pub addr: Vec<Prefix>,
    /// Connections held by this process.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Connections held by a process of this command name (its /proc/PID/comm).
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// Connections made in this cgroup v2: a directory under /sys/fs/cgroup, absolute or
    /// relative to it (e.g. system.slice/ssh.service).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// How often every matching socket is sampled (1ms..=100ms).
    #[arg(long, short = 'i', default_value = "10ms", value_parser = parse_watch_interval, value_name = "DURATION")]
    pub sample_interval: u64,
    /// How often each open connection's line is printed (and its interval cut).
    #[arg(long, default_value = "1s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub report_interval: u64,
    /// Watch this long; without, until Ctrl-C.
    #[arg(long, short = 't', value_parser = parse_positive_duration, value_name = "DURATION")]
    pub time: Option<u64>,
    /// Print JSON lines as things happen (opened, interval, closed) instead of text.
    #[arg(long, short = 'J')]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Where `run` and `watch` store what they measured, and how the run is named there.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// Store the run in this SQLite database (`watch`: a run of kind `watch`, each
    /// connection a flow with its samples).
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// A label for the stored run.
    #[arg(long)]
    pub label: Option<String>,
    /// A tag for the stored run (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
}

fn parse_watch_interval(s: &str) -> Result<u64, String> {
    ranges::check_watch_interval(parse_duration(s).map_err(|e| e.to_string())?)
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// A command's page instead of tcplab(1), e.g. `sweep` or `lab up`.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write tcplab.1 and a page for every command and subcommand (tcplab-sweep.1,
    /// tcplab-lab-up.1, …) into DIR, created if missing, e.g. /usr/local/share/man/man1.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

/// A database to read, named as an argument (`tcplab runs X.db`) or with `--db`, as
/// `run`, `sweep`, `quickstart` and `explain` name it: either works everywhere.
#[derive(Args, Debug)]
pub struct DbArg {
    /// The SQLite database.
    #[arg(id = "db_file", value_name = "DB", required_unless_present = "db")]
    file: Option<PathBuf>,
    /// The SQLite database (instead of DB, as `run` and `explain` take it).
    #[arg(
        long = "db",
        id = "db",
        value_name = "FILE",
        conflicts_with = "db_file"
    )]
    flag: Option<PathBuf>,
}

impl DbArg {
    pub fn path(&self) -> &Path {
        self.flag
            .as_deref()
            .or(self.file.as_deref())
            .expect("clap requires DB or --db")
    }
}

/// A run's id; a file name there gets the flag that names a database.
fn parse_run_id(text: &str) -> Result<i64, String> {
    text.parse().map_err(|_| {
        if text.contains(['.', '/']) {
            format!("a run id is a number; to name a database, write --db {text}")
        } else {
            "a run id is a number (tcplab runs DB lists them)".into()
        }
    })
}

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The run's id [default: the latest run].
    #[arg(conflicts_with = "last", value_parser = parse_run_id)]
    pub run: Option<i64>,
    /// Explain the latest run (the default without a run id).
    #[arg(long)]
    pub last: bool,
    /// The SQLite database.
    #[arg(long, default_value = "tcplab-quickstart.db", value_name = "FILE")]
    pub db: PathBuf,
    /// Print JSON (verdict.limit, bounds, findings, …) instead of text.
    #[arg(long, short = 'J')]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// The experiment file (TOML; see docs/experiments.md).
    pub file: PathBuf,
    /// The SQLite database of the experiment [default: NAME.db, NAME from the file].
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// Print the plan and the time it needs; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run the runs that failed before again.
    #[arg(long)]
    pub retry_failed: bool,
    /// The file changed since the database's plan: plan it as a new experiment beside it.
    #[arg(long)]
    pub new_experiment: bool,
    /// Run only the K-th of N disjoint parts of the plan (1 ≤ K ≤ N), e.g. one task of a
    /// Slurm job array (`--shard $SLURM_ARRAY_TASK_ID/4` with `--array=1-4`); `tcplab
    /// merge` puts the parts' databases together.
    #[arg(long, value_parser = parse_shard, value_name = "K/N")]
    pub shard: Option<Shard>,
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    s.parse()
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// The directory to write index.html into (created if missing) [default: NAME-report
    /// beside the database, NAME its file's stem].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Only this experiment, by id (repeatable) [default: every experiment and the runs
    /// outside them].
    #[arg(long = "experiment", value_name = "ID")]
    pub experiments: Vec<i64>,
}

#[derive(Args, Debug)]
pub struct PlotArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// A run's chart: throughput, cwnd, rtt, inflight, limits, udp_loss, udp_jitter, queue,
    /// topology, links, trains, latency, delay, tseq.
    #[arg(long, value_name = "ID", conflicts_with = "experiment", value_parser = parse_run_id)]
    pub run: Option<i64>,
    /// An experiment's chart: throughput, retransmits, rtt, fairness, udp_loss, jitter,
    /// latency, rpm, latency_cdf, transactions, transaction_time, delay, host_drops,
    /// burst, arena, throughput-heatmap (with [AXIS=VALUE,…] when split) [default: the latest
    /// experiment, else the latest run].
    #[arg(long, value_name = "ID")]
    pub experiment: Option<i64>,
    /// The chart's name; a wrong one lists those there are.
    #[arg(long, value_name = "NAME")]
    pub chart: String,
    /// The file to write: .svg or .png.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// The time-sequence graph's flow (--chart tseq) [default: the first TCP flow].
    #[arg(long, value_name = "ID")]
    pub flow: Option<u32>,
    /// The time-sequence graph from this time since the test's start (`1.5s`, `200ms`).
    #[arg(long, value_name = "TIME", value_parser = duration_seconds)]
    pub from: Option<f64>,
    /// … to this time.
    #[arg(long, value_name = "TIME", value_parser = duration_seconds)]
    pub to: Option<f64>,
}

/// A duration as a user types it, in seconds.
fn duration_seconds(text: &str) -> Result<f64, String> {
    tcplab_record::units::parse_duration(text)
        .map(|us| us as f64 / 1e6)
        .map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
pub struct ResultsArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// What to summarise: throughput, retransmits, rtt, fairness, udp_loss, jitter,
    /// latency, rpm, transactions, transaction_time, delay, host_drops, burst.
    #[arg(long, default_value = "throughput", value_parser = parse_metric)]
    pub metric: Metric,
    /// Confidence level of the intervals [default: the experiment's, usually 0.95].
    #[arg(long, value_parser = parse_confidence, value_name = "LEVEL")]
    pub confidence: Option<f64>,
    /// Which experiment of the database, by id [default: the latest].
    #[arg(long, value_name = "ID")]
    pub experiment: Option<i64>,
    /// One flow's share: the metric (throughput, fairness or retransmits) of the flows
    /// of the experiment file's `[[flow]]` of this name alone.
    #[arg(long, value_name = "NAME")]
    pub flow: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, short = 'J')]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shards' databases: the same plans (one file swept with --shard K/N).
    #[arg(required = true, num_args = 1.., value_name = "DB")]
    pub inputs: Vec<PathBuf>,
    /// The merged database (must not exist).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The base experiment's SQLite database.
    pub base: PathBuf,
    /// The new experiment's database (the base's again for two experiments in one).
    pub new: PathBuf,
    /// Which experiment of the base database, by id [default: the latest].
    #[arg(long, value_name = "ID")]
    pub base_experiment: Option<i64>,
    /// Which experiment of the new database, by id [default: the latest].
    #[arg(long, value_name = "ID")]
    pub new_experiment: Option<i64>,
    /// Compare single runs instead: the base's done runs whose label or a tag is LABEL
    /// (`run --db … --label/--tag`); needs --new-label.
    #[arg(long, value_name = "LABEL", requires = "new_label", conflicts_with_all = ["base_experiment", "new_experiment"])]
    pub base_label: Option<String>,
    /// The new database's done runs whose label or a tag is LABEL.
    #[arg(long, value_name = "LABEL", requires = "base_label")]
    pub new_label: Option<String>,
    /// A metric to compare (repeatable) [default: throughput, retransmits, rtt and those
    /// the experiments' flows have: fairness, udp_loss, jitter, latency, rpm,
    /// transactions, transaction_time].
    #[arg(long = "metric", value_parser = parse_metric, value_name = "METRIC")]
    pub metrics: Vec<Metric>,
    /// Exit 3 when a point's METRIC changed significantly by CHANGE or further in its
    /// direction: `throughput:-5%` (a drop of 5 % or more), `latency:+10%` (repeatable).
    #[arg(long = "fail-on", value_parser = parse_fail_on, value_name = "METRIC:CHANGE%")]
    pub fail_on: Vec<FailOn>,
    /// Confidence level of the intervals and tests [default: the base experiment's].
    #[arg(long, value_parser = parse_confidence, value_name = "LEVEL")]
    pub confidence: Option<f64>,
    /// Print JSON instead of a table.
    #[arg(long, short = 'J')]
    pub json: bool,
}

fn parse_fail_on(s: &str) -> Result<FailOn, String> {
    s.parse()
}

fn parse_metric(s: &str) -> Result<Metric, String> {
    s.parse()
}

fn parse_confidence(s: &str) -> Result<f64, String> {
    let level = match s.strip_suffix('%') {
        Some(percent) => percent.parse::<f64>().map(|p| p / 100.0),
        None => s.parse::<f64>(),
    }
    .map_err(|_| format!("'{s}' is not a number; e.g. 0.95 or 95%"))?;
    if level > 0.0 && level < 1.0 {
        Ok(level)
    } else {
        Err(format!("'{s}' is not between 0 and 1 (0 % and 100 %)"))
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address and port to listen on; [::] also accepts IPv4.
    // The doc comment is --help's text, where [::] is not a link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(
        long,
        short = 'B',
        default_value = "[::]:5201",
        value_name = "ADDR:PORT"
    )]
    pub listen: SocketAddr,
    /// Clients must prove this pre-shared key (`tcplab run --key-file` with the same
    /// file). Without a key only peers on this host are served.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Serve any peer without a key: whoever reaches the port may run tests.
    #[arg(long, conflicts_with = "key_file")]
    pub insecure_open: bool,
    /// Serve stock iperf3 clients (`iperf3 -c`), one test at a time, TCP only; they
    /// cannot prove a key, so only local peers unless --insecure-open.
    #[arg(long, conflicts_with = "key_file")]
    pub iperf3: bool,
    /// Most parallel streams (per direction) in one test.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub max_streams: u16,
    /// Longest test; a byte-count test (-n) is cut there.
    #[arg(long, default_value = "5m", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub max_duration: u64,
    /// Most one test may send per direction: UDP -b, --fq-rate and --app-rate above it
    /// are refused, and the TCP flows this server sends are paced to it. 0: no cap.
    /// [default: 1gbit with --key-file or --insecure-open; none for local peers only]
    #[arg(long, value_parser = parse_rate, value_name = "RATE")]
    pub max_rate: Option<u64>,
    /// Tests running at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub max_tests: u32,
    /// Tests running at once from one client address (an IPv6 /64 counts as one).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub max_tests_per_client: u32,
    /// Control connections one client address (IPv6: /64) may open per minute. 0: no limit.
    #[arg(long, default_value_t = 30, value_name = "N")]
    pub max_connect_rate: u32,
    /// Connections in their handshake at once, from all clients. None is refused for it:
    /// a new one takes the place of one that has not said its hello, else of the oldest
    /// from the address with the most, which is told so.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub max_handshakes: u32,
    /// Largest control message read from a client.
    #[arg(long, default_value = "64K", value_parser = parse_message_size, value_name = "SIZE")]
    pub max_message: u64,
    /// Each step of a client's handshake (up to its request, its data connections, its
    /// Go) must be done within this; a silent or trickling peer is dropped.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub handshake_timeout: u64,
}

impl ServeArgs {
    pub fn limits(&self) -> ServerLimits {
        ServerLimits {
            max_streams: self.max_streams,
            max_duration_us: self.max_duration,
            max_rate_bps: match self.max_rate {
                Some(rate) => (rate > 0).then_some(rate),
                // A server that serves only this host's peers has nothing to protect.
                None if self.key_file.is_none() && !self.insecure_open => None,
                None => ServerLimits::default().max_rate_bps,
            },
            max_tests: self.max_tests,
            max_tests_per_client: self.max_tests_per_client,
            max_connect_rate: (self.max_connect_rate > 0).then_some(self.max_connect_rate),
            max_handshakes: self.max_handshakes,
            max_message: self.max_message as usize,
            handshake_timeout: Duration::from_micros(self.handshake_timeout),
            ..ServerLimits::default()
        }
    }
}

/// A test request is about half a kilobyte: a smaller limit would refuse every client.
const MIN_MESSAGE_LIMIT: u64 = 1 << 10;

fn parse_message_size(s: &str) -> Result<u64, String> {
    let size = parse_size(s).map_err(|e| e.to_string())?;
    if !(MIN_MESSAGE_LIMIT..=tcplab_traffic::protocol::MAX_MESSAGE as u64).contains(&size) {
        return Err(format!(
            "must be between 1 KiB and {} MiB",
            tcplab_traffic::protocol::MAX_MESSAGE >> 20
        ));
    }
    Ok(size)
}

fn parse_positive_duration(s: &str) -> Result<u64, String> {
    match parse_duration(s).map_err(|e| e.to_string())? {
        0 => Err("must be positive".into()),
        us => Ok(us),
    }
}

#[derive(Args, Debug, Clone)]
pub struct TestArgs {
    /// Test duration: 10s, 1.5s, 500ms; a bare number is seconds.
    #[arg(long, short = 't', default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION", conflicts_with = "bytes")]
    pub time: u64,
    /// Send this many bytes per stream instead of running for a time (e.g. 100M).
    #[arg(long, short = 'n', value_parser = parse_size, allow_hyphen_values = true, value_name = "SIZE")]
    pub bytes: Option<u64>,
    /// Parallel streams (per direction); 0 with --probe: the probes alone, no load.
    #[arg(long, short = 'P', default_value_t = 1, value_parser = clap::value_parser!(u16).range(0..=i64::from(test_builder::MAX_STREAMS)))]
    pub parallel: u16,
    /// Reverse: the server sends, the client receives.
    #[arg(long, short = 'R', conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    pub bidir: bool,
    /// Socket buffer for both SO_SNDBUF and SO_RCVBUF, both ends (iperf3's -w).
    #[arg(long, short = 'w', value_parser = parse_size, allow_hyphen_values = true, value_name = "SIZE")]
    pub window: Option<u64>,
    /// SO_SNDBUF of the sending sockets (overrides --window).
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true, value_name = "SIZE")]
    pub sndbuf: Option<u64>,
    /// SO_RCVBUF of the receiving sockets (overrides --window).
    #[arg(long, value_parser = parse_size, allow_hyphen_values = true, value_name = "SIZE")]
    pub rcvbuf: Option<u64>,
    /// Bytes per write (the message size) [default: 128K]; with --udp, the datagram's
    /// payload [default: 1448].
    #[arg(long, short = 'l', value_parser = parse_size, allow_hyphen_values = true, value_name = "SIZE")]
    pub length: Option<u64>,
    /// Bytes per read on the receiver.
    #[arg(long, default_value = "128K", value_parser = parse_size, allow_hyphen_values = true, value_name = "SIZE")]
    pub read_size: u64,
    /// Disable Nagle's algorithm (TCP_NODELAY).
    #[arg(long, short = 'N')]
    pub no_delay: bool,
    /// TCP maximum segment size (TCP_MAXSEG).
    #[arg(long = "set-mss", short = 'M', value_parser = parse_size, allow_hyphen_values = true, value_name = "SIZE")]
    pub mss: Option<u64>,
    /// Congestion control algorithm (TCP_CONGESTION), e.g. cubic, reno, bbr.
    #[arg(long, short = 'C', value_name = "NAME")]
    pub congestion: Option<String>,
    /// Cap the sender's pacing rate (SO_MAX_PACING_RATE), e.g. 500mbit.
    #[arg(long = "fq-rate", alias = "pacing-rate", value_parser = parse_rate, allow_hyphen_values = true, value_name = "RATE")]
    pub pacing_rate: Option<u64>,
    /// Pace the sender's writes at RATE (application pacing: each write when its bytes
    /// fall due), e.g. 500mbit.
    #[arg(long, value_parser = parse_rate, allow_hyphen_values = true, value_name = "RATE")]
    pub app_rate: Option<u64>,
    /// How the sender hands data to the kernel. write() measured faster than sendfile()
    /// here (bench/engine.sh), so it is the default.
    #[arg(long, value_enum, default_value_t = SendMethodArg::Write)]
    pub send_method: SendMethodArg,
    /// Zero-copy sending with sendfile() (iperf3's -Z; same as --send-method sendfile).
    #[arg(long, short = 'Z', conflicts_with = "send_method")]
    pub zerocopy: bool,
    /// UDP flows instead of TCP: datagrams at --bitrate, each numbered and timestamped.
    #[arg(long, short = 'u')]
    pub udp: bool,
    /// A UDP flow's payload rate (iperf3's -b), e.g. 100mbit; 0 = as fast as it can.
    #[arg(long, short = 'b', default_value = "1mbit", value_parser = parse_rate, allow_hyphen_values = true, value_name = "RATE", requires = "udp")]
    pub bitrate: u64,
    /// UDP datagrams sent back to back each time (1 = evenly spaced).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(test_builder::MAX_BURST)), requires = "udp")]
    pub burst: u32,
    /// Seconds between live report lines.
    #[arg(long, short = 'i', default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub interval: u64,
    /// tcp_info sampling period on both ends; 0 turns sampling off.
    #[arg(long, default_value = "10ms", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub sample_interval: u64,
    /// Round-trip probes beside the test, one every DURATION (1ms..=10s): UDP requests
    /// the server echoes with its own times, giving idle and loaded latency, one-way
    /// delays, loss per direction and RPM (summary.latency).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub probe: Option<u64>,
    /// With --probe: how long to probe the idle path before the load starts.
    #[arg(long, default_value = "2s", value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION", requires = "probe")]
    pub probe_idle: u64,
    /// Request/response transactions instead of a bulk transfer (netperf's TCP_RR -r):
    /// each connection writes a request of REQUEST bytes, the server answers with
    /// RESPONSE bytes (REQUEST when not given), and the next request waits for it.
    #[arg(long, value_parser = parse_request_response, value_name = "REQUEST[,RESPONSE]", conflicts_with_all = ["udp", "reverse", "bidir"])]
    pub rr: Option<(u64, u64)>,
    /// With --rr: split each request into N writes (2 meets Nagle's algorithm and the
    /// peer's delayed ACK; see -N).
    #[arg(long, default_value_t = 1, value_name = "N", requires = "rr")]
    pub rr_writes: u32,
    /// Ask for ECN: the lab's client host gets net.ipv4.tcp_ecn = 1, so its connections
    /// negotiate ECN (Linux has no per-socket switch); needs --path.
    #[arg(long)]
    pub ecn: bool,
    /// With --rr: a new connection for each transaction (netperf's TCP_CRR): its time
    /// includes the handshake; one stream.
    #[arg(long, requires = "rr")]
    pub crr: bool,
}

/// `REQUEST[,RESPONSE]` sizes, as netperf's `-r`: "100", "100,1K".
fn parse_request_response(text: &str) -> Result<(u64, u64), String> {
    let size = |t: &str| parse_size(t.trim()).map_err(|e| e.to_string());
    match text.split_once(',') {
        Some((request, response)) => Ok((size(request)?, size(response)?)),
        None => size(text).map(|request| (request, request)),
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SendMethodArg {
    Write,
    Sendfile,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The server: HOST, HOST:PORT, [IPv6]:PORT (port 5201 when omitted). Leave it out
    /// with --path: the test then runs across a lab built for it.
    // The doc comment is --help's text, where [IPv6] is not a link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(required_unless_present_any = ["path", "topology"], conflicts_with_all = ["path", "topology"])]
    pub target: Option<String>,
    /// The server's pre-shared key (the file its --key-file names): proved to the
    /// server, which must prove it back.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["path", "topology"])]
    pub key_file: Option<PathBuf>,
    /// The server is a stock iperf3 (`iperf3 -s`): speak iperf3's control protocol.
    #[arg(long, requires = "target", conflicts_with = "key_file")]
    pub iperf3: bool,
    #[command(flatten)]
    pub topology: TopologyArg,
    #[command(flatten)]
    pub hosts: TopologyHostsArgs,
    #[command(flatten)]
    pub lab: PathArgs,
    #[command(flatten)]
    pub test: TestArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// An emulated path and the hosts behind it.
#[derive(Args, Debug, Clone)]
pub struct PathArgs {
    /// Path spec of the bottleneck, e.g. "rtt 20ms rate 100mbit queue 1bdp up.loss 1%"
    /// (the grammar: `tcplab path-spec`).
    #[arg(long, value_parser = parse_path, value_name = "SPEC")]
    pub path: Option<PathSpec>,
    /// Client hosts sharing the bottleneck (a dumbbell).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=250))]
    pub clients: u16,
    /// A client's own access link, in client order; one spec applies to every client.
    #[arg(long = "client-path", value_parser = parse_path, value_name = "SPEC")]
    pub client_paths: Vec<PathSpec>,
    /// What carries the packets: tcplab's emulator, or the kernel's netem where it exists.
    #[arg(long, value_enum, default_value_t = BackendArg::Emulator)]
    pub backend: BackendArg,
    /// A sysctl for every lab host, e.g. net.ipv4.tcp_window_scaling=0 (repeatable).
    #[arg(long = "sysctl", value_parser = parse_sysctl, value_name = "KEY=VALUE")]
    pub sysctls: Vec<(String, String)>,
    #[command(flatten)]
    pub capture: CaptureArgs,
}

/// `--topology`: a lab of any shape instead of a dumbbell.
#[derive(Args, Debug, Clone)]
pub struct TopologyArg {
    /// Hosts, routers and links (each with a path spec), and routes, from a TOML file
    /// (docs/topologies.md): a namespace per host, instead of --path's dumbbell; with
    /// it, --capture names a directory, which gets a pcapng file per link
    #[arg(long, value_name = "FILE", conflicts_with_all = ["path", "clients", "client_paths", "backend", "capture_at"])]
    pub topology: Option<PathBuf>,
}

/// Which two of a topology's hosts a test or a shell's command runs between.
#[derive(Args, Debug, Clone)]
pub struct TopologyHostsArgs {
    /// With --topology: the host the connections start from (the command runs there)
    /// [default: its second host]
    #[arg(long, requires = "topology", value_name = "HOST")]
    pub client_host: Option<String>,
    /// With --topology: the host they go to, where the server runs [default: its first
    /// host]
    #[arg(long, requires = "topology", value_name = "HOST")]
    pub server_host: Option<String>,
}

/// A capture of the lab's packets with their fates in the bottleneck.
#[derive(Args, Debug, Clone)]
pub struct CaptureArgs {
    /// Write both directions' packets to this pcapng file, each with its fate in the
    /// bottleneck (delivered, dropped by loss, queue or AQM, marked CE …) and its
    /// queueing delay as a comment, its headers as the bottleneck let it go
    #[arg(long, value_name = "FILE")]
    pub capture: Option<PathBuf>,
    /// Where the capture sees the packets: where each direction enters its bottleneck,
    /// or at the client's or the server's interface, both directions as that host sent
    /// and received them (what tcptrace's and Wireshark's RTTs need)
    #[arg(long, value_enum, default_value_t = CaptureAt::Bottleneck, requires = "capture", value_name = "POINT")]
    pub capture_at: CaptureAt,
    /// Bytes of each packet the capture keeps (its IP and TCP headers by default)
    #[arg(long, default_value_t = DEFAULT_SNAPLEN, value_parser = clap::value_parser!(u32).range(20..=65535), value_name = "BYTES")]
    pub capture_snaplen: u32,
    /// With --topology: capture this link only (once per link to capture several)
    /// [default: every link]
    #[arg(long = "capture-link", requires = "capture", value_name = "LINK")]
    pub capture_links: Vec<String>,
}

/// `--capture-at`: [`CapturePoint`] as clap takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CaptureAt {
    Bottleneck,
    Client,
    Server,
}

impl From<CaptureAt> for CapturePoint {
    fn from(at: CaptureAt) -> CapturePoint {
        match at {
            CaptureAt::Bottleneck => CapturePoint::Bottleneck,
            CaptureAt::Client => CapturePoint::Client,
            CaptureAt::Server => CapturePoint::Server,
        }
    }
}

impl CaptureArgs {
    /// What to capture, the file made absolute so that the run records where it is.
    pub fn spec(&self) -> Result<Option<CaptureSpec>, std::io::Error> {
        self.capture
            .as_ref()
            .map(|file| {
                Ok(CaptureSpec {
                    file: std::path::absolute(file)?,
                    snaplen: self.capture_snaplen,
                    at: self.capture_at.into(),
                })
            })
            .transpose()
    }
}

fn parse_sysctl(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(format!(
            "expected KEY=VALUE, e.g. net.ipv4.tcp_sack=0, not '{s}'"
        )),
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BackendArg {
    Emulator,
    Netem,
}

pub fn parse_path(s: &str) -> Result<PathSpec, tcplab_netsim::path::PathError> {
    s.parse()
}

#[derive(Args, Debug)]
pub struct ShellArgs {
    #[command(flatten)]
    pub topology: TopologyArg,
    #[command(flatten)]
    pub hosts: TopologyHostsArgs,
    #[command(flatten)]
    pub path: PathArgs,
    /// What lies beyond the path: the lab's server host, or also the namespace tcplab
    /// was started in (IPv4; TCPLAB_HOST is where it answers), through NAT as root or
    /// slirp4netns without root
    #[arg(long, value_enum, default_value = "server")]
    pub far: FarArg,
    /// Run CMD (by `sh -c`, with the same variables) in the server host: started before
    /// the command (once it listens, or within 5 s), ended (SIGTERM) after it
    #[arg(long, value_name = "CMD")]
    pub server_cmd: Option<String>,
    /// Watch every TCP connection of the client and server hosts while the commands run
    /// and store them, with the path and both command lines, as a run of kind `watch`
    /// in this SQLite database (`tcplab explain` reads it)
    #[arg(long, value_name = "DB")]
    pub record: Option<std::path::PathBuf>,
    /// With --record, sample every connection this often (1–100 ms)
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_watch_interval, requires = "record")]
    pub sample_interval: u64,
    /// With --record, a label for the stored run
    #[arg(long, requires = "record")]
    pub label: Option<String>,
    /// With --record, store the kernel's events of the watched connections, both ends:
    /// tcp_probe on every segment received, retransmissions, congestion-state changes,
    /// receive-buffer growth (tracefs; needs root); filtered on the ports the server
    /// host listens on once --server-cmd listens, else on none
    #[arg(long, requires = "record")]
    pub trace_events: bool,
    /// The command, run in the (first) client host (a topology's --client-host);
    /// TCPLAB_SERVER, TCPLAB_SERVER6, TCPLAB_SERVER_NS and TCPLAB_CLIENT_NS tell it
    /// where the far side is (a topology's --server-host).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FarArg {
    /// The lab's server host only
    Server,
    /// The caller's network namespace too, through the server host
    Host,
}

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Create namespaces NAME-client and NAME-server joined through the emulator, or a
    /// namespace NAME-HOST per host of a topology file.
    Up {
        name: String,
        #[command(flatten)]
        topology: TopologyArg,
        #[command(flatten)]
        path: PathArgs,
    },
    /// Stop a lab's emulator and remove its namespaces.
    Down { name: String },
    /// List labs.
    List {
        #[arg(long, short = 'J')]
        json: bool,
    },
    /// A lab's hosts, path and live link counters.
    Show {
        name: String,
        #[arg(long, short = 'J')]
        json: bool,
    },
    /// Print the topology file of the dumbbell --path, --clients and --client-path
    /// build (hosts server and clients, router r, its links): `lab up --topology` builds
    /// the same lab from it, and it may be edited into any shape.
    Topology {
        /// Path spec of the bottleneck (`tcplab path-spec`).
        #[arg(long, value_parser = parse_path, value_name = "SPEC")]
        path: PathSpec,
        /// Client hosts sharing the bottleneck.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=250))]
        clients: u16,
        /// A client's own access link, in client order; one spec applies to every client.
        #[arg(long = "client-path", value_parser = parse_path, value_name = "SPEC")]
        client_paths: Vec<PathSpec>,
    },
    /// Remove what labs of dead processes left behind.
    Gc,
    /// Run a command in a host of a lab (as `ip netns exec` would, with or without root).
    Exec {
        name: String,
        /// The host: server, client (the first), or clientK; in a topology's lab, its name.
        host: String,
        /// The command; TCPLAB_SERVER, TCPLAB_SERVER6, TCPLAB_SERVER_NS and
        /// TCPLAB_CLIENT_NS tell it where the lab's hosts are.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Runs a lab's emulator in the foreground (what `lab up` starts in the background).
    #[command(hide = true)]
    Daemon {
        name: String,
        #[command(flatten)]
        topology: TopologyArg,
        #[command(flatten)]
        path: PathArgs,
    },
    /// The init of a `shell` command's pid namespace (what `shell` starts): runs the
    /// command, ends what it leaves, and removes lab NAME should its process `--owner`
    /// die (its `--lifeline` descriptor closes).
    #[command(hide = true)]
    ShellInit {
        name: String,
        #[arg(long)]
        owner: u32,
        #[arg(long)]
        lifeline: i32,
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Print one JSON document (schema tcplab.run/1) on stdout instead of text.
    #[arg(long, short = 'J')]
    pub json: bool,
    /// With --json, include every tcp_info sample.
    #[arg(long, requires = "json")]
    pub json_samples: bool,
    /// With --json, include every round-trip probe (--probe).
    #[arg(long, requires = "json")]
    pub json_probes: bool,
    /// Record the kernel's events of the test's sockets, both ends where the server runs
    /// on this machine: tcp_probe on every segment received, retransmissions,
    /// congestion-state changes, receive-buffer growth (tracefs; needs root).
    #[arg(long)]
    pub trace_events: bool,
    /// With --json, include every kernel event (--trace-events).
    #[arg(long, requires_all = ["json", "trace_events"])]
    pub json_events: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Args, Debug)]
pub struct QuickstartArgs {
    /// The emulated path.
    #[arg(long, default_value = "rtt 20ms rate 1gbit queue 1bdp", value_parser = parse_path, value_name = "SPEC")]
    pub path: PathSpec,
    #[command(flatten)]
    pub capture: CaptureArgs,
    #[command(flatten)]
    pub test: TestArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The runs' JSON files (schema tcplab.run/1).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The SQLite database to store them in (created if missing).
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Table: runs, flows, intervals, samples, events, experiments, points or plan.
    #[arg(long, default_value = "runs")]
    pub table: String,
    /// csv or jsonl.
    #[arg(long, default_value = "csv")]
    pub format: String,
    /// Write here instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

impl TestArgs {
    /// The test the flags ask for, checked by the rules experiment files share.
    pub fn params(&self) -> Result<TestParams, TestError> {
        test_builder::build(&self.input(), Source::Flag)
    }

    /// The flags as the builder takes them; clap has refused what conflicts.
    fn input(&self) -> TestInput {
        TestInput {
            streams: match self.parallel {
                0 => Streams::ProbesAlone,
                n => Streams::Parallel(n),
            },
            end: Some(match self.bytes {
                Some(bytes) => TestEnd::Bytes { bytes },
                None => TestEnd::Duration { us: self.time },
            }),
            mode: Some(if self.bidir {
                Mode::Bidir
            } else if self.reverse {
                Mode::Down
            } else {
                Mode::Up
            }),
            window: self.window,
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            write_size: self.length,
            read_size: Some(self.read_size),
            nodelay: Some(self.no_delay),
            mss: self.mss,
            cc: self.congestion.clone(),
            pacing_rate: self.pacing_rate,
            app_rate: self.app_rate,
            send_method: Some(match (self.zerocopy, self.send_method) {
                (true, _) | (false, SendMethodArg::Sendfile) => SendMethod::Sendfile,
                (false, SendMethodArg::Write) => SendMethod::Write,
            }),
            ecn: Some(self.ecn),
            sample_interval_us: Some(self.sample_interval),
            report_interval_us: Some(self.interval),
            // -l is a UDP flow's datagram size too.
            udp: self.udp.then_some(UdpInput {
                rate_bps: self.bitrate,
                datagram_size: self.length,
                burst: Some(self.burst),
            }),
            probe: self.probe.map(|interval_us| ProbeInput {
                interval_us,
                idle_us: Some(self.probe_idle),
            }),
            transactions: self.rr.map(|(request, response)| TransactionInput {
                request: Some(request),
                response: Some(response),
                request_writes: Some(self.rr_writes),
                new_connection: self.crr,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_flags_default_to_the_public_servers_limits() {
        let limits = |flags: &[&str]| {
            let cli = Cli::parse_from(["tcplab", "serve"].iter().chain(flags));
            let Command::Serve(args) = cli.command else {
                panic!("not serve");
            };
            args.limits()
        };
        assert_eq!(limits(&["--insecure-open"]), ServerLimits::default());
        assert_eq!(limits(&["--key-file", "k"]), ServerLimits::default());
        // Serving only this host's peers, the server caps no rate.
        assert_eq!(
            limits(&[]),
            ServerLimits {
                max_rate_bps: None,
                ..ServerLimits::default()
            }
        );
        assert_eq!(
            limits(&["--max-rate", "100mbit"]).max_rate_bps,
            Some(100_000_000)
        );
    }

    /// The same mistake made with flags and in an experiment file gets one message, but
    /// for the option's name: each front-end hands its values to the one builder.
    #[test]
    fn flags_and_files_refuse_a_mistake_in_the_same_words() {
        use tcplab_model::test_builder::Setting;
        let cases: &[(&[&str], &str, Setting)] = &[
            (&["-M", "10"], "[[flow]]\nmss = 10", Setting::Mss),
            (
                &["-t", "0"],
                "[[flow]]\nduration = \"0s\"",
                Setting::Duration,
            ),
            (&["-n", "0"], "[[flow]]\nbytes = 0", Setting::Bytes),
            (
                &["-l", "8G"],
                "[[flow]]\nwrite_size = \"8G\"",
                Setting::WriteSize,
            ),
            (
                &["--read-size", "0"],
                "[[flow]]\nread_size = 0",
                Setting::ReadSize,
            ),
            (&["-i", "0"], "interval = \"0s\"", Setting::ReportInterval),
            (
                &["--sample-interval", "50us"],
                "sample_interval = \"50us\"",
                Setting::SampleInterval,
            ),
            (
                &["--probe", "100us"],
                "[[flow]]\nprobe = \"100us\"",
                Setting::Probe,
            ),
            (
                &["--probe", "1ms", "--probe-idle", "1h"],
                "[[flow]]\nprobe = \"1ms\"\nprobe_idle = \"1h\"",
                Setting::Probe,
            ),
            (
                &["-u", "-l", "10"],
                "[[flow]]\nprotocol = \"udp\"\nrate = 1\ndatagram_size = 10",
                Setting::DatagramSize,
            ),
            (
                &["-P", "0", "--probe", "10ms", "-n", "1M"],
                "[[flow]]\nprotocol = \"probe\"\nbytes = \"1M\"",
                Setting::ProbesAlone,
            ),
            (
                &["--rr", "0"],
                "[[flow]]\nprotocol = \"rr\"\nrequest = 0",
                Setting::Request,
            ),
            (
                &["--rr", "100,20M"],
                "[[flow]]\nprotocol = \"rr\"\nrequest = 100\nresponse = \"20M\"",
                Setting::Transactions,
            ),
            (
                &["--rr", "10", "--rr-writes", "11"],
                "[[flow]]\nprotocol = \"rr\"\nrequest = 10\nrequest_writes = 11",
                Setting::Transactions,
            ),
            (
                &["--rr", "1", "--crr", "-P", "2"],
                "[[flow]]\nprotocol = \"crr\"\nstreams = 2",
                Setting::ConnectionPerTransaction,
            ),
        ];
        for (flags, file, setting) in cases {
            let cli = Cli::try_parse_from(["tcplab", "run", "h"].iter().chain(*flags)).unwrap();
            let Command::Run(run) = cli.command else {
                panic!("not run");
            };
            let from_flags = run.test.params().unwrap_err().to_string();
            let from_file = tcplab_model::experiment::parse(file, "t")
                .unwrap_err()
                .message;
            let (flag, key) = (setting.spelled(Source::Flag), setting.spelled(Source::Key));
            assert!(from_flags.starts_with(flag), "{flags:?}: {from_flags}");
            let in_flow = |m: &str| {
                m.split_once(": ")
                    .map_or(m.to_owned(), |(_, r)| r.to_owned())
            };
            let from_file = match from_file.strip_prefix("flow '") {
                Some(_) => in_flow(&from_file),
                None => from_file,
            };
            assert_eq!(
                from_flags.replacen(flag, key, 1),
                from_file,
                "{flags:?} against {file:?}"
            );
        }
    }

    #[test]
    fn zero_turns_the_rate_caps_off() {
        let cli = Cli::parse_from([
            "tcplab",
            "serve",
            "--max-rate",
            "0",
            "--max-connect-rate",
            "0",
        ]);
        let Command::Serve(args) = cli.command else {
            panic!("not serve");
        };
        let limits = args.limits();
        assert_eq!(limits.max_rate_bps, None);
        assert_eq!(limits.max_connect_rate, None);
    }
}
