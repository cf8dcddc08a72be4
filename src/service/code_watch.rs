//! Watching the files a loaded manifest reads again whenever its kernel is timed (the module and
//! the fill files). A module replaced in place is the code the application now launches, so the
//! bounds measured for the version loaded are stale from that moment, not only from the next
//! `ReloadKernels` or calibration attempt. The GPU worker checks between jobs and while idle;
//! a file's size, modification time and inode are compared first, and its bytes are hashed
//! only when one of them moved (a `touch` costs one hash, an unchanged file none).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{PoisonError, RwLock};
use std::time::SystemTime;

use crate::kernels::Catalogue;

/// Kernels whose files on disk are not those their manifest was loaded with: name to (the
/// loaded manifest's code digest, why). The digest ties the verdict to that load: a reload that
/// reads the new files is another manifest, judged again.
pub(super) type ChangedOnDisk = HashMap<String, (String, String)>;

/// What the worker last saw of each manifest's files.
#[derive(Default)]
pub(super) struct CodeWatch {
    seen: HashMap<String, Seen>,
}

#[derive(PartialEq)]
struct Seen {
    code: String,
    stats: Vec<Option<(u64, SystemTime, u64)>>,
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
        self.seen
            .retain(|name, _| manifests.iter().any(|m| &m.name == name));
        // Hashed without the lock: queries read it, and a large module takes a while.
        let mut judged = Vec::new();
        for m in manifests.iter() {
            let now = Seen {
                code: m.code_sha256.clone(),
                stats: m.input_files().into_iter().map(stat).collect(),
            };
            if self.seen.get(&m.name) != Some(&now) {
                judged.push((m, m.changed_on_disk()));
                self.seen.insert(m.name.clone(), now);
            }
        }
        let mut verdicts = changed.write().unwrap_or_else(PoisonError::into_inner);
        verdicts.retain(|name, _| manifests.iter().any(|m| &m.name == name));
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
}

/// (size, modification time, inode), or `None` when the file cannot be read.
fn stat(path: &Path) -> Option<(u64, SystemTime, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?, meta.ino()))
}
