//! Per-point statistics of an experiment: what `tcplab results` prints and the report's
//! charts and tables draw. An experiment's runs are loaded once ([`ExperimentRuns`]) and
//! summarised per metric ([`summarize`]).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use tcplab_analysis::compare::{welch, Change};
use tcplab_analysis::stats::{Metric, Stats};
use tcplab_model::experiment::{point_label, Axis, Point};
use tcplab_record::units::{count, format_duration_us, format_rate, format_size};
use tcplab_record::RunRecord;
use tcplab_store::{ExperimentRow, PlanRow, PlanStatus, Store};

use crate::table::{aligned, Align};

/// An experiment with its points, plan and finished runs (without tcp_info samples).
pub struct ExperimentRuns {
    pub experiment: ExperimentRow,
    pub points: Vec<Point>,
    pub plan: Vec<PlanRow>,
    /// The done runs, by run id.
    pub runs: HashMap<i64, RunRecord>,
}

impl ExperimentRuns {
    /// Loads experiment `id`; `None` when the database has no such experiment.
    pub fn load(store: &Store, id: i64) -> tcplab_store::Result<Option<ExperimentRuns>> {
        let Some(experiment) = store.experiments()?.into_iter().find(|e| e.id == id) else {
            return Ok(None);
        };
        let points = store.points(id)?;
        let plan = store.plan(id)?;
        let runs = plan
            .iter()
            .filter(|r| r.status == PlanStatus::Done)
            .filter_map(|r| r.run_id)
            .map(|run_id| Ok((run_id, store.load_run_without_samples(run_id)?)))
            .collect::<tcplab_store::Result<_>>()?;
        Ok(Some(ExperimentRuns {
            experiment,
            points,
            plan,
            runs,
        }))
    }

    /// The plan rows of point `index`.
    pub fn rows_of(&self, index: u32) -> impl Iterator<Item = &PlanRow> {
        self.plan.iter().filter(move |r| r.run.point == index)
    }

    /// `metric` of each done run of `point`, after the point's warm-up.
    pub fn values_of(&self, point: &Point, metric: Metric) -> Vec<f64> {
        self.runs_of(point.index)
            .filter_map(|(_, run)| metric.of(run, point.config.warmup_us))
            .collect()
    }

    /// The same runs with only the flows of the file's `[[flow]]` named `name` (and
    /// their intervals), for `metric`: one that those flows' records alone give.
    pub fn only_flow(mut self, name: &str, metric: Metric) -> Result<ExperimentRuns, String> {
        if !matches!(
            metric,
            Metric::Throughput | Metric::Fairness | Metric::Retransmits
        ) {
            return Err(format!(
                "--flow takes throughput, fairness or retransmits (a flow's own figures), not {}",
                metric.name()
            ));
        }
        let names: std::collections::BTreeSet<&str> = self
            .runs
            .values()
            .flat_map(|r| r.flows.iter().filter_map(|f| f.name.as_deref()))
            .collect();
        if !names.contains(name) {
            return Err(format!(
                "no flow named '{name}' in experiment {} (its flows: {})",
                self.experiment.name,
                if names.is_empty() {
                    "none named".to_owned()
                } else {
                    names.into_iter().collect::<Vec<_>>().join(", ")
                }
            ));
        }
        for run in self.runs.values_mut() {
            run.flows.retain(|f| f.name.as_deref() == Some(name));
            let kept: Vec<u32> = run.flows.iter().map(|f| f.id).collect();
            run.intervals.retain(|i| kept.contains(&i.flow));
            run.summary.retransmits = run.flows.iter().map(|f| f.retransmits).sum();
        }
        Ok(self)
    }

    /// The done runs of point `index`, with their ids, in plan order.
    pub fn runs_of(&self, index: u32) -> impl Iterator<Item = (i64, &RunRecord)> {
        self.rows_of(index)
            .filter(|r| r.status == PlanStatus::Done)
            .filter_map(|r| r.run_id)
            .filter_map(|id| self.runs.get(&id).map(|run| (id, run)))
    }
}

/// `tcplab results --json`.
#[derive(Clone, Debug, Serialize)]
pub struct ResultTable {
    pub experiment: ExperimentInfo,
    pub metric: Metric,
    /// The one `[[flow]]` whose flows it is of (`--flow`), where not all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    pub unit: &'static str,
    pub confidence: f64,
    pub points: Vec<PointResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExperimentInfo {
    pub id: i64,
    pub name: String,
    pub file: String,
    pub seed: u64,
    pub repetitions: u32,
    pub axes: Vec<Axis>,
    pub runs: usize,
    pub done: usize,
    pub failed: usize,
    pub pending: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    pub point: u32,
    /// Axis name → value.
    pub values: BTreeMap<String, String>,
    pub label: String,
    pub warmup_us: u64,
    #[serde(flatten)]
    pub stats: Option<Stats>,
    pub high_variation: bool,
    pub failed: usize,
    pub pending: usize,
    /// The first flow's effective socket buffers (what the kernel made of a request).
    pub sndbuf_effective: Option<u64>,
    pub rcvbuf_effective: Option<u64>,
    pub run_ids: Vec<i64>,
}

/// `metric` per point of `data`, with intervals at `confidence` (default: the
/// experiment's).
pub fn summarize(data: &ExperimentRuns, metric: Metric, confidence: Option<f64>) -> ResultTable {
    let exp = &data.experiment;
    let confidence = confidence.unwrap_or(exp.confidence);
    let count = |s: PlanStatus, rows: &[&PlanRow]| rows.iter().filter(|r| r.status == s).count();
    let mut results = Vec::new();
    for point in &data.points {
        let rows: Vec<&PlanRow> = data.rows_of(point.index).collect();
        let runs: Vec<(i64, &RunRecord)> = data.runs_of(point.index).collect();
        let values = data.values_of(point, metric);
        let stats = Stats::of(&values, confidence, metric.range());
        let first_flow = runs.first().and_then(|(_, r)| r.flows.first());
        let tuning = point.config.flows.first().map(|f| &f.params.tuning);
        results.push(PointResult {
            point: point.index,
            values: exp
                .axes
                .iter()
                .map(|a| a.name.clone())
                .zip(point.values.iter().cloned())
                .collect(),
            label: point_label(&exp.axes, &point.values),
            warmup_us: point.config.warmup_us,
            high_variation: stats.is_some_and(|s| s.high_variation()),
            stats,
            failed: count(PlanStatus::Failed, &rows),
            pending: count(PlanStatus::Pending, &rows),
            sndbuf_effective: first_flow
                .filter(|_| tuning.is_some_and(|t| t.sndbuf.is_some()))
                .map(|f| f.sndbuf.effective),
            rcvbuf_effective: first_flow
                .filter(|_| tuning.is_some_and(|t| t.rcvbuf.is_some()))
                .map(|f| f.rcvbuf.effective),
            run_ids: runs.iter().map(|(id, _)| *id).collect(),
        });
    }
    ResultTable {
        experiment: info(data),
        metric,
        flow: None,
        unit: metric.unit(),
        confidence,
        points: results,
    }
}

/// The experiment and its plan's counts.
fn info(data: &ExperimentRuns) -> ExperimentInfo {
    let exp = &data.experiment;
    let count = |s: PlanStatus| data.plan.iter().filter(|r| r.status == s).count();
    ExperimentInfo {
        id: exp.id,
        name: exp.name.clone(),
        file: exp.file.clone(),
        seed: exp.seed,
        repetitions: exp.repetitions,
        axes: exp.axes.clone(),
        runs: data.plan.len(),
        done: count(PlanStatus::Done),
        failed: count(PlanStatus::Failed),
        pending: count(PlanStatus::Pending),
    }
}

impl ResultTable {
    /// The line above the table: the experiment, its runs, the metric and the interval.
    pub fn heading(&self) -> String {
        let e = &self.experiment;
        let warmup = self.points.first().map_or(0, |p| p.warmup_us);
        format!(
            "experiment {} ({}): {}: {} done, {} failed, {} to run; {}{}, {:.0} % confidence interval of the mean",
            e.name,
            e.file,
            count(e.runs, "run"),
            e.done,
            e.failed,
            e.pending,
            match &self.flow {
                Some(flow) => format!("{} of flow '{flow}'", self.metric.name()),
                None => self.metric.name().to_owned(),
            },
            if warmup > 0 && matches!(self.metric, Metric::Throughput | Metric::Fairness) {
                format!(" after a {} warm-up", format_duration_us(warmup))
            } else {
                String::new()
            },
            self.confidence * 100.0
        )
    }

    /// The table's cells: a header row, then one row per point. The axes come first,
    /// notes (variation, failed and pending runs) last.
    pub fn cells(&self) -> Vec<Vec<String>> {
        let e = &self.experiment;
        let show_buffers = self
            .points
            .iter()
            .any(|p| p.sndbuf_effective.is_some() || p.rcvbuf_effective.is_some());
        let fmt = |v: f64| format_metric(self.metric, v);
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut header: Vec<String> = e.axes.iter().map(|a| a.name.clone()).collect();
        if show_buffers {
            header.push("effective snd/rcv".into());
        }
        header.extend(
            ["n", "mean", "median", "stddev", "min", "max", "CI"]
                .iter()
                .map(|s| s.to_string()),
        );
        header.push(String::new());
        rows.push(header);
        for p in &self.points {
            let mut row: Vec<String> = e
                .axes
                .iter()
                .map(|a| p.values.get(&a.name).cloned().unwrap_or_default())
                .collect();
            if show_buffers {
                let size = |v: Option<u64>| v.map_or("-".into(), format_size);
                row.push(format!(
                    "{}/{}",
                    size(p.sndbuf_effective),
                    size(p.rcvbuf_effective)
                ));
            }
            match &p.stats {
                Some(s) => {
                    row.push(s.n.to_string());
                    row.extend([s.mean, s.median].map(fmt));
                    // One run says nothing of the spread.
                    row.push(s.stddev.map_or("-".into(), fmt));
                    row.extend([s.min, s.max].map(fmt));
                    row.push(
                        s.ci.map_or("-".into(), |(lo, hi)| format!("{} – {}", fmt(lo), fmt(hi))),
                    );
                }
                None => {
                    row.push("0".into());
                    row.extend(std::iter::repeat_n("-".to_string(), 6));
                }
            }
            row.push(self.notes(p));
            rows.push(row);
        }
        rows
    }

    fn notes(&self, p: &PointResult) -> String {
        let mut notes = Vec::new();
        if p.stats.is_none() && !p.run_ids.is_empty() {
            notes.push(match self.metric {
                Metric::Fairness => "no fairness: fewer than two TCP flows".to_owned(),
                m => format!("no {} in its runs", m.name()),
            });
        }
        if p.high_variation {
            let cv = p.stats.and_then(|s| s.cv).unwrap_or_default();
            notes.push(format!("high variation (cv {:.0} %)", cv * 100.0));
        }
        if p.failed > 0 {
            notes.push(format!("{} failed", p.failed));
        }
        if p.pending > 0 {
            notes.push(format!("{} to run", p.pending));
        }
        notes.join(", ")
    }

    /// The heading and the table as text, columns aligned: what `tcplab results` prints.
    pub fn text(&self) -> String {
        text_table(self.heading(), &self.cells(), self.experiment.axes.len())
    }
}

/// A value of `metric` for people, in its unit.
pub fn format_metric(metric: Metric, v: f64) -> String {
    match metric {
        Metric::Throughput => format_rate(v),
        Metric::Retransmits => format!("{v:.1}"),
        Metric::Rtt => format_duration_us(v.round().max(0.0) as u64),
        Metric::Jitter => format!("{v:.1} µs"),
        Metric::Latency | Metric::TransactionTime | Metric::Delay => {
            format_duration_us(v.round().max(0.0) as u64)
        }
        Metric::Transactions => format!("{v:.1}/s"),
        Metric::Rpm => format!("{v:.0}"),
        Metric::Fairness => format!("{v:.3}"),
        Metric::UdpLoss => format!("{:.3} %", v * 100.0),
        Metric::HostDrops | Metric::Burst => format!("{v:.1}"),
    }
}

/// `tcplab compare --json`: each metric of each point the two experiments share, from
/// the base's runs to the new one's.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub base: Side,
    pub new: Side,
    pub confidence: f64,
    pub changes: Vec<PointChange>,
    /// Points of one experiment that the other lacks, by label.
    pub only_base: Vec<String>,
    pub only_new: Vec<String>,
}

/// One side of a comparison: an experiment (its name and file) or the runs of a label
/// (the label and the database).
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    pub name: String,
    pub source: String,
    /// Its done runs.
    pub runs: usize,
}

impl Side {
    fn of(data: &ExperimentRuns) -> Side {
        let e = info(data);
        Side {
            name: e.name,
            source: e.file,
            runs: e.done,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PointChange {
    pub label: String,
    pub metric: Metric,
    pub unit: &'static str,
    #[serde(flatten)]
    pub change: Change,
    pub significant: bool,
}

/// Each of `metrics` per point from `base` to `new`, points matched by their axis
/// values (their label); at `confidence` (default: the base experiment's).
pub fn compare(
    base: &ExperimentRuns,
    new: &ExperimentRuns,
    metrics: &[Metric],
    confidence: Option<f64>,
) -> Comparison {
    let confidence = confidence.unwrap_or(base.experiment.confidence);
    // An experiment without axes has one point, named here.
    let label =
        |data: &ExperimentRuns, p: &Point| match point_label(&data.experiment.axes, &p.values) {
            l if l.is_empty() => "(the one point)".to_string(),
            l => l,
        };
    let mut changes = Vec::new();
    let mut only_base = Vec::new();
    for b in &base.points {
        let name = label(base, b);
        let Some(n) = new.points.iter().find(|n| label(new, n) == name) else {
            only_base.push(name);
            continue;
        };
        changes.extend(point_changes(&name, metrics, confidence, |metric| {
            (base.values_of(b, metric), new.values_of(n, metric))
        }));
    }
    let only_new = new
        .points
        .iter()
        .map(|n| label(new, n))
        .filter(|name| !base.points.iter().any(|b| label(base, b) == *name))
        .collect();
    Comparison {
        base: Side::of(base),
        new: Side::of(new),
        confidence,
        changes,
        only_base,
        only_new,
    }
}

/// Each of `metrics` from one set of single runs to another (each side named, say by its
/// label and database), over each whole run.
pub fn compare_runs(
    base: (Side, &[RunRecord]),
    new: (Side, &[RunRecord]),
    metrics: &[Metric],
    confidence: f64,
) -> Comparison {
    let values = |runs: &[RunRecord], metric: Metric| -> Vec<f64> {
        runs.iter().filter_map(|r| metric.of(r, 0)).collect()
    };
    let name = format!("{} → {}", base.0.name, new.0.name);
    let changes = point_changes(&name, metrics, confidence, |metric| {
        (values(base.1, metric), values(new.1, metric))
    });
    Comparison {
        base: base.0,
        new: new.0,
        confidence,
        changes,
        only_base: Vec::new(),
        only_new: Vec::new(),
    }
}

/// Each metric's change at one point, from the base's and the new values `values`
/// gives; none for a metric a side has no value of.
fn point_changes(
    label: &str,
    metrics: &[Metric],
    confidence: f64,
    values: impl Fn(Metric) -> (Vec<f64>, Vec<f64>),
) -> Vec<PointChange> {
    metrics
        .iter()
        .filter_map(|&metric| {
            let (base, new) = values(metric);
            welch(&base, &new, confidence).map(|change| PointChange {
                label: label.to_owned(),
                metric,
                unit: metric.unit(),
                significant: change.significant(),
                change,
            })
        })
        .collect()
}

/// `heading`, then `rows` aligned: the first `names` columns and the last (notes) read
/// left to right, the numbers between line up on the right.
fn text_table(heading: String, rows: &[Vec<String>], names: usize) -> String {
    let columns = rows[0].len();
    let align = |c| {
        if c < names || c == columns - 1 {
            Align::Left
        } else {
            Align::Right
        }
    };
    let mut out = heading + "\n";
    for line in aligned(rows, align) {
        out += &line;
        out += "\n";
    }
    out
}

impl Comparison {
    pub fn text(&self) -> String {
        text_table(self.heading(), &self.cells(), 2)
    }

    /// The line above the table: the two experiments and the interval.
    pub fn heading(&self) -> String {
        let side = |e: &Side| format!("{} ({}, {} done)", e.name, e.source, e.runs);
        format!(
            "base {} → new {}: change of each point's mean, Welch's {:.0} % interval and t-test",
            side(&self.base),
            side(&self.new),
            self.confidence * 100.0
        )
    }

    /// A header row, then one row per point and metric: the means, the change, its
    /// interval and p-value, and whether it is significant.
    pub fn cells(&self) -> Vec<Vec<String>> {
        let mut rows = vec![[
            "point", "metric", "n", "base", "new", "change", "interval", "p", "",
        ]
        .map(String::from)
        .to_vec()];
        for c in &self.changes {
            let fmt = |v: f64| format_metric(c.metric, v);
            let signed = |v: f64| {
                if v < 0.0 {
                    format!("-{}", fmt(-v))
                } else {
                    format!("+{}", fmt(v))
                }
            };
            let x = &c.change;
            rows.push(vec![
                c.label.clone(),
                c.metric.name().to_string(),
                format!("{}/{}", x.base_n, x.new_n),
                fmt(x.base_mean),
                fmt(x.new_mean),
                x.relative
                    .map_or_else(|| signed(x.delta), |r| format!("{:+.1} %", r * 100.0)),
                x.ci.map_or("-".into(), |(lo, hi)| {
                    format!("{} – {}", signed(lo), signed(hi))
                }),
                x.p_value.map_or("-".into(), |p| format!("{p:.3}")),
                if c.significant { "significant" } else { "" }.into(),
            ]);
        }
        rows
    }
}
