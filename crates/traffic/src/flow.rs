//! One TCP flow's state on its end, shared between the flow's thread, which moves the
//! bytes (the engine's bulk loops, or the transactions of `--rr`), and the monitor
//! thread, which samples the socket.
//!
//! Below both the engine and the transactions, which each run a flow's thread on it.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use tcplab_monitor::{App, Snapshot, Status};
use tcplab_sys::clock::monotonic_us;
use tcplab_sys::sockopt;

use crate::protocol::{Role, COOKIE_LEN};

/// Where a flow of a connection per transaction (TCP_CRR) gets each new connection.
pub enum Renew {
    /// The client connects to the test's data port.
    Connect {
        addr: SocketAddr,
        cookie: [u8; COOKIE_LEN],
    },
    /// The server accepts on the test's data listener, from the client's address, the
    /// connections that present the test's cookie and this flow's id.
    Accept {
        listener: TcpListener,
        cookie: [u8; COOKIE_LEN],
        client: IpAddr,
    },
}

/// Shared between a flow's thread and the monitor.
pub(crate) struct FlowShared {
    pub(crate) id: u32,
    pub(crate) role: Role,
    pub(crate) stream: TcpStream,
    /// Taken at setup: a socket closed by its peer no longer knows them.
    pub(crate) local_addr: String,
    pub(crate) peer_addr: String,
    /// Bytes written (sender) or read (receiver) so far.
    pub(crate) bytes: AtomicU64,
    /// A sender is still writing: after its last write it only waits for the
    /// acknowledgements, which no limit describes.
    pub(crate) writing: AtomicBool,
    /// A sender is inside a write call (blocked on its buffer, or copying).
    pub(crate) in_write: AtomicBool,
    pub(crate) done: AtomicBool,
    /// Set by a sender that the drain limit stopped, when its end resets such
    /// connections: the monitor ends it, before its last interval is cut where it can.
    pub(crate) reset: AtomicBool,
    pub(crate) reset_cut_drains: bool,
    pub(crate) renew: Option<Renew>,
    /// How often the flow's thread samples its own socket, µs; 0: never (sampling off or
    /// every [`tcplab_monitor::BOOK_EVERY_US`] or longer, when the monitor reads every flow at each
    /// tick anyway, or a pacer that follows the senders' window, which reads them all).
    pub(crate) self_sample_every_us: i64,
    /// A sender under BBR: its thread's samples carry BBR's model, which the monitor
    /// keeps every [`tcplab_monitor::BBR_EVERY_US`].
    pub(crate) bbr: bool,
    /// When its socket was last sampled, by its thread or the monitor (monotonic µs).
    pub(crate) last_sample_us: AtomicI64,
    /// The samples its thread took, for the monitor to take in at its next wake-up.
    pub(crate) self_samples: Mutex<Vec<(i64, Snapshot)>>,
}

/// What a flow's thread moved: bytes written (sender) or read (receiver), and a sender's
/// bytes left unacknowledged when the drain limit ended its connection.
pub(crate) struct Moved {
    pub(crate) bytes: u64,
    pub(crate) unacked: u64,
}

pub(crate) type FlowResult = Result<Moved, (u64, io::Error)>;

/// A blocked read or write that SO_RCVTIMEO/SO_SNDTIMEO or a signal cut short.
pub(crate) fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

impl FlowShared {
    pub(crate) fn status(&self) -> Status {
        Status {
            ended: self.done.load(Ordering::Acquire),
            cut_drain: self.reset.load(Ordering::Acquire),
        }
    }

    /// From the flow's own thread, between two of its writes or reads: samples its socket
    /// if an interval has passed since its last sample, for the monitor to take in
    /// (which books no time by it: [`tcplab_monitor::BOOK_EVERY_US`]).
    pub(crate) fn sample_if_due(&self) {
        if self.self_sample_every_us == 0 {
            return;
        }
        let now = monotonic_us();
        let last = self.last_sample_us.load(Ordering::Relaxed);
        if now.saturating_sub(last) < self.self_sample_every_us {
            return;
        }
        // BBR's model always: the monitor keeps it when due, and never reads for it.
        let Some(snapshot) = self.snapshot(self.bbr) else {
            return;
        };
        self.last_sample_us.store(now, Ordering::Relaxed);
        self.self_samples
            .lock()
            .expect("a flow thread panicked holding its samples")
            .push((now, snapshot));
    }

    /// The samples its thread took since the last call, oldest first.
    pub(crate) fn take_self_samples(&self) -> Vec<(i64, Snapshot)> {
        std::mem::take(
            &mut *self
                .self_samples
                .lock()
                .expect("a flow thread panicked holding its samples"),
        )
    }

    /// The socket and the flow thread now; `None` when tcp_info cannot be read.
    pub(crate) fn snapshot(&self, with_bbr: bool) -> Option<Snapshot> {
        let fd = self.stream.as_fd();
        let info = sockopt::tcp_info(fd).ok()?;
        Some(Snapshot {
            info,
            mem: sockopt::meminfo(fd).ok(),
            bbr: with_bbr
                .then(|| sockopt::bbr_info_of_bbr_socket(fd).ok().flatten())
                .flatten(),
            app: Some(App {
                moved: self.bytes.load(Ordering::Relaxed),
                writing: self.writing.load(Ordering::Acquire),
                in_write: self.in_write.load(Ordering::Relaxed),
            }),
        })
    }
}
