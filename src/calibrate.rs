//! Calibrating one kernel end to end: the model's planner picks the sizes, the campaign measures
//! them, the model turns the samples into a bound table. This is the only place the measurement
//! and model layers meet, so neither has to know the other.

use chrono::Utc;
use std::sync::atomic::AtomicBool;

use crate::gpu::Gpu;
use crate::kernels::KernelSpec;
use crate::measure::{self, CampaignSettings, KernelCampaign, MeasureError};
use crate::model::{self, method, Method, MethodConfig, ModelError, Observations};
use crate::store::KernelCalibration;

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Measure(#[from] MeasureError),
    #[error("kernel {kernel}: {source}")]
    Model { kernel: String, source: ModelError },
}

/// What a calibration is made with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recipe {
    pub campaign: CampaignSettings,
    pub method: Method,
    pub method_config: MethodConfig,
}

/// Plan, measure and fit one kernel. `progress` receives the fraction done, 0 to 1.
pub fn calibrate_kernel(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    recipe: &Recipe,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<KernelCalibration, CalibrateError> {
    let sizes = gpu.info().partition_sizes.clone();
    let budget = recipe.campaign.max_sizes;
    let mut next = |c: &KernelCampaign| model::planner::next_size(&observations(c), &sizes, budget);
    let mut campaign = measure::run_campaign(
        gpu,
        kernel,
        &recipe.campaign,
        &mut next,
        cancel,
        &mut phase(progress, PLANNED_SIZES),
    )?;
    look_for_a_heavy_tail(gpu, kernel, recipe, &mut campaign, cancel, progress)?;
    let table = method::bound_table(
        &observations(&campaign),
        &sizes,
        recipe.method,
        &recipe.method_config,
    )
    .map_err(|source| CalibrateError::Model {
        kernel: kernel.name.to_string(),
        source,
    })?;
    let calibrated_at = Utc::now();
    Ok(KernelCalibration {
        id: format!(
            "{}@{}",
            kernel.name,
            calibrated_at.format("%Y%m%dT%H%M%S%.3fZ")
        ),
        calibrated_at,
        campaign,
        table,
    })
}

/// Screen the largest measured size for rare slow launches; if the tail then looks heavy, go back
/// to every measured size for `heavy_tail_launches` (a heavy-tailed bound needs them).
fn look_for_a_heavy_tail(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    recipe: &Recipe,
    campaign: &mut KernelCampaign,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<(), CalibrateError> {
    let settings = &recipe.campaign;
    let Some(&largest) = campaign.sizes.keys().next_back() else {
        return Ok(());
    };
    let screened = settings.launches + settings.screen_launches;
    measure::extend_campaign(
        gpu,
        kernel,
        settings,
        campaign,
        &[largest],
        screened,
        cancel,
        &mut phase(progress, SCREEN),
    )?;
    if settings.heavy_tail_launches <= screened
        || !model::tail::is_heavy(&observations(campaign), &recipe.method_config)
    {
        return Ok(());
    }
    let sizes: Vec<u32> = campaign.sizes.keys().copied().collect();
    measure::extend_campaign(
        gpu,
        kernel,
        settings,
        campaign,
        &sizes,
        settings.heavy_tail_launches,
        cancel,
        &mut phase(progress, HEAVY_TAIL),
    )?;
    Ok(())
}

/// The share of a kernel's progress (0 to 1) each phase reports into, so that progress never runs
/// backwards when a phase starts. Whether the heavy-tail phase runs is known only after the
/// screen, so a light-tailed kernel jumps from 0.7 to done.
const PLANNED_SIZES: (f64, f64) = (0.0, 0.6);
const SCREEN: (f64, f64) = (0.6, 0.7);
const HEAVY_TAIL: (f64, f64) = (0.7, 1.0);

/// A campaign progress callback (launches done, launches planned) mapped into `share`.
fn phase<'a>(
    progress: &'a mut dyn FnMut(f64),
    (from, to): (f64, f64),
) -> impl FnMut(u64, u64) + 'a {
    move |done, total| progress(from + (to - from) * done as f64 / total.max(1) as f64)
}

/// A campaign's samples as the model takes them.
pub fn observations(c: &KernelCampaign) -> Observations {
    Observations {
        geometry: c.geometry,
        by_size: c.samples(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
    use crate::kernels;

    fn launches_per_size(name: &str) -> Vec<usize> {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let recipe = Recipe::default();
        let kernel = kernels::find(name).unwrap();
        let cal = calibrate_kernel(
            &mut gpu,
            &kernel,
            &recipe,
            &AtomicBool::new(false),
            &mut |_| {},
        )
        .unwrap();
        cal.campaign
            .sizes
            .values()
            .map(|r| r.times_ns.len())
            .collect()
    }

    #[test]
    fn a_heavy_tail_sends_the_campaign_back_for_more_launches() {
        // tmatch: 1% of launches hit a Pareto delay of up to +80%.
        let sizes = launches_per_size("tmatch");
        assert!(sizes.iter().all(|&n| n == 10_000), "{sizes:?}");
    }

    #[test]
    fn a_light_tail_gets_only_the_screen_at_its_largest_size() {
        let sizes = launches_per_size("hotspot");
        let (last, rest) = sizes.split_last().unwrap();
        assert_eq!(*last, 2_200, "{sizes:?}");
        assert!(rest.iter().all(|&n| n == 200), "{sizes:?}");
    }
}
