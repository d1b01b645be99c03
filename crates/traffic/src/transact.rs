//! Request/response flows (`--rr`, netperf's TCP_RR) on one end: the client's requester
//! times each transaction from its request's first write to its response's last byte;
//! the server's responder reads each whole request and answers it with one write.
//!
//! Both run on the data connection's thread in place of the bulk sender and receiver,
//! so the monitor samples them alike. Requests are what the flow's byte counts count.
//!
//! With a connection per transaction (TCP_CRR) the data connection stays idle as the
//! flow's anchor: the client opens a new one for each transaction, introduced by the
//! test's cookie in the same write as the request's first part, and the server accepts
//! them on the test's data listener, answers, and closes each. The client's closing
//! the anchor ends the server's accepting.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tcplab_analysis::throughput;
use tcplab_model::transaction::write_sizes;
use tcplab_record::{TestEnd, TestParams, Transaction, TransactionParams};
use tcplab_sys::clock::monotonic_us;
use tcplab_sys::poll::wait_for;
use tcplab_sys::sockopt;

use crate::flow::{timed_out, FlowResult, FlowShared, Moved, Renew};
use crate::protocol::{self, ConnKind, Role, DATA_INTRO_LEN};
use crate::setup;

/// How long a connect may take: five SYNs, as the client's first data connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(16);

/// How long one blocked read or write waits before the flow looks at the clock and the
/// stop flag again.
const WAIT: Duration = Duration::from_millis(10);

/// Makes transactions until the duration or the byte budget (of requests) is spent, each
/// timed into `done`; the one in flight at a timed test's deadline may finish within the
/// drain limit. Then closes the data connection's write side, which ends the server's
/// responder (or, with a connection per transaction, its accepting).
///
/// With a connection per transaction (TCP_CRR) each one is new, tuned as the flow's,
/// its introduction sent in one write with the request's first part, and closed after
/// the response (the server closes first); its time starts at the connect.
pub(crate) fn request_until_end(
    flow: &FlowShared,
    params: &TestParams,
    rr: TransactionParams,
    t0_us: i64,
    done: &mut Vec<Transaction>,
    stop: &AtomicBool,
) -> FlowResult {
    let anchor = &flow.stream;
    let connect_to = match (&flow.renew, rr.new_connection) {
        (_, false) => None,
        (Some(Renew::Connect { addr, cookie }), true) => Some((addr, cookie)),
        (_, true) => return Err((0, io::Error::other("no data address to connect to"))),
    };
    let intro: Vec<u8> = connect_to
        .map(|(_, cookie)| protocol::data_intro(cookie, flow.id).to_vec())
        .unwrap_or_default();
    let deadline = params.end.deadline_us(t0_us);
    let mut budget = match params.end {
        TestEnd::Duration { .. } => u64::MAX,
        TestEnd::Bytes { bytes } => bytes,
    };
    let request = vec![b'q'; rr.request_size as usize];
    let mut response = vec![0u8; (rr.response_size.min(params.tuning.read_size)) as usize];
    let mut sent = 0u64;
    set_waits(anchor).map_err(|e| (0, e))?;
    'transactions: while budget > 0 && !stop.load(Ordering::Relaxed) {
        let start_us = monotonic_us();
        if deadline.is_some_and(|d| start_us >= d) {
            break;
        }
        // The last transaction may finish after the deadline, within the drain limit.
        let give_up_us = deadline.map_or(i64::MAX, |d| {
            let srtt_us = sockopt::tcp_info(anchor.as_fd()).map_or(0, |i| i.rtt);
            d + throughput::drain_limit_us(srtt_us) as i64
        });
        let fresh = match connect_to {
            Some((addr, _)) => Some(connect(addr, params).map_err(|e| (sent, e))?),
            None => None,
        };
        let stream = fresh.as_ref().unwrap_or(anchor);
        let mut offset = 0;
        for (i, size) in write_sizes(rr.request_size, rr.request_writes).enumerate() {
            let part = &request[offset..offset + size];
            let first;
            let buf = if i == 0 && !intro.is_empty() {
                first = [intro.as_slice(), part].concat();
                &first
            } else {
                part
            };
            flow.in_write.store(true, Ordering::Relaxed);
            let wrote = write_all(stream, buf, give_up_us, stop);
            flow.in_write.store(false, Ordering::Relaxed);
            if !wrote.map_err(|e| (sent, e))? {
                break 'transactions;
            }
            offset += size;
            sent += size as u64;
            flow.bytes.store(sent, Ordering::Relaxed);
        }
        let len = rr.response_size as usize;
        match read_exact(stream, &mut response, len, give_up_us, stop) {
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
    anchor.shutdown(Shutdown::Write).map_err(|e| (sent, e))?;
    Ok(Moved {
        bytes: sent,
        unacked: 0,
    })
}

/// Blocked reads and writes wait at most [`WAIT`].
fn set_waits(stream: &TcpStream) -> io::Result<()> {
    stream.set_write_timeout(Some(WAIT))?;
    stream.set_read_timeout(Some(WAIT))
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
    set_waits(stream).map_err(|e| (0, e))?;
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

/// Reads `len` bytes into `buf` when it holds them, else through it (each read from its
/// start); `Ok(false)` when stopped, past `give_up_us`, or at the end of the stream first.
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
        let at = if buf.len() >= len { len - left } else { 0 };
        let want = left.min(buf.len() - at);
        match (&*stream).read(&mut buf[at..at + want]) {
            Ok(0) => return Ok(false),
            Ok(n) => left -= n,
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// A new data connection to `addr`, tuned as the test's sending side.
fn connect(addr: &SocketAddr, params: &TestParams) -> io::Result<TcpStream> {
    let socket = setup::tcp_socket(addr)?;
    setup::apply(&socket, &params.tuning, Role::Send)?;
    socket.connect_timeout(&(*addr).into(), CONNECT_TIMEOUT)?;
    let stream: TcpStream = socket.into();
    set_waits(&stream)?;
    Ok(stream)
}

/// The server's side of TCP_CRR: accepts each transaction's connection, checks its
/// introduction, reads the request, answers it and closes the connection, until the
/// client closes the anchor.
pub(crate) fn accept_each(
    flow: &FlowShared,
    rr: TransactionParams,
    stop: &AtomicBool,
) -> FlowResult {
    let Some(Renew::Accept {
        listener,
        cookie,
        client,
    }) = &flow.renew
    else {
        return Err((0, io::Error::other("no data listener to accept on")));
    };
    let finished = |bytes| Ok(Moved { bytes, unacked: 0 });
    let mut read = 0u64;
    let mut request = vec![0u8; DATA_INTRO_LEN + rr.request_size as usize];
    let response = vec![b'r'; rr.response_size as usize];
    let mut anchor = [0u8; 1];
    while !stop.load(Ordering::Relaxed) {
        if wait_for(&flow.stream, libc::POLLIN, 0).map_err(|e| (read, e))? {
            // The client is done: its anchor's end of stream.
            match (&flow.stream).read(&mut anchor) {
                Ok(0) | Err(_) => return finished(read),
                Ok(_) => {}
            }
        }
        if !wait_for(listener, libc::POLLIN, WAIT.as_millis() as i32).map_err(|e| (read, e))? {
            continue;
        }
        let stream = match listener.accept() {
            Ok((stream, from)) if from.ip().to_canonical() == *client => stream,
            Ok(_) => continue,
            Err(e) if timed_out(&e) => continue,
            Err(e) => return Err((read, e)),
        };
        let setup = stream
            .set_nonblocking(false)
            .and_then(|()| set_waits(&stream));
        setup.map_err(|e| (read, e))?;
        // A connection that breaks off or is not this test's is dropped; the next may
        // come.
        let len = request.len();
        if !matches!(
            read_exact(&stream, &mut request, len, i64::MAX, stop),
            Ok(true)
        ) {
            continue;
        }
        let mut intro = &request[..DATA_INTRO_LEN];
        let ours = protocol::read_hello(&mut intro).ok() == Some(ConnKind::Data)
            && protocol::read_data_intro(&mut intro)
                .is_ok_and(|(presented, id)| presented == *cookie && id == flow.id);
        if !ours {
            continue;
        }
        read += u64::from(rr.request_size);
        flow.bytes.store(read, Ordering::Relaxed);
        // A client gone at its drain limit leaves this one unanswered: the next accept
        // or the anchor says what follows.
        let _ = write_all(&stream, &response, i64::MAX, stop);
    }
    finished(read)
}
