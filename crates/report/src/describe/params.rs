//! Captions' words: what a test's flows were asked to do, in the units people type;
//! each flow's name in legends.

use tcplab_model::experiment::FlowConfig;
use tcplab_netsim::path::Pace;
use tcplab_record::units::{format_duration_us, format_rate, format_size};
use tcplab_record::{FlowRecord, Mode, TestEnd, TestParams, TransactionParams, Tuning};

use crate::watched;

/// A flow's name in charts: "flow 0", or a watched connection's number, program and ends.
pub fn flow_name(f: &FlowRecord) -> String {
    match &f.watched {
        Some(w) => watched::flow_name(f, w),
        None => format!("flow {}", f.id),
    }
}

/// "1 TCP stream up for 2.00 s, cubic, window 64 KiB, 128 KiB writes, Nagle on".
pub fn params(p: &TestParams) -> String {
    parts(p).join(", ")
}

fn parts(p: &TestParams) -> Vec<String> {
    let probes = p
        .probe
        .map(|probe| format!("probes every {}", format_duration_us(probe.interval_us)));
    if p.streams == 0 {
        let end = match p.end {
            TestEnd::Duration { us } => format!(" for {}", format_duration_us(us)),
            TestEnd::Bytes { .. } => String::new(),
        };
        return vec![format!("{} alone{end}", probes.unwrap_or_default())];
    }
    let mut parts = vec![format!(
        "{} {} {} {}",
        p.streams,
        if p.udp.is_some() { "UDP" } else { "TCP" },
        if p.streams == 1 { "stream" } else { "streams" },
        match p.mode {
            Mode::Up => "up",
            Mode::Down => "down",
            Mode::Bidir => "each way",
        }
    )];
    parts[0] += &match p.end {
        TestEnd::Duration { us } => format!(" for {}", format_duration_us(us)),
        TestEnd::Bytes { bytes } => format!(", {} each", format_size(bytes)),
    };
    match &p.udp {
        Some(u) => {
            parts.push(if u.rate_bps == 0 {
                "as fast as possible".into()
            } else {
                format!("at {}", format_rate(u.rate_bps as f64))
            });
            parts.push(format!("{} B datagrams", u.datagram_size));
            if u.burst > 1 {
                parts.push(format!("bursts of {}", u.burst));
            }
        }
        None => parts.extend(tuning(&p.tuning, p.transactions)),
    }
    parts.extend(probes);
    parts
}

fn tuning(t: &Tuning, transactions: Option<TransactionParams>) -> Vec<String> {
    let mut parts = vec![t.cc.clone().unwrap_or_else(|| "default cc".into())];
    parts.push(match (t.sndbuf, t.rcvbuf) {
        (None, None) => "autotuned buffers".into(),
        (Some(s), Some(r)) if s == r => format!("window {}", format_size(s)),
        (s, r) => {
            let size = |v: Option<u64>| v.map_or("auto".into(), format_size);
            format!("sndbuf {}, rcvbuf {}", size(s), size(r))
        }
    });
    parts.push(match transactions {
        None => format!("{} writes", format_size(u64::from(t.write_size))),
        Some(rr) => format!("transactions: {}", rr.describe()),
    });
    parts.push(if t.nodelay { "Nagle off" } else { "Nagle on" }.into());
    if let Some(mss) = t.mss {
        parts.push(format!("MSS {mss}"));
    }
    if let Some(rate) = t.pacing_rate {
        parts.push(format!("kernel pacing at {}", format_rate(rate as f64)));
    }
    if let Some(rate) = t.app_rate {
        parts.push(format!(
            "application pacing at {}",
            format_rate(rate as f64)
        ));
    }
    if t.ecn {
        parts.push("ECN".into());
    }
    parts
}

fn flow_parts(f: &FlowConfig) -> Vec<String> {
    let mut parts = parts(&f.params);
    match f.gap_pace {
        Some(Pace::Rate(bps)) => parts.push(format!("gap-paced at {}", format_rate(bps as f64))),
        Some(Pace::Window(rtt)) => parts.push(format!("gap-paced at its {}", rtt.name())),
        None => {}
    }
    if f.start_us > 0 {
        parts.push(format!("from {}", format_duration_us(f.start_us)));
    }
    parts
}

/// The flow groups of several points, each with what all the points share ("bulk: 1
/// TCP stream up …; cbr: … from 0.50 s"); what differs between them (what the axes set)
/// is left out and said to be.
pub fn flows_in_common(points: &[&[FlowConfig]]) -> String {
    let Some(first) = points.first() else {
        return String::new();
    };
    let mut left_out = false;
    let groups: Vec<String> = first
        .iter()
        .enumerate()
        .map(|(g, flow)| {
            let everywhere = |part: &String| {
                points
                    .iter()
                    .all(|p| p.get(g).is_some_and(|f| flow_parts(f).contains(part)))
            };
            let all = flow_parts(flow);
            let kept: Vec<String> = all.iter().filter(|p| everywhere(p)).cloned().collect();
            left_out |= kept.len() < all.len();
            format!("{}: {}", flow.name, kept.join(", "))
        })
        .collect();
    let rest = if left_out {
        " (and what the axes set)"
    } else {
        ""
    };
    format!("{}{rest}", groups.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_model::experiment::FlowEnds;
    use tcplab_record::UdpParams;

    #[test]
    fn tcp_and_udp_flows_in_words() {
        let mut p = TestParams::default();
        p.tuning.cc = Some("cubic".into());
        p.tuning.sndbuf = Some(65536);
        p.tuning.rcvbuf = Some(65536);
        assert_eq!(
            params(&p),
            "1 TCP stream up for 10.0 s, cubic, window 64 KiB, 128 KiB writes, Nagle on"
        );
        p.tuning.nodelay = true;
        p.tuning.pacing_rate = Some(930_000_000);
        p.streams = 4;
        assert!(params(&p).contains("4 TCP streams up"));
        assert!(params(&p).ends_with("Nagle off, kernel pacing at 930 Mbit/s"));
        p.udp = Some(UdpParams {
            rate_bps: 2_000_000,
            datagram_size: 1000,
            burst: 1,
            header: Default::default(),
        });
        p.streams = 1;
        assert_eq!(
            params(&p),
            "1 UDP stream up for 10.0 s, at 2.00 Mbit/s, 1000 B datagrams"
        );
    }

    #[test]
    fn transactions_probes_and_ecn_in_words() {
        let mut p = TestParams {
            transactions: Some(TransactionParams {
                request_size: 100,
                response_size: 1024,
                request_writes: 2,
                new_connection: true,
            }),
            probe: Some(tcplab_record::ProbeParams {
                interval_us: 10_000,
                idle_us: 0,
            }),
            ..TestParams::default()
        };
        p.tuning.ecn = true;
        assert_eq!(
            params(&p),
            "1 TCP stream up for 10.0 s, default cc, autotuned buffers, transactions: requests of 100 B in 2 writes, responses of 1 KiB, a new connection each, Nagle on, ECN, probes every 10.0 ms"
        );
        p.streams = 0;
        p.transactions = None;
        assert_eq!(params(&p), "probes every 10.0 ms alone for 10.0 s");
    }

    #[test]
    fn what_the_axes_change_is_left_out() {
        let flow = |window: u64| {
            let mut params = TestParams::default();
            params.tuning.sndbuf = Some(window);
            params.tuning.rcvbuf = Some(window);
            FlowConfig {
                name: "bulk".into(),
                ends: FlowEnds::Dumbbell { client: 1 },
                start_us: 0,
                params,
                command: None,
                gap_pace: (window == 8192).then_some(Pace::Rate(5_000_000)),
            }
        };
        let (a, b) = ([flow(8192)], [flow(65536)]);
        assert_eq!(
            flows_in_common(&[&a, &b]),
            "bulk: 1 TCP stream up for 10.0 s, default cc, 128 KiB writes, Nagle on (and what the axes set)"
        );
        // A topology flow's gap pacer, where every point has it.
        assert_eq!(
            flows_in_common(&[&a, &a]),
            "bulk: 1 TCP stream up for 10.0 s, default cc, window 8 KiB, 128 KiB writes, Nagle on, gap-paced at 5.00 Mbit/s"
        );
    }
}
