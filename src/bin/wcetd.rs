//! `wcetd`: the daemon. Opens the GPU (or the simulator), loads the last calibration, calibrates
//! what is missing, and serves bounds on the bus until SIGTERM or SIGINT.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;

use wcetd::bus::{self, BusChoice, PrivateBus};
use wcetd::calibrate::{Recipe, Sweep};
use wcetd::gpu::sim::{DeviceProfile, SimOptions};
use wcetd::gpu::{self, BackendChoice, GpuError, Interference};
use wcetd::measure::CampaignSettings;
use wcetd::model::{Method, MethodConfig};
use wcetd::service::{MonitorConfig, Service, ServiceConfig};
use wcetd::{access::OperatorPolicy, dbus, store};
use wcetd::{access::ReporterPolicy, metrics, monitor_bus};

/// The device's index in the metrics file's `gpu` label: the daemon serves one device, CUDA's
/// device 0 (or the simulator).
const GPU_INDEX: u32 = 0;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Serve conservative WCET bounds for CUDA kernels over D-Bus"
)]
struct Args {
    /// GPU backend.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Simulator device profile: `h200`, `embedded`, or a TOML file.
    #[arg(long, default_value = "h200")]
    sim_profile: String,
    /// Simulator seed (runs are reproducible from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where calibrations are kept [default: $STATE_DIRECTORY, else $XDG_STATE_HOME/wcetd].
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Bus address to serve on (overrides --system/--session).
    #[arg(long)]
    bus_address: Option<String>,
    /// Serve on the system bus.
    #[arg(long, conflicts_with = "session")]
    system: bool,
    /// Serve on the session bus.
    #[arg(long)]
    session: bool,
    /// Bound method.
    #[arg(long, default_value = "wcetd")]
    method: Method,
    /// Timed launches per partition size.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    launches: u32,
    /// Extra launches at the largest measured size that screen for rare slow launches.
    #[arg(long, default_value_t = 2000)]
    screen_launches: u32,
    /// Launches per size when the screened samples show a heavy tail.
    #[arg(long, default_value_t = 10_000)]
    heavy_tail_launches: u32,
    /// Most partition sizes the planner measures per kernel.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..))]
    max_sizes: u32,
    /// Seconds of launches per kernel: when measuring every realisable partition size is
    /// estimated (from the first two sizes) to fit, every size is measured; otherwise the
    /// planner's sizes plus a verification sweep of the rest. 0: always the planner and the sweep.
    #[arg(long, default_value_t = wcetd::calibrate::DEFAULT_BUDGET_S)]
    calibration_budget: f64,
    /// A directory of kernel manifests (one TOML per kernel); repeatable. Read at start and by
    /// `wcetctl kernels reload` (Calibration1.ReloadKernels).
    #[arg(long = "kernel-dir", value_name = "DIR")]
    kernel_dirs: Vec<PathBuf>,
    /// Launches of the delay probe (a fixed amount of work on the whole device) before each
    /// calibration job; their rare slow launches bound the delays every kernel can suffer. 0: off.
    #[arg(long, default_value_t = wcetd::calibrate::DELAY_PROBE_LAUNCHES)]
    delay_probe_launches: u32,
    /// Exceedance probability per launch the tail bound is stated at.
    #[arg(long, default_value_t = 1e-9)]
    exceedance: f64,
    /// Measure with a memory-bandwidth stressor on the other SMs (bounds tagged `contended`).
    #[arg(long)]
    contended: bool,
    /// Group whose members may call Calibration1 (besides root and the daemon's user).
    #[arg(long, default_value = "wcetd")]
    operator_group: String,
    /// Simulator: fail with a device fault after this many launches (fault-injection tests).
    #[arg(long, hide = true)]
    sim_fault_after: Option<u64>,
    /// Simulator: the injected fault is one the process cannot recover from.
    #[arg(long, hide = true)]
    sim_fault_lost: bool,
    /// Simulator: sleep this many microseconds per launch, so jobs take visible time.
    #[arg(long, default_value_t = 0)]
    sim_pace_us: u64,
    /// Simulator: report this SM clock while idle, as if it dropped after calibration.
    #[arg(long, hide = true)]
    sim_clock_mhz: Option<u32>,
    /// Do not calibrate missing kernels at start.
    #[arg(long)]
    no_initial_calibration: bool,
    /// Device description for predicted typical times in GetBoundInfo (predictions, never bounds):
    /// `auto` (the committed description whose name the device's contains), a committed name
    /// (rtx4070, titanx, h200, embedded), or a TOML file.
    #[arg(long, default_value = "auto")]
    device_description: String,
    /// Report no predicted typical times.
    #[arg(long, conflicts_with = "device_description")]
    no_prediction: bool,
    /// Group whose members may call Monitor1.Report (besides root, the daemon's user and the
    /// operator group): reported times can raise bounds.
    #[arg(long, default_value = "wcetd-report")]
    report_group: String,
    /// Write Prometheus metrics (bounds, observations, overruns, calibration age, jobs, health)
    /// to this file for the node exporter's textfile collector: at start, after every job, at
    /// most every 10 s while observations change, and at shutdown; replaced atomically.
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<PathBuf>,
    /// Queue a recalibration of a kernel when a reported time exceeds its bound (at most once
    /// per kernel per --overrun-recalibration-interval).
    #[arg(long)]
    recalibrate_on_overrun: bool,
    /// Seconds between two recalibrations of one kernel queued by overruns.
    #[arg(long, default_value_t = 3600, value_name = "SECONDS")]
    overrun_recalibration_interval: u64,
    /// Seconds between saves of production observations while they change: what a crash can
    /// lose of the times that did not raise a bound (those that did are saved before Report
    /// returns).
    #[arg(long, default_value_t = 2, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=60))]
    observation_save_interval: u64,
}

/// The description predictions are made for; `None` with `--no-prediction`, or when `auto` finds
/// none for this device (said in the log; GetBoundInfo then says so too).
fn device_description(
    args: &Args,
    device_name: &str,
) -> anyhow::Result<Option<wcetd::model::predict::DeviceDescription>> {
    use wcetd::model::predict::device;
    if args.no_prediction {
        return Ok(None);
    }
    if args.device_description != "auto" {
        return Ok(Some(device::load(&args.device_description)?));
    }
    let found = device::builtin_matching(device_name);
    if found.is_none() {
        tracing::warn!(
            device = device_name,
            "no committed device description matches; no predicted typical times (see --device-description)"
        );
    }
    Ok(found)
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wcetd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.calibration_budget >= 0.0 && args.calibration_budget.is_finite(),
        "--calibration-budget {} is out of range; accepted: seconds, 0 or more",
        args.calibration_budget
    );
    anyhow::ensure!(
        args.exceedance > 0.0 && args.exceedance < 1.0,
        "--exceedance {} is out of range; accepted: a probability strictly between 0 and 1",
        args.exceedance
    );
    let profile = DeviceProfile::load(&args.sim_profile)?;
    let sim = SimOptions {
        seed: args.seed,
        fault_after_launches: args.sim_fault_after,
        fault_is_lost: args.sim_fault_lost,
        pace_us_per_launch: args.sim_pace_us,
        clock_mhz_override: args.sim_clock_mhz,
    };
    let gpu = gpu::open(args.backend, profile, sim).map_err(|e| match e {
        GpuError::NoDriver => anyhow::anyhow!("{e}; use --backend sim to run on the simulated GPU"),
        e => e.into(),
    })?;
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(store::default_state_dir);
    let store = store::Store::open(&state_dir)?;
    let config = service_config(&args);
    let config = ServiceConfig {
        initial_calibration: !args.no_initial_calibration,
        prediction: device_description(&args, &gpu.info().name)?,
        kernel_dirs: args.kernel_dirs.clone(),
        monitor: MonitorConfig {
            recalibrate_on_overrun: args
                .recalibrate_on_overrun
                .then(|| std::time::Duration::from_secs(args.overrun_recalibration_interval)),
            save_interval: std::time::Duration::from_secs(args.observation_save_interval),
        },
        ..config
    };
    let (service, first_job) = Service::start(gpu, store, config);
    let (conn, private) = connect(&args, &state_dir).await?;
    dbus::serve(
        &conn,
        service.clone(),
        OperatorPolicy::new(&args.operator_group),
    )
    .await?;
    tokio::spawn(dbus::forward_events(conn.clone(), service.clone()));
    let reporters = ReporterPolicy::new(
        OperatorPolicy::new(&args.operator_group),
        &args.report_group,
    );
    monitor_bus::serve(&conn, service.clone(), reporters).await?;
    tokio::spawn(monitor_bus::forward_events(conn.clone(), service.clone()));
    if let Some(path) = &args.metrics_file {
        // Written before the name is owned, so a client that sees the daemon sees the file.
        write_metrics(&service, path);
        tokio::spawn(metrics::run(service.clone(), path.clone(), GPU_INDEX));
    }
    conn.request_name(dbus::BUS_NAME)
        .await
        .with_context(|| format!("owning {} (is another wcetd running?)", dbus::BUS_NAME))?;
    announce(&service, &conn, private.as_ref(), &state_dir, first_job);
    let mut lost = service.device_lost();
    let lost_why = tokio::select! {
        _ = wait_for_shutdown() => None,
        why = lost.wait_for(Option::is_some) => why.ok().and_then(|w| w.clone()),
    };
    tracing::info!("shutting down");
    let _ = conn.release_name(dbus::BUS_NAME).await;
    // After the name is released, so that no report comes in after the last save.
    service.save_observations();
    if let Some(path) = &args.metrics_file {
        write_metrics(&service, path);
    }
    if private.is_some() {
        let _ = std::fs::remove_file(bus::address_file(&state_dir));
    }
    match lost_why {
        // Exit with failure so that the service manager restarts wcetd on a clean process; the
        // stored bounds are served again after the restart.
        Some(why) => anyhow::bail!("device lost ({why}); exiting so that wcetd is restarted"),
        None => Ok(()),
    }
}

/// A metrics file that cannot be written is logged, never fatal: bounds are served regardless.
fn write_metrics(service: &Service, path: &std::path::Path) {
    if let Err(e) = metrics::write(service, path, GPU_INDEX) {
        tracing::error!(path = %path.display(), error = %e, "writing the metrics file failed");
    }
}

fn service_config(args: &Args) -> ServiceConfig {
    let interference = if args.contended {
        Interference::Contended
    } else {
        Interference::Isolated
    };
    ServiceConfig {
        recipe: Recipe {
            campaign: CampaignSettings {
                launches: args.launches,
                screen_launches: args.screen_launches,
                heavy_tail_launches: args.heavy_tail_launches,
                max_sizes: args.max_sizes as usize,
                interference,
                ..CampaignSettings::default()
            },
            method: args.method,
            method_config: MethodConfig {
                exceedance: args.exceedance,
                ..MethodConfig::default()
            },
            sweep: Sweep {
                budget_s: args.calibration_budget,
                ..Sweep::default()
            },
            delay_probe_launches: args.delay_probe_launches,
        },
        ..ServiceConfig::default()
    }
}

/// Connect as asked; with nothing asked and no bus reachable, start a private one.
async fn connect(
    args: &Args,
    state_dir: &std::path::Path,
) -> anyhow::Result<(zbus::Connection, Option<PrivateBus>)> {
    let choice = match (&args.bus_address, args.system, args.session) {
        (Some(a), _, _) => BusChoice::Address(a.clone()),
        (None, true, _) => BusChoice::System,
        (None, _, true) => BusChoice::Session,
        _ => BusChoice::Auto,
    };
    if choice != BusChoice::Auto {
        return Ok((bus::connect(&choice).await?, None));
    }
    if let Ok(conn) = bus::connect(&BusChoice::Auto).await {
        if conn.request_name(dbus::BUS_NAME).await.is_ok() {
            return Ok((conn, None));
        }
    }
    tracing::info!("no usable bus; starting a private dbus-daemon");
    let private = PrivateBus::start(&runtime_dir())?;
    let conn = bus::connect(&BusChoice::Address(private.address().to_string())).await?;
    std::fs::write(bus::address_file(state_dir), private.address())
        .with_context(|| format!("recording the bus address in {}", state_dir.display()))?;
    Ok((conn, Some(private)))
}

fn runtime_dir() -> PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    base.join(format!("wcetd-{}", std::process::id()))
}

fn announce(
    service: &Service,
    conn: &zbus::Connection,
    private: Option<&PrivateBus>,
    state_dir: &std::path::Path,
    job: Option<u64>,
) {
    let device = service.device();
    println!(
        "wcetd: serving {} on {}",
        dbus::BUS_NAME,
        private.map_or("the bus".to_string(), |p| p.address().to_string())
    );
    if let Some(p) = private {
        println!(
            "wcetd: private bus; in another shell: export WCETD_BUS_ADDRESS='{}'",
            p.address()
        );
    }
    println!(
        "wcetd: device {} ({} backend, {} SMs, partitions {:?}); state in {}",
        device.name,
        device.backend,
        device.total_sms,
        device.partition_sizes,
        state_dir.display()
    );
    if let Some(job) = job {
        println!("wcetd: calibrating the built-in suite as job {job}; bounds are served as each job finishes");
    }
    tracing::info!(unique_name = ?conn.unique_name(), "ready");
}

async fn wait_for_shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
