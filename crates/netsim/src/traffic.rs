//! Whose a packet is. Through a lab, beside the test's own flows, tcplab carries its own
//! traffic: the control connection (the handshake, the live intervals and, after the
//! test, each end's samples) and the round-trip probes. The emulator counts each apart,
//! so that what a run reports of its path — drops, queue, bursts, delays — is the
//! test's alone, and tcplab's own packets are named beside it. Pure: the emulator hands
//! over the headers it parsed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::packet::{PacketInfo, Transport, UDP_HEADER};
use crate::probe_datagram::{has_magic, PROBE_LEN};
use tcplab_record::traffic::Traffic;

/// When the test across a lab starts, monotonic ns: the first test (or the shell's
/// command, or `lab up`) publishes it once, and the links' schedules (`at`) count from
/// it. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct TestStart(Arc<AtomicU64>);

impl TestStart {
    /// Publishes the start unless one was published first.
    pub fn publish(&self, monotonic_ns: u64) {
        // 0 means not yet: a start at 0 counts from 1 ns.
        let _first =
            self.0
                .compare_exchange(0, monotonic_ns.max(1), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The start, once published.
    pub fn get(&self) -> Option<u64> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t),
        }
    }
}

/// Tells tcplab's own packets from the test's by their headers: the control
/// connection by its listening port, probes by their size and magic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Classifier {
    /// The TCP port of tcplab's control listener, whichever end it is on; `None` where
    /// no tcplab control connection crosses the lab (a user's programs alone).
    pub control_port: Option<u16>,
}

impl Classifier {
    /// Whose is the IP packet `ip` (at least its headers and, for UDP, its payload's
    /// first bytes), whose headers `info` was parsed from.
    pub fn classify(&self, info: &PacketInfo, ip: &[u8]) -> Traffic {
        match info.transport {
            Transport::Tcp {
                src_port, dst_port, ..
            } if self
                .control_port
                .is_some_and(|p| p == src_port || p == dst_port) =>
            {
                Traffic::Control
            }
            Transport::Udp { len, .. } => {
                let payload = ip.get(info.ip_header_len + UDP_HEADER..).unwrap_or(&[]);
                if usize::from(len) == UDP_HEADER + PROBE_LEN && has_magic(payload) {
                    Traffic::Probe
                } else {
                    Traffic::Test
                }
            }
            _ => Traffic::Test,
        }
    }

    /// [`Classifier::classify`] of an IP packet not parsed yet; one that does not parse
    /// is the test's.
    pub fn classify_ip(&self, ip: &[u8]) -> Traffic {
        PacketInfo::parse_head(ip).map_or(Traffic::Test, |info| self.classify(&info, ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe_datagram::{Probe, PROBE_LEN};

    /// An IPv4 packet from 10.77.1.1:`sport` to 10.77.0.1:`dport` of protocol `proto`
    /// (6 TCP, 17 UDP) carrying `payload`.
    fn ipv4(proto: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let l4_len = if proto == 6 { 20 } else { 8 };
        let total = 20 + l4_len + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = proto;
        p[12..16].copy_from_slice(&[10, 77, 1, 1]);
        p[16..20].copy_from_slice(&[10, 77, 0, 1]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        if proto == 6 {
            p[32] = 5 << 4;
        } else {
            p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        }
        p[20 + l4_len..].copy_from_slice(payload);
        p
    }

    #[test]
    fn the_control_connection_probes_and_the_test_are_told_apart() {
        let lab = Classifier {
            control_port: Some(5201),
        };
        let mut probe = [0u8; PROBE_LEN];
        Probe {
            token: 7,
            seq: 1,
            ..Probe::default()
        }
        .write(&mut probe);
        let cases = [
            // Both ways of the control connection.
            (ipv4(6, 40000, 5201, b"{}"), Traffic::Control),
            (ipv4(6, 5201, 40000, &[0; 1400]), Traffic::Control),
            // The test's data connection, to the test's own listener.
            (ipv4(6, 40002, 39001, &[0; 1448]), Traffic::Test),
            (ipv4(6, 39001, 40002, &[]), Traffic::Test),
            // A probe and its echo, whatever the ports.
            (ipv4(17, 50000, 39002, &probe), Traffic::Probe),
            (ipv4(17, 39002, 50000, &probe), Traffic::Probe),
            // A UDP test's datagram, and one of a probe's size without its magic.
            (ipv4(17, 50001, 39003, &[0x54; 1200]), Traffic::Test),
            (ipv4(17, 50001, 39003, &[0; PROBE_LEN]), Traffic::Test),
            // A probe cut short is not one.
            (ipv4(17, 50000, 39002, &probe[..20]), Traffic::Test),
            // Not IP at all.
            (vec![0x00; 40], Traffic::Test),
        ];
        for (i, (packet, expected)) in cases.iter().enumerate() {
            assert_eq!(lab.classify_ip(packet), *expected, "case {i}");
        }
        // A lab that knows no control port counts port 5201 as anyone's (iperf3's data
        // connections use it too).
        let user = Classifier::default();
        assert_eq!(user.classify_ip(&cases[0].0), Traffic::Test);
        assert_eq!(user.classify_ip(&cases[4].0), Traffic::Probe);
        let names: Vec<&str> = Traffic::ALL.map(Traffic::name).to_vec();
        assert_eq!(names, ["test", "control", "probe"]);
        for t in Traffic::ALL {
            assert_eq!(Traffic::ALL[t.index()], t);
        }
    }
}
