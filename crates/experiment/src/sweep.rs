//! `tcplab sweep`: plans an experiment's runs into its database once, then runs whatever
//! is still pending, each run in a fresh lab, each stored with its plan row in one
//! transaction. Killed at any moment, the same command resumes: finished runs stay, the
//! interrupted one runs again, none runs twice.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tcplab_analysis::stats::Metric;
use tcplab_lab::capture::CaptureSpec;
use tcplab_lab::{registry, Backend, HostPair, LabConfig, LabPlan, LinkCaptures, TopologyConfig};
use tcplab_model::experiment::{
    check_flow_hosts, Experiment, FlowConfig, FlowEnds, Point, RemoteHost, RunConfig, Shard,
    TopologySource,
};
use tcplab_netsim::capture::DEFAULT_SNAPLEN;
use tcplab_netsim::link::{LinkTraces, TraceFileError};
use tcplab_netsim::topology::Topology;
use tcplab_record::capture::CapturePoint;
use tcplab_record::{Mode, RunRecord, RunStatus};
use tcplab_store::{NotStored, Outcome, PlanRow, PlanStatus, Store};
use tcplab_sys::sockopt;
use tcplab_traffic::auth::{self, PreSharedKey};

use crate::command::{run_command_in_lab, CommandFlow};
use crate::labrun::{run_against, run_in_lab, run_in_topology, FlowGroup, RealHost};

/// What the user asked of a sweep.
pub struct SweepRequest<'a> {
    pub experiment: &'a Experiment,
    /// The file as the user named it, and its text.
    pub file: &'a str,
    pub text: &'a str,
    /// Plan a changed file as a new experiment beside the stored one.
    pub new_experiment: bool,
    /// Run the failed runs again.
    pub retry_failed: bool,
    /// Run only this part of the plan (the plan itself is the whole one, ordered by
    /// [`Experiment::shard_seed`] when the file gives no seed).
    pub shard: Option<Shard>,
}

/// The stored experiment a sweep works on.
pub struct Prepared {
    pub id: i64,
    pub seed: u64,
    /// The database already held this plan.
    pub resumed: bool,
    /// Failed runs made pending again by `retry_failed`.
    pub retried: usize,
    pub points: Vec<Point>,
    /// The plan's rows this sweep runs: all of them, or its shard's.
    pub plan: Vec<PlanRow>,
    /// Where the points' relative trace files are: the experiment file's directory.
    pub file_dir: PathBuf,
}

impl Prepared {
    pub fn count(&self, status: PlanStatus) -> usize {
        self.plan.iter().filter(|r| r.status == status).count()
    }
}

/// Finds the experiment's plan in the store or creates it. A store holding a different
/// plan is refused unless `new_experiment`: resuming it with a changed file would mix
/// runs of two studies.
pub fn prepare(store: &mut Store, req: &SweepRequest) -> Result<Prepared> {
    let hash = req.experiment.plan_hash();
    let stored = store.experiments()?;
    let (id, seed, resumed) = match stored.iter().rev().find(|e| e.plan_hash == hash) {
        Some(e) => (e.id, e.seed, true),
        None => {
            if let Some(other) = stored.last().filter(|_| !req.new_experiment) {
                bail!(
                    "{} holds experiment '{}' planned from {} with other runs (plan hash {} ≠ {}): \
                     the file changed since; pass --new-experiment to plan it beside the old one, \
                     or use another --db",
                    store.path().display(),
                    other.name,
                    other.file,
                    &other.plan_hash[..12],
                    &hash[..12]
                );
            }
            let seed = match req.shard {
                Some(_) => req.experiment.shard_seed(),
                None => req
                    .experiment
                    .seed
                    .unwrap_or_else(|| u64::from(rand::random::<u32>())),
            };
            let schedule = req.experiment.schedule(seed);
            let id =
                store.create_experiment(req.experiment, req.file, req.text, seed, &schedule)?;
            (id, seed, false)
        }
    };
    let retried = if req.retry_failed {
        store.retry_failed(id)?
    } else {
        0
    };
    Ok(Prepared {
        id,
        seed,
        resumed,
        retried,
        points: store.points(id)?,
        plan: shard_rows(store.plan(id)?, req.shard),
        file_dir: file_dir(Path::new(req.file)).to_path_buf(),
    })
}

/// The rows of `plan` that `shard` holds (all without one).
pub fn shard_rows(plan: Vec<PlanRow>, shard: Option<Shard>) -> Vec<PlanRow> {
    plan.into_iter()
        .filter(|r| shard.is_none_or(|s| s.holds(r.seq)))
        .collect()
}

/// Refuses a plan naming a congestion control this kernel lacks, before any run. A real
/// host checks the flows it sends itself.
pub fn check_congestion(points: &[Point]) -> Result<()> {
    let wanted: BTreeSet<&str> = points
        .iter()
        .flat_map(|p| {
            p.config
                .flows
                .iter()
                .filter(|f| p.config.server.is_none() || f.params.mode == Mode::Up)
        })
        .filter_map(|f| f.params.tuning.cc.as_deref())
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let available =
        sockopt::available_congestion().context("reading the available congestion controls")?;
    if let Some(cc) = wanted.iter().find(|cc| !available.iter().any(|a| a == *cc)) {
        bail!(
            "unknown congestion control '{cc}' in a flow's cc (available: {})",
            available.join(" ")
        );
    }
    // A command's sockets take their hosts' default, which a lab's namespace may set
    // only to an allowed one.
    let commands: BTreeSet<&str> = points
        .iter()
        .flat_map(|p| &p.config.flows)
        .filter(|f| f.command.is_some())
        .filter_map(|f| f.params.tuning.cc.as_deref())
        .collect();
    if commands.is_empty() {
        return Ok(());
    }
    let allowed =
        sockopt::allowed_congestion().context("reading the allowed congestion controls")?;
    match commands.iter().find(|cc| !allowed.iter().any(|a| a == *cc)) {
        Some(cc) => bail!(
            "cc '{cc}' of a command flow: a lab's hosts may default only to the congestion controls in net.ipv4.tcp_allowed_congestion_control ({}); add it there (sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{} {cc}\") or choose one of them",
            allowed.join(" "),
            allowed.join(" ")
        ),
        None => Ok(()),
    }
}

/// The real hosts the plan's points run against, by name, their keys read: a key file
/// that cannot be read is refused before any run.
pub fn real_hosts(points: &[Point], experiment_file: &Path) -> Result<BTreeMap<String, RealHost>> {
    let mut hosts = BTreeMap::new();
    for host in points.iter().filter_map(|p| p.config.server.as_ref()) {
        if hosts.contains_key(&host.name) {
            continue;
        }
        let key = host_key(host, experiment_file)?;
        hosts.insert(
            host.name.clone(),
            RealHost {
                address: host.address.clone(),
                key,
                iperf3: host.iperf3,
            },
        );
    }
    Ok(hosts)
}

/// A real host's key, if it has one. A relative key path is taken from the experiment
/// file's directory, so a study and its keys move together.
pub fn host_key(host: &RemoteHost, experiment_file: &Path) -> Result<Option<PreSharedKey>> {
    host.key_file
        .as_ref()
        .map(|file| auth::read_key_file(&file_dir(experiment_file).join(file)))
        .transpose()
        .with_context(|| format!("host '{}'", host.name))
}

/// The directory a relative path in `experiment_file` is taken from: the file's, so a
/// study moves together with its keys and traces.
fn file_dir(experiment_file: &Path) -> &Path {
    experiment_file.parent().unwrap_or(Path::new("."))
}

/// A point's topology, if it has one, read and checked with its flows' hosts; each
/// link's trace files taken from the topology file's directory (an inline one's, from
/// the experiment file's).
pub fn load_topology(c: &RunConfig, file_dir: &Path) -> Result<Option<Topology>> {
    let Some(source) = &c.topology else {
        return Ok(None);
    };
    let mut topology = source
        .load(|file| std::fs::read_to_string(file_dir.join(file)))
        .map_err(anyhow::Error::msg)?;
    let traces_dir = match source {
        TopologySource::File(file) => file_dir
            .join(file)
            .parent()
            .map_or(file_dir.to_path_buf(), Path::to_path_buf),
        TopologySource::Inline(_) => file_dir.to_path_buf(),
    };
    for link in &mut topology.links {
        link.path = link.path.traces_under(&traces_dir);
    }
    check_flow_hosts(&topology, &c.flows).map_err(anyhow::Error::msg)?;
    pace_senders(&mut topology, &c.flows).map_err(anyhow::Error::msg)?;
    Ok(Some(topology))
}

/// Each flow's `pacing = "gap"` or `"gap_cwnd…"`: a gap pacer on its sending hosts'
/// first link toward the other (both hosts for a bidirectional flow), one per link way.
fn pace_senders(topology: &mut Topology, flows: &[FlowConfig]) -> std::result::Result<(), String> {
    for flow in flows {
        let (Some(pace), Some(hosts)) = (flow.gap_pace, flow.hosts()) else {
            continue;
        };
        let node = |name: &str| topology.node(name).expect("check_flow_hosts found it");
        let (client, server) = (node(&hosts.client), node(&hosts.server));
        let senders: &[(usize, usize)] = match flow.params.mode {
            Mode::Up => &[(client, server)],
            Mode::Down => &[(server, client)],
            Mode::Bidir => &[(client, server), (server, client)],
        };
        for &(from, to) in senders {
            topology
                .pace_first_link(from, to, pace)
                .map_err(|e| format!("flow '{}': {e}", flow.name))?;
        }
    }
    topology.check_window_pacers().map_err(|e| e.to_string())
}

/// Refuses, before any run, a plan whose topologies cannot be read or whose flows do not
/// run between their hosts.
pub fn check_topologies(points: &[Point], experiment_file: &Path) -> Result<()> {
    let dir = file_dir(experiment_file);
    for p in points {
        let at_point = || point_name(p);
        let Some(topology) = load_topology(&p.config, dir).with_context(at_point)? else {
            continue;
        };
        for link in &topology.links {
            crate::labrun::check_schedules(
                [&link.path],
                p.config.flows.iter().map(|f| (f.start_us, f.params.end)),
            )
            .with_context(|| format!("link {}", link.name))
            .with_context(at_point)?;
        }
    }
    Ok(())
}

/// Refuses a plan whose lab points name a trace file (rate, delay or loss) that is not
/// there or has a bad line, before any run.
pub fn check_traces(points: &[Point], experiment_file: &Path) -> Result<()> {
    let dir = file_dir(experiment_file);
    let specs = points
        .iter()
        .filter(|p| p.config.server.is_none())
        .flat_map(|p| std::iter::once(&p.config.path).chain(&p.config.access));
    for spec in specs {
        for link in [&spec.up, &spec.down] {
            LinkTraces::load(link, |trace| std::fs::read_to_string(dir.join(trace))).map_err(
                |TraceFileError { path, message }| {
                    anyhow!(
                        "trace file '{path}' as {}: {message} (a relative trace is taken from the experiment file's directory)",
                        dir.join(&path).display()
                    )
                },
            )?;
        }
    }
    Ok(())
}

/// Refuses, before any run, a plan whose lab points change their paths (`at`) only
/// after their tests end.
pub fn check_schedules(points: &[Point]) -> Result<()> {
    for p in points.iter().filter(|p| p.config.server.is_none()) {
        let c = &p.config;
        crate::labrun::check_schedules(
            std::iter::once(&c.path).chain(&c.access),
            c.flows.iter().map(|f| (f.start_us, f.params.end)),
        )
        .with_context(|| point_name(p))?;
    }
    Ok(())
}

/// How a refusal names a point: by its axes' values, or as the run where none vary.
fn point_name(p: &Point) -> String {
    match p.values.is_empty() {
        true => "the run".to_owned(),
        false => format!("point {}", p.values.join(", ")),
    }
}

/// Holds the database's sweep lock: two sweeps on one database would run the same
/// pending runs twice.
pub struct SweepLock(#[allow(dead_code)] File);

/// Takes the lock next to `db` (`DB.lock`), or says who holds it.
pub fn lock(db: &Path) -> Result<SweepLock> {
    let mut path = db.as_os_str().to_owned();
    path.push(".lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", Path::new(&path).display()))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!(
            "another sweep is running on {} (it holds {})",
            db.display(),
            Path::new(&path).display()
        );
    }
    Ok(SweepLock(file))
}

/// Removes labs that killed sweeps left behind.
pub fn remove_leftovers() -> Result<registry::Removed> {
    registry::gc().context("removing labs left by dead processes")
}

/// Refuses, before anything is planned or run, a sweep whose points need labs this
/// process cannot build (no root, no user namespaces), with the reason.
pub fn check_labs(points: &[Point]) -> Result<()> {
    if points.iter().any(|p| p.config.server.is_none()) {
        tcplab_sys::netns::ready().map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// Progress of a sweep.
pub enum Event<'a> {
    /// Run `k` (1-based) of `total` pending ones starts.
    Start {
        k: usize,
        total: usize,
        row: &'a PlanRow,
        point: &'a Point,
    },
    Finish(Finished<'a>),
}

/// How one run of the sweep ended.
pub struct Finished<'a> {
    pub k: usize,
    pub total: usize,
    pub row: &'a PlanRow,
    pub point: &'a Point,
    /// Done, failed, or pending again (interrupted).
    pub status: PlanStatus,
    pub run_id: Option<i64>,
    /// Throughput after the warm-up, bit/s.
    pub throughput_bps: Option<f64>,
    /// A command flow's program was ended at its time limit.
    pub timed_out: bool,
    pub error: Option<String>,
    /// The run's wall time, and the part of it that was not the test itself (building
    /// and removing the lab, storing).
    pub wall: Duration,
    pub overhead: Duration,
}

/// What a sweep did.
#[derive(Default)]
pub struct Totals {
    pub done: usize,
    pub failed: usize,
    pub interrupted: bool,
    /// Per-run overhead of every run that reached its test.
    pub overheads: Vec<Duration>,
}

/// Runs the pending runs of `prepared` in plan order until done or `stop`.
pub fn execute(
    store: &mut Store,
    experiment: &Experiment,
    prepared: &Prepared,
    hosts: &BTreeMap<String, RealHost>,
    stop: Arc<AtomicBool>,
    on_event: &mut dyn FnMut(Event),
) -> Result<Totals> {
    let pending: Vec<&PlanRow> = prepared
        .plan
        .iter()
        .filter(|r| r.status == PlanStatus::Pending)
        .collect();
    let total = pending.len();
    let lab_name = format!("sw{}", tcplab_sys::netns::own_pid());
    let mut totals = Totals::default();
    for (i, row) in pending.into_iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            totals.interrupted = true;
            break;
        }
        let point = prepared
            .points
            .get(row.run.point as usize)
            .ok_or_else(|| anyhow!("planned run {} names a missing point", row.seq))?;
        let k = i + 1;
        on_event(Event::Start {
            k,
            total,
            row,
            point,
        });
        let started = Instant::now();
        // "NAME AXIS=VALUE …", or the name alone for a file without axes.
        let axes = experiment.label(point);
        let label = Some(if axes.is_empty() {
            experiment.name.clone()
        } else {
            format!("{} {axes}", experiment.name)
        });
        let lab_seed = point.config.lab_seed(prepared.seed, row.run.repetition);
        let capture = point
            .config
            .capture
            .then(|| capture_spec(store.path(), &experiment.name, row.seq))
            .transpose()?;
        let result = run_point(
            &lab_name, hosts, point, prepared, lab_seed, label, capture, &stop,
        );
        let stopped = stop.load(Ordering::Relaxed);
        let timed_out = result.as_ref().is_ok_and(|(run, _)| {
            run.watch
                .as_ref()
                .and_then(|w| w.shell.as_ref()?.ended.as_ref())
                .is_some_and(|e| e.timed_out)
        });
        let (outcome, test_time, throughput_bps) = match &result {
            Ok((run, test)) => {
                let throughput = Metric::Throughput.of(run, point.config.warmup_us);
                let outcome = match run.status {
                    RunStatus::Done => Outcome::Done(run),
                    RunStatus::Incomplete if stopped => Outcome::Interrupted(run),
                    _ => Outcome::Failed(
                        Some(run),
                        run.error.as_deref().unwrap_or("the run did not complete"),
                    ),
                };
                (Some(outcome), Some(*test), throughput)
            }
            // Interrupted before anything was measured: nothing to store, still pending.
            Err(_) if stopped => (None, None, None),
            Err(e) => (Some(Outcome::Failed(None, e)), None, None),
        };
        let (status, run_id, error) = match outcome {
            Some(outcome) => {
                let status = match &outcome {
                    Outcome::Done(_) => PlanStatus::Done,
                    Outcome::Failed(..) => PlanStatus::Failed,
                    Outcome::Interrupted(_) => PlanStatus::Pending,
                };
                let error = match &outcome {
                    Outcome::Failed(_, e) => Some(e.to_string()),
                    _ => None,
                };
                let kept = outcome.run();
                let id = store
                    .finish_planned_run(prepared.id, row.seq, outcome)
                    .map_err(|e| {
                        let not_stored = NotStored::keeping(store.path(), e, kept);
                        anyhow!(
                            "run {k} of {total}: {not_stored}; the sweep stopped (the same \
                             command resumes it)"
                        )
                    })?;
                (status, id, error)
            }
            None => (PlanStatus::Pending, None, None),
        };
        let wall = started.elapsed();
        let overhead = test_time.map(|t| wall.saturating_sub(t));
        totals.overheads.extend(overhead);
        match status {
            PlanStatus::Done => totals.done += 1,
            PlanStatus::Failed => totals.failed += 1,
            PlanStatus::Pending => totals.interrupted = true,
        }
        on_event(Event::Finish(Finished {
            k,
            total,
            row,
            point,
            status,
            run_id,
            throughput_bps,
            timed_out,
            error,
            wall,
            overhead: overhead.unwrap_or_default(),
        }));
    }
    Ok(totals)
}

/// Where a sweep's run `seq` of `experiment` writes its capture: beside the database,
/// in `<database's stem>-captures/`.
fn capture_spec(db: &Path, experiment: &str, seq: u32) -> Result<CaptureSpec> {
    let stem = db.file_stem().unwrap_or_default().to_string_lossy();
    let dir = db.with_file_name(format!("{stem}-captures"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = std::path::absolute(dir.join(format!("{experiment}-run{seq}.pcapng")))?;
    Ok(CaptureSpec {
        file,
        snaplen: DEFAULT_SNAPLEN,
        at: CapturePoint::Bottleneck,
    })
}

/// One run of a point in a fresh lab whose links draw from `lab_seed`, or against its
/// real host.
#[allow(clippy::too_many_arguments)]
fn run_point(
    lab_name: &str,
    hosts: &BTreeMap<String, RealHost>,
    point: &Point,
    prepared: &Prepared,
    lab_seed: u64,
    label: Option<String>,
    capture: Option<CaptureSpec>,
    stop: &Arc<AtomicBool>,
) -> std::result::Result<(RunRecord, Duration), String> {
    let c = &point.config;
    let tags = |f: &FlowConfig| -> Vec<String> {
        std::iter::once(format!("flow={}", f.name))
            .chain(c.server.as_ref().map(|h| format!("server={}", h.name)))
            .chain(f.hosts().iter().flat_map(|h| {
                [
                    format!("client={}", h.client),
                    format!("server={}", h.server),
                ]
            }))
            .collect()
    };
    let topology = load_topology(c, &prepared.file_dir).map_err(|e| format!("{e:#}"))?;
    let host_index = |name: &str| -> std::result::Result<usize, String> {
        let topology = topology
            .as_ref()
            .expect("flows name hosts only in a topology");
        topology
            .hosts()
            .position(|id| topology.nodes[id].name == name)
            .ok_or_else(|| format!("the topology has no host '{name}'"))
    };
    let groups: Vec<FlowGroup> = c
        .flows
        .iter()
        .map(|f| {
            let hosts = match &f.ends {
                FlowEnds::Topology { hosts } => HostPair {
                    client: host_index(&hosts.client)?,
                    server: host_index(&hosts.server)?,
                },
                FlowEnds::Dumbbell { client } => HostPair::client(usize::from(*client) - 1),
            };
            Ok(FlowGroup {
                name: Some(f.name.clone()),
                hosts,
                start_us: f.start_us,
                params: f.params.clone(),
                label: label.clone(),
                tags: tags(f),
                trace_events: c.trace_events,
            })
        })
        .collect::<std::result::Result<_, String>>()?;
    // A command flow runs alone (the file's check): its programs, watched.
    let command = c.flows.iter().zip(&groups).find_map(|(f, g)| {
        Some(CommandFlow {
            name: f.name.clone(),
            hosts: g.hosts,
            start_us: f.start_us,
            spec: f.command.clone()?,
            params: f.params.clone(),
            label: label.clone(),
            tags: tags(f),
        })
    });
    let run = match (&c.server, topology) {
        (_, Some(topology)) => {
            let config = TopologyConfig {
                name: lab_name.to_owned(),
                file: match c.topology.as_ref() {
                    Some(TopologySource::File(file)) => file.clone(),
                    _ => "inline".into(),
                },
                topology,
                sysctls: c.sysctl.clone(),
                seed: Some(lab_seed),
                control_port: None,
                capture: capture.map(|spec| LinkCaptures {
                    dir: spec.file.with_extension(""),
                    snaplen: spec.snaplen,
                    links: Vec::new(),
                }),
            };
            match &command {
                Some(flow) => {
                    run_command_in_lab(&LabPlan::Topology(Box::new(config)), flow, Arc::clone(stop))
                }
                None => run_in_topology(&config, &groups, Arc::clone(stop)),
            }
        }
        (Some(server), None) => {
            let host = hosts
                .get(&server.name)
                .ok_or_else(|| format!("host '{}' was not prepared", server.name))?;
            run_against(host, &groups, Arc::clone(stop))
        }
        (None, None) => {
            let mut path = c.path.traces_under(&prepared.file_dir);
            path.seed = Some(lab_seed);
            let config = LabConfig {
                name: lab_name.to_owned(),
                path,
                clients: c
                    .access
                    .iter()
                    .map(|a| a.traces_under(&prepared.file_dir))
                    .collect(),
                backend: Backend::Emulator,
                sysctls: c.sysctl.clone(),
                capture,
                control_port: None,
            };
            match &command {
                Some(flow) => {
                    run_command_in_lab(&LabPlan::Dumbbell(Box::new(config)), flow, Arc::clone(stop))
                }
                None => run_in_lab(&config, &groups, Arc::clone(stop), &mut |_| {}, None),
            }
        }
    };
    run.map(|run| (run.record, run.test))
        .map_err(|e| format!("{e:#}"))
}
