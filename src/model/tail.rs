//! Tail models: how far above its typical time a kernel can run, at a stated exceedance
//! probability per launch.
//!
//! Jitter on a GPU is mostly multiplicative (clock dithering, DRAM refresh, interrupts scale with
//! the work), so the model works on ratios `time / median at that size`, pooled across every
//! measured size of a kernel. Pooling gives hundreds of tail samples from a few sizes and lets the
//! tail bound apply at sizes that were never measured.
//!
//! The method is peaks over threshold: exceedances of the ratios over a high quantile follow a
//! generalised Pareto distribution (Pickands-Balkema-de Haan), fitted by probability-weighted
//! moments (Hosking & Wallis 1987). Three outcomes, each reported:
//! - `gpd-bounded`: the shape is not positive and the fit passes a Kolmogorov-Smirnov check. The
//!   bound is the quantile, at the target probability, of an exponential tail (shape 0) fitted
//!   over the same threshold: above the bounded tail's own quantile, the conservative choice of
//!   measurement-based probabilistic timing analysis, and steady from one campaign to the next
//!   (the endpoint of a fitted negative shape is not).
//!   Samples that fail the Ljung-Box independence check (a throttling episode is a run of slow
//!   launches) are declustered first: the fit uses the maximum of each cluster of exceedances.
//! - `exponential-envelope`: the shape is positive but not significantly so, or the fit fails its
//!   check; the same exponential-tail quantile is used.
//! - `heavy-tail`: the shape is more than two standard errors above 0 at some threshold. The
//!   quantile at 1e-9 would be thousands of times the median, so the bound is stated at 1e-4 per
//!   launch (reported in `exceedance`), and is at least the exponential envelope and twice the
//!   worst excess observed.
//! - `observed`: too few samples for any model; the ratio of the largest sample is used.
//!
//! In every case the result is never below the largest observed ratio.

use serde::{Deserialize, Serialize};

/// Which tail bound was used, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TailKind {
    GpdBounded,
    /// Named `exponential-envelope` on the wire and on disk, as before it became a single
    /// exponential-tail quantile, so clients and stored calibrations keep working.
    #[serde(rename = "exponential-envelope")]
    Exponential,
    /// The shape is significantly positive: no probability is claimed.
    HeavyTail,
    Observed,
}

/// The tail bound of a kernel as a ratio over its typical time, with the evidence behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TailBound {
    pub kind: TailKind,
    /// Bound on time / median, never below `observed_max_ratio`.
    pub ratio: f64,
    pub observed_max_ratio: f64,
    /// Exceedance probability per launch the bound is stated at.
    pub exceedance: f64,
    /// Fitted GPD shape (0 when not fitted); positive means a heavy tail.
    pub shape: f64,
    pub samples: usize,
    pub independent: bool,
    pub fit_accepted: bool,
    /// Plain-language reasons for the choice, for `GetBoundInfo` and reports.
    pub notes: Vec<String>,
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

impl std::fmt::Display for TailKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TailKind::GpdBounded => "gpd-bounded",
            TailKind::Exponential => "exponential-envelope",
            TailKind::HeavyTail => "heavy-tail",
            TailKind::Observed => "observed",
        })
    }
}

const MIN_EXCEEDANCES: usize = 10;
/// Exceedances closer than this many launches belong to one cluster.
const DECLUSTER_RUN: usize = 10;
/// A largest excess this many times the body's 95th-percentile excess marks a heavy tail.
const OUTLIER_FACTOR: f64 = 4.0;
/// The exceedance a heavy-tailed bound is stated at: about what a few thousand launches support.
const HEAVY_TAIL_EXCEEDANCE: f64 = 1e-4;
const THRESHOLDS: [f64; 4] = [0.90, 0.95, 0.98, 0.99];

/// Whether the pooled tail of `obs` is heavy (a campaign then takes more samples).
pub fn is_heavy(obs: &super::Observations, config: &super::MethodConfig) -> bool {
    let per_size: Vec<&[u64]> = obs.by_size.values().map(Vec::as_slice).collect();
    pooled_tail_bound(&per_size, config.exceedance, Pool::All).kind == TailKind::HeavyTail
}

/// Tail bound from per-size sample sequences (in launch order), fitted to an equal number of
/// launches from each size and never below the largest ratio observed in any launch.
pub fn tail_bound(per_size: &[&[u64]], exceedance: f64) -> TailBound {
    pooled_tail_bound(per_size, exceedance, Pool::Balanced)
}

fn pooled_tail_bound(per_size: &[&[u64]], exceedance: f64, pool: Pool) -> TailBound {
    let share = match pool {
        Pool::Balanced => per_size
            .iter()
            .map(|s| s.len())
            .filter(|&n| n > 0)
            .min()
            .unwrap_or(0),
        Pool::All => usize::MAX,
    };
    let mut ratios = Vec::new();
    let mut sequences = Vec::new();
    let mut independent = true;
    let mut observed_max_ratio: f64 = 1.0;
    for samples in per_size {
        let median = quantile_u64(samples, 0.5);
        if median <= 0.0 {
            continue;
        }
        let max = samples.iter().max().copied().unwrap_or(0);
        observed_max_ratio = observed_max_ratio.max(max as f64 / median);
        let seq: Vec<f64> = samples[..samples.len().min(share)]
            .iter()
            .map(|&t| t as f64 / median)
            .collect();
        independent &= ljung_box_passes(&seq, 10);
        ratios.extend_from_slice(&seq);
        sequences.push(seq);
    }
    ratios.sort_by(f64::total_cmp);
    let mut bound = TailBound {
        kind: TailKind::Observed,
        ratio: observed_max_ratio,
        observed_max_ratio,
        exceedance,
        shape: 0.0,
        samples: ratios.len(),
        independent,
        fit_accepted: false,
        notes: Vec::new(),
    };
    if ratios.len() * 10 < MIN_EXCEEDANCES * 100 {
        bound.notes.push(format!(
            "{} samples are too few for a tail model (need {}); using the largest observed",
            ratios.len(),
            MIN_EXCEEDANCES * 10
        ));
        return bound;
    }
    choose(&mut bound, &ratios, &sequences);
    bound.ratio = bound.ratio.max(observed_max_ratio);
    bound.notes.push(format!(
        "tail bound x{:.4} of the median (largest observed x{:.4}, {} samples)",
        bound.ratio, observed_max_ratio, bound.samples
    ));
    bound
}

fn choose(bound: &mut TailBound, sorted: &[f64], sequences: &[Vec<f64>]) {
    let p = bound.exceedance;
    // Dependent samples (a throttling episode is a run of slow launches) are declustered: the
    // tail is fitted to the maximum of each cluster of exceedances (Coles 2001, section 5.3).
    let gpd = if bound.independent {
        GpdFit::at(sorted, THRESHOLDS[0])
    } else {
        GpdFit::declustered(sorted, sequences, THRESHOLDS[0])
    };
    bound.shape = gpd.shape;
    bound.fit_accepted = gpd.ks_passes(sorted);
    let envelope = exponential_envelope(sorted, p);
    if !bound.independent {
        bound.notes.push(format!(
            "samples are autocorrelated (Ljung-Box, lag 10, 1%): tail fitted to {} cluster maxima (runs declustering, run length {DECLUSTER_RUN})",
            gpd.excess.len()
        ));
    }
    if gpd.shape > 0.0 {
        bound
            .notes
            .push(format!("heavy tail: GPD shape {:.2} > 0", gpd.shape));
    }
    if !bound.fit_accepted {
        bound
            .notes
            .push("GPD fit rejected by Kolmogorov-Smirnov at 5%".into());
    }
    let heavy = THRESHOLDS
        .iter()
        .map(|&q| GpdFit::at(sorted, q))
        .filter(|g| g.excess.len() >= 2 * MIN_EXCEEDANCES && g.significantly_heavy())
        .max_by(|a, b| a.shape.total_cmp(&b.shape));
    // A few huge outliers over a tight body are a heavy tail even when too few to make the GPD
    // shape significant: the largest excess dwarfs the spread of the body.
    let body = quantile_sorted(sorted, 0.95) - 1.0;
    let outliers = body > 0.0 && bound.observed_max_ratio - 1.0 > OUTLIER_FACTOR * body;
    let heavy = heavy.or_else(|| {
        outliers.then(|| {
            THRESHOLDS
                .iter()
                .map(|&q| GpdFit::at(sorted, q))
                .filter(|g| g.excess.len() >= MIN_EXCEEDANCES)
                .max_by(|a, b| a.shape.total_cmp(&b.shape))
        })?
    });
    if outliers {
        bound.notes.push(format!(
            "outliers: largest excess {:.1}% is over {OUTLIER_FACTOR}x the body's 95th percentile ({:.1}%)",
            (bound.observed_max_ratio - 1.0) * 100.0,
            body * 100.0
        ));
    }
    if let Some(tail) = heavy {
        // With a shape well above 0 the quantile at 1e-9 runs to thousands of times the median,
        // which no scheduler can use. State the bound at the smallest probability a campaign's
        // few hundred samples can support instead, and say so.
        let p = bound.exceedance.max(HEAVY_TAIL_EXCEEDANCE);
        bound.kind = TailKind::HeavyTail;
        bound.shape = tail.shape;
        bound.exceedance = p;
        bound.ratio = envelope
            .max(tail.quantile(p, tail.shape.max(0.0)))
            .max(1.0 + 2.0 * (bound.observed_max_ratio - 1.0));
        bound.notes.push(format!(
            "heavy tail (GPD shape {:.2}): bound stated at exceedance {p:e} per launch, not the configured one",
            tail.shape
        ));
    } else if gpd.excess.len() >= MIN_EXCEEDANCES && bound.fit_accepted && gpd.shape <= 0.0 {
        bound.kind = TailKind::GpdBounded;
        bound.ratio = gpd.exponential_quantile(p);
        bound.notes.push(format!(
            "bounded tail (GPD shape {:.2}); exponential-tail quantile at {p:e}, which lies above it",
            gpd.shape
        ));
    } else {
        bound.kind = TailKind::Exponential;
        bound.ratio = gpd.exponential_quantile(p);
        bound
            .notes
            .push(format!("exponential tail; quantile at {p:e}"));
    }
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
struct GpdFit {
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
        GpdFit::from_excess(threshold, excess, zeta)
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
        maxima.sort_by(f64::total_cmp);
        let zeta = maxima.len() as f64 / sorted.len().max(1) as f64;
        GpdFit::from_excess(threshold, maxima, zeta)
    }

    /// Probability-weighted-moment estimates (Hosking & Wallis 1987) from sorted excesses.
    fn from_excess(threshold: f64, excess: Vec<f64>, zeta: f64) -> GpdFit {
        let n = excess.len() as f64;
        let a0 = excess.iter().sum::<f64>() / n;
        let a1 = excess
            .iter()
            .enumerate()
            .map(|(i, y)| y * (n - 1.0 - i as f64) / (n - 1.0).max(1.0))
            .sum::<f64>()
            / n;
        let denom = a0 - 2.0 * a1;
        let (shape, scale) = if denom.abs() < 1e-15 || a0 <= 0.0 {
            (0.0, a0.max(1e-12))
        } else {
            let k = a0 / denom - 2.0;
            (-k, (2.0 * a0 * a1 / denom).max(1e-12))
        };
        GpdFit {
            threshold,
            zeta,
            shape,
            scale,
            excess,
        }
    }

    fn cdf(&self, y: f64, shape: f64) -> f64 {
        if shape.abs() < 1e-9 {
            1.0 - (-y / self.scale).exp()
        } else {
            let base = (1.0 + shape * y / self.scale).max(0.0);
            1.0 - base.powf(-1.0 / shape)
        }
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

    /// A shape more than two standard errors above 0.
    fn significantly_heavy(&self) -> bool {
        let se = (1.0 - self.shape).abs() / (self.excess.len() as f64).sqrt();
        self.shape - 2.0 * se > 0.0
    }

    /// Kolmogorov-Smirnov against the fitted GPD at 5% (critical value 1.36 / sqrt(n)).
    fn ks_passes(&self, _sorted: &[f64]) -> bool {
        let n = self.excess.len() as f64;
        let d = self
            .excess
            .iter()
            .enumerate()
            .map(|(i, &y)| {
                let f = self.cdf(y, self.shape);
                (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
            })
            .fold(0.0, f64::max);
        d <= 1.36 / n.sqrt()
    }
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

/// Quantile of unsorted integer samples.
pub fn quantile_u64(samples: &[u64], q: f64) -> f64 {
    let mut v: Vec<f64> = samples.iter().map(|&t| t as f64).collect();
    v.sort_by(f64::total_cmp);
    quantile_sorted(&v, q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn draw(n: usize, seed: u64, f: impl Fn(&mut ChaCha8Rng) -> f64) -> Vec<u64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| (100_000.0 * f(&mut rng)) as u64).collect()
    }

    #[test]
    fn bounded_jitter_gets_a_tight_gpd_bound() {
        let s = draw(1000, 1, |r| 1.0 + 0.04 * r.random::<f64>());
        let b = tail_bound(&[&s], 1e-9);
        assert_eq!(b.kind, TailKind::GpdBounded, "{b:?}");
        assert!(b.ratio >= b.observed_max_ratio);
        assert!(b.ratio < 1.10, "{b:?}");
    }

    #[test]
    fn heavy_tails_are_flagged_and_stated_at_a_supported_probability() {
        let s = draw(1000, 2, |r| {
            1.0 + 0.02 * (r.random::<f64>().powf(-1.0 / 1.2) - 1.0)
        });
        let b = tail_bound(&[&s], 1e-9);
        assert_eq!(b.kind, TailKind::HeavyTail, "{b:?}");
        assert!(b.shape > 0.0);
        assert_eq!(b.exceedance, HEAVY_TAIL_EXCEEDANCE);
        assert!(b.ratio >= b.observed_max_ratio);
    }

    #[test]
    fn autocorrelated_samples_are_reported() {
        // A slow drift: every sample close to the one before.
        let s: Vec<u64> = (0..400).map(|i| 100_000 + (i % 200) * 50).collect();
        let b = tail_bound(&[&s], 1e-9);
        assert!(!b.independent);
        assert_eq!(b.kind, TailKind::Exponential);
    }

    #[test]
    fn few_samples_use_the_observed_maximum() {
        let s = [100, 101, 130];
        let b = tail_bound(&[&s], 1e-9);
        assert_eq!(b.kind, TailKind::Observed);
        assert!((b.ratio - 130.0 / 101.0).abs() < 1e-12);
    }
}
