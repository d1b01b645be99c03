//! A running lab and its parts: hosts (a namespace and a TUN device each, with the lab's
//! sysctls), the emulator's threads and what they publish, and tearing it all down.
//! What is built, and how, is [`crate::up`]'s and [`crate::graph`]'s.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};
use tcplab_analysis::burst::BurstMeter;
use tcplab_netsim::dumbbell::{Dumbbell, DumbbellError};
use tcplab_netsim::link::{Link, LinkError, LinkTraces, TraceFileError};
use tcplab_netsim::path::{
    Bottleneck, LinkSpec, Pace, PacingTarget, PathSpec, QueueLimit, Timeline,
};
use tcplab_netsim::traffic::TestStart;
use tcplab_record::capture::CapturePoint;

use tcplab_sys::clock::{monotonic_ns, realtime_us};
use tcplab_sys::ifqueue;
use tcplab_sys::netem::NetemError;
use tcplab_sys::netns::{self, NetNs};
use tcplab_sys::poll::Waker;
use tcplab_sys::tun::{self, Offloads, Tun, TunOptions};
use tcplab_sys::userns::{self, Mode};

use crate::capture::{Capture, CaptureSpec};
use crate::pipeline::{self, DirectionPlan, Hop, Target};
use crate::registry::{self, HostPair, LabEntry};
use tcplab_record::{DirectionStats, HostQueue, PathRecord};

pub(crate) const TUN_NAME: &str = "tcplab0";

/// Per-host TCP memory limits: room for a 1 Gbit/s × 100 ms path (12.5 MB in flight)
/// with autotuning's overhead. net.core.[rw]mem_max are the host's (read-only in other
/// namespaces), so they are left alone.
const HOST_SYSCTLS: &[(&str, &str)] = &[
    ("net.ipv4.tcp_rmem", "4096 131072 67108864"),
    ("net.ipv4.tcp_wmem", "4096 16384 67108864"),
    // Runs must not inherit cached ssthresh or RTT from an earlier connection.
    ("net.ipv4.tcp_no_metrics_save", "1"),
];

/// The lab's defaults, then the user's sysctls, in one host.
pub(crate) fn set_sysctls(ns: &NetNs, user: &BTreeMap<String, String>) -> Result<(), LabError> {
    // Anyone inside a lab may ping (ICMP datagram sockets), whatever their group.
    let ping = ("net.ipv4.ping_group_range", userns::ping_group_range());
    let defaults = HOST_SYSCTLS
        .iter()
        .map(|&(k, v)| (k, v))
        .chain([(ping.0, ping.1.as_str())]);
    for (key, value) in defaults.chain(user.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        netns::write_sysctl_in(ns, key, value).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => LabError::Name(format!(
                "unknown sysctl '{key}' (this kernel has no /proc/sys/{})",
                key.replace('.', "/")
            )),
            io::ErrorKind::PermissionDenied if netns::sysctl_read_only_in(ns, key).unwrap_or(false) => {
                LabError::Name(format!(
                    "sysctl '{key}' is the host's, read-only in a lab's namespace (root sets it on the host: sysctl -w {key}={value})"
                ))
            }
            io::ErrorKind::PermissionDenied if userns::mode() == Mode::Rootless => {
                LabError::Name(format!(
                    "sysctl '{key}' cannot be set in a lab built without root: the kernel lets only root set it"
                ))
            }
            _ => io_err(format!("setting sysctl {key} = {value} in {}", ns.name()))(e),
        })?;
    }
    Ok(())
}

/// A host's interface queue, where the direction it sends into sets one.
pub(crate) fn set_txqueuelen(ns: &NetNs, sends: &LinkSpec) -> Result<(), LabError> {
    match sends.txqueuelen {
        Some(packets) => ns
            .try_run(|| ifqueue::set_txqueuelen(TUN_NAME, packets))
            .map_err(io_err(format!("setting txqueuelen in {}", ns.name()))),
        None => Ok(()),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{0}")]
    Name(String),
    /// This process may not build namespaces (no root, no user namespaces).
    #[error("{0}")]
    Privilege(String),
    // The cause is part of the message, not a `source`: chains would print it twice.
    #[error("{context}: {error}")]
    Io { context: String, error: io::Error },
    #[error("trace {path}: {message}")]
    Trace { path: String, message: String },
    // Likewise: no `#[from]`, which would make the link's error a `source` too.
    #[error("link: {0}")]
    Link(LinkError),
    #[error(transparent)]
    Netem(#[from] NetemError),
    #[error("path spec: {0}")]
    Specs(DumbbellError),
    /// The far side (`--far host`) cannot be joined.
    #[error("{0}")]
    Far(String),
}

/// What carries the packets between the hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// tcplab's userspace emulator (TUN devices): every key of the spec, per packet.
    #[default]
    Emulator,
    /// The kernel's netem qdisc on a veth pair, where the kernel has sch_netem.
    Netem,
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> LabError {
    let context = context.into();
    move |error| LabError::Io { context, error }
}

/// What to build.
#[derive(Clone, Debug)]
pub struct LabConfig {
    pub name: String,
    /// The bottleneck path between the clients and the server.
    pub path: PathSpec,
    /// One entry per client host: its access link (an empty spec for none).
    pub clients: Vec<PathSpec>,
    pub backend: Backend,
    /// Set on every host after the lab's own defaults (net.ipv4.tcp_rmem …), so a user's
    /// value wins.
    pub sysctls: BTreeMap<String, String>,
    /// A pcapng capture at the bottlenecks' entry (the emulator only).
    pub capture: Option<CaptureSpec>,
    /// The TCP port of the control listener of tcplab's server in the lab, when a run
    /// uses one: the links count its connections apart from the test's.
    pub control_port: Option<u16>,
}

impl LabConfig {
    pub(crate) fn dumbbell(&self) -> Dumbbell<'_> {
        Dumbbell::new(&self.path, &self.clients)
    }

    /// The seed of every link's randomness, which [`Lab::up`] pins before building.
    pub(crate) fn seed(&self) -> u64 {
        self.path.seed.expect("Lab::up pins the seed")
    }
}

/// A lab to build: a dumbbell (`--path`, `access`) or a topology's graph.
#[derive(Clone, Debug)]
pub enum LabPlan {
    Dumbbell(Box<LabConfig>),
    Topology(Box<crate::TopologyConfig>),
}

/// One host of a running lab.
#[derive(Debug)]
pub struct Host {
    pub ns: NetNs,
    pub addr: IpAddr,
    pub addr6: IpAddr,
}

/// Live counters of a lab, per emulator thread: a dumbbell's directions, a topology's
/// sides ([`tcplab_netsim::topology::Topology::side`]), each hop of a topology named by
/// its link and its ends.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LabStats {
    pub up: DirectionStats,
    pub down: DirectionStats,
    /// Wall-clock time of the emulator's time 0, µs since the Unix epoch.
    pub epoch_unix_us: i64,
    /// When the test started, µs on the emulator's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_start_us: Option<u64>,
    /// The capture's file (`--capture`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_file: Option<String>,
    /// Where it sees the packets.
    #[serde(default, skip_serializing_if = "CapturePoint::is_bottleneck")]
    pub capture_at: CapturePoint,
}

impl LabStats {
    /// What a run through this lab records of its path.
    pub fn record(self, entry: &LabEntry) -> PathRecord {
        let (path, access) = entry.specs();
        PathRecord {
            bdp: Dumbbell::new(&path, &access).bdp_sizing(),
            spec: entry.path.clone(),
            access: entry
                .clients
                .iter()
                .map(|c| c.access.clone().unwrap_or_default())
                .collect(),
            up: self.up,
            down: self.down,
            epoch_unix_us: self.epoch_unix_us,
            test_start_us: self.test_start_us,
            capture_file: self.capture_file,
            capture_at: self.capture_at,
            topology: entry.topology.clone(),
        }
    }
}

/// The emulator's two threads (a dumbbell's directions, a topology's sides) and what they publish.
pub(crate) struct Emulator {
    stop: Arc<AtomicBool>,
    /// Wakes the threads when `stop` is set (none without threads).
    pub(crate) wake: Option<Arc<Waker>>,
    threads: Vec<JoinHandle<io::Result<()>>>,
    pub(crate) up: Arc<Mutex<DirectionStats>>,
    pub(crate) down: Arc<Mutex<DirectionStats>>,
    /// Wall-clock time of the emulator's time 0, µs since the Unix epoch, and the same
    /// on the monotonic clock, ns.
    pub(crate) epoch_unix_us: i64,
    epoch_ns: u64,
    /// When the test started: the path's schedule counts from it.
    pub(crate) test_start: TestStart,
    /// The captures' writers, finished once the threads that feed them are done, the
    /// file (a topology's: the directory) and where they see the packets.
    pub(crate) captures: Vec<Capture>,
    pub(crate) capture_file: Option<String>,
    capture_at: CapturePoint,
}

impl Emulator {
    /// The clock, the wake-up and the test's start, and the capture's writer; no
    /// thread yet ([`Emulator::spawn`]).
    pub(crate) fn new(capture: Option<&CaptureSpec>, lab: &str) -> Result<Emulator, LabError> {
        let wake = Arc::new(Waker::new().map_err(io_err("starting the emulator"))?);
        let epoch = monotonic_ns();
        let epoch_unix_us = realtime_us() - ((monotonic_ns() - epoch) / 1000) as i64;
        let writer = capture
            .map(|spec| {
                Capture::start(spec, epoch_unix_us as u64 * 1000, lab)
                    .map_err(io_err("starting the capture"))
            })
            .transpose()?;
        Ok(Emulator {
            stop: Arc::new(AtomicBool::new(false)),
            wake: Some(wake),
            threads: Vec::new(),
            up: Arc::default(),
            down: Arc::default(),
            epoch_unix_us,
            epoch_ns: epoch,
            test_start: TestStart::default(),
            captures: writer.into_iter().collect(),
            capture_file: capture.map(|spec| spec.file.display().to_string()),
            capture_at: capture.map_or(CapturePoint::Bottleneck, |spec| spec.at),
        })
    }

    /// A thread carrying `plan`'s packets, publishing into `stats`; on failure, the
    /// threads started before are stopped.
    pub(crate) fn spawn(
        &mut self,
        name: &str,
        plan: DirectionPlan,
        stats: Arc<Mutex<DirectionStats>>,
    ) -> Result<(), LabError> {
        let (stop, epoch) = (Arc::clone(&self.stop), self.epoch_ns);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || pipeline::run(plan, stats, stop, epoch));
        match handle {
            Ok(handle) => {
                self.threads.push(handle);
                Ok(())
            }
            Err(e) => {
                let _ = self.halt();
                Err(io_err("starting the emulator")(e))
            }
        }
    }

    /// No emulator: the kernel carries the packets (netem).
    pub(crate) fn none() -> Emulator {
        Emulator {
            stop: Arc::default(),
            wake: None,
            threads: Vec::new(),
            up: Arc::default(),
            down: Arc::default(),
            epoch_unix_us: realtime_us(),
            epoch_ns: monotonic_ns(),
            test_start: TestStart::default(),
            captures: Vec::new(),
            capture_file: None,
            capture_at: CapturePoint::Bottleneck,
        }
    }

    fn stats(&self) -> LabStats {
        LabStats {
            up: self.up.lock().expect("stats lock").clone(),
            down: self.down.lock().expect("stats lock").clone(),
            epoch_unix_us: self.epoch_unix_us,
            test_start_us: self
                .test_start
                .get()
                .map(|t| t.saturating_sub(self.epoch_ns) / 1000),
            capture_file: self.capture_file.clone(),
            capture_at: self.capture_at,
        }
    }

    fn is_running(&self) -> bool {
        self.threads.iter().all(|t| !t.is_finished())
    }

    /// Stops the threads and waits for them; the first error any of them ended with.
    fn halt(&mut self) -> Result<(), LabError> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(wake) = &self.wake {
            wake.wake();
        }
        let mut failure = None;
        for thread in self.threads.drain(..) {
            if let Ok(Err(e)) = thread.join() {
                failure.get_or_insert(e);
            }
        }
        // The threads' taps are gone with them: the writer has all there is.
        for capture in self.captures.drain(..) {
            if let Err(e) = capture.finish() {
                failure.get_or_insert(e);
            }
        }
        match failure {
            Some(error) => Err(LabError::Io {
                context: "the emulator stopped".into(),
                error,
            }),
            None => Ok(()),
        }
    }
}

/// A running lab; dropping it tears everything down.
pub struct Lab {
    pub entry: LabEntry,
    pub server: Host,
    pub clients: Vec<Host>,
    pub(crate) emulator: Emulator,
    /// Where the senders from one host to another (by [`Lab::host`]) publish the rate
    /// of the dynamic gap pacers (`pace cwnd`) on their way.
    pub(crate) pacing_targets: HashMap<(usize, usize), PacingTarget>,
    /// Until torn down: what Drop still has to do.
    pub(crate) alive: bool,
}

pub(crate) fn is_ideal(path: &PathSpec) -> bool {
    path.up.delays_only() && path.down.delays_only() && path.rtt_us() == 0
}

/// The traces a link of the lab reads (rate, delay, loss), from their files.
pub(crate) fn load_traces(spec: &LinkSpec) -> Result<LinkTraces, LabError> {
    LinkTraces::load(spec, |path| std::fs::read_to_string(path))
        .map_err(|TraceFileError { path, message }| LabError::Trace { path, message })
}

/// The trains of what enters a link at `rate` (bit/s, overhead), where packets go one
/// by one.
pub(crate) fn burst_meter(rate: Option<(u64, u32)>, per_packet: bool) -> Option<BurstMeter> {
    rate.filter(|_| per_packet)
        .map(|(bps, _)| BurstMeter::new(bps, pipeline::QUEUE_SAMPLE_NS))
}

/// Packets a gap pacer holds at most: it spaces, it is not meant to drop (what it does
/// drop is counted under its name).
const PACER_QUEUE_PACKETS: u64 = 10_000;

/// A dynamic pacer's rate before the first target arrives: no pacing to speak of.
const UNPACED_BPS: u64 = 1_000_000_000_000;

/// A gap pacer (PSPacer) before stage `then`: packets leave spaced as at its rate,
/// queued without a limit short of [`PACER_QUEUE_PACKETS`]; a dynamic one follows
/// `target`. `path` is the link way's settings over the test: a scheduled pacing rate
/// changes the pacer's.
pub(crate) fn pacer_hop(
    path: &Timeline,
    mtu: u32,
    target: Option<Arc<AtomicU64>>,
    then: Target,
) -> Result<Hop, LabError> {
    let pacer = path.map(|spec| {
        let bps = match spec.pace {
            Some(Pace::Rate(bps)) => bps,
            Some(Pace::Window(_)) | None => UNPACED_BPS,
        };
        LinkSpec {
            bottleneck: Bottleneck::Rate { bps, overhead: 0 },
            queue: QueueLimit::Packets(PACER_QUEUE_PACKETS),
            ..LinkSpec::default()
        }
    });
    Ok(Hop {
        name: "pacer".into(),
        link: Link::new(&pacer, 0, mtu, 0, LinkTraces::default()).map_err(LabError::Link)?,
        then,
        meter: None,
        hop_meter: None,
        rate_control: target,
        capture: None,
    })
}

/// One host to make: its namespace, addresses (v4, v6), its device's MTU, what it
/// sends into (its interface queue's length) and the user's sysctls.
pub(crate) struct HostPlan<'a> {
    pub ns: &'a str,
    pub addrs: (IpAddr, IpAddr),
    pub mtu: u32,
    pub sends: &'a LinkSpec,
    pub sysctls: &'a BTreeMap<String, String>,
}

/// A host's namespace (noted in `made`, for undoing) and its TUN device, addressed.
pub(crate) fn make_host(
    host: &HostPlan,
    made: &mut Vec<NetNs>,
) -> Result<(Host, Arc<Tun>), LabError> {
    let HostPlan {
        ns: ns_name,
        addrs: (v4, v6),
        mtu,
        sends,
        sysctls,
    } = *host;
    let ns = NetNs::create(ns_name).map_err(io_err(format!("creating netns {ns_name}")))?;
    made.push(ns.clone());
    // Persistent: the namespace takes its device with it, in the background,
    // when the lab comes down.
    let opts = TunOptions {
        vnet_hdr: true,
        offloads: Offloads::TSO,
        nonblocking: true,
        persist: true,
        ..TunOptions::default()
    };
    let tun = tun::create_in(&ns, TUN_NAME, opts, &[(v4, 16), (v6, 64)])
        .map_err(io_err(format!("creating {TUN_NAME} in {ns_name}")))?;
    ns.try_run(|| netns::set_mtu(TUN_NAME, mtu))
        .map_err(io_err(format!("setting MTU in {ns_name}")))?;
    set_txqueuelen(&ns, sends)?;
    set_sysctls(&ns, sysctls)?;
    Ok((
        Host {
            ns,
            addr: v4,
            addr6: v6,
        },
        Arc::new(tun),
    ))
}

impl Lab {
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// Host `k`: 0 the server, k client k; a topology's k-th host from 0, in the
    /// file's order.
    pub fn host(&self, k: usize) -> Option<&Host> {
        match k {
            0 => Some(&self.server),
            k => self.clients.get(k - 1),
        }
    }

    /// Both hosts of `pair`, client first; `None` where either is not the lab's.
    pub fn pair(&self, pair: HostPair) -> Option<(&Host, &Host)> {
        Some((self.host(pair.client)?, self.host(pair.server)?))
    }

    /// Host `k`'s name ([`Lab::host`]): a topology's, else "server" or "clientK".
    pub fn host_name(&self, k: usize) -> String {
        match (&self.entry.topology, k) {
            (Some(topology), k) => topology.hosts.get(k).cloned().unwrap_or_default(),
            (None, 0) => "server".into(),
            (None, k) => format!("client{k}"),
        }
    }

    /// Where the senders from host `from` to host `to` ([`Lab::host`]) publish the
    /// rate the dynamic gap pacers on their way (`pace cwnd`, `pace cwnd/minrtt`)
    /// follow; `None` when their way has none.
    pub fn pacing_target(&self, from: usize, to: usize) -> Option<PacingTarget> {
        self.pacing_targets.get(&(from, to)).cloned()
    }

    /// Where the first test across the lab publishes its start: the path's schedule
    /// (`at`) counts from it.
    pub fn test_start(&self) -> TestStart {
        self.emulator.test_start.clone()
    }

    /// The test starts now, for traffic tcplab does not start itself (a shell's
    /// command, `lab up`).
    pub fn start_test_now(&self) {
        self.emulator.test_start.publish(monotonic_ns());
    }

    /// The emulator's counters, and the hosts' interface queues.
    pub fn stats(&self) -> Result<LabStats, LabError> {
        let queues = self.host_queues()?;
        Ok(self.stats_with(queues))
    }

    fn stats_with(&self, [up, down]: [Vec<HostQueue>; 2]) -> LabStats {
        let mut stats = self.emulator.stats();
        stats.up.host_queues = up;
        stats.down.host_queues = down;
        stats
    }

    /// The interface queues of the hosts sending up (the clients) and down (the
    /// server).
    fn host_queues(&self) -> Result<[Vec<HostQueue>; 2], LabError> {
        let read = |host: &Host, name: &str| {
            host.ns
                .try_run(|| ifqueue::read(name, TUN_NAME))
                .map_err(io_err(format!("reading the interface queue of {name}")))
        };
        let single = self.clients.len() == 1;
        let clients = self
            .clients
            .iter()
            .enumerate()
            .map(|(k, host)| {
                let name = if single {
                    "client".to_owned()
                } else {
                    format!("client{}", k + 1)
                };
                read(host, &name)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok([clients, vec![read(&self.server, "server")?]])
    }

    /// The capture's file (`--capture`) and where it sees the packets.
    pub fn capture(&self) -> Option<(&str, CapturePoint)> {
        let file = self.emulator.capture_file.as_deref()?;
        Some((file, self.emulator.capture_at))
    }

    /// Whether both emulator threads are still running.
    pub fn is_running(&self) -> bool {
        self.emulator.is_running()
    }

    /// Stops the emulator and removes the namespaces; returns the final counters.
    pub fn down(mut self) -> Result<LabStats, LabError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<LabStats, LabError> {
        self.alive = false;
        // The TUN devices go with the emulator's threads: their queues are read first.
        let queues = self.host_queues();
        let stopped = self.emulator.halt();
        let stats = queues.map(|queues| self.stats_with(queues));
        for host in std::iter::once(&self.server).chain(&self.clients) {
            host.ns
                .delete()
                .map_err(io_err(format!("deleting netns {}", host.ns.name())))?;
        }
        registry::unregister(&self.entry.name);
        stopped.and(stats)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.alive {
            let _ = self.shutdown();
        }
    }
}
