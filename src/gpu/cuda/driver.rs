//! Thin, owning wrappers over the raw CUDA driver API (`cudarc::driver::sys`): the one place that
//! turns a `CUresult` (or a missing driver symbol) into a [`GpuError`], and the RAII types for
//! device memory, events, libraries and mapped host flags that free themselves on drop.
//!
//! The raw API is used instead of cudarc's safe layer because green contexts, context-independent
//! libraries and per-stream timing need handles the safe layer does not expose.

use std::ffi::{c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::sys::{self, CUresult};

use super::suite::HostBuf;
use crate::gpu::GpuError;

/// Run one driver call. cudarc panics when a symbol is missing from an older libcuda; that panic
/// is caught here so that the layer never unwinds into the daemon.
pub fn check(call: &'static str, f: impl FnOnce() -> CUresult) -> Result<(), GpuError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(CUresult::CUDA_SUCCESS) => Ok(()),
        Ok(code) => Err(error(call, code)),
        Err(_) => Err(GpuError::Driver {
            call,
            detail: "symbol missing from libcuda: the driver is older than this API".into(),
        }),
    }
}

/// Errors after which the context is unusable are device faults, not call errors.
fn error(call: &'static str, code: CUresult) -> GpuError {
    let detail = describe(code);
    match code {
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
        | CUresult::CUDA_ERROR_LAUNCH_FAILED
        | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
        | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
        | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
        | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE => GpuError::Fault(format!("{call}: {detail}")),
        _ => GpuError::Driver { call, detail },
    }
}

fn describe(code: CUresult) -> String {
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorString writes a pointer to a static, NUL-terminated string or leaves it null.
    let found = catch_unwind(AssertUnwindSafe(|| unsafe {
        sys::cuGetErrorString(code, &mut text)
    }));
    if matches!(found, Ok(CUresult::CUDA_SUCCESS)) && !text.is_null() {
        // SAFETY: non-null and NUL-terminated per the driver's contract; static lifetime.
        let msg = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        format!("{code:?}: {msg}")
    } else {
        format!("{code:?}")
    }
}

pub fn set_current(ctx: sys::CUcontext) -> Result<(), GpuError> {
    // SAFETY: `ctx` is a live context owned by the caller (primary or from a green context).
    check("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// Device memory allocated in the context current at creation.
pub struct DeviceBuffer {
    pub ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceBuffer {
    pub fn alloc(bytes: usize) -> Result<Self, GpuError> {
        let mut ptr = 0;
        // SAFETY: out-pointer to a local; size is at least 4 bytes so the call is well-formed.
        check("cuMemAlloc", || unsafe {
            sys::cuMemAlloc_v2(&mut ptr, bytes.max(4))
        })?;
        Ok(DeviceBuffer { ptr, bytes })
    }

    pub fn upload(host: &HostBuf) -> Result<Self, GpuError> {
        let buf = Self::alloc(host.bytes())?;
        let src: *const c_void = match host {
            HostBuf::F32(v) => v.as_ptr().cast(),
            HostBuf::I32(v) => v.as_ptr().cast(),
        };
        // SAFETY: `src` points to `host.bytes()` readable bytes and the allocation is that large.
        check("cuMemcpyHtoD", || unsafe {
            sys::cuMemcpyHtoD_v2(buf.ptr, src, buf.bytes)
        })?;
        Ok(buf)
    }

    /// Read the buffer back into a host buffer shaped like `like`.
    pub fn download(&self, like: &HostBuf) -> Result<HostBuf, GpuError> {
        let n = self.bytes / 4;
        let mut out = match like {
            HostBuf::F32(_) => HostBuf::F32(vec![0.0; n]),
            HostBuf::I32(_) => HostBuf::I32(vec![0; n]),
        };
        let dst: *mut c_void = match &mut out {
            HostBuf::F32(v) => v.as_mut_ptr().cast(),
            HostBuf::I32(v) => v.as_mut_ptr().cast(),
        };
        // SAFETY: `dst` has room for `n * 4 <= self.bytes` bytes; the device side is that large.
        check("cuMemcpyDtoH", || unsafe {
            sys::cuMemcpyDtoH_v2(dst, self.ptr, n * 4)
        })?;
        Ok(out)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: the pointer came from cuMemAlloc and is freed exactly once.
        let _ = check("cuMemFree", || unsafe { sys::cuMemFree_v2(self.ptr) });
    }
}

/// A CUDA event with timing enabled.
pub struct Event(sys::CUevent);

impl Event {
    pub fn new() -> Result<Self, GpuError> {
        let mut ev = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; flags 0 = default (timing enabled, spin-wait).
        check("cuEventCreate", || unsafe {
            sys::cuEventCreate(&mut ev, 0)
        })?;
        Ok(Event(ev))
    }

    pub fn record(&self, stream: sys::CUstream) -> Result<(), GpuError> {
        // SAFETY: event and stream are live and belong to the current context.
        check("cuEventRecord", || unsafe {
            sys::cuEventRecord(self.0, stream)
        })
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        // SAFETY: the event is live.
        check("cuEventSynchronize", || unsafe {
            sys::cuEventSynchronize(self.0)
        })
    }

    /// GPU-timeline time from `start` to this event, in nanoseconds (the driver's resolution is
    /// about half a microsecond).
    pub fn ns_since(&self, start: &Event) -> Result<u64, GpuError> {
        let mut ms = 0.0f32;
        // SAFETY: both events are live, recorded and completed (the caller synchronised).
        check("cuEventElapsedTime", || unsafe {
            sys::cuEventElapsedTime(&mut ms, start.0, self.0)
        })?;
        Ok((f64::from(ms) * 1e6).round().max(0.0) as u64)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed once.
        let _ = check("cuEventDestroy", || unsafe {
            sys::cuEventDestroy_v2(self.0)
        });
    }
}

/// A context-independent library (CUDA 12.0+): loaded once, usable from every green context.
pub struct Library(sys::CUlibrary);

impl Library {
    pub fn load(ptx: &str) -> Result<Self, GpuError> {
        let image = CString::new(ptx).map_err(|_| GpuError::Driver {
            call: "cuLibraryLoadData",
            detail: "PTX contains a NUL byte".into(),
        })?;
        let mut lib = std::ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX image alive for the call; no options passed.
        check("cuLibraryLoadData", || unsafe {
            sys::cuLibraryLoadData(
                &mut lib,
                image.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        })?;
        Ok(Library(lib))
    }

    /// The entry point as a function of the current context.
    pub fn function(&self, name: &str) -> Result<sys::CUfunction, GpuError> {
        let cname = CString::new(name).map_err(|_| GpuError::UnsupportedKernel(name.into()))?;
        let mut kernel = std::ptr::null_mut();
        // SAFETY: the library is loaded and `cname` is NUL-terminated.
        check("cuLibraryGetKernel", || unsafe {
            sys::cuLibraryGetKernel(&mut kernel, self.0, cname.as_ptr())
        })?;
        let mut func = std::ptr::null_mut();
        // SAFETY: `kernel` was just returned by the driver; a context is current (caller's duty).
        check("cuKernelGetFunction", || unsafe {
            sys::cuKernelGetFunction(&mut func, kernel)
        })?;
        Ok(func)
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: loaded by cuLibraryLoadData, unloaded once.
        let _ = check("cuLibraryUnload", || unsafe {
            sys::cuLibraryUnload(self.0)
        });
    }
}

/// Kernel parameters in the form cuLaunchKernel wants: one pointer per argument, each pointing to
/// the argument's value. The values live in `slots`, which must outlive the launch.
pub enum Param {
    Ptr(sys::CUdeviceptr),
    I32(i32),
    F32(f32),
    U64(u64),
}

pub fn launch(
    func: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    stream: sys::CUstream,
    params: &mut [Param],
) -> Result<(), GpuError> {
    let mut ptrs: Vec<*mut c_void> = params
        .iter_mut()
        .map(|p| match p {
            Param::Ptr(v) => (v as *mut sys::CUdeviceptr).cast(),
            Param::I32(v) => (v as *mut i32).cast(),
            Param::F32(v) => (v as *mut f32).cast(),
            Param::U64(v) => (v as *mut u64).cast(),
        })
        .collect();
    // SAFETY: `ptrs` holds one pointer per kernel parameter, each to a value of the parameter's
    // type that outlives this call (the driver copies them before returning).
    check("cuLaunchKernel", || unsafe {
        sys::cuLaunchKernel(
            func,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            0,
            stream,
            ptrs.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

pub fn occupancy(func: sys::CUfunction, threads: u32) -> Result<u32, GpuError> {
    let mut blocks = 0;
    // SAFETY: `func` belongs to the current context; no dynamic shared memory.
    check("cuOccupancyMaxActiveBlocksPerMultiprocessor", || unsafe {
        sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, func, threads as i32, 0)
    })?;
    Ok(blocks.max(0) as u32)
}

pub fn sync_stream(stream: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: the stream is live.
    check("cuStreamSynchronize", || unsafe {
        sys::cuStreamSynchronize(stream)
    })
}

/// An int in pinned host memory mapped into the device: the host raises it to stop a persistent
/// kernel without a launch or a copy.
pub struct MappedFlag {
    host: *mut c_void,
    pub device: sys::CUdeviceptr,
}

impl MappedFlag {
    pub fn new() -> Result<Self, GpuError> {
        let mut host = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: out-pointer to a local; 4 bytes of pinned memory.
        check("cuMemHostAlloc", || unsafe {
            sys::cuMemHostAlloc(&mut host, 4, flags)
        })?;
        let mut flag = MappedFlag { host, device: 0 };
        flag.set(0);
        let device = &mut flag.device;
        // SAFETY: `host` is mapped pinned memory from cuMemHostAlloc above.
        check("cuMemHostGetDevicePointer", || unsafe {
            sys::cuMemHostGetDevicePointer_v2(device, host, 0)
        })?;
        Ok(flag)
    }

    pub fn set(&self, value: i32) {
        // SAFETY: `host` points to 4 live, aligned bytes of pinned memory; volatile because the
        // GPU reads it concurrently.
        unsafe { std::ptr::write_volatile(self.host.cast::<i32>(), value) };
    }
}

impl Drop for MappedFlag {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once; no kernel reads it any more (the owner
        // synchronises the stressor's stream before dropping).
        let _ = check("cuMemFreeHost", || unsafe { sys::cuMemFreeHost(self.host) });
    }
}
