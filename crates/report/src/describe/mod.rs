//! A run in words, in one place: the live interval lines, the summary and the flows'
//! setup that `run` prints ([`run`]), the explanation that `explain`, `run` and
//! `quickstart` print ([`explanation`]), and the test's parameters in the report's
//! captions ([`params`](mod@params)). The binary only prints what these return.

pub mod explanation;
pub mod params;
pub mod run;

pub use params::{flow_name, flows_in_common, params};

/// A run's label as its first line shows it: " (label)", or nothing.
fn label(label: &Option<String>) -> String {
    label
        .as_ref()
        .map(|l| format!(" ({l})"))
        .unwrap_or_default()
}
