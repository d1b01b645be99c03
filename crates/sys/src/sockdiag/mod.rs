//! TCP sockets sampled through netlink sock_diag, any socket of a namespace: one dump
//! per tick for every socket a kernel-side filter accepts, or a lookup of known sockets
//! by their 4-tuple. A thin shell over [`tcplab_model::sockdiag`] (the messages and their
//! decoding) and [`tcplab_model::sockfilter`] (the filter's bytecode): this module only
//! moves bytes and reads the clock.
//!
//! ```no_run
//! use tcplab_model::sockdiag::SocketSample;
//! use tcplab_model::sockfilter::{Filter, Side};
//! use tcplab_sys::sockdiag::{Query, SockDiag};
//!
//! let mut diag = SockDiag::open()?;
//! let query = Query::new(Some(Filter::port(Side::Local, 5201).compile()?));
//! let mut samples: Vec<SocketSample> = Vec::new();
//! diag.dump(&query, &mut samples)?; // every tick; samples.clear() between
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What costs what (docs/performance.md has the figures): a dump walks the kernel's whole
//! established-socket hash table once per address family, matching or not — on a big
//! host that walk is a fixed cost per tick — and then fills each matching socket; a
//! [`SockDiag::lookup`] walks nothing and fills only the sockets named. The sampler's
//! own user-space work per socket is small next to the kernel's.
//!
//! What can be lost: a socket that opens and closes between two dumps is never seen (the
//! `sock:inet_sock_set_state` tracepoint tells of it, and [`SockDiag::lookup`] samples it
//! at once); a socket in TIME_WAIT, or in FIN_WAIT2 once its application closed it, no
//! longer has tcp_info (see [`tcplab_model::sockdiag`]). Without privileges the kernel
//! shows every socket of the namespace all the same, with tcp_info.

mod owners;

pub use owners::{cgroup2_root, cgroup_id, cgroup_of, socket_inodes, Owner, Owners};

use std::io;
use std::os::fd::AsRawFd;

use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};
use tcplab_model::sockdiag::{
    encode_dump, encode_lookup, messages, DecodeError, Extensions, Families, Message, SocketKey,
    SocketSample, StateSet,
};
use tcplab_model::sockfilter::Bytecode;

use crate::clock::monotonic_us;
use crate::netns::NetNs;

/// One dump's question: which families, states and attributes, and which sockets.
#[derive(Clone, Debug)]
pub struct Query {
    /// Both by default, in one dump: an IPv4 peer may be on an IPv6 socket
    /// (`::ffff:a.b.c.d`).
    pub families: Families,
    pub states: StateSet,
    pub extensions: Extensions,
    /// Run by the kernel on every socket; `None` takes all.
    pub filter: Option<Bytecode>,
}

impl Query {
    /// Both families, the connected states ([`StateSet::CONNECTED`]), every attribute.
    pub fn new(filter: Option<Bytecode>) -> Query {
        Query {
            families: Families::Both,
            states: StateSet::CONNECTED,
            extensions: Extensions::ALL,
            filter,
        }
    }
}

/// Why sampling failed. Each message is one line naming the cause.
#[derive(Debug, thiserror::Error)]
pub enum SockDiagError {
    /// The cause is part of the message, not a `source`: chains would print it twice.
    #[error("opening a sock_diag socket: {0}")]
    Open(io::Error),
    #[error("sock_diag: {0}")]
    Io(io::Error),
    #[error("the kernel refused the socket filter{}", if *.cgroup { " (a cgroup condition needs Linux 5.10+)" } else { "" })]
    FilterRefused { cgroup: bool },
    #[error("the kernel refused a sock_diag request: {0}")]
    Refused(io::Error),
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("{lost} of {asked} sock_diag replies lost (the socket's receive buffer overflowed)")]
    Overrun { lost: usize, asked: usize },
    #[error("a sock_diag reply of {len} bytes does not fit the {buffer}-byte buffer")]
    Truncated { len: usize, buffer: usize },
}

/// Sockets asked for in one lookup batch: their replies wait in the netlink socket's
/// receive buffer together (about 2 KiB each of its memory).
const LOOKUP_BATCH: usize = 64;
/// Room for one reply of a lookup: a few hundred bytes, grown with tcp_info.
const LOOKUP_SLOT: usize = 4096;
/// Room for one datagram of a dump: the kernel fills at most 32 KiB per read.
const DUMP_BUFFER: usize = 64 * 1024;
/// Asked of SO_RCVBUF (capped at net.core.rmem_max): a lookup batch's replies.
const RECEIVE_BUFFER: usize = 1 << 20;

/// A NETLINK_SOCK_DIAG socket of one network namespace (the one it was opened in, for
/// good: it may be used from any thread), with its buffers. Not shared: one per sampler.
pub struct SockDiag {
    socket: Socket,
    buffer: Vec<u8>,
    request: Vec<u8>,
    seq: u32,
}

impl SockDiag {
    /// A socket of the calling thread's network namespace.
    pub fn open() -> Result<SockDiag, SockDiagError> {
        Self::open_socket().map_err(SockDiagError::Open)
    }

    /// A socket of namespace `ns`, opened on a thread inside it ([`NetNs::run`]): it sees
    /// that namespace's sockets from whichever thread uses it.
    pub fn open_in(ns: &NetNs) -> Result<SockDiag, SockDiagError> {
        ns.try_run(Self::open_socket).map_err(SockDiagError::Open)
    }

    fn open_socket() -> io::Result<SockDiag> {
        let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        socket.set_rx_buf_sz(RECEIVE_BUFFER)?;
        Ok(SockDiag {
            socket,
            buffer: vec![0; DUMP_BUFFER.max(LOOKUP_BATCH * LOOKUP_SLOT)],
            request: Vec::new(),
            seq: 0,
        })
    }

    /// Dumps the sockets `query` asks for, appending one [`SocketSample`] per socket to
    /// `out` (each stamped when its reply was read), and returns how many. A socket that
    /// changes state during the dump is reported once, in either state.
    pub fn dump(
        &mut self,
        query: &Query,
        out: &mut Vec<SocketSample>,
    ) -> Result<usize, SockDiagError> {
        let before = out.len();
        let seq = self.next_seq();
        self.request.clear();
        encode_dump(
            &mut self.request,
            seq,
            query.families,
            query.states,
            query.extensions,
            query.filter.as_ref().map_or(&[], Bytecode::as_bytes),
        );
        self.send()?;
        if let Err(e) = self.read_dump(seq, out) {
            // The kernel refuses a new dump while one runs: read this one out first.
            self.drain(seq);
            return Err(match e {
                SockDiagError::Refused(e)
                    if e.raw_os_error() == Some(libc::EINVAL) && query.filter.is_some() =>
                {
                    SockDiagError::FilterRefused {
                        cgroup: query.filter.as_ref().is_some_and(Bytecode::uses_cgroup),
                    }
                }
                e => e,
            });
        }
        Ok(out.len() - before)
    }

    fn read_dump(&mut self, seq: u32, out: &mut Vec<SocketSample>) -> Result<(), SockDiagError> {
        loop {
            let len = self.recv(0)?;
            let t_us = monotonic_us();
            for message in messages(&self.buffer[..len], t_us) {
                match message? {
                    (s, _) if s != seq => {}
                    (_, Message::Socket(sample)) => out.push(sample),
                    (_, Message::Done) => return Ok(()),
                    (_, Message::Error { errno }) => {
                        return Err(SockDiagError::Refused(io::Error::from_raw_os_error(errno)))
                    }
                    (_, Message::Other) => {}
                }
            }
        }
    }

    /// Reads until dump `seq` is done or the socket has nothing more (its error was the
    /// end).
    fn drain(&mut self, seq: u32) {
        while let Ok(len) = self.recv(libc::MSG_DONTWAIT) {
            let done = messages(&self.buffer[..len], 0)
                .any(|m| matches!(m, Ok((s, Message::Done | Message::Error { .. })) if s == seq));
            if done {
                return;
            }
        }
    }

    /// Samples the sockets `keys` name, each looked up by its 4-tuple (and cookie, unless
    /// [`SocketKey::NO_COOKIE`]) — no walk over the others, so its cost follows
    /// `keys.len()` alone. Appends a sample per socket found to `out`, in the order of
    /// `keys`, and the index in `keys` of each socket gone (closed, or its 4-tuple now
    /// another socket's) to `gone`. A socket in TIME_WAIT is still found, without
    /// tcp_info. Where the socket is gone the kernel answers with the listener on its
    /// local address instead; that counts as gone. A batch of requests goes in one write and its
    /// replies come back in one read.
    pub fn lookup(
        &mut self,
        keys: &[SocketKey],
        extensions: Extensions,
        out: &mut Vec<SocketSample>,
        gone: &mut Vec<usize>,
    ) -> Result<(), SockDiagError> {
        for (batch, chunk) in keys.chunks(LOOKUP_BATCH).enumerate() {
            let first = self.seq.wrapping_add(1);
            self.request.clear();
            for key in chunk {
                let seq = self.next_seq();
                encode_lookup(&mut self.request, seq, key, extensions);
            }
            self.send()?;
            // The kernel answered every request before the write returned.
            let t_us = monotonic_us();
            let mut answered = 0;
            while answered < chunk.len() {
                let lens = match self.recv_batch(chunk.len() - answered) {
                    Ok(lens) => lens,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        return Err(SockDiagError::Overrun {
                            lost: chunk.len() - answered,
                            asked: chunk.len(),
                        })
                    }
                    Err(e) => return Err(SockDiagError::Io(e)),
                };
                for (slot, len) in lens.into_iter().enumerate() {
                    let datagram = &self.buffer[slot * LOOKUP_SLOT..][..len];
                    for message in messages(datagram, t_us) {
                        let (seq, message) = message?;
                        let index = batch * LOOKUP_BATCH + seq.wrapping_sub(first) as usize;
                        match message {
                            Message::Socket(sample) => {
                                let key = &keys[index];
                                if (sample.key.local, sample.key.remote) == (key.local, key.remote)
                                {
                                    out.push(sample);
                                } else {
                                    gone.push(index);
                                }
                            }
                            Message::Error {
                                errno: libc::ENOENT | libc::ESTALE,
                            } => gone.push(index),
                            Message::Error { errno } => {
                                return Err(SockDiagError::Refused(io::Error::from_raw_os_error(
                                    errno,
                                )))
                            }
                            Message::Done | Message::Other => continue,
                        }
                        answered += 1;
                    }
                }
            }
        }
        Ok(())
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn send(&mut self) -> Result<(), SockDiagError> {
        let sent = self
            .socket
            .send(&self.request, 0)
            .map_err(SockDiagError::Io)?;
        if sent != self.request.len() {
            return Err(SockDiagError::Io(io::Error::other(format!(
                "sent {sent} of a {}-byte request",
                self.request.len()
            ))));
        }
        Ok(())
    }

    /// One datagram into the buffer.
    fn recv(&mut self, flags: libc::c_int) -> Result<usize, SockDiagError> {
        let buffer = self.buffer.len();
        // SAFETY: the buffer is valid for `buffer` bytes for the call.
        let len = unsafe {
            libc::recv(
                self.socket.as_raw_fd(),
                self.buffer.as_mut_ptr().cast(),
                buffer,
                flags | libc::MSG_TRUNC,
            )
        };
        if len < 0 {
            return Err(SockDiagError::Io(io::Error::last_os_error()));
        }
        let len = len as usize;
        if len > buffer {
            return Err(SockDiagError::Truncated { len, buffer });
        }
        Ok(len)
    }

    /// Up to `count` datagrams already queued, one per slot of the buffer, without
    /// waiting (WouldBlock when there is none); their lengths.
    fn recv_batch(&mut self, count: usize) -> io::Result<Vec<usize>> {
        let base = self.buffer.as_mut_ptr();
        let mut iovecs: Vec<libc::iovec> = (0..count)
            .map(|slot| libc::iovec {
                // SAFETY: slot < LOOKUP_BATCH, so the slot lies inside the buffer.
                iov_base: unsafe { base.add(slot * LOOKUP_SLOT) }.cast(),
                iov_len: LOOKUP_SLOT,
            })
            .collect();
        let mut headers: Vec<libc::mmsghdr> = iovecs
            .iter_mut()
            .map(|iov| {
                // SAFETY: an all-zero msghdr is valid (no name, no control).
                let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
                header.msg_hdr.msg_iov = iov;
                header.msg_hdr.msg_iovlen = 1;
                header
            })
            .collect();
        // SAFETY: `headers` and the iovecs and buffer slots they point to outlive the call.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                headers.as_mut_ptr(),
                count as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut lens = Vec::with_capacity(n as usize);
        for header in &headers[..n as usize] {
            if header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                return Err(io::Error::other(format!(
                    "a sock_diag reply does not fit {LOOKUP_SLOT} bytes"
                )));
            }
            lens.push(header.msg_len as usize);
        }
        Ok(lens)
    }
}

#[cfg(test)]
mod tests;
