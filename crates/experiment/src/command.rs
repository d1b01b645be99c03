//! A command flow's run (`protocol = "command"`): a lab built for it, the server's
//! program started in the server host and waited on until it listens, the client's
//! program run in its client host until it exits or its time limit ends its process
//! group, and every TCP connection of both hosts watched meanwhile ([`Recorder`]). The
//! connections are the run's flows, stored as a run of kind `watch` with the lab's path,
//! so `results`, `explain` and the report read it as any other.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use tcplab_lab::{Host, HostPair, Lab, LabPlan};
use tcplab_model::experiment::CommandSpec;
use tcplab_record::{CommandEnd, RunRecord, RunStatus, ShellCommands, TestParams, STDERR_TAIL};
use tcplab_sys::netns::write_sysctl_in;

use crate::labrun::{sleep_unless_stopped, LabRun};
use crate::programs::{end_group, wait_for, Recorder, Server};
use crate::watch::WatchLabels;

/// A command flow of one run.
#[derive(Clone, Debug)]
pub struct CommandFlow {
    /// Its name in the experiment file, for messages.
    pub name: String,
    /// The host its client's program runs in and the one its server's does.
    pub hosts: HostPair,
    /// When the client's program starts, µs after the server's listens.
    pub start_us: u64,
    pub spec: CommandSpec,
    /// The hosts' congestion control and ECN, the sampling and report intervals.
    pub params: TestParams,
    pub label: Option<String>,
    pub tags: Vec<String>,
}

/// How often the client's program is looked at (its end, the time limit, a stop).
const POLL: Duration = Duration::from_millis(10);
/// How long a program's stderr may stay open after it ended (held by what it left).
const TAIL_WAIT: Duration = Duration::from_secs(1);

/// Runs `flow` across a lab made from `plan` and removes the lab, whatever happens. A
/// program that exits non-zero makes the run failed, with its status and the end of its
/// stderr; one its time limit ended keeps what its connections moved until then.
pub fn run_command_in_lab(
    plan: &LabPlan,
    flow: &CommandFlow,
    stop: Arc<AtomicBool>,
) -> Result<LabRun> {
    let started = Instant::now();
    let hosts = match plan {
        LabPlan::Dumbbell(config) => config.clients.len() + 1,
        LabPlan::Topology(config) => config.topology.hosts().count(),
    };
    let HostPair { client, server } = flow.hosts;
    if client >= hosts || server >= hosts || client == server {
        return Err(anyhow!(
            "flow '{}' runs from host {client} to host {server} but the lab has {hosts}",
            flow.name,
        ));
    }
    let lab = Lab::up_plan(plan).context("cannot build the lab")?;
    let outcome = run_programs(&lab, flow, &stop, started);
    let teardown = Instant::now();
    let entry = lab.entry.clone();
    let stats = lab.down().context("tearing the lab down")?;
    let (mut record, setup, test) = outcome?;
    record.path = Some(stats.record(&entry));
    Ok(LabRun {
        record,
        setup,
        test,
        teardown: teardown.elapsed(),
    })
}

/// The programs in `lab`, watched: the run's record (without its path), the setup's and
/// the test's wall time.
fn run_programs(
    lab: &Lab,
    flow: &CommandFlow,
    stop: &AtomicBool,
    started: Instant,
) -> Result<(RunRecord, Duration, Duration)> {
    set_host_tunings(lab, flow)?;
    let env: Vec<(&str, &str)> = lab
        .entry
        .host_env(flow.hosts)
        .expect("run_command_in_lab checked the hosts")
        .to_vec();
    let params = &flow.params;
    let recorder = Recorder::start(
        lab,
        flow.hosts,
        params.sample_interval_us,
        params.report_interval_us,
        "tcplab sweep",
    )?;
    let what = format!("flow '{}': server_command", flow.name);
    let server = match &flow.spec.server {
        Some(command) => {
            let (stderr, writer) = std::io::pipe().context("a pipe for the server's stderr")?;
            let tail = keep_tail(stderr);
            let (null, writer) = (Stdio::null(), writer.into());
            match Server::start(lab, flow.hosts.server, command, &what, &env, null, writer) {
                Ok(server) => Some((server, tail)),
                Err(e) => {
                    let _ = recorder.finish();
                    return Err(anyhow!(with_tail(format!("{e:#}"), &tail_of(tail))));
                }
            }
        }
        None => None,
    };
    let setup = started.elapsed();
    let test = Instant::now();
    let ran = if sleep_unless_stopped(Duration::from_micros(flow.start_us), stop) {
        run_client(lab, flow, &env, stop).map(Some)
    } else {
        Ok(None)
    };
    let server_ended = server.map(|(s, tail)| s.end().map(|status| (status, tail_of(tail))));
    let watched = recorder.finish()?;
    let test = test.elapsed();
    let ended = ran?;
    let interrupted = stop.load(Ordering::Relaxed);
    let mut record = watched.record(WatchLabels {
        label: flow.label.clone(),
        tags: flow.tags.clone(),
        filter: String::new(),
        interrupted,
    });
    record.target = format!("command {}", flow.spec.client);
    if let Some(watch) = &mut record.watch {
        watch.shell = Some(ShellCommands {
            client: ["sh", "-c", &flow.spec.client].map(String::from).to_vec(),
            server: flow.spec.server.clone(),
            ended: ended.clone(),
        });
    }
    if interrupted {
        // Stopped: an incomplete run, whatever the programs said as they were ended.
    } else if let Some(error) = failure(flow, ended.as_ref()) {
        record.status = RunStatus::Failed;
        record.error = Some(error);
    } else if let Some(Ok((Some(status), tail))) = &server_ended {
        if !status.success() {
            record.status = RunStatus::Failed;
            record.error = Some(with_tail(
                format!("{what} ended ({status}) before the command did"),
                tail,
            ));
        }
    }
    if let Some(Err(e)) = server_ended {
        return Err(e);
    }
    Ok((record, setup, test))
}

/// What makes the run failed: the client's program exited other than 0, or a signal
/// other than its time limit's ended it.
fn failure(flow: &CommandFlow, ended: Option<&CommandEnd>) -> Option<String> {
    let ended = ended?;
    if ended.timed_out || ended.code == Some(0) {
        return None;
    }
    let how = match (ended.code, ended.signal) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended without a status".to_owned(),
    };
    Some(with_tail(
        format!("flow '{}': command {how}", flow.name),
        &ended.stderr_tail,
    ))
}

/// `message`, and the end of a program's stderr where it wrote any, on one line.
fn with_tail(message: String, tail: &str) -> String {
    let lines: Vec<&str> = tail
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return message;
    }
    format!("{message}; its stderr ends: {}", lines.join(" / "))
}

/// What a program's stderr reader kept, once the program's end closed the pipe; empty
/// where something it left still holds the pipe after [`TAIL_WAIT`].
fn tail_of(reader: JoinHandle<String>) -> String {
    let until = Instant::now() + TAIL_WAIT;
    while !reader.is_finished() && Instant::now() < until {
        std::thread::sleep(POLL);
    }
    match reader.is_finished() {
        true => reader.join().unwrap_or_default(),
        false => String::new(),
    }
}

/// The hosts' settings a command's sockets take, having no tunings of their own: the
/// congestion control of both hosts, ECN asked by the client host.
fn set_host_tunings(lab: &Lab, flow: &CommandFlow) -> Result<()> {
    let (client, server) = hosts(lab, flow);
    let client = &client.ns;
    if let Some(cc) = &flow.params.tuning.cc {
        for ns in [client, &server.ns] {
            write_sysctl_in(ns, "net.ipv4.tcp_congestion_control", cc)
                .with_context(|| format!("flow '{}': cc {cc}", flow.name))?;
        }
    }
    if flow.params.tuning.ecn {
        write_sysctl_in(client, "net.ipv4.tcp_ecn", "1")
            .with_context(|| format!("flow '{}': ecn", flow.name))?;
    }
    Ok(())
}

/// The flow's client and server hosts, which [`run_command_in_lab`] checked.
fn hosts<'a>(lab: &'a Lab, flow: &CommandFlow) -> (&'a Host, &'a Host) {
    lab.pair(flow.hosts)
        .expect("run_command_in_lab checked the hosts")
}

/// Runs the client's program by `sh -c` in its host, in a process group of its own,
/// until it exits, its time limit passes or `stop` is set (then its group is ended).
fn run_client(
    lab: &Lab,
    flow: &CommandFlow,
    env: &[(&str, &str)],
    stop: &AtomicBool,
) -> Result<CommandEnd> {
    let limit = Duration::from_micros(flow.spec.limit_us);
    let command = &flow.spec.client;
    // The path's schedule counts from the client program's start.
    lab.start_test_now();
    let mut child = hosts(lab, flow)
        .0
        .ns
        .run(|| {
            Command::new("sh")
                .arg("-c")
                .arg(command)
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn()
        })?
        .with_context(|| format!("flow '{}': cannot start sh", flow.name))?;
    let started = Instant::now();
    let tail = keep_tail(child.stderr.take().expect("stderr is piped"));
    let mut timed_out = false;
    let status: ExitStatus = loop {
        if let Some(status) = wait_for(&mut child, POLL)? {
            break status;
        }
        if started.elapsed() >= limit {
            timed_out = true;
            break end_group(&mut child)?;
        }
        if stop.load(Ordering::Relaxed) {
            break end_group(&mut child)?;
        }
    };
    let wall_us = started.elapsed().as_micros() as u64;
    let stderr_tail = tail_of(tail);
    Ok(CommandEnd {
        code: status.code(),
        signal: status.signal(),
        timed_out,
        wall_us,
        stderr_tail,
    })
}

/// Reads `stderr` to its end on a thread, keeping its last [`STDERR_TAIL`] bytes.
fn keep_tail(mut stderr: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > STDERR_TAIL {
                kept.drain(..kept.len() - STDERR_TAIL);
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> CommandFlow {
        CommandFlow {
            name: "scp".into(),
            hosts: HostPair::client(0),
            start_us: 0,
            spec: CommandSpec {
                client: "scp a b".into(),
                server: None,
                limit_us: 1_000_000,
            },
            params: TestParams::default(),
            label: None,
            tags: Vec::new(),
        }
    }

    fn ended(code: Option<i32>, signal: Option<i32>, timed_out: bool, tail: &str) -> CommandEnd {
        CommandEnd {
            code,
            signal,
            timed_out,
            wall_us: 1,
            stderr_tail: tail.into(),
        }
    }

    #[test]
    fn a_run_fails_on_a_non_zero_exit_or_a_signal_not_its_limit_s() {
        let f = flow();
        assert_eq!(failure(&f, None), None);
        assert_eq!(
            failure(&f, Some(&ended(Some(0), None, false, "noise"))),
            None
        );
        assert_eq!(failure(&f, Some(&ended(None, Some(15), true, ""))), None);
        assert_eq!(
            failure(&f, Some(&ended(Some(255), None, false, "scp: a\n\nlost connection\n"))),
            Some(
                "flow 'scp': command exited with status 255; its stderr ends: scp: a / lost connection"
                    .into()
            )
        );
        assert_eq!(
            failure(&f, Some(&ended(None, Some(9), false, ""))),
            Some("flow 'scp': command was killed by signal 9".into())
        );
    }

    #[test]
    fn only_the_end_of_stderr_is_kept() {
        let text: Vec<u8> = (0..3000).map(|i| b'a' + (i % 26) as u8).collect();
        let kept = keep_tail(std::io::Cursor::new(text.clone()))
            .join()
            .unwrap();
        assert_eq!(kept.as_bytes(), &text[text.len() - STDERR_TAIL..]);
    }
}
