//! Admission analysis: does a task set of GPU jobs meet its deadlines, given the per-launch bounds?
//! Owns the task model, input validation, and the three analyses behind `org.wcetd.Admission1`:
//! distinct partitions ([`check_distinct`]), one shared partition under non-preemptive fixed
//! priority ([`check_shared`]), and partition sizing ([`suggest`]). Pure: bounds come from a
//! [`BoundSource`], so the analyses are tested against hand-computed tables, and the service is one
//! source among others. The model and its assumptions are in `docs/admission.md`.

use std::collections::BTreeSet;

use crate::service::{Result, Service, ServiceError};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskResult {
    pub name: String,
    /// Response-time bound; `u64::MAX` when its priority level is overloaded (no finite bound).
    pub response_ns: u64,
    /// The realisable partition size the bounds were taken at.
    pub partition_sms: u32,
    /// deadline - response; negative when the deadline is missed.
    pub slack_ns: i64,
}

/// The verdict on a task set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub admitted: bool,
    pub tasks: Vec<TaskResult>,
}

/// Where the analyses get per-launch bounds and the device's geometry from.
pub trait BoundSource {
    fn total_sms(&self) -> u32;
    /// Realisable partition sizes, ascending.
    fn partition_sizes(&self) -> Vec<u32>;
    /// The bound of one launch of `kernel` on exactly `partition` SMs (a realisable size).
    fn bound(&self, kernel: &str, partition: u32) -> Result<u64>;
}

impl BoundSource for Service {
    fn total_sms(&self) -> u32 {
        self.device().total_sms
    }

    fn partition_sizes(&self) -> Vec<u32> {
        self.device().partition_sizes.clone()
    }

    /// The safer of the isolated and contended bounds, clock-scaled, as `GetBound` serves it.
    fn bound(&self, kernel: &str, partition: u32) -> Result<u64> {
        Ok(self.bound_info(kernel, partition, None)?.entry.bound_ns)
    }
}

/// Past this many analysed jobs or fixed-point steps a level is declared unschedulable: the verdict
/// stays safe (a rejection), and a request cannot keep the daemon busy.
const WORK_LIMIT: u64 = 100_000;

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
    }
}

/// Check what does not depend on the device: names, kernel lists, periods and deadlines.
fn validate_timing<'a>(
    tasks: impl Iterator<Item = (&'a str, &'a [String], u64, u64)>,
) -> Result<()> {
    let mut names = BTreeSet::new();
    let mut count = 0;
    for (name, kernels, period, deadline) in tasks {
        count += 1;
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

/// Per-launch bounds of a task's kernels, in launch order, at `partition`.
fn kernel_bounds(
    src: &dyn BoundSource,
    name: &str,
    kernels: &[String],
    partition: u32,
) -> Result<Vec<u64>> {
    kernels
        .iter()
        .enumerate()
        .map(|(i, k)| src.bound(k, partition).map_err(|e| in_task(name, i, e)))
        .collect()
}

fn result(name: &str, partition: u32, response_ns: u64, deadline_ns: u64) -> TaskResult {
    let slack = i128::from(deadline_ns) - i128::from(response_ns);
    TaskResult {
        name: name.to_string(),
        response_ns,
        partition_sms: partition,
        slack_ns: slack.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
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
pub fn check_distinct(src: &dyn BoundSource, tasks: &[Task]) -> Result<Verdict> {
    validate_sized(tasks)?;
    let partitions = tasks
        .iter()
        .map(|t| partition_of(src, t))
        .collect::<Result<Vec<_>>>()?;
    let mut results = Vec::with_capacity(tasks.len());
    for (task, &p) in tasks.iter().zip(&partitions) {
        let bounds = kernel_bounds(src, &task.name, &task.kernels, p)?;
        let response = bounds.iter().fold(0u64, |a, &b| a.saturating_add(b));
        results.push(result(&task.name, p, response, task.deadline_ns));
    }
    let used: u64 = partitions.iter().map(|&p| u64::from(p)).sum();
    let fits = used <= u64::from(src.total_sms());
    let admitted = fits && results.iter().all(|r| r.slack_ns >= 0);
    Ok(Verdict {
        admitted,
        tasks: results,
    })
}

/// All tasks on one partition, non-preemptive fixed priority at kernel granularity, array order
/// is priority (first highest).
pub fn check_shared(src: &dyn BoundSource, tasks: &[Task]) -> Result<Verdict> {
    validate_sized(tasks)?;
    let sms = tasks[0].sms;
    if let Some(t) = tasks.iter().find(|t| t.sms != sms) {
        return Err(invalid(
            &t.name,
            "sms",
            format!("is {} but the first task asks {sms}; accepted: the same sms for every task of a shared partition", t.sms),
        ));
    }
    let partition = partition_of(src, &tasks[0])?;
    let jobs = tasks
        .iter()
        .map(|t| {
            let c = kernel_bounds(src, &t.name, &t.kernels, partition)?;
            Ok(Job {
                segments: c,
                period: t.period_ns,
                deadline: t.deadline_ns,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let results: Vec<TaskResult> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| result(&t.name, partition, response_time(&jobs, i), t.deadline_ns))
        .collect();
    let admitted = results.iter().all(|r| r.slack_ns >= 0);
    Ok(Verdict {
        admitted,
        tasks: results,
    })
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
///
/// Bril, Lukkien and Verhaegh's analysis for deferred preemption (the multi-segment form of Davis,
/// Burns, Bril and Lukkien 2007): blocking `B` is the longest single kernel of a lower-priority
/// task; the last kernel `F` is the final non-preemptive segment; every job `q` of the level-i busy
/// period is checked, because a long final segment can push the next job later (self-pushing).
pub fn response_time(jobs: &[Job], i: usize) -> u64 {
    let me = &jobs[i];
    let higher = &jobs[..i];
    let blocking = jobs[i + 1..]
        .iter()
        .flat_map(|j| j.segments.iter().copied())
        .max()
        .unwrap_or(0);
    if overloaded(&jobs[..=i]) {
        return u64::MAX;
    }
    let Some(busy) = busy_period(&jobs[..=i], blocking) else {
        return u64::MAX;
    };
    let (c, f) = (me.wcet(), me.last());
    let jobs_in_busy = busy.div_ceil(me.period).max(1);
    if jobs_in_busy > WORK_LIMIT {
        return u64::MAX;
    }
    let mut worst = 0u64;
    for q in 0..jobs_in_busy {
        // Everything of job q before its last kernel can be overtaken at a kernel boundary.
        let own = blocking
            .saturating_add((q + 1).saturating_mul(c))
            .saturating_sub(f);
        let Some(start) = final_start(higher, own) else {
            return u64::MAX;
        };
        let response = start
            .saturating_add(f)
            .saturating_sub(q.saturating_mul(me.period));
        worst = worst.max(response);
    }
    worst
}

/// Whether the level's utilisation reaches 1 (then its busy period need not end). The 1e-9 margin
/// rejects sets at exactly 1 that might pass: safe, and avoids trusting float rounding.
fn overloaded(level: &[Job]) -> bool {
    let u: f64 = level
        .iter()
        .map(|j| j.wcet() as f64 / j.period as f64)
        .sum();
    u >= 1.0 - 1e-9
}

/// Length of the level-i busy period: t = B + sum over the level of ceil(t / T_j) C_j.
fn busy_period(level: &[Job], blocking: u64) -> Option<u64> {
    let demand = |t: u64| {
        level.iter().fold(blocking, |a, j| {
            a.saturating_add(t.div_ceil(j.period).saturating_mul(j.wcet()))
        })
    };
    fixed_point(demand(1), demand)
}

/// Start of the final segment: w = own + sum over higher priorities of (floor(w / T_j) + 1) C_j.
/// The `+ 1` counts a higher-priority release at exactly w, which the dispatcher would pick first.
fn final_start(higher: &[Job], own: u64) -> Option<u64> {
    let demand = |w: u64| {
        higher.iter().fold(own, |a, j| {
            a.saturating_add((w / j.period + 1).saturating_mul(j.wcet()))
        })
    };
    fixed_point(demand(own), demand)
}

/// Iterate a monotone demand function to its least fixed point from `start`.
fn fixed_point(start: u64, demand: impl Fn(u64) -> u64) -> Option<u64> {
    let mut t = start;
    for _ in 0..WORK_LIMIT {
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
/// chosen partitions fit in the device together.
pub fn suggest(src: &dyn BoundSource, tasks: &[Unsized]) -> Result<Vec<(String, u32)>> {
    validate_timing(tasks.iter().map(|t| {
        (
            t.name.as_str(),
            t.kernels.as_slice(),
            t.period_ns,
            t.deadline_ns,
        )
    }))?;
    let mut chosen = Vec::with_capacity(tasks.len());
    for task in tasks {
        chosen.push((task.name.clone(), smallest_partition(src, task)?));
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

fn smallest_partition(src: &dyn BoundSource, task: &Unsized) -> Result<u32> {
    let mut best: Option<(u32, u64)> = None;
    for p in src.partition_sizes() {
        let bounds = kernel_bounds(src, &task.name, &task.kernels, p)?;
        let response = bounds.iter().fold(0u64, |a, &b| a.saturating_add(b));
        if response <= task.deadline_ns {
            return Ok(p);
        }
        if best.is_none_or(|(_, r)| response < r) {
            best = Some((p, response));
        }
    }
    let (p, r) = best.unwrap_or((0, 0));
    Err(ServiceError::Infeasible(format!(
        "task `{}` cannot meet its deadline of {} ns on any partition: its best response bound is {r} ns at {p} SMs",
        task.name, task.deadline_ns
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A device of 16 SMs in partitions of 4, with bounds given per (kernel, partition).
    struct Table(BTreeMap<(&'static str, u32), u64>);

    impl BoundSource for Table {
        fn total_sms(&self) -> u32 {
            16
        }
        fn partition_sizes(&self) -> Vec<u32> {
            vec![4, 8, 12, 16]
        }
        fn bound(&self, kernel: &str, partition: u32) -> Result<u64> {
            self.0
                .iter()
                .find(|((k, p), _)| *k == kernel && *p == partition)
                .map(|(_, b)| *b)
                .ok_or_else(|| ServiceError::UnknownKernel(format!("no kernel named `{kernel}`")))
        }
    }

    /// `a` halves from 4 to 8 SMs and flattens; `b` gets slower with more SMs (contention).
    fn table() -> Table {
        let mut m = BTreeMap::new();
        for (p, a, b) in [(4, 400, 100), (8, 200, 120), (12, 150, 140), (16, 150, 160)] {
            m.insert(("a", p), a);
            m.insert(("b", p), b);
        }
        Table(m)
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
                slack_ns: 80
            }]
        );
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
        t.0.insert(("k2", 4), 2);
        t.0.insert(("k4", 4), 4);
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
