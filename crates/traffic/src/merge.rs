//! Both ends' views of a test, merged into one record on the client's time base.
//!
//! Each flow has a sender end and a receiver end. Its sending-side figures (acked bytes,
//! cwnd, RTT, limits, retransmits, send buffer) come from the sender's end, its
//! receiving-side figures (bytes read, receive buffer) from the receiver's end, wherever
//! those ends were. Server times are moved to the client's clock with the measured
//! offset, then made relative to the client's t0.

use std::collections::BTreeMap;

use tcplab_model::record::{
    ClockOffset, Direction, FlowRecord, Host, HostMeta, IntervalRecord, LimitShares, RttStats,
    RunRecord, RunStatus, SampleRecord, Summary, TestParams, SCHEMA,
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
    /// µs since t0 on the client's clock, for a monotonic time read on `host`.
    pub fn relative_us(&self, host: Host, t_us: i64) -> i64 {
        match host {
            Host::Client => t_us - self.t0_us,
            Host::Server => t_us - self.clock.offset_us - self.t0_us,
        }
    }
}

/// Pairs the sender's and the receiver's halves of each report interval.
pub struct IntervalMerger {
    context: TestContext,
    flows: usize,
    halves: BTreeMap<(u32, u32), (Option<SideInterval>, Option<SideInterval>, Option<Host>)>,
    done: BTreeMap<u32, Vec<IntervalRecord>>,
}

impl IntervalMerger {
    pub fn new(context: &TestContext) -> IntervalMerger {
        IntervalMerger {
            flows: flow_roles(&context.params).len(),
            context: context.clone(),
            halves: BTreeMap::new(),
            done: BTreeMap::new(),
        }
    }

    /// Takes one end's records; returns the intervals now complete for every flow,
    /// oldest first, each as one record per flow.
    pub fn add(&mut self, host: Host, records: Vec<SideInterval>) -> Vec<Vec<IntervalRecord>> {
        for record in records {
            let key = (record.index, record.flow);
            let entry = self.halves.entry(key).or_default();
            match record.role {
                Role::Send => {
                    entry.0 = Some(record);
                    entry.2 = Some(host);
                }
                Role::Receive => entry.1 = Some(record),
            }
            if let (Some(_), Some(_), Some(_)) = entry {
                let (sender, receiver, sender_host) = self.halves.remove(&key).expect("present");
                let merged = self.pair(
                    sender.as_ref(),
                    receiver.as_ref(),
                    sender_host.unwrap_or(host),
                );
                self.done.entry(key.0).or_default().push(merged);
            }
        }
        let complete: Vec<u32> = self
            .done
            .iter()
            .take_while(|(_, group)| group.len() == self.flows)
            .map(|(&index, _)| index)
            .collect();
        complete
            .into_iter()
            .filter_map(|i| self.done.remove(&i))
            .collect()
    }

    /// Everything left, paired or not, ordered by interval then flow.
    pub fn finish(mut self) -> Vec<IntervalRecord> {
        let halves = std::mem::take(&mut self.halves);
        for ((index, _), (sender, receiver, sender_host)) in halves {
            let merged = self.pair(
                sender.as_ref(),
                receiver.as_ref(),
                sender_host.unwrap_or(Host::Client),
            );
            self.done.entry(index).or_default().push(merged);
        }
        let mut all: Vec<IntervalRecord> = self.done.into_values().flatten().collect();
        all.sort_by_key(|r| (r.index, r.flow));
        all
    }

    fn pair(
        &self,
        sender: Option<&SideInterval>,
        receiver: Option<&SideInterval>,
        sender_host: Host,
    ) -> IntervalRecord {
        let (bounds, host) = match (sender, receiver) {
            (Some(s), _) => (s, sender_host),
            // Without the sender's half, its receiver is on the other end.
            (None, Some(r)) => (r, other(sender_host)),
            (None, None) => unreachable!("an interval has at least one half"),
        };
        let rel = |t| self.context.relative_us(host, t).max(0) as u64;
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
        }
    }
}

fn other(host: Host) -> Host {
    match host {
        Host::Client => Host::Server,
        Host::Server => Host::Client,
    }
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
        summary: summarize(
            &flows,
            client.report.cpu,
            server.as_ref().map(|s| s.report.cpu).unwrap_or_default(),
        ),
        flows,
        intervals,
        samples,
    }
}

fn flow_record(
    id: u32,
    direction: Direction,
    sender: Option<&SideFlow>,
    receiver: Option<&SideFlow>,
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
        direction,
        client_addr,
        server_addr,
        cc: sender.map(|f| f.cc.clone()).unwrap_or_default(),
        mss: sender.map_or(0, |f| f.mss),
        sndbuf: sender.map(|f| f.buffer).unwrap_or_default(),
        rcvbuf: receiver.map(|f| f.buffer).unwrap_or_default(),
        sent_bytes: bytes(sender),
        received_bytes: bytes(receiver),
        sent_bps: bps(sender),
        received_bps: bps(receiver),
        sender_seconds: seconds(sender),
        receiver_seconds: seconds(receiver),
        retransmits: sender.map_or(0, |f| f.retransmits),
        samples: sender.map_or(0, |f| f.samples),
        receiver_samples: receiver.map_or(0, |f| f.samples),
        limits: sender.map(|f| f.limits).unwrap_or_default(),
        rtt: sender.map(|f| f.rtt).unwrap_or_default(),
    }
}

fn summarize(
    flows: &[FlowRecord],
    cpu_client: tcplab_model::record::CpuUse,
    cpu_server: tcplab_model::record::CpuUse,
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
    let weighted: Vec<(LimitShares, f64)> =
        flows.iter().map(|f| (f.limits, f.sender_seconds)).collect();
    let limits = LimitShares::weighted_mean(&weighted);
    let any_time = flows.iter().any(|f| f.sender_seconds > 0.0);
    Summary {
        sent_bytes: flows.iter().map(|f| f.sent_bytes).sum(),
        received_bytes: flows.iter().map(|f| f.received_bytes).sum(),
        sent_bps: flows.iter().map(|f| f.sent_bps).sum(),
        received_bps: flows.iter().map(|f| f.received_bps).sum(),
        retransmits: flows.iter().map(|f| f.retransmits).sum(),
        rtt,
        limits,
        dominant_limit: any_time.then(|| limits.dominant()),
        cpu_client,
        cpu_server,
    }
}
