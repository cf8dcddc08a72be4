//! Watching the files a loaded manifest reads again whenever its kernel is timed (the module and
//! the fill files). A module replaced in place is the code the application now launches, so the
//! bounds measured for the version loaded are stale from that moment, not only from the next
//! `ReloadKernels` or calibration attempt. A thread of its own checks every second, whatever
//! the GPU worker is doing; a file's size, modification and change times and inode are compared
//! first, and its bytes are hashed only when one of them moved (a `touch` costs a few hashes, an
//! unchanged file none; the change time cannot be set back, so an edit that restores the
//! modification time is still seen). A file whose change time is within [`RACY`] of the look is
//! looked at again next time, whatever its stat says: a rewrite of the same size within one
//! tick of a coarse file-system clock would otherwise leave the stat as it was (git's "racily
//! clean" files).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::{Duration, SystemTime};

use super::{Event, Inner};
use crate::kernels::Catalogue;
use crate::manifest::Manifest;

/// How often the files are looked at.
const POLL: Duration = Duration::from_secs(1);

/// Files changed this recently are hashed again at the next look (coarse timestamps).
const RACY: Duration = Duration::from_secs(2);

/// Kernels whose files on disk are not those their manifest was loaded with: name to (the
/// loaded manifest's code digest, why). The digest ties the verdict to that load: a reload that
/// reads the new files is another manifest, judged again.
pub(super) type ChangedOnDisk = HashMap<String, (String, OffDisk)>;

/// Why a manifest's files are not those it was loaded with.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum OffDisk {
    /// Read, and found other than loaded: a reload calibrates the new code.
    Changed(String),
    /// Cannot be read now (permissions, a mount gone): whether the code changed is unknown, and a
    /// reload would reject the manifest until the files can be read again.
    Unreadable(String),
}

impl OffDisk {
    pub(super) fn why(&self) -> &str {
        match self {
            OffDisk::Changed(why) | OffDisk::Unreadable(why) => why,
        }
    }
}

/// What the watcher last saw of each manifest's files.
#[derive(Default)]
pub(super) struct CodeWatch {
    seen: HashMap<String, Seen>,
}

#[derive(PartialEq)]
struct Seen {
    code: String,
    stats: Vec<Option<Stat>>,
}

/// Size, modification time, change time (both in ns since the epoch), device and inode.
type Stat = (u64, i128, i128, u64, u64);

/// Watch the catalogue of the service `inner` until the service is gone.
pub(super) fn spawn(inner: Weak<Inner>) {
    let inner_for_health = inner.clone();
    let watch = move || {
        let mut watch = CodeWatch::default();
        loop {
            std::thread::sleep(POLL);
            let Some(inner) = inner.upgrade() else { return };
            inner.span.in_scope(|| watch_once(&inner, &mut watch));
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("wcetd-code-watch".into())
        .spawn(watch)
    {
        tracing::error!("manifests' files are not watched ({e}): a module replaced in place is found stale only at the next reload or calibration");
        if let Some(inner) = inner_for_health.upgrade() {
            inner.code_watch_failed.store(true, Ordering::SeqCst);
        }
    }
}

/// One look: kernels whose files changed on disk (or were put back) change what is stale.
fn watch_once(inner: &Inner, watch: &mut CodeWatch) {
    let catalogue = Arc::clone(
        &inner
            .catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let flipped = watch.check(&catalogue, &inner.changed_on_disk);
    if flipped.is_empty() {
        return;
    }
    let changed = inner
        .changed_on_disk
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    for name in &flipped {
        match changed.get(name) {
            Some((_, OffDisk::Changed(why))) => tracing::warn!("bounds of {name} are stale: {why}; reload the kernels (`{} kernels reload`) to calibrate it", inner.config.wcetctl()),
            Some((_, OffDisk::Unreadable(why))) => tracing::warn!("bounds of {name} are stale: {why}; make the files readable by the daemon again (the bounds are current again as soon as they are, if unchanged)"),
            None => tracing::info!("the files of {name} are again those it was loaded with"),
        }
    }
    drop(changed);
    let _ = inner.events.send(Event::BoundsChanged { kernels: flipped });
}

impl CodeWatch {
    /// Compare every manifest of `catalogue` with its files now, and record the verdicts in
    /// `changed`. Returns the kernels whose verdict changed (their bounds became stale, or
    /// current again when a file was put back).
    pub(super) fn check(
        &mut self,
        catalogue: &Catalogue,
        changed: &RwLock<ChangedOnDisk>,
    ) -> Vec<String> {
        let manifests: Vec<_> = catalogue.iter().filter_map(|k| k.manifest()).collect();
        let names: HashSet<&str> = manifests.iter().map(|m| m.name.as_str()).collect();
        self.seen.retain(|name, _| names.contains(name.as_str()));
        // Hashed without the lock: queries read it, and a large module takes a while.
        let judged = self.judge_moved(&manifests);
        let unchanged = || {
            let verdicts = changed.read().unwrap_or_else(PoisonError::into_inner);
            verdicts.keys().all(|k| names.contains(k.as_str()))
        };
        if judged.is_empty() && unchanged() {
            return Vec::new();
        }
        let mut verdicts = changed.write().unwrap_or_else(PoisonError::into_inner);
        verdicts.retain(|name, _| names.contains(name.as_str()));
        record_verdicts(&mut verdicts, judged)
    }

    /// The verdict on each manifest whose files moved since the last look (or were too recently
    /// changed to trust their stat); those settled are remembered as seen.
    fn judge_moved<'m>(
        &mut self,
        manifests: &[&'m Manifest],
    ) -> Vec<(&'m Manifest, Option<OffDisk>)> {
        let racy = now_ns() - RACY.as_nanos() as i128;
        let mut judged = Vec::new();
        for &m in manifests {
            let stats: Vec<Option<Stat>> = m.input_files().into_iter().map(stat).collect();
            let now = Seen {
                code: m.code_sha256.clone(),
                stats,
            };
            if self.seen.get(&m.name) == Some(&now) {
                continue;
            }
            let verdict = match m.on_disk() {
                crate::manifest::OnDisk::Same => None,
                crate::manifest::OnDisk::Changed(why) => Some(OffDisk::Changed(why)),
                crate::manifest::OnDisk::Unreadable(why) => Some(OffDisk::Unreadable(why)),
            };
            judged.push((m, verdict));
            // The change time alone: the kernel sets it, so it is never in the future (a module
            // unpacked with a future modification time would otherwise be hashed every look).
            let settled = now.stats.iter().flatten().all(|s| s.2 < racy);
            if settled {
                self.seen.insert(m.name.clone(), now);
            } else {
                self.seen.remove(&m.name);
            }
        }
        judged
    }
}

/// Writes the `judged` verdicts into `verdicts`; returns the kernels whose verdict changed.
fn record_verdicts(
    verdicts: &mut ChangedOnDisk,
    judged: Vec<(&Manifest, Option<OffDisk>)>,
) -> Vec<String> {
    let mut flipped = Vec::new();
    for (m, verdict) in judged {
        let before = verdicts
            .get(&m.name)
            .is_some_and(|(code, _)| *code == m.code_sha256);
        if before != verdict.is_some() {
            flipped.push(m.name.clone());
        }
        match verdict {
            Some(why) => {
                verdicts.insert(m.name.clone(), (m.code_sha256.clone(), why));
            }
            None => {
                verdicts.remove(&m.name);
            }
        }
    }
    flipped
}

/// The file's [`Stat`], or `None` when it cannot be read.
fn stat(path: &Path) -> Option<Stat> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Some((
        meta.len(),
        ns(meta.mtime(), meta.mtime_nsec()),
        ns(meta.ctime(), meta.ctime_nsec()),
        meta.dev(),
        meta.ino(),
    ))
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}
