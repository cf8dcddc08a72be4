//! The bus face of admission: the `org.wcetd.Admission1` interface on `/org/wcetd/Wcetd1` (served
//! by [`Admission`], registered from `dbus::serve`), its client proxy, and [`admit_file`], the
//! client side of `wcetctl admit`. The analyses themselves live in `admission.rs`.

use anyhow::Context;
use std::path::Path;
use zbus::{interface, proxy, Connection, DBusError};

use crate::admission::{self, Task, Unsized, Verdict};
use crate::dbus::BusError;
use crate::service::Service;
use crate::taskset::{self, TaskSpec};

pub const ADMISSION_INTERFACE: &str = "org.wcetd.Admission1";

/// A task on the wire: (name, kernels, sms, period_ns, deadline_ns).
pub type WireTask = (String, Vec<String>, u32, u64, u64);
/// A task without a partition on the wire: (name, kernels, period_ns, deadline_ns).
pub type WireUnsized = (String, Vec<String>, u64, u64);
/// One task's analysis on the wire: (name, response_ns, partition_sms, slack_ns).
pub type WireResult = (String, u64, u64, i64);

/// `org.wcetd.Admission1`: anyone may call; it only reads bounds.
pub struct Admission {
    pub service: Service,
}

#[interface(name = "org.wcetd.Admission1")]
impl Admission {
    /// Each task on its own partition.
    fn check(&self, tasks: Vec<WireTask>) -> Result<(bool, Vec<WireResult>), BusError> {
        Ok(to_wire(admission::check_distinct(
            &self.service,
            &from_wire(tasks),
        )?))
    }

    /// All tasks on one partition, fixed priority in array order, kernels not preempted.
    fn check_shared(&self, tasks: Vec<WireTask>) -> Result<(bool, Vec<WireResult>), BusError> {
        Ok(to_wire(admission::check_shared(
            &self.service,
            &from_wire(tasks),
        )?))
    }

    /// The smallest partition per task that meets its deadline, when they fit together.
    fn suggest(&self, tasks: Vec<WireUnsized>) -> Result<Vec<(String, u32)>, BusError> {
        let tasks: Vec<Unsized> = tasks
            .into_iter()
            .map(|(name, kernels, period_ns, deadline_ns)| Unsized {
                name,
                kernels,
                period_ns,
                deadline_ns,
            })
            .collect();
        Ok(admission::suggest(&self.service, &tasks)?)
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
    fn suggest(&self, tasks: &[WireUnsized]) -> zbus::Result<Vec<(String, u32)>>;
}

/// `wcetctl admit FILE`: read a task set, ask the daemon, and render the verdict as a table.
/// `shared` puts every task on one partition (`CheckShared`) instead of one each (`Check`).
pub async fn admit_file(conn: &Connection, path: &Path, shared: bool) -> anyhow::Result<String> {
    let specs = taskset::load(path)?;
    let tasks = specs
        .iter()
        .map(TaskSpec::to_wire)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let proxy = Admission1Proxy::new(conn)
        .await
        .context("reaching org.wcetd.Admission1")?;
    let call = if shared {
        proxy.check_shared(&tasks).await
    } else {
        proxy.check(&tasks).await
    };
    let (admitted, results) =
        call.map_err(|e| anyhow::anyhow!("{}: {}", path.display(), describe(e)))?;
    let total: u32 = zbus::Proxy::new(
        conn,
        crate::dbus::BUS_NAME,
        crate::dbus::OBJECT_PATH,
        crate::dbus::BOUNDS_INTERFACE,
    )
    .await?
    .get_property("TotalSms")
    .await
    .context("reading TotalSms")?;
    Ok(render(&specs, &results, admitted, shared, total))
}

/// A bus error as its D-Bus name and message, which say what was wrong and what is accepted.
fn describe(e: zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, Some(message), _) => format!("{name}: {message}"),
        // zbus turns org.freedesktop.DBus.Error.* replies into its own `fdo::Error`.
        zbus::Error::FDO(e) => format!("{}: {}", e.name(), e.description().unwrap_or_default()),
        other => other.to_string(),
    }
}

fn render(
    specs: &[TaskSpec],
    results: &[WireResult],
    admitted: bool,
    shared: bool,
    total: u32,
) -> String {
    let width = results.iter().map(|r| r.0.len()).max().unwrap_or(4).max(4);
    let mut out = format!(
        "{:<width$}  {:>9}  {:>14}  {:>14}  {:>14}  verdict\n",
        "task", "sms", "response_ns", "deadline_ns", "slack_ns"
    );
    for ((name, response, sms, slack), spec) in results.iter().zip(specs) {
        let response = if *response == u64::MAX {
            "unbounded".to_string()
        } else {
            response.to_string()
        };
        let verdict = if *slack >= 0 { "meets" } else { "MISSES" };
        out += &format!(
            "{name:<width$}  {sms:>9}  {response:>14}  {:>14}  {slack:>14}  {verdict}\n",
            spec.deadline_ns
        );
    }
    let used: u64 = if shared {
        results.first().map_or(0, |r| r.2)
    } else {
        results.iter().map(|r| r.2).sum()
    };
    let layout = if shared {
        "one shared partition"
    } else {
        "distinct partitions"
    };
    let fits = if used <= u64::from(total) {
        "fit"
    } else {
        "do NOT fit"
    };
    out += &format!(
        "{}: {layout}, {used} of {total} SMs ({fits})\n",
        if admitted { "ADMITTED" } else { "REJECTED" }
    );
    out
}
