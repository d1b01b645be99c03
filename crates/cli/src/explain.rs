//! `tcplab explain`: why a stored run got its throughput, in words or as JSON.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Result};
use serde::Serialize;
use tcplab_analysis::explain::{explain, Explanation};
use tcplab_analysis::tseq::run_retransmit_causes;
use tcplab_record::capture::Vantage;
use tcplab_record::RunRecord;
use tcplab_report::describe::explanation::explained_run;

use crate::args::ExplainArgs;
use crate::shared::open_existing_store;
use crate::stdio::{errln, Stdout};

/// `explain`, citing the run's capture where it has one and it saw what the senders
/// sent (a capture at a receiving host lacks what was lost). A capture that cannot be
/// read is said on stderr, and the run explained without it.
pub fn explain_with_evidence(run: &RunRecord) -> Explanation {
    let mut explanation = explain(run);
    let Some(at) = run.path.as_ref().map(|p| p.capture_at) else {
        return explanation;
    };
    let sees_the_senders = run
        .flows
        .iter()
        .all(|f| at.vantage(f.direction) != Vantage::Receiver);
    if !sees_the_senders {
        return explanation;
    }
    match tcplab_report::run_capture(run) {
        Ok(Some(packets)) => {
            explanation.cite_capture(run_retransmit_causes(&packets, run), at);
        }
        Ok(None) => {}
        Err(e) => errln!("tcplab explain: {e}: explained without it"),
    }
    explanation
}

#[derive(Serialize)]
struct ExplainedRun<'a> {
    run_id: i64,
    label: &'a Option<String>,
    #[serde(flatten)]
    explanation: &'a Explanation,
}

pub fn run(args: ExplainArgs) -> Result<ExitCode> {
    let store = open_existing_store(&args.db)?;
    let id = match args.run {
        Some(id) => id,
        None => match store.last_run_id()? {
            Some(id) => id,
            None => bail!("{} holds no runs", args.db.display()),
        },
    };
    let run = store.load_run(id)?;
    let explanation = explain_with_evidence(&run);
    let mut out = Stdout;
    if args.json {
        let doc = ExplainedRun {
            run_id: id,
            label: &run.label,
            explanation: &explanation,
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", explained_run(id, &run, &explanation))?;
    }
    Ok(ExitCode::SUCCESS)
}
