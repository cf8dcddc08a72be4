//! Tail models: how far above its typical time a kernel can run, at a stated exceedance
//! probability per launch.
//!
//! Jitter on a GPU is mostly multiplicative (clock dithering, DRAM refresh, interrupts scale with
//! the work), so the model works on ratios `time / median at that size`, pooled across every
//! measured size of a kernel. Pooling gives hundreds of tail samples from a few sizes and lets the
//! tail bound apply at sizes that were never measured. Pooling is an assumption, and it is
//! tested: each size's ratios are compared with the other sizes' (two-sample Kolmogorov-Smirnov,
//! Bonferroni-corrected 1%); additive jitter, which is relatively larger where the kernel is
//! faster, fails it. Then every measured size gets a tail bound of its own, and a size that was
//! not measured gets the largest of them.
//!
//! The method is peaks over threshold: exceedances of the ratios over a high quantile follow a
//! generalised Pareto distribution (Pickands-Balkema-de Haan), fitted by probability-weighted
//! moments (Hosking & Wallis 1987). The threshold is the lowest candidate quantile above which
//! the shape estimate is stable (every higher threshold's estimate within two standard errors of
//! it), not a fixed one. The shape's standard error is (1 + shape) / sqrt(n), its asymptotic
//! likelihood value. The fit is checked by Kolmogorov-Smirnov with a critical value from a
//! parametric bootstrap (the parameters are estimated from the same data, so the textbook
//! 1.36/sqrt(n) is too lenient). Outcomes, each reported:
//! - `gpd-bounded`: the shape is not positive and the fit passes. The bound is the quantile, at
//!   the target probability, of an exponential tail (shape 0) fitted over the same threshold:
//!   above the bounded tail's own quantile, the conservative choice of measurement-based
//!   probabilistic timing analysis, and steady from one campaign to the next.
//! - `gpd-upper-shape`: the shape is positive but not significantly so: the GPD quantile at the
//!   shape's upper confidence limit (two standard errors above the estimate).
//! - `exponential-quantile` (`exponential-envelope` in stores written before this name): the fit
//!   is rejected and the shape is not positive: the exponential-tail quantile.
//! - `heavy-tail`: the shape is more than two standard errors above 0 at some threshold, or a few
//!   huge outliers dwarf the body. The quantile at 1e-9 would be thousands of times the median, so
//!   the bound is stated at [`HEAVY_TAIL_EXCEEDANCE`] per launch (reported in `exceedance`), at
//!   the shape's upper confidence limit, and is at least the exponential quantile and twice the
//!   worst excess observed.
//! - `observed`: fewer than 100 samples: no model; the largest ratio plus as much again (twice the
//!   largest excess over the median), a stated margin rather than the bare maximum.
//!
//! Samples that fail the Ljung-Box independence check (a throttling episode is a run of slow
//! launches) are declustered first: the fit uses the maximum of each cluster of exceedances.
//! In every case the result is never below the largest observed ratio.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::Observations;

/// Which tail bound was used, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TailKind {
    GpdBounded,
    /// A positive shape that is not significant: the quantile at its upper confidence limit.
    GpdUpperShape,
    /// The exponential-tail quantile. Stores written before it was named for what it computes
    /// say `exponential-envelope`; they still load.
    #[serde(alias = "exponential-envelope")]
    ExponentialQuantile,
    /// The shape is significantly positive: no probability below [`HEAVY_TAIL_EXCEEDANCE`] is
    /// claimed.
    HeavyTail,
    Observed,
}

/// The tail bound of a kernel as a ratio over its typical time, with the evidence behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TailBound {
    pub kind: TailKind,
    /// Bound on time / median, never below `observed_max_ratio`; with per-size bounds, the
    /// largest of them (what a size that was not measured gets).
    pub ratio: f64,
    pub observed_max_ratio: f64,
    /// Exceedance probability per launch the bound is stated at.
    pub exceedance: f64,
    /// Fitted GPD shape (0 when not fitted); positive means a heavy tail.
    pub shape: f64,
    pub samples: usize,
    pub independent: bool,
    pub fit_accepted: bool,
    /// When pooling across sizes was rejected: the bound of each measured size on its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_size: BTreeMap<u32, f64>,
    /// Bound on the excess over the median in nanoseconds, the same at every size (see
    /// [`tail_bound`]); 0 in calibrations stored before it existed.
    #[serde(default)]
    pub additive_ns: f64,
    /// The exceedance the additive excess is stated at. The device's, when weaker than the
    /// ratio's, becomes the bound's (`exceedance`): [`TailBound::include_device_delay`].
    #[serde(default)]
    pub additive_exceedance: f64,
    /// Plain-language reasons for the choice, for `GetBoundInfo` and reports.
    pub notes: Vec<String>,
}

impl TailBound {
    /// The ratio that applies at size `m`: its own where pooling was rejected and `m` was
    /// measured, the pooled (or largest per-size) ratio otherwise.
    pub fn ratio_at(&self, m: u32) -> f64 {
        self.per_size.get(&m).copied().unwrap_or(self.ratio)
    }

    /// Raise the additive excess to the device's rare delays (from the delay probe) where they
    /// are larger than what this kernel's own launches showed. The bound is then stated at no
    /// less than the probe's exceedance, at every size: where the ratio sets the bound it covers
    /// delays up to its own excess, but the probe says nothing of delays beyond `ns` below its
    /// exceedance, and this kernel's campaign is too short to (the delays are too rare).
    pub fn include_device_delay(&mut self, ns: f64, exceedance: f64) {
        if ns <= self.additive_ns {
            return;
        }
        self.additive_ns = ns;
        self.additive_exceedance = exceedance;
        self.notes.push(format!(
            "the device's rare delays (delay probe): {:.2} µs stated at {exceedance:e}, above this kernel's own",
            ns / 1000.0
        ));
        if exceedance > self.exceedance {
            self.exceedance = exceedance;
            self.notes.push(format!(
                "the device's delays are stated at a weaker exceedance than this kernel's tail: every bound is stated at {exceedance:e} per launch"
            ));
        }
    }

    /// Allow for the device's sustained slowdowns ([`super::throttle`]): a launch slowed by
    /// `depth` on a share `share` of launches. `slowed` is this kernel's tail fitted at the
    /// exceedance those launches must meet (the caller's share of it over `share`); every ratio
    /// becomes at least (1 + depth) times its ratio there. The bound is then stated at the
    /// mixture's exceedance, (1 - share) times its own plus share times the slowed launches'.
    pub fn include_device_slowdown(&mut self, slowed: &TailBound, depth: f64, share: f64) {
        let factor = 1.0 + depth;
        let before = self.ratio;
        self.ratio = self.ratio.max(factor * slowed.ratio);
        for (m, own) in self.per_size.iter_mut() {
            *own = own.max(factor * slowed.ratio_at(*m));
        }
        self.exceedance = (1.0 - share) * self.exceedance + share * slowed.exceedance;
        self.notes.push(format!(
            "sustained slowdowns on {:.2}% of launches: ratio at least x{factor:.4} the tail at {:e} (x{:.4}), {}; stated at {:e} per launch",
            share * 100.0,
            slowed.exceedance,
            slowed.ratio,
            if self.ratio > before {
                format!("which raises it from x{before:.4} to x{:.4}", self.ratio)
            } else {
                "below the kernel's own".to_string()
            },
            self.exceedance
        ));
    }

    /// The bound at size `m` over a typical time of `typical_ns` there: the larger of the ratio
    /// and the additive excess.
    pub fn apply(&self, m: u32, typical_ns: f64) -> f64 {
        (typical_ns * self.ratio_at(m)).max(typical_ns + self.additive_ns)
    }
}

impl std::fmt::Display for TailKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TailKind::GpdBounded => "gpd-bounded",
            TailKind::GpdUpperShape => "gpd-upper-shape",
            TailKind::ExponentialQuantile => "exponential-quantile",
            TailKind::HeavyTail => "heavy-tail",
            TailKind::Observed => "observed",
        })
    }
}

/// Fewest samples a tail model is fitted to; below, a stated margin over the largest.
pub const MIN_SAMPLES: usize = 100;
/// Fewest samples above a threshold that a tail model is fitted to.
pub const MIN_EXCEEDANCES: usize = 10;
/// Exceedances closer than this many launches belong to one cluster.
const DECLUSTER_RUN: usize = 10;
/// A largest excess this many times the body's 95th-percentile excess marks a heavy tail. (4
/// took a throttling run of several percent on a tight body for a heavy tail.)
const OUTLIER_FACTOR: f64 = 8.0;
/// The exceedance a heavy-tailed bound is stated at.
pub const HEAVY_TAIL_EXCEEDANCE: f64 = 1e-4;
/// Candidate thresholds (quantiles of the ratios), lowest first.
const THRESHOLDS: [f64; 6] = [0.80, 0.85, 0.90, 0.93, 0.95, 0.97];
/// Standard errors of the shape for its significance and its upper confidence limit.
const SHAPE_Z: f64 = 2.0;
/// Parametric-bootstrap replicates for the goodness-of-fit critical value (5% level).
const BOOTSTRAP: usize = 99;
/// Overall level of the pooling test (split over the sizes, Bonferroni).
const POOLING_LEVEL: f64 = 0.01;

/// Whether the tail of `obs` is heavy or may be (a positive shape, significant or not): a
/// campaign then takes more samples, which narrow the shape's confidence interval.
pub fn is_heavy(obs: &Observations, config: &super::MethodConfig) -> bool {
    let per_size: Vec<Vec<f64>> = obs.by_size.values().map(|s| ratios(s)).collect();
    let kind = pooled_tail_bounds(&per_size, &[config.exceedance], Pool::All)[0].kind;
    matches!(kind, TailKind::HeavyTail | TailKind::GpdUpperShape)
}

/// The tail bound of `obs`: the ratio model ([`ratio_bounds`]) and an additive excess under it.
///
/// Rare delays of a fixed length (an interrupt, a firmware or memory-system event) add the same
/// nanoseconds to a launch of any length: on an H100, 2-6 µs on about 1.6e-4 of launches, at every
/// size and in every kernel (`docs/hardware-validation.md`). Relative to the median they are
/// largest where the kernel is fastest, and a size whose own launches happened to miss them has a
/// tight spread, so per-size ratios do not bound them. So the excess the ratio model allows at the
/// fastest measured size (the one with the most launches, the screen's), in nanoseconds, is a floor
/// on the excess at every size, stated at the ratio model's exceedance. The device's own delays,
/// too rare for one kernel's campaign, come from the delay probe ([`device_delay`]).
pub fn tail_bound(obs: &Observations, exceedance: f64) -> TailBound {
    tail_bounds(obs, &[exceedance]).remove(0)
}

/// [`tail_bound`] at each of `exceedances` (at least one), from one fit: everything but the last
/// quantile (pooling, threshold, shape, goodness of fit) does not depend on the probability.
pub fn tail_bounds(obs: &Observations, exceedances: &[f64]) -> Vec<TailBound> {
    let fastest = obs
        .by_size
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(&m, s)| (m, quantile_u64(s, 0.5)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let mut bounds = ratio_bounds(obs, exceedances);
    for bound in &mut bounds {
        if let Some((m, median)) = fastest {
            bound.additive_ns = (bound.ratio_at(m) - 1.0) * median;
            bound.additive_exceedance = bound.exceedance;
            bound.notes.push(format!(
                "a fixed delay does not shrink with more work: every size's bound is at least its typical time plus the excess allowed at the fastest size ({m} SMs), {:.2} µs",
                bound.additive_ns / 1000.0
            ));
        }
    }
    bounds
}

/// A bound on the excess over the median in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Additive {
    pub ns: f64,
    /// Exceedance probability per launch it is stated at.
    pub exceedance: f64,
    pub note: String,
}

/// The device's rare delays from the delay probe's launch times (one fixed amount of work, timed
/// as kernels are): the tail model of their excess over the median, in nanoseconds.
pub fn device_delay(probe: &[u64], exceedance: f64) -> Option<Additive> {
    let median = quantile_u64(probe, 0.5);
    if probe.is_empty() || median <= 0.0 {
        return None;
    }
    let fitted = pooled_tail_bounds(&[ratios(probe)], &[exceedance], Pool::All).remove(0);
    let ns = (fitted.ratio - 1.0) * median;
    Some(Additive {
        ns,
        exceedance: fitted.exceedance,
        note: format!(
            "device delay probe: excess over the median of {} launches: {:.2} µs ({}, largest seen {:.2} µs, stated at {:e}); every bound is at least its typical time plus this",
            fitted.samples,
            ns / 1000.0,
            fitted.kind,
            (fitted.observed_max_ratio - 1.0) * median / 1000.0,
            fitted.exceedance
        ),
    })
}

/// The ratio model at each of `exceedances`: pooled over sizes when the sizes agree; else pooled
/// after each size's excesses are scaled to a common spread, and scaled back per size.
fn ratio_bounds(obs: &Observations, exceedances: &[f64]) -> Vec<TailBound> {
    let sizes: Vec<(u32, &[u64])> = obs
        .by_size
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(&m, s)| (m, s.as_slice()))
        .collect();
    let per_size: Vec<&[u64]> = sizes.iter().map(|(_, s)| *s).collect();
    let sequences: Vec<Vec<f64>> = per_size.iter().map(|s| ratios(s)).collect();
    let Some(note) = pooling_rejected(&sequences) else {
        return pooled_tail_bounds(&sequences, exceedances, Pool::Balanced);
    };
    // Location-scale pooling: the excess over the median is assumed to have one shape at every
    // size but a scale of its own (additive jitter is relatively larger where the kernel is
    // faster). Each size's excesses are scaled to the mean spread, the tail fitted to the pool,
    // and the bound scaled back with each size's spread.
    let spreads: Vec<f64> = sequences.iter().map(|r| spread(r)).collect();
    let mean_spread = spreads.iter().sum::<f64>() / spreads.len() as f64;
    let scaled: Vec<Vec<f64>> = sequences
        .iter()
        .zip(&spreads)
        .map(|(r, s)| {
            r.iter()
                .map(|x| 1.0 + (x - 1.0) * mean_spread / s)
                .collect()
        })
        .collect();
    let mut bounds = pooled_tail_bounds(&scaled, exceedances, Pool::Balanced);
    for bound in &mut bounds {
        bound.notes.push(note.clone());
        scale_back(bound, &sizes, &sequences, &spreads, mean_spread);
    }
    bounds
}

/// Location-scale pooling's last step: each measured size's bound from the pooled one and its
/// own spread, never below its own largest ratio; the largest is what other sizes get.
fn scale_back(
    bound: &mut TailBound,
    sizes: &[(u32, &[u64])],
    sequences: &[Vec<f64>],
    spreads: &[f64],
    mean_spread: f64,
) {
    let mut widest: f64 = 1.0;
    for (((m, _), r), s) in sizes.iter().zip(sequences).zip(spreads) {
        let own_max = r.iter().copied().fold(1.0, f64::max);
        let ratio = (1.0 + (bound.ratio - 1.0) * s / mean_spread).max(own_max);
        bound.per_size.insert(*m, ratio);
        widest = widest.max(ratio);
        bound.observed_max_ratio = bound.observed_max_ratio.max(own_max);
    }
    bound.notes.push(format!(
        "excess scaled per size (90th-percentile spread {}): bounds {}; a size not measured gets the largest",
        spreads
            .iter()
            .map(|s| format!("{:.2}%", s * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
        bound
            .per_size
            .iter()
            .map(|(m, r)| format!("{m}: x{r:.4}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    bound.ratio = widest;
}

/// A size's spread: its 90th-percentile ratio over the median, minus 1 (never 0).
fn spread(ratios: &[f64]) -> f64 {
    let mut sorted = ratios.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    (quantile_sorted(&sorted, 0.9) - 1.0).max(1e-6)
}

/// Which samples the tail is fitted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    /// The first n launches of every size, n the fewest any size has: a size measured longer
    /// (the campaign's screen for rare slow launches) must not outweigh the others.
    Balanced,
    /// Every launch: to decide whether the tail is heavy, the more launches the better.
    All,
}

/// Ratios to the median of one size's samples.
fn ratios(samples: &[u64]) -> Vec<f64> {
    let median = quantile_u64(samples, 0.5);
    if median <= 0.0 {
        return Vec::new();
    }
    samples.iter().map(|&t| t as f64 / median).collect()
}

/// `Some(why)` when some size's ratios differ from the other sizes' by more than chance allows
/// (two-sample Kolmogorov-Smirnov at [`POOLING_LEVEL`] over the number of sizes).
fn pooling_rejected(per_size: &[Vec<f64>]) -> Option<String> {
    if per_size.len() < 2 {
        return None;
    }
    let level = POOLING_LEVEL / per_size.len() as f64;
    let c = (-(level / 2.0).ln() / 2.0).sqrt();
    let sorted: Vec<Vec<f64>> = per_size
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.sort_unstable_by(f64::total_cmp);
            r
        })
        .collect();
    let mut all: Vec<f64> = per_size.iter().flatten().copied().collect();
    all.sort_unstable_by(f64::total_cmp);
    for own in &sorted {
        let (n, k) = (own.len() as f64, (all.len() - own.len()) as f64);
        if n < 2.0 || k < 2.0 {
            continue;
        }
        let d = ks_against_the_rest(own, &all);
        if d > c * ((n + k) / (n * k)).sqrt() {
            return Some(format!(
                "jitter differs between sizes (two-sample Kolmogorov-Smirnov D = {d:.3} at one size, level {POOLING_LEVEL} over {} sizes): tail bounded per size",
                per_size.len()
            ));
        }
    }
    None
}

/// The two-sample Kolmogorov-Smirnov distance between `own` and the other values of `all` (both
/// sorted, `own` a part of `all`): the others' distribution function is all's count less own's,
/// so one sort of the pool serves every size.
fn ks_against_the_rest(own: &[f64], all: &[f64]) -> f64 {
    let (n, k) = (own.len() as f64, (all.len() - own.len()) as f64);
    let (mut i, mut a, mut d) = (0, 0, 0.0f64);
    while a < all.len() {
        // Past x and its ties; the first step is unconditional, so a NaN cannot stall the walk.
        let x = all[a];
        a += 1;
        while a < all.len() && all[a] <= x {
            a += 1;
        }
        while i < own.len() && own[i] <= x {
            i += 1;
        }
        d = d.max((i as f64 / n - (a - i) as f64 / k).abs());
    }
    d
}

/// The tail bound of ratio sequences (one per size, in launch order) pooled as `pool` says, at
/// each of `exceedances`.
fn pooled_tail_bounds(per_size: &[Vec<f64>], exceedances: &[f64], pool: Pool) -> Vec<TailBound> {
    let share = pool_share(per_size, pool);
    let mut pooled = Vec::new();
    let mut sequences = Vec::new();
    let mut independent = true;
    let mut observed_max_ratio: f64 = 1.0;
    for all in per_size {
        observed_max_ratio = all.iter().copied().fold(observed_max_ratio, f64::max);
        let seq = all[..all.len().min(share)].to_vec();
        independent &= ljung_box_passes(&seq, 10);
        pooled.extend_from_slice(&seq);
        sequences.push(seq);
    }
    pooled.sort_unstable_by(f64::total_cmp);
    let template = TailBound {
        kind: TailKind::Observed,
        ratio: observed_max_ratio,
        observed_max_ratio,
        exceedance: 0.0,
        shape: 0.0,
        samples: pooled.len(),
        independent,
        fit_accepted: false,
        per_size: BTreeMap::new(),
        additive_ns: 0.0,
        additive_exceedance: 0.0,
        notes: Vec::new(),
    };
    let fit = (pooled.len() >= MIN_SAMPLES).then(|| TailFit::of(&template, &pooled, &sequences));
    exceedances
        .iter()
        .map(|&exceedance| {
            let bound = TailBound {
                exceedance,
                ..template.clone()
            };
            bound_at(bound, fit.as_ref(), &pooled)
        })
        .collect()
}

/// How many launches of each size go into the pool: all of them, or as many as the size with
/// fewest has (sizes without any left aside).
fn pool_share(per_size: &[Vec<f64>], pool: Pool) -> usize {
    match pool {
        Pool::Balanced => per_size
            .iter()
            .map(|s| s.len())
            .filter(|&n| n > 0)
            .min()
            .unwrap_or(0),
        Pool::All => usize::MAX,
    }
}

/// `bound` (the pool's template at its exceedance) completed from the tail model `fit` of the
/// sorted `pooled` ratios, or from the largest ratio without one (too few samples).
fn bound_at(mut bound: TailBound, fit: Option<&TailFit>, pooled: &[f64]) -> TailBound {
    let observed_max_ratio = bound.observed_max_ratio;
    let Some(fit) = fit else {
        observed_margin(&mut bound, pooled.len());
        bound.notes.push(format!(
            "{} samples are too few for a tail model (need {MIN_SAMPLES}): twice the largest excess over the median",
            pooled.len()
        ));
        return bound;
    };
    fit.choose(&mut bound, pooled);
    bound.ratio = bound.ratio.max(observed_max_ratio);
    bound.notes.push(format!(
        "tail bound x{:.4} of the median (largest observed x{:.4}, {} samples)",
        bound.ratio, observed_max_ratio, bound.samples
    ));
    bound
}

/// No tail model: the largest ratio plus as much again (twice the largest excess over the
/// median), stated at no less than 1/(n+1), the chance that a fresh launch exceeds the largest of
/// n exchangeable ones.
fn observed_margin(bound: &mut TailBound, n: usize) {
    bound.kind = TailKind::Observed;
    bound.ratio = 1.0 + 2.0 * (bound.observed_max_ratio - 1.0);
    bound.exceedance = bound.exceedance.max(1.0 / (n as f64 + 1.0));
}

/// The lowest candidate threshold (with enough exceedances) above which the shape is stable:
/// the estimate at every higher threshold lies within [`SHAPE_Z`] of its own standard errors of
/// the estimate here. The highest usable one when none is.
fn stable_threshold(at_thresholds: &[GpdFit]) -> Option<GpdFit> {
    let fits: Vec<&GpdFit> = at_thresholds
        .iter()
        .filter(|g| g.excess.len() >= MIN_EXCEEDANCES)
        .collect();
    let stable = (0..fits.len()).find(|&i| {
        fits[i + 1..]
            .iter()
            .all(|h| (h.shape - fits[i].shape).abs() <= SHAPE_Z * h.shape_se())
    });
    let i = stable.unwrap_or(fits.len().checked_sub(1)?);
    fits.get(i).map(|g| (*g).clone())
}

/// What a tail model rests on, whatever the probability it is stated at: the GPD at the stable
/// threshold, whether it passed, and whether the tail is heavy.
struct TailFit {
    /// `None`: too few exceedances at every threshold.
    gpd: Option<GpdFit>,
    fit_accepted: bool,
    heavy: Option<GpdFit>,
    /// Reasons that hold at every probability.
    notes: Vec<String>,
}

impl TailFit {
    fn of(bound: &TailBound, sorted: &[f64], sequences: &[Vec<f64>]) -> TailFit {
        let fits = TailFit::at_thresholds(bound.independent, sorted, sequences);
        let mut notes = Vec::new();
        let Some(gpd) = stable_threshold(&fits) else {
            notes.push("too few exceedances at every threshold: exponential-tail quantile".into());
            return TailFit {
                gpd: None,
                fit_accepted: false,
                heavy: None,
                notes,
            };
        };
        let fit_accepted = gpd.ks_passes_bootstrap();
        TailFit::describe(&mut notes, bound.independent, &gpd, fit_accepted);
        let heavy = TailFit::heavy(fits, &gpd, bound.observed_max_ratio, sorted, &mut notes);
        TailFit {
            gpd: Some(gpd),
            fit_accepted,
            heavy,
            notes,
        }
    }

    /// The GPD fitted at each of [`THRESHOLDS`].
    fn at_thresholds(independent: bool, sorted: &[f64], sequences: &[Vec<f64>]) -> Vec<GpdFit> {
        // Dependent samples (a throttling episode is a run of slow launches) are declustered: the
        // tail is fitted to the maximum of each cluster of exceedances (Coles 2001, section 5.3).
        let fit_at = |q: f64| {
            if independent {
                GpdFit::at(sorted, q)
            } else {
                GpdFit::declustered(sorted, sequences, q)
            }
        };
        THRESHOLDS.iter().map(|&q| fit_at(q)).collect()
    }

    /// Notes what the fit at the stable threshold `gpd` rests on, and whether it passed.
    fn describe(notes: &mut Vec<String>, independent: bool, gpd: &GpdFit, fit_accepted: bool) {
        if !independent {
            notes.push(format!(
                "samples are autocorrelated (Ljung-Box, lag 10, 1%): tail fitted to {} cluster maxima (runs declustering, run length {DECLUSTER_RUN})",
                gpd.excess.len()
            ));
        }
        notes.push(format!(
            "threshold at the {} percentile, where the shape is stable: GPD shape {:.2} +- {:.2} ({} exceedances)",
            ordinal((gpd.quantile_level * 100.0).round() as usize),
            gpd.shape,
            gpd.shape_se(),
            gpd.excess.len()
        ));
        if !fit_accepted {
            notes.push(
                "GPD fit rejected by Kolmogorov-Smirnov at 5% (bootstrap critical value)".into(),
            );
        }
    }

    /// The heaviest significantly heavy fit of `fits`, or `gpd` when outliers dwarf the body
    /// (noted); `None` when the tail is not heavy.
    fn heavy(
        fits: Vec<GpdFit>,
        gpd: &GpdFit,
        observed_max_ratio: f64,
        sorted: &[f64],
        notes: &mut Vec<String>,
    ) -> Option<GpdFit> {
        let heavy = fits
            .into_iter()
            .filter(|g| g.excess.len() >= 2 * MIN_EXCEEDANCES && g.significantly_heavy())
            .max_by(|a, b| a.shape.total_cmp(&b.shape));
        // A few huge outliers over a tight body are a heavy tail even when too few to make the GPD
        // shape significant: the largest excess dwarfs the spread of the body.
        let body = quantile_sorted(sorted, 0.95) - 1.0;
        let outliers = body > 0.0 && observed_max_ratio - 1.0 > OUTLIER_FACTOR * body;
        let heavy = heavy.or_else(|| outliers.then(|| gpd.clone()));
        if outliers {
            notes.push(format!(
                "outliers: largest excess {:.1}% is over {OUTLIER_FACTOR}x the body's 95th percentile ({:.1}%)",
                (observed_max_ratio - 1.0) * 100.0,
                body * 100.0
            ));
        }
        heavy
    }

    /// The kind and ratio of `bound` at its exceedance.
    fn choose(&self, bound: &mut TailBound, sorted: &[f64]) {
        let p = bound.exceedance;
        bound.notes.extend(self.notes.iter().cloned());
        bound.fit_accepted = self.fit_accepted;
        let envelope = exponential_envelope(sorted, p);
        let Some(gpd) = &self.gpd else {
            without_gpd(bound, sorted, envelope);
            return;
        };
        bound.shape = gpd.shape;
        if let Some(tail) = &self.heavy {
            heavy_tail(bound, tail, p, envelope);
        } else if gpd.shape > 0.0 {
            possibly_heavy_tail(bound, gpd, p);
        } else if self.fit_accepted {
            bound.kind = TailKind::GpdBounded;
            bound.ratio = gpd.exponential_quantile(p);
            bound.notes.push(format!(
                "bounded tail (GPD shape {:.2}); exponential-tail quantile at {p:e}, which lies above it",
                gpd.shape
            ));
        } else {
            bound.kind = TailKind::ExponentialQuantile;
            bound.ratio = gpd.exponential_quantile(p).max(envelope);
            bound
                .notes
                .push(format!("exponential tail; quantile at {p:e}"));
        }
    }
}

/// `bound` where no GPD could be fitted: the exponential envelope where some threshold leaves
/// enough exceedances, else a stated margin over the largest sample.
fn without_gpd(bound: &mut TailBound, sorted: &[f64], envelope: f64) {
    if envelope.is_finite() {
        bound.kind = TailKind::ExponentialQuantile;
        bound.ratio = envelope;
    } else {
        // Fewer than MIN_EXCEEDANCES above every threshold (ties: equal times, a coarse
        // timer): there is no tail to model, so no probability below 1/(n+1) is claimed,
        // and the bound is a stated margin over the largest, as for too few samples.
        observed_margin(bound, sorted.len());
        bound.notes.push(format!(
            "fewer than {MIN_EXCEEDANCES} samples above every candidate threshold (equal or quantised times): no tail model; twice the largest excess over the median, stated at 1/(n+1)"
        ));
    }
}

/// `bound` on a heavy tail (`tail`, its GPD fit): stated at a weaker exceedance than `p`.
///
/// With a shape well above 0 the quantile at 1e-9 runs to thousands of times the
/// median, which no scheduler can use. State the bound at a probability a campaign of
/// tens of thousands of launches can support instead, and say so.
fn heavy_tail(bound: &mut TailBound, tail: &GpdFit, p: f64, envelope: f64) {
    let p = p.max(HEAVY_TAIL_EXCEEDANCE);
    let upper = tail.upper_shape().max(0.0);
    bound.kind = TailKind::HeavyTail;
    bound.shape = tail.shape;
    bound.exceedance = p;
    bound.ratio = envelope
        .max(tail.quantile(p, upper))
        .max(1.0 + 2.0 * (bound.observed_max_ratio - 1.0));
    bound.notes.push(format!(
        "heavy tail (GPD shape {:.2}, upper limit {upper:.2}): bound stated at exceedance {p:e} per launch, not the configured one",
        tail.shape
    ));
}

/// `bound` where the GPD shape is above 0 but not significantly so.
///
/// The tail may be heavy: the quantile at the shape's upper confidence limit. At 1e-9
/// it runs to hundreds of times the median on a few dozen exceedances, so, as for a
/// heavy tail, it is stated at the probability the data can support, and never below
/// the exponential quantile at the configured one.
fn possibly_heavy_tail(bound: &mut TailBound, gpd: &GpdFit, p: f64) {
    let upper = gpd.upper_shape();
    let stated = p.max(HEAVY_TAIL_EXCEEDANCE);
    bound.kind = TailKind::GpdUpperShape;
    bound.exceedance = stated;
    bound.ratio = gpd.quantile(stated, upper).max(gpd.exponential_quantile(p));
    bound.notes.push(format!(
        "GPD shape {:.2} > 0 but not significant: quantile at {stated:e} with the shape's upper confidence limit {upper:.2}, at least the exponential quantile at {p:e}",
        gpd.shape
    ));
}

/// Largest exponential-tail quantile over the thresholds that leave enough exceedances.
fn exponential_envelope(sorted: &[f64], p: f64) -> f64 {
    THRESHOLDS
        .iter()
        .filter_map(|&q| {
            let (u, excess) = exceedances(sorted, q);
            (excess.len() >= MIN_EXCEEDANCES).then(|| {
                let zeta = excess.len() as f64 / sorted.len() as f64;
                let mean = excess.iter().sum::<f64>() / excess.len() as f64;
                u + mean * (zeta / p).ln().max(0.0)
            })
        })
        .fold(f64::NEG_INFINITY, f64::max)
}

/// A generalised Pareto fit to the exceedances over one threshold.
#[derive(Debug, Clone)]
struct GpdFit {
    /// The quantile of the ratios the threshold sits at.
    quantile_level: f64,
    threshold: f64,
    zeta: f64,
    shape: f64,
    scale: f64,
    excess: Vec<f64>,
}

impl GpdFit {
    /// Fit to the exceedances of the pooled, sorted ratios over their quantile `q`.
    fn at(sorted: &[f64], q: f64) -> GpdFit {
        let (threshold, excess) = exceedances(sorted, q);
        let zeta = excess.len() as f64 / sorted.len() as f64;
        GpdFit::from_excess(q, threshold, excess, zeta)
    }

    /// Fit to cluster maxima: within each launch-order sequence, exceedances of the threshold
    /// separated by fewer than [`DECLUSTER_RUN`] launches form one cluster. The exceedance rate
    /// becomes clusters per launch, which is what a bound per launch needs.
    fn declustered(sorted: &[f64], sequences: &[Vec<f64>], q: f64) -> GpdFit {
        let threshold = quantile_sorted(sorted, q);
        let mut maxima = Vec::new();
        for seq in sequences {
            let mut current: Option<(f64, usize)> = None;
            for (i, &r) in seq.iter().enumerate() {
                if r > threshold {
                    current = match current {
                        Some((m, last)) if i - last < DECLUSTER_RUN => Some((m.max(r), i)),
                        Some((m, _)) => {
                            maxima.push(m - threshold);
                            Some((r, i))
                        }
                        None => Some((r, i)),
                    };
                }
            }
            maxima.extend(current.map(|(m, _)| m - threshold));
        }
        maxima.sort_unstable_by(f64::total_cmp);
        let zeta = maxima.len() as f64 / sorted.len().max(1) as f64;
        GpdFit::from_excess(q, threshold, maxima, zeta)
    }

    /// Probability-weighted-moment estimates (Hosking & Wallis 1987) from sorted excesses.
    fn from_excess(quantile_level: f64, threshold: f64, excess: Vec<f64>, zeta: f64) -> GpdFit {
        let (shape, scale) = pwm(&excess);
        GpdFit {
            quantile_level,
            threshold,
            zeta,
            shape,
            scale,
            excess,
        }
    }

    /// Asymptotic standard error of the shape, (1 + shape) / sqrt(n) (the inverse Fisher
    /// information of the GPD likelihood).
    fn shape_se(&self) -> f64 {
        (1.0 + self.shape).abs() / (self.excess.len().max(1) as f64).sqrt()
    }

    /// The shape's upper confidence limit, [`SHAPE_Z`] standard errors above the estimate.
    fn upper_shape(&self) -> f64 {
        self.shape + SHAPE_Z * self.shape_se()
    }

    fn cdf(&self, y: f64) -> f64 {
        gpd_cdf(y, self.shape, self.scale)
    }

    fn quantile(&self, p: f64, shape: f64) -> f64 {
        let r = (self.zeta / p).max(1.0);
        let excess = if shape.abs() < 1e-9 {
            self.scale * r.ln()
        } else {
            self.scale / shape * (r.powf(shape) - 1.0)
        };
        self.threshold + excess
    }

    /// The quantile of an exponential tail (GPD shape 0) with the excesses' mean as its scale.
    /// For a tail that is bounded (shape below 0) this lies above the true quantile, which is the
    /// classic conservative choice of measurement-based probabilistic timing analysis; and its
    /// one parameter, a mean, is estimated far more steadily than a negative shape, whose
    /// endpoint swung by +-4% between campaigns of the same kernel.
    fn exponential_quantile(&self, p: f64) -> f64 {
        let n = self.excess.len() as f64;
        let mean = self.excess.iter().sum::<f64>() / n.max(1.0);
        self.threshold + mean * (self.zeta / p).max(1.0).ln()
    }

    /// A shape more than [`SHAPE_Z`] standard errors above 0.
    fn significantly_heavy(&self) -> bool {
        self.shape - SHAPE_Z * self.shape_se() > 0.0
    }

    /// Kolmogorov-Smirnov against the fitted GPD at 5%, with the critical value from a
    /// parametric bootstrap: samples of the same size drawn from the fitted GPD, refitted, and
    /// their statistic's 95th percentile taken. Seeded from the data, so it is reproducible.
    fn ks_passes_bootstrap(&self) -> bool {
        let n = self.excess.len();
        if n < MIN_EXCEEDANCES {
            return false;
        }
        let d = ks_statistic(&self.excess, |y| self.cdf(y));
        let seed = self
            .excess
            .iter()
            .fold(n as u64, |h, y| h.rotate_left(7) ^ y.to_bits());
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut replicate = vec![0.0; n];
        let mut ds: Vec<f64> = (0..BOOTSTRAP)
            .map(|_| {
                for y in replicate.iter_mut() {
                    *y = gpd_draw(&mut rng, self.shape, self.scale);
                }
                replicate.sort_unstable_by(f64::total_cmp);
                let (shape, scale) = pwm(&replicate);
                ks_statistic(&replicate, |y| gpd_cdf(y, shape, scale))
            })
            .collect();
        ds.sort_unstable_by(f64::total_cmp);
        d <= quantile_sorted(&ds, 0.95)
    }
}

/// PWM shape and scale from sorted excesses.
fn pwm(excess: &[f64]) -> (f64, f64) {
    let n = excess.len() as f64;
    let a0 = excess.iter().sum::<f64>() / n.max(1.0);
    let a1 = excess
        .iter()
        .enumerate()
        .map(|(i, y)| y * (n - 1.0 - i as f64) / (n - 1.0).max(1.0))
        .sum::<f64>()
        / n.max(1.0);
    let denom = a0 - 2.0 * a1;
    if denom.abs() < 1e-15 || a0 <= 0.0 {
        (0.0, a0.max(1e-12))
    } else {
        let k = a0 / denom - 2.0;
        (-k, (2.0 * a0 * a1 / denom).max(1e-12))
    }
}

fn gpd_cdf(y: f64, shape: f64, scale: f64) -> f64 {
    if shape.abs() < 1e-9 {
        1.0 - (-y / scale).exp()
    } else {
        let base = (1.0 + shape * y / scale).max(0.0);
        1.0 - base.powf(-1.0 / shape)
    }
}

/// One draw from a GPD by inversion.
fn gpd_draw(rng: &mut ChaCha8Rng, shape: f64, scale: f64) -> f64 {
    let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    if shape.abs() < 1e-9 {
        -scale * u.ln()
    } else {
        scale / shape * (u.powf(-shape) - 1.0)
    }
}

/// Kolmogorov-Smirnov distance between sorted values and a distribution function.
fn ks_statistic(sorted: &[f64], cdf: impl Fn(f64) -> f64) -> f64 {
    let n = sorted.len() as f64;
    sorted
        .iter()
        .enumerate()
        .map(|(i, &y)| {
            let f = cdf(y);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

/// Threshold at quantile `q` and the sorted excesses above it.
fn exceedances(sorted: &[f64], q: f64) -> (f64, Vec<f64>) {
    let u = quantile_sorted(sorted, q);
    let excess = sorted.iter().filter(|&&r| r > u).map(|r| r - u).collect();
    (u, excess)
}

/// Ljung-Box portmanteau test at 1%: true when no autocorrelation up to `lags` is detected.
fn ljung_box_passes(seq: &[f64], lags: usize) -> bool {
    let n = seq.len();
    if n <= 2 * lags {
        return true;
    }
    let mean = seq.iter().sum::<f64>() / n as f64;
    let var: f64 = seq.iter().map(|x| (x - mean).powi(2)).sum();
    if var <= 0.0 {
        return true;
    }
    let q: f64 = (1..=lags)
        .map(|k| {
            let rho = (k..n)
                .map(|t| (seq[t] - mean) * (seq[t - k] - mean))
                .sum::<f64>()
                / var;
            rho * rho / (n - k) as f64
        })
        .sum::<f64>()
        * (n * (n + 2)) as f64;
    // Chi-squared with 10 degrees of freedom, upper 1% point.
    q <= 23.209
}

/// Linear-interpolated quantile of sorted values.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Quantile of unsorted integer samples, as [`quantile_sorted`] would give it after a sort, by
/// selection (linear time: every size's median is taken this way, again and again).
pub fn quantile_u64(samples: &[u64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut v = samples.to_vec();
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    let (_, &mut below, above) = v.select_nth_unstable(lo);
    let below = below as f64;
    if hi == lo {
        return below;
    }
    let next = above.iter().copied().min().map_or(below, |t| t as f64);
    below + (next - below) * (pos - lo as f64)
}

/// `n` as an English ordinal, for notes and messages: 91st, 92nd, 93rd, 94th, 111th.
pub fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_read_as_english() {
        let said: Vec<String> = [80, 91, 92, 93, 97, 111, 112, 113].map(ordinal).to_vec();
        assert_eq!(
            said,
            ["80th", "91st", "92nd", "93rd", "97th", "111th", "112th", "113th"]
        );
    }
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn one_size(s: &[u64]) -> Observations {
        Observations {
            by_size: [(8, s.to_vec())].into(),
            ..Observations::default()
        }
    }

    fn draw(n: usize, seed: u64, f: impl Fn(&mut ChaCha8Rng) -> f64) -> Vec<u64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| (100_000.0 * f(&mut rng)) as u64).collect()
    }

    /// The textbook two-sample statistic, against which the one-pool version is checked.
    fn ks_two_sample(a: &[f64], b: &[f64]) -> f64 {
        let (mut i, mut j, mut d) = (0, 0, 0.0f64);
        while i < a.len() && j < b.len() {
            let x = a[i].min(b[j]);
            while i < a.len() && a[i] <= x {
                i += 1;
            }
            while j < b.len() && b[j] <= x {
                j += 1;
            }
            d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
        }
        d
    }

    #[test]
    fn the_distance_to_the_rest_of_the_pool_is_the_two_sample_distance() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for sizes in [2usize, 3, 17] {
            let per_size: Vec<Vec<f64>> = (0..sizes)
                .map(|i| {
                    let mut r: Vec<f64> = (0..50 + 10 * i)
                        .map(|_| f64::from(rng.random_range(0..40u32)) * (1.0 + i as f64 / 50.0))
                        .collect();
                    r.sort_unstable_by(f64::total_cmp);
                    r
                })
                .collect();
            let mut all: Vec<f64> = per_size.iter().flatten().copied().collect();
            all.sort_unstable_by(f64::total_cmp);
            for (i, own) in per_size.iter().enumerate() {
                let mut rest: Vec<f64> = per_size
                    .iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .flat_map(|(_, r)| r.iter().copied())
                    .collect();
                rest.sort_unstable_by(f64::total_cmp);
                assert_eq!(ks_against_the_rest(own, &all), ks_two_sample(own, &rest));
            }
        }
    }

    #[test]
    fn quantile_by_selection_equals_quantile_after_a_sort() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for n in [1usize, 2, 3, 10, 199, 200] {
            let s: Vec<u64> = (0..n).map(|_| rng.random_range(0..1000)).collect();
            let mut sorted: Vec<f64> = s.iter().map(|&t| t as f64).collect();
            sorted.sort_unstable_by(f64::total_cmp);
            for q in [0.0, 0.1, 0.5, 0.9, 0.99, 1.0] {
                assert_eq!(
                    quantile_u64(&s, q),
                    quantile_sorted(&sorted, q),
                    "n {n} q {q}"
                );
            }
        }
        assert_eq!(quantile_u64(&[], 0.5), 0.0);
    }

    #[test]
    fn bounded_jitter_gets_a_tight_gpd_bound() {
        let s = draw(1000, 1, |r| 1.0 + 0.04 * r.random::<f64>());
        let b = tail_bound(&one_size(&s), 1e-9);
        assert_eq!(b.kind, TailKind::GpdBounded, "{b:?}");
        assert!(b.ratio >= b.observed_max_ratio);
        assert!(b.ratio < 1.10, "{b:?}");
    }

    #[test]
    fn heavy_tails_are_flagged_and_stated_at_a_supported_probability() {
        let s = draw(1000, 2, |r| {
            1.0 + 0.02 * (r.random::<f64>().powf(-1.0 / 1.2) - 1.0)
        });
        let b = tail_bound(&one_size(&s), 1e-9);
        assert_eq!(b.kind, TailKind::HeavyTail, "{b:?}");
        assert!(b.shape > 0.0);
        assert_eq!(b.exceedance, HEAVY_TAIL_EXCEEDANCE);
        assert!(b.ratio >= b.observed_max_ratio);
    }

    #[test]
    fn autocorrelated_samples_are_reported() {
        // A slow drift: every sample close to the one before.
        let s: Vec<u64> = (0..400).map(|i| 100_000 + (i % 200) * 50).collect();
        let b = tail_bound(&one_size(&s), 1e-9);
        assert!(!b.independent);
        assert_ne!(b.kind, TailKind::HeavyTail);
    }

    /// Equal or quantised times leave fewer than MIN_EXCEEDANCES above every threshold: without
    /// a tail model the bound must not claim the configured probability on the bare maximum
    /// (it did: more samples gave a lower bound and a stronger claim than fewer).
    #[test]
    fn tied_samples_claim_no_more_than_their_count_supports() {
        let equal = vec![10_000u64; 1000];
        let quantised: Vec<u64> = (0..200)
            .map(|i| if i % 25 == 0 { 10_048 } else { 10_016 })
            .collect();
        let mut outlier = vec![10_000u64; 199];
        outlier.push(50_000);
        for (samples, ratio) in [
            (&equal, 1.0),
            (&quantised, 1.0 + 2.0 * 32.0 / 10_016.0),
            (&outlier, 9.0),
        ] {
            let b = tail_bound(&one_size(samples), 1e-9);
            assert_eq!(b.kind, TailKind::Observed, "{:?}", b.notes);
            assert!(
                (b.ratio - ratio).abs() < 1e-12,
                "{} against {ratio}",
                b.ratio
            );
            let n = samples.len() as f64;
            assert!(
                b.exceedance >= 1.0 / (n + 1.0),
                "stated at {}",
                b.exceedance
            );
        }
        // ...and as many samples of the same kind with fewer ties still get a model.
        let spread: Vec<u64> = (0..1000).map(|i| 10_000 + (i * 37) % 101).collect();
        assert_ne!(
            tail_bound(&one_size(&spread), 1e-9).kind,
            TailKind::Observed
        );
    }

    #[test]
    fn few_samples_use_the_observed_maximum() {
        let s = [100, 101, 130];
        let b = tail_bound(&one_size(&s), 1e-9);
        assert_eq!(b.kind, TailKind::Observed);
        assert!((b.ratio - (1.0 + 2.0 * (130.0 / 101.0 - 1.0))).abs() < 1e-12);
    }
}
