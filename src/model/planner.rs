//! The active calibration planner: which partition size to measure next.
//!
//! It starts from the extremes (the smallest and the whole device, so that the daemon never has
//! to extrapolate), then adds the size where the candidate laws disagree most, weighted by the distance (in log m)
//! to the nearest measured size: that is where a wrong choice of law would cost the most. It
//! stops when the budget of sizes is spent, or when at least four sizes are measured, no gap between
//! them is wider than a factor of 2, and the best law's leave-one-out error is below 1%.

use super::law::{self, Law, Point};
use super::{validate, Observations};

/// Sizes the planner may still choose from `candidates`, or `None` when calibration is done.
pub fn next_size(obs: &Observations, candidates: &[u32], budget: usize) -> Option<u32> {
    let measured: Vec<u32> = obs.by_size.keys().copied().collect();
    let unmeasured: Vec<u32> = candidates
        .iter()
        .copied()
        .filter(|c| !measured.contains(c))
        .collect();
    let (&first, &last) = (candidates.first()?, candidates.last()?);
    if measured.len() >= budget.max(2) || unmeasured.is_empty() {
        return None;
    }
    if !measured.contains(&first) {
        return Some(first);
    }
    if !measured.contains(&last) {
        return Some(last);
    }
    let points = obs.median_points();
    // Converged only if no gap is wider than a factor of 2 (leave-one-out cannot see into one)
    // and the best law predicts left-out sizes within 1%.
    let widest_gap = points
        .windows(2)
        .map(|w| f64::from(w[1].sms) / f64::from(w[0].sms))
        .fold(1.0, f64::max);
    if points.len() >= 4 && widest_gap <= 2.0 {
        if let Some(best) = validate::select(&points, obs.geometry) {
            if best.error < 0.01 {
                return None;
            }
        }
    }
    let fitted: Vec<_> = Law::ALL
        .iter()
        .filter_map(|&l| law::fit(l, &points, obs.geometry))
        .collect();
    unmeasured
        .into_iter()
        .map(|m| (m, disagreement(m, &points, &fitted)))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(m, _)| m)
}

/// Relative spread of the fitted laws' predictions at `m`, weighted by how far `m` is from the
/// nearest measured size (a gap bisected teaches more than a point next to one already known).
fn disagreement(m: u32, points: &[Point], fitted: &[law::FittedLaw]) -> f64 {
    // Gaps in log(m): the laws are multiplicative in m (1/m, waves), so 8 -> 16 SMs is as big a
    // step as 64 -> 128.
    let ln = |x: u32| f64::from(x.max(1)).ln();
    let gap = points
        .iter()
        .map(|p| (ln(p.sms) - ln(m)).abs())
        .fold(f64::INFINITY, f64::min);
    let preds: Vec<f64> = fitted
        .iter()
        .map(|f| f.predict(m))
        .filter(|p| p.is_finite() && *p > 0.0)
        .collect();
    let lo = preds.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = preds.iter().copied().fold(0.0, f64::max);
    // Disagreement beyond 10% all means "unknown here": past that, the wider gap wins, so the
    // planner bisects where every law is unsure and focuses only where they nearly agree.
    let spread = if lo.is_finite() && lo > 0.0 {
        hi / lo - 1.0
    } else {
        0.1
    };
    (spread.min(0.1) + 1e-3) * gap
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn starts_at_the_extremes_and_respects_the_budget() {
        let sizes: Vec<u32> = (1..=16).map(|i| i * 8).chain([132]).collect();
        let mut obs = Observations {
            geometry: None,
            by_size: BTreeMap::new(),
        };
        let truth = |m: u32| (10_000 + 1_000_000 / m.min(56)) as u64;
        let mut chosen = Vec::new();
        while let Some(m) = next_size(&obs, &sizes, 5) {
            chosen.push(m);
            obs.by_size.insert(m, vec![truth(m); 20]);
        }
        assert_eq!(&chosen[..2], &[8, 132]);
        assert!(chosen.len() <= 5 && chosen.len() >= 3, "{chosen:?}");
    }
}
