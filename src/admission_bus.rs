//! The bus face of admission: the `org.wcetd.Admission1` interface on `/org/wcetd/Wcetd1` (served
//! by [`Admission`], registered from `dbus::serve_devices`), its wire types and client proxy, and
//! [`admit`], the client side of `wcetctl admit`. The analyses themselves live in `admission.rs`;
//! task-set files in `taskset.rs`.

use std::collections::HashMap;
use zbus::{interface, proxy, Connection, DeserializeDict, OwnedVariant, SerializeDict, Type};

use crate::admission::{
    self, BoundOrigin, BoundSource, KernelBound, Policy, Remedy, Task, TaskResult, Unsized, Verdict,
};
use crate::dbus::BusError;
use crate::gpu::Interference;
use crate::service::{Moment, Service, ServiceError};

/// The service as admission's source of bounds, at one [`Moment`]: an analysis looks up each
/// kernel three times (isolated, contended, untagged), and a calibration committed between two
/// of those lookups would otherwise pair one tag's new bound with the other's old one.
pub struct ServiceAt {
    service: Service,
    at: Moment,
}

impl ServiceAt {
    pub fn now(service: Service) -> ServiceAt {
        let at = service.moment();
        ServiceAt { service, at }
    }
}

impl BoundSource for ServiceAt {
    fn total_sms(&self) -> u32 {
        self.service.device().total_sms
    }

    fn partition_sizes(&self) -> Vec<u32> {
        self.service.device().partition_sizes.clone()
    }

    fn configured_exceedance(&self) -> f64 {
        self.service.configured_exceedance()
    }

    fn wcetctl(&self) -> String {
        self.service.wcetctl()
    }

    /// Clock-scaled, as `GetBound` serves it.
    fn bound(
        &self,
        kernel: &str,
        partition: u32,
        interference: Option<Interference>,
    ) -> crate::service::Result<KernelBound> {
        let info = self
            .service
            .bound_info_at(&self.at, kernel, partition, interference)?;
        Ok(KernelBound {
            bound_ns: info.entry.bound_ns,
            exceedance: info.guarantee.exceedance,
            stale: info.stale,
            other_model: info.measured_on_model.is_some(),
            clock_unread: info.clock.current_mhz == 0,
            runnable: info.runnable,
            origin: BoundOrigin {
                calibration: info.calibration_id.clone(),
                basis: info.basis().to_string(),
                interference: info.interference,
            },
            remedy: if info.files_changed {
                Remedy::Reload
            } else if let Some(job) = info.recalibrating {
                Remedy::BeingRecalibrated(job)
            } else if !info.runnable {
                Remedy::ImportAgain
            } else {
                Remedy::Recalibrate
            },
        })
    }
}

/// A task on the wire: (name, kernels, sms, period_ns, deadline_ns).
pub type WireTask = (String, Vec<String>, u32, u64, u64);
/// A task without a partition on the wire: (name, kernels, period_ns, deadline_ns).
pub type WireUnsized = (String, Vec<String>, u64, u64);
/// One task's analysis on the wire: (name, response_ns, partition_sms, slack_ns).
pub type WireResult = (String, u64, u64, i64);

/// `CheckDetailed`'s answer (`a{sv}`): the verdict, every reason, and per task the guarantee
/// of the bounds it rests on.
#[derive(Debug, Clone, PartialEq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}")]
pub struct Detailed {
    pub admitted: bool,
    /// `distinct` (one partition per task, `Check`) or `shared` (`CheckShared`).
    pub layout: String,
    /// SMs the partitions take together, and the device's.
    pub used_sms: u32,
    pub total_sms: u32,
    /// Every reason the set is not admitted; empty when it is.
    pub reasons: Vec<String>,
    /// Weaker bounds that the options accepted, each said.
    pub accepted: Vec<String>,
    pub configured_exceedance: f64,
    pub tasks: Vec<DetailedTask>,
    /// Every bound the verdict rests on (an extension: a daemon before it sends none).
    pub bounds: Option<Vec<DetailedBound>>,
}

/// One bound of a [`Detailed`] answer (`a{sv}`): which, and where it came from.
#[derive(Debug, Clone, PartialEq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}")]
pub struct DetailedBound {
    pub kernel: String,
    pub partition_sms: u32,
    pub bound_ns: u64,
    /// The calibration's id, as `GetBoundInfo`'s `calibration`.
    pub calibration: String,
    /// As `GetBoundInfo`'s `basis`: `measured`, `verified`, `fitted`, `extrapolated`, `observed`.
    pub basis: String,
    /// The interference of the calibration it came from.
    pub interference: String,
}

/// One task of a [`Detailed`] answer (`a{sv}`).
#[derive(Debug, Clone, PartialEq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}")]
pub struct DetailedTask {
    pub name: String,
    pub response_ns: u64,
    pub deadline_ns: u64,
    pub partition_sms: u32,
    pub slack_ns: i64,
    /// The largest exceedance per launch among the bounds used.
    pub exceedance: f64,
    /// `contended` when every bound used covers a stressor on the other SMs, else `isolated`.
    pub interference: String,
    /// Whether any bound used was measured under another device fingerprint.
    pub stale: bool,
    /// At most the probability that one job's response exceeds `response_ns` (an extension:
    /// a daemon before it sends none): [`admission::TaskResult::job_exceedance`].
    pub job_exceedance: Option<f64>,
}

/// `org.wcetd.Admission1`: anyone may call; it only reads bounds.
pub struct Admission {
    pub service: Service,
}

#[interface(name = "org.wcetd.Admission1")]
impl Admission {
    /// Each task on its own partition. A set refused for the bounds it would rest on (no
    /// contended bounds for co-running partitions, stale or weaker ones) is an error saying why.
    async fn check(&self, tasks: Vec<WireTask>) -> Result<(bool, Vec<WireResult>), BusError> {
        let bounds = ServiceAt::now(self.service.clone());
        off_the_bus(move || {
            let verdict = admission::check_distinct(&bounds, &from_wire(tasks), Policy::default())?;
            Ok(to_wire(verdict.or_refusal()?))
        })
        .await
    }

    /// All tasks on one partition, fixed priority in array order, kernels not preempted.
    async fn check_shared(
        &self,
        tasks: Vec<WireTask>,
    ) -> Result<(bool, Vec<WireResult>), BusError> {
        let bounds = ServiceAt::now(self.service.clone());
        off_the_bus(move || {
            let verdict = admission::check_shared(&bounds, &from_wire(tasks), Policy::default())?;
            Ok(to_wire(verdict.or_refusal()?))
        })
        .await
    }

    /// `Check` (or `CheckShared` with option `shared`) answered as a dictionary with every reason
    /// and the guarantee per task; options `accept_stale` (b) and `accept_exceedance` (d) admit on
    /// weaker bounds, and the answer says which were accepted.
    async fn check_detailed(
        &self,
        tasks: Vec<WireTask>,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<Detailed, BusError> {
        let (shared, policy) = parse_options(&options)?;
        let bounds = ServiceAt::now(self.service.clone());
        off_the_bus(move || {
            let tasks = from_wire(tasks);
            let verdict = if shared {
                admission::check_shared(&bounds, &tasks, policy)?
            } else {
                admission::check_distinct(&bounds, &tasks, policy)?
            };
            Ok(detailed(
                verdict,
                shared,
                bounds.total_sms(),
                bounds.configured_exceedance(),
            ))
        })
        .await
    }

    /// The smallest partition per task that meets its deadline, when they fit together.
    async fn suggest(&self, tasks: Vec<WireUnsized>) -> Result<Vec<(String, u32)>, BusError> {
        let bounds = ServiceAt::now(self.service.clone());
        off_the_bus(move || {
            let tasks: Vec<Unsized> = tasks
                .into_iter()
                .map(|(name, kernels, period_ns, deadline_ns)| Unsized {
                    name,
                    kernels,
                    period_ns,
                    deadline_ns,
                })
                .collect();
            admission::suggest(&bounds, &tasks)
        })
        .await
    }
}

/// Run an analysis on tokio's blocking pool, not on the runtime's two worker threads: a set of
/// thousands of launches takes a while, and the bus keeps answering every other query meanwhile
/// (a 400,000-launch `Check` analysed on a worker held a concurrent `GetBound` for 20 s).
async fn off_the_bus<T: Send + 'static>(
    analysis: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, BusError> {
    // Two at a time: a caller cannot take every core (or tokio's 512 blocking threads) by
    // sending many at once; the rest wait their turn.
    static ANALYSES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
    crate::dbus::in_turn(&ANALYSES, "the admission analysis", analysis).await
}

const OPTIONS: &str = "shared (b), accept_stale (b), accept_exceedance (d)";

/// `CheckDetailed`'s options: (shared, policy).
fn parse_options(options: &HashMap<String, OwnedVariant>) -> Result<(bool, Policy), ServiceError> {
    let mut shared = false;
    let mut policy = Policy::default();
    for (key, value) in options {
        let wrong = |ty: &str| {
            ServiceError::InvalidArgs(format!(
                "option {key} must be of type {ty}; accepted options: {OPTIONS}"
            ))
        };
        match key.as_str() {
            "shared" => shared = bool::try_from(value).map_err(|_| wrong("b"))?,
            "accept_stale" => {
                policy.accept_stale = bool::try_from(value).map_err(|_| wrong("b"))?;
            }
            "accept_exceedance" => {
                policy.accept_exceedance = Some(f64::try_from(value).map_err(|_| wrong("d"))?);
            }
            other => {
                return Err(ServiceError::InvalidArgs(format!(
                    "option {other} is unknown; accepted: {OPTIONS}"
                )))
            }
        }
    }
    Ok((shared, policy))
}

fn detailed(v: Verdict, shared: bool, total_sms: u32, configured: f64) -> Detailed {
    let used_sms = if shared {
        v.tasks.first().map_or(0, |t| t.partition_sms)
    } else {
        v.tasks.iter().map(|t| t.partition_sms).sum()
    };
    Detailed {
        admitted: v.admitted,
        layout: if shared { "shared" } else { "distinct" }.into(),
        used_sms,
        total_sms,
        reasons: v.reasons(),
        accepted: v.accepted,
        configured_exceedance: configured,
        tasks: v.tasks.into_iter().map(detailed_task).collect(),
        bounds: Some(
            v.rests_on
                .into_iter()
                .map(|b| DetailedBound {
                    kernel: b.kernel,
                    partition_sms: b.partition_sms,
                    bound_ns: b.bound_ns,
                    calibration: b.origin.calibration,
                    basis: b.origin.basis,
                    interference: b.origin.interference.to_string(),
                })
                .collect(),
        ),
    }
}

fn detailed_task(t: TaskResult) -> DetailedTask {
    DetailedTask {
        name: t.name,
        response_ns: t.response_ns,
        deadline_ns: t.deadline_ns,
        partition_sms: t.partition_sms,
        slack_ns: t.slack_ns,
        exceedance: t.exceedance,
        interference: t.interference.to_string(),
        stale: t.stale,
        job_exceedance: Some(t.job_exceedance),
    }
}

fn from_wire(tasks: Vec<WireTask>) -> Vec<Task> {
    tasks
        .into_iter()
        .map(|(name, kernels, sms, period_ns, deadline_ns)| Task {
            name,
            kernels,
            sms,
            period_ns,
            deadline_ns,
        })
        .collect()
}

/// A task as `Check` takes it.
pub fn task_to_wire(t: &Task) -> WireTask {
    (
        t.name.clone(),
        t.kernels.clone(),
        t.sms,
        t.period_ns,
        t.deadline_ns,
    )
}

/// A task as `Suggest` takes it.
pub fn unsized_to_wire(t: &Unsized) -> WireUnsized {
    (
        t.name.clone(),
        t.kernels.clone(),
        t.period_ns,
        t.deadline_ns,
    )
}

fn to_wire(v: Verdict) -> (bool, Vec<WireResult>) {
    let tasks = v
        .tasks
        .into_iter()
        .map(|r| {
            (
                r.name,
                r.response_ns,
                u64::from(r.partition_sms),
                r.slack_ns,
            )
        })
        .collect();
    (v.admitted, tasks)
}

/// Client proxy for `org.wcetd.Admission1`.
#[proxy(
    interface = "org.wcetd.Admission1",
    default_service = "org.wcetd.Wcetd1",
    default_path = "/org/wcetd/Wcetd1"
)]
pub trait Admission1 {
    fn check(&self, tasks: &[WireTask]) -> zbus::Result<(bool, Vec<WireResult>)>;
    fn check_shared(&self, tasks: &[WireTask]) -> zbus::Result<(bool, Vec<WireResult>)>;
    fn check_detailed(
        &self,
        tasks: &[WireTask],
        options: HashMap<&str, zbus::Variant<'_>>,
    ) -> zbus::Result<Detailed>;
    fn suggest(&self, tasks: &[WireUnsized]) -> zbus::Result<Vec<(String, u32)>>;
}

/// `CheckDetailed` of `tasks` with `policy` on the object at `path` (a GPU's, or the default's),
/// one shared partition when `shared`.
pub async fn admit(
    conn: &Connection,
    path: &str,
    tasks: &[Task],
    shared: bool,
    policy: Policy,
) -> zbus::Result<Detailed> {
    let wire: Vec<WireTask> = tasks.iter().map(task_to_wire).collect();
    let mut options: HashMap<&str, zbus::Variant<'_>> = HashMap::new();
    options.insert("shared", shared.into());
    if policy.accept_stale {
        options.insert("accept_stale", true.into());
    }
    if let Some(p) = policy.accept_exceedance {
        options.insert("accept_exceedance", p.into());
    }
    Admission1Proxy::builder(conn)
        .path(path.to_string())
        .build()
        .await?
        .check_detailed(&wire, options)
        .await
}

/// A verdict as a table: per task its numbers and guarantee, then every reason and caveat.
pub fn render(answer: &Detailed) -> String {
    let mut out = task_table(&answer.tasks);
    out += &verdict_line(answer);
    for r in &answer.reasons {
        out += &format!("  not admitted: {r}\n");
    }
    for a in &answer.accepted {
        out += &format!("  accepted: {a}\n");
    }
    for b in answer.bounds.iter().flatten() {
        out += &format!(
            "  rests on: {} at {} SMs, {} ns ({}, {}, calibration {})\n",
            b.kernel, b.partition_sms, b.bound_ns, b.basis, b.interference, b.calibration
        );
    }
    out
}

/// The verdict's tasks as a table, a header and a row each, the names' column as wide as the
/// longest.
fn task_table(tasks: &[DetailedTask]) -> String {
    let width = tasks.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    let mut out = format!(
        "{:<width$}  {:>5}  {:>14}  {:>14}  {:>14}  {:>10}  {:>8}  {:<12}  verdict\n",
        "task",
        "sms",
        "response_ns",
        "deadline_ns",
        "slack_ns",
        "exceedance",
        "per job",
        "interference"
    );
    for t in tasks {
        out += &task_row(t, width);
    }
    out
}

/// One task's row of [`task_table`], its name padded to `width`.
fn task_row(t: &DetailedTask, width: usize) -> String {
    let response = if t.response_ns == u64::MAX {
        "unbounded".to_string()
    } else {
        t.response_ns.to_string()
    };
    let verdict = if t.slack_ns >= 0 { "meets" } else { "MISSES" };
    let stale = if t.stale { " (stale)" } else { "" };
    let per_job = t
        .job_exceedance
        .map_or("-".to_string(), crate::model::exceedance_text);
    format!(
        "{:<width$}  {:>5}  {response:>14}  {:>14}  {:>14}  {:>10}  {per_job:>8}  {:<12}  {verdict}{stale}\n",
        t.name,
        t.partition_sms,
        t.deadline_ns,
        t.slack_ns,
        crate::model::exceedance_text(t.exceedance),
        t.interference
    )
}

/// The verdict's line: admitted or not, the layout, whether the partitions fit the device,
/// and the exceedance bounds are configured at.
fn verdict_line(answer: &Detailed) -> String {
    let layout = if answer.layout == "shared" {
        "one shared partition"
    } else {
        "distinct partitions"
    };
    let fits = if answer.used_sms <= answer.total_sms {
        "fit"
    } else {
        "do NOT fit"
    };
    format!(
        "{}: {layout}, {} of {} SMs ({fits}); bounds configured at exceedance {:e} per launch\n",
        if answer.admitted {
            "ADMITTED"
        } else {
            "REJECTED"
        },
        answer.used_sms,
        answer.total_sms,
        answer.configured_exceedance
    )
}
