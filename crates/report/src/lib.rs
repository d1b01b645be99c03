//! Reports of what a tcplab database holds: per-point statistics of experiments
//! ([`results`]).

pub mod results;
