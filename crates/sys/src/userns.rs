//! Who may build labs, and how: as root, or inside a user namespace of one's own.
//!
//! Root (in the initial user namespace, with CAP_SYS_ADMIN and CAP_NET_ADMIN) builds
//! namespaces as `ip netns` does, visible to every process. Anyone else works as
//! `unshare -Urm` would: the process enters a user namespace of its own, where it is
//! root over the network namespaces it creates, and a mount namespace of its own, where
//! their bind mounts live on a private tmpfs. Those namespaces die with the process
//! that made them; later commands of the same user reach a living lab's hosts by
//! joining its process's user and mount namespaces (`join`).
//!
//! The process-wide decisions ([`mode`], [`state_dir`]) are made once, before the
//! process changes namespace: inside its own user namespace a rootless process looks
//! like root.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::ffi::{context, cstring, cvt};

/// How this process builds namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Root: namespaces under /run/netns, shared with `ip netns`; state in /run/tcplab.
    Privileged,
    /// Anyone else: namespaces inside the process's own user and mount namespaces;
    /// state in the user's runtime directory.
    Rootless,
}

/// This process's mode, decided at the first call, which must come before any change
/// of user namespace (`netns::prepare` and `netns::enter_current_thread` make it first).
pub fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let initial = fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| is_initial(&m));
        let caps = fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| effective_caps(&s));
        const NEEDED: u64 = 1 << CAP_NET_ADMIN | 1 << CAP_SYS_ADMIN;
        match caps {
            Some(caps) if initial && caps & NEEDED == NEEDED => Mode::Privileged,
            _ => Mode::Rootless,
        }
    })
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// Whether a uid_map is the initial user namespace's: every id maps to itself.
fn is_initial(uid_map: &str) -> bool {
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

/// CapEff from /proc/PID/status.
fn effective_caps(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// Where tcplab keeps what outlives one command (the lab registry, the marks of the
/// namespaces it made): /run/tcplab as root; rootless, `$XDG_RUNTIME_DIR/tcplab` when
/// that directory is the user's, else `/tmp/tcplab-UID`, private to the user. Decided
/// once, like [`mode`].
pub fn state_dir() -> io::Result<&'static Path> {
    static DIR: OnceLock<Result<PathBuf, (io::ErrorKind, String)>> = OnceLock::new();
    DIR.get_or_init(|| match mode() {
        Mode::Privileged => Ok(PathBuf::from("/run/tcplab")),
        Mode::Rootless => user_state_dir().map_err(|e| (e.kind(), e.to_string())),
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(|(kind, msg)| io::Error::new(*kind, msg.clone()))
}

fn user_state_dir() -> io::Result<PathBuf> {
    // SAFETY: plain getters.
    let uid = unsafe { libc::geteuid() };
    let owned = |dir: &Path| {
        fs::symlink_metadata(dir)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0)
    };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(runtime) if runtime.is_absolute() && owned(&runtime) => runtime.join("tcplab"),
        // Named by the uid outside any user namespace of tcplab's, so that a tcplab
        // started inside a lab finds its parent's labs.
        _ => std::env::temp_dir().join(format!("tcplab-{}", outside_uid(uid))),
    };
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(io::Error::new(
                e.kind(),
                format!("creating {}: {e}", dir.display()),
            ))
        }
        _ => {}
    }
    let meta = fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private directory of yours (owner {}, mode {:o}): remove it, or set XDG_RUNTIME_DIR to a directory of yours",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(dir)
}

/// `uid` as the parent user namespace knows it (itself in the initial one).
fn outside_uid(uid: u32) -> u32 {
    outside(
        &fs::read_to_string("/proc/self/uid_map").unwrap_or_default(),
        uid,
    )
}

/// The lines of a uid_map or gid_map: (first id inside, first id outside, count).
fn id_ranges(map: &str) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
    map.lines().filter_map(|line| {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        (f.len() == 3 && f[2] > 0).then(|| (f[0], f[1], f[2]))
    })
}

/// `id` mapped through `map` to the parent namespace; unmapped, itself.
fn outside(map: &str, id: u32) -> u32 {
    id_ranges(map)
        .find(|&(inside, _, count)| (inside..inside + count).contains(&u64::from(id)))
        .map_or(id, |(inside, outside, _)| {
            (outside + u64::from(id) - inside) as u32
        })
}

/// The `net.ipv4.ping_group_range` that lets every group of this process's user
/// namespace ping: all groups (to i32::MAX, the sysctl's limit) as root, the one group
/// mapped in a rootless process's namespace. A range naming unmapped groups is refused.
pub fn ping_group_range() -> String {
    let (lo, hi) = mapped_range(&fs::read_to_string("/proc/self/gid_map").unwrap_or_default());
    format!("{lo} {hi}")
}

/// The lowest and highest ids a map maps inside, capped at i32::MAX.
fn mapped_range(map: &str) -> (u32, u32) {
    let cap = |id: u64| id.min(i32::MAX as u64) as u32;
    id_ranges(map)
        .map(|(inside, _, count)| (inside, inside + count - 1))
        .reduce(|(lo, hi), (a, b)| (lo.min(a), hi.max(b)))
        .map_or((0, 0), |(lo, hi)| (cap(lo), cap(hi)))
}

/// Enters a new user namespace, where this process is root (mapped to its own uid and
/// gid), and a new mount namespace with a private tmpfs on `dir` (created if missing).
/// As `unshare -Urm`; only for a single-threaded process.
pub(crate) fn unshare_private(dir: &Path) -> io::Result<()> {
    single_threaded("entering a user namespace")?;
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // Made before unsharing, so it belongs to the user outside.
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // SAFETY: plain syscall; the process has one thread.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) })
        .map_err(|e| context(e, "unshare"))?;
    // A process without CAP_SETGID in the parent may map its group only once setgroups
    // is denied.
    fs::write("/proc/self/setgroups", "deny").map_err(|e| context(e, "denying setgroups"))?;
    fs::write("/proc/self/uid_map", format!("0 {uid} 1"))
        .map_err(|e| context(e, "writing uid_map"))?;
    fs::write("/proc/self/gid_map", format!("0 {gid} 1"))
        .map_err(|e| context(e, "writing gid_map"))?;
    let target = cstring(dir.as_os_str().as_bytes())?;
    // SAFETY: valid NUL-terminated strings.
    cvt(unsafe {
        libc::mount(
            c"tcplab".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"mode=0700".as_ptr().cast(),
        )
    })
    .map_err(|e| context(e, format_args!("mounting a tmpfs on {}", dir.display())))?;
    Ok(())
}

/// Joins the user and mount namespaces of process `pid` (a lab's process of the same
/// user), keeping the working directory. Only for a single-threaded process.
pub(crate) fn join(pid: u32) -> io::Result<()> {
    single_threaded("joining a lab's user namespace")?;
    let cwd = std::env::current_dir()?;
    for (kind, flag) in [("user", libc::CLONE_NEWUSER), ("mnt", libc::CLONE_NEWNS)] {
        let theirs = format!("/proc/{pid}/ns/{kind}");
        let file = fs::File::open(&theirs).map_err(|e| context(e, &theirs))?;
        // setns into one's own user namespace fails (EINVAL): a process started inside
        // the lab is there already.
        let ours = fs::metadata(format!("/proc/self/ns/{kind}"))?;
        let meta = file.metadata()?;
        if (meta.dev(), meta.ino()) == (ours.dev(), ours.ino()) {
            continue;
        }
        // SAFETY: `file` is an open nsfs file; the process has one thread.
        cvt(unsafe { libc::setns(file.as_raw_fd(), flag) }).map_err(|e| {
            context(
                e,
                format_args!("joining the {kind} namespace of process {pid}"),
            )
        })?;
    }
    // Joining a mount namespace moves the working directory to its root.
    std::env::set_current_dir(&cwd)
        .map_err(|e| context(e, format_args!("returning to {}", cwd.display())))
}

fn single_threaded(what: &str) -> io::Result<()> {
    let threads = fs::read_dir("/proc/self/task")?.count();
    if threads > 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: the process already has {threads} threads"),
        ));
    }
    Ok(())
}

/// Why this process could not enter a user namespace of its own, in one line naming
/// the sysctl that forbids it where one does.
pub(crate) fn refusal(error: &io::Error) -> String {
    // Root of the initial namespace without the capabilities (a container's root), for
    // whom "run as root" is no help.
    // SAFETY: plain getter.
    let as_root = unsafe { libc::geteuid() } == 0
        && fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| is_initial(&m));
    refusal_line(error, as_root)
}

fn refusal_line(error: &io::Error, as_root: bool) -> String {
    let read = |path: &str| fs::read_to_string(path).ok();
    let cause = match diagnose(
        read("/proc/sys/kernel/unprivileged_userns_clone").as_deref(),
        read("/proc/sys/user/max_user_namespaces").as_deref(),
        read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref(),
    ) {
        Some(Blocker { key, value, fix }) => {
            format!("{key} = {value} forbids them: `sysctl -w {key}={fix}` as root allows them")
        }
        None => format!("this process may not create one ({error})"),
    };
    let instead = if as_root {
        "or give tcplab CAP_SYS_ADMIN and CAP_NET_ADMIN (a container's --cap-add)"
    } else {
        "or run tcplab as root"
    };
    format!("labs need root or an unprivileged user namespace, and {cause}; {instead}")
}

/// The sysctl that forbids unprivileged user namespaces.
#[derive(Debug, PartialEq, Eq)]
struct Blocker {
    key: &'static str,
    value: String,
    /// A value that allows them.
    fix: &'static str,
}

/// Which of the sysctls that can forbid unprivileged user namespaces does, from their
/// contents (`None` where the kernel has no such file).
fn diagnose(
    unprivileged_userns_clone: Option<&str>,
    max_user_namespaces: Option<&str>,
    apparmor_restrict: Option<&str>,
) -> Option<Blocker> {
    let set = |text: Option<&str>, value: &str| text.is_some_and(|t| t.trim() == value);
    let blocker = |key, value: &str, fix| Blocker {
        key,
        value: value.to_owned(),
        fix,
    };
    if set(unprivileged_userns_clone, "0") {
        Some(blocker("kernel.unprivileged_userns_clone", "0", "1"))
    } else if set(max_user_namespaces, "0") {
        Some(blocker("user.max_user_namespaces", "0", "10000"))
    } else if set(apparmor_restrict, "1") {
        Some(blocker(
            "kernel.apparmor_restrict_unprivileged_userns",
            "1",
            "0",
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_namespace_maps_every_id_to_itself() {
        assert!(is_initial("         0          0 4294967295\n"));
        assert!(!is_initial("         0      65534          1\n"));
        assert!(!is_initial("0 0 1000\n"));
    }

    #[test]
    fn effective_capabilities_are_read_from_status() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_caps(status), Some(0x1ff_ffff_ffff));
        assert_eq!(effective_caps("Name:\tx\n"), None);
    }

    #[test]
    fn each_sysctl_that_forbids_user_namespaces_is_named_with_its_fix() {
        assert_eq!(diagnose(None, Some("96365\n"), None), None);
        assert_eq!(diagnose(Some("1\n"), Some("96365\n"), Some("0\n")), None);
        let named = |b: Option<Blocker>| b.map(|b| (b.key, b.value, b.fix));
        assert_eq!(
            named(diagnose(Some("0\n"), Some("96365\n"), None)),
            Some(("kernel.unprivileged_userns_clone", "0".into(), "1"))
        );
        assert_eq!(
            named(diagnose(None, Some("0\n"), None)),
            Some(("user.max_user_namespaces", "0".into(), "10000"))
        );
        assert_eq!(
            named(diagnose(None, Some("100\n"), Some("1\n"))),
            Some((
                "kernel.apparmor_restrict_unprivileged_userns",
                "1".into(),
                "0"
            ))
        );
    }

    #[test]
    fn the_refusal_is_one_line_naming_the_way_out() {
        let line = refusal_line(&io::Error::from_raw_os_error(libc::EPERM), false);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(line.ends_with("; or run tcplab as root"), "{line}");
        let line = refusal_line(&io::Error::from_raw_os_error(libc::EPERM), true);
        assert!(
            line.ends_with("CAP_SYS_ADMIN and CAP_NET_ADMIN (a container's --cap-add)"),
            "{line}"
        );
    }

    #[test]
    fn ids_are_mapped_to_the_parent_namespace() {
        let initial = "         0          0 4294967295\n";
        let rootless = "         0      65534          1\n";
        assert_eq!(outside(initial, 1000), 1000);
        assert_eq!(outside(rootless, 0), 65534);
        assert_eq!(outside("0 1000 1\n1 100000 65536\n", 5), 100004);
        assert_eq!(mapped_range(initial), (0, i32::MAX as u32));
        assert_eq!(mapped_range(rootless), (0, 0));
        assert_eq!(mapped_range("0 1000 1\n1 100000 65536\n"), (0, 65536));
    }
}
