//! Reports of what a tcplab database holds: per-point statistics of experiments
//! ([`results`]), charts of experiments and runs, and one self-contained HTML page.
//!
//! - [`results`]: an experiment's runs loaded once, summarised per metric — the table of
//!   `tcplab results` and of the report.
//! - `layout`: which charts fit an experiment's axes (x axis, series, facets, heatmap),
//!   reading units and geometric spacing from the axis values (`axes`).
//! - `experiments`, `runs`: the charts' data — means with confidence intervals per point;
//!   one run's throughput over time ([`rates`]), tcp_info samples and bottleneck queue.
//! - [`watched`]: a watched run's connections — which are long enough to draw over time,
//!   and the table of all of them, the short ones in one row.
//! - `draw`: a chart as SVG or PNG with plotters (an embedded font); `html`: the page.
//!
//! Colours come from one palette (`palette`): within an experiment a series name keeps
//! its colour in every chart; flows, limits and queues keep theirs in every run.

mod axes;
mod chart;
pub mod describe;
mod draw;
pub mod experiments;
#[cfg(test)]
mod fixtures;
mod html;
mod layout;
mod palette;
pub mod rates;
pub mod results;
mod runs;
mod sequence;
pub mod table;
#[cfg(test)]
mod tests;
pub mod watched;

use std::path::{Path, PathBuf};

use tcplab_analysis::explain::binding_bound;
use tcplab_analysis::stats::Metric;
use tcplab_netsim::capture::{read_pcapng, CaptureReadError, CapturedPacket};
use tcplab_record::units::{count, format_duration_us};
use tcplab_record::RunRecord;
use tcplab_store::{Store, StoreError};

pub use chart::{Body, Chart, Edge, Node, Pt, Series};
pub use draw::{png, svg, DrawError};
pub use palette::{Rgb, COLORS, RETRANSMITTED};
pub use runs::RunChart;

use experiments::RunBounds;
use html::Section;
use palette::Palette;
use results::{ExperimentRuns, ResultTable};

/// What a chart is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Experiment(i64),
    Run(i64),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Experiment(id) => write!(f, "experiment {id}"),
            Target::Run(id) => write!(f, "run {id}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{} has no experiment {id} (it has: {available})", db.display())]
    NoExperiment {
        db: PathBuf,
        id: i64,
        available: String,
    },
    #[error("{} has no run {id}", db.display())]
    NoRun { db: PathBuf, id: i64 },
    #[error("{} holds no runs", db.display())]
    Empty { db: PathBuf },
    #[error("{target} in {} has no chart '{name}' (it has: {available})", db.display())]
    NoChart {
        db: PathBuf,
        target: Target,
        name: String,
        available: String,
    },
    #[error(transparent)]
    Draw(#[from] DrawError),
    /// The cause is part of the message, not a `source`: chains would print it twice.
    #[error("cannot write {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Capture(#[from] CaptureError),
}

/// Why a run's capture file could not be read back (moved, deleted, unreadable, or not
/// one tcplab wrote). The cause is part of the message, as in [`ReportError::Write`].
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot open the run's capture {}: {error}", path.display())]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot read the run's capture {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: CaptureReadError,
    },
}

/// What a written report holds.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    pub experiments: usize,
    pub runs: usize,
    pub charts: usize,
    pub bytes: usize,
    /// What the page lacks and says so: each run's capture that could not be read.
    pub unread_captures: Vec<CaptureError>,
}

/// Writes `dir/index.html`: the experiments `experiments` (all when empty; then also
/// the runs that belong to none), each with its tables and charts and the time series of
/// a few representative runs.
pub fn write_report(
    store: &Store,
    experiments: &[i64],
    dir: &Path,
) -> Result<Written, ReportError> {
    let ids = if experiments.is_empty() {
        store.experiments()?.iter().map(|e| e.id).collect()
    } else {
        experiments.to_vec()
    };
    let mut sections = Vec::new();
    let mut unread_captures = Vec::new();
    for &id in &ids {
        sections.push(experiment_section(store, id, &mut unread_captures)?);
    }
    if experiments.is_empty() {
        let singles = single_runs(store)?;
        if !singles.is_empty() {
            let mut runs = Vec::new();
            for id in singles {
                runs.push(run_section(store, id, &mut unread_captures)?);
            }
            sections.push(Section {
                anchor: "runs".into(),
                title: "Single runs".into(),
                text: vec![
                    "Runs stored by `tcplab run --db` or `quickstart`, and connections watched by `tcplab watch --db` or `tcplab shell --record`, outside any experiment."
                        .into(),
                ],
                source: None,
                tables: Vec::new(),
                boards: Vec::new(),
                charts: Vec::new(),
                subsections: runs,
            });
        }
    }
    // Every subsection is a run: an experiment's representative ones or a single one.
    let runs = sections.iter().map(|s| s.subsections.len()).sum();
    let charts = sections.iter().map(count_charts).sum();
    if sections.is_empty() {
        return Err(ReportError::Empty {
            db: store.path().to_owned(),
        });
    }
    let db = store.path().display().to_string();
    let intro = format!(
        "Experiments and runs of the tcplab database {db}. Charts: means per point with confidence intervals against the experiment's axes; runs over time from their tcp_info samples (every 10 ms by default), report intervals where a flow has none, and the emulator's bottleneck queue. Generated by tcplab {}; this page needs no network and no other file.",
        env!("CARGO_PKG_VERSION")
    );
    let text = html::page(&format!("tcplab report: {db}"), &intro, &sections)?;
    std::fs::create_dir_all(dir).map_err(|error| ReportError::Write {
        path: dir.to_owned(),
        error,
    })?;
    let path = dir.join("index.html");
    std::fs::write(&path, &text).map_err(|error| ReportError::Write {
        path: path.clone(),
        error,
    })?;
    Ok(Written {
        path,
        experiments: ids.len(),
        runs,
        charts,
        bytes: text.len(),
        unread_captures,
    })
}

fn count_charts(s: &Section) -> usize {
    s.charts.len() + s.subsections.iter().map(count_charts).sum::<usize>()
}

/// Which flow's time-sequence graph to draw, and over what span.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SequenceView {
    /// The flow: the first TCP flow unless given.
    pub flow: Option<u32>,
    /// From, to: seconds since t0; the whole transfer unless given.
    pub zoom: Option<(f64, f64)>,
}

/// Chart `name` of `target` (default: the latest experiment, else the latest run), as
/// the report draws it; a run's time-sequence graph as `view` says.
pub fn find_chart(
    store: &Store,
    target: Option<Target>,
    name: &str,
    view: SequenceView,
) -> Result<Chart, ReportError> {
    let db = store.path().to_owned();
    let target = match target {
        Some(t) => t,
        None => match store.experiments()?.last() {
            Some(e) => Target::Experiment(e.id),
            None => Target::Run(
                store
                    .last_run_id()?
                    .ok_or(ReportError::Empty { db: db.clone() })?,
            ),
        },
    };
    let (charts, unread) = match target {
        Target::Experiment(id) => (experiment_charts(store, id)?.2, None),
        Target::Run(id) => run_charts(id, load_run(store, id)?, view),
    };
    if let Some(error) = unread.filter(|_| name == RunChart::Tseq.name()) {
        return Err(error.into());
    }
    let available: Vec<&str> = charts.iter().map(|c| c.id.as_str()).collect();
    let available = if available.is_empty() {
        "none".to_owned()
    } else {
        available.join(", ")
    };
    charts
        .iter()
        .find(|c| c.id == name)
        .cloned()
        .ok_or(ReportError::NoChart {
            db,
            target,
            name: name.to_owned(),
            available,
        })
}

/// Every chart of `target`, as the report draws them (a run's time-sequence graph as
/// `view` says); an error where a run's capture cannot be read.
pub fn charts(
    store: &Store,
    target: Target,
    view: SequenceView,
) -> Result<Vec<Chart>, ReportError> {
    Ok(match target {
        Target::Experiment(id) => experiment_charts(store, id)?.2,
        Target::Run(id) => match run_charts(id, load_run(store, id)?, view) {
            (charts, None) => charts,
            (_, Some(error)) => return Err(error.into()),
        },
    })
}

/// A run's charts; of a watched run, its long connections' (see [`watched::Length`]).
/// A capture that cannot be read leaves the run without its time-sequence graph, and
/// is returned to be said.
fn run_charts(id: i64, run: RunRecord, view: SequenceView) -> (Vec<Chart>, Option<CaptureError>) {
    let (packets, unread) = match run_capture(&run) {
        Ok(packets) => (packets, None),
        Err(error) => (None, Some(error)),
    };
    let evidence = runs::Evidence {
        packets,
        flow: view.flow,
        zoom: view.zoom,
    };
    let run = match run.watch {
        Some(_) => watched::long_only(run),
        None => run,
    };
    (
        runs::charts(id, &run, &evidence, &mut Palette::new()),
        unread,
    )
}

/// The packets of a run's capture, read back; `None` for a run without one.
pub fn run_capture(run: &RunRecord) -> Result<Option<Vec<CapturedPacket>>, CaptureError> {
    let Some(file) = run.path.as_ref().and_then(|p| p.capture_file.as_deref()) else {
        return Ok(None);
    };
    let path = PathBuf::from(file);
    let reader = match std::fs::File::open(&path) {
        Ok(f) => std::io::BufReader::new(f),
        Err(error) => return Err(CaptureError::Open { path, error }),
    };
    match read_pcapng(reader) {
        Ok(packets) => Ok(Some(packets)),
        Err(error) => Err(CaptureError::Read { path, error }),
    }
}

fn load_experiment(store: &Store, id: i64) -> Result<ExperimentRuns, ReportError> {
    ExperimentRuns::load(store, id)?.ok_or_else(|| {
        let ids: Vec<String> = store
            .experiments()
            .map(|e| e.iter().map(|e| e.id.to_string()).collect())
            .unwrap_or_default();
        ReportError::NoExperiment {
            db: store.path().to_owned(),
            id,
            available: if ids.is_empty() {
                "none".into()
            } else {
                ids.join(", ")
            },
        }
    })
}

fn load_run(store: &Store, id: i64) -> Result<RunRecord, ReportError> {
    match store.load_run(id) {
        Ok(run) => Ok(run),
        Err(_) if !store.list_runs()?.iter().any(|r| r.id == id) => Err(ReportError::NoRun {
            db: store.path().to_owned(),
            id,
        }),
        Err(e) => Err(e.into()),
    }
}

/// Runs that no experiment planned, oldest first.
fn single_runs(store: &Store) -> Result<Vec<i64>, ReportError> {
    let mut planned = Vec::new();
    for e in store.experiments()? {
        planned.extend(store.plan(e.id)?.into_iter().filter_map(|r| r.run_id));
    }
    Ok(store
        .list_runs()?
        .into_iter()
        .map(|r| r.id)
        .filter(|id| !planned.contains(id))
        .collect())
}

/// Experiment `id` with its tables and charts.
fn experiment_charts(
    store: &Store,
    id: i64,
) -> Result<(ExperimentRuns, Vec<ResultTable>, Vec<Chart>), ReportError> {
    let data = load_experiment(store, id)?;
    let bounds = run_bounds(store, &data)?;
    let (tables, charts) = experiments::charts(&data, &bounds, &mut Palette::new());
    Ok((data, tables, charts))
}

/// The binding bound of each done run: `explain` needs the runs' samples, so
/// each is loaded whole, one at a time.
fn run_bounds(store: &Store, data: &ExperimentRuns) -> Result<RunBounds, ReportError> {
    let mut bounds = RunBounds::new();
    for &id in data.runs.keys() {
        if let Some(b) = binding_bound(&store.load_run(id)?) {
            bounds.insert(id, b);
        }
    }
    Ok(bounds)
}

fn experiment_section(
    store: &Store,
    id: i64,
    unread_captures: &mut Vec<CaptureError>,
) -> Result<Section, ReportError> {
    let (data, tables, charts) = experiment_charts(store, id)?;
    let mut subsections = Vec::new();
    if let Some(throughput) = tables.iter().find(|t| t.metric == Metric::Throughput) {
        for run_id in representatives(&data, throughput) {
            let mut s = run_section(store, run_id, unread_captures)?;
            s.anchor = format!("e{id}-{}", s.anchor);
            subsections.push(s);
        }
    }
    let e = &data.experiment;
    let axes: Vec<String> = e
        .axes
        .iter()
        .map(|a| format!("{} ({})", a.name, a.values.join(", ")))
        .collect();
    let mut text = vec![format!(
        "{} × {}, planned from {}; axes: {}.",
        count(data.points.len(), "point"),
        count(e.repetitions, "repetition"),
        e.file,
        if axes.is_empty() {
            "none".into()
        } else {
            axes.join("; ")
        }
    )];
    if !subsections.is_empty() {
        text.push("Below the charts: the runs nearest the median throughput of the first and the last point, over time.".into());
    }
    Ok(Section {
        anchor: format!("experiment-{id}"),
        title: format!("Experiment {id}: {}", e.name),
        text,
        source: Some(("experiment file".into(), e.spec_text.clone())),
        boards: experiments::leaderboards(&data, &tables),
        tables,
        charts,
        subsections,
    })
}

/// The runs nearest the median throughput of the first and of the last point, so that a
/// sweep of hundreds of points shows a few runs over time, not all.
fn representatives(data: &ExperimentRuns, throughput: &ResultTable) -> Vec<i64> {
    let ends = [throughput.points.first(), throughput.points.last()];
    let mut out = Vec::new();
    for p in ends.into_iter().flatten() {
        let (Some(stats), Some(point)) = (p.stats, data.points.iter().find(|q| q.index == p.point))
        else {
            continue;
        };
        let nearest = data
            .runs_of(p.point)
            .filter_map(|(id, run)| {
                let v = Metric::Throughput.of(run, point.config.warmup_us)?;
                Some((id, (v - stats.median).abs()))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((id, _)) = nearest {
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}

/// Run `id`'s section; a capture it cannot read is said in its text and added to
/// `unread_captures`.
fn run_section(
    store: &Store,
    id: i64,
    unread_captures: &mut Vec<CaptureError>,
) -> Result<Section, ReportError> {
    let run = load_run(store, id)?;
    let mut text = vec![describe::run::in_a_sentence(&run)];
    if let Some(e) = &run.error {
        text.push(format!("Error: {e}"));
    }
    let mut boards = Vec::new();
    if let Some(watch) = &run.watch {
        text.extend(watched_text(&run, watch));
        if !run.flows.is_empty() {
            let connections = watched::Connections::of(&run);
            boards.push((
                format!(
                    "Connections: {} drawn below, {} in one row",
                    connections.long.len(),
                    count(connections.short.count, "short one")
                ),
                connections.rows(&run),
            ));
        }
    }
    let title = match (&run.watch, run.label.as_deref()) {
        (_, Some(l)) => format!("Run {id}: {}", l.trim()),
        (Some(watch), None) => format!("Run {id}: {}", watched::what(watch)),
        (None, None) => format!("Run {id}"),
    };
    let (charts, unread) = run_charts(id, run, SequenceView::default());
    if let Some(error) = unread {
        text.push(format!("No time-sequence graph: {error}."));
        unread_captures.push(error);
    }
    Ok(Section {
        anchor: format!("run-{id}"),
        title,
        text,
        source: None,
        tables: Vec::new(),
        boards,
        charts,
        subsections: Vec::new(),
    })
}

/// How a watched run saw its connections, and which of them it draws.
fn watched_text(run: &RunRecord, watch: &tcplab_record::WatchRecord) -> Vec<String> {
    let interval = run.params.sample_interval_us;
    let mut text = vec![format!(
        "Each connection sampled every {} through sock_diag, {}.{}",
        format_duration_us(interval),
        if watch.tracepoint {
            "opens and closes from the sock:inet_sock_set_state tracepoint"
        } else {
            "polling only (no tracepoint): a connection that opened and closed between two samples is missing"
        },
        if watch.missed > 0 {
            format!(
                " {} seen only once done (TIME_WAIT), without counters: not recorded.",
                count(watch.missed, "connection")
            )
        } else {
            String::new()
        }
    )];
    text.push(if run.flows.is_empty() {
        "No connection was recorded.".into()
    } else {
        format!(
            "A connection that lived {} or more ({} sample intervals, and at least {}) is drawn over time as a tcplab flow is; the shorter ones, which such charts would show as a dot or two, are counted together in the table's row \"short\".",
            format_duration_us(watched::Length::long_from_us(interval)),
            watched::LONG_SAMPLE_INTERVALS,
            format_duration_us(watched::LONG_MIN_US),
        )
    });
    text
}
