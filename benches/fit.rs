//! Fitting speed: bound tables for 100 kernels x 17 partition sizes with the project's method
//! (every law fitted and validated leave-one-out, the tail model, the device's slowdowns, the
//! monotone checks), from
//! simulated samples. Target: the whole batch in under one second.

use criterion::{criterion_group, criterion_main, Criterion};
use std::collections::BTreeMap;
use std::time::Instant;

use wcetd::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
use wcetd::gpu::{Gpu, Interference, RunRequest};
use wcetd::kernels;
use wcetd::model::{method, throttle, Method, MethodConfig, Observations};

/// 100 kernels: the 8 built-in physics under 13 seeds (and 4 more), measured at all 17 sizes.
fn dataset() -> Vec<Observations> {
    let suite = kernels::builtin_suite();
    let mut out = Vec::new();
    for seed in 0u64.. {
        let mut gpu = SimGpu::new(
            DeviceProfile::h200(),
            SimOptions {
                seed,
                ..SimOptions::default()
            },
        );
        for kernel in &suite {
            let mut by_size = BTreeMap::new();
            let mut geometry = None;
            for &sms in &gpu.info().partition_sizes.clone() {
                let r = RunRequest {
                    sms,
                    warmup: 0,
                    launches: 200,
                    interference: Interference::Isolated,
                };
                let batch = gpu.run(kernel, &r).unwrap();
                geometry = batch.geometry;
                by_size.insert(sms, batch.times_ns);
            }
            out.push(Observations {
                geometry,
                by_size,
                ..Observations::default()
            });
            if out.len() == 100 {
                return out;
            }
        }
    }
    unreachable!()
}

/// Every kernel's bounds, after looking for the device's sustained slowdowns in all of their
/// launches (the H200 profile throttles, so each tail is fitted twice, as in the daemon).
fn fit_all(data: &[Observations], sizes: &[u32]) -> usize {
    let mut config = MethodConfig::default();
    let series = data
        .iter()
        .flat_map(|o| o.by_size.values().map(Vec::as_slice));
    if let Some(found) = throttle::sustained_slowdown(series) {
        config.device_slowdown = found.depth;
        config.device_slowdown_share = found.share;
    }
    data.iter()
        .map(|obs| {
            method::bound_table(obs, sizes, Method::Wcetd, &config)
                .unwrap()
                .entries
                .len()
        })
        .sum()
}

fn bench(c: &mut Criterion) {
    let data = dataset();
    let sizes = DeviceProfile::h200().partition_sizes();
    let start = Instant::now();
    let n = fit_all(&data, &sizes);
    let once = start.elapsed();
    println!(
        "fit: 100 kernels x {} sizes ({n} bounds) in {:.1} ms; target < 1000 ms: {}",
        sizes.len(),
        once.as_secs_f64() * 1e3,
        if once.as_secs_f64() < 1.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    let mut group = c.benchmark_group("fit");
    group.sample_size(10);
    group.bench_function("100 kernels x 17 sizes, wcetd method", |b| {
        b.iter(|| fit_all(&data, &sizes))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
