//! Bound tables: the conservative bound for every requested partition size of one kernel, each
//! with its provenance, and the queries schedulers make of them.

use serde::{Deserialize, Serialize};
use std::fmt;

use super::law::FittedLaw;
use super::tail::TailBound;
use super::Method;

/// Where a bound came from (design rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provenance {
    /// This size was measured.
    Measured,
    /// Between measured sizes.
    Fitted,
    /// Outside the measured sizes.
    Extrapolated,
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Provenance::Measured => "measured",
            Provenance::Fitted => "fitted",
            Provenance::Extrapolated => "extrapolated",
        })
    }
}

/// The bound at one partition size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundEntry {
    pub sms: u32,
    pub bound_ns: u64,
    pub provenance: Provenance,
    /// Timed launches at this size (0 unless measured).
    pub samples: u64,
    /// Largest sample at this size (0 unless measured or verified).
    pub observed_max_ns: u64,
    /// Launches of the verification sweep at this size (0 unless verified). Stores written
    /// before the sweep read 0.
    #[serde(default)]
    pub verified_samples: u64,
}

impl BoundEntry {
    /// What the bound at this size rests on: `measured` (a full campaign there), `verified` (the
    /// fitted curve, checked against a verification sweep there and never below what it saw),
    /// `fitted` or `extrapolated` (the curve alone).
    pub fn basis(&self) -> &'static str {
        match self.provenance {
            Provenance::Measured => "measured",
            _ if self.verified_samples > 0 => "verified",
            Provenance::Fitted => "fitted",
            Provenance::Extrapolated => "extrapolated",
        }
    }
}

/// Whether a bound stated at `exceedance` per launch promises less than `than`, beyond the
/// rounding of the stated probability (a relative 1e-9).
pub fn weaker_than(exceedance: f64, than: f64) -> bool {
    exceedance > than * (1.0 + 1e-9)
}

/// An exceedance probability for a table column: one significant figure where that does not
/// round it down (`1e-9` for 1e-9 or 9.98e-10), else three rounded up, so that a column never
/// shows a weaker promise as a stronger one (`1e-4` for 1.4e-4, as `{:.0e}` printed it).
pub fn exceedance_text(exceedance: f64) -> String {
    let short = format!("{exceedance:.0e}");
    match short.parse::<f64>() {
        Ok(shown) if !weaker_than(exceedance, shown) => short,
        _ if exceedance > 0.0 && exceedance.is_finite() => {
            let mut exponent = exceedance.log10().floor() as i32;
            let mut hundredths = (exceedance / 10f64.powi(exponent) * 100.0 * (1.0 - 1e-12)).ceil();
            if hundredths >= 1000.0 {
                hundredths /= 10.0;
                exponent += 1;
            }
            format!("{:.2}e{exponent}", hundredths / 100.0)
        }
        _ => short,
    }
}

#[cfg(test)]
mod exceedance_text_tests {
    #[test]
    fn a_column_never_shows_a_weaker_exceedance_as_a_stronger_one() {
        let text = super::exceedance_text;
        assert_eq!(text(1e-9), "1e-9");
        assert_eq!(text(9.98e-10), "1e-9");
        assert_eq!(text(1e-4), "1e-4");
        assert_eq!(text(1.4e-4), "1.40e-4");
        assert_eq!(text(1.2345679e-2), "1.24e-2");
        assert_eq!(text(9.999e-3), "1e-2");
    }
}

/// What the exceedance a table's bounds are stated at rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExceedanceBasis {
    /// A fitted tail model states it (weaker than configured for a heavy tail).
    TailModel,
    /// Only the observed maximum (plus any stated margin): no probability below 1/(n+1).
    ObservedMaximum,
}

impl ExceedanceBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            ExceedanceBasis::TailModel => "tail-model",
            ExceedanceBasis::ObservedMaximum => "observed-maximum",
        }
    }
}

/// Every bound of one kernel, ascending by size, with how they were derived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoundTable {
    pub method: Method,
    /// The scaling law the fitted bounds follow, if one validated.
    pub law: Option<FittedLaw>,
    /// Multiplicative safety margin on the law, from its worst under-prediction in validation.
    pub law_margin: f64,
    /// Worst relative error of the law in leave-one-out validation (0 when not validated).
    pub validation_error: f64,
    /// Whether the data say more SMs are never slower (and bounds were made monotone).
    pub monotone: bool,
    pub tail: Option<TailBound>,
    pub entries: Vec<BoundEntry>,
    pub notes: Vec<String>,
    /// How much higher the typical time may be in another process than in the one measured,
    /// as a share, that the bounds allow for ([`super::MethodConfig::process_shift`]). `None`
    /// in stores written before the field (2026-11-24): [`Self::allowed_process_shift`] reads the note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_shift: Option<f64>,
}

/// The start of the note the `wcetd` method writes for a process shift (the share follows, in
/// percent): how a table stored before [`BoundTable::process_shift`] says what it allows for.
pub(super) const PROCESS_SHIFT_NOTE: &str = "the typical time may be up to ";

impl BoundTable {
    /// The process shift the bounds allow for: the recorded one, or, in a table stored before it
    /// was recorded, the one its note states (tables of 2026-11-24), else none.
    ///
    /// One no `--process-shift` gives (below 0, from 1, not a number: a damaged file, which
    /// loading refuses) reads as none allowed, so that raising for the configured shift raises
    /// by all of it: divided by 1 + (-1) or less, every bound became 2^64-1 ns or 0 ns.
    pub fn allowed_process_shift(&self) -> f64 {
        if let Some(shift) = self.process_shift {
            return if (0.0..1.0).contains(&shift) {
                shift
            } else {
                0.0
            };
        }
        self.notes
            .iter()
            .filter_map(|n| n.strip_prefix(PROCESS_SHIFT_NOTE))
            .filter(|rest| rest.contains("% higher in another process"))
            .filter_map(|rest| rest.split('%').next()?.parse::<f64>().ok())
            .map(|percent| percent / 100.0)
            .fold(0.0, f64::max)
    }

    /// Raise every bound of a `wcetd` table that allows for less process shift than `shift` by
    /// the difference, (1 + shift) / (1 + allowed), rounded up: at least what a refit with
    /// `shift` gives from the same launches, since the shift multiplies the typical time and the
    /// rest of the bound (tail ratio, additive delays, rule 1's samples) only gains from being
    /// multiplied too. Returns the note added, or `None` where nothing changed (another method:
    /// the published strategies take no shift; or enough allowed already: a lower `shift` never
    /// lowers a bound).
    pub fn allow_for_process_shift(&mut self, shift: f64) -> Option<String> {
        let allowed = self.allowed_process_shift();
        // (A NaN shift, which the flag's parser refuses, raises nothing either.)
        let more = shift.partial_cmp(&allowed) == Some(std::cmp::Ordering::Greater);
        if self.method != Method::Wcetd || !more {
            return None;
        }
        let factor = (1.0 + shift) / (1.0 + allowed);
        for e in &mut self.entries {
            // Never lowered, whatever the factor: one below 1, or not a number, would have
            // saturated to 0 (`as u64`). Above 2^64 it saturates to the largest, which is safe.
            let raised = (e.bound_ns as f64 * factor).ceil();
            if raised.is_finite() && raised > e.bound_ns as f64 {
                e.bound_ns = raised as u64;
            }
        }
        self.process_shift = Some(shift);
        let note = format!(
            "calibrated allowing {:.1}% for the typical time in another process, {:.1}% is configured now: every bound raised by {:.2}% at start (recalibrate to refit with it)",
            allowed * 100.0,
            shift * 100.0,
            (factor - 1.0) * 100.0
        );
        self.notes.push(note.clone());
        Some(note)
    }

    /// The entry for exactly `sms`.
    pub fn entry(&self, sms: u32) -> Option<&BoundEntry> {
        self.entries.iter().find(|e| e.sms == sms)
    }

    /// The entry of the largest size not above `sms` (the design's rule for unrealisable sizes).
    pub fn at_most(&self, sms: u32) -> Option<&BoundEntry> {
        self.entries.iter().rev().find(|e| e.sms <= sms)
    }

    /// The exceedance probability per launch the bounds are stated at. A tail model states one;
    /// where only the observed maximum stands behind the bounds (fewer samples than a tail model
    /// needs, or a published method without one), n samples support no more than 1/(n+1): the
    /// chance that a fresh launch exceeds the largest of n exchangeable ones (n: the pooled tail
    /// samples, or the fewest at a measured size).
    pub fn stated_exceedance(&self) -> (f64, ExceedanceBasis) {
        let observed = |n: u64| (1.0 / (n as f64 + 1.0), ExceedanceBasis::ObservedMaximum);
        match &self.tail {
            Some(t) if t.kind == super::tail::TailKind::Observed => {
                let (p, basis) = observed(t.samples as u64);
                // A component stated on its own (the device's delays) may claim less still.
                (p.max(t.exceedance), basis)
            }
            Some(t) => (t.exceedance, ExceedanceBasis::TailModel),
            None => observed(
                self.entries
                    .iter()
                    .filter(|e| e.provenance == Provenance::Measured)
                    .map(|e| e.samples)
                    .min()
                    .unwrap_or(0),
            ),
        }
    }

    /// Raise the bound at `sms` to a launch timed there after the table was made (rule 1: never
    /// below a time observed at that size), as [`Self::raise_to`] does, and record it as the
    /// largest launch measured there. Returns whether any bound changed.
    pub fn raise_to_launch(&mut self, sms: u32, launch_ns: u64) -> bool {
        let raised = self.raise_to(sms, launch_ns);
        if let Some(at) = self.entries.iter_mut().find(|e| e.sms == sms) {
            at.observed_max_ns = at.observed_max_ns.max(launch_ns);
        }
        raised
    }

    /// Raise the bound at `sms` to at least `ns`, and, on a monotone kernel, every smaller
    /// size's too, so that more SMs never have a larger bound. Returns whether anything changed.
    pub fn raise_to(&mut self, sms: u32, ns: u64) -> bool {
        let Some(i) = self.entries.iter().position(|e| e.sms == sms) else {
            return false;
        };
        let mut raised = false;
        let upto = if self.monotone { 0 } else { i };
        for entry in &mut self.entries[upto..=i] {
            if entry.bound_ns < ns {
                entry.bound_ns = ns;
                raised = true;
            }
        }
        raised
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(monotone: bool, bounds: &[(u32, u64)]) -> BoundTable {
        BoundTable {
            method: Method::Wcetd,
            law: None,
            law_margin: 0.0,
            validation_error: 0.0,
            monotone,
            tail: None,
            entries: bounds
                .iter()
                .map(|&(sms, bound_ns)| BoundEntry {
                    sms,
                    bound_ns,
                    provenance: Provenance::Measured,
                    samples: 100,
                    observed_max_ns: bound_ns / 2,
                    verified_samples: 0,
                })
                .collect(),
            notes: Vec::new(),
            process_shift: Some(0.0),
        }
    }

    /// A process shift no flag gives (a damaged file: -3, -1, NaN) reads as none allowed, so
    /// raising for the configured one raises by all of it: it never lowers a bound to 0 nor
    /// makes it 2^64-1.
    #[test]
    fn a_process_shift_out_of_range_never_lowers_a_bound() {
        for stored in [-3.0, -1.0, -0.5, 1.0, 7.0, f64::NAN, f64::INFINITY] {
            let mut t = table(true, &[(8, 1000), (16, 500)]);
            t.process_shift = Some(stored);
            t.allow_for_process_shift(0.02).expect("raised");
            let bounds: Vec<u64> = t.entries.iter().map(|e| e.bound_ns).collect();
            assert_eq!(bounds, [1020, 510], "stored {stored}");
        }
    }

    #[test]
    fn a_launch_raises_its_size_and_on_a_monotone_kernel_every_smaller_one() {
        let mut t = table(true, &[(8, 500), (16, 300), (32, 200)]);
        assert!(t.raise_to_launch(16, 450));
        let bounds: Vec<u64> = t.entries.iter().map(|e| e.bound_ns).collect();
        assert_eq!(bounds, [500, 450, 200]);
        assert_eq!(t.entry(16).unwrap().observed_max_ns, 450);
        assert!(t.raise_to_launch(32, 600));
        let bounds: Vec<u64> = t.entries.iter().map(|e| e.bound_ns).collect();
        assert_eq!(bounds, [600, 600, 600]);
        assert!(
            !t.raise_to_launch(8, 100),
            "a launch under the bound changes nothing"
        );
        let mut rising = table(false, &[(8, 500), (16, 300), (32, 200)]);
        assert!(rising.raise_to_launch(32, 400));
        let bounds: Vec<u64> = rising.entries.iter().map(|e| e.bound_ns).collect();
        assert_eq!(bounds, [500, 300, 400]);
    }
}
