//! Where running labs are written down: one JSON file per lab in [`run_dir`], naming
//! the process that owns it and the namespaces it made. A lab whose process is gone
//! (killed, crashed) is a leftover that [`gc`] removes, with any namespace tcplab marked
//! whose process is gone, registered or not, after ending the processes still inside.
//!
//! As root the registry is /run/tcplab/labs; without root it is in the user's own state
//! directory (`$XDG_RUNTIME_DIR/tcplab/labs`), so users see and touch only their labs.

use std::fs;
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tcplab_netsim::dumbbell::Dumbbell;
use tcplab_netsim::path::PathSpec;
use tcplab_record::topology::TopologyRecord;
use tcplab_sys::netns::{self, Ended, Leftover, NetNs};
use tcplab_sys::userns;

pub use tcplab_sys::netns::pid_alive;

/// The registry's directory: `labs` in tcplab's state directory.
pub fn run_dir() -> io::Result<PathBuf> {
    Ok(userns::state_dir()?.join("labs"))
}

/// One host of a lab as users address it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEntry {
    /// Network namespace name (usable with `ip netns exec`).
    pub ns: String,
    pub addr: String,
    pub addr6: String,
    /// The client's own access link, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
}

/// A registered lab.
/// Two hosts of a lab, as places of [`Lab::host`](crate::Lab::host): where a program's connections start
/// (`client`) and where they go, its server running there (`server`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostPair {
    pub client: usize,
    pub server: usize,
}

impl HostPair {
    /// A dumbbell's client `k` (0-based) and its server; in a topology, its second host
    /// and its first for `k` = 0.
    pub fn client(k: usize) -> HostPair {
        HostPair {
            client: k + 1,
            server: 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabEntry {
    pub name: String,
    /// The process running its emulator.
    pub pid: u32,
    /// The path spec of the shared bottleneck, normalized.
    pub path: String,
    pub server: HostEntry,
    pub clients: Vec<HostEntry>,
    pub created_unix_us: i64,
    /// A lab of any shape (`lab up --topology`): `server` is then its first host and
    /// `clients` the others, in the file's order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyRecord>,
}

impl LabEntry {
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.hosts().map(|h| h.ns.as_str())
    }

    /// The server, then the clients.
    pub fn hosts(&self) -> impl Iterator<Item = &HostEntry> {
        std::iter::once(&self.server).chain(&self.clients)
    }

    /// The bottleneck's spec and each client's access link, parsed back from the
    /// normalized text the lab wrote (which parses to the same spec).
    pub fn specs(&self) -> (PathSpec, Vec<PathSpec>) {
        let parse = |text: &str| text.parse().unwrap_or_default();
        let access = self
            .clients
            .iter()
            .map(|c| c.access.as_deref().map_or_else(PathSpec::default, parse))
            .collect();
        (parse(&self.path), access)
    }

    /// The host users call `host`: `server`, `client` (the first) or `clientK`; in a
    /// topology's lab, its name in the file.
    pub fn host(&self, host: &str) -> Result<&HostEntry, String> {
        if let Some(topology) = &self.topology {
            return topology
                .hosts
                .iter()
                .position(|name| name == host)
                .map(|k| self.hosts().nth(k).expect("a name per host"))
                .ok_or_else(|| {
                    format!(
                        "lab {} has no host '{host}': its hosts are {}",
                        self.name,
                        topology.hosts.join(", ")
                    )
                });
        }
        let client = match host {
            "server" => return Ok(&self.server),
            "client" => Some(1),
            _ => host
                .strip_prefix("client")
                .and_then(|k| k.parse::<usize>().ok()),
        };
        client
            .and_then(|k| self.clients.get(k.checked_sub(1)?))
            .ok_or_else(|| {
                let clients = match self.clients.len() {
                    1 => "client".to_owned(),
                    n => format!("client1 … client{n}"),
                };
                format!(
                    "lab {} has no host '{host}': its hosts are server and {clients}",
                    self.name
                )
            })
    }

    /// Where a command in one of the lab's hosts finds the others: `pair`'s server
    /// host (`TCPLAB_SERVER`…) and its client host's namespace. `None` where either is
    /// not the lab's.
    pub fn host_env(&self, pair: HostPair) -> Option<[(&'static str, &str); 4]> {
        let (client, server) = (
            self.hosts().nth(pair.client)?,
            self.hosts().nth(pair.server)?,
        );
        Some([
            ("TCPLAB_SERVER", &server.addr),
            ("TCPLAB_SERVER6", &server.addr6),
            ("TCPLAB_SERVER_NS", &server.ns),
            ("TCPLAB_CLIENT_NS", &client.ns),
        ])
    }

    /// How the lab sized its bottleneck queues given in BDP, a line each.
    pub fn bdp_lines(&self) -> Vec<String> {
        let (path, access) = self.specs();
        Dumbbell::new(&path, &access).bdp_lines()
    }

    /// The least round trip the lab gives each client (see [`Dumbbell::floor_line`]).
    pub fn floor_line(&self) -> String {
        let (path, access) = self.specs();
        Dumbbell::new(&path, &access).floor_line()
    }
}

fn file(name: &str) -> io::Result<PathBuf> {
    Ok(run_dir()?.join(format!("{name}.json")))
}

/// The control socket of a lab run by `tcplab lab up`.
pub fn socket_path(name: &str) -> io::Result<PathBuf> {
    Ok(run_dir()?.join(format!("{name}.sock")))
}

/// Lab names become namespace and file names: keep them short and plain.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 24
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid lab name '{name}': use 1 to 24 letters, digits, '-' or '_', not starting with '-'"
        ))
    }
}

/// Records a lab; fails if a live lab already has the name, and removes a leftover
/// that has it.
pub fn register(entry: &LabEntry) -> io::Result<()> {
    let dir = run_dir()?;
    fs::create_dir_all(&dir)?;
    if let Some(existing) = get(&entry.name)? {
        if pid_alive(existing.pid) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("lab '{}' is already up (pid {})", entry.name, existing.pid),
            ));
        }
        remove(&existing)?;
    }
    let tmp = dir.join(format!(".{}.json.tmp", entry.name));
    fs::write(
        &tmp,
        serde_json::to_vec_pretty(entry).map_err(io::Error::other)?,
    )?;
    fs::rename(tmp, file(&entry.name)?)
}

pub fn unregister(name: &str) {
    for path in [file(name), socket_path(name)].into_iter().flatten() {
        let _ = fs::remove_file(path);
    }
}

pub fn get(name: &str) -> io::Result<Option<LabEntry>> {
    let path = file(name)?;
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every registered lab, live or not, by name.
pub fn list() -> io::Result<Vec<LabEntry>> {
    let dir = match fs::read_dir(run_dir()?) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut labs = Vec::new();
    for item in dir {
        let name = item?.file_name().to_string_lossy().into_owned();
        if let Some(lab) = name.strip_suffix(".json").filter(|n| !n.starts_with('.')) {
            if let Some(entry) = get(lab)? {
                labs.push(entry);
            }
        }
    }
    labs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(labs)
}

/// Ends the processes left in a dead lab's namespaces, deletes the namespaces (their
/// devices go with them) and their marks, then its registry files; returns the
/// processes ended. A namespace a living process has claimed since (a new lab of the
/// name, between a `gc`'s look and its removal) is left to it.
pub fn remove(entry: &LabEntry) -> io::Result<Vec<Ended>> {
    let mut ended = Vec::new();
    for ns in entry.namespaces() {
        if !netns::in_use(ns)? {
            ended.extend(netns::end_processes_in(ns)?);
            NetNs::by_name(ns)?.delete()?;
        }
    }
    unregister(&entry.name);
    Ok(ended)
}

/// Removes lab `name` if it is a leftover (its process died): returns it and the
/// processes left in it that were ended.
pub fn remove_leftover(name: &str) -> io::Result<Option<(LabEntry, Vec<Ended>)>> {
    // One at a time, and once: a shell's command and server each have an init that
    // removes the lab when the shell dies, each in a pid namespace of its own, from
    // which it cannot signal the other. The one that finds the lock taken leaves the
    // lab to its holder and exits (having ended its own namespace), which is what the
    // holder waits for. The lock goes with its descriptor.
    let Some(registry) = open_registry()? else {
        // No registry yet: no lab to remove.
        return Ok(None);
    };
    match registry.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Ok(None),
        Err(fs::TryLockError::Error(e)) => return Err(e),
    }
    match get(name)? {
        Some(entry) if !pid_alive(entry.pid) => {
            let ended = remove(&entry)?;
            Ok(Some((entry, ended)))
        }
        _ => Ok(None),
    }
}

/// The registry's directory, opened to lock it: who removes labs takes its lock.
/// `None` when there is no registry yet.
fn open_registry() -> io::Result<Option<fs::File>> {
    match fs::File::open(run_dir()?) {
        Ok(registry) => Ok(Some(registry)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What [`gc`] removed.
#[derive(Debug, Default)]
pub struct Removed {
    /// Registered labs whose process died.
    pub labs: Vec<LabEntry>,
    /// Namespaces tcplab marked whose process died and no registered lab named.
    pub namespaces: Vec<Leftover>,
    /// Processes that were left running in those labs and namespaces, each with the
    /// name of the lab or namespace it was in.
    pub processes: Vec<(String, Ended)>,
    /// Tracefs instances of tests whose process died (`--trace-events`).
    pub trace_instances: Vec<String>,
}

/// Removes every lab whose process is gone, then every namespace marked by a process
/// that is gone, ending the processes left inside them first.
pub fn gc() -> io::Result<Removed> {
    // One collector at a time (two sweeps may start at once): each would otherwise
    // remove what the other is removing, and fail on what is already gone.
    let registry = open_registry()?;
    if let Some(registry) = &registry {
        registry.lock()?;
    }
    let mut removed = Removed::default();
    for entry in list()? {
        if !pid_alive(entry.pid) {
            let ended = remove(&entry)?;
            let lab = format!("lab {}", entry.name);
            removed
                .processes
                .extend(ended.into_iter().map(|e| (lab.clone(), e)));
            removed.labs.push(entry);
        }
    }
    removed.namespaces = netns::leftovers()?;
    for ns in &removed.namespaces {
        let ended = ns.remove()?;
        let name = format!("netns {}", ns.name);
        removed
            .processes
            .extend(ended.into_iter().map(|e| (name.clone(), e)));
    }
    for socket in orphan_sockets()? {
        match fs::remove_file(socket) {
            // Its daemon, unregistered a moment ago, removed it meanwhile.
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    removed.trace_instances = tcplab_sys::trace::remove_orphan_instances();
    Ok(removed)
}

/// Control sockets no registry entry names (one lost or removed by hand): a daemon
/// registers its lab before it binds the socket and unregisters it before removing it,
/// so nothing answers on them.
fn orphan_sockets() -> io::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(run_dir()?) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut orphans = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "sock")
            && !path.with_extension("json").exists()
        {
            orphans.push(path);
        }
    }
    Ok(orphans)
}

/// Namespaces left by a process that died that no registered lab names: what only
/// their marks remember.
pub fn unregistered_leftovers() -> io::Result<Vec<Leftover>> {
    let labs = list()?;
    let mut left = netns::leftovers()?;
    left.retain(|ns| {
        !labs
            .iter()
            .any(|lab| lab.namespaces().any(|n| n == ns.name))
    });
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_names_are_checked() {
        assert!(check_name("wan-20ms_a").is_ok());
        for bad in ["", "-x", "a/b", "a b", "..", &"x".repeat(25)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hosts_are_named_server_client_and_client_k() {
        let host = |ns: &str| HostEntry {
            ns: ns.into(),
            addr: String::new(),
            addr6: String::new(),
            access: None,
        };
        let mut lab = LabEntry {
            name: "w".into(),
            pid: 1,
            path: String::new(),
            server: host("w-server"),
            clients: vec![host("w-client")],
            created_unix_us: 0,
            topology: None,
        };
        assert_eq!(lab.host("server").unwrap().ns, "w-server");
        assert_eq!(lab.host("client").unwrap().ns, "w-client");
        assert_eq!(lab.host("client1").unwrap().ns, "w-client");
        let err = lab.host("client2").unwrap_err();
        assert_eq!(
            err,
            "lab w has no host 'client2': its hosts are server and client"
        );
        lab.clients = vec![host("w-client1"), host("w-client2")];
        assert_eq!(lab.host("client2").unwrap().ns, "w-client2");
        for bad in ["client0", "client3", "clientx", "router"] {
            let err = lab.host(bad).unwrap_err();
            assert!(err.ends_with("server and client1 … client2"), "{err}");
        }
        // A command run from the second client host is told that host's namespace.
        let env = |pair| {
            lab.host_env(pair)
                .map(|env| env.map(|(k, v)| format!("{k}={v}")))
        };
        assert_eq!(
            env(HostPair::client(1)).unwrap()[2..],
            ["TCPLAB_SERVER_NS=w-server", "TCPLAB_CLIENT_NS=w-client2"]
        );
        assert_eq!(
            env(HostPair::client(0)).unwrap()[3],
            "TCPLAB_CLIENT_NS=w-client1"
        );
        // Any two hosts: the server host is the one the pair names.
        let between = env(HostPair {
            client: 2,
            server: 1,
        })
        .unwrap();
        assert_eq!(
            between[2..],
            ["TCPLAB_SERVER_NS=w-client1", "TCPLAB_CLIENT_NS=w-client2"]
        );
        assert_eq!(env(HostPair::client(2)), None);
    }
}
