//! Typed clients of the bus API, for `wcetctl`, tests and benchmarks.

use std::collections::HashMap;
use zbus::{proxy, OwnedVariant};

#[proxy(
    interface = "org.wcetd.Bounds1",
    default_service = "org.wcetd.Wcetd1",
    default_path = "/org/wcetd/Wcetd1"
)]
pub trait Bounds {
    fn list_kernels(&self) -> zbus::Result<Vec<String>>;
    fn get_bound(&self, kernel: &str, sms: u32) -> zbus::Result<u64>;
    fn get_bound_info(&self, kernel: &str, sms: u32)
        -> zbus::Result<HashMap<String, OwnedVariant>>;
    fn get_curve(&self, kernel: &str) -> zbus::Result<Vec<(u32, u64)>>;
    fn min_partition(&self, kernel: &str, deadline_ns: u64) -> zbus::Result<u32>;
    fn get_bound_tagged(&self, kernel: &str, sms: u32, interference: &str) -> zbus::Result<u64>;
    fn get_bound_info_tagged(
        &self,
        kernel: &str,
        sms: u32,
        interference: &str,
    ) -> zbus::Result<HashMap<String, OwnedVariant>>;
    fn get_predicted_curve(&self, kernel: &str) -> zbus::Result<(Vec<(u32, u64)>, String)>;
    fn ping(&self) -> zbus::Result<()>;
    #[zbus(property)]
    fn device(&self) -> zbus::Result<String>;
    /// Every device the daemon serves: (index, object path, UUID).
    #[zbus(property)]
    fn devices(&self) -> zbus::Result<Vec<(u32, zbus::OwnedObjectPath, String)>>;
    #[zbus(property)]
    fn backend(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn total_sms(&self) -> zbus::Result<u32>;
    #[zbus(property)]
    fn partition_sizes(&self) -> zbus::Result<Vec<u32>>;
    #[zbus(property)]
    fn health(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn stale_kernels(&self) -> zbus::Result<Vec<String>>;
    #[zbus(signal)]
    fn bounds_changed(&self, kernels: Vec<String>) -> zbus::Result<()>;
}

#[proxy(
    interface = "org.wcetd.Calibration1",
    default_service = "org.wcetd.Wcetd1",
    default_path = "/org/wcetd/Wcetd1"
)]
pub trait Calibration {
    fn recalibrate(&self, kernels: &[&str]) -> zbus::Result<u64>;
    fn recalibrate_with(
        &self,
        kernels: &[&str],
        options: HashMap<&str, zbus::Variant<'_>>,
    ) -> zbus::Result<u64>;
    /// (job, state, progress, message, kernels) for every job of this daemon run.
    fn list_jobs(&self) -> zbus::Result<Vec<(u64, String, f64, String, Vec<String>)>>;
    fn get_job(&self, job: u64) -> zbus::Result<(String, f64, String)>;
    fn cancel_job(&self, job: u64) -> zbus::Result<()>;
    fn reload_kernels(&self) -> zbus::Result<(Vec<String>, Vec<String>, Vec<(String, String)>)>;
    fn export_calibration(&self, kernels: &[&str]) -> zbus::Result<String>;
    fn import_calibration_with(
        &self,
        bundle: &str,
        options: std::collections::HashMap<&str, zbus::Variant<'_>>,
    ) -> zbus::Result<Vec<String>>;
    fn import_samples(
        &self,
        kernel: &str,
        samples: &[(u32, u64)],
        options: std::collections::HashMap<&str, zbus::Variant<'_>>,
    ) -> zbus::Result<u64>;
    #[zbus(signal)]
    fn job_progress(&self, job: u64, progress: f64) -> zbus::Result<()>;
    #[zbus(signal)]
    fn job_finished(&self, job: u64, state: String, message: String) -> zbus::Result<()>;
}

/// The object of GPU `gpu` (`/org/wcetd/Wcetd1/gpu/N`), or the default GPU's (`/org/wcetd/Wcetd1`).
pub fn object_path(gpu: Option<u32>) -> String {
    match gpu {
        Some(n) => crate::bus::device_path(n),
        None => crate::bus::OBJECT_PATH.to_string(),
    }
}

/// Why a wait on `job` ends when the daemon running it leaves the bus: a job does not outlive
/// its daemon (ids start again at 1), so waiting on would be waiting forever.
pub fn daemon_left(job: u64) -> String {
    format!(
        "the daemon left the bus while job {job} ran (it was stopped, restarted or crashed): the job did not finish, and its kernels keep the bounds they had then (what it published before that, from a finished interference, stays); once the daemon is back, `wcetctl status` says what it serves (after a crash its Health names the interrupted job; a stop cancels it, as its log says), and the job can be asked for again"
    )
}

/// How often [`wait_for_job`] asks for the job's state besides listening for its signal.
const JOB_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// Wait for `job` to finish, reporting progress; returns (state, message). Subscribes to the
/// signals before asking for the job's state, so a job that finishes in between is not missed;
/// fails when the daemon leaves the bus meanwhile ([`daemon_left`]).
pub async fn wait_for_job(
    calibration: &CalibrationProxy<'_>,
    job: u64,
    mut on_progress: impl FnMut(f64),
) -> zbus::Result<(String, String)> {
    use futures_util::{FutureExt, StreamExt};
    let mut finished = calibration.receive_job_finished().await?;
    let mut progress = calibration.receive_job_progress().await?;
    let mut owner = calibration.inner().receive_owner_changed().await?;
    let (state, p, message) = calibration.get_job(job).await?;
    if matches!(state.as_str(), "done" | "failed" | "cancelled") {
        return Ok((state, message));
    }
    on_progress(p);
    // Asked now and then as well: a signal can be missed (a client's own connection that falls
    // behind, a daemon that sheds signals under a flood), and a wait must not then be endless.
    let mut ask = tokio::time::interval(JOB_POLL);
    ask.tick().await;
    loop {
        tokio::select! {
            // The daemon's leaving first: asked after it, the job is another daemon's or none.
            biased;
            // Unless the job's JobFinished came before it: the daemon ends a job it is running
            // when asked to stop, then leaves, and the connection queues both in that order,
            // each on its own stream, so it waits in `finished` already (a hunt saw `done`
            // reported as a daemon gone, 3 times in 12).
            Some(_) = owner.next() => {
                while let Some(Some(signal)) = finished.next().now_or_never() {
                    let args = signal.args()?;
                    if args.job == job {
                        return Ok((args.state, args.message));
                    }
                }
                return Err(zbus::Error::Failure(daemon_left(job)));
            }
            _ = ask.tick() => {
                let (state, _, message) = match calibration.get_job(job).await {
                    Ok(answer) => answer,
                    // No owner, or one that never had this job: the daemon left meanwhile.
                    Err(e) if matches!(
                        error_name(&e).as_deref(),
                        Some("org.freedesktop.DBus.Error.ServiceUnknown"
                            | "org.freedesktop.DBus.Error.NameHasNoOwner"
                            | "org.freedesktop.DBus.Error.InvalidArgs")
                    ) => return Err(zbus::Error::Failure(daemon_left(job))),
                    Err(e) => return Err(e),
                };
                if matches!(state.as_str(), "done" | "failed" | "cancelled") {
                    return Ok((state, message));
                }
            }
            Some(signal) = finished.next() => {
                let args = signal.args()?;
                if args.job == job {
                    return Ok((args.state, args.message));
                }
            }
            Some(signal) = progress.next() => {
                let args = signal.args()?;
                if args.job == job {
                    on_progress(args.progress);
                }
            }
            else => return calibration.get_job(job).await.map(|(s, _, m)| (s, m)),
        }
    }
}

/// The D-Bus error name of a failed call (zbus reports the standard `org.freedesktop.DBus.Error.*`
/// names as its own `FDO` variant), or `None` when the call did not fail with a D-Bus error.
pub fn error_name(e: &zbus::Error) -> Option<String> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.to_string()),
        zbus::Error::FDO(e) => Some(zbus::DBusError::name(&**e).to_string()),
        _ => None,
    }
}
