//! Jobs a previous run did not finish: the worker records each job in the state directory while
//! it runs (`job-running-<fingerprint digest>.json`, written atomically) and takes the record
//! out when the job ends. A record found at start means the process died during that job
//! (SIGKILL, a power cut, a crash): its kernels keep the bounds from before it, which is safe,
//! but nothing else would say the recalibration an operator asked for never happened. `Health`
//! says so, as after a failed job, until a job succeeds: the records stay until then, across
//! restarts, and a second interrupted job adds its own rather than replacing the first's.

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
    started_at: DateTime<Utc>,
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

/// Record that `job` is running, beside what earlier runs left unfinished.
pub(super) fn mark(path: &Path, job: u64, what: &str, kernels: &[String]) {
    let mut all = records(path).unwrap_or_default();
    all.push(Record {
        pid: std::process::id(),
        job,
        what: what.to_string(),
        kernels: kernels.to_vec(),
        started_at: Utc::now(),
    });
    write(path, &all);
}

/// `job` ended: its record goes, and when it succeeded every earlier one too (as `Health` turns
/// `ok` after a successful job, whatever failed before it).
pub(super) fn ended(path: &Path, job: u64, succeeded: bool) {
    let all = records(path).unwrap_or_default();
    let started_here = |r: &Record| r.job == job && r.pid == std::process::id();
    let left: Vec<Record> = if succeeded {
        Vec::new()
    } else {
        all.into_iter().filter(|r| !started_here(r)).collect()
    };
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
                "an earlier run ended during a job whose record ({}) cannot be read: its kernels keep the bounds from before it",
                path.display()
            ))
        }
    };
    let jobs: Vec<String> = all
        .iter()
        .map(|r| {
            format!(
                "job {} ({} {}, started {})",
                r.job,
                r.what,
                r.kernels.join(", "),
                r.started_at.to_rfc3339()
            )
        })
        .collect();
    let mut kernels: Vec<&str> = all
        .iter()
        .filter(|r| r.what == "calibrating")
        .flat_map(|r| r.kernels.iter().map(String::as_str))
        .collect();
    kernels.sort_unstable();
    kernels.dedup();
    let again = if kernels.is_empty() {
        "the import again".to_string()
    } else {
        format!("`wcetctl recalibrate {}`", kernels.join(" "))
    };
    Some(format!(
        "an earlier run ended during {}: those kernels keep the bounds from before it; run {again}",
        jobs.join(" and ")
    ))
}
