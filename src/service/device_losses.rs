//! Kernels that were running when this process lost the device: a sticky CUDA error (a
//! device-side `assert`, an illegal address, an illegal instruction) ends every CUDA call of the
//! process, so the daemon exits for its service manager to restart it. A manifest kernel with
//! such a bug would then lose the device again at every start, as the initial calibration runs
//! it, and the daemon would never serve for long.
//!
//! So each loss is recorded, before the exit is signalled, in the state directory
//! (`device-lost-<device UUID digest>.json`, written atomically): the kernel that was running
//! when the device was lost, its code digest, why, and when. A kernel whose current code lost
//! the device [`HOLD_AFTER`] times since it last ran a job through is **held back**: it is not
//! calibrated at start nor by a recalibration of every kernel, and `Health` and `GetBound` say
//! why and what to do. One loss is not enough: the device may have failed by itself (a GPU that
//! fell off the bus) while an innocent kernel ran; the kernel is then measured last at the next
//! start, so the others are served first. An operator who names the kernel in `Recalibrate`
//! runs it anyway (the record then says whether it lost the device once more), and new code (a
//! manifest whose module or arguments changed) starts with a clean record. A job that measures a
//! kernel through clears its losses.
//!
//! A held kernel keeps the bounds it had, if any: the losses say nothing against them, they
//! were measured without a loss. The record file is keyed by the UUID, not the fingerprint: a
//! new driver does not fix a kernel's bug.

use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::gpu::DeviceInfo;
use crate::kernels::KernelSpec;
use crate::store::Store;

/// Losses of the device while a kernel's code ran, since it last ran a job through, that hold it
/// back from automatic calibration. Two: one can be the device's own failure.
pub const HOLD_AFTER: usize = 2;

/// Records kept per kernel: enough to show a pattern, bounded so a file cannot grow forever.
const KEPT_PER_KERNEL: usize = 8;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Loss {
    kernel: String,
    /// [`KernelSpec::code_digest`] of what ran: a loss counts against that code only.
    code: String,
    why: String,
    at: DateTime<Utc>,
}

/// One device's record of losses, kept in memory as the file says.
pub(super) struct DeviceLosses {
    path: PathBuf,
    losses: Mutex<Vec<Loss>>,
}

impl DeviceLosses {
    /// What earlier runs recorded for `device`. A file that cannot be read is logged and treated
    /// as empty: no kernel is held back, which costs restarts, never a bound.
    pub(super) fn load(store: &Store, device: &DeviceInfo) -> DeviceLosses {
        let uuid = crate::fnv::fnv1a_hex(device.fingerprint.uuid.as_bytes());
        let path = store.dir().join(format!("device-lost-{uuid}.json"));
        let losses = match read(&path) {
            Ok(losses) => losses,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the record of kernels that lost the device cannot be read; no kernel is held back from calibration");
                Vec::new()
            }
        };
        DeviceLosses {
            path,
            losses: Mutex::new(losses),
        }
    }

    /// `kernel` was running when the device was lost (`why`): recorded durably now, before the
    /// daemon is told to exit.
    pub(super) fn lost_while_running(&self, kernel: &KernelSpec, why: &str) {
        let mut losses = self.losses.lock().unwrap_or_else(PoisonError::into_inner);
        losses.push(Loss {
            kernel: kernel.name.clone(),
            code: kernel.code_digest(),
            why: why.to_string(),
            at: Utc::now(),
        });
        let of_it = losses.iter().filter(|l| l.kernel == kernel.name).count();
        let mut excess = of_it.saturating_sub(KEPT_PER_KERNEL);
        losses.retain(|l| {
            let drop = excess > 0 && l.kernel == kernel.name;
            excess -= usize::from(drop);
            !drop
        });
        self.save(&losses);
        tracing::error!(kernel = %kernel.name, "the device was lost while this kernel ran ({why}); recorded in {}", self.path.display());
    }

    /// A job ran these kernels through: their losses are forgotten.
    pub(super) fn ran_through(&self, kernels: &[String]) {
        let mut losses = self.losses.lock().unwrap_or_else(PoisonError::into_inner);
        let before = losses.len();
        losses.retain(|l| !kernels.contains(&l.kernel));
        if losses.len() != before {
            self.save(&losses);
        }
    }

    /// How often `kernel`'s current code lost the device since it last ran through, and the
    /// last reason.
    pub(super) fn of(&self, kernel: &KernelSpec) -> (usize, Option<String>) {
        let losses = self.losses.lock().unwrap_or_else(PoisonError::into_inner);
        let code = kernel.code_digest();
        let mine: Vec<&Loss> = losses
            .iter()
            .filter(|l| l.kernel == kernel.name && l.code == code)
            .collect();
        (mine.len(), mine.last().map(|l| l.why.clone()))
    }

    /// Why `kernel` is held back from automatic calibration, or `None` when it is not.
    pub(super) fn held_back(&self, kernel: &KernelSpec) -> Option<String> {
        let (times, why) = self.of(kernel);
        (times >= HOLD_AFTER).then(|| {
            format!(
                "kernel `{}` was running each of the {times} times the device was lost since it last completed a calibration (last: {}), so it is not calibrated automatically; fix its code (a changed module or arguments start afresh) or run `wcetctl recalibrate {}` to try it again, which restarts the daemon if it loses the device once more",
                kernel.name,
                why.unwrap_or_default(),
                kernel.name
            )
        })
    }

    fn save(&self, losses: &[Loss]) {
        let written = if losses.is_empty() {
            match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => crate::store::sync_directory_of(&self.path),
            }
        } else {
            crate::store::write_atomically(&self.path, |out| {
                serde_json::to_writer_pretty(out, losses).map_err(std::io::Error::other)
            })
        };
        if let Err(e) = written {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot update the record of kernels that lost the device; a kernel that loses it at every start may not be held back");
        }
    }
}

fn read(path: &Path) -> std::io::Result<Vec<Loss>> {
    match std::fs::read(path) {
        Ok(text) => serde_json::from_slice(&text).map_err(std::io::Error::other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> KernelSpec {
        crate::kernels::builtin_suite()
            .into_iter()
            .find(|k| k.name == name)
            .expect("a built-in kernel")
    }

    fn at(dir: &Path) -> DeviceLosses {
        let path = dir.join("device-lost-x.json");
        DeviceLosses {
            losses: Mutex::new(read(&path).unwrap()),
            path,
        }
    }

    /// One loss is not enough to hold a kernel back, two are, and they survive a restart (the
    /// file is read afresh); a job that runs the kernel through forgets them, and other code of
    /// the same name is not held back by losses of the old.
    #[test]
    fn two_losses_hold_a_kernel_back_until_it_runs_through() {
        let dir = tempfile::tempdir().unwrap();
        let lud = spec("lud");
        at(dir.path()).lost_while_running(&lud, "CUDA_ERROR_ASSERT");
        assert_eq!(at(dir.path()).held_back(&lud), None);
        at(dir.path()).lost_while_running(&lud, "CUDA_ERROR_ILLEGAL_ADDRESS");
        let restarted = at(dir.path());
        let why = restarted
            .held_back(&lud)
            .expect("held back after two losses");
        assert!(
            why.contains("2 times") && why.contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{why}"
        );
        assert_eq!(restarted.held_back(&spec("bfs")), None);
        let changed = KernelSpec {
            body: crate::kernels::KernelBody::Simulated,
            ..lud.clone()
        };
        assert_eq!(
            restarted.held_back(&changed),
            None,
            "new code starts afresh"
        );
        restarted.ran_through(&["lud".to_string()]);
        assert_eq!(at(dir.path()).held_back(&lud), None);
        assert!(!dir.path().join("device-lost-x.json").exists());
    }

    #[test]
    fn the_record_of_one_kernel_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let losses = at(dir.path());
        for i in 0..20 {
            losses.lost_while_running(&spec("lud"), &format!("loss {i}"));
        }
        let (times, last) = at(dir.path()).of(&spec("lud"));
        assert_eq!((times, last.as_deref()), (KEPT_PER_KERNEL, Some("loss 19")));
    }
}
