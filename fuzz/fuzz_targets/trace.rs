//! mahimahi link traces: any text loads or errs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_netsim::link::Trace;

fuzz_target!(|text: &str| {
    let _ = Trace::parse(text);
});
