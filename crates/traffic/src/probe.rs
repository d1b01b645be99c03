//! Round-trip probes on the wire (`--probe`): the client's prober — a sender on a fixed
//! schedule and a reader of the answers with the kernel's arrival times — and the
//! server's echo. The datagram and the figures are pure ([`tcplab_model::probe`]).

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tcplab_model::probe::{Answer, Sent};
use tcplab_netsim::probe_datagram::{Probe, PROBE_LEN};
use tcplab_sys::clock::{monotonic_ns, monotonic_us, realtime_minus_monotonic_ns, sleep_until_ns};
use tcplab_sys::{sockopt, stamp};

use crate::flow::timed_out;

/// How long one read waits before it looks at the stop flag.
const READ_TIMEOUT: Duration = Duration::from_millis(20);
/// The sender's real-time priority where it may have one (root): a timer wakes a
/// real-time thread sooner, and a probe's send error is that wake-up's lateness. The
/// lab's emulator's own (below it, the emulator preempted the spin: p99 0.6–1.6 ms).
const SENDER_PRIORITY: i32 = 10;
/// The sender wakes this long before a probe is due and spins the rest: this VM wakes
/// a thread late by up to ~130 µs at p99.
const SPIN_NS: i64 = 150_000;

/// The test's secret as probes carry it: the first 8 bytes of its cookie.
pub fn token(cookie: &[u8]) -> u64 {
    u64::from_be_bytes(
        cookie[..8]
            .try_into()
            .expect("a cookie of at least 8 bytes"),
    )
}

/// A datagram's arrival on the monotonic clock, µs: the kernel's wall-clock stamp moved
/// to our time base, or now when the kernel gave none.
fn arrival_us(stamp_ns: Option<i64>) -> i64 {
    stamp_ns.map_or_else(monotonic_us, |ns| {
        (ns - realtime_minus_monotonic_ns()) / 1_000
    })
}

/// The client's probes of one test, running from [`Prober::start`] until finished or
/// dropped.
pub struct Prober {
    /// Monotonic µs after which no probe leaves.
    end_us: Arc<AtomicI64>,
    stop_reading: Arc<AtomicBool>,
    threads: Option<ProberThreads>,
}

struct ProberThreads {
    sender: JoinHandle<io::Result<Vec<Sent>>>,
    reader: JoinHandle<Vec<Answer>>,
}

impl Prober {
    /// Probes the server `socket` is connected to, every `interval_us` from now.
    pub fn start(socket: UdpSocket, token: u64, interval_us: u64) -> io::Result<Prober> {
        sockopt::set_timestamp_ns(&socket)?;
        socket.set_read_timeout(Some(READ_TIMEOUT))?;
        let end_us = Arc::new(AtomicI64::new(i64::MAX));
        let stop_reading = Arc::new(AtomicBool::new(false));
        let reader = {
            let socket = socket.try_clone()?;
            let stop = Arc::clone(&stop_reading);
            thread::spawn(move || read_answers(&socket, token, &stop))
        };
        let sender = {
            let end_us = Arc::clone(&end_us);
            thread::spawn(move || {
                tcplab_sys::cpu::set_realtime(SENDER_PRIORITY);
                send_probes(&socket, token, interval_us, &end_us)
            })
        };
        Ok(Prober {
            end_us,
            stop_reading,
            threads: Some(ProberThreads { sender, reader }),
        })
    }

    /// No probe leaves after `end_us` (monotonic); an earlier end stays.
    pub fn stop_at(&self, end_us: i64) {
        self.end_us.fetch_min(end_us, Ordering::Relaxed);
    }

    /// Stops sending now, reads answers for `grace` more, and returns what was sent
    /// and what came back.
    pub fn finish(mut self, grace: Duration) -> io::Result<(Vec<Sent>, Vec<Answer>)> {
        let threads = self.threads.take().expect("finished once");
        self.stop_at(monotonic_us());
        let sent = threads.sender.join().expect("probe sender panicked")?;
        thread::sleep(grace);
        self.stop_reading.store(true, Ordering::Relaxed);
        let answers = threads.reader.join().expect("probe reader panicked");
        Ok((sent, answers))
    }
}

impl Drop for Prober {
    /// A test that failed stops its probes too.
    fn drop(&mut self) {
        self.stop_at(i64::MIN);
        self.stop_reading.store(true, Ordering::Relaxed);
    }
}

/// One probe per interval on an absolute schedule: a sender woken late sends at once,
/// and the lateness is recorded, never carried into the next probe's time.
fn send_probes(
    socket: &UdpSocket,
    token: u64,
    interval_us: u64,
    end_us: &AtomicI64,
) -> io::Result<Vec<Sent>> {
    let start_ns = monotonic_ns() as i64;
    let mut sent = Vec::new();
    let mut buf = [0u8; PROBE_LEN];
    for seq in 0u64.. {
        let due_ns = start_ns + (seq * interval_us * 1_000) as i64;
        if due_ns / 1_000 > end_us.load(Ordering::Relaxed) {
            break;
        }
        sleep_until_ns(due_ns - SPIN_NS);
        while (monotonic_ns() as i64) < due_ns {
            std::hint::spin_loop();
        }
        let sent_us = monotonic_us();
        if sent_us > end_us.load(Ordering::Relaxed) {
            break;
        }
        Probe {
            token,
            seq,
            client_send_us: sent_us,
            ..Probe::default()
        }
        .write(&mut buf);
        match socket.send(&buf) {
            Ok(_) => {}
            // A full queue or a refused port (an ICMP error from an earlier probe): the
            // probe counts as lost on the way up, as the path would lose it.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOBUFS | libc::ECONNREFUSED | libc::EAGAIN)
                ) => {}
            Err(e) => return Err(e),
        }
        sent.push(Sent {
            seq,
            scheduled_us: due_ns / 1_000,
            sent_us,
        });
    }
    Ok(sent)
}

fn read_answers(socket: &UdpSocket, token: u64, stop: &AtomicBool) -> Vec<Answer> {
    let mut answers = Vec::new();
    let mut buf = [0u8; PROBE_LEN + 1];
    while !stop.load(Ordering::Relaxed) {
        match stamp::recv_stamped(socket, &mut buf) {
            Ok((n, stamp_ns)) => {
                if let Some(probe) = Probe::read(&buf[..n]).filter(|p| p.token == token) {
                    answers.push(Answer {
                        probe,
                        client_recv_us: arrival_us(stamp_ns),
                    });
                }
            }
            // A timeout looks at the flag; an ICMP error of an earlier probe is no answer.
            Err(e) if timed_out(&e) || e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
            Err(_) => break,
        }
    }
    answers
}

/// The server's side of a test's probes: it answers the test's client, and only with
/// the test's token, each request with one answer of the same size.
pub struct Echo {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<u64>>,
}

impl Echo {
    pub fn start(socket: UdpSocket, token: u64, client: IpAddr) -> io::Result<Echo> {
        sockopt::set_timestamp_ns(&socket)?;
        socket.set_read_timeout(Some(READ_TIMEOUT))?;
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || echo(&socket, token, client, &stop))
        };
        Ok(Echo {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops answering; returns how many distinct probes were answered.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self.handle.take().expect("finished once");
        handle.join().expect("probe echo panicked")
    }
}

impl Drop for Echo {
    /// A test that failed stops answering too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn echo(socket: &UdpSocket, token: u64, client: IpAddr, stop: &AtomicBool) -> u64 {
    let mut answered = HashSet::new();
    let mut buf = [0u8; PROBE_LEN + 1];
    let mut out = [0u8; PROBE_LEN];
    while !stop.load(Ordering::Relaxed) {
        let (n, stamp_ns, from) = match stamp::recv_stamped_from(socket, &mut buf) {
            Ok(got) => got,
            Err(e) if timed_out(&e) => continue,
            Err(_) => break,
        };
        let Some(from) = from.filter(|f| f.ip().to_canonical() == client) else {
            continue;
        };
        let Some(mut probe) = Probe::read(&buf[..n]).filter(|p| p.token == token) else {
            continue;
        };
        probe.server_recv_us = arrival_us(stamp_ns);
        probe.server_send_us = monotonic_us();
        probe.write(&mut out);
        if socket.send_to(&out, from).is_ok() {
            answered.insert(probe.seq);
        }
    }
    answered.len() as u64
}
