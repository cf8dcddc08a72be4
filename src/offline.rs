//! Offline work on sample files, with no daemon: fitting (`wcetctl fit`), simulated datasets
//! (`wcetctl simulate`), evaluation against held-out runs (`wcetctl evaluate`) and plots.

use anyhow::Context;
use std::collections::BTreeMap;
use std::path::Path;

use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
use crate::gpu::{Gpu, Interference, RunRequest};
use crate::kernels::{self, Geometry};
use crate::model::evaluate::{self, CalibrationSizes, KernelEvaluation, Score};
use crate::model::{method, Method, MethodConfig, Observations};
use crate::samples::SampleSet;

/// The bounds CSV of the design notes for every kernel in `samples` at `sizes`.
pub fn fit_csv(
    samples: &SampleSet,
    geometry: &BTreeMap<String, Geometry>,
    sizes: &[u32],
    method: Method,
    config: &MethodConfig,
) -> anyhow::Result<String> {
    let mut out = String::from("kernel,sms,bound_ns\n");
    for (kernel, by_size) in samples {
        let obs = Observations {
            geometry: geometry.get(kernel).copied(),
            by_size: by_size.clone(),
            ..Observations::default()
        };
        let table = method::bound_table(&obs, sizes, method, config)
            .with_context(|| format!("kernel {kernel}"))?;
        for e in &table.entries {
            out.push_str(&format!("{kernel},{},{}\n", e.sms, e.bound_ns));
        }
    }
    Ok(out)
}

/// Every kernel of a simulated device's profile (the built-in suite, or foreign shapes) at every
/// partition size: `launches` samples each.
pub fn simulate(
    profile: &DeviceProfile,
    seed: u64,
    launches: u32,
    interference: Interference,
) -> anyhow::Result<(SampleSet, BTreeMap<String, Geometry>)> {
    let mut gpu = SimGpu::new(
        profile.clone(),
        SimOptions {
            seed,
            ..SimOptions::default()
        },
    );
    let mut set = SampleSet::new();
    let mut geometry = BTreeMap::new();
    for kernel in profile.kernels.keys().map(|name| kernels::simulated(name)) {
        for &sms in &gpu.info().partition_sizes.clone() {
            let mut times = Vec::with_capacity(launches as usize);
            while times.len() < launches as usize {
                let left = launches - times.len() as u32;
                let request = RunRequest {
                    sms,
                    warmup: 0,
                    launches: left.min(50),
                    interference,
                };
                let batch = gpu.run(&kernel, &request)?;
                if let Some(g) = batch.geometry {
                    geometry.insert(kernel.name.to_string(), g);
                }
                times.extend(batch.times_ns);
            }
            set.entry(kernel.name.to_string())
                .or_default()
                .insert(sms, times);
        }
    }
    Ok((set, geometry))
}

/// Every method on every kernel present in both files.
pub fn evaluate_all(
    calibration: &SampleSet,
    holdout: &SampleSet,
    geometry: &BTreeMap<String, Geometry>,
    sizes: &CalibrationSizes,
    methods: &[Method],
    config: &MethodConfig,
    budget: evaluate::SampleBudget,
) -> Vec<KernelEvaluation> {
    let mut out = Vec::new();
    for (kernel, by_size) in calibration {
        let Some(held) = holdout.get(kernel) else {
            continue;
        };
        let obs = Observations {
            geometry: geometry.get(kernel).copied(),
            by_size: by_size.clone(),
            ..Observations::default()
        };
        let chosen = sizes.choose(&obs.truncated(budget.launches));
        let view = evaluate::campaign_view(&obs, &chosen, budget, config);
        // The daemon's own method gets its verification sweep; the published strategies are
        // run as published, on the planner's sizes alone.
        let swept = (budget.sweep_launches > 0)
            .then(|| evaluate::with_sweep(&obs, view.clone(), budget, config));
        for &m in methods {
            let (obs, sizes) = match (&swept, m) {
                (Some((o, s)), Method::Wcetd) => (o, s.as_slice()),
                _ => (&view, chosen.as_slice()),
            };
            out.push(evaluate::evaluate(kernel, obs, held, sizes, m, config));
        }
    }
    out
}

/// Scores pooled over kernels, per method.
pub fn pooled(evaluations: &[KernelEvaluation], methods: &[Method]) -> Vec<(Method, Score, usize)> {
    methods
        .iter()
        .map(|&m| {
            let pairs: Vec<_> = evaluations
                .iter()
                .filter(|e| e.method == m)
                .flat_map(|e| e.pairs.clone())
                .collect();
            let failed = evaluations
                .iter()
                .filter(|e| e.method == m && e.error.is_some())
                .count();
            (m, Score::of(&pairs), failed)
        })
        .collect()
}

/// A fixed-width table of scores, one row per (kernel, method).
pub fn score_table(rows: &[(String, Method, Score)]) -> String {
    let mut out = format!(
        "{:<10} {:<19} {:>5} {:>5} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>9} {:>7} {:>7}\n",
        "kernel",
        "method",
        "sizes",
        "viol",
        "worst%",
        "mean+%",
        "max+%",
        "MAE_us",
        "MaxAE_us",
        "MSE_us2",
        "RMSE_us",
        "R2",
        "MAPE%"
    );
    for (kernel, m, s) in rows {
        out.push_str(&format!(
            "{:<10} {:<19} {:>5} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2} {:>10.1} {:>9.2} {:>7.3} {:>7.2}\n",
            kernel, m.name(), s.sizes, s.violations, s.worst_under_prediction * 100.0, s.mean_pessimism * 100.0,
            s.max_pessimism * 100.0, s.mae_us, s.max_ae_us, s.mse_us2, s.rmse_us, s.r2, s.mape * 100.0
        ));
    }
    out
}

/// An SVG of one kernel: every held-out sample, per-size maxima, and each method's bound curve.
pub fn plot(
    kernel: &str,
    holdout: &BTreeMap<u32, Vec<u64>>,
    evaluations: &[&KernelEvaluation],
    path: &Path,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let max_ns = holdout.values().flatten().copied().max().unwrap_or(1) as f64;
    let top = evaluations
        .iter()
        .flat_map(|e| e.pairs.iter().map(|p| p.bound_ns as f64))
        .fold(max_ns, f64::max);
    let hi_sms = holdout.keys().copied().max().unwrap_or(1) + 4;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{kernel}: samples and bounds (µs) vs SMs"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0u32..hi_sms, 0f64..top / 1000.0 * 1.08)?;
    chart
        .configure_mesh()
        .x_desc("SMs")
        .y_desc("time (µs)")
        .draw()?;
    let samples = holdout
        .iter()
        .flat_map(|(&m, s)| s.iter().map(move |&t| (m, t as f64 / 1000.0)));
    chart
        .draw_series(samples.map(|p| Circle::new(p, 1, RGBColor(160, 160, 160).filled())))?
        .label("held-out samples");
    let maxima = holdout
        .iter()
        .filter_map(|(&m, s)| s.iter().max().map(|&t| (m, t as f64 / 1000.0)));
    chart
        .draw_series(LineSeries::new(maxima, BLACK.stroke_width(2)))?
        .label("held-out max");
    for (i, e) in evaluations.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let line = e.pairs.iter().map(|p| (p.sms, p.bound_ns as f64 / 1000.0));
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))?
            .label(format!("{} ({} violations)", e.method, e.score.violations))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
