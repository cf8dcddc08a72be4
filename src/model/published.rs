//! The published strategies `wcetd` is compared against, as published: fitted to per-size
//! **maxima** with the Amdahl law a + b/m.
//!
//! `fixed-margin` (+3%), `incremental-margin` (3% raised in steps of 2% up to 13% until every
//! calibration maximum is covered), `minimal-offset` (the smallest additive offset that lifts the
//! curve above every calibration maximum, with the subset of calibration sizes searched for the
//! tightest such curve), `fewest-points` (the fewest calibration sizes whose curve plus offset is
//! safe at every calibration size), and `envelope` (largest sample at the next smaller measured
//! size plus 20%). Each obeys the one hard rule: never below a sample observed at a size.

use super::law::{self, FittedLaw, Law, Point};
use super::method::{entry, Method};
use super::{BoundEntry, BoundTable, ModelError, Observations, Provenance};

/// Bounds for `sizes` from `obs` with a published strategy (not `wcetd`).
pub fn bound_table(
    obs: &Observations,
    sizes: &[u32],
    method: Method,
) -> Result<BoundTable, ModelError> {
    match method {
        Method::Envelope => envelope(obs, sizes),
        published => amdahl_on_maxima(obs, sizes, published),
    }
}

pub(super) fn provenance_of(obs: &Observations, m: u32) -> Provenance {
    let lo = obs.by_size.keys().next().copied().unwrap_or(0);
    let hi = obs.by_size.keys().next_back().copied().unwrap_or(0);
    if obs.by_size.contains_key(&m) {
        Provenance::Measured
    } else if m < lo || m > hi {
        Provenance::Extrapolated
    } else {
        Provenance::Fitted
    }
}

/// Largest sample at the next smaller measured size, plus 20% (the first smaller size when none is).
fn envelope(obs: &Observations, sizes: &[u32]) -> Result<BoundTable, ModelError> {
    let maxima = obs.max_points();
    let entries = sizes
        .iter()
        .map(|&m| {
            let basis = maxima.iter().rev().find(|p| p.sms <= m).or(maxima.first());
            let bound = basis.map_or(0.0, |p| p.time_ns) * 1.2;
            entry(obs, m, bound, provenance_of(obs, m))
        })
        .collect();
    Ok(simple_table(Method::Envelope, None, 0.2, entries))
}

/// The published strategies: Amdahl fitted to per-size maxima, with their margins and offsets.
fn amdahl_on_maxima(
    obs: &Observations,
    sizes: &[u32],
    method: Method,
) -> Result<BoundTable, ModelError> {
    let maxima = obs.max_points();
    let too_few = || ModelError::TooFewSizes {
        method,
        needed: 2,
        got: maxima.len(),
    };
    let (fitted, bound_of): (FittedLaw, Box<dyn Fn(f64) -> f64>) = match method {
        Method::FixedMargin => {
            let f = law::fit(Law::Amdahl, &maxima, None).ok_or_else(too_few)?;
            (f, Box::new(|p| p * 1.03))
        }
        Method::IncrementalMargin => {
            let f = law::fit(Law::Amdahl, &maxima, None).ok_or_else(too_few)?;
            let margin = incremental_margin(&f, &maxima);
            (f, Box::new(move |p| p * (1.0 + margin)))
        }
        Method::MinimalOffset => {
            let (f, offset) = best_subset(&maxima, false).ok_or_else(too_few)?;
            (f, Box::new(move |p| p + offset))
        }
        _ => {
            let (f, offset) = best_subset(&maxima, true).ok_or_else(too_few)?;
            (f, Box::new(move |p| p + offset))
        }
    };
    let entries = sizes
        .iter()
        .map(|&m| entry(obs, m, bound_of(fitted.predict(m)), provenance_of(obs, m)))
        .collect();
    Ok(simple_table(method, Some(fitted), 0.0, entries))
}

/// 3%, then +2% at a time up to 13%, until every calibration maximum is covered.
fn incremental_margin(f: &FittedLaw, maxima: &[Point]) -> f64 {
    let mut margin = 0.03;
    while margin < 0.13
        && maxima
            .iter()
            .any(|p| f.predict(p.sms) * (1.0 + margin) < p.time_ns)
    {
        margin += 0.02;
    }
    margin.min(0.13)
}

/// Search subsets of the calibration sizes (at least 2) for the curve plus minimal offset that
/// covers every calibration maximum with the smallest mean bound. With `fewest`, the smallest
/// subset that is safe with the offset computed on its own points wins instead.
fn best_subset(maxima: &[Point], fewest: bool) -> Option<(FittedLaw, f64)> {
    let n = maxima.len();
    if n < 2 {
        return None;
    }
    // 2^17 subsets of 17 sizes is too many to fit; beyond 12 sizes search pairs and triples only.
    let max_k = if n <= 12 { n } else { 3 };
    let mut best: Option<(usize, f64, FittedLaw, f64)> = None;
    for mask in 1u64..(1 << n) {
        let k = mask.count_ones() as usize;
        if k < 2 || k > max_k {
            continue;
        }
        let subset: Vec<Point> = (0..n)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| maxima[i])
            .collect();
        let Some(f) = law::fit(Law::Amdahl, &subset, None) else {
            continue;
        };
        let offset_on = |pts: &[Point]| {
            pts.iter()
                .map(|p| p.time_ns - f.predict(p.sms))
                .fold(0.0, f64::max)
        };
        let offset = if fewest {
            offset_on(&subset)
        } else {
            offset_on(maxima)
        };
        let safe = maxima
            .iter()
            .all(|p| f.predict(p.sms) + offset >= p.time_ns);
        if !safe {
            continue;
        }
        let mean = maxima
            .iter()
            .map(|p| f.predict(p.sms) + offset)
            .sum::<f64>()
            / n as f64;
        let key = if fewest { k } else { 0 };
        if best.as_ref().is_none_or(|b| (key, mean) < (b.0, b.1)) {
            best = Some((key, mean, f, offset));
        }
    }
    best.map(|(_, _, f, o)| (f, o)).or_else(|| {
        let f = law::fit(Law::Amdahl, maxima, None)?;
        let o = maxima
            .iter()
            .map(|p| p.time_ns - f.predict(p.sms))
            .fold(0.0, f64::max);
        Some((f, o))
    })
}

fn simple_table(
    method: Method,
    law: Option<FittedLaw>,
    margin: f64,
    entries: Vec<BoundEntry>,
) -> BoundTable {
    BoundTable {
        method,
        law,
        law_margin: margin,
        validation_error: 0.0,
        monotone: false,
        tail: None,
        entries,
        notes: Vec::new(),
        // The published strategies take no process shift (docs/method.md).
        process_shift: Some(0.0),
    }
}
