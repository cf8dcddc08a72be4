//! Fuzz target: the calibration format in memory, fast enough for millions of runs (the
//! `store_load` target covers the file path at a few hundred runs a second). Any bytes either fail
//! to parse or parse into a calibration that serialises and parses back to exactly itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wcetd::store::Calibration;

fuzz_target!(|data: &[u8]| {
    if let Ok(cal) = serde_json::from_slice::<Calibration>(data) {
        let text = serde_json::to_vec(&cal).expect("a parsed calibration serialises");
        let back: Calibration = serde_json::from_slice(&text).expect("and parses back");
        assert_eq!(back, cal);
    }
});
