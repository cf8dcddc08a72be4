//! The GPU as the daemon sees it: a device that can run a kernel N times on a partition of m SMs
//! and report how long each launch took, plus what it knows about itself.
//!
//! This layer knows nothing of bounds. It owns the [`Gpu`] trait, the description of a device
//! ([`DeviceInfo`], [`Fingerprint`]), what one batch of launches returns ([`Batch`]) and the two
//! backends behind the trait: the simulator ([`sim`]) and real CUDA devices ([`cuda`]).
//!
//! The trait is synchronous on purpose: a GPU campaign is a long, blocking, one-at-a-time activity
//! (one launch in flight, timed with events), so the service runs it on a blocking thread rather
//! than pretending it is async.

pub mod cuda;
pub mod sim;

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::kernels::{Geometry, KernelSpec};

pub use cuda::PlacementReport;

/// A number of SMs handed to a kernel. Only some sizes are realisable on a given device (on Hopper,
/// green contexts split SMs in multiples of 8); [`DeviceInfo::partition_sizes`] lists them.
pub type PartitionSize = u32;

/// Which implementation sits behind the [`Gpu`] trait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Cuda,
    Sim,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Cuda => "cuda",
            Backend::Sim => "sim",
        })
    }
}

/// The conditions a calibration is valid under. A bound measured under one fingerprint is reported
/// stale when the device no longer matches it (design rule 3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    pub backend: Backend,
    pub device: String,
    /// The GPU's UUID (the simulator makes one up from its profile and seed).
    pub uuid: String,
    pub driver: String,
    pub cuda: String,
    /// How clocks were managed while measuring, e.g. `default` or `locked:1980MHz`.
    pub clock_policy: String,
}

impl Fingerprint {
    /// A short, file-name-safe digest used to name the store file of this device.
    pub fn digest(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        crate::fnv::fnv1a_hex(text.as_bytes())
    }
}

/// What the daemon knows about the device it measures on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub backend: Backend,
    pub total_sms: u32,
    /// SMs per TPC (2 on Hopper and the embedded profile).
    pub sms_per_tpc: u32,
    /// Every realisable partition size, ascending, the whole device last.
    pub partition_sizes: Vec<PartitionSize>,
    /// SM clock the device runs at while measuring, in MHz (0 when unknown).
    pub sm_clock_mhz: u32,
    pub fingerprint: Fingerprint,
    /// Compute capability times ten (90 for Hopper).
    #[serde(default)]
    pub cc: u32,
    /// Sizes the split API offers but the placement probe refused, with the reason. They are not
    /// in `partition_sizes` and are never calibrated.
    #[serde(default)]
    pub unusable_sizes: Vec<(PartitionSize, String)>,
}

impl DeviceInfo {
    /// The largest realisable size not above `sms`, or `None` when `sms` is below the smallest.
    pub fn realisable_at_most(&self, sms: u32) -> Option<PartitionSize> {
        self.partition_sizes
            .iter()
            .rev()
            .copied()
            .find(|&p| p <= sms)
    }
}

/// Conditions of the device. Read at one instant ([`Gpu::telemetry`]) or summarised over a batch
/// while it ran ([`Batch::telemetry`]: the lowest clock, the highest temperature and power, every
/// throttle reason seen). Fields the backend cannot read are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Telemetry {
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    /// Clock-throttle reasons, empty when none. A throttled batch is kept and flagged.
    pub throttle_reasons: Vec<String>,
    /// Time the driver counted the clocks as limited (power, thermal, board, reliability) across
    /// the batch, in nanoseconds; 0 when none or unknown.
    #[serde(default)]
    pub throttle_ns: u64,
    /// The driver said the GPU was idle and named no throttle reason: its clock then is the idle
    /// clock (hundreds of MHz on some parts even with a context open), not the clock a launch
    /// runs at, so it scales no bound and settles no clock policy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
}

impl Telemetry {
    pub fn throttled(&self) -> bool {
        !self.throttle_reasons.is_empty()
    }
}

/// What the neighbours of the measured partition do while it is timed.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Interference {
    /// The rest of the GPU is idle.
    #[default]
    Isolated,
    /// A memory-bandwidth stressor runs on the complementary SMs.
    Contended,
}

impl fmt::Display for Interference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Interference::Isolated => "isolated",
            Interference::Contended => "contended",
        })
    }
}

/// One batch of launches to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRequest {
    pub sms: PartitionSize,
    pub warmup: u32,
    pub launches: u32,
    pub interference: Interference,
}

/// The result of running one kernel `launches` times, one launch in flight at a time.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Time of each launch, in nanoseconds, in launch order.
    pub times_ns: Vec<u64>,
    /// The SM count the partition really had (a split may return a different count than asked).
    pub granted_sms: u32,
    /// Launch geometry at this device's occupancy, when the backend knows it.
    pub geometry: Option<Geometry>,
    /// Conditions while the launches ran.
    pub telemetry: Telemetry,
    /// The interference actually applied: a contended request on a partition with no remainder
    /// (the whole device) runs isolated, and says so here.
    pub interference: Interference,
    /// SMs the stressor ran on (0 when isolated).
    pub stressor_sms: u32,
}

impl Batch {
    pub fn throttled(&self) -> bool {
        self.telemetry.throttled()
    }
}

/// Why the GPU layer could not do what was asked. Every CUDA/NVML failure ends up here: this layer
/// never panics on a driver error.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no NVIDIA driver found: libcuda could not be loaded")]
    NoDriver,
    #[error("partition of {requested} SMs is not realisable on this device; realisable sizes: {accepted:?}")]
    InvalidPartition {
        requested: u32,
        accepted: Vec<PartitionSize>,
    },
    #[error("kernel `{0}` is not supported by this backend")]
    UnsupportedKernel(String),
    #[error("kernel `{kernel}` produced a wrong result: {detail}")]
    WrongResult { kernel: String, detail: String },
    #[error("device fault: {0}")]
    Fault(String),
    /// A fault the driver cannot recover from inside this process (CUDA's sticky errors): every
    /// later call fails the same way until the process restarts.
    #[error("device lost: {0}; the CUDA context cannot be recovered in this process, so wcetd must restart (under systemd it does, Restart=on-failure)")]
    Lost(String),
    /// A launch ran past [`cuda`]'s launch time limit: it cannot be stopped inside this process.
    /// The CUDA backend abandons its device state and reports it as [`GpuError::Lost`].
    #[error("launch hung: {0}")]
    Hung(String),
    #[error("CUDA driver error in {call}: {detail}")]
    Driver { call: &'static str, detail: String },
    #[error("{0}")]
    NoSuchDevice(String),
}

/// A device that kernels can be measured on.
pub trait Gpu: Send {
    fn info(&self) -> &DeviceInfo;

    /// Run `kernel` as `request` says: warm-up launches, then timed ones, one in flight at a time.
    /// `request.sms` must be one of [`DeviceInfo::partition_sizes`].
    fn run(&mut self, kernel: &KernelSpec, request: &RunRequest) -> Result<Batch, GpuError>;

    /// Current conditions, read without running anything.
    fn telemetry(&mut self) -> Telemetry;

    /// Time `launches` launches of a fixed amount of work (arithmetic and a stream through device
    /// memory that does not stay in L2) on the partition of `sms` SMs, one in flight at a time, as
    /// every timed launch is. Their excess over the median is the device's own rare delays (an
    /// interrupt, a firmware or refresh event): the same nanoseconds whatever kernel runs, and too
    /// rare for one kernel's campaign to see. Empty where the backend has none.
    fn delay_probe(&mut self, sms: PartitionSize, launches: u32) -> Result<Vec<u64>, GpuError> {
        let _ = (sms, launches);
        Ok(Vec::new())
    }

    /// Where each partition's blocks were seen to run when the device was opened (empty where
    /// the backend has no placement to probe, as on the simulator).
    fn placement(&self) -> &[PlacementReport] {
        &[]
    }

    /// Check that `sms` is realisable here, with an error that lists what is.
    fn check_partition(&self, sms: PartitionSize) -> Result<(), GpuError> {
        let info = self.info();
        if info.partition_sizes.contains(&sms) {
            Ok(())
        } else {
            Err(GpuError::InvalidPartition {
                requested: sms,
                accepted: info.partition_sizes.clone(),
            })
        }
    }
}

/// Which backend to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// CUDA when a driver is present, else the simulator (with a warning that says so).
    Auto,
    Cuda,
    Sim,
}

/// Which devices to open: every one, or these indices (CUDA's device order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelection {
    All,
    Indices(Vec<u32>),
}

impl std::str::FromStr for DeviceSelection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "all" {
            return Ok(DeviceSelection::All);
        }
        let mut indices = s
            .split(',')
            .map(|p| p.trim().parse::<u32>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                format!("`{s}` is not accepted; accepted: `all` or device indices like `0,2`")
            })?;
        indices.sort_unstable();
        indices.dedup();
        if indices.is_empty() {
            return Err("no device given; accepted: `all` or device indices like `0,2`".into());
        }
        Ok(DeviceSelection::Indices(indices))
    }
}

/// What `--backend auto` opens, from CUDA's device count: the real devices (Some), or the
/// simulator (None) only where the host has no NVIDIA driver at all. A host whose driver is
/// loaded (`driver_loaded`: its kernel module or control node is there) but where CUDA cannot
/// start or sees no device is a fault to fix, never a reason to serve simulated bounds in place
/// of its GPUs with Health `ok` (a library/module mismatch after a driver upgrade, device nodes
/// the sandbox hides, a module not loaded yet at boot): the daemon exits, and systemd retries.
fn auto_backend(
    count: Result<u32, GpuError>,
    driver_loaded: Option<&str>,
) -> Result<Option<u32>, GpuError> {
    match (count, driver_loaded) {
        (Ok(n), _) if n > 0 => Ok(Some(n)),
        // libcuda without a kernel driver (a container image, a toolkit install): no GPU here.
        (_, None) => Ok(None),
        (result, Some(evidence)) => {
            let why = match result {
                Ok(_) => "CUDA sees no device".to_string(),
                Err(e) => e.to_string(),
            };
            Err(GpuError::Driver {
                call: "open",
                detail: format!(
                    "this host has an NVIDIA driver ({evidence}), but no CUDA device can be used: {why}; refusing to serve simulated bounds in place of its GPUs. Fix the driver (a library and kernel module of different versions after an upgrade, device nodes hidden from the daemon, a module not loaded yet), or choose the simulator with --backend sim"
                ),
            })
        }
    }
}

/// Evidence that this host's NVIDIA driver is meant to serve this process, if any: its control
/// node, or its kernel module with `libcuda` installed (`libcuda`). The module alone is not:
/// `/proc/driver/nvidia` shows through into a container started without GPUs, which has no
/// libcuda and is a machine without a GPU for this purpose.
fn nvidia_driver_loaded(libcuda: bool) -> Option<&'static str> {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return Some("/dev/nvidiactl exists");
    }
    (libcuda && std::path::Path::new("/proc/driver/nvidia/version").exists())
        .then_some("its kernel module is loaded and libcuda is installed")
}

/// A device and its index in CUDA's device order.
pub type IndexedGpu = (u32, Box<dyn Gpu>);

/// Devices opened, and the UUIDs of every device present, opened or not.
pub struct OpenedDevices {
    pub gpus: Vec<IndexedGpu>,
    /// Every device of the backend, selected or not: a card left out by `--devices` is still a
    /// card of this host, whose calibration is its own (`ServiceConfig::sibling_cards`).
    pub every_uuid: Vec<String>,
}

/// Open every device `selection` names, as (index, device): real GPUs when `choice` allows and a
/// driver loads, else `sim_devices` simulated ones, each with its own seed (`seed + index`) and
/// UUID. An index that does not exist is an error that lists the ones that do.
pub fn open_devices(
    choice: BackendChoice,
    selection: &DeviceSelection,
    sim_profile: sim::DeviceProfile,
    sim_options: sim::SimOptions,
    sim_devices: u32,
) -> Result<OpenedDevices, GpuError> {
    let real = match choice {
        BackendChoice::Sim => None,
        BackendChoice::Cuda => Some(cuda::device_count()?),
        BackendChoice::Auto => {
            let count = cuda::device_count();
            let libcuda = !matches!(count, Err(GpuError::NoDriver));
            let real = auto_backend(count, nvidia_driver_loaded(libcuda))?;
            if real.is_none() {
                tracing::warn!(
                    "no NVIDIA driver on this host; using {sim_devices} simulated `{}`",
                    sim_profile.name
                );
            }
            real
        }
    };
    let count = real.unwrap_or(sim_devices.max(1));
    let indices: Vec<u32> = match selection {
        DeviceSelection::All => (0..count).collect(),
        DeviceSelection::Indices(v) => v.clone(),
    };
    if let Some(&bad) = indices.iter().find(|&&i| i >= count) {
        let kind = if real.is_some() { "CUDA" } else { "simulated" };
        return Err(GpuError::NoSuchDevice(format!(
            "device {bad} does not exist; accepted: 0 to {} ({count} {kind} devices{})",
            count - 1,
            if real.is_some() {
                ""
            } else {
                "; more with --sim-devices N"
            }
        )));
    }
    let every_uuid = match real {
        Some(_) => cuda::device_uuids(count),
        None => Ok((0..count).map(|i| sim::uuid_of(&sim_profile, i)).collect()),
    };
    let gpus = indices
        .into_iter()
        .map(|i| {
            let gpu: Box<dyn Gpu> = match real {
                Some(_) => Box::new(cuda::CudaGpu::open(i)?),
                None => Box::new(sim::SimGpu::new(
                    sim_profile.clone(),
                    sim::SimOptions {
                        seed: sim_options.seed + u64::from(i),
                        device_index: i,
                        ..sim_options.clone()
                    },
                )),
            };
            Ok((i, gpu))
        })
        .collect::<Result<Vec<IndexedGpu>, GpuError>>()?;
    // Unreadable, the cards opened are those known (what the daemon serves, as before).
    let every_uuid = every_uuid.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot read the UUIDs of every device; only the devices served are known as this host's");
        gpus.iter().map(|(_, g)| g.info().fingerprint.uuid.clone()).collect()
    });
    Ok(OpenedDevices { gpus, every_uuid })
}

/// Open the backend `choice` asks for. `Auto` falls back to the simulator when no driver loads;
/// an explicit `Cuda` fails with the reason instead.
pub fn open(
    choice: BackendChoice,
    sim_profile: sim::DeviceProfile,
    sim_options: sim::SimOptions,
) -> Result<Box<dyn Gpu>, GpuError> {
    let simulated =
        || Box::new(sim::SimGpu::new(sim_profile.clone(), sim_options.clone())) as Box<dyn Gpu>;
    match choice {
        BackendChoice::Sim => Ok(simulated()),
        BackendChoice::Cuda => Ok(Box::new(cuda::CudaGpu::open(0)?)),
        BackendChoice::Auto => match cuda::CudaGpu::open(0) {
            Ok(gpu) => Ok(Box::new(gpu)),
            Err(e) => {
                // As `open_devices`: the simulator only where no NVIDIA driver is loaded.
                let libcuda = !matches!(e, GpuError::NoDriver);
                let message = e.to_string();
                auto_backend(Err(e), nvidia_driver_loaded(libcuda))?;
                let e = message;
                tracing::warn!(
                    "CUDA backend unavailable ({e}); using the simulated GPU `{}`",
                    sim_profile.name
                );
                Ok(simulated())
            }
        },
    }
}

#[cfg(test)]
mod auto_backend_tests {
    use super::*;

    #[test]
    fn auto_uses_the_simulator_only_where_no_nvidia_driver_is_loaded() {
        let failed = || GpuError::Driver {
            call: "cuInit",
            detail: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH".into(),
        };
        assert_eq!(auto_backend(Ok(2), Some("x")).unwrap(), Some(2));
        assert_eq!(auto_backend(Ok(2), None).unwrap(), Some(2));
        assert_eq!(auto_backend(Err(GpuError::NoDriver), None).unwrap(), None);
        assert_eq!(auto_backend(Err(failed()), None).unwrap(), None);
        assert_eq!(auto_backend(Ok(0), None).unwrap(), None);
        // A GPU host whose CUDA cannot start: an error that says why and how to choose the
        // simulator, never the simulator (a black-box run got simulated H200 bounds, Health ok).
        for count in [Err(failed()), Err(GpuError::NoDriver), Ok(0)] {
            let e = auto_backend(count, Some("/dev/nvidiactl exists"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("/dev/nvidiactl exists") && e.contains("--backend sim"),
                "{e}"
            );
        }
    }
}
