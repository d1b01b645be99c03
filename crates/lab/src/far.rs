//! The caller's network namespace as the far side of a lab (`tcplab shell --far host`),
//! as mahimahi's shells reach the host's network: a program in a client host reaches,
//! through the path, whatever the namespace tcplab was started in reaches.
//!
//! The server host becomes a router: IPv4 forwarding on, a default route out of a far
//! link [`FAR_LINK`], and a masquerade on it ([`tcplab_sys::nft`]), so what the clients
//! send beyond the lab leaves with the server host's far address and the far side needs
//! no route back into the lab. Each client host's default route goes into the path.
//!
//! - As root, the far link is one end of a veth pair whose other end is in the caller's
//!   namespace, addressed from a /30 of 10.78.0.0/16 that overlaps no address there. The
//!   caller's namespace gets only that link, deleted with the lab (should tcplab be
//!   killed, with the lab's namespaces by `lab gc`); none of its routes, rules or
//!   sysctls change.
//! - Without root tcplab may not add a link to the caller's namespace. slirp4netns, the
//!   user-mode network stack of rootless containers, does the carrying instead: a TAP
//!   device in the server host whose packets it turns into sockets of the caller's
//!   namespace, where 10.0.2.2 stands for the caller's own loopback. It exits with
//!   tcplab (its exit descriptor closes) if it is not stopped before.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tcplab_sys::ffi::cvt;
use tcplab_sys::localnet::Neighbourhood;
use tcplab_sys::netns;
use tcplab_sys::nft;
use tcplab_sys::poll;
use tcplab_sys::relay;
use tcplab_sys::userns::{self, Mode};

use crate::lab::{Lab, LabError, TUN_NAME};

/// The server host's link to the far side.
pub const FAR_LINK: &str = "far0";

/// Where the caller's namespace answers slirp4netns's clients: its loopback.
const SLIRP_HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

/// How long slirp4netns may take to bring its device up.
const SLIRP_READY: Duration = Duration::from_secs(10);

/// The caller's namespace, joined to a lab as its far side, until dropped.
#[derive(Debug)]
pub struct FarHost {
    /// Where the caller's namespace answers from behind the path.
    pub host_addr: Ipv4Addr,
    carrier: Carrier,
}

#[derive(Debug)]
enum Carrier {
    /// The caller's end of the veth pair.
    Veth(String),
    Slirp {
        child: Child,
        /// Its exit descriptor's other end: closing it stops slirp4netns.
        _exit: OwnedFd,
        /// What carries the clients' TCP connections instead of slirp4netns.
        relay: TcpRelay,
    },
}

impl FarHost {
    /// Joins the calling thread's namespace to `lab` as its far side. On an error,
    /// what was made is removed.
    pub fn attach(lab: &Lab) -> Result<FarHost, LabError> {
        let far = match userns::mode() {
            Mode::Privileged => Self::veth(lab)?,
            Mode::Rootless => Self::slirp(lab)?,
        };
        // `far` dropped on an error below removes its carrier.
        let server = &lab.server.ns;
        netns::write_sysctl_in(server, "net.ipv4.ip_forward", "1")
            .map_err(io_err("routing the server host to the far side"))?;
        server
            .try_run(|| nft::masquerade("tcplab", "far", FAR_LINK))
            .map_err(io_err("routing the server host to the far side"))?;
        for client in &lab.clients {
            client
                .ns
                .try_run(|| netns::add_default_route(TUN_NAME, None))
                .map_err(io_err(format!(
                    "routing {} through the path",
                    client.ns.name()
                )))?;
        }
        Ok(far)
    }

    fn veth(lab: &Lab) -> Result<FarHost, LabError> {
        let taken: Vec<(Ipv4Addr, u8)> = Neighbourhood::read()
            .map_err(io_err("reading this namespace's addresses"))?
            .addresses
            .iter()
            .filter_map(|a| match a.network {
                std::net::IpAddr::V4(v4) => Some((v4, a.prefix)),
                std::net::IpAddr::V6(_) => None,
            })
            .collect();
        let subnet = free_subnet(&taken).ok_or_else(|| {
            LabError::Far("every /30 of 10.78.0.0/16 overlaps an address of this namespace: the far side needs one".into())
        })?;
        let [a, b, c, d] = subnet.octets();
        let (host, far) = (Ipv4Addr::new(a, b, c, d + 1), Ipv4Addr::new(a, b, c, d + 2));
        let link = format!("tlfar{:x}", netns::own_pid());
        netns::create_veth(&link, FAR_LINK, Some(&lab.server.ns))
            .map_err(io_err("joining this namespace to the lab"))?;
        let made = FarHost {
            host_addr: host,
            carrier: Carrier::Veth(link.clone()),
        };
        netns::add_address(&link, host.into(), 30)
            .and_then(|()| netns::link_up(&link))
            .map_err(io_err("joining this namespace to the lab"))?;
        lab.server
            .ns
            .try_run(|| {
                netns::add_address(FAR_LINK, far.into(), 30)?;
                netns::link_up(FAR_LINK)?;
                netns::add_default_route(FAR_LINK, Some(host))
            })
            .map_err(io_err("joining this namespace to the lab"))?;
        Ok(made)
    }

    /// Whether this process can join its namespace to a lab, or why not: to check
    /// before building one.
    pub fn possible() -> Result<(), LabError> {
        match userns::mode() {
            Mode::Privileged => Ok(()),
            Mode::Rootless => slirp4netns().map(drop),
        }
    }

    fn slirp(lab: &Lab) -> Result<FarHost, LabError> {
        let program = slirp4netns()?;
        let (ready_read, ready_write) = pipe().map_err(io_err("starting slirp4netns"))?;
        let (exit_read, exit_write) = pipe().map_err(io_err("starting slirp4netns"))?;
        let mut command = Command::new(&program);
        command
            .arg("--configure")
            .arg("--mtu=65520")
            .arg(format!("--ready-fd={}", ready_write.as_raw_fd()))
            .arg(format!("--exit-fd={}", exit_read.as_raw_fd()))
            .arg("--netns-type=path")
            .arg(lab.server.ns.path())
            .arg(FAR_LINK)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let inherited = [ready_write.as_raw_fd(), exit_read.as_raw_fd()];
        // SAFETY: fcntl is async-signal-safe; it clears close-on-exec on the two
        // descriptors slirp4netns is told about, in the child only.
        unsafe {
            command.pre_exec(move || {
                for fd in inherited {
                    cvt(libc::fcntl(fd, libc::F_SETFD, 0))?;
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(io_err(format!("starting {}", program.display())))?;
        drop((ready_write, exit_read));
        let mut far = FarHost {
            host_addr: SLIRP_HOST,
            carrier: Carrier::Slirp {
                child,
                _exit: exit_write,
                relay: TcpRelay::default(),
            },
        };
        let ready = poll::wait_for(&ready_read, libc::POLLIN, SLIRP_READY.as_millis() as i32)
            .map_err(io_err("waiting for slirp4netns"))?;
        let mut byte = [0u8; 1];
        let said = ready && File::from(ready_read).read(&mut byte).unwrap_or(0) == 1;
        if !said {
            let why = far.slirp_stderr();
            return Err(LabError::Far(format!(
                "slirp4netns did not bring {FAR_LINK} up within {SLIRP_READY:?}{why}"
            )));
        }
        let Carrier::Slirp { relay, .. } = &mut far.carrier else {
            unreachable!("made above")
        };
        *relay = TcpRelay::start(lab)?;
        Ok(far)
    }

    /// What a failed slirp4netns said, after stopping it.
    fn slirp_stderr(&mut self) -> String {
        let Carrier::Slirp { child, .. } = &mut self.carrier else {
            return String::new();
        };
        let _ = child.kill();
        let _ = child.wait();
        let mut said = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut said);
        }
        match said.lines().rev().find(|l| !l.trim().is_empty()) {
            Some(line) => format!(": {}", line.trim()),
            None => String::new(),
        }
    }
}

impl Drop for FarHost {
    fn drop(&mut self) {
        match &mut self.carrier {
            // Gone already if the lab's namespaces went first.
            Carrier::Veth(link) => {
                let _ = netns::delete_link(link);
            }
            Carrier::Slirp { child, relay, .. } => {
                relay.stop();
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> LabError {
    let context = context.into();
    move |error| LabError::Io { context, error }
}

/// A pipe, both ends close-on-exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 returns.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// slirp4netns's path in one of PATH's directories.
fn slirp4netns() -> Result<PathBuf, LabError> {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("slirp4netns"))
                .find(|program| program.is_file())
        })
        .ok_or_else(|| {
            LabError::Far("--far host without root needs slirp4netns (Debian's package slirp4netns) on PATH, or root".into())
        })
}

/// The first /30 of 10.78.0.0/16 that overlaps none of the networks in `taken`
/// (address, prefix length).
fn free_subnet(taken: &[(Ipv4Addr, u8)]) -> Option<Ipv4Addr> {
    let overlaps = |a: u32, a_len: u8, b: u32, b_len: u8| {
        let len = a_len.min(b_len);
        let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        a & mask == b & mask
    };
    let base = u32::from(Ipv4Addr::new(10, 78, 0, 0));
    (0..1 << 14)
        .map(|k| base + (k << 2))
        .find(|&subnet| {
            taken
                .iter()
                .all(|&(addr, len)| !overlaps(subnet, 30, u32::from(addr), len.min(32)))
        })
        .map(Ipv4Addr::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_far_subnet_overlaps_nothing_in_the_namespace() {
        assert_eq!(free_subnet(&[]), Some(Ipv4Addr::new(10, 78, 0, 0)));
        // A lab of another process's far link takes the first /30.
        let first = [(Ipv4Addr::new(10, 78, 0, 1), 30)];
        assert_eq!(free_subnet(&first), Some(Ipv4Addr::new(10, 78, 0, 4)));
        // A /24 there pushes past it; a /8 over all of 10/8 leaves nothing.
        let wide = [(Ipv4Addr::new(10, 78, 0, 0), 24)];
        assert_eq!(free_subnet(&wide), Some(Ipv4Addr::new(10, 78, 1, 0)));
        assert_eq!(free_subnet(&[(Ipv4Addr::new(10, 0, 0, 0), 8)]), None);
        // A default-sized route elsewhere does not matter; a host address inside does.
        let host = [
            (Ipv4Addr::new(10, 78, 0, 2), 32),
            (Ipv4Addr::new(192, 168, 1, 0), 24),
        ];
        assert_eq!(free_subnet(&host), Some(Ipv4Addr::new(10, 78, 0, 4)));
    }
}

/// The clients' TCP connections to the far side, taken in the server host (redirected
/// there by nf_tables) and carried on from this namespace with kernel TCP at both ends,
/// bytes moved by splice. slirp4netns's own TCP (its receive window of 64 KiB without
/// window scaling, its sender's timers in hundreds of ms) held a download through `rtt
/// 50ms rate 10mbit` to 6.7 Mbit/s where root's 9.4 (docs/rootless.md).
#[derive(Debug, Default)]
struct TcpRelay {
    state: Option<RelayState>,
}

#[derive(Debug)]
struct RelayState {
    listener: Arc<TcpListener>,
    stop: Arc<AtomicBool>,
    accepter: JoinHandle<()>,
    live: Arc<Live>,
}

/// A handle on each carried connection's two ends, by the connection's number, to end
/// them when the relay stops; a connection's are dropped when it ends.
type Live = Mutex<BTreeMap<u64, Vec<TcpStream>>>;

/// Where the server host takes the clients' TCP connections: its own address, 10.77/16.
const LAB_NETWORK: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 77, 0, 0), 16);

impl TcpRelay {
    /// Listens in the server host, redirects the clients' TCP there, and accepts on a
    /// thread of the calling thread's namespace, where it opens the far connections.
    fn start(lab: &Lab) -> Result<TcpRelay, LabError> {
        let server = &lab.server.ns;
        let listener = server
            .try_run(|| {
                let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))?;
                let port = listener.local_addr()?.port();
                nft::redirect_tcp("tcplab", "farin", TUN_NAME, LAB_NETWORK, port)?;
                Ok(listener)
            })
            .map_err(io_err("taking the clients' TCP to the far side"))?;
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(Live::default());
        let accepter = {
            let (listener, stop, live) =
                (Arc::clone(&listener), Arc::clone(&stop), Arc::clone(&live));
            std::thread::Builder::new()
                .name("far accept".into())
                .spawn(move || accept(&listener, &stop, &live))
                .map_err(io_err("starting the far side's TCP relay"))?
        };
        Ok(TcpRelay {
            state: Some(RelayState {
                listener,
                stop,
                accepter,
                live,
            }),
        })
    }

    /// Stops accepting and ends the connections it carries.
    fn stop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        state.stop.store(true, Ordering::Relaxed);
        // Wakes the accepter (accept fails on a listener shut down).
        // SAFETY: plain syscall on an open socket.
        unsafe { libc::shutdown(state.listener.as_raw_fd(), libc::SHUT_RDWR) };
        let _ = state.accepter.join();
        let live = std::mem::take(&mut *state.live.lock().expect("relay lock"));
        for stream in live.into_values().flatten() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// Accepts redirected connections until told to stop, each carried on by a thread.
fn accept(listener: &TcpListener, stop: &AtomicBool, live: &Arc<Live>) {
    for id in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let near = match listener.accept() {
            Ok((near, _)) => near,
            Err(e) => match e.raw_os_error() {
                // A client that gave up in the queue, or a signal: the next one.
                Some(libc::ECONNABORTED | libc::EINTR) => continue,
                // Out of descriptors or memory: what ends a relay frees some; wait for
                // it rather than spin, as Go's net/http backs off (5 ms to 1 s there).
                Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
                // The listener is shut down or broken: nothing more will come.
                _ => return,
            },
        };
        let live = Arc::clone(live);
        // Threads inherit the namespace: the far connection is this namespace's.
        let _ = std::thread::Builder::new()
            .name("far relay".into())
            .spawn(move || carry(id, near, &live));
    }
}

/// Opens the far connection a redirected one was for (the caller's loopback for
/// [`SLIRP_HOST`]) and relays between them; a far side that refuses resets the client.
fn carry(id: u64, near: TcpStream, live: &Live) {
    let Ok(wanted) = relay::original_destination(&near) else {
        return;
    };
    let target = match *wanted.ip() {
        SLIRP_HOST => SocketAddrV4::new(Ipv4Addr::LOCALHOST, wanted.port()),
        _ => wanted,
    };
    let far = match relay::connect(target) {
        Ok(far) => far,
        Err(_) => return relay::reset(near),
    };
    let ends = [&near, &far]
        .into_iter()
        .filter_map(|s| s.try_clone().ok())
        .collect();
    live.lock().expect("relay lock").insert(id, ends);
    // An error (a reset on either side) ends both connections: the client sees it on
    // its own, and nobody else waits for this one.
    let _ = relay::relay(near, far);
    live.lock().expect("relay lock").remove(&id);
}
