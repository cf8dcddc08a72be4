//! A sweep: every kernel at every realisable partition size, the same number of launches at each,
//! for datasets and validation rather than for calibration (a calibration measures the few sizes
//! the planner picks). `wcetctl campaign` runs one and writes what it recorded: a samples CSV per
//! interference (the design's `kernel,sms,time_ns` plus per-launch conditions), a geometry CSV, and
//! a stamp of the conditions the whole sweep ran under.
//!
//! Layer: beside [`crate::measure`], above the GPU and below nothing: it knows devices and
//! batches, not bounds.

use std::collections::BTreeMap;
use std::io::Write;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::fnv::fnv1a_hex;
use crate::gpu::{
    Batch, DeviceInfo, Gpu, GpuError, Interference, PartitionSize, PlacementReport, RunRequest,
};
use crate::kernels::{Geometry, KernelSpec};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepSettings {
    /// Timed launches per kernel, size and interference.
    pub launches: u32,
    /// Launches per batch; every batch warms up with at least one untimed launch.
    pub batch: u32,
    /// Untimed launches before the first batch at each size.
    pub warmup: u32,
    pub interference: Vec<Interference>,
    /// Sizes to run; empty means every realisable size.
    pub sizes: Vec<PartitionSize>,
}

/// One timed launch and the conditions of the batch it ran in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub kernel: String,
    pub sms: u32,
    pub time_ns: u64,
    /// What was asked for; `applied` says what ran (the whole device has no other SMs to stress).
    pub requested: Interference,
    pub applied: Interference,
    pub stressor_sms: u32,
    /// Batch number within this kernel, size and interference, from 0.
    pub batch: u32,
    pub sm_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub throttled: bool,
}

/// Summary of the conditions a sweep ran under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamp {
    pub gpu: String,
    pub backend: String,
    /// FNV-1a (64 bit, hex) of the GPU's UUID: identifies the card without publishing its UUID.
    pub uuid_fnv1a: String,
    pub driver: String,
    pub cuda: String,
    pub clock_policy: String,
    pub compute_capability: u32,
    pub total_sms: u32,
    pub partition_sizes: Vec<u32>,
    pub unusable_sizes: Vec<(u32, String)>,
    pub host_fnv1a: String,
    pub wcetd_version: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub launches_per_size: u32,
    pub batch: u32,
    pub warmup: u32,
    /// Problem size per kernel.
    pub kernels: BTreeMap<String, u32>,
    pub sm_clock_mhz_min: Option<u32>,
    pub sm_clock_mhz_max: Option<u32>,
    pub temperature_c_min: Option<u32>,
    pub temperature_c_max: Option<u32>,
    pub power_mw_max: Option<u32>,
    pub batches: u64,
    pub throttled_batches: u64,
    /// Violation time the driver counted across all batches (power, thermal, board, reliability).
    pub throttle_ns: u64,
    pub throttle_reasons: Vec<String>,
    pub placement: Vec<PlacementReport>,
}

/// Everything a sweep recorded.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub rows: Vec<Row>,
    pub geometry: BTreeMap<String, Geometry>,
    pub stamp: Stamp,
}

/// Run `kernels` at every size in `settings`, each interference in turn. `progress` gets
/// (launches done, launches planned, what is running now).
pub fn run(
    gpu: &mut dyn Gpu,
    kernels: &[KernelSpec],
    settings: &SweepSettings,
    progress: &mut dyn FnMut(u64, u64, &str),
) -> Result<Sweep, GpuError> {
    let info = gpu.info().clone();
    let sizes = sizes_to_sweep(gpu, &info, settings)?;
    let planned = kernels.len() as u64
        * sizes.len() as u64
        * settings.interference.len() as u64
        * u64::from(settings.launches);
    let started_at = Utc::now();
    let mut rows = Vec::with_capacity(planned as usize);
    let mut geometry = BTreeMap::new();
    let mut conditions = Conditions::default();
    // Kernel, then size, then interference: a kernel's problem is prepared once per partition.
    for kernel in kernels {
        for &sms in &sizes {
            for &interference in &settings.interference {
                let what = format!("{} at {sms} SMs, {interference}", kernel.name);
                progress(rows.len() as u64, planned, &what);
                let mut batch = 0;
                let mut done = 0;
                while done < settings.launches {
                    let request = RunRequest {
                        sms,
                        warmup: if batch == 0 { settings.warmup } else { 1 },
                        launches: (settings.launches - done).min(settings.batch.max(1)),
                        interference,
                    };
                    let b = gpu.run(kernel, &request)?;
                    if let Some(g) = b.geometry {
                        geometry.entry(kernel.name.to_string()).or_insert(g);
                    }
                    conditions.add(&b.telemetry);
                    rows.extend(batch_rows(&kernel.name, interference, batch, &b));
                    done += b.times_ns.len() as u32;
                    batch += 1;
                    progress(rows.len() as u64, planned, &what);
                }
            }
        }
    }
    let stamp = stamp(
        &info,
        settings,
        kernels,
        conditions,
        started_at,
        gpu.placement(),
    );
    Ok(Sweep {
        rows,
        geometry,
        stamp,
    })
}

/// The sizes a sweep runs at: those `settings` name, each checked with the device first, or
/// else every size the device can realise.
fn sizes_to_sweep(
    gpu: &dyn Gpu,
    info: &DeviceInfo,
    settings: &SweepSettings,
) -> Result<Vec<PartitionSize>, GpuError> {
    if settings.sizes.is_empty() {
        return Ok(info.partition_sizes.clone());
    }
    for &m in &settings.sizes {
        gpu.check_partition(m)?;
    }
    Ok(settings.sizes.clone())
}

/// One row for each launch of batch `b` (number `batch` of its cell), with what was asked
/// (`requested`) beside what ran, and the conditions the batch ran under.
fn batch_rows<'a>(
    kernel: &'a str,
    requested: Interference,
    batch: u32,
    b: &'a Batch,
) -> impl Iterator<Item = Row> + 'a {
    b.times_ns.iter().map(move |&t| Row {
        kernel: kernel.to_string(),
        sms: b.granted_sms,
        time_ns: t,
        requested,
        applied: b.interference,
        stressor_sms: b.stressor_sms,
        batch,
        sm_clock_mhz: b.telemetry.sm_clock_mhz,
        temperature_c: b.telemetry.temperature_c,
        throttled: b.throttled(),
    })
}

/// What a sweep ran on and under, for its `stamp.json`.
fn stamp(
    info: &DeviceInfo,
    settings: &SweepSettings,
    kernels: &[KernelSpec],
    conditions: Conditions,
    started_at: DateTime<Utc>,
    placement: &[PlacementReport],
) -> Stamp {
    let fp = &info.fingerprint;
    Stamp {
        gpu: info.name.clone(),
        backend: info.backend.to_string(),
        uuid_fnv1a: fnv1a_hex(fp.uuid.as_bytes()),
        driver: fp.driver.clone(),
        cuda: fp.cuda.clone(),
        clock_policy: fp.clock_policy.clone(),
        compute_capability: info.cc,
        total_sms: info.total_sms,
        partition_sizes: info.partition_sizes.clone(),
        unusable_sizes: info.unusable_sizes.clone(),
        host_fnv1a: fnv1a_hex(crate::measure::hostname().as_bytes()),
        wcetd_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at,
        finished_at: Utc::now(),
        launches_per_size: settings.launches,
        batch: settings.batch,
        warmup: settings.warmup,
        kernels: kernels
            .iter()
            .map(|k| (k.name.clone(), k.builtin().map_or(0, |b| b.problem_size)))
            .collect(),
        sm_clock_mhz_min: conditions.clock_min,
        sm_clock_mhz_max: conditions.clock_max,
        temperature_c_min: conditions.temp_min,
        temperature_c_max: conditions.temp_max,
        power_mw_max: conditions.power_max,
        batches: conditions.batches,
        throttled_batches: conditions.throttled,
        throttle_ns: conditions.throttle_ns,
        throttle_reasons: conditions.reasons.into_iter().collect(),
        placement: placement.to_vec(),
    }
}

#[derive(Default)]
struct Conditions {
    clock_min: Option<u32>,
    clock_max: Option<u32>,
    temp_min: Option<u32>,
    temp_max: Option<u32>,
    power_max: Option<u32>,
    batches: u64,
    throttled: u64,
    throttle_ns: u64,
    reasons: std::collections::BTreeSet<String>,
}

impl Conditions {
    fn add(&mut self, t: &crate::gpu::Telemetry) {
        let lo = |a: Option<u32>, b: Option<u32>| a.into_iter().chain(b).min();
        let hi = |a: Option<u32>, b: Option<u32>| a.into_iter().chain(b).max();
        self.clock_min = lo(self.clock_min, t.sm_clock_mhz);
        self.clock_max = hi(self.clock_max, t.sm_clock_mhz);
        self.temp_min = lo(self.temp_min, t.temperature_c);
        self.temp_max = hi(self.temp_max, t.temperature_c);
        self.power_max = hi(self.power_max, t.power_mw);
        self.batches += 1;
        self.throttled += u64::from(t.throttled());
        self.throttle_ns += t.throttle_ns;
        self.reasons.extend(t.throttle_reasons.iter().cloned());
    }
}

/// Write the rows of one requested interference as a samples CSV: the design's three columns
/// first, then the conditions (readers ignore extra columns).
pub fn write_rows(out: impl Write, rows: &[Row], requested: Interference) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "kernel",
        "sms",
        "time_ns",
        "interference",
        "stressor_sms",
        "batch",
        "sm_clock_mhz",
        "temperature_c",
        "throttled",
    ])?;
    let opt = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
    for r in rows.iter().filter(|r| r.requested == requested) {
        w.write_record([
            r.kernel.clone(),
            r.sms.to_string(),
            r.time_ns.to_string(),
            r.applied.to_string(),
            r.stressor_sms.to_string(),
            r.batch.to_string(),
            opt(r.sm_clock_mhz),
            opt(r.temperature_c),
            u8::from(r.throttled).to_string(),
        ])?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
    use crate::kernels;
    use crate::samples;

    #[test]
    fn a_sweep_covers_every_size_and_labels_the_whole_device_isolated() {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let kernel = kernels::find("srad").unwrap();
        let settings = SweepSettings {
            launches: 30,
            batch: 20,
            warmup: 2,
            interference: vec![Interference::Isolated, Interference::Contended],
            sizes: Vec::new(),
        };
        let mut last = (0, 0);
        let sweep = run(&mut gpu, &[kernel], &settings, &mut |d, t, _| last = (d, t)).unwrap();
        assert_eq!(last.0, last.1);
        assert_eq!(sweep.rows.len(), 17 * 2 * 30);
        let whole: Vec<&Row> = sweep
            .rows
            .iter()
            .filter(|r| r.sms == 132 && r.requested == Interference::Contended)
            .collect();
        assert!(whole
            .iter()
            .all(|r| r.applied == Interference::Isolated && r.stressor_sms == 0));
        let at8 = sweep
            .rows
            .iter()
            .find(|r| r.sms == 8 && r.requested == Interference::Contended)
            .unwrap();
        assert_eq!(
            (at8.applied, at8.stressor_sms),
            (Interference::Contended, 124)
        );
        assert_eq!(sweep.stamp.batches, 17 * 2 * 2);
        assert_eq!(sweep.stamp.uuid_fnv1a.len(), 16);

        let mut csv = Vec::new();
        write_rows(&mut csv, &sweep.rows, Interference::Contended).unwrap();
        let read = samples::read_samples(csv.as_slice()).unwrap();
        assert_eq!(read["srad"].len(), 17);
        assert!(read["srad"].values().all(|t| t.len() == 30));
    }

    #[test]
    fn sizes_the_device_cannot_realise_are_refused_before_anything_runs() {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let settings = SweepSettings {
            launches: 1,
            batch: 1,
            warmup: 0,
            interference: vec![Interference::Isolated],
            sizes: vec![8, 12],
        };
        let err = run(
            &mut gpu,
            &kernels::builtin_suite(),
            &settings,
            &mut |_, _, _| {},
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("12 SMs is not realisable"), "{err}");
    }
}
