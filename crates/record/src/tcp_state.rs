//! A TCP socket's state, as the kernel numbers it and as a run records it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A TCP state as the kernel numbers it (include/net/tcp_states.h). The kernel reports
/// a request socket (`TCP_NEW_SYN_RECV`) as [`TcpState::SynRecv`] and a bound, inactive
/// one as [`TcpState::Close`], so these eleven are all a reply carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum TcpState {
    Established = 1,
    SynSent = 2,
    SynRecv = 3,
    FinWait1 = 4,
    FinWait2 = 5,
    TimeWait = 6,
    Close = 7,
    CloseWait = 8,
    LastAck = 9,
    Listen = 10,
    Closing = 11,
}

impl TcpState {
    pub const ALL: [TcpState; 11] = [
        TcpState::Established,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::FinWait1,
        TcpState::FinWait2,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::Listen,
        TcpState::Closing,
    ];

    /// The state of the kernel's number, `None` for one this decoder does not know.
    pub fn from_kernel(state: u8) -> Option<TcpState> {
        TcpState::ALL.into_iter().find(|s| *s as u8 == state)
    }

    /// The kernel's name without `TCP_`, as tracepoints print it (`ESTABLISHED`).
    pub fn name(self) -> &'static str {
        match self {
            TcpState::Established => "ESTABLISHED",
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::FinWait1 => "FIN_WAIT1",
            TcpState::FinWait2 => "FIN_WAIT2",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::Listen => "LISTEN",
            TcpState::Closing => "CLOSING",
        }
    }
}

impl fmt::Display for TcpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
