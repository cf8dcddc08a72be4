//! Bounds where no law of the library holds: kernels bent by the effects real parts show
//! (`src/gpu/sim.rs`, `Effects`), calibrated as the daemon calibrates them (the planner's sizes
//! and the verification sweep, with a budget that never measures every size), then checked at
//! every realisable size, measured or not, against the maximum of 3,000 fresh launches.
//!
//! These can fail: with the sweep switched off, a hump between the planner's sizes is under-
//! bounded, and a random shape the chain cannot cover would be too.

use proptest::prelude::*;
use std::sync::atomic::AtomicBool;

use wcetd::calibrate::{calibrate_kernel, Recipe, VerificationSweep};
use wcetd::gpu::sim::{
    Atomics, DeviceProfile, Effects, GpcImbalance, KernelPhysics, L2Hump, SimGpu, SimOptions,
};
use wcetd::gpu::{Gpu, Interference, RunRequest};
use wcetd::kernels;
use wcetd::model::BoundTable;

const HELD_OUT_LAUNCHES: u32 = 3000;

/// The H200 profile with `physics` as its `hotspot` and no throttling (a throttling episode in
/// 3,000 held-out launches that the calibration never met is another question than the shape).
fn profile_with(physics: KernelPhysics) -> DeviceProfile {
    let mut profile = DeviceProfile::h200();
    profile.throttle.batch_probability = 0.0;
    profile.kernels.insert("hotspot".into(), physics);
    profile
}

fn calibrate(profile: &DeviceProfile, seed: u64, sweep: bool) -> BoundTable {
    let mut gpu = SimGpu::new(
        profile.clone(),
        SimOptions {
            seed,
            ..SimOptions::default()
        },
    );
    let recipe = Recipe {
        sweep: VerificationSweep {
            enabled: sweep,
            budget_s: 0.0,
            ..VerificationSweep::default()
        },
        ..Recipe::default()
    };
    let kernel = kernels::find("hotspot").unwrap();
    calibrate_kernel(
        &mut gpu,
        &kernel,
        &recipe,
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap()
    .table
}

/// (size, bound, held-out maximum) at every size where the bound is below the maximum.
fn violations(profile: &DeviceProfile, table: &BoundTable, seed: u64) -> Vec<(u32, u64, u64)> {
    let mut gpu = SimGpu::new(
        profile.clone(),
        SimOptions {
            seed,
            ..SimOptions::default()
        },
    );
    let kernel = kernels::find("hotspot").unwrap();
    let mut out = Vec::new();
    for e in &table.entries {
        let request = RunRequest {
            sms: e.sms,
            warmup: 0,
            launches: HELD_OUT_LAUNCHES,
            interference: Interference::Isolated,
        };
        let max = gpu
            .run(&kernel, &request)
            .unwrap()
            .times_ns
            .into_iter()
            .max()
            .unwrap();
        if e.bound_ns < max {
            out.push((e.sms, e.bound_ns, max));
        }
    }
    out
}

/// A wave-stepped kernel with a narrow L2 hump (+30% at 104 SMs) that the planner's five sizes
/// step over.
fn humped() -> KernelPhysics {
    let mut k = DeviceProfile::h200().kernels["hotspot"].clone();
    k.effects.l2_hump = Some(L2Hump {
        center_sms: 104.0,
        width_sms: 6.0,
        height: 0.30,
    });
    k
}

#[test]
fn switching_the_verification_sweep_off_lets_a_hump_through() {
    let profile = profile_with(humped());
    let off = calibrate(&profile, 7, false);
    let on = calibrate(&profile, 7, true);
    let measured = |t: &BoundTable| {
        t.entries
            .iter()
            .filter(|e| e.basis() == "measured")
            .map(|e| e.sms)
            .collect::<Vec<_>>()
    };
    assert!(!measured(&off).contains(&104), "{:?}", measured(&off));
    let missed = violations(&profile, &off, 1007);
    assert!(
        !missed.is_empty(),
        "without the sweep the hump should be missed"
    );
    assert_eq!(violations(&profile, &on, 1007), vec![], "{:?}", on.notes);
    assert!(on.entries.iter().any(|e| e.basis() == "verified"));
    assert!(
        on.notes.iter().any(|n| n.contains("measured in full")),
        "the notes say why a size was added: {:?}",
        on.notes
    );
}

fn foreign_physics() -> impl Strategy<Value = KernelPhysics> {
    let base = (
        (
            64u32..4096,
            1u32..9,
            2_000.0..200_000.0f64,
            1_000.0..30_000.0f64,
        ),
        (1e6..2e8f64, 20.0..60.0f64, 2_000.0..3_200.0f64),
    );
    let effects = (
        proptest::option::of((24.0..128.0f64, 4.0..20.0f64, 0.05..0.35f64)),
        proptest::option::of((prop::sample::select(vec![16u32, 18, 24]), 0.02..0.15f64)),
        proptest::option::of(0.6..0.95f64),
        proptest::option::of((50.0..400.0f64, 16u32..96)),
        proptest::option::of(0.2..0.9f64),
        (0.0..0.03f64, proptest::option::of(500.0..4_000.0f64)),
    );
    (base, effects).prop_map(
        |(
            ((blocks, bpsm, launch, wave), (bytes, sm_bw, roof)),
            (hump, gpc, occ, atom, part, jit),
        )| {
            let mut k = KernelPhysics {
                blocks,
                blocks_per_sm: bpsm,
                launch_ns: launch,
                wave_ns: wave,
                bytes,
                sm_bytes_per_ns: sm_bw,
                roof_bytes_per_ns: roof,
                effects: Effects {
                    l2_hump: hump.map(|(c, w, h)| L2Hump {
                        center_sms: c,
                        width_sms: w,
                        height: h,
                    }),
                    gpc_imbalance: gpc.map(|(n, p)| GpcImbalance {
                        sms_per_gpc: n,
                        penalty: p,
                    }),
                    actual_blocks_per_sm: occ.map(|f| ((f64::from(bpsm) * f) as u32).max(1)),
                    atomics: atom.map(|(ns, s)| Atomics {
                        ns_per_sm: ns,
                        saturate_sms: s,
                    }),
                    partial_wave_cost: part,
                    device_fault: None,
                },
                ..KernelPhysics::default()
            };
            // Multiplicative and additive body jitter, but no rare delays: a delay that hits one
            // launch in a thousand on a tight body may be absent from every calibration launch,
            // and what no launch showed no tail model can bound (the heavy-tail and throttling
            // cases are in the evaluation, docs/method.md). This test is about shapes.
            k.jitter.body_sigma = 0.004 + jit.0;
            k.jitter.tail_probability = 0.0;
            k.jitter.additive_ns = jit.1.unwrap_or(0.0);
            k
        },
    )
}

proptest! {
    // A fixed seed: the same twelve shapes every run, a pre-registered set rather than a new
    // draw each time (a failure is then a change in the method, never luck).
    #![proptest_config(ProptestConfig {
        cases: 12,
        rng_seed: proptest::test_runner::RngSeed::Fixed(20_261_122),
        ..ProptestConfig::default()
    })]

    /// Every realisable size's bound holds against 3,000 fresh launches there, for random
    /// kernels bent by random effects.
    #[test]
    fn every_size_holds_on_random_foreign_shapes(physics in foreign_physics(), seed in 0u64..1_000_000) {
        let profile = profile_with(physics);
        let table = calibrate(&profile, seed, true);
        let missed = violations(&profile, &table, seed + 1_000_000);
        prop_assert!(missed.is_empty(), "violations (sms, bound, held-out max): {missed:?}; notes {:?}", table.notes);
    }
}
