//! The plain TUN forwarder with offloads: the emulator's throughput baseline.
//!
//! ```text
//! tun_forward --client-ns A --server-ns B [--segment | --segment-full | --segment-coalesce] [--no-offload]
//! ```
//! Opens namespaces A and B (creating those that do not exist, and deleting those at
//! exit), creates TUN `tun-c` in A (10.77.0.1/24, fd00:77::1/64) and `tun-s` in B
//! (.2, ::2), and forwards between them on two threads until SIGINT or SIGTERM, then
//! prints the counters. `--segment` splits every GSO super-packet into wire-size
//! segments with `NEEDS_CSUM` headers, `--segment-full` with full checksums computed
//! here, `--segment-coalesce` segments and merges the segments back (user-space GRO)
//! before writing. Measure with e.g.
//! `ip netns exec B iperf3 -s -D; ip netns exec A iperf3 -c 10.77.0.2 -t 5`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use tcplab_netsim::packet::CsumMode;
use tcplab_sys::netns::NetNs;
use tcplab_sys::tun::{self, ForwardMode, Offloads, TunOptions};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

struct Args {
    client: String,
    server: String,
    mode: ForwardMode,
    offloads: Offloads,
}

const USAGE: &str =
    "usage: tun_forward --client-ns A --server-ns B [--segment | --segment-full | --segment-coalesce] [--no-offload]";

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut client, mut server) = (None, None);
    let mut mode = ForwardMode::PassThrough;
    let mut offloads = Offloads::TSO;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--client-ns" => client = args.next(),
            "--server-ns" => server = args.next(),
            "--segment" => mode = ForwardMode::Segment(CsumMode::Partial),
            "--segment-full" => mode = ForwardMode::Segment(CsumMode::Full),
            "--segment-coalesce" => mode = ForwardMode::SegmentCoalesce,
            "--no-offload" => offloads = Offloads::NONE,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    match (client, server) {
        (Some(client), Some(server)) => Ok(Args {
            client,
            server,
            mode,
            offloads,
        }),
        _ => Err(USAGE.to_owned()),
    }
}

/// Opens namespace `name`, creating it if needed; true when created here.
fn open_or_create(name: &str) -> std::io::Result<(NetNs, bool)> {
    match NetNs::open(name) {
        Ok(ns) => Ok((ns, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((NetNs::create(name)?, true)),
        Err(e) => Err(e),
    }
}

fn run(args: &Args, created: &mut Vec<NetNs>) -> std::io::Result<()> {
    let (client, new) = open_or_create(&args.client)?;
    if new {
        created.push(client.clone());
    }
    let (server, new) = open_or_create(&args.server)?;
    if new {
        created.push(server.clone());
    }
    let opts = TunOptions {
        offloads: args.offloads,
        ..TunOptions::default()
    };
    let c4: IpAddr = Ipv4Addr::new(10, 77, 0, 1).into();
    let s4: IpAddr = Ipv4Addr::new(10, 77, 0, 2).into();
    let c6: IpAddr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1).into();
    let s6: IpAddr = Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 2).into();
    let tun_c = tun::create_in(&client, "tun-c", opts, &[(c4, 24), (c6, 64)])?;
    let tun_s = tun::create_in(&server, "tun-s", opts, &[(s4, 24), (s6, 64)])?;
    println!(
        "client netns {}: {} {c4}/24 {c6}/64",
        client.name(),
        tun_c.name()
    );
    println!(
        "server netns {}: {} {s4}/24 {s6}/64",
        server.name(),
        tun_s.name()
    );
    println!(
        "forwarding ({:?}, offloads {:?}) until SIGINT/SIGTERM",
        args.mode, args.offloads
    );

    let (up, down) = thread::scope(|scope| {
        let up = scope.spawn(|| tun::forward(&tun_c, &tun_s, args.mode, &STOP));
        let down = scope.spawn(|| tun::forward(&tun_s, &tun_c, args.mode, &STOP));
        (up.join(), down.join())
    });
    let up = up.map_err(|_| std::io::Error::other("up thread panicked"))??;
    let down = down.map_err(|_| std::io::Error::other("down thread panicked"))??;
    println!("up   {up:?}");
    println!("down {down:?}");
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let mut created = Vec::new();
    let result = run(&args, &mut created);
    for ns in &created {
        if let Err(e) = ns.delete() {
            eprintln!("warning: {e}");
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tun_forward: {e}");
            ExitCode::FAILURE
        }
    }
}
