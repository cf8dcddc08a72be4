//! The command line: every command, option and argument `wcetctl` accepts (clap), and the
//! parsers that say what is accepted when a value is not.

use super::*;

#[derive(Parser, Debug)]
#[command(
    name = "wcetctl",
    version,
    about = "Query and operate wcetd; fit and evaluate bounds offline",
    after_help = EXIT_STATUS
)]
pub(crate) struct Cli {
    /// Bus address of the daemon [default: $WCETD_BUS_ADDRESS, the daemon's private bus, the session bus, the system bus].
    #[arg(long, global = true)]
    pub(crate) bus_address: Option<String>,
    /// The daemon's state directory, where a private bus address is recorded [default: $STATE_DIRECTORY, else $XDG_STATE_HOME/wcetd, else ~/.local/state/wcetd].
    #[arg(long, global = true)]
    pub(crate) state_dir: Option<PathBuf>,
    /// Machine-readable JSON on standard output instead of tables (every command).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The GPU to ask (its index; `wcetctl status` lists them) [default: the daemon's default GPU].
    #[arg(long, global = true, value_name = "N", value_parser = gpu_index)]
    pub(crate) gpu: Option<u32>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
    /// (what it has not yet published stays as it was) and exits with status 130; a second Ctrl-C exits at once.
    Recalibrate {
        /// Kernels to recalibrate [default: every kernel, but those held back for losing the device].
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
    /// Cancel a queued or running calibration job; what it has not yet published stays as it was (`wcetctl jobs` says what it published before).
    Cancel {
        /// Job number (see `wcetctl jobs`).
        job: u64,
    },
    /// Device, health, and per kernel which bounds exist and what they guarantee.
    Status,
    /// Report launch times observed in production for KERNEL on a partition of SMS SMs
    /// (Monitor1.Report, or ReportTagged with --interference): a time above the bound raises it,
    /// is signalled and counted. Needs the reporter or operator group.
    Report {
        /// Kernel name (see `wcetctl list`).
        kernel: String,
        /// The partition size the launches ran on, in SMs (a realisable size).
        sms: u32,
        /// Launch times in nanoseconds (1 to 65,536 of them, each from 1 ns to an hour).
        #[arg(required = true, num_args = 1..)]
        times_ns: Vec<u64>,
        /// What ran beside the launches [default: untagged, filed as isolated].
        #[arg(long, value_enum)]
        interference: Option<Interference>,
    },
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
    /// a terminal, snapshots are printed one after another. One bus call per refresh, which
    /// carries no floor: `wcetctl observed` gives it.
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
    /// is recalibrated (a job: `wcetctl jobs`). With --force, a bundle of another configuration
    /// is served stale instead, unchecked, until recalibrated.
    ImportCalibration {
        /// The bundle file (`-` for standard input).
        file: PathBuf,
        /// Import a bundle of another configuration anyway, as stale: served unchecked on this
        /// card until recalibrated.
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
        /// Kernel manifest directories (repeatable): a manifest's grid and `blocks_per_sm` hint
        /// are the geometry of its kernel where the geometry CSV has no row for it.
        #[arg(long = "kernel-dir", value_name = "DIR")]
        kernel_dirs: Vec<PathBuf>,
        /// How far the typical time may be higher in another process (0.02: 2%), as the daemon's
        /// `--process-shift`. Default: 0.02 when the samples were recorded on a real GPU (their
        /// directory's stamp.json says `"backend": "cuda"`), else 0.
        #[arg(long, value_parser = process_shift)]
        process_shift: Option<f64>,
    },
    /// Write a simulated samples CSV: every built-in kernel at every partition size.
    Simulate {
        /// Simulator device profile: `h200`, `embedded`, or a TOML file.
        #[arg(long, default_value = "h200")]
        profile: String,
        /// Simulator seed (runs are reproducible from it).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Timed launches per kernel and size (at least 1).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
        launches: u32,
        /// Measure with a memory-bandwidth stressor on the other SMs.
        #[arg(long)]
        contended: bool,
        /// Also write the geometry CSV here.
        #[arg(long)]
        geometry_out: Option<PathBuf>,
        /// Kernel manifest directories (repeatable): their kernels are simulated too, from their
        /// `[sim]` tables (docs/kernels.md).
        #[arg(long = "kernel-dir", value_name = "DIR")]
        kernel_dirs: Vec<PathBuf>,
    },
    /// Calibrate on some sizes of a samples file and score every method on held-out samples.
    Evaluate {
        #[command(flatten)]
        data: Datasets,
        /// Methods to compare, each named once [default: all].
        #[arg(long, value_delimiter = ',')]
        methods: Vec<Method>,
        /// Write one SVG per kernel into this directory.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Samples per size a calibration uses (the first ones in the file), as the daemon's
        /// --launches; at least 30, as `fit` asks of a measured size.
        #[arg(long, default_value_t = 200, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(30..))]
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
    /// Predicted typical time of KERNEL at every partition size of a device it may never have run
    /// on, or (without --device) of the daemon's device before it is calibrated. A prediction,
    /// never a bound.
    Predict {
        /// A built-in kernel (see `wcetctl list`), or a kernel manifest's path (`NAME.toml`; FLOPs
        /// and bytes from its module when that is PTX).
        kernel: String,
        /// A description TOML, or a committed one (rtx4070, titanx, h200, embedded) [default: ask
        /// the running daemon for its own device, calibrated or not].
        #[arg(long)]
        device: Option<String>,
        /// Partition sizes [default: every TPC, 2, 4, ... up to the device's SMs; with the
        /// daemon, its realisable sizes].
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
pub(crate) enum KernelsAction {
    /// Validate manifests offline: syntax, keys, module found, entry point present, PTX
    /// parameters against `args`. Exit status 0 when every file is accepted, 1 otherwise.
    Check {
        /// Manifest files (.toml) to check.
        files: Vec<PathBuf>,
        /// Also every `*.toml` in these directories (repeatable), as the daemon loads them.
        #[arg(long = "kernel-dir", value_name = "DIR")]
        kernel_dirs: Vec<PathBuf>,
    },
    /// Ask the daemon to reread its kernel directories (Calibration1.ReloadKernels); new kernels
    /// are queued for calibration.
    Reload,
}

/// Which weaker bounds an admission may rest on; each accepted one is named in the answer.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct Accept {
    /// Admit on bounds measured under another device, driver or clock policy (stale).
    #[arg(long)]
    pub(crate) accept_stale: bool,
    /// Admit on bounds stated at an exceedance per launch up to P (e.g. 1e-4 for heavy-tailed
    /// kernels) [default: the daemon's configured exceedance].
    #[arg(long, value_name = "P")]
    pub(crate) accept_exceedance: Option<f64>,
}

impl Accept {
    pub(crate) fn policy(self) -> wcetd::admission::Policy {
        wcetd::admission::Policy {
            accept_stale: self.accept_stale,
            accept_exceedance: self.accept_exceedance,
        }
    }
}

/// Which device `campaign` and `probe` open directly (not through the daemon).
#[derive(clap::Args, Debug)]
pub(crate) struct DeviceArgs {
    /// GPU backend: `cuda`, `sim`, or `auto` (CUDA when a driver loads).
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) backend: BackendChoice,
    /// Simulator device profile: `h200`, `embedded`, or a TOML file.
    #[arg(long, default_value = "h200")]
    pub(crate) sim_profile: String,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

impl DeviceArgs {
    pub(crate) fn open(&self) -> anyhow::Result<Box<dyn wcetd::gpu::Gpu>> {
        let options = wcetd::gpu::sim::SimOptions {
            seed: self.seed,
            ..Default::default()
        };
        let gpu = wcetd::gpu::open(
            self.backend,
            DeviceProfile::load(&self.sim_profile)?,
            options,
        )?;
        // Said here: the library's warning goes to a log wcetctl does not print, so `auto`
        // fell back to the simulator without a word (a black-box hunt found it).
        let simulated = gpu.info().fingerprint.backend == wcetd::gpu::Backend::Sim;
        if self.backend == BackendChoice::Auto && simulated {
            eprintln!(
                "wcetctl: warning: no CUDA device to open (no NVIDIA driver loaded); using the simulated GPU `{}` (--backend cuda says why, --backend sim says it on purpose)",
                gpu.info().name
            );
        }
        Ok(gpu)
    }
}

/// The sample files an offline evaluation or plot works on; each may be gzip-compressed (a name
/// ending in `.gz`), as the recorded datasets in `calibration/datasets/` are.
#[derive(clap::Args, Debug)]
pub(crate) struct Datasets {
    /// Calibration samples CSV (kernel,sms,time_ns); `.gz`: read compressed.
    #[arg(long)]
    pub(crate) samples: PathBuf,
    /// Held-out samples (fresh runs); default: the samples file itself (`evaluate` then warns
    /// that its scores are in-sample, as it does of held-out samples that repeat calibration runs).
    #[arg(long)]
    pub(crate) holdout: Option<PathBuf>,
    /// Geometry CSV (kernel,blocks,blocks_per_sm).
    #[arg(long)]
    pub(crate) geometry: Option<PathBuf>,
    /// `planner` (the daemon's planner, budget 5) or comma-separated sizes.
    #[arg(long, default_value = "planner")]
    pub(crate) calibrate_at: String,
    /// Delay-probe launch times (CSV with a `time_ns` column, as `campaign` writes delays.csv;
    /// `.gz`: read compressed): the device's rare delays, which the daemon probes before each
    /// calibration job.
    #[arg(long)]
    pub(crate) delays: Option<PathBuf>,
    /// How far the typical time may be higher in another process (0.02: 2%), as the daemon's
    /// `--process-shift`. Default: 0.02 when the calibration samples were recorded on a real GPU
    /// (their directory's stamp.json says `"backend": "cuda"`), as the daemon does there; else 0.
    #[arg(long, value_parser = process_shift)]
    pub(crate) process_shift: Option<f64>,
}

/// A fraction of the typical time, from 0 up to (not including) 1.
fn process_shift(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if (0.0..1.0).contains(&f) => Ok(f),
        _ => Err(format!(
            "`{s}` is not a fraction of the typical time; accepted: a number from 0 up to (not including) 1, e.g. 0.02 for 2%"
        )),
    }
}

/// A GPU index on the command line.
pub(crate) fn gpu_index(s: &str) -> Result<u32, String> {
    s.trim().parse::<u32>().map_err(|_| {
        format!("`{s}` is not a GPU index; accepted: 0, 1, ... as `wcetctl status` lists them")
    })
}

/// One partition size on the command line.
pub(crate) fn sm_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(m) if m >= 1 => Ok(m),
        _ => Err(format!(
            "`{s}` is not a partition size; accepted: whole numbers of SMs, at least 1, comma-separated"
        )),
    }
}

pub(crate) fn calibration_sizes(spec: &str) -> anyhow::Result<CalibrationSizes> {
    if spec == "planner" {
        return Ok(CalibrationSizes::Planner(5));
    }
    let sizes: Result<Vec<u32>, _> = spec.split(',').map(|s| s.trim().parse::<u32>()).collect();
    match sizes {
        Ok(s) if !s.is_empty() && !s.contains(&0) => Ok(CalibrationSizes::Fixed(s)),
        _ => bail!("--calibrate-at `{spec}`; accepted: `planner` or comma-separated SM counts, each at least 1"),
    }
}
