//! Sustained slowdowns of the device: runs of consecutive launches that all ran slower than the
//! kernel's typical time, as clock throttling makes them. Found in launch-ordered series of any
//! kernel (or of the delay probe), and allowed for in every kernel's bound.
//!
//! Why device-wide: a throttling episode slows whatever runs during it, so it is a property of
//! the device and its cooling or power limit, not of one kernel. One kernel's campaign of a few
//! hundred launches per size often contains no episode at all, and its tail, fitted to what it
//! saw, is then exceeded by the first throttled launch (issue 13's foreign report set: 0.1-3%
//! under at measured sizes, from episodes of 48 launches at 93% clock). What the whole device
//! showed, over every kernel of a job and the delay probe, is far more likely to include them.
//!
//! How a run is found: within one series, the median of every window of [`WINDOW`] consecutive
//! launches is compared with the series' median. Independent jitter moves a window median by
//! about 1.25 σ/√W (σ from the series' median absolute deviation, robust to the tail); a window
//! median more than [`Z`] of those above the series' median, and at least [`MIN_SLOWDOWN`], is
//! a sustained slowdown, not jitter. Heavy tails do not trigger it (a median ignores a few huge
//! launches), nor does additive jitter (it is independent from launch to launch).
//!
//! What it costs a bound: a launch during an episode is the kernel's own jitter times the
//! slowdown. Episodes cover a share π of launches, so a bound stated at exceedance p must cover
//! the slowed launches at their own exceedance p/π: bound ratio ≥ (1 + slowdown) × (the kernel's
//! tail ratio at p/π) ([`super::tail::TailBound::include_device_slowdown`]). π is taken at an
//! upper limit (two more of the longest run than were seen), which only raises the bound.

use super::tail::quantile_sorted;

/// Launches per window: shorter than any throttling episode that matters (tens of launches),
/// long enough for its median to be steady.
pub const WINDOW: usize = 16;
/// How many standard errors of a window median a run must stand above the series' median.
pub const Z: f64 = 6.0;
/// Slowdowns smaller than this are left to the kernel's own tail (it covers them with room).
pub const MIN_SLOWDOWN: f64 = 0.005;

/// What the device showed: the deepest sustained slowdown and how many launches such runs cover.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slowdown {
    /// Fractional slowdown of the deepest run (0.08: launches 8% slower than typical).
    pub depth: f64,
    /// Upper limit on the share of launches inside runs (see the module notes).
    pub share: f64,
    pub runs: usize,
    pub launches_examined: usize,
}

impl Slowdown {
    pub fn note(&self) -> String {
        format!(
            "the device showed sustained slowdowns (throttling): {} run(s) of slow launches (windows of {WINDOW}), {:.1}% slower than typical, in {} launches examined; every bound allows for it on up to {:.2}% of launches",
            self.runs,
            self.depth * 100.0,
            self.launches_examined,
            self.share * 100.0
        )
    }
}

/// The sustained slowdowns in `series` (each one kernel at one size, or the delay probe, in launch
/// order), or `None` when no run stands out.
pub fn sustained_slowdown<'a>(series: impl IntoIterator<Item = &'a [u64]>) -> Option<Slowdown> {
    let mut evidence = Evidence::default();
    for s in series {
        evidence.add(s);
    }
    evidence.slowdown()
}

/// What the series looked at so far showed, kept as a few sums so that a job can add every
/// kernel's launches as it measures them without holding them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Evidence {
    runs: usize,
    slowed: usize,
    examined: usize,
    longest: usize,
    /// Sum of the runs' precision weights (1 / standard error²) and of weight × depth.
    weights: f64,
    weighted: f64,
    /// The deepest run less two of its standard errors.
    deepest: f64,
}

impl Evidence {
    /// Look for runs in one launch-ordered series.
    pub fn add(&mut self, series: &[u64]) {
        self.examined += series.len();
        for run in slow_runs(series) {
            let w = 1.0 / run.se.max(1e-6).powi(2);
            self.weights += w;
            self.weighted += w * run.depth;
            self.deepest = self.deepest.max(run.depth - 2.0 * run.se);
            self.runs += 1;
            self.slowed += run.len;
            self.longest = self.longest.max(run.len);
        }
    }

    /// The slowdown to allow for, `None` when no run stood out. Depth: the runs' precision-weighted
    /// mean plus two of its standard errors, or a run significantly deeper than that, whichever is
    /// larger (the largest single estimate would be the noisiest kernel's). Share: the launches
    /// in runs plus two more of the longest run, over the launches examined.
    pub fn slowdown(&self) -> Option<Slowdown> {
        if self.runs == 0 || self.examined == 0 {
            return None;
        }
        let depth = (self.weighted / self.weights + 2.0 / self.weights.sqrt())
            .max(self.deepest)
            .max(MIN_SLOWDOWN);
        Some(Slowdown {
            depth,
            share: ((self.slowed + 2 * self.longest) as f64 / self.examined as f64).min(1.0),
            runs: self.runs,
            launches_examined: self.examined,
        })
    }
}

/// `series` without the launches inside its runs: what the delay probe's rare fixed delays are
/// fitted to (a throttled run is a slowdown in proportion, not a fixed delay).
pub fn without_runs(series: &[u64]) -> Vec<u64> {
    // A window is flagged once most of it is slow, so up to half a window of slow launches
    // lies outside each end of a run: a window's length more on each side is dropped too.
    let mut keep = vec![true; series.len()];
    for run in slow_runs(series) {
        let from = run.start.saturating_sub(WINDOW);
        let to = (run.start + run.len + WINDOW).min(series.len());
        keep[from..to].fill(false);
    }
    series
        .iter()
        .zip(keep)
        .filter_map(|(&t, k)| k.then_some(t))
        .collect()
}

/// The median of a window (halfway between its two middle values), reordering it: a selection,
/// not a sort, since the search sees every launch of every kernel.
fn window_median(window: &mut [u64; WINDOW]) -> f64 {
    let (below, upper, _) = window.select_nth_unstable(WINDOW / 2);
    let lower = below.iter().copied().max().unwrap_or(*upper) as f64;
    lower + (*upper as f64 - lower) * 0.5
}

struct Run {
    /// Index of the first launch of the first flagged window.
    start: usize,
    depth: f64,
    /// Standard error of `depth`.
    se: f64,
    len: usize,
}

/// The runs of windows in `series` whose median stands out (see the module notes).
fn slow_runs(series: &[u64]) -> Vec<Run> {
    if series.len() < 4 * WINDOW {
        return Vec::new();
    }
    let Some((median, sigma)) = median_and_spread(series) else {
        return Vec::new();
    };
    let threshold = (Z * 1.2533 * sigma / (WINDOW as f64).sqrt()).max(MIN_SLOWDOWN);
    let spans = flagged_spans(series, median, threshold);
    // A run's depth is the median of the launches at its flagged windows' centres (the edges
    // of the span hold launches from before and after; the largest window median would be
    // biased up by the jitter).
    spans
        .into_iter()
        .map(|(first, last)| {
            let mut centres: Vec<f64> = series[first + WINDOW / 2..=last + WINDOW / 2]
                .iter()
                .map(|&t| t as f64)
                .collect();
            centres.sort_unstable_by(f64::total_cmp);
            Run {
                start: first,
                depth: quantile_sorted(&centres, 0.5) / median - 1.0,
                se: 1.2533 * sigma / (centres.len() as f64).sqrt(),
                len: last - first + WINDOW,
            }
        })
        .collect()
}

/// The median of `series`, and the spread of its ratios to it (the median absolute deviation,
/// scaled to a standard deviation); `None` when the median is not positive.
fn median_and_spread(series: &[u64]) -> Option<(f64, f64)> {
    let mut sorted: Vec<f64> = series.iter().map(|&t| t as f64).collect();
    sorted.sort_unstable_by(f64::total_cmp);
    let median = quantile_sorted(&sorted, 0.5);
    if median <= 0.0 {
        return None;
    }
    let mut deviations: Vec<f64> = sorted.iter().map(|t| (t / median - 1.0).abs()).collect();
    deviations.sort_unstable_by(f64::total_cmp);
    let sigma = 1.4826 * quantile_sorted(&deviations, 0.5);
    Some((median, sigma))
}

/// The windows of `series` whose median is more than `threshold` above `median`, merged into
/// runs.
fn flagged_spans(series: &[u64], median: f64, threshold: f64) -> Vec<(usize, usize)> {
    // Flagged windows merged into runs: (first window start, last window start). The search
    // sees every launch of every kernel, so it counts, sliding, the launches that are slow on
    // their own: with more than half of a window slow its median is too, with fewer than half it
    // is not, and only at exactly half is the median taken.
    let slow = |t: u64| t as f64 / median - 1.0 > threshold;
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut window = [0u64; WINDOW];
    let mut count = series[..WINDOW].iter().filter(|&&t| slow(t)).count();
    for start in 0..=series.len() - WINDOW {
        if start > 0 {
            count = count + usize::from(slow(series[start + WINDOW - 1]))
                - usize::from(slow(series[start - 1]));
        }
        let flagged = match count.cmp(&(WINDOW / 2)) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => {
                window.copy_from_slice(&series[start..start + WINDOW]);
                window_median(&mut window) / median - 1.0 > threshold
            }
        };
        if flagged {
            match spans.last_mut() {
                Some((_, last)) if *last + 1 == start => *last = start,
                _ => spans.push((start, start)),
            }
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// 2,000 launches of 100 µs with 2% half-normal jitter, launches `slow` at `clock` of it.
    fn series(seed: u64, slow: std::ops::Range<usize>, clock: f64) -> Vec<u64> {
        jittered(seed, slow, clock, 0.02)
    }

    fn jittered(seed: u64, slow: std::ops::Range<usize>, clock: f64, sigma: f64) -> Vec<u64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..2000)
            .map(|i| {
                let u: f64 = rng.random::<f64>().max(1e-12);
                let v: f64 = rng.random();
                let z = ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()).abs();
                let c = if slow.contains(&i) { clock } else { 1.0 };
                (100_000.0 * (1.0 + sigma * z) / c) as u64
            })
            .collect()
    }

    #[test]
    fn a_throttling_episode_is_found_with_its_depth() {
        let s = series(1, 700..748, 0.93);
        let found = sustained_slowdown([s.as_slice()]).expect("a run of 48 at 93% clock");
        assert_eq!(found.runs, 1);
        assert!((found.depth - (1.0 / 0.93 - 1.0)).abs() < 0.02, "{found:?}");
        assert!(found.share >= 48.0 / 2000.0, "{found:?}");
    }

    /// The case this module exists for: a kernel whose own 1,000 launches met no episode, on a
    /// device whose other kernels did. Without the device's slowdown the bound is below the
    /// slowest of 3,000 fresh launches with two episodes of 48 launches at 90% clock (so this
    /// test can fail); with it, above. The jitter is a tight 1%.
    #[test]
    fn a_bound_allows_for_an_episode_its_own_campaign_did_not_meet() {
        use crate::model::{method, Method, MethodConfig, Observations};
        let own = Observations {
            by_size: [(8, jittered(3, 0..0, 1.0, 0.01)[..1000].to_vec())].into(),
            ..Observations::default()
        };
        let mut fresh = jittered(4, 300..348, 0.9, 0.01);
        fresh.extend(jittered(5, 1200..1248, 0.9, 0.01)[..1000].iter());
        let slowest = *fresh.iter().max().unwrap();
        let bound = |config: &MethodConfig| {
            method::bound_table(&own, &[8], Method::Wcetd, config)
                .unwrap()
                .entries[0]
                .bound_ns
        };
        let plain = MethodConfig::default();
        assert!(
            bound(&plain) < slowest,
            "the scenario must be one that fails: {} >= {slowest}",
            bound(&plain)
        );
        let device = sustained_slowdown([jittered(6, 900..948, 0.9, 0.01).as_slice()]).unwrap();
        let with = MethodConfig {
            device_slowdown: device.depth,
            device_slowdown_share: device.share,
            ..plain
        };
        assert!(bound(&with) >= slowest, "{} < {slowest}", bound(&with));
    }

    #[test]
    fn the_probe_is_fitted_for_delays_without_its_throttled_runs() {
        let s = series(7, 500..548, 0.93);
        let kept = without_runs(&s);
        assert!(kept.len() <= 2000 - 48 && kept.len() >= 2000 - 48 - 4 * WINDOW);
        assert_eq!(sustained_slowdown([kept.as_slice()]), None);
    }

    #[test]
    fn independent_jitter_and_rare_huge_launches_are_not_slowdowns() {
        for seed in 0..20 {
            let mut s = series(seed, 0..0, 1.0);
            for i in (0..2000).step_by(97) {
                s[i] *= 5; // a heavy tail: 1% of launches 5x slower, scattered
            }
            assert_eq!(sustained_slowdown([s.as_slice()]), None, "seed {seed}");
        }
    }
}
