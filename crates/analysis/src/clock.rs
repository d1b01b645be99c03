//! The server's clock offset from request/response exchanges over the control channel,
//! as NTP computes it (RFC 5905 §8).
//!
//! In one exchange the client sends at t1 (its clock), the server receives at t2 and
//! answers at t3 (its clock), the client receives at t4. With θ the true offset
//! (server = client + θ) and d_up, d_down the one-way delays:
//! t2 = t1 + θ + d_up and t4 = t3 − θ + d_down, so
//! offset = ((t2 − t1) + (t3 − t4)) / 2 = θ + (d_up − d_down) / 2.
//! The unknown asymmetry is at most the round trip rtt = d_up + d_down, hence
//! |offset − θ| ≤ rtt / 2. The exchange with the smallest round trip gives the tightest
//! bound.

use tcplab_record::ClockOffset;

/// One timestamped request/response, µs: client times on the client's clock, server
/// times on the server's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// t1
    pub client_send_us: i64,
    /// t2
    pub server_recv_us: i64,
    /// t3
    pub server_send_us: i64,
    /// t4
    pub client_recv_us: i64,
}

impl Exchange {
    /// Network round trip, µs: time away from the client minus time spent in the
    /// server. `None` when either clock ran backwards within the exchange.
    pub fn rtt_us(&self) -> Option<i64> {
        let away = i128::from(self.client_recv_us) - i128::from(self.client_send_us);
        let held = i128::from(self.server_send_us) - i128::from(self.server_recv_us);
        if away < 0 || held < 0 || held > away {
            return None;
        }
        i64::try_from(away - held).ok()
    }

    /// Offset of this exchange alone, with its ± bound.
    pub fn offset(&self) -> Option<ClockOffset> {
        let rtt = self.rtt_us()?;
        let sum = (i128::from(self.server_recv_us) - i128::from(self.client_send_us))
            + (i128::from(self.server_send_us) - i128::from(self.client_recv_us));
        // sum and rtt have the same parity, so the offset is exact when rtt is even;
        // when it is odd, rounding the bound up covers the half µs lost here.
        let offset_us = i64::try_from(sum.div_euclid(2)).ok()?;
        Some(ClockOffset {
            offset_us,
            uncertainty_us: rtt.div_euclid(2) + rtt.rem_euclid(2),
        })
    }
}

/// Offset from the exchange with the smallest round trip (the first on ties); `None`
/// without a usable exchange.
pub fn estimate(exchanges: &[Exchange]) -> Option<ClockOffset> {
    exchanges
        .iter()
        .filter_map(|e| Some((e.rtt_us()?, e)))
        .min_by_key(|&(rtt, _)| rtt)
        .and_then(|(_, e)| e.offset())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exchange against a server whose clock is `offset` ahead, with the given
    /// one-way delays and server processing time.
    fn exchange(t1: i64, offset: i64, up: i64, held: i64, down: i64) -> Exchange {
        let t2 = t1 + offset + up;
        let t3 = t2 + held;
        Exchange {
            client_send_us: t1,
            server_recv_us: t2,
            server_send_us: t3,
            client_recv_us: t3 - offset + down,
        }
    }

    #[test]
    fn symmetric_delays_give_the_exact_offset() {
        for offset in [0, 1, -1, 12_345_678, -987_654_321_000] {
            let e = exchange(1_000_000, offset, 250, 40, 250);
            assert_eq!(
                estimate(&[e]),
                Some(ClockOffset {
                    offset_us: offset,
                    uncertainty_us: 250,
                })
            );
        }
    }

    #[test]
    fn asymmetric_delays_stay_within_the_bound() {
        for (up, down) in [(100, 900), (900, 100), (0, 1), (1, 0), (7, 4), (0, 0)] {
            for offset in [-5_000_003, 0, 42] {
                let e = exchange(10, offset, up, 3, down);
                let est = estimate(&[e]).unwrap();
                assert_eq!(e.rtt_us(), Some(up + down));
                assert!(
                    (est.offset_us - offset).abs() <= est.uncertainty_us,
                    "up {up} down {down}: {est:?} vs {offset}"
                );
                assert_eq!(est.uncertainty_us, (up + down + 1) / 2);
            }
        }
    }

    #[test]
    fn smallest_round_trip_wins() {
        let offset = 5_000;
        let exchanges = [
            exchange(0, offset, 3_000, 10, 200),
            exchange(10_000, offset, 121, 500, 80),
            exchange(20_000, offset, 100, 10, 100),
            exchange(30_000, offset, 100, 10, 100),
            exchange(40_000, offset, 900, 10, 50),
        ];
        let est = estimate(&exchanges).unwrap();
        assert_eq!(
            est,
            ClockOffset {
                offset_us: offset,
                uncertainty_us: 100,
            }
        );
    }

    #[test]
    fn nothing_usable_gives_none() {
        assert_eq!(estimate(&[]), None);
        let backwards = Exchange {
            client_send_us: 100,
            server_recv_us: 0,
            server_send_us: 10,
            client_recv_us: 50,
        };
        let server_backwards = Exchange {
            client_send_us: 0,
            server_recv_us: 20,
            server_send_us: 10,
            client_recv_us: 50,
        };
        // The server claims to have held the request longer than the client waited.
        let impossible = Exchange {
            client_send_us: 0,
            server_recv_us: 0,
            server_send_us: 100,
            client_recv_us: 50,
        };
        assert_eq!(estimate(&[backwards, server_backwards, impossible]), None);
        // Bad exchanges are skipped, not fatal.
        let good = exchange(0, 7, 10, 1, 10);
        assert_eq!(estimate(&[backwards, good]).unwrap().offset_us, 7);
    }

    #[test]
    fn extreme_timestamps_do_not_overflow() {
        let e = Exchange {
            client_send_us: i64::MIN,
            server_recv_us: i64::MAX,
            server_send_us: i64::MAX,
            client_recv_us: i64::MIN,
        };
        assert_eq!(e.rtt_us(), Some(0));
        // The offset (about 2^64 µs) does not fit: no estimate rather than a wrong one.
        assert_eq!(estimate(&[e]), None);
    }
}
