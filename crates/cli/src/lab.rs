//! `tcplab lab …`: labs that outlive the command that made them.
//!
//! `lab up` starts `tcplab lab daemon` as a detached process that builds the lab, runs
//! its emulator and answers on a Unix socket (`show`, `down`; the protocol and the
//! serving are `tcplab_lab::daemon`'s, this module parses and prints) until told to stop
//! or signalled. The registry (`tcplab_lab::registry`) remembers every lab with its
//! process, so `lab gc` can remove the namespaces of a daemon that died. `lab exec`
//! runs a command in a host; without root it joins the daemon's user namespace first.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use tcplab_analysis::events::{self, ConnectionPorts};
use tcplab_experiment::programs::{under_init, Recorder, Server, LISTEN_TIMEOUT};
use tcplab_experiment::watch::{WatchLabels, Watched};
use tcplab_lab::daemon::{self, Startup, ANSWER_TIMEOUT};
use tcplab_lab::far::FarHost;
use tcplab_lab::registry::{self, LabEntry};
use tcplab_lab::{Backend, Host, HostPair, Lab, LabConfig, LabPlan, LinkCaptures, TopologyConfig};
use tcplab_model::sockdiag::{Extensions, Families, StateSet};
use tcplab_netsim::dumbbell::Dumbbell;
use tcplab_netsim::path::{Pace, PathSpec};
use tcplab_netsim::topology::{Topology, TopologyError};
use tcplab_record::tcp_state::TcpState;
use tcplab_record::units::{count, format_duration_us};
use tcplab_record::ShellCommands;
use tcplab_report::table::{aligned, Align};
use tcplab_store::NotStored;
use tcplab_sys::sockdiag::{Query, SockDiag};
use tcplab_sys::trace::{Trace, TraceError};
use tcplab_sys::{netns, reaper};

use crate::args::{BackendArg, FarArg, LabCommand, PathArgs, ShellArgs, TopologyHostsArgs};
use crate::shared::{interrupt_flag, lab_lines, open_store, priority_note, topology_lines};
use crate::stdio::{errln, out, outln, Stdout};

/// The lab `PathArgs` ask for, or `None` without `--path`.
pub fn config(args: &PathArgs, name: &str) -> Result<Option<LabConfig>> {
    let Some(path) = args.path.clone() else {
        if !args.client_paths.is_empty()
            || args.clients != 1
            || matches!(args.backend, BackendArg::Netem)
            || !args.sysctls.is_empty()
            || args.capture.capture.is_some()
        {
            bail!("--clients, --client-path, --backend, --sysctl and --capture need --path");
        }
        return Ok(None);
    };
    if let Some(link) = args.capture.capture_links.first() {
        bail!("--capture-link {link}: a dumbbell's capture is of its bottleneck (--capture-at says where); --capture-link chooses a topology's links");
    }
    let clients = access_links(args.clients, &args.client_paths)?;
    let backend = match args.backend {
        BackendArg::Emulator => Backend::Emulator,
        BackendArg::Netem => Backend::Netem,
    };
    let capture = args.capture.spec()?;
    if capture.is_some() && backend == Backend::Netem {
        bail!("--capture needs the emulator: leave out --backend netem");
    }
    Ok(Some(LabConfig {
        name: name.to_string(),
        path,
        clients,
        backend,
        sysctls: args.sysctls.iter().cloned().collect(),
        capture,
        control_port: None,
    }))
}

/// Each of `clients` clients' access link from --client-path: none (ideal), one for
/// all, or one each.
fn access_links(clients: u16, given: &[PathSpec]) -> Result<Vec<PathSpec>> {
    let n = clients as usize;
    Ok(match given.len() {
        0 => vec![PathSpec::default(); n],
        1 => vec![given[0].clone(); n],
        k if k == n => given.to_vec(),
        k => bail!(
            "--client-path given {} for {}: give it once (for all) or once per client",
            count(k, "time"),
            count(n, "client")
        ),
    })
}

/// `lab topology`: the dumbbell's topology file, on stdout.
fn print_topology(path: &PathSpec, clients: u16, client_paths: &[PathSpec]) -> Result<ExitCode> {
    let access = access_links(clients, client_paths)?;
    let dumbbell = Dumbbell::new(path, &access);
    dumbbell.check()?;
    out!("{}", dumbbell.topology_file()?);
    Ok(ExitCode::SUCCESS)
}

pub fn command(cmd: LabCommand) -> Result<ExitCode> {
    match cmd {
        LabCommand::Up {
            name,
            topology,
            path,
        } => up(&name, topology.topology.as_deref(), &path),
        LabCommand::Down { name } => down(&name),
        LabCommand::List { json } => list(json),
        LabCommand::Show { name, json } => show(&name, json),
        LabCommand::Topology {
            path,
            clients,
            client_paths,
        } => print_topology(&path, clients, &client_paths),
        LabCommand::Gc => {
            let lines = gc_lines(&registry::gc().context("removing leftover labs")?);
            if lines.is_empty() {
                outln!("nothing to remove");
            }
            for line in lines {
                outln!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        LabCommand::Exec {
            name,
            host,
            command,
        } => exec(&name, &host, &command),
        LabCommand::Daemon {
            name,
            topology,
            path,
        } => daemon(&name, topology.topology.as_deref(), &path),
        LabCommand::ShellInit {
            name,
            owner,
            lifeline,
            command,
        } => shell_init(&name, owner, lifeline, &command),
    }
}

/// A line per lab and per namespace that [`registry::gc`] removed.
pub fn gc_lines(removed: &registry::Removed) -> Vec<String> {
    let labs = removed.labs.iter().map(|lab| {
        format!(
            "removed leftover lab {} (its process {} died)",
            lab.name, lab.pid
        )
    });
    let namespaces = removed.namespaces.iter().map(|ns| match ns.pid {
        Some(pid) => format!(
            "removed leftover netns {} (its process {pid} died)",
            ns.name
        ),
        None => format!(
            "removed leftover netns {} (its mark was unreadable)",
            ns.name
        ),
    });
    let processes = removed
        .processes
        .iter()
        .map(|(place, p)| ended_line(p, place));
    let traces = removed
        .trace_instances
        .iter()
        .map(|name| format!("removed leftover tracefs instance {name} (its process died)"));
    processes
        .chain(labs)
        .chain(namespaces)
        .chain(traces)
        .collect()
}

/// The line for a process ended because it was left in `place` (a lab or a netns).
fn ended_line(p: &netns::Ended, place: &str) -> String {
    format!(
        "ended process {} ({}) left in leftover {place}",
        p.pid, p.command
    )
}

/// `lab exec NAME HOST -- CMD…`: becomes the command, inside the host. Runs before any
/// thread exists (entering a namespace moves one thread only).
fn exec(name: &str, host: &str, command: &[String]) -> Result<ExitCode> {
    registry::check_name(name).map_err(anyhow::Error::msg)?;
    let entry =
        registry::get(name)?.ok_or_else(|| anyhow!("no lab named {name} (see tcplab lab list)"))?;
    if !registry::pid_alive(entry.pid) {
        bail!("lab {name} is a leftover of a dead process (run tcplab lab gc)");
    }
    let ns = &entry.host(host).map_err(anyhow::Error::msg)?.ns;
    netns::enter_current_thread(ns)
        .with_context(|| format!("cannot enter {host} of lab {name}"))?;
    let (program, rest) = command.split_first().expect("clap requires a command");
    let error = Command::new(program)
        .args(rest)
        .envs(entry.host_env(HostPair::client(0)).into_iter().flatten())
        .exec();
    bail!("cannot run {program}: {error}")
}

fn up(name: &str, topology: Option<&Path>, args: &PathArgs) -> Result<ExitCode> {
    registry::check_name(name).map_err(anyhow::Error::msg)?;
    let mut cmd = Command::new(std::env::current_exe().context("locating the tcplab binary")?);
    cmd.args(["lab", "daemon", name]);
    match topology {
        Some(file) => {
            // Checked here, before any namespace: the daemon reads it again.
            let config = topology_config(name, file, args)?;
            refuse_window_pacers(named_links(&config), STANDING_SENDERS)?;
            let file = std::path::absolute(file)
                .with_context(|| format!("topology {}", file.display()))?;
            cmd.arg("--topology").arg(file);
            if let Some(capture) = config.capture {
                cmd.arg("--capture").arg(capture.dir);
                cmd.arg("--capture-snaplen")
                    .arg(capture.snaplen.to_string());
                for link in capture.links {
                    cmd.arg("--capture-link").arg(link);
                }
            }
        }
        None => daemon_path_args(name, args, &mut cmd)?,
    }
    for (key, value) in &args.sysctls {
        cmd.arg("--sysctl").arg(format!("{key}={value}"));
    }
    if let Some((old, ended)) = registry::remove_leftover(name)
        .with_context(|| format!("removing the leftover lab {name}"))?
    {
        for p in ended {
            outln!("{}", ended_line(&p, &format!("lab {name}")));
        }
        outln!("removed leftover lab {name} (its process {} died)", old.pid);
    }
    // Its own process group: a Ctrl-C meant for the shell must not stop the lab.
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the lab daemon")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    match Startup::decode(&line) {
        Ok(Startup::Ready) => {}
        Ok(Startup::Failed(why)) => {
            let _ = child.wait();
            bail!("{why}");
        }
        Err(e) => {
            let _ = child.wait();
            bail!(e);
        }
    }
    let entry = registry::get(name)?.ok_or_else(|| anyhow!("lab {name} is not registered"))?;
    print_entry(&entry);
    if let (Some(topology), Some(dir)) = (&entry.topology, &args.capture.capture) {
        let chosen = &args.capture.capture_links;
        outln!(
            "  capturing both ways of {}, with each packet's fate, into {} until lab down",
            if chosen.is_empty() {
                "each link"
            } else {
                "these links"
            },
            topology
                .links
                .iter()
                .filter(|link| chosen.is_empty() || chosen.contains(&link.name))
                .map(|link| dir
                    .join(format!("{}.pcapng", link.name))
                    .display()
                    .to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    } else if let Some(spec) = args.capture.spec()? {
        outln!(
            "  capturing both directions {}, with each packet's fate, into {} until lab down",
            spec.at.place(),
            spec.file.display()
        );
    }
    if let Some(note) = priority_note() {
        outln!("  {note}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The two hosts of `config`'s topology that --client-host and --server-host name (by
/// default its second host and its first), as places of [`Lab::host`].
pub(crate) fn host_pair(config: &TopologyConfig, args: &TopologyHostsArgs) -> Result<HostPair> {
    let topology = &config.topology;
    let hosts: Vec<&str> = topology
        .hosts()
        .map(|id| topology.nodes[id].name.as_str())
        .collect();
    let place = |name: &Option<String>, default: usize, flag: &str| match name {
        None => Ok(default),
        Some(name) => hosts.iter().position(|h| h == name).ok_or_else(|| {
            anyhow!(
                "{flag} {name}: no such host in topology {} (hosts: {})",
                config.file,
                hosts.join(", ")
            )
        }),
    };
    let pair = HostPair {
        client: place(&args.client_host, 1, "--client-host")?,
        server: place(&args.server_host, 0, "--server-host")?,
    };
    if pair.client == pair.server {
        bail!("--client-host and --server-host are the same host: a test runs between two");
    }
    Ok(pair)
}

/// The daemon's flags for a dumbbell `args` ask for, checked first.
fn daemon_path_args(name: &str, args: &PathArgs, cmd: &mut Command) -> Result<()> {
    let Some(path) = &args.path else {
        bail!("lab up needs --path SPEC (an empty spec \"\" is an ideal path) or --topology FILE");
    };
    refuse_window_pacers([("--path".to_owned(), path)], STANDING_SENDERS)?;
    config(args, name)?;
    // Every flag the daemon needs: a field added to PathArgs must be passed on here.
    let PathArgs {
        path,
        clients,
        client_paths,
        backend,
        sysctls: _,
        capture,
    } = args;
    cmd.args(["--clients", &clients.to_string()]);
    cmd.arg("--path")
        .arg(path.as_ref().expect("checked").to_string());
    if matches!(backend, BackendArg::Netem) {
        cmd.args(["--backend", "netem"]);
    }
    for access in client_paths {
        cmd.arg("--client-path").arg(access.to_string());
    }
    if let Some(spec) = capture.spec()? {
        cmd.arg("--capture").arg(spec.file);
        cmd.arg("--capture-snaplen").arg(spec.snaplen.to_string());
        cmd.arg("--capture-at").arg(spec.at.name());
    }
    Ok(())
}

/// A dynamic gap pacer (`pace cwnd`) on any of `paths` (each named by where it is
/// given), refused where the lab's senders are not tcplab's own, which publish the
/// window rate it follows: `unseen` says why.
fn refuse_window_pacers<'a>(
    paths: impl IntoIterator<Item = (String, &'a PathSpec)>,
    unseen: &str,
) -> Result<()> {
    for (place, path) in paths {
        for pace in [path.up.pace, path.down.pace] {
            if let Some(Pace::Window(rtt)) = pace {
                bail!("{place}: pace {} follows the senders' tcp_info, which {unseen}: use it with `tcplab run` or a sweep, or give pace a rate", rtt.name());
            }
        }
    }
    Ok(())
}

/// A topology's links, named for [`refuse_window_pacers`].
fn named_links(config: &TopologyConfig) -> impl Iterator<Item = (String, &PathSpec)> {
    config.topology.links.iter().map(move |link| {
        (
            format!("topology {}: link {}", config.file, link.name),
            &link.path,
        )
    })
}

/// The lab a topology file asks for, read and checked: one line naming the file and
/// what is wrong in it.
pub(crate) fn topology_config(name: &str, file: &Path, args: &PathArgs) -> Result<TopologyConfig> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("topology {}", file.display()))?;
    let topology: Topology = text.parse().map_err(|e| match e {
        TopologyError::Syntax(why) => anyhow!("topology {}: {why}", file.display()),
        e => anyhow!("topology {}: {e}", file.display()),
    })?;
    let capture = args
        .capture
        .capture
        .as_deref()
        .map(|dir| {
            std::path::absolute(dir)
                .map(|dir| LinkCaptures {
                    dir,
                    snaplen: args.capture.capture_snaplen,
                    links: args.capture.capture_links.clone(),
                })
                .with_context(|| format!("--capture {}", dir.display()))
        })
        .transpose()?;
    Ok(TopologyConfig {
        name: name.to_owned(),
        seed: topology.seed,
        topology,
        file: file.display().to_string(),
        sysctls: args.sysctls.iter().cloned().collect(),
        control_port: None,
        capture,
    })
}

fn print_entry(entry: &LabEntry) {
    if let Some(topology) = &entry.topology {
        for line in topology_lines(entry, topology) {
            outln!("{line}");
        }
        return;
    }
    outln!(
        "lab {} up (pid {}): path \"{}\"",
        entry.name,
        entry.pid,
        entry.path
    );
    for line in entry.bdp_lines() {
        outln!("  {line}");
    }
    outln!(
        "  server {:<12} {} {}",
        entry.server.ns,
        entry.server.addr,
        entry.server.addr6
    );
    for c in &entry.clients {
        let access = c
            .access
            .as_deref()
            .map(|a| format!("  access \"{a}\""))
            .unwrap_or_default();
        outln!("  client {:<12} {} {}{access}", c.ns, c.addr, c.addr6);
    }
    outln!("  {}", entry.floor_line());
}

fn down(name: &str) -> Result<ExitCode> {
    registry::check_name(name).map_err(anyhow::Error::msg)?;
    match registry::get(name)? {
        Some(entry) if !registry::pid_alive(entry.pid) => {
            for p in registry::remove(&entry).context("removing the leftover lab")? {
                outln!("{}", ended_line(&p, &format!("lab {name}")));
            }
            outln!("lab {name} was a leftover of a dead process; removed");
        }
        Some(_) => {
            daemon::down(name)?;
            outln!("lab {name} down");
        }
        None => bail!("no lab named {name} (see tcplab lab list)"),
    }
    Ok(ExitCode::SUCCESS)
}

fn list(json: bool) -> Result<ExitCode> {
    let labs = registry::list()?;
    if json {
        let rows: Vec<_> = labs
            .iter()
            .map(|e| json!({"lab": e, "alive": registry::pid_alive(e.pid)}))
            .collect();
        outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    let header = ["name", "pid", "state", "server", "clients", "path"];
    let mut rows = vec![header.map(String::from).to_vec()];
    for e in &labs {
        let state = if registry::pid_alive(e.pid) {
            "up"
        } else {
            "leftover"
        };
        rows.push(vec![
            e.name.clone(),
            e.pid.to_string(),
            state.into(),
            e.server.addr.to_string(),
            e.clients.len().to_string(),
            e.topology
                .as_ref()
                .map_or_else(|| e.path.clone(), |t| format!("topology {}", t.file)),
        ]);
    }
    // The counts line up on the right.
    let align = |c| match header[c] {
        "pid" | "clients" => Align::Right,
        _ => Align::Left,
    };
    for line in aligned(&rows, align) {
        outln!("{line}");
    }
    for ns in registry::unregistered_leftovers()? {
        let by = ns
            .pid
            .map_or("an unknown process".into(), |pid| format!("process {pid}"));
        outln!(
            "leftover netns {} of {by}, which died (tcplab lab gc removes it)",
            ns.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show(name: &str, json: bool) -> Result<ExitCode> {
    registry::check_name(name).map_err(anyhow::Error::msg)?;
    let shown = daemon::show(name)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_entry(&shown.lab);
    // Each emulator thread's: a dumbbell's directions, a topology's ways toward its
    // first host (`up`) and the others (its hops named by their ends).
    for (dir, s) in [("up   ", &shown.up), ("down ", &shown.down)] {
        for link in &s.links {
            let c = &link.counters;
            outln!(
                "  {dir}{:<16} in {} pkts / {} B, delivered {}, dropped loss {} queue {} aqm {}{}, queue {} pkts / {} B (max {} B)",
                link.name,
                c.packets_in,
                c.bytes_in,
                c.delivered_packets,
                c.dropped_loss,
                c.dropped_queue,
                c.dropped_aqm,
                tcplab_report::describe::run::policed(c, " "),
                c.queue_packets,
                c.queue_bytes,
                c.max_queue_bytes
            );
            if let Some(own) = tcplab_report::describe::run::own_traffic(link) {
                outln!("  {dir}{:<16} {own}", "");
            }
        }
        outln!(
            "  {dir}lateness p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs over {}{}",
            s.lateness.p50_us,
            s.lateness.p99_us,
            s.lateness.max_us,
            count(s.lateness.packets, "packet"),
            unprivileged(s)
        );
        if let Some(d) = &s.delay {
            outln!(
                "  {dir}one-way delay of the data packets p50 {}, p95 {}, p99 {}, max {} over {}",
                format_duration_us(d.p50_us.round() as u64),
                format_duration_us(d.p95_us.round() as u64),
                format_duration_us(d.p99_us.round() as u64),
                format_duration_us(d.max_us.round() as u64),
                count(d.packets, "packet"),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Why a shell's lab has no dynamic gap pacer.
const SHELL_SENDERS: &str = "a shell's programs do not publish";
/// Why a standing lab (`lab up`) has none.
const STANDING_SENDERS: &str = "a standing lab cannot see";

/// What a direction of the emulator ran without, to read its lateness by: " (normal
/// priority, CPUs may sleep)", or nothing.
fn unprivileged(s: &tcplab_record::DirectionStats) -> String {
    let missing: Vec<&str> = [
        (!s.realtime).then_some("normal priority"),
        (!s.cpus_awake).then_some("CPUs may sleep"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        String::new()
    } else {
        format!(" ({})", missing.join(", "))
    }
}

/// `tcplab shell`: an ephemeral lab, the command in its client host, the command's exit
/// status. The far side is the lab's server host (start a peer there with
/// `tcplab --netns $TCPLAB_SERVER_NS …`) and, with `--far host`, the caller's namespace
/// beyond it, as in mahimahi.
pub fn shell(args: ShellArgs) -> Result<ExitCode> {
    let name = format!("sh{}", netns::own_pid());
    let (lab, hosts) = match &args.topology.topology {
        Some(file) => {
            if args.far == FarArg::Host {
                FarHost::possible().context("cannot reach this namespace through the lab")?;
            }
            let config = topology_config(&name, file, &args.path)?;
            refuse_window_pacers(named_links(&config), SHELL_SENDERS)?;
            let hosts = host_pair(&config, &args.hosts)?;
            (LabPlan::Topology(Box::new(config)), hosts)
        }
        None => {
            let config = config(&args.path, &name)?.ok_or_else(|| {
                anyhow!("shell needs --path SPEC (an empty spec \"\" is an ideal path) or --topology FILE")
            })?;
            refuse_window_pacers([("--path".to_owned(), &config.path)], SHELL_SENDERS)?;
            if args.far == FarArg::Host {
                if config.backend == Backend::Netem {
                    bail!("--far host needs the emulator: leave out --backend netem");
                }
                FarHost::possible().context("cannot reach this namespace through the lab")?;
            }
            (LabPlan::Dumbbell(Box::new(config)), HostPair::client(0))
        }
    };
    // Checked before the lab is built: a database that cannot be opened.
    let mut store = args.record.as_deref().map(open_store).transpose()?;
    // The command gets Ctrl-C from the terminal itself; we only wait for it.
    let _ = interrupt_flag();
    let lab = Lab::up_plan(&lab).context("cannot build the lab")?;
    // Dropped before the lab goes down.
    let far = match args.far {
        FarArg::Server => None,
        FarArg::Host => match FarHost::attach(&lab) {
            Ok(far) => Some(far),
            Err(e) => {
                let _ = lab.down();
                return Err(anyhow!(e).context("cannot reach this namespace through the lab"));
            }
        },
    };
    // On stderr, leaving stdout to the command: the seed its links draw from, above all.
    for line in lab_lines(&lab) {
        errln!("{line}");
    }
    if let Some(far) = &far {
        errln!(
            "  far side: this namespace, at {} from behind the path (TCPLAB_HOST)",
            far.host_addr
        );
    }
    let host_addr = far.as_ref().map(|far| far.host_addr.to_string());
    let ran = run_commands(&lab, hosts, &args, host_addr, store.is_some());
    let (ran, trace) = match ran {
        Ok((status, watched, trace)) => (Ok((status, watched)), trace),
        Err(e) => (Err(e), None),
    };
    drop(far);
    let entry = lab.entry.clone();
    let stats = lab.down().context("tearing the lab down")?;
    let (status, watched) = ran?;
    if let (Some(store), Some(watched)) = (&mut store, watched) {
        let (closed, open) = watched.tracker.counts();
        errln!("tcplab shell: {}", watched.summary_line(closed, open));
        let t0_us = watched.tracker.config().t0_us;
        let mut record = watched.record(WatchLabels {
            label: args.label.clone(),
            tags: Vec::new(),
            filter: String::new(),
            interrupted: false,
        });
        record.target = format!("shell {}", shell_words(&args.command));
        record.path = Some(stats.record(&entry));
        if let Some(watch) = &mut record.watch {
            watch.shell = Some(ShellCommands {
                client: args.command.clone(),
                server: args.server_cmd.clone(),
                ended: None,
            });
        }
        if let Some(trace) = trace {
            let port = |addr: &str| addr.parse::<std::net::SocketAddr>().ok().map(|a| a.port());
            let ports = ConnectionPorts {
                flows: record
                    .flows
                    .iter()
                    .filter_map(|f| Some((f.id, port(&f.client_addr)?, port(&f.server_addr)?)))
                    .collect(),
            };
            let (taken, events) =
                tcplab_traffic::events::finish(trace, |line| ports.attribute(line, t0_us));
            if let Some(note) = &taken.note {
                errln!("tcplab shell: {note}");
            }
            record.trace = Some(taken);
            record.events = events;
        }
        match store.insert_run(&record) {
            Ok(id) => errln!(
                "tcplab shell: stored as run {id} in {}",
                store.path().display()
            ),
            Err(e) => return Err(NotStored::keeping(store.path(), e, Some(&record)).into()),
        }
    }
    Ok(ExitCode::from(status.clamp(0, 255) as u8))
}

/// The command line as one string, each word quoted where the shell would need it.
fn shell_words(words: &[String]) -> String {
    let quoted: Vec<String> = words
        .iter()
        .map(|w| {
            let plain = !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+$".contains(c));
            if plain {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect();
    quoted.join(" ")
}

/// Runs `--server-cmd` (if any) in `hosts`' server host, then the command in its
/// client host, watching both with `record`: the command's exit code, what was watched,
/// and the kernel's events (`--trace-events`), still to be read.
fn run_commands(
    lab: &Lab,
    hosts: HostPair,
    args: &ShellArgs,
    host_addr: Option<String>,
    record: bool,
) -> Result<(i32, Option<Watched>, Option<TraceStarted>)> {
    let (client, server_host) = lab
        .pair(hosts)
        .ok_or_else(|| anyhow!("lab {} has no hosts {hosts:?}", lab.name()))?;
    let mut env: Vec<(&str, &str)> = lab
        .entry
        .host_env(hosts)
        .ok_or_else(|| anyhow!("lab {} has no hosts {hosts:?}", lab.name()))?
        .to_vec();
    if let Some(addr) = &host_addr {
        env.push(("TCPLAB_HOST", addr));
    }
    let recorder = record
        .then(|| {
            Recorder::start(
                lab,
                hosts,
                args.sample_interval,
                SHELL_REPORT_INTERVAL_US,
                "tcplab shell",
            )
        })
        .transpose()?;
    if let Some(line) = recorder.as_ref().and_then(|r| r.polling_only.as_ref()) {
        errln!("{line}");
    }
    let server = match &args.server_cmd {
        Some(command) => match start_server(lab, hosts.server, command, &env) {
            Ok(server) => Some(server),
            Err(e) => {
                if let Some(recorder) = recorder {
                    let _ = recorder.finish();
                }
                return Err(e);
            }
        },
        None => None,
    };
    // Started once the server listens: its ports are the filter.
    let trace = args.trace_events.then(|| start_trace(server_host));
    // The path's schedule counts from the command's start.
    lab.start_test_now();
    let status = under_init(lab, &client.ns, &args.command, &env, |_| {}).and_then(
        |(mut init, lifeline)| {
            let status = init.wait().context("running the command's init");
            drop(lifeline);
            status
        },
    );
    let ended = server.map(end_server).transpose();
    let watched = recorder.map(Recorder::finish).transpose()?;
    ended?;
    let code = status?.code().unwrap_or(1);
    Ok((code, watched, trace))
}

/// A trace of the kernel's events, or why it could not be started.
type TraceStarted = Result<Trace, TraceError>;

/// The kernel's tcp events of the connections to the ports the server host listens on,
/// or of every connection where it listens on none.
fn start_trace(server: &Host) -> TraceStarted {
    let listening = Query {
        families: Families::Both,
        states: StateSet::EMPTY.with(TcpState::Listen),
        extensions: Extensions::NONE,
        filter: None,
    };
    let mut listeners = Vec::new();
    // A failed dump leaves the filter open: the events are attributed by their ports.
    if let Ok(mut diag) = SockDiag::open_in(&server.ns) {
        let _ = diag.dump(&listening, &mut listeners);
    }
    let mut ports: Vec<u16> = listeners.iter().map(|l| l.key.local.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    let filter = match ports.is_empty() {
        true => "sport != 0".to_owned(),
        false => ports
            .iter()
            .map(|&p| events::port_filter(p))
            .collect::<Vec<_>>()
            .join(" || "),
    };
    Trace::start(&events::TRACEPOINTS, &filter)
}

/// Each watched connection's interval of `shell --record` is cut this often.
const SHELL_REPORT_INTERVAL_US: u64 = 1_000_000;

/// `--server-cmd`'s program in host `server`, its stdout on our stderr (stdout is the
/// command's); said if it listens on no port in time.
fn start_server(lab: &Lab, server: usize, command: &str, env: &[(&str, &str)]) -> Result<Server> {
    let stdout = std::io::stderr().as_fd().try_clone_to_owned()?;
    let what = format!("--server-cmd '{command}'");
    let server = Server::start(
        lab,
        server,
        command,
        &what,
        env,
        stdout.into(),
        Stdio::inherit(),
    )?;
    if !server.listening {
        errln!(
            "tcplab shell: {what} listens on no TCP port after {} s; starting the command anyway",
            LISTEN_TIMEOUT.as_secs()
        );
    }
    Ok(server)
}

/// Ends `--server-cmd`'s program, saying how it ended unless it was told to.
fn end_server(server: Server) -> Result<()> {
    let what = server.what().to_owned();
    if let Some(status) = server.end()? {
        if !status.success() {
            errln!("tcplab shell: {what} ended ({status})");
        }
    }
    Ok(())
}

/// `lab shell-init`: pid 1 of a `shell` command's pid namespace. Exits with the
/// command's status (128 + the signal that killed it) once it and everything it left
/// are gone; if the shell's process dies first, ends them all and removes its lab.
fn shell_init(name: &str, owner: u32, lifeline: i32, command: &[String]) -> Result<ExitCode> {
    let (program, rest) = command.split_first().expect("clap requires a command");
    let child = Command::new(program)
        .args(rest)
        .spawn()
        .with_context(|| format!("cannot run {program}"))?;
    let end = reaper::init(child, lifeline).context("watching the shell's command")?;
    if let reaper::InitEnd::OwnerDied = end {
        // The pipe closes as the owner exits, a moment before /proc counts it dead.
        let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
        while registry::pid_alive(owner) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        registry::remove_leftover(name)
            .with_context(|| format!("removing lab {name}, whose shell died"))?;
    }
    Ok(ExitCode::from(end.code().clamp(0, 255) as u8))
}

/// Builds the lab and serves requests about it until `down` or a signal. Before it
/// serves, says `ready` or why not on stdout, where `lab up` reads it.
fn daemon(name: &str, topology: Option<&Path>, args: &PathArgs) -> Result<ExitCode> {
    let stop = interrupt_flag();
    let lab = match topology {
        Some(file) => topology_config(name, file, args)
            .and_then(|c| Lab::up_topology(&c).map_err(anyhow::Error::from)),
        None => config(args, name)
            .and_then(|c| c.ok_or_else(|| anyhow!("--path is required")))
            .and_then(|c| Lab::up(&c).map_err(anyhow::Error::from)),
    };
    let started = lab.and_then(|lab| {
        let socket = registry::socket_path(name)?;
        let _ = std::fs::remove_file(&socket);
        let listener =
            UnixListener::bind(&socket).with_context(|| format!("binding {}", socket.display()))?;
        Ok((lab, listener))
    });
    let (lab, listener) = match started {
        Ok(started) => started,
        Err(e) => {
            outln!("{}", Startup::Failed(format!("{e:#}")).encode());
            return Ok(ExitCode::FAILURE);
        }
    };
    // A lab of its own serves whatever the user runs: its schedule counts from now.
    lab.start_test_now();
    outln!("{}", Startup::Ready.encode());
    let _ = Stdout.flush();
    daemon::serve(lab, &listener, &stop)?;
    Ok(ExitCode::SUCCESS)
}
