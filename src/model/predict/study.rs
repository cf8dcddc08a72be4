//! The three experiments of the gpu-perf study, exactly as `docs/prediction.md` pre-registers them:
//! another GPU (both directions), the largest size of each kernel, and four kernels never seen.
//! Each scores the wcetd predictor and the plain roofline ratio on the same rows; nothing is ever
//! fitted on a row it is scored on.

use std::collections::BTreeMap;

use super::device::DeviceDescription;
use super::fit::{median, Predictor};
use super::runs::{Config, Run};

/// The kernels held out in the new-kernel experiment, as the study chose them.
pub const NEW_KERNELS: [&str; 4] = [
    "matmul_tiled",
    "shared_transpose",
    "atomic_hotspot",
    "vector_add_divergent",
];

const ONE_D: [&str; 8] = [
    "vector_add",
    "saxpy",
    "strided_copy_8",
    "reduce_sum",
    "dot_product",
    "histogram",
    "random_access",
    "vector_add_divergent",
];

/// Whether a row ran at the size it is labelled with. The study's TITAN X script passed
/// `--rows/--cols` to a runner that reads `--N` (1-D kernels), `--H/--W` (convolutions) and
/// `--matN` (matrix products), so those ran at the runner's defaults (1048576, 1024, 512) whatever
/// the label says. Decided from the harness code, never from a time.
pub fn runs_as_labelled(run: &Run) -> bool {
    if !run.device.name.contains("TITAN X") {
        return true;
    }
    let c = &run.config;
    let k = c.kernel.as_str();
    match k {
        "naive_transpose" | "shared_transpose" | "shared_bank_conflict" | "atomic_hotspot" => true,
        _ if ONE_D.contains(&k) => c.n == 1_048_576,
        "conv2d_3x3" | "conv2d_7x7" => c.rows == 1024 && c.cols == 1024,
        "matmul_naive" | "matmul_tiled" => c.rows == 512 && c.cols == 512,
        _ => false,
    }
}

/// The study's metrics over (predicted, true) pairs.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Metrics {
    pub rows: usize,
    /// Mean absolute percentage error, in %.
    pub mape: f64,
    pub median_ratio: f64,
    /// Shares of rows within 10%, 25%, 50% of the truth.
    pub within_10: f64,
    pub within_25: f64,
    pub within_50: f64,
}

impl Metrics {
    pub fn of(pairs: &[(f64, f64)]) -> Metrics {
        let n = pairs.len().max(1) as f64;
        let errors: Vec<f64> = pairs.iter().map(|(p, t)| (p - t).abs() / t).collect();
        let share = |limit: f64| errors.iter().filter(|&&e| e <= limit).count() as f64 / n;
        let mut ratios: Vec<f64> = pairs.iter().map(|(p, t)| p / t).collect();
        ratios.sort_by(f64::total_cmp);
        let m = ratios.len();
        let median_ratio = match m {
            0 => f64::NAN,
            _ if m % 2 == 1 => ratios[m / 2],
            _ => (ratios[m / 2 - 1] + ratios[m / 2]) / 2.0,
        };
        Metrics {
            rows: pairs.len(),
            mape: 100.0 * errors.iter().sum::<f64>() / n,
            median_ratio,
            within_10: share(0.10),
            within_25: share(0.25),
            within_50: share(0.50),
        }
    }
}

/// One scored row: the configuration, the truth, and both predictions.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub config: Config,
    pub true_ms: f64,
    pub wcetd_ms: f64,
    pub roofline_ms: f64,
}

/// One experiment on one direction or GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub experiment: String,
    pub rows: Vec<Scored>,
}

impl Outcome {
    pub fn wcetd(&self) -> Metrics {
        Metrics::of(
            &self
                .rows
                .iter()
                .map(|r| (r.wcetd_ms, r.true_ms))
                .collect::<Vec<_>>(),
        )
    }

    pub fn roofline(&self) -> Metrics {
        Metrics::of(
            &self
                .rows
                .iter()
                .map(|r| (r.roofline_ms, r.true_ms))
                .collect::<Vec<_>>(),
        )
    }
}

fn roof(c: &Config, d: &DeviceDescription) -> f64 {
    let memory = c.bytes / (d.mem_bandwidth_gbps * 1e6);
    let compute = c.flops / (d.compute_gflops * 1e6);
    memory.max(compute)
}

/// Scale `t` by the ratio of plain roofs, or keep it where either roof is 0.
fn roof_ratio(t: f64, from: f64, to: f64) -> f64 {
    if from > 0.0 && to > 0.0 {
        t * to / from
    } else {
        t
    }
}

/// Experiment 1: fit on every source row, score the target rows whose key the source has.
pub fn another_gpu(
    source: &[Run],
    target: &[Run],
    target_device: &DeviceDescription,
) -> anyhow::Result<Vec<Scored>> {
    let predictor = Predictor::fit(source)?;
    let by_key: BTreeMap<_, &Run> = source.iter().map(|r| (r.config.key(), r)).collect();
    Ok(target
        .iter()
        .filter_map(|t| {
            let s = by_key.get(&t.config.key())?;
            let plain = roof_ratio(
                s.mean_ms,
                roof(&s.config, &s.device),
                roof(&t.config, target_device),
            );
            Some(Scored {
                config: t.config.clone(),
                true_ms: t.mean_ms,
                wcetd_ms: predictor.predict(&t.config, target_device).0,
                roofline_ms: plain,
            })
        })
        .collect())
}

/// Experiment 2: the largest size of every kernel with two sizes or more, from all other rows.
pub fn larger_size(runs: &[Run], device: &DeviceDescription) -> anyhow::Result<Vec<Scored>> {
    let mut by_kernel: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for r in runs {
        by_kernel.entry(&r.config.kernel).or_default().push(r);
    }
    let mut tests: Vec<&Run> = Vec::new();
    for rows in by_kernel.values() {
        let mut sizes: Vec<u64> = rows.iter().map(|r| r.config.size()).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() >= 2 {
            let largest = *sizes.last().expect("two sizes");
            tests.extend(rows.iter().filter(|r| r.config.size() == largest));
        }
    }
    let train: Vec<Run> = runs
        .iter()
        .filter(|r| !tests.iter().any(|t| std::ptr::eq(*t, *r)))
        .cloned()
        .collect();
    let predictor = Predictor::fit(&train)?;
    Ok(tests
        .into_iter()
        .map(|t| {
            let prev = train
                .iter()
                .filter(|r| r.config.kernel == t.config.kernel)
                .max_by_key(|r| r.config.size())
                .expect("a kernel with two sizes keeps a training row");
            Scored {
                config: t.config.clone(),
                true_ms: t.mean_ms,
                wcetd_ms: predictor.predict(&t.config, device).0,
                roofline_ms: roof_ratio(
                    prev.mean_ms,
                    roof(&prev.config, device),
                    roof(&t.config, device),
                ),
            }
        })
        .collect())
}

/// Experiment 3: every row of the four new kernels, from the rows of the other twelve.
pub fn new_kernels(runs: &[Run], device: &DeviceDescription) -> anyhow::Result<Vec<Scored>> {
    let is_new = |r: &&Run| NEW_KERNELS.contains(&r.config.kernel.as_str());
    let train: Vec<Run> = runs.iter().filter(|r| !is_new(r)).cloned().collect();
    let predictor = Predictor::fit(&train)?;
    let scale: Vec<f64> = train
        .iter()
        .filter(|r| roof(&r.config, device) > 0.0)
        .map(|r| r.mean_ms / roof(&r.config, device))
        .collect();
    let scale = median(scale).unwrap_or(1.0);
    let typical = median(train.iter().map(|r| r.mean_ms).collect()).unwrap_or(0.0);
    Ok(runs
        .iter()
        .filter(is_new)
        .map(|t| {
            let r = roof(&t.config, device);
            Scored {
                config: t.config.clone(),
                true_ms: t.mean_ms,
                wcetd_ms: predictor.predict(&t.config, device).0,
                roofline_ms: if r > 0.0 { r * scale } else { typical },
            }
        })
        .collect())
}

/// The whole pre-registered study on two GPUs' runs and their device descriptions: `valid_only`
/// keeps the rows that ran at their labelled size (the primary figures); otherwise every row as
/// labelled (the secondary ones).
pub fn run_all(
    (a, da): (&[Run], &DeviceDescription),
    (b, db): (&[Run], &DeviceDescription),
    valid_only: bool,
) -> anyhow::Result<Vec<Outcome>> {
    // Every run is read as having run on the description given, so that an optional field set
    // there (an L2 bandwidth) applies to fitting and predicting alike.
    let keep = |runs: &[Run], d: &DeviceDescription| -> Vec<Run> {
        runs.iter()
            .filter(|r| !valid_only || runs_as_labelled(r))
            .map(|r| Run {
                device: d.clone(),
                ..r.clone()
            })
            .collect()
    };
    let (a, b) = (keep(a, da), keep(b, db));
    let (na, nb) = (&da.name, &db.name);
    let mut out = vec![
        Outcome {
            experiment: format!("another GPU: {na} -> {nb}"),
            rows: another_gpu(&a, &b, db)?,
        },
        Outcome {
            experiment: format!("another GPU: {nb} -> {na}"),
            rows: another_gpu(&b, &a, da)?,
        },
    ];
    for (runs, d) in [(&a, da), (&b, db)] {
        out.push(Outcome {
            experiment: format!("larger size: {}", d.name),
            rows: larger_size(runs, d)?,
        });
    }
    for (runs, d) in [(&a, da), (&b, db)] {
        out.push(Outcome {
            experiment: format!("new kernels: {}", d.name),
            rows: new_kernels(runs, d)?,
        });
    }
    Ok(out)
}

/// The outcomes as a Markdown table (one line per experiment and predictor), and with `rows`
/// every scored row below it.
pub fn report(outcomes: &[Outcome], rows: bool) -> String {
    let mut s = String::from(
        "| experiment | rows | predictor | MAPE | median pred/true | within 10% | within 25% | within 50% |\n|---|---|---|---|---|---|---|---|\n",
    );
    for o in outcomes {
        for (who, m) in [("wcetd", o.wcetd()), ("roofline ratio", o.roofline())] {
            s.push_str(&format!(
                "| {} | {} | {who} | {:.1}% | {:.2} | {:.0}% | {:.0}% | {:.0}% |\n",
                o.experiment,
                m.rows,
                m.mape,
                m.median_ratio,
                100.0 * m.within_10,
                100.0 * m.within_25,
                100.0 * m.within_50
            ));
        }
    }
    if rows {
        for o in outcomes {
            s.push_str(&format!("\n{}\n\n| kernel | N | rows x cols | true ms | wcetd ms | error | roofline ms | error |\n|---|---|---|---|---|---|---|---|\n", o.experiment));
            for r in &o.rows {
                let c = &r.config;
                s.push_str(&format!(
                    "| {} | {} | {}x{} | {:.4} | {:.4} | {:+.0}% | {:.4} | {:+.0}% |\n",
                    c.kernel,
                    c.n,
                    c.rows,
                    c.cols,
                    r.true_ms,
                    r.wcetd_ms,
                    100.0 * (r.wcetd_ms / r.true_ms - 1.0),
                    r.roofline_ms,
                    100.0 * (r.roofline_ms / r.true_ms - 1.0)
                ));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::predict::{device, runs};

    fn dataset() -> (Vec<Run>, DeviceDescription, Vec<Run>, DeviceDescription) {
        let read = |text: &str| runs::read_runs(text.as_bytes(), "gpu-perf").unwrap();
        (
            read(include_str!("../../../calibration/gpu-perf/runs_4070.csv")),
            device::load("rtx4070").unwrap(),
            read(include_str!(
                "../../../calibration/gpu-perf/runs_titanx.csv"
            )),
            device::load("titanx").unwrap(),
        )
    }

    /// The committed descriptions are the dataset's device columns.
    #[test]
    fn the_device_descriptions_are_the_datasets() {
        let (a, da, b, db) = dataset();
        assert!(a.iter().all(|r| r.device == da));
        assert!(b.iter().all(|r| r.device == db));
    }

    #[test]
    fn the_harness_rule_keeps_22_titan_x_rows_and_every_4070_row() {
        let (a, _, b, _) = dataset();
        assert!(a.iter().all(runs_as_labelled));
        assert_eq!(b.iter().filter(|r| runs_as_labelled(r)).count(), 22);
    }

    /// The pre-registered figures (docs/prediction.md). Targets of issue 17 that are met are
    /// asserted as such; the others are held where they are, so that a change that makes a
    /// figure worse fails here.
    #[test]
    fn the_study_figures_hold() {
        let (a, da, b, db) = dataset();
        let out = run_all((&a, &da), (&b, &db), true).unwrap();
        let mape = |i: usize| out[i].wcetd().mape;
        let rows: Vec<usize> = out.iter().map(|o| o.rows.len()).collect();
        assert_eq!(rows, [19, 19, 15, 2, 15, 7]);
        assert!(mape(0) <= 25.0, "another GPU, 4070 -> TITAN X: {}", mape(0));
        assert!(mape(1) <= 37.0, "another GPU, TITAN X -> 4070: {}", mape(1));
        assert!(mape(2) <= 6.0, "larger size, 4070: {}", mape(2));
        assert!(mape(3) <= 5.0, "larger size, TITAN X: {}", mape(3));
        assert!(mape(4) <= 51.0, "new kernels, 4070: {}", mape(4));
        assert!(mape(5) <= 65.0, "new kernels, TITAN X: {}", mape(5));
        for i in [0, 1, 2] {
            assert!(mape(i) < out[i].roofline().mape, "{}", out[i].experiment);
        }
    }

    /// Nothing is fitted on a scored row: making every scored truth ten times larger changes
    /// no prediction.
    #[test]
    fn no_prediction_reads_the_truth_it_is_scored_against() {
        let (a, da, b, db) = dataset();
        let scaled = |runs: &[Run], hit: &dyn Fn(&Run) -> bool| -> Vec<Run> {
            runs.iter()
                .map(|r| Run {
                    mean_ms: if hit(r) { 10.0 * r.mean_ms } else { r.mean_ms },
                    ..r.clone()
                })
                .collect()
        };
        let preds = |s: &[Scored]| s.iter().map(|r| r.wcetd_ms).collect::<Vec<_>>();
        let before = another_gpu(&a, &b, &db).unwrap();
        let after = another_gpu(&a, &scaled(&b, &|_| true), &db).unwrap();
        assert_eq!(preds(&before), preds(&after));
        let new = |r: &Run| NEW_KERNELS.contains(&r.config.kernel.as_str());
        let before = new_kernels(&a, &da).unwrap();
        let after = new_kernels(&scaled(&a, &new), &da).unwrap();
        assert_eq!(preds(&before), preds(&after));
        let before = larger_size(&a, &da).unwrap();
        let largest: Vec<Config> = before.iter().map(|s| s.config.clone()).collect();
        let after = larger_size(&scaled(&a, &|r| largest.contains(&r.config)), &da).unwrap();
        assert_eq!(preds(&before), preds(&after));
    }
}
