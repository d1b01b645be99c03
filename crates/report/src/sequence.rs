//! A flow's time-sequence graph from a run's capture (`tcplab_model::tseq`), drawn at
//! the chart's resolution: each pixel column holds the lowest and highest sequence
//! number of each kind of segment that entered the bottleneck in it, the highest ACK
//! and window edge, and a cross for each drop at its sequence number (one per pixel).

use std::collections::{BTreeMap, BTreeSet};

use tcplab_model::capture::{CapturedPacket, Fate};
use tcplab_model::events::KernelEvent;
use tcplab_model::link::DropReason;
use tcplab_model::record::{FlowRecord, RunRecord};
use tcplab_model::tseq::flow_graph;

use crate::axes::Quantity;
use crate::chart::{Body, Marks, Pt, Series, Shape, XAxis, YAxis};
use crate::palette::Palette;

/// Pixel columns and rows a graph is aggregated to: about the plot's size.
const COLUMNS: f64 = 700.0;
const ROWS: f64 = 350.0;

/// Flow `flow`'s graph from `packets` (read back from the run's capture, on the wall
/// clock), within `zoom` (seconds since t0) or the whole transfer; with its caption.
/// `None` when the capture holds none of its data.
pub fn chart(
    run: &RunRecord,
    flow: &FlowRecord,
    packets: &[CapturedPacket],
    zoom: Option<(f64, f64)>,
    palette: &mut Palette,
) -> Option<(String, Body)> {
    let graph = flow_graph(packets, run, flow)?;
    let seconds = |t_us: i64| t_us as f64 / 1e6;
    let (from, to) = zoom.unwrap_or_else(|| {
        let times = graph.segments.iter().map(|s| seconds(s.t_us));
        let (lo, hi) = times.fold((f64::MAX, f64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        (lo.max(0.0).min(hi), hi)
    });
    let inside = |t: f64| t >= from && t <= to;
    let width = (to - from).max(1e-6);
    // The pixel column's time, at its middle.
    let column = |t: f64| ((t - from) / width * COLUMNS).floor().min(COLUMNS - 1.0);
    let at = |c: f64| from + (c + 0.5) * width / COLUMNS;

    let mut bars: BTreeMap<(&str, i64), (u64, u64)> = BTreeMap::new();
    let mut drops: Vec<(DropReason, Vec<(f64, u64)>)> = Vec::new();
    let mut top = 0u64;
    for s in graph.segments.iter().filter(|s| inside(seconds(s.t_us))) {
        let (lo, hi) = (s.seq, s.seq + u64::from(s.len));
        top = top.max(hi);
        let c = column(seconds(s.t_us));
        match s.fate {
            Fate::Dropped(reason) => match drops.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, at)) => at.push((c, lo)),
                None => drops.push((reason, vec![(c, lo)])),
            },
            _ => {
                let kind = if s.retransmit {
                    "retransmitted"
                } else {
                    "sent"
                };
                let bar = bars.entry((kind, c as i64)).or_insert((lo, hi));
                *bar = (bar.0.min(lo), bar.1.max(hi));
            }
        }
    }
    if bars.is_empty() && drops.is_empty() {
        return None;
    }
    let row = |seq: u64| (seq as f64 / top.max(1) as f64 * ROWS).round() as i64;
    let flow_name = crate::runs::flow_name(flow);
    let mut marks: Vec<Marks> = ["sent", "retransmitted"]
        .into_iter()
        .map(|kind| Marks {
            name: format!("{flow_name} {kind}"),
            color: palette.color(&format!("{flow_name} {kind}")),
            shape: Shape::Bar,
            points: bars
                .iter()
                .filter(|((k, _), _)| *k == kind)
                .map(|(&(_, c), &(lo, hi))| Pt {
                    interval: Some((lo as f64, hi as f64)),
                    ..Pt::at(at(c as f64), hi as f64)
                })
                .collect(),
        })
        .collect();
    for (reason, at_seq) in drops {
        let name = Fate::Dropped(reason).label().to_owned();
        let points: BTreeSet<(i64, i64, u64)> = at_seq
            .into_iter()
            .map(|(c, seq)| (c as i64, row(seq), seq))
            .collect();
        let mut seen = BTreeSet::new();
        marks.push(Marks {
            color: palette.color(&name),
            name,
            shape: Shape::Cross,
            points: points
                .into_iter()
                .filter(|(c, r, _)| seen.insert((*c, *r)))
                .map(|(c, _, seq)| Pt::at(at(c as f64), seq as f64))
                .collect(),
        });
    }
    marks.retain(|m| !m.points.is_empty());

    // The ACK line and the window's edge: the highest of each column, as steps.
    let mut acks: BTreeMap<i64, (u64, Option<u64>)> = BTreeMap::new();
    for a in graph.acks.iter().filter(|a| inside(seconds(a.t_us))) {
        let c = column(seconds(a.t_us)) as i64;
        let entry = acks.entry(c).or_insert((a.ack, a.window_edge));
        *entry = (entry.0.max(a.ack), entry.1.max(a.window_edge));
    }
    let ack_name = format!("{flow_name} ACK");
    let edge_name = format!("{flow_name} receive window");
    let series = vec![
        Series {
            color: palette.color(&ack_name),
            name: ack_name,
            dashed: false,
            points: acks
                .iter()
                .map(|(&c, &(ack, _))| Pt::at(at(c as f64), ack as f64))
                .collect(),
        },
        Series {
            color: palette.color(&edge_name),
            name: edge_name,
            dashed: true,
            points: acks
                .iter()
                .filter_map(|(&c, &(_, edge))| Some(Pt::at(at(c as f64), edge? as f64)))
                .collect(),
        },
    ];
    // The congestion window's edge from the kernel's events, on the same clock:
    // snd_una + cwnd × MSS at each of the sender's probes.
    let sender = flow.direction.sender();
    let mut cwnd_edge: BTreeMap<i64, u64> = BTreeMap::new();
    let mut near = 0;
    for e in run
        .events
        .iter()
        .filter(|e| e.flow == flow.id && e.host == sender)
    {
        let KernelEvent::Probe {
            snd_una, snd_cwnd, ..
        } = e.event
        else {
            continue;
        };
        let Some(una) = graph.relative(snd_una, near) else {
            break;
        };
        near = una;
        if inside(seconds(e.t_us)) {
            let edge = una + u64::from(snd_cwnd) * u64::from(flow.mss);
            let c = column(seconds(e.t_us)) as i64;
            let entry = cwnd_edge.entry(c).or_insert(edge);
            *entry = (*entry).max(edge);
        }
    }
    let mut series = series;
    if !cwnd_edge.is_empty() {
        let name = format!("{flow_name} snd_una + cwnd (events)");
        series.push(Series {
            color: palette.color(&name),
            name,
            dashed: false,
            points: cwnd_edge
                .iter()
                .map(|(&c, &edge)| Pt::at(at(c as f64), edge as f64))
                .collect(),
        });
    }
    let events_part = if cwnd_edge.is_empty() {
        ""
    } else {
        " With the kernel's events (--trace-events), on the same clock: the edge of the congestion window at the sender (snd_una + cwnd × MSS, from tcp_probe)."
    };
    let what = format!(
        "Flow {}'s time-sequence graph from the capture at the bottleneck's entry: each data segment as its range of sequence numbers (relative to the first data byte) when it entered, sent or retransmitted; the receiver's ACKs (line) and the edge of the window it advertised (ACK + window, dashed); a cross where the emulator dropped a packet, coloured by why. Each pixel column holds the lowest and highest of what entered in it.",
        flow.id
    ) + events_part;
    Some((
        what,
        Body::Marked {
            x: XAxis {
                span: Some((from, to)),
                ..XAxis::time(to)
            },
            y: YAxis {
                label: "sequence number".into(),
                quantity: Quantity::Size,
            },
            series,
            marks,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_model::path;
    use tcplab_model::record::Direction;

    /// An IPv4 TCP packet from `from` to `to` with `payload` bytes after its headers.
    fn packet(
        at_ms: u64,
        (from, to): (u16, u16),
        seq: u32,
        ack: u32,
        flags: u8,
        payload: u32,
        fate: Fate,
    ) -> CapturedPacket {
        let len = 40 + payload;
        let mut head = vec![0u8; 40];
        head[0] = 0x45;
        head[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        head[9] = 6;
        head[20..22].copy_from_slice(&from.to_be_bytes());
        head[22..24].copy_from_slice(&to.to_be_bytes());
        head[24..28].copy_from_slice(&seq.to_be_bytes());
        head[28..32].copy_from_slice(&ack.to_be_bytes());
        head[32] = 5 << 4;
        head[33] = flags;
        head[34..36].copy_from_slice(&1000u16.to_be_bytes());
        CapturedPacket {
            // The run's t0 is 1 s after the epoch below.
            at_ns: (1_001_000 + at_ms * 1000) * 1000,
            entry: 0,
            direction: path::Direction::Up,
            fate,
            queue_delay_ns: None,
            len,
            head,
        }
    }

    /// A run whose t0 is 1 s after the packets' epoch, and its flow up from port 40000.
    fn run_and_flow() -> (RunRecord, FlowRecord) {
        let mut run = crate::tests::run(50.0, 1, false);
        run.started_unix_us = 1_001_000;
        let flow = FlowRecord {
            client_addr: "10.77.1.1:40000".into(),
            server_addr: "10.77.0.1:5001".into(),
            direction: Direction::Up,
            ..run.flows[0].clone()
        };
        (run, flow)
    }

    /// A long transfer is drawn at the chart's resolution: however many segments, a
    /// bar per pixel column and kind, a cross per pixel and reason.
    #[test]
    fn a_long_transfer_keeps_a_bar_per_pixel_column() {
        let (up, down) = ((40000, 5001), (5001, 40000));
        let mut packets = vec![packet(0, up, 99, 0, 0x02, 0, Fate::Delivered)];
        for i in 0..100_000u32 {
            let fate = if i % 100 == 0 {
                Fate::Dropped(DropReason::Loss)
            } else {
                Fate::Delivered
            };
            let at = 1 + u64::from(i) / 10;
            packets.push(packet(at, up, 100 + i * 1000, 1, 0x10, 1000, fate));
            packets.push(packet(
                at,
                down,
                1,
                100 + i * 1000,
                0x10,
                0,
                Fate::Delivered,
            ));
        }
        let (run, f) = run_and_flow();
        let (_, body) = chart(&run, &f, &packets, None, &mut Palette::new()).unwrap();
        let Body::Marked { series, marks, .. } = body else {
            panic!("a marked chart")
        };
        for m in &marks {
            // Bars: one per column; crosses: one per pixel of the drops' diagonal.
            let most = match m.shape {
                Shape::Bar => COLUMNS,
                Shape::Cross => COLUMNS + ROWS,
            };
            assert!(
                m.points.len() as f64 <= most,
                "{}: {}",
                m.name,
                m.points.len()
            );
        }
        assert!(marks.iter().any(|m| m.name == "dropped loss"));
        assert!(series.iter().all(|s| s.points.len() <= 700));
    }

    /// Sent, dropped by the queue, retransmitted and acknowledged: each drawn in its
    /// kind at its time and sequence number; a zoom keeps what lies inside it.
    #[test]
    fn each_segment_ack_and_drop_is_drawn_where_it_entered() {
        let (up, down) = ((40000, 5001), (5001, 40000));
        let (d, q) = (Fate::Delivered, Fate::Dropped(DropReason::Queue));
        let packets = [
            packet(0, up, 99, 0, 0x02, 0, d),
            packet(100, up, 100, 1, 0x10, 1000, d),
            packet(200, up, 1100, 1, 0x10, 1000, q),
            packet(300, down, 1, 1100, 0x10, 0, d),
            packet(400, up, 1100, 1, 0x10, 1000, d),
            packet(500, down, 1, 2100, 0x10, 0, d),
        ];
        let (run, f) = run_and_flow();
        let (what, body) = chart(&run, &f, &packets, None, &mut Palette::new()).unwrap();
        assert!(what.starts_with("Flow 0's time-sequence graph"), "{what}");
        let Body::Marked {
            series, marks, x, ..
        } = body
        else {
            panic!("a marked chart")
        };
        assert_eq!(x.span, Some((0.1, 0.4)));
        let points = |name: &str| -> Vec<(f64, Option<(f64, f64)>)> {
            let m = marks
                .iter()
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("{name}: {marks:?}"));
            m.points
                .iter()
                .map(|p| ((p.x * 1e3).round(), p.interval))
                .collect()
        };
        assert_eq!(points("flow 0 sent"), [(100.0, Some((0.0, 1000.0)))]);
        assert_eq!(
            points("flow 0 retransmitted"),
            [(400.0, Some((1000.0, 2000.0)))]
        );
        assert_eq!(points("dropped queue"), [(200.0, None)]);
        let ack = &series[0];
        assert_eq!(ack.name, "flow 0 ACK");
        // The ACK at 0.5 s lies after the last segment: outside the whole transfer's span.
        assert_eq!(ack.points.iter().map(|p| p.y).collect::<Vec<_>>(), [1000.0]);
        // No handshake from the receiver: its window's scale is unknown, no edge drawn.
        assert!(series[1].points.is_empty());

        let (_, zoomed) =
            chart(&run, &f, &packets, Some((0.15, 0.45)), &mut Palette::new()).unwrap();
        let Body::Marked { marks, .. } = zoomed else {
            panic!("a marked chart")
        };
        let names: Vec<&str> = marks.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["flow 0 retransmitted", "dropped queue"]);
    }
}
