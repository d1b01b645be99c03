//! `tcplab man`: the manual pages, rendered from the command line's own definition
//! (clap_mangen), so every command and option has its page and no page names one that
//! does not exist.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::CommandFactory;

use crate::args::{Cli, ManArgs};
use crate::stdio::{outln, Stdout};

pub fn man(args: ManArgs) -> Result<ExitCode> {
    if let Some(dir) = &args.dir {
        let written = write_pages(dir)?;
        outln!(
            "wrote {} manual pages into {} (tcplab.1 and {} more)",
            written.len(),
            dir.display(),
            written.len() - 1
        );
        return Ok(ExitCode::SUCCESS);
    }
    manual(page(&args.command)?).render(&mut Stdout)?;
    Ok(ExitCode::SUCCESS)
}

/// A command's page, from this build of tcplab.
fn manual(command: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(command).source(format!("tcplab {}", env!("CARGO_PKG_VERSION")))
}

/// The commands below `command` that have pages: all but the hidden (internal) ones.
fn subcommands(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command.get_subcommands().filter(|c| !c.is_hide_set())
}

/// The command line, built: each subcommand named for its page (`tcplab-lab-up`) and
/// holding the global options.
fn built() -> clap::Command {
    let mut cli = Cli::command().disable_help_subcommand(true);
    cli.build();
    cli
}

/// The command `path` names (`["lab", "up"]`), or tcplab itself for an empty path.
fn page(path: &[String]) -> Result<clap::Command> {
    let mut command = built();
    for name in path {
        let Some(sub) = subcommands(&command)
            .find(|c| c.get_name() == name)
            .cloned()
        else {
            let known: Vec<&str> = subcommands(&command).map(|c| c.get_name()).collect();
            if known.is_empty() {
                bail!(
                    "'{}' has no commands below it",
                    command.get_bin_name().unwrap_or("tcplab")
                );
            }
            bail!(
                "'{}' has no command '{name}' (it has: {})",
                command.get_bin_name().unwrap_or("tcplab"),
                known.join(", ")
            );
        };
        command = sub;
    }
    Ok(command)
}

/// Writes every page into `dir`: tcplab.1, then one per command at every depth.
pub fn write_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    let mut pending = vec![built()];
    while let Some(command) = pending.pop() {
        let man = manual(command.clone());
        let file = dir.join(man.get_filename());
        let mut out = std::fs::File::create(&file)
            .with_context(|| format!("cannot write {}", file.display()))?;
        man.render(&mut out)
            .with_context(|| format!("cannot write {}", file.display()))?;
        written.push(file);
        pending.extend(subcommands(&command).cloned());
    }
    Ok(written)
}
