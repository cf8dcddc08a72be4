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

/// Chance, per verified size, that [`median_upper_limit`] is below the true median.
pub const CAP_RISK: f64 = 1e-6;

/// An upper limit on the median of the distribution `samples` come from that is below it with
/// probability at most `risk`: the smallest order statistic k with P(Binomial(n, 1/2) >= k) <= risk
/// (distribution-free; k samples or more below the median is that rare). `None` when `samples`
/// are too few for any order statistic to reach `risk`.
pub fn median_upper_limit(samples: &[u64], risk: f64) -> Option<f64> {
    let n = samples.len();
    // Binomial(n, 1/2) upper tail, from the top: P(X >= k) for k = n, n-1, ...
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut tail = 0.0;
    let mut ln_choose = 0.0; // ln C(n, k) for k = n
    let mut k = n;
    loop {
        let next = tail + (ln_choose + ln_half_n).exp();
        if next > risk {
            break;
        }
        tail = next;
        if k == 0 {
            break;
        }
        // C(n, k-1) = C(n, k) * k / (n - k + 1)
        ln_choose += (k as f64).ln() - ((n - k + 1) as f64).ln();
        k -= 1;
    }
    // P(X >= k + 1) <= risk: the (k + 1)-th smallest sample (index k) is the limit.
    if k + 1 > n || tail == 0.0 {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    Some(sorted[k] as f64)
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
    fn the_median_upper_limit_is_the_order_statistic_with_the_stated_risk() {
        let samples: Vec<u64> = (1..=32).collect();
        // P(Binomial(32, 1/2) >= 30) = 1.2e-7 <= 1e-6 < P(>= 29) = 1.3e-6: the 30th smallest.
        assert_eq!(median_upper_limit(&samples, 1e-6), Some(30.0));
        // P(>= 26) = 2.7e-4 <= 1e-3 < P(>= 25) = 1.1e-3: the 26th.
        assert_eq!(median_upper_limit(&samples, 1e-3), Some(26.0));
        // Ten samples are all below the median with probability 1e-3: no limit at 1e-6.
        assert_eq!(median_upper_limit(&samples[..10], 1e-6), None);
    }

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
