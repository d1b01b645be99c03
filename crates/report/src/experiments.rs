//! An experiment's charts: each meaningful metric against its axes as `crate::layout`
//! lays them out, means with confidence intervals, and a heatmap where two numeric axes
//! span a grid.

use std::collections::HashMap;

use tcplab_analysis::stats::Metric;
use tcplab_model::experiment::{FlowConfig, Point};
use tcplab_record::units::format_duration_us;

use crate::axes::{numeric, Quantity};
use crate::chart::{Body, Chart, Pt, Series, XAxis, YAxis};
use crate::describe;
use crate::layout::{distinct_values, layout, Layout, Main};
use crate::palette::{Palette, BOUND};
use crate::results::{format_metric, summarize, ExperimentRuns, PointResult, ResultTable};

/// The metrics worth a chart for this experiment's flows: throughput always;
/// retransmits and RTT with TCP flows; fairness with two TCP flows or more; UDP loss
/// and jitter with UDP flows; latency and RPM with probes; transactions with
/// request/response flows.
pub fn metrics(data: &ExperimentRuns) -> Vec<Metric> {
    let flows = || data.points.iter().flat_map(|p| &p.config.flows);
    let tcp_streams = |p: &Point| -> u32 {
        p.config
            .flows
            .iter()
            .filter(|f| f.params.udp.is_none())
            .map(|f| {
                let both_ways = f.params.mode == tcplab_record::Mode::Bidir;
                u32::from(f.params.streams) * if both_ways { 2 } else { 1 }
            })
            .sum()
    };
    let tcp = flows().any(|f| f.params.udp.is_none());
    let udp = flows().any(|f| f.params.udp.is_some());
    let several = data.points.iter().any(|p| tcp_streams(p) >= 2);
    let mut out = vec![Metric::Throughput];
    if tcp {
        out.extend([Metric::Retransmits, Metric::Rtt]);
    }
    if several {
        out.push(Metric::Fairness);
    }
    if udp {
        out.extend([Metric::UdpLoss, Metric::Jitter]);
    }
    if flows().any(|f| f.params.probe.is_some()) {
        out.extend([Metric::Latency, Metric::Rpm]);
    }
    if flows().any(|f| f.params.transactions.is_some()) {
        out.extend([Metric::Transactions, Metric::TransactionTime]);
    }
    let delays = |p: &tcplab_record::PathRecord| p.up.delay.or(p.down.delay).is_some();
    if data
        .runs
        .values()
        .any(|r| r.path.as_ref().is_some_and(delays))
    {
        out.push(Metric::Delay);
    }
    // A study of the hosts' interface queues: what they dropped, how bursty the senders.
    let sets_txqueuelen = |p: &tcplab_record::PathRecord| {
        p.spec
            .parse::<tcplab_netsim::path::PathSpec>()
            .is_ok_and(|s| s.up.txqueuelen.or(s.down.txqueuelen).is_some())
    };
    if data
        .runs
        .values()
        .any(|r| r.path.as_ref().is_some_and(sets_txqueuelen))
    {
        out.extend([Metric::HostDrops, Metric::Burst]);
    }
    out
}

/// How a metric is titled, measured and defined in captions.
fn metric_words(metric: Metric, warmup_us: u64) -> (&'static str, YAxis, String) {
    let warmup = if warmup_us > 0 {
        format!(" after the {} warm-up", format_duration_us(warmup_us))
    } else {
        String::new()
    };
    let y = |label: &str, quantity| YAxis {
        label: label.into(),
        quantity,
    };
    match metric {
        Metric::Throughput => (
            "Throughput",
            y("throughput", Quantity::Rate),
            format!("Throughput: bytes the receivers read{warmup} over that time, all flows together."),
        ),
        Metric::Retransmits => (
            "Retransmitted segments",
            y("retransmits per run (segments)", Quantity::Number),
            "Retransmits: segments the senders retransmitted over the whole run.".into(),
        ),
        Metric::Rtt => (
            "Smoothed RTT",
            y("mean smoothed RTT", Quantity::Duration),
            "RTT: the mean of the senders' smoothed round-trip time samples, queueing included."
                .into(),
        ),
        Metric::Fairness => (
            "Fairness",
            y("Jain's index", Quantity::Number),
            format!("Fairness: Jain's index of the TCP flows' throughputs{warmup} (1 = equal shares, 1/n = one flow takes all); a point with fewer than two TCP flows has none."),
        ),
        Metric::UdpLoss => (
            "UDP loss",
            y("datagrams lost", Quantity::Percent),
            "UDP loss: the share of the datagrams sent that never arrived.".into(),
        ),
        Metric::Jitter => (
            "UDP jitter",
            y("jitter", Quantity::Duration),
            "Jitter: the UDP flows' RFC 3550 interarrival jitter at the end (the worst flow's)."
                .into(),
        ),
        Metric::Latency => (
            "Latency under load",
            y("median round trip under load", Quantity::Duration),
            "Latency: the median round trip of the probes sent while the load ran (its whole time, warm-up included).".into(),
        ),
        Metric::Rpm => (
            "Responsiveness",
            y("round trips per minute (RPM)", Quantity::Number),
            "RPM: 60 s over the trimmed mean of the probes' round trips under load (the slowest 10 % left out).".into(),
        ),
        Metric::Transactions => (
            "Transactions",
            y("transactions per second", Quantity::Number),
            "Transactions: request/response exchanges completed per second, all connections together (the whole run, warm-up included).".into(),
        ),
        Metric::Delay => (
            "One-way delay",
            y("95th percentile one-way delay", Quantity::Duration),
            "Delay: the 95th percentile of the one-way delay of the data packets across the emulator, read to write, in the direction that carried more of them (the whole run, warm-up included).".into(),
        ),
        Metric::HostDrops => (
            "Drops in the sending hosts' interface queues",
            y("packets dropped per run", Quantity::Number),
            "Host drops: packets the sending hosts' interface queues dropped (qdisc and device; a TUN device's ring of txqueuelen packets), in the first TCP flow's direction (the whole run).".into(),
        ),
        Metric::Burst => (
            "Sender burstiness",
            y("99th percentile train (packets)", Quantity::Number),
            "Burst: the train length (packets arriving back to back) within which 99 % of the burstiest TCP flow's packets entered the bottleneck, in the first TCP flow's direction (the whole run).".into(),
        ),
        Metric::TransactionTime => (
            "Transaction time",
            y("median transaction time", Quantity::Duration),
            "Transaction time: the median time from a request's first write to its response's last byte read.".into(),
        ),
    }
}

/// Every chart of the experiment, with the tables they draw from (one per metric);
/// throughput charts carry the runs' bounds.
pub fn charts(
    data: &ExperimentRuns,
    bounds: &RunBounds,
    palette: &mut Palette,
) -> (Vec<ResultTable>, Vec<Chart>) {
    let axes = &data.experiment.axes;
    let values: Vec<Vec<String>> = data.points.iter().map(|p| p.values.clone()).collect();
    let plan = layout(axes, &values);
    let tables: Vec<ResultTable> = metrics(data)
        .into_iter()
        .map(|m| summarize(data, m, None))
        .collect();
    let mut charts = Vec::new();
    for table in &tables {
        let has_values = table
            .points
            .iter()
            .any(|p| p.stats.is_some_and(|s| s.mean != 0.0));
        if !has_values && table.metric != Metric::Throughput {
            continue;
        }
        let bounds = (table.metric == Metric::Throughput).then_some(bounds);
        charts.extend(metric_charts(data, &plan, table, bounds, palette));
        if table.metric == Metric::Throughput {
            charts.extend(heatmaps(data, &plan, table));
        }
        if table.metric == Metric::Latency {
            charts.extend(latency_cdfs(data, &plan, table, palette));
        }
    }
    let table = |metric| tables.iter().find(|t| t.metric == metric);
    if let (Some(throughput), Some(delay)) = (table(Metric::Throughput), table(Metric::Delay)) {
        charts.extend(arena(data, throughput, delay, palette));
    }
    charts.retain(|c| !c.is_empty());
    (tables, charts)
}

/// Steps of a CDF drawn: its value at every 0.5 % of the probes.
const CDF_STEPS: usize = 200;

/// Per facet, the distribution of the loaded probes' round trips: one line per point,
/// its runs' probes pooled (flent's latency CDF per series).
fn latency_cdfs(
    data: &ExperimentRuns,
    plan: &Layout,
    table: &ResultTable,
    palette: &mut Palette,
) -> Vec<Chart> {
    let mut out = Vec::new();
    let every: Vec<usize> = (0..data.experiment.axes.len()).collect();
    for (facet, points) in groups(data, &plan.facets, data.points.iter()) {
        let series: Vec<Series> = points
            .iter()
            .filter_map(|p| {
                let mut rtts: Vec<f64> = data
                    .plan
                    .iter()
                    .filter(|r| r.run.point == p.index)
                    .filter_map(|r| data.runs.get(&r.run_id?))
                    .flat_map(|run| &run.probes)
                    .filter(|probe| probe.sent_us >= 0)
                    .filter_map(|probe| probe.rtt_us)
                    .map(|us| us as f64)
                    .collect();
                if rtts.is_empty() {
                    return None;
                }
                rtts.sort_by(f64::total_cmp);
                let last = rtts.len() - 1;
                let points = (0..=CDF_STEPS)
                    .map(|i| {
                        let share = i as f64 / CDF_STEPS as f64;
                        Pt {
                            x: rtts[(share * last as f64).round() as usize],
                            y: share,
                            interval: None,
                            x_interval: None,
                            note: None,
                        }
                    })
                    .collect();
                let label = match label_of(data, &every, p) {
                    l if l.is_empty() => MEAN.to_owned(),
                    l => l,
                };
                Some(Series {
                    color: palette.color(&label),
                    name: label,
                    dashed: false,
                    points,
                })
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        let (id, suffix) = (facet_id("latency_cdf", &facet), facet_suffix(&facet));
        out.push(Chart {
            id,
            title: format!("Latency under load, distribution{suffix}"),
            caption: format!(
                "The share of the probes sent while the load ran whose round trip was at most x, one line per point, its runs' probes together. {}",
                points_caption(data, table, &points)
            ),
            body: Body::Lines {
                x: XAxis {
                    label: "round trip under load".into(),
                    quantity: Quantity::Duration,
                    log: false,
                    ticks: None,
                    span: None,
                },
                y: YAxis {
                    label: "share of the probes".into(),
                    quantity: Quantity::Percent,
                },
                series,
            },
        });
    }
    out
}

/// The axes that make a point's scheme in the arena: its congestion control and pacing.
const SCHEME_KEYS: [&str; 2] = ["flow.cc", "flow.pacing"];

/// The experiment's scheme axes and the others (which split its arena into charts);
/// `None` without a scheme axis.
fn scheme_axes(data: &ExperimentRuns) -> Option<(Vec<usize>, Vec<usize>)> {
    let axes = &data.experiment.axes;
    let (scheme, others): (Vec<usize>, Vec<usize>) = (0..axes.len()).partition(|&a| {
        axes[a]
            .key
            .as_deref()
            .is_some_and(|k| SCHEME_KEYS.contains(&k))
    });
    (!scheme.is_empty()).then_some((scheme, others))
}

/// Pantheon's chart, one per combination of the other axes (a path, a direction): each
/// scheme a dot of its mean throughput against its mean 95th-percentile one-way delay,
/// with a cross of both intervals over its runs, the delay axis reversed.
fn arena(
    data: &ExperimentRuns,
    throughput: &ResultTable,
    delay: &ResultTable,
    palette: &mut Palette,
) -> Vec<Chart> {
    let Some((scheme, others)) = scheme_axes(data) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (facet, points) in groups(data, &others, data.points.iter()) {
        let series: Vec<Series> = points
            .iter()
            .filter_map(|p| {
                let (t, d) = (
                    result_of(throughput, p)?.stats?,
                    result_of(delay, p)?.stats?,
                );
                let name = label_of(data, &scheme, p);
                Some(Series {
                    color: palette.color(&name),
                    name,
                    dashed: false,
                    points: vec![Pt {
                        x: d.mean,
                        y: t.mean,
                        interval: t.ci,
                        x_interval: d.ci,
                        note: None,
                    }],
                })
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        let (id, suffix) = (facet_id("arena", &facet), facet_suffix(&file_names(&facet)));
        let scheme_names: Vec<&str> = scheme
            .iter()
            .map(|&a| data.experiment.axes[a].name.as_str())
            .collect();
        out.push(Chart {
            id,
            title: format!("Throughput against delay{suffix}"),
            caption: format!(
                "Each scheme (its {}) at its mean throughput after the warm-up and its mean 95th-percentile one-way delay of the data packets across the emulator, the cross spanning both confidence intervals over its runs; delay grows to the left, as Pantheon draws it, so better is up and to the right. {}",
                scheme_names.join(" and "),
                points_caption(data, throughput, &points)
            ),
            body: Body::Scatter {
                x: XAxis {
                    label: "95th-percentile one-way delay".into(),
                    quantity: Quantity::Duration,
                    log: false,
                    ticks: None,
                    span: None,
                },
                y: YAxis {
                    label: "throughput".into(),
                    quantity: Quantity::Rate,
                },
                series,
            },
        });
    }
    out
}

/// The arena's leaderboards, one per chart of `arena`: each scheme's mean throughput,
/// p95 one-way delay, the share of the data packets the emulator dropped, and with
/// several flows their fairness, best throughput first.
pub fn leaderboards(
    data: &ExperimentRuns,
    tables: &[ResultTable],
) -> Vec<(String, Vec<Vec<String>>)> {
    let table = |metric| tables.iter().find(|t| t.metric == metric);
    let (Some(throughput), Some(delay)) = (table(Metric::Throughput), table(Metric::Delay)) else {
        return Vec::new();
    };
    let fairness = table(Metric::Fairness);
    let Some((scheme, others)) = scheme_axes(data) else {
        return Vec::new();
    };
    let mean = |t: Option<&ResultTable>, p: &Point| Some(result_of(t?, p)?.stats?.mean);
    let mut out = Vec::new();
    for (facet, points) in groups(data, &others, data.points.iter()) {
        let mut rows: Vec<(f64, Vec<String>)> = points
            .iter()
            .filter_map(|p| {
                let bps = mean(Some(throughput), p)?;
                let cells = vec![
                    label_of(data, &scheme, p),
                    format_metric(Metric::Throughput, bps),
                    mean(Some(delay), p).map_or("—".into(), |d| format_metric(Metric::Delay, d)),
                    dropped_share(data, p).map_or("—".into(), |s| format!("{:.2} %", s * 100.0)),
                    mean(fairness, p).map_or("—".into(), |f| format_metric(Metric::Fairness, f)),
                ];
                Some((bps, cells))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        rows.sort_by(|a, b| b.0.total_cmp(&a.0));
        let header = [
            "scheme",
            "throughput",
            "p95 one-way delay",
            "dropped",
            "fairness",
        ];
        let heading = format!("Leaderboard{}", facet_suffix(&file_names(&facet)));
        out.push((
            heading,
            std::iter::once(header.iter().map(|h| h.to_string()).collect())
                .chain(rows.into_iter().map(|(_, r)| r))
                .collect(),
        ));
    }
    out
}

/// The mean over a point's runs of the share of the packets entering the emulator's
/// data direction (the one with more data packets) that its links dropped.
fn dropped_share(data: &ExperimentRuns, point: &Point) -> Option<f64> {
    let shares: Vec<f64> = data
        .plan
        .iter()
        .filter(|r| r.run.point == point.index)
        .filter_map(|r| data.runs.get(&r.run_id?)?.path.as_ref())
        .filter_map(|path| {
            let dir = path.data_direction();
            let entered = dir.links.first()?.counters.packets_in;
            let dropped: u64 = dir.links.iter().map(|l| l.counters.dropped()).sum();
            (entered > 0).then(|| dropped as f64 / entered as f64)
        })
        .collect();
    (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64)
}

/// A chart's id: `name`, with its facet (`a=x b=y`) as `name[a=x,b=y]`.
fn facet_id(name: &str, facet: &str) -> String {
    if facet.is_empty() {
        name.to_owned()
    } else {
        format!("{name}[{}]", facet.replace(' ', ","))
    }
}

/// What a chart's title adds for its facet: ` — a=x b=y`, or nothing.
fn facet_suffix(facet: &str) -> String {
    if facet.is_empty() {
        String::new()
    } else {
        format!(" — {facet}")
    }
}

/// `text` with each file path cut to its file's name (a trace's, in a path spec): short
/// enough for a title; the caption gives the path whole.
fn file_names(text: &str) -> String {
    text.split(' ')
        .map(|word| word.rsplit('/').next().unwrap_or(word))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `a=x b=y` for the given axes of a point.
fn label_of(data: &ExperimentRuns, axes: &[usize], point: &Point) -> String {
    settings(data, axes, point).join(" ")
}

/// `a=x`, `b=y`: a point's values of the given axes.
fn settings(data: &ExperimentRuns, axes: &[usize], point: &Point) -> Vec<String> {
    axes.iter()
        .map(|&a| {
            let v = &point.values[a];
            let v = if v.is_empty() { "\"\"" } else { v };
            format!("{}={v}", data.experiment.axes[a].name)
        })
        .collect()
}

/// Points grouped by their values on `axes`, groups in point order.
fn groups<'a>(
    data: &'a ExperimentRuns,
    axes: &[usize],
    points: impl Iterator<Item = &'a Point>,
) -> Vec<(String, Vec<&'a Point>)> {
    let mut out: Vec<(String, Vec<&Point>)> = Vec::new();
    for p in points {
        let label = label_of(data, axes, p);
        match out.iter_mut().find(|(l, _)| *l == label) {
            Some((_, members)) => members.push(p),
            None => out.push((label, vec![p])),
        }
    }
    out
}

/// What the caption says about the chart's points: path, flows, failed runs, experiment.
fn points_caption(data: &ExperimentRuns, table: &ResultTable, points: &[&Point]) -> String {
    let e = &data.experiment;
    let mut paths: Vec<String> = points.iter().map(|p| p.config.path.to_string()).collect();
    paths.dedup();
    let path = match paths.as_slice() {
        [one] => format!("Path \"{one}\"."),
        [first, ..] => format!("Path set by the axes, e.g. \"{first}\"."),
        [] => String::new(),
    };
    let configs: Vec<&[FlowConfig]> = points.iter().map(|p| p.config.flows.as_slice()).collect();
    let flows = format!(" Flows: {}.", describe::flows_in_common(&configs));
    let failed: usize = table
        .points
        .iter()
        .filter(|r| points.iter().any(|p| p.index == r.point))
        .map(|r| r.failed)
        .sum();
    let failed = if failed > 0 {
        format!(" {failed} failed runs are left out.")
    } else {
        String::new()
    };
    format!(
        "{path}{flows}{failed} Experiment {} (id {}, {}).",
        e.name, e.id, e.file
    )
}

fn result_of<'a>(table: &'a ResultTable, point: &Point) -> Option<&'a PointResult> {
    table.points.iter().find(|r| r.point == point.index)
}

/// The value and interval of a point, when it has runs.
fn mean_of(table: &ResultTable, point: &Point, x: f64) -> Option<Pt> {
    let stats = result_of(table, point)?.stats?;
    Some(Pt {
        x,
        y: stats.mean,
        interval: stats.ci,
        x_interval: None,
        note: None,
    })
}

/// The binding bound of each run (`tcplab explain`'s smallest bound), by run id.
pub type RunBounds = HashMap<i64, (&'static str, f64)>;

/// A point's bound: the mean of its runs' binding bounds, named by the bound
/// most of them bind on.
fn bound_of(data: &ExperimentRuns, bounds: &RunBounds, point: &Point, x: f64) -> Option<Pt> {
    let found: Vec<(&'static str, f64)> = data
        .runs_of(point.index)
        .filter_map(|(id, _)| bounds.get(&id).copied())
        .collect();
    if found.is_empty() {
        return None;
    }
    let mean = found.iter().map(|b| b.1).sum::<f64>() / found.len() as f64;
    let name = found
        .iter()
        .map(|b| b.0)
        .max_by_key(|name| found.iter().filter(|b| b.0 == *name).count())?;
    Some(Pt {
        note: Some(name),
        ..Pt::at(x, mean)
    })
}

/// A series' bound line in its colour, its points named only where the binding bound
/// changes (and at the first), so a chart of many points stays legible.
fn bound_series(of: &Series, mut points: Vec<Pt>) -> Series {
    points.sort_by(|a, b| a.x.total_cmp(&b.x));
    let mut last = None;
    for p in &mut points {
        if p.note == last {
            p.note = None;
        } else {
            last = p.note;
        }
    }
    Series {
        name: String::new(),
        color: of.color,
        dashed: true,
        points,
    }
}

fn metric_charts(
    data: &ExperimentRuns,
    plan: &Layout,
    table: &ResultTable,
    bounds: Option<&RunBounds>,
    palette: &mut Palette,
) -> Vec<Chart> {
    let axes = &data.experiment.axes;
    let warmup = data.points.first().map_or(0, |p| p.config.warmup_us);
    let (title, y, definition) = metric_words(table.metric, warmup);
    let name = table.metric.name();
    let values: Vec<Vec<String>> = data.points.iter().map(|p| p.values.clone()).collect();
    let mut out = Vec::new();
    for (facet, points) in groups(data, &plan.facets, data.points.iter()) {
        let suffix = if facet.is_empty() {
            String::new()
        } else {
            format!(" — {facet}")
        };
        let series_words = if plan.series.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = plan.series.iter().map(|&a| axes[a].name.as_str()).collect();
            format!(" One line per {}.", names.join(" × "))
        };
        let caption = |x_words: &str, series: &[Series]| {
            let bound_words = if series.iter().any(|s| s.dashed) {
                " Dashed, in each series' colour: the bound that binds (tcplab explain's smallest of the link's goodput, the window per shortest round trip and a pacing cap: a rate the runs cannot exceed), the mean over the point's runs, named where the binding bound changes."
            } else {
                ""
            };
            format!(
                "{definition} {x_words}{series_words} Each point is the mean of its runs ({} planned) with its {:.0} % confidence interval as an error bar (none for a single run).{bound_words} {}",
                data.experiment.repetitions,
                table.confidence * 100.0,
                points_caption(data, table, &points)
            )
        };
        // One series per combination of the series axes; on throughput charts each
        // followed by its bound.
        let series_of = |palette: &mut Palette, x_of: &dyn Fn(&Point) -> Option<f64>| {
            let mut out = Vec::new();
            for (label, members) in groups(data, &plan.series, points.iter().copied()) {
                let label = if label.is_empty() {
                    MEAN.to_owned()
                } else {
                    label
                };
                let mut pts: Vec<Pt> = members
                    .iter()
                    .filter_map(|p| mean_of(table, p, x_of(p)?))
                    .collect();
                pts.sort_by(|a, b| a.x.total_cmp(&b.x));
                let series = Series {
                    color: palette.color(&label),
                    name: label,
                    dashed: false,
                    points: pts,
                };
                let bound = bounds.map(|bounds| {
                    let pts = members
                        .iter()
                        .filter_map(|p| bound_of(data, bounds, p, x_of(p)?))
                        .collect();
                    bound_series(&series, pts)
                });
                out.push(series);
                out.extend(bound.filter(|b| !b.points.is_empty()));
            }
            if out.iter().any(|s| s.dashed) {
                out.push(Series {
                    name: BOUND.into(),
                    color: palette.color(BOUND),
                    dashed: true,
                    points: Vec::new(),
                });
            }
            out
        };
        let id = facet_id(name, &facet);
        let chart = match &plan.main {
            Main::None => continue,
            Main::Lines { x, log } => {
                let axis = &axes[*x];
                let Some(numbers) = numeric(axis) else {
                    continue;
                };
                let value = |p: &Point| {
                    axis.values
                        .iter()
                        .position(|v| *v == p.values[*x])
                        .map(|i| numbers.values[i])
                };
                let x_axis = XAxis {
                    label: axis_label(axis),
                    quantity: numbers.quantity,
                    log: *log,
                    ticks: Some(numbers.distinct()),
                    span: None,
                };
                let series = series_of(palette, &value);
                let x_words = format!(
                    "x: {}{}.",
                    axis_label(axis),
                    if *log { ", log scale" } else { "" }
                );
                Chart {
                    id,
                    title: format!("{title} vs {}{suffix}", axis.name),
                    caption: caption(&x_words, &series),
                    body: Body::Lines {
                        x: x_axis,
                        y: y.clone(),
                        series,
                    },
                }
            }
            Main::Bars { x } => {
                let axis = &axes[*x];
                let categories = distinct_values(axis, *x, &values);
                let index = |p: &Point| {
                    categories
                        .iter()
                        .position(|c| *c == p.values[*x])
                        .map(|i| i as f64)
                };
                let series = series_of(palette, &index);
                Chart {
                    id,
                    title: format!("{title} per {}{suffix}", axis.name),
                    caption: caption(&format!("Bars: {}.", axis_label(axis)), &series),
                    body: Body::Bars {
                        x_label: axis_label(axis),
                        categories,
                        y: y.clone(),
                        series,
                    },
                }
            }
            Main::PerPoint => {
                let varying: Vec<usize> = (0..axes.len())
                    .filter(|&a| distinct_values(&axes[a], a, &values).len() >= 2)
                    .collect();
                // Each bar named by its settings, one line per axis: "rtt=10ms".
                let categories: Vec<String> = points
                    .iter()
                    .map(|p| settings(data, &varying, p).join("\n"))
                    .collect();
                let position = |p: &Point| {
                    points
                        .iter()
                        .position(|q| q.index == p.index)
                        .map(|i| i as f64)
                };
                let series = series_of(palette, &position);
                Chart {
                    id,
                    title: format!("{title} per point{suffix}"),
                    caption: caption(
                        "One bar per point (the axes are zipped, not a grid), named by its values of the axes that vary.",
                        &series,
                    ),
                    body: Body::Bars {
                        x_label: "point".into(),
                        categories,
                        y: y.clone(),
                        series,
                    },
                }
            }
        };
        out.push(chart);
    }
    out
}

/// The name of the one series of a chart without series axes.
const MEAN: &str = "mean per point";

/// "buffer (sets flow.window)".
fn axis_label(axis: &tcplab_model::experiment::Axis) -> String {
    match axis.key.as_deref() {
        Some(key) if key != axis.name => format!("{} (sets {key})", axis.name),
        _ => axis.name.clone(),
    }
}

/// The metric's mean over the grid of the layout's heatmap axes, one chart per facet.
fn heatmaps(data: &ExperimentRuns, plan: &Layout, table: &ResultTable) -> Vec<Chart> {
    let Some(h) = &plan.heatmap else {
        return Vec::new();
    };
    let axes = &data.experiment.axes;
    let warmup = data.points.first().map_or(0, |p| p.config.warmup_us);
    let (title, z, definition) = metric_words(table.metric, warmup);
    let values: Vec<Vec<String>> = data.points.iter().map(|p| p.values.clone()).collect();
    let (xs, ys) = (
        distinct_values(&axes[h.x], h.x, &values),
        distinct_values(&axes[h.y], h.y, &values),
    );
    groups(data, &h.facets, data.points.iter())
        .into_iter()
        .map(|(facet, points)| {
            let cells = points
                .iter()
                .filter_map(|p| {
                    let i = xs.iter().position(|v| *v == p.values[h.x])?;
                    let j = ys.iter().position(|v| *v == p.values[h.y])?;
                    Some((i, j, result_of(table, p)?.stats?.mean))
                })
                .collect();
            let (suffix, id) = (
                facet_suffix(&facet),
                facet_id(&format!("{}-heatmap", table.metric.name()), &facet),
            );
            Chart {
                id,
                title: format!(
                    "{title} over {} × {}{suffix}",
                    axes[h.x].name, axes[h.y].name
                ),
                caption: format!(
                    "{definition} Each cell: the mean of its point's runs ({} planned), coloured on the scale at the right and written in its unit; grey cells have no run. {}",
                    data.experiment.repetitions,
                    points_caption(data, table, &points)
                ),
                body: Body::Heatmap {
                    x_label: axis_label(&axes[h.x]),
                    x_values: xs.clone(),
                    y_label: axis_label(&axes[h.y]),
                    y_values: ys.clone(),
                    z: z.clone(),
                    cells,
                },
            }
        })
        .collect()
}
