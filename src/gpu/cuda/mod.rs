//! The CUDA backend: a real device behind the [`Gpu`] trait. It owns the driver session (primary
//! context, NVRTC-compiled libraries), the green-context partitions it measures on, what each
//! partition was proved to hold (the placement probe), and the timing loop. Submodules:
//! [`driver`] (raw-API wrappers and error mapping), [`nvrtc`] (the run-time compiler, loaded by
//! hand), [`green`] (SM partitions), [`nvml`] (telemetry and identity), [`suite`] (inputs, launch
//! plans, CPU checks), [`run`] (one batch), [`placement`] (where blocks really ran).
//!
//! One measurement is the GPU-timeline interval between two CUDA events recorded on the
//! partition's stream right before and after one launch of the kernel's timed step. The stream
//! first waits on a host-released latch (a mapped flag and `cuStreamWaitValue32`), and the host
//! raises the flag only after it has enqueued both events and the launch, so host launch latency
//! and host preemption are never in the interval; GPU-side launch overhead and the kernel's whole
//! run are.

mod driver;
mod green;
mod manifest;
mod nvml;
pub mod nvrtc;
mod placement;
#[rustfmt::skip] // generated: src/gpu/cuda/gen_raw.py
mod raw;
mod run;
pub mod suite;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUdevice_attribute};

/// The launch time limit ([`driver::launch_timeout`]): how long one launch may run before the
/// device is given up as hung.
pub use self::driver::{set_launch_timeout, DEFAULT_LAUNCH_TIMEOUT};
pub use self::placement::PlacementReport;

use self::driver::{check, Current, Library, MappedFlag};
use self::green::Partition;
use self::nvml::Monitor;
use self::run::Prepared;
use super::{Backend, DeviceInfo, Fingerprint, Gpu, GpuError, PartitionSize};

const SUPPORT_SOURCE: &str = include_str!("support.cu");
const SUPPORT: &str = "wcetd-support";
/// The stressor's buffer: well beyond any L2, so it loads DRAM.
const STRESSOR_BYTES: usize = 256 << 20;
/// A stressor stops by itself after this long even if the host never raises its flag.
const STRESSOR_MAX_NS: u64 = 600_000_000_000;
/// A partition nobody measured on for this long is destroyed; it is made again when needed.
const PARTITION_IDLE: Duration = Duration::from_secs(600);

/// Set by [`CudaGpu::abandon`]: a launch of this process is still running in a context that is
/// never released ([`launch_abandoned`]).
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// Set once a device's primary context is retained: from then on a thread left inside a driver
/// call may hold what libcuda's exit-time teardown waits for.
static CONTEXT_RETAINED: AtomicBool = AtomicBool::new(false);

/// Whether a launch of this process was abandoned still running. libcuda's exit-time teardown
/// would then run with the kernel spinning in a context never released, and whether it waits on
/// the kernel is unknown: such a process ends with `_exit` once its own work is done
/// ([`exit_now_if_a_launch_may_still_run`]), and the exit ends the launch.
fn launch_abandoned() -> bool {
    ABANDONED.load(Ordering::Relaxed)
}

/// If a launch was abandoned ([`launch_abandoned`]), or a GPU worker was left inside its job
/// (`worker_left_running`: the daemon's stop did not wait for it) on a CUDA device, end the
/// process at once with `status`, skipping the C library's exit: libcuda's exit-time handlers
/// would run with a kernel still running in a context never released, and a process that hung
/// in its own exit would stay active, never restarted (a stop timeout applies only to a stop
/// systemd starts). Called by a binary once its own work is done (the daemon: final save,
/// metrics file, private bus); log lines are written unbuffered to standard error, and standard
/// output is flushed here, which `_exit` would not.
pub fn exit_now_if_a_launch_may_still_run(status: u8, worker_left_running: bool) {
    use std::io::Write;
    let left = worker_left_running && CONTEXT_RETAINED.load(Ordering::Relaxed);
    if !launch_abandoned() && !left {
        return;
    }
    tracing::warn!("a launch may still be running (abandoned as hung, or its worker left at the stop): exiting without libcuda's exit-time teardown, which could wait on it");
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` ends the process without running atexit handlers or destructors; nothing
    // of this process is left to write (see above).
    unsafe { libc::_exit(i32::from(status)) }
}

/// Keeps the device's primary context retained for the session; released last.
struct Primary {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    /// Set after a hung launch: the release could wait on it for ever ([`CudaGpu::abandon`]).
    abandoned: bool,
}

impl Primary {
    fn retain(dev: sys::CUdevice) -> Result<Primary, GpuError> {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; released by `Drop`.
        check("cuDevicePrimaryCtxRetain", || unsafe {
            raw::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        Ok(Primary {
            dev,
            ctx,
            abandoned: false,
        })
    }
}

impl Drop for Primary {
    fn drop(&mut self) {
        if self.abandoned {
            return;
        }
        let dev = self.dev;
        // SAFETY: retained once in `retain`, released once here.
        let _ = check("cuDevicePrimaryCtxRelease", || unsafe {
            raw::cuDevicePrimaryCtxRelease_v2(dev)
        });
    }
}

/// A partition and when it was last used, for eviction.
struct Cached {
    partition: Partition,
    used: Instant,
}

/// Everything made in the primary context or a green context: dropped together, in field order,
/// before the primary context is released or reset.
struct Session {
    prepared: Option<Prepared>,
    /// The last kernel's configured problem on the host (inputs can take seconds to generate),
    /// keyed by (kernel, problem size, seed): shared by every partition it is prepared on.
    host_plan: Option<((String, u32, u64), suite::Plan)>,
    partitions: HashMap<u32, Cached>,
    libraries: HashMap<String, Library>,
    /// Host-released latch that every timed launch waits on; `None` where the driver refuses
    /// stream memory operations, and the timing loop falls back to a spinning gate kernel.
    latch: Option<MappedFlag>,
    /// Raised to stop the stressor. `None` only while a reset replaces the session.
    stop: Option<MappedFlag>,
}

impl Session {
    /// What stands in for a session given up after a hung launch: it holds no handle.
    fn abandoned() -> Session {
        Session {
            prepared: None,
            host_plan: None,
            partitions: HashMap::new(),
            libraries: HashMap::new(),
            latch: None,
            stop: None,
        }
    }

    fn new(primary: &Primary) -> Result<Session, GpuError> {
        let _current = Current::push(primary.ctx)?;
        Ok(Session {
            prepared: None,
            host_plan: None,
            partitions: HashMap::new(),
            libraries: HashMap::new(),
            latch: Some(MappedFlag::new()?),
            stop: Some(MappedFlag::new()?),
        })
    }
}

pub struct CudaGpu {
    // Field order is drop order: the session's handles go before the primary context.
    session: Session,
    monitor: Monitor,
    info: DeviceInfo,
    placement: Vec<PlacementReport>,
    dev: sys::CUdevice,
    target: nvrtc::Target,
    driver_version: u32,
    /// Set when a fault could not be recovered from: every later call fails with it.
    lost: Option<String>,
    primary: Primary,
}

// SAFETY: CUDA driver handles may be used from any thread; every entry point pushes the context
// it needs on the calling thread first, and `&mut self` keeps calls one at a time.
unsafe impl Send for CudaGpu {}

fn attribute(dev: sys::CUdevice, attr: CUdevice_attribute) -> Result<u32, GpuError> {
    let mut value = 0;
    // SAFETY: out-pointer to a local; `dev` comes from cuDeviceGet.
    check("cuDeviceGetAttribute", || unsafe {
        raw::cuDeviceGetAttribute(&mut value, attr, dev)
    })?;
    Ok(value.max(0) as u32)
}

impl CudaGpu {
    /// Open CUDA device `ordinal`. Without libcuda this is [`GpuError::NoDriver`], never a panic.
    /// Opening proves every partition size: the placement probe runs each partition and its
    /// remainder at once, and a size whose SM sets are not disjoint and complete is not offered.
    pub fn open(ordinal: u32) -> Result<CudaGpu, GpuError> {
        // SAFETY: only tries to dlopen the library; calls nothing in it.
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        // SAFETY: cuInit with flags 0 is the documented initialisation.
        check("cuInit", || unsafe { raw::cuInit(0) })?;
        let driver_version = driver_version()?;
        green::check_driver(driver_version)?;
        let mut dev = 0;
        // SAFETY: out-pointer to a local.
        check("cuDeviceGet", || unsafe {
            raw::cuDeviceGet(&mut dev, ordinal as i32)
        })?;
        let primary = Primary::retain(dev)?;
        CONTEXT_RETAINED.store(true, Ordering::Relaxed);
        let cc =
            10 * attribute(
                dev,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            )? + attribute(
                dev,
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )?;
        let target = compile_target(cc, driver_version)?;
        let uuid = device_uuid(dev)?;
        let monitor = Monitor::new(&uuid);
        let info = describe_device(dev, cc, uuid, driver_version, &monitor)?;
        let mut gpu = CudaGpu {
            session: Session::new(&primary)?,
            monitor,
            info,
            placement: Vec::new(),
            dev,
            target,
            driver_version,
            lost: None,
            primary,
        };
        gpu.settle_clock_policy()?;
        gpu.prove_partitions()?;
        Ok(gpu)
    }

    /// What the placement probe found at open, one report per candidate size.
    pub fn placement(&self) -> &[PlacementReport] {
        &self.placement
    }

    /// The driver's CUDA version, e.g. 13000.
    pub fn driver_version(&self) -> u32 {
        self.driver_version
    }

    /// Probe every candidate size; keep only the sizes whose placement holds.
    fn prove_partitions(&mut self) -> Result<(), GpuError> {
        let sizes = self.info.partition_sizes.clone();
        let mut reports = Vec::with_capacity(sizes.len());
        for sms in sizes {
            reports.push(self.probe_placement(sms)?);
        }
        self.info.partition_sizes = reports
            .iter()
            .filter(|r| r.problem().is_none())
            .map(|r| r.requested_sms)
            .collect();
        self.info.unusable_sizes = reports
            .iter()
            .filter_map(|r| r.problem().map(|p| (r.requested_sms, p)))
            .collect();
        for (sms, why) in &self.info.unusable_sizes {
            tracing::warn!("partition of {sms} SMs refused: {why}");
        }
        self.placement = reports;
        // Partitions are made again when measured on; 34 idle green contexts are not kept.
        self.session.partitions.clear();
        if self.info.partition_sizes.is_empty() {
            return Err(GpuError::Fault(
                "no partition size passed the placement probe".into(),
            ));
        }
        Ok(())
    }

    /// A short full-device load, with the SM clock read while it runs, decides whether clocks are
    /// at their default policy or locked (`nvidia-smi -lgc` leaves application clocks alone, so
    /// only a clock under load shows it).
    fn settle_clock_policy(&mut self) -> Result<(), GpuError> {
        let id = self.monitor.identity();
        let total = self.info.total_sms;
        let (loaded, during) = {
            let session = &mut self.session;
            let (dev, target) = (self.dev, self.target);
            let monitor = &self.monitor;
            monitor.during(|| placement::load(session, dev, total, target))
        };
        loaded?;
        self.info.fingerprint.clock_policy = nvml::clock_policy(
            id.applications_clock.as_deref(),
            during.sm_clock_mhz,
            id.max_sm_clock_mhz,
            during.throttled(),
        );
        if let Some(mhz) = during.sm_clock_mhz {
            self.info.sm_clock_mhz = mhz;
        }
        Ok(())
    }

    /// Launch the `%smid` probe on the partition of `sms` SMs and, at the same time, on its
    /// remainder, and report where the blocks of each ran.
    pub fn probe_placement(&mut self, sms: PartitionSize) -> Result<PlacementReport, GpuError> {
        if !green::candidate_sizes(self.info.cc / 10, self.info.total_sms).contains(&sms) {
            self.check_partition(sms)?;
        }
        let (dev, total, target) = (self.dev, self.info.total_sms, self.target);
        placement::probe(&mut self.session, dev, sms, total, target)
    }

    /// After a fault: reset, or remember that the device is lost to this process. On an H100 with
    /// driver 580 a sticky fault (a kernel that traps) was not recoverable: after
    /// `cuDevicePrimaryCtxReset` every call, retaining the primary context again included,
    /// returned the launch failure. Then every later call fails with [`GpuError::Lost`] and the
    /// daemon exits so that its service manager restarts it on a clean process.
    fn after_fault(&mut self, fault: &GpuError) -> GpuError {
        match self.recover() {
            Ok(()) => GpuError::Fault(format!(
                "{fault}; the device was reset, the next job retries"
            )),
            Err(reset) => {
                let why = format!("{fault}, and resetting failed: {reset}");
                tracing::error!("{why}");
                self.lost = Some(why.clone());
                GpuError::Lost(why)
            }
        }
    }

    /// After a hung launch ([`GpuError::Hung`]): nothing made in this process's contexts may be
    /// touched again, since freeing a buffer, destroying a partition or resetting the context
    /// would wait on the launch for ever. The session is leaked and the primary context never
    /// released; the device is lost to this process, and the daemon exits for its service
    /// manager to restart it (the process's exit ends the launch). The kernel that hung is
    /// charged with the loss, so after repeated losses it is held back (`docs/operations.md`).
    fn abandon(&mut self, why: &str) -> GpuError {
        tracing::error!("launch hung: {why}");
        std::mem::forget(std::mem::replace(&mut self.session, Session::abandoned()));
        self.primary.abandoned = true;
        ABANDONED.store(true, Ordering::Relaxed);
        let why = format!("{why}; the device's state in this process was abandoned");
        self.lost = Some(why.clone());
        GpuError::Lost(why)
    }

    fn check_lost(&self) -> Result<(), GpuError> {
        match &self.lost {
            Some(why) => Err(GpuError::Lost(why.clone())),
            None => Ok(()),
        }
    }

    /// Drop what a device fault poisoned: buffers, partitions and libraries, then reset the
    /// primary context, so that the next job starts on a clean device instead of failing until
    /// the daemon restarts.
    fn recover(&mut self) -> Result<(), GpuError> {
        tracing::warn!("device fault: resetting the primary context and dropping cached state");
        // Everything made in the old context goes before the reset, the mapped flags included:
        // the reset frees them, and freed after it their pointers may belong to the new
        // session's flags.
        let session = &mut self.session;
        session.prepared = None;
        session.partitions.clear();
        session.libraries.clear();
        session.latch = None;
        session.stop = None;
        let dev = self.dev;
        // SAFETY: every handle made in the old context was dropped above.
        check("cuDevicePrimaryCtxReset", || unsafe {
            raw::cuDevicePrimaryCtxReset_v2(dev)
        })?;
        // "Resetting the primary context does not release it": the reference this session
        // holds is still counted. Retain the fresh context first, then release the old
        // reference, so the count stays one and the context is never destroyed in between.
        let fresh = Primary::retain(dev)?;
        drop(std::mem::replace(&mut self.primary, fresh));
        self.session = Session::new(&self.primary)?;
        Ok(())
    }

    /// Destroy partitions nobody has measured on for [`PARTITION_IDLE`].
    fn evict_idle_partitions(&mut self, keep: u32) {
        let prepared_on = self.session.prepared.as_ref().map(|p| p.sms);
        self.session.partitions.retain(|&sms, cached| {
            sms == keep || prepared_on == Some(sms) || cached.used.elapsed() < PARTITION_IDLE
        });
    }

    /// Launch a kernel that traps, to test fault handling on a real device. A wait that ran into
    /// the launch time limit is handled as every hang is (abandoned), not reset.
    #[doc(hidden)]
    pub fn inject_fault(&mut self) -> Result<(), GpuError> {
        let (dev, total, target) = (self.dev, self.info.total_sms, self.target);
        match placement::trap(&mut self.session, dev, total, target) {
            Err(e) if run::recovery_for(&e) == run::Recovery::Abandon => {
                Err(self.abandon(&format!("the trap kernel: {e}")))
            }
            Err(fault @ GpuError::Fault(_)) => Err(self.after_fault(&fault)),
            other => other,
        }
    }
}

/// How many CUDA devices the driver offers; [`GpuError::NoDriver`] without libcuda.
pub fn device_count() -> Result<u32, GpuError> {
    // SAFETY: only tries to dlopen the library; calls nothing in it.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::NoDriver);
    }
    // SAFETY: cuInit with flags 0 is the documented initialisation (idempotent).
    check("cuInit", || unsafe { raw::cuInit(0) })?;
    let mut n = 0;
    // SAFETY: out-pointer to a local.
    check("cuDeviceGetCount", || unsafe {
        raw::cuDeviceGetCount(&mut n)
    })?;
    Ok(n.max(0) as u32)
}

/// The UUIDs of CUDA devices 0 to `count` - 1, read without a context on any of them, then
/// those of the host's cards `CUDA_VISIBLE_DEVICES` hides from CUDA, as NVML lists them: a
/// hidden card is still a card of this host, whose calibration is its own.
pub fn device_uuids(count: u32) -> Result<Vec<String>, GpuError> {
    let mut uuids = (0..count)
        .map(|i| {
            let mut dev = 0;
            // SAFETY: out-pointer to a local; cuInit was called by `device_count`.
            check("cuDeviceGet", || unsafe {
                raw::cuDeviceGet(&mut dev, i as i32)
            })?;
            device_uuid(dev)
        })
        .collect::<Result<Vec<String>, GpuError>>()?;
    for uuid in nvml::host_uuids() {
        if !uuids.contains(&uuid) {
            uuids.push(uuid);
        }
    }
    Ok(uuids)
}

/// The library named `name`, compiled from `source` the first time it is asked for.
fn library<'a>(
    libraries: &'a mut HashMap<String, Library>,
    name: &str,
    source: &str,
    target: nvrtc::Target,
) -> Result<&'a Library, GpuError> {
    use std::collections::hash_map::Entry;
    match libraries.entry(name.to_string()) {
        Entry::Occupied(e) => Ok(e.into_mut()),
        Entry::Vacant(e) => {
            let image = nvrtc::compile(name, source, target)?;
            Ok(e.insert(Library::load(&image)?))
        }
    }
}

/// The partition of `sms` SMs, made the first time it is asked for.
fn partition(
    cache: &mut HashMap<u32, Cached>,
    dev: sys::CUdevice,
    sms: u32,
    total: u32,
) -> Result<&Partition, GpuError> {
    use std::collections::hash_map::Entry;
    let cached = match cache.entry(sms) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => e.insert(Cached {
            partition: Partition::create(dev, sms, total)?,
            used: Instant::now(),
        }),
    };
    cached.used = Instant::now();
    Ok(&cached.partition)
}

/// A CUBIN for the device when NVRTC can make one; otherwise PTX, if the driver can load it.
fn compile_target(cc: u32, driver_version: u32) -> Result<nvrtc::Target, GpuError> {
    let target = nvrtc::Target::choose(cc, &nvrtc::supported_archs());
    let (version, path) = nvrtc::version()?;
    let refused = |detail: String| GpuError::Driver {
        call: "nvrtc",
        detail: format!("{path}: {detail}"),
    };
    nvrtc::cubin_compatible(version, driver_version).map_err(refused)?;
    if let nvrtc::Target::Ptx(_) = target {
        nvrtc::ptx_compatible(version, driver_version).map_err(refused)?;
        tracing::warn!(
            "NVRTC at {path} cannot emit a CUBIN for compute capability {cc}; using PTX ({})",
            target.option()
        );
    }
    Ok(target)
}

fn driver_version() -> Result<u32, GpuError> {
    let mut version = 0;
    // SAFETY: out-pointer to a local.
    check("cuDriverGetVersion", || unsafe {
        raw::cuDriverGetVersion(&mut version)
    })?;
    Ok(version.max(0) as u32)
}

fn device_uuid(dev: sys::CUdevice) -> Result<String, GpuError> {
    // SAFETY: CUuuid is 16 plain bytes.
    let mut uuid: sys::CUuuid = unsafe { std::mem::zeroed() };
    // SAFETY: out-pointer to a local.
    check("cuDeviceGetUuid", || unsafe {
        raw::cuDeviceGetUuid_v2(&mut uuid, dev)
    })?;
    Ok(nvml::format_uuid(&uuid.bytes.map(|b| b as u8)))
}

fn device_name(dev: sys::CUdevice) -> Result<String, GpuError> {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds 256 bytes and the driver NUL-terminates within that length.
    check("cuDeviceGetName", || unsafe {
        raw::cuDeviceGetName(buf.as_mut_ptr(), 256, dev)
    })?;
    // SAFETY: NUL-terminated by the driver, see above.
    Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// Candidate sizes are what the split API grants for each request (see [`green`]); the placement
/// probe then decides which of them are offered.
fn describe_device(
    dev: sys::CUdevice,
    cc: u32,
    uuid: String,
    driver_version: u32,
    monitor: &Monitor,
) -> Result<DeviceInfo, GpuError> {
    let total_sms = attribute(
        dev,
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    )?;
    let whole = green::device_sms(dev)?;
    let granted = green::candidate_sizes(cc / 10, total_sms)
        .into_iter()
        .filter(|&m| m < total_sms)
        .filter_map(|m| match green::granted(&whole, m) {
            Ok(g) => Some(g),
            Err(e) => {
                tracing::warn!("partition of {m} SMs not realisable: {e}");
                None
            }
        })
        .collect();
    let id = monitor.identity();
    let name = match id.name {
        Some(n) => n,
        None => device_name(dev)?,
    };
    let clock_khz = attribute(dev, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).unwrap_or(0);
    let fingerprint = Fingerprint {
        backend: Backend::Cuda,
        device: name.clone(),
        uuid,
        driver: id.driver,
        cuda: format!("{}.{}", driver_version / 1000, (driver_version % 1000) / 10),
        clock_policy: "unknown".into(),
    };
    Ok(DeviceInfo {
        name,
        backend: Backend::Cuda,
        total_sms,
        sms_per_tpc: 2,
        partition_sizes: green::normalise_sizes(granted, total_sms),
        sm_clock_mhz: id.max_sm_clock_mhz.unwrap_or(clock_khz / 1000),
        fingerprint,
        cc,
        unusable_sizes: Vec::new(),
    })
}

#[cfg(test)]
mod tests;
