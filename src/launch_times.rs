//! [`LaunchTimes`]: the launch times of one partition size, in launch order, held compactly, and
//! [`SpillFile`]: where the times of calibrations loaded from the store rest while the daemon runs.
//!
//! A calibration keeps every sample it measured (design rule 1 rests on them, and bundles carry
//! them). Measured at every size, one kernel is about 5,400 times, 43 KB as `u64`s. Times of one
//! size differ little from one launch to the next, so each is stored as the zigzag varint of its
//! difference from the one before: about 2 bytes a time on the simulator (`bfs`: 10,281 bytes
//! for 5,400 times). Lossless, and the stored file is unchanged: serialised as the plain array of
//! nanoseconds it always was.
//!
//! Even so, 1,000 stored kernels were 10 MiB of a 26 MiB daemon, and nothing that serves a bound
//! reads them: the bound table holds what the model made of them. So times deserialised while a
//! [`SpillFile`] is installed (the store does this when it loads a calibration) are encoded
//! straight into that file, an unlinked temporary in the state directory, and memory keeps only
//! where they are. They are read back on the rare paths that need them: writing the store,
//! exporting a bundle, `GetBoundInfo`'s median. The JSON file stays the only record: the spill
//! file is rebuilt from it at every start and vanishes with the process.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::fnv::fnv1a;

/// Launch times in nanoseconds, in launch order, delta- and varint-encoded, in memory or in a
/// [`SpillFile`].
#[derive(Clone, Default)]
pub struct LaunchTimes {
    held: Held,
    len: usize,
    /// The last time pushed: the base of the next difference.
    last: u64,
}

#[derive(Clone)]
enum Held {
    Memory(Vec<u8>),
    /// `bytes` encoded bytes at `offset` of `file`; never written again once there. Their
    /// FNV-1a hash is checked on every read: a page the disk lost under a successful write
    /// would otherwise come back as zeros, decode as times, and be saved over the good file.
    Spilled {
        file: Arc<SpillFile>,
        offset: u64,
        bytes: usize,
        hash: u64,
    },
}

impl Default for Held {
    fn default() -> Self {
        Held::Memory(Vec::new())
    }
}

impl LaunchTimes {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the times rest in a spill file rather than in memory.
    pub fn is_spilled(&self) -> bool {
        matches!(self.held, Held::Spilled { .. })
    }

    pub fn push(&mut self, t: u64) {
        let last = self.last;
        encode(self.resident_mut(), last, t);
        self.last = t;
        self.len += 1;
    }

    pub fn extend_from_slice(&mut self, times: &[u64]) {
        self.resident_mut().reserve(times.len() * 2);
        for &t in times {
            self.push(t);
        }
    }

    /// The encoded bytes, read back from the spill file where they rest there.
    fn encoded(&self) -> io::Result<Cow<'_, [u8]>> {
        match &self.held {
            Held::Memory(bytes) => Ok(Cow::Borrowed(bytes)),
            Held::Spilled {
                file,
                offset,
                bytes,
                hash,
            } => {
                let read = file.read(*offset, *bytes)?;
                if fnv1a(&read) != *hash {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{bytes} bytes at offset {offset} of the spill file do not match what was written there"),
                    ));
                }
                Ok(Cow::Owned(read))
            }
        }
    }

    /// The times, in launch order; an error only where a spill file cannot be read.
    pub fn try_iter(&self) -> io::Result<Iter<'_>> {
        Ok(Iter {
            bytes: self.encoded()?,
            at: 0,
            last: 0,
        })
    }

    /// The times, in launch order. A spill file that cannot be read (the disk under the state
    /// directory failed) is logged and reads as no times; the paths that must not lose them
    /// (writing the store, exporting) use [`LaunchTimes::try_iter`] through `Serialize`.
    pub fn iter(&self) -> Iter<'_> {
        self.try_iter().unwrap_or_else(|e| {
            tracing::error!(error = %e, "launch times could not be read back from the spill file");
            Iter {
                bytes: Cow::Borrowed(&[]),
                at: 0,
                last: 0,
            }
        })
    }

    pub fn to_vec(&self) -> Vec<u64> {
        let mut v = Vec::with_capacity(self.len);
        v.extend(self.iter());
        v
    }

    pub fn max(&self) -> Option<u64> {
        self.iter().max()
    }

    /// Give back what growing left over (a finished record is never pushed to again).
    pub fn shrink_to_fit(&mut self) {
        if let Held::Memory(bytes) = &mut self.held {
            bytes.shrink_to_fit();
        }
    }

    /// The in-memory bytes, read back first if the times were spilled (only a record that is
    /// measured further after loading, which the daemon never does, takes that path).
    fn resident_mut(&mut self) -> &mut Vec<u8> {
        if self.is_spilled() {
            let bytes = self
                .encoded()
                .expect("reading launch times back from the spill file")
                .into_owned();
            self.held = Held::Memory(bytes);
        }
        match &mut self.held {
            Held::Memory(bytes) => bytes,
            Held::Spilled { .. } => unreachable!("made resident above"),
        }
    }
}

/// Append `t` to `bytes` as the zigzag varint of its difference from `last`.
fn encode(bytes: &mut Vec<u8>, last: u64, t: u64) {
    let d = t.wrapping_sub(last) as i64;
    let mut z = ((d << 1) ^ (d >> 63)) as u64;
    while z >= 0x80 {
        bytes.push((z as u8) | 0x80);
        z >>= 7;
    }
    bytes.push(z as u8);
}

impl PartialEq for LaunchTimes {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for LaunchTimes {}

impl From<&[u64]> for LaunchTimes {
    fn from(times: &[u64]) -> Self {
        let mut out = LaunchTimes::new();
        out.extend_from_slice(times);
        out.shrink_to_fit();
        out
    }
}

impl From<Vec<u64>> for LaunchTimes {
    fn from(times: Vec<u64>) -> Self {
        LaunchTimes::from(times.as_slice())
    }
}

impl FromIterator<u64> for LaunchTimes {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let mut out = LaunchTimes::new();
        for t in iter {
            out.push(t);
        }
        out.shrink_to_fit();
        out
    }
}

/// Decodes [`LaunchTimes`] in launch order.
pub struct Iter<'a> {
    bytes: Cow<'a, [u8]>,
    at: usize,
    last: u64,
}

impl Iterator for Iter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let mut z = 0u64;
        let mut shift = 0;
        loop {
            let &b = self.bytes.get(self.at)?;
            self.at += 1;
            z |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
        }
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        self.last = self.last.wrapping_add(d as u64);
        Some(self.last)
    }
}

impl<'a> IntoIterator for &'a LaunchTimes {
    type Item = u64;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::fmt::Debug for LaunchTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for LaunchTimes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Writing the store or a bundle must fail rather than write times it could not read.
        let times = self.try_iter().map_err(|e| {
            serde::ser::Error::custom(format!(
                "launch times could not be read back from the spill file: {e}"
            ))
        })?;
        s.collect_seq(times)
    }
}

impl<'de> Deserialize<'de> for LaunchTimes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = LaunchTimes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of launch times in nanoseconds")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<LaunchTimes, A::Error> {
                match SpillFile::installed() {
                    None => {
                        let mut out = LaunchTimes::new();
                        while let Some(t) = seq.next_element::<u64>()? {
                            out.push(t);
                        }
                        out.shrink_to_fit();
                        Ok(out)
                    }
                    Some(file) => SCRATCH.with_borrow_mut(|scratch| {
                        scratch.clear();
                        let (mut len, mut last) = (0, 0);
                        while let Some(t) = seq.next_element::<u64>()? {
                            encode(scratch, last, t);
                            (len, last) = (len + 1, t);
                        }
                        Ok(LaunchTimes::spill(&file, scratch, len, last))
                    }),
                }
            }
        }
        d.deserialize_seq(Visitor)
    }
}

impl LaunchTimes {
    /// Move in-memory times to `file`; on a write error they stay in memory (logged).
    pub fn spill_to(&mut self, file: &Arc<SpillFile>) {
        if let Held::Memory(bytes) = &self.held {
            *self = LaunchTimes::spill(file, bytes, self.len, self.last);
        }
    }

    /// Times already encoded in `bytes`, written to `file`; kept in memory when that fails.
    fn spill(file: &Arc<SpillFile>, bytes: &[u8], len: usize, last: u64) -> Self {
        let held = if bytes.is_empty() {
            Held::default()
        } else {
            match file.append(bytes) {
                Ok(offset) => Held::Spilled {
                    file: file.clone(),
                    offset,
                    bytes: bytes.len(),
                    hash: fnv1a(bytes),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "spill file not writable; launch times kept in memory");
                    Held::Memory(bytes.to_vec())
                }
            }
        };
        LaunchTimes { held, len, last }
    }
}

thread_local! {
    /// The spill file deserialisation on this thread writes launch times to, if any.
    static INSTALLED: RefCell<Option<Arc<SpillFile>>> = const { RefCell::new(None) };
    /// One encoding buffer reused for every spilled record, so loading leaves no holes.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// An unlinked, append-only temporary file holding launch times of loaded calibrations. It only
/// grows: times of a calibration that a recalibration replaced stay in it until the daemon
/// restarts (about 2 bytes a launch; a full recalibration of 1,000 kernels adds some 10 MB).
#[derive(Debug)]
pub struct SpillFile {
    file: File,
    /// Where the next record goes; writes are serialised so records never overlap.
    end: Mutex<u64>,
}

impl SpillFile {
    /// A new spill file in `dir` (the state directory: a place the daemon may write, on disk
    /// rather than in a memory-backed /tmp). It has no name, so nothing outlives the process.
    pub fn create_in(dir: &Path) -> io::Result<Arc<SpillFile>> {
        Ok(Arc::new(SpillFile {
            file: tempfile::tempfile_in(dir)?,
            end: Mutex::new(0),
        }))
    }

    /// Run `f` (a deserialisation) with every launch time it reads spilled into this file.
    pub fn spilling<T>(self: &Arc<Self>, f: impl FnOnce() -> T) -> T {
        /// Puts back whatever was installed before, also when `f` panics.
        struct Restore(Option<Arc<SpillFile>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                INSTALLED.set(self.0.take());
            }
        }
        let _restore = Restore(INSTALLED.replace(Some(self.clone())));
        f()
    }

    fn installed() -> Option<Arc<SpillFile>> {
        INSTALLED.with_borrow(Clone::clone)
    }

    fn append(&self, bytes: &[u8]) -> io::Result<u64> {
        let mut end = self.end.lock().unwrap_or_else(|p| p.into_inner());
        let offset = *end;
        self.file.write_all_at(bytes, offset)?;
        *end += bytes.len() as u64;
        Ok(offset)
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut bytes = vec![0; len];
        self.file.read_exact_at(&mut bytes, offset)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any times, however far apart (0 and u64::MAX included), come back exactly, in order,
        /// through memory and through JSON.
        #[test]
        fn times_come_back_exactly(times in proptest::collection::vec(prop_oneof![any::<u64>(), 40_000u64..60_000], 0..400)) {
            let held = LaunchTimes::from(times.clone());
            prop_assert_eq!(held.len(), times.len());
            prop_assert_eq!(held.to_vec(), times.clone());
            prop_assert_eq!(held.max(), times.iter().copied().max());
            let json = serde_json::to_string(&held).unwrap();
            prop_assert_eq!(&json, &serde_json::to_string(&times).unwrap());
            let back: LaunchTimes = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back, held);
        }
    }

    #[test]
    fn close_times_take_about_two_bytes() {
        let times: Vec<u64> = (0..5400u64).map(|i| 50_000 + (i * 7919) % 1500).collect();
        let held = LaunchTimes::from(times);
        assert!(
            held.encoded().unwrap().len() <= 2 * 5400 + 3,
            "{} bytes",
            held.encoded().unwrap().len()
        );
    }

    /// Times loaded while a spill file is installed rest there, read back the same, serialise
    /// to the same JSON, and can still be pushed to; outside `spilling` nothing is spilled.
    #[test]
    fn spilled_times_read_back_and_serialise_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let file = SpillFile::create_in(dir.path()).unwrap();
        let sets: Vec<Vec<u64>> = vec![
            vec![],
            vec![7],
            (0..5400).map(|i| 50_000 + i * 13 % 997).collect(),
            vec![u64::MAX, 0, 3],
        ];
        let json = serde_json::to_string(&sets).unwrap();
        let spilled: Vec<LaunchTimes> = file.spilling(|| serde_json::from_str(&json)).unwrap();
        let plain: Vec<LaunchTimes> = serde_json::from_str(&json).unwrap();
        assert!(plain.iter().all(|t| !t.is_spilled()));
        for ((s, p), v) in spilled.iter().zip(&plain).zip(&sets) {
            assert_eq!(s.is_spilled(), !v.is_empty());
            assert_eq!(&s.to_vec(), v);
            assert_eq!(s, p);
        }
        assert_eq!(serde_json::to_string(&spilled).unwrap(), json);
        let mut grown = spilled[2].clone();
        grown.push(1);
        assert!(!grown.is_spilled());
        assert_eq!(grown.len(), 5401);
        assert_eq!(grown.to_vec()[..5400], sets[2][..]);
        assert_eq!(
            spilled[2].to_vec(),
            sets[2],
            "the clone pushed to, not the original"
        );
    }

    /// Bytes that changed in the spill file (a page the disk lost reads back as zeros) are an
    /// error where they are read, and writing such times fails rather than saving zeros.
    #[test]
    fn a_spill_file_that_changed_under_the_times_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = SpillFile::create_in(dir.path()).unwrap();
        let times: LaunchTimes = file
            .spilling(|| serde_json::from_str("[50000, 50100, 49900]"))
            .unwrap();
        assert!(times.is_spilled());
        file.file.write_all_at(&[0, 0], 0).unwrap();
        assert!(times.try_iter().is_err());
        assert_eq!(times.iter().count(), 0, "logged, read as none");
        let err = serde_json::to_string(&times).unwrap_err().to_string();
        assert!(err.contains("do not match what was written"), "{err}");
    }

    #[test]
    fn spilling_nests_and_restores_what_was_installed() {
        let dir = tempfile::tempdir().unwrap();
        let (outer, inner) = (
            SpillFile::create_in(dir.path()).unwrap(),
            SpillFile::create_in(dir.path()).unwrap(),
        );
        outer.spilling(|| {
            inner.spilling(|| assert!(Arc::ptr_eq(&SpillFile::installed().unwrap(), &inner)));
            assert!(Arc::ptr_eq(&SpillFile::installed().unwrap(), &outer));
        });
        assert!(SpillFile::installed().is_none());
    }
}
