//! TUN devices with `IFF_VNET_HDR` and offloads, the emulator's ends of a link.
//!
//! A TUN device is created in the network namespace of the calling *thread*
//! (`/dev/net/tun` binds the file to `current`'s namespace at `open`), so create it
//! inside [`NetNs::run`]/[`NetNs::try_run`]. The returned [`Tun`] then works from any
//! thread, and the device lives as long as the file is open. Addresses, MTU and link
//! state are set with the [`crate::netns`] functions, in the same namespace
//! ([`create_in`] does all of it). TUN devices have no ARP: a /24 on the device is
//! all the routing a lab needs.
//!
//! With [`TunOptions::vnet_hdr`], every packet read or written starts with a 10-byte
//! `struct virtio_net_hdr` (see [`tcplab_netsim::packet`]), little-endian on every host
//! (`TUNSETVNETLE`). With [`Offloads`] on, the kernel hands over GSO super-packets of up
//! to 64 KiB with `NEEDS_CSUM`, so reads need a buffer of [`MAX_PACKET`] bytes (a short
//! buffer silently truncates the packet). Writing such a packet, header included, into
//! another TUN makes that kernel accept it whole: it is handled as a GSO skb with
//! `CHECKSUM_PARTIAL`, which local delivery trusts without verifying.
//!
//! [`forward`] is a plain forwarder over two TUNs, the baseline of the emulator.

use std::ffi::CStr;
use std::io::{self, IoSlice};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use tcplab_netsim::packet::{Coalescer, CsumMode, Segmenter, VirtioNetHdr, MAX_SEGMENT_HEAD};

use crate::netns::{self, NetNs};

/// Largest buffer a read can fill: virtio header, IPv6 header, 64 KiB payload.
pub const MAX_PACKET: usize = VirtioNetHdr::LEN + 40 + 65535;

/// What the device tells the kernel it can take (`TUNSETOFFLOAD`): packets the kernel
/// sends *into* the device (that we read) may then be unchecksummed or GSO. Packets
/// we write may use any virtio feature regardless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offloads {
    /// `TUN_F_CSUM`: `NEEDS_CSUM` packets; required by all the others.
    pub csum: bool,
    /// `TUN_F_TSO4`: TCP/IPv4 super-packets.
    pub tso4: bool,
    /// `TUN_F_TSO6`: TCP/IPv6 super-packets.
    pub tso6: bool,
    /// `TUN_F_TSO_ECN`: super-packets with CWR set (`VIRTIO_NET_HDR_GSO_ECN`).
    pub tso_ecn: bool,
    /// `TUN_F_USO4 | TUN_F_USO6` (kernel ≥ 6.2; the kernel takes both or neither):
    /// UDP GSO super-packets (`VIRTIO_NET_HDR_GSO_UDP_L4`).
    pub uso: bool,
}

impl Offloads {
    /// Nothing: the kernel segments and checksums before handing packets over.
    pub const NONE: Offloads = Offloads {
        csum: false,
        tso4: false,
        tso6: false,
        tso_ecn: false,
        uso: false,
    };
    /// Checksum offload and TSO for both IP versions, with ECN.
    pub const TSO: Offloads = Offloads {
        csum: true,
        tso4: true,
        tso6: true,
        tso_ecn: true,
        uso: false,
    };
    /// [`Offloads::TSO`] and UDP segmentation offload.
    pub const ALL: Offloads = Offloads {
        uso: true,
        ..Offloads::TSO
    };

    /// The `TUNSETOFFLOAD` argument.
    pub fn bits(&self) -> libc::c_uint {
        let mut bits = 0;
        for (on, bit) in [
            (self.csum, libc::TUN_F_CSUM),
            (self.tso4, libc::TUN_F_TSO4),
            (self.tso6, libc::TUN_F_TSO6),
            (self.tso_ecn, libc::TUN_F_TSO_ECN),
            (self.uso, libc::TUN_F_USO4 | libc::TUN_F_USO6),
        ] {
            if on {
                bits |= bit;
            }
        }
        bits
    }
}

/// How to create a [`Tun`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunOptions {
    /// `IFF_VNET_HDR`: a virtio header in front of every packet. Offloads need it.
    pub vnet_hdr: bool,
    pub offloads: Offloads,
    /// `IFF_MULTI_QUEUE`: more queues can be opened with [`Tun::open_queue`].
    pub multi_queue: bool,
    /// `O_NONBLOCK` from the start; see also [`Tun::set_nonblocking`].
    pub nonblocking: bool,
    /// `TUNSETPERSIST`: the device outlives its descriptors, until it is deleted or its
    /// namespace goes. Closing the last descriptor of a device that does not persist
    /// unregisters it there and then, 15–30 ms of RCU grace periods each here; the
    /// kernel unregisters a persistent one with its namespace, in the background.
    pub persist: bool,
}

impl Default for TunOptions {
    /// Virtio header with [`Offloads::TSO`], one queue, blocking.
    fn default() -> Self {
        TunOptions {
            vnet_hdr: true,
            offloads: Offloads::TSO,
            multi_queue: false,
            nonblocking: false,
            persist: false,
        }
    }
}

/// One queue of a TUN device (`IFF_TUN | IFF_NO_PI`): IP packets, no link header.
/// Reads and writes take `&self`, so one thread can read while another writes.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    opts: TunOptions,
}

/// `struct ifreq` with the flags member of its union, padded to the kernel's 40 bytes.
#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tun {
    /// Creates (or, for multi-queue, attaches to) TUN device `name` in the calling
    /// thread's network namespace. `name` may hold a `%d` for the kernel to fill in;
    /// [`Tun::name`] gives the result. The device is down and has no address.
    pub fn create(name: &str, opts: TunOptions) -> io::Result<Tun> {
        let what = format!("creating tun {name}");
        Self::create_inner(name, opts).map_err(|e| context(e, &what))
    }

    fn create_inner(name: &str, opts: TunOptions) -> io::Result<Tun> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid interface name {name:?}"),
            ));
        }
        if opts.offloads != Offloads::NONE && !opts.vnet_hdr {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "offloads need the virtio header (vnet_hdr)",
            ));
        }
        let mut oflags = libc::O_RDWR | libc::O_CLOEXEC;
        if opts.nonblocking {
            oflags |= libc::O_NONBLOCK;
        }
        // SAFETY: a valid NUL-terminated path; the fd is owned right away.
        let fd = cvt(unsafe { libc::open(c"/dev/net/tun".as_ptr(), oflags) })?;
        // SAFETY: `fd` is a freshly opened descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };

        let mut ifr = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _pad: [0; 22],
        };
        for (dst, src) in ifr.name.iter_mut().zip(name.bytes()) {
            *dst = src as libc::c_char;
        }
        if opts.vnet_hdr {
            ifr.flags |= libc::IFF_VNET_HDR as libc::c_short;
        }
        if opts.multi_queue {
            ifr.flags |= libc::IFF_MULTI_QUEUE as libc::c_short;
        }
        // SAFETY: TUNSETIFF reads and writes back a `struct ifreq`, which `ifr` matches.
        cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) })?;
        // SAFETY: the kernel wrote back a NUL-terminated name of at most IFNAMSIZ bytes.
        let name = unsafe { CStr::from_ptr(ifr.name.as_ptr()) }
            .to_string_lossy()
            .into_owned();

        let tun = Tun { fd, name, opts };
        if opts.persist {
            // SAFETY: TUNSETPERSIST takes its argument by value.
            cvt(unsafe {
                libc::ioctl(tun.fd.as_raw_fd(), libc::TUNSETPERSIST, 1 as libc::c_ulong)
            })
            .map_err(|e| context(e, "TUNSETPERSIST"))?;
        }
        if opts.vnet_hdr {
            let size = VirtioNetHdr::LEN as libc::c_int;
            // SAFETY: both ioctls read one int through the pointer.
            cvt(unsafe { libc::ioctl(tun.fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size) })
                .map_err(|e| context(e, "TUNSETVNETHDRSZ"))?;
            let le: libc::c_int = 1;
            // SAFETY: as above.
            cvt(unsafe { libc::ioctl(tun.fd.as_raw_fd(), libc::TUNSETVNETLE, &le) })
                .map_err(|e| context(e, "TUNSETVNETLE"))?;
        }
        tun.set_offloads(opts.offloads)?;
        Ok(tun)
    }

    /// Opens one more queue of a multi-queue device. Like `create`, this must run on
    /// a thread in the device's namespace.
    pub fn open_queue(&self) -> io::Result<Tun> {
        if !self.opts.multi_queue {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("tun {} is not multi-queue", self.name),
            ));
        }
        Tun::create(&self.name, self.opts)
    }

    /// Sets what the kernel may hand over (`TUNSETOFFLOAD`). USO needs kernel 6.2.
    pub fn set_offloads(&self, offloads: Offloads) -> io::Result<()> {
        let bits = offloads.bits();
        // SAFETY: TUNSETOFFLOAD takes its argument by value.
        cvt(unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                bits as libc::c_ulong,
            )
        })
        .map_err(|e| {
            context(
                e,
                format_args!("TUNSETOFFLOAD {offloads:?} on {}", self.name),
            )
        })?;
        Ok(())
    }

    /// The interface name, as the kernel assigned it.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn options(&self) -> TunOptions {
        self.opts
    }

    /// Whether packets carry a virtio header.
    pub fn vnet_hdr(&self) -> bool {
        self.opts.vnet_hdr
    }

    /// Reads one packet (with its virtio header, if enabled). `buf` should hold
    /// [`MAX_PACKET`] bytes: the kernel truncates what does not fit. In nonblocking
    /// mode an empty queue is `ErrorKind::WouldBlock`.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        cvt_size(n)
    }

    /// Writes one packet (with its virtio header, if enabled). The kernel takes it
    /// whole or rejects it (`EINVAL` for a malformed virtio header or GSO packet).
    pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for reads of its length.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        cvt_size(n)
    }

    /// Writes one packet gathered from `bufs` (e.g. a segment's head and its payload
    /// borrowed from a super-packet), without copying them together first.
    pub fn writev(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let count = bufs.len().min(libc::c_int::MAX as usize) as libc::c_int;
        // SAFETY: IoSlice is ABI-compatible with iovec; the slices outlive the call.
        let n = unsafe { libc::writev(self.fd.as_raw_fd(), bufs.as_ptr().cast(), count) };
        cvt_size(n)
    }

    /// Sets or clears `O_NONBLOCK` (for poll/epoll on [`Tun::as_fd`]). The flag is
    /// per open file, so it affects every thread using this `Tun`.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        // SAFETY: plain fcntl calls on an open descriptor.
        let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
        let flags = if nonblocking {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        // SAFETY: as above.
        cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags) })?;
        Ok(())
    }

    /// Waits until a packet can be read or `timeout_ms` passes (-1: forever). Returns
    /// whether one is ready. EINTR counts as a timeout.
    pub fn wait_readable(&self, timeout_ms: i32) -> io::Result<bool> {
        crate::poll::wait_for(self, libc::POLLIN, timeout_ms)
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Creates TUN `name` inside `ns` and makes it usable: `lo` and the device up, the
/// given addresses (with their prefix lengths) on it. IPv6 addresses skip DAD.
pub fn create_in(
    ns: &NetNs,
    name: &str,
    opts: TunOptions,
    addrs: &[(IpAddr, u8)],
) -> io::Result<Tun> {
    ns.try_run(|| {
        let tun = Tun::create(name, opts)?;
        netns::link_up("lo")?;
        for &(addr, prefix) in addrs {
            netns::add_address(tun.name(), addr, prefix)?;
        }
        netns::link_up(tun.name())?;
        Ok(tun)
    })
}

/// What [`forward`] does with each packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardMode {
    /// Write every packet as read, super-packets whole: the fastest possible link.
    PassThrough,
    /// Split super-packets into wire-size segments as the kernel's GSO would, and
    /// write each one, with its checksum left to the receiver ([`CsumMode::Partial`])
    /// or computed here ([`CsumMode::Full`]). What the emulator must do wherever a
    /// per-packet effect applies.
    Segment(CsumMode),
    /// Segment ([`CsumMode::Partial`]), then merge the segments back with a
    /// [`Coalescer`] until the read queue is empty: per-packet work in user space,
    /// one write per run of segments. The emulator's fast path.
    SegmentCoalesce,
}

/// Counters of one [`forward`] direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ForwardStats {
    /// Packets read.
    pub packets_in: u64,
    /// Of which GSO super-packets.
    pub gso_in: u64,
    /// Bytes read, virtio headers excluded.
    pub bytes_in: u64,
    /// Packets written (segments, in segmenting mode).
    pub packets_out: u64,
    /// Most segments made of one packet.
    pub max_segments: u64,
    /// Packets dropped because they could not be parsed or segmented.
    pub malformed: u64,
    /// Writes the receiving device refused.
    pub write_errors: u64,
}

/// Copies packets from `from` to `to` until `stop` is set (checked at least every
/// 50 ms), on the calling thread; run one call per direction. Both devices need the
/// same `vnet_hdr` setting, and segmenting needs it on. Sets `from` nonblocking.
/// Returns the first read error; write errors are counted, not fatal.
pub fn forward(
    from: &Tun,
    to: &Tun,
    mode: ForwardMode,
    stop: &AtomicBool,
) -> io::Result<ForwardStats> {
    let vnet = from.vnet_hdr();
    if vnet != to.vnet_hdr() || (!vnet && mode != ForwardMode::PassThrough) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "forwarding {} to {}: both need the virtio header to segment, and the same setting to pass through",
                from.name, to.name
            ),
        ));
    }
    from.set_nonblocking(true)?;
    let mut stats = ForwardStats::default();
    let mut buf = vec![0u8; MAX_PACKET];
    let mut head = [0u8; MAX_SEGMENT_HEAD];
    let mut coalescer = Coalescer::new();
    while !stop.load(Ordering::Relaxed) {
        let n = match from.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Some(pkt) = coalescer.finish() {
                    count_write(&mut stats, to.write(pkt));
                }
                from.wait_readable(50)?;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(context(e, format_args!("reading {}", from.name))),
        };
        stats.packets_in += 1;
        let pkt = &buf[..n];
        let segment = match mode {
            ForwardMode::Segment(csum) => Some(csum),
            ForwardMode::SegmentCoalesce => Some(CsumMode::Partial),
            ForwardMode::PassThrough => None,
        };
        let (hdr, ip) = if vnet {
            match VirtioNetHdr::split(pkt) {
                Ok(split) => split,
                Err(_) => {
                    stats.malformed += 1;
                    continue;
                }
            }
        } else {
            (VirtioNetHdr::default(), pkt)
        };
        stats.bytes_in += ip.len() as u64;
        if hdr.is_gso() {
            stats.gso_in += 1;
        }
        let Some(csum) = segment else {
            count_write(&mut stats, to.write(pkt));
            stats.max_segments = stats.max_segments.max(1);
            continue;
        };
        let seg = match Segmenter::new(&hdr, ip) {
            Ok(seg) => seg,
            Err(_) => {
                stats.malformed += 1;
                continue;
            }
        };
        if mode == ForwardMode::SegmentCoalesce {
            if seg.is_gso() {
                for i in 0..seg.len() {
                    let h = seg.head(i, csum, true, &mut head);
                    coalesce(&mut coalescer, &mut stats, to, &head[..h], seg.payload(i));
                }
            } else {
                let (h, p) = pkt.split_at(0);
                coalesce(&mut coalescer, &mut stats, to, h, p);
            }
        } else if !seg.is_gso() && csum == CsumMode::Partial {
            // Unchanged: save the copy of the head.
            count_write(&mut stats, to.write(pkt));
        } else if seg.head_len(0, true) > head.len() {
            // A checksum field beyond the fixed head (IPv6 extension headers).
            let mut out = vec![0u8; n];
            match seg.write_segment(0, csum, true, &mut out) {
                Ok(len) => count_write(&mut stats, to.write(&out[..len])),
                Err(_) => stats.malformed += 1,
            }
        } else {
            for i in 0..seg.len() {
                let h = seg.head(i, csum, true, &mut head);
                let bufs = [IoSlice::new(&head[..h]), IoSlice::new(seg.payload(i))];
                count_write(&mut stats, to.writev(&bufs));
            }
        }
        stats.max_segments = stats.max_segments.max(seg.len() as u64);
    }
    Ok(stats)
}

/// Offers one packet (`head` + `payload`; an empty head means a contiguous packet in
/// `payload`) to the coalescer, writing what it refuses in order.
fn coalesce(c: &mut Coalescer, stats: &mut ForwardStats, to: &Tun, head: &[u8], payload: &[u8]) {
    let push = |c: &mut Coalescer| {
        if head.is_empty() {
            c.push(payload)
        } else {
            c.push_split(head, payload)
        }
    };
    if push(c) {
        return;
    }
    if let Some(pkt) = c.finish() {
        count_write(stats, to.write(pkt));
    }
    if !push(c) {
        count_write(
            stats,
            to.writev(&[IoSlice::new(head), IoSlice::new(payload)]),
        );
    }
}

fn count_write(stats: &mut ForwardStats, result: io::Result<usize>) {
    match result {
        Ok(_) => stats.packets_out += 1,
        Err(_) => stats.write_errors += 1,
    }
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Prefixes `e` with what was being done, keeping its kind.
fn context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::privileged_or_skip;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};
    use std::thread;
    use std::time::{Duration, Instant};

    #[test]
    fn tun_offload_bits() {
        assert_eq!(Offloads::NONE.bits(), 0);
        assert_eq!(Offloads::TSO.bits(), 0x0f);
        assert_eq!(Offloads::ALL.bits(), 0x6f);
        let opts = TunOptions {
            vnet_hdr: false,
            ..TunOptions::default()
        };
        let err = Tun::create("tl-x", opts).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let err = Tun::create("a-name-longer-than-15", TunOptions::default()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    /// Two namespaces joined by two TUNs and a two-thread forwarder; deletes the
    /// namespaces on drop (after the devices are closed).
    struct TunLab {
        client: NetNs,
        server: NetNs,
        tun_c: Option<Tun>,
        tun_s: Option<Tun>,
    }

    const V4_C: Ipv4Addr = Ipv4Addr::new(10, 0x77, 1, 1);
    const V4_S: Ipv4Addr = Ipv4Addr::new(10, 0x77, 1, 2);
    const V6_C: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 1, 0, 0, 0, 0, 1);
    const V6_S: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 1, 0, 0, 0, 0, 2);

    impl TunLab {
        fn new(tag: &str) -> TunLab {
            let prefix = format!("tl{}-{tag}", std::process::id());
            let client = NetNs::create(&format!("{prefix}-c")).unwrap();
            let server = NetNs::create(&format!("{prefix}-s")).unwrap();
            let mut lab = TunLab {
                client,
                server,
                tun_c: None,
                tun_s: None,
            };
            let opts = TunOptions::default();
            lab.tun_c = Some(
                create_in(
                    &lab.client,
                    "tun-c",
                    opts,
                    &[(V4_C.into(), 24), (V6_C.into(), 64)],
                )
                .unwrap(),
            );
            lab.tun_s = Some(
                create_in(
                    &lab.server,
                    "tun-s",
                    opts,
                    &[(V4_S.into(), 24), (V6_S.into(), 64)],
                )
                .unwrap(),
            );
            lab
        }

        /// Runs `f` while packets are forwarded both ways; returns the up and down
        /// counters.
        fn with_forwarder<T>(
            &self,
            mode: ForwardMode,
            f: impl FnOnce() -> T,
        ) -> (T, ForwardStats, ForwardStats) {
            let (c, s) = (self.tun_c.as_ref().unwrap(), self.tun_s.as_ref().unwrap());
            let stop = AtomicBool::new(false);
            thread::scope(|scope| {
                let up = scope.spawn(|| forward(c, s, mode, &stop).unwrap());
                let down = scope.spawn(|| forward(s, c, mode, &stop).unwrap());
                let out = f();
                stop.store(true, Ordering::Relaxed);
                (out, up.join().unwrap(), down.join().unwrap())
            })
        }
    }

    impl Drop for TunLab {
        fn drop(&mut self) {
            self.tun_c = None;
            self.tun_s = None;
            for ns in [&self.client, &self.server] {
                if let Err(e) = ns.delete() {
                    eprintln!("warning: {e}");
                }
            }
        }
    }

    const BLOCK: usize = 64 * 1024;

    /// A 64-bit hash over 8-byte words, chained across blocks.
    fn hash_block(mut h: u64, block: &[u8]) -> u64 {
        for w in block.chunks_exact(8) {
            let w = u64::from_le_bytes(w.try_into().unwrap());
            h = (h ^ w).wrapping_mul(0x100_0000_01b3).rotate_left(23);
        }
        h
    }

    fn fill_block(state: &mut u64, block: &mut [u8]) {
        for w in block.chunks_exact_mut(8) {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            w.copy_from_slice(&state.to_le_bytes());
        }
    }

    /// Sends `blocks` pseudo-random 64 KiB blocks from the client to the server and
    /// back (a quarter of it), comparing hashes of what was sent and received.
    fn transfer(lab: &TunLab, server: IpAddr, blocks: usize) -> Duration {
        let listener = lab
            .server
            .try_run(|| TcpListener::bind((server, 0)))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let start = Instant::now();
        let receiver = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut block = vec![0u8; BLOCK];
            let mut h = 0;
            for _ in 0..blocks {
                conn.read_exact(&mut block).unwrap();
                h = hash_block(h, &block);
            }
            // Some data the other way too, so both directions carry super-packets.
            let mut state = 7u64;
            let mut sent = 0;
            for _ in 0..blocks / 4 {
                fill_block(&mut state, &mut block);
                sent = hash_block(sent, &block);
                conn.write_all(&block).unwrap();
            }
            (h, sent)
        });
        let mut conn = lab
            .client
            .try_run(|| TcpStream::connect((server, port)))
            .unwrap();
        let mut state = 0x1234_5678u64;
        let mut block = vec![0u8; BLOCK];
        let mut sent = 0;
        for _ in 0..blocks {
            fill_block(&mut state, &mut block);
            sent = hash_block(sent, &block);
            conn.write_all(&block).unwrap();
        }
        let mut back = 0;
        for _ in 0..blocks / 4 {
            conn.read_exact(&mut block).unwrap();
            back = hash_block(back, &block);
        }
        let (received, sent_back) = receiver.join().unwrap();
        assert_eq!(received, sent, "client → server data differs");
        assert_eq!(back, sent_back, "server → client data differs");
        start.elapsed()
    }

    /// `InCsumErrors` of TCP (IPv4 and IPv6 together) in `ns`'s /proc/net/snmp.
    fn tcp_csum_errors(ns: &NetNs) -> u64 {
        ns.run(|| {
            crate::snmp::counter("Tcp", "InCsumErrors")
                .unwrap()
                .unwrap()
        })
        .unwrap()
    }

    fn check_modes(tag: &str, v6: bool) {
        let lab = TunLab::new(tag);
        let server: IpAddr = if v6 { V6_S.into() } else { V4_S.into() };
        let blocks = 50 * 1024 * 1024 / BLOCK;
        for mode in [
            ForwardMode::PassThrough,
            ForwardMode::Segment(CsumMode::Partial),
            ForwardMode::Segment(CsumMode::Full),
            ForwardMode::SegmentCoalesce,
        ] {
            let (took, up, down) = lab.with_forwarder(mode, || transfer(&lab, server, blocks));
            eprintln!("{tag} {mode:?}: 50 MB + 12.5 MB in {took:?}; up {up:?}; down {down:?}");
            assert_eq!(up.malformed + down.malformed, 0);
            assert_eq!(up.write_errors + down.write_errors, 0);
            assert!(up.gso_in > 0, "no super-packet seen: offloads are off");
            assert!(up.bytes_in >= 50 * 1024 * 1024);
            match mode {
                ForwardMode::PassThrough => assert_eq!(up.packets_out, up.packets_in),
                ForwardMode::SegmentCoalesce => {
                    // Runs merged again: far fewer writes than segments.
                    assert!(up.max_segments > 1);
                    assert!(up.packets_out < 50 * 1024 * 1024 / 1448 / 4);
                }
                ForwardMode::Segment(_) => {
                    assert!(up.max_segments > 1);
                    assert!(up.packets_out > up.packets_in);
                    // No segment exceeds the MTU: 1500 - 40 - 12 (timestamps) bytes.
                    assert!(up.packets_out as usize >= 50 * 1024 * 1024 / 1448);
                }
            }
        }
        // With CsumMode::Full the receivers verified every segment's checksum.
        assert_eq!(tcp_csum_errors(&lab.client), 0);
        assert_eq!(tcp_csum_errors(&lab.server), 0);
    }

    #[test]
    fn tun_forward_tcp_v4_pass_through_and_segmenting() {
        if !privileged_or_skip("tun_forward_tcp_v4_pass_through_and_segmenting") {
            return;
        }
        check_modes("tun4", false);
    }

    #[test]
    fn tun_forward_tcp_v6_pass_through_and_segmenting() {
        if !privileged_or_skip("tun_forward_tcp_v6_pass_through_and_segmenting") {
            return;
        }
        check_modes("tun6", true);
    }

    #[test]
    fn tun_create_reads_offloaded_packets_and_names() {
        if !privileged_or_skip("tun_create_reads_offloaded_packets_and_names") {
            return;
        }
        let ns = NetNs::create(&format!("tl{}-tunc", std::process::id())).unwrap();
        let result = ns.try_run(|| {
            let opts = TunOptions {
                nonblocking: true,
                ..TunOptions::default()
            };
            let tun = Tun::create("tlt%d", opts)?;
            let again = Tun::create(tun.name(), opts).map(|_| ());
            let mq = TunOptions {
                multi_queue: true,
                ..opts
            };
            let q = Tun::create("tlq0", mq)?;
            let q2 = q.open_queue()?;
            Ok((tun.name().to_owned(), again, q2.name().to_owned(), tun))
        });
        ns.delete().unwrap();
        let (name, again, q2, tun) = result.unwrap();
        assert!(name.starts_with("tlt"), "{name}");
        // A second open of a single-queue device is refused (EBUSY).
        assert!(again.is_err());
        assert_eq!(q2, "tlq0");
        let mut buf = vec![0u8; MAX_PACKET];
        // Down, no traffic: nonblocking read is WouldBlock, poll times out.
        assert_eq!(
            tun.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert!(!tun.wait_readable(1).unwrap());
    }

    /// A SYN from the client's address to `port`, written straight into tun-s.
    fn syn(port: u16, sport: u16, vnet: VirtioNetHdr, corrupt_after_checksum: bool) -> Vec<u8> {
        use tcplab_netsim::packet::{internet_checksum, pseudo_header_sum};
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&V4_C.octets());
        p[16..20].copy_from_slice(&V4_S.octets());
        let c = internet_checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&port.to_be_bytes());
        p[24..28].copy_from_slice(&1000u32.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x02;
        p[34..36].copy_from_slice(&64000u16.to_be_bytes());
        let seed = pseudo_header_sum(&V4_C.octets(), &V4_S.octets(), 6, 20);
        let field = if vnet.needs_csum() {
            seed
        } else {
            !tcplab_netsim::packet::csum_add(seed, tcplab_netsim::packet::csum_sum(&p[20..]))
        };
        p[36..38].copy_from_slice(&field.to_be_bytes());
        if corrupt_after_checksum {
            p[34] ^= 0x10; // the window, as a corrupting link would
        }
        [&vnet.to_bytes()[..], &p].concat()
    }

    /// Whether tun-s emits a SYN-ACK to `sport` within a second.
    fn syn_ack_seen(tun: &Tun, sport: u16) -> bool {
        tun.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; MAX_PACKET];
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            match tun.read(&mut buf) {
                Ok(n) => {
                    let ip = &buf[VirtioNetHdr::LEN..n];
                    if ip[0] >> 4 == 4 && ip[9] == 6 && ip[22..24] == sport.to_be_bytes() {
                        return ip[33] == 0x12;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tun.wait_readable(10).unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
        false
    }

    #[test]
    fn tun_receiver_verifies_full_checksums_and_trusts_needs_csum() {
        if !privileged_or_skip("tun_receiver_verifies_full_checksums_and_trusts_needs_csum") {
            return;
        }
        let lab = TunLab::new("csum");
        let listener = lab.server.try_run(|| TcpListener::bind((V4_S, 0))).unwrap();
        let port = listener.local_addr().unwrap().port();
        let tun = lab.tun_s.as_ref().unwrap();
        let full = VirtioNetHdr::default();
        let partial = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            csum_start: 20,
            csum_offset: 16,
            ..VirtioNetHdr::default()
        };
        // A complete, correct checksum: accepted.
        tun.write(&syn(port, 40001, full, false)).unwrap();
        assert!(syn_ack_seen(tun, 40001));
        // Corrupted after checksumming, no NEEDS_CSUM: verified and dropped.
        let before = tcp_csum_errors(&lab.server);
        tun.write(&syn(port, 40002, full, true)).unwrap();
        assert!(!syn_ack_seen(tun, 40002));
        assert_eq!(tcp_csum_errors(&lab.server), before + 1);
        // NEEDS_CSUM is trusted: the same corruption gets through. Hence corrupt
        // only packets written with complete checksums.
        tun.write(&syn(port, 40003, partial, true)).unwrap();
        assert!(syn_ack_seen(tun, 40003));
        assert_eq!(tcp_csum_errors(&lab.server), before + 1);
    }
}
