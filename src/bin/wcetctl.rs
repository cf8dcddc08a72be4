//! `wcetctl`: the operator's and scheduler author's command line. Online commands talk to the
//! daemon over the bus; `fit`, `simulate`, `evaluate` and `plot` work on sample files offline.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wcetd::bus;
use wcetd::client::{self, BoundsProxy, CalibrationProxy};
use wcetd::gpu::sim::DeviceProfile;
use wcetd::gpu::{BackendChoice, Interference};
use wcetd::kernels::Geometry;
use wcetd::model::evaluate::{CalibrationSizes, SampleBudget};
use wcetd::model::{Method, MethodConfig};
use wcetd::{offline, samples, store};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Query and operate wcetd; fit and evaluate bounds offline"
)]
struct Cli {
    /// Bus address of the daemon [default: $WCETD_BUS_ADDRESS, the daemon's private bus, the session bus, the system bus].
    #[arg(long, global = true)]
    bus_address: Option<String>,
    /// The daemon's state directory, where a private bus address is recorded.
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
    /// Machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Kernels the daemon knows.
    List,
    /// The bound of KERNEL on SMS SMs, with where it came from.
    Bound { kernel: String, sms: u32 },
    /// The bound of KERNEL at every realisable partition size.
    Curve { kernel: String },
    /// The smallest partition whose bound meets DEADLINE (ns).
    MinPartition { kernel: String, deadline_ns: u64 },
    /// Recalibrate KERNELs (all when none) and wait, with a progress bar.
    Recalibrate { kernels: Vec<String> },
    /// Device, health, and what is calibrated.
    Status,
    /// Launch times reported from production for KERNEL (Monitor1.GetObserved): count,
    /// quantiles and maximum beside the bound, at SMS or at every partition size.
    Observed { kernel: String, sms: Option<u32> },
    /// A live view of production observations, refreshed like top: per kernel and size, count,
    /// p99, max, bound, headroom and overruns, the least headroom first. When the output is not
    /// a terminal, snapshots are printed one after another.
    Watch {
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
        /// Print one snapshot and exit (as --count 1).
        #[arg(long)]
        once: bool,
        /// Stop after this many snapshots.
        #[arg(long, conflicts_with = "once")]
        count: Option<u64>,
    },
    /// Send every kernel of a samples CSV (kernel,sms,time_ns) to the daemon, which makes bounds
    /// from them with the same method as from its own measurements (origin `imported`).
    Import {
        /// Samples CSV (.csv or .csv.gz).
        #[arg(long)]
        samples: PathBuf,
        /// Geometry CSV (kernel,blocks,blocks_per_sm), for the kernels it names.
        #[arg(long)]
        geometry: Option<PathBuf>,
        /// What interference the samples were measured under.
        #[arg(long, value_enum, default_value = "isolated")]
        interference: Interference,
        /// Where the samples came from (free text, served as `source`) [default: the file name].
        #[arg(long)]
        source: Option<String>,
    },
    /// Kernel manifests: check files offline, or have the daemon reread its kernel directories.
    Kernels {
        #[command(subcommand)]
        action: KernelsAction,
    },
    /// Admission check of a task-set TOML file (see calibration/tasksets/example.toml).
    Admit {
        file: PathBuf,
        /// The tasks share one partition (non-preemptive fixed priority, file order = priority).
        #[arg(long)]
        shared: bool,
    },
    /// Fit bounds from a samples CSV; prints the bounds CSV (kernel,sms,bound_ns).
    Fit {
        #[arg(long)]
        samples: PathBuf,
        #[arg(long)]
        geometry: Option<PathBuf>,
        /// Sizes to bound, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        sizes: Vec<u32>,
        #[arg(long, default_value = "wcetd")]
        method: Method,
    },
    /// Write a simulated samples CSV: every built-in kernel at every partition size.
    Simulate {
        #[arg(long, default_value = "h200")]
        profile: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 200)]
        launches: u32,
        #[arg(long)]
        contended: bool,
        /// Also write the geometry CSV here.
        #[arg(long)]
        geometry_out: Option<PathBuf>,
    },
    /// Calibrate on some sizes of a samples file and score every method on held-out samples.
    Evaluate {
        #[command(flatten)]
        data: Datasets,
        /// Methods to compare [default: all].
        #[arg(long, value_delimiter = ',')]
        methods: Vec<Method>,
        /// Write one SVG per kernel into this directory.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Samples per size a calibration uses (the first ones in the file), as the daemon's --launches.
        #[arg(long, default_value_t = 200)]
        launches: usize,
        /// Extra samples at the largest size that screen for a heavy tail, as the daemon takes.
        #[arg(long, default_value_t = 2000)]
        screen_launches: usize,
        /// Samples per size used instead when the tail is heavy, as the daemon does.
        #[arg(long, default_value_t = 10_000)]
        heavy_tail_launches: usize,
        /// Verification-sweep samples at each size not calibrated at, as the daemon takes (0: no sweep).
        #[arg(long, default_value_t = 32)]
        sweep_launches: usize,
    },
    /// Measure every kernel at every realisable partition size on a device (the real GPU or the
    /// simulator) and write a dataset: samples-<interference>.csv, geometry.csv, stamp.json.
    Campaign {
        #[command(flatten)]
        device: DeviceArgs,
        /// Timed launches per kernel, size and interference.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        launches: u32,
        /// Launches per batch (telemetry is summarised per batch).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
        batch: u32,
        /// Untimed launches before the first batch at each size (later batches warm up once).
        #[arg(long, default_value_t = 10)]
        warmup: u32,
        /// Interference to measure under, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "isolated")]
        interference: Vec<Interference>,
        /// Kernels to measure [default: the built-in suite].
        #[arg(long, value_delimiter = ',')]
        kernels: Vec<String>,
        /// Partition sizes [default: every realisable size].
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<u32>,
        /// Launches of the delay probe, written to delays.csv (0: none).
        #[arg(long, default_value_t = wcetd::calibrate::DELAY_PROBE_LAUNCHES)]
        delay_probe: u32,
        /// Partition sizes to run the delay probe on [default: the whole device]; each writes
        /// delays-<SMS>.csv beside delays.csv (the whole device's).
        #[arg(long, value_delimiter = ',')]
        delay_probe_sizes: Vec<u32>,
        /// Directory to write the dataset into (created if missing).
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Prove every partition of a device: run the placement probe on each partition and its
    /// remainder at once and print the SM sets (JSON with --json).
    Probe {
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// Predict mean times on another device from measured runs (gpu-perf CSV columns); prints
    /// kernel,N,rows,cols,predicted_ms. A prediction, never a bound.
    Project {
        /// Measured runs of one device (RUNS.csv).
        #[arg(long)]
        source: PathBuf,
        /// The device to predict for: a description TOML, or a committed one (rtx4070, titanx, h200, embedded).
        #[arg(long)]
        target: String,
        /// Configurations to predict [default: the rows of --source]; measured columns are ignored.
        #[arg(long)]
        configs: Option<PathBuf>,
    },
    /// Predicted typical time of a built-in KERNEL at every partition size of a device it may never
    /// have run on. A prediction, never a bound.
    Predict {
        kernel: String,
        /// A description TOML, or a committed one (rtx4070, titanx, h200, embedded).
        #[arg(long)]
        device: String,
        /// Partition sizes [default: every TPC, 2, 4, ... up to the device's SMs].
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<u32>,
    },
    /// The pre-registered prediction study of docs/prediction.md on the gpu-perf dataset.
    PredictionStudy {
        /// Directory with runs_4070.csv and runs_titanx.csv.
        #[arg(long, default_value = "calibration/gpu-perf")]
        data: PathBuf,
        /// Directory with rtx4070.toml and titanx.toml.
        #[arg(long, default_value = "calibration/devices")]
        devices: PathBuf,
        /// Every row as labelled, instead of the rows that ran at their labelled size.
        #[arg(long)]
        as_labelled: bool,
        /// Also list every scored row.
        #[arg(long)]
        rows: bool,
        /// L2 bandwidth of both devices as a multiple of their DRAM bandwidth [default: 3].
        #[arg(long)]
        l2_over_dram: Option<f64>,
    },
    /// Plot one kernel's samples and every method's bound curve (SVG).
    Plot {
        kernel: String,
        #[command(flatten)]
        data: Datasets,
        #[arg(long, short)]
        out: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum KernelsAction {
    /// Validate manifests offline: syntax, keys, module found, entry point present, PTX
    /// parameters against `args`. Exit status 0 when every file is accepted, 1 otherwise.
    Check { files: Vec<PathBuf> },
    /// Ask the daemon to reread its kernel directories (Calibration1.ReloadKernels); new kernels
    /// are queued for calibration.
    Reload,
}

/// Which device `campaign` and `probe` open directly (not through the daemon).
#[derive(clap::Args, Debug)]
struct DeviceArgs {
    /// GPU backend: `cuda`, `sim`, or `auto` (CUDA when a driver loads).
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Simulator device profile: `h200`, `embedded`, or a TOML file.
    #[arg(long, default_value = "h200")]
    sim_profile: String,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl DeviceArgs {
    fn open(&self) -> anyhow::Result<Box<dyn wcetd::gpu::Gpu>> {
        let options = wcetd::gpu::sim::SimOptions {
            seed: self.seed,
            ..Default::default()
        };
        Ok(wcetd::gpu::open(
            self.backend,
            DeviceProfile::load(&self.sim_profile)?,
            options,
        )?)
    }
}

/// The sample files an offline evaluation or plot works on.
#[derive(clap::Args, Debug)]
struct Datasets {
    /// Calibration samples CSV (kernel,sms,time_ns).
    #[arg(long)]
    samples: PathBuf,
    /// Held-out samples (fresh runs); default: the samples file itself.
    #[arg(long)]
    holdout: Option<PathBuf>,
    /// Geometry CSV (kernel,blocks,blocks_per_sm).
    #[arg(long)]
    geometry: Option<PathBuf>,
    /// `planner` (the daemon's planner, budget 5) or comma-separated sizes.
    #[arg(long, default_value = "planner")]
    calibrate_at: String,
    /// Delay-probe launch times (CSV with a `time_ns` column, as `campaign` writes delays.csv):
    /// the device's rare delays, which the daemon probes before each calibration job.
    #[arg(long)]
    delays: Option<PathBuf>,
}

/// [`Datasets`], read and checked.
struct Loaded {
    calibration: samples::SampleSet,
    held: samples::SampleSet,
    geometry: BTreeMap<String, Geometry>,
    sizes: CalibrationSizes,
}

impl Datasets {
    fn load(&self) -> anyhow::Result<Loaded> {
        let calibration = read_samples(&self.samples)?;
        let held = match &self.holdout {
            Some(p) => read_samples(p)?,
            None => calibration.clone(),
        };
        Ok(Loaded {
            calibration,
            held,
            geometry: read_geometry(self.geometry.as_deref())?,
            sizes: calibration_sizes(&self.calibrate_at)?,
        })
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wcetctl: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Fit {
            ref samples,
            ref geometry,
            ref sizes,
            method,
        } => fit(samples, geometry.as_deref(), sizes, method),
        Command::Simulate {
            ref profile,
            seed,
            launches,
            contended,
            ref geometry_out,
        } => simulate(profile, seed, launches, contended, geometry_out.as_deref()),
        Command::Evaluate {
            ref data,
            ref methods,
            ref plot,
            launches,
            screen_launches,
            heavy_tail_launches,
            sweep_launches,
        } => {
            let budget = SampleBudget {
                launches,
                screen_launches,
                heavy_tail_launches,
                sweep_launches,
            };
            evaluate(cli.json, data, methods, plot.as_deref(), budget)
        }
        Command::Plot {
            ref kernel,
            ref data,
            ref out,
        } => plot_one(kernel, data, out),
        Command::Campaign {
            ref device,
            launches,
            batch,
            warmup,
            ref interference,
            ref kernels,
            ref sizes,
            delay_probe,
            ref delay_probe_sizes,
            ref out,
        } => {
            let settings = wcetd::sweep::SweepSettings {
                launches,
                batch,
                warmup,
                interference: interference.clone(),
                sizes: sizes.clone(),
            };
            let probe = (delay_probe, delay_probe_sizes.as_slice());
            campaign(device, &settings, kernels, probe, out)
        }
        Command::Probe { ref device } => probe(cli.json, device),
        Command::Kernels {
            action: KernelsAction::Check { ref files },
        } => check_manifests(cli.json, files),
        Command::Project {
            ref source,
            ref target,
            ref configs,
        } => project(source, target, configs.as_deref()),
        Command::Predict {
            ref kernel,
            ref device,
            ref sizes,
        } => predict(cli.json, kernel, device, sizes),
        Command::PredictionStudy {
            ref data,
            ref devices,
            as_labelled,
            rows,
            l2_over_dram,
        } => prediction_study(data, devices, as_labelled, rows, l2_over_dram),
        _ => online(cli).await,
    }
}

async fn online(cli: Cli) -> anyhow::Result<()> {
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(store::default_state_dir);
    let conn = bus::connect(&bus::client_address(cli.bus_address.as_deref(), &state_dir)).await?;
    let bounds = BoundsProxy::new(&conn).await?;
    let json = cli.json;
    match cli.command {
        Command::List => print_list(json, bounds.list_kernels().await.map_err(explain)?),
        Command::Bound { kernel, sms } => print_bound(json, &bounds, &kernel, sms).await,
        Command::Curve { kernel } => print_curve(json, &bounds, &kernel).await,
        Command::MinPartition {
            kernel,
            deadline_ns,
        } => {
            let sms = bounds
                .min_partition(&kernel, deadline_ns)
                .await
                .map_err(explain)?;
            let bound = bounds.get_bound(&kernel, sms).await.map_err(explain)?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"kernel": kernel, "deadline_ns": deadline_ns, "sms": sms, "bound_ns": bound})
                );
            } else {
                println!("{kernel}: {sms} SMs (bound {bound} ns <= deadline {deadline_ns} ns)");
            }
            Ok(())
        }
        Command::Recalibrate { kernels } => recalibrate(json, &conn, &kernels).await,
        Command::Import {
            samples,
            geometry,
            interference,
            source,
        } => {
            let set = read_samples(&samples)?;
            let geometry = read_geometry(geometry.as_deref())?;
            let source = source.unwrap_or_else(|| samples.display().to_string());
            import(json, &conn, &set, &geometry, interference, &source).await
        }
        Command::Kernels {
            action: KernelsAction::Reload,
        } => reload_kernels(json, &conn).await,
        Command::Status => status(json, &bounds).await,
        Command::Observed { kernel, sms } => {
            let rows = wcetd::monitor_view::observed(&conn, &kernel, sms).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", wcetd::monitor_view::render(&rows));
            }
            Ok(())
        }
        Command::Watch {
            interval,
            once,
            count,
        } => {
            if !(interval.is_finite() && interval > 0.0) {
                bail!("--interval {interval}; accepted: seconds above 0");
            }
            let count = if once { Some(1) } else { count };
            let every = std::time::Duration::from_secs_f64(interval);
            wcetd::monitor_view::watch(&conn, every, count, json).await
        }
        Command::Admit { file, shared } => {
            print!(
                "{}",
                wcetd::admission_bus::admit_file(&conn, &file, shared).await?
            );
            Ok(())
        }
        _ => unreachable!("offline commands are handled before connecting"),
    }
}

/// A bus error as the daemon phrased it: its name and its message, nothing else.
fn explain(e: zbus::Error) -> anyhow::Error {
    match e {
        zbus::Error::MethodError(name, Some(msg), _) => anyhow::anyhow!("{msg} ({name})"),
        zbus::Error::FDO(e) => {
            let name = zbus::DBusError::name(&*e).to_string();
            anyhow::anyhow!(
                "{} ({name})",
                zbus::DBusError::description(&*e).unwrap_or("")
            )
        }
        e => anyhow::anyhow!(e),
    }
}

fn print_list(json: bool, kernels: Vec<String>) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(&kernels)?);
    } else {
        kernels.iter().for_each(|k| println!("{k}"));
    }
    Ok(())
}

async fn print_bound(
    json: bool,
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    sms: u32,
) -> anyhow::Result<()> {
    let info = bounds.get_bound_info(kernel, sms).await.map_err(explain)?;
    let mut sorted: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (k, v) in info {
        sorted.insert(k, variant_json(&v));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&sorted)?);
    } else {
        for (k, v) in &sorted {
            println!(
                "{k:>20}  {}",
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            );
        }
    }
    Ok(())
}

fn variant_json(v: &zbus::OwnedVariant) -> serde_json::Value {
    if let Ok(x) = u64::try_from(v) {
        return x.into();
    }
    if let Ok(x) = u32::try_from(v) {
        return x.into();
    }
    if let Ok(x) = bool::try_from(v) {
        return x.into();
    }
    if let Ok(x) = <&str>::try_from(v) {
        return x.into();
    }
    serde_json::Value::String(format!("{v:?}"))
}

async fn print_curve(json: bool, bounds: &BoundsProxy<'_>, kernel: &str) -> anyhow::Result<()> {
    const COLUMNS: [&str; 7] = [
        "provenance",
        "observed_max_ns",
        "samples",
        "typical_ns",
        "mean_ns",
        "predicted_typical_ns",
        "prediction",
    ];
    let curve = bounds.get_curve(kernel).await.map_err(explain)?;
    let mut rows = Vec::new();
    for (sms, bound) in &curve {
        let info = bounds.get_bound_info(kernel, *sms).await.map_err(explain)?;
        let values: Vec<serde_json::Value> = COLUMNS
            .iter()
            .map(|k| info.get(*k).map(variant_json).unwrap_or_default())
            .collect();
        rows.push((*sms, *bound, values));
    }
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(sms, bound, values)| {
                let mut o = serde_json::json!({"sms": sms, "bound_ns": bound});
                for (k, v) in COLUMNS.iter().zip(values) {
                    o[*k] = v.clone();
                }
                o
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{kernel}\n{:>5}  {:>14}  {:<12}  {:>15}  {:>7}  {:>12}  {:>12}  {:>12}",
        "SMs",
        "bound_ns",
        "provenance",
        "observed_max_ns",
        "samples",
        "typical_ns",
        "mean_ns",
        "predicted_ns"
    );
    // JSON values ignore width and alignment, so render them as text first.
    let text = |v: &serde_json::Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string())
    };
    let mut label = String::new();
    for (sms, bound, v) in &rows {
        let t: Vec<String> = v.iter().map(text).collect();
        println!(
            "{sms:>5}  {bound:>14}  {:<12}  {:>15}  {:>7}  {:>12}  {:>12}  {:>12}",
            t[0], t[1], t[2], t[3], t[4], t[5]
        );
        label.clone_from(&t[6]);
    }
    println!("typical_ns, mean_ns: measured median and mean (0 where not measured)\npredicted_ns: {label}");
    Ok(())
}

async fn recalibrate(
    json: bool,
    conn: &zbus::Connection,
    kernels: &[String],
) -> anyhow::Result<()> {
    let calibration = CalibrationProxy::new(conn).await?;
    let names: Vec<&str> = kernels.iter().map(String::as_str).collect();
    let job = calibration.recalibrate(&names).await.map_err(explain)?;
    let bar = (!json).then(|| {
        let bar = indicatif::ProgressBar::new(1000);
        bar.set_style(
            indicatif::ProgressStyle::with_template("job {msg} [{bar:40}] {percent:>3}% {elapsed}")
                .expect("progress template")
                .progress_chars("=> "),
        );
        bar.set_message(job.to_string());
        bar
    });
    let (state, message) = client::wait_for_job(&calibration, job, |p| {
        if let Some(b) = &bar {
            b.set_position((p * 1000.0) as u64);
        }
    })
    .await?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if json {
        println!(
            "{}",
            serde_json::json!({"job": job, "state": state, "message": message})
        );
    } else {
        println!("job {job}: {state}: {message}");
    }
    if state != "done" {
        bail!("job {job} ended {state}");
    }
    Ok(())
}

/// One `ImportSamples` call per kernel, each waited for; a progress bar over the samples sent.
async fn import(
    json: bool,
    conn: &zbus::Connection,
    set: &samples::SampleSet,
    geometry: &BTreeMap<String, Geometry>,
    interference: Interference,
    source: &str,
) -> anyhow::Result<()> {
    let calibration = CalibrationProxy::new(conn).await?;
    let total: u64 = set
        .values()
        .flat_map(|s| s.values())
        .map(|t| t.len() as u64)
        .sum();
    let bar = (!json && total > 100_000).then(|| {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg:24} [{bar:30}] {pos}/{len} samples, ETA {eta}",
            )
            .expect("progress template"),
        );
        bar
    });
    let mut results = Vec::new();
    let mut failed = 0;
    for (kernel, sizes) in set {
        let pairs: Vec<(u32, u64)> = sizes
            .iter()
            .flat_map(|(&m, times)| times.iter().map(move |&t| (m, t)))
            .collect();
        let mut options = std::collections::HashMap::new();
        options.insert("source", zbus::Variant::from(source));
        options.insert(
            "interference",
            zbus::Variant::from(interference.to_string()),
        );
        if let Some(g) = geometry.get(kernel) {
            options.insert("blocks", g.blocks.into());
            options.insert("blocks_per_sm", g.blocks_per_sm.into());
        }
        if let Some(b) = &bar {
            b.set_message(kernel.clone());
        }
        let job = calibration
            .import_samples(kernel, &pairs, options)
            .await
            .map_err(explain)
            .with_context(|| format!("importing {kernel}"))?;
        let (state, message) = client::wait_for_job(&calibration, job, |_| {}).await?;
        if let Some(b) = &bar {
            b.inc(pairs.len() as u64);
        }
        failed += usize::from(state != "done");
        results.push(serde_json::json!({"kernel": kernel, "job": job, "samples": pairs.len(), "state": state, "message": message}));
        if !json {
            let line = format!(
                "{kernel}: {} samples, job {job} {state}: {message}",
                pairs.len()
            );
            match &bar {
                Some(b) => b.println(line),
                None => println!("{line}"),
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if json {
        println!("{}", serde_json::Value::Array(results));
    }
    if failed > 0 {
        bail!("{failed} of {} kernels were not imported", set.len());
    }
    Ok(())
}

async fn reload_kernels(json: bool, conn: &zbus::Connection) -> anyhow::Result<()> {
    let calibration = CalibrationProxy::new(conn).await?;
    let (added, removed, rejected) = calibration.reload_kernels().await.map_err(explain)?;
    if json {
        let rejected: Vec<_> = rejected
            .iter()
            .map(|(f, r)| serde_json::json!({"file": f, "reason": r}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"added": added, "removed": removed, "rejected": rejected})
        );
    } else {
        println!(
            "added:   {}",
            if added.is_empty() {
                "-".into()
            } else {
                added.join(", ")
            }
        );
        println!(
            "removed: {}",
            if removed.is_empty() {
                "-".into()
            } else {
                removed.join(", ")
            }
        );
        for (file, reason) in &rejected {
            println!("rejected {file}: {reason}");
        }
    }
    if !rejected.is_empty() {
        bail!("{} manifest(s) rejected", rejected.len());
    }
    Ok(())
}

/// `kernels check`: each file loaded as the daemon would load it.
fn check_manifests(json: bool, files: &[PathBuf]) -> anyhow::Result<()> {
    if files.is_empty() {
        bail!("no files given; accepted: one or more kernel manifest (.toml) paths");
    }
    let mut bad = 0;
    let mut out = Vec::new();
    for file in files {
        let result = wcetd::manifest::load(file);
        bad += usize::from(result.is_err());
        match (&result, json) {
            (Ok(m), false) => println!(
                "{}: ok: {} ({} of {}, {} blocks of {} threads, {} args)",
                file.display(),
                m.name,
                m.entry,
                m.module.display(),
                m.blocks(),
                m.threads_per_block(),
                m.args.len()
            ),
            (Err(why), false) => println!("{}: rejected: {why}", file.display()),
            (Ok(m), true) => {
                out.push(serde_json::json!({"file": file, "ok": true, "kernel": m.name}))
            }
            (Err(why), true) => {
                out.push(serde_json::json!({"file": file, "ok": false, "reason": why}))
            }
        }
    }
    if json {
        println!("{}", serde_json::Value::Array(out));
    }
    if bad > 0 {
        bail!("{bad} of {} manifest(s) rejected", files.len());
    }
    Ok(())
}

async fn status(json: bool, bounds: &BoundsProxy<'_>) -> anyhow::Result<()> {
    let device = bounds.device().await?;
    let backend = bounds.backend().await?;
    let total = bounds.total_sms().await?;
    let sizes = bounds.partition_sizes().await?;
    let health = bounds.health().await?;
    let stale = bounds.stale_kernels().await?;
    // A daemon without Monitor1 (older than it) has nothing to say here.
    let overrun = match wcetd::monitor_bus::Monitor1Proxy::new(bounds.inner().connection()).await {
        Ok(m) => m.overrun_kernels().await.unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let mut calibrated = Vec::new();
    for k in bounds.list_kernels().await? {
        let ok = bounds
            .get_bound(&k, sizes.first().copied().unwrap_or(0))
            .await
            .is_ok();
        calibrated.push((k, ok));
    }
    if json {
        let kernels: BTreeMap<_, _> = calibrated.iter().cloned().collect();
        println!(
            "{}",
            serde_json::json!({"device": device, "backend": backend, "total_sms": total, "partition_sizes": sizes,
                "health": health, "stale_kernels": stale, "calibrated": kernels, "overrun_kernels": overrun})
        );
        return Ok(());
    }
    println!("device      {device} ({backend}, {total} SMs)\npartitions  {sizes:?}\nhealth      {health}");
    if !overrun.is_empty() {
        println!(
            "overruns    {} (a reported launch exceeded a bound since calibration; see wcetctl observed)",
            overrun.join(", ")
        );
    }
    for (k, ok) in calibrated {
        let state = if stale.contains(&k) {
            "stale"
        } else if overrun.contains(&k) {
            "calibrated, OVERRUN"
        } else if ok {
            "calibrated"
        } else {
            "not calibrated"
        };
        println!("  {k:<10} {state}");
    }
    Ok(())
}

/// A samples file, gzip-compressed when its name ends in `.gz` (as the recorded datasets are).
fn read_samples(path: &Path) -> anyhow::Result<samples::SampleSet> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let input: Box<dyn std::io::Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)))
    } else {
        Box::new(std::io::BufReader::new(file))
    };
    samples::read_samples(input).with_context(|| format!("reading {}", path.display()))
}

fn read_geometry(path: Option<&Path>) -> anyhow::Result<BTreeMap<String, Geometry>> {
    let Some(path) = path else {
        return Ok(BTreeMap::new());
    };
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    samples::read_geometry(file).with_context(|| format!("reading {}", path.display()))
}

fn fit(
    samples_path: &Path,
    geometry: Option<&Path>,
    sizes: &[u32],
    method: Method,
) -> anyhow::Result<()> {
    if sizes.contains(&0) {
        bail!("--sizes contains 0; accepted: comma-separated SM counts, each at least 1");
    }
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let set = read_samples(samples_path)?;
    let csv = offline::fit_csv(
        &set,
        &read_geometry(geometry)?,
        &sizes,
        method,
        &MethodConfig::default(),
    )?;
    print!("{csv}");
    Ok(())
}

fn simulate(
    profile: &str,
    seed: u64,
    launches: u32,
    contended: bool,
    geometry_out: Option<&Path>,
) -> anyhow::Result<()> {
    let tag = if contended {
        Interference::Contended
    } else {
        Interference::Isolated
    };
    let (set, geometry) = offline::simulate(&DeviceProfile::load(profile)?, seed, launches, tag)?;
    samples::write_samples(std::io::stdout().lock(), &set)?;
    if let Some(path) = geometry_out {
        let mut text = String::from("kernel,blocks,blocks_per_sm\n");
        for (k, g) in geometry {
            text.push_str(&format!("{k},{},{}\n", g.blocks, g.blocks_per_sm));
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn campaign(
    device: &DeviceArgs,
    settings: &wcetd::sweep::SweepSettings,
    names: &[String],
    (delay_probe, probe_sizes): (u32, &[u32]),
    out: &Path,
) -> anyhow::Result<()> {
    let suite = wcetd::kernels::builtin_suite();
    let kernels: Vec<_> = if names.is_empty() {
        suite
    } else {
        names
            .iter()
            .map(|n| {
                suite
                    .iter()
                    .find(|k| k.name == *n)
                    .cloned()
                    .with_context(|| {
                        format!(
                            "unknown kernel `{n}`; accepted: {}",
                            wcetd::kernels::BUILTIN_NAMES.join(", ")
                        )
                    })
            })
            .collect::<anyhow::Result<_>>()?
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut gpu = device.open()?;
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:32} [{bar:30}] {pos}/{len} launches, ETA {eta}",
        )
        .expect("static template"),
    );
    let sweep = wcetd::sweep::run(
        gpu.as_mut(),
        &kernels,
        settings,
        &mut |done, total, what| {
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(what.to_string());
        },
    )?;
    bar.finish_and_clear();
    if delay_probe > 0 {
        let whole = gpu.info().total_sms;
        let sizes = if probe_sizes.is_empty() {
            vec![whole]
        } else {
            probe_sizes.to_vec()
        };
        for sms in sizes {
            let times = gpu.delay_probe(sms, delay_probe)?;
            let mut text = String::from("time_ns\n");
            for t in times {
                text.push_str(&format!("{t}\n"));
            }
            let name = if sms == whole {
                "delays.csv".into()
            } else {
                format!("delays-{sms}.csv")
            };
            std::fs::write(out.join(name), text)?;
        }
    }
    for &tag in &settings.interference {
        let path = out.join(format!("samples-{tag}.csv"));
        let file =
            std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
        wcetd::sweep::write_rows(std::io::BufWriter::new(file), &sweep.rows, tag)?;
    }
    let mut geometry = String::from("kernel,blocks,blocks_per_sm\n");
    for (k, g) in &sweep.geometry {
        geometry.push_str(&format!("{k},{},{}\n", g.blocks, g.blocks_per_sm));
    }
    std::fs::write(out.join("geometry.csv"), geometry)?;
    std::fs::write(
        out.join("stamp.json"),
        serde_json::to_string_pretty(&sweep.stamp)? + "\n",
    )?;
    eprintln!(
        "wcetctl: {} launches of {} kernels on {} ({}), written to {}",
        sweep.rows.len(),
        kernels.len(),
        sweep.stamp.gpu,
        sweep.stamp.backend,
        out.display()
    );
    Ok(())
}

fn probe(json: bool, device: &DeviceArgs) -> anyhow::Result<()> {
    let gpu = device.open()?;
    let reports = gpu.placement();
    if json {
        println!("{}", serde_json::to_string_pretty(reports)?);
        return Ok(());
    }
    if reports.is_empty() {
        println!("{}: no placement to probe on this backend", gpu.info().name);
        return Ok(());
    }
    println!(
        "{:>5} {:>7} {:>9} {:>10}  result",
        "asked", "granted", "rest", "ran on"
    );
    for r in reports {
        println!(
            "{:>5} {:>7} {:>9} {:>10}  {}",
            r.requested_sms,
            r.granted_sms,
            r.rest_sms,
            format!("{}+{}", r.sm_ids.len(), r.rest_ids.len()),
            r.problem()
                .unwrap_or_else(|| "disjoint and complete".into())
        );
    }
    Ok(())
}

fn calibration_sizes(spec: &str) -> anyhow::Result<CalibrationSizes> {
    if spec == "planner" {
        return Ok(CalibrationSizes::Planner(5));
    }
    let sizes: Result<Vec<u32>, _> = spec.split(',').map(|s| s.trim().parse::<u32>()).collect();
    match sizes {
        Ok(s) if !s.is_empty() && !s.contains(&0) => Ok(CalibrationSizes::Fixed(s)),
        _ => bail!("--calibrate-at `{spec}`; accepted: `planner` or comma-separated SM counts, each at least 1"),
    }
}

/// The method's configuration, with the device's rare delays when a delay-probe file is given.
fn method_config(delays: Option<&Path>) -> anyhow::Result<MethodConfig> {
    let mut config = MethodConfig::default();
    let Some(path) = delays else {
        return Ok(config);
    };
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("opening {}", path.display()))?;
    let mut times = Vec::new();
    for (i, row) in reader.deserialize::<(u64,)>().enumerate() {
        let (t,) = row.with_context(|| {
            format!(
                "{}, row {}: accepted: a `time_ns` column of whole nanoseconds",
                path.display(),
                i + 2
            )
        })?;
        times.push(t);
    }
    if let Some(d) = wcetd::model::tail::device_delay(&times, config.exceedance) {
        eprintln!("wcetctl: {}", d.note);
        config.device_delay_ns = d.ns;
        config.device_delay_exceedance = d.exceedance;
    }
    Ok(config)
}

fn evaluate(
    json: bool,
    data: &Datasets,
    methods: &[Method],
    plot_dir: Option<&Path>,
    budget: SampleBudget,
) -> anyhow::Result<()> {
    let methods = if methods.is_empty() {
        Method::ALL.to_vec()
    } else {
        methods.to_vec()
    };
    let Loaded {
        calibration,
        held,
        geometry,
        sizes,
    } = data.load()?;
    let config = method_config(data.delays.as_deref())?;
    let evals = offline::evaluate_all(
        &calibration,
        &held,
        &geometry,
        &sizes,
        &methods,
        &config,
        budget,
    );
    if let Some(dir) = plot_dir {
        std::fs::create_dir_all(dir)?;
        for kernel in calibration.keys().filter(|k| held.contains_key(*k)) {
            let mine: Vec<_> = evals.iter().filter(|e| &e.kernel == kernel).collect();
            offline::plot(
                kernel,
                &held[kernel],
                &mine,
                &dir.join(format!("{kernel}.svg")),
            )?;
        }
    }
    let pooled = offline::pooled(&evals, &methods);
    if json {
        let overall: Vec<_> = pooled
            .iter()
            .map(|(m, s, f)| serde_json::json!({"method": m, "score": s, "failed_kernels": f}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"kernels": evals, "overall": overall})
            )?
        );
        return Ok(());
    }
    let mut rows: Vec<_> = evals
        .iter()
        .map(|e| (e.kernel.clone(), e.method, e.score.clone()))
        .collect();
    rows.extend(
        pooled
            .iter()
            .map(|(m, s, _)| ("ALL".to_string(), *m, s.clone())),
    );
    print!("{}", offline::score_table(&rows));
    for e in evals.iter().filter(|e| e.error.is_some()) {
        println!(
            "note: {} / {}: {}",
            e.kernel,
            e.method,
            e.error.as_deref().unwrap_or("")
        );
    }
    let mut seen = Vec::new();
    for e in &evals {
        if !seen.contains(&e.kernel) {
            println!("calibrated {} at {:?}", e.kernel, e.calibrated_at);
            seen.push(e.kernel.clone());
        }
    }
    Ok(())
}

fn plot_one(kernel: &str, data: &Datasets, out: &Path) -> anyhow::Result<()> {
    let Loaded {
        calibration,
        held,
        geometry,
        sizes,
    } = data.load()?;
    let (Some(cal), Some(hold)) = (calibration.get(kernel), held.get(kernel)) else {
        bail!(
            "kernel `{kernel}` is not in both sample files; accepted: {}",
            calibration.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    };
    let single: wcetd::samples::SampleSet = [(kernel.to_string(), cal.clone())].into();
    let evals = offline::evaluate_all(
        &single,
        &held,
        &geometry,
        &sizes,
        &Method::ALL,
        &MethodConfig::default(),
        SampleBudget::default(),
    );
    let refs: Vec<_> = evals.iter().collect();
    offline::plot(kernel, hold, &refs, out)?;
    println!("wrote {}", out.display());
    Ok(())
}

fn project(source: &Path, target: &str, configs: Option<&Path>) -> anyhow::Result<()> {
    use wcetd::model::predict::{self, runs};
    let runs = runs::read_runs_file(source)?;
    let target = predict::device::load(target)?;
    let configs = match configs {
        Some(p) => runs::read_configs_file(p)?,
        None => runs.iter().map(|r| r.config.clone()).collect(),
    };
    let rows = predict::project(&runs, &target, &configs)
        .with_context(|| format!("learning from {}", source.display()))?;
    let mut unseen: Vec<&str> = rows
        .iter()
        .filter(|(_, _, b)| *b == predict::Basis::Static)
        .map(|(c, _, _)| c.kernel.as_str())
        .collect();
    unseen.dedup();
    if !unseen.is_empty() {
        eprintln!(
            "note: no runs of {} in {}: predicted from their static counts alone",
            unseen.join(", "),
            source.display()
        );
    }
    print!("{}", predict::projection_csv(&rows));
    Ok(())
}

fn predict(json: bool, kernel: &str, device: &str, sizes: &[u32]) -> anyhow::Result<()> {
    let d = wcetd::model::predict::device::load(device)?;
    let work = wcetd::workload::builtin(kernel)?;
    let sizes: Vec<u32> = if sizes.is_empty() {
        (1..=d.sms / 2).map(|t| 2 * t).chain([d.sms]).collect()
    } else if sizes.contains(&0) {
        bail!("--sizes contains 0; accepted: comma-separated SM counts, each at least 1");
    } else {
        sizes.to_vec()
    };
    let curve = wcetd::model::predict::partition_curve(&work, &d, &sizes);
    if json {
        println!(
            "{}",
            serde_json::json!({"kernel": kernel, "device": d.name, "basis": work.basis,
                "knee_sms": curve.knee(), "predicted_typical_ns": curve.points})
        );
        return Ok(());
    }
    println!(
        "{kernel} on {} (a prediction of the typical time, never a bound)\nbasis: {}",
        d.name, work.basis
    );
    println!("{:>5}  {:>20}", "SMs", "predicted_typical_ns");
    for (m, t) in &curve.points {
        println!("{m:>5}  {:>20}", t.round() as u64);
    }
    if let Some(k) = curve.knee() {
        println!("knee: {k} SMs (within 5% of the whole device)");
    }
    Ok(())
}

fn prediction_study(
    data: &Path,
    devices: &Path,
    as_labelled: bool,
    rows: bool,
    l2_over_dram: Option<f64>,
) -> anyhow::Result<()> {
    use wcetd::model::predict::{runs, study, DeviceDescription};
    let a = runs::read_runs_file(&data.join("runs_4070.csv"))?;
    let b = runs::read_runs_file(&data.join("runs_titanx.csv"))?;
    let mut da = DeviceDescription::load(&devices.join("rtx4070.toml"))?;
    let mut db = DeviceDescription::load(&devices.join("titanx.toml"))?;
    if let Some(x) = l2_over_dram {
        if !(x.is_finite() && x > 0.0) {
            bail!("--l2-over-dram {x}; accepted: a positive multiple of the DRAM bandwidth");
        }
        for d in [&mut da, &mut db] {
            d.l2_bandwidth_gbps = Some(x * d.mem_bandwidth_gbps);
        }
    }
    let outcomes = study::run_all((&a, &da), (&b, &db), !as_labelled)?;
    print!("{}", study::report(&outcomes, rows));
    Ok(())
}
