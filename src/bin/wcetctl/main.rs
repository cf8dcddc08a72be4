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

mod admit;
mod cli;
mod online;
mod standalone;

use admit::*;
use cli::*;
use online::*;
use standalone::*;

/// What `--help` and the man page say about exit statuses.
const EXIT_STATUS: &str = "Exit status: 0 success (for admit and suggest: the set is admitted), \
1 the task set is not admitted (kernels check and reload: a manifest is rejected), 2 an error (bad input, no daemon, a failed job), \
130 interrupted (Ctrl-C during recalibrate cancels the job first).";

/// The object `--gpu` names, set once in `main`: every proxy of this run talks to it.
static OBJECT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn object() -> &'static str {
    OBJECT.get().map_or(wcetd::bus::OBJECT_PATH, String::as_str)
}

/// The command that acts on the GPU this run talks to, for the hints it prints (`wcetctl --gpu
/// N` when `--gpu` was given): job numbers are per GPU, and a bare `wcetctl cancel 2` printed on
/// GPU 1 cancelled GPU 0's job 2 (a black-box hunt found it). Set once in `main`.
static COMMAND: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn command() -> &'static str {
    COMMAND.get().map_or("wcetctl", String::as_str)
}

/// Properties uncached: a cached proxy waits for its first `GetAll` with no timeout, so
/// `wcetctl status` hung on a stopped daemon where every method call timed out.
async fn bounds_proxy(conn: &zbus::Connection) -> zbus::Result<BoundsProxy<'static>> {
    BoundsProxy::builder(conn)
        .path(object())
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
}

async fn calibration_proxy(conn: &zbus::Connection) -> zbus::Result<CalibrationProxy<'static>> {
    CalibrationProxy::builder(conn).path(object()).build().await
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

/// `print!` panics when standard output cannot be written (a full disk, `> /dev/full`): said as
/// an error with exit status 2, as every other failure is, not a panic and its backtrace (status
/// 101). Any other panic keeps the default report.
fn exit_cleanly_when_stdout_fails() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.starts_with("failed printing to stdout") {
            eprintln!("wcetctl: {text}");
            std::process::exit(2);
        }
        default(info);
    }));
}

fn main() -> std::process::ExitCode {
    // `wcetctl curve x | head` ends quietly when the reader goes away, as Unix tools do, instead
    // of panicking on a broken pipe.
    // SAFETY: restoring the default disposition of one signal before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    exit_cleanly_when_stdout_fails();
    let cli = Cli::parse();
    if let Err(why) = wcetd::bus::call_timeout_set() {
        eprintln!("wcetctl: {why}");
        std::process::exit(2);
    }
    let gpu = cli.gpu;
    if let Some(n) = cli.gpu {
        let _ = OBJECT.set(wcetd::client::object_path(Some(n)));
        let _ = COMMAND.set(format!("wcetctl --gpu {n}"));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let status = match runtime.block_on(run(cli)) {
        Ok(()) => 0,
        Err(e) if e.is::<NotAdmitted>() => 1,
        Err(e) if e.is::<Rejected>() => {
            eprintln!("wcetctl: {e}");
            1
        }
        Err(e) if e.is::<Interrupted>() => 130,
        Err(e) => {
            let text = format!("{e:#}");
            match gpu {
                // The daemon serves no object for that GPU: say what is accepted.
                Some(n) if text.contains("UnknownObject") || text.contains("Unknown object") => {
                    eprintln!("wcetctl: the daemon serves no GPU {n} ({text}); accepted: --gpu with an index `wcetctl status` lists (run without --gpu)")
                }
                _ if timed_out(&e) => eprintln!(
                    "wcetctl: the daemon did not answer within {} s: it may be stopped (SIGSTOP) or hung (`systemctl status wcetd`, its log); {text}",
                    wcetd::bus::call_timeout().as_secs()
                ),
                _ => eprintln!("wcetctl: {text}"),
            }
            2
        }
    };
    // `wcetctl campaign --backend cuda` after a launch that never ended, as the daemon does.
    wcetd::gpu::cuda::exit_now_if_a_launch_may_still_run(status, false);
    std::process::ExitCode::from(status)
}

/// Whether `e` is a method call that met [`wcetd::bus::call_timeout`].
fn timed_out(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<zbus::Error>(),
            Some(zbus::Error::InputOutput(io)) if io.kind() == std::io::ErrorKind::TimedOut
        )
    })
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Fit {
            ref samples,
            ref geometry,
            ref sizes,
            method,
            ref kernel_dirs,
            process_shift,
        } => fit(
            cli.json,
            samples,
            (geometry.as_deref(), kernel_dirs),
            sizes,
            (method, process_shift),
        ),
        Command::Simulate {
            ref profile,
            seed,
            launches,
            contended,
            ref geometry_out,
            ref kernel_dirs,
        } => simulate(
            cli.json,
            profile,
            (seed, launches, contended),
            geometry_out.as_deref(),
            kernel_dirs,
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
            action:
                KernelsAction::Check {
                    ref files,
                    ref kernel_dirs,
                },
        } => check_manifests(cli.json, files, kernel_dirs),
        Command::Project {
            ref source,
            ref target,
            ref configs,
        } => project(cli.json, source, target, configs.as_deref()),
        Command::Predict {
            ref kernel,
            device: Some(ref device),
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
