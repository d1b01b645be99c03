//! Programs in a lab's hosts, watched: a server's program started in the server host and
//! waited on until it listens ([`Server`]), and a watch of every TCP connection of the
//! client and server hosts on one clock, on a thread of its own ([`Recorder`]).
//! `tcplab shell --server-cmd --record` and an experiment's command flows use both.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tcplab_lab::{HostPair, Lab};
use tcplab_model::sockdiag::{Extensions, Families, StateSet};
use tcplab_record::tcp_state::TcpState;
use tcplab_sys::netns;
use tcplab_sys::reaper::{self, Lifeline};
use tcplab_sys::sockdiag::{Query, SockDiag};

use crate::watch::{follow, open_trace, polling_only, Keep, Quiet, Selection, Watch, Watched};

/// How long the server's program may take to listen before the client's starts anyway.
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the server's program may take to end by itself once the client's has, and
/// then after SIGTERM, before SIGKILL.
pub const END_GRACE: Duration = Duration::from_secs(2);
/// Once the commands ended, how long the watch waits for their connections to finish
/// closing (a FIN crossing the path) before it records the rest as still open.
const DRAIN_US: u64 = 1_000_000;

/// A server's program, running in the server host under an init of its own
/// ([`under_init`]), in a process group of its own: SIGTERM to the group reaches the
/// program (an init ignores it), SIGKILL ends the init and with it everything inside.
pub struct Server {
    child: Child,
    _lifeline: Lifeline,
    /// How errors name it: `--server-cmd 'CMD'`, `flow 'NAME': server_command 'CMD'`.
    what: String,
    /// It listened on a new TCP socket within [`LISTEN_TIMEOUT`]; `false`: the client's
    /// program was started anyway.
    pub listening: bool,
}

impl Server {
    /// Starts `command` by `sh -c` in `lab`'s host `server` ([`Lab::host`]) with `env`,
    /// its stdout and stderr on `stdout`/`stderr`, and waits until a new socket listens
    /// there, for at most [`LISTEN_TIMEOUT`]. A program that exits first is an error;
    /// `what` names it.
    pub fn start(
        lab: &Lab,
        server: usize,
        command: &str,
        what: &str,
        env: &[(&str, &str)],
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<Server> {
        let host = lab
            .host(server)
            .ok_or_else(|| anyhow!("lab {} has no host {server}", lab.name()))?;
        let mut diag = SockDiag::open_in(&host.ns)?;
        let listening = Query {
            families: Families::Both,
            states: StateSet::EMPTY.with(TcpState::Listen),
            extensions: Extensions::NONE,
            filter: None,
        };
        let mut listeners = || -> Result<usize> { Ok(diag.dump(&listening, &mut Vec::new())?) };
        let before = listeners()?;
        // Under an init, as the client's command: it cannot outlive tcplab.
        let words = ["sh".to_owned(), "-c".to_owned(), command.to_owned()];
        let (child, lifeline) = under_init(lab, &host.ns, &words, env, |init| {
            init.stdin(Stdio::null())
                .stdout(stdout)
                .stderr(stderr)
                .process_group(0);
        })
        .with_context(|| what.to_owned())?;
        let mut server = Server {
            child,
            _lifeline: lifeline,
            what: what.to_owned(),
            listening: false,
        };
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!("{what} ended ({status}) before the command started");
            }
            if listeners()? > before {
                server.listening = true;
                return Ok(server);
            }
            if Instant::now() >= deadline {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// How errors name it.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Ends the program: a moment to end by itself (`iperf3 -s -1` does), then SIGTERM
    /// to its group, then SIGKILL. Its status where it ended by itself; `None` where it
    /// was told to.
    pub fn end(mut self) -> Result<Option<ExitStatus>> {
        if let Some(status) = wait_for(&mut self.child, END_GRACE)? {
            return Ok(Some(status));
        }
        end_group(&mut self.child)?;
        Ok(None)
    }
}

/// Starts `command` in `host` (a namespace of `lab`) under an init of its own (`lab
/// shell-init`), pid 1 of a new pid namespace, which ends whatever the command leaves
/// when it exits and, should this process die (even by SIGKILL), the command too, and
/// removes the lab. `configure` sets the init's stdio and the like, which the command
/// inherits. Hold the lifeline until the init has ended. The init is this process's
/// own program: the tcplab binary, whose `lab shell-init` it runs.
pub fn under_init(
    lab: &Lab,
    host: &netns::NetNs,
    command: &[String],
    env: &[(&str, &str)],
    configure: impl FnOnce(&mut Command) + Send,
) -> Result<(std::process::Child, reaper::Lifeline)> {
    let exe = std::env::current_exe().context("locating the tcplab binary")?;
    let (name, owner) = (lab.entry.name.clone(), netns::own_pid());
    let init = |lifeline: std::os::fd::RawFd| {
        let mut init = Command::new(exe);
        init.args(["lab", "shell-init", &name])
            .arg(format!("--owner={owner}"))
            .arg(format!("--lifeline={lifeline}"))
            .arg("--")
            .args(command)
            .envs(env.iter().copied());
        configure(&mut init);
        init
    };
    // Spawned from a thread inside the namespace, init and command live there.
    host.run(move || reaper::spawn_init(init))?
        .context("starting the command's init")
}

/// Ends `child`'s process group: SIGTERM, and after [`END_GRACE`] SIGKILL; reaps it.
pub fn end_group(child: &mut Child) -> Result<ExitStatus> {
    let group = -(child.id() as i32);
    // SAFETY: kill(2) on our child's process group.
    unsafe { libc::kill(group, libc::SIGTERM) };
    if let Some(status) = wait_for(child, END_GRACE)? {
        return Ok(status);
    }
    // SAFETY: as above.
    unsafe { libc::kill(group, libc::SIGKILL) };
    Ok(child.wait()?)
}

/// `child`'s status once it ended, waiting at most `grace`; `None` if still running.
pub fn wait_for(child: &mut Child, grace: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + grace;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A watch of two of a lab's hosts, on a thread of its own until finished.
pub struct Recorder {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Watched>>,
    /// Said where the tracepoint could not be had (polling only), `who` first.
    pub polling_only: Option<String>,
}

impl Recorder {
    /// Watches every TCP connection of `pair`'s two hosts, sampling every
    /// `sample_interval_us` and cutting intervals every `report_interval_us`; `who`
    /// names the watch in what it says.
    pub fn start(
        lab: &Lab,
        pair: HostPair,
        sample_interval_us: u64,
        report_interval_us: u64,
        who: &str,
    ) -> Result<Recorder> {
        let (client, server) = lab
            .pair(pair)
            .ok_or_else(|| anyhow!("lab {} has no hosts {pair:?}", lab.name()))?;
        let diags = vec![
            SockDiag::open_in(&client.ns)?,
            SockDiag::open_in(&server.ns)?,
        ];
        let stop = Arc::new(AtomicBool::new(false));
        let (trace, polling_only) = match open_trace(&[]) {
            Ok(trace) => (Some(trace), None),
            Err(e) => (None, Some(polling_only(who, sample_interval_us, &e))),
        };
        let watch = Watch {
            diags,
            query: Query::new(None),
            selection: Selection::everything(),
            trace,
            stop: stop.clone(),
            time_us: None,
            sample_interval_us,
            report_interval_us,
            keep: Keep::InMemory,
            output: Box::new(Quiet),
            filter_text: String::new(),
            drain_us: DRAIN_US,
        };
        let thread = std::thread::Builder::new()
            .name("program-watch".into())
            .spawn(move || follow(watch))
            .context("starting the watch")?;
        Ok(Recorder {
            stop,
            thread,
            polling_only,
        })
    }

    /// Ends the watch: each connection still open keeps its last sample.
    pub fn finish(self) -> Result<Watched> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("the watch's thread panicked"))?
    }
}
