//! `tcplab`: a TCP performance lab in one binary.

// Output goes through `stdio`, which a closed pipe cannot make panic.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod args;
mod commands;
mod explain;
mod lab;
mod manual;
mod report;
mod shared;
mod stdio;
mod sweep;
mod watch;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use args::{Cli, Command};
use stdio::{errln, out, Stdout};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e, &std::env::args().collect::<Vec<_>>()),
    };
    // Namespaces before any thread exists: setns and unshare move the calling thread
    // only, and a user namespace admits single-threaded processes only.
    if let Some(ns) = &cli.netns {
        if let Err(e) = tcplab_sys::netns::enter_current_thread(ns) {
            errln!("tcplab: cannot enter netns '{ns}': {e}");
            return ExitCode::FAILURE;
        }
    }
    if builds_labs(&cli.command) {
        tcplab_sys::netns::prepare();
    }
    let result = match cli.command {
        Command::Serve(args) => commands::serve(args),
        Command::Run(args) => commands::run(args),
        Command::Quickstart(args) => commands::quickstart(args),
        Command::Lab(cmd) => lab::command(cmd),
        Command::Shell(args) => lab::shell(args),
        Command::Watch(args) => watch::watch(args),
        Command::Runs { db } => commands::list_runs(db.path()),
        Command::Export(args) => commands::export(args),
        Command::Import(args) => commands::import(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::Results(args) => sweep::results(args),
        Command::Compare(args) => sweep::compare(args),
        Command::Merge(args) => sweep::merge(args),
        Command::Explain(args) => explain::run(args),
        Command::Report(args) => report::report(args),
        Command::Plot(args) => report::plot(args),
        Command::PathSpec => {
            out!("{}", tcplab_netsim::path::grammar());
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            let mut cli = Cli::command();
            clap_complete::generate(shell, &mut cli, "tcplab", &mut Stdout);
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(args) => manual::man(args),
    };
    stdio::finish(match result {
        Ok(code) => code,
        Err(e) => {
            errln!("tcplab: {e:#}");
            ExitCode::FAILURE
        }
    })
}

/// Commands that may build a lab in this process.
fn builds_labs(command: &Command) -> bool {
    match command {
        Command::Run(args) => args.lab.path.is_some(),
        Command::Quickstart(_) | Command::Shell(_) => true,
        Command::Sweep(args) => !args.dry_run,
        Command::Lab(cmd) => matches!(cmd, args::LabCommand::Daemon { .. }),
        _ => false,
    }
}

/// Help and version print as clap renders them; every other parse error becomes one
/// line naming the bad token, with exit status 2, and a hint where the token is an
/// iperf3 habit.
fn usage_error(e: clap::Error, argv: &[String]) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    // Clap's message runs until the first blank line (usage and tips follow it).
    let rendered = e.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let hint = match (e.kind(), e.get(ContextKind::InvalidArg)) {
        (ErrorKind::UnknownArgument, Some(ContextValue::String(flag))) => {
            iperf3_habit(subcommand(argv), flag)
                .map(|hint| format!(" ({hint})"))
                .unwrap_or_default()
        }
        _ => String::new(),
    };
    errln!(
        "tcplab: {}{hint}",
        message.join(" ").trim_start_matches("error: ")
    );
    ExitCode::from(2)
}

/// The subcommand in `argv`: its first word that names one, past the global options.
fn subcommand(argv: &[String]) -> Option<&str> {
    let cli = Cli::command();
    let mut words = argv.iter().skip(1);
    while let Some(word) = words.next() {
        if word == "--netns" {
            words.next();
        } else if !word.starts_with('-') {
            return cli
                .get_subcommands()
                .any(|c| c.get_name() == word)
                .then_some(word.as_str());
        }
    }
    None
}

/// What a flag from iperf3 is in tcplab, where it has no such flag.
fn iperf3_habit(subcommand: Option<&str>, flag: &str) -> Option<&'static str> {
    Some(match (subcommand?, flag) {
        ("run", "-c" | "--client") => {
            "tcplab run takes the server as its argument: tcplab run HOST, or HOST:PORT"
        }
        ("run", "-p" | "--port") => {
            "the port goes with the server: tcplab run HOST:PORT; -P is parallel streams"
        }
        ("run", "-s" | "--server") => "the server is its own command: tcplab serve",
        ("serve", "-s" | "--server") => "tcplab serve is the server already: leave out -s",
        ("serve", "-p" | "--port") => {
            "tcplab serve takes its address and port as --listen ADDR:PORT, e.g. --listen [::]:5202"
        }
        _ => return None,
    })
}
