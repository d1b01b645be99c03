//! One run across a lab built for it: the lab goes up, a server runs in its server host,
//! each group of flows runs from its client host (at once or staggered), and the lab
//! comes down with its links' counters. `tcplab run --path`, `quickstart` and every run
//! of a sweep go through here.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use tcplab_lab::{Lab, LabConfig};
use tcplab_model::path::Direction;
use tcplab_model::record::{IntervalRecord, RunRecord, TestParams};
use tcplab_traffic::client::{self, Request};
use tcplab_traffic::limits::ServerLimits;
use tcplab_traffic::merge;
use tcplab_traffic::server::{self, Access, ServerConfig};

/// Flows with one set of parameters, from one client host.
#[derive(Clone, Debug)]
pub struct FlowGroup {
    /// 0-based client host.
    pub client: usize,
    /// When its test starts, µs after the first one.
    pub start_us: u64,
    pub params: TestParams,
    pub label: Option<String>,
    pub tags: Vec<String>,
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
    if let Some(g) = groups.iter().find(|g| g.client >= config.clients.len()) {
        return Err(anyhow!(
            "a flow runs from client {} but the lab has {}",
            g.client + 1,
            config.clients.len()
        ));
    }
    let lab = Lab::up(config).context("cannot build the lab")?;
    on_ready(&lab);
    let server_addr = SocketAddr::new(lab.server.addr, client::DEFAULT_PORT);
    let listener = lab
        .server
        .ns
        .try_run(move || TcpListener::bind(server_addr))
        .context("starting the lab's server")?;
    let server_stop = Arc::new(AtomicBool::new(false));
    // Senders feed a dynamic gap pacer (`pace cwnd`) their window rate: the clients
    // send up, the server down.
    let down_pacing = lab.pacing_target(Direction::Down);
    let serving = {
        let server_stop = Arc::clone(&server_stop);
        lab.server
            .ns
            .spawn(move || {
                // Only the lab's own hosts reach this server.
                let config = ServerConfig {
                    access: Access::Open,
                    limits: ServerLimits::lab(),
                };
                server::serve(listener, config, |_| {}, &server_stop, down_pacing)
            })
            .context("starting the lab's server")?
    };
    let setup = started.elapsed();
    let tests = Instant::now();
    let outcome = run_groups(&lab, groups, server_addr, &stop, live);
    let test = tests.elapsed();
    let teardown_start = Instant::now();
    server_stop.store(true, Ordering::Relaxed);
    let _ = serving.join();
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

/// Every group's test from its client host, each after its start offset; one record.
fn run_groups(
    lab: &Lab,
    groups: &[FlowGroup],
    server_addr: SocketAddr,
    stop: &Arc<AtomicBool>,
    live: Option<IntervalSink>,
) -> Result<RunRecord> {
    let threads = groups
        .iter()
        .map(|group| {
            let (group, stop, live) = (group.clone(), Arc::clone(stop), live.clone());
            let request = Request {
                target: server_addr.to_string(),
                params: group.params.clone(),
                label: group.label.clone(),
                tags: group.tags.clone(),
                pacing: lab.pacing_target(Direction::Up),
                key: None,
            };
            lab.clients[group.client].ns.spawn(move || {
                if !sleep_unless_stopped(Duration::from_micros(group.start_us), &stop) {
                    return Ok(None);
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
        .context("starting the lab's clients")?;
    let mut records = Vec::new();
    for (group, thread) in groups.iter().zip(threads) {
        let host = format!("client{}", group.client + 1);
        let result = thread
            .join()
            .map_err(|_| anyhow!("{host}: the test panicked"))?;
        // None: stopped before it started; the run ends with what the others measured.
        if let Some(record) = result.map_err(|e| anyhow!("{host}: {e}"))? {
            records.push((host, record));
        }
    }
    merge::combine(records).ok_or_else(|| anyhow!("interrupted before any test started"))
}

/// Sleeps `duration` in short steps; `false` when `stop` was set meanwhile.
fn sleep_unless_stopped(duration: Duration, stop: &AtomicBool) -> bool {
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
