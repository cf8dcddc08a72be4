//! Observations from production: the launch times schedulers report (`Monitor1.Report`), kept per
//! (kernel, partition size, interference) as an hdrhistogram histogram of 3 significant digits
//! with the exact maximum beside it (a histogram rounds), in epochs: one per calibration the times
//! were judged against, the older ones kept with the calibration they judged. Saved atomically to
//! the state directory, each histogram in hdrhistogram's own V2 serialisation; between saves,
//! every floor raised is appended to a journal beside the file (one fsynced JSON line each),
//! which loading raises over the file's floors.
//!
//! This module keeps; it does not judge. Which bound a time is compared with and what an overrun
//! does is the service's business (`service/monitor.rs`), which also orders the writes: a floor a
//! report raises is appended to the journal ([`ObservationFile::journal`]), or saved, before the
//! report is answered; the whole file is written ([`ObservationFile::save`]) at most every few
//! seconds and at shutdown; the two take turns under one lock (`saving` there), and after a save
//! what the journal held is in the file.
//!
//! Memory: a dense histogram of 3 significant digits holds about 10,000 counters for times of
//! microseconds to milliseconds (tens of KiB), too much for 1,000 kernels x 17 sizes. So a
//! histogram rests serialised (V2 run-length encodes the empty counters: about a KiB for a real
//! distribution), with a bounded buffer of times not merged yet; it is decoded only to merge that
//! buffer, which also refreshes the cached quantiles that reads use.

use base64::Engine;
use chrono::{DateTime, Utc};
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::gpu::{Fingerprint, Interference, PartitionSize};

/// Precision of every histogram: values are told apart to 0.1%.
pub const SIGNIFICANT_DIGITS: u8 = 3;
/// The longest launch time accepted: one hour. Longer is a unit mistake, not a GPU kernel, and
/// would make every bound of the kernel useless once it became a floor.
pub const MAX_TIME_NS: u64 = crate::samples::MAX_TIME_NS;
/// Most times one report may carry.
pub const MAX_TIMES_PER_REPORT: usize = 65_536;
/// Epochs kept per series, the current one included; older histograms are dropped, their maxima
/// and overruns stay in the series' floor and totals.
pub const EPOCHS_KEPT: usize = 8;
/// Times buffered per histogram before they are merged into it: a merge (decode, record, quantiles,
/// encode) costs tens of microseconds, so it is paid once per 40 reports of 100 times.
const PENDING_LIMIT: usize = 4096;
/// Times buffered in all histograms together (8 MiB) before every report merges its own at once;
/// each save merges them all.
const PENDING_BUDGET: usize = 1 << 20;
pub const FORMAT_VERSION: u32 = 1;
/// The largest range a stored histogram may declare: auto-resizing at most doubles the range
/// needed for [`MAX_TIME_NS`]. A file that declares more is corrupt (and would cost memory).
const MAX_DECLARED_HIGH: u64 = 1 << 44;
/// Largest V2 payload accepted from a file, inflated.
const MAX_PAYLOAD: usize = 1 << 22;
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9314;

/// Quantiles of one histogram, each the highest value equivalent to the one at that rank (so at
/// most 0.1% above it) and never above the exact maximum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quantiles {
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
}

impl Quantiles {
    pub(crate) fn of(h: &Histogram<u64>) -> Quantiles {
        if h.is_empty() {
            return Quantiles::default();
        }
        let mut q = h.value_at_quantiles([0.5, 0.99, 0.999]);
        let mut next = || q.next().unwrap_or(0);
        Quantiles {
            p50_ns: next(),
            p99_ns: next(),
            p999_ns: next(),
        }
    }

    pub(crate) fn capped(self, max_ns: u64) -> Quantiles {
        Quantiles {
            p50_ns: self.p50_ns.min(max_ns),
            p99_ns: self.p99_ns.min(max_ns),
            p999_ns: self.p999_ns.min(max_ns),
        }
    }
}

/// A histogram at rest: V2 bytes and the times not merged into them yet.
#[derive(Debug, Clone, Default)]
pub struct CompactHistogram {
    /// Empty while nothing is merged.
    v2: Vec<u8>,
    pending: Vec<u64>,
    merged: u64,
    quantiles: Quantiles,
}

impl CompactHistogram {
    pub fn count(&self) -> u64 {
        self.merged + self.pending.len() as u64
    }

    /// Buffer `times`; [`ReportedTimes::record`] decides when to merge.
    fn push(&mut self, times: &[u64]) {
        self.pending.extend_from_slice(times);
    }

    fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Fold the buffered times into the serialised histogram; returns how many there were.
    fn merge(&mut self) -> usize {
        let n = self.pending.len();
        if n > 0 {
            let mut h = self.decode();
            record_all(&mut h, &self.pending);
            self.pending = Vec::new();
            self.set(&h);
        }
        n
    }

    /// Quantiles of everything recorded: cached when nothing is buffered, else computed from a
    /// decoded copy (a read never changes what is buffered).
    pub fn quantiles(&self) -> Quantiles {
        if self.pending.is_empty() {
            self.quantiles
        } else {
            Quantiles::of(&self.histogram())
        }
    }

    /// Everything recorded, as a histogram (to add histograms together).
    pub fn histogram(&self) -> Histogram<u64> {
        let mut h = self.decode();
        record_all(&mut h, &self.pending);
        h
    }

    /// The V2 serialisation of everything merged (empty when nothing is).
    pub fn v2(&self) -> &[u8] {
        &self.v2
    }

    /// Bytes held on the heap, for the memory figures.
    pub fn heap_bytes(&self) -> usize {
        self.v2.capacity() + self.pending.capacity() * 8
    }

    /// A histogram read from a file: V2 or V2+deflate, checked before anything is allocated from
    /// what its header declares.
    pub fn from_bytes(bytes: &[u8]) -> Result<CompactHistogram, String> {
        if bytes.is_empty() {
            return Ok(CompactHistogram::default());
        }
        let v2 = plain_v2(bytes)?;
        check_v2_header(&v2)?;
        // The decoder is third-party code fed bytes from disk: a panic in it must cost this
        // histogram, not the daemon.
        let decoded = std::panic::catch_unwind(|| {
            Deserializer::new().deserialize::<u64, _>(&mut v2.as_slice())
        })
        .map_err(|_| "the histogram decoder panicked".to_string())?
        .map_err(|e| format!("not an hdrhistogram V2 histogram: {e:?}"))?;
        let mut h = decoded;
        h.auto(true);
        let mut out = CompactHistogram::default();
        out.set(&h);
        Ok(out)
    }

    fn decode(&self) -> Histogram<u64> {
        let fresh =
            || Histogram::<u64>::new(SIGNIFICANT_DIGITS).expect("3 significant digits is valid");
        if self.v2.is_empty() {
            return fresh();
        }
        match Deserializer::new().deserialize::<u64, _>(&mut self.v2.as_slice()) {
            Ok(mut h) => {
                h.auto(true);
                h
            }
            Err(e) => {
                // Bytes this process wrote itself: only a bug gets here. The maxima and floors
                // live beside the histogram, so a bound never depends on these counts.
                tracing::error!(error = ?e, "an observation histogram did not decode; its counts are lost");
                fresh()
            }
        }
    }

    fn set(&mut self, h: &Histogram<u64>) {
        self.merged = h.len();
        self.quantiles = Quantiles::of(h);
        self.v2.clear();
        if h.is_empty() {
            self.v2 = Vec::new();
            return;
        }
        if let Err(e) = V2Serializer::new().serialize(h, &mut self.v2) {
            tracing::error!(error = ?e, "an observation histogram did not serialise; its counts are lost");
            self.v2 = Vec::new();
            self.merged = 0;
            self.quantiles = Quantiles::default();
        }
        self.v2.shrink_to_fit();
    }
}

/// Record into an auto-resizing histogram (times are at most [`MAX_TIME_NS`], far inside what it
/// can grow to; `saturating_record` would clamp instead of growing).
fn record_all(h: &mut Histogram<u64>, times: &[u64]) {
    for &t in times {
        if h.record(t).is_err() {
            h.saturating_record(t);
        }
    }
}

/// V2 bytes from V2 or V2+deflate, inflating at most [`MAX_PAYLOAD`] bytes.
fn plain_v2(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let word = |b: &[u8], at: usize| -> Result<u32, String> {
        b.get(at..at + 4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            .ok_or_else(|| "truncated histogram".to_string())
    };
    match word(bytes, 0)? {
        V2_COOKIE => Ok(bytes.to_vec()),
        V2_DEFLATE_COOKIE => {
            let len = word(bytes, 4)? as usize;
            let body = bytes
                .get(8..8 + len)
                .ok_or("truncated compressed histogram")?;
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(body)
                .take(MAX_PAYLOAD as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| format!("compressed histogram does not inflate: {e}"))?;
            if out.len() > MAX_PAYLOAD {
                return Err("compressed histogram inflates past the accepted size".into());
            }
            Ok(out)
        }
        other => Err(format!("cookie {other:#x} is not hdrhistogram V2")),
    }
}

/// The header fields the decoder would allocate from, checked against what this daemon writes.
fn check_v2_header(v2: &[u8]) -> Result<(), String> {
    const HEADER: usize = 40;
    if v2.len() < HEADER {
        return Err("truncated histogram header".into());
    }
    let u32_at = |at: usize| u32::from_be_bytes(v2[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_be_bytes(v2[at..at + 8].try_into().expect("8 bytes"));
    if u32_at(0) != V2_COOKIE {
        return Err("compressed payload is not V2".into());
    }
    let payload = u32_at(4) as usize;
    if payload > MAX_PAYLOAD || payload > v2.len() - HEADER {
        return Err(format!(
            "payload of {payload} bytes, {} present",
            v2.len() - HEADER
        ));
    }
    let (digits, low, high) = (u32_at(12), u64_at(16), u64_at(24));
    if digits != u32::from(SIGNIFICANT_DIGITS)
        || low != 1
        || !(2..=MAX_DECLARED_HIGH).contains(&high)
    {
        return Err(format!(
            "histogram of {digits} digits over [{low}, {high}]; accepted: {SIGNIFICANT_DIGITS} digits from 1 to at most {MAX_DECLARED_HIGH}"
        ));
    }
    Ok(())
}

/// The times reported while one calibration was served: what they were judged against.
#[derive(Debug, Clone)]
pub struct Epoch {
    /// The id of the calibration whose bounds these times were compared with ("" when the kernel
    /// had none yet).
    pub calibration: String,
    pub started: DateTime<Utc>,
    pub histogram: CompactHistogram,
    /// The exact largest time.
    pub max_ns: u64,
    /// Times above the bound served when they were reported, and those carried in.
    pub overruns: u64,
    /// Times carried in from the epoch before: reported while this epoch's calibration was
    /// being measured, and above its bounds (see [`ReportedTimes::carry_over`]). Each is an
    /// overrun of this calibration, and is counted here, in the histogram and in `overruns`.
    pub carried: u64,
    /// The largest time counted as an overrun here (0: none), what a carried time is compared
    /// with: a report of as large a time after the publication is not one when the floor the
    /// waiting time set already held the bound up, and must not hide it.
    pub max_overrun_ns: u64,
    /// The largest time whose report named its interference (0: none did). In the isolated
    /// series, which untagged reports share, it tells the two apart where it matters: a time
    /// reported before the kernel had a bound is judged by the first calibration as it was
    /// reported, a tagged isolated one against the isolated bound, not as untagged against the
    /// larger of the two.
    pub max_tagged_ns: u64,
}

impl Epoch {
    fn new(calibration: &str, started: DateTime<Utc>) -> Epoch {
        Epoch {
            calibration: calibration.to_string(),
            started,
            histogram: CompactHistogram::default(),
            max_ns: 0,
            max_overrun_ns: 0,
            max_tagged_ns: 0,
            overruns: 0,
            carried: 0,
        }
    }

    pub fn count(&self) -> u64 {
        self.histogram.count()
    }

    pub fn quantiles(&self) -> Quantiles {
        self.histogram.quantiles().capped(self.max_ns)
    }
}

/// Everything reported for one (kernel, size, interference).
#[derive(Debug, Clone)]
pub struct Series {
    /// The largest time ever reported here, in any epoch, and when: a floor for every bound
    /// served at this size (design rule 1).
    pub floor_ns: u64,
    pub floor_at: DateTime<Utc>,
    /// The highest SM clock (MHz) read when a time of this series was reported; 0 where none
    /// could be read. A launch seen at a faster clock takes longer at a slower one, so the floor
    /// is served scaled from this clock (or the calibrated one, if higher) to the current one:
    /// every time reported here, at whatever clock it ran, is below the floor scaled so.
    pub floor_clock_mhz: u32,
    pub reported_total: u64,
    /// `reported_total` as the observations file last held it (read at start, or written by the
    /// last save that succeeded): a crash never takes the count below it, so it is what the
    /// metrics file exports as a counter (it went down after a crash, which Prometheus reads as
    /// a reset and counts again). Not stored: it is the stored value.
    pub reported_saved: u64,
    pub overruns_total: u64,
    pub last_report: DateTime<Utc>,
    /// Oldest first; the last one is current.
    pub epochs: Vec<Epoch>,
}

impl Series {
    fn new(now: DateTime<Utc>) -> Series {
        Series {
            floor_ns: 0,
            floor_at: now,
            floor_clock_mhz: 0,
            reported_total: 0,
            reported_saved: 0,
            overruns_total: 0,
            last_report: now,
            epochs: Vec::new(),
        }
    }

    /// The current epoch, when it judges `calibration`.
    #[cfg(test)]
    fn judging(&mut self, calibration: &str) -> Option<&mut Epoch> {
        self.epochs
            .last_mut()
            .filter(|e| e.calibration == calibration)
    }

    /// The epoch that judges `calibration`, started now when the current one judged another
    /// (whose buffer is merged then, so that only the current epoch ever buffers); and how many
    /// buffered times that merged.
    fn epoch_for(&mut self, calibration: &str, now: DateTime<Utc>) -> (&mut Epoch, usize) {
        let mut merged = 0;
        if self
            .epochs
            .last()
            .is_none_or(|e| e.calibration != calibration)
        {
            merged = self.epochs.last_mut().map_or(0, |e| e.histogram.merge());
            self.epochs.push(Epoch::new(calibration, now));
            let extra = self.epochs.len().saturating_sub(EPOCHS_KEPT);
            self.epochs.drain(..extra);
            // A Vec grows to room for 4 epochs at its first push: 400 bytes per series wasted
            // on series that are rarely recalibrated. Epochs start rarely, so fit exactly.
            self.epochs.shrink_to_fit();
        }
        (self.epochs.last_mut().expect("just ensured"), merged)
    }
}

/// What the times of one report were judged against.
#[derive(Debug, Clone, Copy)]
pub struct Judged<'a> {
    pub calibration: &'a str,
    /// The bound served at that size when they were reported (`None`: none was).
    pub bound_ns: Option<u64>,
}

/// What recording one report changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// Times above the bound.
    pub overruns: u64,
    /// The largest time of the report.
    pub max_ns: u64,
    /// The series' floor after the report, and whether the report raised it.
    pub floor_ns: u64,
    pub floor_raised: bool,
    /// The series' floor clock after the report ([`Series::floor_clock_mhz`]), and whether the
    /// report raised it (a time below the floor, at a faster clock than any before).
    pub floor_clock_mhz: u32,
    pub clock_raised: bool,
}

/// Every launch time reported from production, as series by kernel, then (size, interference).
/// (`model::Observations` are the daemon's own measured samples.)
#[derive(Debug, Clone, Default)]
pub struct ReportedTimes {
    kernels: HashMap<String, BTreeMap<(PartitionSize, Interference), Series>>,
    /// Times buffered in every histogram, kept exact: only this type merges.
    pending: usize,
    /// Per kernel being recalibrated, the largest time reported at each size under each tag as
    /// the report gave it (`None`: untagged) since its recalibration began; judged again against
    /// the new calibration when it is published. Not saved: a recalibration does not outlive
    /// the process.
    during_recalibration: HashMap<String, BTreeMap<(PartitionSize, Option<Interference>), u64>>,
    /// Of those, the ones a publication of the running recalibration already carried over and
    /// signalled: a later publication of the same job (its other interference) carries them into
    /// its epoch again, as the one untagged reports are then judged in, but signals nothing.
    signalled_during_recalibration:
        HashMap<String, BTreeSet<(PartitionSize, Option<Interference>)>>,
    /// The calibrations the running recalibration of a kernel has published: only they judge
    /// its noted times (one it did not make judged them when it was served).
    published_during_recalibration: HashMap<String, BTreeSet<String>>,
}

impl ReportedTimes {
    /// Record `times` (each checked by the caller: 1 to [`MAX_TIME_NS`]) at `(kernel, sms, tag)`.
    pub fn record(
        &mut self,
        (kernel, sms, tag): (&str, PartitionSize, Interference),
        judged: Judged<'_>,
        times: &[u64],
        now: DateTime<Utc>,
        clock_mhz: u32,
    ) -> Recorded {
        let series = match self.kernels.get_mut(kernel) {
            Some(k) => k,
            None => self.kernels.entry(kernel.to_string()).or_default(),
        }
        .entry((sms, tag))
        .or_insert_with(|| Series::new(now));
        let max_ns = times.iter().copied().max().unwrap_or(0);
        let overruns = judged
            .bound_ns
            .map_or(0, |b| times.iter().filter(|&&t| t > b).count() as u64);
        let (epoch, merged) = series.epoch_for(judged.calibration, now);
        epoch.histogram.push(times);
        self.pending = self.pending - merged + times.len();
        if epoch.histogram.pending_len() >= PENDING_LIMIT || self.pending >= PENDING_BUDGET {
            self.pending -= epoch.histogram.merge();
        }
        epoch.max_ns = epoch.max_ns.max(max_ns);
        epoch.overruns += overruns;
        if overruns > 0 {
            epoch.max_overrun_ns = epoch.max_overrun_ns.max(max_ns);
        }
        series.reported_total += times.len() as u64;
        series.overruns_total += overruns;
        series.last_report = now;
        let floor_raised = max_ns > series.floor_ns;
        if floor_raised {
            series.floor_ns = max_ns;
            series.floor_at = now;
        }
        let clock_raised = clock_mhz > series.floor_clock_mhz;
        series.floor_clock_mhz = series.floor_clock_mhz.max(clock_mhz);
        Recorded {
            overruns,
            max_ns,
            floor_ns: series.floor_ns,
            floor_raised,
            floor_clock_mhz: series.floor_clock_mhz,
            clock_raised,
        }
    }

    /// A recalibration of `kernel` begins: from now on the largest time of each of its series is
    /// kept apart, to be judged against what it publishes. Already begun: nothing changes.
    ///
    /// Times reported before the kernel had any bound there (their epoch judged against none)
    /// are kept with them: the calibration now running is the first that can judge them, and a
    /// first bound below a time production already saw is an overrun to signal as one reported
    /// while it was measured is. (They raised the first bound through their floor, but were
    /// counted nowhere: a black-box run saw a bound raised to twice its calibrated value with
    /// `OverrunKernels` empty.) An isolated series may hold untagged times: judged as untagged.
    ///
    /// So are contended times judged against another calibration than `contended` (the
    /// kernel's contended calibration, if it has one): before it had one, a contended time was
    /// judged as untagged, and a contended calibration this job publishes is the first to judge
    /// it as contended.
    pub fn recalibration_started(&mut self, kernel: &str, contended: Option<&str>) {
        let before_own_bound: Vec<((PartitionSize, Option<Interference>), u64)> = self
            .kernels
            .get(kernel)
            .into_iter()
            .flatten()
            .filter_map(|(&(sms, tag), s)| {
                let e = s.epochs.last()?;
                let own = match tag {
                    Interference::Isolated => !e.calibration.is_empty(),
                    Interference::Contended => Some(e.calibration.as_str()) == contended,
                };
                if own || e.max_ns == 0 {
                    return None;
                }
                Some(match tag {
                    Interference::Contended => vec![((sms, Some(tag)), e.max_ns)],
                    // The largest tagged time as tagged; the largest time as untagged only when
                    // it is not that one (an untagged time below it, judged against the larger
                    // bound, is over it only where the tagged time is over the isolated one).
                    Interference::Isolated => [
                        (e.max_tagged_ns > 0).then_some(((sms, Some(tag)), e.max_tagged_ns)),
                        (e.max_tagged_ns < e.max_ns).then_some(((sms, None), e.max_ns)),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                })
            })
            .flatten()
            .collect();
        let during = self
            .during_recalibration
            .entry(kernel.to_string())
            .or_default();
        for (key, max_ns) in before_own_bound {
            let largest = during.entry(key).or_default();
            *largest = (*largest).max(max_ns);
        }
    }

    /// The time noted at `key` for `kernel`'s running recalibration was carried over by a
    /// publication of it; whether this is the first time, the one to signal. An untagged time is
    /// judged against the larger of the tags' bounds, which only grows as the job publishes its
    /// interferences, so once carried it is carried again by each later one, into the epoch the
    /// next untagged report is judged in (or that report would drop it), but it is one report:
    /// signalled once (a black-box run got two `BoundExceeded` for it).
    pub fn first_carry(
        &mut self,
        kernel: &str,
        key: (PartitionSize, Option<Interference>),
    ) -> bool {
        self.signalled_during_recalibration
            .entry(kernel.to_string())
            .or_default()
            .insert(key)
    }

    /// The running recalibration of `kernel` published calibration `id`.
    pub fn published_during_recalibration(&mut self, kernel: &str, id: &str) {
        self.published_during_recalibration
            .entry(kernel.to_string())
            .or_default()
            .insert(id.to_string());
    }

    /// The calibrations the running recalibration of `kernel` has published.
    pub fn published_during(&self, kernel: &str) -> BTreeSet<String> {
        self.published_during_recalibration
            .get(kernel)
            .cloned()
            .unwrap_or_default()
    }

    /// The recalibration of `kernel` is over, published or not.
    pub fn recalibration_ended(&mut self, kernel: &str) {
        self.published_during_recalibration.remove(kernel);
        self.signalled_during_recalibration.remove(kernel);
        self.during_recalibration.remove(kernel);
    }

    /// The report just recorded at `(kernel, sms, tag)`, largest time `max_ns`, named its tag:
    /// kept in its epoch's [`Epoch::max_tagged_ns`].
    pub fn note_tag_named(
        &mut self,
        (kernel, sms, tag): (&str, PartitionSize, Interference),
        max_ns: u64,
    ) {
        let epoch = self
            .kernels
            .get_mut(kernel)
            .and_then(|k| k.get_mut(&(sms, tag)))
            .and_then(|s| s.epochs.last_mut());
        if let Some(e) = epoch {
            e.max_tagged_ns = e.max_tagged_ns.max(max_ns);
        }
    }

    /// Note `max_ns`, reported at `(kernel, sms)` with `tag` as the report gave it, if a
    /// recalibration of `kernel` is running.
    pub fn note_if_recalibrating(
        &mut self,
        (kernel, sms, tag): (&str, PartitionSize, Option<Interference>),
        max_ns: u64,
    ) {
        // Empty but while a job runs: no hashing on the common path.
        if self.during_recalibration.is_empty() {
            return;
        }
        if let Some(during) = self.during_recalibration.get_mut(kernel) {
            let largest = during.entry((sms, tag)).or_default();
            *largest = (*largest).max(max_ns);
        }
    }

    /// The largest time reported at each size under each tag as given (`None`: untagged) of
    /// `kernel` since its running recalibration began (empty when none runs).
    pub fn reported_during_recalibration(
        &self,
        kernel: &str,
    ) -> Vec<((PartitionSize, Option<Interference>), u64)> {
        self.during_recalibration
            .get(kernel)
            .map(|d| d.iter().map(|(&key, &t)| (key, t)).collect())
            .unwrap_or_default()
    }

    /// Judge `time_ns`, reported at `(kernel, sms, tag)` while `judged.calibration` was being
    /// measured (so filed in the epoch before it), again against that calibration's bound: above
    /// it, the time is carried into the calibration's epoch as an overrun, so that a kernel whose
    /// new bounds are already below a time seen in production is not taken for one without
    /// overruns. Not carried when the epoch already counts an overrun as large (reported after
    /// the publication, and judged then). Whether it was carried.
    pub fn carry_over(
        &mut self,
        (kernel, sms, tag): (&str, PartitionSize, Interference),
        judged: Judged<'_>,
        time_ns: u64,
        now: DateTime<Utc>,
    ) -> bool {
        let Some(series) = self
            .kernels
            .get_mut(kernel)
            .and_then(|k| k.get_mut(&(sms, tag)))
        else {
            return false;
        };
        if judged.bound_ns.is_none_or(|b| time_ns <= b) {
            return false;
        }
        let (epoch, merged) = series.epoch_for(judged.calibration, now);
        if epoch.max_overrun_ns >= time_ns {
            self.pending -= merged;
            return false;
        }
        epoch.histogram.push(&[time_ns]);
        self.pending = self.pending - merged + 1;
        epoch.max_ns = epoch.max_ns.max(time_ns);
        epoch.max_overrun_ns = time_ns;
        // Not in `overruns_total`: that counts times above the bound served when reported, and
        // this one may have been counted there already.
        epoch.overruns += 1;
        epoch.carried += 1;
        true
    }

    /// Raise the floor of `(kernel, sms, tag)` to `floor_ns`, reported at `at` (a floor read
    /// back from the journal: its times are in no histogram, only the floor is kept).
    fn raise_floor(&mut self, floor: &JournalledFloor) {
        let series = self
            .kernels
            .entry(floor.kernel.clone())
            .or_default()
            .entry((floor.sms, floor.interference))
            .or_insert_with(|| Series::new(floor.at));
        if floor.floor_ns > series.floor_ns {
            series.floor_ns = floor.floor_ns;
            series.floor_at = floor.at;
        }
        series.floor_clock_mhz = series.floor_clock_mhz.max(floor.clock_mhz);
    }

    /// Merge every buffered time of `kernel` (before saving it).
    pub fn merge_kernel(&mut self, kernel: &str) {
        let merged: usize = self
            .kernels
            .get_mut(kernel)
            .into_iter()
            .flat_map(|sizes| sizes.values_mut())
            .flat_map(|s| s.epochs.iter_mut())
            .map(|e| e.histogram.merge())
            .sum();
        self.pending -= merged;
    }

    /// Times buffered, not merged yet.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// The series of `kernel`, by (size, interference).
    pub fn kernel(&self, kernel: &str) -> Option<&BTreeMap<(PartitionSize, Interference), Series>> {
        self.kernels.get(kernel)
    }

    pub fn kernel_mut(
        &mut self,
        kernel: &str,
    ) -> Option<&mut BTreeMap<(PartitionSize, Interference), Series>> {
        self.kernels.get_mut(kernel)
    }

    /// Every series, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, PartitionSize, Interference, &Series)> {
        self.kernels
            .iter()
            .flat_map(|(k, s)| s.iter().map(move |(&(m, i), v)| (k.as_str(), m, i, v)))
    }

    /// Kernels with any series.
    pub fn kernels(&self) -> impl Iterator<Item = &str> {
        self.kernels.keys().map(String::as_str)
    }

    pub fn series_count(&self) -> usize {
        self.kernels.values().map(BTreeMap::len).sum()
    }

    /// Heap bytes held by histograms (the rest is a few hundred bytes per series).
    pub fn histogram_bytes(&self) -> usize {
        self.iter()
            .flat_map(|(_, _, _, s)| &s.epochs)
            .map(|e| e.histogram.heap_bytes())
            .sum()
    }
}

/// A floor as the journal keeps it, one JSON line each: a time that raised the floor of its
/// series since the observations file was last saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalledFloor {
    pub kernel: String,
    pub sms: PartitionSize,
    pub interference: Interference,
    pub floor_ns: u64,
    pub at: DateTime<Utc>,
    /// The series' floor clock ([`Series::floor_clock_mhz`]); absent in older journals and
    /// where no clock was read.
    #[serde(default, skip_serializing_if = "is_zero_mhz")]
    pub clock_mhz: u32,
}

/// One series as stored.
#[derive(Serialize, Deserialize)]
struct StoredSeries {
    kernel: String,
    sms: PartitionSize,
    interference: Interference,
    floor_ns: u64,
    floor_at: DateTime<Utc>,
    /// Absent in older files (the calibrated clock is then the floor's), and where no clock was
    /// read.
    #[serde(default, skip_serializing_if = "is_zero_mhz")]
    floor_clock_mhz: u32,
    reported_total: u64,
    overruns_total: u64,
    last_report: DateTime<Utc>,
    epochs: Vec<StoredEpoch>,
}

#[derive(Serialize, Deserialize)]
struct StoredEpoch {
    calibration: String,
    started: DateTime<Utc>,
    max_ns: u64,
    overruns: u64,
    /// Absent in older files, and where none was carried.
    #[serde(default, skip_serializing_if = "is_zero")]
    carried: u64,
    /// Absent in older files (read as the maximum where there were overruns), and where none.
    #[serde(default, skip_serializing_if = "is_zero")]
    max_overrun_ns: u64,
    /// Absent in older files (every time read as untagged), and where no report named its tag.
    #[serde(default, skip_serializing_if = "is_zero")]
    max_tagged_ns: u64,
    /// Base64 of the hdrhistogram V2 (or V2+deflate) serialisation; "" when empty.
    histogram: String,
}

#[derive(Deserialize)]
struct StoredFile {
    format: u32,
    /// The UUID of the card the times were reported on ("" in a file that predates it).
    #[serde(default)]
    device: String,
    series: Vec<StoredSeries>,
}

/// How loading went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loaded {
    /// No file yet.
    Fresh,
    Clean,
    /// The file was corrupt and moved aside, for this reason; what could be read of it is kept.
    Quarantined(String),
}

/// The observations of one device: `observations-<fingerprint digest>.json` in the state
/// directory, beside its calibrations.
#[derive(Debug, Clone)]
pub struct ObservationFile {
    path: PathBuf,
    /// The device's set-aside notices ([`crate::store::set_aside_notices_path`]).
    notices: PathBuf,
}

impl ObservationFile {
    pub fn new(dir: &Path, fingerprint: &Fingerprint) -> ObservationFile {
        ObservationFile::of_digest(dir, &fingerprint.digest())
    }

    /// The observations of the fingerprint whose digest is `digest` (as a calibration file's
    /// name gives it: `calibration-<digest>.json`).
    pub fn of_digest(dir: &Path, digest: &str) -> ObservationFile {
        ObservationFile {
            path: dir.join(format!("observations-{digest}.json")),
            notices: crate::store::set_aside_notices_of_digest(dir, digest),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal of floors raised since the last save, `observations-<digest>.floors` beside
    /// the file, and the one set aside by a save in progress or one that failed, `.floors.old`.
    pub fn journal_paths(&self) -> (PathBuf, PathBuf) {
        (
            self.path.with_extension("floors"),
            self.path.with_extension("floors.old"),
        )
    }

    /// Whether the file and both journals can be read, where they exist. One that exists but
    /// cannot be read (its owner or mode, say, after a tool run as root) is not absent: serving
    /// without it would serve bounds below times reporters were told are recorded, and the next
    /// save would delete a journal nobody read. The daemon refuses to start instead, naming it.
    pub fn check_readable(&self) -> Result<(), String> {
        use std::io::Read;
        let (journal, aside) = self.journal_paths();
        for path in [self.path.as_path(), &journal, &aside] {
            let read = std::fs::File::open(path).and_then(|mut f| f.read(&mut [0u8; 1]));
            match read {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{} cannot be read: {e}", path.display())),
            }
        }
        Ok(())
    }

    /// Append `floors` to the journal, fsynced: once this returns, a crash loses none of them
    /// (the next load raises the floors it holds). Never at the same time as [`Self::save`]:
    /// the caller takes turns.
    pub fn journal(&self, floors: &[JournalledFloor]) -> std::io::Result<()> {
        let mut lines = Vec::new();
        for floor in floors {
            serde_json::to_writer(&mut lines, floor)?;
            lines.push(b'\n');
        }
        append_synced(&self.journal_paths().0, &lines)
    }

    /// Before a save: what the journal holds is in memory, so in the file being written, and
    /// floors journalled from now on go to a new journal. One set aside by a save that failed is
    /// kept, with this one appended to it.
    fn set_journal_aside(&self) -> std::io::Result<()> {
        let (current, aside) = self.journal_paths();
        if !current.exists() {
            return Ok(());
        }
        crate::store::still_locked(&current)?;
        if aside.exists() {
            append_synced(&aside, &std::fs::read(&current)?)?;
            std::fs::remove_file(&current)?;
        } else {
            std::fs::rename(&current, &aside)?;
        }
        crate::store::sync_directory_of(&current)
    }

    /// Raise `obs`'s floors to those journalled (set aside, then current); how many lines were
    /// read, and what was damaged. A crash during an append leaves a line torn (a record cut
    /// short: it ends before the JSON does, and the next append ends it with a newline), and that
    /// report was not answered: skipped with a log line. Any other line that does not parse (or
    /// holds no time from 1 ns to 1 h) held a floor a reporter was told is on disk, which the
    /// next save would delete with the journal: the journal is copied aside and the damage is
    /// returned, for `Health` (a copy is made only of this daemon's own journal, `own`).
    fn replay_journal(&self, obs: &mut ReportedTimes, own: bool) -> (usize, Option<String>) {
        let (current, aside) = self.journal_paths();
        let mut read = 0;
        let mut damage = Vec::new();
        for path in [aside, current] {
            let text = match std::fs::read(&path) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "the floor journal cannot be read; floors raised since the last save may be missing");
                    continue;
                }
            };
            let (mut torn, mut damaged) = (0, 0);
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                match serde_json::from_str::<JournalledFloor>(line) {
                    Ok(f) if (1..=MAX_TIME_NS).contains(&f.floor_ns) => {
                        obs.raise_floor(&f);
                        read += 1;
                    }
                    // Or zeros where the file system had allocated the append's block but not
                    // written it when the power went (delayed allocation).
                    Err(e) if e.is_eof() || line.contains('\0') => torn += 1,
                    _ => damaged += 1,
                }
            }
            if torn > 0 {
                tracing::warn!(path = %path.display(), torn, "floor journal lines cut short (a crash during an append: that report was not answered) are skipped");
            }
            if damaged > 0 {
                let why = format!(
                    "{} has {damaged} damaged lines, whose floors are lost; the others are kept",
                    path.display()
                );
                if own {
                    crate::store::quarantine_copy(&path, "floor journal", &why);
                }
                damage.push(why);
            }
        }
        (read, (!damage.is_empty()).then(|| damage.join("; ")))
    }

    /// Write every series atomically (temporary file, fsync, rename, directory fsync), streamed
    /// one kernel at a time under `obs`'s lock, so that saving copies nothing whole and a report
    /// waits at most for one kernel's series to be encoded.
    pub fn save(&self, obs: &std::sync::Mutex<ReportedTimes>, device: &str) -> std::io::Result<()> {
        let lock = || {
            obs.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        // Not set aside, the journal is only read again at the next start: its floors are in
        // memory, so in this save too, and removing what was set aside stays safe.
        if let Err(e) = self.set_journal_aside() {
            tracing::warn!(path = %self.journal_paths().0.display(), error = %e,
                "the floor journal could not be set aside before a save; it is kept and read again at the next start");
        }
        let mut kernels: Vec<String> = lock().kernels().map(str::to_string).collect();
        kernels.sort();
        let mut written = Vec::new();
        crate::store::write_atomically(&self.path, |out| {
            write!(
                out,
                "{{\"format\":{FORMAT_VERSION},\"device\":{},\"saved_at\":\"{}\",\"series\":[",
                serde_json::to_string(device)?,
                Utc::now().to_rfc3339()
            )?;
            let mut first = true;
            for kernel in &kernels {
                let mut guard = lock();
                guard.merge_kernel(kernel);
                let Some(sizes) = guard.kernels.get_mut(kernel) else {
                    continue;
                };
                for (&(sms, interference), s) in sizes.iter_mut() {
                    if !first {
                        out.write_all(b",\n")?;
                    }
                    first = false;
                    serde_json::to_writer(&mut *out, &stored(kernel, sms, interference, s))?;
                    written.push((kernel, (sms, interference), s.reported_total));
                }
            }
            out.write_all(b"]}\n")
        })?;
        let mut guard = lock();
        for (kernel, key, total) in written {
            if let Some(s) = guard.kernels.get_mut(kernel).and_then(|k| k.get_mut(&key)) {
                s.reported_saved = s.reported_saved.max(total);
            }
        }
        drop(guard);
        // Saved: what was set aside is in the file. Left behind, it is only read again.
        let aside = self.journal_paths().1;
        if std::fs::remove_file(&aside).is_ok() {
            let _ = crate::store::sync_directory_of(&aside);
        }
        Ok(())
    }

    /// The stored observations. A file that does not parse, or holds a histogram that does not
    /// decode, is moved aside with a log line; of a file that parses, every floor, maximum and
    /// total is kept (they keep bounds safe) and only the undecodable histograms are lost. Where
    /// something was kept, the damaged file is copied aside rather than moved, so that until the
    /// caller has saved what was kept (the monitor asks for a save at once) a crash loses
    /// nothing: the next start recovers the same floors from it again.
    pub fn load(&self) -> (ReportedTimes, Loaded) {
        let (mut obs, loaded) = self.load_file();
        let (journalled, damage) = self.replay_journal(&mut obs, true);
        if journalled > 0 {
            tracing::info!(floors = journalled, path = %self.journal_paths().0.display(),
                "floors journalled since the last save are raised over the file's");
        }
        match (loaded, damage) {
            (Loaded::Quarantined(why), Some(damage)) => {
                (obs, Loaded::Quarantined(format!("{why}; {damage}")))
            }
            (_, Some(damage)) => (obs, Loaded::Quarantined(damage)),
            (Loaded::Fresh, None) if journalled > 0 => (obs, Loaded::Clean),
            (loaded, None) => (obs, loaded),
        }
    }

    fn load_file(&self) -> (ReportedTimes, Loaded) {
        match self.parse() {
            Ok(None) => (ReportedTimes::default(), Loaded::Fresh),
            Ok(Some((obs, problems))) if problems.is_empty() => (obs, Loaded::Clean),
            Ok(Some((obs, problems))) => {
                let why = problems.join("; ");
                if obs.series_count() > 0 {
                    crate::store::quarantine_copy(&self.path, "observations", &why);
                } else {
                    self.set_aside(&why);
                }
                (obs, Loaded::Quarantined(why))
            }
            Err(why) => {
                self.set_aside(&why);
                (ReportedTimes::default(), Loaded::Quarantined(why))
            }
        }
    }

    /// Move the damaged file aside, named in the set-aside notices first: moved first, a crash
    /// before the start wrote its notices left every floor of the file gone with `Health` ok
    /// (a review found it). A copy kept aside needs no notice first: the file stays, and the
    /// next start finds the same damage.
    fn set_aside(&self, why: &str) {
        let notice = format!("{} ({why})", self.path.display());
        crate::store::quarantine_noted(&self.path, "observations", why, (&self.notices, &notice));
    }

    /// What [`Self::load`] keeps of the file, and what could not be read of it, leaving the
    /// file as it is: for reading another fingerprint's floors, whose file this daemon does not
    /// own and never rewrites.
    pub fn read(&self) -> (ReportedTimes, Option<String>) {
        let (mut obs, problems) = match self.parse() {
            Ok(Some((obs, problems))) if problems.is_empty() => (obs, None),
            Ok(Some((obs, problems))) => (obs, Some(problems.join("; "))),
            Ok(None) => (ReportedTimes::default(), None),
            Err(why) => (ReportedTimes::default(), Some(why)),
        };
        // Another fingerprint's journal: read, never copied aside (not this daemon's to keep).
        let _ = self.replay_journal(&mut obs, false);
        (obs, problems)
    }

    /// The UUID of the card the file's times were reported on, from its first line alone;
    /// `None` when that cannot be read.
    pub fn device_uuid(&self) -> Option<String> {
        use std::io::BufRead;
        let file = std::fs::File::open(&self.path).ok()?;
        let mut first = String::new();
        std::io::BufReader::new(file).read_line(&mut first).ok()?;
        let (header, _) = first.split_once("\"series\":[")?;
        let stored: StoredFile = serde_json::from_str(&format!("{header}\"series\":[]}}")).ok()?;
        Some(stored.device)
    }

    /// The file's series and what was wrong with it; `None` when there is no file, an error when
    /// nothing of it can be used (it does not parse, or exists but cannot be opened).
    #[allow(clippy::type_complexity)]
    fn parse(&self) -> Result<Option<(ReportedTimes, Vec<String>)>, String> {
        let file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            // Unreadable (permissions, say) is not absent: the caller must not save over it.
            Err(e) => return Err(format!("cannot be opened: {e}")),
        };
        let (stored, mut problems) = match serde_json::from_reader::<_, StoredFile>(
            std::io::BufReader::new(file),
        ) {
            Ok(s) => (s, Vec::new()),
            Err(e) => match self.complete_lines() {
                Some((s, damaged)) => {
                    let why = format!(
                            "{e}; the {} series on whole lines are kept, {damaged} damaged lines are not",
                            s.series.len()
                        );
                    (s, vec![why])
                }
                None => return Err(e.to_string()),
            },
        };
        if stored.format != FORMAT_VERSION {
            // Kept, not thrown away: the series read as this format's, and their floors only
            // ever raise bounds (a black-box run flipped this one field and lost every floor,
            // then was served a bound below a time it had reported).
            problems.push(format!(
                "format {} is not the supported {FORMAT_VERSION}; the {} series that read as format {FORMAT_VERSION} are kept",
                stored.format,
                stored.series.len()
            ));
        }
        let (obs, undecodable) = from_stored(stored.series);
        problems.extend(undecodable);
        Ok(Some((obs, problems)))
    }

    /// What a damaged file still holds whole, and how many lines are not: [`Self::save`] writes
    /// the header and first series on the first line and one series per line after it, so
    /// every line that parses is a complete series, before the damage or after it, and every
    /// floor in it keeps a bound up. `None` when not even the header can be read.
    fn complete_lines(&self) -> Option<(StoredFile, usize)> {
        use std::io::BufRead;
        let file = std::fs::File::open(&self.path).ok()?;
        let mut reader = std::io::BufReader::new(file);
        // Read as bytes: a header that is not text is a damaged header like any other, and the
        // first series, which shares its line, is kept.
        let mut first = Vec::new();
        reader.read_until(b'\n', &mut first).ok()?;
        if first.is_empty() {
            return None;
        }
        let first = String::from_utf8_lossy(&first)
            .trim_end_matches('\n')
            .to_string();
        let lines = reader.lines();
        // A damaged header loses only itself: the series lines after it keep their floors (a
        // black-box run wrote a format number past u32 and every floor was dropped).
        let mut damaged = 0;
        let (header, rest) = first.split_once("\"series\":[").unwrap_or_else(|| {
            damaged += 1;
            ("", "")
        });
        let mut stored: StoredFile = serde_json::from_str(&format!("{header}\"series\":[]}}"))
            .unwrap_or_else(|_| {
                damaged += usize::from(!header.is_empty());
                StoredFile {
                    format: FORMAT_VERSION,
                    device: String::new(),
                    series: Vec::new(),
                }
            });
        let whole = |line: &str| {
            let line = line.trim_end();
            let line = line
                .strip_suffix(",")
                .or_else(|| line.strip_suffix("]}"))
                .unwrap_or(line);
            serde_json::from_str::<StoredSeries>(line).ok()
        };
        let rest = (!rest.is_empty()).then(|| Ok(rest.to_string()));
        for line in rest.into_iter().chain(lines) {
            match line.ok().as_deref().and_then(whole) {
                Some(series) => stored.series.push(series),
                None => damaged += 1,
            }
        }
        Some((stored, damaged))
    }
}

/// Append `bytes` to `path` (created if needed) and fsync it, and its directory when it was
/// created. A torn last line left by a crash is ended first, so that it cannot swallow the
/// first line appended after it.
fn append_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    crate::store::still_locked(path)?;
    let created = !path.exists();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            file.write_all(b"\n")?;
        }
    }
    file.write_all(bytes)?;
    file.sync_data()?;
    if created {
        crate::store::sync_directory_of(path)?;
    }
    Ok(())
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_mhz(n: &u32) -> bool {
    *n == 0
}

fn stored(kernel: &str, sms: u32, interference: Interference, s: &mut Series) -> StoredSeries {
    let b64 = base64::engine::general_purpose::STANDARD;
    StoredSeries {
        kernel: kernel.to_string(),
        sms,
        interference,
        floor_ns: s.floor_ns,
        floor_at: s.floor_at,
        floor_clock_mhz: s.floor_clock_mhz,
        reported_total: s.reported_total,
        overruns_total: s.overruns_total,
        last_report: s.last_report,
        epochs: s
            .epochs
            .iter_mut()
            .map(|e| StoredEpoch {
                calibration: e.calibration.clone(),
                started: e.started,
                max_ns: e.max_ns,
                overruns: e.overruns,
                carried: e.carried,
                max_overrun_ns: e.max_overrun_ns,
                max_tagged_ns: e.max_tagged_ns,
                histogram: b64.encode(e.histogram.v2()),
            })
            .collect(),
    }
}

fn from_stored(series: Vec<StoredSeries>) -> (ReportedTimes, Vec<String>) {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut obs = ReportedTimes::default();
    let mut problems = Vec::new();
    for s in series {
        let epochs = s
            .epochs
            .into_iter()
            .map(|e| {
                let histogram = b64
                    .decode(&e.histogram)
                    .map_err(|err| err.to_string())
                    .and_then(|bytes| CompactHistogram::from_bytes(&bytes))
                    .unwrap_or_else(|why| {
                        problems.push(format!(
                            "{} at {} SMs, epoch of {}: {why} (histogram dropped, maximum kept)",
                            s.kernel, s.sms, e.calibration
                        ));
                        CompactHistogram::default()
                    });
                let max_ns = max_held_by(&histogram, e.max_ns).unwrap_or_else(|held| {
                    problems.push(format!(
                        "{} at {} SMs, epoch of {}: its maximum, {} ns, is below a time its histogram holds (maximum raised to {held} ns, the most that time can be)",
                        s.kernel, s.sms, e.calibration, e.max_ns
                    ));
                    held
                });
                Epoch {
                    calibration: e.calibration,
                    started: e.started,
                    histogram,
                    max_ns,
                    // An older file did not keep it: where there were overruns, the maximum,
                    // as the check it serves was made before.
                    max_overrun_ns: match (e.max_overrun_ns, e.overruns) {
                        (0, n) if n > 0 => e.max_ns,
                        (m, _) => m.min(e.max_ns),
                    },
                    max_tagged_ns: e.max_tagged_ns.min(e.max_ns),
                    overruns: e.overruns,
                    carried: e.carried.min(e.overruns),
                }
            })
            .collect::<Vec<_>>();
        // A floor below an epoch's maximum would be a corrupt file; the higher number is safe.
        let floor_ns = epochs.iter().map(|e| e.max_ns).fold(s.floor_ns, u64::max);
        obs.kernels.entry(s.kernel).or_default().insert(
            (s.sms, s.interference),
            Series {
                floor_ns,
                floor_at: s.floor_at,
                floor_clock_mhz: s.floor_clock_mhz,
                reported_total: s.reported_total,
                reported_saved: s.reported_total,
                overruns_total: s.overruns_total,
                last_report: s.last_report,
                epochs,
            },
        );
    }
    (obs, problems)
}

/// `max_ns`, an epoch's stored maximum, where it is at least every time its `histogram` holds;
/// else `Err` with the most the largest of them can be. In a file this daemon wrote, the
/// maximum is exact and the histogram rounds within it; a maximum below the histogram's least
/// value for its largest time is damage, and the floor it makes was served below a time a
/// reporter was told is recorded (a hunt lowered the floor and maxima of a line together and
/// left the histogram alone).
fn max_held_by(histogram: &CompactHistogram, max_ns: u64) -> Result<u64, u64> {
    let h = histogram.histogram();
    if h.is_empty() || h.lowest_equivalent(h.max()) <= max_ns {
        return Ok(max_ns);
    }
    Err(h.highest_equivalent(h.max()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Times judged against a bound of 1 ns: every one an overrun.
    const JUDGED_AT_1NS: Judged<'static> = Judged {
        calibration: "cal",
        bound_ns: Some(1),
    };

    fn fingerprint() -> Fingerprint {
        Fingerprint {
            backend: crate::gpu::Backend::Sim,
            device: "test".into(),
            uuid: "SIM-0".into(),
            driver: "0".into(),
            cuda: "0".into(),
            clock_policy: "default".into(),
        }
    }

    fn jittered(n: usize, seed: u64) -> Vec<u64> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| 100_000 + rng.random_range(0..20_000u64))
            .collect()
    }

    #[test]
    fn quantiles_match_a_dense_histogram_and_never_pass_the_exact_maximum() {
        let times = jittered(10_000, 1);
        let mut compact = CompactHistogram::default();
        for (i, chunk) in times.chunks(100).enumerate() {
            compact.push(chunk);
            if i % 7 == 0 {
                compact.merge();
            }
        }
        let mut dense = Histogram::<u64>::new(3).unwrap();
        times.iter().for_each(|&t| dense.record(t).unwrap());
        assert_eq!(compact.count(), 10_000);
        // Read with times buffered, then merged: the same either way.
        assert!(compact.pending_len() > 0);
        assert_eq!(compact.quantiles(), Quantiles::of(&dense));
        compact.merge();
        assert_eq!(compact.quantiles(), Quantiles::of(&dense));
        let mut epoch = Epoch::new("c", Utc::now());
        epoch.histogram = compact;
        epoch.max_ns = *times.iter().max().unwrap();
        let q = epoch.quantiles();
        assert!(q.p999_ns <= epoch.max_ns && q.p50_ns <= q.p99_ns && q.p99_ns <= q.p999_ns);
        let exact_p50 = crate::model::tail::quantile_u64(&times, 0.5);
        assert!((q.p50_ns as f64 - exact_p50).abs() / exact_p50 < 2e-3);
    }

    #[test]
    fn a_report_is_judged_counted_and_raises_the_floor() {
        let mut obs = ReportedTimes::default();
        let now = Utc::now();
        let key = ("bfs", 64, Interference::Isolated);
        let judged = Judged {
            calibration: "c1",
            bound_ns: Some(1000),
        };
        let r = obs.record(key, judged, &[500, 900], now, 0);
        assert_eq!(
            r,
            Recorded {
                overruns: 0,
                max_ns: 900,
                floor_ns: 900,
                floor_raised: true,
                floor_clock_mhz: 0,
                clock_raised: false,
            }
        );
        let r = obs.record(key, judged, &[1001, 1500, 10], now, 0);
        assert_eq!((r.overruns, r.max_ns, r.floor_raised), (2, 1500, true));
        let r = obs.record(key, judged, &[1200], now, 0);
        assert_eq!((r.overruns, r.floor_ns, r.floor_raised), (1, 1500, false));
        // A new calibration starts a new epoch; the floor stays.
        let next = Judged {
            calibration: "c2",
            bound_ns: Some(2000),
        };
        obs.record(key, next, &[700], now, 0);
        let s = &mut obs
            .kernel_mut("bfs")
            .unwrap()
            .get_mut(&(64, Interference::Isolated))
            .unwrap();
        assert_eq!(s.epochs.len(), 2);
        assert_eq!((s.epochs[0].count(), s.epochs[0].overruns), (6, 3));
        assert_eq!(s.epochs[0].calibration, "c1");
        assert_eq!((s.epochs[1].count(), s.epochs[1].max_ns), (1, 700));
        assert_eq!(
            (s.floor_ns, s.overruns_total, s.reported_total),
            (1500, 3, 7)
        );
        assert!(s.judging("c1").is_none() && s.judging("c2").is_some());
    }

    #[test]
    fn only_the_last_epochs_are_kept() {
        let mut obs = ReportedTimes::default();
        let key = ("k", 8, Interference::Isolated);
        for i in 0..EPOCHS_KEPT + 3 {
            let id = format!("c{i}");
            let judged = Judged {
                calibration: &id,
                bound_ns: None,
            };
            obs.record(key, judged, &[100 + i as u64], Utc::now(), 0);
        }
        let s = &obs.kernel("k").unwrap()[&(8, Interference::Isolated)];
        assert_eq!(s.epochs.len(), EPOCHS_KEPT);
        assert_eq!(s.epochs[0].calibration, "c3");
        assert_eq!(s.floor_ns, 100 + EPOCHS_KEPT as u64 + 2);
    }

    /// A time reported while a recalibration ran is judged again against what it publishes:
    /// above the new bound it is carried into the new epoch as an overrun, once; one reported
    /// before the recalibration began, or below the new bound, is not. What was carried is
    /// saved and loaded with the epoch.
    /// A time reported after the publication that was no overrun (the floor the waiting time
    /// set held the bound up) does not hide the waiting time: only an overrun as large does.
    #[test]
    fn a_carried_time_is_hidden_only_by_an_overrun_as_large() {
        let mut obs = ReportedTimes::default();
        let now = Utc::now();
        let series = ("k", 64, Interference::Isolated);
        let before = Judged {
            calibration: "",
            bound_ns: None,
        };
        obs.record(series, before, &[300], now, 0);
        // After the publication, served with the floor under it: 300 is no overrun.
        let served = Judged {
            calibration: "c1",
            bound_ns: Some(300),
        };
        assert_eq!(obs.record(series, served, &[300], now, 0).overruns, 0);
        let calibrated = Judged {
            calibration: "c1",
            bound_ns: Some(200),
        };
        assert!(obs.carry_over(series, calibrated, 300, now), "carried");
        assert!(!obs.carry_over(series, calibrated, 300, now), "once");
        // An overrun counted after the publication, as large, is the time judged then.
        let mut obs = ReportedTimes::default();
        obs.record(series, before, &[300], now, 0);
        assert_eq!(obs.record(series, calibrated, &[300], now, 0).overruns, 1);
        assert!(!obs.carry_over(series, calibrated, 300, now));
    }

    #[test]
    fn times_reported_during_a_recalibration_are_judged_against_what_it_publishes() {
        let mut obs = ReportedTimes::default();
        let now = Utc::now();
        let key = ("k", 8, Interference::Isolated);
        let old = Judged {
            calibration: "old",
            bound_ns: Some(10_000),
        };
        obs.record(key, old, &[9_000], now, 0);
        obs.note_if_recalibrating(("k", 8, None), 9_000);
        obs.recalibration_started("k", None);
        for t in [5_000, 7_000] {
            obs.record(key, old, &[t], now, 0);
            obs.note_if_recalibrating(("k", 8, None), t);
        }
        assert_eq!(
            obs.reported_during_recalibration("k"),
            vec![((8, None), 7_000)],
            "9,000 came before the recalibration"
        );
        let generous = Judged {
            calibration: "new",
            bound_ns: Some(7_000),
        };
        assert!(!obs.carry_over(key, generous, 7_000, now), "not above");
        let new = Judged {
            calibration: "new",
            bound_ns: Some(6_000),
        };
        assert!(obs.carry_over(key, new, 7_000, now));
        assert!(!obs.carry_over(key, new, 7_000, now), "carried once");
        obs.recalibration_ended("k");
        assert!(obs.reported_during_recalibration("k").is_empty());

        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        file.save(&std::sync::Mutex::new(obs.clone()), "SIM-0")
            .unwrap();
        let (back, how) = file.load();
        assert_eq!(how, Loaded::Clean);
        for obs in [obs, back] {
            let s = &obs.kernel("k").unwrap()[&(8, Interference::Isolated)];
            let e = s.epochs.last().unwrap();
            assert_eq!(
                (e.calibration.as_str(), e.count(), e.max_ns),
                ("new", 1, 7_000)
            );
            assert_eq!((e.overruns, e.carried), (1, 1));
            assert_eq!((s.reported_total, s.overruns_total), (3, 0));
            assert_eq!(s.epochs.len(), 2);
        }
    }

    /// The count the metrics file exports is the saved one: a crash loses the times reported
    /// since the last save, and a counter that then went down was read by Prometheus as a reset
    /// (4.26 million phantom launches in a review's crash test).
    #[test]
    fn the_saved_report_count_is_what_a_crash_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        let key = ("k", 8, Interference::Isolated);
        let judged = Judged {
            calibration: "c",
            bound_ns: Some(10_000),
        };
        let counts = |obs: &ReportedTimes| {
            let s = &obs.kernel("k").unwrap()[&(8, Interference::Isolated)];
            (s.reported_total, s.reported_saved)
        };
        let obs = std::sync::Mutex::new(ReportedTimes::default());
        obs.lock()
            .unwrap()
            .record(key, judged, &[500, 600], Utc::now(), 0);
        assert_eq!(counts(&obs.lock().unwrap()), (2, 0));
        file.save(&obs, "SIM-0").unwrap();
        assert_eq!(counts(&obs.lock().unwrap()), (2, 2));
        obs.lock()
            .unwrap()
            .record(key, judged, &[700], Utc::now(), 0);
        assert_eq!(counts(&obs.lock().unwrap()), (3, 2));
        // A crash now: the next start reads what was saved, and exports no less than before.
        let (back, _) = file.load();
        assert_eq!(counts(&back), (2, 2));
    }

    /// Floors journalled since the last save are raised at load, with or without a file; a torn
    /// last line (a crash during an append) is skipped and swallows no later line; a save takes
    /// the journal in and removes it.
    #[test]
    fn journalled_floors_are_raised_at_load_until_a_save_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        let floor = |kernel: &str, floor_ns| JournalledFloor {
            kernel: kernel.into(),
            sms: 8,
            interference: Interference::Isolated,
            floor_ns,
            at: Utc::now(),
            clock_mhz: 0,
        };
        let floor_of = |obs: &ReportedTimes, kernel: &str| {
            obs.kernel(kernel)
                .map(|k| k[&(8, Interference::Isolated)].floor_ns)
        };
        file.journal(&[floor("a", 500)]).unwrap();
        let (obs, how) = file.load();
        assert_eq!((how, floor_of(&obs, "a")), (Loaded::Clean, Some(500)));

        let (journal, aside) = file.journal_paths();
        let mut torn = std::fs::OpenOptions::new()
            .append(true)
            .open(&journal)
            .unwrap();
        torn.write_all(br#"{"kernel":"b","sms":8,"interf"#).unwrap();
        file.journal(&[floor("c", 700)]).unwrap();
        let (obs, _) = file.load();
        assert_eq!(
            [
                floor_of(&obs, "a"),
                floor_of(&obs, "b"),
                floor_of(&obs, "c")
            ],
            [Some(500), None, Some(700)]
        );

        // A torn line is no damage: nothing is copied aside and the load is clean. Nor is a
        // block of zeros a power cut left where an append was going.
        append_synced(&journal, b"\0\0\0\0\n").unwrap();
        assert_eq!(file.load().1, Loaded::Clean);

        file.save(&std::sync::Mutex::new(obs), "SIM-0").unwrap();
        assert!(!journal.exists() && !aside.exists());
        let (obs, how) = file.load();
        assert_eq!(how, Loaded::Clean);
        assert_eq!(
            (floor_of(&obs, "a"), floor_of(&obs, "c")),
            (Some(500), Some(700))
        );
        file.journal(&[floor("a", 900), floor("a", 600)]).unwrap();
        assert_eq!(
            floor_of(&file.load().0, "a"),
            Some(900),
            "the highest holds"
        );
    }

    /// Files set aside in `dir` (`.corrupt-<time>`).
    fn corrupt_copies(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains(".corrupt-")
            })
            .count()
    }

    /// A damaged line that is not an append cut short held a floor a reporter was told is on
    /// disk: the journal is copied aside (the next save deletes it) and the load says so, for
    /// `Health` (it was dropped with a log line only). The other lines' floors are kept.
    #[test]
    fn a_damaged_journal_line_is_kept_aside_and_said() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        let floor = |floor_ns| JournalledFloor {
            kernel: "a".into(),
            sms: 8,
            interference: Interference::Isolated,
            floor_ns,
            at: Utc::now(),
            clock_mhz: 0,
        };
        file.journal(&[floor(500), floor(600), floor(700)]).unwrap();
        let journal = file.journal_paths().0;
        let text = std::fs::read_to_string(&journal).unwrap();
        std::fs::write(&journal, text.replacen("600", "6x0", 1)).unwrap();
        let (obs, how) = file.load();
        assert!(
            matches!(&how, Loaded::Quarantined(why) if why.contains("1 damaged lines")),
            "{how:?}"
        );
        let kept = obs.kernel("a").unwrap()[&(8, Interference::Isolated)].floor_ns;
        assert_eq!(kept, 700);
        assert_eq!(corrupt_copies(dir.path()), 1);
    }

    /// The fastest clock a series was reported at survives a save and the journal, as its floor
    /// does: it is what the floor is stretched from when the clock falls. A time at a slower
    /// clock does not lower it; one at a faster clock raises it without raising the floor.
    #[test]
    fn the_floor_clock_is_kept_with_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        let mut obs = ReportedTimes::default();
        let judged = Judged {
            calibration: "cal",
            bound_ns: None,
        };
        let key = ("a", 8, Interference::Isolated);
        let now = Utc::now();
        assert!(obs.record(key, judged, &[900], now, 1980).clock_raised);
        let slower = obs.record(key, judged, &[950], now, 990);
        assert_eq!((slower.floor_clock_mhz, slower.clock_raised), (1980, false));
        let faster = obs.record(key, judged, &[100], now, 2100);
        assert_eq!((faster.floor_ns, faster.floor_raised), (950, false));
        assert_eq!((faster.floor_clock_mhz, faster.clock_raised), (2100, true));
        file.save(&std::sync::Mutex::new(obs), "SIM-0").unwrap();
        let series = |obs: &ReportedTimes, kernel: &str| {
            let s = &obs.kernel(kernel).unwrap()[&(8, Interference::Isolated)];
            (s.floor_ns, s.floor_clock_mhz)
        };
        assert_eq!(series(&file.load().0, "a"), (950, 2100));
        let floor = JournalledFloor {
            kernel: "b".into(),
            sms: 8,
            interference: Interference::Isolated,
            floor_ns: 700,
            at: now,
            clock_mhz: 1755,
        };
        file.journal(std::slice::from_ref(&floor)).unwrap();
        assert_eq!(series(&file.load().0, "b"), (700, 1755));
        // A journal line of an older daemon has no clock: read as none.
        let text = serde_json::to_string(&JournalledFloor {
            clock_mhz: 0,
            ..floor
        })
        .unwrap();
        assert!(!text.contains("clock_mhz"), "{text}");
    }

    #[test]
    fn saved_observations_load_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        let mut obs = ReportedTimes::default();
        let now = Utc::now();
        for (i, kernel) in ["a", "b.c", "with\"quote"].iter().enumerate() {
            let judged = Judged {
                calibration: "cal",
                bound_ns: Some(110_000),
            };
            obs.record(
                (kernel, 8 * (i as u32 + 1), Interference::Contended),
                judged,
                &jittered(1000, i as u64),
                now,
                0,
            );
        }
        file.save(&std::sync::Mutex::new(obs.clone()), "SIM-0")
            .unwrap();
        let (mut back, how) = file.load();
        assert_eq!(how, Loaded::Clean);
        assert_eq!(back.series_count(), 3);
        for (kernel, sms, tag, s) in obs.iter() {
            let b = &back.kernel(kernel).unwrap()[&(sms, tag)];
            assert_eq!(
                (
                    b.floor_ns,
                    b.reported_total,
                    b.overruns_total,
                    b.epochs.len()
                ),
                (
                    s.floor_ns,
                    s.reported_total,
                    s.overruns_total,
                    s.epochs.len()
                )
            );
        }
        let orig = obs.kernel_mut("a").unwrap()[&(8, Interference::Contended)].clone();
        let loaded = back
            .kernel_mut("a")
            .unwrap()
            .get_mut(&(8, Interference::Contended))
            .unwrap();
        assert_eq!(loaded.epochs[0].quantiles(), orig.epochs[0].quantiles());
        assert_eq!(loaded.epochs[0].count(), 1000);
    }

    #[test]
    fn deflated_histograms_load_too() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        jittered(500, 3).iter().for_each(|&t| h.record(t).unwrap());
        let mut bytes = Vec::new();
        hdrhistogram::serialization::V2DeflateSerializer::new()
            .serialize(&h, &mut bytes)
            .unwrap();
        let compact = CompactHistogram::from_bytes(&bytes).unwrap();
        assert_eq!(compact.count(), 500);
        assert_eq!(compact.quantiles(), Quantiles::of(&h));
    }

    #[test]
    fn a_journal_or_file_that_exists_but_cannot_be_read_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::of_digest(dir.path(), "d");
        assert_eq!(file.check_readable(), Ok(()), "nothing yet is fine");
        std::fs::write(file.path(), "{}").unwrap();
        assert_eq!(file.check_readable(), Ok(()));
        // A directory where the journal belongs reads as an error even for root, as an
        // unreadable mode would for the daemon's user.
        let (journal, _) = file.journal_paths();
        std::fs::create_dir(&journal).unwrap();
        let why = file.check_readable().unwrap_err();
        assert!(why.contains(".floors cannot be read"), "{why}");
    }

    /// A line whose floor and maxima were lowered together, its histogram left alone: the
    /// floor made by the maxima alone was below a time the reporter was told is recorded (a
    /// hunt served a bound 40% under it, `Health` ok). The histogram's largest time holds it.
    #[test]
    fn maxima_below_their_histogram_are_damage_and_raised_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        let mut obs = ReportedTimes::default();
        let judged = JUDGED_AT_1NS;
        let key = ("k", 8, Interference::Isolated);
        obs.record(key, judged, &[1_000, 2_000, 3_000_017], Utc::now(), 0);
        file.save(&std::sync::Mutex::new(obs), "SIM-0").unwrap();
        let (back, how) = file.load();
        assert!(matches!(how, Loaded::Clean), "{how:?}");
        let floor = |o: &ReportedTimes| o.kernel("k").unwrap()[&(8, key.2)].floor_ns;
        assert_eq!(floor(&back), 3_000_017, "an undamaged file loads as it was");
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(text.matches("3000017").count() >= 3, "{text}");
        std::fs::write(file.path(), text.replace("3000017", "1800010")).unwrap();
        let (back, how) = file.load();
        assert!(
            matches!(&how, Loaded::Quarantined(why) if why.contains("below a time its histogram holds")),
            "{how:?}"
        );
        assert!(floor(&back) >= 3_000_017, "{}", floor(&back));
    }

    /// A file moved aside whole is named in the set-aside notices first: a crash between the
    /// move and the start's notices lost every floor in it with `Health` ok (a review found it).
    #[test]
    fn a_file_moved_aside_is_noted_first() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        std::fs::write(file.path(), "{").unwrap();
        let (_, how) = file.load();
        let Loaded::Quarantined(why) = how else {
            panic!("{how:?}")
        };
        let notices = crate::store::set_aside_notices_path(dir.path(), &fingerprint());
        let noted: Vec<String> = serde_json::from_slice(&std::fs::read(notices).unwrap()).unwrap();
        assert_eq!(noted, [format!("{} ({why})", file.path().display())]);
        assert!(!file.path().exists());
    }

    #[test]
    fn corrupt_files_are_moved_aside_keeping_what_is_safe() {
        let dir = tempfile::tempdir().unwrap();
        let file = ObservationFile::new(dir.path(), &fingerprint());
        let mut obs = ReportedTimes::default();
        let judged = JUDGED_AT_1NS;
        for sms in [8, 16, 32, 64] {
            obs.record(
                ("k", sms, Interference::Isolated),
                judged,
                &jittered(300, 9),
                Utc::now(),
                0,
            );
        }
        file.save(&std::sync::Mutex::new(obs.clone()), "SIM-0")
            .unwrap();
        let text = std::fs::read_to_string(file.path()).unwrap();
        let aside = || corrupt_copies(dir.path());
        // A histogram that is not one: the floor and totals survive, the file is moved aside.
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let bad = text.replace(
            v["series"][0]["epochs"][0]["histogram"].as_str().unwrap(),
            "HISTFAAAAB4AAAAAAAAAAwAAAAAAAAAB",
        );
        std::fs::write(file.path(), bad).unwrap();
        let (back, how) = file.load();
        assert!(matches!(how, Loaded::Quarantined(_)), "{how:?}");
        let s = &back.kernel("k").unwrap()[&(8, Interference::Isolated)];
        assert_eq!(
            (s.floor_ns, s.overruns_total),
            (
                obs.kernel("k").unwrap()[&(8, Interference::Isolated)].floor_ns,
                300
            )
        );
        assert_eq!(s.epochs[0].count(), 0);
        assert_eq!(aside(), 1);
        // Copied aside, not moved: a crash before the clean save recovers the floors again.
        let (again, _) = file.load();
        assert_eq!(
            again.kernel("k").unwrap()[&(8, Interference::Isolated)].floor_ns,
            s.floor_ns
        );
        assert_eq!(aside(), 2);
        // Another fingerprint's file is only read: left in place, nothing set aside.
        assert_eq!(file.read().0.series_count(), 4);
        assert_eq!(aside(), 2);
        // Truncated in the third series: the two written whole before it keep their floors.
        let third = text.match_indices('\n').nth(1).unwrap().0 + 10;
        std::fs::write(file.path(), &text[..third]).unwrap();
        let (back, how) = file.load();
        assert!(
            matches!(&how, Loaded::Quarantined(why) if why.contains("the 2 series on whole lines")),
            "{how:?}"
        );
        let kept: Vec<u32> = back.kernel("k").unwrap().keys().map(|k| k.0).collect();
        assert_eq!(kept, [8, 16]);
        for (&(sms, _), s) in back.kernel("k").unwrap() {
            assert_eq!(
                s.floor_ns,
                obs.kernel("k").unwrap()[&(sms, Interference::Isolated)].floor_ns
            );
        }
        assert_eq!(aside(), 3);
        // Damaged in the second line only: the series on the lines after it are kept too.
        let second = text.match_indices('\n').next().unwrap().0 + 10;
        let mut bytes = text.clone().into_bytes();
        bytes[second..second + 9].copy_from_slice(b"#GARBAGE#");
        std::fs::write(file.path(), &bytes).unwrap();
        let (back, how) = file.load();
        assert!(
            matches!(&how, Loaded::Quarantined(why) if why.contains("1 damaged lines")),
            "{how:?}"
        );
        let kept: Vec<u32> = back.kernel("k").unwrap().keys().map(|k| k.0).collect();
        assert_eq!(kept, [8, 32, 64]);
        assert_eq!(aside(), 4);
        // Another format in the header (one byte flipped, say): the series are kept, with
        // their floors; before, the whole file was moved aside and every floor lost.
        std::fs::write(
            file.path(),
            text.replacen("\"format\":1", "\"format\":7", 1),
        )
        .unwrap();
        let (back, how) = file.load();
        assert!(
            matches!(&how, Loaded::Quarantined(why) if why.contains("format 7 is not the supported 1; the 4 series")),
            "{how:?}"
        );
        for (&(sms, _), s) in back.kernel("k").unwrap() {
            assert_eq!(
                s.floor_ns,
                obs.kernel("k").unwrap()[&(sms, Interference::Isolated)].floor_ns
            );
        }
        assert_eq!(back.series_count(), 4);
        assert_eq!(aside(), 5);
        // A header that does not read at all (a format past u32, a device that is a number):
        // the series lines after it are kept all the same.
        for header in [
            "\"format\":4294967297",
            "\"format\":null",
            "\"format\":\u{ff}",
        ] {
            let mut bytes = text.replacen("\"format\":1", header, 1).into_bytes();
            // Not UTF-8 at all: a lone 0xff byte where the number was.
            if let Some(at) = bytes.windows(2).position(|w| w == [0xc3, 0xbf]) {
                bytes.splice(at..at + 2, [0xff]);
            }
            std::fs::write(file.path(), bytes).unwrap();
            let (back, how) = file.load();
            assert!(
                matches!(&how, Loaded::Quarantined(why) if why.contains("the 4 series on whole lines are kept, 1 damaged")),
                "{how:?}"
            );
            assert_eq!(back.series_count(), 4);
        }
        assert_eq!(aside(), 8);
        // Truncated in the header: nothing to keep, moved aside.
        std::fs::write(file.path(), &text[..20]).unwrap();
        let (back, how) = file.load();
        assert!(matches!(how, Loaded::Quarantined(_)) && back.series_count() == 0);
        assert_eq!(aside(), 9);
        assert!(!file.path().exists());
    }

    #[test]
    fn a_header_that_declares_too_much_is_refused_before_allocating() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(1000).unwrap();
        let mut bytes = Vec::new();
        V2Serializer::new().serialize(&h, &mut bytes).unwrap();
        let mut huge = bytes.clone();
        huge[24..32].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(CompactHistogram::from_bytes(&huge).is_err());
        let mut long = bytes.clone();
        long[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(CompactHistogram::from_bytes(&long).is_err());
        assert!(CompactHistogram::from_bytes(&bytes[..20]).is_err());
        assert_eq!(CompactHistogram::from_bytes(&bytes).unwrap().count(), 1);
    }

    /// Not a timing test: prints what a histogram costs at rest and to record, for the figures.
    #[test]
    fn print_the_size_of_a_histogram_at_rest() {
        let mut obs = ReportedTimes::default();
        let times = jittered(100_000, 5);
        let judged = Judged {
            calibration: "c",
            bound_ns: Some(u64::MAX),
        };
        let start = std::time::Instant::now();
        for chunk in times.chunks(100) {
            obs.record(
                ("k", 8, Interference::Isolated),
                judged,
                chunk,
                Utc::now(),
                0,
            );
        }
        let elapsed = start.elapsed();
        obs.merge_kernel("k");
        assert_eq!(obs.pending(), 0);
        println!(
            "100,000 times in 1,000 reports: {} bytes at rest, {elapsed:?} to record",
            obs.histogram_bytes(),
        );
        assert!(obs.histogram_bytes() < 16 * 1024);
    }

    #[test]
    fn buffered_times_are_bounded_and_counted_exactly() {
        let mut obs = ReportedTimes::default();
        let judged = Judged {
            calibration: "c",
            bound_ns: None,
        };
        for i in 0..200u32 {
            let key = ("k", 8 * (i % 17 + 1), Interference::Isolated);
            obs.record(key, judged, &jittered(100, u64::from(i)), Utc::now(), 0);
            assert!(obs.pending() <= PENDING_BUDGET);
        }
        let buffered: usize = obs
            .iter()
            .flat_map(|(_, _, _, s)| &s.epochs)
            .map(|e| e.histogram.pending_len())
            .sum();
        assert_eq!(obs.pending(), buffered);
        assert!(obs.iter().all(|(_, _, _, s)| s
            .epochs
            .iter()
            .all(|e| e.histogram.pending_len() < PENDING_LIMIT)));
        // A new epoch merges the old one's buffer.
        let next = Judged {
            calibration: "d",
            bound_ns: None,
        };
        obs.record(("k", 8, Interference::Isolated), next, &[5], Utc::now(), 0);
        let s = &obs.kernel("k").unwrap()[&(8, Interference::Isolated)];
        assert_eq!(s.epochs[0].histogram.pending_len(), 0);
        obs.merge_kernel("k");
        assert_eq!(obs.pending(), 0);
    }
}

#[cfg(test)]
mod footprint {
    use super::*;

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    #[test]
    #[ignore]
    fn print_footprint_of_17000_series() {
        let before = rss_kib();
        let mut obs = ReportedTimes::default();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let judged = Judged {
            calibration: "synthetic-0001@20261122T195011.193Z",
            bound_ns: None,
        };
        for k in 0..1000 {
            let kernel = format!("synthetic-{k:04}");
            for m in 0..17u32 {
                let bound = 40_000 + 10_000 * u64::from(m);
                let times: Vec<u64> = (0..1000)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                        bound / 2 + (u * u * u * 0.45 * bound as f64) as u64
                    })
                    .collect();
                obs.record(
                    (&kernel, 8 * (m + 1), Interference::Isolated),
                    judged,
                    &times,
                    Utc::now(),
                    0,
                );
            }
            obs.merge_kernel(&kernel);
        }
        let untrimmed = rss_kib();
        crate::store::release_freed_memory();
        let after = rss_kib();
        println!("before trimming: {} KiB", untrimmed - before);
        println!(
            "17,000 series: {} KiB RSS, histograms {} bytes ({} per series)",
            after - before,
            obs.histogram_bytes(),
            obs.histogram_bytes() / obs.series_count()
        );
        let dense: usize = obs
            .iter()
            .map(|(_, _, _, s)| s.epochs[0].histogram.histogram().distinct_values() * 8)
            .sum();
        println!(
            "as dense hdrhistograms (u64 counters) they would take {} bytes ({} per series)",
            dense,
            dense / obs.series_count()
        );
    }
}
