//! Path specs (`--path`, experiment files): any text parses or errs, and a spec that
//! parses prints as a normalized spec that parses back to the same path.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_netsim::path::PathSpec;

fuzz_target!(|text: &str| {
    if let Ok(spec) = text.parse::<PathSpec>() {
        let normalized = spec.to_string();
        let again: PathSpec = normalized
            .parse()
            .unwrap_or_else(|e| panic!("{text:?} normalized to {normalized:?}: {e}"));
        assert_eq!(again, spec, "{text:?} → {normalized:?}");
    }
});
