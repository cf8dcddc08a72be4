//! Calibration bundles: calibrations exported by one daemon and imported by another, so a fleet of
//! identical hosts measures a part, driver and clock policy once. A bundle is JSON: its format
//! version, where and when it was exported, the exporting device's fingerprint, and per kernel and
//! interference tag the whole calibration (samples included, so the receiver can refit) with a
//! summary of its samples for people.
//!
//! A bundle is accepted only where its fingerprint matches the receiving device in what a bound
//! depends on: the device model, the driver, the CUDA version and the clock policy. The UUID is not
//! compared (it differs on every card, which is the point of a bundle); the receiver verifies
//! every imported kernel on its own card instead (`Service::import_calibration`), because cards of
//! one model differ (4.6% at one size on the H100s of `docs/hardware-validation.md`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::gpu::{Fingerprint, Interference};
use crate::store::KernelCalibration;

pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    pub format: u32,
    pub exported_at: DateTime<Utc>,
    pub host: String,
    pub fingerprint: Fingerprint,
    pub calibrations: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub kernel: String,
    pub interference: Interference,
    /// Per measured size: launches, median and largest time (ns).
    pub summary: BTreeMap<u32, SizeSummary>,
    pub calibration: KernelCalibration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeSummary {
    pub launches: u64,
    pub median_ns: u64,
    pub max_ns: u64,
}

impl Entry {
    pub fn new(kernel: &str, interference: Interference, calibration: KernelCalibration) -> Self {
        let summary = calibration
            .campaign
            .sizes
            .iter()
            .filter_map(|(&m, r)| {
                // Empty also where spilled times could not be read back (logged); writing the
                // bundle then fails on the same times, so nothing half-read is exported.
                let mut t = r.times_ns.to_vec();
                t.sort_unstable();
                let s = SizeSummary {
                    launches: t.len() as u64,
                    median_ns: *t.get(t.len() / 2)?,
                    max_ns: *t.last()?,
                };
                Some((m, s))
            })
            .collect();
        Entry {
            kernel: kernel.to_string(),
            interference,
            summary,
            calibration,
        }
    }
}

/// Read a bundle; a truncated or malformed one is an error that says where.
pub fn parse(text: &str) -> Result<Bundle, String> {
    let bundle: Bundle = serde_json::from_str(text).map_err(|e| {
        format!("the bundle is not a complete wcetd bundle (JSON error at line {}, column {}: {e}); accepted: the output of `wcetctl export`", e.line(), e.column())
    })?;
    if bundle.format != FORMAT {
        return Err(format!(
            "bundle format {} is not supported; accepted: format {FORMAT}",
            bundle.format
        ));
    }
    if bundle.calibrations.is_empty() {
        return Err("the bundle holds no calibration; accepted: the output of `wcetctl export` with at least one calibrated kernel".into());
    }
    Ok(bundle)
}

/// What differs between a bundle's fingerprint and this device's, in what bounds depend on (empty
/// when they match): "driver 580.159.04 here, 575.51.03 in the bundle", ...
pub fn differences(here: &Fingerprint, bundle: &Fingerprint) -> Vec<String> {
    field_differences(here, bundle)
        .into_iter()
        .map(|(what, a, b)| format!("{what} `{a}` here, `{b}` in the bundle"))
        .collect()
}

/// (what, in `a`, in `b`) for each field a bound depends on where two fingerprints differ: the
/// UUID is not one (cards of a model share calibrations, checked on arrival).
fn field_differences(a: &Fingerprint, b: &Fingerprint) -> Vec<(&'static str, String, String)> {
    let fields = [
        ("backend", a.backend.to_string(), b.backend.to_string()),
        ("device", a.device.clone(), b.device.clone()),
        ("driver", a.driver.clone(), b.driver.clone()),
        ("CUDA", a.cuda.clone(), b.cuda.clone()),
        (
            "clock policy",
            a.clock_policy.clone(),
            b.clock_policy.clone(),
        ),
    ];
    fields.into_iter().filter(|(_, a, b)| a != b).collect()
}

/// What makes a bundle not one `wcetctl export` writes, refused whatever `force` says: each
/// calibration measured under the configuration the bundle names (whether to check it on this
/// card, or serve it stale, is decided from that name, so an entry of another configuration under
/// it would be served as current unchecked), once, agreeing with itself ([`disagreements`]); and
/// a summary that agrees with the launches shipped (a launch deleted with the bound lowered to
/// what remains is then seen in the summary). Empty when none.
pub fn inconsistencies(bundle: &Bundle) -> Vec<String> {
    let mut found = implausible_fields(bundle, Utc::now());
    // A day's allowance: a calibration imported from a host whose clock was ahead keeps that
    // host's dates when it is exported again, and only dates no clock gives (2099) matter.
    let latest = Latest {
        at: bundle.exported_at + chrono::TimeDelta::days(1),
        what: "the bundle was exported",
    };
    let mut seen = Vec::new();
    for e in &bundle.calibrations {
        let what = format!("{} ({})", e.kernel, e.interference);
        if seen.contains(&(e.kernel.as_str(), e.interference)) {
            found.push(format!("{what} appears twice"));
        }
        seen.push((e.kernel.as_str(), e.interference));
        let c = &e.calibration.campaign;
        let inner: Vec<String> = field_differences(&bundle.fingerprint, &c.environment.fingerprint)
            .into_iter()
            .map(|(field, named, measured)| {
                format!("{field} `{named}` in the bundle's header, `{measured}` in its campaign")
            })
            .collect();
        if !inner.is_empty() {
            found.push(format!(
                "{what} was measured under another configuration than the bundle names ({})",
                inner.join("; ")
            ));
        }
        let cal = &e.calibration;
        found.extend(disagreements(&e.kernel, e.interference, cal, Some(latest)));
        summary_against_samples(e, &what, &measured_sizes(cal), &mut found);
    }
    found
}

/// The latest date a calibration may carry, and what that date is (for the message).
#[derive(Debug, Clone, Copy)]
pub struct Latest {
    pub at: DateTime<Utc>,
    pub what: &'static str,
}

/// What makes one calibration disagree with itself, wherever it comes from (a bundle's entry,
/// or the state directory's own file at start: `Store::load`). Filed as `kernel` (`tag`), it
/// must hold a campaign of that kernel and tag; its table must list each size once, ascending,
/// count the launches its campaign ships, call measured exactly the sizes measured, state a tail
/// at a probability strictly between 0 and 1 and no stronger than its additive part, and allow
/// for a process shift `--process-shift` takes; its dates must be no later than `latest`
/// (`None`: a clock that cannot tell) and its texts printable. Empty when none.
pub fn disagreements(
    kernel: &str,
    tag: Interference,
    cal: &KernelCalibration,
    latest: Option<Latest>,
) -> Vec<String> {
    let what = format!("{kernel} ({tag})");
    let mut found = Vec::new();
    let c = &cal.campaign;
    if c.environment.interference != tag || c.kernel != kernel {
        found.push(format!(
            "{what} holds a campaign of {} ({})",
            c.kernel, c.environment.interference
        ));
    }
    sizes_in_order(cal, &what, &mut found);
    counts_against_samples(cal, &what, &mut found);
    provenance_against_samples(cal, &what, &measured_sizes(cal), &mut found);
    tail_against_additive(cal, &what, &mut found);
    sweep_against_table(cal, &what, &mut found);
    process_shift_in_range(cal, &what, &mut found);
    implausible_calibration(cal, &what, latest, &mut found);
    found
}

/// How far ahead of this host's clock a bundle's times may be: hosts' clocks disagree by
/// seconds, not by this.
const CLOCK_SKEW_ALLOWED: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// A clock before this was never set.
const CLOCK_SET_AFTER: &str = "2025-01-01T00:00:00Z";

/// Whether `now` is a time a clock that was ever set reads: a host whose clock was never set (an
/// embedded board without a real-time clock, at 1970) cannot tell the future.
fn clock_set(now: DateTime<Utc>) -> bool {
    now > DateTime::parse_from_rfc3339(CLOCK_SET_AFTER).expect("a valid date")
}

/// Fields of the bundle's header no export writes: an export time in the future (as of `now`),
/// and text a terminal would act on in its host or fingerprint (a calibration's own fields are
/// [`implausible_calibration`]'s).
fn implausible_fields(bundle: &Bundle, now: DateTime<Utc>) -> Vec<String> {
    let mut found = Vec::new();
    // Where the clock was never set, only the bundle's own times are compared.
    if clock_set(now) && bundle.exported_at > now + CLOCK_SKEW_ALLOWED {
        found.push(format!(
            "exported at {}, later than this host's clock ({})",
            bundle.exported_at.to_rfc3339(),
            now.to_rfc3339()
        ));
    }
    let f = &bundle.fingerprint;
    let texts = [
        ("host", &bundle.host),
        ("device", &f.device),
        ("uuid", &f.uuid),
        ("driver", &f.driver),
        ("CUDA version", &f.cuda),
        ("clock policy", &f.clock_policy),
    ];
    for (what, text) in texts {
        if !printable(text) {
            found.push(format!(
                "its {what} holds control characters or is longer than 256 bytes"
            ));
        }
    }
    found
}

fn printable(text: &str) -> bool {
    !text.chars().any(char::is_control) && text.len() <= 256
}

/// A calibration's fields no daemon writes: a date later than `latest` (a calibration dated
/// 2099 was served with an age of 0, so that no age alert would ever fire), and text a terminal
/// would act on (a control character in its id, its campaign's host or a note, printed raw by
/// `wcetctl bound`: a forged newline and escape sequence reached the operator's terminal).
fn implausible_calibration(
    c: &KernelCalibration,
    what: &str,
    latest: Option<Latest>,
    found: &mut Vec<String>,
) {
    let env = &c.campaign.environment;
    let notes_printable = c
        .table
        .notes
        .iter()
        .all(|n| !n.chars().any(char::is_control));
    if !printable(&c.id) || !printable(&env.host) || !notes_printable {
        found.push(format!(
            "{what}: its calibration id or campaign host holds control characters or is longer than 256 bytes, or a note holds control characters"
        ));
    }
    let Some(latest) = latest else { return };
    let when = [c.calibrated_at, env.started_at, env.finished_at];
    if let Some(late) = when.into_iter().find(|&at| at > latest.at) {
        found.push(format!(
            "{what} was measured or calibrated at {}, later than {}",
            late.to_rfc3339(),
            latest.what
        ));
    }
}

/// Where a calibration of the bundle has no bound at a size this device can realise (`sizes`):
/// a hole in the curve served, found only when a scheduler asks there, so such a bundle is
/// refused even stale (`force`). (Bounds at sizes this device cannot realise, as where a card's
/// placement probe refused one its peers have, are dropped on import: [`realisable_only`].)
pub fn missing_sizes(bundle: &Bundle, sizes: &[u32]) -> Vec<String> {
    let mut found = Vec::new();
    for e in &bundle.calibrations {
        let missing = sizes_without_bound(&e.calibration.table, sizes);
        if !missing.is_empty() {
            found.push(format!(
                "{} ({}) has no bound at {} SMs",
                e.kernel,
                e.interference,
                size_list(&missing)
            ));
        }
    }
    found
}

/// "8, 16, 24".
pub fn size_list(sizes: &[u32]) -> String {
    let text: Vec<String> = sizes.iter().map(u32::to_string).collect();
    text.join(", ")
}

/// Those of `sizes` at which `table` has no bound (or a bound of 0).
pub fn sizes_without_bound(table: &crate::model::BoundTable, sizes: &[u32]) -> Vec<u32> {
    sizes
        .iter()
        .copied()
        .filter(|&m| table.entry(m).is_none_or(|b| b.bound_ns == 0))
        .collect()
}

/// The sizes at which the calibration's campaign ships launches, in order.
fn measured_sizes(cal: &KernelCalibration) -> Vec<u32> {
    cal.campaign
        .sizes
        .iter()
        .filter(|(_, r)| !r.times_ns.is_empty())
        .map(|(&m, _)| m)
        .collect()
}

/// Where the summary's sizes, launch counts and largest times disagree with the launches the
/// campaign ships (`measured`: the sizes it ships them at).
fn summary_against_samples(e: &Entry, what: &str, measured: &[u32], found: &mut Vec<String>) {
    let c = &e.calibration.campaign;
    if measured != e.summary.keys().copied().collect::<Vec<_>>() {
        found.push(format!(
            "{what}: the summary lists sizes {:?}, the samples {measured:?}",
            e.summary.keys().collect::<Vec<_>>()
        ));
    }
    for (m, s) in &e.summary {
        let Some(r) = c.sizes.get(m) else { continue };
        let (n, max) = (r.times_ns.len() as u64, r.times_ns.max().unwrap_or(0));
        if (s.launches, s.max_ns) != (n, max) {
            found.push(format!(
                "{what} at {m} SMs: the summary says {} launches up to {} ns, the samples hold {n} up to {max} ns",
                s.launches, s.max_ns
            ));
        }
    }
}

/// Where the table's sample counts disagree with the launches the campaign ships. A size with
/// launches and no entry is [`missing_sizes`]' to judge: an import drops the bounds at sizes its
/// device cannot realise and keeps their launches.
fn counts_against_samples(cal: &KernelCalibration, what: &str, found: &mut Vec<String>) {
    for (m, r) in &cal.campaign.sizes {
        let n = r.times_ns.len() as u64;
        match cal.table.entry(*m) {
            Some(b) if b.samples != n => found.push(format!(
                "{what} at {m} SMs: the table counts {} samples, the campaign holds {n}",
                b.samples
            )),
            _ => {}
        }
    }
}

/// Where the table lists a size twice or out of order: a lookup takes the first entry of a size
/// (so a damaged lower one was served silently) and the largest size not above the one asked
/// for assumes ascending sizes.
fn sizes_in_order(cal: &KernelCalibration, what: &str, found: &mut Vec<String>) {
    for pair in cal.table.entries.windows(2) {
        let (a, b) = (pair[0].sms, pair[1].sms);
        if a == b {
            found.push(format!("{what}: the table has two entries for {a} SMs"));
        } else if a > b {
            found.push(format!(
                "{what}: the table lists {b} SMs after {a} SMs; accepted: sizes ascending"
            ));
        }
    }
}

/// Where the table calls a size measured that ships no launches, or the other way round.
///
/// A size is called measured exactly where it ships its launches (the fit marks every such
/// size measured; the fewest launches at a measured size is what a table without a tail
/// model states its guarantee from).
fn provenance_against_samples(
    cal: &KernelCalibration,
    what: &str,
    measured: &[u32],
    found: &mut Vec<String>,
) {
    for b in &cal.table.entries {
        let is_measured = b.provenance == crate::model::Provenance::Measured;
        if is_measured != measured.contains(&b.sms) {
            found.push(if is_measured {
                format!(
                    "{what} at {} SMs: the table says measured ({} samples), the campaign ships no launch there",
                    b.sms, b.samples
                )
            } else {
                format!(
                    "{what} at {} SMs: the campaign ships launches there, the table says {}",
                    b.sms,
                    b.basis()
                )
            });
        }
    }
}

/// Where the tail states a probability no bound is stated at (0 or below was admitted as if it
/// met any exceedance asked for), or a guarantee stronger than its own additive part's.
///
/// A tail states its bound at the weaker of its ratio model's and the additive part's (the
/// device's rare delays): never stronger than the latter.
fn tail_against_additive(cal: &KernelCalibration, what: &str, found: &mut Vec<String>) {
    let Some(t) = &cal.table.tail else { return };
    if !(t.exceedance > 0.0 && t.exceedance < 1.0) {
        found.push(format!(
            "{what}: the tail states {:e} per launch; accepted: a probability strictly between 0 and 1",
            t.exceedance
        ));
    } else if t.exceedance < t.additive_exceedance * (1.0 - 1e-9) {
        found.push(format!(
            "{what}: the tail states {:e} per launch, stronger than the {:e} of its own additive part",
            t.exceedance, t.additive_exceedance
        ));
    }
}

/// Where the table's count of sweep launches at a size it did not measure disagrees with the
/// campaign's: the verification sweep's launches, which hold up the bounds between measured
/// sizes.
fn sweep_against_table(cal: &KernelCalibration, what: &str, found: &mut Vec<String>) {
    for (m, r) in &cal.campaign.verified {
        let Some(b) = cal.table.entry(*m) else {
            continue;
        };
        let n = r.times_ns.len() as u64;
        if b.provenance != crate::model::Provenance::Measured && b.verified_samples != n {
            found.push(format!(
                "{what} at {m} SMs: the table counts {} sweep launches, the campaign holds {n}",
                b.verified_samples
            ));
        }
    }
}

/// Where the table allows for a process shift `--process-shift` does not take (from 0 up to,
/// not including, 1): raised at start for the configured shift, -3 made every bound 0 ns and -1
/// made every bound 2^64-1 ns.
fn process_shift_in_range(cal: &KernelCalibration, what: &str, found: &mut Vec<String>) {
    let Some(f) = cal.table.process_shift else {
        return;
    };
    if !(0.0..1.0).contains(&f) {
        found.push(format!(
            "{what}: the table allows for a process shift of {f}; accepted: from 0 up to (not including) 1"
        ));
    }
}

/// `cal` without its bounds at sizes this device cannot realise (`sizes`), and which were
/// dropped: nothing here can ask for them, and the arrival check could not run them.
pub fn realisable_only(cal: &mut KernelCalibration, sizes: &[u32]) -> Vec<u32> {
    let dropped: Vec<u32> = cal
        .table
        .entries
        .iter()
        .map(|b| b.sms)
        .filter(|m| !sizes.contains(m))
        .collect();
    if !dropped.is_empty() {
        cal.table.entries.retain(|b| sizes.contains(&b.sms));
        cal.table.notes.push(format!(
            "bounds at {dropped:?} SMs dropped on import: this device cannot realise those sizes"
        ));
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Backend;

    fn fp(driver: &str, uuid: &str) -> Fingerprint {
        Fingerprint {
            backend: Backend::Cuda,
            device: "NVIDIA H100 80GB HBM3".into(),
            uuid: uuid.into(),
            driver: driver.into(),
            cuda: "13.0".into(),
            clock_policy: "default".into(),
        }
    }

    #[test]
    fn another_card_of_the_same_model_matches_and_another_driver_is_spelled_out() {
        assert!(differences(&fp("580.159.04", "GPU-a"), &fp("580.159.04", "GPU-b")).is_empty());
        let d = differences(&fp("580.159.04", "GPU-a"), &fp("575.51.03", "GPU-a"));
        assert_eq!(
            d,
            vec!["driver `580.159.04` here, `575.51.03` in the bundle".to_string()]
        );
    }

    #[test]
    fn times_in_the_future_and_control_characters_are_implausible() {
        let now = Utc::now();
        let bundle = |host: &str, exported_at| Bundle {
            format: FORMAT,
            exported_at,
            host: host.into(),
            fingerprint: fp("580.159.04", "GPU-a"),
            calibrations: Vec::new(),
        };
        assert!(implausible_fields(&bundle("n1", now), now).is_empty());
        let skewed = now + chrono::TimeDelta::minutes(5);
        assert!(implausible_fields(&bundle("n1", skewed), now).is_empty());
        let future = implausible_fields(&bundle("n1", now + chrono::TimeDelta::days(1)), now);
        assert!(
            future[0].contains("later than this host's clock"),
            "{future:?}"
        );
        let unset = DateTime::parse_from_rfc3339("1970-01-02T00:00:00Z")
            .unwrap()
            .to_utc();
        assert!(
            implausible_fields(&bundle("n1", now), unset).is_empty(),
            "a host whose clock was never set takes today's bundles"
        );
        let escape = implausible_fields(&bundle("n1\n\u{1b}[31m", now), now);
        assert!(
            escape[0].contains("host holds control characters"),
            "{escape:?}"
        );
    }

    /// A table with two entries for one size served the first silently (the lower, once
    /// damaged): a bundle holding one does not agree with itself.
    #[test]
    fn two_entries_for_one_size_do_not_agree() {
        use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
        use crate::gpu::Gpu;
        let mut gpu = SimGpu::new(DeviceProfile::h200(), SimOptions::default());
        let kernel = crate::kernels::find("needle").unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let recipe = crate::calibrate::Recipe::default();
        let cal =
            crate::calibrate::calibrate_kernel(&mut gpu, &kernel, &recipe, &stop, &mut |_| {});
        let mut bundle = Bundle {
            format: FORMAT,
            exported_at: Utc::now(),
            host: "n1".into(),
            fingerprint: gpu.info().fingerprint.clone(),
            calibrations: vec![Entry::new("needle", Interference::Isolated, cal.unwrap())],
        };
        assert_eq!(inconsistencies(&bundle), Vec::<String>::new());
        let entries = &mut bundle.calibrations[0].calibration.table.entries;
        let lower = crate::model::BoundEntry {
            bound_ns: 1,
            ..entries[3]
        };
        entries.insert(3, lower);
        let found = inconsistencies(&bundle);
        assert!(
            found
                .iter()
                .any(|f| f.contains("the table has two entries for")),
            "{found:?}"
        );
    }

    #[test]
    fn truncated_and_foreign_files_are_refused_with_where() {
        let err = parse("{\"format\": 1, \"exported_at\": ").unwrap_err();
        assert!(
            err.contains("not a complete wcetd bundle") && err.contains("line 1"),
            "{err}"
        );
        let err = parse("[]").unwrap_err();
        assert!(
            err.contains("accepted: the output of `wcetctl export`"),
            "{err}"
        );
    }
}
