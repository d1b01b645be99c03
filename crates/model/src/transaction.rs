//! Request/response transactions (`--rr`, netperf's TCP_RR): what a test may ask, how a
//! request is split into writes, and the figures of a flow's or a run's transactions.
//! Pure: the traffic crate moves the bytes and reads the clock.

use tcplab_analysis::stats::quantiles;
use tcplab_record::units::format_size;
use tcplab_record::{Mode, TestParams, Transaction, TransactionParams, TransactionStats};

/// The largest request or response: a transaction is a message, not a transfer.
pub const MAX_MESSAGE: u32 = 16 << 20;
/// The most writes a request may be split into.
pub const MAX_WRITES: u32 = 64;

/// What a client may ask of transactions, checked by the client and again by the server.
pub fn check(params: &TestParams) -> Result<(), String> {
    let Some(TransactionParams {
        request_size,
        response_size,
        request_writes,
        new_connection,
    }) = params.transactions
    else {
        return Ok(());
    };
    for (what, size) in [("request", request_size), ("response", response_size)] {
        if !(1..=MAX_MESSAGE).contains(&size) {
            return Err(format!(
                "{what} size {} is outside 1 B..={}",
                format_size(u64::from(size)),
                format_size(u64::from(MAX_MESSAGE))
            ));
        }
    }
    if !(1..=MAX_WRITES.min(request_size)).contains(&request_writes) {
        return Err(format!(
            "a request of {request_size} bytes cannot be split into {request_writes} writes \
             (1..={})",
            MAX_WRITES.min(request_size)
        ));
    }
    if params.mode != Mode::Up {
        return Err(
            "transactions go from the client to the server (as netperf's TCP_RR): \
             -R and --bidir do not apply"
                .into(),
        );
    }
    if params.udp.is_some() {
        return Err("transactions run over TCP: -u does not apply".into());
    }
    if new_connection && params.streams != 1 {
        return Err(
            "a connection per transaction (TCP_CRR) runs one stream, as netperf's: -P does not apply"
                .into(),
        );
    }
    Ok(())
}

/// The sizes of a request's writes: `writes` parts as even as whole bytes allow, the
/// larger ones first.
pub fn write_sizes(request_size: u32, writes: u32) -> impl Iterator<Item = usize> {
    let (each, larger) = (request_size / writes, request_size % writes);
    (0..writes).map(move |i| (each + u32::from(i < larger)) as usize)
}

/// The figures of transactions (any flows') over a window of `seconds` ending at
/// `end_us` (relative to t0): those completed by the end count, and their latencies make
/// the distribution. `None` without transactions or a window.
pub fn stats(transactions: &[Transaction], end_us: i64, seconds: f64) -> Option<TransactionStats> {
    let mut latencies: Vec<i64> = transactions
        .iter()
        .filter(|t| t.start_us + t.latency_us <= end_us)
        .map(|t| t.latency_us)
        .collect();
    (seconds > 0.0 && !transactions.is_empty()).then(|| TransactionStats {
        count: latencies.len() as u64,
        per_second: latencies.len() as f64 / seconds,
        latency_us: quantiles(&mut latencies),
    })
}

/// Runs' (or flow groups') figures together where their transactions are not at hand:
/// counts and rates add up, each latency quantile is the worst one's (as the UDP
/// summary takes its delays).
pub fn combine(parts: impl IntoIterator<Item = TransactionStats>) -> Option<TransactionStats> {
    parts.into_iter().reduce(|a, b| TransactionStats {
        count: a.count + b.count,
        per_second: a.per_second + b.per_second,
        latency_us: a.latency_us.worst(b.latency_us),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(request_size: u32, response_size: u32, request_writes: u32) -> TestParams {
        TestParams {
            transactions: Some(TransactionParams {
                request_size,
                response_size,
                request_writes,
                new_connection: false,
            }),
            ..TestParams::default()
        }
    }

    #[test]
    fn a_request_splits_into_even_writes_that_add_up() {
        assert_eq!(write_sizes(100, 2).collect::<Vec<_>>(), [50, 50]);
        assert_eq!(write_sizes(7, 3).collect::<Vec<_>>(), [3, 2, 2]);
        assert_eq!(write_sizes(1, 1).collect::<Vec<_>>(), [1]);
        for (size, writes) in [(1000, 7), (64, 64), (65, 64)] {
            assert_eq!(write_sizes(size, writes).sum::<usize>(), size as usize);
            assert_eq!(write_sizes(size, writes).count(), writes as usize);
        }
    }

    #[test]
    fn bad_requests_are_named() {
        assert!(check(&rr(100, 100, 2)).is_ok());
        assert!(check(&TestParams::default()).is_ok());
        let err = |p: TestParams| check(&p).unwrap_err();
        assert!(err(rr(0, 1, 1)).contains("request size 0 B"));
        assert!(err(rr(1, MAX_MESSAGE + 1, 1)).contains("response size"));
        assert!(err(rr(1, 1, 2)).contains("split into 2 writes"));
        assert!(err(rr(100, 1, 0)).contains("into 0 writes"));
        let down = TestParams {
            mode: Mode::Down,
            ..rr(1, 1, 1)
        };
        assert!(err(down).contains("-R"));
        let mut crr = rr(1, 1, 1);
        crr.transactions.as_mut().unwrap().new_connection = true;
        assert!(check(&crr).is_ok());
        crr.streams = 2;
        assert!(err(crr).contains("TCP_CRR"));
    }

    #[test]
    fn only_transactions_done_by_the_end_count() {
        let t = |start_us, latency_us| Transaction {
            start_us,
            latency_us,
        };
        let all = [t(0, 40), t(40, 10), t(50, 30), t(80, 30)];
        let s = stats(&all, 100, 0.0001).unwrap();
        assert_eq!(s.count, 3);
        assert!((s.per_second - 30_000.0).abs() < 1e-6);
        assert_eq!(
            (s.latency_us.min, s.latency_us.p50, s.latency_us.max),
            (10.0, 30.0, 40.0)
        );
        assert_eq!(stats(&[], 100, 1.0), None);
        assert_eq!(stats(&all, 100, 0.0), None);
        let both = combine([s, s]).unwrap();
        assert_eq!((both.count, both.latency_us.p50), (6, 30.0));
        assert!((both.per_second - 60_000.0).abs() < 1e-6);
    }
}
