//! Network namespaces and veth links, built through rtnetlink without running `ip`.
//!
//! As root, a namespace is a file under `/run/netns`, laid out exactly as `ip netns add`
//! does, so `ip netns exec NAME …` works on ours and ours work on `ip`'s. Without root
//! the same files live on a private tmpfs inside the process's own user and mount
//! namespaces ([`crate::userns`], [`prepare`]); the API is the same.
//!
//! Every namespace tcplab creates is marked with its process (a file in the state
//! directory holding the pid), so that one whose process died is recognised as a
//! leftover ([`leftovers`]) and removed even when nothing else remembers it.
//!
//! `setns` moves only the calling thread. Work inside a namespace therefore runs on a
//! dedicated OS thread ([`NetNs::run`], [`NetNs::spawn`]); never on a shared thread. A
//! socket stays in the namespace it was created in, so only its creation needs that
//! thread: the socket can be used from any thread afterwards.
//!
//! The link functions ([`link_up`], [`set_mtu`], [`add_address`], [`create_veth`],
//! [`link_mtu`], [`wait_oper_up`]) act on the calling thread's namespace: call them inside `run`.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage, State,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::ffi::{context, cstring, cvt, invalid};
use crate::userns::{self, Mode};

/// Where `ip netns` keeps its namespaces, and tcplab as root.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Where this process's namespaces are mounted: /run/netns as root; rootless, a
/// directory of the state directory that holds a private tmpfs in the process's own
/// mount namespace (and is empty outside it).
fn mount_dir() -> io::Result<PathBuf> {
    Ok(match userns::mode() {
        Mode::Privileged => PathBuf::from(NETNS_RUN_DIR),
        Mode::Rootless => userns::state_dir()?.join("mnt"),
    })
}

/// Where the marks are: one file per namespace tcplab made, named as it, holding the
/// pid of the process that made it.
fn mark_dir() -> io::Result<PathBuf> {
    Ok(userns::state_dir()?.join("netns"))
}

/// Whether this process may create namespaces: without root, only once [`prepare`] has
/// entered its own user namespace; otherwise the one-line reason.
static READY: OnceLock<Result<(), String>> = OnceLock::new();

/// Readies this process to create namespaces; call it before any thread exists. As root
/// there is nothing to do. Rootless, the process enters a user namespace and a mount
/// namespace of its own, with a private tmpfs for the namespaces' files. A failure
/// (user namespaces disabled) is kept rather than returned, since a command may turn
/// out to need no lab: [`ready`] and every [`NetNs::create`] return it.
pub fn prepare() {
    READY.get_or_init(|| match userns::mode() {
        Mode::Privileged => Ok(()),
        Mode::Rootless => {
            let dir = mount_dir().map_err(|e| e.to_string())?;
            userns::unshare_private(&dir).map_err(|e| userns::refusal(&e))
        }
    });
}

/// Whether this process can create namespaces, or why not in one line.
pub fn ready() -> Result<(), String> {
    match userns::mode() {
        Mode::Privileged => Ok(()),
        Mode::Rootless => READY.get().cloned().unwrap_or_else(|| {
            Err("without root, a process makes namespaces only after entering a user namespace of its own at startup".into())
        }),
    }
}

/// A named network namespace: a bind mount of an nsfs file at `/run/netns/NAME` (without
/// root, in the process's private tmpfs).
///
/// Dropping a `NetNs` does not delete the namespace (it may be someone else's);
/// call [`NetNs::delete`], or use [`VethLab`], which owns its namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetNs {
    name: String,
    path: PathBuf,
}

impl NetNs {
    /// Creates namespace `name`, as `ip netns add` does, marked as this process's. A
    /// leftover of the name (marked by a process that died) is removed first.
    pub fn create(name: &str) -> io::Result<NetNs> {
        let ns = NetNs::by_name(name)?;
        let ctx = |e| context(e, format_args!("creating netns {name}"));
        ready().map_err(|reason| ctx(io::Error::new(io::ErrorKind::PermissionDenied, reason)))?;
        ns.mark().map_err(ctx)?;
        if let Err(e) = ns.create_inner() {
            ns.unmark();
            return Err(ctx(match e.kind() {
                io::ErrorKind::AlreadyExists => io::Error::new(
                    e.kind(),
                    format!(
                        "{} exists and tcplab did not make it: remove it (ip netns delete {name}) or choose another name",
                        ns.path.display()
                    ),
                ),
                _ => e,
            }));
        }
        Ok(ns)
    }

    /// Opens an existing namespace (ours or `ip`'s).
    pub fn open(name: &str) -> io::Result<NetNs> {
        let ns = NetNs::by_name(name)?;
        fs::metadata(&ns.path).map_err(|e| context(e, format_args!("opening netns {name}")))?;
        Ok(ns)
    }

    /// Names of all namespaces this process sees (all of `/run/netns` as root; its own
    /// rootless), sorted.
    pub fn list() -> io::Result<Vec<String>> {
        let entries = match fs::read_dir(mount_dir()?) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(context(e, "listing netns")),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| context(e, "listing netns"))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Deletes the namespace, as `ip netns delete` does: detach the mount, remove the file;
    /// then its mark. Idempotent. The kernel frees the namespace, and the links in it,
    /// once no thread or socket still refers to it.
    pub fn delete(&self) -> io::Result<()> {
        let ctx = |e| context(e, format_args!("deleting netns {}", self.name));
        let target = cstring(self.path.as_os_str().as_bytes())?;
        // SAFETY: `target` is a valid NUL-terminated path.
        match cvt(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) }) {
            Ok(_) => {}
            // Not mounted (EINVAL) or already gone (ENOENT): a half-created or deleted ns.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => {}
            Err(e) => return Err(ctx(e)),
        }
        for file in [self.path.clone(), self.mark_path()?] {
            match fs::remove_file(file) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(ctx(e)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Runs `f` on a new OS thread inside this namespace and returns its result.
    /// The error is only about entering the namespace; a panic in `f` is resumed here.
    pub fn run<T: Send, F: FnOnce() -> T + Send>(&self, f: F) -> io::Result<T> {
        let fd = self.open_fd()?;
        thread::scope(|scope| {
            let handle = thread::Builder::new()
                .name(self.thread_name())
                .spawn_scoped(scope, move || {
                    enter(&fd)?;
                    Ok(f())
                })
                .map_err(|e| context(e, "spawning netns thread"))?;
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
        .map_err(|e| context(e, format_args!("entering netns {}", self.name)))
    }

    /// [`NetNs::run`] for fallible work: errors from `f` are prefixed with the namespace.
    pub fn try_run<T: Send, F: FnOnce() -> io::Result<T> + Send>(&self, f: F) -> io::Result<T> {
        self.run(f)?
            .map_err(|e| context(e, format_args!("in netns {}", self.name)))
    }

    /// Like [`NetNs::run`] for long-running work: returns once the thread is inside
    /// the namespace, with a handle to join it.
    pub fn spawn<T, F>(&self, f: F) -> io::Result<NsThread<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let fd = self.open_fd()?;
        let (entered_tx, entered_rx) = mpsc::sync_channel(1);
        let inner = thread::Builder::new()
            .name(self.thread_name())
            .spawn(move || {
                let entered = enter(&fd);
                drop(fd);
                let ok = entered.is_ok();
                // The receiver waits for this message, so the send cannot fail.
                let _ = entered_tx.send(entered);
                ok.then(f)
            })
            .map_err(|e| context(e, "spawning netns thread"))?;
        // Wait for setns so a failure surfaces here rather than as a thread that never ran `f`.
        match entered_rx.recv() {
            Ok(Ok(())) => Ok(NsThread { inner }),
            Ok(Err(e)) => Err(context(e, format_args!("entering netns {}", self.name))),
            Err(_) => Err(io::Error::other(format!(
                "entering netns {}: thread died",
                self.name
            ))),
        }
    }

    /// The namespace called `name`, whether or not it exists (to delete what may be left).
    pub fn by_name(name: &str) -> io::Result<NetNs> {
        check_name(name)?;
        Ok(NetNs {
            name: name.to_owned(),
            path: mount_dir()?.join(name),
        })
    }

    fn mark_path(&self) -> io::Result<PathBuf> {
        Ok(mark_dir()?.join(&self.name))
    }

    /// Claims the name for this process with a mark holding its pid, made whole before
    /// it appears (a hard link of a written file), so no reader sees half of one. The
    /// mark of a process that died is a leftover's: its namespace goes, the name is ours.
    fn mark(&self) -> io::Result<()> {
        let mark = self.mark_path()?;
        let dir = mark.parent().expect("a mark has a directory");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
        let pid = own_pid();
        let whole = dir.join(format!(".{}.{pid}", self.name));
        fs::write(&whole, format!("{pid}\n"))?;
        let linked = loop {
            match fs::hard_link(&whole, &mark) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match owner(&mark) {
                    Some(owner) if pid_alive(owner) => {
                        break Err(io::Error::new(
                            e.kind(),
                            format!("in use by process {owner}"),
                        ))
                    }
                    _ => {
                        if let Err(e) = end_processes_in(&self.name).and_then(|_| self.delete()) {
                            break Err(e);
                        }
                    }
                },
                other => break other,
            }
        };
        let _ = fs::remove_file(&whole);
        linked
    }

    fn unmark(&self) {
        if let Ok(mark) = self.mark_path() {
            let _ = fs::remove_file(mark);
        }
    }

    fn create_inner(&self) -> io::Result<()> {
        ensure_run_dir()?;
        // O_EXCL: an existing namespace is an error (AlreadyExists), never silently reused.
        // Mode 0 as `ip` does: only the mount on top of the file matters.
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&self.path)?;
        let path = self.path.clone();
        // A fresh thread, because unshare moves only the calling thread; the thread then
        // exits and the bind mount alone keeps the namespace alive.
        let made = thread::Builder::new()
            .name(self.thread_name())
            .spawn(move || -> io::Result<()> {
                // SAFETY: plain syscall, affecting this thread only.
                cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
                mount(Path::new("/proc/thread-self/ns/net"), &path, libc::MS_BIND)
            })
            .and_then(|thread| {
                thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            });
        if made.is_err() {
            let _ = fs::remove_file(&self.path);
        }
        made
    }

    fn open_fd(&self) -> io::Result<File> {
        File::open(&self.path).map_err(|e| context(e, format_args!("opening netns {}", self.name)))
    }

    fn thread_name(&self) -> String {
        // Linux keeps 15 bytes of a thread name; std truncates.
        format!("ns-{}", self.name)
    }
}

/// A thread running inside a namespace, from [`NetNs::spawn`].
#[derive(Debug)]
pub struct NsThread<T> {
    /// `None` only when setns failed, and then `spawn` returned an error instead.
    inner: thread::JoinHandle<Option<T>>,
}

impl<T> NsThread<T> {
    /// Waits for the thread; `Err` holds its panic, as with [`thread::JoinHandle::join`].
    pub fn join(self) -> thread::Result<T> {
        self.inner
            .join()
            .map(|out| out.expect("spawn returns a handle only after setns succeeded"))
    }

    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    pub fn thread(&self) -> &thread::Thread {
        self.inner.thread()
    }
}

/// Why a rootless process cannot enter a namespace that no mark of the user's names.
const NOT_YOURS: &str = "no lab of yours has this host (see tcplab lab list; without root, tcplab reaches only the user's own labs)";

/// Moves the whole process into namespace `name`, for the binary's `--netns NAME` flag.
/// Rootless, the process first joins the user and mount namespaces of the process that
/// made `name` (found by its mark): only the user's own namespaces can be entered.
///
/// setns moves only the calling thread, so this must run at startup before any other
/// thread exists; it refuses otherwise, since threads left behind would silently work
/// in the old namespace.
pub fn enter_current_thread(name: &str) -> io::Result<()> {
    let ctx = |e| context(e, format_args!("entering netns {name}"));
    if userns::mode() == Mode::Rootless {
        let mark = NetNs::by_name(name)?.mark_path()?;
        let missing = |why: String| ctx(io::Error::new(io::ErrorKind::NotFound, why));
        match owner(&mark) {
            None => return Err(missing(NOT_YOURS.into())),
            Some(pid) if !pid_alive(pid) => {
                return Err(missing(format!(
                    "a leftover of process {pid}, which died (tcplab lab gc removes it)"
                )))
            }
            Some(pid) => userns::join(pid).map_err(ctx)?,
        }
    }
    let ns = NetNs::open(name)?;
    let threads = fs::read_dir("/proc/self/task").map_err(ctx)?.count();
    if threads > 1 {
        return Err(ctx(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the process already has {threads} threads; enter the netns before spawning any"
            ),
        )));
    }
    enter(&ns.open_fd()?).map_err(ctx)
}

/// Writes sysctl `key` (dotted, e.g. `net.ipv4.tcp_rmem`) inside `ns`: /proc/sys/net
/// shows the namespace of the thread that opens it.
pub fn write_sysctl_in(ns: &NetNs, key: &str, value: &str) -> io::Result<()> {
    let path = sysctl_path(key)?;
    ns.run(|| fs::write(&path, value))?
        .map_err(|e| context(e, format_args!("writing sysctl {key} in netns {}", ns.name)))
}

/// Reads sysctl `key` inside `ns`, trimmed.
pub fn read_sysctl_in(ns: &NetNs, key: &str) -> io::Result<String> {
    let path = sysctl_path(key)?;
    let value = ns
        .run(|| fs::read_to_string(&path))?
        .map_err(|e| context(e, format_args!("reading sysctl {key} in netns {}", ns.name)))?;
    Ok(value.trim().to_owned())
}

/// Whether sysctl `key` is read-only inside `ns` (the kernel shows the host's value
/// there, as for net.core.rmem_max).
pub fn sysctl_read_only_in(ns: &NetNs, key: &str) -> io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let path = sysctl_path(key)?;
    let mode = ns
        .run(|| fs::metadata(&path))?
        .map_err(|e| context(e, format_args!("reading sysctl {key} in netns {}", ns.name)))?
        .permissions()
        .mode();
    Ok(mode & 0o222 == 0)
}

fn sysctl_path(key: &str) -> io::Result<PathBuf> {
    if key.is_empty() || key.contains('/') || key.contains("..") || key.contains('\0') {
        return Err(invalid(format!("invalid sysctl key {key:?}")));
    }
    Ok(Path::new("/proc/sys").join(key.replace('.', "/")))
}

/// Sets link `ifname` up, in the calling thread's namespace.
pub fn link_up(ifname: &str) -> io::Result<()> {
    let what = format!("setting {ifname} up");
    let mut msg = LinkMessage::default();
    msg.header.index = if_index(ifname).map_err(|e| context(e, &what))?;
    msg.header.flags = LinkFlags::Up;
    msg.header.change_mask = LinkFlags::Up;
    rtnl(RouteNetlinkMessage::SetLink(msg), 0).map_err(|e| context(e, &what))?;
    Ok(())
}

/// Sets the MTU of link `ifname`, in the calling thread's namespace.
pub fn set_mtu(ifname: &str, mtu: u32) -> io::Result<()> {
    set_link_attribute(
        ifname,
        LinkAttribute::Mtu(mtu),
        &format!("setting mtu {mtu} on {ifname}"),
    )
}

/// Sets one attribute of link `ifname`, in the calling thread's namespace; an error
/// says `what` was being done.
pub(crate) fn set_link_attribute(
    ifname: &str,
    attribute: LinkAttribute,
    what: &str,
) -> io::Result<()> {
    let mut msg = LinkMessage::default();
    msg.header.index = if_index(ifname).map_err(|e| context(e, what))?;
    msg.attributes.push(attribute);
    rtnl(RouteNetlinkMessage::SetLink(msg), 0).map_err(|e| context(e, what))?;
    Ok(())
}

/// Reads the MTU of link `ifname` through netlink, in the calling thread's namespace.
/// (/sys/class/net would show the namespace /sys was mounted in, not the thread's.)
pub fn link_mtu(ifname: &str) -> io::Result<u32> {
    let what = format!("reading mtu of {ifname}");
    let attrs = link_attributes(ifname).map_err(|e| context(e, &what))?;
    attrs
        .into_iter()
        .find_map(|attr| match attr {
            LinkAttribute::Mtu(mtu) => Some(mtu),
            _ => None,
        })
        .ok_or_else(|| io::Error::other(format!("{what}: no IFLA_MTU in the reply")))
}

/// Waits until link `ifname`, in the calling thread's namespace, is operationally up.
///
/// A link set up before its carrier comes on (a veth end whose peer is still down)
/// keeps a no-op qdisc that drops everything until the kernel's linkwatch work
/// activates it, asynchronously, together with setting the operstate. Waiting for
/// the operstate keeps the first packets of a test from being lost.
pub fn wait_oper_up(ifname: &str, timeout: Duration) -> io::Result<()> {
    let what = format!("waiting for {ifname} to be up");
    let deadline = Instant::now() + timeout;
    loop {
        let attrs = link_attributes(ifname).map_err(|e| context(e, &what))?;
        if attrs.contains(&LinkAttribute::OperState(State::Up)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what}: still not up after {timeout:?}"),
            ));
        }
        thread::sleep(Duration::from_millis(1));
    }
}

fn link_attributes(ifname: &str) -> io::Result<Vec<LinkAttribute>> {
    let mut msg = LinkMessage::default();
    msg.header.index = if_index(ifname)?;
    let replies = rtnl(RouteNetlinkMessage::GetLink(msg), 0)?;
    replies
        .into_iter()
        .find_map(|reply| match reply {
            RouteNetlinkMessage::NewLink(link) => Some(link.attributes),
            _ => None,
        })
        .ok_or_else(|| io::Error::other("no link in the reply"))
}

/// Adds `addr/prefix` to link `ifname`, in the calling thread's namespace. IPv6
/// addresses skip duplicate address detection so they are usable at once.
pub fn add_address(ifname: &str, addr: IpAddr, prefix: u8) -> io::Result<()> {
    let what = format!("adding address {addr}/{prefix} to {ifname}");
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return Err(invalid(format!("{what}: prefix longer than {max}")));
    }
    let mut msg = AddressMessage::default();
    msg.header.index = if_index(ifname).map_err(|e| context(e, &what))?;
    msg.header.prefix_len = prefix;
    msg.header.scope = AddressScope::Universe;
    match addr {
        IpAddr::V4(_) => {
            msg.header.family = AddressFamily::Inet;
            // IFA_LOCAL is the interface's own address; IFA_ADDRESS the peer's, equal here.
            msg.attributes.push(AddressAttribute::Local(addr));
            msg.attributes.push(AddressAttribute::Address(addr));
        }
        IpAddr::V6(_) => {
            msg.header.family = AddressFamily::Inet6;
            msg.header.flags = AddressHeaderFlags::Nodad;
            msg.attributes.push(AddressAttribute::Address(addr));
            msg.attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
    }
    rtnl(
        RouteNetlinkMessage::NewAddress(msg),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .map_err(|e| context(e, &what))?;
    Ok(())
}

/// Deletes link `ifname` (both ends of a veth pair), in the calling thread's namespace.
pub fn delete_link(ifname: &str) -> io::Result<()> {
    let what = format!("deleting link {ifname}");
    let mut msg = LinkMessage::default();
    msg.header.index = if_index(ifname).map_err(|e| context(e, &what))?;
    rtnl(RouteNetlinkMessage::DelLink(msg), 0).map_err(|e| context(e, &what))?;
    Ok(())
}

/// Adds the IPv4 default route of the calling thread's namespace: through `gateway`
/// on link `ifname`, or straight out of `ifname` (a point-to-point link such as a TUN).
pub fn add_default_route(ifname: &str, gateway: Option<Ipv4Addr>) -> io::Result<()> {
    let what = match gateway {
        Some(gw) => format!("adding the default route via {gw} on {ifname}"),
        None => format!("adding the default route on {ifname}"),
    };
    let mut msg = RouteMessage::default();
    msg.header.address_family = AddressFamily::Inet;
    msg.header.table = RouteHeader::RT_TABLE_MAIN;
    msg.header.protocol = RouteProtocol::Boot;
    msg.header.kind = RouteType::Unicast;
    msg.header.scope = match gateway {
        Some(_) => RouteScope::Universe,
        None => RouteScope::Link,
    };
    msg.attributes.push(RouteAttribute::Oif(
        if_index(ifname).map_err(|e| context(e, &what))?,
    ));
    if let Some(gw) = gateway {
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet(gw)));
    }
    rtnl(
        RouteNetlinkMessage::NewRoute(msg),
        NLM_F_CREATE | NLM_F_EXCL,
    )
    .map_err(|e| context(e, &what))?;
    Ok(())
}

/// Creates a veth pair in the calling thread's namespace: `ifname` here and `peer` in
/// `peer_ns` (or here when `None`), in one request so no end is ever left alone.
pub fn create_veth(ifname: &str, peer: &str, peer_ns: Option<&NetNs>) -> io::Result<()> {
    let what = match peer_ns {
        Some(ns) => format!("creating veth {ifname} (peer {peer} in netns {})", ns.name),
        None => format!("creating veth {ifname} (peer {peer})"),
    };
    let peer_fd = peer_ns.map(NetNs::open_fd).transpose()?;
    let mut peer_msg = LinkMessage::default();
    peer_msg
        .attributes
        .push(LinkAttribute::IfName(peer.to_owned()));
    if let Some(fd) = &peer_fd {
        peer_msg
            .attributes
            .push(LinkAttribute::NetNsFd(fd.as_raw_fd()));
    }
    let mut msg = LinkMessage::default();
    msg.attributes
        .push(LinkAttribute::IfName(ifname.to_owned()));
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))),
    ]));
    // `peer_fd` lives until the kernel has answered.
    rtnl(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
        .map_err(|e| context(e, &what))?;
    Ok(())
}

/// Two hosts, namespaces `{prefix}-a` and `{prefix}-b`, joined by a veth pair
/// ([`VethLab::IF_A`] in a, [`VethLab::IF_B`] in b), each with `lo` up and addresses
/// 10.N.M.1/24 and fd00:N:M::1/64 (a), .2 and ::2 (b), where `N.M` is the id's two
/// bytes. Namespaces already isolate the addresses; the id keeps them distinct in
/// captures and logs when many labs run at once. Dropping the lab deletes both
/// namespaces, which destroys the veth pair.
#[derive(Debug)]
pub struct VethLab {
    a: NetNs,
    b: NetNs,
    id: u16,
}

impl VethLab {
    pub const IF_A: &'static str = "veth-a";
    pub const IF_B: &'static str = "veth-b";

    pub fn new(prefix: &str, id: u16) -> io::Result<VethLab> {
        let a = NetNs::create(&format!("{prefix}-a"))?;
        let b = match NetNs::create(&format!("{prefix}-b")) {
            Ok(b) => b,
            Err(e) => {
                let _ = a.delete();
                return Err(e);
            }
        };
        // From here on, an early return drops the lab and so deletes both namespaces.
        let lab = VethLab { a, b, id };
        lab.a
            .try_run(|| create_veth(Self::IF_A, Self::IF_B, Some(&lab.b)))?;
        lab.a
            .try_run(|| setup_host(Self::IF_A, lab.addr_a_v4(), lab.addr_a_v6()))?;
        lab.b
            .try_run(|| setup_host(Self::IF_B, lab.addr_b_v4(), lab.addr_b_v6()))?;
        for (ns, ifname) in [(&lab.a, Self::IF_A), (&lab.b, Self::IF_B)] {
            ns.try_run(|| wait_oper_up(ifname, Duration::from_secs(2)))?;
        }
        Ok(lab)
    }

    pub fn a(&self) -> &NetNs {
        &self.a
    }

    pub fn b(&self) -> &NetNs {
        &self.b
    }

    pub fn id(&self) -> u16 {
        self.id
    }

    pub fn addr_a_v4(&self) -> IpAddr {
        self.v4(1)
    }

    pub fn addr_b_v4(&self) -> IpAddr {
        self.v4(2)
    }

    pub fn addr_a_v6(&self) -> IpAddr {
        self.v6(1)
    }

    pub fn addr_b_v6(&self) -> IpAddr {
        self.v6(2)
    }

    /// Sets the MTU of both veth ends.
    pub fn set_mtu(&self, mtu: u32) -> io::Result<()> {
        self.a.try_run(|| set_mtu(Self::IF_A, mtu))?;
        self.b.try_run(|| set_mtu(Self::IF_B, mtu))
    }

    fn v4(&self, host: u8) -> IpAddr {
        let [n, m] = self.id.to_be_bytes();
        Ipv4Addr::new(10, n, m, host).into()
    }

    fn v6(&self, host: u16) -> IpAddr {
        let (n, m) = (self.id >> 8, self.id & 0xff);
        Ipv6Addr::new(0xfd00, n, m, 0, 0, 0, 0, host).into()
    }
}

impl Drop for VethLab {
    fn drop(&mut self) {
        for ns in [&self.b, &self.a] {
            if let Err(e) = ns.delete() {
                eprintln!("warning: {e}");
            }
        }
    }
}

fn setup_host(ifname: &str, v4: IpAddr, v6: IpAddr) -> io::Result<()> {
    link_up("lo")?;
    add_address(ifname, v4, 24)?;
    add_address(ifname, v6, 64)?;
    link_up(ifname)
}

/// The process that marked a namespace, from its mark; `None` without a readable one.
fn owner(mark: &Path) -> Option<u32> {
    fs::read_to_string(mark).ok()?.trim().parse().ok()
}

/// This process's pid as /proc, the marks and the registry know it: std::process::id()
/// is the pid in the process's own pid namespace, which inside `tcplab shell` (its
/// command has a pid namespace of its own) names another process, or none, in /proc.
pub fn own_pid() -> u32 {
    fs::read_link("/proc/self")
        .ok()
        .and_then(|link| link.to_str()?.parse().ok())
        .unwrap_or_else(std::process::id)
}

/// A process [`end_processes_in`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub pid: u32,
    /// Its command name (`comm`), as `ps` shows it.
    pub command: String,
}

/// How long [`end_processes_in`] waits for what it killed to be gone.
const END_WAIT: Duration = Duration::from_secs(5);

/// Ends, with SIGKILL, every process inside namespace `name`, which must be a
/// leftover (its mark's process died): a command left running there keeps it alive,
/// nameless once removed. Waits until they are gone, and returns them.
///
/// As root a process is inside when its network namespace is the one mounted at the
/// name. Without root the name is mounted only in the mount namespace of the process
/// that made it, which its children and `lab exec`'s commands share and nothing else
/// does: every process of that mount namespace is the dead lab's, and is ended.
pub fn end_processes_in(name: &str) -> io::Result<Vec<Ended>> {
    let ns = NetNs::by_name(name)?;
    let ctx = |e| context(e, format_args!("ending the processes in netns {name}"));
    let nsfs = fs::metadata("/proc/self/ns/net").map_err(ctx)?.dev();
    let inside: Box<dyn Fn(u32) -> bool> = match userns::mode() {
        Mode::Privileged => {
            let meta = match fs::metadata(&ns.path) {
                Ok(meta) => meta,
                // No file: no namespace, nothing inside.
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(ctx(e)),
            };
            if meta.dev() != nsfs {
                // A file without its namespace mounted on it: nothing inside.
                return Ok(Vec::new());
            }
            let id = (meta.dev(), meta.ino());
            Box::new(move |pid| {
                fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == id)
            })
        }
        Mode::Rootless => {
            let relative = ns.path.strip_prefix("/").unwrap_or(&ns.path).to_owned();
            Box::new(move |pid| {
                fs::metadata(Path::new(&format!("/proc/{pid}/root")).join(&relative))
                    .is_ok_and(|m| m.dev() == nsfs)
            })
        }
    };
    let me = own_pid();
    let deadline = Instant::now() + END_WAIT;
    let mut ended: Vec<Ended> = Vec::new();
    loop {
        let live: Vec<u32> = pids()
            .map_err(ctx)?
            .filter(|&pid| pid != me && inside(pid) && pid_alive(pid))
            .collect();
        if live.is_empty() {
            return Ok(ended);
        }
        if Instant::now() > deadline {
            return Err(ctx(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("processes {live:?} outlived SIGKILL for {END_WAIT:?}"),
            )));
        }
        for pid in live {
            if !ended.iter().any(|e| e.pid == pid) {
                let command = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                ended.push(Ended {
                    pid,
                    command: command.trim().to_owned(),
                });
            }
            // SAFETY: plain syscall. A process gone since the scan is ESRCH: ignored.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Every pid in /proc.
fn pids() -> io::Result<impl Iterator<Item = u32>> {
    Ok(fs::read_dir("/proc")?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok()))
}

/// Whether the process runs. A zombie does not: a process killed with SIGKILL stays one
/// until its parent (often a slow init) reaps it, and what it made is already left over.
pub fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name, which may hold spaces.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Whether namespace `name` is marked by a process that runs: not a leftover, whoever
/// else remembers the name.
pub fn in_use(name: &str) -> io::Result<bool> {
    Ok(owner(&NetNs::by_name(name)?.mark_path()?).is_some_and(pid_alive))
}

/// A namespace tcplab made whose process is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    pub name: String,
    /// The process that made it; `None` for an unreadable mark.
    pub pid: Option<u32>,
}

/// The namespaces whose mark names a process that died (rootless, such a namespace
/// died with its process and only the mark is left), by name.
pub fn leftovers() -> io::Result<Vec<Leftover>> {
    let dir = mark_dir()?;
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(context(e, format_args!("listing {}", dir.display()))),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        // A mark being made (`.NAME.PID`) is its maker's to remove.
        if name.starts_with('.') {
            continue;
        }
        let pid = owner(&path);
        if !pid.is_some_and(pid_alive) {
            found.push(Leftover { name, pid });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

impl Leftover {
    /// Ends the processes left inside the namespace, then deletes it, if it still
    /// exists, and its mark. Returns the processes ended.
    pub fn remove(&self) -> io::Result<Vec<Ended>> {
        let ended = end_processes_in(&self.name)?;
        NetNs::by_name(&self.name)?.delete()?;
        Ok(ended)
    }
}

/// The privilege policy of every privileged test in the workspace: true when the
/// process can create network namespaces. Otherwise a missing privilege fails the
/// test in CI (env `CI=true`) and skips it elsewhere, saying so on stderr.
pub fn privileged_or_skip(test: &str) -> bool {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    match PROBE.get_or_init(probe_privilege) {
        Ok(()) => true,
        Err(reason) if in_ci() => panic!("{test}: needs privileges CI must grant: {reason}"),
        Err(reason) => {
            eprintln!("SKIP {test}: {reason}");
            false
        }
    }
}

/// Whether this runs in CI (env `CI=true` or `CI=1`): missing test prerequisites fail
/// there instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

fn probe_privilege() -> Result<(), String> {
    // A throwaway thread: unshare moves only it, and its namespace dies when it exits.
    // SAFETY: plain syscall on that thread only.
    let unshared = thread::spawn(|| cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) }))
        .join()
        .map_err(|_| "the probe thread panicked".to_owned())?;
    if let Err(e) = unshared {
        return Err(format!(
            "cannot create a network namespace ({e}); run as root"
        ));
    }
    // NetNs::create also creates and mounts files under /run/netns.
    let dir = if Path::new(NETNS_RUN_DIR).exists() {
        NETNS_RUN_DIR
    } else {
        "/run"
    };
    let c_dir = cstring(dir.as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: `c_dir` is a valid NUL-terminated path.
    cvt(unsafe { libc::access(c_dir.as_ptr(), libc::W_OK) })
        .map_err(|e| format!("{dir} is not writable ({e})"))?;
    Ok(())
}

/// Makes /run/netns a shared mount point, as `ip` does, so namespaces mounted in it
/// later also appear (and disappear) in mount namespaces cloned before, such as those
/// of `ip netns exec` or of services. Rootless, the private tmpfs [`prepare`] mounted
/// is the directory already.
fn ensure_run_dir() -> io::Result<()> {
    if userns::mode() == Mode::Rootless {
        return Ok(());
    }
    // Two threads racing here would stack two bind mounts.
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|poison| poison.into_inner());
    let dir = Path::new(NETNS_RUN_DIR);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let mut bound = false;
    loop {
        match mount(Path::new(""), dir, libc::MS_SHARED | libc::MS_REC) {
            Ok(()) => return Ok(()),
            // EINVAL: not a mount point yet. Bind it onto itself once and retry.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && !bound => {
                mount(dir, dir, libc::MS_BIND | libc::MS_REC)?;
                bound = true;
            }
            Err(e) => return Err(context(e, format_args!("making {NETNS_RUN_DIR} shared"))),
        }
    }
}

fn mount(source: &Path, target: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let source = cstring(source.as_os_str().as_bytes())?;
    let target = cstring(target.as_os_str().as_bytes())?;
    let fstype = c"none";
    // SAFETY: all pointers are valid NUL-terminated strings or null for `data`.
    cvt(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            std::ptr::null(),
        )
    })?;
    Ok(())
}

fn enter(ns: &File) -> io::Result<()> {
    // SAFETY: `ns` is an open nsfs file; setns affects only the calling thread.
    cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

/// The index of link `ifname` in the calling thread's namespace.
pub fn if_index(ifname: &str) -> io::Result<u32> {
    let c_name = cstring(ifname.as_bytes())?;
    // SAFETY: `c_name` is a valid NUL-terminated string. The lookup uses a socket of
    // the calling thread's namespace.
    match unsafe { libc::if_nametoindex(c_name.as_ptr()) } {
        0 => Err(context(
            io::Error::last_os_error(),
            format_args!("no link {ifname}"),
        )),
        index => Ok(index),
    }
}

/// Sends one rtnetlink request with NLM_F_ACK on a socket of the calling thread's
/// namespace, and returns the replies before the ACK; a NACK becomes its errno.
pub(crate) fn rtnl(msg: RouteNetlinkMessage, flags: u16) -> io::Result<Vec<RouteNetlinkMessage>> {
    const SEQ: u32 = 1;
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;

    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    header.sequence_number = SEQ;
    let mut request = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    request.finalize();
    let mut buf = vec![0; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let mut replies = Vec::new();
    loop {
        let (data, _) = socket.recv_from_full()?;
        let mut rest = &data[..];
        while !rest.is_empty() {
            let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            // Messages in one datagram are 4-byte aligned (NLMSG_ALIGN).
            let len = (reply.header.length as usize).next_multiple_of(4);
            rest = rest.get(len..).unwrap_or_default();
            if reply.header.sequence_number != SEQ {
                continue;
            }
            match reply.payload {
                NetlinkPayload::Error(err) => {
                    return match err.code {
                        None => Ok(replies),
                        Some(_) => Err(err.to_io()),
                    };
                }
                NetlinkPayload::InnerMessage(inner) => replies.push(inner),
                NetlinkPayload::Done(_) => return Ok(replies),
                _ => {}
            }
        }
    }
}

fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || name.contains('\0')
        || name.len() > 255
    {
        return Err(invalid(format!("invalid netns name {name:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// Unique per test process, so leftovers of a killed run never collide.
    fn unique(tag: &str) -> String {
        format!("tl{}-{tag}", std::process::id())
    }

    #[test]
    fn lab_addresses_come_from_the_id() {
        let lab = VethLab {
            a: NetNs::by_name("x-a").unwrap(),
            b: NetNs::by_name("x-b").unwrap(),
            id: 0x0102,
        };
        assert_eq!(lab.addr_a_v4().to_string(), "10.1.2.1");
        assert_eq!(lab.addr_b_v4().to_string(), "10.1.2.2");
        assert_eq!(lab.addr_a_v6().to_string(), "fd00:1:2::1");
        assert_eq!(lab.addr_b_v6().to_string(), "fd00:1:2::2");
        // Nothing was created: keep Drop from deleting anything.
        std::mem::forget(lab);
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(pid_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }

    #[test]
    fn bad_names_and_keys_are_rejected() {
        for name in ["", ".", "..", "a/b", "a\0b"] {
            assert!(NetNs::open(name).is_err(), "{name:?}");
        }
        for key in ["", "net/ipv4", "net..x", "..", "net.ipv4.tcp_rmem\0"] {
            assert!(sysctl_path(key).is_err(), "{key:?}");
        }
        assert_eq!(
            sysctl_path("net.ipv4.tcp_rmem").unwrap(),
            Path::new("/proc/sys/net/ipv4/tcp_rmem")
        );
    }

    #[test]
    fn netns_create_list_delete() {
        if !privileged_or_skip("netns_create_list_delete") {
            return;
        }
        let name = unique("cld");
        let ns = NetNs::create(&name).unwrap();
        assert!(NetNs::list().unwrap().contains(&name));
        assert_eq!(NetNs::open(&name).unwrap(), ns);

        let again = NetNs::create(&name).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert!(
            again
                .to_string()
                .starts_with(&format!("creating netns {name}:")),
            "{again}"
        );

        // A fresh namespace holds only lo. (/proc/self/net would show the main thread's.)
        let links = ns
            .run(|| fs::read_to_string("/proc/thread-self/net/dev").unwrap())
            .unwrap();
        assert!(links.contains("lo:") && !links.contains("eth0"), "{links}");

        ns.delete().unwrap();
        assert!(!ns.path().exists());
        assert!(!NetNs::list().unwrap().contains(&name));
        ns.delete().unwrap(); // idempotent
        assert_eq!(
            NetNs::open(&name).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    /// A dead process's pid, for marks of leftovers.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        child.id()
    }

    #[test]
    fn netns_marks_name_their_process_and_a_dead_ones_namespace_is_a_leftover() {
        if !privileged_or_skip("netns_marks") {
            return;
        }
        let name = unique("mark");
        let ns = NetNs::create(&name).unwrap();
        let mark = ns.mark_path().unwrap();
        assert_eq!(owner(&mark), Some(std::process::id()));
        assert!(!leftovers().unwrap().iter().any(|l| l.name == name));
        // Another live process's name is refused, naming it.
        let err = NetNs::create(&name).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains("in use by process"), "{err}");

        // The process died: its namespace is a leftover, found by its mark alone…
        let dead = dead_pid();
        fs::write(&mark, format!("{dead}\n")).unwrap();
        let found: Vec<_> = leftovers()
            .unwrap()
            .into_iter()
            .filter(|l| l.name == name)
            .collect();
        assert_eq!(
            found,
            [Leftover {
                name: name.clone(),
                pid: Some(dead)
            }]
        );
        // …and creating the name again reclaims it.
        let again = NetNs::create(&name).unwrap();
        assert_eq!(owner(&mark), Some(std::process::id()));
        // Once more dead, removing the leftover removes the namespace and the mark.
        fs::write(&mark, format!("{dead}\n")).unwrap();
        found[0].remove().unwrap();
        assert!(!again.path().exists() && !mark.exists());
        assert!(!NetNs::list().unwrap().contains(&name));
    }

    /// A process left inside a leftover namespace is ended when the leftover is
    /// removed, or its name reclaimed; one outside it is not.
    #[test]
    fn netns_removing_a_leftover_ends_the_processes_inside() {
        if !privileged_or_skip("netns_leftover_processes") {
            return;
        }
        use std::os::unix::process::ExitStatusExt;
        let sleep = || {
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .unwrap()
        };
        let name = unique("procs");
        let ns = NetNs::create(&name).unwrap();
        let mut outside = sleep();
        let mut inside = ns.run(sleep).unwrap();
        let mark = ns.mark_path().unwrap();
        fs::write(&mark, format!("{}\n", dead_pid())).unwrap();
        let leftover = Leftover {
            name: name.clone(),
            pid: None,
        };
        let ended = leftover.remove().unwrap();
        assert_eq!(
            ended,
            [Ended {
                pid: inside.id(),
                command: "sleep".into()
            }]
        );
        assert_eq!(inside.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(pid_alive(outside.id()));

        // Reclaiming a leftover's name ends what runs inside it too.
        let ns = NetNs::create(&name).unwrap();
        let mut inside = ns.run(sleep).unwrap();
        fs::write(&mark, format!("{}\n", dead_pid())).unwrap();
        let again = NetNs::create(&name).unwrap();
        assert_eq!(inside.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(pid_alive(outside.id()));
        again.delete().unwrap();
        outside.kill().unwrap();
        outside.wait().unwrap();
    }

    #[test]
    fn netns_a_namespace_tcplab_did_not_make_is_left_alone() {
        if !privileged_or_skip("netns_unmarked") {
            return;
        }
        let name = unique("ipns");
        let added = std::process::Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap();
        assert!(added.success());
        let err = NetNs::create(&name).unwrap_err();
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", &name])
            .status();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        let msg = err.to_string();
        assert!(
            msg.contains(&format!(
                "exists and tcplab did not make it: remove it (ip netns delete {name})"
            )),
            "{msg}"
        );
        assert!(!NetNs::by_name(&name).unwrap().mark_path().unwrap().exists());
        assert!(!leftovers().unwrap().iter().any(|l| l.name == name));
    }

    #[test]
    fn netns_spawn_runs_inside() {
        if !privileged_or_skip("netns_spawn_runs_inside") {
            return;
        }
        let ns = NetNs::create(&unique("spawn")).unwrap();
        let inode = |path: &str| {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(path).unwrap().ino()
        };
        let root = inode("/proc/thread-self/ns/net");
        let inside = ns
            .spawn(move || inode("/proc/thread-self/ns/net"))
            .unwrap()
            .join()
            .unwrap();
        let mounted = inode(ns.path().to_str().unwrap());
        ns.delete().unwrap();
        assert_eq!(inside, mounted);
        assert_ne!(inside, root);
    }

    fn echo_over(lab: &VethLab, server: IpAddr) {
        // Sockets keep the namespace they were created in: only creation needs `run`.
        let listener = lab
            .a()
            .run(|| TcpListener::bind((server, 0)))
            .unwrap()
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut client = lab
            .b()
            .run(|| TcpStream::connect((server, port)))
            .unwrap()
            .unwrap();
        let (mut conn, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip(), client.local_addr().unwrap().ip());

        client.write_all(b"ping").unwrap();
        let mut buf = [0; 4];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        conn.write_all(b"pong").unwrap();
        client.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
    }

    #[test]
    fn netns_veth_lab_talks_v4_and_v6() {
        if !privileged_or_skip("netns_veth_lab_talks_v4_and_v6") {
            return;
        }
        let lab = VethLab::new(&unique("talk"), 0x0102).unwrap();
        echo_over(&lab, lab.addr_a_v4());
        echo_over(&lab, lab.addr_a_v6());
    }

    #[test]
    fn netns_veth_lab_drop_removes_namespaces() {
        if !privileged_or_skip("netns_veth_lab_drop_removes_namespaces") {
            return;
        }
        let prefix = unique("drop");
        let lab = VethLab::new(&prefix, 3).unwrap();
        let paths = [lab.a().path().to_owned(), lab.b().path().to_owned()];
        assert!(paths.iter().all(|p| p.exists()));
        drop(lab);
        assert!(paths.iter().all(|p| !p.exists()));
        let left: Vec<_> = NetNs::list()
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn netns_mtu_is_read_back_and_errors_name_the_operation() {
        if !privileged_or_skip("netns_mtu_is_read_back_and_errors_name_the_operation") {
            return;
        }
        let lab = VethLab::new(&unique("mtu"), 4).unwrap();
        lab.set_mtu(9000).unwrap();
        assert_eq!(lab.a().try_run(|| link_mtu(VethLab::IF_A)).unwrap(), 9000);
        assert_eq!(lab.b().try_run(|| link_mtu(VethLab::IF_B)).unwrap(), 9000);

        let err = lab
            .a()
            .try_run(|| create_veth(VethLab::IF_A, "other", None))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "in netns {}: creating veth veth-a",
                lab.a().name()
            )),
            "{msg}"
        );
        let err = lab.a().try_run(|| set_mtu("nope0", 1500)).unwrap_err();
        assert!(
            err.to_string().contains("setting mtu 1500 on nope0"),
            "{err}"
        );
    }

    #[test]
    fn netns_sysctl_is_per_namespace() {
        if !privileged_or_skip("netns_sysctl_is_per_namespace") {
            return;
        }
        const KEY: &str = "net.ipv4.tcp_rmem";
        let root_path = sysctl_path(KEY).unwrap();
        let root_before = fs::read_to_string(&root_path).unwrap();
        let ns = NetNs::create(&unique("sysctl")).unwrap();
        let result =
            write_sysctl_in(&ns, KEY, "4096 65536 1048576").and_then(|()| read_sysctl_in(&ns, KEY));
        ns.delete().unwrap();
        let inside = result.unwrap();
        assert_eq!(
            inside.split_whitespace().collect::<Vec<_>>(),
            ["4096", "65536", "1048576"]
        );
        let ns = NetNs::create(&unique("sysctl-ro")).unwrap();
        let read_only = [KEY, "net.core.rmem_max"].map(|key| sysctl_read_only_in(&ns, key));
        ns.delete().unwrap();
        // rmem_max is the host's: a namespace shows it read-only.
        assert_eq!(read_only.map(Result::unwrap), [false, true]);
        assert_eq!(fs::read_to_string(&root_path).unwrap(), root_before);
    }
}
