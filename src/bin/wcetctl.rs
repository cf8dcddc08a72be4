//! `wcetctl`: the operator's and scheduler author's command line. Online commands talk to the
//! daemon over the bus; `fit`, `simulate`, `evaluate` and `plot` work on sample files offline.
//! Exit status: 0 success (admitted), 1 a task set not admitted, 2 an error, 130 interrupted.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use wcetd::client::{BoundsProxy, CalibrationProxy};
use wcetd::gpu::sim::DeviceProfile;
use wcetd::gpu::{BackendChoice, Interference};
use wcetd::kernels::Geometry;
use wcetd::model::evaluate::{CalibrationSizes, SampleBudget};
use wcetd::model::{Method, MethodConfig};
use wcetd::{admission_bus, bus, taskset};
use wcetd::{offline, samples, store};

/// What `--help` and the man page say about exit statuses.
const EXIT_STATUS: &str = "Exit status: 0 success (for admit and suggest: the set is admitted), \
1 the task set is not admitted (kernels check: a manifest is rejected), 2 an error (bad input, no daemon, a failed job), \
130 interrupted (Ctrl-C during recalibrate cancels the job first).";

#[derive(Parser, Debug)]
#[command(
    name = "wcetctl",
    version,
    about = "Query and operate wcetd; fit and evaluate bounds offline",
    after_help = EXIT_STATUS
)]
struct Cli {
    /// Bus address of the daemon [default: $WCETD_BUS_ADDRESS, the daemon's private bus, the session bus, the system bus].
    #[arg(long, global = true)]
    bus_address: Option<String>,
    /// The daemon's state directory, where a private bus address is recorded [default: $STATE_DIRECTORY, else $XDG_STATE_HOME/wcetd, else ~/.local/state/wcetd].
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
    /// Machine-readable JSON on standard output instead of tables (every command).
    #[arg(long, global = true)]
    json: bool,
    /// The GPU to ask (its index; `wcetctl status` lists them) [default: the daemon's default GPU].
    #[arg(long, global = true, value_name = "N", value_parser = gpu_index)]
    gpu: Option<u32>,
    #[command(subcommand)]
    command: Command,
}

/// The object `--gpu` names, set once in `main`: every proxy of this run talks to it.
static OBJECT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn object() -> &'static str {
    OBJECT
        .get()
        .map_or(wcetd::dbus::OBJECT_PATH, String::as_str)
}

async fn bounds_proxy(conn: &zbus::Connection) -> zbus::Result<BoundsProxy<'static>> {
    BoundsProxy::builder(conn).path(object()).build().await
}

async fn calibration_proxy(conn: &zbus::Connection) -> zbus::Result<CalibrationProxy<'static>> {
    CalibrationProxy::builder(conn).path(object()).build().await
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Kernels the daemon knows.
    List,
    /// The bound of KERNEL on SMS SMs, with where it came from and what it guarantees.
    Bound {
        /// Kernel name (see `wcetctl list`).
        kernel: String,
        /// Partition size in SMs; a size that is not realisable gets the largest realisable one below it.
        sms: u32,
        /// Only the bound measured under this interference [default: the safer of the two].
        #[arg(long, value_enum)]
        interference: Option<Interference>,
    },
    /// The bound of KERNEL at every realisable partition size.
    Curve {
        /// Kernel name (see `wcetctl list`).
        kernel: String,
        /// Only the bounds measured under this interference [default: the safer of the two].
        #[arg(long, value_enum)]
        interference: Option<Interference>,
    },
    /// The smallest partition whose bound meets DEADLINE (ns).
    MinPartition {
        /// Kernel name (see `wcetctl list`).
        kernel: String,
        /// Deadline of one launch, in nanoseconds.
        deadline_ns: u64,
    },
    /// Recalibrate KERNELs (all when none) and wait, with a progress bar. Ctrl-C cancels the job
    /// (its old bounds stay) and exits with status 130; a second Ctrl-C exits at once.
    Recalibrate {
        /// Kernels to recalibrate [default: every built-in kernel].
        kernels: Vec<String>,
        /// Interference to measure under, comma-separated [default: what the daemon is configured for, both unless told otherwise].
        #[arg(long, value_enum, value_delimiter = ',')]
        interference: Vec<Interference>,
        /// Print the job number and exit without waiting (follow with `wcetctl jobs`).
        #[arg(long)]
        no_wait: bool,
    },
    /// Calibration jobs of the running daemon: state, progress and what each is doing.
    Jobs,
    /// Cancel a queued or running calibration job; its kernels keep their old bounds.
    Cancel {
        /// Job number (see `wcetctl jobs`).
        job: u64,
    },
    /// Device, health, and per kernel which bounds exist and what they guarantee.
    Status,
    /// Launch times reported from production for KERNEL (Monitor1.GetObserved): count,
    /// quantiles and maximum beside the bound, at SMS or at every partition size.
    Observed {
        /// Kernel name (see `wcetctl list`).
        kernel: String,
        /// Partition size in SMs [default: every realisable size].
        sms: Option<u32>,
    },
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
    /// Write this GPU's current calibrations (every one, or KERNELs) as a bundle (JSON) on standard
    /// output, for daemons on hosts with the same GPU model, driver, CUDA version and clock policy.
    Export {
        /// Kernels to export [default: every calibrated one].
        kernels: Vec<String>,
    },
    /// Import a bundle written by `wcetctl export`: refused with what differs unless the
    /// configuration matches; then checked on this card, and a kernel that exceeds its bound here
    /// is recalibrated (a job: `wcetctl jobs`).
    ImportCalibration {
        /// The bundle file (`-` for standard input).
        file: PathBuf,
        /// Import a bundle of another configuration anyway, as stale.
        #[arg(long)]
        force: bool,
    },
    /// Kernel manifests: check files offline, or have the daemon reread its kernel directories.
    Kernels {
        #[command(subcommand)]
        action: KernelsAction,
    },
    /// Admission check of a task-set TOML file (see calibration/tasksets/example.toml); exits 0
    /// when admitted, 1 when not, 2 on error.
    Admit {
        /// Task-set TOML file: [[task]] tables with name, kernels, sms, period_ns, deadline_ns.
        file: PathBuf,
        /// The tasks share one partition (non-preemptive fixed priority, file order = priority).
        #[arg(long)]
        shared: bool,
        #[command(flatten)]
        accept: Accept,
    },
    /// The smallest partition per task of a task-set file that meets its deadline, and whether
    /// the set is admitted at those sizes (exit status as for admit).
    Suggest {
        /// Task-set TOML file (the `sms` fields are ignored).
        file: PathBuf,
        #[command(flatten)]
        accept: Accept,
    },
    /// Fit bounds from a samples CSV; prints the bounds CSV (kernel,sms,bound_ns), and per kernel
    /// on standard error the exceedance its samples support and any warning about thin samples.
    Fit {
        /// Samples CSV (kernel,sms,time_ns), at least 30 samples per measured size.
        #[arg(long)]
        samples: PathBuf,
        /// Geometry CSV (kernel,blocks,blocks_per_sm): launch geometry hints for the scaling laws.
        #[arg(long)]
        geometry: Option<PathBuf>,
        /// Sizes to bound, comma-separated.
        #[arg(long, value_delimiter = ',', required = true, value_parser = sm_count)]
        sizes: Vec<u32>,
        /// Bound method: `wcetd`, or a published strategy (fixed-margin, incremental-margin,
        /// minimal-offset, fewest-points, envelope).
        #[arg(long, default_value = "wcetd")]
        method: Method,
    },
    /// Write a simulated samples CSV: every built-in kernel at every partition size.
    Simulate {
        /// Simulator device profile: `h200`, `embedded`, or a TOML file.
        #[arg(long, default_value = "h200")]
        profile: String,
        /// Simulator seed (runs are reproducible from it).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Timed launches per kernel and size.
        #[arg(long, default_value_t = 200)]
        launches: u32,
        /// Measure with a memory-bandwidth stressor on the other SMs.
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
        /// Most sizes the sweep takes in full because the fitted curve stood more than 5% above
        /// its median there, as the daemon's --tighten-sizes (0: the sweep only raises bounds).
        #[arg(long, default_value_t = wcetd::model::verify::MAX_TIGHTENINGS)]
        tighten_sizes: usize,
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
        #[arg(long, value_delimiter = ',', value_parser = sm_count)]
        sizes: Vec<u32>,
        /// Launches of the delay probe, written to delays.csv (0: none).
        #[arg(long, default_value_t = wcetd::calibrate::DELAY_PROBE_LAUNCHES)]
        delay_probe: u32,
        /// Partition sizes to run the delay probe on [default: the whole device]; each writes
        /// delays-<SMS>.csv beside delays.csv (the whole device's).
        #[arg(long, value_delimiter = ',', value_parser = sm_count)]
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
        /// A built-in kernel (see `wcetctl list`).
        kernel: String,
        /// A description TOML, or a committed one (rtx4070, titanx, h200, embedded).
        #[arg(long)]
        device: String,
        /// Partition sizes [default: every TPC, 2, 4, ... up to the device's SMs].
        #[arg(long, value_delimiter = ',', value_parser = sm_count)]
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
    /// Plot kernels' held-out samples and every method's bound curve on a log time axis (SVG).
    Plot {
        /// Kernels to plot [default: every kernel in both sample files].
        kernels: Vec<String>,
        #[command(flatten)]
        data: Datasets,
        /// A directory (created if missing; one KERNEL.svg per kernel), or an .svg file for one kernel.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Write man pages and completions under DIR (used by systemd/install.sh).
    #[command(hide = true)]
    Generate {
        /// Directory to write man/ and completions/ into.
        dir: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum KernelsAction {
    /// Validate manifests offline: syntax, keys, module found, entry point present, PTX
    /// parameters against `args`. Exit status 0 when every file is accepted, 1 otherwise.
    Check {
        /// Manifest files (.toml) to check.
        files: Vec<PathBuf>,
    },
    /// Ask the daemon to reread its kernel directories (Calibration1.ReloadKernels); new kernels
    /// are queued for calibration.
    Reload,
}

/// Which weaker bounds an admission may rest on; each accepted one is named in the answer.
#[derive(clap::Args, Debug, Clone, Copy)]
struct Accept {
    /// Admit on bounds measured under another device, driver or clock policy (stale).
    #[arg(long)]
    accept_stale: bool,
    /// Admit on bounds stated at an exceedance per launch up to P (e.g. 1e-4 for heavy-tailed
    /// kernels) [default: the daemon's configured exceedance].
    #[arg(long, value_name = "P")]
    accept_exceedance: Option<f64>,
}

impl Accept {
    fn policy(self) -> wcetd::admission::Policy {
        wcetd::admission::Policy {
            accept_stale: self.accept_stale,
            accept_exceedance: self.accept_exceedance,
        }
    }
}

/// A task set the daemon answered, but did not admit: exit status 1, the answer already printed.
#[derive(Debug)]
struct NotAdmitted;

impl std::fmt::Display for NotAdmitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not admitted")
    }
}

impl std::error::Error for NotAdmitted {}

/// Inputs that were checked and found wanting (`kernels check`): exit status 1, like a task set
/// not admitted; 2 stays for errors.
#[derive(Debug)]
struct Rejected(String);

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Rejected {}

/// Ctrl-C during a command that waits: exit status 130, what happened already said.
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

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

/// The sample files an offline evaluation or plot works on; each may be gzip-compressed (a name
/// ending in `.gz`), as the recorded datasets in `calibration/datasets/` are.
#[derive(clap::Args, Debug)]
struct Datasets {
    /// Calibration samples CSV (kernel,sms,time_ns); `.gz`: read compressed.
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
    /// Delay-probe launch times (CSV with a `time_ns` column, as `campaign` writes delays.csv;
    /// `.gz`: read compressed): the device's rare delays, which the daemon probes before each
    /// calibration job.
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
        let sizes = calibration_sizes(&self.calibrate_at)?;
        if let CalibrationSizes::Fixed(asked) = &sizes {
            // A size no kernel was measured at would be calibrated on nothing and score nothing.
            let present: std::collections::BTreeSet<u32> = calibration
                .values()
                .flat_map(|s| s.keys().copied())
                .collect();
            let missing: Vec<String> = asked
                .iter()
                .filter(|m| !present.contains(m))
                .map(u32::to_string)
                .collect();
            if !missing.is_empty() {
                bail!(
                    "--calibrate-at: no samples at {} SMs in {}; accepted: sizes the file has ({})",
                    missing.join(", "),
                    self.samples.display(),
                    present
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        Ok(Loaded {
            calibration,
            held,
            geometry: read_geometry(self.geometry.as_deref())?,
            sizes,
        })
    }
}

fn main() -> std::process::ExitCode {
    // `wcetctl curve x | head` ends quietly when the reader goes away, as Unix tools do, instead
    // of panicking on a broken pipe.
    // SAFETY: restoring the default disposition of one signal before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let gpu = cli.gpu;
    if let Some(n) = cli.gpu {
        let _ = OBJECT.set(wcetd::client::object_path(Some(n)));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.is::<NotAdmitted>() => std::process::ExitCode::from(1),
        Err(e) if e.is::<Rejected>() => {
            eprintln!("wcetctl: {e}");
            std::process::ExitCode::from(1)
        }
        Err(e) if e.is::<Interrupted>() => std::process::ExitCode::from(130),
        Err(e) => {
            let text = format!("{e:#}");
            match gpu {
                // The daemon serves no object for that GPU: say what is accepted.
                Some(n) if text.contains("UnknownObject") || text.contains("Unknown object") => {
                    eprintln!("wcetctl: the daemon serves no GPU {n} ({text}); accepted: --gpu with an index `wcetctl status` lists (run without --gpu)")
                }
                _ => eprintln!("wcetctl: {text}"),
            }
            std::process::ExitCode::from(2)
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
        } => fit(cli.json, samples, geometry.as_deref(), sizes, method),
        Command::Simulate {
            ref profile,
            seed,
            launches,
            contended,
            ref geometry_out,
        } => simulate(
            cli.json,
            profile,
            seed,
            launches,
            contended,
            geometry_out.as_deref(),
        ),
        Command::Evaluate {
            ref data,
            ref methods,
            ref plot,
            launches,
            screen_launches,
            heavy_tail_launches,
            sweep_launches,
            tighten_sizes,
        } => {
            let budget = SampleBudget {
                launches,
                screen_launches,
                heavy_tail_launches,
                sweep_launches,
                sweep_tightenings: tighten_sizes,
            };
            evaluate(cli.json, data, methods, plot.as_deref(), budget)
        }
        Command::Plot {
            ref kernels,
            ref data,
            ref out,
        } => plot(cli.json, kernels, data, out),
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
            campaign(cli.json, device, &settings, kernels, probe, out)
        }
        Command::Probe { ref device } => probe(cli.json, device),
        Command::Kernels {
            action: KernelsAction::Check { ref files },
        } => check_manifests(cli.json, files),
        Command::Project {
            ref source,
            ref target,
            ref configs,
        } => project(cli.json, source, target, configs.as_deref()),
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
        } => prediction_study(cli.json, data, devices, as_labelled, rows, l2_over_dram),
        Command::Completions { shell } => {
            wcetd::generate::print_completions(Cli::command(), shell);
            Ok(())
        }
        Command::Generate { ref dir } => wcetd::generate::write_all(Cli::command(), "1", dir),
        _ => online(cli).await,
    }
}

async fn online(cli: Cli) -> anyhow::Result<()> {
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(store::default_state_dir);
    let conn = reach_daemon(cli.bus_address.as_deref(), &state_dir).await?;
    let bounds = bounds_proxy(&conn).await?;
    let json = cli.json;
    match cli.command {
        Command::List => print_list(json, bounds.list_kernels().await.map_err(explain)?),
        Command::Bound {
            kernel,
            sms,
            interference,
        } => print_bound(json, &bounds, &kernel, sms, interference).await,
        Command::Curve {
            kernel,
            interference,
        } => print_curve(json, &bounds, &kernel, interference).await,
        Command::MinPartition {
            kernel,
            deadline_ns,
        } => min_partition(json, &bounds, &kernel, deadline_ns).await,
        Command::Recalibrate {
            kernels,
            interference,
            no_wait,
        } => recalibrate(json, &conn, &kernels, &interference, no_wait).await,
        Command::Jobs => jobs(json, &conn).await,
        Command::Cancel { job } => cancel(json, &conn, job).await,
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
        Command::Export { kernels } => export(&conn, &kernels).await,
        Command::Observed { kernel, sms } => observed(json, &conn, &kernel, sms).await,
        Command::Watch {
            interval,
            once,
            count,
        } => watch(json, &conn, interval, if once { Some(1) } else { count }).await,
        Command::ImportCalibration { file, force } => {
            import_calibration(json, &conn, &file, force).await
        }
        Command::Status => status_all(json, &conn, &bounds).await,
        Command::Admit {
            file,
            shared,
            accept,
        } => admit(json, &conn, &file, shared, accept).await,
        Command::Suggest { file, accept } => suggest(json, &conn, &file, accept).await,
        _ => unreachable!("offline commands are handled before connecting"),
    }
}

/// The fewest SMs whose bound meets `deadline_ns`, with that bound.
async fn min_partition(
    json: bool,
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    deadline_ns: u64,
) -> anyhow::Result<()> {
    let sms = bounds
        .min_partition(kernel, deadline_ns)
        .await
        .map_err(explain)?;
    let bound = bounds.get_bound(kernel, sms).await.map_err(explain)?;
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

async fn cancel(json: bool, conn: &zbus::Connection, job: u64) -> anyhow::Result<()> {
    calibration_proxy(conn)
        .await?
        .cancel_job(job)
        .await
        .map_err(explain)?;
    if json {
        println!("{}", serde_json::json!({"job": job, "cancel": "requested"}));
    } else {
        println!("job {job}: cancellation requested; its kernels keep their old bounds");
    }
    Ok(())
}

/// The bundle of `kernels` (every calibrated one when empty) on standard output.
async fn export(conn: &zbus::Connection, kernels: &[String]) -> anyhow::Result<()> {
    let names: Vec<&str> = kernels.iter().map(String::as_str).collect();
    let bundle = calibration_proxy(conn)
        .await?
        .export_calibration(&names)
        .await
        .map_err(explain)?;
    println!("{bundle}");
    Ok(())
}

async fn observed(
    json: bool,
    conn: &zbus::Connection,
    kernel: &str,
    sms: Option<u32>,
) -> anyhow::Result<()> {
    let rows = wcetd::monitor_view::observed(conn, object(), kernel, sms).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", wcetd::monitor_view::render(&rows));
    }
    Ok(())
}

async fn watch(
    json: bool,
    conn: &zbus::Connection,
    interval: f64,
    count: Option<u64>,
) -> anyhow::Result<()> {
    if !(interval.is_finite() && interval > 0.0) {
        bail!("--interval {interval}; accepted: seconds above 0");
    }
    let every = std::time::Duration::from_secs_f64(interval);
    wcetd::monitor_view::watch(conn, object(), every, count, json).await
}

/// Connect where the daemon should be and check that it is there (or can be started by the bus);
/// a failure says what was tried and how to point wcetctl elsewhere.
async fn reach_daemon(
    explicit: Option<&str>,
    state_dir: &Path,
) -> anyhow::Result<zbus::Connection> {
    let choice = bus::client_address(explicit, state_dir);
    let tried = match (&choice, explicit) {
        (bus::BusChoice::Address(a), Some(_)) => format!("--bus-address {a}"),
        (bus::BusChoice::Address(a), None) if std::env::var_os("WCETD_BUS_ADDRESS").is_some_and(|v| !v.is_empty()) => {
            format!("$WCETD_BUS_ADDRESS ({a})")
        }
        (bus::BusChoice::Address(a), None) => format!(
            "the private bus recorded in {} ({a})",
            bus::address_file(state_dir).display()
        ),
        _ => format!(
            "no --bus-address, no $WCETD_BUS_ADDRESS, no private bus recorded in {}; then the session bus, then the system bus",
            bus::address_file(state_dir).display()
        ),
    };
    let hint = "start the daemon (`systemctl start wcetd`, or `wcetd` for a private bus), or point wcetctl at its bus with --bus-address ADDR, $WCETD_BUS_ADDRESS or --state-dir DIR (where a private bus address is recorded)";
    let conn = bus::connect(&choice)
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach a bus: {e:#}; tried {tried}; {hint}"))?;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await?;
    let name = zbus::names::BusName::try_from(wcetd::dbus::BUS_NAME)?;
    let owned = dbus.name_has_owner(name.clone()).await.unwrap_or(false);
    let activatable = || async {
        dbus.list_activatable_names()
            .await
            .map(|names| names.iter().any(|n| n.as_str() == wcetd::dbus::BUS_NAME))
            .unwrap_or(false)
    };
    if !owned && !activatable().await {
        anyhow::bail!(
            "no daemon owns {} on the bus (tried {tried}); {hint}",
            wcetd::dbus::BUS_NAME
        );
    }
    Ok(conn)
}

async fn admit(
    json: bool,
    conn: &zbus::Connection,
    file: &Path,
    shared: bool,
    accept: Accept,
) -> anyhow::Result<()> {
    let tasks = taskset::load(file)?
        .iter()
        .map(taskset::TaskSpec::to_task)
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| format!("task set {}", file.display()))?;
    let answer = admission_bus::admit(conn, object(), &tasks, shared, accept.policy())
        .await
        .map_err(|e| explain(e).context(format!("{}", file.display())))?;
    print_verdict(json, &answer, None)
}

/// The verdict (with the suggested sizes, if any): exit status 1 when not admitted.
fn print_verdict(
    json: bool,
    answer: &admission_bus::Detailed,
    suggested: Option<&[(String, u32)]>,
) -> anyhow::Result<()> {
    if json {
        let tasks: Vec<serde_json::Value> = answer
            .tasks
            .iter()
            .map(|t| {
                serde_json::json!({"name": t.name, "response_ns": t.response_ns, "deadline_ns": t.deadline_ns,
                    "partition_sms": t.partition_sms, "slack_ns": t.slack_ns, "exceedance": t.exceedance,
                    "interference": t.interference, "stale": t.stale})
            })
            .collect();
        let mut v = serde_json::json!({"admitted": answer.admitted, "layout": answer.layout,
            "used_sms": answer.used_sms, "total_sms": answer.total_sms, "reasons": answer.reasons,
            "accepted": answer.accepted, "configured_exceedance": answer.configured_exceedance, "tasks": tasks});
        if let Some(s) = suggested {
            v["suggested"] = s
                .iter()
                .map(|(n, m)| serde_json::json!({"name": n, "sms": m}))
                .collect();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if let Some(s) = suggested {
            for (name, sms) in s {
                println!("suggested: {name} on {sms} SMs");
            }
        }
        print!("{}", admission_bus::render(answer));
    }
    if answer.admitted {
        Ok(())
    } else {
        Err(NotAdmitted.into())
    }
}

async fn suggest(
    json: bool,
    conn: &zbus::Connection,
    file: &Path,
    accept: Accept,
) -> anyhow::Result<()> {
    let specs = taskset::load(file)?;
    let free: Vec<_> = specs
        .iter()
        .map(|t| admission_bus::unsized_to_wire(&t.to_unsized()))
        .collect();
    let proxy = admission_bus::Admission1Proxy::builder(conn)
        .path(object())
        .build()
        .await?;
    let sizes = proxy
        .suggest(&free)
        .await
        .map_err(|e| explain(e).context(format!("{}", file.display())))?;
    let tasks: Vec<_> = specs
        .iter()
        .zip(&sizes)
        .map(|(t, (_, sms))| wcetd::admission::Task {
            name: t.name.clone(),
            kernels: t.kernels.clone(),
            sms: *sms,
            period_ns: t.period_ns,
            deadline_ns: t.deadline_ns,
        })
        .collect();
    let answer = admission_bus::admit(conn, object(), &tasks, false, accept.policy())
        .await
        .map_err(explain)?;
    print_verdict(json, &answer, Some(&sizes))
}

async fn jobs(json: bool, conn: &zbus::Connection) -> anyhow::Result<()> {
    let jobs = calibration_proxy(conn)
        .await?
        .list_jobs()
        .await
        .map_err(explain)?;
    if json {
        let v: Vec<_> = jobs
            .iter()
            .map(|(id, state, p, message, kernels)| {
                serde_json::json!({"job": id, "state": state, "progress": p, "message": message, "kernels": kernels})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if jobs.is_empty() {
        println!("no jobs since the daemon started");
    }
    for (id, state, p, message, kernels) in jobs {
        println!(
            "job {id:<4} {state:<9} {:>3.0}%  {message}  [{}]",
            p * 100.0,
            kernels.join(", ")
        );
    }
    Ok(())
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

/// `GetBoundInfo`, or `GetBoundInfoTagged` for one interference.
async fn bound_info(
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    sms: u32,
    interference: Option<Interference>,
) -> anyhow::Result<std::collections::HashMap<String, zbus::OwnedVariant>> {
    match interference {
        Some(tag) => bounds
            .get_bound_info_tagged(kernel, sms, &tag.to_string())
            .await
            .map_err(explain),
        None => bounds.get_bound_info(kernel, sms).await.map_err(explain),
    }
}

async fn print_bound(
    json: bool,
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    sms: u32,
    interference: Option<Interference>,
) -> anyhow::Result<()> {
    let info = bound_info(bounds, kernel, sms, interference).await?;
    let mut sorted: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (k, v) in info {
        sorted.insert(k, variant_json(&v));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&sorted)?);
    } else {
        for (k, v) in &sorted {
            println!(
                "{k:>22}  {}",
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
    if let Ok(x) = f64::try_from(v) {
        return x.into();
    }
    if let Ok(x) = <&str>::try_from(v) {
        return x.into();
    }
    if let Ok(Ok(x)) = v.try_clone().map(<Vec<String>>::try_from) {
        return x.into();
    }
    serde_json::Value::String(v.to_string())
}

async fn print_curve(
    json: bool,
    bounds: &BoundsProxy<'_>,
    kernel: &str,
    interference: Option<Interference>,
) -> anyhow::Result<()> {
    const COLUMNS: [&str; 11] = [
        "interference",
        "exceedance",
        "stale",
        "provenance",
        "basis",
        "observed_max_ns",
        "samples",
        "typical_ns",
        "mean_ns",
        "predicted_typical_ns",
        "prediction",
    ];
    let sizes = bounds.partition_sizes().await.map_err(explain)?;
    let mut rows = Vec::new();
    for sms in &sizes {
        let info = bound_info(bounds, kernel, *sms, interference).await?;
        let bound = info
            .get("bound_ns")
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(0);
        let values: Vec<serde_json::Value> = COLUMNS
            .iter()
            .map(|k| info.get(*k).map(variant_json).unwrap_or_default())
            .collect();
        rows.push((*sms, bound, values));
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
        "{kernel}\n{:>5}  {:>14}  {:<12}  {:>10}  {:<5}  {:<12}  {:<12}  {:>15}  {:>7}  {:>12}  {:>12}  {:>12}",
        "SMs",
        "bound_ns",
        "interference",
        "exceedance",
        "stale",
        "provenance",
        "basis",
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
        let exceedance = v[1].as_f64().map_or(t[1].clone(), |e| format!("{e:.0e}"));
        println!(
            "{sms:>5}  {bound:>14}  {:<12}  {:>10}  {:<5}  {:<12}  {:<12}  {:>15}  {:>7}  {:>12}  {:>12}  {:>12}",
            t[0], exceedance, t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9]
        );
        label.clone_from(&t[10]);
    }
    println!("basis: what the bound rests on (measured; verified: the fitted curve checked by the sweep there; fitted)\ntypical_ns, mean_ns: measured median and mean (0 where not measured)\npredicted_ns: {label}");
    Ok(())
}

async fn recalibrate(
    json: bool,
    conn: &zbus::Connection,
    kernels: &[String],
    interference: &[Interference],
    no_wait: bool,
) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    let calibration = calibration_proxy(conn).await?;
    let names: Vec<&str> = kernels.iter().map(String::as_str).collect();
    // Listen before the job exists, so that neither its end nor a Ctrl-C can be missed.
    let mut finished = calibration.receive_job_finished().await?;
    let mut progress = calibration.receive_job_progress().await?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let job = if interference.is_empty() {
        calibration.recalibrate(&names).await
    } else {
        let tags: Vec<String> = interference.iter().map(ToString::to_string).collect();
        let options = std::collections::HashMap::from([("interference", tags.into())]);
        calibration.recalibrate_with(&names, options).await
    }
    .map_err(explain)?;
    if no_wait {
        if json {
            println!("{}", serde_json::json!({"job": job, "state": "queued"}));
        } else {
            println!("job {job} queued; follow it with `wcetctl jobs`, stop it with `wcetctl cancel {job}`");
        }
        return Ok(());
    }
    let bar = (!json && std::io::stderr().is_terminal()).then(|| progress_bar(job));
    let (mut state, _, mut message) = calibration.get_job(job).await.map_err(explain)?;
    let mut cancelling = false;
    while !matches!(state.as_str(), "done" | "failed" | "cancelled") {
        tokio::select! {
            Some(signal) = finished.next() => {
                let args = signal.args()?;
                if args.job == job {
                    (state, message) = (args.state, args.message);
                }
            }
            Some(signal) = progress.next() => {
                let args = signal.args()?;
                if let (Some(b), true) = (&bar, args.job == job) {
                    b.set_position((args.progress * 1000.0) as u64);
                    // GetJob's message names the kernel, size and interference being measured.
                    if let Ok((_, _, now)) = calibration.get_job(job).await {
                        b.set_message(now);
                    }
                }
            }
            _ = interrupt.recv() => {
                // Said above the bar, which stays where it is.
                let say = |what: &str| match &bar {
                    Some(b) => b.suspend(|| eprintln!("wcetctl: {what}")),
                    None => eprintln!("wcetctl: {what}"),
                };
                if cancelling {
                    say(&format!("job {job} is being cancelled; `wcetctl jobs` shows when it has stopped"));
                    return Err(Interrupted.into());
                }
                cancelling = true;
                say(&format!("Ctrl-C: cancelling job {job} (its kernels keep their old bounds); Ctrl-C again to exit without waiting"));
                // Refused only when the job has just finished: its JobFinished says how.
                let _ = calibration.cancel_job(job).await;
            }
        }
    }
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
    match state.as_str() {
        "done" => Ok(()),
        "cancelled" if cancelling => Err(Interrupted.into()),
        _ => bail!("job {job} ended {state}"),
    }
}

/// A bar for one job: how far, how long it has run, when it should end, and what it measures now.
fn progress_bar(job: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(1000);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "job {prefix} [{bar:30}] {percent:>3}% {elapsed} ETA {eta}  {wide_msg}",
        )
        .expect("static progress template")
        .progress_chars("=> "),
    );
    bar.set_prefix(job.to_string());
    bar.set_message("queued");
    bar
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
    let calibration = calibration_proxy(conn).await?;
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
        let (state, message) = wcetd::client::wait_for_job(&calibration, job, |_| {}).await?;
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

async fn import_calibration(
    json: bool,
    conn: &zbus::Connection,
    file: &Path,
    force: bool,
) -> anyhow::Result<()> {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let mut options = std::collections::HashMap::new();
    if force {
        options.insert("force", zbus::Variant::from(true));
    }
    let kernels = calibration_proxy(conn)
        .await?
        .import_calibration_with(&text, options)
        .await
        .map_err(explain)?;
    if json {
        println!(
            "{}",
            serde_json::json!({"imported": kernels, "stale": force})
        );
    } else {
        println!(
            "imported {}; they are checked on this card as a job (`wcetctl jobs`), and recalibrated where a launch exceeds its bound",
            kernels.join(", ")
        );
    }
    Ok(())
}

async fn reload_kernels(json: bool, conn: &zbus::Connection) -> anyhow::Result<()> {
    let calibration = calibration_proxy(conn).await?;
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
        let why = format!("{bad} of {} manifest(s) rejected", files.len());
        return Err(Rejected(why).into());
    }
    Ok(())
}

/// `status` of the GPU `--gpu` names, or of every GPU the daemon serves.
async fn status_all(
    json: bool,
    conn: &zbus::Connection,
    bounds: &BoundsProxy<'_>,
) -> anyhow::Result<()> {
    let devices = match (OBJECT.get(), bounds.devices().await) {
        (None, Ok(devices)) if devices.len() > 1 => devices,
        _ => {
            let one = status(json, bounds).await?;
            if json {
                println!("{one}");
            }
            return Ok(());
        }
    };
    // Several GPUs: a section each, or one JSON array of (gpu, path, uuid, status).
    let mut all = Vec::new();
    for (n, path, uuid) in devices {
        let proxy = BoundsProxy::builder(conn)
            .path(path.to_string())
            .build()
            .await?;
        if !json {
            println!("GPU {n}  {path}  {uuid}");
        }
        let one = status(json, &proxy).await?;
        if json {
            all.push(serde_json::json!({"gpu": n, "path": path.to_string(), "uuid": uuid, "status": one}));
        } else {
            println!();
        }
    }
    if json {
        println!("{}", serde_json::Value::Array(all));
    }
    Ok(())
}

/// One GPU's status: printed as a table, or returned as JSON when `json`.
async fn status(json: bool, bounds: &BoundsProxy<'_>) -> anyhow::Result<serde_json::Value> {
    let device = bounds.device().await?;
    let backend = bounds.backend().await?;
    let total = bounds.total_sms().await?;
    let sizes = bounds.partition_sizes().await?;
    let health = bounds.health().await?;
    let stale = bounds.stale_kernels().await?;
    let smallest = sizes.first().copied().unwrap_or(0);
    // A daemon without Monitor1 (older than it) has nothing to say here.
    let path = bounds.inner().path().to_string();
    let overrun = match wcetd::monitor_view::monitor_at(bounds.inner().connection(), &path).await {
        Ok(m) => m.overrun_kernels().await.unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    // Per kernel: which bounds exist and what the safer of them guarantees (the same at every size).
    let mut kernels = BTreeMap::new();
    for k in bounds.list_kernels().await? {
        let info = bounds.get_bound_info(&k, smallest).await.ok();
        let get = |key: &str| info.as_ref().and_then(|i| i.get(key)).map(variant_json);
        kernels.insert(
            k.clone(),
            serde_json::json!({
                "calibrated": info.is_some(),
                "stale": stale.contains(&k),
                "overrun": overrun.contains(&k),
                "interference_available": get("interference_available").unwrap_or_else(|| serde_json::json!([])),
                "exceedance": get("exceedance"),
                "tail": get("tail"),
            }),
        );
    }
    if json {
        let calibrated: BTreeMap<_, _> = kernels
            .iter()
            .map(|(k, v)| (k.clone(), v["calibrated"].clone()))
            .collect();
        return Ok(
            serde_json::json!({"device": device, "backend": backend, "total_sms": total, "partition_sizes": sizes,
                "health": health, "stale_kernels": stale, "calibrated": calibrated, "kernels": kernels,
                "overrun_kernels": overrun}),
        );
    }
    println!("device      {device} ({backend}, {total} SMs)\npartitions  {sizes:?}\nhealth      {health}");
    if !overrun.is_empty() {
        println!(
            "overruns    {} (a reported launch exceeded a bound since calibration; see wcetctl observed)",
            overrun.join(", ")
        );
    }
    // As wide as the longest name: manifests' kernels are often longer than the suite's.
    let w = kernels.keys().map(String::len).max().unwrap_or(0).max(10);
    println!(
        "  {:<w$} {:<19} {:<19} {:>10}  tail",
        "kernel", "state", "bounds", "exceedance"
    );
    for (k, v) in &kernels {
        let state = if v["stale"] == true {
            "stale"
        } else if v["overrun"] == true {
            "calibrated, OVERRUN"
        } else if v["calibrated"] == true {
            "calibrated"
        } else {
            "not calibrated"
        };
        let tags: Vec<&str> = v["interference_available"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t.as_str()).collect())
            .unwrap_or_default();
        let exceedance = v["exceedance"]
            .as_f64()
            .map_or("-".to_string(), |e| format!("{e:.0e}"));
        let tags = if tags.is_empty() {
            "-".into()
        } else {
            tags.join(",")
        };
        let tail = v["tail"].as_str().unwrap_or("-");
        println!("  {k:<w$} {state:<19} {tags:<19} {exceedance:>10}  {tail}");
    }
    Ok(serde_json::Value::Null)
}

/// An input file, gzip-compressed when its name ends in `.gz` (as the recorded datasets are).
fn open_input(path: &Path) -> anyhow::Result<Box<dyn std::io::Read>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let file = std::io::BufReader::new(file);
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    })
}

fn read_samples(path: &Path) -> anyhow::Result<samples::SampleSet> {
    samples::read_samples(open_input(path)?).with_context(|| format!("reading {}", path.display()))
}

fn read_geometry(path: Option<&Path>) -> anyhow::Result<BTreeMap<String, Geometry>> {
    let Some(path) = path else {
        return Ok(BTreeMap::new());
    };
    samples::read_geometry(open_input(path)?).with_context(|| format!("reading {}", path.display()))
}

fn fit(
    json: bool,
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
    let config = MethodConfig::default();
    let fits = offline::fit(&set, &read_geometry(geometry)?, &sizes, method, &config)
        .with_context(|| format!("fitting {}", samples_path.display()))?;
    // What each kernel's samples support goes to standard error, so the CSV stays clean.
    for f in &fits {
        eprintln!(
            "wcetctl: {}: bounds stated at exceedance {:.1e} per launch ({}, {} samples)",
            f.kernel,
            f.exceedance,
            f.basis.as_str(),
            f.samples.values().sum::<usize>()
        );
        for w in &f.warnings {
            eprintln!("wcetctl: warning: {}: {w}", f.kernel);
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&offline::fit_json(&fits))?
        );
    } else {
        print!("{}", offline::bounds_csv(&fits));
    }
    Ok(())
}

fn simulate(
    json: bool,
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
    if json {
        // The samples themselves: {kernel: {sms: [time_ns, ...]}}, launch order kept.
        println!(
            "{}",
            serde_json::json!({"interference": tag.to_string(), "samples": set})
        );
    } else {
        samples::write_samples(std::io::stdout().lock(), &set)?;
    }
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
    json: bool,
    device: &DeviceArgs,
    settings: &wcetd::sweep::SweepSettings,
    names: &[String],
    (delay_probe, probe_sizes): (u32, &[u32]),
    out: &Path,
) -> anyhow::Result<()> {
    let kernels = chosen_kernels(names)?;
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
        write_delay_probes(gpu.as_mut(), delay_probe, probe_sizes, out)?;
    }
    write_sweep(&sweep, settings, out)?;
    eprintln!(
        "wcetctl: {} launches of {} kernels on {} ({}), written to {}",
        sweep.rows.len(),
        kernels.len(),
        sweep.stamp.gpu,
        sweep.stamp.backend,
        out.display()
    );
    if json {
        println!(
            "{}",
            serde_json::json!({"launches": sweep.rows.len(), "kernels": kernels.iter().map(|k| k.name.clone()).collect::<Vec<_>>(),
                "out": out.display().to_string(), "stamp": sweep.stamp})
        );
    }
    Ok(())
}

/// The built-in kernels named (all of them when none is), or which name is unknown.
fn chosen_kernels(names: &[String]) -> anyhow::Result<Vec<wcetd::kernels::KernelSpec>> {
    let suite = wcetd::kernels::builtin_suite();
    if names.is_empty() {
        return Ok(suite);
    }
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
        .collect()
}

/// `launches` launches of the delay probe at each of `sizes` (the whole device when none),
/// one CSV each: `delays.csv` for the whole device, `delays-<sms>.csv` for a partition.
fn write_delay_probes(
    gpu: &mut dyn wcetd::gpu::Gpu,
    launches: u32,
    sizes: &[u32],
    out: &Path,
) -> anyhow::Result<()> {
    let whole = gpu.info().total_sms;
    let sizes = if sizes.is_empty() {
        vec![whole]
    } else {
        sizes.to_vec()
    };
    for sms in sizes {
        let times = gpu.delay_probe(sms, launches)?;
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
    Ok(())
}

/// A sweep's samples (one CSV per interference), geometry and stamp, under `out`.
fn write_sweep(
    sweep: &wcetd::sweep::Sweep,
    settings: &wcetd::sweep::SweepSettings,
    out: &Path,
) -> anyhow::Result<()> {
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

/// A GPU index on the command line.
fn gpu_index(s: &str) -> Result<u32, String> {
    s.trim().parse::<u32>().map_err(|_| {
        format!("`{s}` is not a GPU index; accepted: 0, 1, ... as `wcetctl status` lists them")
    })
}

/// One partition size on the command line.
fn sm_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(m) if m >= 1 => Ok(m),
        _ => Err(format!(
            "`{s}` is not a partition size; accepted: whole numbers of SMs, at least 1, comma-separated"
        )),
    }
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

/// The method's configuration, with the device's rare delays and sustained slowdowns when a
/// delay-probe file is given.
fn method_config(delays: Option<&Path>) -> anyhow::Result<MethodConfig> {
    let mut config = MethodConfig::default();
    let Some(path) = delays else {
        return Ok(config);
    };
    let mut reader = csv::Reader::from_reader(open_input(path)?);
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
    if let Some(found) = wcetd::model::throttle::sustained_slowdown([times.as_slice()]) {
        eprintln!("wcetctl: delay probe: {}", found.note());
        config.device_slowdown = found.depth;
        config.device_slowdown_share = found.share;
    }
    let times = wcetd::model::throttle::without_runs(&times);
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

/// One plot per kernel: into a directory (`KERNEL.svg` each), or one file for one kernel.
fn plot(json: bool, kernels: &[String], data: &Datasets, out: &Path) -> anyhow::Result<()> {
    let Loaded {
        calibration,
        held,
        geometry,
        sizes,
    } = data.load()?;
    let both: Vec<String> = calibration
        .keys()
        .filter(|k| held.contains_key(*k))
        .cloned()
        .collect();
    let chosen: Vec<String> = if kernels.is_empty() {
        both.clone()
    } else {
        kernels.to_vec()
    };
    if let Some(k) = chosen.iter().find(|k| !both.contains(k)) {
        bail!(
            "kernel `{k}` is not in both sample files; accepted: {}",
            both.join(", ")
        );
    }
    let single_file = match offline::PlotFormat::of(out) {
        Some(format) => {
            format.check()?;
            if chosen.len() != 1 {
                bail!(
                    "-o {} is one file but {} kernels are to be plotted; accepted: a directory (one KERNEL.svg each), or one kernel",
                    out.display(),
                    chosen.len()
                );
            }
            true
        }
        None => {
            std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
            false
        }
    };
    let mut written = Vec::new();
    for kernel in &chosen {
        let single: samples::SampleSet = [(kernel.clone(), calibration[kernel].clone())].into();
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
        let path = if single_file {
            out.to_path_buf()
        } else {
            out.join(format!("{kernel}.svg"))
        };
        offline::plot(kernel, &held[kernel], &refs, &path)?;
        written.push(path.display().to_string());
    }
    if json {
        println!("{}", serde_json::json!({"written": written}));
    } else {
        written.iter().for_each(|p| println!("wrote {p}"));
    }
    Ok(())
}

fn project(json: bool, source: &Path, target: &str, configs: Option<&Path>) -> anyhow::Result<()> {
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
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(c, ms, basis)| {
                serde_json::json!({"kernel": c.kernel, "N": c.n, "rows": c.rows, "cols": c.cols,
                    "predicted_ms": ms, "basis": if *basis == predict::Basis::Static { "static" } else { "measured" }})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", predict::projection_csv(&rows));
    }
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
    json: bool,
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
    if json {
        let v: Vec<_> = outcomes
            .iter()
            .map(|o| serde_json::json!({"experiment": o.experiment, "rows": o.rows.len(), "wcetd": o.wcetd(), "roofline": o.roofline()}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", study::report(&outcomes, rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option and argument of every command says what it is, in `--help` and the man pages.
    #[test]
    fn every_option_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.get_help().is_none() && !["help", "version"].contains(&id) {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(format!("{path} {}", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let mut missing = Vec::new();
        walk(&cmd, "wcetctl", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:?}");
        assert_eq!(cmd.get_name(), "wcetctl");
    }
}
