//! `tcplab shell --server-cmd` and `--record`: a program in the lab's server host, and a
//! watch of every TCP connection of both hosts (one tracker, one clock, a sock_diag
//! socket per namespace) stored with the lab's path as one run of kind `watch`.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tcplab_lab::Lab;
use tcplab_model::sockdiag::{Extensions, Families, StateSet, TcpState};
use tcplab_sys::reaper::Lifeline;
use tcplab_sys::sockdiag::{Query, SockDiag};

use crate::lab::under_init;
use crate::stdio::errln;
use crate::watch::{follow, open_trace, Output, Selection, Watch, Watched};

/// How long the server's program may take to listen before the client's starts anyway.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the server's program may take to end by itself once the client's has, and
/// then after SIGTERM, before SIGKILL.
const END_GRACE: Duration = Duration::from_secs(2);
/// Once the commands ended, how long the watch waits for their connections to finish
/// closing (a FIN crossing the path) before it records the rest as still open.
const DRAIN_US: u64 = 1_000_000;
/// Each watched connection's interval (the live lines `watch` prints) is cut this often.
const REPORT_INTERVAL_US: u64 = 1_000_000;

/// `--server-cmd`'s program, running in the server host under an init of its own
/// ([`under_init`]), in a process group of its own: SIGTERM to the group reaches the
/// program (an init ignores it), SIGKILL ends the init and with it everything inside.
pub struct Server {
    child: Child,
    _lifeline: Lifeline,
    command: String,
}

impl Server {
    /// Starts `command` by `sh -c` in `lab`'s server host, its stdout on our stderr (stdout
    /// is the client's command's), and waits until a new socket listens there, for at
    /// most [`LISTEN_TIMEOUT`]. A program that exits first is an error.
    pub fn start(lab: &Lab, command: &str, env: &[(&str, &str)]) -> Result<Server> {
        let mut diag = SockDiag::open_in(&lab.server.ns)?;
        let listening = Query {
            families: Families::Both,
            states: StateSet::EMPTY.with(TcpState::Listen),
            extensions: Extensions::NONE,
            filter: None,
        };
        let mut listeners = || -> Result<usize> { Ok(diag.dump(&listening, &mut Vec::new())?) };
        let before = listeners()?;
        let stdout = std::io::stderr().as_fd().try_clone_to_owned()?;
        // Under an init, as the client's command: it cannot outlive tcplab.
        let words = ["sh".to_owned(), "-c".to_owned(), command.to_owned()];
        let (child, lifeline) = under_init(lab, &lab.server.ns, &words, env, |init| {
            init.stdin(Stdio::null()).stdout(stdout).process_group(0);
        })
        .with_context(|| format!("--server-cmd '{command}'"))?;
        let mut server = Server {
            child,
            _lifeline: lifeline,
            command: command.to_owned(),
        };
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!("--server-cmd '{command}' ended ({status}) before the command started");
            }
            if listeners()? > before {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                errln!(
                    "tcplab shell: --server-cmd '{command}' listens on no TCP port after {} s; starting the command anyway",
                    LISTEN_TIMEOUT.as_secs()
                );
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Ends the program: a moment to end by itself (`iperf3 -s -1` does), then SIGTERM
    /// to its group, then SIGKILL. Says on stderr how it ended unless it was told to.
    pub fn end(mut self) -> Result<()> {
        if let Some(status) = self.wait(END_GRACE)? {
            if !status.success() {
                errln!(
                    "tcplab shell: --server-cmd '{}' ended ({status})",
                    self.command
                );
            }
            return Ok(());
        }
        let group = -(self.child.id() as i32);
        // SAFETY: kill(2) on our child's process group.
        unsafe { libc::kill(group, libc::SIGTERM) };
        if self.wait(END_GRACE)?.is_none() {
            // SAFETY: as above.
            unsafe { libc::kill(group, libc::SIGKILL) };
            self.child.wait()?;
        }
        Ok(())
    }

    fn wait(&mut self, grace: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + grace;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A watch of the lab's client and server hosts, on a thread of its own until finished.
pub struct Recorder {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Watched>>,
}

impl Recorder {
    pub fn start(lab: &Lab, sample_interval_us: u64) -> Result<Recorder> {
        let diags = vec![
            SockDiag::open_in(&lab.clients[0].ns)?,
            SockDiag::open_in(&lab.server.ns)?,
        ];
        let stop = Arc::new(AtomicBool::new(false));
        let watch = Watch {
            diags,
            query: Query::new(None),
            selection: Selection::everything(),
            trace: open_trace(&[], sample_interval_us, "tcplab shell", ""),
            stop: stop.clone(),
            time_us: None,
            sample_interval_us,
            report_interval_us: REPORT_INTERVAL_US,
            keep: true,
            output: Output::Quiet,
            filter_text: String::new(),
            drain_us: DRAIN_US,
        };
        let thread = std::thread::Builder::new()
            .name("shell-watch".into())
            .spawn(move || follow(watch))
            .context("starting the watch")?;
        Ok(Recorder { stop, thread })
    }

    /// Ends the watch: each connection still open keeps its last sample.
    pub fn finish(self) -> Result<Watched> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("the watch's thread panicked"))?
    }
}
