//! The pure parts of UDP flows: the datagram header, the sender's schedule, and the
//! receiver's accounting (loss, duplicates, reordering, RFC 3550 jitter, one-way
//! delay). The engine feeds them clock readings; tests feed them virtual time.

use tcplab_analysis::stats::quantiles;
use tcplab_record::{Quantiles, UdpHeaderFormat, UdpInterval, UdpParams};

/// Every data datagram starts with this header (big-endian): magic, flow id, sequence
/// number, and the sender's monotonic clock at sending, ns.
pub const HEADER_LEN: usize = 24;
const MAGIC: [u8; 4] = *b"TLU1";
/// The smallest datagram: the header.
pub const MIN_DATAGRAM: u32 = HEADER_LEN as u32;
/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: u32 = 65_507;

/// The header of one data datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub flow: u32,
    pub seq: u64,
    /// Sender's monotonic clock, ns.
    pub sent_ns: i64,
}

impl Header {
    pub fn write(&self, buf: &mut [u8]) {
        buf[..4].copy_from_slice(&MAGIC);
        buf[4..8].copy_from_slice(&self.flow.to_be_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    /// `None` for anything that is not a data datagram (too short, another magic).
    pub fn read(buf: &[u8]) -> Option<Header> {
        if buf.len() < HEADER_LEN || buf[..4] != MAGIC {
            return None;
        }
        Some(Header {
            flow: u32::from_be_bytes(buf[4..8].try_into().ok()?),
            seq: u64::from_be_bytes(buf[8..16].try_into().ok()?),
            sent_ns: i64::from_be_bytes(buf[16..24].try_into().ok()?),
        })
    }

    /// Writes this header in `format`. iperf3's stamps the sender's CLOCK_MONOTONIC as
    /// seconds and µs (iperf3 ≥ 3.8 on Linux, `iperf_time_now`), and numbers datagrams
    /// from 1 (its receiver counts a 0 as out of order).
    pub fn write_as(&self, format: UdpHeaderFormat, buf: &mut [u8]) {
        match format {
            UdpHeaderFormat::Tcplab => self.write(buf),
            UdpHeaderFormat::Iperf3 => {
                let (sec, usec) = (
                    self.sent_ns / 1_000_000_000,
                    self.sent_ns % 1_000_000_000 / 1000,
                );
                buf[..4].copy_from_slice(&(sec as u32).to_be_bytes());
                buf[4..8].copy_from_slice(&(usec as u32).to_be_bytes());
                buf[8..12].copy_from_slice(&((self.seq + 1) as u32).to_be_bytes());
            }
        }
    }

    /// Reads a header in `format`; iperf3's names no flow, so it is taken as `flow`'s.
    pub fn read_as(format: UdpHeaderFormat, buf: &[u8], flow: u32) -> Option<Header> {
        match format {
            UdpHeaderFormat::Tcplab => Header::read(buf).filter(|h| h.flow == flow),
            UdpHeaderFormat::Iperf3 => {
                let word = |i: usize| {
                    buf.get(i..i + 4)
                        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
                };
                let (sec, usec, number) = (word(0)?, word(4)?, word(8)?);
                Some(Header {
                    flow,
                    seq: u64::from(number.checked_sub(1)?),
                    sent_ns: i64::from(sec) * 1_000_000_000 + i64::from(usec) * 1000,
                })
            }
        }
    }
}

/// When a UDP sender may send: `burst` datagrams every `burst × size × 8 / rate`,
/// counted from the start so that no error accumulates. A sender that wakes late sends
/// at most `max_batch` datagrams at a time and catches up over several wake-ups, never
/// in one burst; one more than [`CATCH_UP_LIMIT_NS`] behind skips the schedule ahead
/// (counted as `late`) rather than flood the path afterwards.
#[derive(Clone, Debug)]
pub struct Schedule {
    start_ns: i64,
    /// ns per burst; 0 = unlimited.
    period_ns: f64,
    burst: u64,
    max_batch: u64,
    /// Bursts skipped by falling too far behind.
    skipped: u64,
    pub late: u64,
}

/// How far behind its schedule a sender may fall and still catch up, ns.
pub const CATCH_UP_LIMIT_NS: f64 = 100e6;

impl Schedule {
    /// `max_batch`: the most datagrams the sender sends back to back (at least the
    /// burst; more only where its timer cannot wake often enough for the rate).
    pub fn new(params: &UdpParams, start_ns: i64, max_batch: u64) -> Schedule {
        let burst = u64::from(params.burst.max(1));
        let period_ns = if params.rate_bps == 0 {
            0.0
        } else {
            burst as f64 * f64::from(params.datagram_size) * 8.0 * 1e9 / params.rate_bps as f64
        };
        Schedule {
            start_ns,
            period_ns,
            burst,
            max_batch: max_batch.max(burst),
            skipped: 0,
            late: 0,
        }
    }

    /// Datagrams due at `now_ns` beyond the `sent` so far (not capped by the batch).
    fn behind(&self, now_ns: i64, sent: u64) -> u64 {
        (self.bursts_due(now_ns).saturating_sub(self.skipped) * self.burst).saturating_sub(sent)
    }

    /// Bursts due by `now_ns`, the one at the start included.
    fn bursts_due(&self, now_ns: i64) -> u64 {
        ((now_ns - self.start_ns).max(0) as f64 / self.period_ns) as u64 + 1
    }

    /// Datagrams due before `end_ns` that were never sent, having sent `sent`: skipped
    /// while late or still owed. 0 when unlimited.
    pub fn unsent(&self, end_ns: i64, sent: u64) -> u64 {
        if self.period_ns == 0.0 {
            return 0;
        }
        (self.bursts_due(end_ns - 1) * self.burst).saturating_sub(sent)
    }

    /// How many datagrams to send now (at most one batch), having sent `sent`.
    pub fn due(&mut self, now_ns: i64, sent: u64) -> u64 {
        if self.period_ns == 0.0 {
            return self.max_batch;
        }
        let behind = self.behind(now_ns, sent);
        let limit = ((CATCH_UP_LIMIT_NS / self.period_ns) as u64 * self.burst).max(self.max_batch);
        if behind > limit {
            // Too far behind: drop the backlog beyond one batch and go on at the rate.
            self.skipped += (behind - self.max_batch) / self.burst;
            self.late += 1;
        }
        self.behind(now_ns, sent).min(self.max_batch)
    }

    /// How long a sender catching up waits between two batches: half a burst period,
    /// so that it catches up at twice its rate and its batches never merge into one
    /// longer burst on the wire. 0 when unlimited.
    pub fn catch_up_gap_ns(&self) -> i64 {
        (self.period_ns / 2.0) as i64
    }

    /// When the next datagram after `sent` falls due, ns; `None` when unlimited. A time
    /// already past means the sender is catching up.
    pub fn next_ns(&self, sent: u64) -> Option<i64> {
        (self.period_ns > 0.0).then(|| {
            let burst_index = sent / self.burst + self.skipped;
            self.start_ns + (burst_index as f64 * self.period_ns) as i64
        })
    }
}

/// The receiver's accounting for one flow.
#[derive(Clone, Debug, Default)]
pub struct Receiver {
    /// Distinct datagrams.
    pub received: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Highest sequence number seen + 1.
    next_seq: u64,
    /// One bit per sequence number below `SEEN_WINDOW` behind `next_seq`.
    seen: Vec<u64>,
    /// RFC 3550 jitter estimate, ns.
    jitter_ns: f64,
    /// Transit (receive − send) of the previous datagram in arrival order, ns.
    last_transit_ns: Option<i64>,
    /// One-way delays, µs.
    owd_us: Vec<u32>,
    // Counters at the last interval cut.
    cut_received: u64,
    cut_next_seq: u64,
    cut_out_of_order: u64,
    /// Distinct datagrams since the cut numbered from `cut_next_seq` on.
    in_range: u64,
}

/// How far back duplicates are recognised: a duplicate older than this many sequence
/// numbers counts as out of order instead.
const SEEN_WINDOW: u64 = 1 << 22;

impl Receiver {
    /// One datagram: its header and when it arrived on the receiver's clock (ns);
    /// `offset_ns` is the sender's clock minus the receiver's.
    pub fn push(&mut self, header: &Header, received_ns: i64, offset_ns: i64) {
        let seq = header.seq;
        if seq + SEEN_WINDOW < self.next_seq {
            self.received += 1;
            self.out_of_order += 1;
            return;
        }
        let (word, bit) = ((seq % SEEN_WINDOW / 64) as usize, seq % 64);
        if self.seen.is_empty() {
            self.seen = vec![0; (SEEN_WINDOW / 64) as usize];
        }
        if seq < self.next_seq {
            if self.seen[word] & (1 << bit) != 0 {
                self.duplicates += 1;
                return;
            }
            self.out_of_order += 1;
        } else {
            // Clear the bits of the numbers skipped (and of the slot reused).
            for s in self.next_seq..=seq.min(self.next_seq + SEEN_WINDOW) {
                let (w, b) = ((s % SEEN_WINDOW / 64) as usize, s % 64);
                self.seen[w] &= !(1 << b);
            }
            self.next_seq = seq + 1;
        }
        self.seen[word] |= 1 << bit;
        self.received += 1;
        if seq >= self.cut_next_seq {
            self.in_range += 1;
        }
        // RFC 3550 §6.4.1: J += (|D| − J) / 16 over consecutive arrivals.
        let transit = received_ns - (header.sent_ns - offset_ns);
        if let Some(last) = self.last_transit_ns {
            let d = (transit - last).abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.last_transit_ns = Some(transit);
        self.owd_us
            .push((transit.max(0) / 1000).min(i64::from(u32::MAX)) as u32);
    }

    pub fn jitter_us(&self) -> f64 {
        self.jitter_ns / 1000.0
    }

    /// Numbers below the highest seen that never arrived: all the receiver alone can
    /// call lost (iperf3's receiver reports this), blind to a lost tail.
    pub fn missing(&self) -> u64 {
        self.next_seq.saturating_sub(self.received)
    }

    /// The one-way delays' quantiles, µs.
    pub fn owd(&mut self) -> Quantiles {
        quantiles(&mut self.owd_us)
    }

    /// What arrived since the last cut.
    pub fn cut(&mut self) -> UdpInterval {
        let interval = UdpInterval {
            sent: 0,
            received: self.received - self.cut_received,
            lost: (self.next_seq - self.cut_next_seq).saturating_sub(self.in_range),
            out_of_order: self.out_of_order - self.cut_out_of_order,
            jitter_us: self.jitter_us(),
        };
        self.cut_received = self.received;
        self.cut_next_seq = self.next_seq;
        self.cut_out_of_order = self.out_of_order;
        self.in_range = 0;
        interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(rate_bps: u64, size: u32, burst: u32) -> UdpParams {
        UdpParams {
            rate_bps,
            datagram_size: size,
            burst,
            header: Default::default(),
        }
    }

    #[test]
    fn iperf3_headers_carry_seconds_microseconds_and_a_number_from_one() {
        // As iperf3_udp.c lays it out: 1700000000 s, 250000 µs, datagram number 1.
        let real = [0x65, 0x53, 0xf1, 0x00, 0x00, 0x03, 0xd0, 0x90, 0, 0, 0, 1];
        let header = Header::read_as(UdpHeaderFormat::Iperf3, &real, 7).unwrap();
        assert_eq!(header.flow, 7);
        assert_eq!(header.seq, 0);
        assert_eq!(header.sent_ns, 1_700_000_000_250_000_000);
        let mut again = [0u8; 12];
        header.write_as(UdpHeaderFormat::Iperf3, &mut again);
        assert_eq!(again, real);
        // iperf3 never numbers a datagram 0, and 11 bytes are no header.
        let zero = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(Header::read_as(UdpHeaderFormat::Iperf3, &zero, 0), None);
        assert_eq!(
            Header::read_as(UdpHeaderFormat::Iperf3, &real[..11], 0),
            None
        );
    }

    #[test]
    fn headers_round_trip_and_strangers_are_refused() {
        let h = Header {
            flow: 7,
            seq: 1 << 40,
            sent_ns: -5,
        };
        let mut buf = [0u8; 64];
        h.write(&mut buf);
        assert_eq!(Header::read(&buf), Some(h));
        assert_eq!(Header::read(&buf[..23]), None);
        buf[0] = b'X';
        assert_eq!(Header::read(&buf), None);
    }

    #[test]
    fn the_schedule_keeps_the_rate_without_drift() {
        // 1000 B at 8 Mbit/s: one datagram per ms.
        let mut s = Schedule::new(&params(8_000_000, 1000, 1), 0, 4);
        let mut sent = 0;
        // Waking every 0.3 ms for 10 s, sending what is due.
        let mut t = 0;
        while t < 10_000_000_000 {
            sent += s.due(t, sent);
            t += 300_000;
        }
        assert_eq!(sent, 10_000);
        assert_eq!(s.late, 0);
        assert_eq!(s.next_ns(sent), Some(10_000_000_000));
        assert_eq!(s.unsent(10_000_000_000, sent), 0);
    }

    #[test]
    fn bursts_come_whole_and_a_late_sender_catches_up_batch_by_batch() {
        let mut s = Schedule::new(&params(8_000_000, 1000, 5), 0, 5);
        assert_eq!(s.due(0, 0), 5);
        assert_eq!(s.due(1_000_000, 5), 0);
        assert_eq!(s.next_ns(5), Some(5_000_000));
        assert_eq!(s.due(5_000_000, 5), 5);
        // Asleep for 20 ms: 4 bursts behind, sent one batch at a time.
        assert_eq!(s.due(30_000_000, 10), 5);
        assert_eq!(s.due(30_000_000, 15), 5);
        assert_eq!(s.next_ns(20), Some(20_000_000));
        assert_eq!(s.catch_up_gap_ns(), 2_500_000);
        assert_eq!(s.late, 0);
        // Asleep for a second: beyond the catch-up limit, the backlog is dropped.
        assert_eq!(s.due(1_030_000_000, 35), 5);
        assert_eq!(s.late, 1);
        assert_eq!(s.due(1_030_000_000, 40), 0);
        assert_eq!(s.next_ns(40), Some(1_035_000_000));
        // Ending then, at 1.03 s: 207 bursts were due (0, 5, …, 1030 ms), 40 datagrams
        // went out; the skipped backlog and the burst owed at 1.03 s were never sent.
        assert_eq!(s.unsent(1_030_000_001, 40), 207 * 5 - 40);
        // Ending at 1.03 s exactly: that burst was not yet due.
        assert_eq!(s.unsent(1_030_000_000, 40), 206 * 5 - 40);
    }

    #[test]
    fn unlimited_sends_a_batch_every_time() {
        let mut s = Schedule::new(&params(0, 1472, 1), 0, 32);
        assert_eq!(s.due(0, 0), 32);
        assert_eq!(s.due(0, 1_000_000), 32);
        assert_eq!(s.next_ns(5), None);
    }

    fn header(seq: u64, sent_ns: i64) -> Header {
        Header {
            flow: 0,
            seq,
            sent_ns,
        }
    }

    #[test]
    fn loss_duplicates_and_reordering_are_told_apart() {
        let mut r = Receiver::default();
        for seq in [0, 1, 3, 2, 2, 5, 6] {
            r.push(&header(seq, 0), 1_000_000, 0);
        }
        assert_eq!((r.received, r.duplicates, r.out_of_order), (6, 1, 1));
        // 7 expected (0..=6), 6 distinct arrived: seq 4 is lost.
        let i = r.cut();
        assert_eq!((i.received, i.lost, i.out_of_order), (6, 1, 1));
        r.push(&header(4, 0), 2_000_000, 0);
        let i = r.cut();
        assert_eq!((i.received, i.lost, i.out_of_order), (1, 0, 1));
    }

    #[test]
    fn jitter_follows_rfc_3550() {
        let mut r = Receiver::default();
        // Transit alternates 10 ms and 12 ms: |D| = 2 ms each time after the first.
        for seq in 0..200u64 {
            let transit = if seq % 2 == 0 { 10_000_000 } else { 12_000_000 };
            let sent = seq as i64 * 1_000_000;
            r.push(&header(seq, sent), sent + transit, 0);
        }
        // J converges to |D| = 2 ms; after 199 steps of 1/16 it is within 1e-5 of it.
        assert!((r.jitter_us() - 2000.0).abs() < 0.01, "{}", r.jitter_us());
        let owd = r.owd();
        assert_eq!((owd.min, owd.p50, owd.max), (10_000.0, 12_000.0, 12_000.0));
    }

    #[test]
    fn one_way_delay_uses_the_clock_offset() {
        let mut r = Receiver::default();
        // The sender's clock is 5 s ahead: sent at its 5.000 s, received at our 0.020 s.
        r.push(&header(0, 5_000_000_000), 20_000_000, 5_000_000_000);
        assert_eq!(r.owd().p50, 20_000.0);
    }

    #[test]
    fn quantiles_of_known_values() {
        let mut v: Vec<u32> = (1..=100).rev().collect();
        let q = quantiles(&mut v);
        assert_eq!(
            (q.min, q.p50, q.p90, q.p99, q.max),
            (1.0, 51.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(quantiles::<u32>(&mut []), Quantiles::default());
    }
}
