//! Efficiency factors learned from measured runs, and predictions of a configuration's mean time on
//! a device from them.
//!
//! A launch takes the longest of three times: the launch floor, its memory traffic at the
//! bandwidth of the level its working set lives in (L2 if it fits, DRAM otherwise), and the work
//! of its SMs. Per kernel, the measured run with the most work (among those clear of the floor,
//! whose trials agree) is the reference: if it moved its bytes at half or more of its level's
//! bandwidth, the kernel is **memory-bound** and its time scales with that bandwidth; otherwise it is
//! **SM-bound** and its time scales with the device's arithmetic throughput. Either way the time
//! is proportional to the work (FLOPs, or thread-iterations), and never below the DRAM roof when
//! the working set outgrows L2. A kernel never measured gets the static roofline of its counts,
//! divided by the median efficiency that measured kernels of the same kind reached.
//!
//! Everything learned comes from the runs passed to [`Predictor::fit`]; a prediction reads only a
//! configuration and a device description.

use std::collections::BTreeMap;

use super::device::DeviceDescription;
use super::runs::{Config, Run};

/// A reference run moving bytes at this share of its level's bandwidth or more is memory-bound.
const MEMORY_BOUND: f64 = 0.5;
/// Runs within this factor of the device's fastest run are dominated by launch cost.
const NEAR_FLOOR: f64 = 2.0;
/// Runs whose trials spread more than this (std / mean) measured something else besides the
/// kernel; they are used only when a kernel has nothing better.
const UNSTEADY: f64 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bottleneck {
    Memory,
    Sm,
}

/// What one kernel's reference run taught.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KernelModel {
    pub bottleneck: Bottleneck,
    /// Milliseconds per unit of work at the reference.
    pub ms_per_work: f64,
    /// Rate of the bottleneck at the reference (GB/s of its memory level, or GFLOP/s).
    pub reference_rate: f64,
    /// Achieved share of that rate at the reference.
    pub efficiency: f64,
}

/// How a prediction was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// From the kernel's own runs.
    Measured,
    /// A kernel without runs: the static roofline and the median efficiency of the others.
    Static,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Predictor {
    /// Fastest launch among the runs (ms): a launch is never faster on a device described
    /// without its own launch overhead.
    pub floor_ms: f64,
    pub kernels: BTreeMap<String, KernelModel>,
    /// Median roofline efficiency of the measured kernels, memory-bound and SM-bound.
    pub static_efficiency: (Option<f64>, Option<f64>),
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("no runs to learn from; accepted: at least one row with a positive mean_ms")]
    NoRuns,
    #[error("runs come from several devices ({0}); accepted: runs of one device")]
    MixedDevices(String),
}

/// Roofline time (ms) of a configuration's bytes at its level and its FLOPs, and which is larger.
pub fn roofline(c: &Config, d: &DeviceDescription) -> (f64, Bottleneck) {
    let memory = c.bytes / (d.level_gbps(c.working_set) * 1e6);
    let compute = c.flops / (d.compute_gflops * 1e6);
    if memory >= compute {
        (memory, Bottleneck::Memory)
    } else {
        (compute, Bottleneck::Sm)
    }
}

/// The DRAM roof (ms): what a working set larger than L2 costs at least, at sustained bandwidth.
fn dram_roof(c: &Config, d: &DeviceDescription) -> f64 {
    if d.fits_l2(c.working_set) {
        0.0
    } else {
        c.bytes / (d.mem_bandwidth_gbps * 1e6)
    }
}

pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

impl Predictor {
    /// Learn from `runs`, all of one device.
    pub fn fit(runs: &[Run]) -> Result<Predictor, FitError> {
        let first = runs.first().ok_or(FitError::NoRuns)?;
        if let Some(other) = runs.iter().find(|r| r.device != first.device) {
            return Err(FitError::MixedDevices(format!(
                "{} and {}",
                first.device.name, other.device.name
            )));
        }
        let device = &first.device;
        let floor_ms = runs.iter().map(|r| r.mean_ms).fold(f64::INFINITY, f64::min);
        let mut by_kernel: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
        for r in runs {
            by_kernel.entry(&r.config.kernel).or_default().push(r);
        }
        let mut kernels = BTreeMap::new();
        let (mut memory, mut sm) = (Vec::new(), Vec::new());
        for (name, rows) in by_kernel {
            let reference = reference_run(&rows, floor_ms);
            kernels.insert(name.to_string(), learn(reference, device));
            let (roof, kind) = roofline(&reference.config, device);
            if roof > 0.0 {
                let e = roof / reference.mean_ms;
                match kind {
                    Bottleneck::Memory => memory.push(e),
                    Bottleneck::Sm => sm.push(e),
                }
            }
        }
        Ok(Predictor {
            floor_ms,
            kernels,
            static_efficiency: (median(memory), median(sm)),
        })
    }

    /// Mean time (ms) of `c` on `d`, and how it was predicted.
    pub fn predict(&self, c: &Config, d: &DeviceDescription) -> (f64, Basis) {
        let floor = d.launch_overhead_ms().unwrap_or(self.floor_ms);
        let (time, basis) = match self.kernels.get(&c.kernel) {
            Some(k) => {
                let rate = match k.bottleneck {
                    Bottleneck::Memory => d.level_gbps(c.working_set),
                    Bottleneck::Sm => d.compute_gflops,
                };
                (
                    k.ms_per_work * c.work() * k.reference_rate / rate,
                    Basis::Measured,
                )
            }
            None => {
                let (roof, kind) = roofline(c, d);
                let (mem, sm) = self.static_efficiency;
                let e = match kind {
                    Bottleneck::Memory => mem.or(sm),
                    Bottleneck::Sm => sm.or(mem),
                };
                (e.map_or(roof, |e| roof / e), Basis::Static)
            }
        };
        (time.max(dram_roof(c, d)).max(floor), basis)
    }
}

/// The run that says most about a kernel at scale: the most work among steady runs clear of the
/// floor (falling back to steady runs, then to any).
fn reference_run<'a>(rows: &[&'a Run], floor_ms: f64) -> &'a Run {
    let steady: Vec<&Run> = rows
        .iter()
        .copied()
        .filter(|r| r.std_ms.is_none_or(|s| s <= UNSTEADY * r.mean_ms))
        .collect();
    let pool = if steady.is_empty() {
        rows.to_vec()
    } else {
        steady
    };
    let clear: Vec<&Run> = pool
        .iter()
        .copied()
        .filter(|r| r.mean_ms > NEAR_FLOOR * floor_ms)
        .collect();
    let pool = if clear.is_empty() { pool } else { clear };
    pool.into_iter()
        .max_by(|a, b| {
            (a.config.work(), a.config.bytes)
                .partial_cmp(&(b.config.work(), b.config.bytes))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .expect("a kernel has at least one run")
}

fn learn(reference: &Run, d: &DeviceDescription) -> KernelModel {
    let c = &reference.config;
    let level = d.level_gbps(c.working_set);
    let achieved = c.bytes / (reference.mean_ms * 1e6);
    let memory_share = achieved / level;
    let work = c.work().max(1.0);
    if memory_share >= MEMORY_BOUND {
        KernelModel {
            bottleneck: Bottleneck::Memory,
            ms_per_work: reference.mean_ms / work,
            reference_rate: level,
            efficiency: memory_share,
        }
    } else {
        KernelModel {
            bottleneck: Bottleneck::Sm,
            ms_per_work: reference.mean_ms / work,
            reference_rate: d.compute_gflops,
            efficiency: c.flops / (reference.mean_ms * 1e6) / d.compute_gflops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::predict::device;

    pub(crate) fn config(kernel: &str, n: u64, bytes: f64, flops: f64) -> Config {
        Config {
            kernel: kernel.into(),
            n,
            rows: 0,
            cols: 0,
            regs: 16,
            shmem: 0,
            block: 256,
            grid_blocks: n.div_ceil(256),
            iters: 0,
            flops,
            bytes,
            working_set: bytes,
        }
    }

    fn run(c: Config, d: &DeviceDescription, ms: f64) -> Run {
        Run {
            config: c,
            device: d.clone(),
            mean_ms: ms,
            std_ms: None,
        }
    }

    #[test]
    fn a_streaming_kernel_scales_with_dram_bandwidth() {
        let (a, b) = (
            device::load("rtx4070").unwrap(),
            device::load("titanx").unwrap(),
        );
        // 100 MB at 440 GB/s on the 4070, beyond its L2.
        let runs = [
            run(config("copy", 1 << 20, 12.0 * 1048576.0, 0.0), &a, 0.01),
            run(config("copy", 1 << 23, 1e8, 0.0), &a, 1e8 / 440e6),
        ];
        let p = Predictor::fit(&runs).unwrap();
        assert_eq!(p.kernels["copy"].bottleneck, Bottleneck::Memory);
        let (t, basis) = p.predict(&config("copy", 1 << 22, 5e7, 0.0), &b);
        assert_eq!(basis, Basis::Measured);
        let expected = 5e7 / (256.43e6 * 440.0 / 446.98);
        assert!((t / expected - 1.0).abs() < 1e-9, "{t} vs {expected}");
    }

    #[test]
    fn an_sm_bound_kernel_scales_with_throughput_and_never_beats_the_roofs() {
        let (a, b) = (
            device::load("rtx4070").unwrap(),
            device::load("titanx").unwrap(),
        );
        let runs = [run(config("mm", 1 << 20, 1e6, 1e10), &a, 2.0)];
        let p = Predictor::fit(&runs).unwrap();
        assert_eq!(p.kernels["mm"].bottleneck, Bottleneck::Sm);
        let (t, _) = p.predict(&config("mm", 1 << 20, 1e6, 2e10), &b);
        assert!((t / (4.0 * 17154.8 / 6206.8) - 1.0).abs() < 1e-9, "{t}");
        // A tiny configuration is never predicted below the fastest launch seen.
        let (t, _) = p.predict(&config("mm", 1, 4.0, 2.0), &b);
        assert_eq!(t, 2.0);
    }

    #[test]
    fn an_unknown_kernel_gets_the_static_roofline() {
        let a = device::load("rtx4070").unwrap();
        // One measured kernel at 2/3 of the DRAM roof.
        let runs = [run(
            config("copy", 1 << 23, 1e8, 0.0),
            &a,
            1.5 * 1e8 / 446.98e6,
        )];
        let p = Predictor::fit(&runs).unwrap();
        let (t, basis) = p.predict(&config("new", 1 << 23, 2e8, 0.0), &a);
        assert_eq!(basis, Basis::Static);
        assert!((t / (3.0 * 1e8 / 446.98e6) - 1.0).abs() < 1e-9, "{t}");
    }

    #[test]
    fn runs_of_two_devices_are_refused() {
        let (a, b) = (
            device::load("rtx4070").unwrap(),
            device::load("titanx").unwrap(),
        );
        let runs = [
            run(config("k", 1, 1.0, 0.0), &a, 1.0),
            run(config("k", 2, 1.0, 0.0), &b, 1.0),
        ];
        assert!(matches!(
            Predictor::fit(&runs),
            Err(FitError::MixedDevices(_))
        ));
        assert_eq!(Predictor::fit(&[]), Err(FitError::NoRuns));
    }
}
