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
        // Done runs first from every input, then failures where no input finished it,
        // then what an interrupted run measured (it stays to be run).
        for wanted in [PlanStatus::Done, PlanStatus::Failed, PlanStatus::Pending] {
            for (i, store) in stores.iter().enumerate() {
                let input = store
                    .experiments()?
                    .into_iter()
                    .find(|e| e.plan_hash == row.plan_hash && e.seed == row.seed)
                    .expect("the plans were checked equal");
                for r in store.plan(input.id)? {
                    planned_runs[i].extend(r.run_id);
                    if r.status != wanted || (wanted == PlanStatus::Pending && r.run_id.is_none()) {
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
                        (PlanStatus::Pending, Some(run)) => Outcome::Interrupted(run),
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

#[cfg(test)]
mod tests {
    use super::*;
    use tcplab_record::RunRecord;

    const STUDY: &str = "name = \"m\"\nrepetitions = 2\n[[flow]]\n[[axis]]\nkey = \"flow.window\"\nvalues = [\"8K\", \"64K\"]\n";

    fn record(label: &str) -> RunRecord {
        let mut run: RunRecord =
            serde_json::from_str(include_str!("../../record/tests/run.json")).unwrap();
        run.label = Some(label.into());
        run
    }

    /// A shard's database: the study planned, `outcomes` recorded by plan place.
    fn shard(dir: &Path, name: &str, text: &str, outcomes: &[(u32, &str)]) -> PathBuf {
        let path = dir.join(format!("{name}.db"));
        let mut store = Store::open(&path).unwrap();
        let exp = experiment::parse(text, "m").unwrap();
        let seed = exp.shard_seed();
        let id = store
            .create_experiment(&exp, "m.toml", text, seed, &exp.schedule(seed))
            .unwrap();
        for &(seq, how) in outcomes {
            let run = record(&format!("{name} {seq}"));
            let outcome = match how {
                "done" => Outcome::Done(&run),
                "failed" => Outcome::Failed(None, "broke"),
                _ => Outcome::Interrupted(&run),
            };
            store.finish_planned_run(id, seq, outcome).unwrap();
        }
        path
    }

    #[test]
    fn shards_merge_into_one_plan_each_run_once_and_nothing_lost() {
        let dir = tempfile::tempdir().unwrap();
        let a = shard(dir.path(), "a", STUDY, &[(0, "done"), (2, "failed")]);
        let b = shard(
            dir.path(),
            "b",
            STUDY,
            &[(1, "done"), (2, "done"), (3, "interrupted")],
        );
        Store::open(&a)
            .unwrap()
            .insert_run(&record("single"))
            .unwrap();
        let out = dir.path().join("all.db");
        let merged = merge(&[a.clone(), b.clone()], &out).unwrap();
        assert_eq!(
            merged,
            Merged {
                experiments: 1,
                done: 3,
                failed: 0,
                pending: 1,
                duplicates: 0,
                single_runs: 1,
            }
        );
        let store = Store::open_to_read(&out).unwrap();
        let plan = store.plan(store.experiments().unwrap()[0].id).unwrap();
        let label = |seq: usize| {
            let id = plan[seq].run_id.unwrap();
            store.load_run(id).unwrap().label.unwrap()
        };
        // Each from the shard that ran it; the interrupted run's record kept.
        assert_eq!(
            [label(0), label(1), label(2), label(3)],
            ["a 0", "b 1", "b 2", "b 3"]
        );
        assert_eq!(store.list_runs().unwrap().len(), 5);
        // The same shard twice: its done run once, counted.
        let twice = merge(&[b.clone(), b.clone()], &dir.path().join("twice.db")).unwrap();
        assert_eq!((twice.done, twice.duplicates), (2, 2));
        // Another plan, or an existing output, is refused and nothing written.
        let other = shard(dir.path(), "c", &STUDY.replace("8K", "16K"), &[]);
        let refused = dir.path().join("refused.db");
        let err = merge(&[a.clone(), other], &refused)
            .unwrap_err()
            .to_string();
        assert!(err.contains("different plans"), "{err}");
        assert!(!refused.exists());
        assert!(merge(&[a], &out)
            .unwrap_err()
            .to_string()
            .contains("exists"));
    }
}
