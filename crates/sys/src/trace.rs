//! A tracefs instance of one test's own (`--trace-events`): the tcp tracepoints enabled
//! with a filter, on the monotonic clock, read from `trace_pipe` by a thread of its own
//! while the test runs, so the ring buffer is emptied as it fills. The text is kept as
//! read and parsed after the test (`tcplab_analysis::events`), off the measurement.
//!
//! `watch` streams its events instead ([`Trace::stream`]): each chunk read goes at once
//! to a channel.
//!
//! Each instance is named `tcplab-PID-N`, so `lab gc` removes those of dead processes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::ffi::{cstring, cvt};
use crate::userns::{self, Mode};

/// Where tracefs is, or is mounted when it is not.
pub const TRACEFS: &str = "/sys/kernel/tracing";
/// Ring buffer per CPU, KiB: a reader kept off the CPU for a second at 1 Gbit/s
/// loses nothing.
const BUFFER_KB: u32 = 8192;
/// The reader's longest sleep: how late the end of a test waits for it.
const READ_POLL_MS: i32 = 50;

/// Why a test's events cannot be taken.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("kernel events need root (tracefs); not taken")]
    Rootless,
    #[error("kernel events need tracefs at {TRACEFS}, which cannot be mounted: {0}; not taken")]
    NoTracefs(io::Error),
    #[error("kernel events: {op} {}: {source}; not taken", path.display())]
    Instance {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// A running trace of a test's tcp events.
pub struct Trace {
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<io::Result<Vec<u8>>>>,
}

impl Trace {
    /// Enables `tracepoints` (names under `events/tcp/`) with `filter` in an instance
    /// of their own, and starts reading it.
    pub fn start(tracepoints: &[&str], filter: &str) -> Result<Trace, TraceError> {
        Self::start_in("tcp", tracepoints, filter, None)
    }

    /// Enables `tracepoints` of `group` (`sock` for `events/sock/inet_sock_set_state`)
    /// with `filter`, and sends each chunk of text read, whole lines or not, on the
    /// channel returned; it closes when the trace is dropped.
    pub fn stream(
        group: &str,
        tracepoints: &[&str],
        filter: &str,
    ) -> Result<(Trace, Receiver<Vec<u8>>), TraceError> {
        let (sender, receiver) = mpsc::channel();
        Ok((
            Self::start_in(group, tracepoints, filter, Some(sender))?,
            receiver,
        ))
    }

    fn start_in(
        group: &str,
        tracepoints: &[&str],
        filter: &str,
        sink: Option<Sender<Vec<u8>>>,
    ) -> Result<Trace, TraceError> {
        if userns::mode() == Mode::Rootless {
            return Err(TraceError::Rootless);
        }
        let root = Path::new(TRACEFS);
        if !root.join("instances").is_dir() {
            mount_tracefs(root).map_err(TraceError::NoTracefs)?;
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "tcplab-{}-{}",
            crate::netns::own_pid(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = root.join("instances").join(name);
        fs::create_dir(&dir).map_err(|source| TraceError::Instance {
            op: "creating",
            path: dir.clone(),
            source,
        })?;
        // From here on, dropping the trace removes the instance.
        let mut trace = Trace {
            dir,
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
        };
        trace.write("buffer_size_kb", &BUFFER_KB.to_string())?;
        trace.write("trace_clock", "mono")?;
        for tracepoint in tracepoints {
            trace.write(&format!("events/{group}/{tracepoint}/filter"), filter)?;
            trace.write(&format!("events/{group}/{tracepoint}/enable"), "1")?;
        }
        let pipe = trace.dir.join("trace_pipe");
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe)
            .map_err(|source| TraceError::Instance {
                op: "opening",
                path: pipe,
                source,
            })?;
        let stop = Arc::clone(&trace.stop);
        let reader = std::thread::Builder::new()
            .name("trace reader".into())
            .spawn(move || read_until_stopped(file, &stop, sink))
            .map_err(|source| TraceError::Instance {
                op: "starting a reader for",
                path: trace.dir.clone(),
                source,
            })?;
        trace.reader = Some(reader);
        Ok(trace)
    }

    /// Stops tracing, reads what is left and removes the instance: the text read, and
    /// how many events the ring buffer overwrote before they were read.
    pub fn finish(mut self) -> Result<(Vec<u8>, u64), TraceError> {
        self.write("tracing_on", "0")?;
        self.stop.store(true, Ordering::Relaxed);
        let text = match self.reader.take().map(|r| r.join()) {
            Some(Ok(Ok(text))) => text,
            Some(Ok(Err(source))) => {
                return Err(TraceError::Instance {
                    op: "reading",
                    path: self.dir.join("trace_pipe"),
                    source,
                })
            }
            _ => Vec::new(),
        };
        Ok((text, self.overruns()))
    }

    fn write(&self, file: &str, value: &str) -> Result<(), TraceError> {
        let path = self.dir.join(file);
        fs::write(&path, value).map_err(|source| TraceError::Instance {
            op: "writing",
            path,
            source,
        })
    }

    /// Events overwritten unread, over every CPU's buffer.
    fn overruns(&self) -> u64 {
        let Ok(cpus) = fs::read_dir(self.dir.join("per_cpu")) else {
            return 0;
        };
        cpus.flatten()
            .filter_map(|cpu| fs::read_to_string(cpu.path().join("stats")).ok())
            .flat_map(|stats| {
                stats
                    .lines()
                    .filter_map(|l| l.strip_prefix("overrun:")?.trim().parse::<u64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum()
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        // The kernel refuses to remove an instance while its pipe is open: the reader
        // has closed it.
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Reads the pipe until `stop`, then what is left in it: kept, or sent to `sink` as
/// read.
fn read_until_stopped(
    mut file: File,
    stop: &AtomicBool,
    sink: Option<Sender<Vec<u8>>>,
) -> io::Result<Vec<u8>> {
    let mut text = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        loop {
            match file.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => match &sink {
                    // A receiver gone is a watch ending: stop reading.
                    Some(sink) if sink.send(chunk[..n].to_vec()).is_err() => return Ok(text),
                    Some(_) => {}
                    None => text.extend_from_slice(&chunk[..n]),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if stopping {
            return Ok(text);
        }
        crate::poll::wait_for(&file, libc::POLLIN, READ_POLL_MS)?;
    }
}

fn mount_tracefs(root: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = cstring(root.as_os_str().as_bytes())?;
    let fstype = cstring(b"tracefs")?;
    // SAFETY: valid NUL-terminated strings; no data argument.
    cvt(unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// Removes the instances of processes that are gone (a test killed mid-trace); the
/// names removed.
pub fn remove_orphan_instances() -> Vec<String> {
    let Ok(entries) = fs::read_dir(Path::new(TRACEFS).join("instances")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let pid: u32 = name
                .strip_prefix("tcplab-")?
                .split('-')
                .next()?
                .parse()
                .ok()?;
            let alive = Path::new("/proc").join(pid.to_string()).exists();
            (!alive && fs::remove_dir(entry.path()).is_ok()).then_some(name)
        })
        .collect()
}
