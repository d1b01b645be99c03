//! The kernel's events of a test's sockets as a run records them: what a tcp
//! tracepoint said (its parsing and attribution are the analysis's).

use serde::{Deserialize, Serialize};

use crate::Host;

/// The kernel's congestion state (`enum tcp_ca_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaState {
    Open,
    Disorder,
    Cwr,
    Recovery,
    Loss,
}

impl CaState {
    pub fn from_kernel(value: u8) -> Option<CaState> {
        Some(match value {
            0 => CaState::Open,
            1 => CaState::Disorder,
            2 => CaState::Cwr,
            3 => CaState::Recovery,
            4 => CaState::Loss,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CaState::Open => "open",
            CaState::Disorder => "disorder",
            CaState::Cwr => "cwr",
            CaState::Recovery => "recovery",
            CaState::Loss => "loss",
        }
    }
}

/// What one tracepoint said. Windows and buffers in bytes, cwnd and ssthresh in
/// segments, sequence numbers as the kernel's 32-bit ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KernelEvent {
    /// A segment arrived (tcp_probe); the state before the kernel processed it.
    Probe {
        data_len: u32,
        snd_nxt: u32,
        snd_una: u32,
        snd_cwnd: u32,
        ssthresh: u32,
        snd_wnd: u32,
        srtt_us: u32,
        rcv_wnd: u32,
    },
    /// A retransmission (tcp_retransmit_skb that succeeded): one skb, perhaps several
    /// segments.
    Retransmit,
    /// The congestion state changed to `state` (tcp_cong_state_set).
    CongState { state: CaState },
    /// The receive buffer grew (tcp_rcvbuf_grow).
    RcvbufGrow {
        rcvbuf: u32,
        rcv_ssthresh: u32,
        window_clamp: u32,
        rcv_wnd: u32,
    },
}

impl KernelEvent {
    /// A probe that says only a sender's windows (the rest 0): what a constructed run
    /// needs.
    pub fn window_probe(snd_cwnd: u32, ssthresh: u32, snd_wnd: u32) -> KernelEvent {
        KernelEvent::Probe {
            data_len: 0,
            snd_nxt: 0,
            snd_una: 0,
            snd_cwnd,
            ssthresh,
            snd_wnd,
            srtt_us: 0,
            rcv_wnd: 0,
        }
    }

    /// The event's kind as the JSON and the store name it.
    pub fn kind(&self) -> &'static str {
        match self {
            KernelEvent::Probe { .. } => "probe",
            KernelEvent::Retransmit => "retransmit",
            KernelEvent::CongState { .. } => "cong_state",
            KernelEvent::RcvbufGrow { .. } => "rcvbuf_grow",
        }
    }
}

/// One event of one flow's socket at one end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    pub flow: u32,
    /// The end whose socket the event belongs to.
    pub host: Host,
    /// µs since t0 on the client's clock.
    pub t_us: i64,
    #[serde(flatten)]
    pub event: KernelEvent,
}

/// Whether a run's kernel events were taken, and how many.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRecord {
    pub taken: bool,
    /// Why not, when they were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Events stored with the run.
    pub events: u64,
    /// Events the kernel's ring buffer overwrote before they were read.
    pub lost: u64,
}

impl TraceRecord {
    /// One run's record of several tests' traces: taken if every one was, the first
    /// note; `None` when none was asked for.
    pub fn combine(traces: Vec<TraceRecord>) -> Option<TraceRecord> {
        if traces.is_empty() {
            return None;
        }
        Some(TraceRecord {
            taken: traces.iter().all(|t| t.taken),
            note: traces.iter().find_map(|t| t.note.clone()),
            events: traces.iter().map(|t| t.events).sum(),
            lost: traces.iter().map(|t| t.lost).sum(),
        })
    }
}
