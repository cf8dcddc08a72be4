//! The CUDA backend: a real device behind the [`Gpu`] trait. It owns the driver session (primary
//! context, NVRTC-compiled libraries), the green-context partitions it measures on, and the
//! timing loop. Submodules: [`driver`] (raw-API wrappers and error mapping), [`green`] (SM
//! partitions), [`nvml`] (telemetry and identity), [`suite`] (inputs, launch plans, CPU checks).
//!
//! One measurement is the GPU-timeline interval between two CUDA events recorded on the
//! partition's stream right before and after one launch of the kernel's timed step. A short gate
//! kernel holds the stream while the events and the launch are enqueued, so host launch latency
//! is not in the interval; GPU-side launch overhead and the kernel's whole run are.

mod driver;
mod green;
pub mod nvml;
mod run;
pub mod suite;

use std::collections::{BTreeSet, HashMap};

use cudarc::driver::sys::{self, CUdevice_attribute};

pub use self::green::{candidate_sizes, split_granularity};

use self::driver::{check, launch, occupancy, set_current, DeviceBuffer, Library, Param};
use self::green::Partition;
use self::nvml::Monitor;
use self::suite::HostBuf;
use super::{Backend, DeviceInfo, Fingerprint, Gpu, GpuError, PartitionSize};

const SUPPORT_SOURCE: &str = include_str!("support.cu");
const SUPPORT: &str = "wcetd-support";
/// How long the gate holds the stream before each timed launch: far longer than the host needs
/// to enqueue two events and a launch.
const GATE_NS: u64 = 50_000;
/// The stressor's buffer: well beyond any L2, so it loads DRAM.
const STRESSOR_BYTES: usize = 256 << 20;
/// A stressor stops by itself after this long even if the host never raises its flag.
const STRESSOR_MAX_NS: u64 = 600_000_000_000;

/// Where the blocks of a probe launch ran, from `%smid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementReport {
    pub requested_sms: u32,
    pub granted_sms: u32,
    pub blocks: u32,
    /// Distinct SM ids the blocks reported, ascending.
    pub sm_ids: Vec<u32>,
}

impl PlacementReport {
    /// The kernel ran on exactly as many distinct SMs as the partition was granted.
    pub fn confirmed(&self) -> bool {
        self.sm_ids.len() == self.granted_sms as usize
    }
}

/// Keeps the device's primary context retained for the session; released last.
struct Primary {
    dev: sys::CUdevice,
}

impl Drop for Primary {
    fn drop(&mut self) {
        let dev = self.dev;
        // SAFETY: retained once in `open`, released once here.
        let _ = check("cuDevicePrimaryCtxRelease", || unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(dev)
        });
    }
}

pub struct CudaGpu {
    // Field order is drop order: partitions and libraries go before the primary context.
    partitions: HashMap<u32, Partition>,
    libraries: HashMap<&'static str, Library>,
    monitor: Monitor,
    info: DeviceInfo,
    dev: sys::CUdevice,
    arch: Option<&'static str>,
    _primary: Primary,
}

// SAFETY: CUDA driver handles may be used from any thread; every entry point makes the context it
// needs current on the calling thread first, and `&mut self` keeps calls one at a time.
unsafe impl Send for CudaGpu {}

fn attribute(dev: sys::CUdevice, attr: CUdevice_attribute) -> Result<u32, GpuError> {
    let mut value = 0;
    // SAFETY: out-pointer to a local; `dev` comes from cuDeviceGet.
    check("cuDeviceGetAttribute", || unsafe {
        sys::cuDeviceGetAttribute(&mut value, attr, dev)
    })?;
    Ok(value.max(0) as u32)
}

/// The NVRTC virtual architecture for a compute capability, when NVRTC knows it.
fn nvrtc_arch(major: u32, minor: u32) -> Option<&'static str> {
    Some(match (major, minor) {
        (7, 0) => "compute_70",
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        _ => return None,
    })
}

/// Compile CUDA C to PTX with NVRTC (default precision: no fast math, so CPU checks stay tight).
pub fn compile(name: &str, source: &str, arch: Option<&'static str>) -> Result<String, GpuError> {
    let opts = cudarc::nvrtc::CompileOptions {
        arch,
        name: Some(format!("{name}.cu")),
        ..Default::default()
    };
    std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(source, opts))
        .map_err(|_| GpuError::Driver {
            call: "nvrtcCompileProgram",
            detail: "libnvrtc could not be loaded".into(),
        })?
        .map(|ptx| ptx.to_src())
        .map_err(|e| GpuError::Driver {
            call: "nvrtcCompileProgram",
            detail: format!("{name}.cu: {e}"),
        })
}

impl CudaGpu {
    /// Open CUDA device `ordinal`. Without libcuda this is [`GpuError::NoDriver`], never a panic.
    pub fn open(ordinal: u32) -> Result<CudaGpu, GpuError> {
        // SAFETY: only tries to dlopen the library; calls nothing in it.
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        // SAFETY: as above, for libnvrtc.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(GpuError::Driver {
                call: "nvrtc",
                detail:
                    "libnvrtc could not be loaded; install the CUDA NVRTC runtime (libnvrtc.so.12)"
                        .into(),
            });
        }
        // SAFETY: cuInit with flags 0 is the documented initialisation.
        check("cuInit", || unsafe { sys::cuInit(0) })?;
        let mut dev = 0;
        // SAFETY: out-pointer to a local.
        check("cuDeviceGet", || unsafe {
            sys::cuDeviceGet(&mut dev, ordinal as i32)
        })?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; released by `Primary::drop`.
        check("cuDevicePrimaryCtxRetain", || unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        let primary = Primary { dev };
        set_current(ctx)?;
        let major = attribute(
            dev,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        )?;
        let minor = attribute(
            dev,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        )?;
        let total_sms = attribute(
            dev,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )?;
        let uuid = device_uuid(dev)?;
        let monitor = Monitor::new(&uuid);
        let info = describe_device(dev, major, total_sms, uuid, &monitor)?;
        Ok(CudaGpu {
            partitions: HashMap::new(),
            libraries: HashMap::new(),
            monitor,
            info,
            dev,
            arch: nvrtc_arch(major, minor),
            _primary: primary,
        })
    }

    /// Launch the `%smid` probe on the partition of `sms` SMs and report where its blocks ran.
    pub fn probe_placement(&mut self, sms: PartitionSize) -> Result<PlacementReport, GpuError> {
        self.check_partition(sms)?;
        self.library(SUPPORT, SUPPORT_SOURCE)?;
        let (dev, total) = (self.dev, self.info.total_sms);
        let part = partition(&mut self.partitions, dev, sms, total)?;
        set_current(part.main.ctx)?;
        let func = self.libraries[SUPPORT].function("wcetd_smid_probe")?;
        let per_sm = occupancy(func, 256)?.max(1);
        let blocks = part.main.sms * per_sm * 2;
        let out = DeviceBuffer::upload(&HostBuf::I32(vec![-1; blocks as usize]))?;
        let mut params = [Param::Ptr(out.ptr), Param::U64(200_000)];
        launch(
            func,
            [blocks, 1, 1],
            [256, 1, 1],
            part.main.stream,
            &mut params,
        )?;
        driver::sync_stream(part.main.stream)?;
        let HostBuf::I32(ids) = out.download(&HostBuf::I32(Vec::new()))? else {
            unreachable!("download keeps the buffer type")
        };
        let sm_ids: BTreeSet<u32> = ids.iter().map(|&id| id as u32).collect();
        Ok(PlacementReport {
            requested_sms: sms,
            granted_sms: part.main.sms,
            blocks,
            sm_ids: sm_ids.into_iter().collect(),
        })
    }

    fn library(&mut self, name: &'static str, source: &str) -> Result<&Library, GpuError> {
        if !self.libraries.contains_key(name) {
            let ptx = compile(name, source, self.arch)?;
            self.libraries.insert(name, Library::load(&ptx)?);
        }
        Ok(&self.libraries[name])
    }
}

fn partition(
    cache: &mut HashMap<u32, Partition>,
    dev: sys::CUdevice,
    sms: u32,
    total: u32,
) -> Result<&Partition, GpuError> {
    use std::collections::hash_map::Entry;
    match cache.entry(sms) {
        Entry::Occupied(e) => Ok(e.into_mut()),
        Entry::Vacant(e) => Ok(e.insert(Partition::create(dev, sms, total)?)),
    }
}

fn device_uuid(dev: sys::CUdevice) -> Result<String, GpuError> {
    // SAFETY: CUuuid is 16 plain bytes.
    let mut uuid: sys::CUuuid = unsafe { std::mem::zeroed() };
    // SAFETY: out-pointer to a local.
    check("cuDeviceGetUuid", || unsafe {
        sys::cuDeviceGetUuid(&mut uuid, dev)
    })?;
    Ok(nvml::format_uuid(&uuid.bytes.map(|b| b as u8)))
}

fn device_name(dev: sys::CUdevice) -> Result<String, GpuError> {
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds 256 bytes and the driver NUL-terminates within that length.
    check("cuDeviceGetName", || unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), 256, dev)
    })?;
    // SAFETY: NUL-terminated by the driver, see above.
    Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// Realisable sizes are what the split API grants for each candidate (see [`green`]).
fn describe_device(
    dev: sys::CUdevice,
    major: u32,
    total_sms: u32,
    uuid: String,
    monitor: &Monitor,
) -> Result<DeviceInfo, GpuError> {
    let whole = green::device_sms(dev)?;
    let granted = green::candidate_sizes(major, total_sms)
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
    let mut version = 0;
    // SAFETY: out-pointer to a local.
    check("cuDriverGetVersion", || unsafe {
        sys::cuDriverGetVersion(&mut version)
    })?;
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
        cuda: format!("{}.{}", version / 1000, (version % 1000) / 10),
        clock_policy: id.clock_policy,
    };
    Ok(DeviceInfo {
        name,
        backend: Backend::Cuda,
        total_sms,
        sms_per_tpc: 2,
        partition_sizes: green::normalise_sizes(granted, total_sms),
        sm_clock_mhz: id.sm_clock_mhz.unwrap_or(clock_khz / 1000),
        fingerprint,
    })
}

#[cfg(test)]
mod tests;
