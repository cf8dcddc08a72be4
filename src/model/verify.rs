//! The verification sweep's statistics: after a kernel is fitted, a few dozen launches at every
//! realisable size that was not measured say whether the fitted curve holds there.
//!
//! A size's verification launches bound its median from both sides without assuming any
//! distribution: the order statistics at ranks n/2 -+ z·sqrt(n)/2 (the binomial's normal
//! approximation, z = 3). The upper limit is a floor on the bound's typical time there (the
//! safety chain's last step); where the lower limit is above the typical curve, the curve is
//! wrong at that size by more than the noise of a few dozen launches explains, and the size must
//! be measured in full and the kernel refitted.

use super::method::{self, MethodConfig};
use super::{ModelError, Observations};

/// Launches per size in the verification sweep: a sixth of a full measurement (200), enough to
/// bound the median to within a few order statistics.
pub const SWEEP_LAUNCHES: u32 = 32;

/// Standard normal quantile of the median's confidence limits (about 0.13% each side).
const Z: f64 = 3.0;

/// Distribution-free confidence interval of the median of `samples`; `None` when empty.
pub fn median_interval(samples: &[u64]) -> Option<(f64, f64)> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let n = sorted.len() as f64;
    let spread = Z * n.sqrt() / 2.0;
    let last = sorted.len() - 1;
    let lo = ((n / 2.0 - spread).floor().max(0.0) as usize).min(last);
    let hi = ((n / 2.0 + spread).ceil() as usize).min(last);
    Some((sorted[lo] as f64, sorted[hi] as f64))
}

/// A verified size whose median is above the typical curve by more than its noise explains.
#[derive(Debug, Clone, PartialEq)]
pub struct Disagreement {
    pub sms: u32,
    /// Lower confidence limit of the verification median over the typical curve (> 1).
    pub excess: f64,
}

impl Disagreement {
    /// Why the size is measured in full, for the calibration's notes.
    pub fn note(&self) -> String {
        format!(
            "{} SMs measured in full: the verification sweep's median was at least {:.1}% above the fitted curve",
            self.sms,
            (self.excess - 1.0) * 100.0
        )
    }
}

/// Verified sizes of `obs` (not measured in full) where the lower confidence limit of the
/// verification median is above the `wcetd` typical curve, worst first.
pub fn disagreements(
    obs: &Observations,
    sizes: &[u32],
    config: &MethodConfig,
) -> Result<Vec<Disagreement>, ModelError> {
    let curve = method::typical_curve(obs, sizes, config)?;
    Ok(worst_first(obs, curve, |typical, (lo, _)| {
        (lo > typical).then(|| lo / typical)
    })
    .into_iter()
    .map(|(sms, excess)| Disagreement { sms, excess })
    .collect())
}

/// The verified sizes of `obs` not measured in full where `excess(typical, median interval)` is
/// `Some`, largest first.
fn worst_first(
    obs: &Observations,
    curve: Vec<(u32, f64)>,
    excess: impl Fn(f64, (f64, f64)) -> Option<f64>,
) -> Vec<(u32, f64)> {
    let mut found: Vec<(u32, f64)> = curve
        .into_iter()
        .filter(|(m, _)| !obs.by_size.contains_key(m))
        .filter_map(|(m, typical)| {
            let interval = median_interval(obs.verified.get(&m)?)?;
            Some((m, excess(typical, interval)?))
        })
        .collect();
    found.sort_by(|a, b| b.1.total_cmp(&a.1));
    found
}

/// How far above a verified size's median (its upper confidence limit) the bound's typical time
/// may stand before that size is measured in full to tighten the bound: a measured size's bound
/// rests on its own median instead, usually this much lower (the refit moves every size's
/// bound, the law's and the pooled tail's, so it is not guaranteed).
pub const LOOSE_ABOVE: f64 = 0.05;

/// Sizes per kernel and interference measured in full because the curve was loose there (a full
/// measurement each: tightness is bought with calibration time, and this caps the price).
pub const MAX_TIGHTENINGS: usize = 4;

/// A verified size where the bound's typical time is more than [`LOOSE_ABOVE`] above the upper
/// confidence limit of the verification median.
#[derive(Debug, Clone, PartialEq)]
pub struct Loose {
    pub sms: u32,
    /// The typical time over the upper confidence limit of the verification median (> 1).
    pub excess: f64,
}

impl Loose {
    /// Why the size is measured in full, for the calibration's notes.
    pub fn note(&self) -> String {
        format!(
            "{} SMs measured in full to tighten the bound: the fitted curve stood at least {:.1}% above the verification sweep's median",
            self.sms,
            (self.excess - 1.0) * 100.0
        )
    }
}

/// Verified sizes of `obs` (not measured in full) where the bound's typical time is loose by more
/// than [`LOOSE_ABOVE`], loosest first.
pub fn loose_sizes(
    obs: &Observations,
    sizes: &[u32],
    config: &MethodConfig,
) -> Result<Vec<Loose>, ModelError> {
    let curve = method::bound_typical_curve(obs, sizes, config)?;
    Ok(worst_first(obs, curve, |typical, (_, hi)| {
        (typical > hi * (1.0 + LOOSE_ABOVE)).then(|| typical / hi)
    })
    .into_iter()
    .map(|(sms, excess)| Loose { sms, excess })
    .collect())
}

/// A verified size where the bound rests on a launch of the sweep alone: one of its few dozen
/// launches is above the bound the method makes there (rule 1 then holds it up to that launch).
/// At the exceedance a bound states, that says the size's launches are not distributed as the
/// measured sizes' (a slow mode there: a review's partitions that split a GPC ran 15-50% slow on
/// 1-5% of launches, 9-30% over bounds the sweep had seen such a launch under), and only a full
/// measurement bounds them; its launches then enter the tail model.
#[derive(Debug, Clone, PartialEq)]
pub struct Outlier {
    pub sms: u32,
}

impl Outlier {
    /// Why the size is measured in full, for the calibration's notes.
    pub fn note(&self) -> String {
        format!(
            "{} SMs measured in full: a launch of the verification sweep there was at or above the bound the tail model gave it",
            self.sms
        )
    }
}

/// Verified sizes of `obs` (not measured in full) whose bound is their slowest sweep launch
/// (rule 1), not the model's: [`Outlier`].
pub fn outliers(
    obs: &Observations,
    sizes: &[u32],
    config: &MethodConfig,
) -> Result<Vec<Outlier>, ModelError> {
    // The sweep's launches ran in the campaign's own process: judged against the bound before
    // the allowance for another process, so a slow mode here does not use that allowance up.
    let same_process = MethodConfig {
        process_shift: 0.0,
        ..*config
    };
    let table = method::bound_table(obs, sizes, method::Method::Wcetd, &same_process)?;
    let mut found: Vec<Outlier> = table
        .entries
        .iter()
        .filter(|e| e.verified_samples > 0 && !obs.by_size.contains_key(&e.sms))
        .filter(|e| e.observed_max_ns >= e.bound_ns)
        .map(|e| Outlier { sms: e.sms })
        .collect();
    found.sort_by_key(|o| o.sms);
    Ok(found)
}

/// What the sweep does next, given how many sizes it has measured to tighten so far.
#[derive(Debug, Clone, PartialEq)]
pub enum NextSize {
    /// The curve is below a verified median: measured whatever it costs (safety).
    Disagrees(Disagreement),
    /// A launch of the sweep is at the bound's height: measured whatever it costs (safety).
    Outlier(Outlier),
    /// The curve is loose at a verified size, and the cap on tightening is not reached.
    Loose(Loose),
}

impl NextSize {
    pub fn sms(&self) -> u32 {
        match self {
            NextSize::Disagrees(d) => d.sms,
            NextSize::Outlier(o) => o.sms,
            NextSize::Loose(l) => l.sms,
        }
    }

    pub fn note(&self) -> String {
        match self {
            NextSize::Disagrees(d) => d.note(),
            NextSize::Outlier(o) => o.note(),
            NextSize::Loose(l) => l.note(),
        }
    }
}

/// The next size the sweep measures in full, if any: the worst disagreement first; only when none
/// is left, the loosest size, while fewer than `max_tightenings` were measured for looseness.
pub fn next_size(
    obs: &Observations,
    sizes: &[u32],
    config: &MethodConfig,
    tightened: usize,
    max_tightenings: usize,
) -> Result<Option<NextSize>, ModelError> {
    if let Some(worst) = disagreements(obs, sizes, config)?.into_iter().next() {
        return Ok(Some(NextSize::Disagrees(worst)));
    }
    if let Some(first) = outliers(obs, sizes, config)?.into_iter().next() {
        return Ok(Some(NextSize::Outlier(first)));
    }
    if tightened >= max_tightenings {
        return Ok(None);
    }
    // Tightening is optional: a curve the chain cannot complete here (the fit after it says why)
    // is no reason to fail the calibration.
    Ok(loose_sizes(obs, sizes, config)
        .unwrap_or_default()
        .into_iter()
        .next()
        .map(NextSize::Loose))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_interval_brackets_the_median_and_narrows_with_launches() {
        let few: Vec<u64> = (0..32).collect();
        let (lo, hi) = median_interval(&few).unwrap();
        assert!(lo < 15.5 && hi > 15.5 && lo >= 0.0 && hi <= 31.0);
        let many: Vec<u64> = (0..3200).map(|i| i / 100).collect();
        let (lo2, hi2) = median_interval(&many).unwrap();
        assert!(hi2 - lo2 < (hi - lo) / 4.0);
    }

    #[test]
    fn a_hump_between_measured_sizes_is_found_and_a_flat_curve_is_not() {
        let flat = |m: u32| 1_000_000 / u64::from(m);
        let mut obs = Observations::default();
        for m in [8, 16, 32, 64, 128] {
            obs.by_size
                .insert(m, (0..200).map(|i| flat(m) + i % 7).collect());
        }
        let sizes: Vec<u32> = (1..=16).map(|i| i * 8).collect();
        for m in [24, 96, 112] {
            obs.verified
                .insert(m, (0..32).map(|i| flat(m) + i % 7).collect());
        }
        let config = MethodConfig::default();
        assert_eq!(disagreements(&obs, &sizes, &config).unwrap(), vec![]);
        obs.verified
            .insert(96, (0..32).map(|i| flat(96) * 13 / 10 + i % 7).collect());
        let found = disagreements(&obs, &sizes, &config).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].sms, 96);
        assert!(found[0].note().contains("96 SMs measured in full"));
    }

    /// One slow launch of a few dozen at a verified size, above the bound the measured sizes'
    /// tail makes there: that size is measured in full (its bound rested on that launch alone,
    /// and the slow mode it shows was 9-30% over the bound on held-out launches).
    #[test]
    fn a_sweep_launch_at_the_bound_sends_its_size_to_a_full_measurement() {
        let flat = |m: u32| 1_000_000 / u64::from(m);
        let samples = |t: u64, n: u64| (0..n).map(|i| t + i % 7).collect::<Vec<u64>>();
        let sizes: Vec<u32> = (1..=16).map(|i| i * 8).collect();
        let config = MethodConfig::default();
        let mut obs = Observations::default();
        for m in [8, 16, 32, 64, 128] {
            obs.by_size.insert(m, samples(flat(m), 200));
        }
        for m in [24, 96] {
            obs.verified.insert(m, samples(flat(m), 32));
        }
        assert_eq!(outliers(&obs, &sizes, &config).unwrap(), vec![]);
        assert_eq!(next_size(&obs, &sizes, &config, 0, 0).unwrap(), None);
        let mut slow = samples(flat(24), 32);
        slow[5] = flat(24) * 13 / 10;
        obs.verified.insert(24, slow);
        assert_eq!(
            outliers(&obs, &sizes, &config).unwrap(),
            vec![Outlier { sms: 24 }]
        );
        let next = next_size(&obs, &sizes, &config, 0, 0).unwrap().unwrap();
        assert_eq!(next.sms(), 24);
        assert!(
            next.note().contains("24 SMs measured in full: a launch"),
            "{}",
            next.note()
        );
    }

    /// The sweep's launches ran in the campaign's process, so they are judged against the bound
    /// without the allowance for another process: a slow launch 1% over that bound is still an
    /// outlier with a 2% process shift configured, which it would not be against the raised bound.
    #[test]
    fn the_process_shift_does_not_hide_a_sweep_outlier() {
        let flat = |m: u32| 1_000_000 / u64::from(m);
        let samples = |t: u64, n: u64| (0..n).map(|i| t + i % 7).collect::<Vec<u64>>();
        let sizes: Vec<u32> = (1..=16).map(|i| i * 8).collect();
        let mut obs = Observations::default();
        for m in [8, 16, 32, 64, 128] {
            obs.by_size.insert(m, samples(flat(m), 200));
        }
        obs.verified.insert(24, samples(flat(24), 32));
        let unshifted = method::bound_table(
            &obs,
            &sizes,
            method::Method::Wcetd,
            &MethodConfig::default(),
        )
        .unwrap();
        let at_24 = unshifted.entry(24).unwrap().bound_ns;
        let mut slow = samples(flat(24), 32);
        slow[5] = at_24 * 101 / 100;
        obs.verified.insert(24, slow);
        let shifted = MethodConfig {
            process_shift: 0.02,
            ..MethodConfig::default()
        };
        // Against the shifted bound the launch is below it: judging there would miss it.
        let raised = method::bound_table(&obs, &sizes, method::Method::Wcetd, &shifted).unwrap();
        assert!(raised.entry(24).unwrap().bound_ns > at_24 * 101 / 100);
        assert_eq!(
            outliers(&obs, &sizes, &shifted).unwrap(),
            vec![Outlier { sms: 24 }]
        );
    }

    #[test]
    fn a_loose_curve_is_measured_within_the_cap_and_a_tight_one_is_not() {
        let flat = |m: u32| 1_000_000 / u64::from(m);
        let samples = |t: u64, n: u64| (0..n).map(|i| t + i % 7).collect::<Vec<u64>>();
        let sizes: Vec<u32> = (1..=16).map(|i| i * 8).collect();
        let config = MethodConfig::default();
        // Measured at both ends only: no law validates, so between them the curve is the slower
        // neighbour's time, eight times the median the sweep sees at 64 SMs.
        let mut obs = Observations::default();
        for m in [8, 128] {
            obs.by_size.insert(m, samples(flat(m), 200));
        }
        obs.verified.insert(64, samples(flat(64), 32));
        let loose = loose_sizes(&obs, &sizes, &config).unwrap();
        assert_eq!(loose.len(), 1, "{loose:?}");
        assert!(loose[0].excess > 7.0, "{loose:?}");
        assert!(loose[0]
            .note()
            .contains("64 SMs measured in full to tighten"));
        let next = next_size(&obs, &sizes, &config, 0, MAX_TIGHTENINGS).unwrap();
        assert!(
            matches!(next, Some(NextSize::Loose(ref l)) if l.sms == 64),
            "{next:?}"
        );
        // The cap reached: a loose size is left, but a size where the curve is too low never is.
        let capped = next_size(&obs, &sizes, &config, MAX_TIGHTENINGS, MAX_TIGHTENINGS).unwrap();
        assert_eq!(capped, None);
        obs.verified.insert(96, samples(flat(8) * 2, 32));
        let capped = next_size(&obs, &sizes, &config, MAX_TIGHTENINGS, MAX_TIGHTENINGS).unwrap();
        assert!(
            matches!(capped, Some(NextSize::Disagrees(ref d)) if d.sms == 96),
            "{capped:?}"
        );

        // A 1/m kernel measured at five sizes: its law holds, the curve is tight everywhere.
        let mut tight = Observations::default();
        for m in [8, 16, 32, 64, 128] {
            tight.by_size.insert(m, samples(flat(m), 200));
        }
        for m in [24, 96, 112] {
            tight.verified.insert(m, samples(flat(m), 32));
        }
        assert_eq!(loose_sizes(&tight, &sizes, &config).unwrap(), vec![]);
    }
}
