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
//! Beside this file: `stale.rs` (whether a served bound still holds, and the step that makes it
//! current), `carry_over.rs` (the calibration served at start, and production floors across a
//! change of device fingerprint), `code_watch.rs` (manifests' files changed on disk) and
//! `monitor.rs` (launch times reported from production).

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
mod interrupted;
mod monitor;
mod stale;
pub use monitor::{
    MonitorConfig, MonitorEvent, ObservedFloor, ObservedInfo, ReportOutcome, SAVE_INTERVAL,
};

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
    /// Fewest SMs the stressor ran on while this size was measured (0: isolated or not measured).
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

/// Most samples one `ImportSamples` call may carry.
pub const MAX_IMPORTED_SAMPLES: usize = 10_000_000;

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
    /// Where jobs are recorded from queued to ended, so that the next start names those a crash
    /// interrupted ([`interrupted`]).
    job_record: interrupted::JobRecords,
    /// Set by [`Service::stop_worker`] under the jobs lock: no job is queued after its end
    /// marker, where the worker would never reach it.
    stopping: AtomicBool,
}

/// The daemon's state, shared by the bus face and the GPU worker.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
    /// `None` tells the worker to stop.
    worker: mpsc::Sender<Option<Job>>,
}

impl Service {
    /// Load what the store has for `gpu`, start the GPU worker, and queue a calibration of every
    /// built-in kernel that has no bounds for this device yet (its job number is returned).
    pub fn start(
        mut gpu: Box<dyn Gpu>,
        store: Store,
        config: ServiceConfig,
    ) -> (Service, Option<u64>) {
        let device = gpu.info().clone();
        let calibrate_missing = config.initial_calibration;
        let clock = gpu.telemetry().sm_clock_mhz.unwrap_or(0);
        let calibration = carry_over::initial_calibration(&store, &device);
        let (events, _) = broadcast::channel(1024);
        let (catalogue, rejected) = load_catalogue(&config.kernel_dirs, None, &device);
        let forecast = Forecast::new(
            config.prediction.as_ref(),
            &device.partition_sizes,
            &catalogue,
        );
        for (file, why) in &rejected {
            tracing::warn!("kernel manifest {file} rejected: {why}");
        }
        let monitor = Arc::new(monitor::MonitorState::load(
            &store,
            &device,
            config.monitor.clone(),
        ));
        monitor::spawn_saver(Arc::clone(&monitor));
        let mut moved_aside = store.quarantined();
        moved_aside.extend(monitor.moved_aside());
        let unusable: Vec<String> = store
            .unusable_others()
            .into_iter()
            .map(|(path, why)| format!("{} ({why})", path.display()))
            .collect();
        let job_record = interrupted::JobRecords::of(&store, &device);
        let interrupted = interrupted::read(job_record.path());
        if let Some(why) = &interrupted {
            tracing::warn!(path = %job_record.path().display(), "{why}");
        }
        let health = initial_health(&device, interrupted, &moved_aside, &unusable, &rejected);
        let inner = Arc::new(Inner {
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
            job_record,
            stopping: AtomicBool::new(false),
        });
        code_watch::spawn(Arc::downgrade(&inner));
        let (tx, rx) = mpsc::channel();
        let worker_inner = Arc::clone(&inner);
        std::thread::Builder::new()
            .name("wcetd-gpu".into())
            .spawn(move || worker_loop(gpu, store, worker_inner, rx))
            .expect("spawning the GPU worker thread");
        let service = Service { inner, worker: tx };
        let missing: Vec<String> = service
            .catalogue()
            .iter()
            .filter(|k| service.needs_calibration(&k.name))
            .map(|k| k.name.clone())
            .collect();
        let first = (calibrate_missing && !missing.is_empty())
            .then(|| service.recalibrate(&missing).ok())
            .flatten();
        (service, first)
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
        let last_job = self
            .inner
            .health
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut why = Vec::new();
        why.extend(self.stale_advice());
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
        // New, or other code than before: a manifest moved to another file with the same text,
        // module and fill files is the same kernel, and keeps its bounds without a calibration.
        let added: Vec<String> = next
            .iter()
            .filter(|k| {
                before
                    .get(&k.name)
                    .is_none_or(|old| old.code_digest() != k.code_digest())
            })
            .map(|k| k.name.clone())
            .collect();
        let removed: Vec<String> = before
            .iter()
            .filter(|k| next.get(&k.name).is_none())
            .map(|k| k.name.clone())
            .collect();
        // Predictions are of the code now loaded (a module's PTX is read once, here).
        let forecast = self.forecast().for_catalogue(&next);
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
        for (file, why) in &rejected {
            tracing::warn!("kernel manifest {file} rejected: {why}");
        }
        // What is served, and what is stale, changed for these now, not when a job ends: a
        // client caching bounds, StaleKernels or Health must hear of it at once.
        let touched: Vec<String> = added.iter().chain(&removed).cloned().collect();
        if !touched.is_empty() {
            let _ = self
                .inner
                .events
                .send(Event::BoundsChanged { kernels: touched });
        }
        if !added.is_empty() {
            match self.recalibrate(&added) {
                Ok(job) => tracing::info!(
                    job,
                    "calibrating new or changed kernels: {}",
                    added.join(", ")
                ),
                Err(e) => tracing::warn!("new kernels not queued for calibration: {e}"),
            }
        }
        (added, removed, rejected)
    }

    fn known(&self, kernel: &str) -> Result<()> {
        if kernel.is_empty() {
            return Err(ServiceError::InvalidArgs(format!(
                "kernel name is empty; accepted: one of {}",
                self.list_kernels().join(", ")
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
            Ok(())
        } else {
            Err(ServiceError::UnknownKernel(format!(
                "no kernel named `{kernel}`; accepted: {}",
                self.list_kernels().join(", ")
            )))
        }
    }

    /// The calibration of `kernel` under `tag`, or under the safer of the two when `tag` is None.
    fn calibration_of(
        &self,
        kernel: &str,
        tag: Option<Interference>,
        sms: u32,
    ) -> Result<(Arc<Calibration>, Interference)> {
        self.known(kernel)?;
        let snap = self.snapshot();
        let pick = |i: Interference| snap.tables(i).get(kernel).map(|k| (k, i));
        let found = match tag {
            Some(i) => pick(i),
            None => {
                // Compared as served: a calibration made at a lower clock is scaled less.
                let bound = |c: &(&KernelCalibration, Interference)| self.served_at(c.0, sms);
                [pick(Interference::Isolated), pick(Interference::Contended)]
                    .into_iter()
                    .flatten()
                    .max_by_key(bound)
            }
        };
        let interference = found.map(|(_, i)| i);
        interference.map(|i| (Arc::clone(&snap), i)).ok_or_else(|| {
            let running = self
                .job_for(kernel)
                .map(|j| format!(" (job {j} is calibrating it)"))
                .unwrap_or_default();
            let which = tag.map(|t| format!("{t} ")).unwrap_or_default();
            ServiceError::NotCalibrated(format!(
                "kernel `{kernel}` has no {which}calibration yet{running}; {}",
                how_to_calibrate(kernel, tag, self.catalogue().get(kernel).is_some())
            ))
        })
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
        let partition = self.check_partition(sms)?;
        let (snap, interference) = self.calibration_of(kernel, tag, partition)?;
        let cal = snap.tables(interference).get(kernel).ok_or_else(|| {
            ServiceError::NotCalibrated(format!("kernel `{kernel}` is not calibrated"))
        })?;
        let mut entry = *cal.table.entry(partition).ok_or_else(|| {
            ServiceError::NotCalibrated(format!(
                "kernel `{kernel}` has no bound at {partition} SMs in calibration {}; recalibrate it",
                cal.id
            ))
        })?;
        let mut notes = cal.table.notes.clone();
        let files_changed = self.staleness_notes(kernel, cal, &mut notes);
        let clock = self.scale_for_clock(cal, &mut entry, &mut notes);
        let observed = self.raise_to_observed(kernel, tag, cal, &mut entry, &mut notes);
        let (typical_ns, mean_ns) = cal
            .campaign
            .sizes
            .get(&partition)
            .map_or((0, 0), |r| typical_and_mean(&r.times_ns.to_vec()));
        // Untagged, the bound promises either condition: it is stale when either's calibration
        // is, not only the one whose bound was larger.
        let stale_other = [Interference::Isolated, Interference::Contended]
            .into_iter()
            .filter(|&t| tag.is_none() && t != interference)
            .find(|&t| snap.tables(t).get(kernel).is_some_and(|k| self.is_stale(k)));
        if let Some(other) = stale_other {
            notes.push(format!(
                "stale: the {other} calibration, which this untagged bound also answers for, is stale (GetBoundTagged states each)"
            ));
        }
        let guarantee = self.guarantee_of(&snap, kernel, tag, cal, partition, &mut notes);
        let stale = self.is_stale(cal) || stale_other.is_some();
        Ok(BoundInfo {
            guarantee,
            kernel: kernel.to_string(),
            entry,
            requested_sms: sms,
            stale,
            files_changed: files_changed.is_some(),
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
            notes,
            clock,
            typical_ns,
            mean_ns,
            predicted: self.predicted_at(kernel, partition),
            origin: cal.origin,
            source: cal.source.clone(),
            observed,
        })
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
        if let Some(why) = &files_changed {
            notes.push(format!(
                "stale: {why}; reload the kernels (`wcetctl kernels reload`), which calibrates it if it is not the code these bounds were measured for"
            ));
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
        files_changed
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
            stressor_sms: cal
                .campaign
                .sizes
                .get(&partition)
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
        self.files_changed(kernel).map(|why| {
            format!("none: {why}, and the prediction was of the code loaded; reload the kernels")
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
    ) -> ClockScaling {
        let (calibrated, current) = self.clocks(cal);
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

    /// The SM clock `cal` was calibrated at and the current one (0: unreadable), in MHz.
    fn clocks(&self, cal: &KernelCalibration) -> (u32, u32) {
        self.inner.clocks(cal)
    }

    /// `cal`'s bound at the largest realisable size not above `sms`, scaled to the current clock
    /// as it is served.
    fn served_at(&self, cal: &KernelCalibration, sms: u32) -> u64 {
        let bound = cal.table.at_most(sms).map_or(0, |e| e.bound_ns);
        self.inner.clock_scaled(cal, bound)
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
        let curve = self.curve(kernel, tag)?;
        // A bound of u64::MAX is no finite bound (saturated), which no deadline is met by.
        let meets = |b: u64| b < u64::MAX && b <= deadline_ns;
        curve.iter().copied().find(|&(_, b)| meets(b)).ok_or_else(|| {
            let (m, best) = curve.iter().copied().min_by_key(|&(_, b)| b).unwrap_or((0, 0));
            ServiceError::Infeasible(format!(
                "no partition of `{kernel}` meets a deadline of {deadline_ns} ns; the smallest bound is {best} ns at {m} SMs"
            ))
        })
    }

    /// Queue a recalibration of `kernels` (every kernel of the catalogue when empty).
    pub fn recalibrate(&self, kernels: &[String]) -> Result<u64> {
        self.recalibrate_with(kernels, &self.inner.config.interference)
    }

    /// Queue a recalibration of `kernels` under each of `interference` (the daemon's configured
    /// tags when empty). The kernels that succeed are published when the job ends.
    pub fn recalibrate_with(
        &self,
        kernels: &[String],
        interference: &[Interference],
    ) -> Result<u64> {
        let specs = self.kernel_specs(kernels)?;
        let mut tags = if interference.is_empty() {
            self.inner.config.interference.clone()
        } else {
            interference.to_vec()
        };
        tags.sort();
        tags.dedup();
        let names = specs.iter().map(|k| k.name.clone()).collect();
        let work = Work::Calibrate {
            kernels: specs,
            interference: tags.clone(),
        };
        let id = self.enqueue(work, names, tags)?;
        tracing::info!(job = id, "recalibration queued");
        Ok(id)
    }

    /// Make bounds from samples measured elsewhere, as (partition size, ns) pairs; `options` may
    /// hold `blocks` and `blocks_per_sm` (the launch geometry), `interference` and `source`. The
    /// kernel need not be known. Refused whole, with the reason: an invalid name, no samples, a
    /// zero time, a size this device cannot realise, more than [`MAX_IMPORTED_SAMPLES`].
    pub fn import_samples(
        &self,
        kernel: &str,
        samples: &[(u32, u64)],
        options: ImportOptions,
    ) -> Result<u64> {
        if !manifest::valid_name(kernel) {
            return Err(ServiceError::InvalidArgs(format!(
                "kernel name `{kernel}` is not accepted; accepted: 1 to 64 of A-Z a-z 0-9 _ . -"
            )));
        }
        if samples.is_empty() {
            return Err(ServiceError::InvalidArgs(
                "no samples; accepted: a non-empty array of (partition size, time in ns)".into(),
            ));
        }
        if samples.len() > MAX_IMPORTED_SAMPLES {
            return Err(ServiceError::InvalidArgs(format!(
                "{} samples in one call; accepted: at most {MAX_IMPORTED_SAMPLES} in one call (a kernel's bounds come from one call's samples)",
                samples.len()
            )));
        }
        let sizes = &self.inner.device.partition_sizes;
        let mut by_size: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (i, &(sms, t)) in samples.iter().enumerate() {
            if t == 0 || t > crate::observe::MAX_TIME_NS {
                // The limits `Report` keeps: a longer time is a unit mistake, and as a sample it
                // would make every bound of the kernel useless.
                return Err(ServiceError::InvalidArgs(format!(
                    "sample {i} has a time of {t} ns; accepted: 1 ns to one hour ({} ns)",
                    crate::observe::MAX_TIME_NS
                )));
            }
            if !sizes.contains(&sms) {
                return Err(ServiceError::InvalidPartition(format!(
                    "sample {i} is at {sms} SMs, which this device cannot realise; accepted: {}",
                    join(sizes)
                )));
            }
            by_size.entry(sms).or_default().push(t);
        }
        let tag = options.interference;
        let code = self
            .catalogue()
            .get(kernel)
            .map(KernelSpec::code_digest)
            .unwrap_or_default();
        if let Some(why) = measured_here(&self.inner, kernel, tag, &code) {
            return Err(ServiceError::InvalidArgs(why));
        }
        let imported = calibrate::Imported {
            kernel: kernel.to_string(),
            by_size,
            geometry: options.geometry,
            interference: tag,
            source: options.source,
            // Taken now, not when the job runs: a reload in between must not make samples of
            // the old code pass for the new.
            code,
        };
        let work = Work::Import(Box::new(imported));
        let id = self.enqueue(work, vec![kernel.to_string()], vec![tag])?;
        tracing::info!(job = id, kernel, samples = samples.len(), "import queued");
        Ok(id)
    }

    /// This device's calibrations of `kernels` (every calibrated kernel when empty), both tags,
    /// as a bundle for another daemon with the same configuration.
    pub fn export_calibration(&self, kernels: &[String]) -> Result<crate::bundle::Bundle> {
        let snap = self.snapshot();
        for k in kernels {
            self.known(k)?;
        }
        let wanted = |k: &str| kernels.is_empty() || kernels.iter().any(|w| w == k);
        // Only what is served: a removed manifest's calibration waits in the store for it, and
        // a bundle holding it would be refused by a daemon that does not load that manifest.
        let catalogue = self.catalogue();
        let mut calibrations = Vec::new();
        for tag in [Interference::Isolated, Interference::Contended] {
            for (name, cal) in snap.tables(tag) {
                if wanted(name) && served(&catalogue, name, cal) && !self.is_stale(cal) {
                    calibrations.push(crate::bundle::Entry::new(name, tag, cal.clone()));
                }
            }
        }
        if calibrations.is_empty() {
            return Err(ServiceError::NotCalibrated(
                "nothing to export: no current (not stale) calibration of the kernels asked for; calibrate first (`wcetctl recalibrate`)".into(),
            ));
        }
        Ok(crate::bundle::Bundle {
            format: crate::bundle::FORMAT,
            exported_at: Utc::now(),
            host: crate::measure::hostname(),
            fingerprint: self.inner.device.fingerprint.clone(),
            calibrations,
        })
    }

    /// Take another daemon's calibrations. Accepted only where the bundle's fingerprint matches
    /// this device (model, driver, CUDA version, clock policy), otherwise refused with what
    /// differs; with `force` they are imported as stale instead. Every kernel must be known here.
    /// A bundle whose bounds are below launches it records is refused. Nothing is imported unless
    /// everything is: the check on this card, any recalibration it calls for, and then the
    /// publishing run as one job, and a failure anywhere leaves the bounds as they were. Returns
    /// the kernels.
    pub fn import_calibration(&self, text: &str, force: bool) -> Result<Vec<String>> {
        let bundle = crate::bundle::parse(text).map_err(ServiceError::InvalidArgs)?;
        let stale = self.refuse_bundle(&bundle, force)?;
        let source = format!(
            "bundle from {} exported {}",
            bundle.host,
            bundle.exported_at.to_rfc3339()
        );
        let mut names = Vec::new();
        // Each keeps the exporting card's fingerprint (served stale) unless the job's arrival
        // check passes on this card, which is when it becomes this device's (`check_bundle`).
        let calibrations = bundle
            .calibrations
            .into_iter()
            .map(|e| {
                let mut cal = e.calibration;
                crate::bundle::realisable_only(&mut cal, &self.inner.device.partition_sizes);
                cal.origin = Origin::Bundle;
                cal.source = source.clone();
                if !names.contains(&e.kernel) {
                    names.push(e.kernel.clone());
                }
                (e.interference, e.kernel, cal)
            })
            .collect::<Vec<_>>();
        let mut tags: Vec<Interference> = calibrations.iter().map(|c| c.0).collect();
        tags.sort();
        tags.dedup();
        let work = Work::Bundle {
            calibrations,
            verify: !stale,
        };
        let id = self.enqueue(work, names.clone(), tags)?;
        tracing::info!(job = id, "bundle import queued: {}", names.join(", "));
        Ok(names)
    }

    /// Why `bundle` is refused whole, if it is: a bundle that does not agree with itself (even
    /// with `force`), another configuration without `force`, a kernel unknown here, or a bound
    /// below a launch the bundle itself records (an edited or corrupted file, never served).
    /// Otherwise whether it is of another configuration (imported stale).
    fn refuse_bundle(&self, bundle: &crate::bundle::Bundle, force: bool) -> Result<bool> {
        // Refused whatever `force` says: what follows decides from the bundle's header, so the
        // header must speak for every calibration in it.
        let bad = crate::bundle::inconsistencies(bundle);
        if !bad.is_empty() {
            return Err(ServiceError::InvalidArgs(format!(
                "the bundle does not agree with itself ({} findings; {}); nothing imported; accepted: a bundle as `wcetctl export` writes it",
                bad.len(),
                bad.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
            )));
        }
        let diffs = crate::bundle::differences(&self.inner.device.fingerprint, &bundle.fingerprint);
        if !diffs.is_empty() && !force {
            return Err(ServiceError::InvalidArgs(format!(
                "the bundle was measured under another configuration: {}; accepted: a bundle from a device with the same model, driver, CUDA version and clock policy, or force (`wcetctl import-calibration --force`) to import it as stale",
                diffs.join("; ")
            )));
        }
        let missing = crate::bundle::missing_sizes(bundle, &self.inner.device.partition_sizes);
        if !missing.is_empty() {
            return Err(ServiceError::InvalidArgs(format!(
                "the bundle lacks sizes this device serves ({}); nothing imported; accepted: a calibration with a bound at every realisable size of this device ({})",
                missing.join("; "),
                self.inner
                    .device
                    .partition_sizes
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut unknown: Vec<&str> = bundle
            .calibrations
            .iter()
            .map(|e| e.kernel.as_str())
            .filter(|k| self.known(k).is_err())
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        if !unknown.is_empty() {
            return Err(ServiceError::UnknownKernel(format!(
                "the bundle holds kernels this daemon does not know: {}; accepted: {} (add their manifests first)",
                unknown.join(", "),
                self.list_kernels().join(", ")
            )));
        }
        // Bounds of other code than this daemon loads under the name would be stale on arrival,
        // and would take the place of the bounds it has for its own code: refused, forced or not
        // (and again when the job runs, in case a reload came in between).
        let entries = bundle
            .calibrations
            .iter()
            .map(|e| (e.kernel.as_str(), e.calibration.code.as_str()));
        if let Some(why) = bundle_of_other_code(&self.catalogue(), entries) {
            return Err(ServiceError::InvalidArgs(format!(
                "{why}; nothing imported"
            )));
        }
        let under: Vec<String> = bundle
            .calibrations
            .iter()
            .flat_map(|e| {
                let tag = e.interference;
                e.calibration
                    .bounds_under_their_launches()
                    .into_iter()
                    .map(move |(m, b, t)| {
                        format!(
                            "{} ({tag}) at {m} SMs: bound {b} ns, a launch of {t} ns",
                            e.kernel
                        )
                    })
            })
            .collect();
        if !under.is_empty() {
            return Err(ServiceError::InvalidArgs(format!(
                "the bundle's bounds are below launches it records itself ({} sizes; {}); nothing imported; accepted: a bundle as `wcetctl export` writes it, every bound at least every launch at its size",
                under.len(),
                under.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
            )));
        }
        Ok(!diffs.is_empty())
    }

    fn enqueue(&self, work: Work, kernels: Vec<String>, tags: Vec<Interference>) -> Result<u64> {
        const STOPPING: &str = "the daemon is stopping; accepted: retry once it has started again";
        if self.inner.stopping.load(Ordering::SeqCst) {
            return Err(ServiceError::Busy(STOPPING.into()));
        }
        let limit = self.inner.config.max_queued_jobs as u64;
        // Taken in one step, so two callers at once cannot both take the last place.
        let taken = self
            .inner
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            });
        if taken.is_err() {
            return Err(ServiceError::Busy(format!(
                "{limit} calibration jobs are already waiting; accepted: retry after a JobFinished signal (`wcetctl jobs` or Calibration1.ListJobs() shows the queue)"
            )));
        }
        let id = self.inner.next_job.fetch_add(1, Ordering::SeqCst);
        // Recorded before anyone can see the job, so a cancel cannot come before the record.
        self.inner.job_record.queued(id, work.doing(), &kernels);
        let cancel = Arc::new(AtomicBool::new(false));
        let status = JobStatus {
            state: JobState::Queued,
            progress: 0.0,
            message: "queued".into(),
            kernels,
            interference: tags,
        };
        let refused = {
            // Queued and sent under the jobs lock, where `stop_worker` sends the end marker.
            let mut jobs = self
                .inner
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if self.inner.stopping.load(Ordering::SeqCst) {
                Some(STOPPING)
            } else {
                jobs.insert(id, (status, Arc::clone(&cancel)));
                let sent = self.worker.send(Some(Job { id, work, cancel }));
                sent.is_err().then(|| {
                    // Not left listed as queued forever: the job ends here, and says why.
                    let why = "the GPU worker has stopped; restart the daemon (`systemctl restart wcetd`)";
                    if let Some((s, _)) = jobs.get_mut(&id) {
                        s.state = JobState::Failed;
                        s.message = why.into();
                    }
                    why
                })
            }
        };
        if let Some(why) = refused {
            self.inner.pending.fetch_sub(1, Ordering::SeqCst);
            self.inner.job_record.ended(id, false);
            return Err(ServiceError::Busy(why.into()));
        }
        Ok(id)
    }

    fn kernel_specs(&self, names: &[String]) -> Result<Vec<KernelSpec>> {
        let catalogue = self.catalogue();
        if names.is_empty() {
            return Ok(catalogue.iter().cloned().collect());
        }
        let mut specs: Vec<KernelSpec> = Vec::new();
        for name in names {
            self.known(name)?;
            let spec = catalogue.get(name).ok_or_else(|| {
                ServiceError::UnknownKernel(format!(
                    "kernel `{name}` was calibrated elsewhere (imported) and has nothing to run here; accepted for recalibration: {}",
                    catalogue.names().join(", ")
                ))
            })?;
            if !specs.iter().any(|s| s.name == spec.name) {
                specs.push(spec.clone());
            }
        }
        Ok(specs)
    }

    /// Every job this daemon run has accepted, by number, oldest first.
    pub fn jobs(&self) -> Vec<(u64, JobStatus)> {
        let jobs = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        jobs.iter().map(|(&id, (s, _))| (id, s.clone())).collect()
    }

    pub fn job(&self, id: u64) -> Result<JobStatus> {
        let jobs = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        jobs.get(&id)
            .map(|(s, _)| s.clone())
            .ok_or_else(|| no_such_job(id, &jobs))
    }

    pub fn cancel_job(&self, id: u64) -> Result<()> {
        let mut jobs = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (status, cancel) = jobs.get(&id).ok_or_else(|| no_such_job(id, &jobs))?;
        let status = status.clone();
        if status.state.finished() {
            return Err(ServiceError::InvalidArgs(format!(
                "job {id} has already finished ({}); accepted: a queued or running job",
                status.state.as_str()
            )));
        }
        cancel.store(true, Ordering::SeqCst);
        // A queued job is finished now, not when the worker reaches it: `GetJob` says so at once,
        // and its place in the queue is free. Decided under the jobs lock, where the worker
        // claims a job to start it ([`claim`]): a queued job is either cancelled here or started
        // there, never both.
        if status.state == JobState::Queued {
            finish_unstarted(&self.inner, &mut jobs, id);
            drop(jobs);
            self.inner.job_record.ended(id, false);
        }
        Ok(())
    }

    /// At shutdown: cancel every job and wait, up to `within`, for the GPU worker to end. A
    /// cancelled calibration stops at its next batch and keeps what it already published, so the
    /// process does not exit in the middle of a store write (which is atomic anyway: an exit
    /// there leaves a temporary file the next start removes, never a torn store). `false` when the
    /// worker did not end in time, as when a launch hangs.
    pub fn stop_worker(&self, within: std::time::Duration) -> bool {
        {
            let jobs = self
                .inner
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.inner.stopping.store(true, Ordering::SeqCst);
            for (_, cancel) in jobs.values() {
                cancel.store(true, Ordering::SeqCst);
            }
            // Behind every queued job, each of which now ends at once as cancelled; none is
            // queued after it (`enqueue` refuses under this lock once `stopping` is set).
            let _ = self.worker.send(None);
        }
        let (done, ended) = &self.inner.worker_exited;
        let exited = done.lock().unwrap_or_else(PoisonError::into_inner);
        let (exited, _) = ended
            .wait_timeout_while(exited, within, |exited| !*exited)
            .unwrap_or_else(PoisonError::into_inner);
        *exited
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
            "kernel manifests rejected at start, their kernels are not served: {}; fix them and run `wcetctl kernels reload`",
            files.join("; ")
        ));
    }
    if why.is_empty() {
        return "ok".into();
    }
    format!("degraded: {}", why.join("; "))
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
    for (file, why) in &mut rejected {
        let kept = previous
            .into_iter()
            .flat_map(Catalogue::iter)
            .filter_map(KernelSpec::manifest)
            .find(|m| m.path.display().to_string() == *file);
        // The previous version runs the module and fill files read at its load; where those
        // changed too, keeping it would time (and serve) other code under its digest.
        match kept.map(|m| (m, m.changed_on_disk())) {
            Some((m, None)) => {
                why.push_str(&format!(
                    "; the previous version of `{}` is kept until the file is fixed",
                    m.name
                ));
                manifests.push(m.clone());
            }
            Some((m, Some(changed))) => why.push_str(&format!(
                "; the previous version of `{}` is not kept either: {changed}",
                m.name
            )),
            None => {}
        }
    }
    // A name stays with the file that had it: a new file claiming it is the one refused.
    let established = |m: &manifest::Manifest| {
        previous
            .and_then(|p| p.get(&m.name))
            .and_then(KernelSpec::manifest)
            .is_some_and(|old| old.path == m.path)
    };
    manifests.sort_by_key(|m| !established(m));
    let (catalogue, taken) = Catalogue::with_manifests(manifests);
    rejected.extend(taken);
    (catalogue, rejected)
}

fn no_such_job(id: u64, jobs: &BTreeMap<u64, (JobStatus, Arc<AtomicBool>)>) -> ServiceError {
    let known: Vec<String> = jobs.keys().map(u64::to_string).collect();
    ServiceError::InvalidArgs(format!(
        "no job {id}; accepted: a job number returned by Recalibrate, as `wcetctl jobs` or Calibration1.ListJobs() lists them ({})",
        if known.is_empty() {
            "none yet".into()
        } else {
            known.join(", ")
        }
    ))
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

fn join(sizes: &[u32]) -> String {
    sizes
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Inner {
    /// The SM clock `cal` was calibrated at and the current one (0: unreadable), in MHz. Where
    /// the calibration read no clock (imported samples), the clock its fingerprint names: a
    /// stale import made under another clock policy is scaled as a measured calibration is.
    fn clocks(&self, cal: &KernelCalibration) -> (u32, u32) {
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
        (calibrated, self.current_clock_mhz.load(Ordering::SeqCst))
    }

    /// `bound_ns` of `cal` scaled to the current clock as it is served.
    fn clock_scaled(&self, cal: &KernelCalibration, bound_ns: u64) -> u64 {
        match self.clocks(cal) {
            (calibrated, current) if current > 0 && calibrated > current => {
                stretch(bound_ns, calibrated, current)
            }
            _ => bound_ns,
        }
    }

    /// `cal`'s calibrated bound at exactly `partition`, scaled to the current clock as it is
    /// served, before production floors.
    fn calibrated_at(&self, cal: &KernelCalibration, partition: u32) -> Option<u64> {
        let entry = cal.table.entry(partition)?;
        Some(self.clock_scaled(cal, entry.bound_ns))
    }
}

/// Only the worker touches the GPU, so it also reads the clock: between jobs and while idle.
fn read_clock(gpu: &mut dyn Gpu, inner: &Inner) {
    let mhz = gpu.telemetry().sm_clock_mhz.unwrap_or(0);
    inner.current_clock_mhz.store(mhz, Ordering::SeqCst);
}

fn worker_loop(
    mut gpu: Box<dyn Gpu>,
    store: Store,
    inner: Arc<Inner>,
    jobs: mpsc::Receiver<Option<Job>>,
) {
    /// Tells [`Service::stop_worker`] that the thread is done, however it ends.
    struct Exited<'a>(&'a Inner);
    impl Drop for Exited<'_> {
        fn drop(&mut self) {
            let (done, ended) = &self.0.worker_exited;
            *done
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
            ended.notify_all();
        }
    }
    let _exited = Exited(&inner);
    loop {
        let job = match jobs.recv_timeout(CLOCK_POLL) {
            Ok(Some(job)) => job,
            Ok(None) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                read_clock(gpu.as_mut(), &inner);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let Some(kernels) = claim(&inner, &job) else {
            // Cancelled before it started: finished, signalled and unrecorded already.
            continue;
        };
        inner.job_record.started(job.id, job.work.doing(), &kernels);
        monitor::recalibration_started(&inner, &kernels);
        // A bug in one job must not take the worker (and every later job) down with it.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_job(gpu.as_mut(), &store, &inner, &job)
        }));
        let (state, message) = outcome.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown".into());
            fail(
                &inner,
                format!("internal error ({what}); bounds unchanged, please report it"),
            )
        });
        inner.job_record.ended(job.id, state == JobState::Done);
        monitor::recalibration_ended(&inner, &kernels);
        inner.pending.fetch_sub(1, Ordering::SeqCst);
        set_job(&inner, job.id, |s| {
            s.state = state;
            s.message = message.clone();
            if state == JobState::Done {
                s.progress = 1.0;
            }
        });
        read_clock(gpu.as_mut(), &inner);
        tracing::info!(job = job.id, state = state.as_str(), %message, "job finished");
        let _ = inner.events.send(Event::JobFinished {
            job: job.id,
            state,
            message,
        });
    }
}

/// Take `job` from the queue to run: `Running` now, and its kernels. None when it was cancelled
/// before it started: by `CancelJob` (finished there), or by the shutdown (finished here). Under
/// the jobs lock, where `CancelJob` decides too, so each job is finished exactly once.
fn claim(inner: &Inner, job: &Job) -> Option<Vec<String>> {
    let mut jobs = inner.jobs.lock().unwrap_or_else(PoisonError::into_inner);
    let Some((status, _)) = jobs.get_mut(&job.id) else {
        return Some(Vec::new());
    };
    if status.state == JobState::Cancelled {
        return None;
    }
    if job.cancel.load(Ordering::SeqCst) {
        finish_unstarted(inner, &mut jobs, job.id);
        drop(jobs);
        inner.job_record.ended(job.id, false);
        return None;
    }
    status.state = JobState::Running;
    status.message = "measuring".into();
    Some(status.kernels.clone())
}

/// Finish queued job `id` as cancelled before it started: its state, its place in the queue,
/// the log line and `JobFinished`. The caller holds the jobs lock (`jobs`).
fn finish_unstarted(
    inner: &Inner,
    jobs: &mut BTreeMap<u64, (JobStatus, Arc<AtomicBool>)>,
    id: u64,
) {
    let message = "cancelled before it started; bounds unchanged".to_string();
    if let Some((status, _)) = jobs.get_mut(&id) {
        status.state = JobState::Cancelled;
        status.message = message.clone();
    }
    inner.pending.fetch_sub(1, Ordering::SeqCst);
    tracing::info!(job = id, state = "cancelled", %message, "job finished");
    let _ = inner.events.send(Event::JobFinished {
        job: id,
        state: JobState::Cancelled,
        message,
    });
}

fn run_job(gpu: &mut dyn Gpu, store: &Store, inner: &Inner, job: &Job) -> JobEnd {
    if job.cancel.load(Ordering::SeqCst) {
        return (
            JobState::Cancelled,
            "cancelled before it started; bounds unchanged".into(),
        );
    }
    match &job.work {
        Work::Calibrate {
            kernels,
            interference,
        } => calibrate_job(gpu, store, inner, job, kernels, interference),
        Work::Import(imported) => import(store, inner, imported),
        Work::Bundle {
            calibrations,
            verify,
        } => import_bundle(gpu, store, inner, job, calibrations, *verify),
    }
}

/// What a calibration job has published so far, and what failed: its final message.
#[derive(Default)]
struct JobReport {
    /// What earlier tags of this job published, one message each.
    published: Vec<String>,
    /// Kernels that failed alone, each with its tag and error.
    failures: Vec<String>,
}

impl JobReport {
    /// The tail of a message for a job that stops now.
    fn unchanged(&self) -> String {
        match self.published.as_slice() {
            [] => "bounds unchanged".to_string(),
            done => format!("{} before that; other bounds unchanged", done.join("; ")),
        }
    }

    fn finish(self, inner: &Inner) -> JobEnd {
        let published = self.published.join("; ");
        match (self.published.is_empty(), self.failures.is_empty()) {
            (_, true) => (JobState::Done, published),
            (true, false) => fail(
                inner,
                format!("calibrating {}; bounds unchanged", self.failures.join("; ")),
            ),
            (false, false) => fail(
                inner,
                format!(
                    "{published}; failed: {} (their bounds unchanged)",
                    self.failures.join("; ")
                ),
            ),
        }
    }
}

/// Calibrate `kernels` under each of `tags`, in that order. A kernel that fails (a wrong result,
/// a fault) fails alone: the others are still calibrated and published. A lost device or a
/// cancel ends the job, keeping what was already published.
fn calibrate_job(
    gpu: &mut dyn Gpu,
    store: &Store,
    inner: &Inner,
    job: &Job,
    kernels: &[KernelSpec],
    tags: &[Interference],
) -> JobEnd {
    let recipe = match probed_recipe(gpu, inner, job) {
        Ok(recipe) => recipe,
        Err(failed) => return failed,
    };
    let steps: Vec<(Interference, &KernelSpec)> = tags
        .iter()
        .flat_map(|&tag| kernels.iter().map(move |k| (tag, k)))
        .collect();
    let mut measured = Vec::new();
    let mut results = Vec::new();
    let mut report = JobReport::default();
    // Sustained slowdowns are the device's: every kernel's bound allows for what the probe and
    // every kernel of the job showed, so kernels are fitted when their tag is done.
    let mut evidence = recipe.slowdowns;
    for (i, &(tag, kernel)) in steps.iter().enumerate() {
        match calibrate_step(gpu, inner, job, &recipe, &steps, i) {
            Ok(m) => {
                m.add_to(&mut evidence);
                measured.push((tag, m));
            }
            Err(e) if is_cancelled(&e) => {
                return (
                    JobState::Cancelled,
                    format!("cancelled; {}", report.unchanged()),
                );
            }
            Err(e) if is_lost(&e) => {
                let failed = fail(
                    inner,
                    format!(
                        "calibrating {} ({tag}): {e}; {}",
                        kernel.name,
                        report.unchanged()
                    ),
                );
                note_lost(inner, &e);
                return failed;
            }
            Err(e) => report
                .failures
                .push(format!("{} ({tag}): {e}", kernel.name)),
        }
        // Each tag's bounds are published, all at once, as soon as its last kernel is done: on an
        // H100 the isolated suite takes under a minute and the contended one a quarter of an hour
        // (a stressed 8-SM launch takes up to 160 ms), and a first start should not serve nothing
        // for that long.
        let tag_done = steps.get(i + 1).is_none_or(|&(next, _)| next != tag);
        if !tag_done {
            continue;
        }
        let fitted = Recipe {
            slowdowns: evidence,
            ..recipe
        };
        results = fit_all(std::mem::take(&mut measured), gpu, &fitted, &mut report);
        if i + 1 < steps.len() && !results.is_empty() {
            let (state, done) = commit(store, inner, std::mem::take(&mut results), "calibrated");
            if state != JobState::Done {
                return (state, done);
            }
            tracing::info!(job = job.id, "{done}: published; the job goes on");
            report.published.push(done);
        }
    }
    if !results.is_empty() || report.published.is_empty() && report.failures.is_empty() {
        let (state, done) = commit(store, inner, results, "calibrated");
        if state != JobState::Done {
            return (state, done);
        }
        report.published.push(done);
    }
    report.finish(inner)
}

/// Fit every measured campaign with `recipe` (its slowdowns the job's); a fit that fails is the
/// job's failure for that kernel alone.
fn fit_all(
    measured: Vec<(Interference, calibrate::Measured)>,
    gpu: &mut dyn Gpu,
    recipe: &Recipe,
    report: &mut JobReport,
) -> Vec<TaggedCalibration> {
    let sizes = gpu.info().partition_sizes.clone();
    let mut results = Vec::new();
    for (tag, m) in measured {
        let name = m.campaign.kernel.clone();
        match calibrate::fit_measured(m, &sizes, recipe) {
            Ok(cal) => results.push((tag, name, cal)),
            Err(e) => report.failures.push(format!("{name} ({tag}): {e}")),
        }
    }
    results
}

/// The job's recipe with the device's fixed delays and slowdowns probed (a failure ends the job).
fn probed_recipe(
    gpu: &mut dyn Gpu,
    inner: &Inner,
    job: &Job,
) -> std::result::Result<Recipe, JobEnd> {
    match calibrate::with_device_probe(gpu, &inner.config.recipe) {
        Ok((recipe, notes)) => {
            for note in notes {
                tracing::info!(job = job.id, "{note}");
            }
            Ok(recipe)
        }
        Err(e) => {
            let failed = fail(
                inner,
                format!("probing the device's delays: {e}; bounds unchanged"),
            );
            note_lost(inner, &e);
            Err(failed)
        }
    }
}

/// Calibrate step `i` of `steps`, reporting progress and what is measured to the job's status.
fn calibrate_step(
    gpu: &mut dyn Gpu,
    inner: &Inner,
    job: &Job,
    recipe: &Recipe,
    steps: &[(Interference, &KernelSpec)],
    i: usize,
) -> std::result::Result<calibrate::Measured, calibrate::CalibrateError> {
    let (tag, kernel) = steps[i];
    let mut recipe = *recipe;
    recipe.campaign.interference = tag;
    let n = steps.len().max(1) as f64;
    let mut report = progress_reporter(inner, job);
    let mut progress = |f: f64| report((i as f64 + f) / n, f >= 1.0);
    // Says what is being measured now, for `GetJob` and the progress bar.
    let mut narrate = |request: &RunRequest| {
        set_job(inner, job.id, |s| {
            s.message = format!(
                "measuring {} at {} SMs ({tag}), step {} of {}",
                kernel.name,
                request.sms,
                i + 1,
                steps.len()
            );
        });
    };
    let mut narrated = Narrated {
        gpu,
        on_run: &mut narrate,
    };
    calibrate::measure_kernel(&mut narrated, kernel, &recipe, &job.cancel, &mut progress)
}

/// The guarantee of an untagged bound (`GetBound`'s, the larger of the isolated and contended
/// ones): the scheduler has not said which condition the kernel runs under, so it is the weaker
/// of the calibrations' guarantees, at every size, as admission takes it. Stating the guarantee
/// of whichever bound is larger at one size claimed 1e-9 for a bound that an isolated launch,
/// heavy-tailed, exceeds with 1e-4.
fn weakest_guarantee(snap: &Calibration, kernel: &str) -> (f64, crate::model::ExceedanceBasis) {
    [Interference::Isolated, Interference::Contended]
        .into_iter()
        .filter_map(|t| snap.tables(t).get(kernel))
        .map(|c| c.table.stated_exceedance())
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, crate::model::ExceedanceBasis::TailModel))
}

/// How a bundle import ends when checking or recalibrating (`what`) did not complete: cancelled,
/// or failed with why; nothing of the bundle is imported either way.
fn nothing_imported(inner: &Inner, e: &calibrate::CalibrateError, what: &str) -> JobEnd {
    if is_cancelled(e) {
        return (JobState::Cancelled, "cancelled; nothing imported".into());
    }
    note_lost(inner, e);
    fail(inner, format!("{what}: {e}; nothing imported"))
}

fn is_cancelled(e: &calibrate::CalibrateError) -> bool {
    matches!(
        e,
        calibrate::CalibrateError::Measure(crate::measure::MeasureError::Cancelled)
    )
}

fn is_lost(e: &calibrate::CalibrateError) -> bool {
    matches!(
        e,
        calibrate::CalibrateError::Measure(crate::measure::MeasureError::Gpu(GpuError::Lost(_)))
    )
}

/// Bounds from imported samples, published as a calibration's are.
fn import(store: &Store, inner: &Inner, imported: &calibrate::Imported) -> JobEnd {
    // Checked again here: a calibration may have been published since the import was queued.
    let kernel = &imported.kernel;
    if let Some(why) = measured_here(inner, kernel, imported.interference, &imported.code) {
        return (JobState::Failed, format!("importing {kernel}: {why}"));
    }
    match calibrate::from_samples(imported, &inner.device, &inner.config.recipe) {
        Ok(cal) => commit(
            store,
            inner,
            vec![(imported.interference, imported.kernel.clone(), cal)],
            "imported",
        ),
        Err(e) => fail(
            inner,
            format!("importing {}: {e}; bounds unchanged", imported.kernel),
        ),
    }
}

/// Why samples imported for `kernel` under `tag`, of the code whose digest is `code`, must not
/// be published: this daemon measured the kernel on this device, for the code the catalogue has
/// now, or for a manifest that is gone for the moment (its calibration waits in the store for
/// it); or the kernel's code changed since the samples were queued. Rule 1 keeps a bound above
/// every launch seen at its size, and imported bounds would replace those launches with ones
/// timed elsewhere. None when the import may go ahead (no calibration, an imported one, or one
/// of another device or code).
fn measured_here(inner: &Inner, kernel: &str, tag: Interference, code: &str) -> Option<String> {
    let catalogue = Arc::clone(
        &inner
            .catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let spec = catalogue.get(kernel);
    let now = spec.map(KernelSpec::code_digest).unwrap_or_default();
    if now != code {
        return Some(format!(
            "the code of `{kernel}` changed since the samples were queued (a reload in between), so they are not of the code the catalogue has now; accepted: samples of the current code, imported again"
        ));
    }
    let snap = Arc::clone(
        &inner
            .snapshot
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let cal = snap.tables(tag).get(kernel)?;
    let own = matches!(cal.origin, Origin::Builtin | Origin::Manifest);
    // As `code_changed` takes it: a calibration from before code digests were recorded is of
    // the code unless the name is a manifest's now.
    let same_code =
        cal.code == now || (cal.code.is_empty() && spec.is_some_and(|k| k.manifest().is_none()));
    let waiting = spec.is_none() && cal.origin == Origin::Manifest;
    let this_device = cal.environment().fingerprint == inner.device.fingerprint;
    (own && this_device && (same_code || waiting)).then(|| format!(
        "`{kernel}` has {tag} bounds this daemon measured on this device (calibration {}{}), and imported samples would replace launches timed here with ones timed elsewhere; accepted: samples of a kernel with no current {tag} calibration measured here. Recalibrate it to refresh them (`wcetctl recalibrate {kernel}`), or import the samples under another name",
        cal.id,
        if waiting { ", kept for its manifest, which is not loaded now" } else { ", for the code it has now" }
    ))
}

/// Why a bundle's calibrations, as (kernel, code digest), are not of the code this daemon loads:
/// a kernel whose code differs, or that only a manifest not loaded now had (its measured
/// calibration waits in the store for it). None when every one is of the current code, or of a
/// kernel known only from imports (no code).
fn bundle_of_other_code<'a>(
    catalogue: &Catalogue,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
) -> Option<String> {
    let mut names: Vec<&str> = entries
        .filter(|&(kernel, code)| {
            !code.is_empty()
                && catalogue
                    .get(kernel)
                    .is_none_or(|spec| spec.code_digest() != code)
        })
        .map(|(kernel, _)| kernel)
        .collect();
    names.sort_unstable();
    names.dedup();
    (!names.is_empty()).then(|| format!(
        "the bundle holds bounds of other code than this daemon loads under the names {} (changed, or a manifest not loaded now); accepted: a bundle exported by a daemon with the same manifests, modules and fill files (`wcetctl kernels reload` after updating them here)",
        names.join(", ")
    ))
}

/// Publish a bundle's calibrations, each made no tighter than this daemon's own fit of the
/// launches it ships. When they are this device's configuration each is then checked on this
/// card, and only then published as this device's: a kernel with a launch above its bound is
/// recalibrated here instead, never below a launch the check timed. A refit, check or
/// recalibration that fails imports nothing of the bundle.
fn import_bundle(
    gpu: &mut dyn Gpu,
    store: &Store,
    inner: &Inner,
    job: &Job,
    calibrations: &[TaggedCalibration],
    verify: bool,
) -> JobEnd {
    let catalogue = Arc::clone(
        &inner
            .catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let entries = calibrations
        .iter()
        .map(|(_, name, cal)| (name.as_str(), cal.code.as_str()));
    if let Some(why) = bundle_of_other_code(&catalogue, entries) {
        return (JobState::Failed, format!("{why}; nothing imported"));
    }
    let (own, refitted) = match refit_bundle(inner, calibrations) {
        Ok(refit) => refit,
        Err(failed) => return failed,
    };
    let calibrations = own.as_slice();
    // What the refit changed, for the calibrations published as they came (not those
    // recalibrated here, whose refitted tables are thrown away).
    let refit_notes = |publish: &[TaggedCalibration]| -> Vec<String> {
        refitted
            .iter()
            .filter(|(tag, name, _)| publish.iter().any(|p| p.0 == *tag && p.1 == *name))
            .map(|(tag, name, note)| format!("{name} ({tag}): {note}"))
            .collect()
    };
    if !verify {
        let notes = refit_notes(calibrations);
        let (state, published) = commit(store, inner, calibrations.to_vec(), "imported");
        if state != JobState::Done || notes.is_empty() {
            return (state, published);
        }
        return (state, format!("{published}; {}", notes.join("; ")));
    }
    let mut report = progress_reporter(inner, job);
    let checked = match check_bundle(gpu, inner, job, calibrations, &mut report) {
        Ok(checked) => checked,
        Err(failed) => return failed,
    };
    let BundleCheck {
        mut notes,
        mut publish,
        redo,
    } = checked;
    notes.splice(0..0, refit_notes(&publish));
    if !redo.is_empty() {
        match recalibrate_failed(gpu, inner, job, redo, &mut notes, &mut report) {
            Ok(recalibrated) => publish.extend(recalibrated),
            Err(failed) => return failed,
        }
    }
    let configured = inner.config.recipe.method_config.exceedance;
    for (tag, name, cal) in &publish {
        let (stated, _) = cal.table.stated_exceedance();
        if crate::model::weaker_than(stated, configured) {
            notes.push(format!(
                "{name} ({tag}): stated at {stated:e} per launch, weaker than the configured {configured:e} (admission refuses it unless accepted)"
            ));
        }
    }
    let (state, published) = commit(store, inner, publish, "imported");
    if state != JobState::Done {
        return (state, published);
    }
    (JobState::Done, format!("{published}; {}", notes.join("; ")))
}

/// Every calibration of a bundle made no tighter than its refit here
/// ([`calibrate::no_tighter_than_own_fit`]), and (tag, kernel, what changed) where it changed one.
#[allow(clippy::type_complexity)]
fn refit_bundle(
    inner: &Inner,
    calibrations: &[TaggedCalibration],
) -> std::result::Result<(Vec<TaggedCalibration>, Vec<(Interference, String, String)>), JobEnd> {
    let mut own = Vec::with_capacity(calibrations.len());
    let mut changed = Vec::new();
    for (tag, name, cal) in calibrations {
        let (cal, note) =
            calibrate::no_tighter_than_own_fit(cal, &inner.device, &inner.config.recipe)
                .map_err(|e| nothing_imported(inner, &e, &format!("refitting {name} ({tag})")))?;
        changed.extend(note.map(|n| (*tag, name.clone(), n)));
        own.push((*tag, name.clone(), cal));
    }
    Ok((own, changed))
}

/// A bundle's calibrations after the arrival check: those to publish as they came, and the
/// kernels to recalibrate here with the launches the check timed (size, longest, bound).
struct BundleCheck {
    notes: Vec<String>,
    publish: Vec<TaggedCalibration>,
    redo: Vec<FailedCheck>,
}

/// The share of a bundle import's progress the arrival check takes; recalibrations, if any,
/// take the rest.
const BUNDLE_CHECK_SHARE: f64 = 0.3;

/// Run every kernel of the bundle this host knows at every size of its table.
fn check_bundle(
    gpu: &mut dyn Gpu,
    inner: &Inner,
    job: &Job,
    calibrations: &[TaggedCalibration],
    report: &mut impl FnMut(f64, bool),
) -> std::result::Result<BundleCheck, JobEnd> {
    let catalogue = inner
        .catalogue
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut out = BundleCheck {
        notes: Vec::new(),
        publish: Vec::new(),
        redo: Vec::new(),
    };
    for (i, (tag, name, cal)) in calibrations.iter().enumerate() {
        report(
            BUNDLE_CHECK_SHARE * i as f64 / calibrations.len() as f64,
            true,
        );
        let Some(kernel) = catalogue.get(name) else {
            out.notes.push(format!(
                "{name} ({tag}): not checked, nothing to run here: served stale (the exporting card's)"
            ));
            out.publish.push((*tag, name.clone(), cal.clone()));
            continue;
        };
        set_job(inner, job.id, |s| {
            s.message = format!(
                "checking {name} ({tag}) on this card, kernel {} of {}",
                i + 1,
                calibrations.len()
            );
        });
        let checked = calibrate::check_on_arrival(gpu, kernel, &cal.table, *tag, &job.cancel)
            .map_err(|e| {
                nothing_imported(inner, &e, &format!("checking {name} ({tag}) on this card"))
            })?;
        let over: Vec<_> = checked.iter().filter(|(_, t, b)| t > b).collect();
        match over.first() {
            None => {
                // Same configuration and held here: served as this device's. An older exporter
                // recorded no code; the check ran this catalogue's, so that is what the bounds
                // are of now. A recorded digest stays, and other code than ours is served stale.
                let mut cal = cal.clone();
                cal.campaign.environment.fingerprint = inner.device.fingerprint.clone();
                if cal.code.is_empty() {
                    cal.code = kernel.code_digest();
                }
                out.notes.push(format!("{name} ({tag}): held on this card"));
                out.publish.push((*tag, name.clone(), cal));
            }
            Some((m, t, b)) => {
                out.notes.push(format!(
                    "{name} ({tag}): {} sizes above their bound on this card (at {m} SMs {t} ns > {b} ns): recalibrated",
                    over.len()
                ));
                out.redo.push((*tag, kernel.clone(), checked));
            }
        }
    }
    Ok(out)
}

/// Recalibrate the kernels that failed the arrival check, as a job's kernels are (with the
/// device's delays and slowdowns probed), each bound at least the longest launch the check timed.
fn recalibrate_failed(
    gpu: &mut dyn Gpu,
    inner: &Inner,
    job: &Job,
    redo: Vec<FailedCheck>,
    notes: &mut Vec<String>,
    report: &mut impl FnMut(f64, bool),
) -> std::result::Result<Vec<TaggedCalibration>, JobEnd> {
    let probed = probed_recipe(gpu, inner, job)?;
    let n = redo.len();
    let mut recalibrated = Vec::new();
    for (i, (tag, kernel, checked)) in redo.into_iter().enumerate() {
        let mut recipe = probed;
        recipe.campaign.interference = tag;
        set_job(inner, job.id, |s| {
            s.message = format!(
                "recalibrating {} ({tag}) on this card, kernel {} of {n}",
                kernel.name,
                i + 1
            );
        });
        let mut progress = |f: f64| {
            let share = (i as f64 + f) / n as f64;
            report(
                BUNDLE_CHECK_SHARE + (1.0 - BUNDLE_CHECK_SHARE) * share,
                f >= 1.0,
            )
        };
        let mut cal =
            calibrate::calibrate_kernel(gpu, &kernel, &recipe, &job.cancel, &mut progress)
                .map_err(|e| {
                    nothing_imported(inner, &e, &format!("recalibrating {}", kernel.name))
                })?;
        for (m, t, _) in checked {
            if cal.table.raise_to_launch(m, t) {
                let why = format!(
                    "bound at {m} SMs raised to a launch of {t} ns timed by the arrival check of an imported bundle"
                );
                notes.push(format!("{} ({tag}): {why}", kernel.name));
                cal.table.notes.push(why);
            }
        }
        recalibrated.push((tag, kernel.name.clone(), cal));
    }
    Ok(recalibrated)
}

/// A job's progress (0 to 1) for `GetJob` and the `JobProgress` signal: sent when it moved by 1%
/// since the last one sent, or when `force`d (a step completed).
fn progress_reporter<'a>(inner: &'a Inner, job: &'a Job) -> impl FnMut(f64, bool) + 'a {
    let mut last_sent = -1.0;
    move |p: f64, force: bool| {
        if p - last_sent >= 0.01 || force {
            last_sent = p;
            set_job(inner, job.id, |s| s.progress = p);
            let _ = inner.events.send(Event::JobProgress {
                job: job.id,
                progress: p,
            });
        }
    }
}

/// The worker's GPU, telling `on_run` what each batch measures before it runs.
struct Narrated<'a> {
    gpu: &'a mut dyn Gpu,
    on_run: &'a mut (dyn FnMut(&RunRequest) + Send),
}

impl Gpu for Narrated<'_> {
    fn info(&self) -> &DeviceInfo {
        self.gpu.info()
    }

    fn run(
        &mut self,
        kernel: &KernelSpec,
        request: &RunRequest,
    ) -> std::result::Result<Batch, GpuError> {
        (self.on_run)(request);
        self.gpu.run(kernel, request)
    }

    fn telemetry(&mut self) -> Telemetry {
        self.gpu.telemetry()
    }

    fn delay_probe(&mut self, sms: u32, launches: u32) -> std::result::Result<Vec<u64>, GpuError> {
        self.gpu.delay_probe(sms, launches)
    }

    fn placement(&self) -> &[PlacementReport] {
        self.gpu.placement()
    }

    fn check_partition(&self, sms: u32) -> std::result::Result<(), GpuError> {
        self.gpu.check_partition(sms)
    }
}

/// Publish the new bounds of a job: store first (so a crash after this leaves them on disk), then
/// the snapshot, then the signal.
fn commit(store: &Store, inner: &Inner, results: Vec<TaggedCalibration>, verb: &str) -> JobEnd {
    let mut names: Vec<String> = Vec::new();
    for (_, name, _) in &results {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    let mut next = (**inner
        .snapshot
        .read()
        .unwrap_or_else(PoisonError::into_inner))
    .clone();
    next.device = inner.device.clone();
    let mut tags = Vec::new();
    let mut inserted = Vec::new();
    for (tag, name, cal) in results {
        next.tables_mut(tag).insert(name.clone(), cal);
        inserted.push((tag, name));
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    if let Err(e) = store.save(&next) {
        return fail(
            inner,
            format!("{e}; new bounds not published, old bounds kept"),
        );
    }
    // On disk now: their launch times can rest in the spill file, as loaded ones do.
    for (tag, name) in &inserted {
        if let Some(cal) = next.tables_mut(*tag).get_mut(name) {
            store.spill_times(cal);
        }
    }
    monitor::publish(inner, Arc::new(next), &inserted);
    set_health(inner, "ok".into());
    let _ = inner.events.send(Event::BoundsChanged {
        kernels: names.clone(),
    });
    let tags: Vec<String> = tags.iter().map(ToString::to_string).collect();
    (
        JobState::Done,
        format!("{verb} {} ({})", names.join(", "), tags.join(", ")),
    )
}

/// Record a lost device (the watch wakes the daemon's main task, which exits).
fn note_lost(inner: &Inner, error: &calibrate::CalibrateError) {
    use crate::measure::MeasureError;
    if let calibrate::CalibrateError::Measure(MeasureError::Gpu(GpuError::Lost(why))) = error {
        set_health(inner, format!("failed: device lost ({why})"));
        inner.lost.send_replace(Some(why.clone()));
    }
}

fn fail(inner: &Inner, message: String) -> JobEnd {
    tracing::error!(%message, "calibration job failed");
    set_health(inner, format!("degraded: {message}"));
    (JobState::Failed, message)
}

fn set_health(inner: &Inner, health: String) {
    let mut current = inner.health.write().unwrap_or_else(PoisonError::into_inner);
    if *current != health {
        *current = health.clone();
        let _ = inner.events.send(Event::HealthChanged { health });
    }
}

fn set_job(inner: &Inner, id: u64, update: impl FnOnce(&mut JobStatus)) {
    if let Some((status, _)) = inner
        .jobs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(&id)
    {
        update(status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};

    #[test]
    fn partitions_the_placement_probe_refused_make_health_degraded_and_say_which() {
        let mut device = SimGpu::new(DeviceProfile::h200(), SimOptions::default())
            .info()
            .clone();
        assert_eq!(initial_health(&device, None, &[], &[], &[]), "ok");
        device.unusable_sizes = vec![(96, "SM 3 ran blocks of both".into())];
        let h = initial_health(&device, None, &[], &[], &[]);
        assert!(h.starts_with("degraded: partitions refused"), "{h}");
        assert!(h.contains("96 SMs (SM 3 ran blocks of both)"), "{h}");
    }

    /// Short campaigns, no delay probe and no initial job.
    fn short_campaigns() -> ServiceConfig {
        let mut config = ServiceConfig::default();
        config.recipe.campaign.launches = 40;
        config.recipe.campaign.screen_launches = 200;
        config.recipe.campaign.heavy_tail_launches = 400;
        config.recipe.delay_probe_launches = 0;
        config.initial_calibration = false;
        config
    }

    /// A service with [`short_campaigns`] on the simulated H200.
    fn short_campaign_service(state: &std::path::Path) -> Service {
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        Service::start(
            Box::new(gpu),
            Store::open(state).unwrap(),
            short_campaigns(),
        )
        .0
    }

    /// Calibrate srad in `state` as [`srad_calibrated`] does, stop, and `edit` the stored file as
    /// JSON: a calibration as an earlier run (at another clock, of other code) left it.
    fn srad_calibrated_then_edited(
        state: &std::path::Path,
        edit: impl FnOnce(&mut serde_json::Value),
    ) {
        let calibrated = srad_calibrated(state);
        let path = Store::open(state)
            .unwrap()
            .path_for(&calibrated.device().fingerprint);
        drop(calibrated);
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&path, v.to_string()).unwrap();
    }

    /// [`short_campaign_service`] with srad calibrated, isolated and contended.
    fn srad_calibrated(state: &std::path::Path) -> Service {
        let service = short_campaign_service(state);
        let mut events = service.subscribe();
        let job = service.recalibrate(&["srad".to_string()]).unwrap();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        service
    }

    /// Isolated bounds are published when the isolated part of a job is done, before the
    /// contended part runs: two `BoundsChanged`, the first naming isolated bounds alone, then
    /// `JobFinished`.
    #[test]
    fn each_interference_is_published_as_soon_as_it_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        let service = short_campaign_service(dir.path());
        let mut events = service.subscribe();
        let job = service.recalibrate(&["srad".to_string()]).unwrap();
        let mut seen = Vec::new();
        loop {
            match events.blocking_recv().unwrap() {
                Event::BoundsChanged { .. } => {
                    let tags = [Interference::Isolated, Interference::Contended]
                        .map(|tag| service.bound_info("srad", 64, Some(tag)).is_ok());
                    seen.push(format!("bounds {tags:?}"));
                }
                Event::JobFinished {
                    job: j,
                    state,
                    message,
                } if j == job => {
                    assert_eq!(state, JobState::Done, "{message}");
                    assert_eq!(
                        message,
                        "calibrated srad (isolated); calibrated srad (contended)"
                    );
                    break;
                }
                _ => {}
            }
        }
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[1], "bounds [true, true]");
        // Whether the contended bound already exists when the first signal is handled depends on
        // how fast the worker is; that the isolated one does, does not.
        assert!(seen[0].starts_with("bounds [true,"), "{seen:?}");
    }

    /// An untagged bound is stated at the weaker of its calibrations' guarantees, at every size:
    /// a heavy-tailed isolated calibration (1e-4) under a larger contended bound (1e-9) made
    /// `GetBoundInfo` claim 1e-9 where admission, rightly, said 1e-4.
    #[test]
    fn an_untagged_bound_states_the_weaker_guarantee_of_its_calibrations() {
        let dir = tempfile::tempdir().unwrap();
        let service = short_campaign_service(dir.path());
        let sizes = service.device().partition_sizes.clone();
        let mut seed = 12345u64;
        let mut uniform = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let mut import = |tag, slower: f64, heavy: bool| {
            let mut samples = Vec::new();
            for &m in &sizes {
                let base = 1e7 / f64::from(m) + 20_000.0;
                for i in 0..500 {
                    let mut t = base * slower * (1.0 + 0.005 * uniform());
                    if heavy && i % 50 == 0 {
                        t += base * 0.05 * uniform().powf(-1.0 / 1.5);
                    }
                    samples.push((m, t as u64));
                }
            }
            let options = ImportOptions {
                geometry: None,
                interference: tag,
                source: "test".into(),
            };
            let mut events = service.subscribe();
            let job = service.import_samples("lab.k", &samples, options).unwrap();
            while !service.job(job).unwrap().state.finished() {
                let _ = events.blocking_recv();
            }
            assert_eq!(service.job(job).unwrap().state, JobState::Done);
        };
        import(Interference::Isolated, 1.0, true);
        import(Interference::Contended, 10.0, false);
        let stated = |tag| {
            service
                .bound_info("lab.k", 64, tag)
                .unwrap()
                .guarantee
                .exceedance
        };
        let (iso, cont) = (
            stated(Some(Interference::Isolated)),
            stated(Some(Interference::Contended)),
        );
        assert!(
            iso > cont,
            "the test needs a weaker isolated guarantee: {iso:e}, {cont:e}"
        );
        let bound = |tag| service.bound("lab.k", 64, Some(tag)).unwrap();
        assert!(
            bound(Interference::Contended) > bound(Interference::Isolated),
            "the test needs the contended bound to be the larger"
        );
        for &m in &sizes {
            let info = service.bound_info("lab.k", m, None).unwrap();
            assert_eq!(info.guarantee.exceedance, iso, "{m} SMs");
        }
        let info = service.bound_info("lab.k", 64, None).unwrap();
        assert!(
            info.notes
                .iter()
                .any(|n| n.contains("the other interference's guarantee")),
            "{:?}",
            info.notes
        );
    }

    /// A time reported without a tag (filed as isolated) above the contended bound holds the
    /// contended bound up too: contended launches are never faster than isolated ones, and the
    /// scheduler did not say which condition it ran under.
    #[test]
    fn an_untagged_time_above_the_contended_bound_raises_it() {
        let dir = tempfile::tempdir().unwrap();
        let service = srad_calibrated(dir.path());
        untagged_time_raises_every_tag(&service);
    }

    /// A calibration file whose bounds are below launches it records was not written by this
    /// daemon: it is moved aside whole, nothing of it is served, and `Health` says so.
    #[test]
    fn a_calibration_file_below_its_own_launches_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let calibrated = srad_calibrated(dir.path());
        let path = Store::open(dir.path())
            .unwrap()
            .path_for(&calibrated.device().fingerprint);
        drop(calibrated);
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for e in v["kernels"]["srad"]["table"]["entries"]
            .as_array_mut()
            .unwrap()
        {
            e["bound_ns"] = 1000.into();
        }
        std::fs::write(&path, v.to_string()).unwrap();
        let config = ServiceConfig {
            initial_calibration: false,
            ..ServiceConfig::default()
        };
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
        for tag in [
            None,
            Some(Interference::Isolated),
            Some(Interference::Contended),
        ] {
            let served = service.bound("srad", 64, tag);
            assert!(
                matches!(served, Err(ServiceError::NotCalibrated(_))),
                "{tag:?}: {served:?}"
            );
        }
        let health = service.health();
        assert!(
            health.starts_with("degraded: damaged files set aside at start")
                && health.contains("srad (isolated) at 8 SMs: bound 1000 ns below a launch"),
            "{health}"
        );
        assert!(!path.exists());
    }

    /// The untagged bound is the larger of the tags' bounds as served, clock scaling included:
    /// a contended calibration made at a lower clock is stretched less, so the larger one before
    /// scaling need not be the larger one after.
    #[test]
    fn the_untagged_bound_is_the_larger_after_clock_scaling() {
        let dir = tempfile::tempdir().unwrap();
        // As if the contended campaign had run while the card was held at 1500 MHz.
        srad_calibrated_then_edited(dir.path(), |v| {
            v["contended"]["srad"]["campaign"]["environment"]["sm_clock_mhz_max"] = 1500.into();
        });
        let config = ServiceConfig {
            initial_calibration: false,
            ..ServiceConfig::default()
        };
        let slow = SimOptions {
            clock_mhz_override: Some(1000),
            ..SimOptions::default()
        };
        let gpu = SimGpu::new(DeviceProfile::h200(), slow);
        let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
        assert_eq!(service.current_clock_mhz(), Some(1000), "read at start");
        for &m in &service.device().partition_sizes {
            let untagged = service.bound("srad", m, None).unwrap();
            for tag in [Interference::Isolated, Interference::Contended] {
                let tagged = service.bound("srad", m, Some(tag)).unwrap();
                assert!(
                    untagged >= tagged,
                    "{m} SMs: untagged {untagged} < {tag} {tagged}"
                );
            }
        }
    }

    /// A time below the bound is saved before it is answered only where the next calibration
    /// stands on it: bounds that are current wait for the periodic save, stale ones (which a
    /// recalibration will replace) do not; a time that raises no floor never waits.
    #[test]
    fn a_floor_under_bounds_due_for_recalibration_is_saved_before_it_is_answered() {
        let current = tempfile::tempdir().unwrap();
        let service = srad_calibrated(current.path());
        let bound = service.bound("srad", 32, None).unwrap();
        let outcome = service.report("srad", 32, None, &[bound / 2]).unwrap();
        assert!(outcome.save_generation.is_none(), "current bounds");
        let journalled = outcome.journal_seq.expect("journalled instead");
        let outcome = service.report("srad", 32, None, &[bound / 3]).unwrap();
        assert!(
            outcome.journal_seq.is_none_or(|s| s == journalled),
            "no floor raised: it waits at most for the floor above it on its way to disk"
        );
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime
            .block_on(service.floors_journalled(journalled, std::time::Duration::from_secs(10)))
            .unwrap();
        let outcome = service.report("srad", 32, None, &[bound / 4]).unwrap();
        assert_eq!((outcome.save_generation, outcome.journal_seq), (None, None));
        drop(service);

        let stale = tempfile::tempdir().unwrap();
        srad_calibrated_then_edited(stale.path(), |v| {
            v["kernels"]["srad"]["code"] = "other code".into();
        });
        let config = ServiceConfig {
            initial_calibration: false,
            ..ServiceConfig::default()
        };
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let service = Service::start(Box::new(gpu), Store::open(stale.path()).unwrap(), config).0;
        assert!(service.bound_info("srad", 32, None).unwrap().stale);
        let bound = service.bound("srad", 32, None).unwrap();
        let outcome = service.report("srad", 32, None, &[bound / 2]).unwrap();
        let raised = outcome.save_generation.expect("stale bounds");
        let outcome = service.report("srad", 32, None, &[bound / 3]).unwrap();
        assert_eq!(
            outcome.save_generation, None,
            "no floor raised: it waits for no save, only for the floor above it on its way"
        );
        runtime
            .block_on(service.observations_saved(raised, std::time::Duration::from_secs(10)))
            .unwrap();
        let outcome = service.report("srad", 32, None, &[bound / 4]).unwrap();
        assert_eq!(
            (outcome.save_generation, outcome.journal_seq),
            (None, None),
            "nothing on its way"
        );
    }

    /// A floor raised after the save at shutdown (a report still in flight while the daemon
    /// stops) is journalled all the same, and the next start reads it. A journal that cannot be
    /// written (here a directory stands in its place) costs a save instead, not an error.
    #[test]
    fn floors_are_journalled_after_the_last_save_and_a_broken_journal_costs_a_save() {
        let wait = std::time::Duration::from_secs(10);
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let service = srad_calibrated(dir.path());
        let file = crate::observe::ObservationFile::new(dir.path(), &service.device().fingerprint);
        let bound = service.bound("srad", 32, None).unwrap();
        service.save_observations();
        let outcome = service.report("srad", 32, None, &[bound / 2]).unwrap();
        let seq = outcome
            .journal_seq
            .expect("a floor below the bound is journalled");
        runtime
            .block_on(service.floors_journalled(seq, wait))
            .unwrap();
        drop(service);
        let floor = |obs: &crate::observe::ReportedTimes| {
            obs.kernel("srad").unwrap()[&(32, Interference::Isolated)].floor_ns
        };
        assert_eq!(floor(&file.load().0), bound / 2);

        let journal = file.journal_paths().0;
        std::fs::remove_file(&journal).unwrap();
        std::fs::create_dir(&journal).unwrap();
        let config = ServiceConfig {
            initial_calibration: false,
            ..short_campaigns()
        };
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
        let outcome = service.report("srad", 32, None, &[bound * 2 / 3]).unwrap();
        let seq = outcome.journal_seq.expect("journalled");
        runtime
            .block_on(service.floors_journalled(seq, wait))
            .expect("saved instead");
        drop(service);
        assert_eq!(floor(&file.load().0), bound * 2 / 3);
    }

    /// A service with [`short_campaigns`] whose state has `kernel` calibrated under both tags,
    /// paced (500 µs a launch) so that a job is still measuring when a test reports times.
    fn calibrated_then_paced(state: &std::path::Path, kernel: &str) -> Service {
        {
            let first = short_campaign_service(state);
            let mut events = first.subscribe();
            let job = first.recalibrate(&[kernel.to_string()]).unwrap();
            while !first.job(job).unwrap().state.finished() {
                let _ = events.blocking_recv();
            }
        }
        let paced = SimOptions {
            pace_us_per_launch: 500,
            ..SimOptions::default()
        };
        let gpu = SimGpu::new(DeviceProfile::h200(), paced);
        Service::start(
            Box::new(gpu),
            Store::open(state).unwrap(),
            short_campaigns(),
        )
        .0
    }

    /// An untagged time carried in by a recalibration of both tags is filed under the
    /// calibration an untagged report is judged against (here the contended one, the larger), so
    /// the next untagged report keeps its epoch: the overrun stays counted and listed. (A black-box
    /// run saw it filed under the isolated one and dropped by the next report.)
    #[test]
    fn a_carried_untagged_time_stays_in_the_epoch_untagged_reports_are_judged_in() {
        const K: &str = "backprop";
        let dir = tempfile::tempdir().unwrap();
        let service = calibrated_then_paced(dir.path(), K);
        let bound = service.bound(K, 64, None).unwrap();
        let mut events = service.subscribe();
        let job = service.recalibrate(&[K.to_string()]).unwrap();
        while !matches!(events.blocking_recv(), Ok(Event::JobProgress { job: j, .. }) if j == job) {
        }
        let slow = 3 * bound;
        assert_eq!(service.report(K, 64, None, &[slow]).unwrap().overruns, 1);
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        assert_eq!(service.job(job).unwrap().state, JobState::Done);
        let carried = service.observed(K, 64, None).unwrap();
        assert_eq!((carried.overruns, carried.carried), (1, 1));
        assert_eq!(carried.overruns_total, 1);
        assert_eq!(
            service.report(K, 64, None, &[bound / 2]).unwrap().overruns,
            0
        );
        let after = service.observed(K, 64, None).unwrap();
        assert_eq!((after.count, after.overruns, after.carried), (2, 1, 1));
        assert_eq!(after.calibration, carried.calibration);
        assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
    }

    /// A time reported while a recalibration runs is filed in the epoch of the bound it was
    /// judged against, which the publication ends. Above the bound that recalibration then
    /// publishes, it is judged again and carried into the new epoch: the kernel stays among the
    /// overrun kernels (it left them at the publication before) and `GetObserved` counts it. An
    /// untagged time is judged as `GetBound` serves, against the larger of the two tags' bounds:
    /// one between a new isolated bound and the contended bound is not carried.
    #[test]
    fn a_time_reported_during_a_recalibration_is_judged_against_what_it_publishes() {
        // Contended launches of backprop are slower than isolated ones: its contended bounds
        // are the larger, which untagged times are judged against.
        const K: &str = "backprop";
        let dir = tempfile::tempdir().unwrap();
        let service = calibrated_then_paced(dir.path(), K);
        let isolated = |m| service.bound_info(K, m, Some(Interference::Isolated));
        let before = isolated(32).unwrap();
        let contended64 = service.bound(K, 64, Some(Interference::Contended)).unwrap();
        let mut events = service.subscribe();
        let job = service
            .recalibrate_with(&[K.to_string()], &[Interference::Isolated])
            .unwrap();
        while !matches!(events.blocking_recv(), Ok(Event::JobProgress { job: j, .. }) if j == job) {
        }
        let slow = 3 * before.entry.bound_ns;
        let tagged = service
            .report(K, 32, Some(Interference::Isolated), &[slow])
            .unwrap();
        assert_eq!(tagged.overruns, 1);
        // At a larger size, whose floor does not hold up the bound at 32 SMs.
        let below_contended = contended64 - 1;
        let untagged = service.report(K, 64, None, &[below_contended]).unwrap();
        assert_eq!(untagged.overruns, 0);
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        assert_eq!(service.job(job).unwrap().state, JobState::Done);
        let after = isolated(32).unwrap();
        assert_ne!(after.calibration_id, before.calibration_id, "published");
        assert_eq!(after.entry.bound_ns, slow, "held up by the floor");
        assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
        let at32 = service
            .observed(K, 32, Some(Interference::Isolated))
            .unwrap();
        assert_eq!((at32.count, at32.overruns, at32.carried), (1, 1, 1));
        assert_eq!(
            (at32.calibration, at32.max_ns),
            (after.calibration_id, slow)
        );
        assert_eq!(at32.overruns_total, 1, "counted once");
        // Above the new isolated bound (which its floor holds up), not above the contended one
        // GetBound serves: not carried.
        let isolated64 = isolated(64).unwrap();
        assert!(
            isolated64
                .observed
                .is_some_and(|f| f.raised && f.floor_ns == below_contended),
            "{isolated64:?}"
        );
        let at64 = service.observed(K, 64, None).unwrap();
        assert_eq!((at64.overruns, at64.carried), (0, 0));
    }

    /// Untagged, a bound answers for both conditions: it is stale when either calibration is,
    /// even where the current one's bound is the larger and is the one served.
    #[test]
    fn the_untagged_bound_is_stale_when_either_calibration_is() {
        let dir = tempfile::tempdir().unwrap();
        // The isolated calibration timed other code than the catalogue has now.
        srad_calibrated_then_edited(dir.path(), |v| {
            v["kernels"]["srad"]["code"] = "other code".into();
        });
        let config = ServiceConfig {
            initial_calibration: false,
            ..ServiceConfig::default()
        };
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
        let m = service.device().partition_sizes[0];
        let isolated = service
            .bound_info("srad", m, Some(Interference::Isolated))
            .unwrap();
        let contended = service
            .bound_info("srad", m, Some(Interference::Contended))
            .unwrap();
        assert!(isolated.stale && !contended.stale);
        assert!(
            contended.entry.bound_ns > isolated.entry.bound_ns,
            "contended is served"
        );
        let untagged = service.bound_info("srad", m, None).unwrap();
        assert_eq!(untagged.interference, Interference::Contended);
        assert!(untagged.stale, "{:?}", untagged.notes);
        assert!(untagged
            .notes
            .iter()
            .any(|n| n.contains("the isolated calibration")));
    }

    /// Health names each stale kernel with the command that makes it current: a kernel known
    /// only from imported samples has nothing to run here, so it is not put in a recalibrate
    /// command (which would refuse the whole list).
    #[test]
    fn health_advises_recalibration_only_for_kernels_it_can_run() {
        let dir = tempfile::tempdir().unwrap();
        let before = srad_calibrated(dir.path());
        let sizes = before.device().partition_sizes.clone();
        let samples: Vec<(u32, u64)> = sizes
            .iter()
            .flat_map(|&m| (0..200u64).map(move |i| (m, 1_000_000 / u64::from(m) + 5_000 + i)))
            .collect();
        let mut events = before.subscribe();
        let job = before
            .import_samples("lab.k", &samples, ImportOptions::default())
            .unwrap();
        while !before.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        assert_eq!(before.job(job).unwrap().state, JobState::Done);
        let imported = before.bound("lab.k", 64, None).unwrap();
        drop(before);
        let mut reclocked = DeviceProfile::h200();
        reclocked.sm_clock_mhz -= 100;
        // Paced, so that a job started below is still running when Health is read.
        let paced = SimOptions {
            pace_us_per_launch: 500,
            ..SimOptions::default()
        };
        let gpu = SimGpu::new(reclocked, paced);
        let after = Service::start(
            Box::new(gpu),
            Store::open(dir.path()).unwrap(),
            short_campaigns(),
        )
        .0;
        let health = after.health();
        assert!(
            health.contains("stale bounds for srad (")
                && health.contains("recalibrate: `wcetctl recalibrate srad`"),
            "{health}"
        );
        assert!(
            health.contains("stale bounds for lab.k (samples or a calibration imported"),
            "{health}"
        );
        // Imported samples read no clock: the stale import is scaled from the clock its
        // fingerprint names, as a measured calibration is.
        let info = after.bound_info("lab.k", 64, None).unwrap();
        let nominal = DeviceProfile::h200().sm_clock_mhz;
        assert!(info.clock.scaled, "{:?}", info.clock);
        assert_eq!(info.clock.calibrated_mhz, nominal);
        assert!(
            info.entry.bound_ns > imported,
            "{} <= {imported}",
            info.entry.bound_ns
        );
        assert_eq!(clock_in_policy("nominal:1980MHz"), Some(1980));
        assert_eq!(clock_in_policy("locked:1755MHz"), Some(1755));
        assert_eq!(clock_in_policy("default"), None);
        // Being recalibrated: Health names the job, not a command to run again.
        let job = after.recalibrate(&["srad".to_string()]).unwrap();
        let health = after.health();
        assert!(
            health.contains(&format!(
                "stale bounds being recalibrated: srad (job {job})"
            )) && !health.contains("`wcetctl recalibrate srad`"),
            "{health}"
        );
        // Admission reads the same from the bound (`Remedy::BeingRecalibrated`).
        let info = after.bound_info("srad", 64, None).unwrap();
        assert_eq!(info.recalibrating, Some(job));
        after.cancel_job(job).unwrap();
    }

    /// Times reported on this card under an intermediate configuration B hold the bounds served
    /// stale after the next change up, whatever became of B's calibration file: damaged (left
    /// where it is and named in Health), unreadable, or never written (no job ended under B).
    #[test]
    fn floors_of_an_intermediate_configuration_hold_up_the_stale_bounds() {
        for case in [
            "damaged",
            "unreadable",
            "never written",
            "observations damaged",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let clocked = |minus: u32| {
                let mut profile = DeviceProfile::h200();
                profile.sm_clock_mhz -= minus;
                let gpu = SimGpu::new(profile, SimOptions::default());
                Service::start(
                    Box::new(gpu),
                    Store::open(dir.path()).unwrap(),
                    short_campaigns(),
                )
                .0
            };
            drop(srad_calibrated(dir.path()));
            let second = clocked(100);
            // Without a job under B, A's calibration is the one served stale at C.
            if case != "never written" && case != "observations damaged" {
                let mut events = second.subscribe();
                let job = second.recalibrate(&["srad".to_string()]).unwrap();
                while !second.job(job).unwrap().state.finished() {
                    let _ = events.blocking_recv();
                }
            }
            let seen = second
                .bound("srad", 32, Some(Interference::Isolated))
                .unwrap()
                * 4;
            second.report("srad", 32, None, &[seen]).unwrap();
            second.save_observations();
            let b_file = Store::open(dir.path())
                .unwrap()
                .path_for(&second.device().fingerprint);
            let b_observed =
                crate::observe::ObservationFile::new(dir.path(), &second.device().fingerprint);
            drop(second);
            match case {
                "damaged" => std::fs::write(&b_file, "{").unwrap(),
                // Not even the card it was for can be read: it is read anyway, and what it held
                // is named as unread rather than dropped in silence.
                "observations damaged" => std::fs::write(b_observed.path(), "{").unwrap(),
                "unreadable" => {
                    std::fs::remove_file(&b_file).unwrap();
                    std::fs::create_dir(&b_file).unwrap();
                }
                _ => assert!(!b_file.exists()),
            }

            let third = clocked(200);
            let info = third
                .bound_info("srad", 32, Some(Interference::Isolated))
                .unwrap();
            assert!(info.stale, "{case}");
            if case == "observations damaged" {
                let notes = info.notes.join("; ");
                assert!(
                    notes.contains("could not all be read")
                        && notes.contains(&b_observed.path().display().to_string()),
                    "{notes}"
                );
                continue;
            }
            assert!(
                info.entry.bound_ns >= seen,
                "{case}: {} < {seen}",
                info.entry.bound_ns
            );
            assert_eq!(info.observed.map(|f| f.floor_ns), Some(seen), "{case}");
            let health = third.health();
            let named = health.contains("not usable, so not served stale")
                && health.contains(&b_file.display().to_string());
            assert_eq!(named, case != "never written", "{case}: {health}");
            if case == "damaged" {
                assert_eq!(std::fs::read(&b_file).unwrap(), b"{");
            }
        }
    }

    /// An inherited floor that the table does not carry (the carried-over table lacked its size,
    /// so raising it there did nothing) and a lower time reported here: the bound is the higher
    /// floor, not the table's entry (which is below both).
    #[test]
    fn an_inherited_floor_outside_the_table_and_a_reported_one_both_hold_the_bound_up() {
        let dir = tempfile::tempdir().unwrap();
        let table_bound = std::cell::Cell::new(0u64);
        srad_calibrated_then_edited(dir.path(), |v| {
            let srad = &mut v["kernels"]["srad"];
            let entries = srad["table"]["entries"].as_array().unwrap();
            let at_32 = entries.iter().find(|e| e["sms"] == 32).unwrap();
            table_bound.set(at_32["bound_ns"].as_u64().unwrap());
            srad["inherited_floors"] = serde_json::json!([
                {"sms": 32, "ns": table_bound.get() * 3, "at": "2026-11-01T00:00:00Z"}
            ]);
        });
        let service = short_campaign_service(dir.path());
        let tag = Some(Interference::Isolated);
        let reported = table_bound.get() * 2;
        service.report("srad", 32, tag, &[reported]).unwrap();
        let info = service.bound_info("srad", 32, tag).unwrap();
        assert_eq!(info.entry.bound_ns, table_bound.get() * 3);
        assert_eq!(
            info.observed.map(|f| f.floor_ns),
            Some(table_bound.get() * 3)
        );
        assert_eq!(
            service.bound("srad", 32, tag).unwrap(),
            table_bound.get() * 3
        );
    }

    /// After a clock-policy change, this card's previous calibration is served stale (not a newer
    /// one of another card), still at least every time production reported under it.
    #[test]
    fn a_stale_calibration_keeps_the_floors_reported_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let before = srad_calibrated(dir.path());
        let seen = before.bound("srad", 32, None).unwrap() * 3;
        before.report("srad", 32, None, &[seen]).unwrap();
        before.save_observations();
        drop(before);
        // A newer calibration of another card in the same directory.
        let config = short_campaigns();
        let other_card = SimOptions {
            device_index: 1,
            ..SimOptions::default()
        };
        let gpu = SimGpu::new(DeviceProfile::h200(), other_card);
        let other = Service::start(
            Box::new(gpu),
            Store::open(dir.path()).unwrap(),
            config.clone(),
        )
        .0;
        let mut events = other.subscribe();
        let job = other.recalibrate(&["srad".to_string()]).unwrap();
        while !other.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        drop(other);

        let mut reclocked = DeviceProfile::h200();
        reclocked.sm_clock_mhz -= 100;
        let gpu = SimGpu::new(reclocked, SimOptions::default());
        let after = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
        for tag in [
            None,
            Some(Interference::Isolated),
            Some(Interference::Contended),
        ] {
            let info = after.bound_info("srad", 32, tag).unwrap();
            assert!(info.stale);
            assert!(
                info.entry.bound_ns >= seen,
                "{tag:?}: {} < {seen}",
                info.entry.bound_ns
            );
            let notes = info.notes.join("; ");
            assert!(
                notes.contains("this card's calibration under another configuration"),
                "{notes}"
            );
            // GetBoundInfo's `observed_floor_ns` names the floor that holds the bound up.
            let floor = info.observed.expect("the inherited floor is named");
            assert_eq!((floor.floor_ns, floor.sms), (seen, 32), "{tag:?}");
            assert_eq!(floor.raised, info.entry.bound_ns == seen, "{tag:?}");
        }
        let at_8 = after.bound_info("srad", 8, None).unwrap();
        assert_eq!(at_8.observed.map(|f| (f.floor_ns, f.sms)), Some((seen, 32)));
        // A job saves the snapshot under this fingerprint, the stale srad with it: after a
        // restart the floor is still named.
        let mut events = after.subscribe();
        let job = after.recalibrate(&["needle".to_string()]).unwrap();
        while !after.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        let mut reclocked = DeviceProfile::h200();
        reclocked.sm_clock_mhz -= 100;
        drop(after);
        let gpu = SimGpu::new(reclocked, SimOptions::default());
        let after = Service::start(
            Box::new(gpu),
            Store::open(dir.path()).unwrap(),
            short_campaigns(),
        )
        .0;
        let again = after.bound_info("srad", 32, None).unwrap();
        assert!(again.stale);
        assert_eq!(again.observed.map(|f| f.floor_ns), Some(seen));
        let smaller = after
            .bound("srad", 8, Some(Interference::Isolated))
            .unwrap();
        assert!(
            smaller >= seen,
            "srad never gets faster on fewer SMs: {smaller} < {seen}"
        );
    }

    /// With contended calibrated first, an untagged time still holds up the isolated bound, the
    /// one admission uses for a task alone on the GPU.
    #[test]
    fn an_untagged_time_raises_the_isolated_bound_whatever_is_calibrated_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = short_campaigns();
        config.interference = vec![Interference::Contended, Interference::Isolated];
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let service = Service::start(Box::new(gpu), Store::open(dir.path()).unwrap(), config).0;
        let mut events = service.subscribe();
        let job = service.recalibrate(&["srad".to_string()]).unwrap();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        untagged_time_raises_every_tag(&service);
    }

    fn untagged_time_raises_every_tag(service: &Service) {
        let contended = |m| {
            service
                .bound("srad", m, Some(Interference::Contended))
                .unwrap()
        };
        let seen = contended(32).max(service.bound("srad", 32, None).unwrap()) + 1000;
        let outcome = service.report("srad", 32, None, &[seen]).unwrap();
        assert_eq!(outcome.overruns, 1);
        assert!(outcome.save_generation.is_some());
        assert!(contended(32) >= seen, "{} < {seen}", contended(32));
        let isolated = service
            .bound("srad", 32, Some(Interference::Isolated))
            .unwrap();
        assert!(isolated >= seen);
    }

    /// An untagged bound held up by a contended time says so: the bound's calibration is the
    /// isolated one, the number is the contended report's (a black-box run found the answer
    /// naming only the isolated calibration).
    #[test]
    fn a_floor_from_the_other_interference_names_its_series() {
        let dir = tempfile::tempdir().unwrap();
        let service = srad_calibrated(dir.path());
        let untagged = service.bound_info("srad", 32, None).unwrap();
        let seen = untagged.entry.bound_ns * 3;
        service
            .report("srad", 32, Some(Interference::Contended), &[seen])
            .unwrap();
        let info = service.bound_info("srad", 32, None).unwrap();
        assert_eq!(info.entry.bound_ns, seen);
        let floor = info.observed.unwrap();
        assert!(floor.raised);
        assert_eq!(floor.tag, Some(Interference::Contended));
        assert!(
            info.notes
                .iter()
                .any(|n| n.contains("reported from production (tagged contended)")),
            "{:?}",
            info.notes
        );
    }

    /// `GetBound`'s lean path serves exactly `GetBoundInfo`'s bound at every size, for each tag
    /// and for the safer of the two, with both tags calibrated and a production floor under one.
    #[test]
    fn get_bound_serves_what_get_bound_info_says() {
        let dir = tempfile::tempdir().unwrap();
        let service = srad_calibrated(dir.path());
        let at32 = service
            .bound("srad", 32, Some(Interference::Contended))
            .unwrap();
        service
            .report("srad", 32, Some(Interference::Contended), &[at32 * 3])
            .unwrap();
        let tags = [
            None,
            Some(Interference::Isolated),
            Some(Interference::Contended),
        ];
        for m in 1..=133 {
            for tag in tags {
                let lean = service.bound("srad", m, tag).map_err(|e| e.to_string());
                let full = service
                    .bound_info("srad", m, tag)
                    .map(|i| i.entry.bound_ns)
                    .map_err(|e| e.to_string());
                assert_eq!(
                    lean.is_ok(),
                    full.is_ok(),
                    "{m} SMs, {tag:?}: {lean:?} {full:?}"
                );
                if let (Ok(a), Ok(b)) = (lean, full) {
                    assert_eq!(a, b, "{m} SMs, {tag:?}");
                }
            }
        }
        assert_eq!(service.bound("srad", 32, None).unwrap(), at32 * 3);
    }
}
