//! Fills an experiment's pending runs with copies of its done runs of the same point, so
//! `bench/scale.sh` can measure `results` and `report` on a database of a thousand real
//! runs after sweeping a few (`tcplab sweep --shard 1/N`).
//!
//!     cargo run --release --example fill_plan -- DB
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use tcplab_store::{Outcome, PlanStatus, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::args().nth(1).ok_or("usage: fill_plan DB")?;
    let mut store = Store::open(&db)?;
    let experiment = store
        .experiments()?
        .pop()
        .ok_or("no experiment in the database")?;
    let plan = store.plan(experiment.id)?;
    let mut done: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    for row in &plan {
        if let (PlanStatus::Done, Some(id)) = (row.status, row.run_id) {
            done.entry(row.run.point).or_default().push(id);
        }
    }
    let mut loaded = BTreeMap::new();
    let mut filled = 0;
    for row in plan.iter().filter(|r| r.status == PlanStatus::Pending) {
        let Some(ids) = done.get(&row.run.point) else {
            continue;
        };
        let id = ids[row.run.repetition as usize % ids.len()];
        let run = match loaded.entry(id) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(store.load_run(id)?),
        };
        store.finish_planned_run(experiment.id, row.seq, Outcome::Done(run))?;
        filled += 1;
    }
    println!(
        "filled {filled} pending runs of experiment {} from {} done runs",
        experiment.id,
        done.values().map(Vec::len).sum::<usize>()
    );
    Ok(())
}
