//! `wcetd`: the daemon. Reads its configuration file, opens the GPU (or the simulator), loads the
//! last calibration, calibrates what is missing, and serves bounds on the bus until SIGTERM or
//! SIGINT.

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use wcetd::bus::{self, BusChoice, PrivateBus};
use wcetd::calibrate::{Recipe, VerificationSweep};
use wcetd::gpu::sim::{DeviceProfile, SimOptions};
use wcetd::gpu::{self, BackendChoice, GpuError, Interference};
use wcetd::measure::CampaignSettings;
use wcetd::model::{Method, MethodConfig};
use wcetd::observe::ObservationFile;
use wcetd::service::{GpuWorker, MonitorConfig, Service, ServiceConfig};
use wcetd::{access::OperatorPolicy, config, dbus, store};
use wcetd::{access::ReporterPolicy, metrics, monitor_bus};

#[derive(Parser, Debug)]
#[command(
    name = "wcetd",
    version,
    about = "Serve conservative WCET bounds for CUDA kernels over D-Bus",
    after_help = "Every long option can also be set in the configuration file (default /etc/wcetd/wcetd.toml), \
under the option's name without the dashes, e.g. `launches = 500` or `interference = [\"isolated\", \"contended\"]`; \
options given on the command line win over the file."
)]
struct Args {
    /// Configuration file with the same keys as these options [default: /etc/wcetd/wcetd.toml
    /// when it exists]; options on the command line win over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Write man pages and shell completions under DIR and exit (used by systemd/install.sh).
    #[arg(long, value_name = "DIR", hide = true)]
    generate: Option<PathBuf>,
    /// GPU backend: `cuda`, `sim` (the simulated GPU), or `auto` (CUDA; the simulated GPU only on
    /// a host with no NVIDIA driver loaded: on a GPU host whose CUDA cannot start, an error).
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Simulator device profile: `h200`, `embedded`, or a TOML file.
    #[arg(long, default_value = "h200")]
    sim_profile: String,
    /// Simulator seed (runs are reproducible from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where calibrations are kept [default: $STATE_DIRECTORY, else $XDG_STATE_HOME/wcetd, else
    /// ~/.local/state/wcetd].
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
    /// Bound method: `wcetd`, or a published strategy it is compared against (fixed-margin,
    /// incremental-margin, minimal-offset, fewest-points, envelope).
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
    #[arg(long, default_value_t = wcetd::calibrate::DEFAULT_BUDGET_S, value_parser = seconds)]
    calibration_budget: f64,
    /// Most sizes per kernel and interference the verification sweep measures in full because the
    /// fitted curve stood more than 5% above the sweep's median there (a full measurement each,
    /// usually for a tighter bound). 0: the sweep only measures sizes where the curve is too low.
    #[arg(long, default_value_t = wcetd::model::verify::MAX_TIGHTENINGS)]
    tighten_sizes: usize,
    /// Which GPUs to serve: `all`, or indices in CUDA's device order (`0,2`). Each gets its own
    /// object `/org/wcetd/Wcetd1/gpu/N`, worker, job queue, store file and health.
    #[arg(long, default_value = "all")]
    devices: gpu::DeviceSelection,
    /// The GPU `/org/wcetd/Wcetd1` answers for [default: the first served].
    #[arg(long)]
    default_device: Option<u32>,
    /// Simulator: how many identical devices to simulate (each with its own seed and UUID).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    sim_devices: u32,
    /// A directory of kernel manifests (one TOML per kernel); repeatable. Read at start and by
    /// `wcetctl kernels reload` (Calibration1.ReloadKernels). With `--system` and none given:
    /// /etc/wcetd/kernels.d, when it exists.
    #[arg(long = "kernel-dir", value_name = "DIR")]
    kernel_dirs: Vec<PathBuf>,
    /// Launches of the delay probe (a fixed amount of work on the whole device) before each
    /// calibration job; their rare slow launches bound the delays every kernel can suffer. 0: off.
    #[arg(long, default_value_t = wcetd::calibrate::DELAY_PROBE_LAUNCHES)]
    delay_probe_launches: u32,
    /// Exceedance probability per launch the tail bound is stated at.
    #[arg(long, default_value_t = 1e-9, value_parser = probability)]
    exceedance: f64,
    /// How far a kernel's typical time may be higher in another process than in the daemon's
    /// (0.02: 2%); every bound of the `wcetd` method allows for it (the published strategies,
    /// kept for comparison, do not). Default: 0.02 on a real GPU (measured between
    /// processes on H100 and H200 cards: up to 1.84%, docs/hardware-validation.md), 0 on the
    /// simulator.
    #[arg(long, value_parser = process_shift)]
    process_shift: Option<f64>,
    /// Interference every calibration job measures under, comma-separated: `isolated` (the rest
    /// of the GPU idle) and `contended` (a memory-bandwidth stressor on the other SMs). Both by
    /// default: partitions that run at once need contended bounds (see docs/admission.md).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "isolated,contended"
    )]
    interference: Vec<Interference>,
    /// Measure only with the stressor on the other SMs: the same as `--interference contended`.
    #[arg(long, conflicts_with = "interference")]
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
    /// Simulator: sleep this many microseconds per launch, so jobs take visible time (demos, tests).
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
    /// Seconds one launch on a CUDA device may run before it is taken as hung (1 to 86400): a
    /// running kernel cannot be stopped inside a process, so the device is given up, the kernel
    /// charged with the loss, and wcetd exits to be restarted. Keep it above the longest launch
    /// your kernels may take, contended on the smallest partition included.
    #[arg(long, default_value_t = gpu::cuda::DEFAULT_LAUNCH_TIMEOUT.as_secs(), value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    launch_timeout: u64,
    /// Seconds between saves of production observations while they change: what a crash can
    /// lose of the times that did not raise a bound (those that did are saved before Report
    /// returns).
    #[arg(long, default_value_t = 2, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=60))]
    observation_save_interval: u64,
}

/// Where `--system` reads kernel manifests when no `kernel-dir` is given, by flag or in the file:
/// the directory the package creates (`systemd/wcetd.tmpfiles`), when it exists. So the unit
/// passes `--system` alone, and a `kernel-dir` in `/etc/wcetd/wcetd.toml` is not overridden by
/// a flag in `ExecStart=` (the unit passed `--kernel-dir` until 2026-11-24, and a black-box run
/// found the file's directories dropped).
const SYSTEM_KERNEL_DIR: &str = "/etc/wcetd/kernels.d";

/// The command line, with the configuration file's settings under it (flags win).
fn parse_args() -> anyhow::Result<Args> {
    let mut args = parse_args_and_file()?;
    if args.system && args.kernel_dirs.is_empty() && Path::new(SYSTEM_KERNEL_DIR).is_dir() {
        args.kernel_dirs.push(SYSTEM_KERNEL_DIR.into());
    }
    Ok(args)
}

fn parse_args_and_file() -> anyhow::Result<Args> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let first = Args::try_parse_from(&argv)?;
    let Some(file) = config::locate(first.config.as_deref())? else {
        return Ok(first);
    };
    let merged = config::merge(&Args::command(), &argv, &config::given_flags(&argv), &file)?;
    // Not a clap error any more: `main` would print clap's message alone, which names the flag
    // but not the file whose key it came from.
    let matches = Args::command()
        .try_get_matches_from(merged)
        .map_err(|e| {
            anyhow::anyhow!(
                "configuration {} (each key is the flag of the same name, and flags given on the command line win): {}",
                file.display(),
                e.render().to_string().trim_end()
            )
        })?;
    tracing::info!(file = %file.display(), "configuration read");
    Ok(Args::from_arg_matches(&matches)?)
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

/// Standard error for the log, whose writes never fail: when the reader of the daemon's log has
/// gone (`wcetd 2>&1 | head -1`, a log forwarder that died), tracing's fallback `eprintln!`
/// panicked on the broken pipe and the daemon ended with status 101 (a review found it). The
/// lines are lost; the daemon serves on.
struct LogToStderr;

impl Write for LogToStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// `line` on standard error, where it can still be written (an exit message; `eprintln!`
/// panics on a closed pipe, which would turn exit status 1 into 101).
fn say_on_stderr(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn main() -> std::process::ExitCode {
    // journald (or any file) gets plain text: colour codes only on a terminal, and never with
    // NO_COLOR set.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(colour)
        .with_writer(|| LogToStderr)
        .init();
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            if let Some(e) = e.downcast_ref::<clap::Error>() {
                e.exit();
            }
            say_on_stderr(&format!("wcetd: {e:#}"));
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Some(dir) = &args.generate {
        return match wcetd::generate::write_all(Args::command(), "8", dir) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                say_on_stderr(&format!("wcetd: {e:#}"));
                std::process::ExitCode::FAILURE
            }
        };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let ran = runtime.block_on(run(args));
    // Not waiting for blocking tasks still running (an admission analysis a client left): the
    // daemon's own work has ended by now.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    let failed = match ran {
        Ok(()) => false,
        Err(e) => {
            say_on_stderr(&format!("wcetd: {e:#}"));
            true
        }
    };
    // 1 after a lost device, which the unit's `Restart=on-failure` restarts.
    let left = WORKER_LEFT_RUNNING.load(std::sync::atomic::Ordering::Relaxed);
    gpu::cuda::exit_now_if_a_launch_may_still_run(u8::from(failed), left);
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    // Before anything is started: a SIGTERM that came while the daemon was still starting would
    // otherwise kill it with the default action, possibly in the middle of a save.
    let mut shutdown = ShutdownSignals::install()?;
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(store::default_state_dir);
    // Held until the process ends: a second daemon on this directory is refused at once.
    let _state_lock = store::DirectoryLock::take(&state_dir)?;
    let (services, workers, default) = start_services(&args, &state_dir)?;
    let (conn, private) = connect(&args, &state_dir).await?;
    let objects = serve(&args, &conn, &services, default).await?;
    let (name_lost, first_jobs) = own_name(&conn, &services).await?;
    workers.into_iter().for_each(GpuWorker::start);
    announce(
        &services,
        default,
        &conn,
        private.as_ref(),
        &state_dir,
        &first_jobs,
    );
    let lost_why = until_stop(&mut shutdown, &services, name_lost).await;
    tracing::info!("shutting down");
    // The stop's order: the workers first, so that no job is queued after this (`Busy`) and the
    // jobs the stop cancels are announced while clients can still hear the daemon, before it
    // leaves the bus (they had heard only the name go, and waited on a JobFinished that never
    // came); then the bus; then the last save, so that no report comes in after it.
    stop_workers(&services, &mut shutdown).await;
    leave_the_bus(&conn, &objects).await;
    let unsaved = save_all(&services).await;
    if let Some(path) = &args.metrics_file {
        write_metrics(&services, path);
    }
    if let Some(private) = &private {
        remove_our_address(&state_dir, private);
    }
    exit_status(lost_why, unsaved)
}

/// Own the bus name, with each GPU's first calibration queued (its job number per GPU, if one
/// was needed); on success, what ends when the name is lost.
async fn own_name(
    conn: &zbus::Connection,
    services: &[(u32, Service)],
) -> anyhow::Result<(impl std::future::Future<Output = String>, FirstJobs)> {
    let name_lost = bus::name_lost(conn).await?;
    // Queued before the name is owned, so that a client that sees the name finds job 1; run
    // only after: a daemon that finds the name taken must not have run a kernel (a stray second
    // instance measured the GPU while the real one was calibrating), nor leave a job record.
    let first_jobs: FirstJobs = services
        .iter()
        .map(|(n, service)| (*n, service.calibrate_missing()))
        .collect();
    if let Err(e) = bus::own_name(conn).await {
        // Off the bus first: the cancellation's JobFinished must not reach clients of the
        // daemon that owns the name (a signal matched by path and interface alone read as its
        // job 1 cancelled).
        drop(name_lost);
        let _ = conn.clone().close().await;
        for ((_, service), (_, job)) in services.iter().zip(&first_jobs) {
            if let Some(job) = job {
                let _ = service.cancel_job(*job);
            }
        }
        return Err(e);
    }
    Ok((name_lost, first_jobs))
}

/// Per GPU, the job number of the first calibration its start queued, if it needed one.
type FirstJobs = Vec<(u32, Option<u64>)>;

/// Until a shutdown signal, a lost device or a lost bus name: why the daemon must exit with
/// failure (to be restarted on a clean process), `None` for a clean stop.
async fn until_stop(
    shutdown: &mut ShutdownSignals,
    services: &[(u32, Service)],
    name_lost: impl std::future::Future<Output = String>,
) -> Option<String> {
    tokio::select! {
        biased;
        signal = shutdown.wait() => {
            tracing::info!("{signal} received");
            if signal == "SIGHUP" {
                // Many tools send it to mean "reload"; here it stops the daemon, as documented.
                tracing::warn!("SIGHUP stops wcetd (it has no reload signal): `wcetctl kernels reload` rereads the kernel directories; a changed configuration needs a restart");
            }
            None
        }
        why = any_device_lost(services) => why.map(|w| format!("device lost ({w})")),
        why = name_lost => {
            // A lost name that comes with a shutdown signal is that shutdown: a service manager
            // that signals every process of the unit stops a private bus at the same instant,
            // and the bus may be seen gone before the signal is. Exiting with failure then would
            // look like a crash. (A device lost is never excused this way.)
            match tokio::time::timeout(SIGNAL_WITH_LOSS, shutdown.wait()).await {
                Ok(_) => {
                    tracing::warn!("{why}, with a shutdown signal: a clean stop");
                    None
                }
                Err(_) => Some(why),
            }
        }
    }
}

/// Stop every GPU's worker at once, off the runtime's threads: queued jobs end at once, a
/// running one is cancelled and waited for up to [`WORKER_STOP`]. A second signal (Ctrl-C
/// pressed again, a service manager that signals twice) ends the wait: the workers are left as a
/// hung one is, the stored bounds intact, and what has ended is announced and saved as usual.
async fn stop_workers(services: &[(u32, Service)], shutdown: &mut ShutdownSignals) {
    let left = || WORKER_LEFT_RUNNING.store(true, std::sync::atomic::Ordering::Relaxed);
    let stopping: Vec<_> = services
        .iter()
        .map(|(n, service)| {
            let (n, service) = (*n, service.clone());
            tokio::task::spawn_blocking(move || {
                if !service.stop_worker(WORKER_STOP) {
                    left();
                    tracing::warn!(gpu = n, "the GPU worker did not finish its job within {WORKER_STOP:?}; exiting without it (stored bounds are intact)");
                }
            })
        })
        .collect();
    let all_stopped = async {
        for stopped in stopping {
            let _ = stopped.await;
        }
    };
    tokio::select! {
        () = all_stopped => {}
        signal = shutdown.wait() => {
            left();
            tracing::warn!("{signal} again: not waiting for the GPU workers to end their jobs (stored bounds are intact)");
        }
    }
}

/// Announce every job that ended and was not announced yet, then release the name; each step
/// bounded by [`RELEASE_WAIT`]: a bus that stopped answering must not keep the daemon from
/// saving and exiting.
async fn leave_the_bus(conn: &zbus::Connection, objects: &Objects) {
    let announce_all = async {
        for (service, path, announced) in objects {
            dbus::announce_finished(conn, service, path, announced).await;
        }
    };
    if tokio::time::timeout(RELEASE_WAIT, announce_all)
        .await
        .is_err()
    {
        tracing::warn!("the bus did not take the last JobFinished signals within {RELEASE_WAIT:?}");
    }
    let release = conn.release_name(wcetd::bus::BUS_NAME);
    if tokio::time::timeout(RELEASE_WAIT, release).await.is_err() {
        tracing::warn!(
            "the bus did not answer ReleaseName within {RELEASE_WAIT:?}; exiting anyway"
        );
    }
}

/// The last save of every GPU's production observations, all at once and off the runtime's
/// threads: each may wait 10 s for its journal, and one after another they could outlast a
/// service manager's stop timeout. What was lost, per GPU whose floors were.
async fn save_all(services: &[(u32, Service)]) -> Vec<String> {
    let saving: Vec<_> = services
        .iter()
        .map(|(n, service)| {
            let (n, service) = (*n, service.clone());
            (n, tokio::task::spawn_blocking(move || save(n, &service)))
        })
        .collect();
    let mut unsaved = Vec::new();
    for (n, saved) in saving {
        match saved.await {
            Ok(None) => {}
            Ok(Some(lost)) => unsaved.push(lost),
            // Not a clean exit: whether anything was saved is unknown.
            Err(e) => unsaved.push(format!("GPU {n}: saving failed ({e})")),
        }
    }
    unsaved
}

/// Remove the private bus's address file: only our own record, and only in the directory this
/// daemon still holds (a daemon whose directory was replaced under it removed the address of
/// the one serving there now).
fn remove_our_address(state_dir: &std::path::Path, private: &PrivateBus) {
    let file = bus::address_file(state_dir);
    let recorded = std::fs::read_to_string(&file).ok();
    if wcetd::store::still_locked(&file).is_ok()
        && recorded.as_deref().map(str::trim) == Some(private.address())
    {
        let _ = std::fs::remove_file(&file);
    }
}

/// How the process ends: with failure after a lost device or bus name (so that the service
/// manager restarts wcetd on a clean process, and the stored bounds are served again after the
/// restart), and when floors raised since the last save could be neither saved nor journalled
/// (a full disk): the next start serves bounds without them. The reporters were told at the
/// time (`Failed`); the operator is told now, beside a lost device if both.
fn exit_status(lost_why: Option<String>, unsaved: Vec<String>) -> anyhow::Result<()> {
    let unsaved = (!unsaved.is_empty()).then(|| format!(
        "production observations could not be saved at shutdown ({}), and floors reported since the last save were not journalled either: bounds they raised are served lower after the next start; free space in the state directory and report those times again",
        unsaved.join("; ")
    ));
    match (lost_why, unsaved) {
        (Some(why), unsaved) => anyhow::bail!(
            "{why}; exiting so that wcetd is restarted{}",
            unsaved.map(|u| format!("; also: {u}")).unwrap_or_default()
        ),
        (None, Some(unsaved)) => anyhow::bail!("{unsaved}"),
        (None, None) => Ok(()),
    }
}

/// Save GPU `n`'s production observations for the last time; what was lost, when floors were
/// (neither saved nor journalled).
fn save(n: u32, service: &Service) -> Option<String> {
    match service.save_observations() {
        Some(failed) if failed.floors_lost => Some(format!("GPU {n}: {}", failed.why)),
        Some(failed) => {
            tracing::warn!(
                gpu = n,
                "the last save of production observations failed ({}): every floor raised is in the floor journal, read at the next start, so no bound drops; counts and quantiles since the last save are lost",
                failed.why
            );
            None
        }
        None => None,
    }
}

/// Seconds, 0 or more, checked while parsing: a bad value in the configuration file is then
/// named with the file and its key, as clap's other errors are.
fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!(
            "`{s}` is out of range; accepted: seconds, 0 or more"
        )),
    }
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

/// A probability strictly between 0 and 1, said as given when it is not (`1e-400` is 0 to a
/// double, and would otherwise be reported as `0`).
fn probability(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p < 1.0 => Ok(p),
        // Read as 0, but its digits are not all zeros: an underflow, not a zero.
        Ok(p) if p == 0.0 && s.split(['e', 'E']).next().is_some_and(|m| m.contains(|c: char| ('1'..='9').contains(&c))) => Err(format!(
            "`{s}` is too small to represent (it reads as 0); accepted: a probability strictly between 0 and 1, at least about 1e-300"
        )),
        _ => Err(format!(
            "`{s}` is not a probability strictly between 0 and 1; accepted: e.g. 1e-9"
        )),
    }
}

/// The services by device index, the default device, and each device's first job.
/// Each device's service by number, their GPU workers (not started), the default device.
type Loaded = (Vec<(u32, Service)>, Vec<GpuWorker>, u32);

/// Open the chosen devices and load a service for each, with its own store handle, worker and
/// queue; the workers are returned to be started once the bus name is owned.
fn start_services(args: &Args, state_dir: &std::path::Path) -> anyhow::Result<Loaded> {
    let profile = DeviceProfile::load(&args.sim_profile)?;
    gpu::cuda::set_launch_timeout(std::time::Duration::from_secs(args.launch_timeout));
    let sim = SimOptions {
        seed: args.seed,
        fault_after_launches: args.sim_fault_after,
        fault_is_lost: args.sim_fault_lost,
        pace_us_per_launch: args.sim_pace_us,
        clock_mhz_override: args.sim_clock_mhz,
        device_index: 0,
    };
    let opened = gpu::open_devices(args.backend, &args.devices, profile, sim, args.sim_devices)
        .map_err(|e| match e {
            GpuError::NoDriver => {
                anyhow::anyhow!("{e}; use --backend sim to run on the simulated GPU")
            }
            e => e.into(),
        })?;
    let gpu::OpenedDevices { gpus, every_uuid } = opened;
    let default = args.default_device.unwrap_or(gpus[0].0);
    anyhow::ensure!(
        gpus.iter().any(|(n, _)| *n == default),
        "--default-device {default} is not served; accepted: one of {:?}",
        gpus.iter().map(|(n, _)| *n).collect::<Vec<_>>()
    );
    // Every device's observations are checked before any device starts (and calibrates, and
    // records jobs): a refusal touches nothing.
    for (n, gpu) in &gpus {
        let observations = ObservationFile::new(state_dir, &gpu.info().fingerprint);
        observations.check_readable().map_err(|why| {
            anyhow::anyhow!(
                "GPU {n}: {why}; wcetd does not serve bounds without the launch times production reported (they hold the bounds up); give the daemon's user read and write access to it (as `wcetd` writes it: its owner, mode 0640) and start again"
            )
        })?;
        store::check_readable(state_dir, &gpu.info().fingerprint).map_err(|why| {
            anyhow::anyhow!(
                "GPU {n}: {why}; wcetd does not start without the calibration it would otherwise replace at its first save; give the daemon's user read and write access to it (as `wcetd` writes it: its owner, mode 0640), or move it away to start without it, and start again"
            )
        })?;
    }
    let mut services = Vec::new();
    let mut workers = Vec::new();
    let devices_served = gpus.len();
    for (n, gpu) in gpus {
        // Every other card of this host, served or left out by --devices: its calibration is
        // its own (one left out was served stale here, raised by its reports; a review found).
        let own = &gpu.info().fingerprint.uuid;
        let sibling_cards = every_uuid.iter().filter(|u| *u != own).cloned().collect();
        // Each device its own store handle (its own file, by fingerprint), worker and queue.
        let store = store::Store::open(state_dir)?;
        let config = ServiceConfig {
            initial_calibration: !args.no_initial_calibration,
            prediction: device_description(args, &gpu.info().name)?,
            kernel_dirs: args.kernel_dirs.clone(),
            gpu: n,
            devices_served,
            sibling_cards,
            ..service_config(args)
        };
        let (service, worker) = Service::load(gpu, store, config);
        services.push((n, service));
        workers.push(worker);
    }
    Ok((services, workers, default))
}

/// Each object's device, path and record of announced jobs, for the stop
/// ([`dbus::announce_finished`]).
type Objects = Vec<(Service, String, dbus::Announced)>;

/// Put every device's objects on the bus, forward their signals, and start the metrics file.
async fn serve(
    args: &Args,
    conn: &zbus::Connection,
    services: &[(u32, Service)],
    default: u32,
) -> anyhow::Result<Objects> {
    let access = OperatorPolicy::new(&args.operator_group);
    let reporters = ReporterPolicy::new(access.clone(), &args.report_group);
    dbus::serve_devices(conn, services, default, access, reporters).await?;
    let mut objects = Vec::new();
    for (n, service) in services {
        let mut paths = vec![wcetd::bus::device_path(*n)];
        if *n == default {
            paths.push(wcetd::bus::OBJECT_PATH.to_string());
        }
        for path in paths {
            let announced = dbus::Announced::default();
            let bus = dbus::forward_events(
                conn.clone(),
                service.clone(),
                path.clone(),
                announced.clone(),
            );
            let monitor = monitor_bus::forward_events(conn.clone(), service.clone(), path.clone());
            tokio::spawn(async move { tokio::join!(bus, monitor) });
            objects.push((service.clone(), path, announced));
        }
    }
    if let Some(path) = &args.metrics_file {
        store::remove_stale_temporaries_of(path);
        // Written before the name is owned, so a client that sees the daemon sees the file.
        write_metrics(services, path);
        tokio::spawn(metrics::run(services.to_vec(), path.clone()));
    }
    Ok(objects)
}

/// Which device was lost to this process (a sticky CUDA fault), and why: that ends the daemon,
/// whichever device it is. `None` if a device's watch closed without saying.
async fn any_device_lost(services: &[(u32, Service)]) -> Option<String> {
    let lost = services.iter().map(|(n, service)| {
        let mut lost = service.device_lost();
        let n = *n;
        Box::pin(async move {
            let why = lost
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|w| w.clone());
            why.map(|w| format!("GPU {n}: {w}"))
        })
    });
    futures_util::future::select_all(lost).await.0
}

/// A metrics file that cannot be written is logged, never fatal: bounds are served regardless.
fn write_metrics(services: &[(u32, Service)], path: &std::path::Path) {
    if let Err(e) = metrics::write(services, path) {
        tracing::error!(path = %path.display(), error = %e, "writing the metrics file failed");
    }
}

fn service_config(args: &Args) -> ServiceConfig {
    let interference = if args.contended {
        vec![Interference::Contended]
    } else {
        args.interference.clone()
    };
    ServiceConfig {
        interference,
        recipe: Recipe {
            campaign: CampaignSettings {
                launches: args.launches,
                screen_launches: args.screen_launches,
                heavy_tail_launches: args.heavy_tail_launches,
                max_sizes: args.max_sizes as usize,
                ..CampaignSettings::default()
            },
            method: args.method,
            method_config: MethodConfig {
                exceedance: args.exceedance,
                ..MethodConfig::default()
            },
            sweep: VerificationSweep {
                budget_s: args.calibration_budget,
                tightenings: args.tighten_sizes,
                ..VerificationSweep::default()
            },
            delay_probe_launches: args.delay_probe_launches,
            ..Recipe::default()
        },
        process_shift: args.process_shift,
        monitor: MonitorConfig {
            recalibrate_on_overrun: args
                .recalibrate_on_overrun
                .then(|| std::time::Duration::from_secs(args.overrun_recalibration_interval)),
            save_interval: std::time::Duration::from_secs(args.observation_save_interval),
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
        if bus::own_name(&conn).await.is_ok() {
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

/// What the daemon serves and where, on standard output. Written without `println!`, which
/// panics when the reader has gone: `wcetd | head -1` ended the daemon with status 101 (a hunt
/// found it); a reader that leaves misses the lines, and the daemon serves on.
fn announce(
    services: &[(u32, Service)],
    default: u32,
    conn: &zbus::Connection,
    private: Option<&PrivateBus>,
    state_dir: &std::path::Path,
    jobs: &[(u32, Option<u64>)],
) {
    let mut lines = vec![format!(
        "wcetd: serving {} on {}",
        wcetd::bus::BUS_NAME,
        private.map_or("the bus".to_string(), |p| p.address().to_string())
    )];
    if let Some(p) = private {
        lines.push(format!(
            "wcetd: private bus; in another shell: export WCETD_BUS_ADDRESS='{}'",
            p.address()
        ));
    }
    for (n, service) in services {
        let device = service.device();
        let root = if *n == default {
            format!(" (and {})", wcetd::bus::OBJECT_PATH)
        } else {
            String::new()
        };
        lines.push(format!(
            "wcetd: GPU {n} at {}{root}: {} ({} backend, {} SMs, partitions {:?})",
            wcetd::bus::device_path(*n),
            device.name,
            device.backend,
            device.total_sms,
            device.partition_sizes,
        ));
    }
    lines.push(format!("wcetd: state in {}", state_dir.display()));
    for ((_, service), (n, job)) in services.iter().zip(jobs) {
        if let Some(job) = job {
            let wcetctl = service.wcetctl();
            lines.push(format!("wcetd: GPU {n}: calibrating its kernels as job {job}; bounds are served as each interference is measured (`{wcetctl} jobs`)"));
        }
    }
    let mut out = std::io::stdout().lock();
    for line in lines {
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    let unique = conn
        .unique_name()
        .map(ToString::to_string)
        .unwrap_or_default();
    tracing::info!(unique_name = %unique, "ready");
}

/// How long shutdown waits for a GPU worker to end its cancelled job: well inside systemd's
/// default stop timeout (90 s), long enough for a batch of launches to finish.
const WORKER_STOP: std::time::Duration = std::time::Duration::from_secs(20);
/// Set when the stop leaves a GPU worker inside its job: it may be waiting on a launch, which
/// libcuda's exit-time teardown could wait on too (`main` then ends with `_exit`).
static WORKER_LEFT_RUNNING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);
/// How long a lost bus name waits for a shutdown signal sent with it.
const SIGNAL_WITH_LOSS: std::time::Duration = std::time::Duration::from_millis(200);

/// How long shutting down waits for the bus to confirm the name is released.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Caught from the moment they are installed, each a clean stop: SIGTERM (a service manager),
/// SIGINT (Ctrl-C) and SIGHUP (the terminal closed; wcetd has no configuration to reread).
struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            hangup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }

    /// Until one of them arrives (or has arrived since `install`): its name.
    async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option says what it is, in `--help`, the man page and the configuration file's keys.
    #[test]
    fn every_option_has_help_text() {
        let cmd = Args::command();
        cmd.clone().debug_assert();
        let missing: Vec<&str> = cmd
            .get_arguments()
            .filter(|a| a.get_help().is_none())
            .map(|a| a.get_id().as_str())
            .filter(|id| !["help", "version"].contains(id))
            .collect();
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }
}
