//! Runs across labs: [`labrun`] runs one set of flows through a lab built for it;
//! [`sweep`] runs an experiment's plan, resumably, into its database; [`estimate`] says
//! how long that will take.

pub mod estimate;
pub mod labrun;
pub mod merge;
pub mod programs;
pub mod sweep;
pub mod watch;
