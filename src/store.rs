//! Calibrations on disk: one JSON file per device fingerprint, written atomically, loaded at start
//! so bounds are served at once after a restart.
//!
//! Crash safety: a calibration is written to a temporary file in the same directory, fsynced,
//! renamed over the old one, and the directory is fsynced, so at every instant the file on disk is
//! either the old calibration or the new one, never a mix. Temporary files left by a crash are
//! removed at the next start. A file that does not parse, or that parses but does not agree with
//! itself (the checks a bundle's import makes of each calibration), is moved aside
//! (`*.corrupt-<time>`) with a log line and never half-applied; the daemon goes on with what it has.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::gpu::{DeviceInfo, Fingerprint, Interference};
use crate::launch_times::SpillFile;
use crate::measure::{EnvironmentStamp, KernelCampaign};
use crate::model::BoundTable;

pub const FORMAT_VERSION: u32 = 1;

/// Everything the daemon knows about one device: per kernel, its campaign and its bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub format: u32,
    pub device: DeviceInfo,
    pub kernels: BTreeMap<String, KernelCalibration>,
    /// Calibrations made with a bandwidth stressor on the other SMs, by kernel.
    #[serde(default)]
    pub contended: BTreeMap<String, KernelCalibration>,
}

impl Calibration {
    pub fn new(device: DeviceInfo) -> Self {
        Calibration {
            format: FORMAT_VERSION,
            device,
            kernels: BTreeMap::new(),
            contended: BTreeMap::new(),
        }
    }

    pub fn fingerprint(&self) -> &Fingerprint {
        &self.device.fingerprint
    }

    pub fn tables(&self, interference: Interference) -> &BTreeMap<String, KernelCalibration> {
        match interference {
            Interference::Isolated => &self.kernels,
            Interference::Contended => &self.contended,
        }
    }

    pub fn tables_mut(
        &mut self,
        interference: Interference,
    ) -> &mut BTreeMap<String, KernelCalibration> {
        match interference {
            Interference::Isolated => &mut self.kernels,
            Interference::Contended => &mut self.contended,
        }
    }
}

/// One kernel's calibration: the raw samples (so it can be refitted with another method), the
/// conditions, and the bound table served from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelCalibration {
    /// Identifies the calibration a bound came from (design rule 2).
    pub id: String,
    pub calibrated_at: DateTime<Utc>,
    pub campaign: KernelCampaign,
    pub table: BoundTable,
    /// Where the samples came from (calibrations stored before this field: the built-in suite).
    #[serde(default)]
    pub origin: Origin,
    /// Free text about the origin: the manifest's path, or what `ImportSamples` was told.
    #[serde(default)]
    pub source: String,
    /// The measured kernel's code digest ([`crate::kernels::KernelSpec::code_digest`]): bounds
    /// hold for that code only. Empty when not recorded: imported samples, a simulator-only
    /// kernel, or a calibration stored before 2026-11-23.
    #[serde(default)]
    pub code: String,
    /// Only on a calibration served stale from another fingerprint: the launch times production
    /// reported under that fingerprint, raised into `table` when it was carried over, and kept
    /// (stored with it, across restarts) so that `GetBoundInfo` names the floor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherited_floors: Vec<InheritedFloor>,
    /// Only on an imported calibration (samples or a bundle) that replaced calibrations this
    /// card measured of the same code: the longest launch they timed at each size, raised into
    /// `table` at the import and kept so that every later import is held up by them too (one
    /// import after another once published a bundle's bounds below this card's own launches).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launches_here: Vec<LaunchHere>,
}

/// The longest launch this card timed at a size, for a calibration an import replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchHere {
    pub sms: u32,
    pub ns: u64,
    /// The calibration that timed it.
    pub calibrated_at: DateTime<Utc>,
}

/// Why a calibration file that is there cannot be served.
enum Unservable {
    /// It cannot be read (permissions, an I/O error): left alone.
    Unreadable(String),
    /// It does not parse, has an unsupported format, bounds below its own launches, or does not
    /// agree with itself ([`disagreeing`]).
    Damaged(String),
}

/// A launch time reported from production under the fingerprint a stale calibration came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InheritedFloor {
    pub sms: u32,
    pub ns: u64,
    pub at: DateTime<Utc>,
    /// The fastest SM clock read while its series was reported (0: unknown, or carried before
    /// 2026-11-25), which it is stretched from when the clock falls, as under its own fingerprint.
    #[serde(default, skip_serializing_if = "is_zero_mhz")]
    pub clock_mhz: u32,
}

fn is_zero_mhz(n: &u32) -> bool {
    *n == 0
}

/// How a calibration's samples were obtained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Measured by this daemon, a built-in kernel.
    #[default]
    Builtin,
    /// Measured by this daemon, a kernel from a manifest: served only while the manifest is.
    Manifest,
    /// Measured elsewhere and sent with `ImportSamples`.
    Imported,
    /// Another daemon's calibration, imported from a bundle (`ImportCalibration`).
    Bundle,
}

impl Origin {
    /// What `GetBoundInfo` says in `origin`: `measured` or `imported`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Builtin | Origin::Manifest => "measured",
            Origin::Imported => "imported",
            Origin::Bundle => "bundle",
        }
    }
}

impl KernelCalibration {
    pub fn environment(&self) -> &EnvironmentStamp {
        &self.campaign.environment
    }

    /// Rule 1 checked against the calibration's own records: (size, bound, largest time) at
    /// every size whose bound is below a launch recorded there (in full or by the sweep), or
    /// that has launches and no bound (0). Empty for every calibration this daemon makes; a
    /// file from elsewhere (a bundle) may not be.
    pub fn bounds_under_their_launches(&self) -> Vec<(u32, u64, u64)> {
        let c = &self.campaign;
        let mut largest: BTreeMap<u32, u64> = BTreeMap::new();
        for (&m, r) in c.sizes.iter().chain(&c.verified) {
            let t = r.times_ns.max().unwrap_or(0);
            let at = largest.entry(m).or_insert(0);
            *at = (*at).max(t);
        }
        for e in &self.table.entries {
            let at = largest.entry(e.sms).or_insert(0);
            *at = (*at).max(e.observed_max_ns);
        }
        largest
            .into_iter()
            .filter_map(|(m, t)| {
                let bound = self.table.entry(m).map_or(0, |e| e.bound_ns);
                (bound < t || bound == 0).then_some((m, bound, t))
            })
            .collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state directory {dir}: {source}")]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The new file is in place (renamed over the old one) but its directory could not be
    /// synced: readers and a restart without a crash see the new file, and a power cut may bring
    /// back the old one. The caller must not act as if nothing was written.
    #[error("{path} written, but its directory could not be synced (a power cut may bring back the previous file): {source}")]
    NotSynced {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where `fingerprint`'s calibration is kept in the state directory `dir`.
pub fn calibration_path(dir: &Path, fingerprint: &Fingerprint) -> PathBuf {
    dir.join(format!("calibration-{}.json", fingerprint.digest()))
}

/// Whether `fingerprint`'s calibration in `dir` can be read, where it exists. One that exists but
/// cannot be read (its owner or mode after a tool run as root, a directory in its place) is not
/// absent: served without, every bound in it would be gone, Health would say `ok`, and the first
/// save would rename a new file over it (a review lost 22 imported kernels so). The daemon
/// refuses to start instead, naming it, as for the observations file.
pub fn check_readable(dir: &Path, fingerprint: &Fingerprint) -> Result<(), String> {
    use std::io::Read;
    let path = calibration_path(dir, fingerprint);
    // A link to what is not there (a store not mounted yet) is not "no calibration" either.
    if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) && !path.exists() {
        return Err(format!(
            "{} is a symbolic link to {}, which does not exist; accepted: the calibration file wcetd writes, or none",
            path.display(),
            fs::read_link(&path).map_or("?".into(), |t| t.display().to_string())
        ));
    }
    match fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Ok(m) if !m.is_file() => {
            return Err(format!(
                "{} is not a regular file (a directory or a device); accepted: the calibration file wcetd writes, or none",
                path.display()
            ))
        }
        _ => {}
    }
    File::open(&path)
        .and_then(|mut f| f.read(&mut [0u8; 1]))
        .map(|_| ())
        .map_err(|e| format!("{} cannot be read: {e}", path.display()))
}

/// The state directory holding calibrations.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    /// Where the launch times of loaded calibrations rest (see `launch_times`); `None` keeps
    /// them in memory (the directory refused a temporary file).
    spill: Option<Arc<SpillFile>>,
    /// Files moved aside since the store was opened, each with why (for `Health`).
    quarantined: Arc<Mutex<Vec<String>>>,
    /// The kernels named in calibration files moved aside, each with the file's notice: a
    /// kernel known only from imports is gone with its file, and a query for it said only that
    /// no such kernel exists (a hunt found it).
    set_aside_kernels: Arc<Mutex<BTreeMap<String, String>>>,
    /// Other fingerprints' calibration files that could not be served stale, each with why:
    /// left where they are (for `Health`, and for the floors reported under them).
    unusable: Arc<Mutex<Vec<(PathBuf, String)>>>,
}

impl Store {
    /// Open (and create) the directory, removing temporary files a crash left behind.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Store, StoreError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|source| StoreError::Dir {
            dir: dir.clone(),
            source,
        })?;
        let spill = SpillFile::create_in(&dir)
            .map_err(|e| {
                tracing::warn!(dir = %dir.display(), error = %e, "no spill file; launch times of loaded calibrations stay in memory");
            })
            .ok();
        let store = Store {
            dir,
            spill,
            quarantined: Arc::default(),
            set_aside_kernels: Arc::default(),
            unusable: Arc::default(),
        };
        store.remove_stale_temporaries();
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path_for(&self, fingerprint: &Fingerprint) -> PathBuf {
        calibration_path(&self.dir, fingerprint)
    }

    /// The calibration for `fingerprint`; `None` when there is none or it was corrupt (and moved
    /// aside).
    pub fn load(&self, fingerprint: &Fingerprint) -> Option<Calibration> {
        let notices = set_aside_notices_path(&self.dir, fingerprint);
        let path = self.path_for(fingerprint);
        let cal = self.load_file(&path, &notices);
        self.recall_kernels_set_aside(&path, &notices);
        cal
    }

    /// The kernels of `path`'s newest copy set aside, where a notice in `notices` still names it
    /// (until a job succeeds): a kernel gone with a damaged file is named as such across
    /// restarts, as `Health` names the file. (Recorded only by the start that set the file
    /// aside, the next start answered "no kernel named" for them.)
    fn recall_kernels_set_aside(&self, path: &Path, notices: &Path) {
        let Ok(all) = fs::read(notices).map(|b| serde_json::from_slice::<Vec<String>>(&b)) else {
            return;
        };
        let prefix = format!("{} (", path.display());
        let Some(notice) = all
            .ok()
            .and_then(|all| all.into_iter().rfind(|n| n.starts_with(&prefix)))
        else {
            return;
        };
        let Some(newest) = newest_aside_copy(path) else {
            return;
        };
        let mut set_aside = self
            .set_aside_kernels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for name in kernels_named_in(&newest) {
            set_aside.entry(name).or_insert_with(|| notice.clone());
        }
    }

    /// The calibration to serve as stale while the current device is recalibrated: the most
    /// recently written one of this card under another fingerprint (a new driver, CUDA version or
    /// clock policy), or else the most recent of another card, not one of `siblings` (UUIDs of
    /// the host's other cards, whose calibrations are theirs).
    pub fn load_latest_other(
        &self,
        fingerprint: &Fingerprint,
        siblings: &[String],
    ) -> Option<Calibration> {
        let current = self.path_for(fingerprint);
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(&self.dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p != &current && is_calibration_file(p))
            .filter_map(|p| Some((fs::metadata(&p).ok()?.modified().ok()?, p)))
            .collect();
        files.sort();
        let mut other_card = None;
        for (_, p) in files.into_iter().rev() {
            // Read only: the file is another fingerprint's, whose own daemon sets it aside if it
            // is damaged; here it is only skipped.
            let cal = match self.read_file(&p) {
                Ok(Some(cal)) => cal,
                Ok(None) => continue,
                Err(Unservable::Unreadable(why) | Unservable::Damaged(why)) => {
                    tracing::warn!(path = %p.display(), "another fingerprint's calibration is not usable, so it is not served stale: {why}");
                    self.unusable
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((p, why));
                    continue;
                }
            };
            if cal.fingerprint().uuid == fingerprint.uuid {
                return Some(cal);
            }
            if !siblings.contains(&cal.fingerprint().uuid) {
                other_card.get_or_insert(cal);
            }
        }
        other_card
    }

    /// Move `cal`'s launch times out of memory into the spill file (after it was saved, so the
    /// file stays the record); a no-op without a spill file.
    pub fn spill_times(&self, cal: &mut KernelCalibration) {
        let Some(spill) = &self.spill else { return };
        let records = cal.campaign.sizes.values_mut();
        for record in records.chain(cal.campaign.verified.values_mut()) {
            record.times_ns.spill_to(spill);
        }
    }

    /// The calibration in `path`, moved aside if it is damaged (and `None` then, named in
    /// `notices` first); one that cannot be read is left where it is.
    fn load_file(&self, path: &Path, notices: &Path) -> Option<Calibration> {
        self.read_file(path).unwrap_or_else(|why| {
            match why {
                Unservable::Unreadable(e) => {
                    tracing::error!(path = %path.display(), "calibration unreadable; ignoring it: {e}");
                }
                Unservable::Damaged(why) => self.quarantine(path, &why, notices),
            }
            None
        })
    }

    /// The calibration in `path`: `Ok(None)` when there is none, `Err` with why when it is there
    /// but cannot be served.
    fn read_file(&self, path: &Path) -> Result<Option<Calibration>, Unservable> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Unservable::Unreadable(format!("cannot be read: {e}"))),
        };
        if let Some(why) = seal_broken(&bytes) {
            return Err(Unservable::Damaged(why));
        }
        let parse = || serde_json::from_slice::<Calibration>(&bytes);
        let parsed = match &self.spill {
            Some(spill) => spill.spilling(parse),
            None => parse(),
        };
        match parsed {
            Ok(cal) if cal.format == FORMAT_VERSION => {
                let why = [under_their_launches(&cal), disagreeing(&cal)];
                let why: Vec<String> = why.into_iter().flatten().collect();
                match why.is_empty() {
                    true => Ok(Some(cal)),
                    false => Err(Unservable::Damaged(why.join("; "))),
                }
            }
            Ok(cal) => Err(Unservable::Damaged(format!(
                "format {} is not the supported {FORMAT_VERSION}",
                cal.format
            ))),
            Err(e) => Err(Unservable::Damaged(e.to_string())),
        }
    }

    /// Move a bad file aside so it is kept for inspection but never loaded again.
    fn quarantine(&self, path: &Path, why: &str, notices: &Path) {
        let notice = format!("{} ({why})", path.display());
        let names = kernels_named_in(path);
        quarantine_noted(path, "calibration", why, (notices, &notice));
        let mut set_aside = self
            .set_aside_kernels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for name in names {
            set_aside.insert(name, notice.clone());
        }
        self.quarantined
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(notice);
    }

    /// The kernels named in the calibration files moved aside since the store was opened, each
    /// with the file's notice (`PATH (why)`).
    pub fn set_aside_kernels(&self) -> BTreeMap<String, String> {
        self.set_aside_kernels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Other fingerprints' calibration files found unusable since the store was opened, each
    /// with why.
    pub fn unusable_others(&self) -> Vec<(PathBuf, String)> {
        self.unusable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The calibration files moved aside since the store was opened, each with why.
    pub fn quarantined(&self) -> Vec<String> {
        self.quarantined
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Write `cal` atomically: temporary file, fsync, rename, fsync of the directory.
    pub fn save(&self, cal: &Calibration) -> Result<PathBuf, StoreError> {
        let path = self.path_for(cal.fingerprint());
        let write = |source| StoreError::Write {
            path: path.clone(),
            source,
        };
        let json = sealed_json(cal).map_err(|e| write(e.into()))?;
        match write_replacing(&path, |file| file.write_all(&json)) {
            Ok(()) => Ok(path),
            Err(Replace::Failed(source)) => Err(write(source)),
            Err(Replace::NotSynced(source)) => Err(StoreError::NotSynced { path, source }),
        }
    }

    fn remove_stale_temporaries(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            if abandoned(&entry.path()) {
                tracing::warn!(file = %entry.path().display(), "removing a temporary file left by an interrupted write");
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// Replace `path` atomically with what `fill` writes: a temporary file beside it
/// ([`temporary_path`], which [`Store::open`] and [`remove_stale_temporaries_of`] remove if a
/// crash leaves it), fsync, rename over `path`, fsync of the directory. Readers see the old file
/// or the new one, never a mix.
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    write_replacing(path, fill).map_err(|e| match e {
        Replace::Failed(e) | Replace::NotSynced(e) => e,
    })
}

/// How [`write_replacing`] failed: before `path` was replaced (it is as it was), or after (the
/// new file is in place, its directory not synced).
enum Replace {
    Failed(std::io::Error),
    NotSynced(std::io::Error),
}

/// [`write_atomically`], saying whether `path` was replaced when it fails.
fn write_replacing(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), Replace> {
    still_locked(path).map_err(Replace::Failed)?;
    let dir = directory_of(path);
    let tmp = temporary_path(path);
    // Each step's error names the file it failed on (the temporary, or the rename to `path`).
    let at = |what: String| {
        move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{what}: {e}"))
    };
    let result = (|| {
        let writing = || format!("writing {}", tmp.display());
        let file = File::create(&tmp).map_err(at(writing()))?;
        // Held until the file is closed: tells a cleaner in any process that it is being written
        // (`abandoned`). A lock that cannot be taken only costs that protection.
        let _ = file.try_lock();
        let mut out = std::io::BufWriter::new(file);
        fill(&mut out).map_err(at(writing()))?;
        let file = out
            .into_inner()
            .map_err(|e| at(writing())(e.into_error()))?;
        file.sync_all().map_err(at(writing()))?;
        fs::rename(&tmp, path).map_err(at(format!(
            "renaming {} to {}",
            tmp.display(),
            path.display()
        )))
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(Replace::Failed(e));
    }
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Replace::NotSynced(at(format!("syncing {}", dir.display()))(e)))
}

/// Make the entries of `path`'s directory durable: a file created, renamed or removed there.
pub fn sync_directory_of(path: &Path) -> std::io::Result<()> {
    File::open(directory_of(path))?.sync_all()
}

fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A state directory held by one daemon: `wcetd.lock` in it, locked (`flock`) for as long as
/// this lives. The kernel releases the lock when the process ends, however it ends, so a crash
/// never leaves the directory locked. Two daemons on one directory would write the same files
/// and remove each other's bus address.
#[derive(Debug)]
pub struct DirectoryLock {
    _file: File,
    dir: PathBuf,
    locked: (u64, u64),
}

/// The state directories this process holds, each with its lock file's (device, inode). A lock
/// is on a file, and a path may come to name another: a directory moved aside and replaced (a
/// restore), or `wcetd.lock` removed, let a second daemon start there and rename its files over
/// the first one's, losing a floor a reporter had been told was saved. So every durable write
/// into a held directory first checks that its `wcetd.lock` is still the file locked
/// ([`still_locked`]), and fails (a report is then not acknowledged) where it is not.
static HELD: Mutex<Vec<(PathBuf, (u64, u64))>> = Mutex::new(Vec::new());

fn identity(m: &fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// `Err` when `path` is in a state directory this process locked and that directory no longer
/// holds the lock file it locked ([`HELD`]).
pub fn still_locked(path: &Path) -> std::io::Result<()> {
    let dir = directory_of(path);
    let held = HELD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some((_, locked)) = held.iter().find(|(d, _)| *d == dir) else {
        return Ok(());
    };
    let now = fs::metadata(dir.join("wcetd.lock")).map(|m| identity(&m));
    if now.as_ref().ok() == Some(locked) {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "the state directory {} is no longer the one this daemon locked (moved or replaced, or its wcetd.lock removed), so another daemon may be writing there: nothing is written; restart wcetd",
        dir.display()
    )))
}

impl Drop for DirectoryLock {
    fn drop(&mut self) {
        HELD.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(d, id)| (d, *id) != (&self.dir, self.locked));
    }
}

impl DirectoryLock {
    /// Lock `dir` (created if needed), or say which process holds it.
    pub fn take(dir: &Path) -> anyhow::Result<DirectoryLock> {
        use anyhow::Context;
        use std::io::{Read, Seek};
        use std::os::fd::AsRawFd;
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("wcetd.lock");
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            anyhow::bail!(
                "the state directory {} is in use by another wcetd (pid {}); accepted: one daemon per state directory (give this one another --state-dir, or stop the other)",
                dir.display(),
                holder.trim()
            );
        }
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        let locked = identity(&file.metadata()?);
        let dir = dir.to_path_buf();
        // The newest lock of a directory is the one its writes check.
        HELD.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(0, (dir.clone(), locked));
        Ok(DirectoryLock {
            _file: file,
            dir,
            locked,
        })
    }
}

/// Where [`write_atomically`] writes `path` before renaming it: `.tmp-<pid>-<name>.partial`
/// beside it. It ends in neither `.json` nor `.prom`, so a reader that takes every file of a
/// kind (node_exporter's textfile collector reads every `*.prom`) never takes a half-written one.
pub fn temporary_path(path: &Path) -> PathBuf {
    directory_of(path).join(format!(
        ".tmp-{}-{}.partial",
        std::process::id(),
        path_name(path)
    ))
}

/// Whether `path` is a temporary file ([`temporary_path`]) that nobody is writing: not locked
/// (a writer holds a lock on it until it is renamed), and either its writer's pid is gone or it
/// has not been touched for a minute. The lock is what protects a writer another PID namespace
/// or host (a shared metrics directory) hides from `kill`; the pid and age cover the instant
/// between a writer's creating the file and locking it, and a writer that could not lock.
fn abandoned(path: &Path) -> bool {
    let name = path_name(path);
    let Some(rest) = name.strip_prefix(".tmp-") else {
        return false;
    };
    let unlocked = File::open(path).is_ok_and(|f| f.try_lock().is_ok());
    let writer_gone = match rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) {
        Some(pid) if pid == std::process::id() as i32 => false,
        // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
        Some(pid) if pid > 0 => {
            let probed = unsafe { libc::kill(pid, 0) };
            probed != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        }
        _ => true,
    };
    let untouched = fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > Duration::from_secs(60)));
    unlocked && (writer_gone || untouched)
}

/// Remove the temporary files of `path` that earlier processes left (a crash while writing it),
/// for files outside the state directory, which [`Store::open`] cleans.
pub fn remove_stale_temporaries_of(path: &Path) {
    let Ok(entries) = fs::read_dir(directory_of(path)) else {
        return;
    };
    let suffix = format!("-{}.partial", path_name(path));
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(&suffix) && abandoned(&entry.path()) {
            tracing::warn!(file = %entry.path().display(), "removing a temporary file left by an interrupted write");
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// How a calibration file begins when it is sealed: its checksum, the first field, then the
/// calibration's own fields ([`sealed_json`]).
const SEAL_PREFIX: &[u8] = b"{\n  \"checksum\": \"";

/// The checksum as it is hashed: in place of the hex digits of SHA-256 (64 of them).
const UNSEALED: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// `cal` as the daemon writes it: pretty JSON whose first field, `checksum`, is the SHA-256 of
/// the file with those 64 digits written as zeros. A flipped bit or a digit changed in a bound
/// that stays above its launches passed every consistency check and was served (two hunts found
/// it); sealed, it is damage, and the file is set aside like any other damaged one. The field
/// is an extension: readers that do not know it skip it, and a file without it (written before
/// 2026-11-25, or edited by hand with the field removed) is read as before.
fn sealed_json(cal: &Calibration) -> serde_json::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct Sealed<'a> {
        checksum: &'static str,
        #[serde(flatten)]
        calibration: &'a Calibration,
    }
    let mut json = serde_json::to_vec_pretty(&Sealed {
        checksum: UNSEALED,
        calibration: cal,
    })?;
    let digits = SEAL_PREFIX.len()..SEAL_PREFIX.len() + UNSEALED.len();
    debug_assert!(json.starts_with(SEAL_PREFIX) && json[digits.clone()] == *UNSEALED.as_bytes());
    let sum = hex_sha256(&[&json]);
    json[digits].copy_from_slice(sum.as_bytes());
    Ok(json)
}

/// Why a sealed calibration file is not what was written (its checksum disagrees), or `None`:
/// it agrees, or it is not sealed (no checksum first).
fn seal_broken(bytes: &[u8]) -> Option<String> {
    let first = SEAL_PREFIX.len()..SEAL_PREFIX.len() + UNSEALED.len();
    let digits = match bytes.starts_with(SEAL_PREFIX) && bytes.len() >= first.end {
        true => first,
        // Not where this version writes it: wherever another layout put it (a later version,
        // whose files a downgrade must still read), checked the same way. A file reformatted by
        // a tool has it too, and its bytes are no longer those hashed.
        false => {
            #[derive(Deserialize)]
            struct Seal {
                checksum: Option<serde::de::IgnoredAny>,
            }
            let sealed = serde_json::from_slice::<Seal>(bytes).is_ok_and(|s| s.checksum.is_some());
            match (sealed, checksum_digits(bytes)) {
                (false, _) => return None,
                (true, Some(digits)) => digits,
                (true, None) => return Some("its checksum is not 64 hexadecimal digits: changed since it was written (to edit it by hand, remove the checksum field)".into()),
            }
        }
    };
    let stated = String::from_utf8_lossy(&bytes[digits.clone()]).into_owned();
    let unsealed = [
        &bytes[..digits.start],
        UNSEALED.as_bytes(),
        &bytes[digits.end..],
    ];
    let sum = hex_sha256(&unsealed);
    (sum != stated).then(|| {
        format!("its checksum {stated} is not the SHA-256 of its contents ({sum}): changed since it was written (to edit it by hand, remove the checksum field)")
    })
}

/// Where the 64 digits of `"checksum": "..."` are in a file of any layout: the first such key,
/// not inside a string (a quote inside a string is escaped), whose value is 64 hexadecimal
/// digits. A kernel may be named `checksum`: its key, an object, is passed over (a hunt found
/// a resealed file set aside for it).
fn checksum_digits(bytes: &[u8]) -> Option<std::ops::Range<usize>> {
    const KEY: &[u8] = b"\"checksum\"";
    let value_at = |at: usize| -> Option<std::ops::Range<usize>> {
        let mut i = at + KEY.len();
        let skip = |i: &mut usize| {
            while bytes.get(*i).is_some_and(u8::is_ascii_whitespace) {
                *i += 1;
            }
        };
        skip(&mut i);
        (bytes.get(i) == Some(&b':')).then_some(())?;
        i += 1;
        skip(&mut i);
        (bytes.get(i) == Some(&b'"')).then_some(())?;
        let digits = i + 1..i + 1 + UNSEALED.len();
        let hex = bytes.get(digits.clone())?;
        (hex.iter().all(u8::is_ascii_hexdigit) && bytes.get(digits.end) == Some(&b'"'))
            .then_some(digits)
    };
    (0..bytes.len().saturating_sub(KEY.len()))
        .filter(|&i| bytes[i..].starts_with(KEY) && (i == 0 || bytes[i - 1] != b'\\'))
        .find_map(value_at)
}

/// The SHA-256 of `parts` one after another, in hex.
fn hex_sha256(parts: &[&[u8]]) -> String {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The kernels a damaged calibration file at `path` names (in either table), where it is still
/// JSON of that shape; none where it is not.
fn kernels_named_in(path: &Path) -> Vec<String> {
    let Ok(value) = fs::read(path).map(|b| serde_json::from_slice::<serde_json::Value>(&b)) else {
        return Vec::new();
    };
    let Ok(value) = value else {
        return Vec::new();
    };
    ["kernels", "contended"]
        .iter()
        .filter_map(|table| value.get(table)?.as_object())
        .flat_map(|table| table.keys().cloned())
        .collect()
}

/// `set-aside-<fingerprint digest>.json` in `dir`: notices of the damaged files set aside at
/// starts since the last successful job of that device, a JSON list of strings, so that
/// `Health` names them until then across restarts (kept by `service::interrupted`).
pub fn set_aside_notices_path(dir: &Path, fingerprint: &Fingerprint) -> PathBuf {
    set_aside_notices_of_digest(dir, &fingerprint.digest())
}

/// [`set_aside_notices_path`] of the fingerprint whose digest is `digest`.
pub fn set_aside_notices_of_digest(dir: &Path, digest: &str) -> PathBuf {
    dir.join(format!("set-aside-{digest}.json"))
}

/// [`quarantine`], having first added `notice` to the notices file (`notices`,
/// [`set_aside_notices_path`]): the rename is synced at once, and a crash before the notice was
/// written left a file set aside that no start named (a hunt hit that window in 7 of 50 kills).
/// Named first, a crash before the rename names it twice, which the notices' reader merges (the
/// same text). A notices file that does not parse is left for its reader, who sets it aside and
/// says so.
pub fn quarantine_noted(path: &Path, what: &str, why: &str, (notices, notice): (&Path, &str)) {
    let earlier = match fs::read(notices) {
        Ok(bytes) => serde_json::from_slice::<Vec<String>>(&bytes).ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Vec::new()),
        Err(_) => None,
    };
    if let Some(mut all) = earlier.filter(|all| !all.iter().any(|n| n == notice)) {
        all.push(notice.to_string());
        let written = write_atomically(notices, |out| {
            serde_json::to_writer(out, &all).map_err(std::io::Error::other)
        });
        if let Err(e) = written {
            tracing::warn!(path = %notices.display(), error = %e, "cannot record a file set aside before moving it; a crash now would leave it unnamed");
        }
    }
    quarantine(path, what, why);
}

/// Move a file that cannot be read aside, to `<name>.corrupt-<UTC time>`, so it is kept for
/// inspection and never loaded again; `what` names it in the log line.
pub fn quarantine(path: &Path, what: &str, why: &str) {
    let aside = aside_path(path);
    // Synced: Health names the copy, which a power cut must not take back.
    match fs::rename(path, &aside).and_then(|()| sync_directory_of(path)) {
        Ok(()) => tracing::error!(
            path = %path.display(), moved_to = %aside.display(), reason = why,
            "{what} file is corrupt; moved aside, serving without it"
        ),
        Err(e) => tracing::error!(path = %path.display(), reason = why, error = %e,
            "{what} file is corrupt and could not be moved aside"),
    }
}

/// Like [`quarantine`], but keep the damaged file where it is and copy it aside: for a file
/// part of which was recovered, so that until the recovered part is saved cleanly over it, a
/// crash can recover it again.
pub fn quarantine_copy(path: &Path, what: &str, why: &str) {
    let aside = aside_path(path);
    let copied = fs::copy(path, &aside)
        .and_then(|_| File::open(&aside)?.sync_all())
        .and_then(|()| sync_directory_of(&aside));
    match copied {
        Ok(()) => tracing::error!(
            path = %path.display(), copied_to = %aside.display(), reason = why,
            "{what} file is damaged; a copy is kept aside, what was whole is kept and will be written back cleanly"
        ),
        Err(e) => tracing::error!(path = %path.display(), reason = why, error = %e,
            "{what} file is damaged and could not be copied aside"),
    }
}

/// `PATH.corrupt-<time>`, with a number added where that exists: two files set aside within a
/// millisecond must not overwrite each other.
/// The newest of `path`'s copies set aside ([`aside_path`]): their names sort by the time in them.
fn newest_aside_copy(path: &Path) -> Option<PathBuf> {
    let name = format!("{}.corrupt-", path.file_name()?.to_string_lossy());
    fs::read_dir(path.parent()?)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(&name))
        })
        .max()
}

fn aside_path(path: &Path) -> PathBuf {
    let stamp = Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let mut aside = PathBuf::from(format!("{}.corrupt-{stamp}", path.display()));
    for n in 1.. {
        if !aside.exists() {
            break;
        }
        aside = PathBuf::from(format!("{}.corrupt-{stamp}-{n}", path.display()));
    }
    aside
}

/// Give memory freed by a large transient job (a save, a metrics file) back to the system, so
/// that the resident size of a long-running daemon follows what it holds rather than its peaks.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own heaps; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Rule 1 checked on a file as it is loaded: a bound below a launch the file itself records was
/// not written by this daemon (an edit, or damage that still parses), and nothing else in the
/// file can be trusted either, so the whole file is refused. Says where, or `None`.
fn under_their_launches(cal: &Calibration) -> Option<String> {
    let mut found = Vec::new();
    for (tag, tables) in [
        (Interference::Isolated, &cal.kernels),
        (Interference::Contended, &cal.contended),
    ] {
        for (name, k) in tables {
            // Launches at a size with no entry are under no bound of this table: none of its
            // tag is served there. A bundle from a device that realises a size this one does not
            // keeps its launches there and drops its bound on import; counted as bound 0, they
            // set the whole file aside at the next start, every other kernel's bounds with it
            // (a review found it), and the device record, rewritten at every save, cannot say
            // which sizes were realisable when the launches were timed.
            let not_here = |m: u32| k.table.entry(m).is_none();
            let under = k.bounds_under_their_launches();
            if let Some((m, bound, launch)) = under.iter().find(|u| !not_here(u.0)) {
                found.push(format!(
                    "{name} ({tag}) at {m} SMs: bound {bound} ns below a launch of {launch} ns it records"
                ));
            }
        }
    }
    (!found.is_empty()).then(|| format!("bounds below their own launches: {}", found.join("; ")))
}

/// The checks a bundle's import makes of each calibration's own consistency
/// ([`crate::bundle::disagreements`]: sizes listed once, counts, tail, process shift, texts),
/// made on a file as it is loaded. Damage that still parses was served with `Health` ok (a tail
/// exceedance of 0 admitted a heavy tail as if it met 1e-9), and nothing else in such a file can
/// be trusted either, so the whole file is refused. Not checked here, though a bundle's import
/// checks them: a size without a bound (no bound of this tag, nor an untagged one, is served
/// there; which sizes the device realised when the table was made is not on record: the device
/// record is rewritten at every save, and a hole check against it set good files aside), and
/// dates ahead
/// of this host's clock (an embedded board whose clock is set back after a calibration would
/// set aside every bound it has; refusing a bundle loses nothing). Says what, or `None`.
fn disagreeing(cal: &Calibration) -> Option<String> {
    let mut found = Vec::new();
    for (tag, tables) in [
        (Interference::Isolated, &cal.kernels),
        (Interference::Contended, &cal.contended),
    ] {
        for (name, k) in tables {
            found.extend(crate::bundle::disagreements(name, tag, k, None));
        }
    }
    (!found.is_empty()).then(|| {
        format!(
            "the calibration does not agree with itself ({} findings: {}); accepted: a calibration file as wcetd writes it",
            found.len(),
            found.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
        )
    })
}

fn is_calibration_file(p: &Path) -> bool {
    let name = path_name(p);
    name.starts_with("calibration-") && name.ends_with(".json")
}

fn path_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The default state directory: `$STATE_DIRECTORY` (set by systemd), else the XDG state
/// directory, else `~/.local/state/wcetd`.
pub fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("wcetd");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".local/state/wcetd")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::{calibrate_kernel, Recipe, VerificationSweep};
    use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
    use crate::gpu::Gpu;
    use std::sync::atomic::AtomicBool;

    /// A calibration file that is there but cannot be read is not taken for none: the daemon
    /// would serve nothing from it and replace it at its first save.
    #[test]
    fn a_calibration_that_cannot_be_read_is_not_taken_for_none() {
        let dir = tempfile::tempdir().unwrap();
        let gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let fingerprint = &gpu.info().fingerprint;
        assert_eq!(check_readable(dir.path(), fingerprint), Ok(()), "none yet");
        let path = calibration_path(dir.path(), fingerprint);
        fs::create_dir(&path).unwrap();
        let why = check_readable(dir.path(), fingerprint).unwrap_err();
        assert!(why.contains("not a regular file"), "{why}");
        fs::remove_dir(&path).unwrap();
        std::os::unix::fs::symlink(dir.path().join("not-mounted/x.json"), &path).unwrap();
        let why = check_readable(dir.path(), fingerprint).unwrap_err();
        assert!(why.contains("does not exist"), "{why}");
        fs::remove_file(&path).unwrap();
        fs::write(&path, b"{}").unwrap();
        assert_eq!(check_readable(dir.path(), fingerprint), Ok(()));
    }

    /// A lock is on a file: once the directory no longer holds that file (its lock removed, or
    /// the directory replaced), a second daemon could start there, so nothing more is written.
    #[test]
    fn nothing_is_written_once_the_locked_file_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("observations.json");
        let lock = DirectoryLock::take(dir.path()).unwrap();
        write_atomically(&file, |f| f.write_all(b"1")).unwrap();
        fs::remove_file(dir.path().join("wcetd.lock")).unwrap();
        let second = DirectoryLock::take(dir.path()).unwrap();
        drop(second);
        let e = write_atomically(&file, |f| f.write_all(b"2")).unwrap_err();
        assert!(e.to_string().contains("no longer the one"), "{e}");
        assert_eq!(fs::read(&file).unwrap(), b"1", "the file is left as it was");
        let e = crate::store::still_locked(&file).unwrap_err();
        assert!(e.to_string().contains("restart wcetd"), "{e}");
        drop(lock);
        write_atomically(&file, |f| f.write_all(b"3")).unwrap();
    }

    /// One daemon per state directory: a second lock is refused and names the holder; the lock
    /// goes with its holder.
    #[test]
    fn a_state_directory_is_locked_by_one_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirectoryLock::take(dir.path()).unwrap();
        let second = DirectoryLock::take(dir.path()).unwrap_err().to_string();
        assert!(
            second.contains("in use by another wcetd")
                && second.contains(&format!("pid {}", std::process::id())),
            "{second}"
        );
        drop(first);
        DirectoryLock::take(dir.path()).unwrap();
    }

    /// A file being written is never named like the file: a reader of every `*.prom` (or
    /// `*.json`) never takes a half-written one, and one a crash left is removed at the next start.
    #[test]
    fn temporaries_end_in_partial_and_stale_ones_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wcetd.prom");
        let tmp = temporary_path(&path);
        let name = tmp.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(".tmp-") && name.ends_with("-wcetd.prom.partial"),
            "{name}"
        );
        // Left by a process that has exited: removed. Being written by this process, by a live
        // one (pid 1) or under a lock: kept, since removing it would fail that write.
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        exited.wait().unwrap();
        let left = dir
            .path()
            .join(format!(".tmp-{}-wcetd.prom.partial", exited.id()));
        let other = dir
            .path()
            .join(format!(".tmp-{}-other.prom.partial", exited.id()));
        let live = dir.path().join(".tmp-1-wcetd.prom.partial");
        // A writer in another PID namespace looks gone to `kill`; its lock says otherwise.
        let hidden = dir.path().join(format!(
            ".tmp-{}-wcetd.prom.partial",
            exited.id() + 1_000_000
        ));
        for f in [&left, &other, &live, &tmp, &hidden] {
            std::fs::write(f, "half").unwrap();
        }
        let writing = File::open(&hidden).unwrap();
        writing.try_lock().unwrap();
        remove_stale_temporaries_of(&path);
        assert!(!left.exists() && other.exists() && live.exists() && tmp.exists());
        assert!(hidden.exists(), "a locked temporary was removed");
        drop(writing);
        remove_stale_temporaries_of(&path);
        assert!(!hidden.exists());
        std::fs::remove_file(&live).unwrap();
        write_atomically(&path, |f| f.write_all(b"x 1\n")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    /// Remove every key named in `keys`, at any depth.
    fn strip(v: &mut serde_json::Value, keys: &[&str]) {
        match v {
            serde_json::Value::Object(map) => {
                map.retain(|k, _| !keys.contains(&k.as_str()));
                map.values_mut().for_each(|x| strip(x, keys));
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|x| strip(x, keys)),
            _ => {}
        }
    }

    /// Serving another fingerprint's calibration stale only reads the files of other
    /// fingerprints: a damaged one is skipped and left where it is, not moved aside.
    #[test]
    fn another_fingerprints_damaged_file_is_skipped_and_left_alone() {
        let info = |index| {
            let options = SimOptions {
                device_index: index,
                ..SimOptions::default()
            };
            SimGpu::new(DeviceProfile::h200(), options).info().clone()
        };
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let good = Calibration::new(info(1));
        store.save(&good).unwrap();
        // Written after the good one, so it is the first tried.
        let damaged = store.path_for(&info(2).fingerprint);
        std::fs::write(&damaged, "{\"format\": ").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        let file = std::fs::File::options().write(true).open(&damaged).unwrap();
        file.set_modified(later).unwrap();
        let served = store.load_latest_other(&info(0).fingerprint, &[]);
        assert_eq!(
            served.map(|c| c.device.fingerprint),
            Some(good.device.fingerprint)
        );
        assert_eq!(std::fs::read(&damaged).unwrap(), b"{\"format\": ");
        assert!(store.quarantined().is_empty());
    }

    /// A store written before issue 13 (no verification sweep, no `top_sms`, the tail kind named
    /// `exponential-envelope`) still loads.
    #[test]
    fn a_store_written_before_the_sweep_still_loads() {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let recipe = Recipe {
            sweep: VerificationSweep {
                budget_s: 0.0,
                ..VerificationSweep::default()
            },
            ..Recipe::default()
        };
        let kernel = crate::kernels::find("hotspot").unwrap();
        let cal = calibrate_kernel(
            &mut gpu,
            &kernel,
            &recipe,
            &AtomicBool::new(false),
            &mut |_| {},
        )
        .unwrap();
        let mut all = Calibration::new(gpu.info().clone());
        all.kernels.insert("hotspot".into(), cal);
        let mut v = serde_json::to_value(&all).unwrap();
        strip(
            &mut v,
            &["verified", "verified_samples", "top_sms", "per_size"],
        );
        let text = v
            .to_string()
            .replace("\"gpd-bounded\"", "\"exponential-envelope\"")
            .replace("\"exponential-quantile\"", "\"exponential-envelope\"");
        assert!(text.contains("exponential-envelope"));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        std::fs::write(store.path_for(all.fingerprint()), text).unwrap();
        let loaded = store.load(all.fingerprint()).expect("the old store loads");
        let table = &loaded.kernels["hotspot"].table;
        assert_eq!(table.entries.len(), 17);
        assert!(table.entries.iter().all(|e| e.verified_samples == 0));
    }

    /// Damage that still parses, each of which was served with `Health` ok, is refused as the
    /// bundle import refuses it: the file is moved aside and the reason names what was wrong.
    #[test]
    fn a_stored_calibration_that_does_not_agree_with_itself_is_moved_aside() {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let kernel = crate::kernels::find("tmatch").unwrap();
        let stop = AtomicBool::new(false);
        // Budget 0: not every size is measured in full, so the sweep times the others.
        let recipe = Recipe {
            sweep: VerificationSweep {
                budget_s: 0.0,
                ..VerificationSweep::default()
            },
            ..Recipe::default()
        };
        let cal = calibrate_kernel(&mut gpu, &kernel, &recipe, &stop, &mut |_| {});
        let mut all = Calibration::new(gpu.info().clone());
        all.kernels.insert("tmatch".into(), cal.unwrap());
        let good = serde_json::to_value(&all).unwrap();
        // A size only the sweep timed: without its entry and its launches, a hole that only
        // the device's sizes show.
        let swept = all.kernels["tmatch"]
            .campaign
            .verified
            .keys()
            .next()
            .copied();
        let swept = swept.expect("a swept size");
        fn tmatch(v: &mut serde_json::Value) -> &mut serde_json::Value {
            &mut v["kernels"]["tmatch"]
        }
        fn entries(v: &mut serde_json::Value) -> &mut Vec<serde_json::Value> {
            tmatch(v)["table"]["entries"].as_array_mut().unwrap()
        }
        type Damage = Box<dyn Fn(&mut serde_json::Value)>;
        let cases: Vec<(String, Damage)> = vec![
            (
                "the tail states 0e0 per launch".into(),
                Box::new(|v| tmatch(v)["table"]["tail"]["exceedance"] = 0.0.into()),
            ),
            (
                "the tail states -1e0 per launch".into(),
                Box::new(|v| tmatch(v)["table"]["tail"]["exceedance"] = (-1.0).into()),
            ),
            (
                "the table has two entries for".into(),
                Box::new(|v| {
                    let mut lower = entries(v)[1].clone();
                    lower["bound_ns"] = 1.into();
                    entries(v).insert(2, lower);
                }),
            ),
            (
                "a process shift of -3".into(),
                Box::new(|v| tmatch(v)["table"]["process_shift"] = (-3.0).into()),
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let path = store.path_for(all.fingerprint());
        for (n, (expected, damage)) in cases.iter().enumerate() {
            let mut v = good.clone();
            damage(&mut v);
            std::fs::write(&path, v.to_string()).unwrap();
            assert!(
                store.load(all.fingerprint()).is_none(),
                "{expected}: served"
            );
            let expected = expected.as_str();
            assert!(!path.exists(), "{expected}: left in place");
            let said = store.quarantined();
            assert_eq!(said.len(), n + 1);
            assert!(
                said[n].contains("does not agree with itself") && said[n].contains(expected),
                "{expected}: {}",
                said[n]
            );
        }
        std::fs::write(&path, good.to_string()).unwrap();
        assert!(
            store.load(all.fingerprint()).is_some(),
            "the undamaged file loads"
        );
        // Dated ahead of this host's clock (a clock set back since the calibration): it loads.
        let mut ahead = good.clone();
        tmatch(&mut ahead)["calibrated_at"] = "2099-01-01T00:00:00Z".into();
        std::fs::write(&path, ahead.to_string()).unwrap();
        assert!(
            store.load(all.fingerprint()).is_some(),
            "{:?}",
            store.quarantined()
        );
        // A size the device realises that the campaign never timed (realisable only since the
        // kernel was calibrated) is no hole: the file, and every bound in it, loads.
        let mut newer = good.clone();
        entries(&mut newer).retain(|e| e["sms"] != swept);
        let sweep = tmatch(&mut newer)["campaign"]["verified"].as_object_mut();
        sweep.unwrap().remove(&swept.to_string()).unwrap();
        std::fs::write(&path, newer.to_string()).unwrap();
        assert!(
            store.load(all.fingerprint()).is_some(),
            "{:?}",
            store.quarantined()
        );
        // A bundle from a device that realises a size this one did not when it was imported:
        // its bound there is dropped on import, its launches kept, and a later save records the
        // size as realised. No bound is under its launches (none is served there): it loads.
        let mut imported = good.clone();
        entries(&mut imported).retain(|e| e["sms"] != swept);
        std::fs::write(&path, imported.to_string()).unwrap();
        let loaded = store.load(all.fingerprint());
        let table = &loaded.expect("it loads").kernels["tmatch"].table;
        assert!(
            table.entry(swept).is_none(),
            "no bound served at {swept} SMs"
        );
    }

    /// needle calibrated on the simulated H200 and saved in a fresh store: the directory (kept
    /// while the test runs), the store, the calibration and its file.
    fn needle_saved() -> (tempfile::TempDir, Store, Calibration, PathBuf) {
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let kernel = crate::kernels::find("needle").unwrap();
        let stop = AtomicBool::new(false);
        let cal = calibrate_kernel(&mut gpu, &kernel, &Recipe::default(), &stop, &mut |_| {});
        let mut all = Calibration::new(gpu.info().clone());
        all.kernels.insert("needle".into(), cal.unwrap());
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let path = store.save(&all).unwrap();
        (dir, store, all, path)
    }

    /// The seal's digits are found in any layout, past a kernel named `checksum`.
    #[test]
    fn the_seal_is_found_past_a_kernel_named_checksum() {
        let digits = "0123456789abcdef".repeat(4);
        let text = format!(
            r#"{{"kernels": {{"checksum": {{"id": "x"}}}}, "note": "\"checksum\": \"{digits}\"", "checksum" : "{digits}"}}"#
        );
        let found = checksum_digits(text.as_bytes()).unwrap();
        assert_eq!(&text[found.clone()], digits);
        assert_eq!(found.end, text.len() - 2);
    }

    /// A saved file is sealed: a bound's digit changed, still above every launch (which the
    /// consistency checks cannot see), breaks the seal, and the file is set aside; so does a
    /// rewrite that keeps the checksum elsewhere. Without the checksum field (an edit by hand,
    /// or a file written before it) the file loads as before.
    #[test]
    fn a_changed_byte_of_a_sealed_file_sets_it_aside() {
        let (_dir, store, all, path) = needle_saved();
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            written.as_bytes().starts_with(SEAL_PREFIX),
            "{}",
            &written[..40]
        );
        assert!(
            store.load(all.fingerprint()).is_some(),
            "a sealed file loads"
        );

        let field = |bound: u64| format!("\"bound_ns\": {bound}");
        // An entry whose bound is written once (the flat end of a curve repeats one).
        let entry = all.kernels["needle"].table.entries.iter();
        let mut entry = entry.filter(|e| written.matches(&field(e.bound_ns)).count() == 1);
        let entry = entry.next_back().expect("a bound written once");
        let (bound, launches) = (entry.bound_ns, entry.observed_max_ns);
        let lowered = bound - (bound - launches) / 2;
        assert!(lowered > launches && lowered < bound);
        let (sms, field) = (entry.sms, field(bound));
        let changed = written.replace(&field, &format!("\"bound_ns\": {lowered}"));
        let mut v: serde_json::Value = serde_json::from_str(&changed).unwrap();
        let unsealed = {
            v.as_object_mut().unwrap().remove("checksum");
            serde_json::to_string_pretty(&v).unwrap()
        };
        std::fs::write(&path, &changed).unwrap();
        assert!(
            store.load(all.fingerprint()).is_none(),
            "a changed bound served"
        );
        assert!(!path.exists());
        let said = store.quarantined().join("; ");
        assert!(
            said.contains("is not the SHA-256 of its contents"),
            "{said}"
        );

        let compact: serde_json::Value = serde_json::from_str(&written).unwrap();
        std::fs::write(&path, compact.to_string()).unwrap();
        assert!(
            store.load(all.fingerprint()).is_none(),
            "a rewritten file served"
        );
        // Reformatted by a tool: no longer the bytes hashed.
        let said = store.quarantined().join("; ");
        assert_eq!(
            said.matches("is not the SHA-256 of its contents").count(),
            2,
            "{said}"
        );
        // Sealed in another layout (a later version's, read after a downgrade): it loads.
        let mut other = compact.clone();
        other["checksum"] = UNSEALED.into();
        let mut bytes = other.to_string().into_bytes();
        let digits = checksum_digits(&bytes).unwrap();
        let sum = hex_sha256(&[&bytes]);
        bytes[digits].copy_from_slice(sum.as_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(
            store.load(all.fingerprint()).is_some(),
            "{:?}",
            store.quarantined()
        );

        std::fs::write(&path, unsealed).unwrap();
        let edited = store
            .load(all.fingerprint())
            .expect("an edit by hand loads");
        assert_eq!(
            edited.kernels["needle"].table.entry(sms).unwrap().bound_ns,
            lowered
        );
    }

    /// A loaded calibration keeps its launch times in the spill file, not in memory, reads them
    /// back as measured, and writing it back gives the very file it came from; spilling a
    /// freshly measured one after saving changes nothing either.
    #[test]
    fn loaded_times_rest_in_the_spill_file_and_write_back_unchanged() {
        let (dir, store, mut all, path) = needle_saved();
        let written = std::fs::read(&path).unwrap();
        let times = |c: &Calibration| -> Vec<(bool, Vec<u64>)> {
            let k = &c.kernels["needle"].campaign;
            let records = k.sizes.values().chain(k.verified.values());
            records
                .map(|r| (r.times_ns.is_spilled(), r.times_ns.to_vec()))
                .collect()
        };
        let measured = times(&all);
        assert!(measured.iter().all(|(spilled, _)| !spilled));

        let mut loaded = Store::open(dir.path()).unwrap().load(all.fingerprint());
        let loaded = loaded.as_mut().expect("it loads");
        let spilled = times(loaded);
        assert!(spilled.iter().all(|(s, t)| *s != t.is_empty()));
        assert!(spilled.iter().any(|(s, _)| *s));
        let values = |v: &[(bool, Vec<u64>)]| v.iter().map(|x| x.1.clone()).collect::<Vec<_>>();
        assert!(
            values(&spilled) == values(&measured),
            "read back as measured"
        );
        store.save(loaded).unwrap();
        assert!(
            std::fs::read(&path).unwrap() == written,
            "written back unchanged"
        );

        store.spill_times(all.kernels.get_mut("needle").unwrap());
        let after = times(&all);
        assert!(after.iter().all(|(s, t)| *s != t.is_empty()));
        assert!(values(&after) == values(&measured));
        store.save(&all).unwrap();
        assert!(
            std::fs::read(&path).unwrap() == written,
            "spilling changed nothing on disk"
        );
    }
}
