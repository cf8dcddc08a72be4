//! Model choice by leave-one-out validation across measured sizes.
//!
//! Each interior measured size is left out in turn, the law is fitted to the others and asked to
//! predict the size it did not see. The extremes are not left out: the planner always measures
//! them, so predicting them would test extrapolation the daemon never does. A law's validation
//! error is its worst relative miss; its under-prediction is the worst miss from below, which sets
//! the safety margin. Leaving a point out doubles the gap the law must bridge, so the error seen
//! here over-states the error of the final fit: the margin errs on the safe side.

use crate::kernels::Geometry;

use super::law::{self, FittedLaw, Law, Point};
use super::{CURVE_MONOTONE_TOLERANCE, MONOTONE_TOLERANCE};

/// A law that passed validation, fitted to all points.
#[derive(Debug, Clone)]
pub struct Validated {
    pub fitted: FittedLaw,
    /// Worst relative error (either sign) when predicting a left-out size.
    pub error: f64,
    /// Worst relative under-prediction, over left-out sizes and the fit itself (>= 0).
    pub under_prediction: f64,
}

/// Validation errors this close to the best count as ties.
const TIE: f64 = 0.01;

/// The simplest law whose validation error is within [`TIE`] of the best, if any validates. A
/// flexible law fitted to noise (a contention term on a flat roof, say) would otherwise win by a
/// hair and claim the kernel gets slower with more SMs.
pub fn select(points: &[Point], geometry: Option<Geometry>) -> Option<Validated> {
    let candidates: Vec<(usize, Validated)> = Law::ALL
        .iter()
        .filter_map(|&l| Some((l.parameters(geometry)?, validate(l, points, geometry)?)))
        .collect();
    let best = candidates
        .iter()
        .map(|(_, v)| v.error)
        .fold(f64::INFINITY, f64::min);
    candidates
        .into_iter()
        .filter(|(_, v)| v.error <= best + TIE)
        .min_by(|(pa, a), (pb, b)| pa.cmp(pb).then(a.error.total_cmp(&b.error)))
        .map(|(_, v)| v)
}

/// Like [`select`], but a law whose curve over `sizes` agrees with the measurements about
/// monotonicity is preferred whenever one validates (within `max_error`), even with a larger
/// validation error (which then sets its margin): a law that invents a dip or a bump the data do
/// not show is the less likely explanation, and on monotone data it would switch off the clamp
/// between measured neighbours.
pub fn select_consistent(
    points: &[Point],
    geometry: Option<Geometry>,
    sizes: &[u32],
    max_error: f64,
) -> Option<Validated> {
    let data_monotone = points
        .windows(2)
        .all(|w| w[1].time_ns <= w[0].time_ns * MONOTONE_TOLERANCE);
    let candidates: Vec<(usize, Validated)> = Law::ALL
        .iter()
        .filter_map(|&l| Some((l.parameters(geometry)?, validate(l, points, geometry)?)))
        .filter(|(_, v)| v.error <= max_error)
        .collect();
    let consistent: Vec<(usize, Validated)> = candidates
        .iter()
        .filter(|(_, v)| curve_is_monotone(&v.fitted, sizes) == data_monotone)
        .cloned()
        .collect();
    let pool = if consistent.is_empty() {
        candidates
    } else {
        consistent
    };
    let best = pool
        .iter()
        .map(|(_, v)| v.error)
        .fold(f64::INFINITY, f64::min);
    pool.into_iter()
        .filter(|(_, v)| v.error <= best + TIE)
        .min_by(|(pa, a), (pb, b)| pa.cmp(pb).then(a.error.total_cmp(&b.error)))
        .map(|(_, v)| v)
}

/// The law's curve never rises by more than [`CURVE_MONOTONE_TOLERANCE`] from one size to the next.
pub fn curve_is_monotone(law: &FittedLaw, sizes: &[u32]) -> bool {
    sizes
        .windows(2)
        .all(|w| law.predict(w[1]) <= law.predict(w[0]) * CURVE_MONOTONE_TOLERANCE)
}

/// Validate one law; `None` when there are not enough points to leave one out.
pub fn validate(law: Law, points: &[Point], geometry: Option<Geometry>) -> Option<Validated> {
    let params = law.parameters(geometry)?;
    if points.len() < 3 || points.len() - 1 < params {
        return None;
    }
    let mut error: f64 = 0.0;
    let mut under: f64 = 0.0;
    for left_out in 1..points.len() - 1 {
        let rest: Vec<Point> = points
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != left_out)
            .map(|(_, p)| *p)
            .collect();
        let fitted = law::fit(law, &rest, geometry)?;
        let truth = points[left_out];
        let miss = truth.time_ns / fitted.predict(truth.sms).max(1e-9) - 1.0;
        error = error.max(miss.abs());
        under = under.max(miss);
    }
    let fitted = law::fit(law, points, geometry)?;
    for p in points {
        under = under.max(p.time_ns / fitted.predict(p.sms).max(1e-9) - 1.0);
    }
    Some(Validated {
        fitted,
        error,
        under_prediction: under,
    })
}
