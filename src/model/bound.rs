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

    /// The smallest size whose bound meets `deadline_ns`.
    pub fn min_partition(&self, deadline_ns: u64) -> Option<&BoundEntry> {
        self.entries.iter().find(|e| e.bound_ns <= deadline_ns)
    }
}
