//! The kernel's protocol counters in /proc/net/snmp and /proc/net/netstat, as the
//! namespace of the calling thread sees them.

use std::io;

/// Counter `name` of section `section` ("Tcp", "Udp", …): the file holds each section
/// as two lines, the names and then the values. `None` when either is missing.
pub fn counter(section: &str, name: &str) -> io::Result<Option<u64>> {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
    Ok(parse(&snmp, section, name))
}

/// Counter `name` of section `section` ("TcpExt", "IpExt") of /proc/net/netstat, laid
/// out as /proc/net/snmp.
pub fn netstat_counter(section: &str, name: &str) -> io::Result<Option<u64>> {
    let netstat = std::fs::read_to_string("/proc/thread-self/net/netstat")?;
    Ok(parse(&netstat, section, name))
}

fn parse(snmp: &str, section: &str, name: &str) -> Option<u64> {
    let prefix = format!("{section}:");
    let mut lines = snmp.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = (lines.next()?, lines.next()?);
    let at = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_found_by_section_and_name() {
        let snmp =
            "Tcp: RtoAlgorithm InCsumErrors\nTcp: 1 7\nUdp: InDatagrams RcvbufErrors\nUdp: 12 3\n";
        assert_eq!(parse(snmp, "Udp", "RcvbufErrors"), Some(3));
        assert_eq!(parse(snmp, "Tcp", "InCsumErrors"), Some(7));
        assert_eq!(parse(snmp, "Udp", "NoSuch"), None);
        assert_eq!(parse(snmp, "Icmp", "InMsgs"), None);
        // This machine's file has the counters the tests read.
        assert!(counter("Udp", "RcvbufErrors").unwrap().is_some());
        assert!(netstat_counter("TcpExt", "TCPSpuriousRtxHostQueues")
            .unwrap()
            .is_some());
    }
}
