//! Fuzz target: a calibration file of any content either loads as exactly what it says or is
//! moved aside (`*.corrupt-*`); `Store::load` never panics and never half-applies a file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wcetd::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
use wcetd::gpu::Gpu;
use wcetd::store::{Calibration, Store, FORMAT_VERSION};

fuzz_target!(|data: &[u8]| {
    let parsed = serde_json::from_slice::<Calibration>(data).ok();
    let fingerprint = SimGpu::new(DeviceProfile::h200(), SimOptions::default())
        .info()
        .fingerprint
        .clone();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let path = store.path_for(&fingerprint);
    std::fs::write(&path, data).unwrap();
    match store.load(&fingerprint) {
        Some(cal) => assert_eq!(Some(&cal), parsed.as_ref()),
        None => {
            // Refused: it does not parse, is of another format, or is damage that parses (a
            // broken seal, a table that disagrees with itself), which the store names.
            let named = !store.quarantined().is_empty();
            assert!(parsed.is_none_or(|c| c.format != FORMAT_VERSION) || named);
            assert!(!path.exists(), "a refused file must be moved aside");
        }
    }
});
