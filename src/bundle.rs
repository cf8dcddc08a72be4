//! Calibration bundles: calibrations exported by one daemon and imported by another, so a fleet of
//! identical hosts measures a part, driver and clock policy once. A bundle is JSON: its format
//! version, where and when it was exported, the exporting device's fingerprint, and per kernel and
//! interference tag the whole calibration (samples included, so the receiver can refit) with a
//! summary of its samples for people.
//!
//! A bundle is accepted only where its fingerprint matches the receiving device in what a bound
//! depends on: the device model, the driver, the CUDA version and the clock policy. The UUID is not
//! compared (it differs on every card, which is the point of a bundle); the receiver verifies
//! every imported kernel on its own card instead (`Service::import_calibration`), because cards of
//! one model differ (4.6% at one size on the H100s of `docs/hardware-validation.md`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::gpu::{Fingerprint, Interference};
use crate::store::KernelCalibration;

pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    pub format: u32,
    pub exported_at: DateTime<Utc>,
    pub host: String,
    pub fingerprint: Fingerprint,
    pub calibrations: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub kernel: String,
    pub interference: Interference,
    /// Per measured size: launches, median and largest time (ns).
    pub summary: BTreeMap<u32, SizeSummary>,
    pub calibration: KernelCalibration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeSummary {
    pub launches: u64,
    pub median_ns: u64,
    pub max_ns: u64,
}

impl Entry {
    pub fn new(kernel: &str, interference: Interference, calibration: KernelCalibration) -> Self {
        let summary = calibration
            .campaign
            .sizes
            .iter()
            .filter_map(|(&m, r)| {
                // Empty also where spilled times could not be read back (logged); writing the
                // bundle then fails on the same times, so nothing half-read is exported.
                let mut t = r.times_ns.to_vec();
                t.sort_unstable();
                let s = SizeSummary {
                    launches: t.len() as u64,
                    median_ns: *t.get(t.len() / 2)?,
                    max_ns: *t.last()?,
                };
                Some((m, s))
            })
            .collect();
        Entry {
            kernel: kernel.to_string(),
            interference,
            summary,
            calibration,
        }
    }
}

/// Read a bundle; a truncated or malformed one is an error that says where.
pub fn parse(text: &str) -> Result<Bundle, String> {
    let bundle: Bundle = serde_json::from_str(text).map_err(|e| {
        format!("the bundle is not a complete wcetd bundle (JSON error at line {}, column {}: {e}); accepted: the output of `wcetctl export`", e.line(), e.column())
    })?;
    if bundle.format != FORMAT {
        return Err(format!(
            "bundle format {} is not supported; accepted: format {FORMAT}",
            bundle.format
        ));
    }
    if bundle.calibrations.is_empty() {
        return Err("the bundle holds no calibration".into());
    }
    Ok(bundle)
}

/// What differs between a bundle's fingerprint and this device's, in what bounds depend on (empty
/// when they match): "driver 580.159.04 here, 575.51.03 in the bundle", ...
pub fn differences(here: &Fingerprint, bundle: &Fingerprint) -> Vec<String> {
    let fields = [
        (
            "backend",
            here.backend.to_string(),
            bundle.backend.to_string(),
        ),
        ("device", here.device.clone(), bundle.device.clone()),
        ("driver", here.driver.clone(), bundle.driver.clone()),
        ("CUDA", here.cuda.clone(), bundle.cuda.clone()),
        (
            "clock policy",
            here.clock_policy.clone(),
            bundle.clock_policy.clone(),
        ),
    ];
    fields
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .map(|(what, a, b)| format!("{what} `{a}` here, `{b}` in the bundle"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Backend;

    fn fp(driver: &str, uuid: &str) -> Fingerprint {
        Fingerprint {
            backend: Backend::Cuda,
            device: "NVIDIA H100 80GB HBM3".into(),
            uuid: uuid.into(),
            driver: driver.into(),
            cuda: "13.0".into(),
            clock_policy: "default".into(),
        }
    }

    #[test]
    fn another_card_of_the_same_model_matches_and_another_driver_is_spelled_out() {
        assert!(differences(&fp("580.159.04", "GPU-a"), &fp("580.159.04", "GPU-b")).is_empty());
        let d = differences(&fp("580.159.04", "GPU-a"), &fp("575.51.03", "GPU-a"));
        assert_eq!(
            d,
            vec!["driver `580.159.04` here, `575.51.03` in the bundle".to_string()]
        );
    }

    #[test]
    fn truncated_and_foreign_files_are_refused_with_where() {
        let err = parse("{\"format\": 1, \"exported_at\": ").unwrap_err();
        assert!(
            err.contains("not a complete wcetd bundle") && err.contains("line 1"),
            "{err}"
        );
        let err = parse("[]").unwrap_err();
        assert!(
            err.contains("accepted: the output of `wcetctl export`"),
            "{err}"
        );
    }
}
