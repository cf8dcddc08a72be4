//! The model: from timed samples at a few partition sizes to a conservative bound at every size.
//!
//! It knows nothing of the GPU or the bus. In: [`Observations`] (samples per measured size, in
//! launch order, a few verification launches at sizes not measured in full, and the launch
//! geometry when known). Out: a [`BoundTable`]. The pieces:
//! - [`law`]: scaling laws and their fits (argmin);
//! - [`validate`]: law choice and safety margin by leave-one-out validation;
//! - [`tail`]: the statistical tail bound (peaks over threshold);
//! - [`throttle`]: the device's sustained slowdowns, found in any launch-ordered series;
//! - [`method`]: the project's bound method (`wcetd`), its safety chain in one function;
//! - [`published`]: the published strategies it is compared against;
//! - [`verify`]: which sizes the verification sweep says must be measured in full;
//! - [`planner`]: which size to measure next;
//! - [`evaluate`]: how a method fares against held-out samples;
//! - [`predict`]: typical-time predictions where nothing was measured (never bounds).
//!
//! The one rule no method may break: a bound is never below a sample observed at that size.

pub mod bound;
pub mod evaluate;
pub mod law;
pub mod method;
pub mod planner;
pub mod predict;
pub mod published;
pub mod tail;
pub mod throttle;
pub mod validate;
pub mod verify;

use std::collections::BTreeMap;

pub use bound::{
    exceedance_text, weaker_than, BoundEntry, BoundTable, ExceedanceBasis, Provenance,
};
pub use law::Point;
pub use method::{Method, MethodConfig, CUDA_PROCESS_SHIFT};

use crate::kernels::Geometry;

/// Medians may rise by this factor from one measured size to the next and still count as not
/// rising (noise). Shared by the method, law selection and the planner.
pub const MONOTONE_TOLERANCE: f64 = 1.01;

/// A fitted law's curve may rise by this factor from one size to the next and still count as
/// not rising (tighter than for medians: a curve has no noise).
pub const CURVE_MONOTONE_TOLERANCE: f64 = 1.005;

/// Timed samples of one kernel: per measured partition size, every launch time in nanoseconds, in
/// launch order. No sample is ever dropped for being high.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observations {
    pub geometry: Option<Geometry>,
    pub by_size: BTreeMap<u32, Vec<u64>>,
    /// A few dozen launches at sizes not measured in full (the verification sweep): too few to
    /// fit a law or a tail to, but observed, so rule 1 holds for them, and enough to bound the
    /// median there.
    pub verified: BTreeMap<u32, Vec<u64>>,
}

impl Observations {
    /// (size, median) for every measured size, ascending.
    pub fn median_points(&self) -> Vec<Point> {
        self.by_size
            .iter()
            .filter(|(_, s)| !s.is_empty())
            .map(|(&sms, s)| Point {
                sms,
                time_ns: tail::quantile_u64(s, 0.5),
            })
            .collect()
    }

    /// (size, largest sample) for every measured size, ascending.
    pub fn max_points(&self) -> Vec<Point> {
        self.by_size
            .iter()
            .filter_map(|(&sms, s)| {
                s.iter().max().map(|&m| Point {
                    sms,
                    time_ns: m as f64,
                })
            })
            .collect()
    }

    /// The largest sample at `sms`, from the full measurement or the verification sweep.
    pub fn observed_max(&self, sms: u32) -> Option<u64> {
        let full = self.by_size.get(&sms).into_iter().flatten();
        let verified = self.verified.get(&sms).into_iter().flatten();
        full.chain(verified).max().copied()
    }

    /// Only the first `launches` samples of each size.
    pub fn truncated(&self, launches: usize) -> Observations {
        Observations {
            geometry: self.geometry,
            verified: self.verified.clone(),
            by_size: self
                .by_size
                .iter()
                .map(|(&m, s)| (m, s[..s.len().min(launches)].to_vec()))
                .collect(),
        }
    }

    /// Only the sizes in `keep`.
    pub fn restricted_to(&self, keep: &[u32]) -> Observations {
        Observations {
            geometry: self.geometry,
            verified: self.verified.clone(),
            by_size: self
                .by_size
                .iter()
                .filter(|(m, _)| keep.contains(m))
                .map(|(&m, s)| (m, s.clone()))
                .collect(),
        }
    }
}

/// Why a bound table could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("no samples: at least one measured size with at least one sample is needed")]
    NoSamples,
    #[error(
        "refusing to extrapolate to {sms} SMs: measured sizes run from {lo} to {hi} SMs, and {why}"
    )]
    WontExtrapolate {
        sms: u32,
        lo: u32,
        hi: u32,
        why: String,
    },
    #[error("method {method} needs at least {needed} measured sizes, got {got}")]
    TooFewSizes {
        method: Method,
        needed: usize,
        got: usize,
    },
}
