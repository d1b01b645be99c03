//! What each subcommand does: argument checks, then the library calls, then output.

use std::io::{self, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use tcplab_experiment::labrun::{self, FlowGroup, IntervalSink};
use tcplab_lab::{HostPair, Lab, LabConfig, TopologyConfig};
use tcplab_netsim::path::PathSpec;
use tcplab_record::units::count;
use tcplab_record::{IntervalRecord, RunRecord, RunStatus, TestParams, SCHEMA};
use tcplab_report::describe::{explanation, run as run_text};
use tcplab_store::{ExportFormat, NotStored, Store, Table};
use tcplab_sys::sockopt;
use tcplab_traffic::auth::{self, PreSharedKey};
use tcplab_traffic::client::{self, Request};
use tcplab_traffic::server::{self, Access, ServerConfig};

use crate::args::{
    ExportArgs, ImportArgs, OutputArgs, QuickstartArgs, RunArgs, ServeArgs, TestArgs,
};
use crate::lab;
use crate::shared::{interrupt_flag, lab_lines, open_existing_store, open_store};
use crate::stdio::{errln, out, outln, Stdout};

pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    let (access, who) = match (&args.key_file, args.insecure_open) {
        (Some(path), _) => (
            Access::Key(read_key(path)?),
            format!("clients must prove the key in {}", path.display()),
        ),
        (None, true) => (Access::Open, "open to anyone (--insecure-open)".into()),
        (None, false) => (
            Access::LocalOnly,
            "no key: peers on this host only (--key-file FILE to serve others)".into(),
        ),
    };
    let listener = TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    errln!("tcplab: serving on {}, {who}", listener.local_addr()?);
    if args.iperf3 {
        let log = |line| errln!("tcplab serve: {line}");
        let open = args.insecure_open;
        tcplab_traffic::iperf3::server::serve(listener, open, log, &AtomicBool::new(false))?;
        return Ok(ExitCode::SUCCESS);
    }
    let config = ServerConfig {
        access,
        limits: args.limits(),
    };
    server::serve(
        listener,
        config,
        |line| errln!("tcplab serve: {line}"),
        &AtomicBool::new(false),
        server::PeerPacing::new(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A key file, with a warning when other users may read it: whoever reads the key may
/// use the server.
fn read_key(path: &Path) -> Result<PreSharedKey> {
    let key = auth::read_key_file(path)?;
    if auth::readable_by_others(path)? {
        errln!(
            "tcplab: warning: key file {} is readable by other users (chmod 600 it)",
            path.display()
        );
    }
    Ok(key)
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let params = checked_params(&args.test)?;
    let key = args.key_file.as_deref().map(read_key).transpose()?;
    // A bad database path should fail before a test is spent on it.
    let store = open_output_store(&args.output)?;
    let stop = interrupt_flag();
    let name = format!("run{}", tcplab_sys::netns::own_pid());
    if let Some(file) = &args.topology.topology {
        let config = lab::topology_config(&name, file, &args.lab)?;
        let hosts = lab::host_pair(&config, &args.hosts)?;
        let record = run_in_topology(&config, hosts, &params, &args.output, stop)?;
        return report(record, &args.output, store);
    }
    let record = match (&args.target, lab::config(&args.lab, &name)?) {
        (Some(_), None) if params.tuning.ecn => bail!(
            "--ecn sets a lab client's net.ipv4.tcp_ecn and needs --path; against a real host set it on this machine (sysctl -w net.ipv4.tcp_ecn=1)"
        ),
        (Some(target), None) => run_client(target, args.iperf3, &params, key, &args.output, stop)?,
        (None, Some(config)) => run_in_lab(&config, &params, &args.output, stop)?,
        _ => bail!("give either a server TARGET or --path, not both"),
    };
    report(record, &args.output, store)
}

/// Where `quickstart` stores its runs unless told otherwise.
const QUICKSTART_DB: &str = "tcplab-quickstart.db";

/// A test across an emulated path in a lab built for it: the whole pipeline on any
/// Linux machine where we may create namespaces.
pub fn quickstart(args: QuickstartArgs) -> Result<ExitCode> {
    let params = checked_params(&args.test)?;
    let mut output = args.output;
    let default_db = output.store.db.is_none();
    output.store.db.get_or_insert_with(|| QUICKSTART_DB.into());
    output
        .store
        .label
        .get_or_insert_with(|| "quickstart".into());
    let store = open_output_store(&output).map_err(|e| {
        if default_db {
            anyhow::anyhow!(
                "{e:#}; quickstart stores its run in the current directory unless given --db FILE somewhere you may write"
            )
        } else {
            e
        }
    })?;
    let config = LabConfig {
        name: format!("qs{}", tcplab_sys::netns::own_pid()),
        path: args.path,
        clients: vec![PathSpec::default()],
        backend: tcplab_lab::Backend::Emulator,
        sysctls: Default::default(),
        capture: args.capture.spec()?,
        control_port: None,
    };
    let record = run_in_lab(&config, &params, &output, interrupt_flag())?;
    let code = report(record, &output, store)?;
    if let (Some(db), false) = (&output.store.db, output.json) {
        let dir = crate::report::default_dir(db);
        let written = tcplab_report::write_report(&open_existing_store(db)?, &[], &dir)?;
        // Regenerated output, never source: git leaves the folder alone in any checkout
        // it lands in, as it does pytest's cache. The database is data and stays visible.
        let ignore = dir.join(".gitignore");
        std::fs::write(
            &ignore,
            "# tcplab quickstart's report: regenerated output\n*\n",
        )
        .with_context(|| format!("cannot write {}", ignore.display()))?;
        outln!(
            "report: {} ({}; open it in a browser)",
            written.path.display(),
            count(written.charts, "chart")
        );
        crate::report::say_unread_captures(&written);
    }
    Ok(code)
}

/// Builds a topology's lab, runs the test between `hosts` (places in its hosts), and
/// records each link and what it did.
fn run_in_topology(
    config: &TopologyConfig,
    hosts: HostPair,
    params: &TestParams,
    out: &OutputArgs,
    stop: Arc<AtomicBool>,
) -> Result<RunRecord> {
    let group = FlowGroup {
        name: None,
        hosts,
        start_us: 0,
        params: params.clone(),
        label: out.store.label.clone(),
        tags: out.store.tags.clone(),
        trace_events: out.trace_events,
    };
    Ok(labrun::run_in_topology(config, &[group], stop)?.record)
}

/// Builds the lab, runs the test from every client host at once, and records the path
/// and what its links did.
fn run_in_lab(
    config: &LabConfig,
    params: &TestParams,
    out: &OutputArgs,
    stop: Arc<AtomicBool>,
) -> Result<RunRecord> {
    let groups: Vec<FlowGroup> = (0..config.clients.len())
        .map(|client| FlowGroup {
            name: None,
            hosts: HostPair::client(client),
            start_us: 0,
            params: params.clone(),
            label: out.store.label.clone(),
            tags: out.store.tags.clone(),
            trace_events: out.trace_events,
        })
        .collect();
    let show = !out.json;
    let live = (show && groups.len() == 1).then(live_lines);
    let run = labrun::run_in_lab(
        config,
        &groups,
        stop,
        &mut |lab| {
            if show {
                describe_lab(lab)
            }
        },
        live,
    )?;
    Ok(run.record)
}

fn describe_lab(lab: &Lab) {
    for line in lab_lines(lab) {
        outln!("{line}");
    }
}

/// Prints intervals as they arrive, under a header printed once.
fn live_lines() -> IntervalSink {
    let header_shown = AtomicBool::new(false);
    Arc::new(move |group: &[IntervalRecord]| {
        if !header_shown.swap(true, Ordering::Relaxed) {
            outln!("{}", run_text::interval_header(group));
        }
        for line in run_text::interval_lines(group) {
            outln!("{line}");
        }
    })
}

/// One test from this thread's namespace, with live lines unless --json.
fn run_client(
    target: &str,
    iperf3: bool,
    params: &TestParams,
    key: Option<PreSharedKey>,
    out: &OutputArgs,
    stop: Arc<AtomicBool>,
) -> Result<RunRecord> {
    let request = Request {
        target: target.to_string(),
        params: params.clone(),
        label: out.store.label.clone(),
        tags: out.store.tags.clone(),
        pacing: None,
        key,
        trace_events: out.trace_events,
        // A test to a server of the caller's: no lab of tcplab's on the way.
        test_start: None,
    };
    if iperf3 {
        // No live lines: iperf3 reports its side only at the end.
        return Ok(tcplab_traffic::iperf3::client::run(&request, stop)?);
    }
    let live = (!out.json).then(live_lines);
    Ok(client::run(&request, stop, &mut |group| {
        if let Some(live) = &live {
            live(group)
        }
    })?)
}

/// The parameters, checked here where a bad value can name its flag.
fn checked_params(test: &TestArgs) -> Result<TestParams> {
    let params = test.params()?;
    if let Some(cc) = &params.tuning.cc {
        let available =
            sockopt::available_congestion().context("reading the available congestion controls")?;
        if !available.iter().any(|a| a == cc) {
            bail!(
                "unknown congestion control '{cc}' for --congestion (available: {})",
                available.join(" ")
            );
        }
    }
    Ok(params)
}

/// Stores and prints a finished run. A run the database would not take is printed all
/// the same and kept as JSON beside it, and the command fails saying where.
fn report(mut record: RunRecord, out: &OutputArgs, store: Option<Store>) -> Result<ExitCode> {
    let mut not_stored = None;
    if let Some(mut store) = store {
        match store.insert_run(&record) {
            Ok(id) if !out.json => outln!("stored as run {id} in {}", store.path().display()),
            Ok(_) => {}
            Err(e) => not_stored = Some(NotStored::keeping(store.path(), e, Some(&record))),
        }
    }
    let printed = print_run(&mut record, out);
    if let Some(not_stored) = not_stored {
        return Err(not_stored.into());
    }
    printed?;
    Ok(exit_code(&record))
}

/// Prints a run: its JSON (samples only if asked), or its text summary and explanation.
fn print_run(record: &mut RunRecord, out: &OutputArgs) -> Result<()> {
    if out.json {
        if let Some(cap) = record.server.rate_cap_bps {
            errln!(
                "tcplab: {}",
                run_text::server_cap_line(cap)
                    .trim_start_matches("cap:")
                    .trim()
            );
        }
        if !out.json_samples {
            record.samples.clear();
        }
        if !out.json_events {
            record.events.clear();
        }
        if !out.json_probes {
            record.probes.clear();
        }
        serde_json::to_writer_pretty(Stdout, &record)?;
        outln!();
    } else {
        for line in run_text::flow_setup(record)
            .into_iter()
            .chain(run_text::summary(record))
        {
            outln!("{line}");
        }
        if record.flows.iter().any(|f| f.udp.is_none()) && !record.samples.is_empty() {
            outln!("\nwhy (tcplab explain):");
            out!(
                "{}",
                explanation::render(&crate::explain::explain_with_evidence(record))
            );
        }
    }
    Ok(())
}

fn exit_code(record: &RunRecord) -> ExitCode {
    match record.status {
        RunStatus::Done => ExitCode::SUCCESS,
        RunStatus::Incomplete | RunStatus::Failed => ExitCode::FAILURE,
    }
}

fn open_output_store(out: &OutputArgs) -> Result<Option<Store>> {
    out.store.db.as_deref().map(open_store).transpose()
}

pub fn list_runs(db: &Path) -> Result<ExitCode> {
    let store = open_existing_store(db)?;
    outln!(
        "{:>5}  {:<26}  {:<10}  {:<6}  {:>14}  {:>14}  target / label",
        "id",
        "started (UTC)",
        "status",
        "mode",
        "sent",
        "received"
    );
    for run in store.list_runs()? {
        outln!("{}", run_text::run_row(&run));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn export(args: ExportArgs) -> Result<ExitCode> {
    let table: Table = args
        .table
        .parse()
        .map_err(|e| anyhow::anyhow!("--table: {e}"))?;
    let format: ExportFormat = args
        .format
        .parse()
        .map_err(|e| anyhow::anyhow!("--format: {e}"))?;
    let store = open_existing_store(args.db.path())?;
    match &args.output {
        Some(path) => {
            let mut file = io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?,
            );
            store.export(table, format, &mut file)?;
            file.flush()?;
        }
        None => {
            let mut out = io::BufWriter::new(Stdout);
            store.export(table, format, &mut out)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `tcplab import`: runs kept as JSON into a database. Every file is read before any is
/// stored, and a run the database holds already (the same start and target) is not
/// stored twice.
pub fn import(args: ImportArgs) -> Result<ExitCode> {
    tcplab_store::check_path(&args.db)?;
    let runs = args
        .files
        .iter()
        .map(|file| read_run(file).map(|run| (file, run)))
        .collect::<Result<Vec<_>>>()?;
    let mut store = open_store(&args.db)?;
    let db = args.db.display();
    for (file, run) in runs {
        let held = store
            .list_runs()?
            .into_iter()
            .find(|r| r.started_unix_us == run.started_unix_us && r.target == run.target);
        match held {
            Some(held) => outln!(
                "{}: {db} holds this run already (run {}); not stored again",
                file.display(),
                held.id
            ),
            None => {
                let id = store.insert_run(&run)?;
                outln!("stored {} as run {id} in {db}", file.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A run's JSON document, as `run --json` prints it and a refused run is kept.
fn read_run(file: &Path) -> Result<RunRecord> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let run: RunRecord = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!("{}: not a tcplab run ({SCHEMA} JSON): {e}", file.display())
    })?;
    if run.schema != SCHEMA {
        bail!(
            "{}: schema '{}' is not {SCHEMA}, the one this tcplab reads",
            file.display(),
            run.schema
        );
    }
    Ok(run)
}
