//! A command that cannot outlive the process that started it: it runs under an init of
//! its own, pid 1 of a new pid namespace, which ends every process left in that
//! namespace when the command exits or when its owner dies.
//!
//! Why a pid namespace: a process cannot leave one, however it forks, detaches or
//! changes session, and the kernel kills everything in it when its init exits. Why the
//! owner's death is seen through a pipe: its write end is the owner's alone (close on
//! exec), and the kernel closes it however the owner ends, SIGKILL included, whereas
//! PR_SET_PDEATHSIG fires when the *thread* that forked exits. Both hold as root and in
//! a user namespace of the owner's own (which gives it CAP_SYS_ADMIN over new pid
//! namespaces).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};

use crate::ffi::cvt;

/// The owner's end of the pipe whose closing tells an init that its owner is gone:
/// hold it as long as the init runs.
#[derive(Debug)]
pub struct Lifeline {
    _write: std::io::PipeWriter,
}

/// Starts an init in a new pid namespace: `make` builds its command from the number of
/// the descriptor it inherits, the read end of its [`Lifeline`] (the init passes it to
/// [`init`]). Call it on a thread of its own, which it leaves unfit to start anything
/// else: `unshare(CLONE_NEWPID)` places the calling thread's next child, and only that
/// one, as pid 1 of the new namespace.
pub fn spawn_init(make: impl FnOnce(RawFd) -> Command) -> io::Result<(Child, Lifeline)> {
    let (read, write) = std::io::pipe()?;
    let fd = read.as_raw_fd();
    let mut command = make(fd);
    // SAFETY: fcntl is async-signal-safe; it clears close-on-exec on the read end, in
    // the child only.
    unsafe {
        command.pre_exec(move || {
            cvt(libc::fcntl(fd, libc::F_SETFD, 0))?;
            Ok(())
        });
    }
    // SAFETY: plain syscall; it changes where this thread's children are placed.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWPID) })
        .map_err(|e| crate::ffi::context(e, "creating a pid namespace"))?;
    let child = command.spawn()?;
    drop(read);
    Ok((child, Lifeline { _write: write }))
}

/// How an init's watch ended.
#[derive(Debug)]
pub enum InitEnd {
    /// The command exited with this status; what it left was ended.
    Exited(ExitStatus),
    /// The owner died (the lifeline closed); the command and everything it left were
    /// ended.
    OwnerDied,
}

impl InitEnd {
    /// The exit code a shell would give for it: the command's, or 128 + the signal
    /// that killed it.
    pub fn code(&self) -> i32 {
        match self {
            InitEnd::Exited(status) => status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(1),
            InitEnd::OwnerDied => 1,
        }
    }
}

/// As pid 1 of its pid namespace: watches `command` (a child of this process) and the
/// lifeline's read end `lifeline` until one ends, reaping orphans meanwhile; then ends
/// every other process in the namespace and reaps them.
pub fn init(command: Child, lifeline: RawFd) -> io::Result<InitEnd> {
    if std::process::id() != 1 {
        return Err(io::Error::other(
            "an init must be pid 1 of its pid namespace",
        ));
    }
    // SAFETY: the descriptor was inherited for this and nothing else owns it.
    let lifeline = unsafe { OwnedFd::from_raw_fd(lifeline) };
    // Not passed on to anything this init starts.
    // SAFETY: plain syscall on a descriptor this process owns.
    cvt(unsafe { libc::fcntl(lifeline.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
    let child = command.id() as libc::pid_t;
    let pidfd = pidfd_open(child)?;
    let end = loop {
        let mut fds = [
            libc::pollfd {
                fd: lifeline.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds for the duration of the call. Orphans are reaped
        // at least once a second.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if let Some(status) = reap(Some(child))? {
            break InitEnd::Exited(status);
        }
        if fds[0].revents != 0 {
            break InitEnd::OwnerDied;
        }
    };
    end_all()?;
    Ok(end)
}

/// Reaps every child that has exited; the status of `watched` if it was one of them.
fn reap(watched: Option<libc::pid_t>) -> io::Result<Option<ExitStatus>> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: plain syscall writing one int.
        match unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } {
            0 => return Ok(found),
            -1 => {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::ECHILD) => Ok(found),
                    Some(libc::EINTR) => continue,
                    _ => Err(e),
                };
            }
            pid if Some(pid) == watched => found = Some(ExitStatus::from_raw(status)),
            _ => {}
        }
    }
}

/// SIGKILL to every process of this pid namespace but its init, then reaps them all.
fn end_all() -> io::Result<()> {
    // SAFETY: plain syscall; from pid 1, -1 reaches every other process of its
    // namespace (and of namespaces nested in it), nothing outside.
    match cvt(unsafe { libc::kill(-1, libc::SIGKILL) }) {
        // ESRCH: nothing left to end.
        Err(e) if e.raw_os_error() != Some(libc::ESRCH) => return Err(e),
        _ => {}
    }
    loop {
        let mut status = 0;
        // SAFETY: plain syscall writing one int.
        if unsafe { libc::waitpid(-1, &mut status, 0) } == -1 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ECHILD) => return Ok(()),
                Some(libc::EINTR) => continue,
                _ => return Err(e),
            }
        }
    }
}

fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall returning a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is new and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
