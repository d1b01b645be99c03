//! Link traces, mahimahi's rate traces and tcplab's delay and loss traces: any text
//! loads or errs, and a loaded delay or loss trace answers for any time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_netsim::link::{StepTrace, Trace};

fuzz_target!(|text: &str| {
    let _ = Trace::parse(text);
    if let Ok(delays) = StepTrace::parse_delays(text) {
        let _ = delays.at(u64::MAX);
    }
    if let Ok(losses) = StepTrace::parse_losses(text) {
        let _ = losses.at(12_345_678);
    }
});
