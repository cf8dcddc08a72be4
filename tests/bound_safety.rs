//! Property: for random scaling laws, geometries and noise drawn through the simulator, no bound
//! of any method is ever below a sample observed at its size (design rule 1). This can fail: a
//! method that dropped the largest sample, or fitted below it without the per-size guard, would.

use proptest::prelude::*;
use std::collections::BTreeMap;

use wcetd::gpu::sim::{DeviceProfile, Jitter, KernelPhysics, SimGpu, SimOptions};
use wcetd::gpu::{Gpu, Interference, RunRequest};
use wcetd::kernels;
use wcetd::model::{method, Method, MethodConfig, Observations};

fn physics() -> impl Strategy<Value = KernelPhysics> {
    (
        (1u32..5000, 1u32..16, 500.0..20_000.0f64, 100.0..50_000.0f64),
        (1e5..3e8f64, 5.0..80.0f64, 500.0..4000.0f64),
        (0.0..600.0f64, 0u32..132),
        (
            0.0..0.05f64,
            0.0..0.05f64,
            0.8..4.0f64,
            0.0..0.1f64,
            0.0..1.0f64,
        ),
    )
        .prop_map(
            |(
                (blocks, bpsm, launch, wave),
                (bytes, sm_bw, roof),
                (cont, onset),
                (sigma, p, alpha, scale, cap),
            )| {
                KernelPhysics {
                    blocks,
                    blocks_per_sm: bpsm,
                    launch_ns: launch,
                    wave_ns: wave,
                    bytes,
                    sm_bytes_per_ns: sm_bw,
                    roof_bytes_per_ns: roof,
                    contention_ns_per_sm: cont,
                    contention_onset_sms: onset,
                    jitter: Jitter {
                        body_sigma: sigma,
                        tail_probability: p,
                        tail_alpha: alpha,
                        tail_scale: scale,
                        tail_cap: cap,
                        additive_ns: 0.0,
                    },
                    ..KernelPhysics::default()
                }
            },
        )
}

fn observe(physics: KernelPhysics, seed: u64, sizes: &[u32], launches: u32) -> Observations {
    let mut profile = DeviceProfile::h200();
    profile.kernels.insert("needle".into(), physics);
    let mut gpu = SimGpu::new(
        profile,
        SimOptions {
            seed,
            ..SimOptions::default()
        },
    );
    let kernel = kernels::find("needle").unwrap();
    let mut by_size = BTreeMap::new();
    let mut geometry = None;
    for &sms in sizes {
        let request = RunRequest {
            sms,
            warmup: 0,
            launches,
            interference: Interference::Isolated,
        };
        let batch = gpu.run(&kernel, &request).unwrap();
        geometry = batch.geometry;
        by_size.insert(sms, batch.times_ns);
    }
    Observations {
        geometry,
        by_size,
        ..Observations::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_bound_is_below_an_observed_sample(
        physics in physics(),
        seed in any::<u64>(),
        measured in proptest::sample::subsequence(vec![8u32, 16, 24, 32, 48, 64, 96, 128, 132], 2..6),
        with_geometry in any::<bool>(),
    ) {
        let mut obs = observe(physics, seed, &measured, 60);
        if !with_geometry {
            obs.geometry = None;
        }
        let sizes = DeviceProfile::h200().partition_sizes();
        for m in Method::ALL {
            let Ok(table) = method::bound_table(&obs, &sizes, m, &MethodConfig::default()) else { continue };
            for (&sms, samples) in &obs.by_size {
                let max = *samples.iter().max().unwrap();
                let bound = table.entry(sms).map(|e| e.bound_ns);
                prop_assert!(bound.is_some_and(|b| b >= max), "{m} at {sms}: bound {bound:?} < sample {max}");
            }
        }
    }
}
