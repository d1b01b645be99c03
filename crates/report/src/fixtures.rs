//! Made-up runs the tests of several modules draw: a run of TCP (and UDP) flows, and a
//! watched run of long and short connections. Apart from the tests of the report end
//! to end (`tests`), which draw every chart, so that a module's tests import only these.

use tcplab_record::tcp_state::TcpState;
use tcplab_record::tcpinfo::TcpInfo;
use tcplab_record::{
    Direction, FinalCounters, FlowRecord, Host, IntervalRecord, LimitShares, QueueSample,
    RunRecord, SampleRecord, UdpInterval, WatchRecord, WatchedFlow,
};

/// A 12 s run (longer than any example's warm-up) of `flows` TCP flows (plus a UDP
/// one with `udp`) whose receivers read
/// `mbit` Mbit/s each, with tcp_info samples every 10 ms and a bottleneck queue.
pub(crate) fn run(mbit: f64, flows: u32, udp: bool) -> RunRecord {
    let mut run: RunRecord =
        serde_json::from_str(include_str!("../../record/tests/run.json")).unwrap();
    let template = run.flows[0].clone();
    run.flows = (0..flows + u32::from(udp))
        .map(|id| {
            let mut f = template.clone();
            f.id = id;
            f.direction = Direction::Up;
            f.udp = (udp && id == flows).then(Default::default);
            f
        })
        .collect();
    run.intervals = run
        .flows
        .iter()
        .flat_map(|f| {
            let is_udp = f.udp.is_some();
            (0..12u32).map(move |index| IntervalRecord {
                flow: f.id,
                index,
                start_us: u64::from(index) * 1_000_000,
                end_us: u64::from(index + 1) * 1_000_000,
                acked_bytes: (mbit * 125_000.0) as u64,
                received_bytes: (mbit * 125_000.0) as u64,
                retransmits: 1,
                cwnd: 40,
                srtt_us: 21_000,
                limits: Default::default(),
                udp: is_udp.then_some(UdpInterval {
                    sent: 100,
                    received: 98,
                    lost: 2,
                    out_of_order: 0,
                    jitter_us: 40.0,
                }),
                drain: false,
            })
        })
        .collect();
    for i in &mut run.intervals {
        i.limits.cwnd = 0.75;
        i.limits.rwnd = 0.25;
    }
    run.samples = (0..flows)
        .flat_map(|flow| {
            (0..200).map(move |k| SampleRecord {
                flow,
                host: Host::Client,
                t_us: k * 10_000,
                info: TcpInfo {
                    snd_cwnd: 10 + k as u32,
                    // Linux's "not set yet" until the first loss at 1 s.
                    snd_ssthresh: if k < 100 { 0x7fff_ffff } else { 60 },
                    rtt: 20_000 + k as u32 * 10,
                    unacked: 10,
                    snd_mss: 1448,
                    ..TcpInfo::default()
                },
                skmem: None,
                bbr: None,
            })
        })
        .collect();
    let path = run.path.as_mut().unwrap();
    path.epoch_unix_us = run.started_unix_us - 300_000;
    path.up.queue = (0..2300)
        .map(|k| QueueSample {
            t_us: k * 1000,
            bytes: (k % 100) * 1000,
        })
        .collect();
    run
}

/// A watched run (`tcplab watch --db`) of `long` connections of 2 s (nginx sending to
/// curl, sampled every 10 ms, cwnd-limited 90 % of the time) and `short` ones of 3 ms
/// starting every 5 ms from 1 s, each sampled once with one interval, with 10 KiB and
/// a byte more each, half rwnd-limited and half app-limited.
pub(crate) fn watched_run(long: u32, short: u32) -> RunRecord {
    let mut run = run(10.0, long, false);
    run.path = None;
    run.params.sample_interval_us = 10_000;
    run.watch = Some(WatchRecord {
        filter: "--port 80".into(),
        tracepoint: true,
        missed: 3,
        shell: None,
    });
    let one = self::run(10.0, 1, false);
    let (template, interval) = (&one.flows[0], &one.intervals[0]);
    let socket = |comm: &str, pid, end, start_us, end_us, limits, limited_us| WatchedFlow {
        cookie: 7,
        pid: Some(pid),
        comm: Some(comm.into()),
        start_us,
        end_us,
        opened: true,
        closed: true,
        last_state: TcpState::Established,
        counters: FinalCounters {
            min_rtt_us: 20_000,
            limited_us,
            limits,
            ..FinalCounters::default()
        },
        end,
        peer: None,
    };
    let cwnd = LimitShares {
        cwnd: 0.9,
        app: 0.1,
        ..LimitShares::default()
    };
    for f in &mut run.flows {
        let mut w = socket("nginx", 10, Host::Client, 0, 2_000_000, cwnd, 2_000_000);
        w.peer = Some(Box::new(socket(
            "curl",
            20,
            Host::Server,
            0,
            2_000_000,
            cwnd,
            0,
        )));
        f.client_addr = format!("10.0.0.1:{}", 40_000 + f.id);
        f.server_addr = "10.0.0.2:80".into();
        f.sent_bytes = 1_000_000 * u64::from(f.id + 1);
        // The receiver short of a few bytes, so that no column can stand for the other.
        f.received_bytes = f.sent_bytes - 5;
        f.retransmits = 3;
        f.watched = Some(w);
    }
    for k in 0..short {
        let id = long + k;
        let start = 1_000_000 + i64::from(k) * 5_000;
        let limits = if k % 2 == 0 {
            LimitShares {
                rwnd: 1.0,
                ..LimitShares::default()
            }
        } else {
            LimitShares {
                app: 1.0,
                ..LimitShares::default()
            }
        };
        let mut w = socket(
            "nginx",
            10,
            Host::Client,
            start,
            start + 3_000,
            limits,
            3_000,
        );
        w.peer = Some(Box::new(socket(
            "curl",
            30 + k,
            Host::Server,
            start,
            start + 3_000,
            limits,
            0,
        )));
        let bytes = 10_240 + u64::from(k);
        run.flows.push(FlowRecord {
            id,
            client_addr: "10.0.0.2:80".into(),
            server_addr: format!("10.0.0.1:{}", 50_000 + k),
            sent_bytes: bytes,
            received_bytes: bytes - u64::from(k % 2),
            retransmits: u64::from(k % 3),
            watched: Some(w),
            ..template.clone()
        });
        run.samples.push(SampleRecord {
            flow: id,
            host: Host::Client,
            t_us: start,
            info: TcpInfo::default(),
            skmem: None,
            bbr: None,
        });
        run.intervals.push(IntervalRecord {
            flow: id,
            index: 0,
            start_us: start as u64,
            end_us: start as u64 + 3_000,
            ..interval.clone()
        });
    }
    run
}
