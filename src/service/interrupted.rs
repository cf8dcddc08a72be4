//! Jobs a previous run did not finish: each job is recorded in the state directory from the
//! moment it is queued (`job-running-<fingerprint digest>.json`, written atomically), marked when
//! the worker starts it, and taken out when it ends or is cancelled. A record found at start
//! means the process died before the job ended (SIGKILL, a power cut, a crash), during it or
//! before it started: its kernels keep the bounds they had when the process stopped (from before
//! the job, or what it published before then), which is safe, but nothing else would say the
//! recalibration an operator asked for never happened. `Health` says so, as after a failed job,
//! and a warning is logged, until a job succeeds: the records stay until then, across restarts,
//! and a second interrupted run adds its own rather than replacing the first's.

use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};

use crate::gpu::DeviceInfo;
use crate::store::Store;

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    /// The process that ran it: job numbers start afresh with every run.
    pid: u32,
    job: u64,
    /// What the job did: `calibrating`, `importing samples of`, `importing a bundle of`.
    what: String,
    kernels: Vec<String>,
    /// When it was queued, then when it started.
    started_at: DateTime<Utc>,
    /// Not started yet (records before 2026-11-24 are of started jobs only).
    #[serde(default)]
    queued: bool,
}

/// Where the running and interrupted jobs of `device` are recorded.
pub(super) fn path(store: &Store, device: &DeviceInfo) -> PathBuf {
    store
        .dir()
        .join(format!("job-running-{}.json", device.fingerprint.digest()))
}

fn records(path: &Path) -> Result<Vec<Record>, ()> {
    match std::fs::read(path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|_| ()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(_) => Err(()),
    }
}

fn write(path: &Path, records: &[Record]) {
    let written = if records.is_empty() {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            // The removal made durable, so that a power cut cannot bring the record back.
            _ => crate::store::sync_directory_of(path),
        }
    } else {
        crate::store::write_atomically(path, |out| {
            serde_json::to_writer(out, records).map_err(std::io::Error::other)
        })
    };
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot update the record of running jobs; a crash during one may not be named at the next start");
    }
}

/// Record that `job` is queued, beside what earlier runs left unfinished.
pub(super) fn queued(path: &Path, job: u64, what: &str, kernels: &[String]) {
    let mut all = records(path).unwrap_or_default();
    all.push(Record {
        pid: std::process::id(),
        job,
        what: what.to_string(),
        kernels: kernels.to_vec(),
        started_at: Utc::now(),
        queued: true,
    });
    write(path, &all);
}

fn of_this_run(r: &Record, job: u64) -> bool {
    r.job == job && r.pid == std::process::id()
}

/// Record that `job` is running (queued before, or not recorded then: added now).
pub(super) fn started(path: &Path, job: u64, what: &str, kernels: &[String]) {
    let mut all = records(path).unwrap_or_default();
    match all.iter_mut().find(|r| of_this_run(r, job)) {
        Some(r) => {
            r.queued = false;
            r.started_at = Utc::now();
        }
        None => all.push(Record {
            pid: std::process::id(),
            job,
            what: what.to_string(),
            kernels: kernels.to_vec(),
            started_at: Utc::now(),
            queued: false,
        }),
    }
    write(path, &all);
}

/// `job` ended, or was cancelled before it started: its record goes, and when it succeeded
/// every earlier run's too (as `Health` turns `ok` after a successful job, whatever failed
/// before it); this run's queued jobs stay recorded until they end.
pub(super) fn ended(path: &Path, job: u64, succeeded: bool) {
    let all = records(path).unwrap_or_default();
    let left: Vec<Record> = all
        .into_iter()
        .filter(|r| !of_this_run(r, job))
        .filter(|r| !succeeded || (r.pid == std::process::id() && r.queued))
        .collect();
    write(path, &left);
}

/// At start: what earlier runs left unfinished, for `Health`. The records stay until a job
/// succeeds.
pub(super) fn read(path: &Path) -> Option<String> {
    let all = match records(path) {
        Ok(all) if all.is_empty() => return None,
        Ok(all) => all,
        Err(()) => {
            return Some(format!(
                "an earlier run ended during a job whose record ({}) cannot be read: its kernels keep the bounds they had when it stopped",
                path.display()
            ))
        }
    };
    let describe = |r: &Record| {
        let when = if r.queued { "queued" } else { "started" };
        format!(
            "job {} ({} {}, {when} {})",
            r.job,
            r.what,
            r.kernels.join(", "),
            r.started_at.to_rfc3339()
        )
    };
    let list = |queued: bool| -> Vec<String> {
        all.iter()
            .filter(|r| r.queued == queued)
            .map(describe)
            .collect()
    };
    let (running, waiting) = (list(false), list(true));
    let mut kernels: Vec<&str> = all
        .iter()
        .filter(|r| r.what == "calibrating")
        .flat_map(|r| r.kernels.iter().map(String::as_str))
        .collect();
    kernels.sort_unstable();
    kernels.dedup();
    let mut again = Vec::new();
    if !kernels.is_empty() {
        again.push(format!("`wcetctl recalibrate {}`", kernels.join(" ")));
    }
    if all.iter().any(|r| r.what != "calibrating") {
        again.push("the import again".to_string());
    }
    let during = match (running.is_empty(), waiting.is_empty()) {
        (false, true) => format!("during {}", running.join(" and ")),
        (true, false) => format!("before {} started", waiting.join(" and ")),
        _ => format!(
            "during {}, before {} started",
            running.join(" and "),
            waiting.join(" and ")
        ),
    };
    Some(format!(
        "an earlier run ended {during}: those kernels keep the bounds they had when it stopped (from before the job, or what it published before then); run {}",
        again.join(" and ")
    ))
}
