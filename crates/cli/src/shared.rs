//! What several commands share, below them all: the databases opened, the flag Ctrl-C
//! sets, and the lines that describe a lab as it comes up.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Result};
use tcplab_lab::registry::LabEntry;
use tcplab_lab::{pipeline, Lab};
use tcplab_record::topology::TopologyRecord;
use tcplab_store::Store;

/// Opens a database the command only reads, which must exist, without writing to it:
/// a file this user may not write reads all the same.
pub(crate) fn open_existing_store(path: &Path) -> Result<Store> {
    if !path.exists() {
        bail!("no database at {}", path.display());
    }
    Ok(Store::open_to_read(path)?)
}

/// Opens (or creates) a database to write, refusing one that cannot be written. The
/// store's errors name the file.
pub(crate) fn open_store(path: &Path) -> Result<Store> {
    Ok(Store::open(path)?)
}

/// The flag Ctrl-C (or SIGTERM) sets: tests end early, and what was measured is still
/// reported, stored and cleaned up after.
pub fn interrupt_flag() -> Arc<AtomicBool> {
    static STOP: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    extern "C" fn on_signal(_: libc::c_int) {
        if let Some(stop) = STOP.get() {
            stop.store(true, Ordering::Relaxed);
        }
    }
    Arc::clone(STOP.get_or_init(|| {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
        unsafe {
            libc::signal(libc::SIGINT, handler as libc::sighandler_t);
            libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
        }
        Arc::new(AtomicBool::new(false))
    }))
}

/// A topology's lab as `lab up` and `shell` say it: its file and seed (what the links
/// draw from), a line per link, a line per host.
pub(crate) fn topology_lines(entry: &LabEntry, topology: &TopologyRecord) -> Vec<String> {
    let mut lines = vec![format!(
        "lab {} up (pid {}): topology {}, seed {}",
        entry.name, entry.pid, topology.file, topology.seed
    )];
    for link in &topology.links {
        let [a, b] = &link.between;
        lines.push(format!("  link {} {a}–{b} \"{}\"", link.name, link.path));
    }
    for (name, host) in topology.hosts.iter().zip(entry.hosts()) {
        lines.push(format!(
            "  host {name:<8} {:<12} {} {}",
            host.ns, host.addr, host.addr6
        ));
    }
    lines
}

/// The lab's opening lines: its path (with the seed its links draw from), how a queue
/// in BDP was sized, and each client's way to the server; a topology's, its links and
/// hosts.
pub(crate) fn lab_lines(lab: &Lab) -> Vec<String> {
    if let Some(topology) = &lab.entry.topology {
        let mut lines = topology_lines(&lab.entry, topology);
        // Where a command in the lab's client finds its server: the first two hosts.
        lines.push(format!(
            "  client {} ({}) → server {} ({})",
            lab.clients[0].addr,
            lab.clients[0].ns.name(),
            lab.server.addr,
            lab.server.ns.name()
        ));
        lines.extend(priority_note().map(|note| format!("  {note}")));
        return lines;
    }
    let mut lines = vec![format!("lab {}: path \"{}\"", lab.name(), lab.entry.path)];
    lines.extend(lab.entry.bdp_lines().iter().map(|l| format!("  {l}")));
    for (host, entry) in lab.clients.iter().zip(&lab.entry.clients) {
        let access = entry
            .access
            .as_deref()
            .map(|a| format!(" via \"{a}\""))
            .unwrap_or_default();
        lines.push(format!(
            "  client {} ({}){access} → server {} ({})",
            host.addr,
            host.ns.name(),
            lab.server.addr,
            lab.server.ns.name()
        ));
    }
    lines.push(format!("  {}", lab.entry.floor_line()));
    if let Some((file, at)) = lab.capture() {
        lines.push(format!(
            "  capturing both directions {}, with each packet's fate, into {file}",
            at.place()
        ));
    }
    lines.extend(priority_note().map(|note| format!("  {note}")));
    lines
}

/// The one line that says the emulator cannot have real-time priority here, if so.
pub fn priority_note() -> Option<String> {
    (!pipeline::realtime_allowed()).then(|| {
        "note: the emulator runs at normal priority (real-time priority needs root or CAP_SYS_NICE), so load on this machine shows as lateness".to_owned()
    })
}
