//! A job the previous run did not finish: the worker records each job in the state directory
//! while it runs (`job-running-<fingerprint digest>.json`, written atomically) and removes the
//! record when the job ends, however it ends. A record found at start means the process died
//! during that job (SIGKILL, a power cut, a crash): its kernels keep the bounds from before it,
//! which is safe, but nothing else would say the recalibration an operator asked for never
//! happened. `Health` says so, as after a failed job, until the next job ends: the record is
//! left in place until then, so restarts in between keep saying it.

use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};

use crate::gpu::DeviceInfo;
use crate::store::Store;

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    job: u64,
    /// What the job did: `calibrating`, `importing samples of`, `importing a bundle of`.
    what: String,
    kernels: Vec<String>,
    started_at: DateTime<Utc>,
}

/// Where the running job of `device` is recorded.
pub(super) fn path(store: &Store, device: &DeviceInfo) -> PathBuf {
    store
        .dir()
        .join(format!("job-running-{}.json", device.fingerprint.digest()))
}

/// Record that `job` is running. A record that cannot be written costs only this note.
pub(super) fn mark(path: &Path, job: u64, what: &str, kernels: &[String]) {
    let record = Record {
        job,
        what: what.to_string(),
        kernels: kernels.to_vec(),
        started_at: Utc::now(),
    };
    let written = crate::store::write_atomically(path, |out| {
        serde_json::to_writer(out, &record).map_err(std::io::Error::other)
    });
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot record the running job; a crash during it will not be named at the next start");
    }
}

/// The job ended: its record goes.
pub(super) fn clear(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the record of the job that ended")
        }
    }
}

/// At start: what a previous run left unfinished, for `Health`. The record stays until the next
/// job ends (which replaces it), so a restart without a job does not forget it.
pub(super) fn read(path: &Path) -> Option<String> {
    let text = std::fs::read(path).ok()?;
    Some(match serde_json::from_slice::<Record>(&text) {
        Ok(r) => {
            let again = if r.what == "calibrating" {
                format!("`wcetctl recalibrate {}`", r.kernels.join(" "))
            } else {
                "the import again".to_string()
            };
            format!(
                "an earlier run ended during job {} ({} {}, started {}): those kernels keep the bounds from before it; run {again}",
                r.job,
                r.what,
                r.kernels.join(", "),
                r.started_at.to_rfc3339()
            )
        }
        Err(_) => format!(
            "an earlier run ended during a job whose record ({}) cannot be read: its kernels keep the bounds from before it",
            path.display()
        ),
    })
}
