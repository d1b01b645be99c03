//! Textbook bounds on a TCP flow's throughput, each in bit/s: what the link allows,
//! what a window allows per round trip, and what loss allows (Mathis et al. 1997;
//! Padhye, Firoiu, Towsley and Kurose 1998). `explain` sets the measured throughput
//! against them.

/// IPv4 + TCP with the timestamp option: the bytes a full segment adds to the MSS.
pub const TCP_IP_HEADERS: u32 = 20 + 20 + 12;

/// Mathis' constant √(3/2) for periodic loss with an ACK per segment.
pub const MATHIS_C: f64 = 1.224_744_871_391_589;

/// The goodput a link of `rate_bps` carries for full segments of `mss` bytes of payload
/// (each costs `mss + TCP_IP_HEADERS + overhead` bytes on the link).
pub fn link_goodput_bps(rate_bps: u64, mss: u32, overhead: u32) -> f64 {
    rate_bps as f64 * f64::from(mss) / f64::from(mss + TCP_IP_HEADERS + overhead)
}

/// The bandwidth-delay product in bytes.
pub fn bdp_bytes(rate_bps: u64, rtt_us: u64) -> f64 {
    rate_bps as f64 * rtt_us as f64 / 8e6
}

/// At most one window of `window_bytes` per round trip.
pub fn window_bps(window_bytes: u64, rtt_us: u64) -> Option<f64> {
    (rtt_us > 0).then(|| window_bytes as f64 * 8e6 / rtt_us as f64)
}

/// Mathis et al.: MSS / RTT · C / √p, for a loss probability `p` in (0, 1].
pub fn mathis_bps(mss: u32, rtt_us: u64, p: f64) -> Option<f64> {
    (rtt_us > 0 && p > 0.0).then(|| f64::from(mss) * 8e6 / rtt_us as f64 * MATHIS_C / p.sqrt())
}

/// Padhye, Firoiu, Towsley, Kurose (1998), the full model with timeouts:
///
/// B = min( Wmax / RTT, 1 / ( RTT·√(2bp/3) + T0 · min(1, 3·√(3bp/8)) · p · (1 + 32p²) ) )
///
/// in segments per second, times the MSS. `b` segments acknowledged per ACK (2 with
/// delayed ACKs), `rto_us` the retransmission timeout T0, `wmax_bytes` the largest
/// window (receive window or buffer) the sender may have in flight.
pub fn pftk_bps(
    mss: u32,
    rtt_us: u64,
    p: f64,
    rto_us: u64,
    b: f64,
    wmax_bytes: Option<u64>,
) -> Option<f64> {
    if rtt_us == 0 || p <= 0.0 {
        return None;
    }
    let rtt = rtt_us as f64 / 1e6;
    let t0 = rto_us as f64 / 1e6;
    let denominator = rtt * (2.0 * b * p / 3.0).sqrt()
        + t0 * (3.0 * (3.0 * b * p / 8.0).sqrt()).min(1.0) * p * (1.0 + 32.0 * p * p);
    let loss_bound = 1.0 / denominator;
    let window_bound = wmax_bytes.map_or(f64::INFINITY, |w| w as f64 / f64::from(mss) / rtt);
    Some(loss_bound.min(window_bound) * f64::from(mss) * 8.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn a_64k_window_at_10ms_is_52_4_mbit() {
        // 65536 B · 8 / 0.010 s = 52 428 800 bit/s.
        assert_eq!(window_bps(65_536, 10_000), Some(52_428_800.0));
        assert_eq!(window_bps(65_536, 0), None);
    }

    #[test]
    fn mathis_for_1448_bytes_100ms_one_percent() {
        // 1448 · 8 / 0.1 = 115 840 bit/s per window-per-RTT segment; · 1.2247 / 0.1.
        let b = mathis_bps(1448, 100_000, 0.01).unwrap();
        assert!(close(b, 1_418_744.0, 1e-5), "{b}");
        assert_eq!(mathis_bps(1448, 100_000, 0.0), None);
    }

    #[test]
    fn pftk_matches_hand_computed_values() {
        // MSS 1448, RTT 100 ms, p = 1 %, T0 = 1 s, b = 2:
        // RTT·√(2·2·0.01/3) = 0.1 · 0.115470 = 0.0115470
        // 3·√(3·2·0.01/8) = 3 · 0.0866025 = 0.259808 (< 1)
        // T0 · 0.259808 · 0.01 · (1 + 32·0.0001) = 0.00259808 · 1.0032 = 0.00260639
        // B = 1 / 0.0141534 = 70.654 segments/s → · 1448 · 8 = 818 457 bit/s.
        let b = pftk_bps(1448, 100_000, 0.01, 1_000_000, 2.0, None).unwrap();
        assert!(close(b, 818_457.0, 1e-4), "{b}");
        // A small window binds first: 64 KiB per 100 ms = 5.24 Mbit/s > 0.82, so no;
        // 8 KiB per 100 ms = 655 kbit/s < 818 kbit/s binds.
        let w = pftk_bps(1448, 100_000, 0.01, 1_000_000, 2.0, Some(8192)).unwrap();
        assert!(close(w, 655_360.0, 1e-9), "{w}");
        // Without timeouts and with b = 1 it tends to Mathis' √(3/2) law as p → 0.
        let small = pftk_bps(1448, 100_000, 1e-6, 0, 1.0, None).unwrap();
        let mathis = mathis_bps(1448, 100_000, 1e-6).unwrap();
        assert!(close(small, mathis, 1e-9), "{small} vs {mathis}");
    }

    #[test]
    fn link_goodput_and_bdp() {
        // 100 Mbit/s, MSS 1448: 1448 of every 1500 bytes are payload.
        assert!(close(
            link_goodput_bps(100_000_000, 1448, 0),
            96_533_333.3,
            1e-9
        ));
        // 1 Gbit/s × 20 ms = 2.5 MB.
        assert_eq!(bdp_bytes(1_000_000_000, 20_000), 2_500_000.0);
    }
}
