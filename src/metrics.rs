//! The metrics file (`wcetd --metrics-file PATH`): bounds served, what production reported,
//! overruns, calibration age, jobs and health, in the Prometheus text exposition format for the
//! node exporter's textfile collector. Replaced atomically, so a collector never reads half a
//! file: at start, after every job, at most every [`MIN_INTERVAL`] while observations change,
//! every [`HEARTBEAT`] with nothing changing, and at shutdown. A face of the service beside the
//! bus: it reads the service and changes nothing.
//!
//! One file for every GPU the daemon serves. Every series is labelled `gpu` (the device's index)
//! and `UUID`, as the DCGM exporter labels GPUs, so that bounds join with the device's own metrics.

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::service::{Event, ObservedInfo, Service};

/// Observations change the file at most this often; a finished job changes it at once.
pub const MIN_INTERVAL: Duration = Duration::from_secs(10);

/// With nothing changing, the file is still rewritten this often, so calibration ages stay
/// current and an old `wcetd_metrics_timestamp_seconds` means the daemon stopped (the
/// `WcetdMetricsSilent` alert of docs/fleet/alerts.yml).
pub const HEARTBEAT: Duration = Duration::from_secs(60);

/// One kernel's bounds and calibration, as served.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelMetrics {
    pub name: String,
    pub calibrated_at: DateTime<Utc>,
    pub stale: bool,
    pub overrun: bool,
    /// (partition size, bound served), ascending.
    pub bounds: Vec<(u32, u64)>,
}

/// Everything the file says, read from the service at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub gpu: u32,
    pub uuid: String,
    pub now: DateTime<Utc>,
    pub kernels: Vec<KernelMetrics>,
    pub observed: Vec<ObservedInfo>,
    pub jobs: BTreeMap<&'static str, u64>,
    pub health: String,
    /// `BoundExceeded` signals the bus forwarders skipped ([`Service::bound_exceeded_skipped`]).
    pub bound_exceeded_skipped: u64,
}

impl Snapshot {
    /// Read the service: every calibrated kernel's curve, every observed series, jobs, health.
    pub fn gather(service: &Service, gpu: u32) -> Snapshot {
        let device = service.device();
        let overrun = service.overrun_kernels();
        let kernels = service
            .list_kernels()
            .into_iter()
            .filter_map(|name| {
                // Each size served: one refused (a table without an entry there) costs its own
                // line, not the kernel's whole block.
                let bounds: Vec<(u32, u64)> = device
                    .partition_sizes
                    .iter()
                    .filter_map(|&m| Some((m, service.bound(&name, m, None).ok()?)))
                    .collect();
                let info = service.bound_info(&name, bounds.first()?.0, None).ok()?;
                Some(KernelMetrics {
                    overrun: overrun.contains(&name),
                    name,
                    calibrated_at: info.calibrated_at,
                    stale: info.stale,
                    bounds,
                })
            })
            .collect();
        Snapshot {
            gpu,
            uuid: device.fingerprint.uuid.clone(),
            now: Utc::now(),
            kernels,
            observed: service.list_observed(),
            jobs: service.job_counts(),
            health: service.health(),
            bound_exceeded_skipped: service.bound_exceeded_skipped(),
        }
    }
}

fn seconds(ns: u64) -> String {
    format!("{}", ns as f64 / 1e9)
}

fn signed_seconds(ns: i64) -> String {
    format!("{}", ns as f64 / 1e9)
}

/// A label value as the exposition format quotes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One metric family: its HELP and TYPE lines, then every sample of every device, together as
/// the format wants. Written straight to the file: with 1,000 kernels it is megabytes, not worth
/// holding.
struct Family<'a> {
    out: &'a mut dyn Write,
    name: &'static str,
}

impl<'a> Family<'a> {
    fn new(
        out: &'a mut dyn Write,
        name: &'static str,
        kind: &str,
        help: &str,
    ) -> std::io::Result<Self> {
        writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}")?;
        Ok(Family { out, name })
    }

    /// One sample of device `s`, labelled with its index and UUID.
    fn sample(
        &mut self,
        s: &Snapshot,
        labels: &[(&str, &str)],
        value: &str,
    ) -> std::io::Result<()> {
        write!(
            self.out,
            "{}{{gpu=\"{}\",UUID=\"{}\"",
            self.name,
            s.gpu,
            escape(&s.uuid)
        )?;
        for (k, v) in labels {
            write!(self.out, ",{k}=\"{}\"", escape(v))?;
        }
        writeln!(self.out, "}} {value}")
    }
}

/// A metric family's name, help text, and how to read its value.
type Spec<F> = (&'static str, &'static str, F);
type FromObserved<T> = fn(&ObservedInfo) -> T;
type FromKernel = fn(&KernelMetrics, DateTime<Utc>) -> String;

/// The file's text for the devices `snapshots`.
pub fn render(snapshots: &[Snapshot]) -> String {
    let mut out = Vec::new();
    render_to(snapshots, &mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("the text is UTF-8")
}

/// Write the file's text for the devices `snapshots` to `out`.
pub fn render_to(snapshots: &[Snapshot], out: &mut dyn Write) -> std::io::Result<()> {
    bounds_served(out, snapshots)?;
    observed_counters(out, snapshots)?;
    observed_gauges(out, snapshots)?;
    kernel_gauges(out, snapshots)?;
    job_and_health(out, snapshots)
}

/// The bound served for every kernel and size: what a scheduler stakes its deadlines on, first
/// in the file.
fn bounds_served(out: &mut dyn Write, snapshots: &[Snapshot]) -> std::io::Result<()> {
    let mut f = Family::new(
        out,
        "wcetd_bound_seconds",
        "gauge",
        "Bound served (GetBound) for a kernel on a partition of sms SMs, production floors included.",
    )?;
    for s in snapshots {
        for k in &s.kernels {
            for (sms, bound) in &k.bounds {
                let sms = sms.to_string();
                f.sample(s, &[("kernel", &k.name), ("sms", &sms)], &seconds(*bound))?;
            }
        }
    }
    Ok(())
}

/// The counters of production reports: overruns and launches reported.
///
/// Every served (kernel, size) gets its counters, 0 before any report, so rate() works.
fn observed_counters(out: &mut dyn Write, snapshots: &[Snapshot]) -> std::io::Result<()> {
    let series: Vec<_> = snapshots.iter().map(observed_series).collect();
    let counters: [Spec<FromObserved<u64>>; 2] = [
        (
            "wcetd_overruns_total",
            "Reported launch times above the bound served when they were reported (Monitor1.Report), over every calibration.",
            |o| o.overruns_total,
        ),
        (
            "wcetd_reported_launches_total",
            "Launch times reported from production (Monitor1.Report), over every calibration, as of the last save of the observations (at most --observation-save-interval behind GetObserved), so that a crash never takes it down.",
            |o| o.reported_total_saved,
        ),
    ];
    for (name, help, value) in counters {
        let mut f = Family::new(out, name, "counter", help)?;
        for (s, series) in snapshots.iter().zip(&series) {
            for ((kernel, sms), o) in series {
                let sms = sms.to_string();
                let labels = [("kernel", *kernel), ("sms", sms.as_str())];
                f.sample(s, &labels, &o.map_or(0, value).to_string())?;
            }
        }
    }
    Ok(())
}

/// What production reported since each kernel's last calibration, beside the bound: largest,
/// 99th percentile and headroom. Only where something was reported: with nothing reported there
/// is no largest time or percentile to state.
fn observed_gauges(out: &mut dyn Write, snapshots: &[Snapshot]) -> std::io::Result<()> {
    let gauges: [Spec<FromObserved<String>>; 3] = [
        (
            "wcetd_observed_max_seconds",
            "Largest launch time reported since the kernel's last calibration (exact).",
            |o| seconds(o.max_ns),
        ),
        (
            "wcetd_observed_p99_seconds",
            "99th percentile of the launch times reported since the kernel's last calibration (hdrhistogram, 3 significant digits).",
            |o| seconds(o.quantiles.p99_ns),
        ),
        (
            "wcetd_observed_headroom_seconds",
            "Bound served minus the largest launch time reported since the last calibration: 0 after an overrun (the bound is raised to it), negative only with no bound served.",
            |o| signed_seconds(o.headroom_ns()),
        ),
    ];
    for (name, help, value) in gauges {
        let mut f = Family::new(out, name, "gauge", help)?;
        for s in snapshots {
            for o in s.observed.iter().filter(|o| o.count > 0) {
                let sms = o.partition_sms.to_string();
                f.sample(s, &[("kernel", &o.kernel), ("sms", &sms)], &value(o))?;
            }
        }
    }
    Ok(())
}

/// Every served (kernel, size) of one device, with what was reported there if anything.
fn observed_series(s: &Snapshot) -> BTreeMap<(&str, u32), Option<&ObservedInfo>> {
    let mut series = BTreeMap::new();
    for k in &s.kernels {
        for (sms, _) in &k.bounds {
            series.insert((k.name.as_str(), *sms), None);
        }
    }
    for o in &s.observed {
        series.insert((o.kernel.as_str(), o.partition_sms), Some(o));
    }
    series
}

fn kernel_gauges(out: &mut dyn Write, snapshots: &[Snapshot]) -> std::io::Result<()> {
    let per_kernel: [Spec<FromKernel>; 4] = [
        (
            "wcetd_calibration_timestamp_seconds",
            "When the calibration the kernel's bounds come from was made (Unix time).",
            |k, _| format!("{}", k.calibrated_at.timestamp_millis() as f64 / 1e3),
        ),
        (
            "wcetd_calibration_age_seconds",
            "Age of the kernel's calibration when this file was written.",
            |k, now| format!("{}", (now - k.calibrated_at).num_milliseconds().max(0) as f64 / 1e3),
        ),
        (
            "wcetd_calibration_stale",
            "1 when the kernel's calibration was made on a device that no longer matches (design rule 3).",
            |k, _| u8::from(k.stale).to_string(),
        ),
        (
            "wcetd_overrun_since_calibration",
            "1 when a reported launch time exceeded a bound of the kernel since its last calibration (OverrunKernels).",
            |k, _| u8::from(k.overrun).to_string(),
        ),
    ];
    for (name, help, value) in per_kernel {
        let mut f = Family::new(out, name, "gauge", help)?;
        for s in snapshots {
            for k in &s.kernels {
                f.sample(s, &[("kernel", &k.name)], &value(k, s.now))?;
            }
        }
    }
    Ok(())
}

fn job_and_health(out: &mut dyn Write, snapshots: &[Snapshot]) -> std::io::Result<()> {
    let count = |s: &Snapshot, state: &str| s.jobs.get(state).copied().unwrap_or(0).to_string();
    let mut f = Family::new(
        out,
        "wcetd_jobs_total",
        "counter",
        "Calibration and import jobs finished since the daemon started, by final state.",
    )?;
    for s in snapshots {
        for state in ["done", "failed", "cancelled"] {
            f.sample(s, &[("state", state)], &count(s, state))?;
        }
    }
    let mut f = Family::new(
        out,
        "wcetd_jobs",
        "gauge",
        "Calibration and import jobs waiting or running.",
    )?;
    for s in snapshots {
        for state in ["queued", "running"] {
            f.sample(s, &[("state", state)], &count(s, state))?;
        }
    }
    let mut f = Family::new(
        out,
        "wcetd_bound_exceeded_signals_skipped_total",
        "counter",
        "BoundExceeded signals not sent since the daemon started: the bus forwarder fell behind a flood of overruns (GetObserved's counts and OverrunKernels stay exact), on the device's own object path (/org/wcetd/Wcetd1/gpu/N).",
    )?;
    for s in snapshots {
        f.sample(s, &[], &s.bound_exceeded_skipped.to_string())?;
    }
    let mut f = Family::new(
        out,
        "wcetd_health",
        "gauge",
        "1 for the device's health (the Health property: ok, degraded after a failed job, failed when the device is lost), 0 for the others.",
    )?;
    for s in snapshots {
        for state in ["ok", "degraded", "failed"] {
            let on = s.health == state || s.health.starts_with(&format!("{state}:"));
            f.sample(s, &[("state", state)], if on { "1" } else { "0" })?;
        }
    }
    let mut f = Family::new(
        out,
        "wcetd_metrics_timestamp_seconds",
        "gauge",
        "When wcetd wrote this file (Unix time).",
    )?;
    for s in snapshots {
        f.sample(
            s,
            &[],
            &format!("{}", s.now.timestamp_millis() as f64 / 1e3),
        )?;
    }
    Ok(())
}

/// Gather every device, render and replace the file atomically.
pub fn write(services: &[(u32, Service)], path: &Path) -> std::io::Result<()> {
    // The writer task and the write at shutdown use the same temporary file: one at a time.
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = WRITING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let snapshots: Vec<Snapshot> = services
        .iter()
        .map(|(n, service)| Snapshot::gather(service, *n))
        .collect();
    let written = crate::store::write_atomically(path, |out| {
        // Readable by the node exporter, which runs as another user, whatever the daemon's umask
        // (the unit's 0027 made it 0640). Bounds and counts are not secret.
        use std::os::unix::fs::PermissionsExt;
        out.get_ref()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
        render_to(&snapshots, out)
    });
    drop(snapshots);
    crate::store::release_freed_memory();
    written
}

/// What made a device's metrics change.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wake {
    /// A job finished or health changed: write at once.
    Now,
    /// Observations changed: write at most every [`MIN_INTERVAL`].
    Observed,
}

/// Keep the file current until every device's channels close: at once after a job, at most
/// every [`MIN_INTERVAL`] while observations change, and every [`HEARTBEAT`] regardless.
pub async fn run(services: Vec<(u32, Service)>, path: PathBuf) {
    let (wakes, mut woken) = tokio::sync::mpsc::channel(16);
    for (_, service) in &services {
        tokio::spawn(watch(service.clone(), wakes.clone()));
    }
    drop(wakes);
    let mut last = tokio::time::Instant::now();
    loop {
        let mut wake = match tokio::time::timeout(HEARTBEAT, woken.recv()).await {
            Ok(Some(wake)) => wake,
            Ok(None) => return,
            Err(_) => Wake::Now,
        };
        let due = last + MIN_INTERVAL;
        while wake == Wake::Observed {
            tokio::select! {
                _ = tokio::time::sleep_until(due) => break,
                w = woken.recv() => match w {
                    Some(w) => wake = w,
                    None => break,
                },
            }
        }
        // What else came in meanwhile is in the file about to be written.
        while woken.try_recv().is_ok() {}
        let (s, p) = (services.clone(), path.clone());
        match tokio::task::spawn_blocking(move || write(&s, &p)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(path = %path.display(), error = %e, "writing the metrics file failed")
            }
            Err(e) => tracing::error!(error = %e, "the metrics writer panicked"),
        }
        last = tokio::time::Instant::now();
    }
}

/// Tell the writer when one device's metrics change, until its channels or the writer close.
async fn watch(service: Service, wakes: tokio::sync::mpsc::Sender<Wake>) {
    let mut events = service.subscribe();
    let mut changed = service.observations_changed();
    loop {
        let wake = tokio::select! {
            e = events.recv() => match e {
                Ok(Event::JobFinished { .. }) | Ok(Event::HealthChanged { .. }) => Wake::Now,
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Wake::Now,
                Err(_) => return,
            },
            r = changed.changed() => {
                if r.is_err() {
                    return;
                }
                changed.borrow_and_update();
                Wake::Observed
            }
        };
        if wakes.send(wake).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Quantiles;

    /// Under the unit's umask (0027) the file came out 0640, unreadable by the node exporter.
    #[test]
    fn the_file_is_world_readable_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wcetd.prom");
        // SAFETY: umask only sets the process's file-creation mask; it is restored below (other
        // tests creating files meanwhile get at most fewer permission bits).
        let old = unsafe { libc::umask(0o027) };
        let written = write(&[], &path);
        unsafe { libc::umask(old) };
        written.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
    }

    fn snapshot() -> Snapshot {
        let now = DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        Snapshot {
            gpu: 0,
            uuid: "GPU-\"odd\\uuid".into(),
            now,
            kernels: vec![KernelMetrics {
                name: "bfs".into(),
                calibrated_at: now - chrono::Duration::seconds(90),
                stale: false,
                overrun: true,
                bounds: vec![(8, 1_500_000), (16, 800_000)],
            }],
            observed: vec![ObservedInfo {
                kernel: "bfs".into(),
                partition_sms: 16,
                count: 3,
                max_ns: 900_000,
                quantiles: Quantiles {
                    p50_ns: 700_000,
                    p99_ns: 899_000,
                    p999_ns: 900_000,
                },
                overruns: 1,
                carried: 0,
                bound_ns: 800_000,
                calibration: "c".into(),
                epoch_started: Some(now),
                interference: vec![],
                floor_ns: 900_000,
                reported_total: 3,
                reported_total_saved: 3,
                overruns_total: 1,
                past_epochs: 0,
                last_report: Some(now),
                recalibration_job: 0,
            }],
            jobs: [("done", 2), ("running", 1)].into_iter().collect(),
            health: "degraded: something".into(),
            bound_exceeded_skipped: 7,
        }
    }

    #[test]
    fn the_file_says_what_the_design_names() {
        let text = render(&[snapshot()]);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
                .to_string()
        };
        let device = r#"gpu="0",UUID="GPU-\"odd\\uuid""#;
        assert_eq!(
            line("wcetd_bound_seconds{"),
            format!("wcetd_bound_seconds{{{device},kernel=\"bfs\",sms=\"8\"}} 0.0015")
        );
        assert!(text.contains(&format!(
            "wcetd_overruns_total{{{device},kernel=\"bfs\",sms=\"8\"}} 0\n"
        )));
        assert!(text.contains(&format!(
            "wcetd_overruns_total{{{device},kernel=\"bfs\",sms=\"16\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "wcetd_observed_headroom_seconds{{{device},kernel=\"bfs\",sms=\"16\"}} -0.0001\n"
        )));
        assert!(text.contains(&format!(
            "wcetd_calibration_age_seconds{{{device},kernel=\"bfs\"}} 90\n"
        )));
        assert!(text.contains(&format!("wcetd_health{{{device},state=\"degraded\"}} 1\n")));
        assert!(text.contains(&format!("wcetd_jobs{{{device},state=\"running\"}} 1\n")));
        assert!(text.contains(&format!(
            "wcetd_bound_exceeded_signals_skipped_total{{{device}}} 7\n"
        )));
        // Every family is announced once, before its samples.
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn two_devices_share_each_family() {
        let mut second = snapshot();
        second.gpu = 1;
        second.uuid = "GPU-second".into();
        let text = render(&[snapshot(), second]);
        for gpu in ["0", "1"] {
            let label = format!("wcetd_bound_seconds{{gpu=\"{gpu}\"");
            assert!(text.contains(&label), "no bound of GPU {gpu} in\n{text}");
        }
        // One HELP and TYPE per family, every device's samples under it, as the format requires.
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a family announced twice");
        let mut family = "";
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap();
            } else if !line.starts_with('#') {
                assert!(
                    line.starts_with(family),
                    "{line} outside its family {family}"
                );
            }
        }
    }
}
