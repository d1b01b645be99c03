//! Experiments (`tcplab sweep`): the file a sweep was planned from, its points, and the
//! plan — every run to do in its shuffled order, with its state. A run and the plan row
//! it fulfils are written in one transaction, so a sweep killed at any moment loses at
//! most the run in progress and never counts one twice.

use rusqlite::{OptionalExtension, TransactionBehavior};
use tcplab_model::experiment::{Axis, Experiment, PlannedRun, Point};
use tcplab_record::RunRecord;

use crate::rows::{int, opt_text, real, text};
use crate::{insert_named, insert_run_in, json_err, sqlite_err, Result, Store, StoreError};

/// One stored experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct ExperimentRow {
    pub id: i64,
    pub name: String,
    /// The experiment file as the user named it, and its text when planned.
    pub file: String,
    pub spec_text: String,
    pub plan_hash: String,
    pub seed: u64,
    pub repetitions: u32,
    pub confidence: f64,
    pub axes: Vec<Axis>,
    pub created_unix_us: i64,
}

/// Where one planned run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanStatus {
    /// Not run yet, or interrupted: the next sweep runs it.
    Pending,
    Done,
    /// Ran and failed; `--retry-failed` runs it again.
    Failed,
}

impl PlanStatus {
    fn name(self) -> &'static str {
        match self {
            PlanStatus::Pending => "pending",
            PlanStatus::Done => "done",
            PlanStatus::Failed => "failed",
        }
    }

    fn from_name(name: &str) -> Option<PlanStatus> {
        [PlanStatus::Pending, PlanStatus::Done, PlanStatus::Failed]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// One row of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanRow {
    /// Position in the shuffled order, 0-based.
    pub seq: u32,
    pub run: PlannedRun,
    pub status: PlanStatus,
    /// The stored run (done, or a failed run that got as far as measuring).
    pub run_id: Option<i64>,
    pub error: Option<String>,
    pub attempts: u32,
}

/// How a planned run ended.
pub enum Outcome<'a> {
    /// Measured to its end.
    Done(&'a RunRecord),
    /// Failed: the record when the test got far enough to produce one, and why.
    Failed(Option<&'a RunRecord>, &'a str),
    /// Cut short by the user: what it measured is kept, and it stays to be run again.
    Interrupted(&'a RunRecord),
}

impl<'a> Outcome<'a> {
    /// The run's record, when the test got as far as one.
    pub fn run(&self) -> Option<&'a RunRecord> {
        match *self {
            Outcome::Done(run) | Outcome::Interrupted(run) => Some(run),
            Outcome::Failed(run, _) => run,
        }
    }
}

impl Store {
    /// Stores a newly planned experiment: its file, points and the plan in `schedule`
    /// order, all pending. Returns its id.
    pub fn create_experiment(
        &mut self,
        experiment: &Experiment,
        file: &str,
        spec_text: &str,
        seed: u64,
        schedule: &[PlannedRun],
    ) -> Result<i64> {
        let path = self.path.clone();
        let err = |op| sqlite_err(&path, op);
        let json = |v: serde_json::Result<String>| {
            v.map(rusqlite::types::Value::Text)
                .map_err(json_err(&path, "encoding an experiment"))
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("starting to store an experiment"))?;
        let id = insert_named(
            &tx,
            "experiments",
            &vec![
                ("name", text(&experiment.name)),
                ("file", text(file)),
                ("spec_text", text(spec_text)),
                ("plan_hash", text(&experiment.plan_hash())),
                ("seed", int(seed)),
                ("repetitions", int(experiment.repetitions)),
                ("confidence", real(experiment.confidence)),
                ("axes_json", json(serde_json::to_string(&experiment.axes))?),
                ("created_unix_us", int(now_unix_us())),
            ],
        )
        .map_err(err("storing an experiment"))?;
        for point in &experiment.points {
            insert_named(
                &tx,
                "points",
                &vec![
                    ("experiment_id", int(id)),
                    ("point", int(point.index)),
                    ("values_json", json(serde_json::to_string(&point.values))?),
                    ("config_json", json(serde_json::to_string(&point.config))?),
                ],
            )
            .map_err(err("storing an experiment's points"))?;
        }
        for (seq, run) in schedule.iter().enumerate() {
            insert_named(
                &tx,
                "plan",
                &vec![
                    ("experiment_id", int(id)),
                    ("seq", int(seq as u32)),
                    ("point", int(run.point)),
                    ("repetition", int(run.repetition)),
                ],
            )
            .map_err(err("storing an experiment's plan"))?;
        }
        tx.commit().map_err(err("committing an experiment"))?;
        Ok(id)
    }

    /// Every experiment, oldest first.
    pub fn experiments(&self) -> Result<Vec<ExperimentRow>> {
        let path = &self.path;
        let err = || sqlite_err(path, "listing experiments");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, name, file, spec_text, plan_hash, seed, repetitions, confidence,
                        axes_json, created_unix_us FROM experiments ORDER BY id",
            )
            .map_err(err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    ExperimentRow {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        file: r.get(2)?,
                        spec_text: r.get(3)?,
                        plan_hash: r.get(4)?,
                        seed: r.get::<_, i64>(5)? as u64,
                        repetitions: r.get(6)?,
                        confidence: r.get(7)?,
                        axes: Vec::new(),
                        created_unix_us: r.get(9)?,
                    },
                    r.get::<_, String>(8)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(err())?;
        rows.into_iter()
            .map(|(mut row, axes)| {
                row.axes = serde_json::from_str(&axes).map_err(json_err(path, "reading axes"))?;
                Ok(row)
            })
            .collect()
    }

    /// An experiment's points, in index order.
    pub fn points(&self, experiment_id: i64) -> Result<Vec<Point>> {
        let path = &self.path;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT point, values_json, config_json FROM points
                 WHERE experiment_id = ?1 ORDER BY point",
            )
            .map_err(sqlite_err(path, "reading points"))?;
        let rows = stmt
            .query_map([experiment_id], |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sqlite_err(path, "reading points"))?;
        rows.into_iter()
            .map(|(index, values, config)| {
                let read = |_| json_err(path, "reading a point");
                Ok(Point {
                    index,
                    values: serde_json::from_str(&values).map_err(read(()))?,
                    config: serde_json::from_str(&config).map_err(read(()))?,
                })
            })
            .collect()
    }

    /// An experiment's plan, in run order.
    pub fn plan(&self, experiment_id: i64) -> Result<Vec<PlanRow>> {
        let path = &self.path;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, point, repetition, status, run_id, error, attempts FROM plan
                 WHERE experiment_id = ?1 ORDER BY seq",
            )
            .map_err(sqlite_err(path, "reading the plan"))?;
        let rows = stmt
            .query_map([experiment_id], |r| {
                Ok((
                    PlanRow {
                        seq: r.get(0)?,
                        run: PlannedRun {
                            point: r.get(1)?,
                            repetition: r.get(2)?,
                        },
                        status: PlanStatus::Pending,
                        run_id: r.get(4)?,
                        error: r.get(5)?,
                        attempts: r.get(6)?,
                    },
                    r.get::<_, String>(3)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sqlite_err(path, "reading the plan"))?;
        rows.into_iter()
            .map(|(mut row, status)| {
                row.status = PlanStatus::from_name(&status).ok_or_else(|| StoreError::Schema {
                    path: path.clone(),
                    detail: format!("plan row {}: unknown status '{status}'", row.seq),
                })?;
                Ok(row)
            })
            .collect()
    }

    /// Records how planned run `seq` ended, with its run (if any), in one transaction.
    /// Returns the stored run's id.
    pub fn finish_planned_run(
        &mut self,
        experiment_id: i64,
        seq: u32,
        outcome: Outcome<'_>,
    ) -> Result<Option<i64>> {
        let path = self.path.clone();
        let err = |op| sqlite_err(&path, op);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("starting to record a planned run"))?;
        let (point, repetition): (u32, u32) = tx
            .query_row(
                "SELECT point, repetition FROM plan WHERE experiment_id = ?1 AND seq = ?2",
                [experiment_id, i64::from(seq)],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(err("finding a planned run"))?
            .ok_or_else(|| StoreError::Schema {
                path: path.clone(),
                detail: format!("experiment {experiment_id} has no planned run {seq}"),
            })?;
        let (status, error) = match outcome {
            Outcome::Done(_) => (PlanStatus::Done, None),
            Outcome::Failed(_, error) => (PlanStatus::Failed, Some(error)),
            Outcome::Interrupted(_) => (PlanStatus::Pending, None),
        };
        let run_id = match outcome.run() {
            Some(run) => {
                let id = insert_run_in(&tx, run, &path)?;
                tx.execute(
                    "UPDATE runs SET experiment_id = ?1, point = ?2, repetition = ?3 WHERE id = ?4",
                    [experiment_id, i64::from(point), i64::from(repetition), id],
                )
                .map_err(err("linking a run to its point"))?;
                Some(id)
            }
            None => None,
        };
        tx.execute(
            "UPDATE plan SET status = ?1, run_id = coalesce(?2, run_id), error = ?3,
                    attempts = attempts + 1
             WHERE experiment_id = ?4 AND seq = ?5",
            rusqlite::params![status.name(), run_id, opt_text(error), experiment_id, seq],
        )
        .map_err(err("recording a planned run"))?;
        tx.commit().map_err(err("committing a planned run"))?;
        Ok(run_id)
    }

    /// Makes an experiment's failed runs pending again; returns how many.
    pub fn retry_failed(&mut self, experiment_id: i64) -> Result<usize> {
        self.conn
            .execute(
                "UPDATE plan SET status = 'pending' WHERE experiment_id = ?1 AND status = 'failed'",
                [experiment_id],
            )
            .map_err(sqlite_err(&self.path, "marking failed runs for a retry"))
    }
}

fn now_unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}
