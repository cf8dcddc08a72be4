//! Fuzz target: the samples CSV reader must reject any input with an error naming a line or a
//! column, and never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = wcetd::samples::read_samples(data) {
        let msg = e.to_string();
        assert!(
            msg.contains("line") || msg.contains("column") || msg.contains("no rows"),
            "{msg}"
        );
    }
});
