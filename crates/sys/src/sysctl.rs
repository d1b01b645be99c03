//! Sysctls through /proc/sys, with the dotted names `sysctl(8)` uses.
//!
//! /proc/sys/net shows the network namespace of the thread that opens the file, so
//! a thread that entered a lab host's namespace reads and writes that host's values.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::path::PathBuf;

use tcplab_record::HostMeta;

/// The sysctls that explain TCP numbers, recorded with every run.
const HOST_SYSCTLS: &[&str] = &[
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_autocorking",
    "net.core.default_qdisc",
];

/// The file behind a dotted key. Keys with an empty component, `..` or `/` are
/// refused, so a key can never name a file outside /proc/sys. (Interface names that
/// contain a dot, such as `eth0.100`, cannot be spelled this way.)
fn path(key: &str) -> io::Result<PathBuf> {
    let valid = !key.is_empty()
        && !key.contains(['/', '\0'])
        && key.split('.').all(|part| !part.is_empty());
    if !valid {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid sysctl key '{key}'"),
        ));
    }
    Ok(PathBuf::from("/proc/sys").join(key.replace('.', "/")))
}

/// The value of `key` (e.g. `net.core.wmem_max`), surrounding whitespace trimmed.
/// Multi-value sysctls keep the kernel's tabs (`"4096\t131072\t6291456"`).
pub fn read(key: &str) -> io::Result<String> {
    let text = std::fs::read_to_string(path(key)?)?;
    Ok(text.trim().to_owned())
}

/// Sets `key` to `value`, as `sysctl -w key=value` does.
pub fn write(key: &str, value: &str) -> io::Result<()> {
    std::fs::write(path(key)?, value)
}

/// Hostname, kernel release and the sysctls that matter to TCP, as far as they can
/// be read; multi-value sysctls are joined with single spaces.
pub fn host_meta() -> HostMeta {
    let (hostname, kernel) = uname().unwrap_or_default();
    let sysctls: BTreeMap<String, String> = HOST_SYSCTLS
        .iter()
        .filter_map(|&key| {
            let value = read(key).ok()?;
            Some((
                key.to_owned(),
                value.split_whitespace().collect::<Vec<_>>().join(" "),
            ))
        })
        .collect();
    HostMeta {
        hostname,
        kernel,
        sysctls,
        boot_id: boot_id(),
        rate_cap_bps: None,
    }
}

/// This kernel's boot id (`kernel.random.boot_id`): two ends with the same one read one
/// CLOCK_MONOTONIC, unless a time namespace shifts one; "" where it cannot be read.
pub fn boot_id() -> String {
    read("kernel.random.boot_id").unwrap_or_default()
}

/// (nodename, release) from uname(2).
fn uname() -> io::Result<(String, String)> {
    // SAFETY: utsname is plain C data; all-zero is a valid value to overwrite.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uts is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((c_field(&uts.nodename), c_field(&uts.release)))
}

fn c_field(field: &[libc::c_char]) -> String {
    // c_char is i8 or u8 depending on the target; both are one byte.
    let bytes: Vec<u8> = field.iter().map(|&c| c as u8).collect();
    CStr::from_bytes_until_nul(&bytes)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_known_key() {
        let value = read("net.ipv4.tcp_congestion_control").expect("readable on Linux");
        assert!(!value.is_empty());
        assert_eq!(value, value.trim());
        let wmem: u64 = read("net.core.wmem_max").unwrap().parse().unwrap();
        assert!(wmem > 0);
    }

    #[test]
    fn maps_dots_to_slashes() {
        assert_eq!(
            path("net.core.wmem_max").unwrap(),
            PathBuf::from("/proc/sys/net/core/wmem_max")
        );
    }

    #[test]
    fn refuses_keys_that_escape_proc_sys() {
        for key in [
            "",
            "net..core",
            "net/core/wmem_max",
            "..",
            ".net",
            "net.",
            "a.\0",
        ] {
            let err = read(key).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{key:?}");
        }
        assert_eq!(
            write("../../etc/passwd", "x").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn missing_key_is_not_found() {
        assert_eq!(
            read("net.core.no_such_key").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn writes_back_a_value() {
        // Writing the current value changes nothing, also when tests run in parallel.
        let key = "net.ipv4.tcp_no_metrics_save";
        let before = read(key).unwrap();
        match write(key, &before) {
            Ok(()) => assert_eq!(read(key).unwrap(), before),
            // Not root, or /proc/sys mounted read-only: nothing to check.
            Err(e) => assert!(matches!(
                e.kind(),
                io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
            )),
        }
    }

    #[test]
    fn host_meta_names_this_host() {
        let meta = host_meta();
        assert!(!meta.hostname.is_empty());
        assert_eq!(meta.kernel, read("kernel.osrelease").unwrap());
        assert!(meta.sysctls.contains_key("net.core.wmem_max"));
        let tcp_rmem = &meta.sysctls["net.ipv4.tcp_rmem"];
        assert_eq!(tcp_rmem.split(' ').count(), 3, "{tcp_rmem:?}");
    }
}
