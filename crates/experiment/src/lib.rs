//! Runs across labs: [`labrun`] runs one set of flows through a lab built for it;
//! [`command`] runs a command flow's programs in one, every connection of its hosts
//! watched ([`programs`], [`watch`]); [`sweep`] runs an experiment's plan, resumably,
//! into its database; [`estimate`] says how long that will take.

pub mod command;
pub mod estimate;
pub mod labrun;
pub mod merge;
pub mod programs;
pub mod sweep;
pub mod watch;
