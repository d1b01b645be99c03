//! A flow's time-sequence graph from a run's capture (`tcplab_analysis::tseq`), drawn at
//! the chart's resolution: each pixel column holds the lowest and highest sequence
//! number of the segments sent in it, each retransmission is its own mark (up to
//! [`EACH_RETRANSMISSION_UP_TO`] in view), the highest ACK and window edge of each
//! column are lines, and each packet the link did not simply deliver is marked by its
//! fate at its sequence number (one mark per pixel).

use std::collections::{BTreeMap, BTreeSet};

use tcplab_analysis::tseq::{flow_graph, Segment};
use tcplab_netsim::capture::{CapturedPacket, Fate};
use tcplab_record::capture::CapturePoint;
use tcplab_record::events::KernelEvent;
use tcplab_record::{FlowRecord, RunRecord};

use crate::axes::Quantity;
use crate::chart::{Body, Layer, Marks, Pt, Series, Shape, XAxis, YAxis};
use crate::describe;
use crate::palette::{self, Palette};

/// Pixel columns and rows a graph is aggregated to: about the plot's size.
const COLUMNS: f64 = 700.0;
const ROWS: f64 = 350.0;

/// Retransmissions in view up to this many are drawn one mark each; more, one bar per
/// pixel column as the sent segments are.
pub const EACH_RETRANSMISSION_UP_TO: usize = 2000;

/// A mark's pixel column and row, and the sequence number it stands at.
type Pixel = (i64, i64, u64);

/// How a fate other than delivery is marked: a cross where the receiver never got the
/// packet, a ring where it got it marked, twice or out of order.
fn fate_shape(fate: Fate) -> Shape {
    match fate {
        Fate::Dropped(_) | Fate::Corrupted => Shape::Cross,
        Fate::Delivered | Fate::Reordered | Fate::Duplicate | Fate::MarkedCe => Shape::Ring,
    }
}

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

    let segments: Vec<&Segment> = graph
        .segments
        .iter()
        .filter(|s| inside(seconds(s.t_us)))
        .collect();
    let acks: Vec<_> = graph
        .acks
        .iter()
        .filter(|a| inside(seconds(a.t_us)))
        .collect();
    if segments.is_empty() {
        return None;
    }
    // The values shown: the segments' and the ACKs', not the window edges above them.
    let (bottom, top) = segments
        .iter()
        .map(|s| (s.seq, s.seq + u64::from(s.len)))
        .chain(acks.iter().map(|a| (a.ack, a.ack)))
        .fold((u64::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
    let row =
        |seq: u64| ((seq - bottom) as f64 / (top - bottom).max(1) as f64 * ROWS).round() as i64;

    let mut sent: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    let retransmits = segments.iter().filter(|s| s.retransmit).count();
    let each = retransmits <= EACH_RETRANSMISSION_UP_TO;
    let mut retransmitted: Vec<Pt> = Vec::new();
    let mut by_column: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    // Per fate, where it happened: (pixel column, pixel row, sequence number).
    let mut fates: Vec<(Fate, BTreeSet<Pixel>)> = Vec::new();
    for s in &segments {
        let (lo, hi) = (s.seq, s.seq + u64::from(s.len));
        let t = seconds(s.t_us);
        let c = column(t) as i64;
        if s.retransmit && each {
            retransmitted.push(Pt {
                interval: Some((lo as f64, hi as f64)),
                ..Pt::at(t, hi as f64)
            });
        } else {
            let columns = if s.retransmit {
                &mut by_column
            } else {
                &mut sent
            };
            let bar = columns.entry(c).or_insert((lo, hi));
            *bar = (bar.0.min(lo), bar.1.max(hi));
        }
        if s.fate != Fate::Delivered {
            let mark = (c, row(lo), lo);
            match fates.iter_mut().find(|(f, _)| *f == s.fate) {
                Some((_, marks)) => {
                    marks.insert(mark);
                }
                None => fates.push((s.fate, BTreeSet::from([mark]))),
            }
        }
    }
    let bars = |columns: &BTreeMap<i64, (u64, u64)>| -> Vec<Pt> {
        columns
            .iter()
            .map(|(&c, &(lo, hi))| Pt {
                interval: Some((lo as f64, hi as f64)),
                ..Pt::at(at(c as f64), hi as f64)
            })
            .collect()
    };
    retransmitted.extend(bars(&by_column));
    let flow_name = describe::flow_name(flow);
    // Under the lines, the fates, then the sent segments; the retransmissions over all.
    let mut marks = Vec::new();
    fates.sort_by_key(|(f, _)| Fate::ALL.iter().position(|a| a == f));
    for (fate, at_pixels) in fates {
        let name = fate.label().to_owned();
        let mut seen = BTreeSet::new();
        marks.push(Marks {
            color: palette.color(&name),
            name,
            shape: fate_shape(fate),
            layer: Layer::UnderLines,
            points: at_pixels
                .into_iter()
                .filter(|(c, r, _)| seen.insert((*c, *r)))
                .map(|(c, _, seq)| Pt::at(at(c as f64), seq as f64))
                .collect(),
        });
    }
    marks.push(Marks {
        name: format!("{flow_name} sent"),
        color: palette::SENT,
        shape: Shape::Bar,
        layer: Layer::UnderLines,
        points: bars(&sent),
    });
    marks.push(Marks {
        name: format!("{flow_name} retransmitted"),
        color: palette::RETRANSMITTED,
        shape: Shape::Bar,
        layer: Layer::OverLines,
        points: retransmitted,
    });
    marks.retain(|m| !m.points.is_empty());

    // The ACK line and the window's edge: the highest of each column, as steps.
    let mut ack_columns: BTreeMap<i64, (u64, Option<u64>)> = BTreeMap::new();
    for a in &acks {
        let c = column(seconds(a.t_us)) as i64;
        let entry = ack_columns.entry(c).or_insert((a.ack, a.window_edge));
        *entry = (entry.0.max(a.ack), entry.1.max(a.window_edge));
    }
    let mut series = vec![
        Series {
            name: format!("{flow_name} ACK"),
            color: palette::ACKED,
            dashed: false,
            points: ack_columns
                .iter()
                .map(|(&c, &(ack, _))| Pt::at(at(c as f64), ack as f64))
                .collect(),
        },
        Series {
            name: format!("{flow_name} receive window"),
            color: palette::RECEIVE_WINDOW,
            dashed: true,
            points: ack_columns
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
    if !cwnd_edge.is_empty() {
        // Drawn before the ACK line, which stays on top where the two meet.
        series.insert(
            0,
            Series {
                name: format!("{flow_name} snd_una + cwnd (events)"),
                color: palette::CWND_EDGE,
                dashed: false,
                points: cwnd_edge
                    .iter()
                    .map(|(&c, &edge)| Pt::at(at(c as f64), edge as f64))
                    .collect(),
            },
        );
    }
    let events_part = if cwnd_edge.is_empty() {
        ""
    } else {
        " With the kernel's events (--trace-events), on the same clock: the edge of the congestion window at the sender (snd_una + cwnd × MSS, from tcp_probe)."
    };
    let each_part = if each {
        "each retransmission its own mark"
    } else {
        "retransmissions as the sent segments (too many to draw each)"
    };
    let place = run
        .path
        .as_ref()
        .map_or(CapturePoint::Bottleneck, |p| p.capture_at)
        .place();
    let what = format!(
        "Flow {}'s time-sequence graph from the capture {place}: each data segment as a bar over its sequence numbers (relative to the first data byte) when the capture saw it, sent or retransmitted, one bar per pixel column of what was sent in it and {each_part}, a few pixels long at least; the receiver's ACKs (line) and the edge of the window it advertised (ACK + window, dashed). Under them, a mark where the link did not simply deliver a segment, coloured by its fate: a cross where it dropped or corrupted it, a ring where it marked it CE, duplicated or reordered it. The sequence axis fits the segments and ACKs shown; a window edge above them leaves the chart.",
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
            y_span: Some((bottom as f64, top as f64)),
            series,
            marks,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_netsim::link::DropReason;
    use tcplab_netsim::path;
    use tcplab_record::Direction;

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
        let mut run = crate::fixtures::run(50.0, 1, false);
        run.started_unix_us = 1_001_000;
        let flow = FlowRecord {
            client_addr: "10.77.1.1:40000".into(),
            server_addr: "10.77.0.1:5001".into(),
            direction: Direction::Up,
            ..run.flows[0].clone()
        };
        (run, flow)
    }

    /// A transfer of 100 000 segments of 1000 B up from port 40000, ten a millisecond
    /// from 1 ms, each ACKed at once; segment `i` dropped by loss where `lost(i)` and,
    /// with `retransmit_after`, sent again that many segments later.
    fn long_transfer(
        lost: impl Fn(u32) -> bool,
        retransmit_after: Option<u32>,
    ) -> Vec<CapturedPacket> {
        let (up, down) = ((40000, 5001), (5001, 40000));
        let mut packets = vec![packet(0, up, 99, 0, 0x02, 0, Fate::Delivered)];
        for i in 0..100_000u32 {
            let at = 1 + u64::from(i) / 10;
            let fate = if lost(i) {
                Fate::Dropped(DropReason::Loss)
            } else {
                Fate::Delivered
            };
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
            if let Some(k) = retransmit_after.filter(|&k| i >= k && lost(i - k)) {
                let seq = 100 + (i - k) * 1000;
                packets.push(packet(at, up, seq, 1, 0x10, 1000, Fate::Delivered));
            }
        }
        packets
    }

    /// A long transfer is drawn at the chart's resolution: however many segments, a
    /// bar per pixel column and kind, a cross per pixel and reason.
    #[test]
    fn a_long_transfer_keeps_a_bar_per_pixel_column() {
        let packets = long_transfer(|i| i % 100 == 0, None);
        let (run, f) = run_and_flow();
        let (_, body) = chart(&run, &f, &packets, None, &mut Palette::new()).unwrap();
        let Body::Marked { series, marks, .. } = body else {
            panic!("a marked chart")
        };
        for m in &marks {
            // Bars: one per column; crosses: one per pixel of the drops' diagonal.
            let most = match m.shape {
                Shape::Bar => COLUMNS,
                Shape::Cross | Shape::Ring => COLUMNS + ROWS,
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
    /// kind at its time and sequence number, the drop marked under it; a zoom keeps
    /// what lies inside it.
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
        assert!(
            what.starts_with(
                "Flow 0's time-sequence graph from the capture at the bottleneck's entry:"
            ),
            "{what}"
        );
        // The caption names where the run captured.
        let mut client = run.clone();
        client.path = Some(tcplab_record::PathRecord {
            capture_at: CapturePoint::Client,
            ..Default::default()
        });
        let (at_client, _) = chart(&client, &f, &packets, None, &mut Palette::new()).unwrap();
        assert!(
            at_client.contains("from the capture at the client's interface:"),
            "{at_client}"
        );
        let Body::Marked {
            series,
            marks,
            x,
            y_span,
            ..
        } = body
        else {
            panic!("a marked chart")
        };
        assert_eq!(x.span, Some((0.1, 0.4)));
        assert_eq!(y_span, Some((0.0, 2000.0)));
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
        assert_eq!(
            points("flow 0 sent"),
            [
                (100.0, Some((0.0, 1000.0))),
                (200.0, Some((1000.0, 2000.0)))
            ]
        );
        assert_eq!(
            points("flow 0 retransmitted"),
            [(400.0, Some((1000.0, 2000.0)))]
        );
        assert_eq!(points("dropped queue"), [(200.0, None)]);
        let queue = marks.iter().find(|m| m.name == "dropped queue").unwrap();
        assert_eq!((queue.shape, queue.color), (Shape::Cross, palette::fate(q)));
        let ack = &series[0];
        assert_eq!(ack.name, "flow 0 ACK");
        // The ACK at 0.5 s lies after the last segment: outside the whole transfer's span.
        assert_eq!(ack.points.iter().map(|p| p.y).collect::<Vec<_>>(), [1000.0]);
        // No handshake from the receiver: its window's scale is unknown, no edge drawn.
        assert!(series[1].points.is_empty());

        let (_, zoomed) =
            chart(&run, &f, &packets, Some((0.25, 0.45)), &mut Palette::new()).unwrap();
        let Body::Marked { marks, .. } = zoomed else {
            panic!("a marked chart")
        };
        let names: Vec<&str> = marks.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["flow 0 retransmitted"]);
        let (_, whole) = chart(&run, &f, &packets, None, &mut Palette::new()).unwrap();
        let Body::Marked { marks, .. } = whole else {
            panic!("a marked chart")
        };
        let layers: Vec<(&str, Layer)> = marks.iter().map(|m| (m.name.as_str(), m.layer)).collect();
        assert_eq!(
            layers,
            [
                ("dropped queue", Layer::UnderLines),
                ("flow 0 sent", Layer::UnderLines),
                ("flow 0 retransmitted", Layer::OverLines)
            ]
        );
    }

    /// A zoom's sequence axis fits the segments and ACKs in it, not the receive
    /// window's edge far above them (which would squeeze them into the bottom 5 %).
    #[test]
    fn a_zoom_fits_its_segments_not_the_window_above_them() {
        let (up, down) = ((40000, 5001), (5001, 40000));
        let d = Fate::Delivered;
        let mut packets = vec![
            packet(0, up, 99, 0, 0x02, 0, d),
            packet(0, down, 0, 100, 0x12, 0, d),
        ];
        for i in 0..100u32 {
            let at = 10 + u64::from(i);
            packets.push(packet(at, up, 100 + i * 1000, 1, 0x10, 1000, d));
            // A window of 65 000 B, far above the 1 000 B segments.
            let mut ack = packet(at, down, 1, 100 + i * 1000, 0x10, 0, d);
            ack.head[34..36].copy_from_slice(&65_000u16.to_be_bytes());
            packets.push(ack);
        }
        let (run, f) = run_and_flow();
        let (_, body) = chart(
            &run,
            &f,
            &packets,
            Some((0.050, 0.060)),
            &mut Palette::new(),
        )
        .unwrap();
        let Body::Marked { y_span, series, .. } = body else {
            panic!("a marked chart")
        };
        let (lo, hi) = y_span.unwrap();
        assert_eq!((lo, hi), (40_000.0, 51_000.0));
        let edge = series
            .iter()
            .find(|s| s.name.ends_with("receive window"))
            .unwrap();
        assert!(edge.points.iter().all(|p| p.y > hi), "{edge:?}");
    }

    /// A retransmission of one segment on a whole run's scale is its own mark, drawn
    /// over the lines and a few pixels long in the SVG and the PNG alike (a zero-length
    /// line draws in neither); drops are drawn under the lines.
    #[test]
    fn every_retransmission_is_a_visible_mark_over_the_lines_and_drops_under_them() {
        let lost = [1_000u32, 1_001, 5_000, 40_000, 99_000];
        let packets = long_transfer(|i| lost.contains(&i), Some(30));
        let (run, f) = run_and_flow();
        let (what, body) = chart(&run, &f, &packets, None, &mut Palette::new()).unwrap();
        let chart = crate::chart::Chart {
            id: "tseq".into(),
            title: "Run 1: time-sequence graph".into(),
            caption: what,
            body,
        };
        let svg = crate::draw::svg(&chart, false).unwrap();
        // The plot's lines, not the legend's beside it.
        let legend_left = (crate::draw::SIZE.0 - crate::draw::legend_width(&chart)) as i32;
        let drawn: Vec<_> = svg_lines(&svg)
            .into_iter()
            .filter(|(_, _, points)| points.iter().all(|p| p.0 < legend_left))
            .collect();
        let colour = |c: crate::palette::Rgb| format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
        let retransmitted: Vec<&SvgLine> = drawn
            .iter()
            .filter(|(c, w, _)| *c == colour(palette::RETRANSMITTED) && *w == 2)
            .collect();
        assert_eq!(retransmitted.len(), lost.len(), "{retransmitted:?}");
        for (_, _, points) in &retransmitted {
            let (a, b) = (points[0], points[points.len() - 1]);
            assert!(
                a.0 == b.0 && (a.1 - b.1).abs() >= MIN_VISIBLE_PX,
                "{points:?}"
            );
        }
        // In the document's order: every drop's cross before the sent bars, both before
        // the ACK line, every retransmission after them all.
        let order = |c: crate::palette::Rgb| -> Vec<usize> {
            let c = colour(c);
            drawn
                .iter()
                .enumerate()
                .filter(|(_, (d, w, _))| *d == c && *w == 2)
                .map(|(i, _)| i)
                .collect()
        };
        let drops = order(palette::fate(Fate::Dropped(DropReason::Loss)));
        let (sent, acks, retrans) = (
            order(palette::SENT),
            order(palette::ACKED),
            order(palette::RETRANSMITTED),
        );
        assert!(!drops.is_empty() && !sent.is_empty() && !acks.is_empty());
        assert!(drops.iter().max() < sent.iter().min() && sent.iter().max() < acks.iter().min());
        assert!(retrans.iter().min() > acks.iter().max());

        // The PNG draws each of them: the retransmission's colour at its middle.
        let png = crate::draw::png(&chart).unwrap();
        let (width, pixels) = decode_png(&png);
        for (_, _, points) in &retransmitted {
            let (x, y) = (points[0].0, (points[0].1 + points[1].1) / 2);
            let p = pixels[(y as usize) * width + x as usize];
            let c = palette::RETRANSMITTED;
            assert_eq!(p, [c.0, c.1, c.2], "at {x},{y}");
        }
    }

    /// A bar this long, pixels, is seen.
    const MIN_VISIBLE_PX: i32 = 4;

    /// A line of an SVG: its stroke colour, width and points.
    type SvgLine = (String, u32, Vec<(i32, i32)>);

    /// Each `<polyline>` and `<line>` of an SVG.
    fn svg_lines(svg: &str) -> Vec<SvgLine> {
        let attr = |element: &str, name: &str| -> Option<String> {
            let from = element.find(&format!(" {name}=\""))? + name.len() + 3;
            let to = element[from..].find('"')? + from;
            Some(element[from..to].to_owned())
        };
        svg.split('<')
            .filter(|e| e.starts_with("polyline ") || e.starts_with("line "))
            .map(|e| {
                let points: Vec<(i32, i32)> = match attr(e, "points") {
                    Some(points) => points
                        .split_whitespace()
                        .filter_map(|p| p.split_once(','))
                        .map(|(x, y)| (x.parse().unwrap(), y.parse().unwrap()))
                        .collect(),
                    None => ["x1", "y1", "x2", "y2"]
                        .map(|a| attr(e, a).unwrap().parse::<i32>().unwrap())
                        .chunks(2)
                        .map(|c| (c[0], c[1]))
                        .collect(),
                };
                (
                    attr(e, "stroke").unwrap_or_default().to_uppercase(),
                    attr(e, "stroke-width").map_or(1, |w| w.parse().unwrap()),
                    points,
                )
            })
            .collect()
    }

    /// A PNG's width and its pixels as RGB.
    fn decode_png(bytes: &[u8]) -> (usize, Vec<[u8; 3]>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let pixels = buf[..info.buffer_size()]
            .chunks(info.color_type.samples())
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        (info.width as usize, pixels)
    }
}
