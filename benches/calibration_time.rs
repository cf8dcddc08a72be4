//! How long calibrating the suite takes.
//!
//! On the simulator (always): the daemon's own calibration (`calibrate_kernel`) of every
//! built-in kernel on the H200 profile, four ways: every size measured (the default budget),
//! the planner's sizes with the verification sweep (`--calibration-budget 0`), the same without
//! the sweep's tightening (`--tighten-sizes 0`), and the planner's sizes alone (the sweep off). It prints the launches and the GPU time they stand for (the sum
//! of the simulated launch times, which is what a real device would spend), and the wall time.
//!
//! On the CUDA device, when there is one: every kernel at every realisable partition size, 200
//! timed launches each.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use wcetd::calibrate::{calibrate_kernel, Recipe, VerificationSweep};
use wcetd::gpu::cuda::CudaGpu;
use wcetd::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
use wcetd::gpu::{Gpu, Interference, RunRequest};
use wcetd::kernels;

const LAUNCHES: u32 = 200;

fn simulated() {
    let ways = [
        ("every size (default budget)", VerificationSweep::default()),
        (
            "planner + sweep (budget 0)",
            VerificationSweep {
                budget_s: 0.0,
                ..VerificationSweep::default()
            },
        ),
        (
            "planner + sweep, no tightening",
            VerificationSweep {
                budget_s: 0.0,
                tightenings: 0,
                ..VerificationSweep::default()
            },
        ),
        (
            "planner alone (sweep off)",
            VerificationSweep {
                enabled: false,
                budget_s: 0.0,
                ..VerificationSweep::default()
            },
        ),
    ];
    println!(
        "{:<30} {:>8} {:>10} {:>14} {:>9}",
        "simulated H200 suite", "sizes", "launches", "gpu_time_s", "wall_s"
    );
    for (label, sweep) in ways {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let recipe = Recipe {
            sweep,
            ..Recipe::default()
        };
        let started = Instant::now();
        let (mut sizes, mut launches, mut gpu_ns) = (0usize, 0usize, 0u128);
        for kernel in kernels::builtin_suite() {
            let cal = calibrate_kernel(
                &mut gpu,
                &kernel,
                &recipe,
                &AtomicBool::new(false),
                &mut |_| {},
            )
            .expect("simulated calibration");
            let c = &cal.campaign;
            sizes += c.sizes.len();
            for r in c.sizes.values().chain(c.verified.values()) {
                launches += r.times_ns.len();
                gpu_ns += r.times_ns.iter().map(u128::from).sum::<u128>();
            }
        }
        println!(
            "{label:<30} {sizes:>8} {launches:>10} {:>14.2} {:>9.2}",
            gpu_ns as f64 * 1e-9,
            started.elapsed().as_secs_f64()
        );
    }
}

fn main() {
    simulated();
    let mut gpu = match CudaGpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("calibration_time: CUDA part skipped, no CUDA device available ({e})");
            return;
        }
    };
    let sizes = gpu.info().partition_sizes.clone();
    println!(
        "device: {} ({} SMs), sizes {sizes:?}",
        gpu.info().name,
        gpu.info().total_sms
    );
    println!(
        "{:<10} {:>5} {:>12} {:>14} {:>14} {:>9}",
        "kernel", "sms", "wall_ms", "median_ns", "max_ns", "throttled"
    );
    let total = Instant::now();
    for kernel in kernels::builtin_suite() {
        for &sms in &sizes {
            let request = RunRequest {
                sms,
                warmup: 10,
                launches: LAUNCHES,
                interference: Interference::Isolated,
            };
            let started = Instant::now();
            match gpu.run(&kernel, &request) {
                Ok(batch) => {
                    let mut t = batch.times_ns.clone();
                    t.sort_unstable();
                    println!(
                        "{:<10} {:>5} {:>12.1} {:>14} {:>14} {:>9}",
                        kernel.name,
                        batch.granted_sms,
                        started.elapsed().as_secs_f64() * 1e3,
                        t[t.len() / 2],
                        t[t.len() - 1],
                        batch.throttled()
                    );
                }
                Err(e) => println!("{:<10} {:>5} error: {e}", kernel.name, sms),
            }
        }
    }
    println!("full suite: {:.1} s", total.elapsed().as_secs_f64());
}
