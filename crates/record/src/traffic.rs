//! Whose a packet is: the test's, or tcplab's own control connection or probes. A
//! lab's links count each apart (how they tell them is the simulation's).

use serde::{Deserialize, Serialize};

/// The kinds of traffic a lab's links count apart.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Traffic {
    /// The test's flows: every packet that is not tcplab's own (all of a lab's traffic
    /// where tcplab runs no test of its own, as `lab up`).
    #[default]
    Test,
    /// tcplab's control connection: its handshake, the live intervals, and the samples
    /// each end sends after the test.
    Control,
    /// tcplab's round-trip probes (`--probe`) and their echoes.
    Probe,
}

impl Traffic {
    pub const ALL: [Traffic; 3] = [Traffic::Test, Traffic::Control, Traffic::Probe];
    pub const COUNT: usize = Traffic::ALL.len();

    /// The name in JSON and the text output.
    pub fn name(self) -> &'static str {
        match self {
            Traffic::Test => "test",
            Traffic::Control => "control",
            Traffic::Probe => "probe",
        }
    }

    /// Its place in [`Traffic::ALL`], for per-kind arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn is_test(&self) -> bool {
        *self == Traffic::Test
    }
}
