//! Property tests standing in for the cargo-fuzz targets in `fuzz/` (which need nightly and do
//! not run in CI): random bytes and random near-valid CSV into the samples and geometry readers,
//! random bytes into the calibration loader. None may panic; CSV errors always point at a line
//! or a column; a refused calibration file is moved aside.

use proptest::prelude::*;
use wcetd::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
use wcetd::gpu::Gpu;
use wcetd::samples::{read_geometry, read_samples};
use wcetd::store::{Calibration, Store};

fn points_somewhere(msg: &str) -> bool {
    msg.contains("line") || msg.contains("column") || msg.contains("no rows")
}

/// A field that is sometimes valid, sometimes hostile.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,8}",
        "[0-9]{1,4}",
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("18446744073709551616".to_string()),
        Just(String::new()),
        Just("\"unterminated".to_string()),
        "[ -~]{0,12}",
        "\\PC{0,6}",
    ]
}

/// CSV text with a header that is usually right and rows of random fields and widths.
fn near_valid_csv(header: &'static str) -> impl Strategy<Value = String> {
    let header = prop_oneof![4 => Just(header.to_string()), 1 => "[a-z_,]{0,30}"];
    (
        header,
        prop::collection::vec(prop::collection::vec(field(), 0..5), 0..8),
    )
        .prop_map(|(h, rows)| {
            let mut text = h;
            for row in rows {
                text.push('\n');
                text.push_str(&row.join(","));
            }
            text
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn samples_reader_never_panics_on_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = read_samples(&data[..]) {
            prop_assert!(points_somewhere(&e.to_string()), "{}", e);
        }
    }

    #[test]
    fn samples_reader_explains_near_valid_csv(text in near_valid_csv("kernel,sms,time_ns")) {
        match read_samples(text.as_bytes()) {
            Ok(set) => prop_assert!(set.values().flat_map(|s| s.keys()).all(|&sms| sms > 0)),
            Err(e) => prop_assert!(points_somewhere(&e.to_string()), "{}", e),
        }
    }

    #[test]
    fn geometry_reader_never_panics_on_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = read_geometry(&data[..]) {
            prop_assert!(points_somewhere(&e.to_string()), "{}", e);
        }
    }

    #[test]
    fn geometry_reader_explains_near_valid_csv(text in near_valid_csv("kernel,blocks,blocks_per_sm")) {
        match read_geometry(text.as_bytes()) {
            Ok(g) => prop_assert!(g.values().all(|g| g.blocks > 0 && g.blocks_per_sm > 0)),
            Err(e) => prop_assert!(points_somewhere(&e.to_string()), "{}", e),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn store_loader_refuses_garbage_and_moves_it_aside(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        prop_assert!(serde_json::from_slice::<Calibration>(&data).is_err());
        let fingerprint = SimGpu::new(DeviceProfile::h200(), SimOptions::default()).info().fingerprint.clone();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let path = store.path_for(&fingerprint);
        std::fs::write(&path, &data).unwrap();
        prop_assert!(store.load(&fingerprint).is_none());
        prop_assert!(!path.exists());
        let aside = std::fs::read_dir(dir.path()).unwrap().filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".corrupt-")).count();
        prop_assert_eq!(aside, 1);
    }
}
