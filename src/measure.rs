//! A calibration campaign: warm-up, then timed launches at each chosen partition size, in batches
//! with telemetry around each one, every sample kept, and the conditions stamped.
//!
//! Which sizes to measure is not decided here: the caller passes a `next_size` function (the
//! model's planner), so measurement stays ignorant of the model.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::gpu::{Fingerprint, Gpu, GpuError, Interference, PartitionSize, RunRequest, Telemetry};
use crate::kernels::{Geometry, KernelSpec};
use crate::launch_times::LaunchTimes;

/// How much to measure at each size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignSettings {
    pub warmup: u32,
    /// Timed launches per size.
    pub launches: u32,
    /// Launches per batch: telemetry is read around each batch.
    pub batch: u32,
    /// Most sizes the planner may choose per kernel.
    pub max_sizes: usize,
    /// Launches per size when the tail turns out heavy: a heavy tail needs more samples to be
    /// located at all, so the campaign goes back to each measured size for more. A bound stated at
    /// 1e-4 per launch should rest on several launches beyond it: 10,000 at each of five sizes
    /// is five per 1e-4.
    pub heavy_tail_launches: u32,
    /// Extra launches at the largest measured size (the quickest to run) to look for rare slow
    /// launches before deciding whether the tail is heavy: a delay that hits 1% of launches can
    /// hide in the first 1,000 and shows in 3,000.
    #[serde(default = "default_screen_launches")]
    pub screen_launches: u32,
    pub interference: Interference,
}

fn default_screen_launches() -> u32 {
    2000
}

impl Default for CampaignSettings {
    fn default() -> Self {
        CampaignSettings {
            warmup: 10,
            launches: 200,
            batch: 50,
            max_sizes: 5,
            heavy_tail_launches: 10_000,
            screen_launches: default_screen_launches(),
            interference: Interference::Isolated,
        }
    }
}

/// Everything recorded at one partition size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeRecord {
    pub granted_sms: u32,
    /// Every launch time in nanoseconds, in launch order (held compactly; stored as an array).
    pub times_ns: LaunchTimes,
    pub batches: u32,
    /// Batches that ran with a throttle reason active: kept, and counted here.
    pub throttled_batches: u32,
    /// Batches that really ran with the stressor on the other SMs. A contended campaign on the
    /// whole device has no other SMs, so its batches run isolated and are not counted here.
    #[serde(default)]
    pub contended_batches: u32,
    /// The fewest SMs the stressor had in a contended batch (0 when none ran).
    #[serde(default)]
    pub stressor_sms: u32,
}

impl SizeRecord {
    /// Nothing measured yet at `sms`.
    pub fn empty(sms: PartitionSize) -> Self {
        SizeRecord {
            granted_sms: sms,
            times_ns: LaunchTimes::new(),
            batches: 0,
            throttled_batches: 0,
            contended_batches: 0,
            stressor_sms: 0,
        }
    }
}

/// The conditions a campaign ran under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentStamp {
    pub fingerprint: Fingerprint,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub host: String,
    pub interference: Interference,
    pub sm_clock_mhz_min: Option<u32>,
    pub sm_clock_mhz_max: Option<u32>,
    pub temperature_c_max: Option<u32>,
    pub throttle_reasons: Vec<String>,
}

/// One kernel's campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelCampaign {
    pub kernel: String,
    pub geometry: Option<Geometry>,
    pub sizes: BTreeMap<PartitionSize, SizeRecord>,
    /// A few launches at sizes not measured in full (the calibration's verification sweep).
    #[serde(default)]
    pub verified: BTreeMap<PartitionSize, SizeRecord>,
    pub environment: EnvironmentStamp,
}

impl KernelCampaign {
    /// Samples per size, as the model and the samples CSV take them.
    pub fn samples(&self) -> BTreeMap<u32, Vec<u64>> {
        self.sizes
            .iter()
            .map(|(&m, r)| (m, r.times_ns.to_vec()))
            .collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("cancelled")]
    Cancelled,
}

/// Progress of a campaign: launches done out of launches planned.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Run a campaign on `kernel`, measuring the sizes `next_size` picks until it returns `None`.
pub fn run_campaign(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    settings: &CampaignSettings,
    next_size: &mut dyn FnMut(&KernelCampaign) -> Option<PartitionSize>,
    cancel: &AtomicBool,
    progress: Progress<'_>,
) -> Result<KernelCampaign, MeasureError> {
    let planned = settings.max_sizes.max(1) as u64 * u64::from(settings.launches);
    let mut campaign = KernelCampaign {
        kernel: kernel.name.to_string(),
        geometry: None,
        sizes: BTreeMap::new(),
        verified: BTreeMap::new(),
        environment: stamp(gpu, settings.interference),
    };
    let mut telemetry = Vec::new();
    while let Some(sms) = next_size(&campaign) {
        let done = campaign.sizes.len() as u64 * u64::from(settings.launches);
        let mut at_size = |n: u64| progress(done + n, planned);
        let mut record = SizeRecord::empty(sms);
        let target = Target {
            sms,
            launches: settings.launches,
        };
        let geometry = measure_size(
            gpu,
            kernel,
            target,
            settings,
            &mut record,
            cancel,
            &mut telemetry,
            &mut at_size,
        )?;
        campaign.geometry = campaign.geometry.or(geometry);
        campaign.sizes.insert(sms, record);
    }
    finish_stamp(&mut campaign.environment, &telemetry);
    progress(planned, planned);
    Ok(campaign)
}

/// Bring the measured sizes of `campaign` in `sizes` up to `launches` samples, appending to what
/// is there.
#[allow(clippy::too_many_arguments)]
pub fn extend_campaign(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    settings: &CampaignSettings,
    campaign: &mut KernelCampaign,
    sizes: &[PartitionSize],
    launches: u32,
    cancel: &AtomicBool,
    progress: Progress<'_>,
) -> Result<(), MeasureError> {
    let missing = |r: &SizeRecord| u64::from(launches).saturating_sub(r.times_ns.len() as u64);
    let chosen = |sms: &PartitionSize| sizes.contains(sms);
    let planned: u64 = campaign
        .sizes
        .iter()
        .filter(|(sms, _)| chosen(sms))
        .map(|(_, r)| missing(r))
        .sum();
    let mut done = 0;
    let mut telemetry = Vec::new();
    for (&sms, record) in campaign.sizes.iter_mut().filter(|(sms, _)| chosen(sms)) {
        let before = record.times_ns.len() as u64;
        let mut at_size = |n: u64| progress(done + n.saturating_sub(before), planned);
        let target = Target { sms, launches };
        measure_size(
            gpu,
            kernel,
            target,
            settings,
            record,
            cancel,
            &mut telemetry,
            &mut at_size,
        )?;
        done += (record.times_ns.len() as u64).saturating_sub(before);
    }
    finish_stamp(&mut campaign.environment, &telemetry);
    Ok(())
}

/// Time `launches` launches at each of `sizes` into `campaign.verified` (the verification sweep:
/// a few launches at sizes not measured in full).
#[allow(clippy::too_many_arguments)]
pub fn verify_sizes(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    settings: &CampaignSettings,
    campaign: &mut KernelCampaign,
    sizes: &[PartitionSize],
    launches: u32,
    cancel: &AtomicBool,
    progress: Progress<'_>,
) -> Result<(), MeasureError> {
    let planned = sizes.len() as u64 * u64::from(launches);
    let mut telemetry = Vec::new();
    for (i, &sms) in sizes.iter().enumerate() {
        let done = i as u64 * u64::from(launches);
        let record = campaign
            .verified
            .entry(sms)
            .or_insert_with(|| SizeRecord::empty(sms));
        let target = Target { sms, launches };
        let mut at_size = |n: u64| progress(done + n, planned);
        measure_size(
            gpu,
            kernel,
            target,
            settings,
            record,
            cancel,
            &mut telemetry,
            &mut at_size,
        )?;
    }
    finish_stamp(&mut campaign.environment, &telemetry);
    Ok(())
}

/// Where to measure and how many samples to end with.
#[derive(Clone, Copy)]
struct Target {
    sms: PartitionSize,
    launches: u32,
}

/// Warm up, then time launches in batches until `record` holds `target.launches` samples.
#[allow(clippy::too_many_arguments)]
fn measure_size(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    target: Target,
    settings: &CampaignSettings,
    record: &mut SizeRecord,
    cancel: &AtomicBool,
    telemetry: &mut Vec<Telemetry>,
    progress: &mut dyn FnMut(u64),
) -> Result<Option<Geometry>, MeasureError> {
    let Target { sms, launches } = target;
    let mut geometry = None;
    let mut warmup = settings.warmup;
    while record.times_ns.len() < launches as usize {
        if cancel.load(Ordering::Relaxed) {
            return Err(MeasureError::Cancelled);
        }
        let left = launches - record.times_ns.len() as u32;
        let request = RunRequest {
            sms,
            warmup,
            launches: left.min(settings.batch.max(1)),
            interference: settings.interference,
        };
        let batch = gpu.run(kernel, &request)?;
        warmup = 0;
        record.granted_sms = batch.granted_sms;
        record.batches += 1;
        record.throttled_batches += u32::from(batch.throttled());
        if batch.interference == Interference::Contended {
            record.stressor_sms = match record.contended_batches {
                0 => batch.stressor_sms,
                _ => record.stressor_sms.min(batch.stressor_sms),
            };
            record.contended_batches += 1;
        }
        record.times_ns.extend_from_slice(&batch.times_ns);
        geometry = geometry.or(batch.geometry);
        telemetry.push(batch.telemetry);
        progress(record.times_ns.len() as u64);
    }
    record.times_ns.shrink_to_fit();
    Ok(geometry)
}

fn stamp(gpu: &mut dyn Gpu, interference: Interference) -> EnvironmentStamp {
    let now = Utc::now();
    EnvironmentStamp {
        fingerprint: gpu.info().fingerprint.clone(),
        started_at: now,
        finished_at: now,
        host: hostname(),
        interference,
        sm_clock_mhz_min: None,
        sm_clock_mhz_max: None,
        temperature_c_max: None,
        throttle_reasons: Vec::new(),
    }
}

fn finish_stamp(env: &mut EnvironmentStamp, telemetry: &[Telemetry]) {
    env.finished_at = Utc::now();
    if telemetry.is_empty() {
        return;
    }
    let clocks = telemetry.iter().filter_map(|t| t.sm_clock_mhz);
    env.sm_clock_mhz_min = clocks.clone().min();
    env.sm_clock_mhz_max = clocks.max();
    env.temperature_c_max = telemetry.iter().filter_map(|t| t.temperature_c).max();
    let mut reasons: Vec<String> = telemetry
        .iter()
        .flat_map(|t| t.throttle_reasons.clone())
        .collect();
    reasons.sort();
    reasons.dedup();
    env.throttle_reasons = reasons;
}

/// This machine's name, for stamps.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
    use crate::kernels;

    #[test]
    fn a_campaign_keeps_every_sample_at_every_chosen_size() {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let kernel = kernels::find("srad").unwrap();
        let settings = CampaignSettings {
            launches: 120,
            batch: 50,
            ..Default::default()
        };
        let mut plan = vec![132, 8];
        let mut last = (0, 0);
        let campaign = run_campaign(
            &mut gpu,
            &kernel,
            &settings,
            &mut |_| plan.pop(),
            &AtomicBool::new(false),
            &mut |d, t| last = (d, t),
        )
        .unwrap();
        assert_eq!(
            campaign.sizes.keys().copied().collect::<Vec<_>>(),
            vec![8, 132]
        );
        assert!(campaign
            .sizes
            .values()
            .all(|r| r.times_ns.len() == 120 && r.batches == 3));
        assert!(campaign.geometry.is_some());
        assert_eq!(last.0, last.1);
    }

    #[test]
    fn cancelling_stops_before_the_next_batch() {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let kernel = kernels::find("srad").unwrap();
        let result = run_campaign(
            &mut gpu,
            &kernel,
            &CampaignSettings::default(),
            &mut |_| Some(8),
            &AtomicBool::new(true),
            &mut |_, _| {},
        );
        assert!(matches!(result, Err(MeasureError::Cancelled)));
    }
}
