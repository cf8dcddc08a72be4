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
    let mut found: Vec<Disagreement> = curve
        .into_iter()
        .filter(|(m, _)| !obs.by_size.contains_key(m))
        .filter_map(|(m, typical)| {
            let (lo, _) = median_interval(obs.verified.get(&m)?)?;
            (lo > typical).then(|| Disagreement {
                sms: m,
                excess: lo / typical,
            })
        })
        .collect();
    found.sort_by(|a, b| b.excess.total_cmp(&a.excess));
    Ok(found)
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
}
