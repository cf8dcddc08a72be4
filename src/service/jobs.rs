//! The job queue as callers see it: queue a recalibration, list the jobs, cancel one, and stop
//! the worker at shutdown. Every decision about a job's state is taken under the jobs lock,
//! where the worker (`worker.rs`) claims a job to start it.

use super::worker::finish_unstarted;
use super::*;

/// Why a job is refused while the daemon stops.
const STOPPING: &str = "the daemon is stopping; accepted: retry once it has started again";

impl Service {
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
        let _in_span = self.in_span();
        let (specs, held_back) = self.kernel_specs(kernels)?;
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
            held_back,
        };
        let id = self.enqueue(work, names, tags)?;
        tracing::info!(job = id, "recalibration queued");
        Ok(id)
    }

    /// Queue `work` as a new job and hand it to the worker, or say why not (the daemon is
    /// stopping, the queue is full, or the worker has stopped).
    pub(super) fn enqueue(
        &self,
        work: Work,
        kernels: Vec<String>,
        tags: Vec<Interference>,
    ) -> Result<u64> {
        if self.inner.stopping.load(Ordering::SeqCst) {
            return Err(ServiceError::Busy(STOPPING.into()));
        }
        self.take_queue_place()?;
        let status = JobStatus {
            state: JobState::Queued,
            progress: 0.0,
            message: "queued".into(),
            kernels,
            interference: tags,
        };
        let (id, refused) = self.list_and_send(work, status);
        if let Some(why) = refused {
            self.inner.pending.fetch_sub(1, Ordering::SeqCst);
            self.inner.job_record.ended(id, false);
            return Err(ServiceError::Busy(why.into()));
        }
        Ok(id)
    }

    /// One of the `max_queued_jobs` places in the queue, or `Busy` when all are taken.
    fn take_queue_place(&self) -> Result<()> {
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
                "{limit} calibration jobs are already waiting; accepted: retry after a JobFinished signal (`{} jobs` or Calibration1.ListJobs() shows the queue)",
                self.wcetctl()
            )));
        }
        Ok(())
    }

    /// Numbers `work`, lists it as `status` and sends it to the worker: its id, and why it was
    /// refused, if it was.
    fn list_and_send(&self, work: Work, status: JobStatus) -> (u64, Option<&'static str>) {
        // Numbered, queued and sent under the jobs lock, where `stop_worker` sends the end
        // marker: numbered outside it, two callers at once could queue their jobs in the other
        // order, and the later job's result be replaced by the earlier's (a hunt ran 16
        // imports of one kernel at once: job 14 ran before 8 to 13). The record is written
        // under it too; an enqueue is rare, and no bound query takes this lock.
        let mut jobs = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let id = self.inner.next_job.fetch_add(1, Ordering::SeqCst);
        // Recorded before anyone can see the job, so a cancel cannot come before the record.
        self.inner
            .job_record
            .queued(id, work.doing(), &status.kernels);
        let cancel = Arc::new(AtomicBool::new(false));
        let job = Job { id, work, cancel };
        let refused = if self.inner.stopping.load(Ordering::SeqCst) {
            Some(STOPPING)
        } else {
            jobs.insert(id, (status, Arc::clone(&job.cancel)));
            let sent = self.worker.send(Some(job));
            sent.is_err().then(|| {
                // Not left listed as queued forever: the job ends here, and says why.
                let why =
                    "the GPU worker has stopped; restart the daemon (`systemctl restart wcetd`)";
                if let Some((s, _)) = jobs.get_mut(&id) {
                    s.state = JobState::Failed;
                    s.message = why.into();
                }
                why
            })
        };
        (id, refused)
    }

    /// The kernels `names` asks for (every one when empty but those held back for losing the
    /// device, which must be named), and the names of those held back.
    fn kernel_specs(&self, names: &[String]) -> Result<(Vec<KernelSpec>, Vec<String>)> {
        let catalogue = self.catalogue();
        if names.is_empty() {
            return Ok(self.automatic(catalogue.iter()));
        }
        let mut specs: Vec<KernelSpec> = Vec::new();
        for name in names {
            self.known(name)?;
            let spec = catalogue.get(name).ok_or_else(|| {
                ServiceError::InvalidArgs(format!(
                    "kernel `{name}` was calibrated elsewhere (imported) and has nothing to run here; accepted for recalibration: {}",
                    names_in_a_message(&catalogue.names(), &self.wcetctl())
                ))
            })?;
            if !specs.iter().any(|s| s.name == spec.name) {
                specs.push(spec.clone());
            }
        }
        Ok((specs, Vec::new()))
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
            .ok_or_else(|| no_such_job(id, &jobs, &self.wcetctl()))
    }

    pub fn cancel_job(&self, id: u64) -> Result<()> {
        // Its lines (a job ended before it started) name the GPU, as every job's do.
        let _in_span = self.in_span();
        let mut jobs = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (status, cancel) = jobs
            .get(&id)
            .ok_or_else(|| no_such_job(id, &jobs, &self.wcetctl()))?;
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
        // Its lines (a job ended before it started) name the GPU, as every job's do.
        let _in_span = self.in_span();
        {
            let mut jobs = self
                .inner
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.inner.stopping.store(true, Ordering::SeqCst);
            for (_, cancel) in jobs.values() {
                cancel.store(true, Ordering::SeqCst);
            }
            // Queued jobs end now, as `cancel_job` ends one, not when the worker reaches them:
            // a worker that does not stop in time would leave them `queued`, and unannounced.
            let queued: Vec<u64> = jobs
                .iter()
                .filter(|(_, (status, _))| status.state == JobState::Queued)
                .map(|(&id, _)| id)
                .collect();
            for &id in &queued {
                finish_unstarted(&self.inner, &mut jobs, id);
            }
            drop(jobs);
            for id in queued {
                self.inner.job_record.ended(id, false);
            }
            let _sent_under = self
                .inner
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Behind every job, each of which has ended or ends at once as cancelled; none is
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
}

/// `wcetctl` starts the command it advises ([`super::ServiceConfig::wcetctl`]).
fn no_such_job(
    id: u64,
    jobs: &BTreeMap<u64, (JobStatus, Arc<AtomicBool>)>,
    wcetctl: &str,
) -> ServiceError {
    let known: Vec<String> = jobs.keys().map(u64::to_string).collect();
    ServiceError::InvalidArgs(format!(
        "no job {id}; accepted: a job number returned by Recalibrate, as `{wcetctl} jobs` or Calibration1.ListJobs() lists them ({})",
        if known.is_empty() {
            "none yet".into()
        } else {
            known.join(", ")
        }
    ))
}
