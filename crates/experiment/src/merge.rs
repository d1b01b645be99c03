//! `tcplab merge`: the databases of a study's shards (`sweep --shard K/N`, on one
//! machine or many) put into one, as if one sweep had run it: the same experiments with
//! their plans, each planned run's record from the shard that ran it (samples, events,
//! probes and both hosts' metadata with it), runs outside experiments copied too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tcplab_model::experiment;
use tcplab_store::{ExperimentRow, Outcome, PlanStatus, Store};

/// What a merge put together.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Merged {
    pub experiments: usize,
    /// Planned runs done, failed and still pending in the merged plans.
    pub done: usize,
    pub failed: usize,
    pub pending: usize,
    /// Planned runs done in more than one input: the first input's is kept.
    pub duplicates: usize,
    /// Runs outside any experiment, copied.
    pub single_runs: usize,
}

/// Merges `inputs` into `output`, a database that must not exist yet. The inputs must
/// hold the same plans (same plan hash and seed: the same file, sweeps with `--shard`),
/// else they are not parts of one study and nothing is written.
pub fn merge(inputs: &[PathBuf], output: &Path) -> Result<Merged> {
    if output.exists() {
        bail!(
            "{} exists: merge writes a new database (remove it, or name another with -o)",
            output.display()
        );
    }
    let stores = inputs
        .iter()
        .map(|p| Store::open_to_read(p).map_err(anyhow::Error::from))
        .collect::<Result<Vec<_>>>()?;
    let plans = |store: &Store| -> Result<Vec<ExperimentRow>> { Ok(store.experiments()?) };
    let first = plans(&stores[0])?;
    let key = |rows: &[ExperimentRow]| -> BTreeSet<(String, u64)> {
        rows.iter().map(|e| (e.plan_hash.clone(), e.seed)).collect()
    };
    for (store, path) in stores.iter().zip(inputs).skip(1) {
        if key(&plans(store)?) != key(&first) {
            bail!(
                "{} and {} hold different plans (by plan hash and seed): not parts of one study; sweep one file with --shard K/N into each",
                inputs[0].display(),
                path.display()
            );
        }
    }
    let mut out = Store::open(output)?;
    let mut merged = Merged::default();
    let mut planned_runs: Vec<BTreeSet<i64>> = vec![BTreeSet::new(); stores.len()];
    for row in &first {
        let exp = experiment::parse(&row.spec_text, &row.name)
            .map_err(|e| anyhow::anyhow!("{}: experiment {}: {e}", inputs[0].display(), row.id))?;
        if exp.plan_hash() != row.plan_hash {
            bail!(
                "{}: experiment {} no longer plans as stored (this tcplab reads its file differently)",
                inputs[0].display(),
                row.id
            );
        }
        let schedule = exp.schedule(row.seed);
        let id = out.create_experiment(&exp, &row.file, &row.spec_text, row.seed, &schedule)?;
        merged.experiments += 1;
        let mut filled = vec![false; schedule.len()];
        // Done runs first from every input, then failures where no input finished it.
        for wanted in [PlanStatus::Done, PlanStatus::Failed] {
            for (i, store) in stores.iter().enumerate() {
                let input = store
                    .experiments()?
                    .into_iter()
                    .find(|e| e.plan_hash == row.plan_hash && e.seed == row.seed)
                    .expect("the plans were checked equal");
                for r in store.plan(input.id)? {
                    planned_runs[i].extend(r.run_id);
                    if r.status != wanted {
                        continue;
                    }
                    let seq = r.seq as usize;
                    if filled[seq] {
                        merged.duplicates += usize::from(wanted == PlanStatus::Done);
                        continue;
                    }
                    let run = r.run_id.map(|id| store.load_run(id)).transpose()?;
                    let outcome = match (wanted, &run) {
                        (PlanStatus::Done, Some(run)) => Outcome::Done(run),
                        _ => Outcome::Failed(run.as_ref(), r.error.as_deref().unwrap_or("failed")),
                    };
                    out.finish_planned_run(id, r.seq, outcome)
                        .with_context(|| {
                            format!("copying planned run {} of {}", r.seq, inputs[i].display())
                        })?;
                    filled[seq] = true;
                }
            }
        }
        for r in out.plan(id)? {
            match r.status {
                PlanStatus::Done => merged.done += 1,
                PlanStatus::Failed => merged.failed += 1,
                PlanStatus::Pending => merged.pending += 1,
            }
        }
    }
    for (i, store) in stores.iter().enumerate() {
        for summary in store.list_runs()? {
            if !planned_runs[i].contains(&summary.id) {
                out.insert_run(&store.load_run(summary.id)?)?;
                merged.single_runs += 1;
            }
        }
    }
    Ok(merged)
}
