//! Sizes, rates and durations as users write them on the command line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_record::units::{parse_duration, parse_rate, parse_size};

fuzz_target!(|text: &str| {
    let _ = parse_size(text);
    let _ = parse_rate(text);
    let _ = parse_duration(text);
});
