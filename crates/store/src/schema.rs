//! The schema: the ordered list of migrations.
//!
//! Migration `n` (1-based) brings a database from `user_version = n - 1` to `n`. A
//! migration's SQL is history: once released it must never change, because databases
//! already at that version will not run it again. Change the schema by appending a step.

use std::path::Path;

use crate::columns::{SAMPLE_SKMEM_COLUMNS, TCP_INFO_COLUMNS};
use crate::error::Result;
use rusqlite::Transaction;

/// One migration: SQL, or code where SQL cannot express the change.
pub(crate) enum Migration {
    /// Produces the SQL, run as one batch.
    Sql(fn() -> String),
    /// Runs inside the migration's transaction.
    Code(fn(&Transaction<'_>, &Path) -> Result<()>),
}

/// The migrations in order: `MIGRATIONS[n - 1]` is migration `n`.
pub(crate) static MIGRATIONS: &[Migration] = &[
    Migration::Sql(migration_1),
    Migration::Sql(migration_2),
    Migration::Sql(migration_3),
    Migration::Sql(migration_4),
    Migration::Sql(migration_5),
    Migration::Sql(migration_6),
    Migration::Sql(migration_7),
    Migration::Sql(migration_8),
    Migration::Sql(migration_9),
    Migration::Code(crate::legacy_samples::migration_10),
    Migration::Sql(migration_11),
    Migration::Sql(migration_12),
];

/// The schema version this build writes (`PRAGMA user_version` after all migrations).
pub const SCHEMA_VERSION: i64 = 12;

/// Migration 2: runs through an emulated path record it, and flows their client host.
fn migration_2() -> String {
    r#"
ALTER TABLE runs ADD COLUMN path_spec TEXT;
ALTER TABLE runs ADD COLUMN path_json TEXT;
ALTER TABLE flows ADD COLUMN host TEXT;
"#
    .to_string()
}

/// Migration 3: experiments (`tcplab sweep`): the file, its points, the shuffled plan of
/// runs with each one's state, and the link from a run to its point and repetition.
fn migration_3() -> String {
    r#"
CREATE TABLE experiments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    file TEXT NOT NULL,
    spec_text TEXT NOT NULL,
    plan_hash TEXT NOT NULL,
    seed INTEGER NOT NULL,
    repetitions INTEGER NOT NULL,
    confidence REAL NOT NULL,
    axes_json TEXT NOT NULL,
    created_unix_us INTEGER NOT NULL
);
CREATE TABLE points (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    point INTEGER NOT NULL,
    values_json TEXT NOT NULL,
    config_json TEXT NOT NULL,
    PRIMARY KEY (experiment_id, point)
);
CREATE TABLE plan (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    point INTEGER NOT NULL,
    repetition INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (experiment_id, seq),
    UNIQUE (experiment_id, point, repetition),
    FOREIGN KEY (experiment_id, point) REFERENCES points(experiment_id, point)
);
ALTER TABLE runs ADD COLUMN experiment_id INTEGER REFERENCES experiments(id);
ALTER TABLE runs ADD COLUMN point INTEGER;
ALTER TABLE runs ADD COLUMN repetition INTEGER;
"#
    .to_string()
}

/// Migration 4: UDP flows' datagram statistics (JSON `UdpStats` / `UdpInterval`).
fn migration_4() -> String {
    r#"
ALTER TABLE runs ADD COLUMN udp_json TEXT;
ALTER TABLE flows ADD COLUMN udp_json TEXT;
ALTER TABLE intervals ADD COLUMN udp_json TEXT;
"#
    .to_string()
}

/// Migration 5: limits from the samples: a `pacing` share, the kernel's own chrono
/// shares of each flow as a cross-check, and each sample's socket memory (SO_MEMINFO).
///
/// `runs.dominant_limit` may now be `pacing`. Widening a CHECK constraint changes no
/// stored row, so the table's definition is edited in place (SQLite's documented way
/// to change constraints, "ALTER TABLE", section 7): rebuilding `runs` instead would
/// cascade the deletion of every flow, interval and sample.
fn migration_5() -> String {
    let skmem: String = SAMPLE_SKMEM_COLUMNS
        .iter()
        .map(|c| format!("ALTER TABLE samples ADD COLUMN {c} INTEGER;\n"))
        .collect();
    format!(
        r#"
ALTER TABLE runs ADD COLUMN limit_pacing REAL DEFAULT 0;
ALTER TABLE flows ADD COLUMN limit_pacing REAL DEFAULT 0;
ALTER TABLE intervals ADD COLUMN limit_pacing REAL DEFAULT 0;
ALTER TABLE flows ADD COLUMN kernel_limit_rwnd REAL DEFAULT 0;
ALTER TABLE flows ADD COLUMN kernel_limit_sndbuf REAL DEFAULT 0;
ALTER TABLE flows ADD COLUMN kernel_limit_cwnd REAL DEFAULT 0;
ALTER TABLE flows ADD COLUMN kernel_limit_app REAL DEFAULT 0;
{skmem}PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql,
       'dominant_limit IN (''rwnd'', ''sndbuf'', ''cwnd'', ''app'')',
       'dominant_limit IN (''rwnd'', ''sndbuf'', ''cwnd'', ''pacing'', ''app'')')
 WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = RESET;
"#
    )
}

/// Migration 6: a run's throughput over one window (its length), a timed flow's part up
/// to its deadline and its drain (JSON `Timed`), and the intervals of the drain.
fn migration_6() -> String {
    r#"
ALTER TABLE runs ADD COLUMN window_seconds REAL;
ALTER TABLE flows ADD COLUMN timed_json TEXT;
ALTER TABLE intervals ADD COLUMN drain INTEGER NOT NULL DEFAULT 0;
"#
    .to_string()
}

/// Migration 7: the kernel's events of a run's sockets (`--trace-events`) and whether
/// they were taken (JSON `TraceRecord`).
fn migration_7() -> String {
    r#"
ALTER TABLE runs ADD COLUMN trace_json TEXT;
CREATE TABLE events (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    flow INTEGER NOT NULL,
    host TEXT NOT NULL CHECK (host IN ('client', 'server')),
    t_us INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('probe', 'retransmit', 'cong_state', 'rcvbuf_grow')),
    data_len INTEGER,
    snd_nxt INTEGER,
    snd_una INTEGER,
    snd_cwnd INTEGER,
    ssthresh INTEGER,
    snd_wnd INTEGER,
    srtt_us INTEGER,
    rcv_wnd INTEGER,
    state TEXT,
    rcvbuf INTEGER,
    rcv_ssthresh INTEGER,
    window_clamp INTEGER
);
CREATE INDEX events_run_t ON events (run_id, t_us);
"#
    .to_string()
}

/// Migration 8: a run's round-trip probes (`--probe`) and their figures (JSON
/// `LatencySummary`).
fn migration_8() -> String {
    r#"
ALTER TABLE runs ADD COLUMN latency_json TEXT;
CREATE TABLE probes (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    scheduled_us INTEGER NOT NULL,
    sent_us INTEGER NOT NULL,
    rtt_us INTEGER,
    up_owd_us INTEGER,
    down_owd_us INTEGER
);
CREATE INDEX probes_run_seq ON probes (run_id, seq);
"#
    .to_string()
}

/// Migration 9: request/response transactions (`--rr`): a run's and each flow's figures
/// (JSON `TransactionStats`).
fn migration_9() -> String {
    r#"
ALTER TABLE runs ADD COLUMN transactions_json TEXT;
ALTER TABLE flows ADD COLUMN transactions_json TEXT;
"#
    .to_string()
}

/// Migration 11: runs of kind `watch` (`tcplab watch`): what was watched (JSON
/// `WatchRecord`), and each watched connection's socket, process, times and final
/// counters (JSON `WatchedFlow`).
fn migration_11() -> String {
    r#"
ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'test' CHECK (kind IN ('test', 'watch'));
ALTER TABLE runs ADD COLUMN watch_json TEXT;
ALTER TABLE flows ADD COLUMN watched_json TEXT;
"#
    .to_string()
}

/// Migration 12: each flow's `[[flow]]` of its experiment file, by name.
fn migration_12() -> String {
    "ALTER TABLE flows ADD COLUMN name TEXT;".to_string()
}

const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION);

/// Migration 1: the initial schema. See SCHEMA.md for the meaning and unit of every column.
///
/// The `samples` column list comes from [`TCP_INFO_COLUMNS`] as it was at version 1; the
/// test `migration_1_sample_columns_are_frozen` pins it. A `TcpInfo` field added later
/// goes at the end of `TCP_INFO_COLUMNS` *and* gets a new migration
/// (`ALTER TABLE samples ADD COLUMN <name> INTEGER NOT NULL DEFAULT 0`); this function
/// must then keep producing the version-1 list (take the first 63 columns).
fn migration_1() -> String {
    let info_columns: String = TCP_INFO_COLUMNS
        .iter()
        .map(|c| format!("    \"{}\" INTEGER NOT NULL,\n", c.name))
        .collect();
    format!(
        r#"
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    schema TEXT NOT NULL,
    tool_version TEXT NOT NULL,
    label TEXT,
    tags TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL CHECK (status IN ('running', 'done', 'incomplete', 'failed')),
    error TEXT,
    started_unix_us INTEGER NOT NULL,
    target TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('up', 'down', 'bidir')),
    streams INTEGER NOT NULL,
    end_kind TEXT NOT NULL CHECK (end_kind IN ('duration', 'bytes')),
    end_value INTEGER NOT NULL,
    sample_interval_us INTEGER NOT NULL,
    report_interval_us INTEGER NOT NULL,
    params_json TEXT NOT NULL,
    client_meta_json TEXT NOT NULL,
    server_meta_json TEXT NOT NULL,
    clock_offset_us INTEGER NOT NULL,
    clock_uncertainty_us INTEGER NOT NULL,
    sent_bytes INTEGER,
    received_bytes INTEGER,
    sent_bps REAL,
    received_bps REAL,
    retransmits INTEGER,
    rtt_min_us INTEGER,
    rtt_mean_us REAL,
    rtt_max_us INTEGER,
    limit_rwnd REAL,
    limit_sndbuf REAL,
    limit_cwnd REAL,
    limit_app REAL,
    dominant_limit TEXT CHECK (dominant_limit IN ('rwnd', 'sndbuf', 'cwnd', 'app')),
    cpu_client_user_pct REAL,
    cpu_client_system_pct REAL,
    cpu_client_total_pct REAL,
    cpu_server_user_pct REAL,
    cpu_server_system_pct REAL,
    cpu_server_total_pct REAL
);
CREATE INDEX runs_started ON runs (started_unix_us);

CREATE TABLE flows (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    flow INTEGER NOT NULL,
    direction TEXT NOT NULL CHECK (direction IN ('up', 'down')),
    client_addr TEXT NOT NULL,
    server_addr TEXT NOT NULL,
    cc TEXT NOT NULL,
    mss INTEGER NOT NULL,
    sndbuf_requested INTEGER,
    sndbuf_effective INTEGER NOT NULL,
    sndbuf_capped_at INTEGER,
    sndbuf_at_end INTEGER NOT NULL,
    rcvbuf_requested INTEGER,
    rcvbuf_effective INTEGER NOT NULL,
    rcvbuf_capped_at INTEGER,
    rcvbuf_at_end INTEGER NOT NULL,
    sent_bytes INTEGER NOT NULL,
    received_bytes INTEGER NOT NULL,
    sent_bps REAL,
    received_bps REAL,
    sender_seconds REAL,
    receiver_seconds REAL,
    retransmits INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    receiver_samples INTEGER NOT NULL,
    limit_rwnd REAL,
    limit_sndbuf REAL,
    limit_cwnd REAL,
    limit_app REAL,
    rtt_min_us INTEGER NOT NULL,
    rtt_mean_us REAL,
    rtt_max_us INTEGER NOT NULL,
    PRIMARY KEY (run_id, flow)
);

CREATE TABLE intervals (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    flow INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    start_us INTEGER NOT NULL,
    end_us INTEGER NOT NULL,
    acked_bytes INTEGER NOT NULL,
    received_bytes INTEGER NOT NULL,
    retransmits INTEGER NOT NULL,
    cwnd INTEGER NOT NULL,
    srtt_us INTEGER NOT NULL,
    limit_rwnd REAL,
    limit_sndbuf REAL,
    limit_cwnd REAL,
    limit_app REAL,
    PRIMARY KEY (run_id, flow, idx)
);

CREATE TABLE samples (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    flow INTEGER NOT NULL,
    host TEXT NOT NULL CHECK (host IN ('client', 'server')),
    t_us INTEGER NOT NULL,
{info_columns}    bbr_bw INTEGER,
    bbr_min_rtt INTEGER,
    bbr_pacing_gain INTEGER,
    bbr_cwnd_gain INTEGER,
    CHECK ((bbr_bw IS NULL) = (bbr_min_rtt IS NULL)
       AND (bbr_bw IS NULL) = (bbr_pacing_gain IS NULL)
       AND (bbr_bw IS NULL) = (bbr_cwnd_gain IS NULL))
);
CREATE INDEX samples_run_flow_t ON samples (run_id, flow, t_us);
"#
    )
}
