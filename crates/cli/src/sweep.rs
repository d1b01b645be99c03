//! `tcplab sweep` and `tcplab results`: experiments from a file into a database, and the
//! per-point statistics back out.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use tcplab_analysis::stats::Metric;
use tcplab_experiment::estimate;
use tcplab_experiment::sweep::{self, Event, SweepRequest};
use tcplab_model::experiment::{self, Experiment};
use tcplab_record::units::{count, format_duration_us, format_rate};
use tcplab_record::RunRecord;
use tcplab_report::experiments;
use tcplab_report::results::{self, summarize, ExperimentRuns, ResultTable};
use tcplab_store::{PlanStatus, Store};

use crate::args::{CompareArgs, MergeArgs, ResultsArgs, SweepArgs};
use crate::shared::{interrupt_flag, open_existing_store, open_store};
use crate::stdio::{errln, out, outln, Stdout};

pub fn sweep(args: SweepArgs) -> Result<ExitCode> {
    let file = args.file.display().to_string();
    let bytes =
        std::fs::read(&args.file).with_context(|| format!("cannot read experiment file {file}"))?;
    if bytes.starts_with(b"SQLite format 3\0") {
        bail!(
            "{file} is a database; sweep takes an experiment file (TOML) and names its database with --db: tcplab sweep FILE.toml --db {file}"
        );
    }
    let text =
        String::from_utf8(bytes).with_context(|| format!("cannot read experiment file {file}"))?;
    let stem = args
        .file
        .file_stem()
        .map_or("experiment".into(), |s| s.to_string_lossy().into_owned());
    let experiment = experiment::parse(&text, &stem).map_err(|e| anyhow!("{file}: {e}"))?;
    let db = args
        .db
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.db", experiment.name)));
    if args.dry_run {
        return dry_run(&experiment, &args.file, &db, args.shard);
    }
    let hosts =
        sweep::real_hosts(&experiment.points, &args.file).map_err(|e| anyhow!("{file}: {e:#}"))?;
    sweep::check_congestion(&experiment.points)?;
    sweep::check_traces(&experiment.points, &args.file).map_err(|e| anyhow!("{file}: {e:#}"))?;
    sweep::check_schedules(&experiment.points).map_err(|e| anyhow!("{file}: {e:#}"))?;
    sweep::check_topologies(&experiment.points, &args.file)
        .map_err(|e| anyhow!("{file}: {e:#}"))?;
    sweep::check_labs(&experiment.points)?;
    // Its lock file goes beside it, in a directory made for it if it is the first there
    // (`--db results/part-3.db`).
    tcplab_store::check_path(&db)?;
    tcplab_store::create_dir(&db)?;
    let _lock = sweep::lock(&db)?;
    let mut store = open_store(&db)?;
    let prepared = sweep::prepare(
        &mut store,
        &SweepRequest {
            experiment: &experiment,
            file: &file,
            text: &text,
            new_experiment: args.new_experiment,
            retry_failed: args.retry_failed,
            shard: args.shard,
        },
    )?;
    for line in crate::lab::gc_lines(&sweep::remove_leftovers()?) {
        outln!("{line}");
    }
    let pending = prepared.count(PlanStatus::Pending);
    let shard = args.shard.map_or(String::new(), |s| {
        format!(" (shard {s}: {} of them)", prepared.plan.len())
    });
    outln!(
        "experiment {}: {}{shard}, order shuffled with seed {}; {} in {}",
        experiment.name,
        plan_size(
            &experiment,
            experiment.points.len() * experiment.repetitions as usize
        ),
        prepared.seed,
        if prepared.resumed {
            format!(
                "resuming: {} done, {} failed, {pending} to run",
                prepared.count(PlanStatus::Done),
                prepared.count(PlanStatus::Failed)
            )
        } else {
            "new plan".into()
        },
        db.display()
    );
    if prepared.retried > 0 {
        outln!("retrying {} failed runs", prepared.retried);
    }
    let bar = progress_bar(pending as u64);
    let totals = sweep::execute(
        &mut store,
        &experiment,
        &prepared,
        &hosts,
        interrupt_flag(),
        &mut |event| match event {
            Event::Start { point, row, .. } => bar.set_message(format!(
                "{}rep {}",
                with_space(experiment.label(point)),
                row.run.repetition + 1
            )),
            Event::Finish(f) => {
                let result = match (f.status, &f.error) {
                    (PlanStatus::Done, _) => {
                        let done = f.throughput_bps.map_or("done".into(), format_rate);
                        match f.timed_out {
                            true => format!("{done}, the command cut at its time limit"),
                            false => done,
                        }
                    }
                    (PlanStatus::Failed, Some(e)) => format!("FAILED: {e}"),
                    (PlanStatus::Failed, None) => "FAILED".into(),
                    (PlanStatus::Pending, _) => "interrupted; runs again on resume".into(),
                };
                let line = format!(
                    "[{:>w$}/{}] {}rep {}: {result} ({:.1} s)",
                    f.k,
                    f.total,
                    with_space(experiment.label(f.point)),
                    f.row.run.repetition + 1,
                    f.wall.as_secs_f64(),
                    w = f.total.to_string().len()
                );
                bar.suspend(|| outln!("{line}"));
                bar.inc(1);
            }
        },
    )?;
    bar.finish_and_clear();
    let mut overheads = totals.overheads.clone();
    overheads.sort();
    if let Some(median) = overheads.get(overheads.len() / 2) {
        outln!(
            "per-run overhead (lab up and down, connections, storing): median {:.0} ms over {}",
            median.as_secs_f64() * 1e3,
            count(overheads.len(), "run")
        );
    }
    let plan = sweep::shard_rows(store.plan(prepared.id)?, args.shard);
    let left = plan
        .iter()
        .filter(|r| r.status == PlanStatus::Pending)
        .count();
    let failed = plan
        .iter()
        .filter(|r| r.status == PlanStatus::Failed)
        .count();
    if totals.interrupted || left > 0 {
        outln!(
            "interrupted: {left} of {} left; run the same command again to resume",
            count(plan.len(), "run")
        );
        return Ok(ExitCode::FAILURE);
    }
    outln!();
    out!(
        "{}",
        summary(&store, prepared.id, Metric::Throughput, None)?.text()
    );
    if failed > 0 {
        outln!(
            "{} failed; --retry-failed runs them again",
            count(failed, "run")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// A point's label followed by a space, or nothing for a file without axes.
fn with_space(label: String) -> String {
    if label.is_empty() {
        label
    } else {
        label + " "
    }
}

fn progress_bar(len: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} runs, ETA {eta}  {wide_msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// The plan, its size and time, and where the database stands with it. Key files are
/// checked but not needed: a plan can be read before the keys are in place.
/// "4 points × 3 repetitions = 12 runs".
fn plan_size(experiment: &Experiment, runs: usize) -> String {
    format!(
        "{} × {} = {}",
        count(experiment.points.len(), "point"),
        count(experiment.repetitions, "repetition"),
        count(runs, "run")
    )
}

fn dry_run(
    experiment: &Experiment,
    path: &Path,
    db: &Path,
    shard: Option<experiment::Shard>,
) -> Result<ExitCode> {
    let file = path.display();
    let runs = experiment.points.len() * experiment.repetitions as usize;
    let stored = if db.exists() {
        let store = open_existing_store(db)?;
        let hash = experiment.plan_hash();
        let found = store
            .experiments()?
            .into_iter()
            .rev()
            .find(|e| e.plan_hash == hash);
        match found {
            Some(found) => Some((store.plan(found.id)?, found.seed)),
            None => None,
        }
    } else {
        None
    };
    // Each planned run with its status where the database holds the plan.
    let (plan, seed_note): (Vec<_>, String) = match &stored {
        Some((plan, seed)) => (
            plan.iter().map(|r| (r.run, Some(r.status))).collect(),
            format!("seed {seed}, stored"),
        ),
        None => {
            let (seed, note) = match (shard, experiment.seed) {
                (_, Some(seed)) => (seed, "from the file"),
                (Some(_), None) => (
                    experiment.shard_seed(),
                    "from the plan's hash, as every shard of it orders the plan",
                ),
                (None, None) => (
                    u64::from(rand::random::<u32>()),
                    "drawn for this listing; the sweep draws and records its own",
                ),
            };
            (
                experiment
                    .schedule(seed)
                    .into_iter()
                    .map(|r| (r, None))
                    .collect(),
                format!("seed {seed}, {note}"),
            )
        }
    };
    // The runs this sweep would run, with their places in the whole plan.
    let mine: Vec<_> = plan
        .iter()
        .enumerate()
        .filter(|(seq, _)| shard.is_none_or(|s| s.holds(*seq as u32)))
        .collect();
    let total = estimate::plan_time(
        mine.iter()
            .map(|(_, (run, _))| &experiment.points[run.point as usize]),
    );
    let part = shard.map_or(String::new(), |s| {
        format!("; shard {s}: {}", count(mine.len(), "run"))
    });
    outln!(
        "experiment {} ({file}): {}{part}, about {}",
        experiment.name,
        plan_size(experiment, runs),
        about(total)
    );
    let hosts: std::collections::BTreeMap<&str, _> = experiment
        .points
        .iter()
        .filter_map(|p| p.config.server.as_ref())
        .map(|h| (h.name.as_str(), h))
        .collect();
    for host in hosts.values() {
        let key = match (&host.key_file, sweep::host_key(host, path)) {
            (None, _) => String::new(),
            (Some(k), Ok(_)) => format!(", key {k}"),
            (Some(_), Err(e)) => format!(", {}: the sweep needs it", e.root_cause()),
        };
        outln!(
            "  real host {}: {} at {}{key}",
            host.name,
            if host.iperf3 {
                "iperf3 server"
            } else {
                "tcplab agent"
            },
            host.address,
        );
    }
    for axis in &experiment.axes {
        outln!(
            "  axis {}{}: {}: {}",
            axis.name,
            axis.key
                .as_ref()
                .filter(|k| **k != axis.name)
                .map(|k| format!(" (sets {k})"))
                .unwrap_or_default(),
            count(axis.values.len(), "value"),
            axis.values.join(", ")
        );
    }
    if stored.is_some() {
        let with = |status| mine.iter().filter(|(_, (_, s))| *s == Some(status)).count();
        let (done, failed) = (with(PlanStatus::Done), with(PlanStatus::Failed));
        outln!(
            "  {} holds this plan: {done} done, {failed} failed, {} to run{}",
            db.display(),
            mine.len() - done - failed,
            shard.map_or(String::new(), |s| format!(" of shard {s}"))
        );
    }
    outln!("  order ({seed_note}):");
    outln!(
        "  {:>5} {:>6} {:>4}  {:<8} values",
        "run",
        "point",
        "rep",
        "status"
    );
    for (seq, (run, status)) in mine {
        let point = &experiment.points[run.point as usize];
        outln!(
            "  {:>5} {:>6} {:>4}  {:<8} {}",
            seq + 1,
            run.point,
            run.repetition + 1,
            status.map_or("", status_name),
            experiment.label(point)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A duration as the dry run estimates it: "7.23 s" under a minute, "1h 2m 5s" above.
fn about(d: Duration) -> String {
    if d < Duration::from_secs(60) {
        format_duration_us(d.as_micros() as u64)
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs_f64().round() as u64)).to_string()
    }
}

fn status_name(status: PlanStatus) -> &'static str {
    match status {
        PlanStatus::Pending => "pending",
        PlanStatus::Done => "done",
        PlanStatus::Failed => "failed",
    }
}

pub fn results(args: ResultsArgs) -> Result<ExitCode> {
    let store = open_existing_store(args.db.path())?;
    let id = experiment_id(&store, args.db.path(), args.experiment)?;
    let data = ExperimentRuns::load(&store, id)?
        .ok_or_else(|| anyhow!("{} has no experiment {id}", store.path().display()))?;
    let data = match &args.flow {
        Some(name) => data
            .only_flow(name, args.metric)
            .map_err(anyhow::Error::msg)?,
        None => data,
    };
    let mut table = summarize(&data, args.metric, args.confidence);
    table.flow = args.flow.clone();
    if args.json {
        serde_json::to_writer_pretty(Stdout, &table)?;
        outln!();
    } else {
        out!("{}", table.text());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn merge(args: MergeArgs) -> Result<ExitCode> {
    for input in &args.inputs {
        if !input.exists() {
            bail!("no database at {}", input.display());
        }
    }
    let m = tcplab_experiment::merge::merge(&args.inputs, &args.output)?;
    outln!(
        "merged {} into {}: {}, their planned runs {} done, {} failed, {} to run{}{}",
        count(args.inputs.len(), "database"),
        args.output.display(),
        count(m.experiments, "experiment"),
        m.done,
        m.failed,
        m.pending,
        match m.duplicates {
            0 => String::new(),
            n => format!("; {} done twice, the first kept", count(n, "run")),
        },
        match m.single_runs {
            0 => String::new(),
            n => format!("; {} outside experiments", count(n, "run")),
        },
    );
    Ok(ExitCode::SUCCESS)
}

/// The done runs of `db` whose label or a tag is `label`, named for a comparison.
fn labelled_runs(db: &Path, label: &str) -> Result<(results::Side, Vec<RunRecord>)> {
    let store = open_existing_store(db)?;
    let mut runs = Vec::new();
    for row in store.list_runs()? {
        if row.status != "done" {
            continue;
        }
        let run = store.load_run_without_samples(row.id)?;
        if run.label.as_deref() == Some(label) || run.tags.iter().any(|t| t == label) {
            runs.push(run);
        }
    }
    if runs.is_empty() {
        bail!(
            "{} holds no done run labelled or tagged '{label}'",
            db.display()
        );
    }
    let side = results::Side {
        name: label.to_owned(),
        source: db.display().to_string(),
        runs: runs.len(),
    };
    Ok((side, runs))
}

/// What `compare` exits with when a threshold of --fail-on was crossed (1 is an error,
/// 2 a usage error).
const REGRESSED: u8 = 3;

pub fn compare(args: CompareArgs) -> Result<ExitCode> {
    let with_thresholds = |mut metrics: Vec<Metric>| {
        for f in &args.fail_on {
            if !metrics.contains(&f.metric) {
                metrics.push(f.metric);
            }
        }
        metrics
    };
    let comparison = match (&args.base_label, &args.new_label) {
        (Some(base_label), Some(new_label)) => {
            let base = labelled_runs(&args.base, base_label)?;
            let new = labelled_runs(&args.new, new_label)?;
            let metrics = if args.metrics.is_empty() {
                vec![Metric::Throughput, Metric::Retransmits, Metric::Rtt]
            } else {
                args.metrics.clone()
            };
            // No experiment sets it: an experiment file's default.
            let confidence = args.confidence.unwrap_or(experiment::DEFAULT_CONFIDENCE);
            results::compare_runs(
                (base.0, &base.1),
                (new.0, &new.1),
                &with_thresholds(metrics),
                confidence,
            )
        }
        _ => {
            let load = |db: &Path, id: Option<i64>| -> Result<ExperimentRuns> {
                let store = open_existing_store(db)?;
                let id = experiment_id(&store, db, id)?;
                ExperimentRuns::load(&store, id)?
                    .ok_or_else(|| anyhow!("{} has no experiment {id}", db.display()))
            };
            let base = load(&args.base, args.base_experiment)?;
            let new = load(&args.new, args.new_experiment)?;
            let metrics = if args.metrics.is_empty() {
                let mut both = experiments::metrics(&base);
                both.retain(|m| experiments::metrics(&new).contains(m));
                both
            } else {
                args.metrics.clone()
            };
            results::compare(&base, &new, &with_thresholds(metrics), args.confidence)
        }
    };
    if comparison.changes.is_empty() {
        bail!(
            "{} and {} share no point (by their axes' values): nothing to compare",
            args.base.display(),
            args.new.display()
        );
    }
    if args.json {
        serde_json::to_writer_pretty(Stdout, &comparison)?;
        outln!();
    } else {
        out!("{}", comparison.text());
    }
    let crossed: Vec<String> = args
        .fail_on
        .iter()
        .flat_map(|f| {
            comparison
                .changes
                .iter()
                .filter(move |c| c.metric == f.metric && f.crossed_by(&c.change))
                .map(move |c| {
                    format!(
                        "{} {} {:+.1} % (p {:.3}) crosses {:+.0} %",
                        c.label,
                        c.metric.name(),
                        c.change.relative.unwrap_or(0.0) * 100.0,
                        c.change.p_value.unwrap_or(1.0),
                        f.relative * 100.0
                    )
                })
        })
        .collect();
    if crossed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for line in &crossed {
        errln!("tcplab: regressed: {line}");
    }
    Ok(ExitCode::from(REGRESSED))
}

/// Experiment `id` of the database, or its latest, named in the error when missing.
fn experiment_id(store: &Store, db: &Path, id: Option<i64>) -> Result<i64> {
    let experiments = store.experiments()?;
    Ok(match id {
        Some(id) => experiments
            .iter()
            .find(|e| e.id == id)
            .map(|e| e.id)
            .ok_or_else(|| {
                let ids: Vec<String> = experiments.iter().map(|e| e.id.to_string()).collect();
                anyhow!(
                    "{} has no experiment {id} (it has: {})",
                    db.display(),
                    if ids.is_empty() {
                        "none".into()
                    } else {
                        ids.join(", ")
                    }
                )
            })?,
        None => experiments.last().map(|e| e.id).ok_or_else(|| {
            anyhow!(
                "{} holds no experiment (single runs are listed by `tcplab runs`)",
                db.display()
            )
        })?,
    })
}

/// `metric` per point of experiment `id` (an id the store listed).
fn summary(store: &Store, id: i64, metric: Metric, confidence: Option<f64>) -> Result<ResultTable> {
    let data = ExperimentRuns::load(store, id)?
        .ok_or_else(|| anyhow!("{} has no experiment {id}", store.path().display()))?;
    Ok(summarize(&data, metric, confidence))
}
