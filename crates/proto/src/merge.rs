//! Both ends' views of a test, merged into one record on the client's time base.
//!
//! Each flow has a sender end and a receiver end. Its sending-side figures (acked bytes,
//! cwnd, RTT, limits, retransmits, send buffer) come from the sender's end, its
//! receiving-side figures (bytes read, receive buffer) from the receiver's end, wherever
//! those ends were. Server times are moved to the client's clock with the measured
//! offset, then made relative to the client's t0.

use std::collections::BTreeMap;

use tcplab_analysis::throughput::{self, Counted};
use tcplab_model::transaction;
use tcplab_record::events::TraceRecord;
use tcplab_record::{
    ClockOffset, CpuUse, Direction, FlowRecord, Host, HostMeta, IntervalRecord, LimitShares,
    RttStats, RunRecord, RunStatus, SampleRecord, Summary, TestEnd, TestParams, Timed, Transaction,
    UdpInterval, UdpStats, CLOCK_STEP_TOLERANCE_US, SCHEMA,
};

use crate::flow_roles;
use crate::protocol::{Role, SideFlow, SideInterval, SideReport};

/// What the client knows of a test besides the two ends' reports.
#[derive(Clone, Debug)]
pub struct TestContext {
    pub target: String,
    pub label: Option<String>,
    pub tags: Vec<String>,
    pub params: TestParams,
    pub started_unix_us: i64,
    /// t0 on the client's monotonic clock, µs.
    pub t0_us: i64,
    pub clock: ClockOffset,
    pub client_meta: HostMeta,
    pub server_meta: HostMeta,
}

impl TestContext {
    /// Both ends read one CLOCK_MONOTONIC: no offset estimate needed.
    pub fn same_clock(&self) -> bool {
        self.clock
            .same_clock(&self.client_meta.boot_id, &self.server_meta.boot_id)
    }

    /// µs since t0 on the client's clock, for a monotonic time read on `host`.
    pub fn relative_us(&self, host: Host, t_us: i64) -> i64 {
        match host {
            Host::Client => t_us - self.t0_us,
            Host::Server => t_us - self.clock.offset_us - self.t0_us,
        }
    }
}

/// The two ends' records of one flow's interval, each with the end it came from.
#[derive(Default)]
struct Halves {
    sender: Option<(Host, SideInterval)>,
    receiver: Option<(Host, SideInterval)>,
}

/// Pairs the sender's and the receiver's halves of each report interval.
pub struct IntervalMerger {
    context: TestContext,
    flows: usize,
    halves: BTreeMap<(u32, u32), Halves>,
    /// Paired records by interval, until every flow of that interval is in.
    done: BTreeMap<u32, Vec<IntervalRecord>>,
    /// Complete intervals already handed out.
    emitted: Vec<IntervalRecord>,
}

impl IntervalMerger {
    pub fn new(context: &TestContext) -> IntervalMerger {
        IntervalMerger {
            flows: flow_roles(&context.params).len(),
            context: context.clone(),
            halves: BTreeMap::new(),
            done: BTreeMap::new(),
            emitted: Vec::new(),
        }
    }

    /// Takes one end's records; returns the intervals now complete for every flow,
    /// oldest first, each as one record per flow.
    pub fn add(&mut self, host: Host, records: Vec<SideInterval>) -> Vec<Vec<IntervalRecord>> {
        for record in records {
            let key = (record.index, record.flow);
            let entry = self.halves.entry(key).or_default();
            match record.role {
                Role::Send => entry.sender = Some((host, record)),
                Role::Receive => entry.receiver = Some((host, record)),
            }
            if entry.sender.is_some() && entry.receiver.is_some() {
                let halves = self.halves.remove(&key).expect("present");
                let merged = self.pair(&halves);
                self.done.entry(key.0).or_default().push(merged);
            }
        }
        let complete: Vec<u32> = self
            .done
            .iter()
            .take_while(|(_, group)| group.len() == self.flows)
            .map(|(&index, _)| index)
            .collect();
        let groups: Vec<Vec<IntervalRecord>> = complete
            .into_iter()
            .filter_map(|i| self.done.remove(&i))
            .filter(|group| !empty_drain(group))
            .collect();
        self.emitted.extend(groups.iter().flatten().cloned());
        groups
    }

    /// Every interval, paired or not, ordered by interval then flow.
    pub fn finish(mut self) -> Vec<IntervalRecord> {
        let halves = std::mem::take(&mut self.halves);
        for ((index, _), halves) in halves {
            let merged = self.pair(&halves);
            self.done.entry(index).or_default().push(merged);
        }
        let mut all = self.emitted;
        all.extend(
            self.done
                .into_values()
                .filter(|group| !empty_drain(group))
                .flatten(),
        );
        all.sort_by_key(|r| (r.index, r.flow));
        all
    }

    /// One record from whichever halves arrived; the sender's bounds win.
    fn pair(&self, halves: &Halves) -> IntervalRecord {
        let (host, bounds) = halves
            .sender
            .as_ref()
            .or(halves.receiver.as_ref())
            .expect("an interval has at least one half");
        let sender = halves.sender.as_ref().map(|(_, s)| s);
        let receiver = halves.receiver.as_ref().map(|(_, r)| r);
        let rel = |t| self.context.relative_us(*host, t).max(0) as u64;
        IntervalRecord {
            flow: bounds.flow,
            index: bounds.index,
            start_us: rel(bounds.start_us),
            end_us: rel(bounds.end_us),
            acked_bytes: sender.map_or(0, |s| s.bytes),
            received_bytes: receiver.map_or(0, |r| r.bytes),
            retransmits: sender.map_or(0, |s| s.retransmits),
            cwnd: sender.map_or(0, |s| s.cwnd),
            srtt_us: sender.map_or(0, |s| s.srtt_us),
            limits: sender.map_or_else(LimitShares::default, |s| s.limits),
            udp: (sender.is_some_and(|s| s.udp.is_some())
                || receiver.is_some_and(|r| r.udp.is_some()))
            .then(|| UdpInterval {
                sent: sender.and_then(|s| s.udp).map_or(0, |u| u.sent),
                ..receiver.and_then(|r| r.udp).unwrap_or_default()
            }),
            drain: sender.is_some_and(|s| s.drain) || receiver.is_some_and(|r| r.drain),
        }
    }
}

/// An interval after the deadline in which nothing moved, as the last of a UDP test
/// whose flows were done at the deadline: it would show 0 bit/s over no time.
fn empty_drain(group: &[IntervalRecord]) -> bool {
    group.iter().all(|r| {
        r.drain
            && r.acked_bytes == 0
            && r.received_bytes == 0
            && r.retransmits == 0
            && r.udp.is_none_or(|u| u.sent == 0 && u.received == 0)
    })
}

/// One end's report and raw samples.
pub struct EndReport {
    pub report: SideReport,
    pub samples: Vec<SampleRecord>,
}

/// Builds the run record. `server` is `None` when the server vanished before reporting;
/// `error` says what cut the test short, if anything.
pub fn merge(
    context: &TestContext,
    client: EndReport,
    server: Option<EndReport>,
    intervals: Vec<IntervalRecord>,
    error: Option<String>,
) -> RunRecord {
    let ends = |host| match host {
        Host::Client => Some(&client.report),
        Host::Server => server.as_ref().map(|s| &s.report),
    };
    let find = |host, id| ends(host).and_then(|r| r.flows.iter().find(|f| f.id == id));
    let flows: Vec<FlowRecord> = flow_roles(&context.params)
        .into_iter()
        .map(|(id, direction)| {
            flow_record(
                id,
                direction,
                find(direction.sender(), id),
                find(direction.receiver(), id),
                &context.params,
                context.same_clock(),
            )
        })
        .collect();
    let flow_error = [&client.report]
        .into_iter()
        .chain(server.as_ref().map(|s| &s.report))
        .flat_map(|r| &r.flows)
        .find_map(|f| f.error.clone().map(|e| format!("flow {}: {e}", f.id)));
    let error = error.or(flow_error);
    let status = if error.is_none() && server.is_some() {
        RunStatus::Done
    } else {
        RunStatus::Incomplete
    };

    let mut samples: Vec<SampleRecord> = client
        .samples
        .into_iter()
        .map(|s| (Host::Client, s))
        .chain(
            server
                .iter()
                .flat_map(|s| s.samples.iter().cloned().map(|x| (Host::Server, x))),
        )
        .map(|(host, mut s)| {
            s.t_us = context.relative_us(host, s.t_us);
            s
        })
        .collect();
    samples.sort_by_key(|s| (s.t_us, s.flow));

    // Over every requester's transactions at once, not flow by flow.
    let requesters: Vec<&SideFlow> = client
        .report
        .flows
        .iter()
        .filter(|f| !f.transactions.is_empty())
        .collect();
    let transactions = requesters.first().and_then(|first| {
        let all: Vec<Transaction> = requesters
            .iter()
            .flat_map(|f| f.transactions.iter().copied())
            .collect();
        let (end_us, seconds) = transaction_window(&context.params, first);
        transaction::stats(&all, end_us, seconds)
    });

    let mut summary = summarize(
        &flows,
        &intervals,
        client.report.cpu,
        server.as_ref().map(|s| s.report.cpu).unwrap_or_default(),
    );
    summary.transactions = transactions;

    RunRecord {
        schema: SCHEMA.to_string(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        label: context.label.clone(),
        tags: context.tags.clone(),
        status,
        error,
        started_unix_us: context.started_unix_us,
        target: context.target.clone(),
        params: context.params.clone(),
        client: context.client_meta.clone(),
        server: context.server_meta.clone(),
        clock: context.clock,
        summary,
        flows,
        intervals,
        path: None,
        samples,
        trace: None,
        events: Vec::new(),
        probes: Vec::new(),
        watch: None,
    }
}

fn flow_record(
    id: u32,
    direction: Direction,
    sender: Option<&SideFlow>,
    receiver: Option<&SideFlow>,
    params: &TestParams,
    same_clock: bool,
) -> FlowRecord {
    let seconds =
        |f: Option<&SideFlow>| f.map_or(0.0, |f| (f.end_us - f.start_us).max(0) as f64 / 1e6);
    let bytes = |f: Option<&SideFlow>| f.map_or(0, |f| f.bytes);
    let bps = |f: Option<&SideFlow>| {
        let s = seconds(f);
        if s > 0.0 {
            bytes(f) as f64 * 8.0 / s
        } else {
            0.0
        }
    };
    let timed = timed(params, sender, receiver);
    // The client end always reports; its addresses name the connection.
    let (client_end, server_end) = match direction {
        Direction::Up => (sender, receiver),
        Direction::Down => (receiver, sender),
    };
    let client_addr = client_end.map(|f| f.local_addr.clone()).unwrap_or_default();
    let server_addr = client_end
        .map(|f| f.peer_addr.clone())
        .or_else(|| server_end.map(|f| f.local_addr.clone()))
        .unwrap_or_default();
    FlowRecord {
        id,
        host: None,
        name: None,
        direction,
        client_addr,
        server_addr,
        cc: sender.map(|f| f.cc.clone()).unwrap_or_default(),
        mss: sender.map_or(0, |f| f.mss),
        sndbuf: sender.map(|f| f.buffer).unwrap_or_default(),
        rcvbuf: receiver.map(|f| f.buffer).unwrap_or_default(),
        sent_bytes: bytes(sender),
        received_bytes: bytes(receiver),
        sent_bps: timed.map_or_else(|| bps(sender), |t| t.acked_bps()),
        received_bps: timed.map_or_else(|| bps(receiver), |t| t.received_bps()),
        sender_seconds: seconds(sender),
        receiver_seconds: seconds(receiver),
        retransmits: sender.map_or(0, |f| f.retransmits),
        samples: sender.map_or(0, |f| f.samples),
        receiver_samples: receiver.map_or(0, |f| f.samples),
        limits: sender.map(|f| f.limits).unwrap_or_default(),
        kernel_limits: sender.map(|f| f.kernel_limits).unwrap_or_default(),
        rtt: sender.map(|f| f.rtt).unwrap_or_default(),
        udp: udp_stats(sender, receiver, same_clock),
        timed,
        transactions: sender.and_then(|f| {
            let (end_us, seconds) = transaction_window(params, f);
            transaction::stats(&f.transactions, end_us, seconds)
        }),
        watched: None,
    }
}

/// Where a requester's transactions count: to a timed test's deadline, else to its
/// last; as the end relative to t0 and the window's length in seconds.
fn transaction_window(params: &TestParams, requester: &SideFlow) -> (i64, f64) {
    let end_us = match params.end {
        TestEnd::Duration { us } => us as i64,
        TestEnd::Bytes { .. } => requester.end_us - requester.start_us,
    };
    (end_us, end_us.max(0) as f64 / 1e6)
}

/// A timed TCP flow's part up to its deadline, when both ends counted their bytes there.
/// Its length is the sender's, to the moment it counted (the receiver counted at its own
/// deadline, as late after it within the monitor's wake-up).
fn timed(
    params: &TestParams,
    sender: Option<&SideFlow>,
    receiver: Option<&SideFlow>,
) -> Option<Timed> {
    if !matches!(params.end, TestEnd::Duration { .. }) {
        return None;
    }
    let (sender, receiver) = (sender?, receiver?);
    let (sent, read) = (sender.at_deadline?, receiver.at_deadline?);
    Some(Timed {
        seconds: (sent.t_us - sender.start_us).max(0) as f64 / 1e6,
        acked_bytes: sent.bytes,
        received_bytes: read.bytes,
        received_seconds: (read.t_us - receiver.start_us).max(0) as f64 / 1e6,
        drain_seconds: (sender.end_us - sent.t_us).max(0) as f64 / 1e6,
        unacked_bytes: sender.unacked,
    })
}

/// A UDP flow's counts from both ends: what was sent from the sender, what arrived from
/// the receiver, and the difference lost.
fn udp_stats(
    sender: Option<&SideFlow>,
    receiver: Option<&SideFlow>,
    same_clock: bool,
) -> Option<UdpStats> {
    let (s, r) = (sender.and_then(|f| f.udp), receiver.and_then(|f| f.udp));
    if s.is_none() && r.is_none() {
        return None;
    }
    let (s, r) = (s.unwrap_or_default(), r.unwrap_or_default());
    Some(UdpStats {
        sent: s.sent,
        send_errors: s.send_errors,
        late: s.late,
        unsent: s.unsent,
        lost: s.sent.saturating_sub(r.received),
        owd_exact: same_clock && r.clock_step_us <= CLOCK_STEP_TOLERANCE_US,
        ..r
    })
}

/// The UDP flows' totals: counts summed; jitter and each delay quantile the worst flow's.
fn udp_summary(flows: &[FlowRecord]) -> Option<UdpStats> {
    flows.iter().filter_map(|f| f.udp).reduce(|a, b| UdpStats {
        sent: a.sent + b.sent,
        received: a.received + b.received,
        lost: a.lost + b.lost,
        duplicates: a.duplicates + b.duplicates,
        out_of_order: a.out_of_order + b.out_of_order,
        jitter_us: a.jitter_us.max(b.jitter_us),
        owd_us: a.owd_us.worst(b.owd_us),
        owd_exact: a.owd_exact && b.owd_exact,
        clock_step_us: a.clock_step_us.max(b.clock_step_us),
        send_errors: a.send_errors + b.send_errors,
        socket_drops: a.socket_drops + b.socket_drops,
        late: a.late + b.late,
        unsent: a.unsent + b.unsent,
    })
}

/// One record for tests run in one lab against one server, at once or staggered, from
/// one or several client hosts: flows are numbered anew in the given order and named by
/// their host, and times move to the earliest test's t0 (a lab's hosts share one clock,
/// so the wall-clock anchors of their t0s differ by exactly their start offsets).
pub fn combine(runs: Vec<(String, RunRecord)>) -> Option<RunRecord> {
    let mut runs = runs.into_iter();
    let (first_host, mut combined) = runs.next()?;
    let mut rest: Vec<(String, RunRecord)> = runs.collect();
    if rest.is_empty() {
        return Some(combined);
    }
    rest.insert(0, (first_host, combined.clone()));
    let t0 = rest.iter().map(|(_, r)| r.started_unix_us).min()?;
    combined.started_unix_us = t0;
    let (mut flows, mut intervals, mut samples) = (Vec::new(), Vec::new(), Vec::new());
    let (mut events, mut traces) = (Vec::new(), Vec::new());
    let (mut cpu_client, mut cpu_server) = (Vec::new(), Vec::new());
    // One group's probes: the first that has them (the probes measure the path, whose
    // load is every group's).
    let (mut latency, mut probes) = (None, Vec::new());
    for (host, run) in rest {
        let base = flows.len() as u32;
        let shift = run.started_unix_us - t0;
        flows.extend(run.flows.into_iter().map(|mut f| {
            f.id += base;
            f.host = Some(host.clone());
            f
        }));
        intervals.extend(run.intervals.into_iter().map(|mut i| {
            i.flow += base;
            i.start_us += shift as u64;
            i.end_us += shift as u64;
            i
        }));
        samples.extend(run.samples.into_iter().map(|mut s| {
            s.flow += base;
            s.t_us += shift;
            s
        }));
        events.extend(run.events.into_iter().map(|mut e| {
            e.flow += base;
            e.t_us += shift;
            e
        }));
        traces.extend(run.trace);
        if latency.is_none() && run.summary.latency.is_some() {
            latency = run.summary.latency.clone();
            probes = run
                .probes
                .into_iter()
                .map(|mut p| {
                    p.scheduled_us += shift;
                    p.sent_us += shift;
                    p
                })
                .collect();
        }
        cpu_client.push(run.summary.cpu_client);
        cpu_server.push(run.summary.cpu_server);
        if run.status != RunStatus::Done && combined.status == RunStatus::Done {
            combined.status = run.status;
            combined.error = run.error.map(|e| format!("{host}: {e}"));
        }
    }
    let sum = |cpus: &[CpuUse]| CpuUse {
        user_pct: cpus.iter().map(|c| c.user_pct).sum(),
        system_pct: cpus.iter().map(|c| c.system_pct).sum(),
        total_pct: cpus.iter().map(|c| c.total_pct).sum(),
    };
    combined.summary = summarize(&flows, &intervals, sum(&cpu_client), sum(&cpu_server));
    combined.summary.latency = latency;
    combined.probes = probes;
    combined.flows = flows;
    combined.intervals = intervals;
    samples.sort_by_key(|s| (s.t_us, s.flow));
    combined.samples = samples;
    events.sort_by_key(|e| e.t_us);
    combined.events = events;
    combined.trace = TraceRecord::combine(traces);
    Some(combined)
}

fn summarize(
    flows: &[FlowRecord],
    intervals: &[IntervalRecord],
    cpu_client: tcplab_record::CpuUse,
    cpu_server: tcplab_record::CpuUse,
) -> Summary {
    let measured: Vec<&FlowRecord> = flows.iter().filter(|f| f.rtt.max_us > 0).collect();
    let rtt = if measured.is_empty() {
        RttStats::default()
    } else {
        RttStats {
            min_us: measured.iter().map(|f| f.rtt.min_us).min().unwrap_or(0),
            mean_us: measured.iter().map(|f| f.rtt.mean_us).sum::<f64>() / measured.len() as f64,
            max_us: measured.iter().map(|f| f.rtt.max_us).max().unwrap_or(0),
        }
    };
    // What limited a sender is a TCP question; UDP flows send at their own rate.
    let tcp = || flows.iter().filter(|f| f.udp.is_none());
    let weighted: Vec<(LimitShares, f64)> = tcp().map(|f| (f.limits, f.sender_seconds)).collect();
    let limits = LimitShares::weighted_mean(&weighted);
    let any_time = tcp().any(|f| f.sender_seconds > 0.0);
    // One window for all flows, however far apart they started (`throughput`).
    let rate = |counted| throughput::bps(intervals, counted, 0, |_| true).unwrap_or(0.0);
    Summary {
        sent_bytes: flows.iter().map(|f| f.sent_bytes).sum(),
        received_bytes: flows.iter().map(|f| f.received_bytes).sum(),
        sent_bps: rate(Counted::Sent),
        received_bps: rate(Counted::Received),
        window_seconds: throughput::window(intervals, Counted::Received, 0, |_| true)
            .map_or(0.0, |w| w.seconds()),
        retransmits: flows.iter().map(|f| f.retransmits).sum(),
        rtt,
        limits,
        dominant_limit: any_time.then(|| limits.dominant()),
        cpu_client,
        cpu_server,
        udp: udp_summary(flows),
        latency: None,
        transactions: transaction::combine(flows.iter().filter_map(|f| f.transactions)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::DeadlineCount;
    use tcplab_record::{BufferSize, CpuUse, Mode, TestEnd};

    fn context(mode: Mode, streams: u16) -> TestContext {
        TestContext {
            target: "server".into(),
            label: None,
            tags: vec![],
            params: TestParams {
                streams,
                end: TestEnd::Duration { us: 2_000_000 },
                mode,
                ..TestParams::default()
            },
            started_unix_us: 0,
            t0_us: 1_000_000,
            // The server's clock reads 500 ms ahead of the client's.
            clock: ClockOffset {
                offset_us: 500_000,
                uncertainty_us: 10,
            },
            client_meta: HostMeta::default(),
            server_meta: HostMeta::default(),
        }
    }

    fn half(flow: u32, index: u32, role: Role, start_us: i64, bytes: u64) -> SideInterval {
        SideInterval {
            flow,
            index,
            role,
            start_us,
            end_us: start_us + 1_000_000,
            bytes,
            retransmits: 1,
            cwnd: 10,
            srtt_us: 100,
            limits: LimitShares {
                rwnd: 0.0,
                sndbuf: 0.0,
                cwnd: 1.0,
                pacing: 0.0,
                app: 0.0,
            },
            udp: None,
            drain: false,
        }
    }

    fn side_flow(id: u32, role: Role, bytes: u64, start_us: i64, seconds: f64) -> SideFlow {
        SideFlow {
            id,
            role,
            local_addr: format!("local{id}"),
            peer_addr: format!("peer{id}"),
            cc: "cubic".into(),
            mss: 1448,
            buffer: BufferSize {
                requested: Some(1000),
                effective: 2000,
                capped_at: None,
                at_end: 2000,
            },
            bytes,
            start_us,
            end_us: start_us + (seconds * 1e6) as i64,
            retransmits: 3,
            samples: 7,
            limits: LimitShares {
                rwnd: 0.5,
                sndbuf: 0.0,
                cwnd: 0.5,
                pacing: 0.0,
                app: 0.0,
            },
            kernel_limits: LimitShares::default(),
            rtt: RttStats {
                min_us: 10,
                mean_us: 20.0,
                max_us: 30,
            },
            error: None,
            udp: None,
            at_deadline: None,
            unacked: 0,
            transactions: Vec::new(),
        }
    }

    #[test]
    fn an_interval_completes_when_both_ends_reported_it_on_the_clients_clock() {
        let ctx = context(Mode::Up, 1);
        let mut merger = IntervalMerger::new(&ctx);
        // The client sends (its clock), the server receives (clock + 500 ms).
        assert!(merger
            .add(Host::Client, vec![half(0, 0, Role::Send, 1_000_000, 900)])
            .is_empty());
        let groups = merger.add(
            Host::Server,
            vec![half(0, 0, Role::Receive, 1_500_000, 1000)],
        );
        assert_eq!(groups.len(), 1);
        let r = &groups[0][0];
        assert_eq!((r.start_us, r.end_us), (0, 1_000_000));
        assert_eq!(
            (r.acked_bytes, r.received_bytes, r.retransmits),
            (900, 1000, 1)
        );
        // A half without its partner still lands in the record at the end.
        merger.add(Host::Server, vec![half(0, 1, Role::Receive, 2_500_000, 5)]);
        let all = merger.finish();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].received_bytes, 5);
        assert_eq!(
            all[1].start_us, 1_000_000,
            "server time moved to the client's clock"
        );
        assert_eq!(all[1].cwnd, 0, "no sender half, no sender figures");
    }

    #[test]
    fn a_group_waits_for_every_flow() {
        let ctx = context(Mode::Bidir, 1);
        let mut merger = IntervalMerger::new(&ctx);
        merger.add(
            Host::Client,
            vec![
                half(0, 0, Role::Send, 1_000_000, 1),
                half(1, 0, Role::Receive, 1_000_000, 2),
            ],
        );
        assert!(merger
            .add(Host::Server, vec![half(0, 0, Role::Receive, 1_500_000, 1)])
            .is_empty());
        let groups = merger.add(Host::Server, vec![half(1, 0, Role::Send, 1_500_000, 2)]);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].len(), 2);
    }

    #[test]
    fn flows_take_sending_figures_from_the_sender_and_receiving_ones_from_the_receiver() {
        let ctx = context(Mode::Down, 1);
        let client = EndReport {
            report: SideReport {
                flows: vec![side_flow(0, Role::Receive, 1000, 1_000_000, 2.0)],
                cpu: CpuUse::default(),
            },
            samples: vec![],
        };
        let mut sender = side_flow(0, Role::Send, 1000, 1_500_000, 1.0);
        sender.cc = "bbr".into();
        let server = EndReport {
            report: SideReport {
                flows: vec![sender],
                cpu: CpuUse {
                    user_pct: 1.0,
                    system_pct: 2.0,
                    total_pct: 3.0,
                },
            },
            samples: vec![],
        };
        let run = merge(&ctx, client, Some(server), vec![], None);
        assert_eq!(run.status, RunStatus::Done);
        let f = &run.flows[0];
        assert_eq!(f.direction, Direction::Down);
        assert_eq!(f.cc, "bbr");
        assert_eq!((f.sent_bps, f.received_bps), (8000.0, 4000.0));
        assert_eq!(f.client_addr, "local0");
        assert_eq!(f.server_addr, "peer0");
        assert_eq!(run.summary.cpu_server.total_pct, 3.0);
        assert_eq!(run.summary.retransmits, 3);
    }

    #[test]
    fn a_missing_server_report_makes_the_run_incomplete() {
        let ctx = context(Mode::Up, 2);
        let client = EndReport {
            report: SideReport {
                flows: vec![
                    side_flow(0, Role::Send, 10, 1_000_000, 1.0),
                    side_flow(1, Role::Send, 30, 1_000_000, 1.0),
                ],
                cpu: CpuUse::default(),
            },
            samples: vec![],
        };
        let run = merge(&ctx, client, None, vec![], Some("server vanished".into()));
        assert_eq!(run.status, RunStatus::Incomplete);
        assert_eq!(run.error.as_deref(), Some("server vanished"));
        assert_eq!(run.summary.sent_bytes, 40);
        assert_eq!(run.summary.received_bytes, 0);
        assert_eq!(run.summary.dominant_limit, Some(tcplab_record::Limit::Rwnd));
    }

    #[test]
    fn an_interval_after_the_deadline_in_which_nothing_moved_is_left_out() {
        let ctx = context(Mode::Up, 1);
        let mut merger = IntervalMerger::new(&ctx);
        let udp = |mut h: SideInterval, drain: bool| {
            (h.retransmits, h.cwnd, h.srtt_us) = (0, 0, 0);
            h.udp = Some(UdpInterval::default());
            h.drain = drain;
            h
        };
        let pair = |merger: &mut IntervalMerger, index, bytes, drain| {
            let start = 1_000_000 * i64::from(index);
            merger.add(
                Host::Client,
                vec![udp(half(0, index, Role::Send, start, bytes), drain)],
            );
            merger.add(
                Host::Server,
                vec![udp(half(0, index, Role::Receive, start, bytes), drain)],
            )
        };
        assert_eq!(pair(&mut merger, 0, 1000, false).len(), 1);
        // An empty drain is not handed out, live or at the end.
        assert!(pair(&mut merger, 1, 0, true).is_empty());
        let intervals = merger.finish();
        assert_eq!(intervals.len(), 1);
        // One in which datagrams still arrived stays.
        let mut merger = IntervalMerger::new(&ctx);
        pair(&mut merger, 0, 1000, false);
        assert_eq!(pair(&mut merger, 1, 100, true).len(), 1);
        assert_eq!(merger.finish().len(), 2);
    }

    #[test]
    fn a_timed_flow_is_rated_by_its_bytes_at_the_deadline_and_reports_its_drain() {
        // 2 s up: by the deadline 2 MB acknowledged and 1.99 MB read; the sender then
        // drained for 0.6 s until the limit, 100 bytes short.
        let ctx = context(Mode::Up, 1);
        let mut sender = side_flow(0, Role::Send, 3_000_000, 1_000_000, 2.6);
        sender.at_deadline = Some(DeadlineCount {
            bytes: 2_000_000,
            t_us: 3_000_000,
        });
        sender.unacked = 100;
        let mut receiver = side_flow(0, Role::Receive, 2_999_950, 1_500_000, 2.6);
        receiver.at_deadline = Some(DeadlineCount {
            bytes: 1_990_000,
            t_us: 3_500_000,
        });
        let end = |flow| EndReport {
            report: SideReport {
                flows: vec![flow],
                cpu: CpuUse::default(),
            },
            samples: vec![],
        };
        let mut merger = IntervalMerger::new(&ctx);
        for (index, start, acked, read) in [
            (0, 0, 900_000, 895_000),
            (1, 1_000_000, 1_100_000, 1_095_000),
        ] {
            merger.add(
                Host::Client,
                vec![half(0, index, Role::Send, 1_000_000 + start, acked)],
            );
            merger.add(
                Host::Server,
                vec![half(0, index, Role::Receive, 1_500_000 + start, read)],
            );
        }
        let mut drained = half(0, 2, Role::Send, 3_000_000, 999_900);
        drained.drain = true;
        merger.add(Host::Client, vec![drained]);
        // A receiver woken 0.2 s late counts 0.2 s more of its bytes, over its own 2.2 s:
        // the same rate, not 8.76 Mbit/s over the sender's 2 s.
        let mut late = receiver.clone();
        late.at_deadline = Some(DeadlineCount {
            bytes: 2_189_000,
            t_us: 3_700_000,
        });
        let late = merge(&ctx, end(sender.clone()), Some(end(late)), vec![], None);
        let late_bps = late.flows[0].received_bps;
        assert!((late_bps / 7.96e6 - 1.0).abs() < 1e-9, "{late_bps}");
        let run = merge(
            &ctx,
            end(sender),
            Some(end(receiver)),
            merger.finish(),
            None,
        );
        let f = &run.flows[0];
        let timed = f.timed.expect("a timed part");
        assert_eq!(
            (
                timed.seconds,
                timed.acked_bytes,
                timed.received_bytes,
                timed.unacked_bytes
            ),
            (2.0, 2_000_000, 1_990_000, 100)
        );
        assert!((timed.drain_seconds - 0.6).abs() < 1e-9);
        assert_eq!((f.sent_bps, f.received_bps), (8e6, 7.96e6));
        assert!(run.intervals[2].drain, "a drain half marks its interval");
        // The run's rates: the intervals up to the deadline, the drain left out.
        assert_eq!(run.summary.window_seconds, 2.0);
        assert_eq!(
            (run.summary.sent_bps, run.summary.received_bps),
            (8e6, 7.96e6)
        );
    }

    #[test]
    fn staggered_tests_share_one_window() {
        // Two one-flow tests through one link, the second 0.5 s later, each 2 s at 10 MB/s
        // alone and 5 MB/s shared: 25 MB in 2.5 s.
        let test = |start_unix_us, intervals: &[(u64, u64, u64)]| {
            let intervals = intervals
                .iter()
                .enumerate()
                .map(|(index, &(start_us, end_us, bytes))| IntervalRecord {
                    flow: 0,
                    index: index as u32,
                    start_us,
                    end_us,
                    acked_bytes: bytes,
                    received_bytes: bytes,
                    retransmits: 0,
                    cwnd: 10,
                    srtt_us: 100,
                    limits: LimitShares::default(),
                    udp: None,
                    drain: false,
                })
                .collect();
            let end = |role| EndReport {
                report: SideReport {
                    flows: vec![side_flow(0, role, 12_500_000, 1_000_000, 2.0)],
                    cpu: CpuUse::default(),
                },
                samples: vec![],
            };
            let ctx = TestContext {
                started_unix_us: start_unix_us,
                ..context(Mode::Up, 1)
            };
            merge(
                &ctx,
                end(Role::Send),
                Some(end(Role::Receive)),
                intervals,
                None,
            )
        };
        let first = test(
            0,
            &[(0, 500_000, 5_000_000), (500_000, 2_000_000, 7_500_000)],
        );
        let second = test(
            500_000,
            &[(0, 1_500_000, 7_500_000), (1_500_000, 2_000_000, 5_000_000)],
        );
        // Each test alone: 12.5 MB in 2 s.
        let own: f64 = [&first, &second]
            .iter()
            .map(|r| r.summary.received_bps)
            .sum();
        assert_eq!(own, 2.0 * 50e6);
        let combined =
            combine(vec![("client1".into(), first), ("client2".into(), second)]).unwrap();
        assert_eq!(combined.summary.window_seconds, 2.5);
        assert_eq!(combined.summary.received_bps, 25e6 * 8.0 / 2.5);
        assert_eq!(combined.summary.received_bytes, 25_000_000);
    }
}
