//! Experiment files (TOML): any text is planned or refused with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_model::experiment;

fuzz_target!(|text: &str| {
    if let Ok(e) = experiment::parse(text, "fuzz") {
        let _ = e.schedule(1);
    }
});
