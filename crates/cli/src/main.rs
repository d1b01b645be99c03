//! `tcplab`: a TCP performance lab in one binary.

mod args;
mod commands;
mod explain;
mod lab;
mod manual;
mod output;
mod report;
mod sweep;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use args::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // Namespaces before any thread exists: setns and unshare move the calling thread
    // only, and a user namespace admits single-threaded processes only.
    if let Some(ns) = &cli.netns {
        if let Err(e) = tcplab_sys::netns::enter_current_thread(ns) {
            eprintln!("tcplab: cannot enter netns '{ns}': {e}");
            return ExitCode::FAILURE;
        }
    }
    if builds_labs(&cli.command) {
        tcplab_sys::netns::prepare();
    }
    if prints_only(&cli.command) {
        // Like other Unix filters, end quietly when the reader goes away (`| head`)
        // instead of panicking on EPIPE. Commands that use sockets keep SIGPIPE ignored.
        // SAFETY: restores the default disposition before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Command::Serve(args) => commands::serve(args),
        Command::Run(args) => commands::run(args),
        Command::Quickstart(args) => commands::quickstart(args),
        Command::Lab(cmd) => lab::command(cmd),
        Command::Shell(args) => lab::shell(args),
        Command::Runs { db } => commands::list_runs(&db),
        Command::Export(args) => commands::export(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::Results(args) => sweep::results(args),
        Command::Compare(args) => sweep::compare(args),
        Command::Merge(args) => sweep::merge(args),
        Command::Explain(args) => explain::run(args),
        Command::Report(args) => report::report(args),
        Command::Plot(args) => report::plot(args),
        Command::PathSpec => {
            print!("{}", tcplab_model::path::grammar());
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            let mut cli = Cli::command();
            clap_complete::generate(shell, &mut cli, "tcplab", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man(args) => manual::man(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tcplab: {e:#}");
            ExitCode::FAILURE
        }
    }
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

/// Commands that only read files and print.
fn prints_only(command: &Command) -> bool {
    match command {
        Command::Runs { .. }
        | Command::Export(_)
        | Command::Results(_)
        | Command::Compare(_)
        | Command::Merge(_)
        | Command::Explain(_)
        | Command::Report(_)
        | Command::Plot(_)
        | Command::PathSpec
        | Command::Completions { .. }
        | Command::Man(_) => true,
        Command::Sweep(args) => args.dry_run,
        Command::Lab(cmd) => matches!(
            cmd,
            args::LabCommand::List { .. } | args::LabCommand::Show { .. }
        ),
        _ => false,
    }
}

/// Help and version print as clap renders them; every other parse error becomes one
/// line naming the bad token, with exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
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
    eprintln!(
        "tcplab: {}",
        message.join(" ").trim_start_matches("error: ")
    );
    ExitCode::from(2)
}
