//! Where running labs are written down: one JSON file per lab under [`RUN_DIR`],
//! naming the process that owns it and the namespaces it made. A lab whose process
//! is gone (killed, crashed) is a leftover that [`gc`] removes.

use std::fs;
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tcplab_model::dumbbell::Dumbbell;
use tcplab_model::path::PathSpec;
use tcplab_sys::netns::NetNs;

pub const RUN_DIR: &str = "/run/tcplab/labs";

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
}

impl LabEntry {
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.server.ns.as_str()).chain(self.clients.iter().map(|c| c.ns.as_str()))
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

    /// How the lab sized its bottleneck queues given in BDP, a line each.
    pub fn bdp_lines(&self) -> Vec<String> {
        let (path, access) = self.specs();
        Dumbbell::new(&path, &access).bdp_lines()
    }
}

fn file(name: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{name}.json"))
}

/// The control socket of a lab run by `tcplab lab up`.
pub fn socket_path(name: &str) -> PathBuf {
    PathBuf::from(RUN_DIR).join(format!("{name}.sock"))
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

/// Records a lab; fails if a live lab already has the name.
pub fn register(entry: &LabEntry) -> io::Result<()> {
    fs::create_dir_all(RUN_DIR)?;
    if let Some(existing) = get(&entry.name)? {
        if pid_alive(existing.pid) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("lab '{}' is already up (pid {})", entry.name, existing.pid),
            ));
        }
    }
    let tmp = PathBuf::from(RUN_DIR).join(format!(".{}.json.tmp", entry.name));
    fs::write(
        &tmp,
        serde_json::to_vec_pretty(entry).map_err(io::Error::other)?,
    )?;
    fs::rename(tmp, file(&entry.name))
}

pub fn unregister(name: &str) {
    let _ = fs::remove_file(file(name));
    let _ = fs::remove_file(socket_path(name));
}

pub fn get(name: &str) -> io::Result<Option<LabEntry>> {
    match fs::read(file(name)) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", file(name).display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every registered lab, live or not, by name.
pub fn list() -> io::Result<Vec<LabEntry>> {
    let dir = match fs::read_dir(RUN_DIR) {
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

/// Whether the process runs. A zombie does not: a daemon killed with SIGKILL stays one
/// until its parent (often a slow init) reaps it, and its lab is already a leftover.
pub fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name, which may hold spaces.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Deletes a lab's namespaces (its devices go with them) and its registry files.
pub fn remove(entry: &LabEntry) -> io::Result<()> {
    for ns in entry.namespaces() {
        if let Ok(ns) = NetNs::open(ns) {
            ns.delete()?;
        }
    }
    unregister(&entry.name);
    Ok(())
}

/// Removes every lab whose process is gone; returns their names.
pub fn gc() -> io::Result<Vec<String>> {
    let mut removed = Vec::new();
    for entry in list()? {
        if !pid_alive(entry.pid) {
            remove(&entry)?;
            removed.push(entry.name);
        }
    }
    Ok(removed)
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
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(pid_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
