//! One run across a lab built for it: the lab goes up, a server runs in its server host,
//! each group of flows runs from its client host (at once or staggered), and the lab
//! comes down with its links' counters. `tcplab run --path`, `quickstart` and every run
//! of a sweep go through here; a sweep's run against a real host runs its groups the
//! same way, from this machine.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use tcplab_lab::{HostPair, Lab, LabConfig, TopologyConfig};
use tcplab_netsim::path::PathSpec;
use tcplab_record::{IntervalRecord, RunRecord, TestEnd, TestParams};
use tcplab_traffic::auth::PreSharedKey;
use tcplab_traffic::client::{self, Request};
use tcplab_traffic::iperf3;
use tcplab_traffic::limits::ServerLimits;
use tcplab_traffic::merge;
use tcplab_traffic::server::{self, Access, PeerPacing, ServerConfig};

/// Refuses paths whose schedule (`at`) changes nothing within the test: the groups'
/// (start, end) say how long it lasts, unless one ends on a byte count.
pub fn check_schedules<'a>(
    paths: impl IntoIterator<Item = &'a PathSpec>,
    groups: impl IntoIterator<Item = (u64, TestEnd)>,
) -> Result<()> {
    let mut length_us = 0;
    for (start_us, end) in groups {
        match end {
            TestEnd::Duration { us } => length_us = length_us.max(start_us + us),
            TestEnd::Bytes { .. } => return Ok(()),
        }
    }
    for path in paths {
        path.schedule.check_within(length_us)?;
    }
    Ok(())
}

/// Flows with one set of parameters, between two of the lab's hosts.
#[derive(Clone, Debug)]
pub struct FlowGroup {
    /// The experiment file's `[[flow]]` it is, by name: its flows' records carry it.
    pub name: Option<String>,
    /// The host its connections start from and the one they go to ([`Lab::host`]:
    /// k and 0 for a dumbbell's client k and its server).
    pub hosts: HostPair,
    /// When its test starts, µs after the first one.
    pub start_us: u64,
    pub params: TestParams,
    pub label: Option<String>,
    pub tags: Vec<String>,
    /// Take the kernel's events of its sockets (`--trace-events`).
    pub trace_events: bool,
}

/// Live interval lines of a run; called from the client threads.
pub type IntervalSink = Arc<dyn Fn(&[IntervalRecord]) + Send + Sync>;

/// A finished run and where its wall time went.
pub struct LabRun {
    pub record: RunRecord,
    /// Building the lab and starting its server.
    pub setup: Duration,
    /// From the first test's start to the last test's end.
    pub test: Duration,
    /// Stopping the server and removing the lab.
    pub teardown: Duration,
}

/// Runs `groups` across a lab made from `config` and removes the lab, whatever happens.
/// `on_ready` sees the lab before the first test starts.
pub fn run_in_lab(
    config: &LabConfig,
    groups: &[FlowGroup],
    stop: Arc<AtomicBool>,
    on_ready: &mut dyn FnMut(&Lab),
    live: Option<IntervalSink>,
) -> Result<LabRun> {
    let started = Instant::now();
    if let Some(g) = groups.iter().find(|g| {
        g.hosts.client == 0 || g.hosts.client > config.clients.len() || g.hosts.server != 0
    }) {
        return Err(anyhow!(
            "a flow runs from client {} but the lab has {}",
            g.hosts.client,
            config.clients.len()
        ));
    }
    check_requests(groups)?;
    check_schedules(
        std::iter::once(&config.path).chain(&config.clients),
        groups.iter().map(|g| (g.start_us, g.params.end)),
    )?;
    // The links count the control connection (and the samples it carries after the
    // test) apart from the test's flows.
    let config = LabConfig {
        control_port: Some(client::DEFAULT_PORT),
        ..config.clone()
    };
    let lab = Lab::up(&config).context("cannot build the lab")?;
    on_ready(&lab);
    run_across(lab, started, groups, &stop, live)
}

/// Runs `groups` across a lab of any shape made from `config`, each between the hosts it
/// names (by their place in the file), and removes the lab, whatever happens.
pub fn run_in_topology(
    config: &TopologyConfig,
    groups: &[FlowGroup],
    stop: Arc<AtomicBool>,
) -> Result<LabRun> {
    let started = Instant::now();
    let hosts = config.topology.hosts().count();
    if let Some(g) = groups.iter().find(|g| {
        g.hosts.client >= hosts || g.hosts.server >= hosts || g.hosts.client == g.hosts.server
    }) {
        return Err(anyhow!(
            "a flow runs from host {} to host {} but the topology has {hosts}",
            g.hosts.client,
            g.hosts.server
        ));
    }
    check_requests(groups)?;
    check_schedules(
        config.topology.links.iter().map(|l| &l.path),
        groups.iter().map(|g| (g.start_us, g.params.end)),
    )?;
    let config = TopologyConfig {
        control_port: Some(client::DEFAULT_PORT),
        ..config.clone()
    };
    let lab = Lab::up_topology(&config).context("cannot build the lab")?;
    run_across(lab, started, groups, &stop, None)
}

/// What the lab's servers would refuse, refused before the lab is built.
fn check_requests(groups: &[FlowGroup]) -> Result<()> {
    for g in groups {
        tcplab_traffic::limits::check_request(&g.params, &ServerLimits::lab())
            .map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// A tcplab server in one of a lab's hosts.
struct LabServer {
    /// A clone of its listener, which stops it at once.
    stopper: TcpListener,
    stop: Arc<AtomicBool>,
    serving: tcplab_sys::netns::NsThread<std::io::Result<()>>,
}

impl LabServer {
    /// Starts serving in host `k` of `lab`.
    fn start(lab: &Lab, k: usize) -> Result<LabServer> {
        let host = lab
            .host(k)
            .ok_or_else(|| anyhow!("the lab has no host {k}"))?;
        let name = lab.host_name(k);
        let addr = SocketAddr::new(host.addr, client::DEFAULT_PORT);
        let listener = host
            .ns
            .try_run(move || TcpListener::bind(addr))
            .with_context(|| format!("starting the server in {name}"))?;
        let stopper = listener
            .try_clone()
            .with_context(|| format!("starting the server in {name}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        // Its senders feed the dynamic gap pacers (`pace cwnd`) on their way to each
        // client their window rate.
        let pacing: PeerPacing = (0..=lab.clients.len())
            .filter_map(|j| Some((lab.host(j)?, lab.pacing_target(k, j)?)))
            .flat_map(|(peer, target)| [(peer.addr, target.clone()), (peer.addr6, target)])
            .collect();
        let serving = {
            let stop = Arc::clone(&stop);
            host.ns
                .spawn(move || {
                    // Only the lab's own hosts reach this server.
                    let config = ServerConfig {
                        access: Access::Open,
                        limits: ServerLimits::lab(),
                    };
                    server::serve(listener, config, |_| {}, &stop, pacing)
                })
                .with_context(|| format!("starting the server in {name}"))?
        };
        Ok(LabServer {
            stopper,
            stop,
            serving,
        })
    }

    fn stop(self) {
        server::stop_now(&self.stopper, &self.stop);
        let _ = self.serving.join();
    }
}

/// Runs `groups` across a lab that is up, with a server in each host a group goes to,
/// and takes the lab down with its links' counters.
fn run_across(
    lab: Lab,
    started: Instant,
    groups: &[FlowGroup],
    stop: &Arc<AtomicBool>,
    live: Option<IntervalSink>,
) -> Result<LabRun> {
    let destinations: std::collections::BTreeSet<usize> =
        groups.iter().map(|g| g.hosts.server).collect();
    let mut servers = Vec::new();
    for &k in &destinations {
        match LabServer::start(&lab, k) {
            Ok(server) => servers.push(server),
            Err(e) => {
                servers.into_iter().for_each(LabServer::stop);
                return Err(e);
            }
        }
    }
    let setup = started.elapsed();
    let tests = Instant::now();
    let outcome = run_groups(Reach::Lab(&lab), groups, stop, live);
    let test = tests.elapsed();
    let teardown_start = Instant::now();
    servers.into_iter().for_each(LabServer::stop);
    let entry = lab.entry.clone();
    let stats = lab.down().context("tearing the lab down")?;
    let mut record = outcome?;
    record.path = Some(stats.record(&entry));
    Ok(LabRun {
        record,
        setup,
        test,
        teardown: teardown_start.elapsed(),
    })
}

/// A real host a run's flows reach from this machine.
pub struct RealHost {
    /// `HOST[:PORT]`, as `tcplab run` takes it.
    pub address: String,
    /// The agent's key; `None` for an agent serving local peers or anyone.
    pub key: Option<PreSharedKey>,
    /// A stock iperf3 server rather than a tcplab agent.
    pub iperf3: bool,
}

/// Runs `groups` from this machine against a real host: no lab, no emulated path.
pub fn run_against(host: &RealHost, groups: &[FlowGroup], stop: Arc<AtomicBool>) -> Result<LabRun> {
    if let Some(g) = groups.iter().find(|g| g.hosts.client != 1) {
        return Err(anyhow!(
            "a flow runs from client {}, but against a real host only this machine is a client",
            g.hosts.client
        ));
    }
    let tests = Instant::now();
    let record = run_groups(Reach::Host(host), groups, &stop, None)?;
    Ok(LabRun {
        record,
        setup: Duration::ZERO,
        test: tests.elapsed(),
        teardown: Duration::ZERO,
    })
}

/// Where a run's tests go.
#[derive(Clone, Copy)]
enum Reach<'a> {
    /// A server in the lab's host each group goes to, from its client's namespace.
    Lab(&'a Lab),
    /// A real host, from this thread's namespace.
    Host(&'a RealHost),
}

type GroupResult = std::result::Result<Option<RunRecord>, String>;
type Joiner = Box<dyn FnOnce() -> std::thread::Result<GroupResult>>;

impl Reach<'_> {
    fn request(&self, group: &FlowGroup) -> Request {
        let (target, pacing, key, test_start) = match self {
            Reach::Lab(lab) => (
                lab.host(group.hosts.server).map_or(String::new(), |host| {
                    SocketAddr::new(host.addr, client::DEFAULT_PORT).to_string()
                }),
                lab.pacing_target(group.hosts.client, group.hosts.server),
                None,
                Some(lab.test_start()),
            ),
            Reach::Host(host) => (host.address.clone(), None, host.key.clone(), None),
        };
        Request {
            target,
            params: group.params.clone(),
            label: group.label.clone(),
            tags: group.tags.clone(),
            pacing,
            key,
            trace_events: group.trace_events,
            test_start,
        }
    }

    /// Starts `job` where `group`'s client is.
    fn spawn(
        &self,
        group: &FlowGroup,
        job: impl FnOnce() -> GroupResult + Send + 'static,
    ) -> std::io::Result<Joiner> {
        Ok(match self {
            Reach::Lab(lab) => {
                let host = lab.host(group.hosts.client).ok_or_else(|| {
                    std::io::Error::other(format!("the lab has no host {}", group.hosts.client))
                })?;
                let thread = host.ns.spawn(job)?;
                Box::new(move || thread.join())
            }
            Reach::Host(_) => {
                let thread = std::thread::Builder::new().spawn(job)?;
                Box::new(move || thread.join())
            }
        })
    }
}

/// Every group's test from its client host, each after its start offset; one record.
fn run_groups(
    reach: Reach,
    groups: &[FlowGroup],
    stop: &Arc<AtomicBool>,
    live: Option<IntervalSink>,
) -> Result<RunRecord> {
    let iperf3 = matches!(reach, Reach::Host(host) if host.iperf3);
    // A flow asks for ECN through its client host, which opens the connections: Linux
    // negotiates ECN per host (net.ipv4.tcp_ecn), not per socket.
    if let Reach::Lab(lab) = &reach {
        for group in groups.iter().filter(|g| g.params.tuning.ecn) {
            let name = lab.host_name(group.hosts.client);
            let host = lab
                .host(group.hosts.client)
                .ok_or_else(|| anyhow!("the lab has no host {name}"))?;
            tcplab_sys::netns::write_sysctl_in(&host.ns, "net.ipv4.tcp_ecn", "1")
                .with_context(|| format!("asking for ECN in {name}"))?;
        }
    }
    let threads = groups
        .iter()
        .map(|group| {
            let (start_us, stop, live) = (group.start_us, Arc::clone(stop), live.clone());
            let request = reach.request(group);
            reach.spawn(group, move || {
                if !sleep_unless_stopped(Duration::from_micros(start_us), &stop) {
                    return Ok(None);
                }
                if iperf3 {
                    // iperf3 reports its side only at the end: no live lines.
                    return iperf3::client::run(&request, stop)
                        .map(Some)
                        .map_err(|e| format!("{e:#}"));
                }
                let mut on_interval = |intervals: &[IntervalRecord]| {
                    if let Some(live) = &live {
                        live(intervals)
                    }
                };
                client::run(&request, stop, &mut on_interval)
                    .map(Some)
                    .map_err(|e| format!("{e:#}"))
            })
        })
        .collect::<std::io::Result<Vec<_>>>()
        .context("starting the clients")?;
    let mut records = Vec::new();
    for (group, join) in groups.iter().zip(threads) {
        let host = match reach {
            Reach::Lab(lab) => lab.host_name(group.hosts.client),
            Reach::Host(_) => "client1".into(),
        };
        let result = join().map_err(|_| anyhow!("{host}: the test panicked"))?;
        // None: stopped before it started; the run ends with what the others measured.
        if let Some(mut record) = result.map_err(|e| anyhow!("{host}: {e}"))? {
            for flow in &mut record.flows {
                flow.name.clone_from(&group.name);
            }
            records.push((host, record));
        }
    }
    merge::combine(records).ok_or_else(|| anyhow!("interrupted before any test started"))
}

/// Sleeps `duration` in short steps; `false` when `stop` was set meanwhile.
pub(crate) fn sleep_unless_stopped(duration: Duration, stop: &AtomicBool) -> bool {
    const STEP: Duration = Duration::from_millis(50);
    let until = Instant::now() + duration;
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep(STEP.min(until - now));
    }
}
