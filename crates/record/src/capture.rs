//! Where a capture sees a run's packets, and what it took: the parts of a capture the
//! run's record keeps (the packets themselves are in the pcapng file).

use serde::{Deserialize, Serialize};

use crate::Direction;

/// Where a capture sees the packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CapturePoint {
    /// Each direction where it enters its bottleneck, drops included: what the link
    /// did, packet by packet.
    #[default]
    Bottleneck,
    /// The client's interface: what the client sent, when it sent it (those lost on
    /// the way included, with their fate), and what reached it, when it arrived.
    Client,
    /// The server's interface, likewise.
    Server,
}

/// What a capture point sees of one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vantage {
    /// Every packet, when it entered the bottleneck.
    Bottleneck,
    /// Every packet, when its sender sent it.
    Sender,
    /// The packets that got through, when they arrived.
    Receiver,
}

impl CapturePoint {
    pub const ALL: [CapturePoint; 3] = [
        CapturePoint::Bottleneck,
        CapturePoint::Client,
        CapturePoint::Server,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CapturePoint::Bottleneck => "bottleneck",
            CapturePoint::Client => "client",
            CapturePoint::Server => "server",
        }
    }

    pub fn is_bottleneck(&self) -> bool {
        *self == CapturePoint::Bottleneck
    }

    /// Where it sees the packets, as a line about the capture says it.
    pub fn place(self) -> &'static str {
        match self {
            CapturePoint::Bottleneck => "at the bottleneck's entry",
            CapturePoint::Client => "at the client's interface",
            CapturePoint::Server => "at the server's interface",
        }
    }

    /// What it sees of `direction` (up: client → server).
    pub fn vantage(self, direction: Direction) -> Vantage {
        match (self, direction) {
            (CapturePoint::Bottleneck, _) => Vantage::Bottleneck,
            (CapturePoint::Client, Direction::Up) | (CapturePoint::Server, Direction::Down) => {
                Vantage::Sender
            }
            (CapturePoint::Client, Direction::Down) | (CapturePoint::Server, Direction::Up) => {
                Vantage::Receiver
            }
        }
    }

    /// Whether a packet of `direction` leaves the capture's host (pcapng's outbound),
    /// rather than arrives; seen from the client at the bottleneck.
    pub fn outbound(self, direction: Direction) -> bool {
        match self {
            CapturePoint::Bottleneck | CapturePoint::Client => direction == Direction::Up,
            CapturePoint::Server => direction == Direction::Down,
        }
    }
}

/// What a capture took, in the run's record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureCounts {
    /// Packets recorded with their fate.
    pub packets: u64,
    /// Packets the writer had no room for (its buffer was full): the link carried
    /// them, the file lacks them.
    pub overflow: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_sees_what_it_sends_and_what_reaches_it() {
        use Direction::{Down, Up};
        let seen = |point: CapturePoint| [Up, Down].map(|d| (point.vantage(d), point.outbound(d)));
        assert_eq!(
            seen(CapturePoint::Bottleneck),
            [(Vantage::Bottleneck, true), (Vantage::Bottleneck, false)]
        );
        assert_eq!(
            seen(CapturePoint::Client),
            [(Vantage::Sender, true), (Vantage::Receiver, false)]
        );
        assert_eq!(
            seen(CapturePoint::Server),
            [(Vantage::Receiver, false), (Vantage::Sender, true)]
        );
        let names: Vec<&str> = CapturePoint::ALL.map(CapturePoint::name).to_vec();
        assert_eq!(names, ["bottleneck", "client", "server"]);
    }
}
