//! Fuzz target: the simulator's device/kernel profile parser (the campaign spec of a simulated
//! device) never panics; an accepted profile yields partition sizes that are ascending and end at
//! the whole device.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wcetd::gpu::sim::DeviceProfile;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(profile) = DeviceProfile::parse(text) {
        let sizes = profile.partition_sizes();
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(sizes.last(), Some(&profile.total_sms));
    }
});
