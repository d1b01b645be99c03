//! Request/response flows (`--rr`, netperf's TCP_RR) on one end: the client's requester
//! times each transaction from its request's first write to its response's last byte;
//! the server's responder reads each whole request and answers it with one write.
//!
//! Both run on the data connection's thread in place of the bulk sender and receiver,
//! so the monitor samples them alike. Requests are what the flow's byte counts count.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tcplab_model::record::{TestEnd, TestParams, Transaction, TransactionParams};
use tcplab_model::throughput;
use tcplab_model::transaction::write_sizes;
use tcplab_sys::clock::monotonic_us;
use tcplab_sys::sockopt;

use crate::engine::{timed_out, FlowResult, FlowShared, Moved};

/// How long one blocked read or write waits before the flow looks at the clock and the
/// stop flag again.
const WAIT: Duration = Duration::from_millis(10);

/// Makes transactions until the duration or the byte budget (of requests) is spent, each
/// timed into `done`; the one in flight at a timed test's deadline may finish within the
/// drain limit. Then closes the write side, which ends the server's responder.
pub(crate) fn request_until_end(
    flow: &FlowShared,
    params: &TestParams,
    rr: TransactionParams,
    t0_us: i64,
    done: &mut Vec<Transaction>,
    stop: &AtomicBool,
) -> FlowResult {
    let stream = &flow.stream;
    let deadline = params.end.deadline_us(t0_us);
    let mut budget = match params.end {
        TestEnd::Duration { .. } => u64::MAX,
        TestEnd::Bytes { bytes } => bytes,
    };
    let request = vec![b'q'; rr.request_size as usize];
    let mut response = vec![0u8; (rr.response_size.min(params.tuning.read_size)) as usize];
    let mut sent = 0u64;
    let setup = stream
        .set_write_timeout(Some(WAIT))
        .and_then(|()| stream.set_read_timeout(Some(WAIT)));
    setup.map_err(|e| (0, e))?;
    'transactions: while budget > 0 && !stop.load(Ordering::Relaxed) {
        let start_us = monotonic_us();
        if deadline.is_some_and(|d| start_us >= d) {
            break;
        }
        // The last transaction may finish after the deadline, within the drain limit.
        let give_up_us = deadline.map_or(i64::MAX, |d| {
            let srtt_us = sockopt::tcp_info(stream.as_fd()).map_or(0, |i| i.rtt);
            d + throughput::drain_limit_us(srtt_us) as i64
        });
        let mut offset = 0;
        for size in write_sizes(rr.request_size, rr.request_writes) {
            flow.in_write.store(true, Ordering::Relaxed);
            let wrote = write_all(stream, &request[offset..offset + size], give_up_us, stop);
            flow.in_write.store(false, Ordering::Relaxed);
            if !wrote.map_err(|e| (sent, e))? {
                break 'transactions;
            }
            offset += size;
            sent += size as u64;
            flow.bytes.store(sent, Ordering::Relaxed);
        }
        match read_exact(
            stream,
            &mut response,
            rr.response_size as usize,
            give_up_us,
            stop,
        ) {
            Ok(true) => done.push(Transaction {
                start_us: start_us - t0_us,
                latency_us: monotonic_us() - start_us,
            }),
            // Stopped, or the drain limit passed with the response still on its way.
            Ok(false) => break 'transactions,
            Err(e) => return Err((sent, e)),
        }
        budget = budget.saturating_sub(u64::from(rr.request_size));
    }
    flow.writing.store(false, Ordering::Release);
    stream.shutdown(Shutdown::Write).map_err(|e| (sent, e))?;
    Ok(Moved {
        bytes: sent,
        unacked: 0,
    })
}

/// Answers each whole request with one write of the response, until the client closes
/// its side (or, after the deadline, resets the connection).
pub(crate) fn respond_until_eof(
    flow: &FlowShared,
    params: &TestParams,
    rr: TransactionParams,
    earliest_t0_us: i64,
    stop: &AtomicBool,
) -> FlowResult {
    let stream = &flow.stream;
    let deadline = params.end.deadline_us(earliest_t0_us).unwrap_or(i64::MAX);
    let response = vec![b'r'; rr.response_size as usize];
    let mut request = vec![0u8; (rr.request_size.min(params.tuning.read_size)) as usize];
    let mut read = 0u64;
    let setup = stream
        .set_write_timeout(Some(WAIT))
        .and_then(|()| stream.set_read_timeout(Some(WAIT)));
    setup.map_err(|e| (0, e))?;
    let ended = |e: &io::Error| {
        matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        ) && monotonic_us() > deadline
    };
    let finished = |bytes| Ok(Moved { bytes, unacked: 0 });
    loop {
        let mut left = rr.request_size as usize;
        while left > 0 {
            if stop.load(Ordering::Relaxed) {
                return finished(read);
            }
            let want = left.min(request.len());
            match (&*stream).read(&mut request[..want]) {
                // The client closed its side: between requests the end, inside one a
                // request it gave up at its drain limit.
                Ok(0) => return finished(read),
                Ok(n) => {
                    left -= n;
                    read += n as u64;
                    flow.bytes.store(read, Ordering::Relaxed);
                }
                Err(e) if timed_out(&e) => {}
                Err(e) if ended(&e) => return finished(read),
                Err(e) => return Err((read, e)),
            }
        }
        match write_all(stream, &response, i64::MAX, stop) {
            Ok(true) => {}
            Ok(false) => return finished(read),
            Err(e) if ended(&e) => return finished(read),
            Err(e) => return Err((read, e)),
        }
    }
}

/// Writes all of `buf`: `Ok(false)` when stopped or past `give_up_us` first.
fn write_all(
    stream: &TcpStream,
    buf: &[u8],
    give_up_us: i64,
    stop: &AtomicBool,
) -> io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        if stop.load(Ordering::Relaxed) || monotonic_us() > give_up_us {
            return Ok(false);
        }
        match (&*stream).write(&buf[at..]) {
            Ok(n) => at += n,
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads `len` bytes through `buf` (reused); `Ok(false)` when stopped, past
/// `give_up_us`, or at the end of the stream first.
fn read_exact(
    stream: &TcpStream,
    buf: &mut [u8],
    len: usize,
    give_up_us: i64,
    stop: &AtomicBool,
) -> io::Result<bool> {
    let mut left = len;
    while left > 0 {
        if stop.load(Ordering::Relaxed) || monotonic_us() > give_up_us {
            return Ok(false);
        }
        let want = left.min(buf.len());
        match (&*stream).read(&mut buf[..want]) {
            Ok(0) => return Ok(false),
            Ok(n) => left -= n,
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
