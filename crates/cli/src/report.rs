//! `tcplab report` and `tcplab plot`: a database's experiments and runs as an HTML page
//! of charts, or one chart as an SVG or PNG file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tcplab_record::units::count;
use tcplab_report::{find_chart, write_report, SequenceView, Target, Written};

use crate::args::{PlotArgs, ReportArgs};
use crate::shared::open_existing_store;
use crate::stdio::{errln, outln};

pub fn report(args: ReportArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let store = open_existing_store(args.db.path())?;
    let output = args.output.unwrap_or_else(|| default_dir(args.db.path()));
    let written = write_report(&store, &args.experiments, &output)?;
    outln!(
        "wrote {}: {}, {} over time, {}, {:.1} MB in {:.1} s",
        written.path.display(),
        count(written.experiments, "experiment"),
        count(written.runs, "run"),
        count(written.charts, "chart"),
        written.bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    say_unread_captures(&written);
    Ok(ExitCode::SUCCESS)
}

/// The captures a written report could not read, which its page says too.
pub fn say_unread_captures(written: &Written) {
    for e in &written.unread_captures {
        errln!("tcplab report: {e}: the page has no time-sequence graph of it");
    }
}

/// Where a database's report goes unless told: `NAME-report` beside `NAME.db`.
pub fn default_dir(db: &Path) -> PathBuf {
    let stem = db
        .file_stem()
        .map_or("tcplab".into(), |s| s.to_string_lossy().into_owned());
    db.with_file_name(format!("{stem}-report"))
}

pub fn plot(args: PlotArgs) -> Result<ExitCode> {
    let out = &args.output;
    let extension = out
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if !matches!(extension.as_deref(), Some("svg" | "png")) {
        bail!(
            "cannot tell the format of {}: name it FILE.svg or FILE.png",
            out.display()
        );
    }
    let store = open_existing_store(args.db.path())?;
    let target = args
        .run
        .map(Target::Run)
        .or(args.experiment.map(Target::Experiment));
    let zoom = match (args.from, args.to) {
        (None, None) => None,
        (from, to) => {
            let (from, to) = (from.unwrap_or(0.0), to.unwrap_or(f64::MAX));
            if from >= to {
                bail!("--from {from} s is not before --to {to} s");
            }
            Some((from, to))
        }
    };
    let view = SequenceView {
        flow: args.flow,
        zoom,
    };
    let chart = find_chart(&store, target, &args.chart, view)?;
    let bytes = if extension.as_deref() == Some("png") {
        tcplab_report::png(&chart)?
    } else {
        tcplab_report::svg(&chart, true)?.into_bytes()
    };
    std::fs::write(out, bytes).with_context(|| format!("cannot write {}", out.display()))?;
    outln!("wrote {}: {}", out.display(), chart.title);
    Ok(ExitCode::SUCCESS)
}
