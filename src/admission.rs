//! Admission analysis: does a task set of GPU jobs meet its deadlines, given the per-launch bounds?
//! Owns the task model, input validation, which bounds a verdict may rest on ([`Policy`]), and the
//! three analyses behind `org.wcetd.Admission1`: distinct partitions ([`check_distinct`]), one
//! shared partition under non-preemptive fixed priority ([`check_shared`]), and partition sizing
//! ([`suggest`]). Pure: bounds come from a [`BoundSource`], so the analyses are tested against
//! hand-computed tables, and the service is one source among others (its implementation is in
//! `admission_bus.rs`, so this module knows nothing above the analysis). The model and its
//! assumptions are in `docs/admission.md`.
//!
//! Fail closed: tasks on distinct partitions run at once, so their verdict uses bounds measured
//! under contention, and a set without them is not admitted. A stale bound, or one stated at a
//! weaker exceedance than configured, is not admitted unless the caller's [`Policy`] accepts it;
//! either way the verdict says which.

use std::collections::{BTreeSet, HashMap};

use crate::gpu::Interference;
use crate::request_error::{how_to_calibrate, Result, ServiceError};

/// One periodic task: each job launches `kernels` in order on a partition of `sms` SMs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub name: String,
    pub kernels: Vec<String>,
    pub sms: u32,
    pub period_ns: u64,
    pub deadline_ns: u64,
}

/// A task whose partition size is to be chosen ([`suggest`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsized {
    pub name: String,
    pub kernels: Vec<String>,
    pub period_ns: u64,
    pub deadline_ns: u64,
}

/// The analysis of one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    pub name: String,
    /// Response-time bound; `u64::MAX` when its priority level is overloaded or its analysis
    /// passed [`WORK_LIMIT`] (no finite bound found).
    pub response_ns: u64,
    /// The realisable partition size the bounds were taken at.
    pub partition_sms: u32,
    /// deadline - response; negative when the deadline is missed.
    pub slack_ns: i64,
    pub deadline_ns: u64,
    /// The weakest guarantee among the bounds used: the largest exceedance per launch...
    pub exceedance: f64,
    /// ...`Isolated` unless every bound used covers a stressor on the other SMs...
    pub interference: Interference,
    /// ...and whether any was measured under another device fingerprint.
    pub stale: bool,
    /// At most the probability that one job's response exceeds `response_ns`: the union bound
    /// over every launch the response rests on (each launch's stated exceedance, summed; with
    /// one partition shared, every launch of the level's busy period at the set's weakest
    /// exceedance, and the one that blocks it), capped at 1, and 1 where no response is bounded.
    /// A per-launch 1e-9 is not a per-job 1e-9 for a job of a hundred launches.
    pub job_exceedance: f64,
}

/// The verdict on a task set.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub admitted: bool,
    pub tasks: Vec<TaskResult>,
    /// Why the set was refused whatever its timing: bounds it may not rest on. Empty when the
    /// bounds are good enough (or accepted by the policy).
    pub refused: Vec<String>,
    /// Deadlines missed and partitions that do not fit.
    pub missed: Vec<String>,
    /// Weaker bounds the caller's [`Policy`] accepted, each said.
    pub accepted: Vec<String>,
    /// Every bound the verdict rests on, once per (kernel, partition), in the order first used:
    /// enough to find each again (`GetBoundInfo`) and to tell a verdict on measured bounds from
    /// one on fitted ones.
    pub rests_on: Vec<UsedBound>,
}

/// A bound a verdict used, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct UsedBound {
    pub kernel: String,
    pub partition_sms: u32,
    pub bound_ns: u64,
    pub origin: BoundOrigin,
}

/// Where a bound came from, as `GetBoundInfo` says it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoundOrigin {
    /// The calibration's id; empty where none is named.
    pub calibration: String,
    /// What the bound at this size rests on: `measured`, `verified`, `fitted`, `extrapolated` or
    /// `observed` (a launch time reported from production).
    pub basis: String,
    /// The interference of the calibration it came from.
    pub interference: Interference,
}

impl Verdict {
    /// Every reason the set is not admitted (empty when it is).
    pub fn reasons(&self) -> Vec<String> {
        self.refused.iter().chain(&self.missed).cloned().collect()
    }

    /// The verdict as `Check` and `CheckShared` answer it, whose reply has no room for a reason:
    /// a set refused for its bounds is an error that says why (nothing is admitted on error).
    pub fn or_refusal(self) -> Result<Verdict> {
        if self.refused.is_empty() {
            return Ok(self);
        }
        Err(ServiceError::NotCalibrated(format!(
            "not admitted: {} (CheckDetailed accepts weaker bounds on request and reports them per task)",
            self.refused.join("; ")
        )))
    }
}

/// Which bounds a verdict may rest on, beyond what the daemon is configured for.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Policy {
    /// Admit on bounds measured under another device fingerprint.
    pub accept_stale: bool,
    /// The weakest exceedance per launch to admit on; `None`: the configured one.
    pub accept_exceedance: Option<f64>,
}

impl Policy {
    fn check(&self) -> Result<()> {
        match self.accept_exceedance {
            Some(p) if !(p > 0.0 && p < 1.0) => Err(ServiceError::InvalidArgs(format!(
                "option accept_exceedance is {p}; accepted: a probability per launch strictly between 0 and 1"
            ))),
            _ => Ok(()),
        }
    }
}

/// One launch's bound as admission uses it, with what it promises.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelBound {
    pub bound_ns: u64,
    /// Exceedance per launch the bound is stated at.
    pub exceedance: f64,
    pub stale: bool,
    /// Measured on another GPU model (a stale calibration carried over from it): no evidence
    /// about this one, so never admitted, even when stale bounds are accepted.
    pub other_model: bool,
    /// The current SM clock could not be read, so the bound is not scaled to it.
    pub clock_unread: bool,
    /// What makes a stale bound current again.
    pub remedy: Remedy,
    /// Whether the daemon can measure the kernel (not only import it): how a missing bound is got.
    pub runnable: bool,
    pub origin: BoundOrigin,
}

/// What makes a stale bound current again, as admission advises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Remedy {
    /// Measure it again on this device.
    #[default]
    Recalibrate,
    /// Its module or fill files changed on disk since its manifest was loaded: reloading the
    /// kernels calibrates it (a recalibration alone is refused).
    Reload,
    /// Known only from imported samples or a bundle: nothing to run here, so import measurements
    /// made under this configuration.
    ImportAgain,
    /// A queued or running calibration job (this number) measures it: current when it ends.
    BeingRecalibrated(u64),
}

/// Where the analyses get per-launch bounds and the device's geometry from.
pub trait BoundSource {
    fn total_sms(&self) -> u32;
    /// Realisable partition sizes, ascending.
    fn partition_sizes(&self) -> Vec<u32>;
    /// The exceedance per launch bounds are configured to be stated at.
    fn configured_exceedance(&self) -> f64;
    /// How a `wcetctl` command a verdict advises starts: the bounds are one device's, and so
    /// must be the recalibration or reload that makes them usable
    /// ([`crate::service::ServiceConfig::wcetctl`]).
    fn wcetctl(&self) -> String;
    /// The bound of one launch of `kernel` on exactly `partition` SMs (a realisable size),
    /// measured under `interference`, or `GetBound`'s when `None` (the larger of the tags', and
    /// held up by launch times reported under a tag that has no calibration); `NotCalibrated`
    /// when there is no such calibration.
    fn bound(
        &self,
        kernel: &str,
        partition: u32,
        interference: Option<Interference>,
    ) -> Result<KernelBound>;
}

/// Past this many analysed jobs or fixed-point steps a level is declared unschedulable: the verdict
/// stays safe (a rejection), and a request cannot keep the daemon busy.
const WORK_LIMIT: u64 = 100_000;
/// Most tasks in one set, and most kernel launches in one set (its tasks' kernels together): a
/// request is analysed off the bus's threads, but it must still end in bounded time.
pub const MAX_TASKS: usize = 1024;
pub const MAX_LAUNCHES: usize = 65_536;

fn invalid(task: &str, field: &str, what: String) -> ServiceError {
    ServiceError::InvalidArgs(format!("task `{task}`, field {field}: {what}"))
}

/// Prefix a bound lookup's error with the task and kernel it was for, keeping its kind.
fn in_task(task: &str, index: usize, e: ServiceError) -> ServiceError {
    let at = |m: String| format!("task `{task}`, field kernels[{index}]: {m}");
    match e {
        ServiceError::InvalidArgs(m) => ServiceError::InvalidArgs(at(m)),
        ServiceError::UnknownKernel(m) => ServiceError::UnknownKernel(at(m)),
        ServiceError::NotCalibrated(m) => ServiceError::NotCalibrated(at(m)),
        ServiceError::InvalidPartition(m) => ServiceError::InvalidPartition(at(m)),
        ServiceError::Infeasible(m) => ServiceError::Infeasible(at(m)),
        ServiceError::Busy(m) => ServiceError::Busy(at(m)),
        ServiceError::AccessDenied(m) => ServiceError::AccessDenied(at(m)),
        ServiceError::Failed(m) => ServiceError::Failed(at(m)),
    }
}

/// Check what does not depend on the device: names, kernel lists, periods and deadlines.
fn validate_timing<'a>(
    tasks: impl Iterator<Item = (&'a str, &'a [String], u64, u64)>,
) -> Result<()> {
    let mut names = BTreeSet::new();
    let (mut count, mut launches) = (0, 0);
    for (name, kernels, period, deadline) in tasks {
        count += 1;
        launches += kernels.len();
        if count > MAX_TASKS || launches > MAX_LAUNCHES {
            return Err(ServiceError::InvalidArgs(format!(
                "the task set is too large (task `{name}` is number {count}, with {launches} kernel launches so far); accepted: at most {MAX_TASKS} tasks and {MAX_LAUNCHES} kernel launches in one set"
            )));
        }
        if name.is_empty() {
            return Err(invalid(
                "",
                "name",
                "is empty; accepted: a non-empty, unique name".into(),
            ));
        }
        if !names.insert(name) {
            return Err(invalid(
                name,
                "name",
                "appears twice; accepted: unique task names".into(),
            ));
        }
        if kernels.is_empty() {
            return Err(invalid(
                name,
                "kernels",
                "is empty; accepted: at least one kernel per job".into(),
            ));
        }
        if period == 0 {
            return Err(invalid(
                name,
                "period_ns",
                "is 0; accepted: a positive number of nanoseconds".into(),
            ));
        }
        if deadline == 0 || deadline > period {
            return Err(invalid(
                name,
                "deadline_ns",
                format!("is {deadline}; accepted: 1 to period_ns ({period}) (one job at a time per task)"),
            ));
        }
    }
    if count == 0 {
        return Err(ServiceError::InvalidArgs(
            "the task set is empty; accepted: at least one task".into(),
        ));
    }
    Ok(())
}

/// The realisable partition a task's `sms` gives (the largest realisable size not above it).
fn partition_of(src: &dyn BoundSource, task: &Task) -> Result<u32> {
    let sizes = src.partition_sizes();
    let total = src.total_sms();
    let accepted = || {
        format!(
            "accepted: {} to {total} (realisable sizes: {sizes:?})",
            sizes.first().copied().unwrap_or(0)
        )
    };
    if task.sms > total {
        return Err(ServiceError::InvalidPartition(format!(
            "task `{}`, field sms: {} is more than the device's {total} SMs; {}",
            task.name,
            task.sms,
            accepted()
        )));
    }
    sizes
        .iter()
        .rev()
        .copied()
        .find(|&p| p <= task.sms)
        .ok_or_else(|| {
            ServiceError::InvalidPartition(format!(
                "task `{}`, field sms: {} is below the smallest realisable partition; {}",
                task.name,
                task.sms,
                accepted()
            ))
        })
}

/// Bound lookups for one verdict: which bounds it may rest on, and what it had to say about them.
struct Lookup<'a> {
    src: &'a dyn BoundSource,
    policy: Policy,
    /// Tasks run at once on distinct partitions: only bounds measured under contention hold.
    co_running: bool,
    /// The command a refusal's advice names: `admit --shared` for one shared partition, whose
    /// advice named plain `admit`, which run as printed checked another layout (a hunt found it).
    admit: &'static str,
    /// The (isolated, contended) bounds already looked up, by (kernel, partition): a set may
    /// launch one kernel many times, and a lookup is the costly part of a verdict.
    seen: HashMap<(String, u32), Bounds>,
    /// The bound each (kernel, partition) contributed, in the order first looked up.
    rests_on: Vec<UsedBound>,
    refused: Vec<String>,
    accepted: Vec<String>,
    /// Whether `accepted` says already that the clock could not be read.
    clock_said: bool,
}

/// A task's kernels' bounds at one partition, and the weakest guarantee among them.
struct TaskBounds {
    segments: Vec<u64>,
    exceedance: f64,
    /// The launches' exceedances summed (each launch's own, not the weakest).
    exceedance_sum: f64,
    interference: Interference,
    stale: bool,
}

impl TaskBounds {
    fn total(&self) -> u64 {
        self.segments.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// The bounds one launch may rest on: those of its kernel at its partition that exist
/// (isolated, contended, `GetBound`'s), and the largest, its segment of the task.
struct LaunchBounds {
    bound_ns: u64,
    contended_exists: bool,
    used: Vec<KernelBound>,
}

/// One kernel's bounds at one size: isolated, contended, and `GetBound`'s.
type Bounds = (
    Option<KernelBound>,
    Option<KernelBound>,
    Option<KernelBound>,
);

impl<'a> Lookup<'a> {
    fn new(
        src: &'a dyn BoundSource,
        policy: Policy,
        co_running: bool,
        admit: &'static str,
    ) -> Result<Lookup<'a>> {
        policy.check()?;
        Ok(Lookup {
            src,
            policy,
            co_running,
            admit,
            seen: HashMap::new(),
            rests_on: Vec::new(),
            refused: Vec::new(),
            accepted: Vec::new(),
            clock_said: false,
        })
    }

    /// Per-launch bounds of a task's kernels, in launch order, at `partition`: the safest of the
    /// isolated and contended bounds that exist and `GetBound`'s (which launch times reported
    /// under a tag with no calibration hold up: a contended time seen in production counts
    /// before any contended calibration exists). Bounds the verdict may not rest on are noted in
    /// `refused` (or, where the policy accepts them, `accepted`).
    fn task(&mut self, task: &str, kernels: &[String], partition: u32) -> Result<TaskBounds> {
        let mut out = TaskBounds {
            segments: Vec::with_capacity(kernels.len()),
            exceedance: 0.0,
            exceedance_sum: 0.0,
            interference: Interference::Contended,
            stale: false,
        };
        for (i, kernel) in kernels.iter().enumerate() {
            let launch = self
                .launch(kernel, partition)
                .map_err(|e| in_task(task, i, e))?;
            out.segments.push(launch.bound_ns);
            self.judge_launch(task, kernel, partition, &launch, &mut out);
        }
        Ok(out)
    }

    /// The bounds one launch of `kernel` at `partition` may rest on, and the largest, which is
    /// noted in `rests_on` the first time the (kernel, partition) is looked up.
    fn launch(&mut self, kernel: &str, partition: u32) -> Result<LaunchBounds> {
        let first_use = !self.seen.contains_key(&(kernel.to_string(), partition));
        let (isolated, contended, served) = self.bounds_of(kernel, partition)?;
        let contended_exists = contended.is_some();
        let used: Vec<KernelBound> = isolated
            .into_iter()
            .chain(contended)
            .chain(served)
            .collect();
        // The first of the largest: the tagged bound where `GetBound`'s equals it.
        let largest = used
            .iter()
            .reduce(|a, b| if b.bound_ns > a.bound_ns { b } else { a });
        let Some(largest) = largest else {
            // Neither exists: the lookup's own error says so and how to get one. Untagged, so
            // that it advises measuring every interference the daemon calibrates (asked for the
            // isolated one, it advised that alone, and a co-running set was then refused again
            // for want of the contended one: a hunt).
            return Err(self
                .src
                .bound(kernel, partition, None)
                .err()
                .unwrap_or_else(|| {
                    ServiceError::NotCalibrated(format!("kernel `{kernel}` is not calibrated"))
                }));
        };
        let bound_ns = largest.bound_ns;
        if first_use {
            self.rests_on.push(UsedBound {
                kernel: kernel.to_string(),
                partition_sms: partition,
                bound_ns: largest.bound_ns,
                origin: largest.origin.clone(),
            });
        }
        Ok(LaunchBounds {
            bound_ns,
            contended_exists,
            used,
        })
    }

    /// Add one launch's guarantee to its task's (`out`), and note in `refused` (or, where the
    /// policy accepts them, `accepted`) what about its bounds the verdict may not rest on: no
    /// contended bound where tasks run at once, a stale bound, a weaker exceedance, an unread
    /// clock.
    fn judge_launch(
        &mut self,
        task: &str,
        kernel: &str,
        partition: u32,
        launch: &LaunchBounds,
        out: &mut TaskBounds,
    ) {
        let used = &launch.used;
        let exceedance = used.iter().map(|b| b.exceedance).fold(0.0, f64::max);
        let stale = used.iter().any(|b| b.stale);
        let remedy = used
            .iter()
            .find(|b| b.stale)
            .map_or(Remedy::Recalibrate, |b| b.remedy);
        out.exceedance = out.exceedance.max(exceedance);
        out.exceedance_sum += exceedance;
        out.stale |= stale;
        let what = format!("task `{task}`, kernel `{kernel}` at {partition} SMs");
        if !launch.contended_exists {
            out.interference = Interference::Isolated;
            if self.co_running {
                let wcetctl = self.src.wcetctl();
                self.refused.push(format!(
                    "{what}: no contended bound; tasks on distinct partitions run at once, so their verdict needs bounds measured with a memory stressor on the other SMs (an isolated bound can be many times too low); {}",
                    how_to_calibrate(
                        &wcetctl,
                        kernel,
                        Some(Interference::Contended),
                        used.iter().all(|b| b.runnable)
                    )
                ));
            }
        }
        if stale {
            let other_model = used.iter().any(|b| b.stale && b.other_model);
            let runnable = used.iter().all(|b| b.runnable);
            self.judge_stale(&what, kernel, remedy, other_model, runnable);
        }
        self.judge_exceedance(&what, exceedance);
        if used.iter().any(|b| b.clock_unread) && !self.clock_said {
            self.clock_said = true;
            self.accepted.push("bounds are not scaled to the current SM clock, which could not be read (none read since the daemon started, while the GPU was idle, or no NVML): they hold at the clock they were calibrated at, and a lower clock would make them too low".to_string());
        }
    }

    /// `kernel`'s (isolated, contended) bounds at `partition`, those that exist.
    fn bounds_of(&mut self, kernel: &str, partition: u32) -> Result<Bounds> {
        let key = (kernel.to_string(), partition);
        if let Some(found) = self.seen.get(&key) {
            return Ok(found.clone());
        }
        let tagged = |tag| optional(self.src.bound(kernel, partition, tag));
        let (isolated, contended) = (
            tagged(Some(Interference::Isolated))?,
            tagged(Some(Interference::Contended))?,
        );
        // `GetBound` refuses where a tag's table has no entry at this size though the kernel is
        // calibrated (it answers for both tags): so does the verdict. Taken for no such tag, a
        // set was admitted on the isolated bound a third of the contended one a size below (a
        // review found it).
        let served = match self.src.bound(kernel, partition, None) {
            Err(e) if isolated.is_some() || contended.is_some() => return Err(e),
            served => optional(served)?,
        };
        let found = (isolated, contended, served);
        self.seen.insert(key, found.clone());
        Ok(found)
    }

    /// A stale bound: refused, or accepted (and said) where the policy accepts stale bounds,
    /// with what makes it current; one measured on another GPU model is refused whatever the
    /// policy, since it is no evidence about this one.
    fn judge_stale(
        &mut self,
        what: &str,
        kernel: &str,
        remedy: Remedy,
        other_model: bool,
        runnable: bool,
    ) {
        let wcetctl = self.src.wcetctl();
        if other_model {
            self.refused.push(format!(
                "{what}: bound was measured on another GPU model and is no evidence about this one, so it is not admitted even with accept_stale; {}",
                how_to_calibrate(&wcetctl, kernel, None, runnable)
            ));
            return;
        }
        let note = match remedy {
            Remedy::Reload => format!(
                "{what}: bound is stale (a module or fill file of the kernel changed on disk since its manifest was loaded); reload with `{wcetctl} kernels reload` or Calibration1.ReloadKernels(), which calibrates it"
            ),
            Remedy::BeingRecalibrated(job) => format!(
                "{what}: bound is stale, and calibration job {job} is measuring it now (current when the job ends: `{wcetctl} jobs`)"
            ),
            Remedy::ImportAgain => format!(
                "{what}: bound is stale (imported for another device, driver or clock policy, and the daemon has nothing to run for it); import measurements made under this configuration (`{wcetctl} import` or `{wcetctl} import-calibration`)"
            ),
            Remedy::Recalibrate => format!(
                "{what}: bound is stale (measured under another device, driver or clock policy, or for other code of the kernel); recalibrate with `{wcetctl} recalibrate {kernel}` or Calibration1.Recalibrate([\"{kernel}\"])"
            ),
        };
        if self.policy.accept_stale {
            self.accepted
                .push(format!("{note}; accepted by accept_stale"));
        } else {
            self.refused.push(format!(
                "{note}, or accept it with option accept_stale ({wcetctl} {} --accept-stale)",
                self.admit
            ));
        }
    }

    /// A bound stated at a weaker exceedance than the caller's `accept_exceedance` (the
    /// configured one when not given) is refused; one weaker than the configured but within the
    /// caller's is accepted, and said. A caller asking for a stricter one than configured gets it.
    fn judge_exceedance(&mut self, what: &str, exceedance: f64) {
        let configured = self.src.configured_exceedance();
        let acceptable = self.policy.accept_exceedance.unwrap_or(configured);
        if crate::model::weaker_than(exceedance, acceptable) {
            // What it was judged against: the caller's own limit when one was given, even where
            // the configured one is refused too.
            let than = match self.policy.accept_exceedance {
                None => format!("the configured {configured:e}"),
                Some(_) => format!("the accept_exceedance {acceptable:e} asked for"),
            };
            let wcetctl = self.src.wcetctl();
            self.refused.push(format!(
                "{what}: bound stated at exceedance {exceedance:e} per launch, weaker than {than}; accept it with option accept_exceedance >= {exceedance:e} ({wcetctl} {} --accept-exceedance {exceedance:e})",
                self.admit
            ));
        } else if crate::model::weaker_than(exceedance, configured) {
            self.accepted.push(format!(
                "{what}: bound stated at exceedance {exceedance:e} per launch, weaker than the configured {configured:e}; accepted by accept_exceedance {acceptable:e}"
            ));
        }
    }

    fn verdict(self, tasks: Vec<TaskResult>, mut missed: Vec<String>) -> Verdict {
        for t in tasks.iter().filter(|t| t.slack_ns < 0) {
            missed.push(if t.response_ns == u64::MAX {
                format!(
                    "task `{}`: no finite response bound found (its priority level is overloaded, or its analysis passed {WORK_LIMIT} jobs or steps, where it stops and refuses)",
                    t.name
                )
            } else {
                format!(
                    "task `{}` misses its deadline: response bound {} ns > deadline {} ns",
                    t.name, t.response_ns, t.deadline_ns
                )
            });
        }
        // A kernel launched twice in a row by one task is said once.
        let (mut refused, mut accepted) = (self.refused, self.accepted);
        refused.dedup();
        accepted.dedup();
        Verdict {
            admitted: refused.is_empty() && missed.is_empty(),
            tasks,
            refused,
            missed,
            accepted,
            rests_on: self.rests_on,
        }
    }
}

/// A bound that may not exist: `NotCalibrated` is `None`, any other error stays one.
fn optional(r: Result<KernelBound>) -> Result<Option<KernelBound>> {
    match r {
        Ok(b) => Ok(Some(b)),
        Err(ServiceError::NotCalibrated(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn result(
    name: &str,
    partition: u32,
    response_ns: u64,
    deadline_ns: u64,
    b: &TaskBounds,
    launches_exceedance: f64,
) -> TaskResult {
    // u64::MAX is no finite bound (an overloaded level, or kernel bounds whose sum does not fit
    // in 64 bits), never a time that a deadline of u64::MAX could meet.
    let slack = if response_ns == u64::MAX {
        i128::from(i64::MIN)
    } else {
        i128::from(deadline_ns) - i128::from(response_ns)
    };
    TaskResult {
        name: name.to_string(),
        response_ns,
        partition_sms: partition,
        slack_ns: slack.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
        deadline_ns,
        exceedance: b.exceedance,
        interference: b.interference,
        stale: b.stale,
        job_exceedance: if response_ns == u64::MAX {
            1.0
        } else {
            launches_exceedance.min(1.0)
        },
    }
}

fn validate_sized(tasks: &[Task]) -> Result<()> {
    validate_timing(tasks.iter().map(|t| {
        (
            t.name.as_str(),
            t.kernels.as_slice(),
            t.period_ns,
            t.deadline_ns,
        )
    }))
}

/// Each task alone on its own partition: a job's response is the sum of its kernels' bounds.
/// With two tasks or more the partitions run at once, so the bounds must cover contention.
pub fn check_distinct(src: &dyn BoundSource, tasks: &[Task], policy: Policy) -> Result<Verdict> {
    validate_sized(tasks)?;
    let partitions = tasks
        .iter()
        .map(|t| partition_of(src, t))
        .collect::<Result<Vec<_>>>()?;
    let mut lookup = Lookup::new(src, policy, tasks.len() > 1, "admit")?;
    let mut results = Vec::with_capacity(tasks.len());
    for (task, &p) in tasks.iter().zip(&partitions) {
        let bounds = lookup.task(&task.name, &task.kernels, p)?;
        results.push(result(
            &task.name,
            p,
            bounds.total(),
            task.deadline_ns,
            &bounds,
            bounds.exceedance_sum,
        ));
    }
    let used: u64 = partitions.iter().map(|&p| u64::from(p)).sum();
    let total = src.total_sms();
    let mut missed = Vec::new();
    if used > u64::from(total) {
        missed.push(format!(
            "the partitions need {used} SMs together but the device has {total}"
        ));
    }
    Ok(lookup.verdict(results, missed))
}

/// All tasks on one partition, non-preemptive fixed priority at kernel granularity, array order
/// is priority (first highest).
///
/// One kernel runs at a time and the rest of the device is not used by the set, so bounds of
/// either interference hold (the safer of those that exist is used).
pub fn check_shared(src: &dyn BoundSource, tasks: &[Task], policy: Policy) -> Result<Verdict> {
    validate_sized(tasks)?;
    same_sms(tasks)?;
    let partition = partition_of(src, &tasks[0])?;
    let mut lookup = Lookup::new(src, policy, false, "admit --shared")?;
    let bounds = tasks
        .iter()
        .map(|t| lookup.task(&t.name, &t.kernels, partition))
        .collect::<Result<Vec<_>>>()?;
    let jobs = shared_jobs(tasks, &bounds);
    let level = Level::of(&jobs);
    let budget = Budget::new(WORK_BUDGET);
    let weakest = weakest_of(&bounds);
    let results = shared_results(tasks, partition, &level, &budget, &weakest);
    let mut missed = Vec::new();
    if budget.exhausted() {
        missed.push(format!(
            "the analysis stopped at its limit of {WORK_BUDGET} units of work, so the tasks it had not finished are not admitted; accepted: fewer tasks on one partition, or periods further from full utilisation"
        ));
    }
    Ok(lookup.verdict(results, missed))
}

/// Refuses a shared set whose tasks ask different sizes: they all run on one partition, so the
/// first task's size is the set's and any other is a mistake in the file, named as such.
fn same_sms(tasks: &[Task]) -> Result<()> {
    let sms = tasks[0].sms;
    if let Some(t) = tasks.iter().find(|t| t.sms != sms) {
        return Err(invalid(
            &t.name,
            "sms",
            format!("is {} but the first task asks {sms}; accepted: the same sms for every task of a shared partition", t.sms),
        ));
    }
    Ok(())
}

/// The tasks of a shared partition as the response-time analysis sees them: each its kernels'
/// bounds as non-preemptive segments, with its period and deadline.
fn shared_jobs(tasks: &[Task], bounds: &[TaskBounds]) -> Vec<Job> {
    tasks
        .iter()
        .zip(bounds)
        .map(|(t, b)| Job {
            segments: b.segments.clone(),
            period: t.period_ns,
            deadline: t.deadline_ns,
        })
        .collect()
}

/// The weakest guarantee among the tasks' bounds: the largest exceedance, the weaker
/// interference, and stale when any is.
///
/// Each response rests on every task's bounds, not only its own: those of higher priority
/// preempt it, and the longest kernel of those below blocks it. So each task states the
/// weakest guarantee of the set (a reviewer saw a 1e-9 task whose response held a blocking
/// bound stated at 1e-4).
fn weakest_of(bounds: &[TaskBounds]) -> TaskBounds {
    bounds.iter().fold(
        TaskBounds {
            segments: Vec::new(),
            exceedance: 0.0,
            exceedance_sum: 0.0,
            interference: Interference::Contended,
            stale: false,
        },
        |all, b| TaskBounds {
            segments: Vec::new(),
            exceedance: all.exceedance.max(b.exceedance),
            exceedance_sum: 0.0,
            interference: all.interference.min(b.interference),
            stale: all.stale || b.stale,
        },
    )
}

/// Each task's response on the shared partition, in priority order (the order the analysis
/// spends its budget in), every one stated at the weakest guarantee of the set.
fn shared_results(
    tasks: &[Task],
    partition: u32,
    level: &Level,
    budget: &Budget,
    weakest: &TaskBounds,
) -> Vec<TaskResult> {
    tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let response = level.response(i, budget);
            // Every launch of the busy period at the weakest exceedance of the set.
            let launches = response.launches as f64 * weakest.exceedance;
            result(
                &t.name,
                partition,
                response.ns,
                t.deadline_ns,
                weakest,
                launches,
            )
        })
        .collect()
}

/// A task as the response-time analysis sees it: non-preemptive segments (kernel bounds) in order.
#[derive(Debug, Clone)]
pub struct Job {
    pub segments: Vec<u64>,
    pub period: u64,
    pub deadline: u64,
}

impl Job {
    fn wcet(&self) -> u64 {
        self.segments.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    fn last(&self) -> u64 {
        self.segments.last().copied().unwrap_or(0)
    }
}

/// Worst-case response time of `jobs[i]` under fixed-priority scheduling with preemption points
/// at kernel boundaries (jobs before `i` have higher priority). `u64::MAX` when unbounded.
#[cfg(test)]
fn response_time(jobs: &[Job], i: usize) -> u64 {
    let level = Level::of(jobs);
    level.response(i, &Budget::new(WORK_BUDGET)).ns
}

/// A response-time bound, and how many kernel launches it rests on.
struct Response {
    /// `u64::MAX` when unbounded.
    ns: u64,
    /// Every launch of the level's busy period and the one that blocks it: a bound on the
    /// launches whose bounds the response assumes. `u64::MAX` when unbounded.
    launches: u64,
}

impl Response {
    const UNBOUNDED: Response = Response {
        ns: u64::MAX,
        launches: u64::MAX,
    };
}

/// Fixed-point work, counted one per job whose demand a step adds up (a step over a level of
/// `i` jobs costs `i`), that one verdict may take: past them the tasks left are declared unschedulable (a rejection, so safe), and no
/// request can keep the daemon busy for long (1,024 tasks near utilisation 1 took an estimated
/// hour of CPU with only the per-level [`WORK_LIMIT`]).
const WORK_BUDGET: u64 = 50_000_000;

/// What is left of a verdict's [`WORK_BUDGET`], and whether a step was refused for want of it.
pub(crate) struct Budget {
    left: std::cell::Cell<u64>,
    ran_out: std::cell::Cell<bool>,
}

impl Budget {
    pub(crate) fn new(steps: u64) -> Budget {
        Budget {
            left: std::cell::Cell::new(steps),
            ran_out: std::cell::Cell::new(false),
        }
    }

    /// Take `n` steps; false (and nothing left) when fewer remain.
    fn spend(&self, n: u64) -> bool {
        let left = self.left.get();
        self.left.set(left.saturating_sub(n));
        if left < n {
            self.ran_out.set(true);
        }
        left >= n
    }

    /// Whether some step was refused: spending exactly what was left is not running out.
    pub(crate) fn exhausted(&self) -> bool {
        self.ran_out.get()
    }
}

/// The jobs of a set as the analysis reads them: each one's total and last segment, summed once.
struct Level<'a> {
    jobs: &'a [Job],
    wcet: Vec<u64>,
}

impl<'a> Level<'a> {
    fn of(jobs: &'a [Job]) -> Level<'a> {
        Level {
            jobs,
            wcet: jobs.iter().map(Job::wcet).collect(),
        }
    }

    /// Bril, Lukkien and Verhaegh's analysis for deferred preemption (the multi-segment form of
    /// Davis, Burns, Bril and Lukkien 2007): blocking `B` is the longest single kernel of a
    /// lower-priority task; the last kernel `F` is the final non-preemptive segment; every job
    /// `q` of the level-i busy period is checked, because a long final segment can push the next
    /// job later (self-pushing). `u64::MAX` when unbounded, or when `budget` runs out.
    fn response(&self, i: usize, budget: &Budget) -> Response {
        let me = &self.jobs[i];
        let blocking = self.jobs[i + 1..]
            .iter()
            .flat_map(|j| j.segments.iter().copied())
            .max()
            .unwrap_or(0);
        if self.overloaded(i) {
            return Response::UNBOUNDED;
        }
        let Some(busy) = self.busy_period(i, blocking, budget) else {
            return Response::UNBOUNDED;
        };
        let (c, f) = (self.wcet[i], me.last());
        let jobs_in_busy = busy.div_ceil(me.period).max(1);
        if jobs_in_busy > WORK_LIMIT {
            return Response::UNBOUNDED;
        }
        let launches = (0..=i).fold(u64::from(blocking > 0), |a, j| {
            let released = busy.div_ceil(self.jobs[j].period).max(1);
            a.saturating_add(released.saturating_mul(self.jobs[j].segments.len() as u64))
        });
        let mut worst = 0u64;
        for q in 0..jobs_in_busy {
            // Everything of job q before its last kernel can be overtaken at a kernel boundary.
            let own = blocking
                .saturating_add((q + 1).saturating_mul(c))
                .saturating_sub(f);
            let Some(start) = self.final_start(i, own, budget) else {
                return Response::UNBOUNDED;
            };
            let response = start
                .saturating_add(f)
                .saturating_sub(q.saturating_mul(me.period));
            worst = worst.max(response);
        }
        Response {
            ns: worst,
            launches,
        }
    }

    /// Whether the utilisation of the level down to `i` reaches 1 (then its busy period need not
    /// end). The 1e-9 margin rejects sets at exactly 1 that might pass: safe, and avoids
    /// trusting float rounding.
    fn overloaded(&self, i: usize) -> bool {
        let u: f64 = (0..=i)
            .map(|j| self.wcet[j] as f64 / self.jobs[j].period as f64)
            .sum();
        u >= 1.0 - 1e-9
    }

    /// Length of the level-i busy period: t = B + sum over the level of ceil(t / T_j) C_j.
    fn busy_period(&self, i: usize, blocking: u64, budget: &Budget) -> Option<u64> {
        let demand = |t: u64| {
            (0..=i).fold(blocking, |a, j| {
                a.saturating_add(t.div_ceil(self.jobs[j].period).saturating_mul(self.wcet[j]))
            })
        };
        fixed_point(demand(1), demand, i as u64 + 1, budget)
    }

    /// Start of the final segment: w = own + sum over higher priorities of (floor(w / T_j) + 1)
    /// C_j. The `+ 1` counts a higher-priority release at exactly w, which the dispatcher would
    /// pick first.
    fn final_start(&self, i: usize, own: u64, budget: &Budget) -> Option<u64> {
        let demand = |w: u64| {
            (0..i).fold(own, |a, j| {
                a.saturating_add((w / self.jobs[j].period + 1).saturating_mul(self.wcet[j]))
            })
        };
        fixed_point(demand(own), demand, i as u64, budget)
    }
}

/// Iterate a monotone demand function to its least fixed point from `start`, each step costing
/// `cost` of `budget`.
fn fixed_point(start: u64, demand: impl Fn(u64) -> u64, cost: u64, budget: &Budget) -> Option<u64> {
    let mut t = start;
    for _ in 0..WORK_LIMIT {
        if !budget.spend(cost.max(1)) {
            return None;
        }
        let next = demand(t);
        if next == t {
            return Some(t);
        }
        if next == u64::MAX {
            return None;
        }
        t = next;
    }
    None
}

/// The smallest realisable partition for each task that meets its deadline alone, and whether the
/// chosen partitions fit in the device together. With two tasks or more the partitions run at
/// once, so sizes are chosen on contended bounds, and their absence is an error that says how to
/// get them. Whether the sizes may be admitted on the bounds they rest on (stale, exceedance) is
/// `Check`'s verdict, not this one's.
pub fn suggest(src: &dyn BoundSource, tasks: &[Unsized]) -> Result<Vec<(String, u32)>> {
    validate_timing(tasks.iter().map(|t| {
        (
            t.name.as_str(),
            t.kernels.as_slice(),
            t.period_ns,
            t.deadline_ns,
        )
    }))?;
    let policy = Policy {
        accept_stale: true,
        accept_exceedance: Some(1.0 - f64::EPSILON),
    };
    // Accepts every bound, so no refusal names a command.
    let mut lookup = Lookup::new(src, policy, tasks.len() > 1, "admit")?;
    let mut chosen = Vec::with_capacity(tasks.len());
    for task in tasks {
        chosen.push((task.name.clone(), smallest_partition(&mut lookup, task)?));
    }
    // The first refusal of each task (each size it was tried at refuses it again).
    let mut refused: Vec<&String> = Vec::new();
    for r in &lookup.refused {
        let task = |r: &String| r.split(", kernel").next().map(str::to_string);
        if !refused.iter().any(|said| task(said) == task(r)) {
            refused.push(r);
        }
    }
    if !refused.is_empty() {
        let all: Vec<&str> = refused.iter().map(|r| r.as_str()).collect();
        return Err(ServiceError::NotCalibrated(all.join("; ")));
    }
    let used: u64 = chosen.iter().map(|(_, p)| u64::from(*p)).sum();
    if used > u64::from(src.total_sms()) {
        let list: Vec<String> = chosen.iter().map(|(n, p)| format!("{n}: {p}")).collect();
        return Err(ServiceError::Infeasible(format!(
            "the smallest partitions that meet every deadline need {used} SMs together ({}) but the device has {}; \
             accepted: a task set whose partitions fit, or a shared partition (CheckShared)",
            list.join(", "),
            src.total_sms()
        )));
    }
    Ok(chosen)
}

fn smallest_partition(lookup: &mut Lookup, task: &Unsized) -> Result<u32> {
    let mut best: Option<(u32, u64)> = None;
    // A size refused for want of a bound (a table without an entry there) is skipped: a larger
    // one that meets the deadline may still be given. Refused at every size, that is the answer.
    let mut refused = None;
    for p in lookup.src.partition_sizes() {
        let response = match lookup.task(&task.name, &task.kernels, p) {
            Ok(bounds) => bounds.total(),
            Err(ServiceError::NotCalibrated(why)) => {
                refused.get_or_insert(ServiceError::NotCalibrated(why));
                continue;
            }
            Err(e) => return Err(e),
        };
        // u64::MAX is no finite bound (a sum past 64 bits), which no deadline is met by.
        if response < u64::MAX && response <= task.deadline_ns {
            return Ok(p);
        }
        if best.is_none_or(|(_, r)| response < r) {
            best = Some((p, response));
        }
    }
    let Some((p, r)) = best else {
        return Err(refused.unwrap_or_else(|| {
            ServiceError::Infeasible(format!("task `{}`: no partition sizes", task.name))
        }));
    };
    Err(ServiceError::Infeasible(format!(
        "task `{}` cannot meet its deadline of {} ns on any partition: its best response bound is {r} ns at {p} SMs",
        task.name, task.deadline_ns
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A device of 16 SMs in partitions of 4, with bounds given per (kernel, partition), the same
    /// under both interference tags unless `isolated_only`; every bound stated at `exceedance`.
    struct Table {
        bounds: BTreeMap<(&'static str, u32), u64>,
        isolated_only: bool,
        stale: bool,
        remedy: Remedy,
        exceedance: f64,
        /// A kernel whose bounds are stated at 1e-4 whatever `exceedance` says.
        heavy_tailed: Option<&'static str>,
    }

    impl BoundSource for Table {
        fn total_sms(&self) -> u32 {
            16
        }
        fn partition_sizes(&self) -> Vec<u32> {
            vec![4, 8, 12, 16]
        }
        fn configured_exceedance(&self) -> f64 {
            1e-9
        }
        fn wcetctl(&self) -> String {
            "wcetctl".into()
        }
        fn bound(
            &self,
            kernel: &str,
            partition: u32,
            tag: Option<Interference>,
        ) -> Result<KernelBound> {
            let bound_ns = self
                .bounds
                .iter()
                .find(|((k, p), _)| *k == kernel && *p == partition)
                .map(|(_, b)| *b)
                .ok_or_else(|| {
                    ServiceError::UnknownKernel(format!("no kernel named `{kernel}`"))
                })?;
            if self.isolated_only && tag == Some(Interference::Contended) {
                return Err(ServiceError::NotCalibrated(
                    "no contended calibration".into(),
                ));
            }
            Ok(KernelBound {
                bound_ns,
                exceedance: if self.heavy_tailed == Some(kernel) {
                    1e-4
                } else {
                    self.exceedance
                },
                stale: self.stale,
                other_model: false,
                clock_unread: false,
                remedy: self.remedy,
                runnable: true,
                origin: BoundOrigin::default(),
            })
        }
    }

    /// `a` halves from 4 to 8 SMs and flattens; `b` gets slower with more SMs (contention).
    fn table() -> Table {
        let mut m = BTreeMap::new();
        for (p, a, b) in [(4, 400, 100), (8, 200, 120), (12, 150, 140), (16, 150, 160)] {
            m.insert(("a", p), a);
            m.insert(("b", p), b);
        }
        Table {
            bounds: m,
            isolated_only: false,
            stale: false,
            remedy: Remedy::Recalibrate,
            exceedance: 1e-9,
            heavy_tailed: None,
        }
    }

    /// In one shared partition every task's response rests on every task's bounds (those above
    /// preempt it, the longest kernel below blocks it): each states the set's weakest guarantee.
    #[test]
    fn a_jobs_exceedance_sums_every_launch_its_response_rests_on() {
        // Alone, a job of three launches at 1e-9 each.
        let close = |a: f64, b: f64| (a - b).abs() < 1e-20;
        let v = check_distinct(&table(), &[task("t", &["a", "b", "a"], 8, 1000, 1000)]).unwrap();
        assert!(close(v.tasks[0].job_exceedance, 3e-9), "{v:?}");
        // Shared at 8 SMs (a = 200, b = 120): `high` is blocked by one of `low`'s launches and
        // runs its own; `low`'s busy period holds one job of each, three launches.
        let set = [
            task("high", &["a"], 8, 1000, 1000),
            task("low", &["b", "b"], 8, 1000, 1000),
        ];
        let v = check_shared(&table(), &set).unwrap();
        assert!(v.admitted, "{v:?}");
        assert!(close(v.tasks[0].job_exceedance, 2e-9), "{v:?}");
        assert!(close(v.tasks[1].job_exceedance, 3e-9), "{v:?}");
        // `high` every 300 ns: `low`'s busy period (840 ns) releases three of its jobs, so 3 + 2
        // launches; `high`'s own (520 ns) holds two of its jobs and the launch that blocks it.
        let set = [
            task("high", &["a"], 8, 300, 300),
            task("low", &["b", "b"], 8, 10_000, 10_000),
        ];
        let v = check_shared(&table(), &set).unwrap();
        assert!(close(v.tasks[1].job_exceedance, 5e-9), "{v:?}");
        assert!(close(v.tasks[0].job_exceedance, 3e-9), "{v:?}");
        // No bounded response: no promise at all.
        let v = check_distinct(&table(), &[task("t", &["a"], 8, 1000, 100)]).unwrap();
        assert!(
            close(v.tasks[0].job_exceedance, 1e-9),
            "a missed deadline is still bounded"
        );
        let over = [
            task("x", &["a"], 8, 100, 100),
            task("y", &["a"], 8, 100, 100),
        ];
        let v = check_shared(&table(), &over).unwrap();
        assert!(v.tasks.iter().all(|t| t.job_exceedance == 1.0), "{v:?}");
    }

    #[test]
    fn a_shared_partition_states_the_weakest_guarantee_of_the_set_for_each_task() {
        let t = Table {
            heavy_tailed: Some("b"),
            ..table()
        };
        let set = [
            task("high", &["a"], 4, 10_000, 10_000),
            task("low", &["b"], 4, 10_000, 10_000),
        ];
        let policy = Policy {
            accept_exceedance: Some(1e-4),
            ..Policy::default()
        };
        let v = super::check_shared(&t, &set, policy).unwrap();
        assert!(v.admitted, "{v:?}");
        assert_eq!(v.tasks[0].response_ns, 400 + 100, "blocked by b");
        assert!(v.tasks.iter().all(|r| r.exceedance == 1e-4), "{v:?}");
    }

    fn check_distinct(src: &dyn BoundSource, tasks: &[Task]) -> Result<Verdict> {
        super::check_distinct(src, tasks, Policy::default())
    }

    fn check_shared(src: &dyn BoundSource, tasks: &[Task]) -> Result<Verdict> {
        super::check_shared(src, tasks, Policy::default())
    }

    fn task(name: &str, kernels: &[&str], sms: u32, period: u64, deadline: u64) -> Task {
        Task {
            name: name.into(),
            kernels: kernels.iter().map(|k| k.to_string()).collect(),
            sms,
            period_ns: period,
            deadline_ns: deadline,
        }
    }

    fn job(segments: &[u64], period: u64) -> Job {
        Job {
            segments: segments.to_vec(),
            period,
            deadline: period,
        }
    }

    #[test]
    fn a_response_too_large_for_64_bits_is_no_bound_even_for_the_longest_deadline() {
        let mut t = table();
        t.bounds.insert(("huge", 4), u64::MAX / 2 + 1);
        let set = [task("t", &["huge", "huge"], 4, u64::MAX, u64::MAX)];
        for v in [check_distinct(&t, &set), check_shared(&t, &set)] {
            let v = v.unwrap();
            assert!(!v.admitted, "{v:?}");
            assert_eq!(
                (v.tasks[0].response_ns, v.tasks[0].slack_ns),
                (u64::MAX, i64::MIN)
            );
        }
        let at_most = u64::MAX / 2;
        t.bounds.insert(("half", 4), at_most);
        let v = check_distinct(&t, &[task("t", &["half", "half"], 4, u64::MAX, u64::MAX)]);
        assert!(
            v.unwrap().admitted,
            "2 x (2^63 - 1) fits in 64 bits and in the deadline"
        );
        // Nor does `Suggest` find a size for it (it gave the smallest).
        for p in [8, 12, 16] {
            t.bounds.insert(("huge", p), u64::MAX / 2 + 1);
        }
        let unsized_set = [Unsized {
            name: "t".into(),
            kernels: vec!["huge".into(), "huge".into()],
            period_ns: u64::MAX,
            deadline_ns: u64::MAX,
        }];
        let e = suggest(&t, &unsized_set).unwrap_err().to_string();
        assert!(e.contains("cannot meet its deadline"), "{e}");
    }

    /// One verdict has a bounded amount of work: past it a task has no finite bound (a
    /// rejection), however close the full analysis would have come.
    #[test]
    fn an_analysis_past_its_budget_rejects_what_it_did_not_finish() {
        let jobs = [job(&[1], 4), job(&[1], 5), job(&[1], 7)];
        let level = Level::of(&jobs);
        let finite = level.response(2, &Budget::new(WORK_BUDGET)).ns;
        assert!(finite < u64::MAX);
        let tight = Budget::new(3);
        assert_eq!(level.response(2, &tight).ns, u64::MAX);
        assert!(tight.exhausted());
        assert_eq!(response_time(&jobs, 2), finite);
    }

    #[test]
    fn a_set_larger_than_the_limits_is_refused_and_says_them() {
        let many: Vec<Task> = (0..=MAX_TASKS)
            .map(|i| task(&format!("t{i}"), &["a"], 4, 1000, 1000))
            .collect();
        let e = check_distinct(&table(), &many).unwrap_err().to_string();
        assert!(
            e.contains("at most 1024 tasks and 65536 kernel launches"),
            "{e}"
        );
        let long = vec!["a"; MAX_LAUNCHES + 1];
        let e = check_shared(&table(), &[task("t", &long, 4, 1000, 1000)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("65537 kernel launches"), "{e}");
        let fits = vec!["a"; MAX_LAUNCHES];
        assert!(check_shared(&table(), &[task("t", &fits, 4, u64::MAX, u64::MAX)]).is_ok());
    }

    #[test]
    fn distinct_sums_kernel_bounds_at_the_realisable_size() {
        // 10 SMs is served at 8: a = 200, b = 120, response 320, slack 80.
        let v = check_distinct(&table(), &[task("t", &["a", "b"], 10, 1000, 400)]).unwrap();
        assert!(v.admitted);
        assert_eq!(
            v.tasks,
            vec![TaskResult {
                name: "t".into(),
                response_ns: 320,
                partition_sms: 8,
                slack_ns: 80,
                deadline_ns: 400,
                exceedance: 1e-9,
                interference: Interference::Contended,
                stale: false,
                // Two launches at 1e-9 each.
                job_exceedance: 2e-9,
            }]
        );
        // What it rests on: each (kernel, partition) once, in the order first launched.
        let v = check_distinct(&table(), &[task("t", &["b", "a", "b"], 10, 1000, 1000)]).unwrap();
        let rests_on: Vec<(&str, u32, u64)> = v
            .rests_on
            .iter()
            .map(|b| (b.kernel.as_str(), b.partition_sms, b.bound_ns))
            .collect();
        assert_eq!(rests_on, [("b", 8, 120), ("a", 8, 200)]);
    }

    #[test]
    fn co_running_partitions_need_contended_bounds() {
        let t = Table {
            isolated_only: true,
            ..table()
        };
        let one = [task("x", &["a"], 4, 1000, 1000)];
        let alone = check_distinct(&t, &one).unwrap();
        assert!(alone.admitted, "one task has no co-runner: {alone:?}");
        assert_eq!(alone.tasks[0].interference, Interference::Isolated);
        let two = [one[0].clone(), task("y", &["b"], 4, 1000, 1000)];
        let v = check_distinct(&t, &two).unwrap();
        assert!(
            !v.admitted,
            "isolated bounds for co-running partitions: {v:?}"
        );
        assert!(v.tasks.iter().all(|r| r.slack_ns >= 0));
        assert_eq!(v.refused.len(), 2);
        assert!(
            v.refused[0].contains("no contended bound")
                && v.refused[0].contains("wcetctl recalibrate --interference contended a")
                && v.refused[0].contains("RecalibrateWith"),
            "{:?}",
            v.refused
        );
        let e = v.or_refusal().unwrap_err();
        assert!(matches!(e, ServiceError::NotCalibrated(m) if m.contains("`y`")));
        // One partition shared in turn has no co-runner either.
        assert!(
            check_shared(
                &t,
                &[
                    task("x", &["a"], 4, 1000, 1000),
                    task("y", &["b"], 4, 1000, 1000)
                ]
            )
            .unwrap()
            .admitted
        );
        let e = suggest(&t, &[free("a", &["a"], 400), free("b", &["b"], 400)]).unwrap_err();
        // Every task refused is named, once (only the first was).
        assert!(
            matches!(&e, ServiceError::NotCalibrated(m) if m.contains("contended")
                && m.matches("task `a`").count() == 1 && m.matches("task `b`").count() == 1),
            "{e}"
        );
    }

    #[test]
    fn stale_or_weaker_bounds_need_the_callers_consent_and_are_named() {
        let set = [task("x", &["a"], 4, 1000, 1000)];
        let stale = Table {
            stale: true,
            ..table()
        };
        let v = check_distinct(&stale, &set).unwrap();
        assert!(!v.admitted && v.refused[0].contains("stale") && v.tasks[0].stale);
        let consent = Policy {
            accept_stale: true,
            ..Policy::default()
        };
        let v = super::check_distinct(&stale, &set, consent).unwrap();
        assert!(v.admitted && v.accepted[0].contains("stale"), "{v:?}");
        assert!(v.accepted[0].contains("`wcetctl recalibrate a`"), "{v:?}");
        // Stale because its files changed on disk: a recalibration would be refused, so the
        // advice is to reload.
        let edited = Table {
            stale: true,
            remedy: Remedy::Reload,
            ..table()
        };
        let v = check_distinct(&edited, &set).unwrap();
        assert!(
            !v.admitted && v.refused[0].contains("`wcetctl kernels reload`"),
            "{v:?}"
        );
        let waiting = Table {
            stale: true,
            remedy: Remedy::BeingRecalibrated(7),
            ..table()
        };
        let v = check_distinct(&waiting, &set).unwrap();
        assert!(
            !v.admitted
                && v.refused[0].contains("job 7")
                && !v.refused[0].contains("recalibrate a"),
            "{v:?}"
        );
        // Known only from imports: nothing to recalibrate here.
        let imported = Table {
            stale: true,
            remedy: Remedy::ImportAgain,
            ..table()
        };
        let v = check_distinct(&imported, &set).unwrap();
        assert!(
            !v.admitted
                && v.refused[0].contains("`wcetctl import`")
                && !v.refused[0].contains("recalibrate"),
            "{v:?}"
        );
        let heavy = Table {
            exceedance: 1e-4,
            ..table()
        };
        let v = check_distinct(&heavy, &set).unwrap();
        assert!(!v.admitted && v.refused[0].contains("1e-4"), "{v:?}");
        assert_eq!(v.tasks[0].exceedance, 1e-4);
        let too_strict = Policy {
            accept_exceedance: Some(1e-5),
            ..Policy::default()
        };
        let v = super::check_distinct(&heavy, &set, too_strict).unwrap();
        // Judged against the caller's limit, and named so, though the configured one refuses too.
        assert!(
            !v.admitted && v.refused[0].contains("the accept_exceedance 1e-5 asked for"),
            "{v:?}"
        );
        let consent = Policy {
            accept_exceedance: Some(1e-4),
            ..Policy::default()
        };
        let v = super::check_distinct(&heavy, &set, consent).unwrap();
        assert!(v.admitted && v.accepted[0].contains("1e-4"), "{v:?}");
        // The advice keeps the layout asked for: plain `admit` checks distinct partitions, so
        // run as printed it answered another question (a hunt found it).
        let v = check_distinct(&heavy, &set).unwrap();
        assert!(
            v.refused[0].contains("(wcetctl admit --accept-exceedance 1e-4)"),
            "{v:?}"
        );
        let v = check_shared(&heavy, &set).unwrap();
        assert!(
            v.refused[0].contains("(wcetctl admit --shared --accept-exceedance 1e-4)"),
            "{v:?}"
        );
        let v = check_shared(&stale, &set).unwrap();
        assert!(
            v.refused[0].contains("(wcetctl admit --shared --accept-stale)"),
            "{v:?}"
        );
        // A caller may ask for a stricter guarantee than configured, and gets it.
        let stricter = Policy {
            accept_exceedance: Some(1e-12),
            ..Policy::default()
        };
        let v = super::check_distinct(&table(), &set, stricter).unwrap();
        assert!(
            !v.admitted && v.refused[0].contains("the accept_exceedance 1e-12 asked for"),
            "{v:?}"
        );
        let bad = Policy {
            accept_exceedance: Some(1.5),
            ..Policy::default()
        };
        let e = super::check_distinct(&heavy, &set, bad).unwrap_err();
        assert!(matches!(e, ServiceError::InvalidArgs(m) if m.contains("accept_exceedance")));
    }

    #[test]
    fn distinct_rejects_a_miss_and_partitions_that_do_not_fit() {
        let miss = check_distinct(&table(), &[task("t", &["a", "a"], 4, 1000, 700)]).unwrap();
        assert!(!miss.admitted);
        assert_eq!(miss.tasks[0].slack_ns, -100);
        let crowded = [
            task("x", &["b"], 12, 1000, 1000),
            task("y", &["b"], 8, 1000, 1000),
        ];
        let v = check_distinct(&table(), &crowded).unwrap();
        assert!(v.tasks.iter().all(|t| t.slack_ns >= 0));
        assert!(
            !v.admitted,
            "12 + 8 SMs on a 16-SM device must not be admitted"
        );
        assert!(v.missed[0].contains("20 SMs"), "{:?}", v.missed);
    }

    #[test]
    fn bad_input_names_the_task_and_field() {
        let t = table();
        let err = |tasks: &[Task]| check_distinct(&t, tasks).unwrap_err();
        assert!(matches!(err(&[]), ServiceError::InvalidArgs(m) if m.contains("empty")));
        let e = err(&[task("p", &["a"], 4, 0, 1)]);
        assert!(
            matches!(e, ServiceError::InvalidArgs(m) if m.contains("`p`") && m.contains("period_ns"))
        );
        let e = err(&[task("d", &["a"], 4, 10, 11)]);
        assert!(
            matches!(e, ServiceError::InvalidArgs(m) if m.contains("`d`") && m.contains("deadline_ns"))
        );
        let e = err(&[task("z", &["a"], 4, 10, 0)]);
        assert!(matches!(e, ServiceError::InvalidArgs(m) if m.contains("deadline_ns")));
        let e = err(&[task("k", &[], 4, 10, 10)]);
        assert!(
            matches!(e, ServiceError::InvalidArgs(m) if m.contains("`k`") && m.contains("kernels"))
        );
        let e = err(&[task("n", &["a"], 4, 10, 10), task("n", &["a"], 4, 10, 10)]);
        assert!(
            matches!(e, ServiceError::InvalidArgs(m) if m.contains("`n`") && m.contains("twice"))
        );
        let e = err(&[task("u", &["a", "nope"], 4, 10, 10)]);
        assert!(
            matches!(e, ServiceError::UnknownKernel(m) if m.contains("`u`") && m.contains("kernels[1]"))
        );
        let e = err(&[task("big", &["a"], 17, 10, 10)]);
        assert!(
            matches!(e, ServiceError::InvalidPartition(m) if m.contains("`big`") && m.contains("sms"))
        );
        let e = err(&[task("small", &["a"], 3, 10, 10)]);
        assert!(matches!(e, ServiceError::InvalidPartition(m) if m.contains("`small`")));
    }

    #[test]
    fn blocking_by_a_lower_priority_kernel_decides_the_verdict() {
        // hi: C = 2, T = 10, D = 5. lo's single kernel of 4 may have just started when hi arrives:
        // B = 4, w = 4, R = 4 + 2 = 6 > 5. With a kernel of 2 instead: R = 4, admitted.
        let hi = job(&[2], 10);
        assert_eq!(response_time(&[hi.clone(), job(&[4], 20)], 0), 6);
        assert_eq!(response_time(&[hi.clone(), job(&[2], 20)], 0), 4);
        let mut t = table();
        t.bounds.insert(("k2", 4), 2);
        t.bounds.insert(("k4", 4), 4);
        let set = |lo: &str| [task("hi", &["k2"], 4, 10, 5), task("lo", &[lo], 4, 20, 20)];
        assert!(!check_shared(&t, &set("k4")).unwrap().admitted);
        assert!(check_shared(&t, &set("k2")).unwrap().admitted);
    }

    #[test]
    fn kernel_boundaries_are_preemption_points() {
        // hi: C = 1, T = D = 4. lo: kernels 2 then 3, T = D = 20. hi is blocked by lo's longest
        // kernel (3): R_hi = 3 + 1 = 4. lo's last kernel starts at w = 2 + 1 (hi's job at 0; its
        // next is at 4 > 3), so R_lo = 3 + 3 = 6: hi's job at 4 waits instead of lo.
        let jobs = [job(&[1], 4), job(&[2, 3], 20)];
        assert_eq!(response_time(&jobs, 0), 4);
        assert_eq!(response_time(&jobs, 1), 6);
    }

    #[test]
    fn later_jobs_of_the_busy_period_are_checked() {
        // Davis et al. 2007's counterexample, times doubled: three tasks of C = 2, periods 5, 7, 7.
        // The lowest one's first job answers in 6, its second in 7: the worst is the second.
        let jobs = [job(&[2], 5), job(&[2], 7), job(&[2], 7)];
        assert_eq!(response_time(&jobs, 2), 7);
    }

    #[test]
    fn an_overloaded_level_has_no_bound() {
        let jobs = [job(&[3], 5), job(&[3], 6)];
        assert_eq!(response_time(&jobs, 1), u64::MAX);
        let v = check_shared(
            &table(),
            &[
                task("x", &["a"], 4, 500, 500),
                task("y", &["a"], 4, 500, 500),
            ],
        )
        .unwrap();
        assert!(!v.admitted);
        assert_eq!(
            (v.tasks[1].response_ns, v.tasks[1].slack_ns),
            (u64::MAX, i64::MIN)
        );
    }

    #[test]
    fn shared_requires_one_partition_size() {
        let e = check_shared(
            &table(),
            &[task("x", &["a"], 4, 10, 10), task("y", &["a"], 8, 10, 10)],
        )
        .unwrap_err();
        assert!(
            matches!(e, ServiceError::InvalidArgs(m) if m.contains("`y`") && m.contains("sms"))
        );
    }

    fn free(name: &str, kernels: &[&str], deadline: u64) -> Unsized {
        Unsized {
            name: name.into(),
            kernels: kernels.iter().map(|k| k.to_string()).collect(),
            period_ns: 1000,
            deadline_ns: deadline,
        }
    }

    #[test]
    fn suggest_picks_the_smallest_meeting_partition_and_checks_the_sum() {
        let got = suggest(&table(), &[free("a", &["a"], 250), free("b", &["b"], 100)]).unwrap();
        assert_eq!(got, vec![("a".to_string(), 8), ("b".to_string(), 4)]);
        let e = suggest(&table(), &[free("a", &["a"], 150), free("a2", &["a"], 150)]).unwrap_err();
        assert!(
            matches!(e, ServiceError::Infeasible(m) if m.contains("24 SMs") && m.contains("16"))
        );
        let e = suggest(&table(), &[free("slow", &["a"], 149)]).unwrap_err();
        assert!(
            matches!(e, ServiceError::Infeasible(m) if m.contains("`slow`") && m.contains("150 ns at 12"))
        );
    }
}
