//! A run's samples stored while the run still goes on, so that a long watch holds one
//! batch of samples in memory rather than all of them, and one killed before it ends
//! leaves what it sampled stored.
//!
//! The samples go under a provisional run, stored when the spool opens as what stays
//! should the run never end: an `incomplete` run whose error says so. They carry the
//! labels the run knows while it goes on (a watch: each connection's own number, on
//! the client's side). Once it ends, [`Store::insert_spooled_run`] stores the run whole
//! in one transaction: the spooled blocks are read back one at a time, relabelled as
//! the finished run names its flows and written under it, before the samples the run
//! still held, and the provisional run is removed.

use std::path::Path;

use rusqlite::TransactionBehavior;
use tcplab_record::{RunRecord, SampleRecord};

use crate::error::Result;
use crate::{insert_run_but_samples, sample_blocks, sqlite_err, with_os_cause, Store};

/// Samples stored as they come under a provisional run; see the module's doc.
pub struct SampleSpool {
    /// A connection of its own, so the spool can go where the run is made.
    store: Store,
    run_id: i64,
    next_block: i64,
}

impl SampleSpool {
    /// Opens a spool in the database at `path` and stores `provisional` there (without
    /// its samples, which it should not have) as what stays if the run never ends.
    pub fn open(path: impl AsRef<Path>, provisional: &RunRecord) -> Result<SampleSpool> {
        let mut store = Store::open(path)?;
        let run_id = store.insert_run(provisional)?;
        Ok(SampleSpool {
            store,
            run_id,
            next_block: 0,
        })
    }

    /// The provisional run's id.
    pub fn run_id(&self) -> i64 {
        self.run_id
    }

    /// Stores `samples` after those spooled before, in one transaction.
    pub fn append(&mut self, samples: &[SampleRecord]) -> Result<()> {
        if samples.is_empty() {
            return Ok(());
        }
        let Store { conn, path } = &mut self.store;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite_err(path, "starting to spool samples"))?;
        let next = sample_blocks::insert(&tx, self.run_id, self.next_block, samples)
            .map_err(sqlite_err(path, "spooling samples"))
            .and_then(|next| {
                tx.commit()
                    .map_err(sqlite_err(path, "committing spooled samples"))?;
                Ok(next)
            })
            .map_err(|e| with_os_cause(conn, e))?;
        self.next_block = next;
        Ok(())
    }
}

impl Store {
    /// Stores `run` whole and returns its id: the samples `spool` took (which must be on
    /// this database), each as `relabel` names it (a sample it gives `None` is left out),
    /// then `run`'s own samples; and removes the spool's provisional run. One
    /// transaction: should it fail, the provisional run stays with its samples.
    pub fn insert_spooled_run(
        &mut self,
        run: &RunRecord,
        spool: SampleSpool,
        mut relabel: impl FnMut(SampleRecord) -> Option<SampleRecord>,
    ) -> Result<i64> {
        let SampleSpool {
            store,
            run_id: provisional,
            next_block: spooled_blocks,
        } = spool;
        drop(store);
        let Store { conn, path } = self;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite_err(path, "starting to insert a run"))?;
        let stored = (|| {
            let run_id = insert_run_but_samples(&tx, run, path)?;
            let mut block = 0;
            for spooled in 0..spooled_blocks {
                let samples: Vec<SampleRecord> =
                    sample_blocks::load_block(&tx, path, provisional, spooled)?
                        .into_iter()
                        .filter_map(&mut relabel)
                        .collect();
                block = sample_blocks::insert(&tx, run_id, block, &samples)
                    .map_err(sqlite_err(path, "inserting a run (spooled samples)"))?;
            }
            sample_blocks::insert(&tx, run_id, block, &run.samples)
                .map_err(sqlite_err(path, "inserting a run (samples)"))?;
            tx.execute("DELETE FROM runs WHERE id = ?1", [provisional])
                .map_err(sqlite_err(path, "removing the spool's provisional run"))?;
            tx.commit()
                .map_err(sqlite_err(path, "committing an inserted run"))?;
            Ok(run_id)
        })();
        stored.map_err(|e| with_os_cause(conn, e))
    }
}
