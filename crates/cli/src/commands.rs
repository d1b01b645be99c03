//! What each subcommand does: argument checks, then the library calls, then output.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use tcplab_model::record::{RunRecord, RunStatus, TestParams};
use tcplab_store::{ExportFormat, Store, Table};
use tcplab_sys::netns::VethLab;
use tcplab_sys::sockopt;
use tcplab_traffic::client::{self, Request};
use tcplab_traffic::server::{self, ServerLimits};

use crate::args::{ExportArgs, OutputArgs, QuickstartArgs, RunArgs, ServeArgs, TestArgs};
use crate::output;

pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    let listener = TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    eprintln!("tcplab: serving on {}", listener.local_addr()?);
    let limits = ServerLimits {
        max_streams: args.max_streams,
        max_duration_us: args.max_duration,
        ..ServerLimits::default()
    };
    server::serve(listener, limits, |line| eprintln!("tcplab serve: {line}"))?;
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let params = checked_params(&args.test)?;
    run_and_report(&args.target, params, &args.output)
}

/// Where `quickstart` stores its runs unless told otherwise.
const QUICKSTART_DB: &str = "tcplab-quickstart.db";

/// Two fresh namespaces joined by a veth pair, a server in one, this test from the
/// other: a complete run on any Linux machine where we may create namespaces.
pub fn quickstart(args: QuickstartArgs) -> Result<ExitCode> {
    let params = checked_params(&args.test)?;
    let lab = VethLab::new("tcplab-qs", std::process::id() as u16)
        .context("cannot build the quickstart namespaces (root or CAP_NET_ADMIN needed)")?;
    let server_addr = SocketAddr::new(lab.addr_b_v4(), client::DEFAULT_PORT);
    let listener = lab.b().try_run(move || TcpListener::bind(server_addr))?;
    // The serving thread lives in the server's namespace, so the per-test data
    // listeners it opens do too; it ends with the process.
    lab.b()
        .spawn(move || server::serve(listener, ServerLimits::default(), |_| {}))
        .context("starting the quickstart server")?;
    if !args.output.json {
        println!(
            "quickstart: namespaces {} (client {}) and {} (server {}) joined by a veth pair",
            lab.a().name(),
            lab.addr_a_v4(),
            lab.b().name(),
            lab.addr_b_v4()
        );
    }
    let target = server_addr.to_string();
    let mut output = args.output;
    output.db.get_or_insert_with(|| QUICKSTART_DB.into());
    output.label.get_or_insert_with(|| "quickstart".into());
    lab.a()
        .run(move || run_and_report(&target, params, &output))?
}

/// The parameters, checked here where a bad value can name its flag.
fn checked_params(test: &TestArgs) -> Result<TestParams> {
    let params = test.params().map_err(anyhow::Error::msg)?;
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

fn run_and_report(target: &str, params: TestParams, out: &OutputArgs) -> Result<ExitCode> {
    // Open the store first: a bad path should fail before a test is spent on it.
    let mut store = out.db.as_deref().map(open_store).transpose()?;
    let request = Request {
        target: target.to_string(),
        params,
        label: out.label.clone(),
        tags: out.tags.clone(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    install_interrupt(&stop);
    let live = !out.json;
    let mut header_shown = false;
    let mut record = client::run(&request, stop, &mut |group| {
        if live {
            if !header_shown {
                println!("{}", output::interval_header());
                header_shown = true;
            }
            for line in output::interval_lines(group) {
                println!("{line}");
            }
        }
    })?;

    if let Some(store) = store.as_mut() {
        let id = store.insert_run(&record).context("storing the run")?;
        if live {
            println!(
                "stored as run {id} in {}",
                out.db.as_deref().unwrap_or(Path::new("")).display()
            );
        }
    }
    if out.json {
        if !out.json_samples {
            record.samples.clear();
        }
        serde_json::to_writer_pretty(io::stdout().lock(), &record)?;
        println!();
    } else {
        for line in output::flow_setup(&record)
            .into_iter()
            .chain(output::summary(&record))
        {
            println!("{line}");
        }
    }
    Ok(exit_code(&record))
}

fn exit_code(record: &RunRecord) -> ExitCode {
    match record.status {
        RunStatus::Done => ExitCode::SUCCESS,
        RunStatus::Incomplete | RunStatus::Failed => ExitCode::FAILURE,
    }
}

fn open_store(path: &Path) -> Result<Store> {
    Store::open(path).with_context(|| format!("cannot open database {}", path.display()))
}

/// Ctrl-C ends the test early; what was measured is still reported and stored.
fn install_interrupt(stop: &Arc<AtomicBool>) {
    static STOP: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    extern "C" fn on_signal(_: libc::c_int) {
        if let Some(stop) = STOP.get() {
            stop.store(true, Ordering::Relaxed);
        }
    }
    if STOP.set(Arc::clone(stop)).is_ok() {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
        unsafe {
            libc::signal(libc::SIGINT, handler as libc::sighandler_t);
            libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
        }
    }
}

pub fn list_runs(db: &Path) -> Result<ExitCode> {
    if !db.exists() {
        bail!("no database at {}", db.display());
    }
    let store = open_store(db)?;
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "{:>5}  {:<26}  {:<10}  {:<6}  {:>14}  {:>14}  target / label",
        "id", "started (UTC)", "status", "mode", "sent", "received"
    )?;
    for run in store.list_runs()? {
        writeln!(out, "{}", output::run_row(&run))?;
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
    if !args.db.exists() {
        bail!("no database at {}", args.db.display());
    }
    let store = open_store(&args.db)?;
    match &args.output {
        Some(path) => {
            let mut file = io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?,
            );
            store.export(table, format, &mut file)?;
            file.flush()?;
        }
        None => store.export(table, format, &mut io::stdout().lock())?,
    }
    Ok(ExitCode::SUCCESS)
}
