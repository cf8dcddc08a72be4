//! The service's side of production monitoring (`org.wcetd.Monitor1`): judging reported launch
//! times against the bounds served, raising a bound to every time reported at its size (design
//! rule 1), the overrun events, the recalibration an overrun may queue, judging again at a
//! publication the times reported while it was measured, and saving observations at most every
//! few seconds, with every raised floor journalled before its report is answered. The histograms,
//! their file and the journal's format are `observe.rs`'s.
//!
//! Floors are applied where bounds are served ([`Service::bound_info`]), not written into the
//! calibration: a recalibration replaces the bounds, never the times reported at their sizes.
//! For a kernel whose calibration says more SMs are never slower, a time reported at m SMs is a
//! floor at every size below m too, so the curve stays monotone.

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};

use super::{Event, Inner, Result, Service, ServiceError};
use crate::gpu::{DeviceInfo, Interference, PartitionSize};
use crate::log_throttle::Throttle;
use crate::model::BoundEntry;
use crate::observe::{
    Epoch, JournalledFloor, Judged, Loaded, ObservationFile, Quantiles, Recorded, ReportedTimes,
    Series, MAX_TIMES_PER_REPORT, MAX_TIME_NS,
};
use crate::store::{KernelCalibration, Store};

/// How production monitoring runs.
#[derive(Debug, Clone)]
pub struct MonitorConfig {
    /// Queue a recalibration of a kernel that overran, at most once per this interval
    /// (`wcetd --recalibrate-on-overrun`); `None`: never.
    pub recalibrate_on_overrun: Option<Duration>,
    /// Observations are saved at most this often while they change, and at shutdown. A report
    /// that raised a bound is saved before it is answered, whatever this says.
    pub save_interval: Duration,
}

/// Default of [`MonitorConfig::save_interval`]: what a crash can lose of the times that did not
/// raise a bound.
pub const SAVE_INTERVAL: Duration = Duration::from_secs(2);

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            recalibrate_on_overrun: None,
            save_interval: SAVE_INTERVAL,
        }
    }
}

/// What monitoring announces; the bus face turns these into `Monitor1` signals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MonitorEvent {
    /// A reported time above the bound served at that size (the largest of the report's).
    BoundExceeded {
        /// 1, 2, 3, ... in the order sent: a forwarder that sees a gap knows how many signals
        /// it skipped ([`Service::note_bound_exceeded_skipped`]).
        seq: u64,
        kernel: String,
        sms: PartitionSize,
        observed_ns: u64,
        bound_ns: u64,
    },
    /// The set of kernels with overruns against their current bounds may have changed.
    OverrunKernelsChanged,
}

/// The highest time reported where it bounds the size asked about, as it holds a bound up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedFloor {
    /// `reported_ns` scaled to the current SM clock from the fastest clock it may have run at.
    pub floor_ns: u64,
    pub reported_ns: u64,
    /// (from, to) MHz where the SM clock is below the one the time may have run at; else `None`.
    pub scaled: Option<(u32, u32)>,
    /// Where it was reported (a larger size than asked about, for a monotone kernel).
    pub sms: PartitionSize,
    pub at: DateTime<Utc>,
    /// Whether it is above the calibrated bound, so that it is the bound served.
    pub raised: bool,
    /// The interference it was reported under; `None` for a floor carried over from another
    /// device fingerprint's calibration (its tag is that calibration's).
    pub tag: Option<Interference>,
    /// Reported at a size the device does not realise now, and held at the largest one below it
    /// ([`held_at`]).
    pub held_below: bool,
}

/// What one report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportOutcome {
    pub overruns: u64,
    pub max_ns: u64,
    /// The bound served when the report came (0: none).
    pub bound_ns: u64,
    /// When the report raised a bound: the observations generation to wait for
    /// ([`Service::observations_saved`]) before answering, so the raise survives a crash.
    pub save_generation: Option<u64>,
    /// When it raised a floor and no bound (or another report's floor is on its way to disk):
    /// the journal entry to wait for ([`Service::floors_journalled`]), so that no later bound
    /// can fall below it after a crash.
    pub journal_seq: Option<u64>,
    /// The report overran a bound and `--recalibrate-on-overrun` is set: the caller is to call
    /// [`Service::recalibrate_after_overrun`], off the async runtime (it writes a job record).
    pub recalibration_wanted: bool,
}

/// What `GetObserved` answers: the current epoch (the times judged against the bounds served
/// now) at one size, every interference together unless one is asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedInfo {
    pub kernel: String,
    pub partition_sms: PartitionSize,
    pub count: u64,
    pub max_ns: u64,
    pub quantiles: Quantiles,
    pub overruns: u64,
    /// Of `count` and `overruns`, the times carried in: reported while the calibration judged
    /// was being measured, and above its bound ([`publish`]).
    pub carried: u64,
    /// The bound served at this size now (0 when the kernel has none).
    pub bound_ns: u64,
    pub calibration: String,
    pub epoch_started: Option<DateTime<Utc>>,
    /// Interference tags with times in the current epoch.
    pub interference: Vec<Interference>,
    /// The floor applied to the bound at this size, or, with no bound yet, the floor the first
    /// calibration's bound will stand on (0: none).
    pub floor_ns: u64,
    /// Over every epoch kept or dropped.
    pub reported_total: u64,
    /// Of `reported_total`, what the observations file holds: never less after a crash (the
    /// metrics file's counter).
    pub reported_total_saved: u64,
    pub overruns_total: u64,
    /// Earlier epochs kept, each with the calibration it judged.
    pub past_epochs: u32,
    pub last_report: Option<DateTime<Utc>>,
    /// The recalibration last queued for this kernel by an overrun (0: none).
    pub recalibration_job: u64,
}

impl ObservedInfo {
    /// Bound minus the largest time: 0 after an overrun (the bound is raised to the time at once),
    /// negative only where no bound is served (`bound_ns` 0).
    pub fn headroom_ns(&self) -> i64 {
        let wide = i128::from(self.bound_ns) - i128::from(self.max_ns);
        i64::try_from(wide).unwrap_or(if wide < 0 { i64::MIN } else { i64::MAX })
    }
}

/// A floor as the hot path reads it.
#[derive(Debug, Clone, Copy)]
struct Floor {
    sms: PartitionSize,
    tag: Interference,
    ns: u64,
    at: DateTime<Utc>,
    /// [`crate::observe::Series::floor_clock_mhz`].
    clock_mhz: u32,
}

#[derive(Debug, Default)]
struct SaveRequest {
    dirty: bool,
    urgent: bool,
    /// Floors to journal, in the order they were queued, and how many were ever queued (the
    /// last one's number).
    floors: Vec<JournalledFloor>,
    floors_queued: u64,
    /// A journal append failed: the floors after it are not durable through the journal until
    /// a save holds them.
    journal_broken: bool,
}

/// Monitoring's share of the service's state.
pub(super) struct MonitorState {
    observations: Mutex<ReportedTimes>,
    /// Per kernel, the floor of every series: read by every bound query, so kept apart from the
    /// histograms and written only when a floor rises.
    floors: RwLock<HashMap<String, Vec<Floor>>>,
    file: ObservationFile,
    device_uuid: String,
    config: MonitorConfig,
    events: broadcast::Sender<MonitorEvent>,
    /// Generation of the observations, bumped by every report.
    changed: watch::Sender<u64>,
    /// The generation the last save covered, and why it failed if it did (a failed save is
    /// retried at the next save interval, and makes `Health` degraded until one succeeds).
    saved: watch::Sender<SaveOutcome>,
    /// The number up to which every floor queued is journalled or saved in the file (it only
    /// moves on without a gap), and, while a failed journal append is not yet covered by a
    /// save, why the save that should have covered it failed.
    journalled: watch::Sender<SaveOutcome>,
    wake: (Mutex<SaveRequest>, Condvar),
    /// Held while saving: the saver thread and the save at shutdown write the same temporary
    /// file, so they must take turns. `true` once the save at shutdown is done: no save starts
    /// after it, so none is cut short (leaving its temporary file) when the process exits.
    saving: Mutex<bool>,
    /// Per kernel: when an overrun last queued a recalibration, and its job.
    recalibrations: Mutex<HashMap<String, (Instant, u64)>>,
    /// Per kernel, the overrun's log line: a flood of rising times overran at every report, and
    /// logged a line each (the signal and the counts in `GetObserved` are per overrun still).
    overrun_said: Mutex<HashMap<String, Throttle>>,
    /// The last `BoundExceeded` event's number, held while it is sent so that numbers go out
    /// in order.
    bound_exceeded_seq: Mutex<u64>,
    /// `BoundExceeded` signals the bus forwarders skipped, falling behind a flood.
    bound_exceeded_skipped: AtomicU64,
    /// Why the observations file was moved aside at start, if it was.
    moved_aside: Option<String>,
}

/// How long the shutdown waits, after its last save failed, for the floors queued to reach the
/// journal: as long as a report waits for its floor.
const FINAL_JOURNAL_WAIT: Duration = Duration::from_secs(10);

/// The save at shutdown failed: why, and whether floors raised since the last save are lost
/// with it (neither saved nor journalled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalSaveFailed {
    pub why: String,
    pub floors_lost: bool,
}

/// What the last save of the observations covered.
#[derive(Debug, Clone, Default)]
struct SaveOutcome {
    generation: u64,
    error: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a report's floors must be saved before it is answered, rather than journalled: a crash
/// after the answer must not lower a bound a client was told about, or one still to come.
struct UrgentSave {
    /// A time of the report is above the bound it was judged against.
    overran: bool,
    /// A floor it raised raises a served bound, without an overrun.
    raised_quietly: bool,
    /// A floor it raised is one the next calibration's bound stands on.
    floor_of_what_comes: bool,
}

impl UrgentSave {
    fn urgent(&self) -> bool {
        self.overran || self.raised_quietly || self.floor_of_what_comes
    }
}

impl MonitorState {
    /// Count a change of the observations: its generation, which a caller waiting for the
    /// change to be saved waits for.
    fn count_change(&self) -> u64 {
        let mut g = 0;
        self.changed.send_modify(|v| {
            *v += 1;
            g = *v;
        });
        g
    }

    /// Load the device's observations from the store's directory.
    pub(super) fn load(store: &Store, device: &DeviceInfo, config: MonitorConfig) -> Self {
        let file = ObservationFile::new(store.dir(), &device.fingerprint);
        let (observations, loaded) = file.load();
        let mut floors: HashMap<String, Vec<Floor>> = HashMap::new();
        for (kernel, sms, tag, s) in observations.iter() {
            floors.entry(kernel.to_string()).or_default().push(Floor {
                sms,
                tag,
                ns: s.floor_ns,
                at: s.floor_at,
                clock_mhz: s.floor_clock_mhz,
            });
        }
        let unrealisable: Vec<String> = observations
            .iter()
            .filter(|&(_, m, _, _)| held_at(&device.partition_sizes, m).is_some())
            .map(|(kernel, m, tag, _)| format!("{kernel} ({tag}) at {m} SMs"))
            .collect();
        if !unrealisable.is_empty() {
            tracing::warn!(
                series = %unrealisable.join(", "),
                "times were reported at sizes this device does not realise now: kept, each floor holding up the largest realisable size below it"
            );
        }
        if loaded != Loaded::Fresh {
            tracing::info!(
                series = observations.series_count(),
                path = %file.path().display(),
                "loaded production observations"
            );
        }
        let moved_aside = match &loaded {
            Loaded::Quarantined(why) => Some(format!("{} ({why})", file.path().display())),
            _ => None,
        };
        let state = MonitorState {
            observations: Mutex::new(observations),
            floors: RwLock::new(floors),
            file,
            device_uuid: device.fingerprint.uuid.clone(),
            config,
            events: broadcast::channel(1024).0,
            changed: watch::channel(0).0,
            saved: watch::channel(SaveOutcome::default()).0,
            journalled: watch::channel(SaveOutcome::default()).0,
            wake: (Mutex::new(SaveRequest::default()), Condvar::new()),
            saving: Mutex::new(false),
            recalibrations: Mutex::new(HashMap::new()),
            overrun_said: Mutex::new(HashMap::new()),
            bound_exceeded_seq: Mutex::new(0),
            bound_exceeded_skipped: AtomicU64::new(0),
            moved_aside,
        };
        // What survived a corrupt file is written to a clean one soon.
        if matches!(loaded, Loaded::Quarantined(_)) {
            state.request_save(false);
        }
        state
    }

    /// Send `BoundExceeded` with the next number.
    fn bound_exceeded(&self, kernel: &str, sms: PartitionSize, observed_ns: u64, bound_ns: u64) {
        let mut seq = lock(&self.bound_exceeded_seq);
        *seq += 1;
        let _ = self.events.send(MonitorEvent::BoundExceeded {
            seq: *seq,
            kernel: kernel.to_string(),
            sms,
            observed_ns,
            bound_ns,
        });
    }

    fn request_save(&self, urgent: bool) {
        let mut req = lock(&self.wake.0);
        // Wake the saver only when this changes what it waits for: a report per wake-up would
        // cost a context switch per report.
        let wake = !req.dirty || (urgent && !req.urgent);
        req.dirty = true;
        req.urgent |= urgent;
        if wake {
            self.wake.1.notify_one();
        }
    }

    /// Queue `floor` for the journal; its number, to wait for.
    fn journal_floor(&self, floor: JournalledFloor) -> u64 {
        let mut req = lock(&self.wake.0);
        req.floors.push(floor);
        req.floors_queued += 1;
        // A floor is a change to save as well: set here, with it, the saver decides between a
        // save and the journal on the same facts whenever it wakes (it woke before the report
        // asked for its save, journalled a first floor, then saved over the next one).
        req.dirty = true;
        self.wake.1.notify_one();
        req.floors_queued
    }

    /// What a report that raises no floor waits for before its answer: the floors queued and
    /// not yet journalled or saved (any of them may be the floor above its time; every floor
    /// raised is queued, an overrun's too, so a save asked for is covered).
    fn in_flight(&self) -> Option<u64> {
        let queued = lock(&self.wake.0).floors_queued;
        (self.journalled.borrow().generation < queued).then_some(queued)
    }

    /// Append `floors`, the last numbered `through`, to the journal (after the save at shutdown
    /// too: the next start reads it). Published when every floor before them is durable too;
    /// a failure asks for a save at once instead, which publishes.
    fn journal(&self, floors: &[JournalledFloor], through: u64) {
        let _turn = lock(&self.saving);
        match self.file.journal(floors) {
            Ok(()) if !lock(&self.wake.0).journal_broken => {
                self.journalled.send_modify(|j| {
                    j.generation = j.generation.max(through);
                    j.error = None;
                });
            }
            Ok(()) => {}
            Err(e) => {
                tracing::error!(path = %self.file.journal_paths().0.display(), error = %e,
                    "journalling raised floors failed; they are kept in memory and saved with the observations at once");
                // Called from the saver, which looks again: one save, whose failure `Health`
                // shows and which is then retried at the interval.
                let mut req = lock(&self.wake.0);
                (req.dirty, req.urgent, req.journal_broken) = (true, true, true);
            }
        }
    }

    /// Save now, one kernel at a time; the generation saved is published either way. Whether it
    /// was saved (not after the save at shutdown, nor when it failed).
    fn save(&self) -> bool {
        let closed = lock(&self.saving);
        !*closed && self.save_now(false)
    }

    /// The last save, at shutdown: what was reported is on disk, and no save starts after it.
    /// When it fails (nothing retries it now): why, and whether floors are lost with it, which
    /// they are not when every floor raised is in the journal, the ones still queued for it
    /// written now. Nothing to save (no report since the last save, no journal left): nothing
    /// written.
    fn save_final(&self) -> Option<FinalSaveFailed> {
        let mut closed = lock(&self.saving);
        if *closed {
            return None;
        }
        *closed = true;
        let (dirty, queued) = {
            let req = lock(&self.wake.0);
            (req.dirty, req.floors_queued)
        };
        // A journal on disk (read at start, say) is folded into the file by this save.
        let (journal, aside) = self.file.journal_paths();
        let journal_left = journal.exists() || aside.exists();
        if !dirty && !journal_left && self.journalled.borrow().generation >= queued {
            return None;
        }
        if self.save_now(true) {
            return None;
        }
        let why = self.saved.borrow().error.clone().unwrap_or_default();
        // The saver journals the floors queued (it may hold some already, waiting for this
        // lock): let it, and wait, as long as a report waits for its floor, until they are in
        // the journal or it failed.
        drop(closed);
        lock(&self.wake.0).dirty = true;
        self.wake.1.notify_one();
        let deadline = Instant::now() + FINAL_JOURNAL_WAIT;
        let durable = loop {
            if self.journalled.borrow().generation >= queued {
                break true;
            }
            if lock(&self.wake.0).journal_broken || Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        Some(FinalSaveFailed {
            why,
            floors_lost: !durable,
        })
    }

    /// Only with `saving` held. Every floor queued before it starts is in memory, so a save
    /// that succeeds makes them durable, a broken journal included.
    fn save_now(&self, last: bool) -> bool {
        let generation = *self.changed.borrow();
        let floors_through = lock(&self.wake.0).floors_queued;
        let error = match self.file.save(&self.observations, &self.device_uuid) {
            Ok(()) => None,
            Err(e) if last => {
                tracing::error!(path = %self.file.path().display(), error = %e,
                    "the last save of production observations, at shutdown, failed");
                Some(e.to_string())
            }
            Err(e) => {
                tracing::error!(path = %self.file.path().display(), error = %e,
                    "saving production observations failed; they are kept in memory and the save is retried");
                // Retried at the next interval, not at once: a full disk is not fixed by trying
                // in a loop.
                lock(&self.wake.0).dirty = true;
                Some(e.to_string())
            }
        };
        match &error {
            None => {
                lock(&self.wake.0).journal_broken = false;
                self.journalled.send_modify(|j| {
                    j.generation = j.generation.max(floors_through);
                    j.error = None;
                });
            }
            Some(e) if lock(&self.wake.0).journal_broken => {
                self.journalled.send_modify(|j| j.error = Some(e.clone()));
            }
            Some(_) => {}
        }
        self.saved.send_replace(SaveOutcome { generation, error });
        crate::store::release_freed_memory();
        self.saved.borrow().error.is_none()
    }

    /// The observations file moved aside at start, with why (for `Health`).
    pub(super) fn moved_aside(&self) -> Option<String> {
        self.moved_aside.clone()
    }

    /// Why the last save of the observations failed, while it has not succeeded since.
    pub(super) fn save_error(&self) -> Option<String> {
        self.saved.borrow().error.clone()
    }
}

/// Save whenever observations changed, at most every `save_interval`, at once when a report raised
/// a bound. Runs until the process ends.
pub(super) fn spawn_saver(monitor: Arc<MonitorState>, span: tracing::Span) {
    std::thread::Builder::new()
        .name("wcetd-observe".into())
        .spawn(move || {
            let _in_span = span.enter();
            let interval = monitor.config.save_interval;
            let mut last = Instant::now()
                .checked_sub(interval)
                .unwrap_or_else(Instant::now);
            loop {
                let mut req = lock(&monitor.wake.0);
                loop {
                    let due = last + interval;
                    let now = Instant::now();
                    if req.dirty && (req.urgent || now >= due) || !req.floors.is_empty() {
                        break;
                    }
                    req = if req.dirty {
                        monitor
                            .wake
                            .1
                            .wait_timeout(req, due - now)
                            .map_or_else(|e| e.into_inner().0, |r| r.0)
                    } else {
                        monitor
                            .wake
                            .1
                            .wait(req)
                            .unwrap_or_else(PoisonError::into_inner)
                    };
                }
                let full = req.dirty && (req.urgent || Instant::now() >= last + interval);
                let floors = std::mem::take(&mut req.floors);
                let through = req.floors_queued;
                if full {
                    (req.dirty, req.urgent) = (false, false);
                }
                drop(req);
                // A save holds every floor queued before it began; without one they are
                // journalled.
                let saved = full && monitor.save();
                if full {
                    last = Instant::now();
                }
                if !saved && !floors.is_empty() {
                    monitor.journal(&floors, through);
                }
            }
        })
        .expect("spawning the observation saver thread");
}

/// The worker begins a job on `kernels`: the times reported for them from now on are judged
/// again against what the job publishes ([`publish`]).
pub(super) fn recalibration_started(inner: &Inner, kernels: &[String]) {
    let snap = Arc::clone(
        &inner
            .snapshot
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let mut obs = lock(&inner.monitor.observations);
    for kernel in kernels {
        let contended = snap.tables(Interference::Contended).get(kernel);
        obs.recalibration_started(kernel, contended.map(|k| k.id.as_str()));
    }
}

/// The worker's job on `kernels` is over, whatever it published.
///
/// Times still waiting for a tag the job did not publish after all (it was cancelled, failed,
/// or asked for one tag, or was an import of one) are judged now against what is served, where
/// the job published the calibration that judges them; they were once dropped here.
pub(super) fn recalibration_ended(inner: &Inner, kernels: &[String]) {
    // Only this worker publishes, so the snapshot cannot change before the lock is taken; the
    // snapshot's lock is let go first, as `publish` takes the two in the other order.
    let served = Arc::clone(
        &inner
            .snapshot
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let now = Utc::now();
    let mut carried = Carried::default();
    {
        let mut obs = lock(&inner.monitor.observations);
        for kernel in kernels {
            judge_waiting(inner, &mut obs, &served, kernel, false, now, &mut carried);
            obs.recalibration_ended(kernel);
        }
    }
    announce_carried(inner, carried);
}

/// Make `next` the calibrations served, `published` (tag, kernel) being the new ones in it, and
/// judge again the times reported while they were measured. Such a time was judged against the
/// calibration served then and filed in its epoch, which the publication ends; were it left
/// there, a kernel whose new bounds are already below a time seen in production would leave
/// `OverrunKernels` as if nothing were wrong.
///
/// So the largest such time of each size and tag is judged as a report of it would be judged
/// now (an untagged one against the larger of the tags' bounds, a tagged one against its tag's,
/// a contended one held up by the isolated launches measured) where that calibration is a new one: against its calibrated bound (clock-scaled, before
/// floors: the floor the time set already holds the served bound up, so against the served
/// bound nothing would ever overrun). Above it, the time is carried into the new epoch as an
/// overrun: logged, `BoundExceeded` (with the calibrated bound) and `OverrunKernels` signalled,
/// saved at once. The swap and the judging hold the observations' lock, which a report holds
/// from reading its bound to recording its times, so no report falls between them.
///
/// No recalibration is queued for a carried time: the one just published ran while it was
/// reported, and a loop of recalibrations against a production slower than any campaign would
/// help no one; the operator decides.
pub(super) fn publish(
    inner: &Inner,
    next: Arc<crate::store::Calibration>,
    published: &[(Interference, String)],
) {
    let now = Utc::now();
    let mut carried = Carried::default();
    {
        let mut obs = lock(&inner.monitor.observations);
        *inner
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::clone(&next);
        for (tag, kernel) in published {
            if let Some(cal) = next.tables(*tag).get(kernel) {
                obs.published_during_recalibration(kernel, &cal.id);
            }
        }
        let kernels: BTreeSet<&String> = published.iter().map(|(_, k)| k).collect();
        for kernel in kernels {
            // An untagged time is judged against the larger of the tags' bounds: not before
            // every tag the daemon calibrates has one, or a first calibration's isolated bound,
            // published while its contended one is still being measured, would count a time
            // below the contended bound as an overrun. Until then the time waits (at the
            // latest for the job's end, [`recalibration_ended`]).
            let every_tag = inner
                .config
                .interference
                .iter()
                .all(|t| next.tables(*t).contains_key(kernel));
            judge_waiting(
                inner,
                &mut obs,
                &next,
                kernel,
                !every_tag,
                now,
                &mut carried,
            );
        }
    }
    announce_carried(inner, carried);
}

/// Times carried into a calibration's epoch by one judging: (kernel, size, time, calibrated
/// bound) to signal, and whether any time moved (signalled before or not, the file changed).
#[derive(Default)]
struct Carried {
    signal: Vec<(String, u32, u64, u64)>,
    moved: bool,
}

/// Judge the times noted for `kernel`'s running recalibration against `next`, where the bound
/// that judges them is of a calibration the job published: above it, carried into its epoch.
/// A time whose judging needs a tag `next` lacks waits when `defer`. Under the observations lock.
fn judge_waiting(
    inner: &Inner,
    obs: &mut crate::observe::ReportedTimes,
    next: &crate::store::Calibration,
    kernel: &str,
    defer: bool,
    now: DateTime<Utc>,
    carried: &mut Carried,
) {
    let published = obs.published_during(kernel);
    for ((sms, tag), time_ns) in obs.reported_during_recalibration(kernel) {
        // As a report is judged ([`Service::judged_bound`]): a tag with no calibration, or one
        // without an entry at this size, as untagged. (Judged against its tag's table alone, a
        // time at a size that table lacks was never carried: its epoch went past, and its
        // kernel left `OverrunKernels`, while the same time untagged was carried; a review
        // found it.)
        let has_entry = |t: Interference| {
            next.tables(t)
                .get(kernel)
                .is_some_and(|k| k.table.entry(sms).is_some())
        };
        let judge = match tag {
            Some(t) if has_entry(t) => vec![t],
            _ if defer => continue,
            _ => vec![Interference::Isolated, Interference::Contended],
        }
        .into_iter()
        .filter_map(|t| Some((t, next.tables(t).get(kernel)?)))
        .filter_map(|(t, cal)| {
            // A contended bound is held up by the isolated launches measured at its size, as it
            // is served ([`Service::raise_to_the_other_tag`]): without them here, a contended time
            // below the bound served was carried as an overrun of a bound never served.
            let held = match t {
                Interference::Contended => {
                    let clock = inner.current_clock_mhz.load(Ordering::SeqCst);
                    inner.isolated_measured_at(next, kernel, sms, clock)
                }
                Interference::Isolated => 0,
            };
            Some((cal, inner.calibrated_at(cal, sms)?.max(held)))
        })
        .max_by_key(|&(_, bound_ns)| bound_ns);
        let Some((cal, bound_ns)) = judge.filter(|(c, _)| published.contains(&c.id)) else {
            continue;
        };
        let judged = Judged {
            calibration: &cal.id,
            bound_ns: Some(bound_ns),
        };
        let series = (kernel, sms, tag.unwrap_or(Interference::Isolated));
        if obs.carry_over(series, judged, time_ns, now) {
            carried.moved = true;
            if obs.first_carry(kernel, (sms, tag)) {
                carried
                    .signal
                    .push((kernel.to_string(), sms, time_ns, bound_ns));
            }
        }
    }
}

/// Log and signal carried times, and save them at once.
fn announce_carried(inner: &Inner, carried: Carried) {
    let m = &inner.monitor;
    for (kernel, sms, observed_ns, bound_ns) in &carried.signal {
        tracing::warn!(
            kernel,
            sms,
            observed_ns,
            bound_ns,
            "a launch time reported while this calibration was measured (or before the kernel had a bound there) exceeds its bound; the kernel stays among the overrun kernels"
        );
        m.bound_exceeded(kernel, *sms, *observed_ns, *bound_ns);
    }
    // A time carried again by a job's later publication changes the file too: unsaved, a
    // restart lost the overrun.
    if carried.moved {
        let _ = m.events.send(MonitorEvent::OverrunKernelsChanged);
        // A change as a report is one: a caller waiting for every change to be saved
        // (`observations_saved`) waits for this one too.
        m.changed.send_modify(|v| *v += 1);
        m.request_save(true);
    }
}

impl Service {
    fn monitor(&self) -> &MonitorState {
        &self.inner.monitor
    }

    /// Record launch times a scheduler observed for `kernel` on `sms` SMs (a realisable size),
    /// judge them against the bound served there (for `tag`, or the one `GetBound` serves), and
    /// raise that bound to the largest. Refused whole, nothing recorded: an unknown kernel, a size
    /// that is not realisable, no times, more than [`MAX_TIMES_PER_REPORT`], a time of 0 or above
    /// [`MAX_TIME_NS`].
    pub fn report(
        &self,
        kernel: &str,
        sms: u32,
        tag: Option<Interference>,
        times: &[u64],
    ) -> Result<ReportOutcome> {
        let _in_span = self.in_span();
        self.check_report(kernel, sms, times)?;
        // An untagged time is filed as isolated, whatever the daemon calibrates first: an
        // isolated floor holds up the isolated, the contended and GetBound's bounds alike
        // ([`Self::observed_floor`]), the conservative reading when the scheduler does not say
        // what ran beside the kernel. (Filed as contended, it left the isolated bound, which
        // admission uses for a task alone, below it.)
        let series_tag = tag.unwrap_or(Interference::Isolated);
        let m = self.monitor();
        let now = Utc::now();
        let (bound_ns, recorded, journal_seq) =
            self.judge_and_record(kernel, (sms, tag, series_tag), times, now)?;
        if recorded.floor_raised || recorded.clock_raised {
            self.set_floor(kernel, sms, series_tag, &recorded, now);
        }
        let generation = m.count_change();
        let save = self.save_before_answer(kernel, sms, &recorded);
        let urgent = save.urgent();
        m.request_save(urgent);
        // Any other floor raised is journalled before the answer (far cheaper than a save): a
        // later calibration may come out below it, and the floor must be there to hold it up.
        // A report that raises nothing waits for the floors on their way to disk: the floor
        // above its time may be another report's, not written yet.
        let (save_generation, journal_seq) = if urgent {
            (Some(generation), None)
        } else {
            (None, journal_seq.or_else(|| m.in_flight()))
        };
        if save.raised_quietly {
            let _ = self.inner.events.send(Event::BoundsChanged {
                kernels: vec![kernel.to_string()],
            });
        }
        if save.overran {
            self.announce_overrun(kernel, sms, &recorded, bound_ns.unwrap_or(0));
        }
        Ok(ReportOutcome {
            overruns: recorded.overruns,
            max_ns: recorded.max_ns,
            bound_ns: bound_ns.unwrap_or(0),
            save_generation,
            journal_seq,
            recalibration_wanted: save.overran
                && self.inner.config.monitor.recalibrate_on_overrun.is_some(),
        })
    }

    /// What makes the floors a report of `kernel` at `sms` `recorded` urgent to save, before
    /// the report is answered.
    fn save_before_answer(&self, kernel: &str, sms: u32, recorded: &Recorded) -> UrgentSave {
        let overran = recorded.overruns > 0;
        // A floor can raise a served bound without an overrun against the one judged: judged
        // against no bound (before any calibration), or above one tag's bound but below
        // GetBound's (an untagged time between the isolated and contended bounds). It is then
        // saved before it is answered, as an overrun is, so a crash cannot lower a bound a client
        // was told about.
        let raised_quietly = !overran
            && (recorded.floor_raised || recorded.clock_raised)
            && self.floor_raises_a_bound(kernel, sms, recorded);
        // Nor may a crash lose the floor of a bound still to come: with no calibration at this
        // size under either tag, or a recalibration due (queued or running, or the bounds
        // stale), the next calibration's bound stands on it (a black-box run lost times
        // reported during a first calibration and then served bounds far below them). Floors
        // rise rarely once a series has a few reports, so this costs few saves.
        let floor_of_what_comes = (recorded.floor_raised || recorded.clock_raised)
            && ([Interference::Isolated, Interference::Contended]
                .into_iter()
                .all(|tag| self.calibrated_bound(kernel, sms, tag).is_none())
                || self.recalibration_due(kernel));
        UrgentSave {
            overran,
            raised_quietly,
            floor_of_what_comes,
        }
    }

    /// Judge `times` against the bound served for (`kernel`, `sms`, `tag`) and record them in
    /// the `series_tag` series: the bound judged against (none before a calibration), what was
    /// recorded, and the journal sequence of the floor it raised, if any.
    fn judge_and_record(
        &self,
        kernel: &str,
        (sms, tag, series_tag): (u32, Option<Interference>, Interference),
        times: &[u64],
        now: DateTime<Utc>,
    ) -> Result<(Option<u64>, Recorded, Option<u64>)> {
        let m = self.monitor();
        // Judged and recorded under the lock a publication holds while it swaps the
        // calibration and judges again the times reported while it was measured
        // ([`publish`]): a report falls wholly before or wholly after it.
        let mut obs = lock(&m.observations);
        let served = self.judged_bound(kernel, sms, tag)?;
        let bound_ns = served.as_ref().map(|b| b.0);
        let judged = Judged {
            calibration: served.as_ref().map_or("", |b| b.1.as_str()),
            bound_ns,
        };
        // The clock the times are filed under: read as they arrive (polled each second), the
        // launches ran just before, at this clock or, while it falls, a faster one.
        let clock = self.inner.current_clock_mhz.load(Ordering::SeqCst);
        let recorded = obs.record((kernel, sms, series_tag), judged, times, now, clock);
        if tag.is_some() {
            obs.note_tag_named((kernel, sms, series_tag), recorded.max_ns);
        }
        obs.note_if_recalibrating((kernel, sms, tag), recorded.max_ns);
        // Queued before the lock is let go, so that a report after this one, which this
        // floor may hold up, sees it on its way to disk ([`MonitorState::in_flight`]).
        let journal_seq = (recorded.floor_raised || recorded.clock_raised).then(|| {
            m.journal_floor(JournalledFloor {
                kernel: kernel.to_string(),
                sms,
                interference: series_tag,
                floor_ns: recorded.floor_ns,
                at: now,
                clock_mhz: recorded.floor_clock_mhz,
            })
        });
        Ok((bound_ns, recorded, journal_seq))
    }

    /// Overruns of the bound served (`bound_ns`) by a report: logged, signalled
    /// (`BoundExceeded`, `OverrunKernels`, `BoundsChanged`). The bound itself was raised by the
    /// floor already; the recalibration it may queue is the caller's ([`ReportOutcome`]).
    fn announce_overrun(&self, kernel: &str, sms: u32, recorded: &Recorded, bound_ns: u64) {
        let observed_ns = recorded.max_ns;
        let m = self.monitor();
        let due = lock(&m.overrun_said)
            .entry(kernel.to_string())
            .or_default()
            .due();
        if let Some(held_back) = due {
            tracing::warn!(
                kernel,
                sms,
                observed_ns,
                bound_ns,
                overruns = recorded.overruns,
                overrun_reports_not_logged = held_back,
                "a reported launch time exceeds the bound served; the bound is raised to it (said at most every 10 s per kernel)"
            );
        }
        m.bound_exceeded(kernel, sms, observed_ns, bound_ns);
        // `OverrunKernels` is checked again on this event too.
        let _ = self.inner.events.send(Event::BoundsChanged {
            kernels: vec![kernel.to_string()],
        });
    }

    /// Whether a calibration of `kernel` will replace its bounds: a job for it is queued or
    /// running, or its bounds are stale (a recalibration is what makes them current).
    fn recalibration_due(&self, kernel: &str) -> bool {
        let snap = self.snapshot();
        self.pending_jobs().contains_key(kernel)
            || [Interference::Isolated, Interference::Contended]
                .into_iter()
                .any(|tag| {
                    snap.tables(tag)
                        .get(kernel)
                        .is_some_and(|k| self.is_stale(k))
                })
    }

    /// Whether a floor of `floor_ns` at `sms` raises some bound served: it is above a calibrated
    /// bound there (clock-scaled, before floors) of some tag. Below every one it raises nothing,
    /// here or, on a monotone kernel, at smaller sizes (their bounds are higher still), tagged or
    /// not; a tag without a calibration serves nothing to raise.
    fn floor_raises_a_bound(&self, kernel: &str, sms: u32, recorded: &Recorded) -> bool {
        let at = self.moment();
        [Interference::Isolated, Interference::Contended]
            .into_iter()
            .filter_map(|tag| {
                let interference = self.calibration_of(&at, kernel, Some(tag), sms).ok()?;
                let cal = at.snap.tables(interference).get(kernel)?;
                let entry = cal.table.entry(sms)?;
                let clocks = self.inner.clocks_at(cal, at.clock_mhz);
                let floor = served_floor(recorded.floor_ns, recorded.floor_clock_mhz, clocks);
                Some(
                    floor.0
                        > self
                            .inner
                            .clock_scaled_at(cal, entry.bound_ns, at.clock_mhz),
                )
            })
            .any(|raises| raises)
    }

    /// The calibrated bound of `tag` at `partition`, clock-scaled, before production floors.
    fn calibrated_bound(&self, kernel: &str, partition: u32, tag: Interference) -> Option<u64> {
        let at = self.moment();
        let interference = self
            .calibration_of(&at, kernel, Some(tag), partition)
            .ok()?;
        let cal = at.snap.tables(interference).get(kernel)?;
        self.inner.calibrated_at(cal, partition)
    }

    /// The bound a report of `tag` is judged against: the one served for the tag, or, for a tag
    /// with no calibration, the one `GetBound` serves (it covers every tag, and is what a
    /// scheduler had for the kernel); `None` before any calibration. A time reported under an
    /// uncalibrated tag above that bound was once recorded as judged against nothing: it raised
    /// the bound without an overrun counted, signalled, or shown in `GetObserved`.
    fn judged_bound(
        &self,
        kernel: &str,
        partition: u32,
        tag: Option<Interference>,
    ) -> Result<Option<(u64, String, u64)>> {
        let tags = if tag.is_some() {
            vec![tag, None]
        } else {
            vec![None]
        };
        for t in tags {
            match self.served_bound(kernel, partition, t) {
                Ok(b) => return Ok(Some(b)),
                Err(ServiceError::NotCalibrated(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // No untagged bound where one tag's table has no entry at this size: the largest tagged
        // bound served there. Judged against nothing, an overrun there was not counted, signalled
        // or recalibrated for (a review found it), though its floor was kept.
        let mut largest = None;
        for t in [Interference::Isolated, Interference::Contended] {
            match self.served_bound(kernel, partition, Some(t)) {
                Ok(b)
                    if largest
                        .as_ref()
                        .is_none_or(|(l, _): &((u64, String, u64), _)| b.0 > l.0) =>
                {
                    largest = Some((b, t))
                }
                Ok(_) | Err(ServiceError::NotCalibrated(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(largest.map(|(b, t)| self.held_by_the_asked_floors(kernel, partition, tag, (t, b))))
    }

    /// `bound` (`t`'s, served at `partition`, its calibration and floor) raised to the floors
    /// of `tag` there, where `tag`'s own bound has no entry: the largest tagged bound stands in
    /// for it, and a time reported for `tag` raises what it stands in for, as a served bound is
    /// raised. (Held by `t`'s floors alone, a contended time over the isolated bound it was
    /// judged against raised nothing: every later report up to it was counted an overrun again,
    /// and `GetObserved` showed a bound below a time it had acknowledged.)
    fn held_by_the_asked_floors(
        &self,
        kernel: &str,
        partition: u32,
        tag: Option<Interference>,
        (t, mut bound): (Interference, (u64, String, u64)),
    ) -> (u64, String, u64) {
        let at = self.moment();
        let Some(cal) = at.snap.tables(t).get(kernel) else {
            return bound;
        };
        let clocks = self.inner.clocks_at(cal, at.clock_mhz);
        let monotone = cal.table.monotone;
        if let Some(f) = self.observed_floor(kernel, tag, (partition, monotone), clocks) {
            bound.0 = bound.0.max(f.floor_ns);
            bound.2 = bound.2.max(f.floor_ns);
        }
        bound
    }

    /// The bound served at exactly `partition`, the id of the calibration it comes from and the
    /// production floor under it (0 for none), computed as [`Service::bound_info`] computes them
    /// (calibration, clock, floors) without what only readers want (medians read back from the
    /// spill file, predictions, notes), since every report and `GetObserved` ask for it.
    /// `bound_info` is the reference: `reports_are_judged_against_the_bound_served` checks that
    /// both agree everywhere.
    pub(super) fn served_bound(
        &self,
        kernel: &str,
        partition: u32,
        tag: Option<Interference>,
    ) -> Result<(u64, String, u64)> {
        let at = self.moment();
        let interference = self.calibration_of(&at, kernel, tag, partition)?;
        let not_calibrated = || {
            ServiceError::NotCalibrated(format!(
                "kernel `{kernel}` has no bound at {partition} SMs"
            ))
        };
        let cal = at
            .snap
            .tables(interference)
            .get(kernel)
            .ok_or_else(not_calibrated)?;
        let mut entry = *cal.table.entry(partition).ok_or_else(not_calibrated)?;
        let mut notes = Vec::new();
        self.scale_for_clock(cal, &mut entry, &mut notes, at.clock_mhz);
        let floor =
            self.raise_to_observed((kernel, tag), cal, &mut entry, &mut notes, at.clock_mhz);
        self.raise_to_the_other_tag(&at, (kernel, tag, interference), &mut entry, &mut notes);
        let floor_ns = floor.map_or(0, |f| f.floor_ns);
        Ok((entry.bound_ns, cal.id.clone(), floor_ns))
    }

    /// The production floor under `kernel`'s `tag` bound at `partition` as it holds at the
    /// calibrated clock (0 for none): every floor that applies, each stretched from the fastest
    /// clock it may have run at to the calibrated one, where an exported table holds (an
    /// importer stretches it from there as its clock falls). Exported as reported, a time run at
    /// a faster clock lost that stretch, and one stretched to a slower clock now was stretched
    /// twice; ranked at the clock now, a larger time from a slower clock hid it (reviews found
    /// all three).
    pub(super) fn floor_at_calibrated_clock(
        &self,
        kernel: &str,
        partition: u32,
        tag: Option<Interference>,
    ) -> u64 {
        let at = self.moment();
        let Ok(interference) = self.calibration_of(&at, kernel, tag, partition) else {
            return 0;
        };
        let Some(cal) = at.snap.tables(interference).get(kernel) else {
            return 0;
        };
        let Some(mut entry) = cal.table.entry(partition).copied() else {
            return 0;
        };
        let calibrated = self.inner.clocks_at(cal, 0).0;
        entry.bound_ns = 0;
        self.raise_to_observed((kernel, tag), cal, &mut entry, &mut Vec::new(), calibrated)
            .map_or(0, |f| f.floor_ns)
    }

    fn check_report(&self, kernel: &str, sms: u32, times: &[u64]) -> Result<()> {
        self.known(kernel)?;
        let sizes = &self.inner.device.partition_sizes;
        if !sizes.contains(&sms) {
            return Err(ServiceError::InvalidPartition(format!(
                "{sms} SMs is not a partition size this device realises, so no launch ran on it; accepted: {}",
                super::join(sizes)
            )));
        }
        if times.is_empty() {
            return Err(ServiceError::InvalidArgs(
                "no times; accepted: 1 to 65536 launch times in ns".into(),
            ));
        }
        if times.len() > MAX_TIMES_PER_REPORT {
            return Err(ServiceError::InvalidArgs(format!(
                "{} times in one call; accepted: at most {MAX_TIMES_PER_REPORT} per call (send more calls)",
                times.len()
            )));
        }
        if let Some((i, &t)) = times
            .iter()
            .enumerate()
            .find(|(_, &t)| t == 0 || t > MAX_TIME_NS)
        {
            return Err(ServiceError::InvalidArgs(format!(
                "times[{i}] (the {}) is {t} ns; accepted: times from 1 ns to {MAX_TIME_NS} ns (one hour); nothing of this call was recorded",
                crate::model::tail::ordinal(i + 1)
            )));
        }
        Ok(())
    }

    fn set_floor(
        &self,
        kernel: &str,
        sms: u32,
        tag: Interference,
        recorded: &Recorded,
        at: DateTime<Utc>,
    ) {
        let mut floors = self
            .monitor()
            .floors
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let list = floors.entry(kernel.to_string()).or_default();
        let (ns, clock_mhz) = (recorded.floor_ns, recorded.floor_clock_mhz);
        match list.iter_mut().find(|f| f.sms == sms && f.tag == tag) {
            // Two reports may race here: keep the higher of each.
            Some(f) => {
                if ns > f.ns {
                    f.ns = ns;
                    f.at = at;
                }
                f.clock_mhz = f.clock_mhz.max(clock_mhz);
            }
            None => list.push(Floor {
                sms,
                tag,
                ns,
                at,
                clock_mhz,
            }),
        }
    }

    /// The highest time reported that bounds `partition`, as it holds a bound up with the SM
    /// clocks `clocks` (calibrated, current; current 0: none read, nothing scaled): at that size,
    /// or at any larger one when `monotone`; of `tag`, or of every tag when the bound asked for
    /// is `GetBound`'s.
    fn observed_floor(
        &self,
        kernel: &str,
        tag: Option<Interference>,
        (partition, monotone): (u32, bool),
        clocks: (u32, u32),
    ) -> Option<ObservedFloor> {
        let sizes = &self.inner.device.partition_sizes;
        let floors = self
            .monitor()
            .floors
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        floors
            .get(kernel)?
            .iter()
            // Untagged, every tag's floors apply; a contended bound is also held up by isolated
            // times (untagged reports are filed as isolated): a launch beside a memory stressor
            // is never faster than one with the rest of the GPU idle.
            .filter(|f| {
                tag.is_none_or(|t| {
                    t == f.tag || (t == Interference::Contended && f.tag == Interference::Isolated)
                })
            })
            .filter(|f| holds_up(f.sms, (partition, monotone), sizes))
            .map(|f| {
                let reported = (f.ns, f.clock_mhz, f.sms, f.at);
                ObservedFloor::of(reported, Some(f.tag), clocks, sizes)
            })
            .max_by_key(|f| (f.floor_ns, std::cmp::Reverse(f.sms)))
    }

    /// Rule 1 for production: the bound served at `entry.sms` is at least every time reported
    /// where it applies, scaled to the SM clock `clock` (0: unreadable) as the bound is. Says so
    /// in `notes` when that raises it.
    /// A calibration served stale from another fingerprint also carries that fingerprint's
    /// floors, already raised into its table; the higher of the two is the one named.
    pub(super) fn raise_to_observed(
        &self,
        (kernel, tag): (&str, Option<Interference>),
        cal: &KernelCalibration,
        entry: &mut BoundEntry,
        notes: &mut Vec<String>,
        clock: u32,
    ) -> Option<ObservedFloor> {
        let monotone = cal.table.monotone;
        let clocks = self.inner.clocks_at(cal, clock);
        let inherited = inherited_floor(cal, entry, clocks, &self.inner.device.partition_sizes);
        let reported = self.observed_floor(kernel, tag, (entry.sms, monotone), clocks);
        // The higher of the two holds the bound up. An inherited floor was raised into the table
        // when it was carried over, but only where the table has the size: applied here again.
        let mut floor = match (reported, inherited) {
            (Some(r), Some(i)) => {
                if i.floor_ns > r.floor_ns {
                    i
                } else {
                    r
                }
            }
            (r, i) => r.or(i)?,
        };
        if floor.floor_ns > entry.bound_ns {
            notes.push(raised_note(entry, &floor));
            entry.bound_ns = floor.floor_ns;
            floor.raised = true;
        }
        Some(floor)
    }

    /// Queue the recalibration of `kernel` a report that overran asked for
    /// ([`ReportOutcome::recalibration_wanted`]), at most once per configured interval, unless
    /// the kernel is held back. Blocking: queueing a job writes its record and syncs it, so a
    /// caller on the async runtime runs this on the blocking pool.
    pub fn recalibrate_after_overrun(&self, kernel: &str) {
        let Some(interval) = self.inner.config.monitor.recalibrate_on_overrun else {
            return;
        };
        let mut last = lock(&self.monitor().recalibrations);
        if last
            .get(kernel)
            .is_some_and(|(at, _)| at.elapsed() < interval)
        {
            return;
        }
        if let Some(held) = self.held_back(kernel) {
            tracing::warn!(kernel, "no recalibration after an overrun: {held}");
            last.insert(kernel.to_string(), (Instant::now(), 0));
            return;
        }
        let job = match self.job_for(kernel) {
            Some(job) => job,
            None => match self.recalibrate(&[kernel.to_string()]) {
                Ok(job) => {
                    tracing::info!(job, kernel, "recalibration queued after an overrun");
                    job
                }
                Err(e) => {
                    tracing::warn!(kernel, "no recalibration after an overrun: {e}");
                    0
                }
            },
        };
        // A refusal counts too, so that it is not retried (and logged) at every report.
        last.insert(kernel.to_string(), (Instant::now(), job));
    }

    /// The current epoch of `kernel` at `sms` (rounded down to a realisable size, as `GetBound`
    /// does), for `tag` or for every tag.
    pub fn observed(
        &self,
        kernel: &str,
        sms: u32,
        tag: Option<Interference>,
    ) -> Result<ObservedInfo> {
        self.known(kernel)?;
        let partition = self.check_partition(sms)?;
        let mut out = self
            .observed_at(kernel, partition, tag)?
            .unwrap_or_else(|| self.empty_observed(kernel, partition));
        if let Ok(Some((bound_ns, calibration, floor_ns))) =
            self.judged_bound(kernel, partition, tag)
        {
            (out.bound_ns, out.calibration, out.floor_ns) = (bound_ns, calibration, floor_ns);
        } else {
            // No bound yet: the floor the first calibration's bound will stand on.
            out.floor_ns = self
                .observed_floor(kernel, tag, (partition, false), (0, 0))
                .map_or(0, |f| f.floor_ns);
        }
        Ok(out)
    }

    /// Every (kernel, size) with reported times, kernels and sizes ascending.
    pub fn list_observed(&self) -> Vec<ObservedInfo> {
        // A series at a size not realised at this start is shown by the size it is held at
        // ([`held_at`]), once: listed as its own, it made a second row of that size (twice in
        // the metrics file, which a textfile collector refuses).
        let sizes = &self.inner.device.partition_sizes;
        let keys: BTreeSet<(String, u32)> = lock(&self.monitor().observations)
            .iter()
            .map(|(k, m, _, _)| (k.to_string(), held_at(sizes, m).unwrap_or(m)))
            .collect();
        keys.into_iter()
            .filter_map(|(k, m)| self.observed(&k, m, None).ok())
            .collect()
    }

    fn empty_observed(&self, kernel: &str, partition: u32) -> ObservedInfo {
        ObservedInfo {
            kernel: kernel.to_string(),
            partition_sms: partition,
            count: 0,
            max_ns: 0,
            quantiles: Quantiles::default(),
            overruns: 0,
            carried: 0,
            bound_ns: 0,
            calibration: String::new(),
            epoch_started: None,
            interference: Vec::new(),
            floor_ns: 0,
            reported_total: 0,
            reported_total_saved: 0,
            overruns_total: 0,
            past_epochs: 0,
            last_report: None,
            recalibration_job: self.recalibration_job(kernel),
        }
    }

    fn recalibration_job(&self, kernel: &str) -> u64 {
        lock(&self.monitor().recalibrations)
            .get(kernel)
            .map_or(0, |&(_, job)| job)
    }

    /// The series at (kernel, partition) summed over `tag` (or every tag); their current epochs
    /// count only where they judge the calibration served now.
    fn observed_at(
        &self,
        kernel: &str,
        partition: u32,
        tag: Option<Interference>,
    ) -> Result<Option<ObservedInfo>> {
        let served = self.served_calibrations(kernel, partition);
        let mut out = self.empty_observed(kernel, partition);
        let mut obs = lock(&self.monitor().observations);
        let Some(sizes) = obs.kernel_mut(kernel) else {
            return Ok(None);
        };
        let mut found = false;
        let mut current = Vec::new();
        for (&(m, t), s) in sizes.iter_mut() {
            if m != partition || tag.is_some_and(|want| want != t) {
                continue;
            }
            found = true;
            current.extend(self.add_series(kernel, (t, partition), s, &served, &mut out));
        }
        if !found {
            return Ok(None);
        }
        add_current_epochs(&mut out, &mut current);
        Ok(Some(out))
    }

    /// Adds the series of interference `t` to `out`'s totals (every epoch), and returns its
    /// current epoch where that judges a calibration served now: only such epochs count in
    /// `out`'s times, and earlier ones are counted as past.
    ///
    /// Called with the observations locked (`s` is theirs); [`Self::judging_now`] may take the
    /// snapshot's read lock inside that, as it always did here.
    fn add_series<'s>(
        &self,
        kernel: &str,
        (t, partition): (Interference, u32),
        s: &'s mut Series,
        served: &[String],
        out: &mut ObservedInfo,
    ) -> Option<&'s mut Epoch> {
        out.reported_total += s.reported_total;
        out.reported_total_saved += s.reported_saved;
        out.overruns_total += s.overruns_total;
        out.last_report = out.last_report.max(Some(s.last_report));
        let judged_now = self.judging_now(kernel, (t, partition), served);
        let judging_now = s
            .epochs
            .last()
            .is_some_and(|e| judged_now.contains(&e.calibration));
        out.past_epochs = out
            .past_epochs
            .max((s.epochs.len() - usize::from(judging_now)) as u32);
        let e = s.epochs.last_mut().filter(|_| judging_now)?;
        out.interference.push(t);
        out.epoch_started = Some(out.epoch_started.map_or(e.started, |d| d.min(e.started)));
        Some(e)
    }

    /// Ids of the calibrations served for `kernel` now (either tag), and "" where none of them
    /// has an entry at `partition`: times reported there were judged against no bound, and are
    /// the current epoch until a calibration with an entry there is published. (Taking "" only
    /// for a kernel with no calibration at all, a report at a size its tables lack was counted
    /// in a past epoch at once: `GetObserved` showed `count` 0 for it, a black-box run found.)
    fn served_calibrations(&self, kernel: &str, partition: u32) -> Vec<String> {
        let snap = self.snapshot();
        let tables: Vec<&KernelCalibration> = [Interference::Isolated, Interference::Contended]
            .into_iter()
            .filter_map(|tag| snap.tables(tag).get(kernel))
            .collect();
        let mut ids: Vec<String> = tables.iter().map(|k| k.id.clone()).collect();
        if tables.iter().all(|k| k.table.entry(partition).is_none()) {
            ids.push(String::new());
        }
        ids
    }

    /// The calibrations a report filed in `kernel`'s series of `tag` is judged against now, so
    /// those whose epoch is current there. The isolated series holds untagged times too, judged
    /// against either tag's (the larger at the size); a contended time is judged against the
    /// contended calibration once there is one, and as untagged before. (Taking any served
    /// calibration for either series kept a contended overrun judged against the isolated bound
    /// listed after a contended calibration was published above it.)
    ///
    /// A contended calibration without an entry at `partition` judges nothing there: a
    /// contended time is judged as untagged is where a tag has no entry, against the largest
    /// tagged bound ([`Self::judged_bound`]). (Taken as judging, that time was counted in a past
    /// epoch at once, and its kernel left out of `OverrunKernels`.)
    fn judging_now(
        &self,
        kernel: &str,
        (tag, partition): (Interference, u32),
        served: &[String],
    ) -> Vec<String> {
        let own = (tag == Interference::Contended)
            .then(|| {
                self.snapshot()
                    .tables(tag)
                    .get(kernel)
                    .filter(|k| k.table.entry(partition).is_some())
                    .map(|k| k.id.clone())
            })
            .flatten();
        match own {
            Some(id) => vec![id],
            None => served.to_vec(),
        }
    }

    /// Count `n` `BoundExceeded` signals a bus forwarder skipped (it fell behind a flood; the
    /// counts of `GetObserved` and `OverrunKernels` stay exact).
    pub fn note_bound_exceeded_skipped(&self, n: u64) {
        self.monitor()
            .bound_exceeded_skipped
            .fetch_add(n, Ordering::Relaxed);
    }

    /// The number of the last `BoundExceeded` event sent (0: none yet).
    pub fn bound_exceeded_sent(&self) -> u64 {
        *lock(&self.monitor().bound_exceeded_seq)
    }

    /// `BoundExceeded` signals skipped since the daemon started on the device's own object path
    /// (`/org/wcetd/Wcetd1/gpu/N`; the default device's root alias is not counted again).
    pub fn bound_exceeded_skipped(&self) -> u64 {
        self.monitor()
            .bound_exceeded_skipped
            .load(Ordering::Relaxed)
    }

    /// Kernels served now with an overrun against their bounds (since their last calibration):
    /// a kernel not served (its manifest removed or rejected) has no bounds to overrun, and the
    /// metrics file, which lists served kernels, left it out while this named it (a black-box
    /// hunt found them disagree). Named again once it is served again under that calibration.
    pub fn overrun_kernels(&self) -> Vec<String> {
        type Judged = Vec<(Interference, u32, String)>;
        let kernels: BTreeMap<String, Judged> = {
            let obs = lock(&self.monitor().observations);
            let mut with_overruns: BTreeMap<String, Judged> = BTreeMap::new();
            for (k, sms, tag, s) in obs.iter() {
                if let Some(e) = s.epochs.last().filter(|e| e.overruns > 0) {
                    with_overruns.entry(k.to_string()).or_default().push((
                        tag,
                        sms,
                        e.calibration.clone(),
                    ));
                }
            }
            with_overruns
        };
        kernels
            .into_iter()
            .filter(|(k, _)| self.known(k).is_ok())
            .filter(|(k, judged)| {
                judged.iter().any(|(tag, sms, c)| {
                    let served = self.served_calibrations(k, *sms);
                    !c.is_empty() && self.judging_now(k, (*tag, *sms), &served).contains(c)
                })
            })
            .map(|(k, _)| k)
            .collect()
    }

    pub fn subscribe_monitor(&self) -> broadcast::Receiver<MonitorEvent> {
        self.monitor().events.subscribe()
    }

    /// Changes with every report (for the metrics file).
    pub fn observations_changed(&self) -> watch::Receiver<u64> {
        self.monitor().changed.subscribe()
    }

    /// Wait until the floor journal (or a save) holds floor `seq` ([`ReportOutcome::journal_seq`])
    /// and every one before it, at most `limit`. An error says the floor is served but not on
    /// disk: not in time, or a journal append failed and so did the save that followed it.
    pub async fn floors_journalled(&self, seq: u64, limit: Duration) -> Result<()> {
        let mut journalled = self.monitor().journalled.subscribe();
        let outcome = tokio::time::timeout(
            limit,
            journalled.wait_for(|j| j.generation >= seq || j.error.is_some()),
        )
        .await
        .ok()
        .and_then(|r| r.ok().map(|j| (j.generation >= seq, j.error.clone())));
        match outcome {
            Some((true, _)) => Ok(()),
            Some((false, e)) => Err(ServiceError::Failed(format!(
                "the report is recorded, but a floor it or an earlier report raised (the one above its times) is not on disk: journalling it failed and so did saving it ({}), so a crash now would lose the floor; the save is retried (see Health)",
                e.unwrap_or_default()
            ))),
            None => Err(ServiceError::Failed(format!(
                "the report is recorded, but a floor it or an earlier report raised (the one above its times) is not on disk within {} s; it is saved when the disk allows (see Health)",
                limit.as_secs()
            ))),
        }
    }

    /// Wait until observations of `generation` or later are on disk, at most `limit`. A save
    /// that failed, or did not finish in time, is an error: the times are recorded and the raised
    /// bound is served, but a crash now would lose them, and the reporter must know.
    pub async fn observations_saved(&self, generation: u64, limit: Duration) -> Result<()> {
        let mut saved = self.monitor().saved.subscribe();
        let outcome = match tokio::time::timeout(
            limit,
            saved.wait_for(|s| s.generation >= generation),
        )
        .await
        {
            Ok(Ok(outcome)) => outcome.clone(),
            Ok(Err(_)) | Err(_) => {
                tracing::warn!(generation, "observations not saved in time");
                return Err(ServiceError::Failed(format!(
                    "the report is recorded and its bound raised, but not saved to disk within {} s; it is saved when the disk allows (see Health)",
                    limit.as_secs()
                )));
            }
        };
        match outcome.error {
            None => Ok(()),
            Some(e) => Err(ServiceError::Failed(format!(
                "the report is recorded and its bound raised, but saving it failed ({e}), so a crash would lose the raise; the save is retried (see Health)"
            ))),
        }
    }

    /// Save observations for the last time (at shutdown): later reports are not saved. How it
    /// failed, if it did.
    pub fn save_observations(&self) -> Option<FinalSaveFailed> {
        let _in_span = self.in_span();
        self.monitor().save_final()
    }

    /// Jobs since start, by state.
    pub fn job_counts(&self) -> BTreeMap<&'static str, u64> {
        let jobs = lock(&self.inner.jobs);
        let mut counts = BTreeMap::new();
        for (status, _) in jobs.values() {
            *counts.entry(status.state.as_str()).or_insert(0) += 1;
        }
        counts
    }
}

/// The highest floor `cal` carried over from another fingerprint that bounds `entry`'s size: at
/// that size, or at a larger one when the table is monotone.
fn inherited_floor(
    cal: &KernelCalibration,
    entry: &BoundEntry,
    clocks: (u32, u32),
    sizes: &[u32],
) -> Option<ObservedFloor> {
    let monotone = cal.table.monotone;
    cal.inherited_floors
        .iter()
        // Held below where this start does not realise its size, as a reported one is.
        .filter(|f| holds_up(f.sms, (entry.sms, monotone), sizes))
        .map(|f| {
            // Raised into the table when carried over, and stretched from its own series'
            // fastest clock where that is above the table's.
            let floor = ObservedFloor::of((f.ns, f.clock_mhz, f.sms, f.at), None, clocks, sizes);
            ObservedFloor {
                // The bound served is this floor.
                raised: floor.floor_ns >= entry.bound_ns,
                ..floor
            }
        })
        .max_by_key(|f| (f.floor_ns, std::cmp::Reverse(f.sms)))
}

impl ObservedFloor {
    /// A time `ns` reported at `sms` SMs on `at` in a series whose floor clock is `clock_mhz`,
    /// filed under `tag`, as it holds a bound up with the SM clocks `clocks` on a device of
    /// `sizes` (not yet judged against the bound: `raised` false).
    fn of(
        (ns, clock_mhz, sms, at): (u64, u32, PartitionSize, DateTime<Utc>),
        tag: Option<Interference>,
        clocks: (u32, u32),
        sizes: &[u32],
    ) -> ObservedFloor {
        let (floor_ns, scaled) = served_floor(ns, clock_mhz, clocks);
        ObservedFloor {
            floor_ns,
            reported_ns: ns,
            scaled,
            sms,
            at,
            raised: false,
            tag,
            held_below: held_at(sizes, sms).is_some(),
        }
    }
}

/// Whether a floor reported at `sms` SMs holds up the bound at `partition`: its own size, a
/// smaller one for a kernel never faster on fewer SMs (`monotone`), or the size it is held at.
fn holds_up(sms: u32, (partition, monotone): (u32, bool), sizes: &[u32]) -> bool {
    sms == partition || (monotone && sms > partition) || held_at(sizes, sms) == Some(partition)
}

/// Where a floor reported at `sms` SMs holds a bound up besides its own size and, for a kernel
/// never faster on fewer SMs, the sizes below: `None` at a size the device realises; else the
/// largest realisable size below it (the smallest, below them all). Such a series is kept as it
/// is: the placement probe may refuse a size at one start and accept it at the next, and a series
/// dropped (or moved) as damage then left the size's bound below a time reported there. Until the
/// size is realised again its floor holds up the size its bound would be read at, as one bit
/// turning `"sms":8` into 9 in the file would otherwise have lost the floor at 8.
fn held_at(sizes: &[u32], sms: u32) -> Option<u32> {
    if sizes.contains(&sms) {
        return None;
    }
    let below = sizes.iter().rev().copied().find(|&p| p <= sms);
    below.or(sizes.first().copied())
}

/// A time reported in a series whose floor clock is `floor_clock` (0: none read), as it holds a
/// bound up with the SM clocks `(calibrated, current)`: kernel time scales at worst inversely
/// with the SM clock, and the time may have run at the series' fastest clock or, where that is
/// not known to be higher, at the calibrated one, so while the current clock is below that it is
/// stretched by the ratio, as the bound is. With the reported times filed unscaled, a launch
/// seen at 1980 MHz held a bound up at its own time with the clock at 990, and admission accepted
/// a task that could take twice as long (a black-box review found it). Returns the time and,
/// where it was stretched, (from, to) MHz.
fn served_floor(
    ns: u64,
    floor_clock: u32,
    (calibrated, current): (u32, u32),
) -> (u64, Option<(u32, u32)>) {
    let from = calibrated.max(floor_clock);
    if current > 0 && from > current {
        (super::stretch(ns, from, current), Some((from, current)))
    } else {
        (ns, None)
    }
}

/// The note that says `entry`'s bound (before it is raised) was raised to `floor`: where and
/// when that time was reported, and under which series.
fn raised_note(entry: &BoundEntry, floor: &ObservedFloor) -> String {
    let where_ = if floor.sms == entry.sms {
        format!("at {} SMs", floor.sms)
    } else if floor.held_below {
        format!(
            "at {} SMs, a size this device does not realise now (held at the size below it)",
            floor.sms
        )
    } else {
        format!(
            "at {} SMs (this kernel is never faster on fewer SMs)",
            floor.sms
        )
    };
    // The series it came from: untagged, a contended time holds up a bound whose
    // calibration is the isolated one, and the reader must be able to tell.
    let under = match floor.tag {
        Some(Interference::Contended) => " (tagged contended)",
        Some(Interference::Isolated) => " (tagged isolated, or untagged and filed as isolated)",
        None => "",
    };
    let scaled = floor.scaled.map_or(String::new(), |(from, to)| {
        format!(
            ", {} ns as reported, scaled by {from}/{to} MHz: the SM clock is below the one it may have run at",
            floor.reported_ns
        )
    });
    format!(
        "raised from {} ns to {} ns by a launch time reported from production{under} {where_} on {} (Monitor1.Report or ReportTagged){scaled}",
        entry.bound_ns,
        floor.floor_ns,
        floor.at.to_rfc3339()
    )
}

/// Fills `out`'s times from the current epochs that judge the calibrations served now: counts
/// and overruns summed, the largest time, and quantiles of them all.
fn add_current_epochs(out: &mut ObservedInfo, current: &mut [&mut Epoch]) {
    out.count = current.iter().map(|e| e.count()).sum();
    out.max_ns = current.iter().map(|e| e.max_ns).max().unwrap_or(0);
    out.overruns = current.iter().map(|e| e.overruns).sum();
    out.carried = current.iter().map(|e| e.carried).sum();
    out.quantiles = merged_quantiles(current, out.max_ns);
}

/// Quantiles of the times of `current` together (one histogram each, merged), none above
/// `max_ns`, their exact largest time.
fn merged_quantiles(current: &mut [&mut Epoch], max_ns: u64) -> Quantiles {
    match current {
        [] => Quantiles::default(),
        [one] => one.quantiles(),
        several => {
            let mut all = several[0].histogram.histogram();
            // The histograms resize themselves, so adding cannot run out of range; if it
            // ever did, the quantiles would miss times, so the maximum stands in for them.
            let merged = several[1..]
                .iter_mut()
                .all(|e| all.add(e.histogram.histogram()).is_ok());
            let quantiles = if merged {
                Quantiles::of(&all)
            } else {
                Quantiles {
                    p50_ns: u64::MAX,
                    p99_ns: u64::MAX,
                    p999_ns: u64::MAX,
                }
            };
            quantiles.capped(max_ns)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
    use crate::service::ServiceConfig;

    /// A service on the simulated H200 whose first calibration has finished.
    fn calibrated(dir: &std::path::Path) -> Service {
        let mut config = ServiceConfig::default();
        config.recipe.campaign.launches = 40;
        config.recipe.campaign.screen_launches = 200;
        config.recipe.campaign.heavy_tail_launches = 400;
        config.recipe.delay_probe_launches = 0;
        // Isolated alone, so that `contended` is a tag without a calibration.
        config.interference = vec![Interference::Isolated];
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let (service, job) = Service::start(Box::new(gpu), Store::open(dir).unwrap(), config);
        let job = job.expect("the suite is calibrated at start");
        let mut events = service.subscribe();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        assert_eq!(service.job(job).unwrap().state.as_str(), "done");
        service
    }

    fn assert_judged_as_served(service: &Service) {
        for kernel in service.list_kernels() {
            for &m in &service.device().partition_sizes {
                for tag in [None, Some(Interference::Isolated)] {
                    let info = service.bound_info(&kernel, m, tag).unwrap();
                    assert_eq!(
                        service.served_bound(&kernel, m, tag).unwrap(),
                        (
                            info.entry.bound_ns,
                            info.calibration_id,
                            info.observed.map_or(0, |f| f.floor_ns)
                        ),
                        "{kernel} at {m} SMs, {tag:?}"
                    );
                }
            }
        }
    }

    /// [`calibrated`], then every save of its observations fails, as on a full disk: the
    /// temporary file's name is taken by a directory (returned, to remove).
    fn calibrated_with_saves_failing(dir: &std::path::Path) -> (Service, std::path::PathBuf) {
        let service = calibrated(dir);
        let blocker = crate::store::temporary_path(service.monitor().file.path());
        std::fs::create_dir(&blocker).unwrap();
        (service, blocker)
    }

    /// A raise that could not be saved is not answered as durable: the reporter gets `Failed`,
    /// `Health` says why, and the save is retried until it succeeds.
    #[test]
    fn a_raise_that_could_not_be_saved_is_an_error_until_a_retry_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let (service, blocker) = calibrated_with_saves_failing(dir.path());
        let file = service.monitor().file.path().to_path_buf();
        let at64 = service.bound("hotspot", 64, None).unwrap();
        let outcome = service.report("hotspot", 64, None, &[at64 + 100]).unwrap();
        let generation = outcome
            .save_generation
            .expect("an overrun is saved at once");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let saved =
            runtime.block_on(service.observations_saved(generation, Duration::from_secs(10)));
        assert!(
            matches!(&saved, Err(ServiceError::Failed(m)) if m.contains("not saved") || m.contains("saving it failed")),
            "{saved:?}"
        );
        assert!(
            service
                .health()
                .contains("production observations not saved"),
            "{}",
            service.health()
        );
        // The bound stays raised meanwhile, and the retry clears the state once the disk allows.
        assert!(service.bound("hotspot", 64, None).unwrap() >= at64 + 100);
        std::fs::remove_dir(&blocker).unwrap();
        let mut outcomes = service.monitor().saved.subscribe();
        runtime
            .block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(30),
                    outcomes.wait_for(|s| s.error.is_none()),
                )
                .await
            })
            .expect("retried within the save interval")
            .unwrap();
        assert_eq!(service.health(), "ok");
        assert!(std::fs::read_to_string(&file).unwrap().contains("hotspot"));
    }

    /// The save at shutdown is the last: when it fails, the caller is told why (the daemon then
    /// exits with failure), rather than a log line promising a retry that never comes.
    #[test]
    fn a_final_save_that_fails_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let (service, _) = calibrated_with_saves_failing(dir.path());
        let at64 = service.bound("hotspot", 64, None).unwrap();
        service.report("hotspot", 64, None, &[at64 + 100]).unwrap();
        let failed = service.save_observations().expect("the final save failed");
        assert!(!failed.why.is_empty());
        assert!(!failed.floors_lost, "the journal holds the floor");
        assert_eq!(service.save_observations(), None, "there is one final save");

        // With the journal unwritable too, the floor is lost, and the caller is told so.
        let dir = tempfile::tempdir().unwrap();
        let (service, _) = calibrated_with_saves_failing(dir.path());
        // Both journals: a save sets a journal aside by renaming it, which a directory survives.
        let (journal, aside) = service.monitor().file.journal_paths();
        std::fs::create_dir(journal).unwrap();
        std::fs::create_dir(aside).unwrap();
        let at64 = service.bound("hotspot", 64, None).unwrap();
        let _ = service.report("hotspot", 64, None, &[at64 + 100]);
        let failed = service.save_observations().expect("the final save failed");
        assert!(failed.floors_lost, "{failed:?}");
    }

    /// A contended time judged, before there was a contended calibration, against the isolated
    /// bound stops counting once a contended calibration above it is published: its epoch is no
    /// longer the one contended reports are judged in. (It stayed listed in `OverrunKernels`.)
    #[test]
    fn an_overrun_judged_as_untagged_ends_with_the_first_contended_calibration() {
        const K: &str = "backprop";
        let dir = tempfile::tempdir().unwrap();
        let service = calibrated(dir.path());
        let contended = Some(Interference::Contended);
        let isolated = service.bound(K, 64, None).unwrap();
        let outcome = service.report(K, 64, contended, &[isolated + 1]).unwrap();
        assert_eq!(outcome.overruns, 1);
        assert_eq!(service.overrun_kernels(), vec![K.to_string()]);
        let mut events = service.subscribe();
        let job = service
            .recalibrate_with(&[K.to_string()], &[Interference::Contended])
            .unwrap();
        while !service.job(job).unwrap().state.finished() {
            let _ = events.blocking_recv();
        }
        let calibrated = service.bound_info(K, 64, contended).unwrap();
        assert!(calibrated.entry.bound_ns > isolated + 1, "{calibrated:?}");
        assert_eq!(service.observed(K, 64, contended).unwrap().overruns, 0);
        assert!(service.overrun_kernels().is_empty());
    }

    #[test]
    fn reports_are_judged_against_the_bound_served() {
        let dir = tempfile::tempdir().unwrap();
        let service = calibrated(dir.path());
        assert_judged_as_served(&service);
        let before = service.curve("hotspot", None).unwrap();
        let at64 = service
            .bound_info("hotspot", 64, None)
            .unwrap()
            .entry
            .bound_ns;
        let outcome = service.report("hotspot", 64, None, &[at64 + 100]).unwrap();
        assert_eq!((outcome.overruns, outcome.bound_ns), (1, at64));
        assert!(outcome.save_generation.is_some());
        assert_judged_as_served(&service);
        // A time reported for a tag with no calibration is judged against what GetBound
        // serves: an overrun there, counted and shown (it was once judged against nothing).
        let at8 = service.bound_info("srad", 8, None).unwrap().entry.bound_ns;
        let contended = service
            .report("srad", 8, Some(Interference::Contended), &[at8 * 2])
            .unwrap();
        assert_eq!((contended.overruns, contended.bound_ns), (1, at8));
        assert!(
            contended.save_generation.is_some(),
            "saved before the answer"
        );
        let seen = service
            .observed("srad", 8, Some(Interference::Contended))
            .unwrap();
        assert_eq!((seen.count, seen.overruns, seen.max_ns), (1, 1, at8 * 2));
        let seen = service.observed("srad", 8, None).unwrap();
        assert_eq!(
            (seen.count, seen.overruns),
            (1, 1),
            "GetObserved shows it too"
        );
        let within = service.report("hotspot", 32, None, &[1]).unwrap();
        assert!(
            within.save_generation.is_none(),
            "a time under the bound waits"
        );
        assert_eq!(
            service.bound_info("srad", 8, None).unwrap().entry.bound_ns,
            at8 * 2
        );
        assert_eq!(
            service
                .bound_info("srad", 8, Some(Interference::Isolated))
                .unwrap()
                .entry
                .bound_ns,
            at8,
            "a floor of one tag does not move the other's bound"
        );
        assert_judged_as_served(&service);
        let after = service.curve("hotspot", None).unwrap();
        for ((m, b), (_, a)) in before.iter().zip(&after) {
            let want = if *m <= 64 { (*b).max(at64 + 100) } else { *b };
            assert_eq!(*a, want, "hotspot at {m} SMs");
        }
        assert_eq!(
            service.overrun_kernels(),
            vec!["hotspot".to_string(), "srad".to_string()]
        );
    }
}
