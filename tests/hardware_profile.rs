//! The measured H100 profile (`calibration/profiles/h100-measured.toml`, written from a real
//! campaign by `calibration/hardware/make-profile.py`): it replays the real medians, and the
//! device's rare delays it carries are what the daemon's delay probe exists for. Calibrated as
//! the daemon calibrates (probe, planner, sweep), every kernel's bound holds at every size against
//! 3,000 fresh launches; with the probe switched off, some size is under-bounded (this can fail).

use std::sync::atomic::AtomicBool;

use wcetd::calibrate::{calibrate_kernel, with_device_probe, Recipe};
use wcetd::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
use wcetd::gpu::{Gpu, Interference, RunRequest};
use wcetd::kernels;

const PROFILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/calibration/profiles/h100-measured.toml"
);
const HELD_OUT_LAUNCHES: u32 = 3000;

fn gpu(seed: u64) -> SimGpu {
    let options = SimOptions {
        seed,
        ..SimOptions::default()
    };
    SimGpu::new(
        DeviceProfile::load(PROFILE).expect("measured profile"),
        options,
    )
}

/// (kernel, size, bound, held-out maximum) wherever the bound is below the maximum.
fn violations(probe: bool) -> Vec<(String, u32, u64, u64)> {
    let mut cal = gpu(7);
    let recipe = Recipe {
        delay_probe_launches: if probe { 100_000 } else { 0 },
        ..Recipe::default()
    };
    let (recipe, _) = with_device_probe(&mut cal, &recipe).expect("probe");
    let mut held = gpu(8);
    let mut out = Vec::new();
    for kernel in kernels::builtin_suite() {
        let table = calibrate_kernel(
            &mut cal,
            &kernel,
            &recipe,
            &AtomicBool::new(false),
            &mut |_| {},
        )
        .expect("calibration")
        .table;
        for entry in &table.entries {
            let request = RunRequest {
                sms: entry.sms,
                warmup: 0,
                launches: HELD_OUT_LAUNCHES,
                interference: Interference::Isolated,
            };
            let max = *held
                .run(&kernel, &request)
                .unwrap()
                .times_ns
                .iter()
                .max()
                .unwrap();
            if entry.bound_ns < max {
                out.push((kernel.name.to_string(), entry.sms, entry.bound_ns, max));
            }
        }
    }
    out
}

#[test]
fn the_profile_replays_the_measured_medians() {
    let mut g = gpu(1);
    let kernel = kernels::find("hotspot").unwrap();
    let request = RunRequest {
        sms: 96,
        warmup: 0,
        launches: 201,
        interference: Interference::Isolated,
    };
    let mut times = g.run(&kernel, &request).unwrap().times_ns;
    times.sort_unstable();
    let median = times[100] as f64;
    // c1's median of hotspot at 96 SMs: 98,719 ns.
    assert!((median / 98_719.0 - 1.0).abs() < 0.005, "median {median}");
}

#[test]
fn with_the_delay_probe_every_size_holds_and_without_it_some_does_not() {
    let with = violations(true);
    assert!(with.is_empty(), "violations with the delay probe: {with:?}");
    let without = violations(false);
    assert!(
        !without.is_empty(),
        "without the probe the rare delays should reach above some bound"
    );
}
