//! The sampler's cost, for bench/watch.sh: CPU time of sock_diag dumps and lookups per
//! sampled socket, of getsockopt against a lookup for a few own sockets, and of another
//! command run N times (ss). It also holds the loopback connections being sampled.
//!
//!   sockdiag_cost hold server|client N PORT   # N connections to 127.0.0.1:PORT, held until stdin closes
//!   sockdiag_cost dump TICKS INTERVAL_MS PORT # dumps of the sockets whose remote port is PORT
//!   sockdiag_cost dump-per-family TICKS INTERVAL_MS PORT # the same, one dump (one walk) a family
//!   sockdiag_cost lookup TICKS INTERVAL_MS PORT # the same sockets looked up by 4-tuple
//!   sockdiag_cost own SOCKETS TICKS [busy]    # K own sockets: getsockopt against a lookup
//!   sockdiag_cost command RUNS CMD [ARG…]     # CMD run RUNS times, stdout to /dev/null
//!
//! Each measuring mode prints one line of `key=value` figures.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tcplab_model::sockdiag::{Extensions, Families, Family, SocketKey, SocketSample};
use tcplab_model::sockfilter::{Filter, Side};
use tcplab_sys::sockdiag::{Query, SockDiag};
use tcplab_sys::sockopt;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| -> Result<&str> {
        Ok(args
            .get(i)
            .ok_or("missing argument (see the file's header)")?)
    };
    let num = |i: usize| -> Result<u64> { Ok(arg(i)?.parse()?) };
    match arg(0)? {
        "hold" => hold(arg(1)?, num(2)? as usize, num(3)? as u16),
        "dump" => sample(Mode::Dump, num(1)?, num(2)?, num(3)? as u16),
        "dump-per-family" => sample(Mode::DumpPerFamily, num(1)?, num(2)?, num(3)? as u16),
        "lookup" => sample(Mode::Lookup, num(1)?, num(2)?, num(3)? as u16),
        "own" => own(
            num(1)? as usize,
            num(2)?,
            args.get(3).is_some_and(|a| a == "busy"),
        ),
        "command" => command(num(1)?, &args[2..]),
        other => Err(format!("unknown mode {other:?}").into()),
    }
}

/// The soft descriptor limit raised to the hard one: N connections need N descriptors.
fn raise_fd_limit() -> Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is writable; then read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
    }
    Ok(())
}

fn hold(role: &str, n: usize, port: u16) -> Result<()> {
    raise_fd_limit()?;
    let mut held = Vec::with_capacity(n);
    match role {
        "server" => {
            let listener = TcpListener::bind(("127.0.0.1", port))?;
            println!("listening");
            while held.len() < n {
                held.push(listener.accept()?.0);
            }
        }
        "client" => {
            for _ in 0..n {
                held.push(TcpStream::connect(("127.0.0.1", port))?);
            }
        }
        other => return Err(format!("hold: unknown role {other:?}").into()),
    }
    println!("ready {}", held.len());
    // Until the bench closes our stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}

/// This process's CPU time (user, system), µs.
fn cpu_us() -> (i64, i64) {
    cpu_of(libc::RUSAGE_SELF)
}

fn cpu_of(who: libc::c_int) -> (i64, i64) {
    // SAFETY: an all-zero rusage is valid; getrusage writes it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is writable.
    unsafe { libc::getrusage(who, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    (us(usage.ru_utime), us(usage.ru_stime))
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Dump,
    DumpPerFamily,
    Lookup,
}

fn sample(mode: Mode, ticks: u64, interval_ms: u64, port: u16) -> Result<()> {
    let mut diag = SockDiag::open()?;
    let query = Query::new(Some(Filter::port(Side::Remote, port).compile()?));
    let mut samples: Vec<SocketSample> = Vec::new();
    diag.dump(&query, &mut samples)?;
    let keys: Vec<SocketKey> = samples.iter().map(|s| s.key).collect();
    let mut gone = Vec::new();
    let interval = Duration::from_millis(interval_ms);
    let (user0, sys0) = cpu_us();
    let start = Instant::now();
    let mut sampled = 0;
    for tick in 0..ticks {
        samples.clear();
        match mode {
            Mode::Dump => {
                diag.dump(&query, &mut samples)?;
            }
            Mode::DumpPerFamily => {
                for family in Family::BOTH {
                    let one = Query {
                        families: Families::Only(family),
                        ..query.clone()
                    };
                    diag.dump(&one, &mut samples)?;
                }
            }
            Mode::Lookup => diag.lookup(&keys, Extensions::ALL, &mut samples, &mut gone)?,
        }
        sampled += samples.len();
        if !interval.is_zero() {
            let next = interval * (tick as u32 + 1);
            if let Some(wait) = next.checked_sub(start.elapsed()) {
                sleep(wait);
            }
        }
    }
    let wall_us = start.elapsed().as_micros() as f64;
    let (user1, sys1) = cpu_us();
    let (user, sys) = ((user1 - user0) as f64, (sys1 - sys0) as f64);
    println!(
        "sockets={} ticks={ticks} per_socket_us={:.3} user_per_socket_us={:.3} sys_per_socket_us={:.3} per_tick_us={:.1} cpu_share={:.4}",
        sampled / ticks.max(1) as usize,
        (user + sys) / sampled.max(1) as f64,
        user / sampled.max(1) as f64,
        sys / sampled.max(1) as f64,
        (user + sys) / ticks.max(1) as f64,
        (user + sys) / wall_us,
    );
    Ok(())
}

/// K connections of this process's own on loopback: each tick samples them as the
/// engine does (getsockopt TCP_INFO and SO_MEMINFO per socket), then by one lookup with
/// every attribute; the sampling thread's CPU time of each way, per socket. `busy`:
/// each connection carries data meanwhile (a writer and a reader thread), so sampling
/// meets the socket locks the data path holds.
fn own(k: usize, ticks: u64, busy: bool) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let clients: Vec<TcpStream> = (0..k)
        .map(|_| TcpStream::connect(listener.local_addr()?))
        .collect::<std::io::Result<_>>()?;
    let servers: Vec<TcpStream> = (0..k)
        .map(|_| listener.accept().map(|(s, _)| s))
        .collect::<std::io::Result<_>>()?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if busy {
        for (client, server) in clients.iter().zip(&servers) {
            let (mut writer, mut reader) = (client.try_clone()?, server.try_clone()?);
            let (stop_w, stop_r) = (stop.clone(), stop.clone());
            std::thread::spawn(move || {
                let chunk = [0u8; 128 * 1024];
                while !stop_w.load(std::sync::atomic::Ordering::Relaxed) {
                    if std::io::Write::write_all(&mut writer, &chunk).is_err() {
                        break;
                    }
                }
            });
            std::thread::spawn(move || {
                let mut chunk = vec![0u8; 128 * 1024];
                while !stop_r.load(std::sync::atomic::Ordering::Relaxed) {
                    if matches!(reader.read(&mut chunk), Ok(0) | Err(_)) {
                        break;
                    }
                }
            });
        }
    }
    let keys: Vec<SocketKey> = clients
        .iter()
        .map(|c| Ok(SocketKey::tuple(c.local_addr()?, c.peer_addr()?)))
        .collect::<std::io::Result<_>>()?;
    let mut diag = SockDiag::open()?;
    let (mut out, mut gone) = (Vec::new(), Vec::new());
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let (u0, s0) = cpu_of(libc::RUSAGE_THREAD);
        for _ in 0..ticks {
            f()?;
        }
        let (u1, s1) = cpu_of(libc::RUSAGE_THREAD);
        Ok(((u1 - u0) + (s1 - s0)) as f64 / (ticks as f64 * k as f64))
    };
    let mut getsockopt = || -> Result<()> {
        for c in &clients {
            std::hint::black_box(sockopt::tcp_info(c.as_fd())?);
            std::hint::black_box(sockopt::meminfo(c.as_fd())?);
        }
        Ok(())
    };
    let mut lookup = || -> Result<()> {
        out.clear();
        diag.lookup(&keys, Extensions::ALL, &mut out, &mut gone)?;
        Ok(())
    };
    // Interleaved halves, so drift hits both ways alike.
    let (mut g, mut l) = (0.0, 0.0);
    for _ in 0..2 {
        g += time(&mut getsockopt)? / 2.0;
        l += time(&mut lookup)? / 2.0;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if !gone.is_empty() || out.len() != k {
        return Err(format!("lookup found {} of {k} own sockets", out.len()).into());
    }
    println!("sockets={k} getsockopt_per_socket_us={g:.3} lookup_per_socket_us={l:.3}");
    Ok(())
}

fn command(runs: u64, cmd: &[String]) -> Result<()> {
    let (program, args) = cmd.split_first().ok_or("command: nothing to run")?;
    let (u0, s0) = cpu_of(libc::RUSAGE_CHILDREN);
    for _ in 0..runs {
        let status = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            return Err(format!("{program} failed: {status}").into());
        }
    }
    let (u1, s1) = cpu_of(libc::RUSAGE_CHILDREN);
    println!(
        "runs={runs} per_run_us={:.1} user_per_run_us={:.1} sys_per_run_us={:.1}",
        ((u1 - u0) + (s1 - s0)) as f64 / runs as f64,
        (u1 - u0) as f64 / runs as f64,
        (s1 - s0) as f64 / runs as f64,
    );
    Ok(())
}
