//! Which processes hold a socket, and a cgroup's id: what sock_diag does not say. A
//! process holds a socket through a descriptor whose `/proc/PID/fd` link reads
//! `socket:[INODE]`, the inode a [`SocketSample`](tcplab_model::sockdiag::SocketSample)
//! carries. Scanning costs a readlink per descriptor of every process (see
//! docs/performance.md), so it runs only when asked; `/proc` is this process's pid
//! namespace's, whatever network namespace the sockets are in.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::ffi::{context, cstring};

/// A process holding a socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`, at most 15 bytes).
    pub comm: String,
}

/// Sockets' owners by inode, from one scan of `/proc`.
#[derive(Clone, Debug, Default)]
pub struct Owners {
    by_inode: HashMap<u64, Vec<Owner>>,
    unreadable: usize,
}

impl Owners {
    /// Scans every process this one may read: all as root; without privilege only the
    /// user's own ([`Owners::unreadable`] counts the others). A process that exits
    /// during the scan is left out.
    pub fn scan() -> io::Result<Owners> {
        let mut owners = Owners::default();
        for pid in pids()? {
            let inodes = match socket_inodes(pid) {
                Ok(inodes) => inodes,
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    owners.unreadable += 1;
                    continue;
                }
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e),
            };
            if inodes.is_empty() {
                continue;
            }
            let comm = match fs::read(format!("/proc/{pid}/comm")) {
                Ok(bytes) => String::from_utf8_lossy(bytes.trim_ascii_end()).into_owned(),
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(context(e, format_args!("reading /proc/{pid}/comm"))),
            };
            for inode in inodes {
                let holders = owners.by_inode.entry(inode).or_default();
                holders.push(Owner {
                    pid,
                    comm: comm.clone(),
                });
            }
        }
        Ok(owners)
    }

    /// The processes holding socket `inode` (several after a fork; none for a socket no
    /// process holds, or one of a process this one may not read).
    pub fn of(&self, inode: u64) -> &[Owner] {
        self.by_inode.get(&inode).map_or(&[], Vec::as_slice)
    }

    /// Processes whose descriptors could not be read (another user's, without root).
    pub fn unreadable(&self) -> usize {
        self.unreadable
    }
}

/// A process that exited between the listing and the read.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

fn pids() -> io::Result<impl Iterator<Item = u32>> {
    let entries = fs::read_dir("/proc").map_err(|e| context(e, "listing /proc"))?;
    Ok(entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok()))
}

/// The inodes of the sockets process `pid` holds (NotFound: no such process;
/// PermissionDenied: another user's, without root).
pub fn socket_inodes(pid: u32) -> io::Result<Vec<u64>> {
    let dir = format!("/proc/{pid}/fd");
    let entries = fs::read_dir(&dir).map_err(|e| context(e, format_args!("reading {dir}")))?;
    let mut inodes = Vec::new();
    let mut link = [0u8; 64];
    for entry in entries {
        let Ok(entry) = entry else { continue };
        let path = cstring(entry.path().as_os_str().as_bytes())?;
        // SAFETY: `path` is NUL-terminated; `link` is writable for its length.
        let len = unsafe { libc::readlink(path.as_ptr(), link.as_mut_ptr().cast(), link.len()) };
        // A descriptor closed since the listing has no link: skip it.
        let Ok(len) = usize::try_from(len) else {
            continue;
        };
        if let Some(inode) = socket_inode(&link[..len]) {
            inodes.push(inode);
        }
    }
    Ok(inodes)
}

/// `socket:[12345]` → 12345.
fn socket_inode(link: &[u8]) -> Option<u64> {
    let digits = link.strip_prefix(b"socket:[")?.strip_suffix(b"]")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Where cgroup v2 is mounted: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a host that
/// mounts both versions (from /proc/self/mountinfo).
pub fn cgroup2_root() -> io::Result<PathBuf> {
    let file = "/proc/self/mountinfo";
    let text = fs::read_to_string(file).map_err(|e| context(e, file))?;
    // `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS … - FSTYPE SOURCE SUPEROPTIONS`
    text.lines()
        .find_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            (fs.split(' ').next() == Some("cgroup2")).then(|| mount.split(' ').nth(4))?
        })
        .map(PathBuf::from)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no cgroup v2 mounted"))
}

/// The id of the cgroup v2 at `path` — absolute, or under the cgroup v2 root
/// (`system.slice/ssh.service`) — as a [`Filter::Cgroup`](tcplab_model::sockfilter::Filter)
/// takes it: the inode number of its directory.
pub fn cgroup_id(path: &Path) -> io::Result<u64> {
    let full: PathBuf = if path.is_absolute() {
        path.to_owned()
    } else {
        cgroup2_root()?.join(path)
    };
    let what = || format!("cgroup {}", full.display());
    let c_path = cstring(full.as_os_str().as_bytes())?;
    // SAFETY: an all-zero statfs is valid; it is written by the call.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and `fs` writable.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut fs) } < 0 {
        return Err(context(io::Error::last_os_error(), what()));
    }
    if fs.f_type as i64 != CGROUP2_SUPER_MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a cgroup v2 directory", what()),
        ));
    }
    let meta = fs::metadata(&full).map_err(|e| context(e, what()))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a directory", what()),
        ));
    }
    Ok(meta.ino())
}

/// The cgroup v2 of process `pid` (`/proc/PID/cgroup`'s `0::PATH` line), relative to
/// the cgroup root.
pub fn cgroup_of(pid: u32) -> io::Result<PathBuf> {
    let file = format!("/proc/{pid}/cgroup");
    let text = fs::read(&file).map_err(|e| context(e, &file))?;
    text.split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"0::"))
        .map(|path| PathBuf::from(OsStr::from_bytes(path.strip_prefix(b"/").unwrap_or(path))))
        .ok_or_else(|| io::Error::other(format!("{file}: no cgroup v2 line")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::MetadataExt;

    fn inode_of(fd: &impl std::os::fd::AsRawFd) -> u64 {
        fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap()
            .ino()
    }

    #[test]
    fn a_socket_of_this_process_is_found_with_its_command() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let pid = std::process::id();
        let inode = inode_of(&client);
        assert!(socket_inodes(pid).unwrap().contains(&inode));
        let owners = Owners::scan().unwrap();
        let comm = fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(
            owners.of(inode),
            &[Owner {
                pid,
                comm: comm.trim_end().to_owned()
            }]
        );
        assert!(owners.of(u64::MAX).is_empty());
        assert_eq!(
            socket_inodes(u32::MAX).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn socket_links_and_nothing_else_are_read_as_inodes() {
        assert_eq!(socket_inode(b"socket:[424242]"), Some(424242));
        assert_eq!(socket_inode(b"pipe:[424242]"), None);
        assert_eq!(socket_inode(b"socket:[42"), None);
        assert_eq!(socket_inode(b"/dev/null"), None);
    }

    #[test]
    fn this_process_s_cgroup_has_an_id_and_a_file_has_none() {
        let Ok(own) = cgroup_of(std::process::id()) else {
            eprintln!("SKIP cgroup ids: no cgroup v2 here");
            return;
        };
        let id = cgroup_id(&own).unwrap();
        assert_eq!(
            id,
            fs::metadata(cgroup2_root().unwrap().join(&own))
                .unwrap()
                .ino()
        );
        let err = cgroup_id(Path::new("/proc/self/status")).unwrap_err();
        assert!(
            err.to_string().contains("not a cgroup v2 directory"),
            "{err}"
        );
        let err = cgroup_id(Path::new("no/such/unit.service")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
