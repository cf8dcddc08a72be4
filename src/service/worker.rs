//! The GPU worker: one thread owns the device and runs the queued jobs one at a time
//! (calibrations, imports, bundles), reading the clock between them and while idle. A job's
//! results are published (snapshot, store, then [`Event`]) only when the whole job has
//! succeeded, so a failed or cancelled job leaves the old bounds in place. Jobs are queued,
//! listed and cancelled on the callers' side, in `jobs.rs`.

use super::imports::{import, import_bundle};
use super::*;

/// Only the worker touches the GPU, so it also reads the clock: between jobs and while idle.
/// A reading the driver calls idle (and names no throttle reason for) is skipped: an idle clock
/// is not the clock launches run at, and would stretch every bound served by the ratio of the
/// two (several times on parts that idle low with a context open).
fn read_clock(gpu: &mut dyn Gpu, inner: &Inner) {
    let now = gpu.telemetry();
    if !now.idle {
        let mhz = now.sm_clock_mhz.unwrap_or(0);
        inner.current_clock_mhz.store(mhz, Ordering::SeqCst);
    }
}

pub(super) fn worker_loop(
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
        let end = run_caught(gpu.as_mut(), &store, &inner, &job);
        finish_job(gpu.as_mut(), &inner, &job, &kernels, end);
    }
}

/// Run `job`, a panic in it ending it as failed: a bug in one job must not take the worker (and
/// every later job) down with it.
fn run_caught(gpu: &mut dyn Gpu, store: &Store, inner: &Inner, job: &Job) -> JobEnd {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut witnessed = Witnessed {
            gpu,
            inner,
            lost: false,
        };
        run_job(&mut witnessed, store, inner, job)
    }));
    outcome.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown".into());
        fail(
            inner,
            format!("internal error ({what}); bounds unchanged, please report it"),
        )
    })
}

/// Finish a job that ran (on `kernels`), however it ended: its record and the production
/// monitor's, its place in the queue, its status, the clock read after it, the log line and
/// `JobFinished`.
fn finish_job(gpu: &mut dyn Gpu, inner: &Inner, job: &Job, kernels: &[String], end: JobEnd) {
    let (state, message) = end;
    inner.job_record.ended(job.id, state == JobState::Done);
    monitor::recalibration_ended(inner, kernels);
    inner.pending.fetch_sub(1, Ordering::SeqCst);
    set_job(inner, job.id, |s| {
        s.state = state;
        s.message = message.clone();
        if state == JobState::Done {
            s.progress = 1.0;
        }
    });
    read_clock(gpu, inner);
    tracing::info!(job = job.id, state = state.as_str(), %message, "job finished");
    let _ = inner.events.send(Event::JobFinished {
        job: job.id,
        state,
        message,
    });
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
pub(super) fn finish_unstarted(
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
            held_back,
        } => {
            let (state, message) = calibrate_job(gpu, store, inner, job, kernels, interference);
            match held_back.as_slice() {
                [] => (state, message),
                held => (
                    state,
                    format!(
                        "{message}; not run, held back for losing the device (name them to run them; Health says why): {}",
                        names_in_a_message(held, &inner.config.wcetctl())
                    ),
                ),
            }
        }
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
    /// Kernels a reload removed while the job ran: not measured from then on, nor published.
    skipped: Vec<String>,
}

impl JobReport {
    /// The tail of a message for a job that stops now.
    fn unchanged(&self) -> String {
        match self.published.as_slice() {
            [] => "bounds unchanged".to_string(),
            done => format!("{} before that; other bounds unchanged", done.join("; ")),
        }
    }

    /// Leave out of `results` (and measure no more) kernels a reload removed while the job ran:
    /// a removed manifest's kernel was still timed, stored and announced in `BoundsChanged`,
    /// while `GetBound` answered that it does not exist.
    fn drop_removed(&mut self, inner: &Inner, results: &mut Vec<TaggedCalibration>) {
        results.retain(|(_, name, _)| {
            let served = still_served(inner, name);
            if !served && !self.skipped.contains(name) {
                self.skipped.push(name.clone());
            }
            served
        });
    }

    fn finish(mut self, inner: &Inner) -> JobEnd {
        if !self.skipped.is_empty() {
            self.published.push(format!(
                "not calibrated, removed by a kernel reload while the job ran: {}",
                self.skipped.join(", ")
            ));
        }
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

/// Calibrate `kernels` under each of `tags`, in that order, kernels that were running when a
/// device was lost last. A kernel that fails (a wrong result, a fault) fails alone: the others
/// are still calibrated and published. A lost device or a cancel ends the job, keeping what was
/// already published.
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
    let mut calibrating = Calibrating {
        store,
        inner,
        job,
        steps: job_steps(inner, kernels, tags),
        measured: Vec::new(),
        results: Vec::new(),
        report: JobReport::default(),
        evidence: recipe.slowdowns,
        recipe,
    };
    for i in 0..calibrating.steps.len() {
        if let Some(end) = calibrating.step(gpu, i) {
            return end;
        }
    }
    calibrating.finish()
}

/// A calibration job under way: its steps, what it measured and has not fitted yet, what it
/// fitted and has not published yet, and what it has to say at its end.
struct Calibrating<'j> {
    store: &'j Store,
    inner: &'j Inner,
    job: &'j Job,
    /// The job's recipe with the device's delays and slowdowns probed.
    recipe: Recipe,
    steps: Vec<(Interference, &'j KernelSpec)>,
    measured: Vec<(Interference, calibrate::Measured)>,
    results: Vec<TaggedCalibration>,
    report: JobReport,
    /// Sustained slowdowns are the device's: every kernel's bound allows for what the probe and
    /// every kernel of the job measured before its publication showed, so kernels are fitted
    /// when their tag (or group) is done.
    evidence: crate::model::throttle::Evidence,
}

impl Calibrating<'_> {
    /// Run step `i`: measure it (unless a reload removed its kernel), and where it ends its tag
    /// (or group), fit and publish what the tag measured. How the job ends, where it ends here.
    fn step(&mut self, gpu: &mut dyn Gpu, i: usize) -> Option<JobEnd> {
        let (tag, kernel) = self.steps[i];
        if !still_served(self.inner, &kernel.name) {
            if !self.report.skipped.contains(&kernel.name) {
                self.report.skipped.push(kernel.name.clone());
            }
        } else if let Some(end) = self.measure(gpu, i) {
            return Some(end);
        }
        // Each tag's bounds are published, all at once, as soon as its last kernel is done (and
        // before the kernels that lost a device start): on an H100 the isolated suite takes
        // about 35 s and the contended one most of half an hour (a stressed 8-SM launch took
        // up to 172 ms), and a first start should not serve nothing for that long.
        let group = |(tag, k): (Interference, &KernelSpec)| (tag, lost_a_device(self.inner, k));
        let tag_done = self
            .steps
            .get(i + 1)
            .is_none_or(|&next| group(next) != group((tag, kernel)));
        if !tag_done {
            return None;
        }
        self.publish_tag(gpu, i)
    }

    /// Measure step `i`, its evidence of slowdowns added to the job's. A failure the job goes
    /// on after is reported with the job; how the job ends, where it ends here.
    fn measure(&mut self, gpu: &mut dyn Gpu, i: usize) -> Option<JobEnd> {
        let (tag, kernel) = self.steps[i];
        match calibrate_step(gpu, self.inner, self.job, &self.recipe, &self.steps, i) {
            Ok(m) => {
                m.add_to(&mut self.evidence);
                self.measured.push((tag, m));
                // Its last step: it ran through on this device, whatever else fails.
                if !self.steps[i + 1..]
                    .iter()
                    .any(|&(_, k)| k.name == kernel.name)
                {
                    self.inner.losses.ran_through(kernel);
                }
                None
            }
            Err(e) => step_failed(self.inner, e, (tag, kernel), &mut self.report),
        }
    }

    /// Fit what the tag (or group) that step `i` ends measured, with the job's evidence so far,
    /// and publish it unless it is the job's last step ([`Calibrating::finish`] publishes
    /// that). How the job ends, where publishing fails.
    fn publish_tag(&mut self, gpu: &mut dyn Gpu, i: usize) -> Option<JobEnd> {
        let fitted = Recipe {
            slowdowns: self.evidence,
            ..self.recipe
        };
        self.results = fit_all(
            std::mem::take(&mut self.measured),
            gpu,
            &fitted,
            &mut self.report,
        );
        self.report.drop_removed(self.inner, &mut self.results);
        if i + 1 < self.steps.len() && !self.results.is_empty() {
            let (state, done) = commit_served(
                self.store,
                self.inner,
                std::mem::take(&mut self.results),
                &mut self.report,
            );
            if state != JobState::Done {
                return Some((state, done));
            }
            tracing::info!(job = self.job.id, "{done}: published; the job goes on");
            self.report.published.push(done);
        }
        None
    }

    /// Publish what the last tag fitted (or, where the job did nothing else, nothing: the
    /// job's publication says so) and end the job with its report.
    fn finish(mut self) -> JobEnd {
        let report = &self.report;
        let nothing_else =
            report.published.is_empty() && report.failures.is_empty() && report.skipped.is_empty();
        if !self.results.is_empty() || nothing_else {
            let (state, done) =
                commit_served(self.store, self.inner, self.results, &mut self.report);
            if state != JobState::Done {
                return (state, done);
            }
            self.report.published.push(done);
        }
        self.report.finish(self.inner)
    }
}

/// Whether `kernel` was running when a device was lost ([`device_losses`]).
fn lost_a_device(inner: &Inner, kernel: &KernelSpec) -> bool {
    inner.losses.of(kernel).0 > 0
}

/// A job's steps in order, each kernel under each tag. Kernels that were running when a device
/// was lost come after the others, tags and all, and what the others measured is published
/// before they run: the device may be lost again, which ends the job and publishes nothing more.
fn job_steps<'k>(
    inner: &Inner,
    kernels: &'k [KernelSpec],
    tags: &[Interference],
) -> Vec<(Interference, &'k KernelSpec)> {
    let (suspects, clean): (Vec<&KernelSpec>, Vec<&KernelSpec>) =
        kernels.iter().partition(|k| lost_a_device(inner, k));
    [clean, suspects]
        .into_iter()
        .flat_map(|group| {
            tags.iter()
                .flat_map(move |&tag| group.clone().into_iter().map(move |k| (tag, k)))
        })
        .collect()
}

/// A step that failed: a cancellation or a lost device ends the job (what it ends with), any
/// other failure is reported with the job and the job goes on.
fn step_failed(
    inner: &Inner,
    e: calibrate::CalibrateError,
    (tag, kernel): (Interference, &KernelSpec),
    report: &mut JobReport,
) -> Option<JobEnd> {
    if is_cancelled(&e) {
        return Some((
            JobState::Cancelled,
            format!("cancelled; {}", report.unchanged()),
        ));
    }
    if is_lost(&e) {
        let failed = fail(
            inner,
            format!(
                "calibrating {} ({tag}): {e}; {}",
                kernel.name,
                report.unchanged()
            ),
        );
        note_lost(inner, &e);
        return Some(failed);
    }
    report
        .failures
        .push(format!("{} ({tag}): {e}", kernel.name));
    None
}

/// Commit `results` but those a reload removed, with reloads held off from that check to the
/// publication (a reload in between had a removed kernel stored and announced).
fn commit_served(
    store: &Store,
    inner: &Inner,
    mut results: Vec<TaggedCalibration>,
    report: &mut JobReport,
) -> JobEnd {
    let _no_reload = inner
        .reloading
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    report.drop_removed(inner, &mut results);
    commit(store, inner, results, "calibrated")
}

/// Whether `kernel` is still in the catalogue (a reload may have removed its manifest).
fn still_served(inner: &Inner, kernel: &str) -> bool {
    inner
        .catalogue
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(kernel)
        .is_some()
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
pub(super) fn probed_recipe(
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
pub(super) fn weakest_guarantee(
    snap: &Calibration,
    kernel: &str,
) -> (f64, crate::model::ExceedanceBasis) {
    [Interference::Isolated, Interference::Contended]
        .into_iter()
        .filter_map(|t| snap.tables(t).get(kernel))
        .map(|c| c.table.stated_exceedance())
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, crate::model::ExceedanceBasis::TailModel))
}

/// How a bundle import ends when checking or recalibrating (`what`) did not complete: cancelled,
/// or failed with why; nothing of the bundle is imported either way.
pub(super) fn nothing_imported(inner: &Inner, e: &calibrate::CalibrateError, what: &str) -> JobEnd {
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

/// A job's progress (0 to 1) for `GetJob` and the `JobProgress` signal: sent when it moved by 1%
/// since the last one sent, or when `force`d (a step completed).
pub(super) fn progress_reporter<'a>(inner: &'a Inner, job: &'a Job) -> impl FnMut(f64, bool) + 'a {
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

/// The worker's GPU, recording which kernel was running when the device was lost, before the
/// error reaches anything that could end the process ([`device_losses`]). Only the first loss:
/// after it every call fails at once, whichever kernel it is for.
struct Witnessed<'a> {
    gpu: &'a mut dyn Gpu,
    inner: &'a Inner,
    /// A loss was seen in this job (a kernel's, or the delay probe's): a step that goes on after
    /// one (a sweep that fails one kernel alone) must not charge the next kernel too.
    lost: bool,
}

impl Gpu for Witnessed<'_> {
    fn info(&self) -> &DeviceInfo {
        self.gpu.info()
    }

    fn run(
        &mut self,
        kernel: &KernelSpec,
        request: &RunRequest,
    ) -> std::result::Result<Batch, GpuError> {
        let lost_before = self.lost || self.inner.lost.borrow().is_some();
        let ran = self.gpu.run(kernel, request);
        if let Err(GpuError::Lost(why)) = &ran {
            self.lost = true;
            if !lost_before {
                self.inner.losses.lost_while_running(kernel, why);
            }
        }
        ran
    }

    fn telemetry(&mut self) -> Telemetry {
        self.gpu.telemetry()
    }

    fn delay_probe(&mut self, sms: u32, launches: u32) -> std::result::Result<Vec<u64>, GpuError> {
        let probed = self.gpu.delay_probe(sms, launches);
        // The device's own loss, no kernel's: nothing is charged, now or after.
        self.lost |= matches!(probed, Err(GpuError::Lost(_)));
        probed
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
pub(super) fn commit(
    store: &Store,
    inner: &Inner,
    results: Vec<TaggedCalibration>,
    verb: &str,
) -> JobEnd {
    let names = kernel_names(&results);
    let Staged {
        mut next,
        inserted,
        tags,
    } = Staged::of(inner, results);
    let not_synced = match save(store, inner, &next) {
        Ok(not_synced) => not_synced,
        Err(failed) => return failed,
    };
    // On disk now: their launch times can rest in the spill file, as loaded ones do.
    for (tag, name) in &inserted {
        if let Some(cal) = next.tables_mut(*tag).get_mut(name) {
            store.spill_times(cal);
        }
    }
    monitor::publish(inner, Arc::new(next), &inserted);
    health_after_commit(inner, not_synced.as_deref());
    let _ = inner.events.send(Event::BoundsChanged {
        kernels: names.clone(),
    });
    let tags: Vec<String> = tags.iter().map(ToString::to_string).collect();
    (
        JobState::Done,
        format!("{verb} {} ({})", names.join(", "), tags.join(", ")),
    )
}

/// The kernels of a job's results, each once, in the order the job finished them: the names its
/// signal and its message give.
fn kernel_names(results: &[TaggedCalibration]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (_, name, _) in results {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// The snapshot a job's results make, before it is saved or published.
struct Staged {
    /// The current snapshot with the results in.
    next: Calibration,
    /// Each (interference, kernel) put in, in order: what is spilled and published.
    inserted: Vec<(Interference, String)>,
    /// The interferences the results were measured under, each once, for the job's message.
    tags: Vec<Interference>,
}

impl Staged {
    /// A copy of the snapshot served now (its read lock held only to copy it) with `results` in.
    fn of(inner: &Inner, results: Vec<TaggedCalibration>) -> Staged {
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
        Staged {
            next,
            inserted,
            tags,
        }
    }
}

/// Saves `next`: `Ok` with why it is not synced where it reached the disk unsynced, `Err` with
/// the job's failure (the job fails, old bounds kept) where it was not saved.
fn save(
    store: &Store,
    inner: &Inner,
    next: &Calibration,
) -> std::result::Result<Option<String>, JobEnd> {
    match store.save(next) {
        Ok(_) => Ok(None),
        // On disk already: published, so that memory and the file agree (kept back, a restart
        // would serve what the job said it had not published, and the next save would revert it).
        Err(e @ crate::store::StoreError::NotSynced { .. }) => Ok(Some(e.to_string())),
        Err(e) => Err(fail(
            inner,
            format!("{e}; new bounds not published, old bounds kept"),
        )),
    }
}

/// Health once new bounds are published: degraded, with the error logged, where the save did not
/// reach the disk safely; else ok.
fn health_after_commit(inner: &Inner, not_synced: Option<&str>) {
    match not_synced {
        Some(why) => {
            tracing::error!("{why}; the new bounds are published");
            set_health(
                inner,
                format!("degraded: {why}; the new bounds are published"),
            );
        }
        None => set_health(inner, "ok".into()),
    }
}

/// Record a lost device (the watch wakes the daemon's main task, which exits).
fn note_lost(inner: &Inner, error: &calibrate::CalibrateError) {
    use crate::measure::MeasureError;
    if let calibrate::CalibrateError::Measure(MeasureError::Gpu(GpuError::Lost(why))) = error {
        set_health(inner, format!("failed: device lost ({why})"));
        inner.lost.send_replace(Some(why.clone()));
    }
}

pub(super) fn fail(inner: &Inner, message: String) -> JobEnd {
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

pub(super) fn set_job(inner: &Inner, id: u64, update: impl FnOnce(&mut JobStatus)) {
    if let Some((status, _)) = inner
        .jobs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(&id)
    {
        update(status);
    }
}
