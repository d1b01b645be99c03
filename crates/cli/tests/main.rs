//! The binary end to end: one test binary, so that tests which only wait (on labs, on
//! timers, on real tools) run side by side while those measuring timing run alone
//! (see [`support::alone`]).

mod support;

mod aqm;
mod capture;
mod cli;
mod cluster;
mod commands;
mod delay;
mod docs;
mod engine;
mod events;
mod explain;
mod far;
mod flood;
mod host_queues;
mod hosts;
mod iperf3;
mod labs;
mod latency;
mod pacing;
mod paths;
mod pipes;
mod report;
mod rootless;
mod schedules;
mod serve;
mod shell_record;
mod store;
mod sweeps;
mod topologies;
mod transactions;
mod udp;
mod watch;
