//! A round-trip probe's datagram (`--probe`) as it crosses a lab: its magic, its one
//! size for request and answer, and its four times. The links tell probes apart by it;
//! what a run makes of the times is `tcplab_model::probe`'s.

const MAGIC: [u8; 4] = *b"TLP1";

/// Request and answer have one size, so an echo never amplifies what a sender sends.
pub const PROBE_LEN: usize = 44;

/// Whether a datagram's payload starts as a probe's does.
pub fn has_magic(payload: &[u8]) -> bool {
    payload.starts_with(&MAGIC)
}

/// One probe datagram: the request has zero server times, the answer both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// The test's secret: a server answers only its own test's probes.
    pub token: u64,
    pub seq: u64,
    /// Monotonic µs: t1 on the client's clock, t2 and t3 on the server's.
    pub client_send_us: i64,
    pub server_recv_us: i64,
    pub server_send_us: i64,
}

impl Probe {
    pub fn write(&self, buf: &mut [u8; PROBE_LEN]) {
        buf[..4].copy_from_slice(&MAGIC);
        buf[4..12].copy_from_slice(&self.token.to_be_bytes());
        buf[12..20].copy_from_slice(&self.seq.to_be_bytes());
        buf[20..28].copy_from_slice(&self.client_send_us.to_be_bytes());
        buf[28..36].copy_from_slice(&self.server_recv_us.to_be_bytes());
        buf[36..44].copy_from_slice(&self.server_send_us.to_be_bytes());
    }

    /// `None` for anything but a probe of this size and magic.
    pub fn read(buf: &[u8]) -> Option<Probe> {
        if buf.len() != PROBE_LEN || !has_magic(buf) {
            return None;
        }
        let word = |at: usize| u64::from_be_bytes(buf[at..at + 8].try_into().unwrap());
        Some(Probe {
            token: word(4),
            seq: word(12),
            client_send_us: word(20) as i64,
            server_recv_us: word(28) as i64,
            server_send_us: word(36) as i64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_reads_back_what_was_written_and_nothing_else_reads() {
        let p = Probe {
            token: 7,
            seq: u64::MAX,
            client_send_us: -5,
            server_recv_us: 1 << 40,
            server_send_us: i64::MAX,
        };
        let mut buf = [0u8; PROBE_LEN];
        p.write(&mut buf);
        assert_eq!(Probe::read(&buf), Some(p));
        assert_eq!(Probe::read(&buf[..PROBE_LEN - 1]), None);
        buf[0] = b'X';
        assert_eq!(Probe::read(&buf), None);
    }
}
