//! The active calibration planner: which partition size to measure next.
//!
//! It starts from the extremes (the smallest and the whole device, so that the daemon never has
//! to extrapolate). The next sizes sketch the curve: each goes where the candidate laws disagree
//! most, weighted by the distance (in log m) to the nearest measured size, which amounts to
//! bisecting in log m. Once [`SKETCH`] sizes are measured, each further size goes where the
//! bound the `wcetd` method would set now stands furthest above the least the kernel could take
//! there: a knee, a contention onset or a long rising stretch, where one more size tightens the
//! bound most. It stops when the budget of sizes is spent, or when at least four sizes are
//! measured, no gap between them is wider than a factor of 2, and the best law's leave-one-out
//! error is below 1%.

use super::law::{self, Law, Point};
use super::{method, validate, MethodConfig, Observations};

/// Sizes measured by bisection before the bound's looseness decides: with three, leave-one-out has
/// a single size to leave out, the validated law (if any) carries a wide margin, and the bound is
/// loose everywhere alike, so looseness would not point anywhere in particular.
const SKETCH: usize = 4;

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
    if converged(obs, &points) {
        return None;
    }
    if points.len() >= SKETCH {
        if let Some(m) = loosest(obs, &points, &unmeasured, candidates) {
            return Some(m);
        }
    }
    let fitted: Vec<_> = Law::ALL
        .iter()
        .filter_map(|&l| law::fit(l, &points, obs.geometry))
        .collect();
    unmeasured
        .into_iter()
        .map(|m| (m, disagreement(m, &points, &fitted)))
        .max_by(|&a, &b| by_score_then_larger(a, b))
        .map(|(m, _)| m)
}

/// Converged only if no gap is wider than a factor of 2 (leave-one-out cannot see into one) and
/// the best law predicts left-out sizes within 1%.
fn converged(obs: &Observations, points: &[Point]) -> bool {
    let widest_gap = points
        .windows(2)
        .map(|w| f64::from(w[1].sms) / f64::from(w[0].sms))
        .fold(1.0, f64::max);
    points.len() >= 4
        && widest_gap <= 2.0
        && validate::select(points, obs.geometry).is_some_and(|best| best.error < 0.01)
}

/// The unmeasured size where the `wcetd` bound (before its tail ratio, with the default method
/// settings) stands furthest above the least the kernel could plausibly take there, weighted by
/// the distance in log m to the nearest measured size (measuring next to a known size teaches
/// little). The least: what the left neighbour's time allows if the kernel never speeds up faster
/// than its SM count grows, `T(l) * l / m`, and no less than the right neighbour on a kernel
/// measured to be monotone (the smaller neighbour otherwise). This is a planning estimate, not a
/// bound: the bound's safety does not depend on which sizes were measured.
fn loosest(
    obs: &Observations,
    points: &[Point],
    unmeasured: &[u32],
    candidates: &[u32],
) -> Option<u32> {
    let curve = method::typical_curve(obs, candidates, &MethodConfig::default()).ok()?;
    let monotone = method::is_monotone(points);
    let least = |m: u32| {
        let l = points.iter().rev().find(|p| p.sms < m)?;
        let r = points.iter().find(|p| p.sms > m)?;
        let linear_speedup = l.time_ns * f64::from(l.sms) / f64::from(m);
        let neighbour = if monotone {
            r.time_ns
        } else {
            l.time_ns.min(r.time_ns)
        };
        Some(linear_speedup.max(neighbour))
    };
    curve
        .into_iter()
        .filter(|(m, _)| unmeasured.contains(m))
        .filter_map(|(m, typical)| Some((m, (typical / least(m)? - 1.0) * log_gap(m, points))))
        .filter(|(_, score)| score.is_finite())
        .max_by(|&a, &b| by_score_then_larger(a, b))
        .map(|(m, _)| m)
}

/// Scores equal but for rounding (16 and 64 SMs are both a factor of 2 from 8 and 32) go to the
/// larger size, where a kernel's time is least known (roofs, contention).
fn by_score_then_larger(a: (u32, f64), b: (u32, f64)) -> std::cmp::Ordering {
    let tie = 1e-9 * a.1.abs().max(b.1.abs());
    if (a.1 - b.1).abs() <= tie {
        a.0.cmp(&b.0)
    } else {
        a.1.total_cmp(&b.1)
    }
}

/// Distance in log m from `m` to the nearest measured size: the laws are multiplicative in m (1/m,
/// waves), so 8 -> 16 SMs is as big a step as 64 -> 128.
fn log_gap(m: u32, points: &[Point]) -> f64 {
    let ln = |x: u32| f64::from(x.max(1)).ln();
    points
        .iter()
        .map(|p| (ln(p.sms) - ln(m)).abs())
        .fold(f64::INFINITY, f64::min)
}

/// Relative spread of the fitted laws' predictions at `m`, weighted by how far `m` is from the
/// nearest measured size (a gap bisected teaches more than a point next to one already known).
fn disagreement(m: u32, points: &[Point], fitted: &[law::FittedLaw]) -> f64 {
    let gap = log_gap(m, points);
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
    use crate::kernels::Geometry;

    #[test]
    fn starts_at_the_extremes_and_respects_the_budget() {
        let sizes: Vec<u32> = (1..=16).map(|i| i * 8).chain([132]).collect();
        let mut obs = Observations {
            geometry: None,
            ..Observations::default()
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

    /// A memory-bound kernel (the simulator's backprop) whose bandwidth roof is reached at 50
    /// SMs: 1/m before it, flat after. Bisection alone would spend the last size at 16, where 1/m
    /// is already pinned by 8 and 32; the knee between 32 and 64 is where the bound is loosest.
    #[test]
    fn the_last_size_goes_to_the_knee() {
        let sizes: Vec<u32> = (1..=16).map(|i| i * 8).chain([132]).collect();
        let geometry = Geometry {
            blocks: 4096,
            blocks_per_sm: 8,
        };
        let mut obs = Observations {
            geometry: Some(geometry),
            ..Observations::default()
        };
        let truth = |m: u32| {
            let waves = 3_000.0 * f64::from(geometry.waves(m));
            let memory = 200e6 / (60.0 * f64::from(m)).min(3_000.0);
            (5_000.0 + waves.max(memory)) as u64
        };
        let mut chosen = Vec::new();
        while let Some(m) = next_size(&obs, &sizes, 5) {
            chosen.push(m);
            obs.by_size.insert(m, vec![truth(m); 20]);
        }
        assert_eq!(chosen.len(), 5, "{chosen:?}");
        assert!((40..=56).contains(&chosen[4]), "{chosen:?}");
        assert!(!chosen.contains(&16), "{chosen:?}");
    }
}
