//! How long a full-suite calibration takes on the CUDA device: every kernel at every realisable
//! partition size, 200 timed launches each. Without a GPU it says it skipped and exits 0.

use std::time::Instant;

use wcetd::gpu::cuda::CudaGpu;
use wcetd::gpu::{Gpu, Interference, RunRequest};
use wcetd::kernels;

const LAUNCHES: u32 = 200;

fn main() {
    let mut gpu = match CudaGpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("calibration_time: skipped, no CUDA device available ({e})");
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
