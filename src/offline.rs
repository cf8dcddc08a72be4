//! Offline work on sample files, with no daemon: fitting (`wcetctl fit`), simulated datasets
//! (`wcetctl simulate`), evaluation against held-out runs (`wcetctl evaluate`) and plots.

use anyhow::Context;
use std::collections::BTreeMap;
use std::path::Path;

use crate::gpu::sim::{DeviceProfile, SimGpu, SimOptions};
use crate::gpu::{Gpu, Interference, RunRequest};
use crate::kernels::{self, Geometry};
use crate::model::evaluate::{self, CalibrationSizes, KernelEvaluation, Score};
use crate::model::{
    method, throttle, BoundTable, ExceedanceBasis, Method, MethodConfig, Observations,
};
use crate::samples::SampleSet;

/// Fewest samples at a measured size that `fit` turns into bounds. With n samples the largest is
/// exceeded by a fresh launch with probability 1/(n+1) before any margin: below 30 that is over 3%
/// per launch, and a file that thin describes a typical time, not a worst case.
pub const MIN_SAMPLES_PER_SIZE: usize = 30;

/// Samples at one size below which a rare slow launch is likely unseen: a launch slower than 1 in
/// 1,000 shows at least once in 2,000 samples with probability 86%. The daemon screens its
/// largest size with 2,200 (`--launches` 200 + `--screen-launches` 2,000).
pub const TAIL_DETECTION_SAMPLES: usize = 2_000;

/// One kernel's fitted bounds and what its samples can support.
#[derive(Debug, Clone)]
pub struct KernelFit {
    pub kernel: String,
    pub table: BoundTable,
    /// Samples at each measured size.
    pub samples: BTreeMap<u32, usize>,
    /// Exceedance per launch the bounds are stated at, and what it rests on.
    pub exceedance: f64,
    pub basis: ExceedanceBasis,
    /// Why the bounds may be weaker than they look (for standard error), each with its number.
    pub warnings: Vec<String>,
}

/// Bounds at `sizes` for every kernel in `samples` that supports them, and why each other one
/// was refused: a size measured fewer than [`MIN_SAMPLES_PER_SIZE`] times (naming the kernel,
/// the size and the minimum), or a size the method will not bound. One kernel refused does not
/// cost the others their bounds.
pub fn fit(
    samples: &SampleSet,
    geometry: &BTreeMap<String, Geometry>,
    sizes: &[u32],
    method: Method,
    config: &MethodConfig,
) -> (Vec<KernelFit>, Vec<Refused>) {
    let config = &with_device_slowdown(samples, usize::MAX, config);
    let mut out = Vec::new();
    let mut refused = Vec::new();
    for (kernel, by_size) in samples {
        match fit_kernel(
            kernel,
            by_size,
            geometry.get(kernel).copied(),
            sizes,
            (method, config),
        ) {
            Ok(fit) => out.push(fit),
            Err(why) => refused.push(Refused {
                kernel: kernel.clone(),
                why: format!("{why:#}"),
            }),
        }
    }
    (out, refused)
}

/// A kernel `fit` could not bound, and why (which names the kernel).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Refused {
    pub kernel: String,
    pub why: String,
}

fn fit_kernel(
    kernel: &str,
    by_size: &BTreeMap<u32, Vec<u64>>,
    geometry: Option<Geometry>,
    sizes: &[u32],
    (method, config): (Method, &MethodConfig),
) -> anyhow::Result<KernelFit> {
    if let Some((m, s)) = by_size.iter().find(|(_, s)| s.len() < MIN_SAMPLES_PER_SIZE) {
        anyhow::bail!(
            "kernel {kernel}: {} sample{} at {m} SMs cannot support a bound; accepted: at least {MIN_SAMPLES_PER_SIZE} per measured size (every launch timed, none dropped)",
            s.len(),
            if s.len() == 1 { "" } else { "s" }
        );
    }
    let obs = Observations {
        geometry,
        by_size: by_size.clone(),
        ..Observations::default()
    };
    let table = method::bound_table(&obs, sizes, method, config)
        .with_context(|| format!("kernel {kernel}"))?;
    let (exceedance, basis) = table.stated_exceedance();
    let counts: BTreeMap<u32, usize> = by_size.iter().map(|(&m, s)| (m, s.len())).collect();
    let warnings = thin_sample_warnings(&counts, basis, exceedance, config.exceedance);
    Ok(KernelFit {
        kernel: kernel.to_string(),
        table,
        samples: counts,
        exceedance,
        basis,
        warnings,
    })
}

/// `config` with the sustained slowdowns (throttling) found in the first `launches` samples of
/// every size of every kernel in `samples`: offline, the kernels of one file are the device's
/// evidence, as the delay probe and the job's kernels are in the daemon ([`crate::model::throttle`]).
pub fn with_device_slowdown(
    samples: &SampleSet,
    launches: usize,
    config: &MethodConfig,
) -> MethodConfig {
    let series = samples
        .values()
        .flat_map(|by_size| by_size.values())
        .map(|t| &t[..t.len().min(launches)]);
    // Two sources (a delay-probe file set them already) are merged by the larger of each.
    let mut with = *config;
    if let Some(found) = throttle::sustained_slowdown(series) {
        with.device_slowdown = with.device_slowdown.max(found.depth);
        with.device_slowdown_share = with.device_slowdown_share.max(found.share);
    }
    with
}

/// What too few samples leave unsupported, with the numbers.
fn thin_sample_warnings(
    counts: &BTreeMap<u32, usize>,
    basis: ExceedanceBasis,
    exceedance: f64,
    configured: f64,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let most = counts.values().copied().max().unwrap_or(0);
    let total: usize = counts.values().sum();
    if most < TAIL_DETECTION_SAMPLES {
        warnings.push(format!(
            "at most {most} samples at one size ({total} in all): a slow launch rarer than 1 in {most} is likely unseen, so a heavy tail may go undetected; at least {TAIL_DETECTION_SAMPLES} at one size are needed to detect one"
        ));
    }
    if basis == ExceedanceBasis::ObservedMaximum {
        // With enough samples, what was missing is exceedances: too few distinct slow ones
        // above every threshold (equal or quantised times).
        let why = if total < crate::model::tail::MIN_SAMPLES {
            format!(
                "it needs {} samples pooled over sizes",
                crate::model::tail::MIN_SAMPLES
            )
        } else {
            format!(
                "too few samples above every candidate threshold, at least {}: equal or quantised times",
                crate::model::tail::MIN_EXCEEDANCES
            )
        };
        warnings.push(format!(
            "no tail model ({why}): the bound is a stated margin over the largest sample and supports an exceedance of only {exceedance:.1e} per launch"
        ));
    } else if crate::model::weaker_than(exceedance, configured) {
        warnings.push(format!(
            "bound stated at exceedance {exceedance:e} per launch, not the configured {configured:e} (a heavy tail, or the device's sustained slowdowns; the notes say which)"
        ));
    }
    warnings
}

/// The bounds CSV of the design notes: `kernel,sms,bound_ns`.
pub fn bounds_csv(fits: &[KernelFit]) -> String {
    // Written by the csv crate, so a name with a comma, a quote or a line break is quoted (as a
    // reader of the file expects) instead of splitting its row.
    let mut out = csv::Writer::from_writer(Vec::new());
    let rows = fits.iter().flat_map(|f| {
        f.table
            .entries
            .iter()
            .map(move |e| [f.kernel.clone(), e.sms.to_string(), e.bound_ns.to_string()])
    });
    let header = ["kernel", "sms", "bound_ns"].map(String::from);
    for row in std::iter::once(header).chain(rows) {
        out.write_record(&row).expect("writing to memory");
    }
    String::from_utf8(out.into_inner().expect("writing to memory")).expect("UTF-8 fields")
}

/// `fit --json`: per kernel, every bound with its provenance, the exceedance the samples support,
/// the notes of the method and the warnings.
/// `fit`'s result as JSON: the kernels it bounded, and those it refused with why (a script
/// reading only the bounds would take a refused kernel for one the file did not have).
pub fn fit_json(fits: &[KernelFit], refused: &[Refused]) -> serde_json::Value {
    let kernels: Vec<serde_json::Value> = fits
        .iter()
        .map(|f| {
            let bounds: Vec<serde_json::Value> = f
                .table
                .entries
                .iter()
                .map(|e| {
                    serde_json::json!({"sms": e.sms, "bound_ns": e.bound_ns, "provenance": e.provenance.to_string(),
                        "basis": e.basis(), "samples": e.samples, "observed_max_ns": e.observed_max_ns})
                })
                .collect();
            serde_json::json!({
                "kernel": f.kernel,
                "method": f.table.method.name(),
                "law": f.table.law.as_ref().map(|l| l.law.to_string()),
                "tail": f.table.tail.as_ref().map(|t| t.kind.to_string()),
                "exceedance": f.exceedance,
                "exceedance_basis": f.basis.as_str(),
                "samples_per_size": f.samples,
                "bounds": bounds,
                "notes": f.table.notes,
                "warnings": f.warnings,
            })
        })
        .collect();
    serde_json::json!({"kernels": kernels, "refused": refused})
}

/// Where [`simulate`] hands each batch of launch times: kernel, size, times.
pub type SampleSink<'a> = dyn FnMut(&str, u32, &[u64]) -> anyhow::Result<()> + 'a;

/// Every kernel of a simulated device's profile (the built-in suite, or foreign shapes) at every
/// partition size: `launches` samples each, handed to `sink` batch by batch (kernel, size,
/// times) in launch order, so that no run is held in memory whole (`--launches 100000000` ran
/// out of it). Returns each kernel's launch geometry.
pub fn simulate(
    profile: &DeviceProfile,
    manifests: &[crate::manifest::Manifest],
    (seed, launches): (u64, u32),
    interference: Interference,
    sink: &mut SampleSink,
) -> anyhow::Result<BTreeMap<String, Geometry>> {
    let mut gpu = SimGpu::new(
        profile.clone(),
        SimOptions {
            seed,
            ..SimOptions::default()
        },
    );
    let mut geometry = BTreeMap::new();
    let own = manifests
        .iter()
        .cloned()
        .map(kernels::KernelSpec::from_manifest);
    // A manifest of a profile kernel's name is the one simulated (as when the samples were
    // kept in a map, the manifest's replacing the profile's).
    let shadowed = |name: &String| manifests.iter().any(|m| &m.name == name);
    for kernel in profile
        .kernels
        .keys()
        .filter(|name| !shadowed(name))
        .map(|name| kernels::simulated(name))
        .chain(own)
    {
        for &sms in &gpu.info().partition_sizes.clone() {
            let mut done = 0;
            while done < launches {
                let request = RunRequest {
                    sms,
                    warmup: 0,
                    launches: (launches - done).min(50),
                    interference,
                };
                let batch = gpu
                    .run(&kernel, &request)
                    .with_context(|| format!("simulating {}", kernel.name))?;
                if let Some(g) = batch.geometry {
                    geometry.insert(kernel.name.to_string(), g);
                }
                done += batch.times_ns.len() as u32;
                sink(&kernel.name, sms, &batch.times_ns)?;
            }
        }
    }
    Ok(geometry)
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
    // The daemon measures every size at its default budget, so the first `launches` of every
    // size are what its campaign would have looked for slowdowns in.
    let config = &with_device_slowdown(calibration, budget.launches, config);
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
        // A row with nothing scored printed as 0 violations, which reads as a perfect result.
        if s.sizes == 0 {
            out.push_str(&format!(
                "{:<10} {:<19} no bounds to score (a note below says why, where the method failed)\n",
                kernel,
                m.name()
            ));
            continue;
        }
        out.push_str(&format!(
            "{:<10} {:<19} {:>5} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2} {:>10.1} {:>9.2} {:>7.3} {:>7.2}\n",
            kernel, m.name(), s.sizes, s.violations, s.worst_under_prediction * 100.0, s.mean_pessimism * 100.0,
            s.max_pessimism * 100.0, s.mae_us, s.max_ae_us, s.mse_us2, s.rmse_us, s.r2, s.mape * 100.0
        ));
    }
    out
}

/// Image formats `plot` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

impl PlotFormat {
    /// The format a file name asks for (`.svg`, `.png`), if it asks for one.
    pub fn of(path: &Path) -> Option<PlotFormat> {
        match path.extension()?.to_str()? {
            "svg" => Some(PlotFormat::Svg),
            "png" => Some(PlotFormat::Png),
            _ => None,
        }
    }

    /// Refuse what this build cannot write: its plotting backend draws SVG only (a PNG needs a
    /// font rasteriser), and an SVG is never written under a .png name.
    pub fn check(self) -> anyhow::Result<()> {
        match self {
            PlotFormat::Svg => Ok(()),
            PlotFormat::Png => anyhow::bail!(
                "PNG is not supported by this build (its plotting backend draws SVG only); accepted: an .svg file or a directory (one KERNEL.svg each); convert with e.g. `rsvg-convert -o KERNEL.png KERNEL.svg`"
            ),
        }
    }
}

/// An SVG of one kernel on a log time axis: every held-out sample, the held-out maximum at each
/// size (a black cross), and each method's bound curve with its calibrated sizes as filled dots
/// and the others as open ones. The first method's margin over the held-out maximum is printed
/// at every size (red where the bound is below it).
pub fn plot(
    kernel: &str,
    holdout: &BTreeMap<u32, Vec<u64>>,
    evaluations: &[&KernelEvaluation],
    path: &Path,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    PlotFormat::of(path).unwrap_or(PlotFormat::Svg).check()?;
    let (lo, hi) = time_axis(holdout, evaluations);
    let hi_sms = holdout.keys().copied().max().unwrap_or(1) + 4;
    let root = SVGBackend::new(path, (960, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let (upper, footer) = root.split_vertically(596);
    let mut chart = ChartBuilder::on(&upper)
        .caption(
            format!("{kernel}: held-out launches and bounds vs SMs (log time)"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(0u32..hi_sms, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("SMs in the partition")
        .y_desc("time per launch (µs, log scale)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    draw_holdout(&mut chart, holdout)?;
    for (i, e) in evaluations.iter().enumerate() {
        draw_bounds(&mut chart, e, Palette99::pick(i).to_rgba())?;
    }
    if let Some(first) = evaluations.first() {
        draw_margins(&mut chart, first)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    footer.draw(&Text::new(
        "filled dot: size calibrated on; open dot: fitted or extrapolated; % above the first curve: its margin over the held-out maximum",
        (12, 4),
        ("sans-serif", 12).into_font(),
    ))?;
    root.present()?;
    Ok(())
}

/// The chart [`plot`] draws on: SMs across, microseconds up on a log scale.
type PlotChart<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::backend::SVGBackend<'b>,
    plotters::coord::cartesian::Cartesian2d<
        plotters::coord::types::RangedCoordu32,
        plotters::coord::combinators::LogCoord<f64>,
    >,
>;

/// Nanoseconds as the plot's microseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The plot's time axis in microseconds: from 1.3 times below the fastest to 1.6 times above
/// the slowest of the held-out samples and the bounds, so that none sits on an edge.
fn time_axis(holdout: &BTreeMap<u32, Vec<u64>>, evaluations: &[&KernelEvaluation]) -> (f64, f64) {
    let all_ns = holdout.values().flatten().copied().chain(
        evaluations
            .iter()
            .flat_map(|e| e.pairs.iter().map(|p| p.bound_ns)),
    );
    let (lo, hi) = all_ns.fold((u64::MAX, 1), |(lo, hi), t| (lo.min(t), hi.max(t)));
    (us(lo.max(1)) / 1.3, us(hi) * 1.6)
}

/// Every held-out sample (grey dots) and the held-out maximum at each size (black crosses).
fn draw_holdout(
    chart: &mut PlotChart<'_, '_>,
    holdout: &BTreeMap<u32, Vec<u64>>,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let grey = RGBColor(170, 170, 170);
    let samples = holdout
        .iter()
        .flat_map(|(&m, s)| s.iter().map(move |&t| (m, us(t))));
    chart
        .draw_series(samples.map(|p| Circle::new(p, 1, grey.filled())))?
        .label("held-out launches")
        .legend(move |(x, y)| Circle::new((x + 8, y), 2, grey.filled()));
    let maxima: Vec<(u32, f64)> = holdout
        .iter()
        .filter_map(|(&m, s)| s.iter().max().map(|&t| (m, us(t))))
        .collect();
    chart
        .draw_series(
            maxima
                .iter()
                .map(|&p| Cross::new(p, 5, BLACK.stroke_width(2))),
        )?
        .label("held-out maximum")
        .legend(|(x, y)| Cross::new((x + 8, y), 5, BLACK.stroke_width(2)));
    Ok(())
}

/// One method's bound curve in `color`, labelled with its violations; the sizes it was
/// calibrated at as filled dots, the others as open ones.
fn draw_bounds(
    chart: &mut PlotChart<'_, '_>,
    e: &KernelEvaluation,
    color: plotters::style::RGBAColor,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let line = e.pairs.iter().map(|p| (p.sms, us(p.bound_ns)));
    chart
        .draw_series(LineSeries::new(line, color.stroke_width(2)))?
        .label(match &e.error {
            // No table: a failure, not a curve with no violations.
            Some(_) => format!("{} (made no bounds)", e.method),
            None => format!("{} ({} violations)", e.method, e.score.violations),
        })
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    let measured = |m: u32| e.calibrated_at.contains(&m);
    chart.draw_series(e.pairs.iter().map(|p| {
        let style = if measured(p.sms) {
            color.filled()
        } else {
            WHITE.filled()
        };
        Circle::new((p.sms, us(p.bound_ns)), 4, style)
    }))?;
    chart.draw_series(
        e.pairs
            .iter()
            .filter(|p| !measured(p.sms))
            .map(|p| Circle::new((p.sms, us(p.bound_ns)), 4, color.stroke_width(1))),
    )?;
    Ok(())
}

/// The `first` method's margin over the held-out maximum above its curve at each size, red
/// where the bound is below the maximum.
fn draw_margins(chart: &mut PlotChart<'_, '_>, first: &KernelEvaluation) -> anyhow::Result<()> {
    use plotters::prelude::*;
    chart.draw_series(
        first
            .pairs
            .iter()
            .filter(|p| p.holdout_max_ns > 0)
            .map(|p| {
                let margin = p.bound_ns as f64 / p.holdout_max_ns as f64 - 1.0;
                let color = if margin < 0.0 { RED } else { BLACK };
                Text::new(
                    format!("{:+.0}%", margin * 100.0),
                    (p.sms, us(p.bound_ns) * 1.12),
                    ("sans-serif", 11).into_font().color(&color),
                )
            }),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel name with a comma or a quote is quoted in the bounds CSV, so a reader gets the
    /// name back and three fields per row (it split the row before).
    #[test]
    fn the_bounds_csv_quotes_names_that_need_it() {
        let mut samples = SampleSet::new();
        for name in ["a,b", "say \"hi\""] {
            let times: Vec<u64> = (0..40).map(|i| 1_000 + i).collect();
            samples
                .entry(name.to_string())
                .or_default()
                .insert(8, times);
        }
        let config = MethodConfig::default();
        let (fits, refused) = fit(&samples, &BTreeMap::new(), &[8], Method::Wcetd, &config);
        assert!(refused.is_empty(), "{refused:?}");
        let text = bounds_csv(&fits);
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let names: Vec<String> = reader
            .records()
            .map(|r| {
                let r = r.unwrap();
                assert_eq!(r.len(), 3, "{text}");
                r[0].to_string()
            })
            .collect();
        assert_eq!(names, ["a,b", "say \"hi\""], "{text}");
    }
}
