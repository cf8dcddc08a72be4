//! Kernels that were running when this process lost a device: a sticky CUDA error (a
//! device-side `assert`, an illegal address, an illegal instruction) ends every CUDA call of the
//! process, so the daemon exits for its service manager to restart it. A manifest kernel with
//! such a bug would then lose the device again at every start, as the initial calibration runs
//! it, and the daemon would never serve for long.
//!
//! So each loss is recorded, before the exit is signalled, in the state directory
//! (`device-lost-<device UUID digest>.json`, written atomically): the kernel that was running
//! when the device was lost, its code digest, why, and when. Only the first loss of a process
//! is charged: after it every call fails at once, whatever runs. A kernel whose current code
//! was running at [`HOLD_AFTER`] losses since it last completed a calibration on this GPU (on
//! any GPU of the state directory: the code is as buggy on each, and any one GPU's loss restarts
//! the whole daemon) is **held back**: no calibration runs it unless it is named (at start, in
//! `Recalibrate([])`, at a reload, after an overrun), and `Health`, `GetBound` and the job
//! message say why and what to do. One loss is not enough: the device may have failed by
//! itself (a GPU that fell off the bus) while an innocent kernel ran; the kernel is then
//! measured after the others, whose bounds are published first ([`worker`]'s `calibrate_job`).
//! When losses name several kernels, `Health` says the device is as suspect as they are.
//!
//! A held kernel keeps the bounds it had, if any: the losses say nothing against bounds measured
//! without one. New code (any edit of a manifest, its module or fill files) starts afresh, and a
//! calibration that runs the kernel through clears its record on this GPU. A record that cannot
//! be read is moved aside (unparsable) or reported (unreadable); either way it costs restarts,
//! never a bound, and `Health` says so.

use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::gpu::DeviceInfo;
use crate::kernels::KernelSpec;
use crate::store::Store;

/// Losses of a device while a kernel's code ran, since it last ran a job through, that hold it
/// back from automatic calibration. Two: one can be the device's own failure.
pub const HOLD_AFTER: usize = 2;

/// Records kept per kernel: enough to show a pattern, bounded so a file cannot grow forever.
const KEPT_PER_KERNEL: usize = 8;

const PREFIX: &str = "device-lost-";

/// A device's file: its losses, and when it last ran through code that a device was lost
/// with.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Record {
    losses: Vec<Loss>,
    /// One per (kernel, code), the latest: another device's losses before it do not hold the
    /// code back here (it ran through here since).
    #[serde(default)]
    ran_through: Vec<Loss>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Loss {
    kernel: String,
    /// [`KernelSpec::code_digest`] of what ran: a loss counts against that code only.
    code: String,
    why: String,
    at: DateTime<Utc>,
}

impl Loss {
    fn of(&self, kernel: &KernelSpec, code: &str) -> bool {
        self.kernel == kernel.name && self.code == code
    }
}

/// One device's record of losses, kept in memory as its file says, beside what the other
/// devices' files said at start.
pub(super) struct DeviceLosses {
    path: PathBuf,
    /// The command that acts on this device, for the advice (`wcetctl`, or `wcetctl --gpu N`
    /// where one daemon serves several: [`super::ServiceConfig::wcetctl`]).
    wcetctl: String,
    record: Mutex<Record>,
    /// The other devices' losses, read at start: a loss on any of them ends this process, so
    /// none is added while it runs (one cleared there still counts here until a restart, or
    /// until the code runs through here).
    others: Vec<Loss>,
    /// Why the record could not be read or written, for `Health`, until a write succeeds.
    problem: Mutex<Option<String>>,
    /// The file was there but could not be read at start: it is never written (nor removed).
    unread: bool,
    /// The notice of the damaged record this start set aside.
    moved_aside: Option<String>,
}

impl DeviceLosses {
    /// What earlier runs recorded in `store`'s directory, for `device` (acted on by `wcetctl`) and the
    /// others.
    pub(super) fn load(store: &Store, device: &DeviceInfo, wcetctl: String) -> DeviceLosses {
        let uuid = crate::fnv::fnv1a_hex(device.fingerprint.uuid.as_bytes());
        let path = store.dir().join(format!("{PREFIX}{uuid}.json"));
        let mut moved_aside = None;
        let (record, problem) = match read(&path) {
            Ok(record) => (record, None),
            // Named among the files set aside (`Health`, until a job succeeds, across restarts),
            // not as a problem of this run only: a restart made it `ok` (a hunt found it).
            Err(Unreadable::Corrupt(why)) => {
                let notice = format!("{} (the record of kernels that lost the device: {why}; a kernel that loses it at every start may not be held back)", path.display());
                let notices =
                    crate::store::set_aside_notices_path(store.dir(), &device.fingerprint);
                crate::store::quarantine_noted(
                    &path,
                    "record of kernels that lost the device",
                    &why,
                    (&notices, &notice),
                );
                moved_aside = Some(notice);
                (Record::default(), None)
            }
            // Left where it is, and never written while unread (`save`): replaced, or moved
            // aside, its losses would be forgotten by the next start.
            Err(Unreadable::Io(e)) => (
                Record::default(),
                Some(format!(
                    "cannot be read ({e}), so it is not written either until a restart reads it"
                )),
            ),
        };
        let unread = problem
            .as_ref()
            .is_some_and(|p| p.starts_with("cannot be read"));
        DeviceLosses {
            others: others_in(store.dir(), &path),
            path,
            wcetctl,
            record: Mutex::new(record),
            problem: Mutex::new(problem),
            unread,
            moved_aside,
        }
    }

    /// The notice of a damaged record this start set aside, for `Health`'s files set aside.
    pub(super) fn moved_aside(&self) -> Option<String> {
        self.moved_aside.clone()
    }

    /// `kernel` was running when the device was lost (`why`): recorded durably now, before the
    /// daemon is told to exit.
    pub(super) fn lost_while_running(&self, kernel: &KernelSpec, why: &str) {
        let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        let losses = &mut record.losses;
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
        match self.save(&record) {
            Ok(()) => {
                tracing::error!(kernel = %kernel.name, "the device was lost while this kernel ran ({why}); recorded in {}", self.path.display())
            }
            Err(()) => {
                tracing::error!(kernel = %kernel.name, "the device was lost while this kernel ran ({why}); NOT recorded (see the warning before): if it loses the device at every start, it is not held back")
            }
        }
    }

    /// `kernel` ran through every step of a calibration on this device: its losses here are
    /// forgotten, and other devices' before now no longer count here (of the code that ran; a
    /// record against other code of the same name stays). Written only where a loss of the
    /// code is on record, so a calibration of sound kernels writes nothing.
    pub(super) fn ran_through(&self, kernel: &KernelSpec) {
        let code = kernel.code_digest();
        let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        let own = record.losses.iter().any(|l| l.of(kernel, &code));
        if !own && !self.others.iter().any(|l| l.of(kernel, &code)) {
            return;
        }
        record.losses.retain(|l| !l.of(kernel, &code));
        record.ran_through.retain(|l| !l.of(kernel, &code));
        record.ran_through.push(Loss {
            kernel: kernel.name.clone(),
            code,
            why: "ran through a calibration".into(),
            at: Utc::now(),
        });
        let _ = self.save(&record);
    }

    /// How often `kernel`'s current code was running when a device was lost since it last ran
    /// through, and the last reason.
    pub(super) fn of(&self, kernel: &KernelSpec) -> (usize, Option<String>) {
        let record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        let code = kernel.code_digest();
        let since = record
            .ran_through
            .iter()
            .find(|r| r.of(kernel, &code))
            .map(|r| r.at);
        let elsewhere = self
            .others
            .iter()
            .filter(|l| since.is_none_or(|ran| l.at > ran));
        let mut mine: Vec<&Loss> = record
            .losses
            .iter()
            .chain(elsewhere)
            .filter(|l| l.of(kernel, &code))
            .collect();
        mine.sort_by_key(|l| l.at);
        (mine.len(), mine.last().map(|l| l.why.clone()))
    }

    /// Why `kernel` is held back from automatic calibration ("it was running ..."), or `None`.
    pub(super) fn held_back(&self, kernel: &KernelSpec) -> Option<String> {
        let (times, why) = self.of(kernel);
        if times < HOLD_AFTER {
            return None;
        }
        let (name, wcetctl) = (&kernel.name, &self.wcetctl);
        let retry = format!("`{wcetctl} recalibrate {name}`");
        let advice = match kernel.builtin() {
            Some(_) => format!(
                "a built-in kernel that loses the device points at the device or its driver: check `nvidia-smi` and the kernel log for Xid errors, then run {retry}"
            ),
            None => format!(
                "fix its code (any edit of its manifest, module or fill files starts afresh at `wcetctl kernels reload`) or run {retry} to try it again, which restarts the daemon if it loses the device once more"
            ),
        };
        Some(format!(
            "it was running each of the {times} times a device was lost since it last completed a calibration (last: {}), so it is not calibrated unless named; {advice}",
            why.unwrap_or_default()
        ))
    }

    /// For `Health`: when this device was lost with several kernels running, the device is as
    /// suspect as they are; and a record that could not be read or written.
    pub(super) fn warnings(&self) -> Vec<String> {
        let mut said = Vec::new();
        let record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        let mut kernels: Vec<&str> = record.losses.iter().map(|l| l.kernel.as_str()).collect();
        kernels.sort_unstable();
        kernels.dedup();
        if kernels.len() > 1 {
            said.push(format!(
                "the device was lost while {} different kernels ran ({}): suspect the device as much as the kernels (`nvidia-smi`, Xid errors in the kernel log)",
                kernels.len(),
                kernels.join(", ")
            ));
        }
        if let Some(problem) = &*self.problem.lock().unwrap_or_else(PoisonError::into_inner) {
            said.push(format!(
                "the record of kernels that lost the device ({}) {problem}: a kernel that loses it at every start may not be held back",
                self.path.display()
            ));
        }
        said
    }

    fn save(&self, record: &Record) -> Result<(), ()> {
        if self.unread {
            tracing::error!(path = %self.path.display(), "the record of kernels that lost the device could not be read at start, so it is not written: this loss is not recorded (restart once the file can be read)");
            return Err(());
        }
        let written = if record.losses.is_empty() && record.ran_through.is_empty() {
            let removed = crate::store::still_locked(&self.path)
                .and_then(|()| std::fs::remove_file(&self.path));
            match removed {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => crate::store::sync_directory_of(&self.path),
            }
        } else {
            crate::store::write_atomically(&self.path, |out| {
                serde_json::to_writer_pretty(out, record).map_err(std::io::Error::other)
            })
        };
        let mut problem = self.problem.lock().unwrap_or_else(PoisonError::into_inner);
        match written {
            Ok(()) => {
                *problem = None;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot update the record of kernels that lost the device");
                *problem = Some(format!("cannot be written ({e})"));
                Err(())
            }
        }
    }
}

enum Unreadable {
    Corrupt(String),
    Io(std::io::Error),
}

fn read(path: &Path) -> Result<Record, Unreadable> {
    match std::fs::read(path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|e| Unreadable::Corrupt(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
        Err(e) => Err(Unreadable::Io(e)),
    }
}

/// Every other device's records in `dir` (ours is `own`); one that cannot be read is skipped,
/// as its own device reports it.
fn others_in(dir: &Path, own: &Path) -> Vec<Loss> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p != own)
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(".json"))
        })
        .flat_map(|p| read(&p).map(|r| r.losses).unwrap_or_default())
        .collect()
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

    fn at(dir: &Path, file: &str) -> DeviceLosses {
        let path = dir.join(file);
        DeviceLosses {
            record: Mutex::new(read(&path).unwrap_or_default()),
            others: others_in(dir, &path),
            path,
            wcetctl: "wcetctl".into(),
            problem: Mutex::new(None),
            unread: false,
            moved_aside: None,
        }
    }

    const OURS: &str = "device-lost-x.json";

    /// One loss is not enough to hold a kernel back, two are, and they survive a restart (the
    /// file is read afresh); a calibration that runs the kernel through forgets them, and other
    /// code of the same name is not held back by losses of the old.
    #[test]
    fn two_losses_hold_a_kernel_back_until_it_runs_through() {
        let dir = tempfile::tempdir().unwrap();
        let lud = spec("lud");
        at(dir.path(), OURS).lost_while_running(&lud, "CUDA_ERROR_ASSERT");
        assert_eq!(at(dir.path(), OURS).held_back(&lud), None);
        at(dir.path(), OURS).lost_while_running(&lud, "CUDA_ERROR_ILLEGAL_ADDRESS");
        let restarted = at(dir.path(), OURS);
        let why = restarted
            .held_back(&lud)
            .expect("held back after two losses");
        assert!(
            why.contains("2 times")
                && why.contains("CUDA_ERROR_ILLEGAL_ADDRESS")
                && why.contains("Xid"),
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
        restarted.ran_through(&changed);
        assert!(
            restarted.held_back(&lud).is_some(),
            "other code ran through"
        );
        restarted.ran_through(&lud);
        assert_eq!(at(dir.path(), OURS).held_back(&lud), None);
    }

    /// Losses on another GPU of the same state directory count: any GPU's loss restarts the
    /// daemon, and the code is as buggy on each. Until the code runs through here: those
    /// before then no longer count here (a reviewer found a hold nothing here could clear).
    #[test]
    fn losses_on_another_device_count_until_the_code_runs_through_here() {
        let dir = tempfile::tempdir().unwrap();
        let lud = spec("lud");
        let other = "device-lost-other.json";
        at(dir.path(), other).lost_while_running(&lud, "on GPU 1");
        at(dir.path(), OURS).lost_while_running(&lud, "on GPU 0");
        assert!(at(dir.path(), OURS).held_back(&lud).is_some());
        at(dir.path(), OURS).ran_through(&lud);
        assert_eq!(at(dir.path(), OURS).held_back(&lud), None);
        assert_eq!(
            at(dir.path(), other).of(&lud).0,
            1,
            "its own loss stays there"
        );
        // A later loss elsewhere counts here again, the earlier one not.
        at(dir.path(), other).lost_while_running(&lud, "again");
        assert_eq!(at(dir.path(), OURS).of(&lud), (1, Some("again".into())));
    }

    /// Losses with several kernels running point at the device; a corrupt record is moved
    /// aside and said, and the next record written clears that.
    #[test]
    fn a_suspect_device_is_named_and_a_corrupt_record_set_aside_and_noted() {
        let dir = tempfile::tempdir().unwrap();
        let losses = at(dir.path(), OURS);
        losses.lost_while_running(&spec("lud"), "a");
        losses.lost_while_running(&spec("bfs"), "b");
        let said = losses.warnings().join("; ");
        assert!(
            said.contains("2 different kernels ran (bfs, lud)"),
            "{said}"
        );

        let store = Store::open(dir.path()).unwrap();
        let device = crate::gpu::sim::SimGpu::new(
            crate::gpu::sim::DeviceProfile::h200(),
            crate::gpu::sim::SimOptions::default(),
        );
        let info = crate::gpu::Gpu::info(&device).clone();
        let uuid = crate::fnv::fnv1a_hex(info.fingerprint.uuid.as_bytes());
        let path = dir.path().join(format!("{PREFIX}{uuid}.json"));
        std::fs::write(&path, "{ not json").unwrap();
        let loaded = DeviceLosses::load(&store, &info, "wcetctl".into());
        // Named among the files set aside, in the notices file too (which `Health` reads at every
        // start until a job succeeds), before it was moved: a restart said `ok`.
        let notice = loaded.moved_aside().unwrap();
        assert!(
            notice.contains("record of kernels that lost the device: ")
                && notice.contains(&path.display().to_string()),
            "{notice}"
        );
        let notices = crate::store::set_aside_notices_path(dir.path(), &info.fingerprint);
        let noted: Vec<String> = serde_json::from_slice(&std::fs::read(notices).unwrap()).unwrap();
        assert_eq!(noted, [notice]);
        assert!(!path.exists(), "moved aside");
    }

    #[test]
    fn the_record_of_one_kernel_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let losses = at(dir.path(), OURS);
        for i in 0..20 {
            losses.lost_while_running(&spec("lud"), &format!("loss {i}"));
        }
        let (times, last) = at(dir.path(), OURS).of(&spec("lud"));
        assert_eq!((times, last.as_deref()), (KEPT_PER_KERNEL, Some("loss 19")));
    }
}
