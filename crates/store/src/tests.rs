//! Tests of the store against files in temporary directories.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{json, Value as Json};
use tcplab_record::events::{CaState, EventRecord, KernelEvent, TraceRecord};
use tcplab_record::tcpinfo::{BbrInfo, SkMemInfo, TcpInfo};
use tcplab_record::{
    BufferSize, ClockOffset, CpuUse, Direction, FlowRecord, Host, HostMeta, IntervalRecord,
    LatencySummary, Limit, LimitShares, Mode, ProbeParams, ProbeRecord, Quantiles, RttStats,
    RunRecord, RunStatus, SampleRecord, SendMethod, Summary, TestEnd, TestParams, Timed,
    TransactionStats, Tuning, UdpInterval, UdpStats, SCHEMA,
};

use super::*;

// ---------------------------------------------------------------------------------------
// Fixtures

/// A `TcpInfo` whose every field has a different value, derived from `seed`, so a column
/// mapped to the wrong field shows up. Built through serde, independently of the store's
/// column table. Includes values that exercise the u64 convention.
fn tcp_info(seed: u64) -> TcpInfo {
    let Json::Object(mut fields) = serde_json::to_value(TcpInfo::default()).unwrap() else {
        panic!("TcpInfo is not an object");
    };
    for (i, (_, v)) in fields.iter_mut().enumerate() {
        *v = match v {
            Json::Bool(_) => Json::Bool((seed + i as u64) % 2 == 1),
            // Fits u8, the narrowest integer field.
            _ => json!((seed * 7 + i as u64) % 250 + 1),
        };
    }
    let mut info: TcpInfo = serde_json::from_value(Json::Object(fields)).unwrap();
    info.valid_len = 280;
    info.max_pacing_rate = u64::MAX; // the kernel's "no limit"
    info.bytes_acked = (1 << 40) + seed; // beyond u32
    info.pacing_rate = i64::MAX as u64 + 1 + seed; // beyond i64: stored wrapped
    info.total_rto = u16::MAX;
    info.snd_cwnd = u32::MAX - seed as u32;
    info
}

fn limits(a: f64) -> LimitShares {
    LimitShares {
        rwnd: a,
        sndbuf: 0.125,
        cwnd: 0.625 - a,
        pacing: 0.125,
        app: 0.125,
    }
}

fn flow(id: u32, direction: Direction) -> FlowRecord {
    FlowRecord {
        id,
        host: (id % 2 == 1).then(|| format!("client{id}")),
        name: id.is_multiple_of(2).then(|| format!("bulk{id}")),
        direction,
        client_addr: format!("10.0.0.1:{}", 40000 + id),
        server_addr: "10.0.0.2:5201".into(),
        cc: if id == 0 { "bbr" } else { "cubic" }.into(),
        mss: 1448,
        sndbuf: BufferSize {
            requested: Some(4 << 20),
            effective: 8 << 20,
            capped_at: Some(6 << 20),
            at_end: 8 << 20,
        },
        rcvbuf: BufferSize {
            requested: None,
            effective: 131_072,
            capped_at: None,
            at_end: 6_291_456,
        },
        sent_bytes: 1_250_000_000 + u64::from(id),
        received_bytes: 1_249_999_000 + u64::from(id),
        sent_bps: 9.41e9 + f64::from(id),
        received_bps: 9.40e9,
        sender_seconds: 10.0625,
        receiver_seconds: 10.001,
        retransmits: 17 + u64::from(id),
        samples: 1000,
        receiver_samples: 999,
        limits: limits(0.25),
        kernel_limits: LimitShares {
            pacing: 0.0,
            app: 0.25,
            ..limits(0.125)
        },
        rtt: RttStats {
            min_us: 120,
            mean_us: 345.5,
            max_us: 9000 + id,
        },
        // Flow 1 stands in for a UDP flow: its stats must round-trip.
        udp: (id == 1).then(udp_stats),
        // Flow 0 a timed TCP flow, its drain cut short.
        timed: (id == 0).then_some(Timed {
            seconds: 10.0,
            acked_bytes: 1_200_000_000,
            received_bytes: 1_199_000_000,
            received_seconds: 10.0125,
            drain_seconds: 0.0625,
            unacked_bytes: 1448,
        }),
        transactions: Some(TransactionStats {
            count: 410,
            per_second: 41.0,
            latency_us: udp_stats().owd_us,
        }),
        watched: None,
    }
}

fn udp_stats() -> UdpStats {
    UdpStats {
        sent: 85_000,
        received: 84_900,
        lost: 100,
        duplicates: 2,
        out_of_order: 7,
        jitter_us: 12.25,
        owd_us: Quantiles {
            min: 10_000.0,
            p50: 10_050.0,
            p90: 10_200.0,
            p99: 10_400.0,
            max: 11_000.0,
        },
        owd_exact: true,
        clock_step_us: 2.0,
        send_errors: 3,
        socket_drops: 1,
        late: 0,
        unsent: 7,
    }
}

/// A complete run with two flows (one each way), interleaved intervals and `n_samples`
/// samples interleaved across flows and hosts, BBR info on flow 0's samples only.
fn sample_record(n_samples: usize) -> RunRecord {
    let flows = vec![flow(0, Direction::Up), flow(1, Direction::Down)];
    let mut intervals = Vec::new();
    for index in 0..3u32 {
        for f in 0..2u32 {
            intervals.push(IntervalRecord {
                flow: f,
                index,
                start_us: u64::from(index) * 1_000_000,
                end_us: u64::from(index + 1) * 1_000_000,
                acked_bytes: 117_000_000 + u64::from(index * 10 + f),
                received_bytes: 116_000_000 + u64::from(index),
                retransmits: u64::from(index),
                cwnd: 300 + index,
                srtt_us: 410 + f,
                limits: limits(0.5),
                udp: (f == 1).then_some(UdpInterval {
                    sent: 8500,
                    received: 8490 + u64::from(index),
                    lost: 10,
                    out_of_order: 1,
                    jitter_us: 3.5,
                }),
                drain: index == 2 && f == 0,
            });
        }
    }
    let samples = (0..n_samples)
        .map(|i| {
            let flow = (i % 2) as u32;
            SampleRecord {
                flow,
                host: if i % 3 == 0 {
                    Host::Server
                } else {
                    Host::Client
                },
                t_us: i as i64 * 10_000 - 5, // the first is before t0
                info: tcp_info(i as u64),
                bbr: (flow == 0).then_some(BbrInfo {
                    bw: 1_200_000_000 + i as u64,
                    min_rtt: 118,
                    pacing_gain: 320,
                    cwnd_gain: 512,
                }),
                skmem: (i % 2 == 0).then_some(SkMemInfo {
                    rmem_alloc: i as u32,
                    rcvbuf: 131_072,
                    wmem_alloc: 1,
                    sndbuf: u32::MAX,
                    fwd_alloc: 2,
                    wmem_queued: 131_984,
                    optmem: 3,
                    backlog: 4,
                    drops: 5,
                }),
            }
        })
        .collect();
    RunRecord {
        schema: SCHEMA.into(),
        tool_version: "0.1.0".into(),
        label: Some("bbr vs cubic, 10 ms".into()),
        tags: vec!["sweep-a".into(), "with \"quotes\", commas".into()],
        status: RunStatus::Done,
        error: None,
        started_unix_us: 1_795_000_000_123_456,
        target: "10.0.0.2".into(),
        params: TestParams {
            streams: 1,
            end: TestEnd::Duration { us: 10_000_000 },
            mode: Mode::Bidir,
            tuning: Tuning {
                sndbuf: Some(4 << 20),
                rcvbuf: None,
                write_size: 131_072,
                read_size: 131_072,
                nodelay: false,
                mss: None,
                cc: Some("bbr".into()),
                pacing_rate: Some(u64::MAX),
                send_method: SendMethod::Sendfile,
                app_rate: Some(500_000_000),
                ecn: true,
            },
            sample_interval_us: 10_000,
            report_interval_us: 1_000_000,
            udp: None,
            probe: Some(ProbeParams {
                interval_us: 10_000,
                idle_us: 2_000_000,
            }),
            transactions: None,
        },
        client: HostMeta {
            hostname: "alpha".into(),
            kernel: "6.8.0-45-generic".into(),
            sysctls: BTreeMap::from([("net.ipv4.tcp_wmem".into(), "4096 16384 4194304".into())]),
            boot_id: "3f1c".into(),
            rate_cap_bps: None,
        },
        server: HostMeta {
            hostname: "beta".into(),
            kernel: "6.1.0".into(),
            sysctls: BTreeMap::new(),
            boot_id: String::new(),
            rate_cap_bps: Some(1_000_000_000),
        },
        clock: ClockOffset {
            offset_us: -1234,
            uncertainty_us: 56,
        },
        summary: Summary {
            sent_bytes: 2_500_000_001,
            received_bytes: 2_499_998_001,
            sent_bps: 1.882e10,
            received_bps: 1.88e10,
            window_seconds: 10.0625,
            retransmits: 35,
            rtt: RttStats {
                min_us: 120,
                mean_us: 345.5,
                max_us: 9001,
            },
            limits: limits(0.3),
            dominant_limit: Some(Limit::Cwnd),
            cpu_client: CpuUse {
                user_pct: 1.5,
                system_pct: 38.25,
                total_pct: 39.75,
            },
            cpu_server: CpuUse {
                user_pct: 2.0,
                system_pct: 45.0,
                total_pct: 47.0,
            },
            udp: Some(udp_stats()),
            latency: Some(LatencySummary {
                interval_us: 10_000,
                sent: 3,
                idle_rtt_us: Some(Quantiles {
                    min: 20_100.0,
                    p50: 20_100.0,
                    p90: 20_100.0,
                    p99: 20_100.0,
                    max: 20_100.0,
                }),
                loaded_rtt_us: None,
                up_owd_us: None,
                down_owd_us: None,
                owd_exact: true,
                lost_up: 1,
                lost_down: 1,
                rpm: Some(2985.07),
                send_error_us: udp_stats().owd_us,
            }),
            transactions: Some(TransactionStats {
                count: 820,
                per_second: 82.0,
                latency_us: udp_stats().owd_us,
            }),
        },
        flows,
        intervals,
        path: Some(tcplab_record::PathRecord {
            spec: "rtt 20ms rate 100mbit up.queue 1bdp seed 5".into(),
            access: vec![String::new()],
            up: tcplab_record::DirectionStats {
                per_packet: true,
                lateness: tcplab_record::Lateness {
                    packets: 9,
                    p50_us: 1.5,
                    p99_us: 20.0,
                    max_us: 31.0,
                },
                links: vec![tcplab_record::NamedCounters {
                    name: "bottleneck".into(),
                    counters: tcplab_record::link::LinkCounters {
                        packets_in: 900,
                        dropped_queue: 12,
                        ..Default::default()
                    },
                    control: Some(tcplab_record::link::LinkCounters {
                        packets_in: 40,
                        dropped_queue: 3,
                        ..Default::default()
                    }),
                    probe: None,
                    flows: vec![tcplab_record::HopFlow {
                        flow: "tcp 10.77.0.1:40000 > 10.77.0.2:5201".into(),
                        packets: 880,
                        dropped: 12,
                        queue_delay_mean_us: 1250.5,
                        queue_delay_max_us: 4000.0,
                        delay_mean_us: 11_250.5,
                        delay_max_us: 14_000.0,
                    }],
                    queue: vec![tcplab_record::QueueSample {
                        t_us: 10_000,
                        bytes: 15_000,
                    }],
                    bursts: vec![tcplab_record::BurstStats {
                        flow: "tcp 10.77.0.1:40000 > 10.77.0.2:5201".into(),
                        packets: 880,
                        bursts: 440,
                        burst_mean: 2.0,
                        burst_p99: 4.0,
                        burst_max: 5,
                        ..Default::default()
                    }],
                }],
                ..Default::default()
            },
            down: Default::default(),
            epoch_unix_us: 1_795_000_000_000_000,
            test_start_us: Some(412_000),
            bdp: Some(tcplab_record::BdpSizing {
                rtt_us: 20_000,
                client: 1,
                up_bytes: Some(250_000),
                down_bytes: None,
            }),
            capture_file: Some("/tmp/run.pcapng".into()),
            capture_at: tcplab_record::capture::CapturePoint::Client,
            topology: Some(tcplab_record::topology::TopologyRecord {
                file: "chain.toml".into(),
                seed: 7,
                hosts: vec!["a".into(), "b".into()],
                links: vec![tcplab_record::topology::TopologyLink {
                    name: "l1".into(),
                    between: ["a".into(), "b".into()],
                    path: "rtt 2ms".into(),
                }],
                routes: vec![tcplab_record::topology::TopologyRoute {
                    from: "a".into(),
                    to: "b".into(),
                    hops: vec!["l1 a→b".into()],
                }],
            }),
        }),
        samples,
        trace: Some(TraceRecord {
            taken: true,
            note: None,
            events: 4,
            lost: 2,
        }),
        // One of each kind, both ends.
        events: vec![
            EventRecord {
                flow: 0,
                host: Host::Client,
                t_us: -150,
                event: KernelEvent::Probe {
                    data_len: 0,
                    snd_nxt: u32::MAX,
                    snd_una: 7,
                    snd_cwnd: 10,
                    ssthresh: 2_147_483_647,
                    snd_wnd: 64_256,
                    srtt_us: 20_154,
                    rcv_wnd: 65_280,
                },
            },
            EventRecord {
                flow: 1,
                host: Host::Client,
                t_us: 10_000,
                event: KernelEvent::Retransmit,
            },
            EventRecord {
                flow: 1,
                host: Host::Client,
                t_us: 10_001,
                event: KernelEvent::CongState {
                    state: CaState::Recovery,
                },
            },
            EventRecord {
                flow: 0,
                host: Host::Server,
                t_us: 20_000,
                event: KernelEvent::RcvbufGrow {
                    rcvbuf: 262_144,
                    rcv_ssthresh: 131_072,
                    window_clamp: 196_608,
                    rcv_wnd: 131_072,
                },
            },
        ],
        // Idle and answered, loaded and lost on the way down, never answered.
        probes: vec![
            ProbeRecord {
                seq: 0,
                scheduled_us: -2_000_000,
                sent_us: -1_999_950,
                rtt_us: Some(20_100),
                up_owd_us: Some(10_000),
                down_owd_us: Some(10_100),
            },
            ProbeRecord {
                seq: 1,
                scheduled_us: 0,
                sent_us: 12,
                ..ProbeRecord::default()
            },
            ProbeRecord {
                seq: 2,
                scheduled_us: 10_000,
                sent_us: 10_040,
                ..ProbeRecord::default()
            },
        ],
        watch: None,
    }
}

/// A failed run: every Option empty, nothing measured.
fn failed_record() -> RunRecord {
    let mut r = sample_record(0);
    r.label = None;
    r.tags = Vec::new();
    r.status = RunStatus::Failed;
    r.error = Some("connect: connection refused".into());
    (r.trace, r.events, r.probes) = (None, Vec::new(), Vec::new());
    r.params.end = TestEnd::Bytes { bytes: 1 << 30 };
    r.params.mode = Mode::Up;
    r.summary = Summary::default();
    r.flows.clear();
    r.intervals.clear();
    r.path = None;
    r
}

fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("lab.db")).unwrap();
    (dir, store)
}

fn count(store: &Store, sql: &str) -> i64 {
    store.conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

// ---------------------------------------------------------------------------------------
// Opening and migrating

#[test]
fn migration_from_empty_sets_user_version() {
    let (_dir, store) = temp_store();
    assert_eq!(user_version(&store.conn).unwrap(), SCHEMA_VERSION);
    for table in Table::ALL {
        // The samples are exported as a table and stored in blocks.
        let stored = match table {
            Table::Samples => "sample_blocks",
            other => other.name(),
        };
        let n = count(
            &store,
            &format!(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '{stored}'"
            ),
        );
        assert_eq!(n, 1, "table {table}");
    }
    let mode: String = store
        .conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(count(&store, "PRAGMA foreign_keys"), 1);
    assert!(count(&store, "PRAGMA busy_timeout") >= 1000);
    assert_eq!(store.last_run_id().unwrap(), None);
    assert!(store.list_runs().unwrap().is_empty());
}

/// A database at schema `version` (< 10) with `run` in it as run 1, as an earlier
/// tcplab left it.
fn old_database(path: &std::path::Path, version: usize, run: &RunRecord) {
    let conn = Connection::open(path).unwrap();
    for migration in &MIGRATIONS[..version] {
        let Migration::Sql(sql) = migration else {
            panic!("migrations before 10 are SQL");
        };
        conn.execute_batch(&sql()).unwrap();
    }
    conn.pragma_update(None, "user_version", version).unwrap();
    // Store through today's code into a scratch database, then copy the rows the old
    // columns hold.
    let scratch = path.with_extension("scratch");
    Store::open(&scratch).unwrap().insert_run(run).unwrap();
    conn.execute(&format!("ATTACH '{}' AS new", scratch.display()), [])
        .unwrap();
    let columns_of = |table: &str| -> Vec<String> {
        conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    for table in ["runs", "flows", "intervals", "events", "probes"] {
        if columns_of(table).is_empty() {
            continue; // not in this version
        }
        let columns: Vec<String> = columns_of(table)
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect();
        let columns = columns.join(", ");
        conn.execute(
            &format!("INSERT INTO {table} ({columns}) SELECT {columns} FROM new.{table}"),
            [],
        )
        .unwrap();
    }
    // The samples as rows of the old table, in the columns it had.
    let names: Vec<&str> = columns::sample_columns().collect();
    let have = columns_of("samples");
    let marks: Vec<String> = (1..=have.len()).map(|i| format!("?{i}")).collect();
    let mut insert = conn
        .prepare(&format!(
            "INSERT INTO samples ({}) VALUES ({})",
            have.join(", "),
            marks.join(", ")
        ))
        .unwrap();
    for s in &run.samples {
        let mut values = Vec::new();
        sample_blocks::values(1, s, |v| values.push(rusqlite::types::Value::from(v)));
        let row: Vec<&rusqlite::types::Value> = have
            .iter()
            .map(|c| &values[names.iter().position(|n| n == c).unwrap()])
            .collect();
        insert.execute(rusqlite::params_from_iter(row)).unwrap();
    }
}

/// [`old_database`] at version 4, whose run has no pacing limit.
fn version_4_database(path: &std::path::Path) {
    let mut run = sample_record(3);
    run.summary.limits.pacing = 0.0;
    old_database(path, 4, &run);
}

#[test]
fn migration_10_moves_every_sample_exactly_into_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.db");
    let mut run = sample_record(5000);
    // Flows' names came with migration 12.
    for flow in &mut run.flows {
        flow.name = None;
    }
    old_database(&path, 9, &run);
    let before = std::fs::metadata(&path).unwrap().len();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.load_run(1).unwrap(), run);
    let tables = count(
        &store,
        "SELECT count(*) FROM sqlite_master WHERE name = 'samples'",
    );
    assert_eq!(tables, 0, "the old table is dropped");
    assert_eq!(
        count(&store, "SELECT sum(samples) FROM sample_blocks"),
        5000
    );
    store
        .conn
        .execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(after * 4 < before, "{before} bytes before, {after} after");
}

#[test]
fn migration_5_keeps_every_row_and_takes_pacing_as_a_dominant_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.db");
    version_4_database(&path);
    let mut store = Store::open(&path).unwrap();
    assert_eq!(user_version(&store.conn).unwrap(), SCHEMA_VERSION);
    let old = store.load_run(1).unwrap();
    let want = sample_record(3);
    assert_eq!(
        (old.flows.len(), old.intervals.len(), old.samples.len()),
        (want.flows.len(), want.intervals.len(), want.samples.len())
    );
    // What version 4 did not record reads as none.
    assert_eq!(old.summary.limits.pacing, 0.0);
    assert_eq!(old.flows[0].kernel_limits, LimitShares::default());
    assert!(old.samples.iter().all(|s| s.skmem.is_none()));
    let without_skmem: Vec<SampleRecord> = want
        .samples
        .iter()
        .map(|s| SampleRecord {
            skmem: None,
            ..s.clone()
        })
        .collect();
    assert_eq!(old.samples, without_skmem);
    let mut paced = sample_record(4);
    paced.summary.dominant_limit = Some(Limit::Pacing);
    let id = store.insert_run(&paced).unwrap();
    assert_eq!(
        store.load_run(id).unwrap().summary.dominant_limit,
        Some(Limit::Pacing)
    );
    let check: String = store
        .conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    // A name the schema does not know is still refused.
    let refused = store
        .conn
        .execute("UPDATE runs SET dominant_limit = 'bogus' WHERE id = 1", []);
    assert!(refused.is_err());
}

#[test]
fn reading_writes_nothing_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lab.db");
    let mut store = Store::open(&path).unwrap();
    let id = store.insert_run(&sample_record(5)).unwrap();
    drop(store);
    let before = std::fs::read(&path).unwrap();
    let mut reader = Store::open_to_read(&path).unwrap();
    assert_eq!(reader.load_run(id).unwrap(), sample_record(5));
    assert_eq!(reader.list_runs().unwrap().len(), 1);
    let err = reader.insert_run(&failed_record()).unwrap_err();
    assert!(
        matches!(err, StoreError::ReadOnly { .. }),
        "{err:?}: a reader writes nothing"
    );
    drop(reader);
    assert!(std::fs::read(&path).unwrap() == before, "the file changed");
    // Nothing left beside it: the reader removed the journal files it opened.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["lab.db"]);
}

#[test]
fn reading_an_older_database_migrates_it_where_it_can_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.db");
    version_4_database(&path);
    let reader = Store::open_to_read(&path).unwrap();
    assert_eq!(user_version(&reader.conn).unwrap(), SCHEMA_VERSION);
    assert_eq!(reader.load_run(1).unwrap().samples.len(), 3);
}

#[test]
fn errors_carry_their_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lab.db");
    let store = Store::open(&path).unwrap();
    let err = store.load_run_with(1, true).unwrap_err();
    assert!(matches!(err, StoreError::NoSuchRun { .. }));
    let err = store
        .conn
        .execute("INSERT INTO nowhere VALUES (1)", [])
        .map_err(sqlite_err(&path, "testing"))
        .unwrap_err();
    // In the message, and not again as a source that a chain would print.
    assert!(
        err.to_string().ends_with("testing: no such table: nowhere"),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_none());
}

#[test]
fn a_run_kept_beside_the_database_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let mut run = sample_record(4);
    run.started_unix_us = 1_795_000_000_123_456;
    let first = keep_beside(&db, &run).unwrap();
    let second = keep_beside(&db, &run).unwrap();
    // 1 795 000 000 s after the epoch is 2026-11-18 11:06:40 UTC (`date -ud @1795000000`).
    assert_eq!(
        first,
        dir.path().join("runs.db.run-2026-11-18T110640Z.json")
    );
    assert_eq!(
        second,
        dir.path().join("runs.db.run-2026-11-18T110640Z-2.json")
    );
    let back: RunRecord = serde_json::from_str(&std::fs::read_to_string(&first).unwrap()).unwrap();
    assert_eq!(back, run);
}

#[test]
fn a_run_goes_to_the_first_directory_that_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone");
    let run = failed_record();
    let kept = kept::keep_in(&[&gone, dir.path()], "x.db.run-T", &run).unwrap();
    assert_eq!(kept, dir.path().join("x.db.run-T.json"));
    let err = kept::keep_in(&[&gone, &gone.join("deeper")], "x", &run).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("the run's JSON could not be written either (")
            && message.contains("gone: No such file")
            && message.contains("deeper: No such file"),
        "{message}"
    );
}

#[test]
fn limit_columns_follow_the_names() {
    for (column, limit) in LIMIT_COLUMNS.into_iter().zip(Limit::ALL) {
        assert_eq!(column, format!("limit_{}", limit.name()));
    }
}

#[test]
fn reopening_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lab.db");
    let schema_sql = |s: &Store| -> Vec<String> {
        let mut stmt = s
            .conn
            .prepare("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
            .unwrap();
        let rows = stmt.query_map([], |r| r.get(0)).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    };
    let mut store = Store::open(&path).unwrap();
    let id = store.insert_run(&failed_record()).unwrap();
    let before = schema_sql(&store);
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(user_version(&store.conn).unwrap(), SCHEMA_VERSION);
    assert_eq!(schema_sql(&store), before);
    assert_eq!(store.load_run(id).unwrap(), failed_record());
}

#[test]
fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    let store = Store::open(&path).unwrap();
    store
        .conn
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(store);
    let err = Store::open(&path)
        .err()
        .expect("newer schema must be refused");
    assert!(
        matches!(err, StoreError::TooNew { found, known, .. }
            if found == SCHEMA_VERSION + 1 && known == SCHEMA_VERSION),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("future.db") && msg.contains("newer"), "{msg}");
}

#[test]
fn non_sqlite_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.csv");
    std::fs::write(&path, "flow,t_us,cwnd\n".repeat(100)).unwrap();
    let err = Store::open(&path)
        .err()
        .expect("a CSV file is not a database");
    assert!(matches!(err, StoreError::NotSqlite { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("results.csv") && msg.contains("not an SQLite database"),
        "{msg}"
    );
    // The file is left alone.
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "flow,t_us,cwnd\n".repeat(100)
    );
}

/// Migration 1 is history: its `samples` columns must not change when `TcpInfo` grows
/// (a new field needs a new migration instead; see `migration_1`).
#[test]
fn migration_1_sample_columns_are_frozen() {
    let frozen = "run_id flow host t_us valid_len state ca_state retransmits probes backoff \
        options snd_wscale rcv_wscale delivery_rate_app_limited fastopen_client_fail rto ato \
        snd_mss rcv_mss unacked sacked lost retrans fackets last_data_sent last_ack_sent \
        last_data_recv last_ack_recv pmtu rcv_ssthresh rtt rttvar snd_ssthresh snd_cwnd \
        advmss reordering rcv_rtt rcv_space total_retrans pacing_rate max_pacing_rate \
        bytes_acked bytes_received segs_out segs_in notsent_bytes min_rtt data_segs_in \
        data_segs_out delivery_rate busy_time rwnd_limited sndbuf_limited delivered \
        delivered_ce bytes_sent bytes_retrans dsack_dups reord_seen rcv_ooopack snd_wnd \
        rcv_wnd rehash total_rto total_rto_recoveries total_rto_time bbr_bw bbr_min_rtt \
        bbr_pacing_gain bbr_cwnd_gain";
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    let Migration::Sql(sql) = &MIGRATIONS[0] else {
        panic!("migration 1 is SQL");
    };
    conn.execute_batch(&sql()).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info('samples')")
        .unwrap();
    let have: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        have.join(" "),
        frozen.split_whitespace().collect::<Vec<_>>().join(" ")
    );
}

// ---------------------------------------------------------------------------------------
// Runs

#[test]
fn round_trip() {
    let (_dir, mut store) = temp_store();
    let done = sample_record(50);
    let failed = failed_record();
    let id1 = store.insert_run(&done).unwrap();
    let id2 = store.insert_run(&failed).unwrap();
    assert!(id2 > id1);
    assert_eq!(store.load_run(id1).unwrap(), done);
    assert_eq!(store.load_run(id2).unwrap(), failed);
    assert_eq!(store.last_run_id().unwrap(), Some(id2));

    let list = store.list_runs().unwrap();
    assert_eq!(
        list,
        vec![
            RunSummaryRow {
                id: id1,
                started_unix_us: done.started_unix_us,
                label: done.label.clone(),
                status: "done".into(),
                target: "10.0.0.2".into(),
                mode: Mode::Bidir,
                sent_bps: Some(1.882e10),
                received_bps: Some(1.88e10),
            },
            RunSummaryRow {
                id: id2,
                started_unix_us: failed.started_unix_us,
                label: None,
                status: "failed".into(),
                target: "10.0.0.2".into(),
                mode: Mode::Up,
                sent_bps: Some(0.0),
                received_bps: Some(0.0),
            },
        ]
    );
    assert!(matches!(
        store.load_run(id2 + 1),
        Err(StoreError::NoSuchRun { id, .. }) if id == id2 + 1
    ));
}

#[test]
fn nan_is_stored_as_null_and_read_back_as_nan() {
    let (_dir, mut store) = temp_store();
    let mut run = failed_record();
    run.summary.rtt.mean_us = f64::NAN;
    let id = store.insert_run(&run).unwrap();
    assert_eq!(
        count(
            &store,
            &format!("SELECT count(*) FROM runs WHERE id = {id} AND rtt_mean_us IS NULL")
        ),
        1
    );
    assert!(store.load_run(id).unwrap().summary.rtt.mean_us.is_nan());
}

#[test]
fn duplicate_flow_ids_roll_back_the_whole_run() {
    let (_dir, mut store) = temp_store();
    let mut run = sample_record(10);
    run.flows[1].id = 0;
    let err = store.insert_run(&run).unwrap_err();
    assert!(err.to_string().contains("flows"), "{err}");
    assert_eq!(count(&store, "SELECT count(*) FROM runs"), 0);
    assert_eq!(count(&store, "SELECT count(*) FROM sample_blocks"), 0);
}

#[test]
fn running_rows_are_listed_but_not_loaded() {
    let (_dir, mut store) = temp_store();
    let id = store.insert_run(&failed_record()).unwrap();
    store
        .conn
        .execute("UPDATE runs SET status = 'running' WHERE id = ?1", [id])
        .unwrap();
    assert_eq!(store.list_runs().unwrap()[0].status, "running");
    let err = store.load_run(id).unwrap_err();
    assert!(matches!(err, StoreError::BadValue { .. }), "{err:?}");
    assert!(err.to_string().contains("running"), "{err}");
}

#[test]
fn deleting_a_run_cascades() {
    let (_dir, mut store) = temp_store();
    let keep = store.insert_run(&sample_record(20)).unwrap();
    let gone = store.insert_run(&sample_record(30)).unwrap();
    let per_run = |store: &Store, table: &str, id: i64| {
        let sql = match table {
            "samples" => {
                format!("SELECT coalesce(sum(samples), 0) FROM sample_blocks WHERE run_id = {id}")
            }
            _ => format!("SELECT count(*) FROM {table} WHERE run_id = {id}"),
        };
        count(store, &sql)
    };
    assert_eq!(per_run(&store, "flows", gone), 2);
    assert_eq!(per_run(&store, "intervals", gone), 6);
    assert_eq!(per_run(&store, "samples", gone), 30);

    assert!(store.delete_run(gone).unwrap());
    assert!(!store.delete_run(gone).unwrap());
    for table in ["flows", "intervals", "samples"] {
        assert_eq!(per_run(&store, table, gone), 0, "{table}");
    }
    assert_eq!(per_run(&store, "samples", keep), 20);
    assert_eq!(store.load_run(keep).unwrap(), sample_record(20));

    // Ids are never reused, and the next run's samples load on their own.
    let next = store.insert_run(&sample_record(25)).unwrap();
    assert!(next > gone);
    assert_eq!(store.load_run(next).unwrap(), sample_record(25));
    assert_eq!(store.last_run_id().unwrap(), Some(next));

    // Plain SQL deletes cascade too (foreign keys are on for the store's connection).
    store.conn.execute("DELETE FROM runs", []).unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM sample_blocks"), 0);
}

/// A spool's samples, taken in batches under their own labels, come back under the
/// finished run as relabelled, in the order taken and before the run's own; those the
/// relabelling leaves out are gone, and so is the provisional run.
#[test]
fn spooled_samples_are_stored_relabelled_with_their_run() {
    let (dir, mut store) = temp_store();
    let want = sample_record(3 * 1000 + 7);
    let (spooled, own) = want.samples.split_at(3 * 1000);
    // Taken under other labels (flow + 10), with samples of a connection to leave out.
    let taken = |s: &SampleRecord| SampleRecord {
        flow: s.flow + 10,
        ..s.clone()
    };
    let provisional = failed_record();
    let mut spool = SampleSpool::open(dir.path().join("lab.db"), &provisional).unwrap();
    for batch in spooled.chunks(1000) {
        let mut batch: Vec<SampleRecord> = batch.iter().map(taken).collect();
        batch.push(SampleRecord {
            flow: 99,
            ..batch[0].clone()
        });
        spool.append(&batch).unwrap();
    }
    let provisional_id = spool.run_id();
    assert_eq!(
        store.load_run(provisional_id).unwrap().samples.len(),
        3 * 1001
    );
    let run = RunRecord {
        samples: own.to_vec(),
        ..want.clone()
    };
    let id = store
        .insert_spooled_run(&run, spool, |s| {
            (s.flow != 99).then(|| SampleRecord {
                flow: s.flow - 10,
                ..s
            })
        })
        .unwrap();
    assert_eq!(store.load_run(id).unwrap(), want);
    assert_eq!(store.list_runs().unwrap().len(), 1);
    assert!(matches!(
        store.load_run(provisional_id),
        Err(StoreError::NoSuchRun { .. })
    ));
}

/// A spool whose run never ends leaves the provisional run, with every sample taken.
#[test]
fn a_spool_never_finished_leaves_its_provisional_run_and_samples() {
    let (dir, store) = temp_store();
    let samples = sample_record(500).samples;
    let mut provisional = failed_record();
    provisional.status = RunStatus::Incomplete;
    provisional.error = Some("the watch did not end".into());
    let mut spool = SampleSpool::open(dir.path().join("lab.db"), &provisional).unwrap();
    spool.append(&samples[..200]).unwrap();
    spool.append(&samples[200..]).unwrap();
    spool.append(&[]).unwrap();
    let id = spool.run_id();
    drop(spool);
    let kept = store.load_run(id).unwrap();
    assert_eq!(kept.status, RunStatus::Incomplete);
    assert_eq!(kept.error, provisional.error);
    assert_eq!(kept.samples, samples);
}

/// Timing, printed (run with `--nocapture`), not asserted: the aim is < 1 s for 100k
/// samples in a release build.
#[test]
fn insert_100k_samples_timing() {
    let (_dir, mut store) = temp_store();
    let run = sample_record(100_000);
    let t = Instant::now();
    let id = store.insert_run(&run).unwrap();
    let insert = t.elapsed();
    let t = Instant::now();
    let loaded = store.load_run(id).unwrap();
    let load = t.elapsed();
    assert_eq!(loaded.samples.len(), 100_000);
    assert!(loaded == run);
    eprintln!("100k samples: insert_run {insert:?}, load_run {load:?}");
}

// ---------------------------------------------------------------------------------------
// Export

fn export_string(store: &Store, table: Table, format: ExportFormat) -> String {
    let mut out = Vec::new();
    store.export(table, format, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn names(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// The header each table must export (hand-written; samples' `TcpInfo` part from serde).
fn expected_columns(table: Table) -> Vec<String> {
    match table {
        Table::Runs => names(
            "id schema tool_version label tags status error started_unix_us target mode \
             streams end_kind end_value sample_interval_us report_interval_us params_json \
             client_meta_json server_meta_json clock_offset_us clock_uncertainty_us \
             sent_bytes received_bytes sent_bps received_bps retransmits rtt_min_us \
             rtt_mean_us rtt_max_us limit_rwnd limit_sndbuf limit_cwnd limit_app \
             dominant_limit cpu_client_user_pct cpu_client_system_pct cpu_client_total_pct \
             cpu_server_user_pct cpu_server_system_pct cpu_server_total_pct path_spec path_json \
             experiment_id point repetition udp_json limit_pacing window_seconds trace_json \
             latency_json transactions_json kind watch_json",
        ),
        Table::Flows => names(
            "run_id flow direction client_addr server_addr cc mss sndbuf_requested \
             sndbuf_effective sndbuf_capped_at sndbuf_at_end rcvbuf_requested \
             rcvbuf_effective rcvbuf_capped_at rcvbuf_at_end sent_bytes received_bytes \
             sent_bps received_bps sender_seconds receiver_seconds retransmits samples \
             receiver_samples limit_rwnd limit_sndbuf limit_cwnd limit_app rtt_min_us \
             rtt_mean_us rtt_max_us host udp_json limit_pacing kernel_limit_rwnd \
             kernel_limit_sndbuf kernel_limit_cwnd kernel_limit_app timed_json \
             transactions_json watched_json name",
        ),
        Table::Intervals => names(
            "run_id flow idx start_us end_us acked_bytes received_bytes retransmits cwnd \
             srtt_us limit_rwnd limit_sndbuf limit_cwnd limit_app udp_json limit_pacing drain",
        ),
        Table::Samples => {
            let mut v = names("run_id flow host t_us");
            // serde_json's map is sorted, so compare this middle part as a set below.
            let Json::Object(m) = serde_json::to_value(TcpInfo::default()).unwrap() else {
                unreachable!()
            };
            v.extend(m.keys().cloned());
            v.extend(names("bbr_bw bbr_min_rtt bbr_pacing_gain bbr_cwnd_gain"));
            v.extend(names(
                "skmem_rmem_alloc skmem_rcvbuf skmem_wmem_alloc skmem_sndbuf skmem_fwd_alloc \
                 skmem_wmem_queued skmem_optmem skmem_backlog skmem_drops",
            ));
            v
        }
        Table::Events => names(
            "run_id flow host t_us kind data_len snd_nxt snd_una snd_cwnd ssthresh snd_wnd \
             srtt_us rcv_wnd state rcvbuf rcv_ssthresh window_clamp",
        ),
        Table::Probes => names("run_id seq scheduled_us sent_us rtt_us up_owd_us down_owd_us"),
        Table::Experiments => names(
            "id name file spec_text plan_hash seed repetitions confidence axes_json \
             created_unix_us",
        ),
        Table::Points => names("experiment_id point values_json config_json"),
        Table::Plan => names("experiment_id seq point repetition status run_id error attempts"),
    }
}

fn assert_header(table: Table, header: &[String]) {
    let mut want = expected_columns(table);
    let mut have = header.to_vec();
    if table == Table::Samples {
        assert_eq!(have[..4], want[..4]);
        assert_eq!(have[have.len() - 13..], want[want.len() - 13..]);
        want.sort();
        have.sort();
    }
    assert_eq!(have, want, "{table} header");
}

/// The stored form of a `TcpInfo` JSON value: u64 above i64::MAX wraps (SCHEMA.md).
fn stored_int(v: &Json) -> Json {
    match v {
        Json::Bool(b) => json!(i64::from(*b)),
        Json::Number(n) => match n.as_u64() {
            Some(u) => json!(u as i64),
            None => v.clone(),
        },
        other => other.clone(),
    }
}

/// The rows each table should export for [`store_for_export`], as JSON objects built from
/// the records (only the columns worth checking; the samples' `TcpInfo` part is complete).
fn expected_rows(table: Table, run: &RunRecord, failed: &RunRecord) -> Vec<Json> {
    match table {
        Table::Runs => vec![
            json!({
                "id": 1, "schema": "tcplab.run/1", "label": "bbr vs cubic, 10 ms",
                "tags": r#"["sweep-a","with \"quotes\", commas"]"#,
                "status": "done", "error": null,
                "started_unix_us": run.started_unix_us, "mode": "bidir", "streams": 1,
                "end_kind": "duration", "end_value": 10_000_000,
                "clock_offset_us": -1234, "sent_bytes": 2_500_000_001u64,
                "sent_bps": 1.882e10, "rtt_mean_us": 345.5, "dominant_limit": "cwnd",
                "cpu_client_system_pct": 38.25,
            }),
            json!({
                "id": 2, "label": null, "tags": "[]", "status": "failed",
                "error": failed.error, "mode": "up", "end_kind": "bytes",
                "end_value": 1u64 << 30, "dominant_limit": null, "sent_bps": 0.0,
            }),
        ],
        Table::Flows => run
            .flows
            .iter()
            .map(|f| {
                json!({
                    "run_id": 1, "flow": f.id, "cc": f.cc,
                    "direction": if f.direction == Direction::Up { "up" } else { "down" },
                    "sndbuf_requested": f.sndbuf.requested, "sndbuf_capped_at": f.sndbuf.capped_at,
                    "rcvbuf_requested": null, "rcvbuf_at_end": f.rcvbuf.at_end,
                    "sent_bytes": f.sent_bytes, "sent_bps": f.sent_bps,
                    "sender_seconds": f.sender_seconds, "limit_rwnd": f.limits.rwnd,
                    "limit_pacing": f.limits.pacing, "kernel_limit_app": f.kernel_limits.app,
                    "rtt_max_us": f.rtt.max_us, "receiver_samples": f.receiver_samples,
                })
            })
            .collect(),
        Table::Intervals => run
            .intervals
            .iter()
            .map(|i| {
                json!({
                    "run_id": 1, "flow": i.flow, "idx": i.index, "start_us": i.start_us,
                    "acked_bytes": i.acked_bytes, "cwnd": i.cwnd, "limit_cwnd": i.limits.cwnd,
                })
            })
            .collect(),
        Table::Samples => run
            .samples
            .iter()
            .map(|s| {
                let Json::Object(mut m) = serde_json::to_value(s.info).unwrap() else {
                    unreachable!()
                };
                for v in m.values_mut() {
                    *v = stored_int(v);
                }
                m.insert("run_id".into(), json!(1));
                m.insert("flow".into(), json!(s.flow));
                m.insert(
                    "host".into(),
                    json!(if s.host == Host::Client {
                        "client"
                    } else {
                        "server"
                    }),
                );
                m.insert("t_us".into(), json!(s.t_us));
                m.insert("bbr_bw".into(), json!(s.bbr.map(|b| b.bw)));
                m.insert("bbr_cwnd_gain".into(), json!(s.bbr.map(|b| b.cwnd_gain)));
                Json::Object(m)
            })
            .collect(),
        // The event's JSON names its columns: the table's others are NULL.
        Table::Events => run
            .events
            .iter()
            .map(|e| {
                let Json::Object(mut m) = serde_json::to_value(e).unwrap() else {
                    unreachable!()
                };
                m.insert("run_id".into(), json!(1));
                Json::Object(m)
            })
            .collect(),
        // The probe's JSON names its columns.
        Table::Probes => run
            .probes
            .iter()
            .map(|p| {
                let Json::Object(mut m) = serde_json::to_value(p).unwrap() else {
                    unreachable!()
                };
                m.insert("run_id".into(), json!(1));
                Json::Object(m)
            })
            .collect(),
        // The export fixture holds single runs, no experiment.
        Table::Experiments | Table::Points | Table::Plan => Vec::new(),
    }
}

fn store_for_export() -> (tempfile::TempDir, Store, RunRecord, RunRecord) {
    let (dir, mut store) = temp_store();
    let run = sample_record(7);
    let failed = failed_record();
    assert_eq!(store.insert_run(&run).unwrap(), 1);
    assert_eq!(store.insert_run(&failed).unwrap(), 2);
    (dir, store, run, failed)
}

fn assert_subset(have: &Json, want: &Json, what: &str) {
    for (k, v) in want.as_object().unwrap() {
        assert_eq!(have.get(k), Some(v), "{what}: column {k}");
    }
}

#[test]
fn export_jsonl_of_each_table() {
    let (_dir, store, run, failed) = store_for_export();
    for table in Table::ALL {
        let out = export_string(&store, table, ExportFormat::Jsonl);
        assert!(out.ends_with('\n') || out.is_empty());
        let lines: Vec<Json> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{table}: {e}: {l}")))
            .collect();
        let want = expected_rows(table, &run, &failed);
        assert_eq!(lines.len(), want.len(), "{table} rows");
        for (i, (have, want)) in lines.iter().zip(&want).enumerate() {
            assert_subset(have, want, &format!("{table} row {i}"));
        }
        // Keys in column order (checked via the raw text of the first line).
        let Some(first) = out.lines().next() else {
            continue;
        };
        let mut at = 0;
        for name in expected_columns(table).iter().take(4) {
            let pos = first[at..]
                .find(&format!("\"{name}\":"))
                .unwrap_or_else(|| panic!("{table}: {name} out of order"));
            at += pos;
        }
    }
    // Spot checks on types: integers stay integers, u64::MAX wraps to -1.
    let line = export_string(&store, Table::Samples, ExportFormat::Jsonl);
    let first: Json = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(first["max_pacing_rate"], json!(-1));
    assert_eq!(first["bytes_acked"], json!(1u64 << 40));
    assert_eq!(first["t_us"], json!(-5));
    assert_eq!(first["bbr_min_rtt"], json!(118));
    let second: Json = serde_json::from_str(line.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["bbr_min_rtt"], Json::Null);
}

#[test]
fn export_csv_of_each_table() {
    let (_dir, store, run, failed) = store_for_export();
    for table in Table::ALL {
        let out = export_string(&store, table, ExportFormat::Csv);
        let mut reader = csv::Reader::from_reader(out.as_bytes());
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        assert_header(table, &header);
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        let want = expected_rows(table, &run, &failed);
        assert_eq!(rows.len(), want.len(), "{table} rows");
        for (i, (row, want)) in rows.iter().zip(&want).enumerate() {
            for (col, v) in want.as_object().unwrap() {
                let at = header.iter().position(|h| h == col).unwrap();
                let field = &row[at];
                match v {
                    Json::Null => assert_eq!(field, "", "{table} row {i} {col}"),
                    Json::String(s) => assert_eq!(field, s, "{table} row {i} {col}"),
                    Json::Number(n) if n.is_f64() => assert_eq!(
                        field.parse::<f64>().unwrap(),
                        n.as_f64().unwrap(),
                        "{table} row {i} {col}"
                    ),
                    Json::Number(n) => assert_eq!(field, n.to_string(), "{table} row {i} {col}"),
                    other => panic!("unexpected {other}"),
                }
            }
        }
    }
}

#[test]
fn export_of_an_empty_store() {
    let (_dir, store) = temp_store();
    for table in Table::ALL {
        assert_eq!(export_string(&store, table, ExportFormat::Jsonl), "");
        let csv = export_string(&store, table, ExportFormat::Csv);
        assert_eq!(csv.lines().count(), 1, "{table}: header only");
    }
}

#[test]
fn names_parse_and_errors_list_the_valid_ones() {
    for t in Table::ALL {
        assert_eq!(t.to_string().parse::<Table>().unwrap(), t);
    }
    for f in ExportFormat::ALL {
        assert_eq!(f.to_string().parse::<ExportFormat>().unwrap(), f);
    }
    let e = "run".parse::<Table>().unwrap_err().to_string();
    assert_eq!(
        e,
        "unknown table 'run' (valid: runs, flows, intervals, samples, events, probes, experiments, points, plan)"
    );
    let e = "json".parse::<ExportFormat>().unwrap_err().to_string();
    assert_eq!(e, "unknown export format 'json' (valid: csv, jsonl)");
}

// ---------------------------------------------------------------------------------------
// Experiments

fn experiment() -> tcplab_model::experiment::Experiment {
    tcplab_model::experiment::parse(
        "repetitions = 2\n[[axis]]\nkey = \"flow.streams\"\nvalues = [1, 2]\n",
        "exp",
    )
    .unwrap()
}

#[test]
fn an_experiment_round_trips_with_its_points_and_plan() {
    let (_dir, mut store) = temp_store();
    let exp = experiment();
    let schedule = exp.schedule(5);
    let id = store
        .create_experiment(&exp, "exp.toml", "text", 5, &schedule)
        .unwrap();
    let rows = store.experiments().unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!((row.id, row.name.as_str(), row.seed), (id, "exp", 5));
    assert_eq!((row.repetitions, row.confidence), (2, 0.95));
    assert_eq!(row.plan_hash, exp.plan_hash());
    assert_eq!(row.axes, exp.axes);
    assert_eq!(store.points(id).unwrap(), exp.points);
    let plan = store.plan(id).unwrap();
    assert_eq!(plan.len(), 4);
    for (seq, (row, planned)) in plan.iter().zip(&schedule).enumerate() {
        assert_eq!((row.seq as usize, row.run), (seq, *planned));
        assert_eq!(
            (row.status, row.run_id, row.attempts),
            (PlanStatus::Pending, None, 0)
        );
    }
}

#[test]
fn finishing_planned_runs_links_them_and_counts_attempts() {
    let (_dir, mut store) = temp_store();
    let exp = experiment();
    let schedule = exp.schedule(1);
    let id = store
        .create_experiment(&exp, "exp.toml", "text", 1, &schedule)
        .unwrap();
    let run = sample_record(3);
    let done = store
        .finish_planned_run(id, 0, Outcome::Done(&run))
        .unwrap()
        .unwrap();
    let failed = failed_record();
    store
        .finish_planned_run(id, 1, Outcome::Failed(Some(&failed), "server vanished"))
        .unwrap();
    assert_eq!(
        store
            .finish_planned_run(id, 2, Outcome::Failed(None, "no lab"))
            .unwrap(),
        None
    );
    let interrupted = store
        .finish_planned_run(id, 3, Outcome::Interrupted(&run))
        .unwrap();
    let plan = store.plan(id).unwrap();
    let statuses: Vec<_> = plan.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            PlanStatus::Done,
            PlanStatus::Failed,
            PlanStatus::Failed,
            PlanStatus::Pending
        ]
    );
    assert_eq!(plan[0].run_id, Some(done));
    assert_eq!(plan[2].error.as_deref(), Some("no lab"));
    assert_eq!(plan[3].run_id, interrupted);
    assert!(plan.iter().all(|r| r.attempts == 1));
    // The run row carries its point and repetition.
    let (point, repetition): (u32, u32) = store
        .conn
        .query_row(
            "SELECT point, repetition FROM runs WHERE id = ?1",
            [done],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (point, repetition),
        (schedule[0].point, schedule[0].repetition)
    );
    assert_eq!(store.load_run(done).unwrap(), run);
    // Without its samples and kernel events; its probes (few) stay, for the latency charts.
    let mut without = run.clone();
    without.samples.clear();
    without.events.clear();
    assert_eq!(store.load_run_without_samples(done).unwrap(), without);

    assert_eq!(store.retry_failed(id).unwrap(), 2);
    let plan = store.plan(id).unwrap();
    assert_eq!(
        plan.iter()
            .filter(|r| r.status == PlanStatus::Pending)
            .count(),
        3
    );
    // Redoing a pending run keeps one plan row per point and repetition.
    store
        .finish_planned_run(id, 3, Outcome::Done(&run))
        .unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM plan"), 4);
    assert_eq!(store.plan(id).unwrap()[3].attempts, 2);
    assert!(store
        .finish_planned_run(id, 9, Outcome::Done(&run))
        .is_err());
}

#[test]
fn a_watch_run_keeps_its_kind_and_each_connection_s_socket_and_counters() {
    use tcplab_record::tcp_state::TcpState;
    use tcplab_record::{
        CommandEnd, FinalCounters, RunKind, ShellCommands, WatchRecord, WatchedFlow,
    };
    let (_dir, mut store) = temp_store();
    let mut run = sample_record(3);
    run.watch = Some(WatchRecord {
        filter: "--port 443".into(),
        tracepoint: true,
        missed: 2,
        shell: Some(ShellCommands {
            client: vec!["curl".into(), "-s".into(), "http://10.77.0.1/".into()],
            server: Some("python3 -m http.server 80".into()),
            ended: Some(CommandEnd {
                code: None,
                signal: Some(15),
                timed_out: true,
                wall_us: 60_000_123,
                stderr_tail: "lost connection\n".into(),
            }),
        }),
    });
    run.flows[0].watched = Some(WatchedFlow {
        cookie: 0x1234_5678_9abc,
        pid: Some(4242),
        comm: Some("curl".into()),
        start_us: 1_000,
        end_us: 31_000,
        opened: true,
        closed: true,
        last_state: TcpState::LastAck,
        counters: FinalCounters {
            bytes_acked: 10_241,
            bytes_received: 77,
            bytes_sent: 10_241,
            retransmits: 1,
            min_rtt_us: 10_123,
            limited_us: 30_000,
            limits: run.flows[0].limits,
        },
        end: tcplab_record::Host::Client,
        peer: None,
    });
    let id = store.insert_run(&run).unwrap();
    assert_eq!(store.load_run(id).unwrap(), run);
    assert_eq!(run.kind(), RunKind::Watch);
    let of_kind = |store: &Store, kind: &str| {
        count(
            store,
            &format!("SELECT count(*) FROM runs WHERE kind = '{kind}'"),
        )
    };
    assert_eq!(of_kind(&store, "watch"), 1);
    // A test run stays of kind `test`.
    store.insert_run(&sample_record(1)).unwrap();
    assert_eq!(of_kind(&store, "test"), 1);
}

/// A second store on a database this process has open (a watch's spool beside its
/// store), and a reader, leave the first one's lock held: without it a connection of
/// another process takes itself for the last one on closing, and deletes the WAL the
/// first still writes to, whose commits no reader sees again.
#[test]
fn a_second_store_on_one_database_keeps_the_first_ones_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let _first = Store::open(&path).unwrap();
    let _second = Store::open(&path).unwrap();
    let _reader = Store::open_to_read(&path).unwrap();
    assert!(read_locked_for_another_process(&path));
}

/// Whether another process would find a read lock on SQLite's shared-lock bytes of
/// `path` (os_unix.c: 510 bytes from PENDING_BYTE + 2), asked from a child process: a
/// process sees no conflict with its own locks, and must not open the file itself.
fn read_locked_for_another_process(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const SHARED_FIRST: libc::off_t = 0x4000_0000 + 2;
    const SHARED_SIZE: libc::off_t = 510;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: the child calls only async-signal-safe functions (open, fcntl, _exit).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        unsafe {
            let fd = libc::open(c_path.as_ptr(), libc::O_RDWR);
            let mut lock: libc::flock = std::mem::zeroed();
            lock.l_type = libc::F_WRLCK as libc::c_short;
            lock.l_whence = libc::SEEK_SET as libc::c_short;
            lock.l_start = SHARED_FIRST;
            lock.l_len = SHARED_SIZE;
            let asked = fd >= 0 && libc::fcntl(fd, libc::F_GETLK, &mut lock) == 0;
            libc::_exit(if asked && lock.l_type != libc::F_UNLCK as libc::c_short {
                0
            } else {
                1
            });
        }
    }
    let mut status = 0;
    // SAFETY: waiting for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}
