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
}

impl BoundTable {
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

    /// The smallest size whose bound meets `deadline_ns`.
    pub fn min_partition(&self, deadline_ns: u64) -> Option<&BoundEntry> {
        self.entries.iter().find(|e| e.bound_ns <= deadline_ns)
    }
}
