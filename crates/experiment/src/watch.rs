//! Watching TCP connections: the I/O around [`tcplab_monitor::watch::Tracker`]. Dumps
//! the matching sockets every sample interval, looks up the sockets the
//! `sock:inet_sock_set_state` tracepoint names as they change state (and closing ones
//! every millisecond), reads owners from /proc, and hands what the tracker makes of it
//! to an output. `tcplab watch`, `tcplab shell --record` and an experiment's command
//! flows ([`crate::programs`]) all follow connections through [`follow`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tcplab_model::sockdiag::{Extensions, SocketKey, SocketSample};
use tcplab_model::sockfilter::{Filter, Prefix, Side};
use tcplab_monitor::watch::{
    parse_state_change, run_record, Admit, Process, SampleOwners, SampleRead, Tracker, WatchConfig,
    WatchEvent, WatchMeta, TRACE_FILTER,
};
use tcplab_record::units::{count, format_duration_us};
use tcplab_record::{IntervalRecord, RunRecord, SampleRecord};
use tcplab_store::{NotStored, SampleSpool, Store};
use tcplab_sys::clock::monotonic_us;
use tcplab_sys::sockdiag::{self, Owners, Query, SockDiag};
use tcplab_sys::trace::{Trace, TraceError};

/// The longest the loop sleeps: how late a stop is noticed.
const MAX_SLEEP_US: i64 = 50_000;

/// Samples a spooling watch holds before it stores them: some 5 MB.
pub const SPOOL_SAMPLES: usize = 8_192;

/// What a watch keeps of the connections it followed.
pub enum Keep {
    /// Nothing: each connection is dropped once shown.
    Nothing,
    /// Every connection and sample, in memory, for a run stored once the watch ends.
    InMemory,
    /// Every connection; the samples go to a database in batches of
    /// [`SPOOL_SAMPLES`] as the watch goes ([`Watched::store`]).
    Spool(Box<SpoolTarget>),
}

/// Where a spooling watch stores its batches: the database, and the run that stays
/// there should the watch never store its connections ([`provisional_record`]),
/// stored with the first batch.
pub struct SpoolTarget {
    pub db: PathBuf,
    pub provisional: RunRecord,
}

/// The `sock:inet_sock_set_state` tracepoint's text, as read.
pub type TraceStream = (Trace, Receiver<Vec<u8>>);

/// The `sock:inet_sock_set_state` stream of the TCP sockets on `ports` (all when none),
/// or why not (no tracefs, no privilege): then a watch polls only, see [`polling_only`].
pub fn open_trace(ports: &[u16]) -> Result<TraceStream, TraceError> {
    Trace::stream("sock", &["inet_sock_set_state"], &trace_filter(ports))
}

/// The line a watch without the tracepoint says, `who` first.
pub fn polling_only(who: &str, sample_interval_us: u64, error: &TraceError) -> String {
    format!(
        "{who}: polling only, every {} ({error}): a connection that opens and closes between two samples is missed",
        format_duration_us(sample_interval_us)
    )
}

/// What a watch shows as it goes: `tcplab watch` prints lines or JSON; a recorder of
/// programs ([`Quiet`]) shows nothing.
pub trait WatchOutput: Send {
    /// A connection opened or closed, or an interval was cut (the loop keeps those).
    fn event(&mut self, tracker: &Tracker, t0_us: i64, event: &WatchEvent);
    /// No connection matched at a dump: called once, the first time.
    fn no_match(&mut self, filter_text: &str) {
        let _ = filter_text;
    }
}

/// Shows nothing (stdout is another program's): the intervals are only kept.
pub struct Quiet;

impl WatchOutput for Quiet {
    fn event(&mut self, _: &Tracker, _: i64, _: &WatchEvent) {}
}

/// What one watch follows, and how.
pub struct Watch {
    /// A sock_diag socket per network namespace watched, all on one clock (each
    /// socket's cookie is unique across namespaces).
    pub diags: Vec<SockDiag>,
    pub query: Query,
    pub selection: Selection,
    pub trace: Option<TraceStream>,
    /// Ends the watch once set.
    pub stop: Arc<AtomicBool>,
    pub time_us: Option<u64>,
    pub sample_interval_us: u64,
    pub report_interval_us: u64,
    pub keep: Keep,
    pub output: Box<dyn WatchOutput>,
    pub filter_text: String,
    /// Once stopped, how long to go on while connections are still open (closing).
    pub drain_us: u64,
}

/// What a watch saw, once it ended.
pub struct Watched {
    pub tracker: Tracker,
    pub intervals: Vec<IntervalRecord>,
    /// The samples kept and not spooled, as the tracker took them.
    samples: Vec<SampleRecord>,
    spool: Option<SampleSpool>,
    /// How late the tracepoint's changes were read; `None`: polling only.
    pub lag: Option<Lag>,
    /// Ended by the stop flag, rather than by its time.
    pub stopped: bool,
    pub started_unix_us: i64,
    pub duration_us: u64,
}

/// How a stored watch names itself.
pub struct WatchLabels {
    pub label: Option<String>,
    pub tags: Vec<String>,
    pub filter: String,
    /// Ended early (Ctrl-C) rather than as asked.
    pub interrupted: bool,
}

impl WatchLabels {
    /// What a stored watch that started at `started_unix_us` says of itself.
    fn meta(self, started_unix_us: i64, tracepoint: bool, duration_us: u64) -> WatchMeta {
        WatchMeta {
            started_unix_us,
            tool_version: env!("CARGO_PKG_VERSION").into(),
            host: tcplab_sys::sysctl::host_meta(),
            label: self.label,
            tags: self.tags,
            filter: self.filter,
            tracepoint,
            duration_us,
            interrupted: self.interrupted,
        }
    }
}

impl Watched {
    pub fn summary_line(&self, closed: u64, open: u64) -> String {
        format!(
            "{} over {}: {closed} closed, {open} still open{}",
            count(closed + open, "connection"),
            format_duration_us(self.duration_us),
            match self.tracker.missed() {
                0 => String::new(),
                n => format!(
                    "; {} seen only once done (TIME_WAIT), not recorded",
                    count(n, "other")
                ),
            }
        )
    }

    /// The run of kind `watch` it stores as, with the samples kept in memory (not
    /// those spooled: see [`Watched::store`]).
    pub fn record(self, labels: WatchLabels) -> RunRecord {
        let meta = labels.meta(self.started_unix_us, self.lag.is_some(), self.duration_us);
        run_record(&self.tracker, self.intervals, self.samples, meta)
    }

    /// Stores it in `store` as a run of kind `watch` with every sample, those spooled
    /// first (the spool must be on `store`'s database); its id. A run the database
    /// refuses is kept beside it, with the samples not spooled (those spooled stay
    /// under the spool's provisional run).
    pub fn store(mut self, labels: WatchLabels, store: &mut Store) -> Result<i64> {
        let spool = self.spool.take();
        let owners = SampleOwners::of(&self.tracker);
        let record = self.record(labels);
        let stored = match spool {
            Some(spool) => store.insert_spooled_run(&record, spool, |s| owners.relabel(s)),
            None => store.insert_run(&record),
        };
        stored.map_err(|e| NotStored::keeping(store.path(), e, Some(&record)).into())
    }
}

/// The run a spooling watch stores before it starts, as what stays should it never
/// store its connections: `incomplete`, saying so, its samples under each
/// connection's number.
pub fn provisional_record(labels: WatchLabels, sample_interval_us: u64) -> RunRecord {
    let tracker = Tracker::new(WatchConfig {
        t0_us: 0,
        sample_interval_us,
        report_interval_us: sample_interval_us,
        keep: false,
        announced: false,
    });
    let meta = WatchLabels {
        interrupted: true,
        ..labels
    }
    .meta(unix_now_us(), false, 0);
    RunRecord {
        error: Some(
            "the watch did not store its connections (it was killed, or storing them \
             failed): only its samples are here, each under its connection's number"
                .into(),
        ),
        ..run_record(&tracker, Vec::new(), Vec::new(), meta)
    }
}

/// Follows the connections `watch` selects until its time is up or its stop flag is set.
pub fn follow(watch: Watch) -> Result<Watched> {
    let Watch {
        mut diags,
        query,
        selection,
        trace,
        stop,
        time_us,
        sample_interval_us,
        report_interval_us,
        keep,
        mut output,
        filter_text,
        drain_us,
    } = watch;
    let t0 = monotonic_us();
    let started_unix_us = unix_now_us();
    let mut tracker = Tracker::new(WatchConfig {
        t0_us: t0,
        sample_interval_us,
        report_interval_us,
        keep: !matches!(keep, Keep::Nothing),
        announced: trace.is_some(),
    });
    let mut spool = match keep {
        Keep::Spool(target) => Some(SpoolWriter::start(*target)?),
        Keep::Nothing | Keep::InMemory => None,
    };
    let deadline = time_us.map(|t| t0 + t as i64);
    let mut admission = selection;
    let mut intervals: Vec<IntervalRecord> = Vec::new();
    let (mut samples, mut found, mut gone) = (Vec::new(), Vec::new(), Vec::new());
    let mut pending = String::new();
    let mut lag = Lag::default();
    let mut said_no_match = false;
    let mut stopped = false;
    let mut stop_seen: Option<i64> = None;
    loop {
        let now = monotonic_us();
        if stop.load(Ordering::Relaxed) {
            let since = *stop_seen.get_or_insert(now);
            if tracker.open_now() == 0 || now - since >= drain_us as i64 {
                stopped = true;
                break;
            }
        }
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        admission.new_round()?;
        // The tracepoint's changes and the closing connections, looked up at once and
        // before a dump, which would take a socket closed since for gone.
        let mut keys = tracker.closing_due(now);
        if let Some(trace) = &trace {
            drain_changes(trace_receiver(trace), &mut pending, &mut keys, &mut lag);
        }
        if !keys.is_empty() {
            found.clear();
            let gone_keys = lookup(&mut diags, &keys, &mut found, &mut gone)?;
            tracker.looked_up(&found, &gone_keys, &mut |s| admission.admit(s));
        }
        match tracker.sample_due(now) {
            None => {}
            Some(SampleRead::Lookup(keys)) => {
                found.clear();
                let gone_keys = lookup(&mut diags, &keys, &mut found, &mut gone)?;
                tracker.sampled(now, &found, &gone_keys, &mut |s| admission.admit(s));
            }
            Some(SampleRead::Dump) => {
                samples.clear();
                for diag in &mut diags {
                    diag.dump(&query, &mut samples)?;
                }
                tracker.dump(now, &samples, &mut |s| admission.admit(s));
                if !tracker.any() && !said_no_match {
                    said_no_match = true;
                    output.no_match(&filter_text);
                }
            }
        }
        admission.fill_owners(&mut tracker);
        tracker.advance(monotonic_us());
        show(&mut tracker, output.as_mut(), t0, &mut intervals);
        if tracker.kept_samples() >= SPOOL_SAMPLES
            && spool
                .as_ref()
                .is_some_and(|writer| !writer.send(tracker.take_samples()))
        {
            spool.take().map(SpoolWriter::finish).transpose()?;
        }
        let wait = (tracker.next_wakeup() - monotonic_us()).clamp(0, MAX_SLEEP_US);
        let wait = deadline.map_or(wait, |d| wait.min((d - monotonic_us()).max(0)));
        match &trace {
            Some(trace) => match trace_receiver(trace).recv_timeout(micros(wait)) {
                Ok(chunk) => pending.push_str(&String::from_utf8_lossy(&chunk)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => bail!("the trace reader stopped"),
            },
            None => std::thread::sleep(micros(wait)),
        }
    }
    let end = monotonic_us();
    tracker.finish();
    show(&mut tracker, output.as_mut(), t0, &mut intervals);
    let tracepoint = trace.is_some();
    drop(trace);
    Ok(Watched {
        samples: tracker.take_samples(),
        spool: spool.map(SpoolWriter::finish).transpose()?.flatten(),
        tracker,
        intervals,
        lag: tracepoint.then_some(lag),
        stopped,
        started_unix_us,
        duration_us: (end - t0).max(0) as u64,
    })
}

/// A spool's appends on a thread of their own, so the sampling loop never waits while a
/// batch is compressed and written: at most [`SPOOL_QUEUE`] batches wait, beyond which
/// the loop waits.
struct SpoolWriter {
    batches: SyncSender<Vec<SampleRecord>>,
    thread: JoinHandle<tcplab_store::Result<Option<SampleSpool>>>,
}

/// Batches that may wait for the spool's thread.
const SPOOL_QUEUE: usize = 2;

impl SpoolWriter {
    fn start(target: SpoolTarget) -> Result<SpoolWriter> {
        let (batches, received) = sync_channel::<Vec<SampleRecord>>(SPOOL_QUEUE);
        let thread = std::thread::Builder::new()
            .name("watch-spool".into())
            .spawn(move || {
                let mut spool = None;
                for batch in received {
                    let open = match spool.take() {
                        Some(open) => spool.insert(open),
                        None => spool.insert(SampleSpool::open(&target.db, &target.provisional)?),
                    };
                    open.append(&batch)?;
                }
                Ok(spool)
            })
            .context("starting the thread that stores the watch's samples")?;
        Ok(SpoolWriter { batches, thread })
    }

    /// Hands `batch` to the thread; false once the thread has stopped, which it does
    /// only on an error ([`SpoolWriter::finish`] returns it).
    fn send(&self, batch: Vec<SampleRecord>) -> bool {
        self.batches.send(batch).is_ok()
    }

    /// Waits until every batch is stored; the spool to finish the run with, if a batch
    /// was stored.
    fn finish(self) -> Result<Option<SampleSpool>> {
        drop(self.batches);
        match self.thread.join() {
            Ok(spool) => spool.context("storing the watch's samples"),
            Err(_) => bail!("the thread that stores the watch's samples panicked"),
        }
    }
}

/// Hands the tracker's new events to `output`, keeping the intervals.
fn show(
    tracker: &mut Tracker,
    output: &mut dyn WatchOutput,
    t0: i64,
    intervals: &mut Vec<IntervalRecord>,
) {
    let events: Vec<WatchEvent> = tracker.events().collect();
    for event in events {
        output.event(tracker, t0, &event);
        if let WatchEvent::Interval(record) = event {
            intervals.push(record);
        }
    }
}

/// Looks `keys` up in each namespace in turn, appending what is found to `found`; returns
/// the keys found in none (gone).
fn lookup(
    diags: &mut [SockDiag],
    keys: &[SocketKey],
    found: &mut Vec<SocketSample>,
    gone: &mut Vec<usize>,
) -> Result<Vec<SocketKey>> {
    let mut left = keys.to_vec();
    for diag in diags {
        if left.is_empty() {
            break;
        }
        gone.clear();
        diag.lookup(&left, Extensions::ALL, found, gone)?;
        left = gone.iter().map(|&i| left[i]).collect();
    }
    Ok(left)
}

fn trace_receiver(trace: &TraceStream) -> &Receiver<Vec<u8>> {
    &trace.1
}

/// The tracepoint's kernel-side filter: TCP, and the ports asked for.
fn trace_filter(ports: &[u16]) -> String {
    if ports.is_empty() {
        return TRACE_FILTER.into();
    }
    let any: Vec<String> = ports
        .iter()
        .map(|p| format!("sport == {p} || dport == {p}"))
        .collect();
    format!("{TRACE_FILTER} && ({})", any.join(" || "))
}

/// Adds the socket of each whole line of `pending` holding a state change to `keys`,
/// keeping a partial last line for the next chunk.
fn drain_changes(
    receiver: &Receiver<Vec<u8>>,
    pending: &mut String,
    keys: &mut Vec<SocketKey>,
    lag: &mut Lag,
) {
    while let Ok(chunk) = receiver.try_recv() {
        pending.push_str(&String::from_utf8_lossy(&chunk));
    }
    let Some(last) = pending.rfind('\n') else {
        return;
    };
    let mut seen: HashSet<SocketKey> = keys.iter().copied().collect();
    let now = monotonic_us();
    for change in pending[..last].lines().filter_map(parse_state_change) {
        lag.add(now - change.t_us);
        let key = change.key();
        if seen.insert(key) {
            keys.push(key);
        }
    }
    pending.drain(..=last);
}

/// How late state changes were looked up after the kernel made them: the time in which
/// a socket that closes is gone before its last counters are read.
#[derive(Default)]
pub struct Lag {
    count: u64,
    max_us: i64,
    over_ms: u64,
}

impl Lag {
    fn add(&mut self, us: i64) {
        self.count += 1;
        self.max_us = self.max_us.max(us);
        self.over_ms += u64::from(us > 1_000);
    }

    pub fn line(&self) -> String {
        format!(
            "{} read from the tracepoint, {} of them over 1 ms after the kernel's change, the latest {}",
            count(self.count, "state change"),
            self.over_ms,
            format_duration_us(self.max_us.max(0) as u64)
        )
    }
}

fn micros(us: i64) -> Duration {
    Duration::from_micros(us.max(0) as u64)
}

fn unix_now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The least time between two scans of /proc for sockets' owners (each ~3 ms of
/// system time on a host of 90 processes): a new socket whose owner the last scan did
/// not see waits for the next.
const OWNER_RESCAN_US: i64 = 10_000;

/// What the user selected, checked, and the owners read for it.
pub struct Selection {
    /// What the kernel checks (ports, addresses, cgroup); `None`: every socket.
    filter: Option<Filter>,
    /// `--pid` and that process's command name.
    pid: Option<Process>,
    comm: Option<String>,
    owners: Owners,
    scanned_us: i64,
    /// The sockets of `--pid`, read once per round.
    pid_inodes: Option<HashSet<u64>>,
    /// A failed read of /proc, for the loop to report.
    error: Option<anyhow::Error>,
}

impl Selection {
    /// The connections on any of `ports`, with an address in any of `addrs` (either
    /// end), in `cgroup`, of process `pid`, of processes named `comm` (each left out:
    /// any); each checked, and named in its error as `watch`'s option.
    pub fn new(
        ports: &[u16],
        addrs: &[Prefix],
        cgroup: Option<&Path>,
        pid: Option<u32>,
        comm: Option<String>,
    ) -> Result<Selection> {
        let either = |f: &dyn Fn(Side) -> Filter| f(Side::Local).or(f(Side::Remote));
        let ports = Filter::any_of(ports.iter().map(|&p| either(&|s| Filter::port(s, p))));
        let addrs = Filter::any_of(addrs.iter().map(|&a| either(&|s| Filter::addr(s, a))));
        let cgroup = match cgroup {
            Some(path) => Some(Filter::Cgroup(
                sockdiag::cgroup_id(path)
                    .with_context(|| format!("--cgroup {}", path.display()))?,
            )),
            None => None,
        };
        let pid = match pid {
            Some(pid) => {
                match sockdiag::socket_inodes(pid) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        bail!("--pid {pid}: no such process")
                    }
                    Err(e) => bail!("--pid {pid}: cannot read its sockets: {e}"),
                }
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .with_context(|| format!("--pid {pid}: reading its command name"))?;
                Some(Process {
                    pid,
                    comm: comm.trim_end().to_owned(),
                })
            }
            None => None,
        };
        Ok(Selection {
            filter: Filter::all_of([ports, addrs, cgroup].into_iter().flatten()),
            pid,
            comm,
            owners: Owners::default(),
            scanned_us: i64::MIN,
            pid_inodes: None,
            error: None,
        })
    }

    /// What the kernel checks (ports, addresses, cgroup); `None`: every socket.
    pub fn filter(&self) -> Option<&Filter> {
        self.filter.as_ref()
    }

    /// Every connection, whoever holds it.
    pub fn everything() -> Selection {
        Selection {
            filter: None,
            pid: None,
            comm: None,
            owners: Owners::default(),
            scanned_us: i64::MIN,
            pid_inodes: None,
            error: None,
        }
    }

    /// A new round of the loop: `--pid`'s sockets are read again; a failed read of
    /// /proc in the last one is returned.
    pub fn new_round(&mut self) -> Result<()> {
        self.pid_inodes = None;
        self.error.take().map_or(Ok(()), Err)
    }

    fn admit(&mut self, sample: &SocketSample) -> Admit {
        if let Some(filter) = &self.filter {
            // A lookup's socket passed no kernel filter.
            if !filter.matches(&sample.key, sample.cgroup_id.unwrap_or(0)) {
                return Admit::Ignore;
            }
        }
        // 0: an orphan (its application closed it), which no process holds any more.
        let inode = u64::from(sample.inode);
        if let Some(process) = &self.pid {
            let pid = process.pid;
            let inodes = self.pid_inodes.get_or_insert_with(|| {
                // A process gone holds nothing.
                sockdiag::socket_inodes(pid)
                    .map(|v| v.into_iter().collect())
                    .unwrap_or_default()
            });
            return match inode != 0 && inodes.contains(&inode) {
                true => Admit::Watch(Some(process.clone())),
                false => Admit::Ignore,
            };
        }
        let mut process = self.owner(inode);
        if process.is_none() && inode != 0 && sample.t_us > self.scanned_us {
            // Newer than the last scan: scan again, unless that was just now.
            if sample.t_us.saturating_sub(self.scanned_us) >= OWNER_RESCAN_US {
                self.rescan();
                process = self.owner(inode);
            } else if self.comm.is_some() {
                return Admit::Later;
            }
        }
        match (&self.comm, process) {
            (Some(comm), Some(p)) if *comm == p.comm => Admit::Watch(Some(p)),
            (Some(_), _) => Admit::Ignore,
            (None, process) => Admit::Watch(process),
        }
    }

    /// Gives the open connections first seen without a process, after the last scan,
    /// the one the next scan finds (one scan at most every [`OWNER_RESCAN_US`]; a socket
    /// a scan since its start did not find stays without: another user's, without root).
    fn fill_owners(&mut self, tracker: &mut Tracker) {
        let unowned = tracker.unowned(self.scanned_us);
        if unowned.is_empty() || self.pid.is_some() {
            return;
        }
        if monotonic_us().saturating_sub(self.scanned_us) >= OWNER_RESCAN_US {
            self.rescan();
        }
        for (id, inode) in unowned {
            if let Some(process) = self.owner(u64::from(inode)) {
                tracker.set_process(id, process);
            }
        }
    }

    /// The first process holding socket `inode` (that has `--comm`'s name, if given).
    fn owner(&self, inode: u64) -> Option<Process> {
        self.owners
            .of(inode)
            .iter()
            .find(|o| self.comm.as_ref().is_none_or(|c| *c == o.comm))
            .map(|o| Process {
                pid: o.pid,
                comm: o.comm.clone(),
            })
    }

    fn rescan(&mut self) {
        self.scanned_us = monotonic_us();
        match Owners::scan() {
            Ok(owners) => self.owners = owners,
            Err(e) => self.error = Some(anyhow::Error::new(e).context("reading sockets' owners")),
        }
    }
}
