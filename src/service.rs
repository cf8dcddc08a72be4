//! The daemon's state and job queue. No D-Bus types here: the bus face (`dbus.rs`) translates
//! calls into these methods and [`ServiceError`]s back into bus errors.
//!
//! Queries read an immutable snapshot (`Arc<Calibration>`) behind a lock held only long enough to
//! clone the `Arc`, so answering `GetBound` never waits on a calibration, a file or the GPU.
//! Commands that touch the GPU go over a channel to one worker thread that owns the device: GPU
//! campaigns are blocking and one-at-a-time by nature. The worker publishes a new snapshot, writes
//! it to the store, and announces it as an [`Event`] only when a whole job has succeeded, so a
//! failed or cancelled job leaves the old bounds in place.
//!
//! Every lock guards data that is replaced by a single assignment, so it is consistent even after a
//! panic elsewhere; locks are taken poison-tolerant so that one bug cannot stop all queries.
//!
//! This file holds the state and answers queries. Beside it: `jobs.rs` (the job queue as callers
//! see it), `worker.rs` (the GPU worker that runs the jobs and publishes what they make),
//! `imports.rs` (samples and bundles made elsewhere, and when they are refused), `stale.rs`
//! (whether a served bound still holds, and the step that makes it current), `carry_over.rs` (the
//! calibration served at start, and production floors across a change of device fingerprint),
//! `code_watch.rs` (manifests' files changed on disk), `interrupted.rs` (jobs a crash cut short),
//! `device_losses.rs` (kernels that were running when the device was lost, held back from
//! calibration when they keep losing it) and `monitor.rs` (launch times reported from
//! production).

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError, RwLock};
use tokio::sync::broadcast;

use crate::calibrate::{self, Recipe};
use crate::gpu::{
    Batch, DeviceInfo, Gpu, GpuError, Interference, PlacementReport, RunRequest, Telemetry,
};
use crate::kernels::{Catalogue, KernelSpec};
use crate::manifest;
use crate::model::predict::DeviceDescription;
use crate::model::{BoundEntry, ExceedanceBasis};
use crate::store::Origin;
use crate::store::{Calibration, KernelCalibration, Store};
use crate::workload::Forecast;
use std::path::PathBuf;

pub use crate::request_error::{how_to_calibrate, Result, ServiceError};

mod carry_over;
mod code_watch;
mod device_losses;
mod imports;
mod interrupted;
mod jobs;
mod monitor;
mod stale;
mod worker;
pub use imports::MAX_IMPORTED_SAMPLES;
pub use monitor::{
    FinalSaveFailed, MonitorConfig, MonitorEvent, ObservedFloor, ObservedInfo, ReportOutcome,
    SAVE_INTERVAL,
};
use worker::{weakest_guarantee, worker_loop};

/// One kernel's calibration under one interference, as a job publishes it.
pub type TaggedCalibration = (Interference, String, KernelCalibration);

/// A kernel that failed a bundle's arrival check, with the launches the check timed (size,
/// longest, bound).
type FailedCheck = (Interference, KernelSpec, Vec<(u32, u64, u64)>);

/// How a job ends: its state and its message.
type JobEnd = (JobState, String);

/// The options of an import ([`Service::import_samples`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportOptions {
    pub geometry: Option<crate::kernels::Geometry>,
    pub interference: Interference,
    pub source: String,
    /// The sustained slowdowns the importer found in the batch the samples came in (every
    /// kernel of its file), as (depth, share): the device's evidence, as a job's kernels are
    /// here. Taken only where larger than what the samples themselves show.
    pub batch_slowdown: Option<(f64, f64)>,
}

/// How the service runs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub recipe: Recipe,
    /// Jobs that may wait behind the running one before `Recalibrate` answers `Busy`.
    pub max_queued_jobs: usize,
    /// Queue a calibration of every built-in kernel without bounds for this device at start.
    pub initial_calibration: bool,
    /// Device description the predicted typical times are computed for; `None`: no predictions.
    /// Predictions are reported beside bounds and never change one.
    pub prediction: Option<DeviceDescription>,
    /// Directories of kernel manifests (`--kernel-dir`), read at start and by `reload_kernels`.
    pub kernel_dirs: Vec<PathBuf>,
    /// Interference a calibration job measures under unless it asks otherwise. Both by default:
    /// the daemon exists for partitions that run at once, and an isolated bound is not safe for
    /// a partition whose neighbours load memory (docs/admission.md).
    pub interference: Vec<Interference>,
    /// Production monitoring (`Monitor1`): saving observations, recalibrating after overruns.
    pub monitor: MonitorConfig,
    /// The device's index as the daemon serves it (`/org/wcetd/Wcetd1/gpu/N`): every log line
    /// about the device is in a `gpu{n=N}` span, so that with several GPUs the journal says
    /// which card a job, a fault or an overrun was on.
    pub gpu: u32,
    /// The process shift for this device; `None`: [`crate::model::CUDA_PROCESS_SHIFT`] on a
    /// real GPU, 0 on the simulator. [`Service::load`] writes it into
    /// `recipe.method_config.process_shift` (whatever that held), once the device is known.
    pub process_shift: Option<f64>,
    /// How many devices the daemon serves. With more than one, a command this device's
    /// messages advise names it ([`ServiceConfig::wcetctl`]): a plain `wcetctl` talks to the
    /// default device's object, so run as printed it would act on another card.
    pub devices_served: usize,
    /// UUIDs of the host's other devices, served by the daemon or left out by `--devices`:
    /// their calibrations are theirs, never served stale on this one
    /// ([`carry_over::initial_calibration`]).
    pub sibling_cards: Vec<String>,
}

impl ServiceConfig {
    /// How a `wcetctl` command this device's messages advise starts: `wcetctl --gpu N` where
    /// the daemon serves several devices, plain `wcetctl` (as right, and shorter) where it
    /// serves one.
    pub fn wcetctl(&self) -> String {
        if self.devices_served > 1 {
            format!("wcetctl --gpu {}", self.gpu)
        } else {
            "wcetctl".to_string()
        }
    }
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            recipe: Recipe::default(),
            max_queued_jobs: 16,
            initial_calibration: true,
            prediction: None,
            kernel_dirs: Vec::new(),
            interference: vec![Interference::Isolated, Interference::Contended],
            monitor: MonitorConfig::default(),
            gpu: 0,
            process_shift: None,
            devices_served: 1,
            sibling_cards: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn finished(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled
        )
    }
}

#[derive(Debug, Clone)]
pub struct JobStatus {
    pub state: JobState,
    pub progress: f64,
    pub message: String,
    pub kernels: Vec<String>,
    /// The interference the job measures under, in order.
    pub interference: Vec<Interference>,
}

/// What the service announces; the bus face turns these into signals.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    JobProgress {
        job: u64,
        progress: f64,
    },
    JobFinished {
        job: u64,
        state: JobState,
        message: String,
    },
    BoundsChanged {
        kernels: Vec<String>,
    },
    HealthChanged {
        health: String,
    },
}

/// A bound with everything a caller may want to know about where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundInfo {
    /// The GPU model the calibration was measured on, where it is not this device's (a stale
    /// calibration carried over from another model).
    pub measured_on_model: Option<String>,
    pub kernel: String,
    pub entry: BoundEntry,
    pub requested_sms: u32,
    pub calibration_id: String,
    pub calibrated_at: DateTime<Utc>,
    pub stale: bool,
    /// Stale (also) because the kernel's module or fill files changed on disk since its manifest
    /// was loaded: a reload makes it current, a recalibration alone is refused.
    pub files_changed: bool,
    /// Whether the catalogue has code to run under the kernel's name (not only imported samples
    /// or a bundle): whether a recalibration can make a stale bound current.
    pub runnable: bool,
    /// The queued or running calibration job that measures this kernel, if any.
    pub recalibrating: Option<u64>,
    pub method: String,
    pub law: String,
    pub tail: String,
    pub interference: Interference,
    /// The rise of the typical time in another process the bound allows for, as a share
    /// ([`crate::model::BoundTable::allowed_process_shift`]).
    pub process_shift: f64,
    pub notes: Vec<String>,
    pub clock: ClockScaling,
    /// Measured median and mean launch time at this size (0 where this size was not measured).
    pub typical_ns: u64,
    pub mean_ns: u64,
    /// The predicted typical time at this size (0 where there is none, the label saying why): a
    /// prediction, never a bound.
    pub predicted: Prediction,
    /// `measured` (by this daemon) or `imported`, and where the samples came from.
    pub origin: Origin,
    pub source: String,
    /// The guarantee behind the bound: at what exceedance, against what interference.
    pub guarantee: Guarantee,
    /// The highest time reported from production that bounds this size, if any (rule 1: the
    /// bound is at least it).
    pub observed: Option<ObservedFloor>,
}

impl BoundInfo {
    /// What the bound at this size rests on (`GetBoundInfo`'s `basis`): the table entry's basis,
    /// or `observed` where a launch time reported from production raised it.
    pub fn basis(&self) -> &'static str {
        if self.observed.is_some_and(|f| f.raised) {
            "observed"
        } else {
            self.entry.basis()
        }
    }
}

/// A bound query and the calibration that answers it.
#[derive(Clone, Copy)]
struct BoundQuery<'a> {
    kernel: &'a str,
    /// The size asked for; `partition` is the realisable size it gives.
    requested_sms: u32,
    partition: u32,
    /// The tag asked for (none: `GetBound`'s, the safer of both).
    tag: Option<Interference>,
    /// The tag of `cal`.
    interference: Interference,
    cal: &'a KernelCalibration,
}

/// A calibration's entry at one size as it is served now, and what the answer says of it.
struct ServedEntry {
    /// Scaled to the clock and raised to the production floors.
    entry: BoundEntry,
    notes: Vec<String>,
    files_changed: bool,
    clock: ClockScaling,
    observed: Option<ObservedFloor>,
    typical_ns: u64,
    mean_ns: u64,
    guarantee: Guarantee,
    stale: bool,
}

/// What a bound promises, in numbers a scheduler can compare.
#[derive(Debug, Clone, PartialEq)]
pub struct Guarantee {
    /// Probability per launch that a launch exceeds the bound, as the calibration states it
    /// ([`crate::model::BoundTable::stated_exceedance`]).
    pub exceedance: f64,
    pub basis: ExceedanceBasis,
    /// The exceedance the daemon is configured to state bounds at (`wcetd --exceedance`).
    pub configured_exceedance: f64,
    /// Interference tags this kernel has a calibration for (the bound is the safer of them).
    pub available: Vec<Interference>,
    /// Fewest SMs the stressor ran on while this size was measured, or verified by the sweep
    /// (0: isolated, or no launch there).
    pub stressor_sms: u32,
}

impl Guarantee {
    /// Whether the bound is stated at the configured exceedance or better.
    pub fn meets_configured(&self) -> bool {
        !crate::model::weaker_than(self.exceedance, self.configured_exceedance)
    }

    /// A note, when the bound promises less than the configured exceedance.
    pub fn weaker_note(&self) -> Option<String> {
        (!self.meets_configured()).then(|| {
            format!(
                "bound stated at exceedance {:e} per launch ({}), weaker than the configured {:e}",
                self.exceedance,
                self.basis.as_str(),
                self.configured_exceedance
            )
        })
    }
}

/// A predicted typical time and what it rests on. No bound is ever computed from one.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub typical_ns: u64,
    /// Says it is a prediction, for which device, from what.
    pub label: String,
}

/// The calibrations and the SM clock reading at one instant. An answer built from several
/// lookups (admission reads each kernel's isolated, contended and untagged bound) takes one
/// `Moment` and makes every lookup through it, so no entry of one calibration is paired with
/// another tag's from before a commit, and every bound is scaled to the same clock.
#[derive(Clone)]
pub struct Moment {
    snap: Arc<Calibration>,
    /// MHz; 0 where unreadable.
    clock_mhz: u32,
}

/// How a bound relates to the SM clock: it is valid at the clock it was calibrated at, and is
/// scaled by calibrated/current (rounded up) while the device runs slower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockScaling {
    /// Highest SM clock seen while measuring (0 when unknown).
    pub calibrated_mhz: u32,
    /// Last SM clock read from the device (0 when it cannot be read).
    pub current_mhz: u32,
    pub scaled: bool,
}

/// How often the GPU worker reads the clock while idle: a clock drop shows in bounds within this.
const CLOCK_POLL: std::time::Duration = std::time::Duration::from_secs(1);

struct Job {
    id: u64,
    work: Work,
    cancel: Arc<AtomicBool>,
}

impl Work {
    /// What the job does, before the kernels it names (for the record of a running job).
    fn doing(&self) -> &'static str {
        match self {
            Work::Calibrate { .. } => "calibrating",
            Work::Import(_) => "importing samples of",
            Work::Bundle { .. } => "importing a bundle of",
        }
    }
}

/// What a job does on the worker thread.
enum Work {
    /// Measure and fit these kernels, under each of these interference tags.
    Calibrate {
        kernels: Vec<KernelSpec>,
        interference: Vec<Interference>,
        /// Kernels a calibration of every kernel left out, held back for losing the device.
        held_back: Vec<String>,
    },
    /// Fit samples measured elsewhere (no GPU work).
    Import(Box<calibrate::Imported>),
    /// Publish another daemon's calibrations, then check them on this card when they are not
    /// stale (any launch above its bound sends the kernel for recalibration).
    Bundle {
        calibrations: Vec<TaggedCalibration>,
        verify: bool,
    },
}

struct Inner {
    device: DeviceInfo,
    snapshot: RwLock<Arc<Calibration>>,
    jobs: Mutex<BTreeMap<u64, (JobStatus, Arc<AtomicBool>)>>,
    pending: AtomicU64,
    next_job: AtomicU64,
    health: RwLock<String>,
    events: broadcast::Sender<Event>,
    config: ServiceConfig,
    /// SM clock in MHz as last read by the GPU worker, 0 when unreadable.
    current_clock_mhz: AtomicU32,
    /// Read only to report predictions; no bound depends on it. Replaced with the catalogue.
    forecast: RwLock<Arc<Forecast>>,
    /// Why the device is lost to this process, once it is (see [`Service::device_lost`]).
    lost: tokio::sync::watch::Sender<Option<String>>,
    /// The kernels served: the built-in suite and the manifests of the kernel directories.
    catalogue: RwLock<Arc<Catalogue>>,
    /// Launch times reported from production and the floors they put under bounds.
    monitor: Arc<monitor::MonitorState>,
    /// Set by the GPU worker when its thread ends (also by a panic), for [`Service::stop_worker`].
    worker_exited: (Mutex<bool>, std::sync::Condvar),
    /// Manifests whose module or fill files changed on disk since they were loaded, as the
    /// watcher last found them ([`code_watch`]).
    changed_on_disk: RwLock<code_watch::ChangedOnDisk>,
    /// The watcher could not be started: Health says so.
    code_watch_failed: AtomicBool,
    /// Held through a reload, so that two at once cannot pair one's catalogue with the other's
    /// forecast.
    reloading: Mutex<()>,
    /// Written by a reload from publishing its catalogue until its calibration job is queued,
    /// read by [`Service::health`]: in between, a changed kernel is stale with no job for it,
    /// and Health advised a recalibration the reload was about to queue.
    publishing: RwLock<()>,
    /// The manifests (or directories) the last reload rejected, each with why, for `Health`
    /// until a reload rejects none: a reload's answer reaches only the operator who ran it.
    reload_rejected: RwLock<Vec<(String, String)>>,
    /// The manifests rejected at start, each with why: a query for a kernel one of them defined
    /// says so, rather than that no such kernel exists, until a reload rereads them.
    start_rejected: Vec<(String, String)>,
    reloaded: AtomicBool,
    /// Where jobs are recorded from queued to ended, so that the next start names those a crash
    /// interrupted ([`interrupted`]).
    job_record: interrupted::JobRecords,
    /// Set by [`Service::stop_worker`] under the jobs lock: no job is queued after its end
    /// marker, where the worker would never reach it.
    stopping: AtomicBool,
    /// `gpu{n=N}`, entered by every thread and call that logs about this device.
    span: tracing::Span,
    /// Which kernels were running when the device was lost, and which are held back for it.
    losses: device_losses::DeviceLosses,
    /// The kernels a calibration file this start set aside named, each with its notice: one
    /// known only from imports went with it.
    set_aside_kernels: BTreeMap<String, String>,
}

/// The daemon's state, shared by the bus face and the GPU worker.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
    /// `None` tells the worker to stop.
    worker: mpsc::Sender<Option<Job>>,
}

/// The GPU worker of a loaded [`Service`], not yet running: jobs queue until it starts.
pub struct GpuWorker {
    run: Box<dyn FnOnce() + Send>,
}

impl GpuWorker {
    /// Start the thread that runs the service's jobs on its GPU, one at a time.
    pub fn start(self) {
        std::thread::Builder::new()
            .name("wcetd-gpu".into())
            .spawn(self.run)
            .expect("spawning the GPU worker thread");
    }
}

impl Service {
    /// How a `wcetctl` command this device's messages advise starts ([`ServiceConfig::wcetctl`]).
    pub fn wcetctl(&self) -> String {
        self.inner.config.wcetctl()
    }

    /// [`Service::load`], [`Service::calibrate_missing`] (its job number is returned), and the
    /// GPU worker started.
    pub fn start(gpu: Box<dyn Gpu>, store: Store, config: ServiceConfig) -> (Service, Option<u64>) {
        let (service, worker) = Service::load(gpu, store, config);
        let first = service.calibrate_missing();
        worker.start();
        (service, first)
    }

    /// Load what the store has for `gpu`; nothing runs on it until [`GpuWorker::start`]. The
    /// daemon starts it only once it owns its bus name, so that a second instance refused the
    /// name never runs a kernel on a GPU another is measuring, while its first job is already
    /// queued (and numbered) when a client sees the name.
    pub fn load(
        mut gpu: Box<dyn Gpu>,
        store: Store,
        mut config: ServiceConfig,
    ) -> (Service, GpuWorker) {
        let span = tracing::info_span!("gpu", n = config.gpu);
        let _in_span = span.enter();
        let device = gpu.info().clone();
        config.recipe.method_config.process_shift =
            config.process_shift.unwrap_or(match device.backend {
                crate::gpu::Backend::Cuda => crate::model::CUDA_PROCESS_SHIFT,
                crate::gpu::Backend::Sim => 0.0,
            });
        // An idle reading is no launch's clock (as `read_clock` in worker.rs skips it): none
        // until a busy one.
        let now = gpu.telemetry();
        let clock = if now.idle {
            0
        } else {
            now.sm_clock_mhz.unwrap_or(0)
        };
        let inner = Arc::new(Inner::load(&store, device, config, clock, &span));
        code_watch::spawn(Arc::downgrade(&inner));
        let (tx, rx) = mpsc::channel();
        let worker = GpuWorker {
            run: Box::new({
                let inner = Arc::clone(&inner);
                let span = span.clone();
                move || span.in_scope(|| worker_loop(gpu, store, inner, rx))
            }),
        };
        (Service { inner, worker: tx }, worker)
    }

    /// Queue a calibration of every kernel that has no bounds for this device yet (unless the
    /// configuration says not to, or it is held back): the job's number, if one was queued.
    pub fn calibrate_missing(&self) -> Option<u64> {
        let _in_span = self.in_span();
        if !self.inner.config.initial_calibration {
            return None;
        }
        let catalogue = self.catalogue();
        let (missing, _) =
            self.automatic(catalogue.iter().filter(|k| self.needs_calibration(&k.name)));
        let missing: Vec<String> = missing.into_iter().map(|k| k.name).collect();
        (!missing.is_empty())
            .then(|| self.recalibrate(&missing).ok())
            .flatten()
    }

    /// This device's `gpu{n=N}` span, entered unless it already is (a call from within another
    /// of its calls, which would name it twice).
    fn in_span(&self) -> Option<tracing::span::Entered<'_>> {
        let span = &self.inner.span;
        (tracing::Span::current().id() != span.id()).then(|| span.enter())
    }

    /// Of `kernels`, (those the daemon calibrates without being asked for them by name, the
    /// names of those held back for losing the device, [`device_losses`]).
    fn automatic<'a>(
        &self,
        kernels: impl IntoIterator<Item = &'a KernelSpec>,
    ) -> (Vec<KernelSpec>, Vec<String>) {
        let mut chosen = Vec::new();
        let mut held = Vec::new();
        for kernel in kernels {
            match self.inner.losses.held_back(kernel) {
                Some(why) => {
                    tracing::warn!(kernel = %kernel.name, "not calibrated: {why}");
                    held.push(kernel.name.clone());
                }
                None => chosen.push(kernel.clone()),
            }
        }
        (chosen, held)
    }

    /// Why `kernel` is held back from calibration, for `Health` and errors, or `None`.
    fn held_back(&self, kernel: &str) -> Option<String> {
        let catalogue = self.catalogue();
        let held = self.inner.losses.held_back(catalogue.get(kernel)?)?;
        Some(format!("kernel `{kernel}` is held back: {held}"))
    }

    /// Whether `other` is this very service (a clone shares it), not another device's.
    pub fn is(&self, other: &Service) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Becomes `Some(why)` when the device failed in a way this process cannot recover from (a
    /// sticky CUDA fault): the daemon then exits so that its service manager restarts it. Bounds
    /// already stored stay on disk and are served again after the restart.
    pub fn device_lost(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.lost.subscribe()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    pub fn device(&self) -> &DeviceInfo {
        &self.inner.device
    }

    /// `ok`, or `degraded: <why>`: after a failed job (until the next one succeeds), and while
    /// any bound served was measured under another device fingerprint (rule 3).
    pub fn health(&self) -> String {
        let _published = self
            .inner
            .publishing
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let last_job = self
            .inner
            .health
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut why = Vec::new();
        why.extend(self.stale_advice());
        why.extend(self.sizes_without_an_entry());
        why.extend(
            self.catalogue()
                .iter()
                .filter_map(|k| self.held_back(&k.name)),
        );
        why.extend(self.inner.losses.warnings());
        let rejected = self
            .inner
            .reload_rejected
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if !rejected.is_empty() {
            // Bounded as every list in Health is: a directory's rejection names each of its
            // kernels in its reason, and a fleet's directory holds hundreds.
            const REASON: usize = 400;
            let files: Vec<String> = rejected
                .iter()
                .map(|(file, why)| match why.char_indices().nth(REASON) {
                    None => format!("{file} ({why})"),
                    Some((end, _)) => format!("{file} ({}...)", &why[..end]),
                })
                .collect();
            let reload = format!("`{} kernels reload`", self.wcetctl());
            why.push(format!(
                "kernel manifests rejected at the last reload: {}; fix them and run {reload}",
                names_in_a_message_listed_by(&files, &reload)
            ));
        }
        drop(rejected);
        if self.inner.code_watch_failed.load(Ordering::SeqCst) {
            why.push("kernel manifests' files are not watched (the thread could not be started): a module replaced in place is found stale only at the next reload or calibration".to_string());
        }
        if let Some(e) = self.inner.monitor.save_error() {
            why.push(format!(
                "production observations not saved ({e}); bounds raised by reports would not survive a crash until a save succeeds"
            ));
        }
        if why.is_empty() {
            return last_job;
        }
        match last_job.as_str() {
            "ok" => format!("degraded: {}", why.join("; ")),
            failed => format!("{failed}; {}", why.join("; ")),
        }
    }

    fn snapshot(&self) -> Arc<Calibration> {
        Arc::clone(
            &self
                .inner
                .snapshot
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn forecast(&self) -> Arc<Forecast> {
        Arc::clone(
            &self
                .inner
                .forecast
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn catalogue(&self) -> Arc<Catalogue> {
        Arc::clone(
            &self
                .inner
                .catalogue
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Every kernel the daemon serves: the catalogue (built-in suite and manifests) and every
    /// calibration not made from a manifest that has since been removed.
    pub fn list_kernels(&self) -> Vec<String> {
        let snap = self.snapshot();
        let catalogue = self.catalogue();
        let mut names = catalogue.names();
        for (name, k) in snap.kernels.iter().chain(&snap.contended) {
            if served(&catalogue, name, k) {
                names.push(name.clone());
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// Reread the kernel directories: (added, removed, rejected as (file, reason)). Added
    /// kernels are queued for calibration; removed ones stop being served and keep their
    /// calibrations in the store for when they come back; a rejected file changes nothing.
    pub fn reload_kernels(&self) -> (Vec<String>, Vec<String>, Vec<(String, String)>) {
        let _in_span = self.in_span();
        let _one_at_a_time = self
            .inner
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = self.catalogue();
        let (next, rejected) = load_catalogue(
            &self.inner.config.kernel_dirs,
            Some(&before),
            &self.inner.device,
        );
        let (added, removed) = catalogue_changes(&before, &next);
        // Predictions are of the code now loaded (a module's PTX is read once, here).
        let forecast = self.forecast().for_catalogue(&next);
        let _publishing = self
            .inner
            .publishing
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let rejections_changed = self.publish_catalogue(next, forecast, &rejected);
        // What is served, and what is stale, changed for these now, not when a job ends: a
        // client caching bounds, StaleKernels or Health must hear of it at once.
        let touched: Vec<String> = added.iter().chain(&removed).cloned().collect();
        if !touched.is_empty() {
            let _ = self
                .inner
                .events
                .send(Event::BoundsChanged { kernels: touched });
        }
        self.calibrate_changed(&added);
        drop(_publishing);
        if rejections_changed {
            let _ = self.inner.events.send(Event::HealthChanged {
                health: self.health(),
            });
        }
        (added, removed, rejected)
    }

    /// Serve `next` with its predictions, and remember the rejections of this reload for
    /// `Health`: whether they differ from the last reload's.
    fn publish_catalogue(
        &self,
        next: Catalogue,
        forecast: Forecast,
        rejected: &[(String, String)],
    ) -> bool {
        *self
            .inner
            .catalogue
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
        *self
            .inner
            .forecast
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(forecast);
        for (file, why) in rejected {
            tracing::warn!("kernel manifest {file} rejected: {why}");
        }
        self.inner.reloaded.store(true, Ordering::SeqCst);
        let mut last = self
            .inner
            .reload_rejected
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *last, rejected.to_vec()) != rejected
    }

    /// Queue a calibration of the new or changed kernels that have no current bounds (and that
    /// this daemon may run): a manifest put back with the code it had when it was calibrated is
    /// served as it was (it was recalibrated, spending the GPU and replacing its calibration,
    /// although the design calibrates only changed code).
    fn calibrate_changed(&self, added: &[String]) {
        let catalogue = self.catalogue();
        let queued: Vec<String> = self
            .automatic(
                added
                    .iter()
                    .filter_map(|name| catalogue.get(name))
                    .filter(|k| self.needs_calibration(&k.name)),
            )
            .0
            .into_iter()
            .map(|k| k.name)
            .collect();
        if queued.is_empty() {
            return;
        }
        match self.recalibrate(&queued) {
            Ok(job) => tracing::info!(
                job,
                "calibrating new or changed kernels: {}",
                queued.join(", ")
            ),
            Err(e) => tracing::warn!("new kernels not queued for calibration: {e}"),
        }
    }

    /// The kernels served, for an error message: the first [`NAMES_IN_A_MESSAGE`] and how many
    /// more (a daemon with thousands of imported kernels once named all of them in one line).
    fn some_kernels(&self) -> String {
        names_in_a_message(&self.list_kernels(), &self.wcetctl())
    }

    fn known(&self, kernel: &str) -> Result<()> {
        if kernel.is_empty() {
            return Err(ServiceError::InvalidArgs(format!(
                "kernel name is empty; accepted: one of {}",
                self.some_kernels()
            )));
        }
        // The hot path of every query: no list is built unless the answer is an error.
        let snap = self.snapshot();
        let catalogue = self.catalogue();
        let known = catalogue.get(kernel).is_some()
            || snap
                .kernels
                .get(kernel)
                .is_some_and(|k| served(&catalogue, kernel, k))
            || snap
                .contended
                .get(kernel)
                .is_some_and(|k| served(&catalogue, kernel, k));
        if known {
            return Ok(());
        }
        let why = self
            .waiting_in_store(kernel)
            .or_else(|| self.set_aside_with_its_file(kernel))
            .unwrap_or_else(|| {
                format!(
                    "no kernel named `{}`; accepted: {}",
                    quoted_name(kernel),
                    self.some_kernels()
                )
            });
        Err(ServiceError::UnknownKernel(why))
    }

    /// Why `kernel`, which is not served, had bounds before: the calibration file that held
    /// them was damaged and set aside, at this start or at one since the last job that
    /// succeeded. `None` where none named it.
    fn set_aside_with_its_file(&self, kernel: &str) -> Option<String> {
        let notice = self.inner.set_aside_kernels.get(kernel)?;
        let wcetctl = self.wcetctl();
        Some(format!(
            "kernel `{kernel}` is not served: the calibration file that held its bounds was damaged and set aside, {notice} (`Health` names it until a job succeeds); import its samples or bundle again (`{wcetctl} import` or `{wcetctl} import-calibration`), or repair the file and restart"
        ))
    }

    /// Why `kernel`, which is not served, still has bounds in the store: the manifest that
    /// defined it was rejected (at start, or at the last reload: the reason), or no manifest
    /// loaded now defines it. `None` where the store has nothing of that name.
    fn waiting_in_store(&self, kernel: &str) -> Option<String> {
        let snap = self.snapshot();
        let tables = [Interference::Isolated, Interference::Contended]
            .map(|tag| snap.tables(tag).get(kernel))
            .into_iter()
            .flatten();
        // The manifest's own calibration where there is one (the other tag's may be imported).
        let cal = tables.clone().find(|c| c.origin == Origin::Manifest);
        let cal = cal.or_else(|| tables.clone().next())?;
        let reload = self
            .inner
            .reload_rejected
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        // Paths as given at that start (`--kernel-dir` relative once, absolute another time).
        let real = |p: &str| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p));
        let of_its_file = |(file, _): &&(String, String)| {
            cal.origin == Origin::Manifest && real(&cal.source).starts_with(real(file))
        };
        let rejected = reload
            .iter()
            .find(of_its_file)
            .map(|r| ("at the last reload", r))
            .or_else(|| {
                let before_any_reload = !self.inner.reloaded.load(Ordering::SeqCst);
                let mut at_start = self.inner.start_rejected.iter();
                let at_start = at_start.find(of_its_file).filter(|_| before_any_reload);
                at_start.map(|r| ("at start", r))
            });
        const REASON: usize = 400;
        let wcetctl = self.wcetctl();
        Some(match rejected {
            Some((when, (file, why))) => {
                let why = match why.char_indices().nth(REASON) {
                    None => why.clone(),
                    Some((end, _)) => format!("{}...", &why[..end]),
                };
                format!(
                    "kernel `{kernel}` is not served: its manifest {file} was rejected {when} ({why}); its bounds wait in the store: fix the file and run `{wcetctl} kernels reload`"
                )
            }
            None => format!(
                "kernel `{kernel}` is not served: no manifest loaded now defines it; its bounds ({}, from {}) wait in the store until a manifest with the same code is loaded (`{wcetctl} kernels reload`)",
                cal.id, cal.source
            ),
        })
    }

    /// The calibrations and the SM clock now, for lookups that must agree with each other.
    pub fn moment(&self) -> Moment {
        Moment {
            snap: self.snapshot(),
            clock_mhz: self.inner.current_clock_mhz.load(Ordering::SeqCst),
        }
    }

    /// Which calibration of `at` serves `kernel` under `tag`: that tag's, or the safer of the
    /// two when `tag` is None, compared at `at`'s clock reading, before production floors (the
    /// choice names the epoch an untagged report is filed in, which a floor must not switch;
    /// the floors the other calibration's shape carries are applied by
    /// [`Service::raise_to_the_other_tag`]). The caller scales the bound to that same reading:
    /// read again, a clock change in between could turn the larger of the two into the smaller,
    /// and the untagged bound would be below a tagged one.
    fn calibration_of(
        &self,
        at: &Moment,
        kernel: &str,
        tag: Option<Interference>,
        sms: u32,
    ) -> Result<Interference> {
        self.known(kernel)?;
        let (snap, clock) = (&at.snap, at.clock_mhz);
        let pick = |i: Interference| snap.tables(i).get(kernel).map(|k| (k, i));
        if tag.is_none() {
            self.refuse_untagged_where_a_table_has_no_entry(snap, kernel, sms)?;
        }
        let found = match tag {
            Some(i) => pick(i),
            None => {
                // Compared as served: a calibration made at a lower clock is scaled less.
                let bound = |c: &(&KernelCalibration, Interference)| {
                    let at = c.0.table.at_most(sms).map_or(0, |e| e.bound_ns);
                    self.inner.clock_scaled_at(c.0, at, clock)
                };
                [pick(Interference::Isolated), pick(Interference::Contended)]
                    .into_iter()
                    .flatten()
                    .max_by_key(bound)
            }
        };
        found.map(|(_, i)| i).ok_or_else(|| {
            let job = self.job_for(kernel);
            let which = tag.map(|t| format!("{t} ")).unwrap_or_default();
            let catalogue = self.catalogue();
            let spec = catalogue.get(kernel);
            if let Some(held) = spec.and_then(|k| self.inner.losses.held_back(k)) {
                return ServiceError::NotCalibrated(format!(
                    "kernel `{kernel}` has no {which}calibration yet and is held back: {held}"
                ));
            }
            // A job that names it may be a calibration or an import: it is named, not described,
            // and no other job is advised while it is queued or runs.
            let wcetctl = self.wcetctl();
            ServiceError::NotCalibrated(match job {
                Some(j) => format!(
                    "kernel `{kernel}` has no {which}calibration yet; job {j} (queued or running) names it: wait for its JobFinished (`{wcetctl} jobs` says what it does)"
                ),
                None => format!(
                    "kernel `{kernel}` has no {which}calibration yet; {}",
                    how_to_calibrate(&wcetctl, kernel, tag, spec.is_some())
                ),
            })
        })
    }

    /// For `Health`: each served calibration without an entry at a size the device realises,
    /// where `GetBoundTagged` of its tag and `GetBound` are refused (a size realised only since
    /// it was made, or a hand edit); they were refused without a word in `Health`.
    fn sizes_without_an_entry(&self) -> Vec<String> {
        let snap = self.snapshot();
        let catalogue = self.catalogue();
        let sizes = &self.inner.device.partition_sizes;
        let mut said = Vec::new();
        for tag in [Interference::Isolated, Interference::Contended] {
            for (kernel, cal) in snap.tables(tag) {
                let missing: Vec<u32> = sizes
                    .iter()
                    .copied()
                    .filter(|&m| cal.table.entry(m).is_none())
                    .collect();
                if missing.is_empty() || !served(&catalogue, kernel, cal) {
                    continue;
                }
                let runnable = catalogue.get(kernel).is_some();
                said.push(format!(
                    "kernel `{kernel}` has no {tag} bound at {} SMs (calibration {}), where it and GetBound are refused; {}",
                    join(&missing),
                    cal.id,
                    how_to_calibrate(&self.wcetctl(), kernel, Some(tag), runnable)
                ));
            }
        }
        // Bounded, as every list in Health is: a calibration carried from a card of other sizes
        // lacks them for every kernel (and is stale, which Health says first).
        const SAID: usize = 4;
        if said.len() > SAID {
            let more = said.len() - SAID;
            said.truncate(SAID);
            said.push(format!(
                "{more} more calibrations have no entry at a size this device realises (`{} curve K` refuses there)",
                self.wcetctl()
            ));
        }
        said
    }

    /// An untagged bound answers for every tag calibrated, so none is served at `sms` where one
    /// of `kernel`'s tables has no entry there. Such a table serves no bound of its tag there,
    /// and untagged `GetBound` was answered from the other tag's entry and this table's next
    /// smaller size: for a kernel slower on more SMs there, below what the missing entry said,
    /// and below isolated launches where the contended table was below them (a review found
    /// it). A table lacks an entry where a hand edit deleted it, or where the device realises a
    /// size it did not realise when the table was made (a bundle from another device, a probe
    /// that accepted the size later).
    fn refuse_untagged_where_a_table_has_no_entry(
        &self,
        snap: &Calibration,
        kernel: &str,
        sms: u32,
    ) -> Result<()> {
        let lacking = [Interference::Isolated, Interference::Contended]
            .into_iter()
            .filter_map(|t| Some((t, snap.tables(t).get(kernel)?)))
            .find(|(_, cal)| cal.table.entry(sms).is_none());
        let Some((tag, cal)) = lacking else {
            return Ok(());
        };
        let wcetctl = self.wcetctl();
        let remedy = match self.job_for(kernel) {
            Some(j) => format!("job {j} (queued or running) names it: wait for its JobFinished (`{wcetctl} jobs` says what it does)"),
            None => {
                let runnable = self.catalogue().get(kernel).is_some();
                how_to_calibrate(&wcetctl, kernel, Some(tag), runnable)
            }
        };
        Err(ServiceError::NotCalibrated(format!(
            "kernel `{kernel}` has no {tag} bound at {sms} SMs (calibration {} has no entry there), and an untagged bound answers for {tag} launches too, so none is served there; {remedy}",
            cal.id
        )))
    }

    fn job_for(&self, kernel: &str) -> Option<u64> {
        let jobs = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        jobs.iter()
            .find(|(_, (s, _))| !s.state.finished() && s.kernels.iter().any(|k| k == kernel))
            .map(|(&id, _)| id)
    }

    fn check_partition(&self, sms: u32) -> Result<u32> {
        let sizes = &self.inner.device.partition_sizes;
        let total = self.inner.device.total_sms;
        if sms > total {
            // No partition of this device has that many SMs: serving the whole device's bound
            // would answer a question that was not asked.
            return Err(ServiceError::InvalidPartition(format!(
                "{sms} SMs is more than the device's {total}; accepted: {} to {total} (realisable sizes: {})",
                sizes.first().copied().unwrap_or(0),
                join(sizes)
            )));
        }
        self.inner.device.realisable_at_most(sms).ok_or_else(|| {
            ServiceError::InvalidPartition(format!(
                "{sms} SMs is below the smallest realisable partition; accepted: at least {} (realisable sizes: {})",
                sizes.first().copied().unwrap_or(0),
                join(sizes)
            ))
        })
    }

    /// The bound for `kernel` on `sms` SMs (the largest realisable size not above it).
    pub fn bound_info(
        &self,
        kernel: &str,
        sms: u32,
        tag: Option<Interference>,
    ) -> Result<BoundInfo> {
        self.bound_info_at(&self.moment(), kernel, sms, tag)
    }

    /// [`Service::bound_info`] from the calibrations and clock of `at`. Production floors and
    /// what is stale are read as they are now: both only ever raise a bound or refuse it.
    pub fn bound_info_at(
        &self,
        at: &Moment,
        kernel: &str,
        sms: u32,
        tag: Option<Interference>,
    ) -> Result<BoundInfo> {
        let partition = self.check_partition(sms)?;
        // Not between a reload's publishing and its queueing the calibration: a changed kernel
        // is stale there with no job for it, and admission advised a recalibration the reload
        // was about to queue (as Health did).
        let _published = self
            .inner
            .publishing
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let interference = self.calibration_of(at, kernel, tag, partition)?;
        let cal = at.snap.tables(interference).get(kernel).ok_or_else(|| {
            ServiceError::NotCalibrated(format!("kernel `{kernel}` is not calibrated"))
        })?;
        let entry = *cal.table.entry(partition).ok_or_else(|| {
            ServiceError::NotCalibrated(format!(
                "kernel `{kernel}` has no bound at {partition} SMs in calibration {}; recalibrate it",
                cal.id
            ))
        })?;
        let query = BoundQuery {
            kernel,
            requested_sms: sms,
            partition,
            tag,
            interference,
            cal,
        };
        let served = self.served_entry(at, &query, entry);
        Ok(self.bound_info_of(&query, served))
    }

    /// `entry` of `query`'s calibration as it is served now: scaled to the clock of `at`, raised
    /// to the production floors and to what the other interference vouches for, with the notes
    /// that say so, and whether it is stale. The calibration's own entry is never changed: these
    /// only ever raise a bound as it is read.
    fn served_entry(&self, at: &Moment, query: &BoundQuery, mut entry: BoundEntry) -> ServedEntry {
        let BoundQuery {
            kernel,
            partition,
            tag,
            interference,
            cal,
            ..
        } = *query;
        let mut notes = cal.table.notes.clone();
        let files_changed = self.staleness_notes(kernel, cal, &mut notes);
        let clock = self.scale_for_clock(cal, &mut entry, &mut notes, at.clock_mhz);
        let observed =
            self.raise_to_observed((kernel, tag), cal, &mut entry, &mut notes, at.clock_mhz);
        self.raise_to_the_other_tag(at, (kernel, tag, interference), &mut entry, &mut notes);
        let (typical_ns, mean_ns) = cal
            .campaign
            .sizes
            .get(&partition)
            .map_or((0, 0), |r| typical_and_mean(&r.times_ns.to_vec()));
        let stale_other = self.stale_other_tag(&at.snap, kernel, tag, interference);
        if let Some(other) = stale_other {
            notes.push(format!(
                "stale: the {other} calibration, which this untagged bound also answers for, is stale (GetBoundTagged states each)"
            ));
        }
        let guarantee = self.guarantee_of(&at.snap, kernel, tag, cal, partition, &mut notes);
        let stale = self.is_stale(cal) || stale_other.is_some();
        ServedEntry {
            entry,
            notes,
            files_changed: files_changed.is_some(),
            clock,
            observed,
            typical_ns,
            mean_ns,
            guarantee,
            stale,
        }
    }

    /// The other tag's calibration of `kernel` where it is stale and an untagged bound (`tag`
    /// none) answered from `interference`'s also answers for it. Untagged, the bound promises
    /// either condition: it is stale when either's calibration is, not only the one whose bound
    /// was larger.
    fn stale_other_tag(
        &self,
        snap: &Calibration,
        kernel: &str,
        tag: Option<Interference>,
        interference: Interference,
    ) -> Option<Interference> {
        [Interference::Isolated, Interference::Contended]
            .into_iter()
            .filter(|&t| tag.is_none() && t != interference)
            .find(|&t| snap.tables(t).get(kernel).is_some_and(|k| self.is_stale(k)))
    }

    /// The answer to `query`: `served` and what the calibration, the job table and the forecast
    /// say of the kernel.
    fn bound_info_of(&self, query: &BoundQuery, served: ServedEntry) -> BoundInfo {
        let BoundQuery {
            kernel,
            requested_sms,
            partition,
            interference,
            cal,
            ..
        } = *query;
        let stale = served.stale;
        BoundInfo {
            guarantee: served.guarantee,
            kernel: kernel.to_string(),
            entry: served.entry,
            requested_sms,
            stale,
            files_changed: served.files_changed,
            runnable: self.catalogue().get(kernel).is_some(),
            // Only where stale: the job table's lock stays off the common query path.
            recalibrating: stale
                .then(|| self.pending_jobs().get(kernel).copied())
                .flatten(),
            calibration_id: cal.id.clone(),
            calibrated_at: cal.calibrated_at,
            method: cal.table.method.to_string(),
            law: cal
                .table
                .law
                .as_ref()
                .map_or("none".into(), |l| l.law.to_string()),
            tail: cal
                .table
                .tail
                .as_ref()
                .map_or("none".into(), |t| t.kind.to_string()),
            interference,
            process_shift: cal.table.allowed_process_shift(),
            notes: served.notes,
            clock: served.clock,
            typical_ns: served.typical_ns,
            mean_ns: served.mean_ns,
            predicted: self.predicted_at(kernel, partition),
            origin: cal.origin,
            source: cal.source.clone(),
            observed: served.observed,
            measured_on_model: {
                let on = &cal.environment().fingerprint.device;
                (*on != self.inner.device.fingerprint.device).then(|| on.clone())
            },
        }
    }

    /// Notes on why `kernel`'s bounds from `cal` may no longer describe its code or files; the
    /// reason its files changed, if they did.
    fn staleness_notes(
        &self,
        kernel: &str,
        cal: &KernelCalibration,
        notes: &mut Vec<String>,
    ) -> Option<String> {
        let code_changed = self.code_changed(cal);
        if code_changed {
            notes.push(format!(
                "stale: measured for other code of `{kernel}` than the catalogue has now (its manifest, module or fill files changed since, or the calibration did not record them); recalibrate it"
            ));
        }
        let files_changed = self.files_changed(kernel);
        match &files_changed {
            Some(code_watch::OffDisk::Changed(why)) => notes.push(format!(
                "stale: {why}; reload the kernels (`{wcetctl} kernels reload`), which calibrates it if it is not the code these bounds were measured for",
                wcetctl = self.wcetctl()
            )),
            Some(code_watch::OffDisk::Unreadable(why)) => notes.push(format!(
                "stale: {why}; whether the code changed is unknown: make the files readable by the daemon again (current again at once if unchanged; a reload rejects the manifest until then)"
            )),
            None => {}
        }
        let manifest = self
            .catalogue()
            .get(kernel)
            .and_then(KernelSpec::manifest)
            .map(|m| m.path.display().to_string());
        // The same code under another path (a manifest moved or renamed): `source` says where
        // it was measured from, the note where it is now.
        if let Some(now) = manifest
            .filter(|now| !code_changed && cal.origin == Origin::Manifest && cal.source != *now)
        {
            notes.push(format!(
                "measured from the manifest at {}, the same code the catalogue now loads from {now}",
                cal.source
            ));
        }
        files_changed.map(|off| off.why().to_string())
    }

    /// What an answer at `partition` guarantees (exceedance, the conditions it holds under), with
    /// the note that explains an untagged answer's weaker exceedance.
    fn guarantee_of(
        &self,
        snap: &Calibration,
        kernel: &str,
        tag: Option<Interference>,
        cal: &KernelCalibration,
        partition: u32,
        notes: &mut Vec<String>,
    ) -> Guarantee {
        let (exceedance, basis) = match tag {
            Some(_) => cal.table.stated_exceedance(),
            None => weakest_guarantee(snap, kernel),
        };
        if exceedance > cal.table.stated_exceedance().0 {
            notes.push(format!(
                "stated at {exceedance:e} per launch, the other interference's guarantee: untagged, the bound serves either condition, so it promises the weaker (GetBoundTagged states each)"
            ));
        }
        Guarantee {
            available: [Interference::Isolated, Interference::Contended]
                .into_iter()
                .filter(|&t| snap.tables(t).contains_key(kernel))
                .collect(),
            // At a verified size, the sweep's launches are the ones the stressor ran beside.
            stressor_sms: cal
                .campaign
                .sizes
                .get(&partition)
                .or_else(|| cal.campaign.verified.get(&partition))
                .map_or(0, |r| r.stressor_sms),
            configured_exceedance: self.inner.config.recipe.method_config.exceedance,
            exceedance,
            basis,
        }
    }

    /// The predicted typical time (ns) of `kernel` at every partition size and its label, or no
    /// sizes and a label that says why there is none: for any kernel the daemon knows, calibrated
    /// or not, since a prediction is wanted most before anything is measured. Never a bound.
    pub fn predicted_curve(&self, kernel: &str) -> Result<(Vec<(u32, u64)>, String)> {
        self.known(kernel)?;
        if let Some(why) = self.prediction_outdated(kernel) {
            return Ok((Vec::new(), why));
        }
        Ok(match self.forecast().curve(kernel) {
            Ok((curve, label)) => (
                curve
                    .points
                    .iter()
                    .map(|&(m, t)| (m, t.round() as u64))
                    .collect(),
                label.clone(),
            ),
            Err(why) => (Vec::new(), why),
        })
    }

    fn predicted_at(&self, kernel: &str, sms: u32) -> Prediction {
        let (typical_ns, label) = match self.prediction_outdated(kernel) {
            Some(why) => (0, why),
            None => self.forecast().at(kernel, sms),
        };
        Prediction { typical_ns, label }
    }

    /// A manifest's prediction is of the module read at its load: once the watcher finds the
    /// module or a fill file changed on disk, it describes code the application no longer runs.
    fn prediction_outdated(&self, kernel: &str) -> Option<String> {
        self.files_changed(kernel).map(|off| {
            format!(
                "none: {}, and the prediction was of the code loaded; reload the kernels",
                off.why()
            )
        })
    }

    /// The SM clock last read from the device, in MHz; `None` when it cannot be read.
    pub fn current_clock_mhz(&self) -> Option<u32> {
        Some(self.inner.current_clock_mhz.load(Ordering::SeqCst)).filter(|&c| c > 0)
    }

    /// A bound measured at a higher clock than the device runs at now is stretched by the ratio:
    /// kernel time scales at worst inversely with the SM clock.
    fn scale_for_clock(
        &self,
        cal: &KernelCalibration,
        entry: &mut BoundEntry,
        notes: &mut Vec<String>,
        current: u32,
    ) -> ClockScaling {
        let (calibrated, current) = self.inner.clocks_at(cal, current);
        let scaled = current > 0 && calibrated > current;
        if scaled {
            entry.bound_ns = stretch(entry.bound_ns, calibrated, current);
            notes.push(format!("bound scaled by {calibrated}/{current} MHz: the SM clock is below the calibrated one"));
        } else if current == 0 {
            notes.push(format!("current SM clock unreadable; bound assumes the calibrated clock ({calibrated} MHz)"));
        }
        ClockScaling {
            calibrated_mhz: calibrated,
            current_mhz: current,
            scaled,
        }
    }

    /// Raise `entry`, of the calibration serving `kernel` under `tag`, to what the other
    /// interference's calibration vouches for at its size, so that no tag's bound is below what
    /// is known of the other:
    /// - contended, to the largest isolated launch measured at its size (or above it, where the
    ///   contended calibration is monotone): a launch beside a stressor is never faster than one
    ///   with the GPU idle, the rule reported times already obey ([`Service::observed_floor`]).
    ///   Contended samples imported from elsewhere served a contended bound a quarter of the
    ///   isolated launches measured there;
    /// - untagged, to the other calibration's bound as served (clock-scaled and raised to every
    ///   floor as its own shape carries them down) and to those isolated launches: the untagged
    ///   bound is never below `GetBoundTagged` of either tag. The calibration is chosen before
    ///   floors, and a time reported at a larger size, which a monotone contended calibration
    ///   carries down and a non-monotone isolated one does not, left `GetBound` at 26,641 ns
    ///   beside a contended bound of 10,000,000 (a black-box review found it).
    fn raise_to_the_other_tag(
        &self,
        at: &Moment,
        (kernel, tag, serving): (&str, Option<Interference>, Interference),
        entry: &mut BoundEntry,
        notes: &mut Vec<String>,
    ) {
        let other = match serving {
            Interference::Isolated => Interference::Contended,
            Interference::Contended => Interference::Isolated,
        };
        let Some(cal) = at.snap.tables(other).get(kernel) else {
            return;
        };
        let isolated = || {
            let tables = at.snap.tables(Interference::Isolated);
            let id = tables.get(kernel).map_or("", |c| c.id.as_str());
            (
                self.inner.isolated_measured_at(&at.snap, kernel, entry.sms, at.clock_mhz),
                format!("the largest isolated launch measured at {} SMs or, where this kernel is never faster on fewer SMs, above (calibration {id}): a contended launch is never faster than an isolated one", entry.sms),
            )
        };
        let (held_at, why) = match tag {
            None => {
                let as_served = (
                    self.served_untagged(kernel, cal, entry.sms, at.clock_mhz),
                    format!("the {other} bound as served here (calibration {})", cal.id),
                );
                std::cmp::max_by_key(as_served, isolated(), |held| held.0)
            }
            Some(Interference::Contended) => isolated(),
            Some(Interference::Isolated) => return,
        };
        if held_at > entry.bound_ns {
            notes.push(format!(
                "raised from {} ns to {held_at} ns, {why}",
                entry.bound_ns
            ));
            entry.bound_ns = held_at;
        }
    }

    /// The untagged bound `cal` would serve at `sms` SMs with the SM clock at `clock` MHz: its
    /// entry clock-scaled and raised to every production floor, carried down from larger sizes
    /// as `cal`'s own shape allows.
    fn served_untagged(&self, kernel: &str, cal: &KernelCalibration, sms: u32, clock: u32) -> u64 {
        let Some(mut entry) = cal.table.at_most(sms).copied() else {
            return 0;
        };
        entry.bound_ns = self.inner.clock_scaled_at(cal, entry.bound_ns, clock);
        self.raise_to_observed((kernel, None), cal, &mut entry, &mut Vec::new(), clock);
        entry.bound_ns
    }

    /// The bound served for `kernel` on `sms` SMs: [`Service::bound_info`]'s `bound_ns`, without
    /// what only readers of the whole answer want (medians of thousands of samples, notes,
    /// predictions). `GetBound`'s path; the two agree everywhere
    /// (`reports_are_judged_against_the_bound_served`).
    pub fn bound(&self, kernel: &str, sms: u32, tag: Option<Interference>) -> Result<u64> {
        let partition = self.check_partition(sms)?;
        Ok(self.served_bound(kernel, partition, tag)?.0)
    }

    /// (size, bound) for every realisable size, ascending.
    pub fn curve(&self, kernel: &str, tag: Option<Interference>) -> Result<Vec<(u32, u64)>> {
        self.inner
            .device
            .partition_sizes
            .iter()
            .map(|&m| self.bound(kernel, m, tag).map(|b| (m, b)))
            .collect()
    }

    /// The smallest realisable size whose bound meets `deadline_ns`.
    pub fn min_partition(
        &self,
        kernel: &str,
        deadline_ns: u64,
        tag: Option<Interference>,
    ) -> Result<(u32, u64)> {
        if deadline_ns == 0 {
            return Err(ServiceError::InvalidArgs(
                "deadline_ns is 0; accepted: a positive number of nanoseconds".into(),
            ));
        }
        // A size refused for want of a bound is skipped, not the question: a larger size that
        // meets the deadline is still the smallest that may be given (one refused size failed the
        // whole answer, a review found). Refused everywhere, the first refusal is the answer.
        let mut curve = Vec::new();
        let mut refused = None;
        for &m in &self.inner.device.partition_sizes {
            match self.bound(kernel, m, tag) {
                Ok(b) => curve.push((m, b)),
                Err(ServiceError::NotCalibrated(why)) => {
                    refused.get_or_insert(ServiceError::NotCalibrated(why));
                }
                Err(e) => return Err(e),
            }
        }
        if let (true, Some(e)) = (curve.is_empty(), refused) {
            return Err(e);
        }
        // A bound of u64::MAX is no finite bound (saturated), which no deadline is met by.
        let meets = |b: u64| b < u64::MAX && b <= deadline_ns;
        curve.iter().copied().find(|&(_, b)| meets(b)).ok_or_else(|| {
            let (m, best) = curve.iter().copied().min_by_key(|&(_, b)| b).unwrap_or((0, 0));
            ServiceError::Infeasible(format!(
                "no partition of `{kernel}` meets a deadline of {deadline_ns} ns; the smallest bound is {best} ns at {m} SMs"
            ))
        })
    }

    /// The exceedance per launch bounds are configured to be stated at (`wcetd --exceedance`).
    pub fn configured_exceedance(&self) -> f64 {
        self.inner.config.recipe.method_config.exceedance
    }
}

/// Whether `k`, the calibration stored under `name`, is served. Everything of a kernel in the
/// catalogue is; of a kernel gone from it (a manifest removed, or withdrawn at a reload), only
/// what was never of a catalogue kernel: imported samples or a bundle of a kernel known only
/// from imports (they record no code). A calibration of a manifest's code, measured or imported,
/// waits in the store until the manifest comes back.
fn served(catalogue: &Catalogue, name: &str, k: &KernelCalibration) -> bool {
    catalogue.get(name).is_some() || (k.origin != Origin::Manifest && k.code.is_empty())
}

/// `bound_ns` measured at `calibrated_mhz`, stretched to a clock of `current_mhz` (rounded up).
fn stretch(bound_ns: u64, calibrated_mhz: u32, current_mhz: u32) -> u64 {
    let stretched =
        (u128::from(bound_ns) * u128::from(calibrated_mhz)).div_ceil(u128::from(current_mhz));
    u64::try_from(stretched).unwrap_or(u64::MAX)
}

/// A caller's kernel name as an error quotes it: whole up to 64 characters, else its start and
/// its length (a 100,000-character name came back whole in the error).
pub(crate) fn quoted_name(name: &str) -> String {
    const SHOWN: usize = 64;
    match name.char_indices().nth(SHOWN) {
        None => name.to_string(),
        Some((end, _)) => format!("{}... ({} characters)", &name[..end], name.chars().count()),
    }
}

/// The kernels at start: the catalogue of `config`'s kernel directories, the manifests it
/// rejected (each logged with why) and the forecast of its kernels' typical times.
fn kernels_at_start(
    config: &ServiceConfig,
    device: &DeviceInfo,
) -> (Catalogue, Vec<(String, String)>, Forecast) {
    let (catalogue, rejected) = load_catalogue(&config.kernel_dirs, None, device);
    let forecast = Forecast::new(
        config.prediction.as_ref(),
        &device.partition_sizes,
        &catalogue,
    );
    for (file, why) in &rejected {
        tracing::warn!("kernel manifest {file} rejected: {why}");
    }
    (catalogue, rejected, forecast)
}

/// Health at start ([`initial_health`]) from what this start and earlier ones set aside since the
/// last successful job (store, observation and device-loss files), other configurations' files that cannot be
/// used, a job the last run did not finish, and the manifests `rejected`; with the record of
/// jobs it was read from. Its commands start `wcetctl` ([`ServiceConfig::wcetctl`]).
fn health_at_start(
    store: &Store,
    device: &DeviceInfo,
    (monitor, losses): (&monitor::MonitorState, &device_losses::DeviceLosses),
    rejected: &[(String, String)],
    wcetctl: &str,
) -> (String, interrupted::JobRecords) {
    let mut moved_aside = store.quarantined();
    moved_aside.extend(monitor.moved_aside());
    moved_aside.extend(losses.moved_aside());
    let unusable: Vec<String> = store
        .unusable_others()
        .into_iter()
        .map(|(path, why)| format!("{} ({why})", path.display()))
        .collect();
    let job_record = interrupted::JobRecords::of(store, device);
    let moved_aside = job_record.set_aside(&moved_aside);
    let interrupted = interrupted::read(job_record.path(), wcetctl);
    if let Some(why) = &interrupted {
        tracing::warn!(path = %job_record.path().display(), "{why}");
    }
    let health = initial_health(
        device,
        interrupted,
        &moved_aside,
        &unusable,
        rejected,
        wcetctl,
    );
    (health, job_record)
}

/// `ok`, or `degraded` naming the partition sizes the placement probe refused at open (they are
/// not offered and never calibrated).
/// Also `degraded` naming the files moved aside at start (`moved_aside`, each with why: bounds
/// or production floors they held are not served) and the kernel manifests rejected at start
/// (their kernels are not served), until the next successful job.
fn initial_health(
    device: &DeviceInfo,
    interrupted: Option<String>,
    moved_aside: &[String],
    unusable_others: &[String],
    manifests_rejected: &[(String, String)],
    wcetctl: &str,
) -> String {
    let mut why: Vec<String> = interrupted.into_iter().collect();
    if !device.unusable_sizes.is_empty() {
        let refused: Vec<String> = device
            .unusable_sizes
            .iter()
            .map(|(m, why)| format!("{m} SMs ({why})"))
            .collect();
        why.push(format!(
            "partitions refused by the placement probe: {}",
            refused.join("; ")
        ));
    }
    if !moved_aside.is_empty() {
        why.push(format!(
            "damaged files set aside at start, what could not be read of them is not served: {}",
            moved_aside.join("; ")
        ));
    }
    if !unusable_others.is_empty() {
        why.push(format!(
            "calibrations of other device configurations not usable, so not served stale (left where they are; launch times production reported on this card under earlier configurations, as far as they can be read, still hold the stale bounds up): {}",
            unusable_others.join("; ")
        ));
    }
    if !manifests_rejected.is_empty() {
        let files: Vec<String> = manifests_rejected
            .iter()
            .map(|(file, why)| format!("{file} ({why})"))
            .collect();
        why.push(format!(
            "kernel manifests rejected at start, their kernels are not served: {}; fix them and run `{wcetctl} kernels reload`",
            files.join("; ")
        ));
    }
    if why.is_empty() {
        return "ok".into();
    }
    format!("degraded: {}", why.join("; "))
}

/// The kernels a reload adds (new, or other code than before) and removes. A manifest moved to
/// another file with the same text, module and fill files is the same kernel, and keeps its
/// bounds without a calibration.
fn catalogue_changes(before: &Catalogue, next: &Catalogue) -> (Vec<String>, Vec<String>) {
    let added = next
        .iter()
        .filter(|k| {
            before
                .get(&k.name)
                .is_none_or(|old| old.code_digest() != k.code_digest())
        })
        .map(|k| k.name.clone())
        .collect();
    let removed = before
        .iter()
        .filter(|k| next.get(&k.name).is_none())
        .map(|k| k.name.clone())
        .collect();
    (added, removed)
}

/// The built-in suite and the manifests of `dirs`, and every manifest rejected, with the reason.
///
/// With `previous` (a reload), a file that is rejected now but was loaded before keeps its
/// previous version: a broken edit withdraws nothing, as a rejected file changes nothing else.
fn load_catalogue(
    dirs: &[PathBuf],
    previous: Option<&Catalogue>,
    device: &DeviceInfo,
) -> (Catalogue, Vec<(String, String)>) {
    let (mut manifests, mut rejected) = manifest::load_dirs(dirs);
    // On the simulator a manifest's `[sim]` table is what runs: checked now, not at calibration.
    if device.backend == crate::gpu::Backend::Sim {
        reject_unsimulable(&mut manifests, &mut rejected, device);
    }
    keep_previous_versions(&mut manifests, &mut rejected, previous);
    established_first(&mut manifests, previous);
    let (catalogue, taken) = Catalogue::with_manifests(manifests);
    rejected.extend(taken);
    (catalogue, rejected)
}

/// Moves to `rejected` every manifest whose `[sim]` table the simulator cannot run on this
/// device's partition sizes, so that it is refused at load, with the reason, rather than at its
/// calibration.
fn reject_unsimulable(
    manifests: &mut Vec<manifest::Manifest>,
    rejected: &mut Vec<(String, String)>,
    device: &DeviceInfo,
) {
    manifests.retain(|m| {
        match crate::gpu::sim::KernelPhysics::of_manifest(m, &device.partition_sizes) {
            Ok(_) => true,
            Err(e) => {
                rejected.push((m.path.display().to_string(), format!("[sim]: {e:#}")));
                false
            }
        }
    });
}

/// For each rejected file (or unreadable directory), keeps the previous catalogue's manifests
/// from it where their code is unchanged on disk, and says in the rejection which were kept and
/// which not, and why: a broken edit withdraws nothing.
fn keep_previous_versions(
    manifests: &mut Vec<manifest::Manifest>,
    rejected: &mut [(String, String)],
    previous: Option<&Catalogue>,
) {
    for (file, why) in rejected {
        // The file's previous version, or every manifest of a directory that cannot be read (an
        // NFS hiccup or a mode change withdrew every kernel in it, with Health `ok`).
        let rejected_path = std::path::Path::new(file.as_str());
        let kept = previous
            .into_iter()
            .flat_map(Catalogue::iter)
            .filter_map(KernelSpec::manifest)
            .filter(|m| m.path == rejected_path || m.path.parent() == Some(rejected_path));
        // The previous version runs the module and fill files read at its load; where those
        // changed too, keeping it would time (and serve) other code under its digest.
        // Files that cannot be read now (the directory's mode, a mount gone) are not known to
        // have changed: the previous version is kept, and the watcher serves its bounds stale,
        // saying why, until they can be read again.
        for (m, on_disk) in kept.map(|m| (m, m.on_disk())) {
            match on_disk {
                manifest::OnDisk::Same => {
                    why.push_str(&format!(
                        "; the previous version of `{}` is kept until the file is fixed",
                        m.name
                    ));
                    manifests.push(m.clone());
                }
                manifest::OnDisk::Unreadable(unread) => {
                    why.push_str(&format!(
                        "; the previous version of `{}` is kept, its bounds stale while {unread}",
                        m.name
                    ));
                    manifests.push(m.clone());
                }
                manifest::OnDisk::Changed(changed) => why.push_str(&format!(
                    "; the previous version of `{}` is not kept either: {changed}",
                    m.name
                )),
            }
        }
    }
}

/// Puts first the manifests whose names their files already had in `previous`, so that
/// [`Catalogue::with_manifests`] refuses the newcomer.
///
/// A name stays with the file that had it: a new file claiming it is the one refused.
fn established_first(manifests: &mut [manifest::Manifest], previous: Option<&Catalogue>) {
    let established = |m: &manifest::Manifest| {
        previous
            .and_then(|p| p.get(&m.name))
            .and_then(KernelSpec::manifest)
            .is_some_and(|old| old.path == m.path)
    };
    manifests.sort_by_key(|m| !established(m));
}

/// The clock a fingerprint's clock policy names (`nominal:1980MHz`, `locked:1755MHz`), in MHz.
fn clock_in_policy(policy: &str) -> Option<u32> {
    let mhz = policy.strip_suffix("MHz")?;
    let digits = mhz.rsplit(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok().filter(|&m| m > 0)
}

/// Median and mean of measured launch times (0, 0 when there are none).
fn typical_and_mean(times: &[u64]) -> (u64, u64) {
    if times.is_empty() {
        return (0, 0);
    }
    let median = crate::model::tail::quantile_u64(times, 0.5).round() as u64;
    let sum: u128 = times.iter().map(|&t| u128::from(t)).sum();
    let mean = (sum + times.len() as u128 / 2) / times.len() as u128;
    (median, u64::try_from(mean).unwrap_or(u64::MAX))
}

/// Most kernel names an error message lists.
const NAMES_IN_A_MESSAGE: usize = 20;

/// `names` joined with commas, at most [`NAMES_IN_A_MESSAGE`] of them, then how many more and
/// where the whole list is (`wcetctl list`, started as [`ServiceConfig::wcetctl`] says).
fn names_in_a_message(names: &[String], wcetctl: &str) -> String {
    names_in_a_message_listed_by(names, &format!("`{wcetctl} list` or Bounds1.ListKernels()"))
}

/// [`names_in_a_message`], naming `where_listed` for the whole list.
fn names_in_a_message_listed_by(names: &[String], where_listed: &str) -> String {
    let shown = names.len().min(NAMES_IN_A_MESSAGE);
    let mut text = names[..shown].join(", ");
    if names.len() > shown {
        text.push_str(&format!(
            " and {} more ({where_listed} lists them all)",
            names.len() - shown
        ));
    }
    text
}

fn join(sizes: &[u32]) -> String {
    sizes
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Inner {
    /// The state of a service starting on `device` with `config` and the SM clock `clock`: what
    /// `store` has for the device, the kernels, the production floors (their saver started),
    /// the losses of earlier runs and Health at start. Nothing runs on the GPU yet.
    fn load(
        store: &Store,
        device: DeviceInfo,
        config: ServiceConfig,
        clock: u32,
        span: &tracing::Span,
    ) -> Inner {
        let mut calibration =
            carry_over::initial_calibration(store, &device, &config.sibling_cards);
        carry_over::allow_for_process_shift(
            &mut calibration,
            config.recipe.method_config.process_shift,
        );
        let (events, _) = broadcast::channel(1024);
        let (catalogue, rejected, forecast) = kernels_at_start(&config, &device);
        let monitor = Arc::new(monitor::MonitorState::load(
            store,
            &device,
            config.monitor.clone(),
        ));
        monitor::spawn_saver(Arc::clone(&monitor), span.clone());
        let losses = device_losses::DeviceLosses::load(store, &device, config.wcetctl());
        let set_aside = (&*monitor, &losses);
        let (health, job_record) =
            health_at_start(store, &device, set_aside, &rejected, &config.wcetctl());
        Inner {
            device,
            snapshot: RwLock::new(Arc::new(calibration)),
            jobs: Mutex::new(BTreeMap::new()),
            pending: AtomicU64::new(0),
            next_job: AtomicU64::new(1),
            health: RwLock::new(health),
            events,
            config,
            current_clock_mhz: AtomicU32::new(clock),
            forecast: RwLock::new(Arc::new(forecast)),
            lost: tokio::sync::watch::channel(None).0,
            catalogue: RwLock::new(Arc::new(catalogue)),
            monitor,
            worker_exited: (Mutex::new(false), std::sync::Condvar::new()),
            changed_on_disk: RwLock::default(),
            code_watch_failed: AtomicBool::new(false),
            reloading: Mutex::new(()),
            publishing: RwLock::new(()),
            reload_rejected: RwLock::default(),
            start_rejected: rejected,
            reloaded: AtomicBool::new(false),
            job_record,
            set_aside_kernels: store.set_aside_kernels(),
            stopping: AtomicBool::new(false),
            span: span.clone(),
            losses,
        }
    }

    /// The SM clock `cal` was calibrated at and `current` (the current one as the caller read
    /// it; 0: unreadable), in MHz. Where the calibration read no clock (imported samples), the
    /// clock its fingerprint names: a stale import made under another clock policy is scaled as
    /// a measured calibration is.
    fn clocks_at(&self, cal: &KernelCalibration, current: u32) -> (u32, u32) {
        let env = cal.environment();
        let nominal = if env.fingerprint == self.device.fingerprint {
            None
        } else {
            clock_in_policy(&env.fingerprint.clock_policy)
        };
        let calibrated = env
            .sm_clock_mhz_max
            .or(nominal)
            .unwrap_or(self.device.sm_clock_mhz);
        (calibrated, current)
    }

    /// `bound_ns` of `cal` scaled to the current clock as it is served.
    fn clock_scaled(&self, cal: &KernelCalibration, bound_ns: u64) -> u64 {
        self.clock_scaled_at(cal, bound_ns, self.current_clock_mhz.load(Ordering::SeqCst))
    }

    /// [`Inner::clock_scaled`] at the clock `current` the caller read.
    fn clock_scaled_at(&self, cal: &KernelCalibration, bound_ns: u64, current: u32) -> u64 {
        match self.clocks_at(cal, current) {
            (calibrated, current) if current > 0 && calibrated > current => {
                stretch(bound_ns, calibrated, current)
            }
            _ => bound_ns,
        }
    }

    /// The largest isolated launch `snap` measured for `kernel` at `partition`, clock-scaled to
    /// `clock` as its bound is (0 without one): what a contended bound there is never below.
    /// Where the contended calibration says the kernel is never faster on fewer SMs, the isolated
    /// launches of larger sizes count too, as reported times do ([`Service::observed_floor`]).
    fn isolated_measured_at(
        &self,
        snap: &Calibration,
        kernel: &str,
        partition: u32,
        clock: u32,
    ) -> u64 {
        let monotone = snap
            .tables(Interference::Contended)
            .get(kernel)
            .is_some_and(|c| c.table.monotone);
        let Some(cal) = snap.tables(Interference::Isolated).get(kernel) else {
            return 0;
        };
        let largest = cal
            .table
            .entries
            .iter()
            .filter(|e| e.sms == partition || (monotone && e.sms > partition))
            .map(|e| e.observed_max_ns)
            .max()
            .unwrap_or(0);
        self.clock_scaled_at(cal, largest, clock)
    }

    /// `cal`'s calibrated bound at exactly `partition`, scaled to the current clock as it is
    /// served, before production floors.
    fn calibrated_at(&self, cal: &KernelCalibration, partition: u32) -> Option<u64> {
        let entry = cal.table.entry(partition)?;
        Some(self.clock_scaled(cal, entry.bound_ns))
    }
}

#[cfg(test)]
mod tests;
