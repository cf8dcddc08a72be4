//! Calibrating one kernel end to end: the model's planner picks the sizes, the campaign measures
//! them, the model turns the samples into a bound table. This is the only place the measurement
//! and model layers meet, so neither has to know the other.
//!
//! No bound rests on a law alone. When measuring every realisable size fits the kernel's time
//! budget (estimated from the first two sizes), every size is measured. Otherwise, after the
//! fit, a verification sweep times a few dozen launches at every size that was not measured;
//! where their median is above the fitted curve by more than their noise explains, that size is
//! measured in full and the kernel refitted, until the curve agrees with every verified size.

use chrono::Utc;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use crate::gpu::Gpu;
use crate::kernels::KernelSpec;
use crate::measure::{self, CampaignSettings, KernelCampaign, MeasureError};
use crate::model::{
    self, method, throttle, verify, Method, MethodConfig, ModelError, Observations,
};
use crate::store::{KernelCalibration, Origin};

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Measure(#[from] MeasureError),
    #[error("kernel {kernel}: {source}")]
    Model { kernel: String, source: ModelError },
    #[error("kernel {kernel} not timed: {why}; reload the kernels (`wcetctl kernels reload`) and calibrate it again")]
    CodeChanged { kernel: String, why: String },
}

/// Refuse to time (or to keep the times of) a manifest whose module or fill files are no longer
/// the bytes it was loaded with: the calibration would record the loaded code's digest over
/// other code's times. Checked before a campaign (or a bundle's arrival check) and after it, so
/// a change while it ran is caught too.
fn same_code_as_loaded(kernel: &KernelSpec) -> Result<(), CalibrateError> {
    match kernel.manifest().and_then(|m| m.changed_on_disk()) {
        Some(why) => Err(CalibrateError::CodeChanged {
            kernel: kernel.name.clone(),
            why,
        }),
        None => Ok(()),
    }
}

/// What a calibration is made with.
#[derive(Debug, Clone, Copy)]
pub struct Recipe {
    pub campaign: CampaignSettings,
    pub method: Method,
    pub method_config: MethodConfig,
    pub sweep: VerificationSweep,
    /// Launches of the delay probe before a job's kernels (0: no probe).
    pub delay_probe_launches: u32,
    /// Sustained slowdowns the device showed before this kernel (the delay probe, the job's
    /// kernels measured so far): allowed for in every bound fitted with this recipe.
    pub slowdowns: throttle::Evidence,
}

impl Default for Recipe {
    fn default() -> Self {
        Recipe {
            campaign: CampaignSettings::default(),
            method: Method::default(),
            method_config: MethodConfig::default(),
            sweep: VerificationSweep::default(),
            delay_probe_launches: DELAY_PROBE_LAUNCHES,
            slowdowns: throttle::Evidence::default(),
        }
    }
}

/// The default `--delay-probe-launches`: about 7 s on an H100 (54 µs of work per launch on the
/// whole device). Rare delays there hit about 1.6e-4 of launches, so 100,000 launches see a dozen
/// or more, where one kernel's campaign of a few thousand sees none or one.
pub const DELAY_PROBE_LAUNCHES: u32 = 100_000;

/// Probe the device's rare delays and sustained slowdowns and return `recipe` with them in it,
/// and notes for the job's log. A backend without a probe leaves the recipe as it is.
pub fn with_device_probe(
    gpu: &mut dyn Gpu,
    recipe: &Recipe,
) -> Result<(Recipe, Vec<String>), CalibrateError> {
    if recipe.delay_probe_launches == 0 {
        return Ok((*recipe, Vec::new()));
    }
    let whole = gpu.info().total_sms;
    let probe = gpu
        .delay_probe(whole, recipe.delay_probe_launches)
        .map_err(MeasureError::from)?;
    let mut with = *recipe;
    let mut notes = Vec::new();
    with.slowdowns.add(&probe);
    if let Some(found) = with.slowdowns.slowdown() {
        notes.push(format!("delay probe: {}", found.note()));
    }
    let unthrottled = throttle::without_runs(&probe);
    if let Some(delay) = model::tail::device_delay(&unthrottled, recipe.method_config.exceedance) {
        with.method_config.device_delay_ns = delay.ns;
        with.method_config.device_delay_exceedance = delay.exceedance;
        notes.push(delay.note);
    }
    Ok((with, notes))
}

/// How sizes that the planner did not choose are covered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerificationSweep {
    /// Verify every size not measured (off only to show what it protects against).
    pub enabled: bool,
    /// Launches per verified size.
    pub launches: u32,
    /// Seconds of launches per kernel: when measuring every realisable size is estimated to
    /// fit, every size is measured. 0 never measures more than the planner chooses.
    pub budget_s: f64,
    /// Most sizes measured in full because the fitted curve was loose there
    /// ([`verify::LOOSE_ABOVE`]); 0: the sweep only ever raises bounds.
    pub tightenings: usize,
}

impl Default for VerificationSweep {
    fn default() -> Self {
        VerificationSweep {
            enabled: true,
            launches: verify::SWEEP_LAUNCHES,
            budget_s: DEFAULT_BUDGET_S,
            tightenings: verify::MAX_TIGHTENINGS,
        }
    }
}

/// The default `--calibration-budget`: on Hopper, 17 sizes of 200 launches of a 1 ms kernel (and
/// the screen) take about 6 s, so most kernels are measured at every size.
pub const DEFAULT_BUDGET_S: f64 = 10.0;

/// Plan, measure and fit one kernel. `progress` receives the fraction done, 0 to 1.
pub fn calibrate_kernel(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    recipe: &Recipe,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<KernelCalibration, CalibrateError> {
    let sizes = gpu.info().partition_sizes.clone();
    let measured = measure_kernel(gpu, kernel, recipe, cancel, progress)?;
    let mut recipe = *recipe;
    measured.add_to(&mut recipe.slowdowns);
    fit_measured(measured, &sizes, &recipe)
}

/// A kernel's campaign, measured and not yet fitted, with why sizes were added.
#[derive(Debug)]
pub struct Measured {
    pub campaign: KernelCampaign,
    notes: Vec<String>,
    origin: Origin,
    source: String,
    /// The kernel's [`KernelSpec::code_digest`] when it was measured.
    code: String,
}

impl Measured {
    /// Add this campaign's launches to the device's evidence of sustained slowdowns.
    pub fn add_to(&self, evidence: &mut throttle::Evidence) {
        for record in self.campaign.sizes.values() {
            evidence.add(&record.times_ns.to_vec());
        }
    }
}

/// Plan and measure one kernel: the planner's sizes (or every size, when that fits the budget),
/// the heavy-tail screen and the verification sweep.
pub fn measure_kernel(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    recipe: &Recipe,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, CalibrateError> {
    same_code_as_loaded(kernel)?;
    let sizes = gpu.info().partition_sizes.clone();
    let budget = recipe.campaign.max_sizes;
    let mut every_size = None;
    let mut next = |c: &KernelCampaign| {
        if c.sizes.len() >= 2 {
            let fits = *every_size.get_or_insert_with(|| fits_budget(c, &sizes, recipe));
            if fits {
                return sizes.iter().copied().find(|m| !c.sizes.contains_key(m));
            }
        }
        model::planner::next_size(&observations(c), &sizes, budget)
    };
    let mut campaign = measure::run_campaign(
        gpu,
        kernel,
        &recipe.campaign,
        &mut next,
        cancel,
        &mut phase(progress, PLANNED_SIZES),
    )?;
    look_for_a_heavy_tail(gpu, kernel, recipe, &mut campaign, cancel, progress)?;
    let mut notes = Vec::new();
    if every_size == Some(true) {
        notes.push(format!(
            "every realisable size measured: estimated within the budget of {} s",
            recipe.sweep.budget_s
        ));
    } else if recipe.sweep.enabled {
        let before = campaign.sizes.len();
        notes = sweep(gpu, kernel, recipe, &sizes, &mut campaign, cancel, progress)?;
        // Sizes the sweep added were not in the screen: if they make the tail heavy, every size
        // goes back for the heavy-tail launches, as after the screen.
        if campaign.sizes.len() > before {
            go_back_if_heavy(gpu, kernel, recipe, &mut campaign, cancel, &mut |_, _| {})?;
        }
    }
    same_code_as_loaded(kernel)?;
    Ok(Measured {
        campaign,
        notes,
        origin: match kernel.manifest() {
            Some(_) => Origin::Manifest,
            None => Origin::Builtin,
        },
        source: kernel
            .manifest()
            .map_or_else(|| "built-in suite".into(), |m| m.path.display().to_string()),
        code: kernel.code_digest(),
    })
}

/// Bounds at `sizes` from a measured campaign, allowing for the sustained slowdowns in the
/// recipe's evidence (the delay probe, the job's kernels, this one's own launches: the caller
/// adds them, once).
pub fn fit_measured(
    measured: Measured,
    sizes: &[u32],
    recipe: &Recipe,
) -> Result<KernelCalibration, CalibrateError> {
    let mut config = recipe.method_config;
    let mut notes = Vec::new();
    if let Some(found) = recipe.slowdowns.slowdown() {
        config.device_slowdown = found.depth;
        config.device_slowdown_share = found.share;
        notes.push(found.note());
    }
    let campaign = measured.campaign;
    let mut table = method::bound_table(&observations(&campaign), sizes, recipe.method, &config)
        .map_err(|source| CalibrateError::Model {
            kernel: campaign.kernel.clone(),
            source,
        })?;
    table.notes.extend(notes);
    table.notes.extend(measured.notes);
    let calibrated_at = Utc::now();
    Ok(KernelCalibration {
        id: format!(
            "{}@{}",
            campaign.kernel,
            calibrated_at.format("%Y%m%dT%H%M%S%.3fZ")
        ),
        calibrated_at,
        campaign,
        table,
        origin: measured.origin,
        source: measured.source,
        code: measured.code,
        inherited_floors: Vec::new(),
        launches_here: Vec::new(),
    })
}

/// Samples measured elsewhere, to be made into bounds as measured ones are.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub kernel: String,
    /// Launch times per partition size, in the order they were given.
    pub by_size: BTreeMap<u32, Vec<u64>>,
    pub geometry: Option<crate::kernels::Geometry>,
    pub interference: crate::gpu::Interference,
    /// Free text: where the samples came from.
    pub source: String,
    /// See [`crate::service::ImportOptions::batch_slowdown`].
    pub batch_slowdown: Option<(f64, f64)>,
    /// [`KernelSpec::code_digest`] of the kernel the catalogue had under the name when the
    /// samples were handed in ("" for a kernel it does not have): what they are samples of.
    pub code: String,
}

/// Bounds from imported samples, with the same method and rules as measured ones, at every size
/// of `device`. The calibration says `origin: imported` and the source; its conditions are this
/// device's fingerprint (the importer vouches that the samples were taken under it).
pub fn from_samples(
    imported: &Imported,
    device: &crate::gpu::DeviceInfo,
    recipe: &Recipe,
) -> Result<KernelCalibration, CalibrateError> {
    let now = Utc::now();
    let campaign = imported_campaign(imported, device, now);
    // Imported samples are in launch order, so they show slowdowns as measured ones do.
    let mut evidence = recipe.slowdowns;
    for times in imported.by_size.values() {
        evidence.add(times);
    }
    let mut config = allowing_for_slowdowns(recipe.method_config, &evidence);
    // The batch's slowdowns, merged by the larger of each as an offline fit merges its file's
    // with a delay probe's: an import of one kernel of a file looked in that kernel's launches
    // alone, and came out a few percent below `wcetctl fit` of the file (a hunt).
    let batch = imported.batch_slowdown.filter(|&(depth, share)| {
        depth > config.device_slowdown || share > config.device_slowdown_share
    });
    if let Some((depth, share)) = batch {
        config.device_slowdown = config.device_slowdown.max(depth);
        config.device_slowdown_share = config.device_slowdown_share.max(share);
    }
    let mut table = method::bound_table(
        &observations(&campaign),
        &device.partition_sizes,
        recipe.method,
        &config,
    )
    .map_err(|source| CalibrateError::Model {
        kernel: imported.kernel.clone(),
        source,
    })?;
    if let Some(found) = evidence.slowdown() {
        table.notes.push(found.note());
    }
    if batch.is_some() {
        table.notes.push(format!(
            "the batch these samples came in showed sustained slowdowns (as the importer found them): with the samples' own, the larger of each, every bound allows for launches {:.1}% slower than typical on up to {:.2}% of launches",
            config.device_slowdown * 100.0,
            config.device_slowdown_share * 100.0
        ));
    }
    Ok(KernelCalibration {
        id: format!("{}@{}", imported.kernel, now.format("%Y%m%dT%H%M%S%.3fZ")),
        calibrated_at: now,
        campaign,
        table,
        origin: Origin::Imported,
        source: imported.source.clone(),
        code: imported.code.clone(),
        inherited_floors: Vec::new(),
        launches_here: Vec::new(),
    })
}

/// Imported samples as the campaign a calibration keeps: their launches per size, taken `now`
/// under this device's fingerprint, the host naming where they came from.
fn imported_campaign(
    imported: &Imported,
    device: &crate::gpu::DeviceInfo,
    now: chrono::DateTime<Utc>,
) -> KernelCampaign {
    let sizes = imported
        .by_size
        .iter()
        .map(|(&m, times)| {
            let mut record = measure::SizeRecord::empty(m);
            record.times_ns = times.as_slice().into();
            (m, record)
        })
        .collect();
    KernelCampaign {
        kernel: imported.kernel.clone(),
        geometry: imported.geometry,
        sizes,
        verified: Default::default(),
        environment: measure::EnvironmentStamp {
            fingerprint: device.fingerprint.clone(),
            started_at: now,
            finished_at: now,
            host: format!("imported: {}", imported.source),
            interference: imported.interference,
            sm_clock_mhz_min: None,
            sm_clock_mhz_max: None,
            temperature_c_max: None,
            throttle_reasons: Vec::new(),
        },
    }
}

/// `config` with the sustained slowdown `evidence` shows (its depth and share of launches), where
/// it shows one, so that the bounds allow for it.
fn allowing_for_slowdowns(mut config: MethodConfig, evidence: &throttle::Evidence) -> MethodConfig {
    if let Some(found) = evidence.slowdown() {
        config.device_slowdown = found.depth;
        config.device_slowdown_share = found.share;
    }
    config
}

/// A calibration from elsewhere (a bundle), made no tighter than the method it names makes from
/// the launches it ships, at the exceedance it claims (or this daemon's configured one, where
/// the claim is stronger): the bundle's table is kept (its notes,
/// verified sizes, observed maxima), each bound raised to the refit's where that is higher, and
/// its tail replaced by the refit's only where the refit cannot support the claim (a tail found
/// heavy, say). The refit reads every launch shipped, the verification sweep's included, and the
/// slowdowns they and this daemon have seen. A bundle edited consistently (a size's slowest
/// launches deleted with its summary, a stronger tail claimed) passes every check of its own
/// numbers; this one it cannot pass, since what it ships is what is refitted. Returns the
/// calibration to publish and, when the refit changed it, what changed.
pub fn no_tighter_than_own_fit(
    cal: &KernelCalibration,
    device: &crate::gpu::DeviceInfo,
    recipe: &Recipe,
) -> Result<(KernelCalibration, Option<String>), CalibrateError> {
    let (stated, _) = cal.table.stated_exceedance();
    // Never a stronger guarantee than this daemon is configured to state: a claim is a number in
    // a file. The method states a configured p as low as p/2 where it allows for slowdowns
    // (docs/method.md, step 5), so a claim below half the configured one is refitted at the
    // configured one, and its tail replaced.
    let configured = recipe.method_config.exceedance;
    // (Only a model's claim: without a tail, the claim is 1/(n+1) of the launches, which the
    // provenance checks of the bundle hold to what it ships.)
    let too_strong = cal.table.tail.is_some() && stated < configured / 2.0;
    let claimed = if too_strong { configured } else { stated };
    let mut config = recipe.method_config;
    config.exceedance = claimed;
    let mut evidence = recipe.slowdowns;
    for times in cal.campaign.samples().values() {
        evidence.add(times);
    }
    if let Some(found) = evidence.slowdown() {
        config.device_slowdown = found.depth;
        config.device_slowdown_share = found.share;
    }
    let own = method::bound_table(
        &observations(&cal.campaign),
        &device.partition_sizes,
        cal.table.method,
        &config,
    )
    .map_err(|source| CalibrateError::Model {
        kernel: cal.campaign.kernel.clone(),
        source,
    })?;
    let mut table = cal.table.clone();
    let mut what = Vec::new();
    let (refit, _) = own.stated_exceedance();
    if too_strong || crate::model::weaker_than(refit, claimed) {
        table.tail = own.tail.clone();
    }
    let (now, _) = table.stated_exceedance();
    if now != stated {
        what.push(format!(
            "stated at {now:e} per launch, not the {stated:e} it claimed"
        ));
    }
    what.extend(raise_to_refit(&mut table, &own));
    let note = (!what.is_empty()).then(|| {
        format!(
            "refitted here from the launches the bundle ships ({} at {claimed:e}), and made no tighter than that: {}",
            cal.table.method,
            what.join(", ")
        )
    });
    table.notes.extend(note.clone());
    let mut out = cal.clone();
    out.table = table;
    Ok((out, note))
}

/// Raise every bound of `table` to the refit's (`own`) where that is higher, as a launch timed
/// there would raise it: on a monotone kernel the smaller sizes too (where either fit finds it
/// monotone, the more a raise reaches). Returns what was raised, if anything.
fn raise_to_refit(
    table: &mut crate::model::BoundTable,
    own: &crate::model::BoundTable,
) -> Option<String> {
    table.monotone |= own.monotone;
    let before: Vec<u64> = table.entries.iter().map(|e| e.bound_ns).collect();
    for o in &own.entries {
        table.raise_to(o.sms, o.bound_ns);
    }
    let (mut raised, mut most) = (0, 0.0f64);
    for (e, was) in table.entries.iter().zip(before) {
        if e.bound_ns > was {
            most = most.max(e.bound_ns as f64 / was.max(1) as f64 - 1.0);
            raised += 1;
        }
    }
    // Every bound now at least the refit's, which allows for this daemon's process shift: so does
    // the table (a bundle of a daemon before the shift is not raised for it again at each start),
    // and no more than that is claimed (a shift in a file is a number nobody here checked).
    let covered = own
        .entries
        .iter()
        .all(|o| table.entry(o.sms).is_some_and(|e| e.bound_ns >= o.bound_ns));
    table.process_shift = Some(if covered {
        own.allowed_process_shift()
    } else {
        0.0
    });
    (raised > 0).then(|| {
        format!(
            "bounds raised at {raised} sizes, by up to {:.1}%",
            most * 100.0
        )
    })
}

/// Launches per size when a calibration from elsewhere is checked on this card.
pub const ARRIVAL_LAUNCHES: u32 = 32;

/// A short campaign at every size of `table` on this device: (size, longest launch, bound) at
/// every size; where the launch is longer, the bound does not hold on this card. A calibration
/// measured on another card is checked so before it is trusted: cards of one model differ.
pub fn check_on_arrival(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    table: &crate::model::BoundTable,
    interference: crate::gpu::Interference,
    cancel: &AtomicBool,
) -> Result<Vec<(u32, u64, u64)>, CalibrateError> {
    same_code_as_loaded(kernel)?;
    let mut checked = Vec::new();
    for entry in &table.entries {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(MeasureError::Cancelled.into());
        }
        let request = crate::gpu::RunRequest {
            sms: entry.sms,
            warmup: 2,
            launches: ARRIVAL_LAUNCHES,
            interference,
        };
        let batch = gpu.run(kernel, &request).map_err(MeasureError::from)?;
        let longest = batch.times_ns.iter().copied().max().unwrap_or(0);
        checked.push((entry.sms, longest, entry.bound_ns));
    }
    same_code_as_loaded(kernel)?;
    Ok(checked)
}

/// Whether measuring every size of `sizes` fits the budget, estimated from the sizes measured so
/// far (the smallest and the whole device): every size as slow as the slowest median seen.
fn fits_budget(c: &KernelCampaign, sizes: &[u32], recipe: &Recipe) -> bool {
    let slowest = observations(c)
        .median_points()
        .iter()
        .map(|p| p.time_ns)
        .fold(0.0, f64::max);
    let settings = &recipe.campaign;
    let launches = sizes.len() as f64 * f64::from(settings.launches + settings.warmup)
        + f64::from(settings.screen_launches);
    launches * slowest * 1e-9 <= recipe.sweep.budget_s
}

/// The verification sweep: a few launches at every size not measured, then, while the median
/// at some verified size is above the fitted curve by more than its noise explains, that size
/// measured in full (the worst first) and the kernel refitted; then, up to
/// `recipe.sweep.tightenings` times, the size where the curve is loosest over the sweep's median
/// likewise ([`verify::next_size`]). Returns why sizes were added.
fn sweep(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    recipe: &Recipe,
    sizes: &[u32],
    campaign: &mut KernelCampaign,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Vec<String>, CalibrateError> {
    let unmeasured: Vec<u32> = sizes
        .iter()
        .copied()
        .filter(|m| !campaign.sizes.contains_key(m))
        .collect();
    let settings = &recipe.campaign;
    measure::verify_sizes(
        gpu,
        kernel,
        settings,
        campaign,
        &unmeasured,
        recipe.sweep.launches,
        cancel,
        &mut phase(progress, SWEEP),
    )?;
    let mut notes = vec![format!(
        "verification sweep: {} launches at each of {} sizes not measured",
        recipe.sweep.launches,
        unmeasured.len()
    )];
    let full = full_measurement_launches(campaign, settings);
    let mut tightened = 0;
    loop {
        let next = size_to_measure_in_full(kernel, recipe, sizes, campaign, tightened)?;
        let Some(next) = next else {
            return Ok(notes);
        };
        tightened += usize::from(matches!(next, verify::NextSize::Loose(_)));
        // Its verification launches become the first of its full measurement.
        if let Some(record) = campaign.verified.remove(&next.sms()) {
            campaign.sizes.insert(next.sms(), record);
        }
        let added = [next.sms()];
        measure::extend_campaign(
            gpu,
            kernel,
            settings,
            campaign,
            &added,
            full,
            cancel,
            &mut |_, _| {},
        )?;
        notes.push(next.note());
    }
}

/// The launches a size the sweep adds is measured with: as many as the sizes already measured
/// have (more where the tail was heavy).
fn full_measurement_launches(campaign: &KernelCampaign, settings: &CampaignSettings) -> u32 {
    campaign
        .sizes
        .values()
        .map(|r| r.times_ns.len() as u32)
        .min()
        .unwrap_or(settings.launches)
}

/// The next size the sweep measures in full ([`verify::next_size`]), if any; `tightened`: how
/// many it has measured so far because the curve was loose there.
fn size_to_measure_in_full(
    kernel: &KernelSpec,
    recipe: &Recipe,
    sizes: &[u32],
    campaign: &KernelCampaign,
    tightened: usize,
) -> Result<Option<verify::NextSize>, CalibrateError> {
    verify::next_size(
        &observations(campaign),
        sizes,
        &recipe.method_config,
        tightened,
        recipe.sweep.tightenings,
    )
    .map_err(|source| CalibrateError::Model {
        kernel: kernel.name.to_string(),
        source,
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
    if settings.heavy_tail_launches <= screened {
        return Ok(());
    }
    go_back_if_heavy(
        gpu,
        kernel,
        recipe,
        campaign,
        cancel,
        &mut phase(progress, HEAVY_TAIL),
    )
}

/// If the campaign's launches show a heavy tail, every measured size is extended to
/// `heavy_tail_launches` (sizes that have them already are left as they are).
fn go_back_if_heavy(
    gpu: &mut dyn Gpu,
    kernel: &KernelSpec,
    recipe: &Recipe,
    campaign: &mut KernelCampaign,
    cancel: &AtomicBool,
    progress: measure::Progress<'_>,
) -> Result<(), CalibrateError> {
    let settings = &recipe.campaign;
    let short = campaign
        .sizes
        .values()
        .any(|r| (r.times_ns.len() as u32) < settings.heavy_tail_launches);
    if !short || !model::tail::is_heavy(&observations(campaign), &recipe.method_config) {
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
        progress,
    )?;
    Ok(())
}

/// The share of a kernel's progress (0 to 1) each phase reports into, so that progress never runs
/// backwards when a phase starts. Whether the heavy-tail phase runs is known only after the
/// screen, so a light-tailed kernel jumps from 0.6 onwards.
const PLANNED_SIZES: (f64, f64) = (0.0, 0.5);
const SCREEN: (f64, f64) = (0.5, 0.6);
const HEAVY_TAIL: (f64, f64) = (0.6, 0.85);
const SWEEP: (f64, f64) = (0.85, 1.0);

/// A campaign progress callback (launches done, launches planned) mapped into `share`.
fn phase<'a>(
    progress: &'a mut dyn FnMut(f64),
    (from, to): (f64, f64),
) -> impl FnMut(u64, u64) + 'a {
    move |done, total| {
        let share = (done as f64 / total.max(1) as f64).min(1.0);
        progress(from + (to - from) * share)
    }
}

/// A campaign's samples as the model takes them.
pub fn observations(c: &KernelCampaign) -> Observations {
    Observations {
        geometry: c.geometry,
        by_size: c.samples(),
        verified: c
            .verified
            .iter()
            .map(|(&m, r)| (m, r.times_ns.to_vec()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
    use crate::kernels;

    #[test]
    fn the_delay_probe_finds_the_devices_throttling_and_only_where_there_is_some() {
        let profile = |name: &str| {
            DeviceProfile::load(&format!(
                "{}/calibration/profiles/{name}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap()
        };
        let probed = |p: DeviceProfile| {
            let mut gpu = SimGpu::new(p, SimOptions::default());
            with_device_probe(&mut gpu, &Recipe::default()).unwrap().0
        };
        // 5% of 50-launch stretches throttle 40 launches to 92% clock: 8.7% slower.
        let deep = probed(profile("foreign/dev-h200-deep.toml"));
        let found = deep
            .slowdowns
            .slowdown()
            .expect("the probe meets its throttling");
        assert!((found.depth - 0.087).abs() < 0.01, "{found:?}");
        assert!(found.share >= 0.05 * 40.0 / 50.0 * 0.8, "{found:?}");
        // The fixed delays are fitted without the throttled runs: well under 8.7% of 20 µs.
        assert!(deep.method_config.device_delay_ns < 1000.0, "{deep:?}");
        assert_eq!(
            probed(profile("h100-measured.toml")).slowdowns.slowdown(),
            None
        );
    }

    /// An import sent the slowdowns of the batch it came in allows for them, every bound at
    /// least what the samples alone give, and says so.
    #[test]
    fn a_batchs_slowdown_only_raises_an_imports_bounds() {
        let device = SimGpu::new(DeviceProfile::h200(), SimOptions::default())
            .info()
            .clone();
        let by_size: BTreeMap<u32, Vec<u64>> = [(8, 80_000.0), (64, 12_000.0), (132, 7_000.0)]
            .into_iter()
            .map(|(m, t): (u32, f64)| {
                let times = (0..300u64).map(|i| (t * (1.0 + 0.002 * (i % 7) as f64)) as u64);
                (m, times.collect())
            })
            .collect();
        let import = |batch_slowdown| Imported {
            kernel: "lab.k".into(),
            by_size: by_size.clone(),
            geometry: None,
            interference: crate::gpu::Interference::Isolated,
            source: "test".into(),
            batch_slowdown,
            code: String::new(),
        };
        let recipe = Recipe::default();
        let bounds = |batch| {
            let cal = from_samples(&import(batch), &device, &recipe).unwrap();
            let bounds: Vec<u64> = cal.table.entries.iter().map(|e| e.bound_ns).collect();
            (bounds, cal.table.notes)
        };
        let (alone, _) = bounds(None);
        let (pooled, notes) = bounds(Some((0.10, 0.05)));
        assert!(
            alone.iter().zip(&pooled).all(|(a, p)| p >= a),
            "{alone:?} {pooled:?}"
        );
        assert!(
            alone.iter().zip(&pooled).any(|(a, p)| p > a),
            "{alone:?} {pooled:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("the batch these samples came in")),
            "{notes:?}"
        );
    }

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
