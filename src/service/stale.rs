//! Whether a served bound still holds as it stands, and what makes it current again (design
//! rule 3: a bound holds for the conditions it was measured under). A bound is stale when it was
//! measured under another device fingerprint, for other code than the catalogue has under the
//! kernel's name now, or for a manifest whose module or fill files changed on disk since it was
//! loaded ([`super::code_watch`]). Health names each stale kernel with the one step that makes
//! it current: recalibrate it, reload the kernels, import again, or wait for the job already
//! calibrating it.

use std::collections::HashMap;
use std::sync::PoisonError;

use super::code_watch::OffDisk;
use super::{served, Service};
use crate::store::KernelCalibration;

impl Service {
    /// What Health says of stale bounds, each group with the command that makes it current: a
    /// kernel whose files changed on disk is reloaded (a recalibration alone is refused), one in
    /// the catalogue recalibrated, and one known only from imported samples or a bundle, which
    /// has nothing to run here, imported again.
    pub(super) fn stale_advice(&self) -> Vec<String> {
        self.stale_by_remedy().advice(&self.wcetctl())
    }

    /// The stale kernels, each in the group of the one step that makes it current.
    fn stale_by_remedy(&self) -> StaleByRemedy {
        let catalogue = self.catalogue();
        let (off_disk, stale): (Vec<String>, Vec<String>) = self
            .stale_kernels()
            .into_iter()
            .partition(|k| self.files_changed(k).is_some());
        let (unreadable, edited): (Vec<String>, Vec<String>) = off_disk
            .into_iter()
            .partition(|k| matches!(self.files_changed(k), Some(OffDisk::Unreadable(_))));
        let (runnable, imported): (Vec<String>, Vec<String>) =
            stale.into_iter().partition(|k| catalogue.get(k).is_some());
        // A kernel a queued or running job calibrates needs no command, only the job's end.
        let pending = self.pending_jobs();
        let (waiting, runnable): (Vec<String>, Vec<String>) =
            runnable.into_iter().partition(|k| pending.contains_key(k));
        // One held back for losing the device has its own line (`held_back`): a command that
        // runs it here would restart the daemon.
        let (held, runnable): (Vec<String>, Vec<String>) = runnable
            .into_iter()
            .partition(|k| self.held_back(k).is_some());
        StaleByRemedy {
            waiting,
            pending,
            runnable,
            held,
            edited,
            unreadable,
            imported,
        }
    }

    /// Kernels that a queued or running calibration job measures, each with the job's number
    /// (the latest, where several do: an earlier one may be timing code a reload has since
    /// replaced, and publish stale; the latest is the one that makes the bounds current).
    pub(super) fn pending_jobs(&self) -> HashMap<String, u64> {
        let jobs = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut pending = HashMap::new();
        for (&id, (status, _)) in jobs.iter() {
            if !status.state.finished() {
                for k in &status.kernels {
                    pending.insert(k.clone(), id);
                }
            }
        }
        pending
    }

    /// Whether `kernel` lacks a current calibration under any interference the daemon measures.
    pub(super) fn needs_calibration(&self, kernel: &str) -> bool {
        let snap = self.snapshot();
        self.inner.config.interference.iter().any(|&tag| {
            snap.tables(tag)
                .get(kernel)
                .is_none_or(|k| self.is_stale(k))
        })
    }

    /// Rule 3: a bound holds for the conditions it was measured under, this device's
    /// fingerprint and the kernel's code as the catalogue has it now.
    pub(super) fn is_stale(&self, k: &KernelCalibration) -> bool {
        k.environment().fingerprint != self.inner.device.fingerprint
            || self.code_changed(k)
            || self.files_changed(&k.campaign.kernel).is_some()
    }

    /// Why the module or a fill file of the manifest loaded under `kernel` is no longer what it
    /// was loaded with, as the GPU worker last found it: the application now runs other code
    /// than the bounds were measured for.
    pub(super) fn files_changed(&self, kernel: &str) -> Option<super::code_watch::OffDisk> {
        let code = self
            .catalogue()
            .get(kernel)?
            .manifest()?
            .code_sha256
            .clone();
        self.inner
            .changed_on_disk
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(kernel)
            .filter(|(loaded, _)| *loaded == code)
            .map(|(_, off)| off.clone())
    }

    /// Whether the kernel `k` measured is not the code the catalogue has under its name now: a
    /// manifest, module or fill file edited since. A calibration that recorded no code (imported
    /// from an older exporter, or made before digests were kept) counts as changed where the
    /// catalogue has a manifest under the name, since nothing says which version it timed; a
    /// kernel no longer in the catalogue is not served anyway.
    pub(super) fn code_changed(&self, k: &KernelCalibration) -> bool {
        let catalogue = self.catalogue();
        let Some(spec) = catalogue.get(&k.campaign.kernel) else {
            return false;
        };
        if k.code.is_empty() {
            return spec.manifest().is_some();
        }
        spec.code_digest() != k.code
    }

    /// Names of kernels with a served calibration (of either interference) that is stale
    /// ([`Service::is_stale`]): the `StaleKernels` property.
    pub fn stale_kernels(&self) -> Vec<String> {
        let snap = self.snapshot();
        let catalogue = self.catalogue();
        let mut names: Vec<String> = snap
            .kernels
            .iter()
            .chain(&snap.contended)
            .filter(|(n, k)| served(&catalogue, n, k) && self.is_stale(k))
            .map(|(n, _)| n.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The stale kernels, by the one step that makes each current.
struct StaleByRemedy {
    /// A queued or running job calibrates them: current when it ends.
    waiting: Vec<String>,
    /// The job that calibrates each kernel, by kernel.
    pending: HashMap<String, u64>,
    /// In the catalogue: recalibrated.
    runnable: Vec<String>,
    /// Held back for losing the device: Health says why on its own line first.
    held: Vec<String>,
    /// A module or fill file changed on disk: reloaded.
    edited: Vec<String>,
    /// A module or fill file cannot be read now: made readable again.
    unreadable: Vec<String>,
    /// Known only from imported samples or a bundle: imported again.
    imported: Vec<String>,
}

impl StaleByRemedy {
    /// Health's lines on stale bounds, a group each, with the command that makes it current
    /// (starting `wcetctl`, as [`super::ServiceConfig::wcetctl`] says).
    fn advice(&self, wcetctl: &str) -> Vec<String> {
        let mut advice = Vec::new();
        // Health is read by people and grows with a fleet's catalogue: at most twenty names per
        // line (`StaleKernels` and `wcetctl status` list every one).
        let listed_by = format!("`{wcetctl} status` or Bounds1.StaleKernels");
        let names = |k: &[String]| super::names_in_a_message_listed_by(k, &listed_by);
        if !self.waiting.is_empty() {
            let jobs: Vec<String> = self
                .waiting
                .iter()
                .map(|k| format!("{k} (job {})", self.pending[k]))
                .collect();
            advice.push(format!(
                "stale bounds being recalibrated: {}; current when the job ends (`{wcetctl} jobs`)",
                names(&jobs)
            ));
        }
        if !self.runnable.is_empty() {
            // Past twenty, the command without names: it recalibrates every kernel.
            let command = if self.runnable.len() > super::NAMES_IN_A_MESSAGE {
                format!("{wcetctl} recalibrate")
            } else {
                format!("{wcetctl} recalibrate {}", self.runnable.join(" "))
            };
            advice.push(format!(
                "stale bounds for {} (measured under another device, driver or clock policy, or for other code of the kernel); recalibrate: `{command}`",
                names(&self.runnable)
            ));
        }
        if !self.held.is_empty() {
            advice.push(format!(
                "stale bounds for {} (held back for losing the device: see its own line before recalibrating it)",
                names(&self.held)
            ));
        }
        if !self.edited.is_empty() {
            advice.push(format!(
                "stale bounds for {} (a module or fill file changed on disk since the manifest was loaded); reload: `{wcetctl} kernels reload`, which calibrates them",
                names(&self.edited)
            ));
        }
        if !self.unreadable.is_empty() {
            advice.push(format!(
                "stale bounds for {} (a module or fill file cannot be read by the daemon now: see the kernel's notes in GetBoundInfo); make it readable again: the bounds are current again at once if the files are unchanged",
                names(&self.unreadable)
            ));
        }
        if !self.imported.is_empty() {
            advice.push(format!(
                "stale bounds for {} (samples or a calibration imported for another device, driver or clock policy); import them again as measured here: `{wcetctl} import` or `{wcetctl} import-calibration`",
                names(&self.imported)
            ));
        }
        advice
    }
}
