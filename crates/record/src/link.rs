//! What a link did to the packets that entered it, as a run records it.

use serde::{Deserialize, Serialize};

/// What happened in the link so far, to the packets of one kind of traffic or to all.
/// Every packet that entered (`packets_in`, copies included) is delivered, dropped or
/// still inside.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    /// Packets that entered, duplicates included.
    pub packets_in: u64,
    pub bytes_in: u64,
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    pub dropped_aqm: u64,
    pub dropped_oversize: u64,
    /// Packets a policer dropped (`police`).
    #[serde(default)]
    pub dropped_police: u64,
    /// Copies made by `duplicate`.
    pub duplicated: u64,
    /// Packets marked corrupt (decided on entry).
    pub corrupted: u64,
    /// Packets delivered after one that left the bottleneck later.
    pub reordered: u64,
    /// Packets an AQM marked Congestion Experienced instead of dropping them.
    #[serde(default)]
    pub marked_ce: u64,
    /// Now in the queue (not counting the one being serialized).
    pub queue_packets: u64,
    pub queue_bytes: u64,
    pub max_queue_bytes: u64,
}

impl LinkCounters {
    pub fn dropped(&self) -> u64 {
        self.dropped_loss
            + self.dropped_queue
            + self.dropped_aqm
            + self.dropped_oversize
            + self.dropped_police
    }

    /// Nothing entered.
    pub fn is_empty(&self) -> bool {
        self.packets_in == 0
    }

    /// The counts of `self` and `other` together; the queue's peak is the larger (the
    /// sum may exceed any moment's).
    pub fn plus(self, other: &LinkCounters) -> LinkCounters {
        LinkCounters {
            packets_in: self.packets_in + other.packets_in,
            bytes_in: self.bytes_in + other.bytes_in,
            delivered_packets: self.delivered_packets + other.delivered_packets,
            delivered_bytes: self.delivered_bytes + other.delivered_bytes,
            dropped_loss: self.dropped_loss + other.dropped_loss,
            dropped_queue: self.dropped_queue + other.dropped_queue,
            dropped_aqm: self.dropped_aqm + other.dropped_aqm,
            dropped_oversize: self.dropped_oversize + other.dropped_oversize,
            dropped_police: self.dropped_police + other.dropped_police,
            duplicated: self.duplicated + other.duplicated,
            corrupted: self.corrupted + other.corrupted,
            reordered: self.reordered + other.reordered,
            marked_ce: self.marked_ce + other.marked_ce,
            queue_packets: self.queue_packets + other.queue_packets,
            queue_bytes: self.queue_bytes + other.queue_bytes,
            max_queue_bytes: self.max_queue_bytes.max(other.max_queue_bytes),
        }
    }
}
