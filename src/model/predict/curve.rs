//! The predicted typical time of one kernel at every partition size of a device: the roofline of
//! its static work, with occupancy and waves from the device's per-SM limits. Used where nothing
//! was measured yet (another device, a kernel not yet calibrated); never a bound.

use super::device::{DeviceDescription, DEFAULT_LAUNCH_OVERHEAD_US};

/// What a kernel's timed launch does, known before it runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StaticWork {
    pub blocks: u64,
    pub threads_per_block: u32,
    /// 0 when unknown (occupancy is then limited by threads, blocks and shared memory only).
    pub regs_per_thread: u32,
    pub shared_per_block: u32,
    pub flops: f64,
    /// Global-memory bytes moved.
    pub bytes: f64,
    /// Bytes of the buffers the launch touches, to decide whether they stay in L2.
    pub working_set: f64,
    /// Where these figures came from, for the label of every prediction made from them.
    pub basis: String,
}

/// Predicted typical time (ns) at each partition size, ascending.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PredictedCurve {
    pub device: String,
    pub points: Vec<(u32, f64)>,
}

impl PredictedCurve {
    /// The smallest size within 5% of the time on the largest: where more SMs stop paying.
    pub fn knee(&self) -> Option<u32> {
        let &(_, last) = self.points.last()?;
        self.points
            .iter()
            .find(|&&(_, t)| t <= 1.05 * last)
            .map(|&(m, _)| m)
    }

    pub fn at(&self, sms: u32) -> Option<f64> {
        self.points
            .iter()
            .find(|&&(m, _)| m == sms)
            .map(|&(_, t)| t)
    }
}

/// Time (ns) of `work` on `m` SMs of `d`: the longest of the launch overhead, the SMs' arithmetic
/// (waves of resident blocks, each SM at its share of the device's throughput) and the memory
/// traffic (at the level the working set lives in, and at most what `m` SMs can draw).
pub fn time_on(work: &StaticWork, d: &DeviceDescription, m: u32) -> f64 {
    let m = m.clamp(1, d.sms);
    let floor = d.launch_overhead_us.unwrap_or(DEFAULT_LAUNCH_OVERHEAD_US) * 1e3;
    let blocks = work.blocks.max(1);
    let per_sm = u64::from(d.blocks_per_sm(
        work.threads_per_block,
        work.regs_per_thread,
        work.shared_per_block,
    ));
    let waves = blocks.div_ceil(u64::from(m) * per_sm);
    let resident = per_sm.min(blocks.div_ceil(u64::from(m)));
    let sm_flops_per_ns = d.compute_gflops / f64::from(d.sms);
    let arithmetic = (waves * resident) as f64 * (work.flops / blocks as f64) / sm_flops_per_ns;
    let bandwidth = d
        .level_gbps(work.working_set)
        .min(f64::from(m) * d.sm_gbps());
    let memory = work.bytes / bandwidth;
    // At least a nanosecond: a description may say launches cost nothing, and 0 is what the
    // daemon reports where there is no prediction at all.
    floor.max(arithmetic).max(memory).max(1.0)
}

/// The predicted curve at `sizes` (SM counts above the device's are read as the whole device).
pub fn partition_curve(work: &StaticWork, d: &DeviceDescription, sizes: &[u32]) -> PredictedCurve {
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    PredictedCurve {
        device: d.name.clone(),
        points: sizes
            .into_iter()
            .map(|m| (m, time_on(work, d, m)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::predict::device;

    fn streaming(bytes: f64) -> StaticWork {
        StaticWork {
            blocks: 65536,
            threads_per_block: 256,
            regs_per_thread: 16,
            shared_per_block: 0,
            flops: bytes / 6.0,
            bytes,
            working_set: bytes,
            basis: "test".into(),
        }
    }

    #[test]
    fn a_streaming_kernel_speeds_up_until_dram_saturates() {
        let d = device::load("h200").unwrap();
        let sizes: Vec<u32> = (1..=16).map(|i| i * 8).chain([132]).collect();
        let c = partition_curve(&streaming(1e9), &d, &sizes);
        let t: Vec<f64> = c.points.iter().map(|p| p.1).collect();
        assert!(
            t.windows(2).all(|w| w[1] <= w[0]),
            "more SMs are never slower: {t:?}"
        );
        // DRAM (4.8 TB/s) saturates at half the SMs: 66 by default.
        let knee = c.knee().unwrap();
        assert!((64..=72).contains(&knee), "{knee}");
        assert!((c.at(132).unwrap() / (1e9 / 4800.0) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn arithmetic_follows_waves_and_a_tiny_launch_costs_the_overhead() {
        let d = device::load("h200").unwrap();
        let mut w = streaming(1e3);
        w.flops = 1e12;
        w.blocks = 132 * 8; // one full wave on the whole device at 8 blocks per SM
        let full = time_on(&w, &d, 132);
        assert!((full / (1e12 / 66900.0) - 1.0).abs() < 1e-9, "{full}");
        // On 66 SMs: two waves, twice the time.
        assert!((time_on(&w, &d, 66) / full - 2.0).abs() < 1e-9);
        w.flops = 0.0;
        assert_eq!(time_on(&w, &d, 132), DEFAULT_LAUNCH_OVERHEAD_US * 1e3);
    }
}
